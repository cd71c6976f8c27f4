"""Every notebook in a real browser: JupyterLab on 127.0.0.1 driven through Debian's chromium by Playwright.

One test per ``notebooks/*.ipynb`` (copied to a temporary folder, so nothing is saved into the
repository) with ``GRPO_KIT_SMOKE=1``: run all cells, wait until the kernel is idle, fail on any
error output (and on cells that never ran); move the first slider of each slider panel and check
that its readout and the Output widget it drives changed; where a cell trains with the live
dashboard, re-run that cell (and, if needed, the cells above it), press **Stop** while it trains and check that the run ended
early ("stopped at step k of N", k < N). When no notebook has a dashboard yet, a scratch notebook
that trains 50 tiny steps with one (and an output folder) is added, and its checkpoint is checked.

Screenshots go to ``runs/browser/`` (or ``$GRPO_KIT_BROWSER_ARTIFACTS``); the path is printed.
If chromium or JupyterLab cannot start, the test fails and says why: it is never skipped.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("GRPO_KIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
ARTIFACTS = Path(os.environ.get("GRPO_KIT_BROWSER_ARTIFACTS", ROOT / "runs" / "browser"))
# GRPO_KIT_BROWSER_ONLY="00,02" runs only the notebooks whose names start with those prefixes (for debugging)
ONLY = [p for p in os.environ.get("GRPO_KIT_BROWSER_ONLY", "").split(",") if p]
NOTEBOOKS = [nb for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
             if not ONLY or any(nb.name.startswith(p) for p in ONLY)]
RUN_TIMEOUT_S = float(os.environ.get("GRPO_KIT_BROWSER_TIMEOUT", 600))  # one notebook's run-all, smoke mode
STOP_NOTEBOOK = "zz_dashboard_stop.ipynb"

pytestmark = pytest.mark.browser

# the test modules whose SMOKE_CHECKS say what each notebook's smoke run must record; the run here is the
# smoke run of make test (the headless papermill runs of the same cells are `pytest -m headless`)
SMOKE_CHECK_MODULES = ("test_notebooks", "test_notebook_04", "test_notebooks_failures", "test_notebooks_beyond",
                       "test_notebooks_real", "test_notebook_faq", "test_notebook_capstone")
RECORD_MIME = "application/vnd.grpo-kit.record+json"  # grpo_kit.view.nbtools.MIME


def smoke_checks() -> dict:
    """Notebook stem -> the function that checks the values its smoke run recorded."""
    checks = {}
    for name in SMOKE_CHECK_MODULES:
        checks.update(importlib.import_module(name).SMOKE_CHECKS)
    return checks


def records_of(cells: list[dict]) -> dict:
    """The values a notebook recorded (grpo_kit.view.record), read from the cells' outputs in the page."""
    out = {}
    for c in cells:
        for o in c["outputs"]:
            rec = (o.get("data") or {}).get(RECORD_MIME)
            if rec:
                out[rec["name"]] = json.loads(rec["json"])
    return out

# ----------------------------------------------------------------------------- JupyterLab in the page
# window.jupyterapp exists because the server runs with --LabApp.expose_app_in_browser
JS_PANEL = "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;" \
           " return !!(w && w.content && w.content.model && w.sessionContext && w.sessionContext.session" \
           " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'); }"
JS_STATUS = """() => { const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  return {status: k ? k.status : 'none', done: window.__grpoDone === true}; }"""
JS_RUN = """(cmd) => { window.__grpoDone = false;
  window.jupyterapp.commands.execute(cmd).then(() => { window.__grpoDone = true; },
                                                () => { window.__grpoDone = true; }); }"""
JS_RUN_UPTO = """([index, above]) => { const w = window.jupyterapp.shell.currentWidget; window.__grpoDone = false;
  w.content.activeCellIndex = index;
  const app = window.jupyterapp;
  (above ? app.commands.execute('notebook:run-all-above') : Promise.resolve())
     .then(() => app.commands.execute('notebook:run-cell'))
     .then(() => { window.__grpoDone = true; }, () => { window.__grpoDone = true; }); }"""
# the Stop pass: each dashboard update in the kernel waits up to STEP_DELAY_S for Stop
# (grpo_kit.view.dashboard.STEP_DELAY_ENV, set silently in the running kernel), so that a short smoke run
# is still training when the click arrives however late the browser shows the dashboard
STEP_DELAY_S = 10
JS_SLOW_STEPS = """async (delay) => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  await k.requestExecute({code: `import os; os.environ['GRPO_KIT_DASHBOARD_STEP_DELAY'] = '${delay}'`,
                          silent: true, store_history: false}).done; }"""
JS_CELLS = """() => { const cells = window.jupyterapp.shell.currentWidget.content.model.cells; const out = [];
  for (let i = 0; i < cells.length; i++) { const c = cells.get(i);
    const j = c.toJSON(); out.push({type: c.type, source: Array.isArray(j.source) ? j.source.join('') : j.source,
      execution_count: j.execution_count === undefined ? null : j.execution_count,
      outputs: c.type === 'code' ? j.outputs : []}); }
  return out; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings: Path) -> None:
    """No autosave (nothing is written back), no news or update checks (no network, no pop-ups)."""
    for rel, value in {"@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
                       "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
                           {"fetchNews": "false", "checkForUpdates": False}}.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))


def _stop_notebook(path: Path) -> None:
    """A scratch notebook that trains 50 tiny steps with the dashboard and an output folder."""
    import nbformat

    cells = [
        "from grpo_kit.config import GRPOConfig\nfrom grpo_kit.view.dashboard import Dashboard\n"
        "from grpo_kit.loop.train import setup, train",
        "cfg = GRPOConfig(steps=50, num_prompts=2, num_generations=4, eval_size=4, eval_every=0,\n"
        "                 checkpoint_every=0, threads=1, seed=0)\nrun = setup(cfg)",
        "dash = Dashboard(total_steps=cfg.steps, title='browser test: press Stop', min_interval_s=0.3)\n"
        "for m in train(cfg, run, out_dir='stop_run', should_stop=dash.should_stop):\n"
        "    dash.update(m, variant='grpo seed 0', run=run)\ndash.close()",
        "import os\nprint('steps run:', run.step, 'checkpoints:', sorted(os.listdir('stop_run/checkpoints')))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a token, serving copies of the notebooks."""
    work = tmp_path_factory.mktemp("lab")
    root, cfg_dir = work / "root", work / "config"
    root.mkdir()
    for nb in NOTEBOOKS:
        shutil.copy(nb, root / nb.name)
    if STOP_NOTEBOOK in _names():
        _stop_notebook(root / STOP_NOTEBOOK)
    _write_settings(cfg_dir / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, GRPO_KIT_SMOKE="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               JUPYTER_CONFIG_DIR=str(cfg_dir), JUPYTERLAB_SETTINGS_DIR=str(cfg_dir / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(cfg_dir / "workspaces"), JUPYTER_RUNTIME_DIR=str(work / "runtime"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("GRPO_KIT_DASHBOARD", None)
    log = open(work / "jupyterlab.log", "w")
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True", "--ServerApp.allow_root=True"]
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with code {proc.returncode} before serving; its log:\n"
                        + (work / "jupyterlab.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            proc.terminate()
            pytest.fail(f"JupyterLab did not answer on {url} within 120 s; command {' '.join(cmd)}; log:\n"
                        + (work / "jupyterlab.log").read_text()[-3000:])
        time.sleep(0.5)
    yield {"url": url, "token": token, "root": root, "log": work / "jupyterlab.log",
           "notebooks": sorted(p.name for p in root.glob("*.ipynb"))}
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        pytest.fail(f"Python Playwright is not installed ({e}); run `pip install -r requirements.txt`")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no chromium at {CHROMIUM}: install it with `apt-get install -y chromium` "
                    f"(or point GRPO_KIT_CHROMIUM at a chromium binary); the browser test never downloads one")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    except Exception as e:  # noqa: BLE001 - any launch failure: say why and fail
        pw.stop()
        pytest.fail(f"chromium ({CHROMIUM}) could not start under Playwright: {type(e).__name__}: {e}")
    yield b
    b.close()
    pw.stop()


# ----------------------------------------------------------------------------- helpers
def _wait_idle(page, timeout: float, what: str) -> None:
    """Until the command started by JS_RUN/JS_RUN_UPTO resolved and the kernel is idle."""
    deadline, idle_since = time.time() + timeout, None
    while time.time() < deadline:
        st = page.evaluate(JS_STATUS)
        if st["done"] and st["status"] == "idle":
            idle_since = idle_since or time.time()
            if time.time() - idle_since > 1.0:
                return
        else:
            idle_since = None
        if st["status"] in ("dead", "none"):
            raise AssertionError(f"{what}: the kernel is {st['status']}")
        time.sleep(0.25)
    raise AssertionError(f"{what}: the kernel was not idle after {timeout:.0f} s")


def _errors(cells: list[dict], upto: int | None = None, start: int = 0) -> list[str]:
    """Error outputs, and code cells that never ran, as readable text (cells start..upto)."""
    found = []
    for i, c in enumerate(cells[: None if upto is None else upto + 1]):
        if i < start or c["type"] != "code" or not c["source"].strip():
            continue
        for o in c["outputs"]:
            if o.get("output_type") == "error":
                tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.get("traceback", [])))
                found.append(f"cell {i}: {o.get('ename')}: {o.get('evalue')}\n{tb[-1500:]}")
        if c["execution_count"] is None:
            found.append(f"cell {i} never ran: {c['source'][:80]!r}")
    return found


def _open(page, lab, name: str, shots: Path) -> None:
    page.goto(f"{lab['url']}/lab/tree/{name}?token={lab['token']}&reset")
    try:
        page.wait_for_function(JS_PANEL, timeout=120_000, polling=250)
    except Exception as e:  # noqa: BLE001
        page.screenshot(path=str(shots / "open_failed.png"))
        raise AssertionError(f"{name}: the notebook or its kernel did not come up in JupyterLab ({e}); "
                             f"server log: {lab['log']}") from None


def _move_sliders(page, shots: Path, name: str) -> list[str]:
    """Drag the first slider of every slider panel; its readout and the panel's Output must change."""
    notes = []
    panels = page.locator(".jp-OutputArea-output .widget-vbox:has(.widget-slider):has(.widget-output)")
    n = panels.count()
    for k in range(n):
        panel = panels.nth(k)
        if panel.locator(".widget-vbox:has(.widget-slider):has(.widget-output)").count():
            continue  # an outer box; its inner panel is checked on its own
        slider = panel.locator(".widget-slider").first
        readout = slider.locator(".widget-readout")
        out = panel.locator(".widget-output").first
        panel.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        before_text, before_out = readout.inner_text(), out.inner_html()
        panel.screenshot(path=str(shots / f"slider{k}_before.png"))
        handle = slider.locator(".noUi-handle").first
        box, track = handle.bounding_box(), slider.locator(".noUi-target").first.bounding_box()
        x0, y0 = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        # drag a third of the track, towards the side with room
        dx = track["width"] / 3 * (1 if x0 < track["x"] + track["width"] / 2 else -1)
        page.mouse.move(x0, y0)
        page.mouse.down()
        page.mouse.move(x0 + dx / 2, y0, steps=5)
        page.mouse.move(x0 + dx, y0, steps=5)
        page.mouse.up()
        deadline = time.time() + 90
        while time.time() < deadline and out.inner_html() == before_out:
            page.wait_for_timeout(250)
        page.wait_for_timeout(500)  # let the redraw finish
        after_text, after_out = readout.inner_text(), out.inner_html()
        panel.screenshot(path=str(shots / f"slider{k}_after.png"))
        assert after_text != before_text, f"{name}: slider {k}: the readout stayed {before_text!r} after a drag"
        assert after_out != before_out, (f"{name}: slider {k}: moved {before_text!r} -> {after_text!r} "
                                         f"but the figure it drives did not change within 90 s")
        errs = out.locator("[data-mime-type='application/vnd.jupyter.stderr']")
        assert errs.count() == 0, f"{name}: slider {k}: the redraw wrote an error: {errs.first.inner_text()[:800]}"
        notes.append(f"slider {k}: {before_text} -> {after_text}, figure redrawn")
    return notes


def _press_stop(page, lab, name: str, cells: list[dict], shots: Path) -> str:
    """Re-run the first cell that makes a Dashboard (in the kernel left by the full run; if that
    does not give a run to stop, again after the cells above it) and press Stop while it trains."""
    if name == STOP_NOTEBOOK:  # not run before: its kernel is fresh
        return _press_stop_once(page, name, cells, shots, above=True)
    try:
        return _press_stop_once(page, name, cells, shots, above=False)
    except AssertionError as first:
        try:
            return _press_stop_once(page, name, cells, shots, above=True)
        except AssertionError as second:
            raise AssertionError(f"{second}\n(re-running the dashboard cell alone: {first})") from None


def _press_stop_once(page, name: str, cells: list[dict], shots: Path, above: bool) -> str:
    idx = next(i for i, c in enumerate(cells) if c["type"] == "code" and "Dashboard(" in c["source"])
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.evaluate(JS_SLOW_STEPS, STEP_DELAY_S)
    page.evaluate(JS_RUN_UPTO, [idx, above])
    # Press Stop as soon as the button is there: the browser draws the kernel's updates with a lag
    # (seconds on a loaded machine), so waiting for a step to show could let a short smoke run finish.
    # The click reaches the kernel at once (see dashboard._stop_on_arrival); the run ends after its step.
    dash = page.locator(".grpo-kit-dashboard").first
    button, label = dash.locator("button").first, dash.locator(".widget-html").first
    deadline = time.time() + RUN_TIMEOUT_S
    while not (button.count() and button.is_enabled()):
        if time.time() > deadline or page.evaluate(JS_STATUS)["done"]:
            page.screenshot(path=str(shots / "stop_missed.png"))
            raise AssertionError(f"{name}: cell {idx} never showed a dashboard with an enabled Stop button")
        page.wait_for_timeout(100)
    pressed_at = label.inner_text()
    button.evaluate("b => b.click()")  # a DOM click: no waiting for the redrawing figure to settle
    dash.screenshot(path=str(shots / "dashboard_stop_pressed.png"))
    _wait_idle(page, RUN_TIMEOUT_S, f"{name} (after Stop)")
    errs = _errors(page.evaluate(JS_CELLS), upto=idx, start=0 if above else idx)
    assert not errs, f"{name}: errors while re-running the dashboard cell:\n" + "\n\n".join(errs)
    deadline = time.time() + 60  # the browser may still be drawing the last updates
    while "stopped at step" not in label.inner_text() and time.time() < deadline:
        page.wait_for_timeout(250)
    text = label.inner_text()
    dash.scroll_into_view_if_needed()
    dash.screenshot(path=str(shots / "dashboard_stopped.png"))
    m = re.search(r"stopped at step (\d+) of (\d+)", text)
    assert m, f"{name}: after Stop the dashboard says {text!r}, not 'stopped at step k of N'"
    assert int(m.group(1)) < int(m.group(2)), f"{name}: Stop did not end the run early: {text!r}"
    return f"Stop pressed at {pressed_at!r} -> {text!r}"


def _shut_down_kernel(page) -> None:
    """End the notebook's kernel: closing the page leaves it running in the server, where an idle kernel
    with a dashboard still took CPU from the next notebooks (measured 2026-12-07 in make test)."""
    try:
        page.evaluate("""() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
          return w && w.sessionContext && w.sessionContext.session ? w.sessionContext.shutdown() : null; }""")
    except Exception:  # noqa: BLE001 - a page that never came up has no kernel to end
        pass


# ----------------------------------------------------------------------------- the test
def _names() -> list[str]:
    """The notebooks the test opens: each copied notebook, and the scratch Stop notebook when none
    of them has a dashboard (the ``lab`` fixture writes it then)."""
    names = [nb.name for nb in NOTEBOOKS]
    if not any("Dashboard(" in nb.read_text() for nb in NOTEBOOKS):
        names.append(STOP_NOTEBOOK)
    return names


@pytest.fixture(scope="module")
def context(browser):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    yield ctx
    ctx.close()


# one test per notebook, so that `pytest -n 2` (make test) runs two notebooks at once, each in its
# own worker's JupyterLab and chromium
@pytest.mark.parametrize("name", _names())
def test_notebook_in_chromium(lab, context, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = ARTIFACTS / Path(name).stem
    print(f"\nbrowser test screenshots: {shots}")
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    page = context.new_page()
    report, t0 = [], time.time()
    try:
        _open(page, lab, name, shots)
        cells = page.evaluate(JS_CELLS)
        if name != STOP_NOTEBOOK:  # the scratch notebook only exists to press Stop
            page.evaluate(JS_RUN, "notebook:run-all-cells")
            _wait_idle(page, RUN_TIMEOUT_S, name)
            report.append(f"run all: {time.time() - t0:.0f} s")
            page.screenshot(path=str(shots / "after_run_all.png"))
            ran = page.evaluate(JS_CELLS)
            errs = _errors(ran)
            assert not errs, f"{name}: error output after running all cells:\n" + "\n\n".join(errs)
            smoke_checks()[Path(name).stem](records_of(ran))  # what the smoke run recorded
            report.append("recorded values checked")
            report += _move_sliders(page, shots, name)
        if any(c["type"] == "code" and "Dashboard(" in c["source"] for c in cells):
            t_stop = time.time()
            report.append(_press_stop(page, lab, name, cells, shots) + f" ({time.time() - t_stop:.0f} s)")
            if name == STOP_NOTEBOOK:
                ck = sorted(p.name for p in (lab["root"] / "stop_run" / "checkpoints").glob("step-*"))
                step = int(re.search(r"stopped at step (\d+)", report[-1]).group(1))
                assert ck == [f"step-{step:06d}"], f"{name}: after Stop at step {step} the checkpoints are {ck}"
                report.append(f"checkpoint {ck[0]} written at Stop")
        report.append(f"ok in {time.time() - t0:.0f} s")
    except Exception as e:  # noqa: BLE001 - a Playwright timeout too: screenshot, then fail with the reason
        page.screenshot(path=str(shots / "failure.png"))
        msg = str(e) if isinstance(e, AssertionError) else f"{name}: {type(e).__name__}: {e}"
        raise AssertionError(f"{msg}\n(screenshots in {shots}; JupyterLab log {lab['log']})") from None
    finally:
        _shut_down_kernel(page)
        page.close()
        print("\n".join(f"{name}: {line}" for line in report))


def test_every_notebook_has_a_smoke_check():
    """A notebook added without one would run in the browser with nothing checked of what it recorded."""
    missing = sorted({nb.stem for nb in NOTEBOOKS} - set(smoke_checks()))
    assert not missing, f"no SMOKE_CHECKS entry for {missing}: add one to a module of SMOKE_CHECK_MODULES"
