"""Pairwise judges: rules that compare two completions, scalar judges turned into comparisons, TRL's
pairwise-judge interface, and preference groups on disk; each builds the (P, G, G) preference matrices
of :mod:`grpo_kit.core.preferences` (where the matrices, their checks and the pure builders live).

- :func:`preferences_from_judge`: run any scalar judge (a reward function) and compare its scores.
- :func:`preferences_from_rule`: a rule ``rule(prompt, a, b, **columns) -> float`` that compares
  two completions directly; asked in both orders by default, so a position-biased rule gives a
  contradictory matrix (an error), or ``orders="average"`` to cancel the bias (MT-Bench's swap);
  :func:`rule_verdicts` and ``core.preferences.average_orders`` are its two halves, and give the bias too.
  Shipped rules: :func:`correctness_rule` (right beats wrong, else a tie) and
  :func:`closeness_rule` (a finer judge: the numerically closer answer wins).
- TRL: :func:`to_trl_pairwise` / :func:`preferences_from_trl_pairwise` speak the pairwise-judge
  interface ``judge(prompts, completions=[[a, b], ...], shuffle_order, return_scores)`` of
  TRL's ``BasePairwiseJudge`` (trl <= 0.2x; trl 1.16 no longer ships judges, so this is
  duck-typed and imports nothing from trl).

Offline preference groups (jsonl, one record per prompt): ``prompt`` (str), ``responses`` (K
strings), ``preference_matrix`` (K x K numbers), any extra columns (``answer``...); every
record has the same K. :func:`write_preference_groups` and the strict
:func:`load_preference_groups` (a :class:`DataError` names the file, line and problem).

Judges only read text; nothing here executes a completion.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Sequence

import torch

from grpo_kit.core.preferences import (
    ATOL,
    PreferenceError,
    Rule,
    average_orders,
    check_preferences,
    pair_where,
    preferences_from_scores,
)
from grpo_kit.data.tasks import fail_at, read_jsonl
from grpo_kit.errors import DataError, GRPOKitError, RewardError
from grpo_kit.rewards.judges import (
    func_name,
    numbers_match,
    parse_answer,
    parse_number,
    score,
)


def preferences_from_judge(judge, prompts: list[str], completions: list[str], columns: dict[str, list],
                           num_generations: int, temperature: float | None = None) -> torch.Tensor:
    """Run a scalar judge (any reward function, kit or TRL) on B = P*G completions grouped
    by consecutive runs of ``num_generations`` and build (P, G, G) preferences from its scores."""
    B = len(completions)
    if num_generations < 1 or B % num_generations:
        raise PreferenceError(f"{B} completions do not split into groups of num_generations={num_generations}")
    rewards = score([judge], prompts, completions, columns).rewards  # (B,)
    return preferences_from_scores(rewards.view(-1, num_generations), temperature)  # (P, G, G)


def _ask(rule: Rule, prompt: str, a: str, b: str, ctx: dict, p: int, i: int, j: int) -> float:
    try:
        v = rule(prompt, a, b, **ctx)
    except GRPOKitError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised with the rule's name and the pair
        raise RewardError(f"pairwise rule {func_name(rule)!r} raised {type(e).__name__}: {e} "
                          f"at {pair_where(p, i, j)}") from e
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise PreferenceError(f"pairwise rule {func_name(rule)!r} returned {v!r} at {pair_where(p, i, j)}; "
                              f"return a number in [-1, 1]", p, i, j) from None
    if not (math.isfinite(v) and -1.0 <= v <= 1.0):
        raise PreferenceError(f"pairwise rule {func_name(rule)!r} returned {v} at {pair_where(p, i, j)}; "
                              f"return a number in [-1, 1]", p, i, j)
    return v


def _check_groups(prompts, groups, columns: dict) -> int:
    """G, after checking one group and one value per column per prompt, all groups of one size."""
    P = len(prompts)
    if len(groups) != P or any(len(v) != P for v in columns.values()):
        raise PreferenceError(f"{P} prompts, {len(groups)} groups and column lengths "
                              f"{ {k: len(v) for k, v in columns.items()} }: give one of each per prompt")
    sizes = {len(g) for g in groups}
    if len(sizes) > 1:
        raise PreferenceError(f"groups have different sizes {sorted(sizes)}; every group needs the same G")
    return sizes.pop() if sizes else 0


def rule_verdicts(rule: Rule, prompts: Sequence[str], groups: Sequence[Sequence[str]],
                  columns: dict[str, Sequence] | None = None, orders: str = "both") -> torch.Tensor:
    """The raw verdicts ``V[p, i, j] = rule(prompt_p, g_i, g_j)`` (P, G, G), float64, diagonal 0.

    ``orders="both"`` asks every ordered pair (i, j) and (j, i); ``"one"`` asks i < j only and
    mirrors the answer (``V[p, j, i] = -V[p, i, j]``). The rule is checked on every answer
    (a number in [-1, 1]); ``V`` itself need not be antisymmetric: see :func:`average_orders`.
    """
    columns = dict(columns or {})
    P, G = len(prompts), _check_groups(prompts, groups, columns)
    v = torch.zeros(P, G, G, dtype=torch.float64)  # (P, G, G)
    for p in range(P):
        ctx = {k: c[p] for k, c in columns.items()}
        g = groups[p]
        for i in range(G):
            for j in range(i + 1, G):
                v[p, i, j] = _ask(rule, prompts[p], g[i], g[j], ctx, p, i, j)
                v[p, j, i] = -v[p, i, j] if orders == "one" else _ask(rule, prompts[p], g[j], g[i], ctx, p, j, i)
    return v


def preferences_from_rule(rule: Rule, prompts: Sequence[str], groups: Sequence[Sequence[str]],
                          columns: dict[str, Sequence] | None = None, orders: str = "both",
                          atol: float = ATOL, cycles: str = "warn") -> torch.Tensor:
    """Compare every pair in each group with ``rule(prompt, a, b, **columns) -> v``, v in
    [-1, 1] (> 0: a is better). ``columns`` hold one value per prompt. Returns (P, G, G).

    ``orders``: ``"both"`` asks (a, b) and (b, a) and requires opposite answers (a contradiction
    raises :class:`PreferenceError` naming the pair); ``"average"`` uses (v_ab - v_ba) / 2, which
    cancels a position bias (:func:`average_orders`); ``"one"`` asks once and mirrors the answer.
    """
    if orders not in ("both", "average", "one"):
        raise PreferenceError(f"orders={orders!r}: choose 'both', 'average' or 'one'")
    v = rule_verdicts(rule, prompts, groups, columns, "one" if orders == "one" else "both")  # (P, G, G)
    m = average_orders(v)[0] if orders == "average" else v  # (P, G, G)
    return check_preferences(m, atol, cycles)


def rule_from_scalar(judge, temperature: float | None = None, **fixed) -> Rule:
    """A pairwise rule from a scalar judge: score both completions, compare as in
    :func:`preferences_from_scores`. Per-prompt columns arrive as keyword values."""
    def rule(prompt, a, b, **ctx):
        cols = {k: [v, v] for k, v in {**fixed, **ctx}.items()}
        r = score([judge], [prompt, prompt], [a, b], cols).rewards  # (2,)
        return float(preferences_from_scores(r, temperature)[0, 1])

    rule.__name__ = f"pairwise_{func_name(judge)}"
    return rule


def correctness_rule(prompt: str, a: str, b: str, answer, reverse_digits=None, scratchpad=None, **_) -> float:
    """+1 when only a's final answer is right, -1 when only b's is, 0 otherwise (a tie).

    Answers are read as ``judges.parse_answer`` reads them: in the arithmetic tasks' digit order
    when the item has ``reverse_digits`` (and after ``|`` with ``scratchpad``), else from free text."""
    want = parse_number(str(answer))
    ok_a, ok_b = (numbers_match(parse_answer(x, reverse_digits, scratchpad), want) for x in (a, b))
    return float(ok_a) - float(ok_b)


def closeness_rule(prompt: str, a: str, b: str, answer, reverse_digits=None, scratchpad=None, **_) -> float:
    """A finer judge for ties between wrong answers: the numerically closer final answer wins;
    any number beats no number; equal distances tie. Answers are read as in :func:`correctness_rule`."""
    want = parse_number(str(answer))
    da, db = (abs(x - want) if x is not None and want is not None else math.inf
              for x in (parse_answer(y, reverse_digits, scratchpad) for y in (a, b)))
    return 0.0 if da == db else (1.0 if da < db else -1.0)


# ---------------------------------------------------------------- TRL's pairwise-judge interface

def to_trl_pairwise(rule: Rule, seed: int = 0):
    """A kit rule as an object with TRL's ``BasePairwiseJudge.judge`` method.

    ``judge(prompts, completions=[[a, b], ...], shuffle_order=True, return_scores=False, **columns)``
    returns per pair the index of the preferred completion (0 or 1; -1 for a tie, which TRL
    reads as "no preference"), or with ``return_scores`` the probability that the first is
    preferred, ``(v + 1) / 2``. ``shuffle_order`` asks the rule with the pair swapped at random
    (seeded) and maps the answer back, as TRL's judges do against position bias.
    """
    rng = random.Random(seed)

    class KitPairwiseJudge:
        __name__ = f"trl_{func_name(rule)}"

        def judge(self, prompts, completions, shuffle_order=True, return_scores=False, **columns):
            out = []
            for n, (prompt, pair) in enumerate(zip(prompts, completions)):
                ctx = {k: v[n] for k, v in columns.items()}
                swap = shuffle_order and rng.random() < 0.5
                a, b = (pair[1], pair[0]) if swap else (pair[0], pair[1])
                v = _ask(rule, prompt, a, b, ctx, n, 1 if swap else 0, 0 if swap else 1)
                v = -v if swap else v
                out.append((v + 1) / 2 if return_scores else (0 if v > 0 else 1 if v < 0 else -1))
            return out

    return KitPairwiseJudge()


def preferences_from_trl_pairwise(trl_judge, prompts: Sequence[str], groups: Sequence[Sequence[str]],
                                  return_scores: bool = False, columns: dict[str, Sequence] | None = None,
                                  cycles: str = "warn") -> torch.Tensor:
    """(P, G, G) preferences from any object with TRL's pairwise ``judge`` method, in one call
    over all G (G - 1) / 2 pairs per prompt. Hard answers 0/1 become +1/-1; with
    ``return_scores`` a probability q becomes the soft label 2 q - 1. A -1 ("the judge
    failed", or a tie from :func:`to_trl_pairwise`) is an error naming the pair: ask for
    ``return_scores`` to get ties. ``columns`` (one value per prompt) are passed per pair as
    keyword lists, which TRL's own judges do not take but :func:`to_trl_pairwise` does."""
    P = len(prompts)
    G = len(groups[0]) if groups else 0
    pairs = [(p, i, j) for p in range(P) for i in range(G) for j in range(i + 1, G)]
    extra = {k: [v[p] for p, _, _ in pairs] for k, v in (columns or {}).items()}
    answers = list(trl_judge.judge([prompts[p] for p, _, _ in pairs],
                                   [[groups[p][i], groups[p][j]] for p, i, j in pairs],
                                   shuffle_order=False, return_scores=return_scores, **extra))
    if len(answers) != len(pairs):
        raise RewardError(f"pairwise judge {func_name(trl_judge)!r} returned {len(answers)} answers for "
                          f"{len(pairs)} pairs; return one per pair")
    m = torch.zeros(P, G, G, dtype=torch.float64)  # (P, G, G)
    for (p, i, j), ans in zip(pairs, answers):
        if return_scores:
            v = 2 * float(ans) - 1
        elif ans in (0, 1):
            v = 1.0 if ans == 0 else -1.0
        else:
            raise RewardError(f"pairwise judge {func_name(trl_judge)!r} answered {ans!r} at {pair_where(p, i, j)}; "
                              f"expected 0 or 1 (-1 means the judge failed)")
        m[p, i, j], m[p, j, i] = v, -v
    return check_preferences(m, cycles=cycles)


# ---------------------------------------------------------------- offline preference groups

def _check_group(path, lineno, row: dict, K: int | None, cycles: str) -> dict:
    if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        fail_at(path, lineno, "field 'prompt' must be a non-empty string")
    resp = row.get("responses")
    if isinstance(resp, list) and len(resp) < 2 and all(isinstance(r, str) for r in resp):
        fail_at(path, lineno, f"{len(resp)} response{'s' * (len(resp) != 1)}: a preference group needs at least 2 "
                              f"to compare; record K >= 2 responses per prompt (grpo-kit pregen --k 2 or more)")
    if not isinstance(resp, list) or len(resp) < 2 or not all(isinstance(r, str) for r in resp):
        fail_at(path, lineno, "field 'responses' must be a list of at least 2 strings")
    if K is not None and len(resp) != K:
        fail_at(path, lineno, f"{len(resp)} responses, but the first record has {K}; every record needs the same K")
    mat = row.get("preference_matrix")
    k = len(resp)
    if not isinstance(mat, list) or len(mat) != k or not all(isinstance(r, list) and len(r) == k for r in mat):
        fail_at(path, lineno, f"field 'preference_matrix' must be a {k} x {k} list of lists (one row per response)")
    for i, r in enumerate(mat):
        for j, v in enumerate(r):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                fail_at(path, lineno, f"preference_matrix[{i}][{j}] is {v!r}; use a number in [-1, 1]")
    try:
        m = check_preferences(mat, cycles=cycles)
    except PreferenceError as e:
        fail_at(path, lineno, str(e))
    return {**row, "preference_matrix": m}


def load_preference_groups(path: str | Path, cycles: str = "warn") -> list[dict]:
    """Read and validate an offline preference-group jsonl; each record's
    ``preference_matrix`` comes back as a (K, K) float32 tensor, extra columns unchanged."""
    out: list[dict] = []
    for lineno, row in read_jsonl(path):
        out.append(_check_group(path, lineno, row, len(out[0]["responses"]) if out else None, cycles))
    return out


def write_preference_groups(records: Sequence[dict], path: str | Path) -> None:
    """Write records (``prompt``, ``responses``, ``preference_matrix`` as a tensor or lists,
    extra columns) as jsonl, validating each first; the file round-trips through the loader."""
    path = Path(path)
    lines = []
    K = None
    for n, rec in enumerate(records, 1):
        mat = rec.get("preference_matrix")
        row = {**rec, "preference_matrix": mat.tolist() if isinstance(mat, torch.Tensor) else mat}
        _check_group(f"{path} (not written)", n, row, K, "ignore")
        K = len(row["responses"])
        lines.append(json.dumps(row))
    if not lines:
        raise DataError(f"{path}: no records to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
