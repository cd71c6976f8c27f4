"""The GRPO math on tensors: read this layer first.

It imports torch and ``grpo_kit.errors`` only; every function is pure and carries the tensor
shapes on the lines that make them.

- ``advantages``: the group z-score (DeepSeekMath) and every other advantage estimator, one name
  per estimator in ``ESTIMATORS`` and one entry point, ``estimate_advantages``.
- ``losses``: the clipped surrogate, the KL estimators, the aggregations, and ``grpo_loss``.
- ``preferences``, ``ensembles``: preference matrices and their checks; ensembles of scores.
- ``metrics``: what a step logs, computed from tensors.
- ``reinforce``: the policy gradient on a categorical policy small enough to differentiate exactly:
  the score-function estimate, baselines, and the (G - 1) / G bias of GRPO's group mean.

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.core.advantages import (
    ESTIMATORS,
    compute_advantages,
    estimate_advantages,
    group_zscore,
    hybrid_gae,
    hybrid_gae_terms,
    pairwise_winrate,
    process_advantages,
    rank_based,
    rloo,
    zero_std_groups,
)
from grpo_kit.core.losses import (
    aggregate,
    clipped_surrogate,
    grpo_loss,
    grpo_per_token_loss,
    kl_estimate,
    kl_k3,
)
from grpo_kit.core.reinforce import (
    draw,
    exact_gradient,
    kl_exact,
    kl_regularised_optimum,
    off_policy_gradients,
    sampled_gradients,
)

__all__ = ["ESTIMATORS", "compute_advantages", "estimate_advantages", "group_zscore", "pairwise_winrate",
           "rank_based", "zero_std_groups", "aggregate", "grpo_loss", "grpo_per_token_loss", "kl_estimate",
           "rloo", "hybrid_gae", "hybrid_gae_terms", "process_advantages", "clipped_surrogate", "kl_k3",
           "draw", "exact_gradient", "kl_exact", "kl_regularised_optimum", "off_policy_gradients", "sampled_gradients"]
