import os
import signal
from pathlib import Path

import pytest
import torch

from grpo_kit.view.nbtools import KEEP_ENV

# `make book` builds the site from the executed notebooks the full runs leave here
EXECUTED = Path(__file__).resolve().parent.parent / "build" / "executed"

# `make test` runs two pytest workers (pytest-xdist) on two cores: one torch thread each
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """The shipped base model and its tokenizer (loaded once per test session)."""
    from grpo_kit.model.tiny import load_model

    return load_model("tiny")


@pytest.fixture
def small_cfg():
    from grpo_kit.config import GRPOConfig

    # device="cpu": several tests compare runs bit for bit (resume == straight run), which holds
    # in CPU float32 and not under CUDA bf16 autocast on a machine with a GPU
    return GRPOConfig(steps=4, num_prompts=4, num_generations=4, eval_every=0, eval_size=20,
                      checkpoint_every=0, threads=1, device="cpu")


@pytest.fixture
def signals_delivered():
    """SIGINT, SIGTERM and SIGHUP delivered for this test as in a foreground shell. A suite started in the
    background inherits SIGINT ignored, one started under nohup SIGHUP, and the kit leaves an ignored
    signal ignored by design; the tests of stop requests need them to arrive (children started by the
    test then get them at their defaults too). Modules use it with ``pytestmark``."""
    saved = {}
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL),
                         (signal.SIGHUP, signal.SIG_DFL)):
        if signal.getsignal(sig) == signal.SIG_IGN:
            saved[sig] = signal.signal(sig, default)
    yield
    for sig, previous in saved.items():
        signal.signal(sig, previous)


def run_cli(capsys, *args):
    """``grpo-kit ARGS`` in this process, each argument as text: (exit code, stdout, stderr). A plain
    function, not a fixture (test files of several layers take it with ``from conftest import run_cli``)."""
    from grpo_kit.cli import main

    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def wait_for(predicate, proc, what, timeout=240):
    """Poll ``predicate()`` every 20 ms until it holds; fail if the process ``proc`` ends first or time runs out."""
    import time

    t0 = time.time()
    while not predicate():
        assert proc.poll() is None, f"the process ended (rc {proc.returncode}) before {what}"
        assert time.time() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.02)


def latest_step(out) -> int:
    """The step ``out/checkpoints/latest`` names (0 before the first checkpoint, or read mid-replace)."""
    try:
        return int((Path(out) / "checkpoints" / "latest").read_text().strip().split("-")[1])
    except (OSError, IndexError, ValueError):
        return 0


def sigkill_drill(argv: list[str], out: Path, steps: int, env: dict, cwd, tmp_path: Path) -> int:
    """The kill drill of the resume tests, on a training command ``argv`` (its ``--out`` is ``out``, it
    checkpoints every step and runs ``steps`` > 8 steps): SIGKILL while the step-5 checkpoint is written
    (its temp folder complete, not yet renamed: ``GRPO_KIT_PAUSE_IN_CHECKPOINT``); ``--resume``, SIGKILL
    again once step 8 or later is checkpointed; ``--resume`` to the end. Returns the step of the second
    kill; the caller compares the run with a straight one."""
    import subprocess

    def start(*extra, env=env, stderr=subprocess.DEVNULL):
        return subprocess.Popen([*argv, *extra], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr)

    with (tmp_path / "stderr1.txt").open("w") as log:
        p = start(env={**env, "GRPO_KIT_PAUSE_IN_CHECKPOINT": "5"}, stderr=log)
        wait_for(lambda: "paused in checkpoint" in (tmp_path / "stderr1.txt").read_text(), p, "the checkpoint pause")
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert (out / "checkpoints" / "step-000005.tmp" / "trainer_state.pt").is_file()
    assert latest_step(out) == 4
    p = start("--resume")
    wait_for(lambda: latest_step(out) >= 8, p, "step 8")
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed_at = latest_step(out)
    assert 8 <= killed_at < steps
    p = start("--resume", stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err.decode()
    assert not list((out / "checkpoints").glob("*.tmp"))
    return killed_at


@pytest.fixture(autouse=True)
def _keep_full_runs(request, monkeypatch):
    """A test marked ``full`` keeps each notebook it runs without error in build/executed/ (for make book)."""
    if request.node.get_closest_marker("full") is not None:
        monkeypatch.setenv(KEEP_ENV, str(EXECUTED))


# ---------------------------------------------------------------- the notebooks' time table
FULL_BUDGET_S = 60 * 60  # make test-full on 2 cores
_NOTEBOOK_TIMES: list[tuple[str, str, float, str]] = []  # (test, mode, seconds, outcome)


def pytest_runtest_logreport(report):
    if report.when == "call" and ("notebook" in report.keywords or "full" in report.keywords):
        mode = "full" if "full" in report.keywords else "browser" if "browser" in report.keywords else "smoke"
        _NOTEBOOK_TIMES.append((report.nodeid.split("::")[-1], mode, report.duration, report.outcome))


def pytest_terminal_summary(terminalreporter):
    """A table of every notebook test's time (make test-full: against its 60-minute budget)."""
    if not _NOTEBOOK_TIMES:
        return
    tr = terminalreporter
    tr.section("notebook times")
    for name, mode, secs, outcome in sorted(_NOTEBOOK_TIMES, key=lambda t: t[0]):
        tr.write_line(f"{name:<58} {mode:<8} {secs / 60:6.1f} min  {outcome}")
    full = sum(t[2] for t in _NOTEBOOK_TIMES if t[1] == "full")
    if full:
        tr.write_line(f"{'full runs, total':<58} {'':<8} {full / 60:6.1f} min  (budget {FULL_BUDGET_S // 60} min "
                      f"on 2 cores: {100 * full / FULL_BUDGET_S:.0f}% used)")
