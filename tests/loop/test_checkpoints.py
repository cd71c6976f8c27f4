"""A run folder is data people share: its ``trainer_state.pt`` is read with ``weights_only=True``, so a crafted
checkpoint runs no code in ``train --resume`` or ``export --run``, and checkpoints written before that change
still resume (issue 23, D2)."""
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.errors import CheckpointError
from grpo_kit.loop.train import (
    STATE_FILE,
    convert_checkpoint,
    latest_checkpoint,
    read_trainer_state,
    resume_run,
    setup,
    storable,
    train,
)

OLD = Path(__file__).parents[1] / "data" / "old_checkpoint"  # written by fb12711, before weights_only (its README.md)


def _old_run(tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(OLD, run, ignore=shutil.ignore_patterns("README.md"))
    return run


class _Payload:
    """Pickles as a call of os.system: what a crafted checkpoint would run on the machine that loads it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _crafted(run: Path, marker: Path) -> None:
    ck = latest_checkpoint(run)
    state = read_trainer_state(ck)
    state["config"] = {**state["config"], "seed": _Payload(marker)}
    torch.save(state, ck / STATE_FILE)


# fb12711: before weights_only; a27b882: the code before the core was split into layers
@pytest.mark.parametrize("folder", ["old_checkpoint", "checkpoint_a27b882"])
def test_old_checkpoint_resumes_and_continues_a_straight_run(tmp_path, folder):
    run_dir = tmp_path / "run"
    shutil.copytree(OLD.parent / folder, run_dir, ignore=shutil.ignore_patterns("README.md"))
    cfg = GRPOConfig.from_yaml(run_dir / "config.yaml").replace(steps=3)
    run = setup(cfg)
    # 2 -> 3 steps moves the cosine rate at step 2 (0 -> 7.5e-05): allowed, both here and in the straight run below
    assert resume_run(run, run_dir, allow_schedule_change=True).name == "step-000002" and run.step == 2
    assert len(run.history) == 2
    list(train(cfg, run, out_dir=run_dir))
    assert run.step == 3 and [m["step"] for m in run.history] == [1, 2, 3]
    state = read_trainer_state(latest_checkpoint(run_dir))  # the new checkpoint reads back the same way
    assert state["step"] == 3
    # the same with today's code: 2 steps planned as 2 (the old run's config), then resumed to 3
    first = GRPOConfig.from_yaml(run_dir / "config.yaml")
    list(train(first, setup(first), out_dir=tmp_path / "new"))
    again = setup(cfg)
    resume_run(again, tmp_path / "new", allow_schedule_change=True)
    list(train(cfg, again, out_dir=tmp_path / "new"))
    # the old steps were taken on the machine that wrote the file: equal up to float32 kernels of another CPU
    for (name, a), (_, b) in zip(run.policy.named_parameters(), again.policy.named_parameters()):
        if a.requires_grad:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize("command", ["train", "export"])
def test_crafted_checkpoint_runs_no_code(tmp_path, capsys, command):
    run_dir, marker = _old_run(tmp_path), tmp_path / "MARKER"
    _crafted(run_dir, marker)
    with pytest.raises(CheckpointError, match="holds posix.system, not only tensors and plain values, so it was not loaded"):
        read_trainer_state(latest_checkpoint(run_dir))
    argv = (["train", "--config", str(run_dir / "config.yaml"), "--out", str(run_dir), "--resume", "--steps", "3"]
            if command == "train" else ["export", "--run", str(run_dir), "--to", str(tmp_path / "exp")])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert not marker.exists()
    assert err.count("\n") == 1 and err.startswith("grpo-kit: error: checkpoint ") and "not loaded" in err
    assert "Traceback" not in err and not (tmp_path / "exp").exists()


def test_checkpoints_hold_only_what_weights_only_reads(tmp_path):
    """A Python function in the config and numpy values a reward function logs are stored as plain values."""
    def numpy_judge(prompts, completions, log_extra, **_):
        log_extra("np", [np.float64(0.5)] * len(prompts))
        return [np.float32(1.0)] * len(prompts)

    cfg = GRPOConfig(reward_funcs=[numpy_judge], steps=1, num_prompts=1, num_generations=2, eval_every=0,
                     threads=1, device="cpu")
    run = setup(cfg)
    list(train(cfg, run, out_dir=tmp_path))
    ck = latest_checkpoint(tmp_path)
    with open(ck / STATE_FILE, "rb") as f:
        assert torch.serialization.get_unsafe_globals_in_checkpoint(f) == []
    state = torch.load(ck / STATE_FILE, weights_only=True)
    assert state["config"]["reward_funcs"] == [f"{__name__}:{numpy_judge.__qualname__}"]
    again = setup(cfg)
    resume_run(again, tmp_path)  # the same function in the config: the same stored name, so it resumes
    assert again.step == 1


def test_storable_keeps_plain_values_and_converts_the_rest():
    t = torch.ones(2)
    got = storable({"a": (1, 2.5, "x", None, True), "t": t, 3: [np.int64(4), np.array([1.0])], ("k",): {1, 2}})
    assert got.pop("t") is t
    assert got == {"a": (1, 2.5, "x", None, True), 3: [4, [1.0]], "('k',)": [1, 2]}
    assert type(got[3][0]) is int


def plain_judge(prompts, completions, **_):
    return [0.0] * len(prompts)


def test_an_older_checkpoint_with_a_function_in_its_config_is_refused_then_converted_by_its_author(tmp_path):
    run_dir = _old_run(tmp_path)
    ck = latest_checkpoint(run_dir)
    state = read_trainer_state(ck)
    state["config"]["reward_funcs"] = [plain_judge]  # what torch.save wrote before storable() existed
    torch.save(state, ck / STATE_FILE)
    with pytest.raises(CheckpointError, match=f"holds {__name__}.plain_judge, .*convert_checkpoint"):
        read_trainer_state(ck)
    convert_checkpoint(ck)
    assert read_trainer_state(ck)["config"]["reward_funcs"] == [f"{__name__}:plain_judge"]
