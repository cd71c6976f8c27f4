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
