"""Interrupts and kills of a real training process: nothing written is lost, and a resumed run
ends with exactly the weights of an uninterrupted one; stop requests (Ctrl-C, SIGTERM, SIGHUP) are
never forgotten."""
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import sigkill_drill
from safetensors.torch import load_file

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.loop.train import latest_checkpoint, setup, train

loop = importlib.import_module("grpo_kit.loop.train")  # the module (grpo_kit.loop.train is also the function)

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


SIGINT_CHILD = r"""
import signal, sys, time
from grpo_kit.config import GRPOConfig
from grpo_kit.rewards.judges import exact_answer
from grpo_kit.loop.train import setup, train

def announce(prompts, completions, answer, **kw):  # runs inside a step: a signal now lands mid-step
    print("scoring", flush=True)
    time.sleep(0.3)
    return exact_answer(prompts, completions, answer, **kw)

cfg = GRPOConfig(steps=50, num_prompts=2, num_generations=2, eval_every=0, eval_size=5, checkpoint_every=0, threads=1)
before = signal.getsignal(signal.SIGINT)
run = setup(cfg, reward_funcs=[announce])
for m in train(cfg, run, out_dir=sys.argv[1]):
    pass
print("done", run.step, m.get("stopped"), signal.getsignal(signal.SIGINT) is before, flush=True)
"""


def test_ctrl_c_ends_after_the_step_with_a_checkpoint(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", SIGINT_CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    seen = 0
    for line in p.stdout:
        seen += line.startswith("scoring")
        if seen == 2:  # inside step 2
            p.send_signal(signal.SIGINT)
            break
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "done 2 1.0 True" in out  # stopped after step 2, flagged, the old handler is back
    assert "stopping after this step" in err and "Traceback" not in err
    ck = latest_checkpoint(tmp_path)  # checkpoint_every=0: this one exists only because of the stop
    assert ck.name == "step-000002"
    state = torch.load(ck / "trainer_state.pt", weights_only=True)
    assert len(state["history"]) == 2 and state["history"][-1]["stopped"] == 1.0


# device="cpu": the resumed run must equal the straight one bit for bit, which CPU float32 guarantees
CONFIG = dict(steps=12, num_prompts=4, num_generations=4, checkpoint_every=1, eval_every=0, eval_size=20, threads=1,
              device="cpu")


def _cli(cfg_path, out, *extra, env=ENV, stderr=None):
    return subprocess.Popen([*_argv(cfg_path, out), *extra], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=stderr if stderr is not None else subprocess.DEVNULL)


def _argv(cfg_path, out):
    return [sys.executable, "-m", "grpo_kit.cli", "train", "--config", str(cfg_path), "--out", str(out)]


def test_sigkill_during_and_between_checkpoints_then_resume_is_exact(tmp_path):
    cfg = GRPOConfig(**CONFIG)
    cfg_path = tmp_path / "c.yaml"
    cfg.to_yaml(cfg_path)
    out = tmp_path / "run"
    sigkill_drill(_argv(cfg_path, out), out, cfg.steps, ENV, ROOT, tmp_path)  # killed at 5 (mid-write) and 8+
    history = (out / "history.jsonl").read_text().splitlines()
    assert len(history) == 12  # nothing lost across two kills

    straight = setup(cfg)
    list(train(cfg, straight, out_dir=tmp_path / "straight"))
    a = load_file(tmp_path / "straight" / "checkpoints" / "step-000012" / "model.safetensors")
    b = load_file(out / "checkpoints" / "step-000012" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
    assert [json.loads(h)["loss"] for h in history] == [m["loss"] for m in straight.history]


# ---------------------------------------------------------------- stop requests
# Stop requests are never forgotten: Ctrl-C during evaluation or a checkpoint write, SIGTERM, SIGHUP.

def _signal_self(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary


@pytest.mark.parametrize("where", ["evaluate", "save_checkpoint"])
def test_ctrl_c_during_evaluation_or_a_checkpoint_write_ends_the_run(tmp_path, small_cfg, monkeypatch, where):
    cfg = small_cfg.replace(steps=6, eval_every=1, checkpoint_every=1)
    real = getattr(loop, where)

    def interrupted(run, *a):
        if run.step == 2:
            _signal_self(signal.SIGINT)
        return real(run, *a)
    monkeypatch.setattr(loop, where, interrupted)
    run = setup(cfg)
    history = list(train(cfg, run, out_dir=tmp_path))
    assert run.step == 2 and run.stopped_by == "Ctrl-C"  # not 6: the request held
    assert history[-1]["stopped"] == 1.0 and latest_checkpoint(tmp_path).name == "step-000002"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_in_the_callers_loop_body_ends_the_run_before_the_next_step(tmp_path, small_cfg):
    cfg = small_cfg.replace(steps=6)
    run = setup(cfg)
    for m in train(cfg, run, out_dir=tmp_path):
        if m["step"] == 2:
            _signal_self(signal.SIGINT)
    assert run.step == 2 and run.history[-1]["stopped"] == 1.0
    assert latest_checkpoint(tmp_path).name == "step-000002"  # checkpoint_every=0: written for the stop
    assert [s for s, _ in run.evals] == [0, 2]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_act_like_ctrl_c_in_the_cli(tmp_path, capsys, monkeypatch, sig):
    step = loop.grpo_step

    def signalled(run):
        m = step(run)
        if run.step == 2:
            _signal_self(getattr(signal, sig))
        return m
    monkeypatch.setattr(loop, "grpo_step", signalled)
    before = signal.getsignal(getattr(signal, sig))
    (tmp_path / "c.yaml").write_text("steps: 5\nnum_prompts: 2\nnum_generations: 2\neval_size: 5\nthreads: 1\n")
    code = main(["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 130 and f"stopped by {sig} after step 2 of 5" in err and "--resume" in err
    assert latest_checkpoint(tmp_path / "run").name == "step-000002"
    assert len((tmp_path / "run" / "history.jsonl").read_text().splitlines()) == 2
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped_by"] == sig
    assert signal.getsignal(getattr(signal, sig)) is before


CHILD = r"""
import sys, time
from grpo_kit import judges
from grpo_kit.cli import main

def announce(prompts, completions, answer, **kw):  # runs inside a step: a signal now lands mid-step
    print("scoring", flush=True)
    time.sleep(0.3)
    return judges.exact_answer(prompts, completions, answer, **kw)

judges.REWARD_FUNCS["announce"] = announce
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_to_a_training_process_finishes_the_step_and_exits_130(tmp_path):
    (tmp_path / "c.yaml").write_text("steps: 50\nnum_prompts: 2\nnum_generations: 2\neval_size: 5\nthreads: 1\n"
                                     "eval_every: 0\ncheckpoint_every: 0\nreward_funcs: [announce]\n")
    p = subprocess.Popen([sys.executable, "-c", CHILD, "train", "--config", str(tmp_path / "c.yaml"), "--out",
                          str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=ENV, cwd=ROOT)
    seen = 0
    for line in p.stdout:
        seen += line.startswith("scoring")
        if seen == 2:  # inside step 2
            p.send_signal(signal.SIGTERM)
            break
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "SIGTERM: stopping after this step" in err and "stopped by SIGTERM after step 2 of 50" in err
    assert "Traceback" not in err
    assert latest_checkpoint(tmp_path / "run").name == "step-000002"
    assert len((tmp_path / "run" / "history.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "run" / ".grpo-kit.lock").exists()


def test_a_signal_the_process_ignores_stays_ignored():
    from grpo_kit.loop.train import StopOnSignals

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with StopOnSignals() as stop:
            _signal_self(signal.SIGHUP)
            assert not stop.requested
            _signal_self(signal.SIGTERM)
            assert stop.requested and stop.signal_name == "SIGTERM"
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
