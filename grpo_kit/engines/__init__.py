"""Other engines for the same run: the config, reward functions and data of a kit run, trained by
an engine built for many GPUs.

- ``trl_engine``: ``grpo-kit train --engine trl`` runs TRL's ``GRPOTrainer`` with
  ``trl_engine.trl_kwargs(cfg)`` and writes the kit's run folder (``history.jsonl`` with the kit's metric
  names, plots, diagnostics), so a run can be compared across engines; ``accelerate launch``
  spreads it over GPUs (README, "Graduating to many GPUs").
- ``verl_export``: ``verl_export.verl_overrides(cfg)``: Hydra overrides for verl's PPO trainer and
  ``compute_score``, the kit's reward functions behind verl's custom reward function interface;
  ``grpo-kit export-verl`` prints the command line.
"""
from __future__ import annotations

from grpo_kit.errors import ConfigError


def refuse_steering(cfg, engine: str) -> None:
    """ConfigError when a field that steers the run over time is set: other engines have none of them."""
    steering = cfg.steering_fields()
    if steering:
        raise ConfigError(f"GRPOConfig fields {steering} steer the run over time and have no {engine} equivalent; "
                          f"reset them to their defaults to export to {engine}")


# the notebooks' names, read when first asked for: importing trl_engine imports transformers' Trainer,
# and verl loads verl_export's reward function by file path in processes that need nothing else
_LAZY = {"trl_kwargs": "grpo_kit.engines.trl_engine", "verl_overrides": "grpo_kit.engines.verl_export"}
__all__ = ["refuse_steering", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'grpo_kit.engines' has no attribute {name!r}")
