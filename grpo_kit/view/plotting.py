"""Figures from histories (lists of per-step metric dicts). Imports nothing that trains."""
from __future__ import annotations

from pathlib import Path

from grpo_kit.eval.diagnostics import series

PANELS = [("reward", "reward (train samples)"), ("accuracy", "held-out greedy accuracy"),
          ("kl", "KL to reference (k3)"), ("entropy", "token entropy")]
# an offline preference run (grpo-kit train-offline) samples nothing: its loss, the clear winners' NLL, grad norm
OFFLINE_PANELS = [("loss", "training loss (with the anchor)"), ("accuracy", "held-out greedy accuracy"),
                  ("winner_nll", "NLL per token of the clear winners"), ("grad_norm", "grad norm (before clipping)")]


def xy(history: list[dict], key: str, evals: list[tuple[int, float]] | None = None) -> tuple[list, list]:
    """(steps, values) of one metric to plot: ``diagnostics.series`` (the steps with a finite value)
    unzipped; ``accuracy`` comes from ``evals`` when given (it holds step 0, the base model)."""
    pts = evals if key == "accuracy" and evals is not None else series(history, key)
    return [s for s, _ in pts], [v for _, v in pts]


def smooth(values: list[float], window: int = 10) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_history(history: list[dict], evals=None, title: str = "GRPO run", path: str | Path | None = None,
                 panels=None):
    """2x2 matplotlib figure of reward, accuracy, KL and entropy (or four other ``panels``: (metric, title)
    pairs, e.g. :data:`OFFLINE_PANELS`); saved to ``path`` if given."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), constrained_layout=True)
    for ax, (key, label) in zip(axes.flat, panels or PANELS):
        x, y = xy(history, key, evals)
        if key == "accuracy":
            ax.plot(x, y, "o-", color="C2")
            ax.set_ylim(0, 1)
        elif y:
            ax.plot(x, y, color="0.8", lw=0.8, label="per step")
            ax.plot(x, smooth(y), color="C0", label="10-step mean")
            ax.legend(fontsize=8)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def plotly_history(history: list[dict], evals=None, title: str = "GRPO run", path: str | Path | None = None,
                   panels=None):
    """The same four panels as an interactive plotly figure; written as standalone HTML if ``path``."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = panels or PANELS
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels])
    for i, (key, label) in enumerate(panels):
        x, y = xy(history, key, evals)
        fig.add_trace(go.Scatter(x=x, y=y, name=key, mode="lines+markers" if key == "accuracy" else "lines"),
                      row=i // 2 + 1, col=i % 2 + 1)
    fig.update_layout(title=title, height=650, showlegend=False)
    if path is not None:
        fig.write_html(str(path), include_plotlyjs=True)
    return fig


# ----------------------------------------------------------------------------- notebook 01
def plot_advantage_bars(rewards, table: dict, title: str = "advantages of one group", ax=None):
    """Grouped bars: one cluster per estimator, one bar per answer coloured by its reward.

    ``rewards`` (G,) and ``table`` {name: (G,) advantages} (see ``advantages.advantage_table``).
    """
    import matplotlib.pyplot as plt

    rewards = [float(x) for x in rewards]
    G, names = len(rewards), list(table)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(8, 1.3 * len(names)), 4))
    lo, hi = min(rewards), max(rewards)
    cmap = plt.get_cmap("viridis")
    width = 0.8 / G
    for i, r in enumerate(rewards):
        colour = cmap(0.5 if hi == lo else (r - lo) / (hi - lo))
        xs = [j + (i - (G - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [float(table[n].reshape(-1)[i]) for n in names], width, color=colour,
               label=f"answer {i}: r={r:g}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right")
    ax.set_ylabel("advantage")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return ax.figure


def plot_vs_theory(x, measured, theory, xlabel: str, ylabel: str, title: str = "", ax=None, logx: bool = True):
    """Measured points with the theory line drawn over them."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(x, theory, "-", color="C1", label="theory")
    ax.plot(x, measured, "o", color="C0", label="simulated")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return ax.figure


def plot_buckets_vs_groups(group_adv, bucket_adv, prompt_of, title: str = "k-means buckets vs prompt groups",
                           ax=None):
    """Scatter of each answer's per-prompt advantage (x) against its k-means-bucket advantage (y)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))
    sc = ax.scatter([float(v) for v in group_adv], [float(v) for v in bucket_adv], c=list(prompt_of),
                    cmap="tab10", s=25)
    ax.axhline(0, color="k", lw=0.6)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlabel("advantage within its prompt's group (z-score)")
    ax.set_ylabel("advantage within its k-means bucket")
    ax.set_title(title)
    ax.figure.colorbar(sc, ax=ax, label="prompt")
    return ax.figure
