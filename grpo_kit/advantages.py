"""Advantage estimators: pure functions from rewards (P, G) to advantages (P, G).

P prompts, G completions per prompt (a *group*). Every estimator returns finite values for a
zero-variance group (all rewards equal): its advantages are all 0, so the group contributes no
policy gradient (only the KL term, if any, moves the model on it).

| name     | formula                                         | source |
|----------|-------------------------------------------------|--------|
| `group`  | (r - mean_g(r)) / (std_g(r) + eps)              | DeepSeekMath (Shao et al. 2024), outcome supervision; TRL `scale_rewards="group"` |
| `batch`  | (r - mean_g(r)) / (std_batch(r) + eps)          | PPO-Lite / "Tricks or Traps" (Liu et al. 2025); TRL `scale_rewards="batch"` |
| `none`   | r - mean_g(r)                                   | Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"); TRL `scale_rewards="none"` |

The std is the unbiased sample std (``torch.std``'s default, divisor G - 1) and eps = 1e-4, as
in TRL's GRPOTrainer, so that a run here and a run there compute the same numbers.
"""
from __future__ import annotations

import torch

EPS = 1e-4  # TRL's value


def group_zscore(rewards: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """DeepSeekMath: normalise each reward by its own group's mean and std."""
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    std = rewards.std(dim=1, keepdim=True)  # (P, 1) unbiased
    return (rewards - mean) / (std + eps)  # (P, G)


def batch_scaled(rewards: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Centre by the group mean, scale by the std of the whole batch (one number)."""
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())  # () unbiased, all P*G rewards
    return (rewards - mean) / (std + eps)  # (P, G)


def mean_centred(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: subtract the group mean, no std division (removes the difficulty bias)."""
    return rewards - rewards.mean(dim=1, keepdim=True)  # (P, G)


ADVANTAGES = {"group": group_zscore, "batch": batch_scaled, "none": mean_centred}


def compute_advantages(rewards: torch.Tensor, scale_rewards: str = "group") -> torch.Tensor:
    """Dispatch by TRL's ``scale_rewards`` name; rewards (P, G) -> advantages (P, G)."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (P, G), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(f"group size G={rewards.shape[1]}: a group needs at least 2 completions to compare")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards contain NaN or inf; fix the reward function (see judges.score)")
    try:
        fn = ADVANTAGES[scale_rewards]
    except KeyError:
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}: choose from {sorted(ADVANTAGES)}") from None
    return fn(rewards)


def masked_advantages(rewards: torch.Tensor, valid: torch.Tensor, scale_rewards: str = "group",
                      eps: float = EPS) -> torch.Tensor:
    """Advantages (P, G) from the valid samples only; invalid ones get 0 (``reward_error_policy='skip'``).

    Each group's mean (and its std for 'group') is taken over its valid samples and the 'batch'
    std over all valid rewards: the numbers :func:`compute_advantages` gives on the valid
    samples alone. A group with fewer than 2 valid samples has nothing to compare: all 0.
    Invalid rewards may be NaN or inf; they never reach the arithmetic.
    """
    if scale_rewards not in ADVANTAGES:
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}: choose from {sorted(ADVANTAGES)}")
    v = valid.to(rewards.dtype)  # (P, G)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))  # (P, G)
    n = v.sum(1, keepdim=True)  # (P, 1) valid samples per group
    mean = r.sum(1, keepdim=True) / n.clamp(min=1)  # (P, 1)
    centred = (r - mean) * v  # (P, G)
    if scale_rewards == "group":
        std = (centred.pow(2).sum(1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()  # (P, 1) unbiased
        adv = centred / (std + eps)  # (P, G)
    elif scale_rewards == "batch":
        kept = rewards[valid]  # (N,) every valid reward in the batch
        std = kept.std() if kept.numel() > 1 else rewards.new_zeros(())  # () unbiased
        adv = centred / (std + eps)  # (P, G)
    else:
        adv = centred  # (P, G)
    return torch.where(valid & (n >= 2), adv, torch.zeros_like(adv))  # (P, G)


def zero_std_groups(rewards: torch.Tensor) -> torch.Tensor:
    """(P,) bool: groups whose rewards are all equal (no learning signal)."""
    return torch.isclose(rewards.std(dim=1), rewards.new_zeros(()))  # (P,)
