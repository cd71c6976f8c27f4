"""Several judges at once, as numbers: the weights of an ensemble, K judges' scores combined into
one (mean or vote), and how often judges agree. Pure tensor math: the judges themselves (reward
functions, pairwise rules) live in :mod:`grpo_kit.rewards`.
"""
from __future__ import annotations

from typing import Sequence

import torch

from grpo_kit.errors import ConfigError


def ensemble_weights(weights, K: int) -> torch.Tensor:
    w = torch.tensor(list(weights) if weights is not None else [1.0] * K, dtype=torch.float64)  # (K,)
    if w.numel() != K or not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or float(w.sum()) <= 0:
        raise ConfigError(f"ensemble weights {w.tolist()}: give {K} finite non-negative weights with a positive sum")
    return w


def ensemble_scores(scores: torch.Tensor, weights: Sequence[float] | None = None, method: str = "mean") -> torch.Tensor:
    """Combine K judges' scores (K, B) -> (B,); NaN (a judge said None) is left out, and a
    sample no judge scored stays NaN.

    - ``"mean"``: the weighted average over the judges that scored the sample;
    - ``"vote"``: the weighted majority value (the value with the most weight behind it;
      a tie between values gives their mean). Meant for judges with few values (0/1 verdicts).
    """
    K, B = scores.shape
    w = ensemble_weights(weights, K)  # (K,)
    s = scores.to(torch.float64)  # (K, B)
    seen = ~torch.isnan(s)  # (K, B)
    if method == "mean":
        wsum = (w[:, None] * seen).sum(0)  # (B,)
        out = (w[:, None] * torch.nan_to_num(s)).sum(0) / wsum  # (B,) NaN where wsum == 0
        return out.to(scores.dtype)
    if method != "vote":
        raise ConfigError(f"unknown ensemble method {method!r}: choose 'mean' or 'vote'")
    out = torch.full((B,), float("nan"), dtype=torch.float64)  # (B,)
    for b in range(B):
        tally: dict[float, float] = {}
        for k in range(K):
            if seen[k, b]:
                tally[float(s[k, b])] = tally.get(float(s[k, b]), 0.0) + float(w[k])
        if tally:
            top = max(tally.values())
            winners = [v for v, t in tally.items() if t == top]
            out[b] = sum(winners) / len(winners)
    return out.to(scores.dtype)


def agreement(labels: torch.Tensor, ensemble: torch.Tensor | None = None, names: Sequence[str] | None = None,
              atol: float = 1e-6) -> dict:
    """How often K judges agree: labels (K, N) verdicts (NaN = no verdict), ensemble (N,).

    Returns ``{"names", "with_ensemble": {name: fraction}, "between": (K, K) tensor}``; each
    fraction counts only items both sides judged (NaN when there is none). Verdicts agree when
    they are equal within ``atol``: pass 0/1 verdicts or signs, not raw continuous scores.
    """
    K = labels.shape[0]
    names = list(names) if names is not None else [f"judge{k}" for k in range(K)]
    if len(names) != K:
        raise ConfigError(f"{len(names)} names for {K} judges; give one name per judge")
    x = labels.to(torch.float64).reshape(K, -1)  # (K, N)

    def frac(a, b):
        both = ~torch.isnan(a) & ~torch.isnan(b)  # (N,)
        n = int(both.sum())
        return float(((a - b).abs() <= atol)[both].sum()) / n if n else float("nan")

    between = torch.tensor([[frac(x[i], x[j]) for j in range(K)] for i in range(K)])  # (K, K)
    out = {"names": names, "between": between}
    if ensemble is not None:
        e = ensemble.to(torch.float64).reshape(-1)  # (N,)
        out["with_ensemble"] = {n: frac(x[k], e) for k, n in enumerate(names)}
    return out
