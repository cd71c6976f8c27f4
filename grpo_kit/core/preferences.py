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

Built here from numbers only: :func:`preferences_from_scores` (scalar scores (P, G): the sign of
the difference (ties 0), or soft Bradley-Terry labels ``2 sigmoid((s_i - s_j) / T) - 1`` with
temperature T), :func:`average_orders` (a judge asked in both orders, its position bias cancelled),
:func:`ensemble_preferences` (weighted mean or majority vote over K judges' matrices, with
:func:`preference_agreement`) and :func:`stack_groups` (loaded preference groups as tensors).
The judges that produce verdicts (rules, scalar judges compared, TRL's pairwise interface, files of
preference groups) are :mod:`grpo_kit.rewards.pairwise`.
"""
from __future__ import annotations

import warnings
from typing import Callable, Sequence

import torch

from grpo_kit.core.ensembles import agreement, ensemble_weights
from grpo_kit.errors import DataError

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

def pair_where(p: int | None, i: int, j: int) -> str:
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
            msg = f"preference matrix at {pair_where(None if single else p, i, j)} " + \
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


# ---------------------------------------------------------------- ensembles

def ensemble_preferences(matrices, weights: Sequence[float] | None = None, method: str = "mean") -> torch.Tensor:
    """K judges' matrices (K, P, G, G) or (K, G, G) -> one matrix.

    ``"mean"``: the weighted mean (a soft label; convex combinations stay valid).
    ``"vote"``: ``sign(sum_k w_k sign(M_k))``, the weighted majority, ties 0. A majority of
    transitive judges can be cyclic (Condorcet); that shows up as a :class:`PreferenceCycleWarning`.
    """
    ms = torch.stack([check_preferences(m, cycles="ignore") for m in matrices]).to(torch.float64)  # (K, ...)
    w = ensemble_weights(weights, ms.shape[0]).view(-1, *([1] * (ms.dim() - 1)))  # (K, 1, ..)
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


def stack_groups(records: Sequence[dict]) -> tuple[list[str], list[list[str]], torch.Tensor]:
    """Loaded records -> prompts (P,), responses (P lists of K) and preferences (P, K, K)."""
    prefs = torch.stack([r["preference_matrix"] for r in records])  # (P, K, K)
    return [r["prompt"] for r in records], [list(r["responses"]) for r in records], prefs
