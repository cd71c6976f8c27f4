"""Rewards: judges (reward functions), their registry and the checked scoring of a batch.

- ``judges``: the shipped reward functions, answer extraction, ``score`` (the one scoring entry point).
- ``pairwise``: pairwise judges, rules, and preference-group files.
- ``resolve``: a ``reward_funcs`` entry -> a function (the one place a spec's code is imported).
- ``learned_judge``, ``serve``, ``remote``, ``symbolic``: a learned judge; a judge server and client;
  math-verify.

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.rewards.judges import exact_answer, score
from grpo_kit.rewards.pairwise import load_preference_groups
from grpo_kit.rewards.resolve import get_reward_funcs

__all__ = ["exact_answer", "score", "load_preference_groups", "get_reward_funcs"]
