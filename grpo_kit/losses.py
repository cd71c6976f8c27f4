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
| KL | k3 = exp(ref - logp) - (ref - logp) - 1 | Schulman's estimator; DeepSeekMath eq. 4 |

Aggregation of L_t into one number (``loss_type``, TRL's names and normalisers):

| loss_type | normaliser | source |
|---|---|---|
| ``grpo``    | mean over each sequence's tokens, then mean over sequences | DeepSeekMath |
| ``bnpo``    | mean over all tokens of the (micro-)batch | TRL |
| ``dr_grpo`` | sum / (B * max_completion_length), a constant | Dr. GRPO |
| ``dapo``    | sum / tokens in the whole batch (global across micro-batches) | DAPO |

With one micro-batch (no gradient accumulation) ``bnpo`` and ``dapo`` coincide.
"""
from __future__ import annotations

import torch

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
    """-min(r A, clip(r, 1-eps, 1+eps_high) A): ratio (B, T) or (B, 1), adv (B,) -> same shape as ratio."""
    eps_high = epsilon if epsilon_high is None else epsilon_high
    a = adv.unsqueeze(-1)  # (B, 1)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    unclipped = torch.clamp(ratio, max=delta) if delta is not None else ratio
    return -torch.min(unclipped * a, clipped * a)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0. (B, T)"""
    d = ref_logp - logp  # (B, T)
    return torch.exp(d) - d - 1


def clip_fractions(ratio: torch.Tensor, adv: torch.Tensor, epsilon: float, epsilon_high: float | None):
    """Where clipping removed the gradient: low side (r < 1-eps, A < 0), high side (r > 1+eps_high, A > 0)."""
    eps_high = epsilon if epsilon_high is None else epsilon_high
    a = adv.unsqueeze(-1)  # (B, 1)
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
                        epsilon_high=None, delta=None, level="token"):
    """The full per-token GRPO loss (B, T) and its pieces for logging.

    Returns ``(per_token_loss, info)`` with ``info = {ratio, kl, clip_low, clip_high}``
    (``kl`` is None when ``ref_logp`` is None).
    """
    ratio = importance_ratio(logp, old_logp, mask, level)  # (B, T) or (B, 1)
    per_token = clipped_surrogate(ratio, adv, epsilon, epsilon_high, delta)
    per_token = per_token.expand_as(logp)  # (B, T)
    kl = kl_k3(logp, ref_logp) if ref_logp is not None else None  # (B, T)
    if beta != 0.0:
        if kl is None:
            raise ValueError("beta != 0 needs reference log-probs (ref_logp)")
        per_token = per_token + beta * kl
    low, high = clip_fractions(ratio, adv, epsilon, epsilon_high)
    return per_token, {"ratio": ratio, "kl": kl, "clip_low": low, "clip_high": high}
