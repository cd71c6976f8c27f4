"""The policy gradient on a policy small enough to differentiate exactly: where GRPO comes from.

A categorical policy over K actions with logits theta, pi = softmax(theta), and a reward r(a) per
action. The objective is J(theta) = E_{a ~ pi}[r(a)] = sum_a pi_a r_a. Its exact gradient is

    dJ/dtheta = pi * (r - pi . r)                                          (K,)

and the log-derivative ("score function", REINFORCE; Williams 1992) trick writes the same gradient
as an expectation one can sample:  E_{a ~ pi}[(r(a) - b) * d log pi_a / d theta],  with
d log pi_a / d theta = onehot(a) - pi, for any baseline b that does not depend on the sampled a.

GRPO's baseline is the mean reward of the G samples drawn for the same prompt. That mean includes
the sample's own reward, so it is not independent of it: the expected gradient is scaled by
(G - 1) / G (the leave-one-out mean, RLOO, Kool et al. 2019, is unbiased). Dividing by the group's
standard deviation rescales it further. Samples drawn from another policy (an older one: off-policy)
need the importance ratio rho = pi(a) / pi_old(a). The functions below let a notebook measure each.
"""
from __future__ import annotations

import torch

from grpo_kit.core.advantages import group_zscore, mean_centred, rloo

BASELINES = ("none", "value", "mean", "loo", "zscore")


def exact_gradient(logits: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """dJ/dtheta of J = sum_a softmax(theta)_a r_a for logits (K,) and rewards (K,) -> (K,)."""
    p = torch.softmax(logits, -1)  # (K,)
    return p * (rewards - (p * rewards).sum())  # (K,)


def score_terms(logits: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-sample score-function terms w_i * (onehot(a_i) - pi) for actions (N,), weights (N,) -> (N, K)."""
    p = torch.softmax(logits, -1)  # (K,)
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(p.dtype)  # (N, K)
    return weights[:, None] * (onehot - p)  # (N, K)


def group_baseline_weights(rewards: torch.Tensor, kind: str = "mean", value: float | None = None) -> torch.Tensor:
    """Each sample's reward minus a baseline, rewards (N, G) -> (N, G).

    ``none``: r; ``value``: r - ``value`` (a critic's prediction of the expected reward, the same for
    every sample); ``mean``: r - the group mean (GRPO's, own reward included); ``loo``: r - the mean of
    the other G - 1 rewards (RLOO); ``zscore``: (r - mean) / (std + eps), the kit's ``scale_rewards="group"``.
    """
    if kind == "none":
        return rewards
    if kind == "value":
        if value is None:
            raise ValueError("baseline 'value' needs value=: the critic's prediction of the expected reward")
        return rewards - value  # (N, G)
    fns = {"mean": mean_centred, "loo": rloo, "zscore": group_zscore}
    if kind not in fns:
        raise ValueError(f"unknown baseline {kind!r}: choose from {', '.join(BASELINES)}")
    return fns[kind](rewards)  # (N, G)


def draw(logits: torch.Tensor, groups: int, group_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Actions (groups, G) drawn with replacement from softmax(logits)."""
    p = torch.softmax(logits, -1)  # (K,)
    return torch.multinomial(p.expand(groups, -1), group_size, replacement=True, generator=generator)  # (N, G)


def sampled_gradients(logits: torch.Tensor, rewards: torch.Tensor, groups: int, group_size: int,
                      kind: str, generator: torch.Generator | None = None, value: float | None = None) -> torch.Tensor:
    """One gradient estimate per group: G actions drawn from softmax(logits), weighted by
    :func:`group_baseline_weights`, averaged over the group -> (groups, K)."""
    actions = draw(logits, groups, group_size, generator)  # (N, G)
    w = group_baseline_weights(rewards[actions], kind, value)  # (N, G)
    terms = score_terms(logits, actions.reshape(-1), w.reshape(-1))  # (N*G, K)
    return terms.reshape(groups, group_size, -1).mean(1)  # (N, K)


def off_policy_gradients(logits: torch.Tensor, old_logits: torch.Tensor, rewards: torch.Tensor, groups: int,
                         group_size: int, correct: bool = True,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Gradient estimates at ``logits`` from groups drawn from softmax(``old_logits``) -> (groups, K).

    Each sample's term is rho * A * (onehot - pi) with A the leave-one-out advantage and
    rho = pi(a) / pi_old(a) (``correct=True``), or without rho (``correct=False``: treating old samples
    as if the current policy had drawn them).
    """
    actions = draw(old_logits, groups, group_size, generator)  # (N, G)
    w = rloo(rewards[actions])  # (N, G)
    if correct:
        log_ratio = torch.log_softmax(logits, -1) - torch.log_softmax(old_logits, -1)  # (K,)
        w = w * log_ratio.exp()[actions]  # (N, G)
    terms = score_terms(logits, actions.reshape(-1), w.reshape(-1))  # (N*G, K)
    return terms.reshape(groups, group_size, -1).mean(1)  # (N, K)


def kl_exact(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """KL(softmax(logits) || softmax(ref_logits)) = sum_a pi_a (log pi_a - log pi_ref_a), () ."""
    logp, logq = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)  # (K,), (K,)
    return (logp.exp() * (logp - logq)).sum(-1)  # ()


def kl_regularised_optimum(ref_logits: torch.Tensor, rewards: torch.Tensor, beta: float) -> torch.Tensor:
    """The policy maximising E_pi[r] - beta KL(pi || pi_ref): pi* proportional to pi_ref exp(r / beta), (K,)."""
    return torch.softmax(torch.log_softmax(ref_logits, -1) + rewards / beta, -1)  # (K,)
