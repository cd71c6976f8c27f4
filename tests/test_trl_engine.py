"""``--engine trl``: TRL's GRPOTrainer on the tiny model (CPU, a few steps), logged as the kit logs it."""
from __future__ import annotations

import json

import pytest

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.diagnostics import diagnose, read_history
from grpo_kit.engines.trl_engine import (
    check_trl_engine,
    kit_metrics,
    parse_trl_overrides,
    trl_config,
)
from grpo_kit.errors import ConfigError
from grpo_kit.plotting import plot_history, series

CORE = ("reward", "reward_std", "frac_reward_zero_std", "rewards/exact_answer/mean", "completions/mean_length",
        "completions/clipped_ratio", "loss", "grad_norm", "learning_rate", "entropy", "clip_ratio/region_mean",
        "step", "step_time")


def test_kit_metrics_merges_the_updates_of_one_step():
    """Two updates of one generated batch (num_iterations=2): TRL logs the generation metrics with the
    first; entropy and kl come from the first, grad_norm from the last, the rest is the mean."""
    first = {"loss": 0.5, "grad_norm": 2.0, "learning_rate": 1e-3, "epoch": 0.1, "num_tokens": 40.0,
             "reward": 0.25, "completions/mean_length": 3.5, "entropy": 1.2, "kl": 0.0,
             "clip_ratio/region_mean": 0.0, "rewards/exact_answer/mean": 0.25, "some_text": "x", "none": None}
    second = {"loss": 0.25, "grad_norm": 4.0, "learning_rate": 9e-4, "epoch": 0.2, "entropy": 1.0, "kl": 0.01,
              "clip_ratio/region_mean": 0.5}
    m = kit_metrics([first, second], step=7)
    assert m == {"loss": 0.375, "grad_norm": 4.0, "learning_rate": 0.00095, "reward": 0.25,
                 "completions/mean_length": 3.5, "entropy": 1.2, "kl": 0.0, "clip_ratio/region_mean": 0.25,
                 "rewards/exact_answer/mean": 0.25, "step": 7}


def test_trl_arguments_from_the_config(tmp_path):
    cfg = GRPOConfig(num_prompts=2, num_generations=4, steps=3, num_iterations=2, device="cpu")
    args = trl_config(cfg, tmp_path, parse_trl_overrides(["use_vllm=false", "vllm_mode=server"], cfg))
    assert (args.max_steps, args.num_generations, args.logging_steps) == (6, 4, 1)
    assert args.use_vllm is False and args.vllm_mode == "server" and args.report_to == []
    with pytest.raises(ConfigError, match="no field 'use_vllmm'"):
        parse_trl_overrides(["use_vllmm=true"], cfg)
    with pytest.raises(ConfigError, match="beta.*kit's field"):
        parse_trl_overrides(["beta=0.1"], cfg)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_trl_overrides(["use_vllm"], cfg)


@pytest.mark.parametrize("field, value", [("gold_reward_funcs", ["math_answer"]), ("reward_error_policy", "zero"),
                                          ("reward_timeout_s", 5.0)])
def test_fields_trl_cannot_honour_are_refused(field, value):
    with pytest.raises(ConfigError, match=field):
        check_trl_engine(GRPOConfig(**{field: value}))


def test_cli_trains_with_trl_and_writes_the_kits_run_folder(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(num_prompts=2, num_generations=4, steps=2, num_iterations=2, beta=0.04, eval_every=0, eval_size=8,
               device="cpu", threads=2).to_yaml(cfg)
    out = tmp_path / "run"
    assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    history = read_history(out / "history.jsonl")
    assert [m["step"] for m in history] == [1, 2]  # kit steps, each 2 TRL updates
    for m in history:
        assert all(k in m for k in CORE), sorted(set(CORE) - set(m))
        assert 0.0 <= m["reward"] <= 1.0 and m["kl"] >= 0.0
    lrs = [m["learning_rate"] for m in history]
    assert lrs == pytest.approx([3e-4, 1.5e-4])  # cosine over 4 updates, at updates 0 and 2: 0.5 (1 + cos(pi/2))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "trl" and [s for s, _ in summary["evals"]] == [0, 2]
    assert history[-1]["accuracy"] == summary["final_accuracy"]
    assert isinstance(diagnose(history, GRPOConfig.from_yaml(out / "config.yaml")), list)
    assert series(history, "reward")[0] == [1, 2]
    plot_history(history, summary["evals"])
    assert (out / "curves.png").is_file() and (out / "curves.html").is_file()
    assert (out / "model" / "config.json").is_file() and "model/" in printed


def test_cli_refuses_trl_arguments_without_the_trl_engine(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig().to_yaml(cfg)
    assert main(["train", "--config", str(cfg), "--trl-arg", "use_vllm=true", "--out", str(tmp_path / "run")]) == 2
    assert "--trl-arg needs --engine trl" in capsys.readouterr().err
    assert main(["train", "--engine", "trl", "--resume", "--config", str(cfg), "--out", str(tmp_path / "r2")]) == 2
    assert "--resume works with the kit's engine only" in capsys.readouterr().err
