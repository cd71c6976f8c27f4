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
function and the sample. ``score_with_policy(...)`` applies ``GRPOConfig.reward_error_policy``
instead ('raise', 'skip' the sample, or 'zero' the value) and ``reward_timeout_s`` (a function
that does not return in time is a bad value for the whole batch; see ``call_with_timeout``
for what happens to its thread).
"""
from __future__ import annotations

import math
import re
import threading
from typing import Callable, Sequence

import torch

from .errors import RewardError
from .tasks import read_number

RewardFunc = Callable[..., list]

_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_number(text: str) -> float | None:
    """The last number in free text (commas removed), or ``None``."""
    found = _LAST_NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def parse_answer(completion: str, reverse_digits: bool | None) -> float | None:
    """The number a completion states: the whole completion for the arithmetic task (digits
    in the task's order), the last number in the text otherwise."""
    if reverse_digits is None:
        return extract_number(completion)
    value = read_number(completion, bool(reverse_digits))
    return None if value is None else float(value)


def exact_answer(prompts: list[str], completions: list[str], answer: list[str],
                 reverse_digits: list[bool] | None = None, **_) -> list[float]:
    """1.0 when the stated number equals the reference ``answer`` exactly, else 0.0."""
    rev = reverse_digits if reverse_digits is not None else [None] * len(completions)
    out = []
    for c, a, r in zip(completions, answer, rev):
        got = parse_answer(c, r)
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


def call_with_timeout(f: RewardFunc, prompts, completions, columns, timeout_s: float | None):
    """``f(prompts=..., completions=..., **columns)``; inline when ``timeout_s`` is None.

    With a time limit the call runs in a daemon thread and :class:`RewardError` is raised when
    it has not returned after ``timeout_s`` seconds. Python cannot stop a thread, so a hung
    function keeps running in the background: its result is discarded, it does not block the
    interpreter from exiting (daemon), and each further timeout leaves one more such thread.
    If the function holds a lock, a GPU or a network connection, restart the kernel/process.
    """
    if timeout_s is None:
        return f(prompts=prompts, completions=completions, **columns)
    box: dict = {}

    def target():
        try:
            box["out"] = f(prompts=prompts, completions=completions, **columns)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            box["err"] = e

    worker = threading.Thread(target=target, name=f"reward-{_name(f)}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RewardError(f"reward function {_name(f)!r} did not return within reward_timeout_s={timeout_s} s "
                          f"on a batch of {len(completions)} completions (first prompt {prompts[0]!r}); "
                          f"make it faster or raise reward_timeout_s (its thread is left running in the background)")
    if "err" in box:
        raise box["err"]
    return box["out"]


def judge(funcs: Sequence[RewardFunc], prompts: list[str], completions: list[str], columns: dict[str, list],
          policy: str = "raise", timeout_s: float | None = None) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Run every reward function -> (per_func (B, K), bad (B, K) bool, reasons).

    ``per_func`` is NaN where a function returned None (it cannot score that sample) and where
    the value is bad. A value is bad when the function raised, timed out, returned the wrong
    count or type (all B values of that function are bad) or returned NaN/inf or a non-number.
    ``policy='raise'`` raises :class:`RewardError` at the first bad value, naming the function
    and the sample; 'skip' and 'zero' mark it in ``bad`` and describe it in ``reasons``.
    """
    if policy not in REWARD_ERROR_POLICIES:
        raise RewardError(f"reward_error_policy={policy!r}: choose from {REWARD_ERROR_POLICIES}")
    B = len(completions)
    out = torch.full((B, len(funcs)), float("nan"), dtype=torch.float32)  # (B, K)
    bad = torch.zeros(B, len(funcs), dtype=torch.bool)  # (B, K)
    reasons: list[str] = []

    def fail(message, rows):
        if policy == "raise":
            raise RewardError(message)
        bad[rows, k] = True
        reasons.append(message)

    for k, f in enumerate(funcs):
        try:
            vals = call_with_timeout(f, prompts, completions, columns, timeout_s)
        except RewardError as e:  # timed out
            fail(str(e), slice(None))
            continue
        except Exception as e:  # noqa: BLE001 - re-raised with the judge's name
            if policy == "raise":
                raise RewardError(f"reward function {_name(f)!r} raised {type(e).__name__}: {e}") from e
            fail(f"reward function {_name(f)!r} raised {type(e).__name__}: {e}", slice(None))
            continue
        try:
            if isinstance(vals, (str, bytes, dict)):  # iterable, but not one value per completion
                raise TypeError
            vals = list(vals)
        except TypeError:
            fail(f"reward function {_name(f)!r} returned {type(vals).__name__}; return a list of {B} floats",
                 slice(None))
            continue
        if len(vals) != B:
            fail(f"reward function {_name(f)!r} returned {len(vals)} values for {B} completions; "
                 f"return one float per completion", slice(None))
            continue
        for i, v in enumerate(vals):
            if v is None:
                continue
            try:
                v = float(v)
            except (TypeError, ValueError, OverflowError):
                fail(f"reward function {_name(f)!r} returned {v!r:.60} for sample {i} "
                     f"(prompt {prompts[i]!r}); return a float or None", i)
                continue
            if not math.isfinite(v):
                fail(f"reward function {_name(f)!r} returned {v} for sample {i} (prompt {prompts[i]!r}, "
                     f"completion {completions[i]!r}); rewards must be finite: return None to skip a sample", i)
                continue
            out[i, k] = v
    return out, bad, reasons


def score_each(funcs: Sequence[RewardFunc], prompts: list[str], completions: list[str],
               columns: dict[str, list]) -> torch.Tensor:
    """Run every reward function; returns (B, K) float rewards, NaN where a function said None.

    Raises :class:`RewardError` when a function raises, returns the wrong number of values,
    or returns NaN/inf or a non-number.
    """
    return judge(funcs, prompts, completions, columns)[0]


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


REWARD_ERROR_POLICIES = ("raise", "skip", "zero")


def score_with_policy(funcs, prompts, completions, columns, weights=None, policy: str = "raise",
                      timeout_s: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """Rewards (B,), per-function rewards (B, K), bad samples (B,) bool and the reasons.

    - ``raise`` (default): exactly :func:`score`; any bad value raises :class:`RewardError`.
    - ``skip``: a sample with any bad value, or that no function scored, is bad: its reward is
      NaN here, and ``train.grpo_step`` gives it advantage 0 and masks it from the loss.
    - ``zero``: a bad value counts as 0 for that function (a sample no function scored gets 0);
      the sample trains normally and is still counted as bad.
    """
    per_func, bad, reasons = judge(funcs, prompts, completions, columns, policy, timeout_s)  # (B, K), (B, K)
    if policy == "raise":
        return combine(per_func, weights), per_func, bad.any(-1), reasons
    unscored = torch.isnan(per_func).all(-1) & ~bad.any(-1)  # (B,) every function said None
    if bool(unscored.any()):
        reasons.append(f"no reward function scored sample {int(unscored.nonzero()[0])}: every function returned None")
    if policy == "zero":
        per_func = torch.where(bad, torch.zeros_like(per_func), per_func)  # (B, K)
        rewards = combine(torch.where(unscored.unsqueeze(-1), torch.zeros_like(per_func), per_func), weights)  # (B,)
        return rewards, per_func, bad.any(-1) | unscored, reasons
    sample_bad = bad.any(-1) | unscored  # (B,)
    rewards = combine(torch.where(sample_bad.unsqueeze(-1), torch.zeros_like(per_func), per_func), weights)  # (B,)
    return torch.where(sample_bad, torch.full_like(rewards, float("nan")), rewards), per_func, sample_bad, reasons
