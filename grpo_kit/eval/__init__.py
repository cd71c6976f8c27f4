"""Evaluation: greedy held-out accuracy (``inference``) and the failure detectors over a run's
history (``diagnostics``), and the 2-SE reading of a gap between two arms of seeds (``compare``).

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.eval.compare import (
    arm_summary,
    arm_table_rows,
    findings_lines,
    gap_reading,
    se_of_gap,
)
from grpo_kit.eval.diagnostics import (
    diagnose,
    read_history,
    report,
    rolling_means,
    series,
)
from grpo_kit.eval.inference import columns_of, greedy_accuracy

__all__ = ["diagnose", "read_history", "report", "rolling_means", "series", "columns_of", "greedy_accuracy",
           "gap_reading", "se_of_gap", "arm_summary", "arm_table_rows", "findings_lines"]
