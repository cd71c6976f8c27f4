"""What a notebook shows: the live dashboard, figures, widgets that re-plot, and ``record`` (the
notebook's claims, checked when papermill runs it).

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.view.dashboard import Dashboard, compare_runs
from grpo_kit.view.nbtools import record, smoke_banner
from grpo_kit.view.plotting import (
    plot_advantage_bars,
    plot_buckets_vs_groups,
    plot_history,
    plot_vs_theory,
    smooth,
)
from grpo_kit.view.widgets import advantage_sliders, redraw_on_change

__all__ = ["Dashboard", "compare_runs", "record", "smoke_banner", "plot_advantage_bars", "plot_buckets_vs_groups", "plot_history",
           "plot_vs_theory", "smooth", "advantage_sliders", "redraw_on_change"]
