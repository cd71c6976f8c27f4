"""A run whose group size changes mid-way (by its own schedule) is SIGKILLed after the change and
resumed with ``grpo-kit train --resume``: same history and weights as a straight run."""
import json
import signal
import subprocess

import pytest
import torch
from conftest import latest_step, wait_for
from safetensors.torch import load_file
from test_kill_resume import _cli

from grpo_kit.config import GRPOConfig
from grpo_kit.loop.train import setup, train

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py)

CONFIG = dict(steps=8, num_prompts=2, num_generations=4, samples_per_step=8,
              group_size_schedule=[[0.0, 4], [0.5, 2]], replay_fraction=0.25, replay_max_age=2,
              checkpoint_every=1, eval_every=0, eval_size=10, threads=1, log_kl=False)


def test_sigkill_after_a_change_of_G_then_resume_is_exact(tmp_path):
    cfg = GRPOConfig(**CONFIG)
    cfg_path = tmp_path / "c.yaml"
    cfg.to_yaml(cfg_path)
    out = tmp_path / "run"
    p = _cli(cfg_path, out)
    wait_for(lambda: latest_step(out) >= 5, p, "step 5")  # G went 4 -> 2 at step 5 (fraction 0.5)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert 5 <= latest_step(out) < 8
    p = _cli(cfg_path, out, "--resume", stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err.decode()  # --resume does not refuse the change of G
    history = [json.loads(h) for h in (out / "history.jsonl").read_text().splitlines()]
    assert [h["num_generations"] for h in history] == [4] * 4 + [2] * 4
    assert [h["num_prompts"] for h in history] == [2] * 4 + [4] * 4

    straight = setup(cfg)
    list(train(cfg, straight, out_dir=tmp_path / "straight"))
    a = load_file(tmp_path / "straight" / "checkpoints" / "step-000008" / "model.safetensors")
    b = load_file(out / "checkpoints" / "step-000008" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
    assert [h["loss"] for h in history] == [m["loss"] for m in straight.history]
    assert [h["replay/groups"] for h in history] == [m["replay/groups"] for m in straight.history]
