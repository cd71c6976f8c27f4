"""Diagnostics wired into training: the gold reward is logged and never trained on; the live check
warns once per kind; the CLI writes the findings into summary.json."""
import json
import logging

import torch

from grpo_kit.loop.train import _new_findings, setup, train


def test_gold_reward_is_logged_and_never_trained_on(small_cfg):
    cfg = small_cfg.replace(steps=2, reward_funcs=["format"])
    plain = setup(cfg)
    list(train(cfg, plain))
    gold_cfg = cfg.replace(gold_reward_funcs=["exact_answer"])
    gold = setup(gold_cfg)
    hist = list(train(gold_cfg, gold))
    # same weights with and without the gold judge: it does not enter the advantages
    for a, b in zip(plain.policy.parameters(), gold.policy.parameters()):
        assert torch.equal(a, b)
    m = hist[-1]
    assert 0.0 <= m["gold_reward"] <= 1.0 and "gold_rewards/exact_answer/mean" in m
    assert "gold_reward" not in plain.history[-1]
    assert 1 / cfg.num_generations <= m["completions/distinct_frac"] <= 1.0 and m["advantages/max_abs"] >= 0


def test_gold_equals_training_reward_when_it_is_the_same_judge(small_cfg):
    cfg = small_cfg.replace(steps=2, gold_reward_funcs=["exact_answer"])
    for m in train(cfg, setup(cfg)):
        assert m["gold_reward"] == m["reward"]


def test_live_check_warns_once_per_kind(small_cfg, caplog):
    run = setup(small_cfg)
    run.history = [{"step": s, "reward": 0.0, "frac_reward_zero_std": 1.0} for s in range(1, 31)]  # a stall
    with caplog.at_level(logging.WARNING, logger="grpo_kit"):
        first = _new_findings(run)
        again = _new_findings(run)
    assert [f["kind"] for f in first["findings"]] == ["zero_variance_stall"] and again == {}
    assert sum("zero_variance_stall" in r.getMessage() for r in caplog.records) == 1
    assert [f.kind for f in run.findings] == ["zero_variance_stall"]


def test_cli_summary_has_findings(small_cfg, tmp_path, capsys):
    from grpo_kit.cli import run_training

    _, summary = run_training(small_cfg.replace(steps=2), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["findings"] == summary["findings"] == []
    assert "diagnostics: no failure found" in capsys.readouterr().out
