"""ipywidgets panels for the notebooks. Core modules never import this file.

Widget callbacks only re-draw into an ``Output`` widget; every number a notebook asserts is
computed in plain cells, so papermill (where no slider ever moves) checks the same claims.
"""
from __future__ import annotations


def advantage_sliders(rewards, n_clusters: int = 3, k: int = 5):
    """One slider per answer of a group; the bar chart of every estimator's advantages re-draws on change."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    import torch
    from IPython.display import display

    from .advantages import advantage_table
    from .plotting import plot_advantage_bars

    sliders = [w.FloatSlider(value=float(r), min=0.0, max=1.0, step=0.05, description=f"r{i}",
                             continuous_update=False) for i, r in enumerate(rewards)]
    out = w.Output()

    def redraw(_=None):
        r = torch.tensor([[s.value for s in sliders]])  # (1, G)
        with out:
            out.clear_output(wait=True)
            fig = plot_advantage_bars(r[0], {n: a[0] for n, a in advantage_table(r, n_clusters, k).items()})
            display(fig)
            plt.close(fig)

    for s in sliders:
        s.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(sliders[: (len(sliders) + 1) // 2]), w.HBox(sliders[(len(sliders) + 1) // 2:]), out])
