"""The paper-formula reference: every variant against formulas written out in this file from the
papers (plain Python loops over floats, no TRL code), on random inputs: agreement within 1e-6.

This checks the kit's math against the papers. The check against TRL's own code (its
``GRPOTrainer`` run on the same rollouts) is tests/engines/test_trl_parity.py.

References: DeepSeekMath eq. 3-4 (group z-score, clipped surrogate, k3 KL), Dr. GRPO (no std,
constant normaliser), DAPO (clip-higher, token mean), GSPO (sequence ratio), INTELLECT-2
(delta), GDPO and TRL's documentation of multi_objective_aggregation (sum_then_normalize,
normalize_then_sum), with TRL's normaliser names for the aggregations.
"""
import itertools
import math
import statistics

import pytest
import torch

from grpo_kit.core.advantages import (
    compute_advantages,
    normalize_then_sum,
    sum_then_normalize,
)
from grpo_kit.core.losses import aggregate, grpo_per_token_loss

EPS = 1e-4


def ref_advantages(rows, scale):
    """rows: list of groups (lists of floats)."""
    flat = [x for g in rows for x in g]
    batch_std = statistics.stdev(flat)  # unbiased, over all P*G rewards
    out = []
    for g in rows:
        mu = sum(g) / len(g)
        if scale == "group":
            out.append([(x - mu) / (statistics.stdev(g) + EPS) for x in g])
        elif scale == "batch":
            out.append([(x - mu) / (batch_std + EPS) for x in g])
        else:
            out.append([x - mu for x in g])
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_scale_rewards_matches_reference(scale):
    g = torch.Generator().manual_seed(1)
    r = torch.randn(5, 6, generator=g, dtype=torch.float64)
    r[2] = 0.7  # one zero-variance group
    want = ref_advantages(r.tolist(), scale)
    got = compute_advantages(r, scale)
    assert (got - torch.tensor(want, dtype=torch.float64)).abs().max().item() < 1e-6


def ref_loss(logp, old, ref, adv, mask, *, loss_type, level, eps, eps_high, delta, beta, L):
    """Per-token GRPO loss (DeepSeekMath eq. 3 with the variants), aggregated with TRL's normalisers."""
    B = len(logp)
    eh = eps if eps_high is None else eps_high
    per = []
    for b in range(B):
        idx = [t for t in range(len(mask[b])) if mask[b][t]]
        if level == "sequence":  # GSPO: s_i = exp(mean_t log ratio)
            seq = math.exp(sum(logp[b][t] - old[b][t] for t in idx) / max(len(idx), 1))
        row = []
        for t in range(len(mask[b])):
            r = seq if level == "sequence" else math.exp(logp[b][t] - old[b][t])
            unclipped = min(r, delta) if delta is not None else r
            clipped = min(max(r, 1 - eps), 1 + eh)
            loss = -min(unclipped * adv[b], clipped * adv[b])
            if beta:
                d = ref[b][t] - logp[b][t]
                loss += beta * (math.exp(d) - d - 1)
            row.append(loss)
        per.append(row)
    tot = sum(per[b][t] for b in range(B) for t in range(len(mask[b])) if mask[b][t])
    ntok = sum(sum(m) for m in mask)
    if loss_type == "grpo":
        return sum(sum(per[b][t] for t in range(len(mask[b])) if mask[b][t]) / max(sum(mask[b]), 1)
                   for b in range(B)) / B
    if loss_type in ("bnpo", "dapo"):
        return tot / max(ntok, 1)
    return tot / (B * L)  # dr_grpo


CASES = list(itertools.product(["grpo", "bnpo", "dr_grpo", "dapo"], ["token", "sequence"],
                               [(0.2, None, None), (0.2, 0.28, None), (0.2, 0.28, 1.5)], [0.0, 0.04]))


@pytest.mark.parametrize("loss_type,level,clip,beta", CASES)
def test_policy_loss_matches_reference(loss_type, level, clip, beta):
    eps, eps_high, delta = clip
    g = torch.Generator().manual_seed(CASES.index((loss_type, level, clip, beta)))
    B, T = 6, 5
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)  # ratios far from 1: clipping bites
    ref = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 1, 3, 0, 4, 2])  # a single-token row and a fully masked row
    mask = (torch.arange(T) < lengths.unsqueeze(1)).long()
    pt, _ = grpo_per_token_loss(logp, old, ref, adv, mask, beta=beta, epsilon=eps, epsilon_high=eps_high,
                                delta=delta, level=level)
    got = aggregate(pt, mask, loss_type, max_completion_length=T).item()
    want = ref_loss(logp.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), loss_type=loss_type,
                    level=level, eps=eps, eps_high=eps_high, delta=delta, beta=beta, L=T)
    assert abs(got - want) < 1e-6


def test_dapo_micro_batches_match_the_reference_token_mean():
    g = torch.Generator().manual_seed(3)
    B, T = 6, 4
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.arange(T) < torch.tensor([4, 1, 2, 0, 3, 4]).unsqueeze(1)).long()
    total = 0.0
    for s in (slice(0, 2), slice(2, 4), slice(4, 6)):
        pt, _ = grpo_per_token_loss(logp[s], old[s], None, adv[s], mask[s])
        total += aggregate(pt, mask[s], "dapo", num_micro_batches=3, batch_tokens=mask.sum()).item()
    want = ref_loss(logp.tolist(), old.tolist(), None, adv.tolist(), mask.tolist(), loss_type="dapo",
                    level="token", eps=0.2, eps_high=None, delta=None, beta=0.0, L=T)
    assert abs(total - want) < 1e-6


def ref_multi_objective(obj, w, how, scale="group"):
    """obj: P x G x K nested lists. TRL's two aggregations written out."""
    P, G, K = len(obj), len(obj[0]), len(obj[0][0])
    if how == "sum_then_normalize":
        return ref_advantages([[sum(w[k] * obj[p][i][k] for k in range(K)) for i in range(G)] for p in range(P)],
                              scale)
    s = [[0.0] * G for _ in range(P)]
    for p in range(P):
        for k in range(K):
            col = [obj[p][i][k] for i in range(G)]
            mu, sd = sum(col) / G, statistics.stdev(col)
            for i in range(G):
                s[p][i] += w[k] * (col[i] - mu) / (sd + EPS)
    flat = [x for row in s for x in row]
    mu, sd = sum(flat) / len(flat), statistics.stdev(flat)
    return [[(x - mu) / (sd + EPS) for x in row] for row in s]


@pytest.mark.parametrize("how,scale", [("normalize_then_sum", "group"), ("sum_then_normalize", "group"),
                                       ("sum_then_normalize", "batch"), ("sum_then_normalize", "none")])
def test_multi_objective_matches_reference(how, scale):
    g = torch.Generator().manual_seed(4)
    obj = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    obj[1, :, 0] = 2.0  # one objective constant in one group
    w = [1.0, 0.3, 2.1]
    got = normalize_then_sum(obj, w) if how == "normalize_then_sum" else sum_then_normalize(obj, w, scale)
    want = torch.tensor(ref_multi_objective(obj.tolist(), w, how, scale), dtype=torch.float64)
    assert (got - want).abs().max().item() < 1e-6


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_entropy_coef_matches_reference(loss_type):
    # TRL: loss = aggregated policy loss - entropy_coef * (token mean of H over the batch), for every loss_type
    from grpo_kit.core.losses import entropy_bonus

    g = torch.Generator().manual_seed(7)
    B, T = 4, 3
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64)
    old = logp + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    H = torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.arange(T) < torch.tensor([3, 1, 0, 2]).unsqueeze(1)).long()
    pt, _ = grpo_per_token_loss(logp, old, None, adv, mask)
    got = (aggregate(pt, mask, loss_type, max_completion_length=T) - entropy_bonus(H, mask, 0.05)).item()
    Hl, ml = H.tolist(), mask.tolist()
    h_mean = sum(Hl[b][t] for b in range(B) for t in range(T) if ml[b][t]) / sum(map(sum, ml))
    want = ref_loss(logp.tolist(), old.tolist(), None, adv.tolist(), ml, loss_type=loss_type, level="token",
                    eps=0.2, eps_high=None, delta=None, beta=0.0, L=T) - 0.05 * h_mean
    assert abs(got - want) < 1e-6
