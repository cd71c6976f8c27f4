"""Evaluation: greedy held-out accuracy (``inference``) and the failure detectors over a run's
history (``diagnostics``).

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.eval.diagnostics import (
    diagnose,
    read_history,
    report,
    rolling_means,
    series,
)
from grpo_kit.eval.inference import columns_of, greedy_accuracy

__all__ = ["diagnose", "read_history", "report", "rolling_means", "series", "columns_of", "greedy_accuracy"]
