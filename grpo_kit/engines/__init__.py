"""Other engines for the same run: the config, reward functions and data of a kit run, trained by
an engine built for many GPUs.

- ``trl_engine``: ``grpo-kit train --engine trl`` runs TRL's ``GRPOTrainer`` with
  ``GRPOConfig.to_trl()`` and writes the kit's run folder (``history.jsonl`` with the kit's metric
  names, plots, diagnostics), so a run can be compared across engines; ``accelerate launch``
  spreads it over GPUs (README, "Graduating to many GPUs").
- ``verl_export``: ``GRPOConfig.to_verl()``'s Hydra overrides for verl's PPO trainer and
  ``compute_score``, the kit's reward functions behind verl's custom reward function interface;
  ``grpo-kit export-verl`` prints the command line.
"""
