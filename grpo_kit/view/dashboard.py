"""The live training dashboard: plotly panels fed by the metric dicts ``train()`` yields.

    from grpo_kit.view.dashboard import Dashboard
    dash = Dashboard(total_steps=cfg.steps, title="GRPO on add2")
    for m in train(cfg, run, should_stop=dash.should_stop):
        dash.update(m, variant="dr_grpo seed 0")
    dash.close()

In JupyterLab it shows plotly ``FigureWidget`` panels (reward mean and spread, held-out accuracy,
KL, entropy, completion length of right and wrong answers, ``frac_reward_zero_std``, clip ratio,
grad norm), a table of the latest step's groups (the first, or each in turn with ``log_completions``) with
reward and advantage colour-coded,
a progress bar and a **Stop** button: ``should_stop()`` turns True, so ``train()`` ends after
the current step (with a checkpoint when it has an output folder) and yields ``stopped=1``.

Headless (papermill, a script, no frontend) nothing is drawn while training; ``close()`` draws
the same panels once with matplotlib and the group table as HTML, so an executed notebook shows
them. ``live=None`` decides by itself (see :func:`frontend_available`); ``live=False`` forces
the static figure, and the environment variable ``GRPO_KIT_DASHBOARD=live|static`` overrides
the automatic choice for every dashboard.

Several runs share the figures: each run gets its own colour from one ordered palette, in the
order runs first appear; the seeds of one variant (``"dr_grpo seed 0"``, ``"dr_grpo seed 1"``)
share their variant's colour and differ by line style (see :class:`RunStyles`). The live figure,
the static figure and :func:`compare_runs` of the same runs use the same colours, and no two runs
get the same colour *and* line style (up to 60 runs). A panel with no data says why in its title.

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
import textwrap
import threading
import time

# tab10 / D3: the colours matplotlib and plotly both default to, in the order runs receive them
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# plotly dash names; a variant's seeds take them in order
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MPL_DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-.",
              "longdash": (0, (9, 3)), "longdashdot": (0, (9, 3, 2, 3))}

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


_SEED = re.compile(r"^(?P<variant>.*?)[\s,;:(]*\bseed[\s=:]*(?P<seed>\d+)\)?\s*$", re.IGNORECASE)


def split_seed(name: str) -> tuple[str, str | None]:
    """A run name's variant and seed: ``"dr_grpo seed 2"`` -> ``("dr_grpo", "2")``; ``"broken"`` ->
    ``("broken", None)``. Runs with the same variant share a colour and differ by line style."""
    m = _SEED.match(name.strip())
    if m and m.group("variant"):
        return m.group("variant"), m.group("seed")
    return name.strip(), None


class RunStyles:
    """(colour, dash) for each run name, assigned in the order the names are first asked for.

    A new variant takes the first palette colour no variant has yet (after all 10, the first
    colour with a dash still free); a run of a variant already seen (another seed) takes its
    variant's colour and the next dash not yet used with that colour. So no two runs share a
    colour and a dash (up to ``len(PALETTE) * len(DASHES)`` = 60 runs; beyond that pairs repeat),
    and a name always keeps the style it first got. One instance serves every figure of a set of
    runs, so the live figure, the static one and a summary figure agree.
    """

    def __init__(self):
        self.styles: dict[str, tuple[str, str]] = {}
        self._variant_colour: dict[str, str] = {}

    def __call__(self, name: str | None) -> tuple[str, str]:
        name = name or "run"
        if name not in self.styles:
            self.styles[name] = self._new(split_seed(name)[0])
        return self.styles[name]

    def colour(self, name: str | None) -> str:
        return self(name)[0]

    def variant_colour(self, variant: str) -> str:
        """The colour of a variant's runs (``"dapo"`` for ``"dapo seed 0"``, ``"dapo seed 1"``), for a
        summary figure that draws the variant's mean over seeds in the colour of its runs."""
        return self._variant_colour.get(variant) or self(variant)[0]

    def _new(self, variant: str) -> tuple[str, str]:
        used = set(self.styles.values())
        colour = self._variant_colour.get(variant)
        if colour is None:
            taken = set(self._variant_colour.values())
            colour = next((c for c in PALETTE if c not in taken), None)
            if colour is None:  # more variants than colours: a colour whose solid line is free, then any dash
                colour = next((c for d in DASHES for c in PALETTE if (c, d) not in used), PALETTE[0])
            self._variant_colour[variant] = colour
        dash = next((d for d in DASHES if (colour, d) not in used), None)
        if dash is None:  # this colour's dashes are spent: the first free pair of any colour
            return next(((c, d) for d in DASHES for c in PALETTE if (c, d) not in used), (colour, DASHES[0]))
        return colour, dash


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
    """What the dashboard keeps of one run: x and y of every numeric metric, its plan, its end."""

    def __init__(self):
        self.points: dict[str, tuple[list, list]] = {}
        self.last_step = 0
        self.stopped = False
        self.total: int | None = None   # the steps the run will take (its config's), when known
        self.budget: int | None = None  # its completion budget, when it has one
        self.spent = 0                  # completions generated so far
        self.cfg = None                 # its config (a GRPOConfig or a dict), to say why a panel is empty

    def add(self, key: str, step, value) -> None:
        v = _num(value)
        if v is not None:
            xs, ys = self.points.setdefault(key, ([], []))
            xs.append(step)
            ys.append(v)

    def get(self, key: str) -> tuple[list, list]:
        return self.points.get(key, ([], []))

    def plan(self, cfg) -> None:
        """Take the step count and the completion budget from the run's config."""
        self.cfg = cfg
        steps, budget = _field(cfg, "steps"), _field(cfg, "completion_budget")
        self.budget = int(budget) if budget else None
        self.total = None if self.budget else (int(steps) if steps else None)


def _field(cfg, name: str):
    """A field of a GRPOConfig or of a config dict; None when absent."""
    return cfg.get(name) if isinstance(cfg, dict) else getattr(cfg, name, None)


def panel_lines(panel: str) -> list[tuple[str, str]]:
    """(metric key, line name) drawn in a panel: a dashboard panel's lines, or one metric by its key."""
    return LINES.get(panel, [(panel, panel)])


def panel_title(panel: str) -> str:
    return dict(PANELS).get(panel, panel)


def empty_reason(panel: str, series: list[_Series]) -> str | None:
    """Why ``panel`` shows nothing useful for these runs (None when it shows data that varies):
    ``"not logged (log_kl: false, beta: 0)"``, ``"0 at every step (one update per batch: ..."``."""
    values = [v for s in series for key, _ in panel_lines(panel) for v in s.get(key)[1]]
    cfgs = [s.cfg for s in series if s.cfg is not None]

    def every(name, test):
        return bool(cfgs) and all(test(_field(c, name)) for c in cfgs)

    if not values:
        if panel == "kl" and every("beta", lambda b: not b) and every("log_kl", lambda x: not x):
            return "not logged (log_kl: false, beta: 0)"
        if panel == "accuracy" and every("eval_every", lambda e: not e):
            return "not logged (eval_every: 0)"
        if panel == "length":
            return "not logged (no correctness judge tells right from wrong)"
        return "not logged in these runs"
    if panel == "clip_ratio" and all(v == 0 for v in values):
        if every("num_iterations", lambda n: n in (None, 1)):
            return "0 at every step (one update per batch: the ratio is 1, nothing to clip)"
        return "0 at every step"
    return None


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


def groups_of(rows: list[dict]) -> list[dict]:
    """``completions.jsonl`` rows of one step (:func:`metrics.completion_rows`) -> one ``samples`` dict per
    group, in group order: {"prompt", "completions", "rewards", "advantages"} (what the table shows)."""
    out: dict[int, dict] = {}
    for r in rows:
        g = out.setdefault(r["group"], {"prompt": r["prompt"], "completions": [], "rewards": [], "advantages": []})
        g["completions"].append(r["completion"])
        g["rewards"].append(r.get("reward"))
        g["advantages"].append(r.get("advantage"))
    return [out[k] for k in sorted(out)]


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
    ``styles``: a :class:`RunStyles` to share with other figures of the same runs (default: a new one;
    ``dash.styles`` is the one to pass to :func:`compare_runs` for a summary figure in the same colours).
    """

    def __init__(self, total_steps: int, title: str = "GRPO training", live: bool | None = None,
                 min_interval_s: float = 1.0, height: int = 540, width: int | None = 1000,
                 styles: RunStyles | None = None):
        self.total_steps, self.title, self.min_interval_s = int(total_steps), title, min_interval_s
        self.height, self.width = height, width
        self.live = frontend_available() if live is None else bool(live)
        self.series: dict[str, _Series] = {}
        self.styles = styles if styles is not None else RunStyles()
        self.marks: list[tuple[float, str, str | None]] = []
        self.samples, self.samples_step, self.samples_variant = None, None, None
        self.groups: list[dict] = []  # every group of the latest step (cfg.log_completions), else its first
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
        """Add one metric dict from ``train()``. ``run`` (optional): the first time a variant is seen, its
        step-0 held-out accuracy (``run.evals[0]``) is added to the accuracy panel, and its config tells the
        steps it will take (or its completion budget) and why a panel stays empty. Findings of
        ``train()``'s live diagnostics (``m["findings"]``) are marked on every panel at their step."""
        t0 = time.perf_counter()
        name = variant or "run"
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = _Series()
            self.styles(name)
            evals = getattr(run, "evals", None)
            if evals:
                s.add("accuracy", evals[0][0], evals[0][1])
            if getattr(run, "cfg", None) is not None:
                s.plan(run.cfg)
        self.current = name
        step = m.get("step", s.last_step + 1)
        s.last_step = step
        for key, value in m.items():
            if isinstance(value, (int, float)) and key != "step":
                s.add(key, step, value)
        s.spent = int(m.get("completions_total", s.spent) or 0)
        if m.get("stopped"):
            s.stopped = True
        if m.get("samples"):
            self.samples, self.samples_step, self.samples_variant = m["samples"], step, name
            self.groups = groups_of(m["groups"]) if m.get("groups") else [m["samples"]]
        for f in m.get("findings", []):  # the live diagnostics of train(): a marker where each finding starts
            self.marks.append((f["step"], f["kind"], name))
        self._dirty = True
        if self.live:
            self._show_button()
            now = time.perf_counter()
            if (now - self._last_draw >= self.min_interval_s or "accuracy" in m or m.get("stopped")
                    or step >= (s.total or self.total_steps)):
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
                more = (f"<br><i>{len(self.groups)} groups logged at this step; completions.jsonl in the run "
                        f"folder holds every one</i>" if len(self.groups) > 1 else "")
                display(HTML(self.progress_text() + "<br>" + group_table_html(
                    self.samples, self.samples_step, self.samples_variant) + more))
                plt.close(fig)
        except ImportError:
            pass
        self.fig = fig
        return fig

    # ------------------------------------------------------------------ text
    def progress_text(self) -> str:
        """Where the current run is: its step of the steps it will take, or the completions it spent
        of its budget; a finished run says after how many steps."""
        s = self.series.get(self.current) if self.current else None
        if s is None:
            return f"{self.title}: waiting for the first step of {self.total_steps}"
        done = len(self.series)
        who = html.escape(self.current) + (f" (run {done})" if done > 1 else "")
        total = s.total or self.total_steps
        spend = ""
        if s.budget:  # the steps a budget buys at the rate spent so far (a replay or dynamic run takes more)
            total = max(s.last_step, math.ceil(s.budget * s.last_step / s.spent)) if s.spent else total
            spend = f" ({s.spent:,} of {s.budget:,} completions)"
        if s.stopped:
            return f"{who}: stopped at step {s.last_step} of {total}{spend}"
        if self._closed or (not s.budget and s.last_step >= total):
            return f"{who}: finished after {s.last_step} steps" + (f" ({s.spent:,} completions)" if s.budget else "")
        return f"{who}: step {s.last_step} of {total}{spend}"

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
        # pages through the latest step's groups (all of them with log_completions, else the first)
        self.group_picker = w.BoundedIntText(value=0, min=0, max=0, description="group", layout=w.Layout(width="160px"))
        self.group_picker.observe(lambda _change: self._show_group(), names="value")
        self.box = w.VBox([w.HBox([self.stop_button, self.progress, self.progress_label]), self.fig,
                           self.group_picker, self.table])
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
        colour, dash = self.styles(variant)
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
                    colour = self.styles.colour(variant) if variant else "#444444"
                    for k in range(1, len(PANELS) + 1):
                        ax = "" if k == 1 else str(k)
                        shapes.append(dict(type="line", x0=step, x1=step, y0=0, y1=1, xref=f"x{ax}",
                                           yref=f"y{ax} domain", line=dict(color=colour, dash="dot", width=1)))
                    notes.append(dict(x=step, y=1, xref="x", yref="y domain", text=label, showarrow=False,
                                      textangle=-90, xanchor="right", yanchor="top", font=dict(size=9, color=colour)))
                self.fig.layout.shapes, self.fig.layout.annotations = shapes, notes
                self._shapes_drawn = len(self.marks)
        series = list(self.series.values())
        for i, (panel, title) in enumerate(PANELS):  # a panel that stays empty says why
            note = empty_reason(panel, series) if any(len(x.get("reward")[0]) >= 2 for x in series) else None
            text = f"{title}: {note}" if note else title
            if self.fig.layout.annotations[i].text != text:
                self.fig.layout.annotations[i].text = text
        s = self.series.get(self.current)
        if s is not None:
            if s.budget:
                self.progress.max, self.progress.value = s.budget, min(s.spent, s.budget)
            else:
                self.progress.max = max(s.total or self.total_steps, 1)
                self.progress.value = min(s.last_step, self.progress.max)
            ended = s.stopped or self._closed or (not s.budget and s.last_step >= (s.total or self.total_steps))
            self.progress.bar_style = "warning" if s.stopped else ("success" if ended else "")
        self.progress_label.value = self.progress_text()
        self.group_picker.max = max(len(self.groups) - 1, 0)
        self._show_group()

    def _show_group(self) -> None:
        """The table shows the picked group of the latest step."""
        k = min(self.group_picker.value, max(len(self.groups) - 1, 0))
        shown = self.groups[k] if self.groups else self.samples
        head = f"group {k} of {len(self.groups)}: " if len(self.groups) > 1 else ""
        self.table.value = head + group_table_html(shown, self.samples_step, self.samples_variant)

    # ------------------------------------------------------------------ static figure
    def static_figure(self, keys=None):
        """The same panels with matplotlib (what ``close()`` shows headless); ``keys``: other panels
        (dashboard panel names or metric keys, see :func:`compare_runs`)."""
        title = f"{self.title} — {re.sub('<[^>]+>', '', self.progress_text())}"
        return draw_panels(self.series, self.styles, keys, self.marks, title)


def draw_panels(series: dict[str, _Series], styles: RunStyles, keys=None, marks=(), title: str = "",
                smooth: int = 1):
    """A matplotlib figure with one panel per key (default: the dashboard's eight), one line per run in
    its :class:`RunStyles` colour and dash, one legend entry per run, and a title that says why a panel
    is empty. ``marks``: (step, label, run name) drawn as dotted lines in the run's colour; ``smooth``:
    a trailing mean over that many points (accuracy is never smoothed)."""
    import matplotlib.pyplot as plt

    from grpo_kit.view.plotting import smooth as trailing_mean

    panels = list(keys) if keys is not None else [p for p, _ in PANELS]
    cols = min(COLS, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.25 * rows), constrained_layout=True, squeeze=False)
    for name in series:
        styles(name)  # every run has its style before any is drawn: the order of the runs decides
    for ax, panel in zip(axes.flat, panels):
        note = empty_reason(panel, list(series.values()))
        head = f"{panel_title(panel)}: {note}" if note else panel_title(panel)
        ax.set_title(textwrap.fill(head, 48), fontsize=9)
        if not any(s.get(key)[0] for s in series.values() for key, _ in panel_lines(panel)):
            ax.set_xticks([])
            ax.set_yticks([])  # nothing to draw: the title says why
            continue
        for v, s in series.items():
            colour, dash = styles(v)
            ls = MPL_DASHES[dash]
            if panel == "reward" and s.get("reward_std")[0]:
                (xl, yl), (_, yh) = _band(s)
                ax.fill_between(xl, yl, yh, color=colour, alpha=0.18, lw=0)
            for key, line in panel_lines(panel):
                x, y = s.get(key)
                if not x:
                    continue
                wrong = line == "wrong"
                y = y if smooth <= 1 or panel == "accuracy" else trailing_mean(y, smooth)
                ax.plot(x, y, linestyle=ls, color=colour, lw=1.2 if wrong else 1.8, alpha=0.55 if wrong else 1.0,
                        marker="o" if panel == "accuracy" else None, ms=3,
                        label=f"{v} ({line})" if panel == "length" else v)
        for step, label, variant in marks:
            ax.axvline(step, color=styles.colour(variant) if variant else "#444", ls=":", lw=1)
            if panel == panels[0]:
                ax.annotate(label, (step, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                            va="top", ha="right")
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            lab = lab.replace(" (right)", "")
            if lab not in labels and "(wrong)" not in lab:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def _history_of(run) -> tuple[list[dict], dict | None, list]:
    """(metric rows, config dict or None, evals) of a history list, a ``Run``, or a run folder."""
    from pathlib import Path

    if isinstance(run, (str, Path)):
        import json

        import yaml

        folder = Path(run).expanduser()
        hist_file = folder / "history.jsonl"
        if not hist_file.is_file():
            raise FileNotFoundError(f"{folder} has no history.jsonl; pass a run folder written by grpo-kit "
                                    f"or the run's list of metric rows")
        rows = [json.loads(line) for line in hist_file.read_text().splitlines() if line.strip()]
        cfg_file = folder / "config.yaml"
        cfg = yaml.safe_load(cfg_file.read_text()) if cfg_file.is_file() else None
        return rows, cfg if isinstance(cfg, dict) else None, []
    if hasattr(run, "history"):
        return list(run.history), getattr(run, "cfg", None), list(getattr(run, "evals", []) or [])
    return list(run), None, []


def compare_runs(runs: dict, keys=None, styles: RunStyles | None = None, title: str = "", smooth: int = 1,
                 marks=()):
    """One matplotlib figure of several runs, side by side: ``runs`` maps a run's name to its history
    (a list of metric rows), a ``Run`` or its run folder; ``keys`` are the panels (dashboard panel
    names such as ``"reward"`` or ``"length"``, or any metric key such as ``"completions/distinct_frac"``;
    default the dashboard's eight). Colours and line styles follow :class:`RunStyles` in the order of
    ``runs`` (pass a dashboard's ``dash.styles`` to draw its runs in the same colours). ``smooth``: a
    trailing mean over that many steps; ``marks``: (step, label, run name) tuples, e.g. where a
    diagnostic finding starts. Returns the figure."""
    styles = styles if styles is not None else RunStyles()
    series: dict[str, _Series] = {}
    for name, run in runs.items():
        rows, cfg, evals = _history_of(run)
        s = series[str(name)] = _Series()
        if cfg is not None:
            s.plan(cfg)
        for st, acc in evals[:1]:
            s.add("accuracy", st, acc)
        for i, m in enumerate(rows):
            step = m.get("step", i + 1)
            for key, value in m.items():
                if isinstance(value, (int, float)) and key != "step":
                    s.add(key, step, value)
    return draw_panels(series, styles, keys, marks, title=title, smooth=smooth)


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
