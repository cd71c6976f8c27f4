"""The live dashboard: traces follow the metric dicts, Stop ends a run with a checkpoint, the
headless figure is an image, a variant's colour is fixed. Plus the metrics it reads."""
import io
import json
import math

import pytest
import torch

from grpo_kit.core.metrics import correct_mask, group_samples, length_metrics
from grpo_kit.view import dashboard as D
from grpo_kit.view.dashboard import Dashboard, RunStyles, compare_runs, split_seed


def scripted(step, reward, std, **extra):
    m = {"step": step, "reward": reward, "reward_std": std, "kl": 0.01 * step, "entropy": 1.0 - 0.1 * step,
         "completions/mean_length_right": 3.0, "completions/mean_length_wrong": 5.0 + step,
         "frac_reward_zero_std": 0.5, "clip_ratio/region_mean": 0.0, "grad_norm": 1.0,
         "samples": {"prompt": "12+34=", "completions": ["64", "46", "x<"], "rewards": [0.0, 1.0, None],
                     "advantages": [-0.5, 1.0, 0.0]}}
    m.update(extra)
    return m


def trace(dash, variant, panel, line):
    return dash.fig.data[dash._traces[(variant, panel, line)]]


def test_updates_change_the_figurewidget_traces():
    pytest.importorskip("anywidget")
    dash = Dashboard(total_steps=3, live=True, min_interval_s=0.0)
    assert len(dash.fig.data) == 0
    dash.update(scripted(1, 0.25, 0.5), variant="dr_grpo seed 1")
    dash.update(scripted(2, 0.75, 0.25, accuracy=0.6), variant="dr_grpo seed 1")
    assert trace(dash, "dr_grpo seed 1", "reward", "mean").y == (0.25, 0.75)
    assert trace(dash, "dr_grpo seed 1", "kl", "kl").y == (0.01, 0.02)
    assert trace(dash, "dr_grpo seed 1", "accuracy", "accuracy").x == (2,)
    assert trace(dash, "dr_grpo seed 1", "length", "wrong").y == (6.0, 7.0)
    band = dash._traces[("dr_grpo seed 1", "reward", "band")]
    assert dash.fig.data[band].y == (0.75, 1.0)          # mean + std: 0.25 + 0.5, 0.75 + 0.25
    assert dash.fig.data[band + 1].y == (-0.25, 0.5)     # mean - std
    # a second variant gets its own traces in the next colour of the palette; the first keeps its own
    dash.update(scripted(1, 0.5, 0.0), variant="grpo seed 0")
    t = trace(dash, "grpo seed 0", "reward", "mean")
    assert t.y == (0.5,) and t.line.color == D.PALETTE[1]
    assert trace(dash, "dr_grpo seed 1", "reward", "mean").line.color == D.PALETTE[0]
    assert trace(dash, "dr_grpo seed 1", "reward", "mean").line.dash == "solid"
    # the group table shows the latest group: texts, reward 1 in green, advantage +1 in blue, -0.5 in red
    html = dash.table.value
    assert "&#x27;46&#x27;" in html and "+1.000" in html and "-0.500" in html
    assert "background:#649bff" in html and "background:#ffb1b1" in html and "background:#87ff87" in html
    assert dash.progress.value == 1 and "grpo seed 0 (run 2): step 1 of 3" in dash.progress_label.value
    dash.mark(2, "entropy_collapse", variant="dr_grpo seed 1")
    assert len(dash.fig.layout.shapes) == len(D.PANELS) and dash.fig.layout.shapes[0].x0 == 2
    # a finding of train()'s live diagnostics in the metric dict is marked where it starts
    dash.update(scripted(3, 0.5, 0.1, findings=[{"kind": "kl_blowup", "step": 1}]), variant="dr_grpo seed 1")
    assert dash.marks[-1] == (1, "kl_blowup", "dr_grpo seed 1")
    assert len(dash.fig.layout.shapes) == 2 * len(D.PANELS) and dash.fig.layout.shapes[-1].x0 == 1


def test_redraws_are_throttled_but_evals_and_the_end_are_drawn():
    pytest.importorskip("anywidget")
    dash = Dashboard(total_steps=10, live=True, min_interval_s=1e9)
    for s in range(1, 10):
        dash.update(scripted(s, 0.1 * s, 0.1, **({"accuracy": 0.5} if s == 5 else {})), variant="a")
    assert dash.redraws == 2                      # the first update and the eval at step 5
    assert len(trace(dash, "a", "reward", "mean").y) == 5
    dash.update(scripted(10, 1.0, 0.1), variant="a")   # the last step
    assert dash.redraws == 3 and len(trace(dash, "a", "reward", "mean").y) == 10


def test_stop_button_sets_should_stop_and_the_click_hook_fires_on_arrival():
    pytest.importorskip("anywidget")
    dash = Dashboard(total_steps=5, live=True)
    assert not dash.should_stop()
    dash.stop_button.click()                      # what ipywidgets does when the frontend reports a click
    assert dash.should_stop() and dash.stopped and dash.stop_button.disabled
    assert dash.stop_button.description == "stopping…"
    dash.update(scripted(1, 0.5, 0.1, stopped=1.0), variant="a")  # the run ended after its step
    assert dash.stop_button.description == "stopped"
    dash.close()
    assert dash.stop_button.description == "stopped"

    class Comm:  # ipykernel 7's comm: the shell-channel thread asks it where a message goes
        def _reply_subshell_for(self, data, default):
            return default

    class Button:
        comm = Comm()

    ev = D.threading.Event()
    D._stop_on_arrival(Button, ev)
    assert Button.comm._reply_subshell_for({"method": "update", "state": {}}, "main") == "main" and not ev.is_set()
    assert Button.comm._reply_subshell_for({"method": "custom", "content": {"event": "click"}}, "main") == "main"
    assert ev.is_set()


def test_stop_ends_a_short_train_run_with_stopped_and_a_checkpoint(small_cfg, tmp_path):
    from grpo_kit.loop.train import latest_checkpoint, setup, train, write_history

    cfg = small_cfg.replace(steps=6, eval_size=4, max_completion_length=4)
    run = setup(cfg)
    dash = Dashboard(total_steps=cfg.steps, live=False)
    seen = []
    for m in train(cfg, run, out_dir=tmp_path, should_stop=dash.should_stop):
        dash.update(m, variant="grpo seed 0", run=run)
        seen.append(m["step"])
        if m["step"] == 2:
            dash.request_stop()                   # pressed while step 2 is shown: step 3 is the last
    assert seen == [1, 2, 3] and run.step == 3
    last = run.history[-1]
    assert last["stopped"] == 1.0 and "accuracy" in last
    assert latest_checkpoint(tmp_path).name == "step-000003"
    assert dash.progress_text() == "grpo seed 0: stopped at step 3 of 6"
    assert dash.series["grpo seed 0"].get("accuracy")[0] == [0, 3]   # step-0 accuracy from run.evals
    # the samples entry: the first group, as text; history.jsonl still round-trips
    s = last["samples"]
    assert set(s) == {"prompt", "completions", "rewards", "advantages"}
    assert len(s["completions"]) == len(s["rewards"]) == len(s["advantages"]) == cfg.num_generations
    assert s["prompt"] in {it["prompt"] for it in run.train_items}
    write_history(run.history, tmp_path / "history.jsonl")
    back = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert back[-1]["samples"] == s and back[-1]["step"] == 3
    import matplotlib

    from grpo_kit.view.plotting import plot_history
    matplotlib.use("Agg")
    plot_history(back, run.evals, path=tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_headless_close_draws_the_same_panels_as_an_image():
    dash = Dashboard(total_steps=4, live=False)
    assert dash.fig is None
    for s in range(1, 5):
        dash.update(scripted(s, 0.2 * s, 0.1), variant="rloo seed 2")
    dash.mark(3, "finding")
    fig = dash.close()
    axes = fig.axes[:len(D.PANELS)]
    assert all(a.get_title().replace("\n", " ").startswith(t) for a, (_, t) in zip(axes, D.PANELS, strict=True))
    assert axes[1].get_title().replace("\n", " ") == "held-out greedy accuracy: not logged in these runs"  # no eval
    reward_line = axes[0].get_lines()[0]
    assert list(reward_line.get_ydata()) == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert reward_line.get_color() == D.PALETTE[0] and reward_line.get_linestyle() == "-"  # the first run
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n" and len(buf.getvalue()) > 5000
    assert "finished after 4 steps" in dash.progress_text()


def test_live_is_decided_by_the_frontend_and_can_be_forced(monkeypatch):
    monkeypatch.delenv("GRPO_KIT_DASHBOARD", raising=False)
    assert D.frontend_available() is False          # pytest: no kernel, no frontend
    assert Dashboard(3).live is False
    monkeypatch.setenv("GRPO_KIT_DASHBOARD", "static")
    assert D.frontend_available() is False
    monkeypatch.setenv("GRPO_KIT_DASHBOARD", "live")
    assert D.frontend_available() is True
    assert Dashboard(3, live=False).live is False   # a notebook can force it either way


def test_ten_runs_with_any_names_get_distinct_styles_in_order():
    names = ["broken", "fixed", "dapo", "gspo", "hybrid_gae w=0.3", "hybrid_gae w=0.7", "x", "y", "z", "w"]
    styles = RunStyles()
    got = [styles(n) for n in names]
    assert len(set(got)) == 10  # no two runs share a colour and a line style
    assert [c for c, _ in got] == list(D.PALETTE)  # ten variants: the palette in the order they came
    assert all(d == "solid" for _, d in got)
    assert styles("broken") == got[0]  # a name keeps its style
    # seeds of one variant share its colour and differ by line style
    seeds = [styles(f"dapo seed {s}") for s in range(3)]
    assert {c for c, _ in seeds} == {D.PALETTE[2]} and len({d for _, d in seeds}) == 3
    assert len(set(styles.styles.values())) == len(styles.styles) == 13
    # past ten variants the colours repeat with other line styles, never a pair twice, up to 60 runs
    many = RunStyles()
    pairs = [many(f"variant {i}") for i in range(60)]
    assert len(set(pairs)) == 60


def test_seed_names_split_into_variant_and_seed():
    assert split_seed("dr_grpo seed 2") == ("dr_grpo", "2")
    assert split_seed("GRPO (DeepSeekMath) seed 0") == ("GRPO (DeepSeekMath)", "0")
    assert split_seed("G8, seed=11") == ("G8", "11")
    assert split_seed("hybrid_gae w=0.3") == ("hybrid_gae w=0.3", None)
    assert split_seed("broken") == ("broken", None)
    assert split_seed("seed 3") == ("seed 3", None)  # a name that is only a seed is its own variant


def _history(n, reward0, **extra):
    return [{"step": s, "reward": reward0 + 0.1 * s, "reward_std": 0.1, "entropy": 1.0 - 0.05 * s,
             "clip_ratio/region_mean": 0.0, **extra} for s in range(1, n + 1)]


def test_compare_runs_one_legend_entry_per_run_and_the_live_colours(tmp_path):
    pytest.importorskip("anywidget")
    names = [f"run {c}" for c in "abcdefghij"]
    runs = {n: _history(4, 0.05 * i) for i, n in enumerate(names)}
    dash = Dashboard(total_steps=4, live=True, min_interval_s=0.0)
    for n, h in runs.items():
        for m in h:
            dash.update(m, variant=n)
    live = {n: (trace(dash, n, "reward", "mean").line.color, trace(dash, n, "reward", "mean").line.dash) for n in names}
    assert len(set(live.values())) == 10
    fig = compare_runs(runs, styles=dash.styles)
    reward_ax = fig.axes[0]
    drawn = {ln.get_label(): (ln.get_color(), ln.get_linestyle()) for ln in reward_ax.get_lines()}
    mpl = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-."}
    assert {n: (c, mpl.get(d, d)) for n, (c, d) in live.items()} == drawn  # the static figure = the live one
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == names  # each run once, in order
    # the dashboard's own static figure agrees too
    static = dash.static_figure()
    assert {ln.get_label(): ln.get_color() for ln in static.axes[0].get_lines()} == {n: c for n, (c, _) in drawn.items()}


def test_empty_panels_say_why(tmp_path):
    cfg = {"beta": 0.0, "log_kl": False, "eval_every": 0, "num_iterations": 1, "steps": 3}
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text("\n".join(json.dumps(m) for m in _history(3, 0.2)))
    (run / "config.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    fig = compare_runs({"a": run, "b": _history(3, 0.4)})
    titles = {t.split(":")[0]: t for t in (ax.get_title().replace("\n", " ") for ax in fig.axes if ax.get_visible())}
    assert titles["KL to reference"] == "KL to reference: not logged (log_kl: false, beta: 0)"
    assert titles["held-out greedy accuracy"] == "held-out greedy accuracy: not logged (eval_every: 0)"
    assert titles["clip ratio (low + high)"].endswith("0 at every step (one update per batch: the ratio is 1, nothing to clip)")
    assert titles["reward (mean, band = ±1 std)"] == "reward (mean, band = ±1 std)"  # data: no note
    # any metric key is a panel; panels beyond the keys are hidden
    fig = compare_runs({"a": _history(3, 0.2)}, keys=["entropy", "completions/distinct_frac"])
    shown = [ax.get_title().replace("\n", " ") for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert shown == ["token entropy", "completions/distinct_frac: not logged in these runs"]
    with pytest.raises(FileNotFoundError, match="has no history.jsonl"):
        compare_runs({"a": tmp_path})


def test_progress_counts_the_steps_a_run_really_takes():
    class FakeRun:
        def __init__(self, **cfg):
            self.cfg, self.evals = cfg, []

    budget = FakeRun(steps=100_000, completion_budget=64)
    dash = Dashboard(total_steps=3, live=False)
    for s in range(1, 5):  # a replay run: 16 new completions a step, so 4 steps, not the nominal 3
        dash.update({"step": s, "reward": 0.1, "completions_total": 16 * s}, variant="replay seed 0", run=budget)
        if s == 2:
            assert dash.progress_text() == "replay seed 0: step 2 of 4 (32 of 64 completions)"
    dash.close()
    assert dash.progress_text() == "replay seed 0: finished after 4 steps (64 completions)"
    dash = Dashboard(total_steps=3, live=False)
    for s in range(1, 4):
        dash.update({"step": s, "reward": 0.1, "completions_total": 16 * s, "stopped": s == 3}, variant="r", run=budget)
    assert dash.progress_text() == "r: stopped at step 3 of 4 (48 of 64 completions)"
    dash = Dashboard(total_steps=3, live=False)
    for s in range(1, 3):
        dash.update({"step": s, "reward": 0.1}, variant="g", run=FakeRun(steps=5))
    assert dash.progress_text() == "g: step 2 of 5"  # the run's own step count, not the dashboard's


def test_right_and_wrong_lengths_and_the_group_sample_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.5], [0.0, 0.0, float("nan")]])       # (P, G) = (2, 3)
    per_func = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # (B, K)
    # the correctness judge decides, not the total reward (the format bonus alone is not "right")
    mask = correct_mask(rewards, per_func, ["exact_answer", "format"])
    assert mask.tolist() == [True, False, False, False, False, False]
    assert correct_mask(rewards, per_func, ["format", "other"]).tolist() == [True, False, True, False, False, False]
    lengths = torch.tensor([2, 4, 6, 8, 10, 12])
    out = length_metrics(lengths, torch.zeros(6, dtype=torch.bool), None, mask)
    assert out["completions/mean_length_right"] == 2.0 and out["completions/mean_length_wrong"] == 8.0
    assert "completions/mean_length_right" not in length_metrics(lengths, torch.zeros(6, dtype=torch.bool),
                                                                None, torch.zeros(6, dtype=torch.bool))
    adv = torch.tensor([[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]])
    s = group_samples(["1+1=", "1+1=", "1+1=", "2+2="], ["2", "3", "x" * 300, "4"], rewards, adv)
    assert s == {"prompt": "1+1=", "completions": ["2", "3", "x" * 200], "rewards": [1.0, 0.0, 0.5],
                 "advantages": [0.5, -0.5, 0.0]}
    s2 = group_samples(["a"] * 6, ["p"] * 6, rewards.flip(0), adv)       # NaN reward -> None (valid JSON)
    assert s2["rewards"] == [0.0, 0.0, None] and json.loads(json.dumps(s2)) == s2
    tok = group_samples(["a"] * 6, ["p"] * 6, rewards, torch.ones(2, 3, 4) * torch.tensor([1.0, 3.0, 0.0, 0.0]))
    assert tok["advantages"] == [1.0, 1.0, 1.0]                          # (P, G, T): mean over tokens
    assert not any(isinstance(v, float) and math.isnan(v) for v in s2["rewards"] if v is not None)


def test_the_overhead_benchmark_runs(capsys):
    import sys
    from pathlib import Path
    pytest.importorskip("anywidget")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not an installed package
    from benchmarks import dashboard_overhead

    res = dashboard_overhead.main(["--steps", "2", "--prompts", "2", "-G", "2", "--threads", "1", "--eval-size", "2"])
    assert res["steps"] == 2 and res["redraws"] >= 2 and res["update_s"] > 0   # first step and last step drawn
    assert "wall overhead" in capsys.readouterr().out


def test_the_browser_test_hook_waits_for_stop_and_no_longer(monkeypatch):
    import time
    monkeypatch.setenv(D.STEP_DELAY_ENV, "0.3")
    dash = Dashboard(total_steps=3, live=False)
    t0 = time.perf_counter()
    dash.update(scripted(1, 0.5, 0.1))
    assert time.perf_counter() - t0 >= 0.3              # waited for a Stop that did not come
    monkeypatch.setenv(D.STEP_DELAY_ENV, "60")
    dash.request_stop()
    t0 = time.perf_counter()
    dash.update(scripted(2, 0.5, 0.1))
    assert time.perf_counter() - t0 < 5                  # Stop pressed: no wait


def test_a_headless_kernel_gets_the_static_image(tmp_path):
    """papermill/nbclient start the kernel themselves (no JupyterLab): auto mode draws at close()."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = ("from grpo_kit.view.dashboard import Dashboard\n"
            "dash = Dashboard(total_steps=2, title='headless')\n"
            "for s in (1, 2):\n"
            "    dash.update({'step': s, 'reward': 0.5 * s, 'reward_std': 0.1,\n"
            "                 'samples': {'prompt': '1+1=', 'completions': ['2', '3'], 'rewards': [1.0, 0.0],\n"
            "                             'advantages': [0.5, -0.5]}}, variant='grpo seed 0')\n"
            "print('live' if dash.live else 'static')\n"
            "dash.close();")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outs = nb.cells[0].outputs
    assert [o.get("text") for o in outs if o.output_type == "stream"] == ["static\n"]
    kinds = [k for o in outs if o.output_type == "display_data" for k in o.data]
    assert "image/png" in kinds and "text/html" in kinds
    html = next(o.data["text/html"] for o in outs if o.output_type == "display_data" and "text/html" in o.data)
    assert "finished after 2 steps" in html and "latest group" in html
