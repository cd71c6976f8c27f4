"""ipywidgets panels for the notebooks. Core modules never import this file.

Widget callbacks only re-draw into an ``Output`` widget; every number a notebook asserts is
computed in plain cells, so papermill (where no slider ever moves) checks the same claims.
"""
from __future__ import annotations


def redraw_on_change(controls, make_figure):
    """The ``Output`` + ``observe`` pattern: draw ``make_figure()`` now and again whenever a control's value changes.

    ``controls``: ipywidgets with a ``value`` (sliders, toggle buttons); ``make_figure()`` reads their
    values and returns a matplotlib figure. Returns the ``Output`` widget that holds the figure
    (put it in a box with the controls). Unlike ``interact``, nothing waits on a frontend, so a
    headless run (papermill) draws once and moves on.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    out = w.Output()

    def redraw(_=None):
        with out:
            out.clear_output(wait=True)
            fig = make_figure()
            display(fig)
            plt.close(fig)

    for c in controls:
        c.observe(redraw, names="value")
    redraw()
    return out


def advantage_sliders(rewards, n_clusters: int = 3, k: int = 5):
    """One slider per answer of a group; the bar chart of every estimator's advantages re-draws on change."""
    import ipywidgets as w
    import torch

    from grpo_kit.core.advantages import advantage_table
    from grpo_kit.view.plotting import plot_advantage_bars

    sliders = [w.FloatSlider(value=float(r), min=0.0, max=1.0, step=0.05, description=f"r{i}",
                             continuous_update=False) for i, r in enumerate(rewards)]

    def figure():
        r = torch.tensor([[s.value for s in sliders]])  # (1, G)
        return plot_advantage_bars(r[0], {n: a[0] for n, a in advantage_table(r, n_clusters, k).items()})

    out = redraw_on_change(sliders, figure)
    return w.VBox([w.HBox(sliders[: (len(sliders) + 1) // 2]), w.HBox(sliders[(len(sliders) + 1) // 2:]), out])
