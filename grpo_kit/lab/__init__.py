"""Experiments built on the loop: the failure lab (``failures``), offline training on ranked
groups (``offline``: the losses and the step; ``offline_run``: the loop, checkpoints and exact resume),
the arms of a comparison over seeds (``arms``), a population of LoRA variants (``population``), and
the shipped base model (``base``).

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.lab.arms import train_arms
from grpo_kit.lab.failures import (
    FAILURES,
    compare_table,
    dashboard_hook,
    finding_marks,
    measure_step_memory,
    run_failure,
)
from grpo_kit.lab.offline_run import train_offline

__all__ = ["FAILURES", "compare_table", "dashboard_hook", "finding_marks", "measure_step_memory", "run_failure",
           "train_offline", "train_arms"]
