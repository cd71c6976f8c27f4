"""Pairwise judges and preference matrices: comparing completions inside a group.

A preference matrix for one prompt is (G, G): ``M[i, j]`` in [-1, 1] says how strongly
completion i is preferred to completion j: +1 i wins, -1 j wins, 0 a tie, and values in
between are soft labels, ``M[i, j] = 2 P(i beats j) - 1``. A batch is (P, G, G); a group of G
needs G (G - 1) / 2 comparisons. A matrix is valid when it is finite, has a zero diagonal, is
antisymmetric (``M[i, j] == -M[j, i]``) and lies in [-1, 1]; :func:`check_preferences` raises
:class:`PreferenceError` naming the first offending ``(p, i, j)`` and its values otherwise.

Non-transitive cycles (i beats j, j beats k, k beats i) are a *warning*, not an error: a
majority vote of perfectly transitive judges can cycle (Condorcet's paradox; see the test),
human and LLM judges often do, and win-rate advantages (row means of M) are well defined for
any antisymmetric matrix. A cycle means the judge cannot rank that group, which is worth a look
(a position-dependent rule is a common cause) but not a broken invariant. Pass
``cycles="error"`` to make it one, or ``"ignore"``.

Builders:
- :func:`preferences_from_scores`: from scalar scores (P, G): the sign of the difference
  (ties 0), or soft Bradley-Terry labels ``2 sigmoid((s_i - s_j) / T) - 1`` with temperature T.
- :func:`preferences_from_judge`: run any scalar judge (a reward function) and do the above.
- :func:`preferences_from_rule`: a rule ``rule(prompt, a, b, **columns) -> float`` that compares
  two completions directly; asked in both orders by default, so a position-biased rule gives a
  contradictory matrix (an error), or ``orders="average"`` to cancel the bias (MT-Bench's swap);
  :func:`rule_verdicts` and :func:`average_orders` are its two halves, and give the bias too.
  Shipped rules: :func:`correctness_rule` (right beats wrong, else a tie) and
  :func:`closeness_rule` (a finer judge: the numerically closer answer wins).
- :func:`ensemble_preferences`: weighted mean or majority vote over K judges' matrices, with
  :func:`preference_agreement` for per-judge agreement.
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
import warnings
from pathlib import Path
from typing import Callable, Sequence

import torch

from grpo_kit.data.tasks import _fail, read_jsonl
from grpo_kit.errors import DataError, GRPOKitError, RewardError
from grpo_kit.rewards.judges import (
    _name,
    _weights,
    agreement,
    numbers_match,
    parse_answer,
    parse_number,
    score,
)

Rule = Callable[..., float]
ATOL = 1e-5  # tolerance for antisymmetry, the diagonal and the range; advantages.check_preferences uses 1e-5 too


class PreferenceError(DataError):
    """A preference matrix is malformed or contradictory; ``p``, ``i``, ``j`` locate it
    (``p`` is None for a single (G, G) matrix). A :class:`DataError`, as is what
    ``advantages.check_preferences`` raises, so callers catching either keep working."""

    def __init__(self, message: str, p: int | None = None, i: int | None = None, j: int | None = None):
        super().__init__(message)
        self.p, self.i, self.j = p, i, j


class PreferenceCycleWarning(UserWarning):
    """A group's strict preferences contain a cycle (i > j > ... > i)."""


# ---------------------------------------------------------------- validation

def _where(p: int | None, i: int, j: int) -> str:
    return f"pair (i={i}, j={j})" if p is None else f"prompt p={p}, pair (i={i}, j={j})"


def find_cycle(m: torch.Tensor, atol: float = ATOL) -> list[int] | None:
    """A cycle ``[i, j, ..., i]`` of strict preferences (``M[a, b] > atol``: a beats b) in one
    (G, G) matrix, or None. Depth-first search; G is small."""
    G = m.shape[0]
    beats = (m > atol).tolist()
    state = [0] * G  # 0 new, 1 on the stack, 2 done
    stack: list[int] = []

    def visit(a):
        state[a] = 1
        stack.append(a)
        for b in range(G):
            if beats[a][b]:
                if state[b] == 1:
                    return stack[stack.index(b):] + [b]
                if state[b] == 0:
                    found = visit(b)
                    if found:
                        return found
        stack.pop()
        state[a] = 2
        return None

    for a in range(G):
        if state[a] == 0:
            found = visit(a)
            if found:
                return found
    return None


def check_preferences(matrix, atol: float = ATOL, cycles: str = "warn") -> torch.Tensor:
    """Validate a preference matrix (G, G) or (P, G, G) and return it as a float32 tensor.

    Raises :class:`PreferenceError` naming the first (p, i, j), in index order, that is not
    finite, lies outside [-1, 1], sits on a non-zero diagonal, or breaks antisymmetry beyond
    ``atol``. ``cycles``: ``"warn"`` (default, see the module docstring), ``"error"`` or ``"ignore"``.
    """
    if cycles not in ("warn", "error", "ignore"):
        raise PreferenceError(f"cycles={cycles!r}: choose 'warn', 'error' or 'ignore'")
    try:
        m = torch.as_tensor(matrix, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as e:
        raise PreferenceError(f"a preference matrix must be a (G, G) or (P, G, G) array of numbers: {e}") from None
    single = m.dim() == 2
    if m.dim() not in (2, 3) or m.shape[-1] != m.shape[-2] or m.shape[-1] == 0:
        raise PreferenceError(f"a preference matrix must be (G, G) or (P, G, G) with G >= 1, got shape {tuple(m.shape)}")
    m3 = m[None] if single else m  # (P, G, G)
    G = m3.shape[-1]
    eye = torch.eye(G, dtype=torch.bool)  # (G, G)
    upper = torch.ones(G, G, dtype=torch.bool).triu(1)  # (G, G) i < j
    mt = m3.transpose(1, 2)  # (P, G, G) M[j, i] at [i, j]
    problems = [
        (~torch.isfinite(m3), "is {v}; preferences must be finite numbers"),
        (m3.abs() > 1 + atol, "is {v}, outside [-1, 1]; use +1 (i wins), -1 (j wins), 0 (tie) or a soft label"),
        (eye & (m3.abs() > atol), "is {v} on the diagonal; a completion is tied with itself: M[i, i] must be 0"),
        (upper & ((m3 + mt).abs() > atol),
         "is contradictory: M[{i}, {j}] = {v} but M[{j}, {i}] = {w}; they must be opposite (M[j, i] = -M[i, j]): "
         "a judge that depends on the order of the pair? build with preferences_from_rule(orders='average')"),
    ]
    for bad, text in problems:
        if bool(bad.any()):
            p, i, j = (int(x) for x in bad.nonzero()[0])
            more = int(bad.sum()) - 1
            msg = f"preference matrix at {_where(None if single else p, i, j)} " + \
                text.format(i=i, j=j, v=float(m3[p, i, j]), w=float(m3[p, j, i]))
            raise PreferenceError(msg + (f" ({more} more such entries)" if more else ""), None if single else p, i, j)
    if cycles != "ignore":
        for p in range(m3.shape[0]):
            cyc = find_cycle(m3[p], atol)
            if cyc:
                where = "" if single else f"prompt p={p}: "
                msg = f"{where}non-transitive preferences {' > '.join(map(str, cyc))}: the judge cannot rank this group"
                if cycles == "error":
                    raise PreferenceError(msg, None if single else p, cyc[0], cyc[1])
                warnings.warn(msg, PreferenceCycleWarning, stacklevel=2)
                break
    return m.to(torch.float32)


# ---------------------------------------------------------------- builders

def preferences_from_scores(scores, temperature: float | None = None) -> torch.Tensor:
    """Scalar scores (P, G) or (G,) -> preference matrices (P, G, G) or (G, G).

    Hard (``temperature=None``): ``M[i, j] = sign(s_i - s_j)``, equal scores tie at 0.
    Soft: ``M[i, j] = 2 sigmoid((s_i - s_j) / T) - 1 = tanh((s_i - s_j) / (2 T))``, the
    Bradley-Terry probability that i beats j, rescaled to [-1, 1].
    """
    s = torch.as_tensor(scores, dtype=torch.float64)
    single = s.dim() == 1
    s2 = s[None] if single else s  # (P, G)
    if s2.dim() != 2:
        raise PreferenceError(f"scores must be (G,) or (P, G), got shape {tuple(s.shape)}")
    if not bool(torch.isfinite(s2).all()):
        p, i = (int(x) for x in (~torch.isfinite(s2)).nonzero()[0])
        raise PreferenceError(f"score at prompt p={p}, completion i={i} is {float(s2[p, i])}: scores must be finite "
                              f"(a judge returned None? score it or drop the group)", p, i, i)
    diff = s2[:, :, None] - s2[:, None, :]  # (P, G, G) s_i - s_j
    if temperature is None:
        m = torch.sign(diff)  # (P, G, G)
    else:
        if not temperature > 0:
            raise PreferenceError(f"temperature={temperature}: use a positive temperature, or None for hard labels")
        m = torch.tanh(diff / (2 * temperature))  # (P, G, G)
        m = (m - m.transpose(1, 2)) / 2  # (P, G, G) exactly antisymmetric in floating point
    out = check_preferences(m, cycles="ignore")  # scores are transitive by construction
    return out[0] if single else out


def preferences_from_judge(judge, prompts: list[str], completions: list[str], columns: dict[str, list],
                           num_generations: int, temperature: float | None = None) -> torch.Tensor:
    """Run a scalar judge (any reward function, kit or TRL) on B = P*G completions grouped
    by consecutive runs of ``num_generations`` and build (P, G, G) preferences from its scores."""
    B = len(completions)
    if num_generations < 1 or B % num_generations:
        raise PreferenceError(f"{B} completions do not split into groups of num_generations={num_generations}")
    rewards, _ = score([judge], prompts, completions, columns)  # (B,)
    return preferences_from_scores(rewards.view(-1, num_generations), temperature)  # (P, G, G)


def _ask(rule: Rule, prompt: str, a: str, b: str, ctx: dict, p: int, i: int, j: int) -> float:
    try:
        v = rule(prompt, a, b, **ctx)
    except GRPOKitError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised with the rule's name and the pair
        raise RewardError(f"pairwise rule {_name(rule)!r} raised {type(e).__name__}: {e} "
                          f"at {_where(p, i, j)}") from e
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise PreferenceError(f"pairwise rule {_name(rule)!r} returned {v!r} at {_where(p, i, j)}; "
                              f"return a number in [-1, 1]", p, i, j) from None
    if not (math.isfinite(v) and -1.0 <= v <= 1.0):
        raise PreferenceError(f"pairwise rule {_name(rule)!r} returned {v} at {_where(p, i, j)}; "
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


def average_orders(verdicts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both orders of each pair, combined: ``M = (V - V^T) / 2`` and the position bias ``(V + V^T) / 2``.

    ``V[i, j]`` is the verdict with i shown first, ``V[j, i]`` with j first. A judge without a
    position bias answers ``V[j, i] = -V[i, j]``; one that adds b to whichever completion it
    sees first answers ``V[i, j] = m + b`` and ``V[j, i] = -m + b``, so M = m (the bias cancels:
    MT-Bench's swap) and the bias matrix holds b. In probabilities q = (v + 1) / 2 this is
    ``q_ij = (q(i first) + 1 - q(j first)) / 2``. (..., G, G) -> two (..., G, G) tensors.
    """
    vt = verdicts.transpose(-1, -2)  # (..., G, G)
    return (verdicts - vt) / 2, (verdicts + vt) / 2


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
        r, _ = score([judge], [prompt, prompt], [a, b], cols)  # (2,)
        return float(preferences_from_scores(r, temperature)[0, 1])

    rule.__name__ = f"pairwise_{_name(judge)}"
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


# ---------------------------------------------------------------- ensembles

def ensemble_preferences(matrices, weights: Sequence[float] | None = None, method: str = "mean") -> torch.Tensor:
    """K judges' matrices (K, P, G, G) or (K, G, G) -> one matrix.

    ``"mean"``: the weighted mean (a soft label; convex combinations stay valid).
    ``"vote"``: ``sign(sum_k w_k sign(M_k))``, the weighted majority, ties 0. A majority of
    transitive judges can be cyclic (Condorcet); that shows up as a :class:`PreferenceCycleWarning`.
    """
    ms = torch.stack([check_preferences(m, cycles="ignore") for m in matrices]).to(torch.float64)  # (K, ...)
    w = _weights(weights, ms.shape[0]).view(-1, *([1] * (ms.dim() - 1)))  # (K, 1, ..)
    if method == "mean":
        out = (w * ms).sum(0) / w.sum()  # (P, G, G)
    elif method == "vote":
        out = torch.sign((w * torch.sign(ms)).sum(0))  # (P, G, G)
    else:
        raise PreferenceError(f"unknown ensemble method {method!r}: choose 'mean' or 'vote'")
    return check_preferences(out)


def preference_agreement(matrices, ensemble=None, names: Sequence[str] | None = None) -> dict:
    """Per-judge agreement over the compared pairs (i < j): the sign of each judge's verdict
    (+1, -1, or 0 for a tie) against the ensemble's and against each other judge's.
    See :func:`grpo_kit.rewards.judges.agreement` for the returned dict."""
    ms = torch.stack([torch.as_tensor(m, dtype=torch.float64) for m in matrices])  # (K, [P,] G, G)
    G = ms.shape[-1]
    iu = torch.triu_indices(G, G, 1)  # (2, G(G-1)/2)
    labels = torch.sign(ms[..., iu[0], iu[1]]).reshape(ms.shape[0], -1)  # (K, N)
    ens = None
    if ensemble is not None:
        ens = torch.sign(torch.as_tensor(ensemble, dtype=torch.float64)[..., iu[0], iu[1]]).reshape(-1)  # (N,)
    return agreement(labels, ens, names)


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
        __name__ = f"trl_{_name(rule)}"

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
        raise RewardError(f"pairwise judge {_name(trl_judge)!r} returned {len(answers)} answers for "
                          f"{len(pairs)} pairs; return one per pair")
    m = torch.zeros(P, G, G, dtype=torch.float64)  # (P, G, G)
    for (p, i, j), ans in zip(pairs, answers):
        if return_scores:
            v = 2 * float(ans) - 1
        elif ans in (0, 1):
            v = 1.0 if ans == 0 else -1.0
        else:
            raise RewardError(f"pairwise judge {_name(trl_judge)!r} answered {ans!r} at {_where(p, i, j)}; "
                              f"expected 0 or 1 (-1 means the judge failed)")
        m[p, i, j], m[p, j, i] = v, -v
    return check_preferences(m, cycles=cycles)


# ---------------------------------------------------------------- offline preference groups

def _check_group(path, lineno, row: dict, K: int | None, cycles: str) -> dict:
    if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        _fail(path, lineno, "field 'prompt' must be a non-empty string")
    resp = row.get("responses")
    if not isinstance(resp, list) or len(resp) < 2 or not all(isinstance(r, str) for r in resp):
        _fail(path, lineno, "field 'responses' must be a list of at least 2 strings")
    if K is not None and len(resp) != K:
        _fail(path, lineno, f"{len(resp)} responses, but the first record has {K}; every record needs the same K")
    mat = row.get("preference_matrix")
    k = len(resp)
    if not isinstance(mat, list) or len(mat) != k or not all(isinstance(r, list) and len(r) == k for r in mat):
        _fail(path, lineno, f"field 'preference_matrix' must be a {k} x {k} list of lists (one row per response)")
    for i, r in enumerate(mat):
        for j, v in enumerate(r):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                _fail(path, lineno, f"preference_matrix[{i}][{j}] is {v!r}; use a number in [-1, 1]")
    try:
        m = check_preferences(mat, cycles=cycles)
    except PreferenceError as e:
        _fail(path, lineno, str(e))
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


def stack_groups(records: Sequence[dict]) -> tuple[list[str], list[list[str]], torch.Tensor]:
    """Loaded records -> prompts (P,), responses (P lists of K) and preferences (P, K, K)."""
    prefs = torch.stack([r["preference_matrix"] for r in records])  # (P, K, K)
    return [r["prompt"] for r in records], [list(r["responses"]) for r in records], prefs
