"""An offline preference run killed with SIGKILL, during a checkpoint write and between checkpoints, and
resumed in new processes ends with exactly the history, weights, optimizer state and baselines of an
uninterrupted run (the pattern of tests/loop/test_kill_resume.py). device="cpu" and one thread in every
process: float32 on one CPU is bit-exact for the same computation; a run resumed on another machine would
agree to the last bits only."""
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from conftest import sigkill_drill
from safetensors.torch import load_file

from grpo_kit.config import OfflineConfig
from grpo_kit.lab.offline_run import setup_offline, train_offline_run

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
# loss 'baseline' carries the most state (the per-group baselines); the stage changes at step 6
CONFIG = dict(preferences=str(ROOT / "datasets" / "add2_prefs.jsonl"), loss="baseline", stage1_steps=6, steps=16,
              batch_prompts=8, learning_rate=3e-4, eval_every=4, eval_size=10, checkpoint_every=1, threads=1,
              device="cpu")


@pytest.mark.full  # three processes and a straight run: about 30 s, so it runs in make test-full
def test_sigkill_during_and_between_checkpoints_then_resume_is_the_straight_run(tmp_path):
    cfg = OfflineConfig(**CONFIG)
    cfg_path = tmp_path / "c.yaml"
    cfg.to_yaml(cfg_path)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "grpo_kit.cli", "train-offline", "--config", str(cfg_path), "--out", str(out)]
    sigkill_drill(argv, out, cfg.steps, ENV, ROOT, tmp_path)  # killed at 5 (mid-write) and at 8+, across the stage change
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [m["step"] for m in history] == list(range(1, 17))  # nothing lost or repeated across two kills

    straight = setup_offline(cfg)
    list(train_offline_run(straight, out_dir=tmp_path / "straight"))

    def same(m):
        return {k: v for k, v in m.items() if k != "step_time"}
    assert [same(m) for m in history] == [same(m) for m in straight.history]  # losses, grad norms, accuracies
    assert any(m["baseline"] != 0 for m in history)  # the baselines moved, and were restored
    a = load_file(tmp_path / "straight" / "checkpoints" / "step-000016" / "model.safetensors")
    b = load_file(out / "checkpoints" / "step-000016" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
    sa = torch.load(tmp_path / "straight" / "checkpoints" / "step-000016" / "trainer_state.pt", weights_only=True)
    sb = torch.load(out / "checkpoints" / "step-000016" / "trainer_state.pt", weights_only=True)
    assert torch.equal(sa["baselines"], sb["baselines"]) and torch.equal(sa["batch_gen"], sb["batch_gen"])
    moments = [(s["exp_avg"], s["exp_avg_sq"]) for s in sa["optimizer"]["state"].values()]
    assert all(torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v)
               in zip(moments, [(s["exp_avg"], s["exp_avg_sq"]) for s in sb["optimizer"]["state"].values()]))
    assert sa["evals"] == sb["evals"]
