"""Judges: reward functions that score completions.

A reward function has TRL's signature ``f(prompts, completions, **columns) -> list[float]``:
``prompts`` and ``completions`` are lists of B strings and every extra dataset column arrives
as a keyword argument holding a list of B values (``answer=[...]``). Any function written for
TRL's ``GRPOTrainer(reward_funcs=...)`` works here and vice versa. Return ``None`` for a
sample the function cannot score.

Reward functions only read text; they never execute it.

Shipped:
- ``exact_answer``: 1.0 when the completion's number equals the ``answer`` column.
- ``format_reward``: 1.0 when the completion is exactly one well-formed number.

``score(...)`` runs a list of functions, checks what each returns, and combines them with
weights into a (B,) reward tensor; any problem raises :class:`RewardError` naming the
function and the sample.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Sequence

import torch

from .errors import RewardError
from .tasks import read_completion

RewardFunc = Callable[..., list]

_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_number(text: str) -> float | None:
    """The last number in free text (commas removed), or ``None``."""
    found = _LAST_NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def parse_answer(completion: str, reverse_digits: bool | None, scratchpad: bool | None = None) -> float | None:
    """The number a completion states: for the arithmetic tasks the whole completion (or the part
    after ``|`` with a scratchpad), digits in the task's order; the last number in the text otherwise."""
    if reverse_digits is None:
        return extract_number(completion)
    value = read_completion(completion, bool(reverse_digits), bool(scratchpad))
    return None if value is None else float(value)


def exact_answer(prompts: list[str], completions: list[str], answer: list[str],
                 reverse_digits: list[bool] | None = None, scratchpad: list[bool] | None = None,
                 **_) -> list[float]:
    """1.0 when the stated number equals the reference ``answer`` exactly, else 0.0."""
    n = len(completions)
    rev = reverse_digits if reverse_digits is not None else [None] * n
    pad = scratchpad if scratchpad is not None else [None] * n
    out = []
    for c, a, r, s in zip(completions, answer, rev, pad):
        got = parse_answer(c, r, s)
        out.append(1.0 if got is not None and got == float(str(a).replace(",", "")) else 0.0)
    return out


def format_reward(prompts: list[str], completions: list[str], **_) -> list[float]:
    """1.0 when the completion is one well-formed integer (optional sign, digits only)."""
    return [1.0 if re.fullmatch(r"-?\d+", c.strip()) else 0.0 for c in completions]


REWARD_FUNCS: dict[str, RewardFunc] = {"exact_answer": exact_answer, "format": format_reward}


def get_reward_funcs(names: Sequence[str | RewardFunc]) -> list[RewardFunc]:
    funcs = []
    for n in names:
        if callable(n):
            funcs.append(n)
        elif n in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[n])
        else:
            raise RewardError(f"unknown reward function {n!r}: choose from {sorted(REWARD_FUNCS)} or pass a callable")
    return funcs


def _name(f) -> str:
    return getattr(f, "__name__", type(f).__name__)


def score_each(funcs: Sequence[RewardFunc], prompts: list[str], completions: list[str],
               columns: dict[str, list]) -> torch.Tensor:
    """Run every reward function; returns (B, K) float rewards, NaN where a function said None.

    Raises :class:`RewardError` when a function raises, returns the wrong number of values,
    or returns NaN/inf or a non-number.
    """
    B = len(completions)
    out = torch.empty(B, len(funcs), dtype=torch.float32)  # (B, K)
    for k, f in enumerate(funcs):
        try:
            vals = f(prompts=prompts, completions=completions, **columns)
        except Exception as e:  # noqa: BLE001 - re-raised with the judge's name
            raise RewardError(f"reward function {_name(f)!r} raised {type(e).__name__}: {e}") from e
        try:
            vals = list(vals)
        except TypeError:
            raise RewardError(f"reward function {_name(f)!r} returned {type(vals).__name__}; "
                              f"return a list of {B} floats") from None
        if len(vals) != B:
            raise RewardError(f"reward function {_name(f)!r} returned {len(vals)} values for {B} completions; "
                              f"return one float per completion")
        for i, v in enumerate(vals):
            if v is None:
                out[i, k] = float("nan")
                continue
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise RewardError(f"reward function {_name(f)!r} returned {v!r} for sample {i} "
                                  f"(prompt {prompts[i]!r}); return a float or None") from None
            if not math.isfinite(v):
                raise RewardError(f"reward function {_name(f)!r} returned {v} for sample {i} (prompt {prompts[i]!r}, "
                                  f"completion {completions[i]!r}); rewards must be finite: return None to skip a sample")
            out[i, k] = v
    return out


def combine(per_func: torch.Tensor, weights: Sequence[float] | None = None) -> torch.Tensor:
    """Weighted sum over functions (B, K) -> (B,), ignoring NaN (TRL's nansum); a row where
    every function returned None is an error, since it has no reward at all."""
    K = per_func.shape[1]
    w = torch.tensor(list(weights) if weights is not None else [1.0] * K, dtype=per_func.dtype)  # (K,)
    if w.numel() != K:
        raise RewardError(f"{w.numel()} reward weights for {K} reward functions; give one weight per function")
    unscored = torch.isnan(per_func).all(-1)  # (B,)
    if bool(unscored.any()):
        i = int(unscored.nonzero()[0])
        raise RewardError(f"no reward function scored sample {i}: every function returned None")
    return (per_func * w).nansum(-1)  # (B,)


def score(funcs, prompts, completions, columns, weights=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards (B,) and the per-function rewards (B, K)."""
    per_func = score_each(funcs, prompts, completions, columns)
    return combine(per_func, weights), per_func
