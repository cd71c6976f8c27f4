"""GRPO policy losses: pure functions on per-token tensors.

Shapes: B completions, T completion tokens. ``logp``, ``old_logp``, ``ref_logp``: (B, T)
log-probabilities of the sampled tokens under the current, sampling-time and reference policies;
``adv``: (B,) one advantage per completion; ``mask``: (B, T) 1 on completion tokens.

Per-token loss (DeepSeekMath eq. 3, PPO's clipped surrogate, with a KL penalty):

    ratio = exp(logp - old_logp)
    L_t   = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A) + beta * KL_t

| piece | variant | source |
|---|---|---|
| ratio level | ``token`` (per token) | PPO / DeepSeekMath |
| ratio level | ``sequence``: exp(mean_t(logp - old_logp)), one per completion | GSPO (Zheng et al. 2025) |
| clip | ``epsilon_high > epsilon`` ("clip-higher") | DAPO (Yu et al. 2025) |
| cap | ``delta``: min(ratio, delta) in the unclipped term | INTELLECT-2 two-sided clipping |
| KL | k1 = logp - ref (unbiased, can be negative) | Schulman, "Approximating KL divergence" (2020) |
| KL | k2 = 0.5 (logp - ref)^2 (biased, low variance, >= 0) | same |
| KL | k3 = exp(ref - logp) - (ref - logp) - 1 (unbiased, >= 0; the default) | same; DeepSeekMath eq. 4; TRL |
| entropy | ``entropy_bonus``: loss - coef * token-mean(H_t) | PPO (Schulman et al. 2017); TRL ``entropy_coef`` |
| advantages | (B,) one per completion, or (B, T) per token (process supervision, hybrid GAE) | DeepSeekMath 4.1.3 |

Aggregation of L_t into one number (``loss_type``, TRL's names and normalisers):

| loss_type | normaliser | source |
|---|---|---|
| ``grpo``    | mean over each sequence's tokens, then mean over sequences | DeepSeekMath |
| ``bnpo``    | mean over all tokens of the (micro-)batch | TRL |
| ``dr_grpo`` | sum / (B * max_completion_length), a constant | Dr. GRPO |
| ``dapo``    | sum / tokens in the whole batch (global across micro-batches) | DAPO |

With one micro-batch (no gradient accumulation) ``bnpo`` and ``dapo`` coincide.

Preference losses for offline groups (no sampling, no ratio): ``s`` (P, G) sequence scores
(summed log-probs, or a reward model's scores), ``prefs`` (P, G, G) with prefs[p, i, j] > 0
meaning i is preferred to j with that weight (a soft label in (0, 1]; the antisymmetric
[-1, 1] matrix of ``advantages.pairwise_winrate`` works as is: only positive entries count).

| loss | per preferred pair (i over j), averaged with weights w_ij over preferred pairs | source |
|---|---|---|
| ``pairwise_margin_loss`` | relu(s_j - s_i + margin) | margin ranking loss (RRHF, Yuan et al. 2023) |
| ``bradley_terry_loss`` | -log sigmoid(beta (s_i - s_j)) | Bradley & Terry 1952; reward-model loss (Ouyang et al. 2022) |
| ``bradley_terry_pairs`` | BCE(sigmoid(r_a - r_b), q): the same on a list of pairs, soft labels q | the learned judge's loss |
| ``learned_baseline_loss`` | REINFORCE with a learnable per-group baseline b_p | Williams 1992 |

Every loss is 0 (finite) where it has nothing to average: no preferred pairs, no tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_kit.errors import DataError

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                     level: str = "token") -> torch.Tensor:
    """Token ratios (B, T), or GSPO's sequence ratio (B, 1) = exp(mean of log-ratios)."""
    log_ratio = logp - old_logp  # (B, T)
    if level == "token":
        return torch.exp(log_ratio)  # (B, T)
    if level == "sequence":
        seq = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
        return torch.exp(seq).unsqueeze(-1)  # (B, 1)
    raise ValueError(f"unknown importance_sampling_level {level!r}: use 'token' or 'sequence'")


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, epsilon: float = 0.2,
                      epsilon_high: float | None = None, delta: float | None = None) -> torch.Tensor:
    """-min(ρ A, clip(ρ, 1-eps, 1+eps_high) A): the ratio ρ (B, T) or (B, 1), adv (B,) -> same shape as ratio."""
    eps_high = epsilon if epsilon_high is None else epsilon_high
    a = adv.unsqueeze(-1) if adv.dim() == 1 else adv  # (B, 1), or (B, T) per-token advantages
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    unclipped = torch.clamp(ratio, max=delta) if delta is not None else ratio
    return -torch.min(unclipped * a, clipped * a)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0. (B, T)"""
    d = ref_logp - logp  # (B, T)
    return torch.exp(d) - d - 1


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 estimator of KL(pi || ref) per token: logp - ref. Unbiased under samples of pi, often negative. (B, T)"""
    return logp - ref_logp  # (B, T)


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 estimator per token: 0.5 (logp - ref)^2 >= 0. Biased, low variance. (B, T)"""
    return 0.5 * (logp - ref_logp) ** 2  # (B, T)


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(pi || ref) by estimator name ('k1', 'k2', 'k3'). (B, T)"""
    try:
        return KL_ESTIMATORS[estimator](logp, ref_logp)
    except KeyError:
        raise ValueError(f"unknown kl_estimator {estimator!r}: choose from {sorted(KL_ESTIMATORS)}") from None


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, coef: float, num_micro_batches: int = 1) -> torch.Tensor:
    """TRL's ``entropy_coef`` term: coef * (mean entropy over the micro-batch's tokens) / num_micro_batches.

    Subtract it from the aggregated loss. As in TRL it is a plain token mean whatever the
    ``loss_type``, so ``coef`` means the same for every aggregation. entropy, mask (B, T) -> ()
    """
    m = mask.to(entropy.dtype)  # (B, T)
    return coef * (entropy * m).sum() / m.sum().clamp(min=1) / num_micro_batches


def clip_fractions(ratio: torch.Tensor, adv: torch.Tensor, epsilon: float, epsilon_high: float | None):
    """Where clipping removed the gradient: low side (r < 1-eps, A < 0), high side (r > 1+eps_high, A > 0)."""
    eps_high = epsilon if epsilon_high is None else epsilon_high
    a = adv.unsqueeze(-1) if adv.dim() == 1 else adv  # (B, 1) or (B, T)
    low = (ratio < 1 - epsilon) & (a < 0)
    high = (ratio > 1 + eps_high) & (a > 0)
    return low, high


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, *,
              max_completion_length: int | None = None, num_micro_batches: int = 1,
              batch_tokens: float | torch.Tensor | None = None) -> torch.Tensor:
    """Reduce per-token losses (B, T) of one micro-batch to the scalar that is back-propagated.

    Summing this over the ``num_micro_batches`` micro-batches of a step gives the step's loss:
    ``grpo``/``bnpo``/``dr_grpo`` average the micro-batch values (TRL's division by the
    accumulation steps); ``dapo`` divides by ``batch_tokens``, the completion tokens of the
    whole batch, so it is the exact token mean whatever the micro-batch size.
    """
    per_token = per_token.expand_as(mask) if per_token.shape != mask.shape else per_token
    m = mask.to(per_token.dtype)
    if loss_type == "grpo":
        loss = ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()
    elif loss_type == "bnpo":
        loss = (per_token * m).sum() / m.sum().clamp(min=1)
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length (its constant normaliser)")
        loss = (per_token * m).sum() / (per_token.shape[0] * max_completion_length)
    elif loss_type == "dapo":
        tokens = m.sum() if batch_tokens is None else torch.as_tensor(batch_tokens, dtype=per_token.dtype)
        return (per_token * m).sum() / tokens.clamp(min=1)
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}: choose from {LOSS_TYPES}")
    return loss / num_micro_batches


def grpo_per_token_loss(logp, old_logp, ref_logp, adv, mask, *, beta=0.0, epsilon=0.2,
                        epsilon_high=None, delta=None, level="token", kl_estimator="k3"):
    """The full per-token GRPO loss (B, T) and its pieces for logging.

    Returns ``(per_token_loss, info)`` with ``info = {ratio, kl, clip_low, clip_high}``
    (``kl`` is None when ``ref_logp`` is None).
    """
    ratio = importance_ratio(logp, old_logp, mask, level)  # (B, T) or (B, 1)
    per_token = clipped_surrogate(ratio, adv, epsilon, epsilon_high, delta)
    per_token = per_token.expand_as(logp)  # (B, T)
    kl = kl_estimate(logp, ref_logp, kl_estimator) if ref_logp is not None else None  # (B, T)
    if beta != 0.0:
        if kl is None:
            raise ValueError("beta != 0 needs reference log-probs (ref_logp)")
        per_token = per_token + beta * kl
    low, high = clip_fractions(ratio, adv, epsilon, epsilon_high)
    return per_token, {"ratio": ratio, "kl": kl, "clip_low": low, "clip_high": high}


# ----------------------------------------------------------------------------- offline groups
def _pair_weights(prefs: torch.Tensor) -> torch.Tensor:
    """w[p, i, j] = max(prefs[p, i, j], 0): the weight of 'i preferred to j'. (P, G, G)"""
    if prefs.dim() != 3 or prefs.shape[1] != prefs.shape[2]:
        raise DataError(f"preferences must be (P, G, G), got shape {tuple(prefs.shape)}")
    if not bool(torch.isfinite(prefs).all()):
        raise DataError("preferences contain NaN or inf; a pairwise judge must return numbers in [-1, 1]")
    return prefs.clamp(min=0)  # (P, G, G)


def _pair_mean(per_pair: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (per_pair * w).sum() / w.sum().clamp(min=1e-12)  # () weighted mean, 0 without pairs


def pairwise_margin_loss(seq_logp: torch.Tensor, prefs: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Hinge on sequence log-probs: mean over preferred pairs (i over j) of relu(s_j - s_i + margin).

    ``seq_logp`` (P, G): summed token log-probs per completion; ``prefs`` (P, G, G). -> ()
    """
    w = _pair_weights(prefs)  # (P, G, G)
    diff = seq_logp.unsqueeze(1) - seq_logp.unsqueeze(2)  # (P, G, G): [p, i, j] = s_j - s_i
    return _pair_mean(torch.relu(diff + margin), w)


def bradley_terry_loss(scores: torch.Tensor, prefs: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """Bradley-Terry: mean over preferred pairs (i over j) of -log sigmoid(beta (s_i - s_j)). (P, G), (P, G, G) -> ()"""
    w = _pair_weights(prefs)  # (P, G, G)
    diff = scores.unsqueeze(2) - scores.unsqueeze(1)  # (P, G, G): [p, i, j] = s_i - s_j
    return _pair_mean(-torch.nn.functional.logsigmoid(beta * diff), w)


def bradley_terry_pairs(r_a: torch.Tensor, r_b: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Bradley-Terry on a list of pairs with soft labels: mean over pairs of BCE(sigmoid(r_a - r_b), q),
    q the probability that a is preferred (q = 1: -log sigmoid(r_a - r_b)). (N,), (N,), (N,) -> ()

    The same loss as :func:`bradley_terry_loss` (beta 1) on N groups of two with weights q for
    'a over b' and 1 - q for 'b over a'; the learned judge trains on pairs in this form."""
    return torch.nn.functional.binary_cross_entropy_with_logits(r_a - r_b, q)  # ()


def learned_baseline_loss(seq_logp: torch.Tensor, rewards: torch.Tensor,
                          baseline: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE on an offline group with a learnable per-group baseline b (P, 1) (e.g. an nn.Parameter).

    policy loss   = -mean((r - b.detach()) * seq_logp)   (b is a baseline: it moves no answer's sign)
    baseline loss =  mean((r - b)^2)                      (its minimiser is the group's mean reward)

    What it means: instead of recomputing the group mean each step (GRPO's baseline), b_p is
    remembered across epochs over the same offline group and trained to track its mean reward;
    with one pass and a converged b it equals Dr. GRPO's mean-centred advantage. Returns both
    scalars; add them (or give b its own optimizer).
    """
    adv = rewards - baseline.detach()  # (P, G)
    policy = -(adv * seq_logp).mean()
    base = ((rewards - baseline) ** 2).mean()
    return policy, base


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16/fp32 -> float32; float64 stays float64 (tests compare with TRL in float64)."""
    return x if x.dtype == torch.float64 else x.float()


@dataclass
class LossStats:
    """What one micro-batch's loss logs: masked token sums, kept as () tensors on the device, so that
    adding micro-batches and updates costs no host sync (``train_step`` reads them once per step)."""
    clip_low: torch.Tensor               # () tokens whose ratio the lower clip bounds (A < 0)
    clip_high: torch.Tensor              # () tokens the upper clip bounds (A > 0)
    entropy: torch.Tensor | None = None  # () summed token entropy (the batch as sampled: first update only)
    kl: torch.Tensor | None = None       # () summed per-token KL to the reference (first update only)

    def __add__(self, other: "LossStats") -> "LossStats":
        def add(a, b):
            return b if a is None else a if b is None else a + b
        return LossStats(self.clip_low + other.clip_low, self.clip_high + other.clip_high,
                         add(self.entropy, other.entropy), add(self.kl, other.kl))


def grpo_loss(logp, old_logp, ref_logp, adv, mask, *, loss_type: str, beta: float = 0.0, epsilon: float = 0.2,
              epsilon_high=None, delta=None, level: str = "token", kl_estimator: str = "k3",
              max_completion_length: int | None = None, num_micro_batches: int = 1, batch_tokens=None,
              entropy: torch.Tensor | None = None, entropy_coef: float = 0.0,
              log_batch: bool = False) -> tuple[torch.Tensor, LossStats]:
    """One micro-batch's GRPO loss, the scalar to backpropagate, and its :class:`LossStats`.

    :func:`grpo_per_token_loss` (B, T), aggregated by ``loss_type`` (:func:`aggregate`), minus the
    entropy bonus when ``entropy_coef != 0`` (``entropy`` (B, T) is then needed). ``log_batch``: also
    sum the entropy and the KL (the batch as sampled: the first update of a step).
    """
    per_token, info = grpo_per_token_loss(logp, old_logp, ref_logp, adv, mask, beta=beta, epsilon=epsilon,
                                          epsilon_high=epsilon_high, delta=delta, level=level,
                                          kl_estimator=kl_estimator)  # (B, T)
    loss = aggregate(per_token, mask, loss_type, max_completion_length=max_completion_length,
                     num_micro_batches=num_micro_batches, batch_tokens=batch_tokens)  # ()
    if entropy_coef != 0:
        loss = loss - entropy_bonus(at_least_fp32(entropy), mask, entropy_coef, num_micro_batches)
    mf = mask.float()  # (B, T)
    # clipping can only act from the second update on (the ratio is 1 at the first)
    stats = LossStats((info["clip_low"].expand_as(mf) * mf).sum(), (info["clip_high"].expand_as(mf) * mf).sum())
    if log_batch:
        stats.entropy = (entropy.detach() * mf).sum()
        if info["kl"] is not None:
            stats.kl = (info["kl"].detach() * mf).sum()
    return loss, stats
