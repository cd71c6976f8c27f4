"""The live training dashboard: plotly panels fed by the metric dicts ``train()`` yields.

    from grpo_kit.dashboard import Dashboard
    dash = Dashboard(total_steps=cfg.steps, title="GRPO on add2")
    for m in train(cfg, run, should_stop=dash.should_stop):
        dash.update(m, variant="dr_grpo seed 0")
    dash.close()

In JupyterLab it shows plotly ``FigureWidget`` panels (reward mean and spread, held-out accuracy,
KL, entropy, completion length of right and wrong answers, ``frac_reward_zero_std``, clip ratio,
grad norm), a table of the latest group's completions with reward and advantage colour-coded,
a progress bar and a **Stop** button: ``should_stop()`` turns True, so ``train()`` ends after
the current step (with a checkpoint when it has an output folder) and yields ``stopped=1``.

Headless (papermill, a script, no frontend) nothing is drawn while training; ``close()`` draws
the same panels once with matplotlib and the group table as HTML, so an executed notebook shows
them. ``live=None`` decides by itself (see :func:`frontend_available`); ``live=False`` forces
the static figure, and the environment variable ``GRPO_KIT_DASHBOARD=live|static`` overrides
the automatic choice for every dashboard.

Several runs share the figures: each ``variant`` gets its colour from a fixed palette keyed by
its first word (``"dr_grpo seed 1"`` -> ``dr_grpo``), the same in every notebook, and a line
style from its last number (the seed), see :func:`variant_style`.

Redraws are throttled (at most one every ``min_interval_s``, default 1 s, plus one at each eval
and at the end) inside ``fig.batch_update()``, so the dashboard costs a few percent of a step at
most; ``benchmarks/dashboard_overhead.py`` measures it. Nothing in the training code imports
this module: it only reads metric dicts.
"""
from __future__ import annotations

import html
import math
import os
import re
import threading
import time
import zlib

# tab10 / D3: the colours matplotlib and plotly both default to
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# fixed colour per variant family (first word of the variant name); others hash into the palette
FAMILY_COLOUR = {
    "grpo": 0, "group": 0, "dr_grpo": 1, "none": 1, "dapo": 2, "bnpo": 3, "rloo": 4, "rank": 5,
    "pairwise": 6, "kmeans": 7, "batch": 8, "topk": 9,
}
DASHES = ("solid", "dash", "dot", "dashdot")          # plotly names, by the variant's last number
MPL_DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-."}

# (panel key, title); the order is the grid order (2 rows x 4 columns)
PANELS = (
    ("reward", "reward (mean, band = ±1 std)"),
    ("accuracy", "held-out greedy accuracy"),
    ("kl", "KL to reference"),
    ("entropy", "token entropy"),
    ("length", "completion length: right (thick) / wrong (thin)"),
    ("frac_reward_zero_std", "groups with zero reward spread"),
    ("clip_ratio", "clip ratio (low + high)"),
    ("grad_norm", "grad norm"),
)
# panel -> (metric key, line name); the reward band comes from reward_std
LINES = {
    "reward": [("reward", "mean")],
    "accuracy": [("accuracy", "accuracy")],
    "kl": [("kl", "kl")],
    "entropy": [("entropy", "entropy")],
    "length": [("completions/mean_length_right", "right"), ("completions/mean_length_wrong", "wrong")],
    "frac_reward_zero_std": [("frac_reward_zero_std", "frac")],
    "clip_ratio": [("clip_ratio/region_mean", "clip")],
    "grad_norm": [("grad_norm", "grad norm")],
}
ROWS, COLS = 2, 4
# Test hook: with GRPO_KIT_DASHBOARD_STEP_DELAY=<seconds> in the kernel's environment every update()
# waits that long or until Stop is pressed, so the browser test can press Stop in the middle of a
# short smoke run even when a loaded machine draws the kernel's updates seconds late. Never set it
# for real training.
STEP_DELAY_ENV = "GRPO_KIT_DASHBOARD_STEP_DELAY"


def variant_family(variant: str | None) -> str:
    """The first word of a variant's name, lower case: ``"Dr_GRPO seed 2"`` -> ``"dr_grpo"``."""
    words = re.split(r"[\s(),:;/]+", (variant or "run").strip())
    return next((w for w in words if w), "run").lower()


def variant_colour(variant: str | None) -> str:
    """A colour that depends only on the variant's family, so it is the same in every notebook."""
    fam = variant_family(variant)
    idx = FAMILY_COLOUR.get(fam, zlib.crc32(fam.encode()) % len(PALETTE))
    return PALETTE[idx]


def variant_style(variant: str | None) -> tuple[str, str]:
    """(colour, plotly dash) of a variant: colour by family; dash by its last number (the seed), else by
    the rest of its name (never solid, so it differs from the bare family name), else solid."""
    rest = (re.split(r"[\s(),:;/]+", (variant or "").strip(), maxsplit=1)[1:] or [""])[0]  # after the first word
    nums = re.findall(r"\d+", rest)
    if nums:
        return variant_colour(variant), DASHES[int(nums[-1]) % len(DASHES)]
    # "grpo same-answers" vs "grpo same-updates": one colour, a dash fixed by the rest of the name
    return variant_colour(variant), DASHES[1 + zlib.crc32(rest.lower().encode()) % (len(DASHES) - 1)] if rest else "solid"


def frontend_available() -> bool:
    """Is there a notebook frontend that renders widgets?

    ``GRPO_KIT_DASHBOARD=live|static`` decides when set. Otherwise: True inside an IPython kernel
    started by a Jupyter server (JupyterLab / Notebook set ``JPY_SESSION_NAME`` for their kernels)
    or by VS Code; False in papermill / nbclient (they start the kernel themselves), in a script
    and in a terminal IPython.
    """
    forced = os.environ.get("GRPO_KIT_DASHBOARD", "").strip().lower()
    if forced in ("live", "static"):
        return forced == "live"
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None or getattr(ip, "kernel", None) is None:
        return False
    return bool(os.environ.get("JPY_SESSION_NAME") or os.environ.get("VSCODE_PID"))


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


class _Series:
    """What the dashboard keeps of one variant: x and y per metric key, the latest group."""

    def __init__(self):
        self.points: dict[str, tuple[list, list]] = {}
        self.last_step = 0
        self.stopped = False

    def add(self, key: str, step, value) -> None:
        v = _num(value)
        if v is not None:
            xs, ys = self.points.setdefault(key, ([], []))
            xs.append(step)
            ys.append(v)

    def get(self, key: str) -> tuple[list, list]:
        return self.points.get(key, ([], []))


def _cell_colour(value, lo: float, hi: float, diverging: bool) -> str:
    """Background colour of a table cell: green for high rewards; blue (+) / red (-) advantages."""
    if value is None:
        return "#eeeeee"
    if diverging:
        t = max(-1.0, min(1.0, value / max(abs(lo), abs(hi), 1e-9)))  # in [-1, 1]
        rgb = (255 - 155 * t, 255 - 100 * t, 255) if t >= 0 else (255, 255 + 155 * t, 255 + 155 * t)
    else:  # 0 white, the larger of 1 and the highest reward full green
        lo, hi = min(lo, 0.0), max(hi, 1.0)
        t = max(0.0, min(1.0, (value - lo) / (hi - lo)))  # in [0, 1]
        rgb = (255 - 120 * t, 255, 255 - 120 * t)
    return "#%02x%02x%02x" % tuple(int(c) for c in rgb)


def group_table_html(samples: dict | None, step=None, variant: str | None = None) -> str:
    """An HTML table of one group: completion, reward (green = high), advantage (blue +, red -)."""
    if not samples:
        return "<i>no group yet</i>"
    rewards = [_num(r) for r in samples.get("rewards", [])]
    advs = [_num(a) for a in samples.get("advantages", [])]
    rs = [r for r in rewards if r is not None] or [0.0]
    av = [a for a in advs if a is not None] or [0.0]
    head = f"step {step}" + (f", {html.escape(variant)}" if variant else "")
    rows = []
    for i, c in enumerate(samples.get("completions", [])):
        r = rewards[i] if i < len(rewards) else None
        a = advs[i] if i < len(advs) else None
        rows.append(
            f"<tr><td>{i}</td><td style='font-family:monospace;text-align:left'>{html.escape(repr(c))}</td>"
            f"<td style='background:{_cell_colour(r, min(rs), max(rs), False)}'>{'—' if r is None else f'{r:.3g}'}</td>"
            f"<td style='background:{_cell_colour(a, min(av), max(av), True)}'>{'—' if a is None else f'{a:+.3f}'}</td></tr>")
    return (f"<div class='grpo-kit-group'><b>latest group</b> ({head}): prompt "
            f"<code>{html.escape(repr(samples.get('prompt', '')))}</code>"
            "<table style='border-collapse:collapse;font-size:12px'>"
            "<tr><th>#</th><th>completion</th><th>reward</th><th>advantage</th></tr>"
            + "".join(rows) + "</table></div>")


class Dashboard:
    """Live panels for one or more training runs; see the module docstring.

    ``total_steps``: steps of one run (the progress bar). ``live``: None = auto
    (:func:`frontend_available`), True = widgets, False = one static image at ``close()``.
    ``min_interval_s``: the shortest time between two redraws of the live figures.
    ``height``/``width``: of the live figure in pixels (``width=None``: plotly's default).
    """

    def __init__(self, total_steps: int, title: str = "GRPO training", live: bool | None = None,
                 min_interval_s: float = 1.0, height: int = 540, width: int | None = 1000):
        self.total_steps, self.title, self.min_interval_s = int(total_steps), title, min_interval_s
        self.height, self.width = height, width
        self.live = frontend_available() if live is None else bool(live)
        self.series: dict[str, _Series] = {}
        self.marks: list[tuple[float, str, str | None]] = []
        self.samples, self.samples_step, self.samples_variant = None, None, None
        self.current: str | None = None
        self.overhead_s = 0.0          # time spent inside update() and redraws
        self.redraws = 0
        self._stop = threading.Event()
        self._last_draw = -math.inf
        self._dirty = False
        self._closed = False
        self._t_start = time.perf_counter()
        self.fig = self.stop_button = None
        self._traces: dict[tuple[str, str, str], int] = {}   # (variant, panel, line) -> trace index
        self._shapes_drawn = 0
        if self.live:
            try:
                self._build_widgets()
            except ImportError as e:  # plotly's FigureWidget needs anywidget
                print(f"grpo-kit dashboard: live widgets unavailable ({e}); drawing a static figure at close()")
                self.live = False

    # ------------------------------------------------------------------ control
    def should_stop(self) -> bool:
        """Pass as ``train(..., should_stop=dash.should_stop)``: True once Stop was pressed."""
        return self._stop.is_set()

    def request_stop(self) -> None:
        """What the Stop button does: the run ends after the current step."""
        self._stop.set()
        self._show_button()

    def _show_button(self) -> None:
        """Stop / stopping… / stopped / finished. Main thread only (a click that arrives while a cell
        runs only sets the event, in the kernel's shell-channel thread; the next update shows it)."""
        if self.stop_button is None:
            return
        stop = self._stop.is_set()
        ended = self._closed or (self.current in self.series and self.series[self.current].stopped)  # the run said so
        text = ("stopped" if stop else "finished") if ended else ("stopping…" if stop else "Stop")
        if self.stop_button.description != text:
            self.stop_button.description, self.stop_button.disabled = text, text != "Stop"

    @property
    def stopped(self) -> bool:
        """True once Stop was pressed (every later ``train(should_stop=...)`` also ends after a step)."""
        return self._stop.is_set()

    # ------------------------------------------------------------------ data in
    def update(self, m: dict, variant: str | None = None, run=None) -> None:
        """Add one metric dict from ``train()``. ``run`` (optional): its step-0 held-out accuracy
        (``run.evals[0]``) is added to the accuracy panel the first time a variant is seen. Findings of
        ``train()``'s live diagnostics (``m["findings"]``) are marked on every panel at their step."""
        t0 = time.perf_counter()
        name = variant or "run"
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = _Series()
            evals = getattr(run, "evals", None)
            if evals:
                s.add("accuracy", evals[0][0], evals[0][1])
        self.current = name
        step = m.get("step", s.last_step + 1)
        s.last_step = step
        for keys in LINES.values():
            for key, _ in keys:
                if key in m:
                    s.add(key, step, m[key])
        if "reward_std" in m:
            s.add("reward_std", step, m["reward_std"])
        if m.get("stopped"):
            s.stopped = True
        if m.get("samples"):
            self.samples, self.samples_step, self.samples_variant = m["samples"], step, name
        for f in m.get("findings", []):  # the live diagnostics of train(): a marker where each finding starts
            self.marks.append((f["step"], f["kind"], name))
        self._dirty = True
        if self.live:
            self._show_button()
            now = time.perf_counter()
            if (now - self._last_draw >= self.min_interval_s or "accuracy" in m or m.get("stopped")
                    or step >= self.total_steps):
                self._redraw()
                self._last_draw = time.perf_counter()
        self.overhead_s += time.perf_counter() - t0
        if STEP_DELAY_ENV in os.environ:  # test hook, see STEP_DELAY_ENV
            self._stop.wait(float(os.environ[STEP_DELAY_ENV]))

    def mark(self, step, label: str, variant: str | None = None) -> None:
        """A vertical marker at ``step`` on every panel (e.g. a diagnostic finding), in the variant's colour."""
        self.marks.append((step, str(label), variant))
        self._dirty = True
        if self.live:
            self._redraw()

    def close(self):
        """Final redraw (live) or the static matplotlib figure and group table (headless). Returns
        the matplotlib figure when static, else the FigureWidget."""
        if self._closed:
            return self.fig
        self._closed = True
        if self.live:
            self._redraw()
            self._show_button()
            return self.fig
        fig = self.static_figure()
        try:
            from IPython import get_ipython
            from IPython.display import HTML, display
            if get_ipython() is not None:
                import matplotlib.pyplot as plt
                display(fig)
                display(HTML(self.progress_text() + "<br>" + group_table_html(
                    self.samples, self.samples_step, self.samples_variant)))
                plt.close(fig)
        except ImportError:
            pass
        self.fig = fig
        return fig

    # ------------------------------------------------------------------ text
    def progress_text(self) -> str:
        s = self.series.get(self.current) if self.current else None
        if s is None:
            return f"{self.title}: waiting for the first step of {self.total_steps}"
        done = len(self.series)
        who = html.escape(self.current) + (f" (run {done})" if done > 1 else "")
        if s.stopped:
            return f"{who}: stopped at step {s.last_step} of {self.total_steps}"
        if self._closed or s.last_step >= self.total_steps:
            return f"{who}: finished, {s.last_step} of {self.total_steps} steps"
        return f"{who}: step {s.last_step} of {self.total_steps}"

    # ------------------------------------------------------------------ live widgets
    def _build_widgets(self) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go
        from IPython.display import display
        from plotly.subplots import make_subplots

        base = make_subplots(rows=ROWS, cols=COLS, subplot_titles=[t for _, t in PANELS],
                             horizontal_spacing=0.06, vertical_spacing=0.16)
        base.update_annotations(font_size=12)  # the subplot titles
        base.update_layout(height=self.height, width=self.width, margin=dict(l=40, r=20, t=70, b=40), title=self.title,
                           legend=dict(orientation="h", y=-0.12), template="plotly_white")
        self.fig = go.FigureWidget(base)  # ImportError without anywidget
        self.progress = w.IntProgress(value=0, min=0, max=max(self.total_steps, 1), description="steps")
        self.progress_label = w.HTML(self.progress_text())
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop",
                                    tooltip="end the run after the current step (with a checkpoint if it has an output folder)")
        self.stop_button.on_click(lambda _b: self.request_stop())
        self.table = w.HTML(group_table_html(None))
        self.box = w.VBox([w.HBox([self.stop_button, self.progress, self.progress_label]), self.fig, self.table])
        self.box.add_class("grpo-kit-dashboard")
        _stop_on_arrival(self.stop_button, self._stop)
        from IPython import get_ipython
        if get_ipython() is not None:
            display(self.box)

    def _trace(self, variant: str, panel: str, line: str) -> int:
        key = (variant, panel, line)
        if key in self._traces:
            return self._traces[key]
        import plotly.graph_objects as go

        i = [p for p, _ in PANELS].index(panel)
        row, col = i // COLS + 1, i % COLS + 1
        colour, dash = variant_style(variant)
        first = not any(k[0] == variant for k in self._traces)
        common = dict(x=[], y=[], legendgroup=variant, name=variant, showlegend=False)
        if line == "band":  # upper and lower edge of mean ± std, filled between
            self.fig.add_trace(go.Scatter(mode="lines", line=dict(width=0, color=colour), hoverinfo="skip", **common),
                               row=row, col=col)
            self.fig.add_trace(go.Scatter(mode="lines", line=dict(width=0, color=colour), fill="tonexty", fillcolor=_rgba(colour, 0.18),
                                          hoverinfo="skip", **common), row=row, col=col)
            self._traces[key] = len(self.fig.data) - 2
            return self._traces[key]
        wrong = line == "wrong"
        common.update(showlegend=first, name=variant if line != "wrong" else f"{variant} (wrong)")
        self.fig.add_trace(go.Scatter(mode="lines+markers" if panel == "accuracy" else "lines",
                                      line=dict(color=colour, dash=dash, width=1.2 if wrong else 2),
                                      opacity=0.55 if wrong else 1.0, **common), row=row, col=col)
        self._traces[key] = len(self.fig.data) - 1
        return self._traces[key]

    def _redraw(self) -> None:
        if not self._dirty or self.fig is None:
            return
        self._dirty = False
        self.redraws += 1
        # create traces first (adding traces cannot happen inside batch_update)
        for v, s in self.series.items():
            for panel, lines in LINES.items():
                for key, line in lines:
                    if s.get(key)[0]:
                        self._trace(v, panel, line)
            if s.get("reward_std")[0]:
                self._trace(v, "reward", "band")
        with self.fig.batch_update():
            for v, s in self.series.items():
                for panel, lines in LINES.items():
                    for key, line in lines:
                        if (v, panel, line) in self._traces:
                            t = self.fig.data[self._traces[(v, panel, line)]]
                            t.x, t.y = s.get(key)
                if (v, "reward", "band") in self._traces:
                    lo, hi = _band(s)
                    i = self._traces[(v, "reward", "band")]
                    self.fig.data[i].x, self.fig.data[i].y = hi
                    self.fig.data[i + 1].x, self.fig.data[i + 1].y = lo
            if len(self.marks) != self._shapes_drawn:
                shapes, notes = list(self.fig.layout.shapes), list(self.fig.layout.annotations)
                for step, label, variant in self.marks[self._shapes_drawn:]:
                    colour = variant_colour(variant) if variant else "#444444"
                    for k in range(1, len(PANELS) + 1):
                        ax = "" if k == 1 else str(k)
                        shapes.append(dict(type="line", x0=step, x1=step, y0=0, y1=1, xref=f"x{ax}",
                                           yref=f"y{ax} domain", line=dict(color=colour, dash="dot", width=1)))
                    notes.append(dict(x=step, y=1, xref="x", yref="y domain", text=label, showarrow=False,
                                      textangle=-90, xanchor="right", yanchor="top", font=dict(size=9, color=colour)))
                self.fig.layout.shapes, self.fig.layout.annotations = shapes, notes
                self._shapes_drawn = len(self.marks)
        s = self.series.get(self.current)
        if s is not None:
            self.progress.value = min(s.last_step, self.progress.max)
            self.progress.bar_style = "warning" if s.stopped else ("success" if s.last_step >= self.total_steps else "")
        self.progress_label.value = self.progress_text()
        self.table.value = group_table_html(self.samples, self.samples_step, self.samples_variant)

    # ------------------------------------------------------------------ static figure
    def static_figure(self):
        """The same panels with matplotlib (what ``close()`` shows headless)."""
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(ROWS, COLS, figsize=(16, 6.5), constrained_layout=True)
        for ax, (panel, title) in zip(axes.flat, PANELS):
            for v, s in self.series.items():
                colour, dash = variant_style(v)
                ls = MPL_DASHES[dash]
                if panel == "reward" and s.get("reward_std")[0]:
                    (xl, yl), (_, yh) = _band(s)
                    ax.fill_between(xl, yl, yh, color=colour, alpha=0.18, lw=0)
                for key, line in LINES[panel]:
                    x, y = s.get(key)
                    if not x:
                        continue
                    wrong = line == "wrong"
                    ax.plot(x, y, ls, color=colour, lw=1.2 if wrong else 1.8, alpha=0.55 if wrong else 1.0,
                            marker="o" if panel == "accuracy" else None, ms=3,
                            label=f"{v} ({line})" if panel == "length" else v)
            for step, label, variant in self.marks:
                ax.axvline(step, color=variant_colour(variant) if variant else "#444", ls=":", lw=1)
                if panel == PANELS[0][0]:
                    ax.annotate(label, (step, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                                va="top", ha="right")
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("step", fontsize=8)
            ax.grid(alpha=0.3)
        handles, labels = [], []
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels and "(wrong)" not in lab:
                    handles.append(h)
                    labels.append(lab.replace(" (right)", ""))
        if handles:
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8,
                       bbox_to_anchor=(0.5, -0.06))
        fig.suptitle(f"{self.title} — {re.sub('<[^>]+>', '', self.progress_text())}")
        return fig


def _band(s: _Series) -> tuple[tuple[list, list], tuple[list, list]]:
    """(x, mean - std), (x, mean + std) at the steps that have both."""
    mean = dict(zip(*s.get("reward")))
    xs = [x for x in s.get("reward_std")[0] if x in mean]
    std = dict(zip(*s.get("reward_std")))
    return (xs, [mean[x] - std[x] for x in xs]), (xs, [mean[x] + std[x] for x in xs])


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _stop_on_arrival(button, event: threading.Event) -> None:
    """Make a click on ``button`` set ``event`` as soon as the kernel receives it.

    A click is a comm message; the kernel handles it only when the main thread is free, which
    it is not while a cell runs ``for m in train(...)``. ipykernel 7 routes every comm message
    in its shell-channel thread first, asking the comm which subshell should handle it
    (``Comm._reply_subshell_for``); wrapping that method lets the click set the event right
    there, while the training cell still runs. On kernels without that hook the button works
    through ``on_click`` once the cell is idle (e.g. training in a thread or between runs).
    """
    comm = getattr(button, "comm", None)
    route = getattr(comm, "_reply_subshell_for", None)
    if route is None:
        return

    def on_arrival(data, default, _route=route):
        content = data.get("content") if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get("method") == "custom" and isinstance(content, dict) \
                and content.get("event") == "click":
            event.set()
        return _route(data, default)

    comm._reply_subshell_for = on_arrival
