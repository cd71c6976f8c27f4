"""The sampling controls on the command line: ``grpo-kit eval``'s flags (checked by GRPOConfig's rules, passed to
the sampler) and a ``grpo-kit train`` run from a YAML config that samples with top_p and top_k."""
from __future__ import annotations

import json

import pytest
from conftest import run_cli

from grpo_kit.config import GRPOConfig
from grpo_kit.data.tasks import heldout_split, save_items
from grpo_kit.errors import ConfigError
from grpo_kit.eval import inference
from grpo_kit.model.sampling import SamplingControls


@pytest.fixture
def items(tmp_path):
    path = tmp_path / "items.jsonl"
    save_items(heldout_split("add2")[:6], path)
    return path


@pytest.mark.parametrize("flag, field, value", [
    ("--top-p", "top_p", "0"), ("--top-p", "top_p", "1.5"), ("--top-k", "top_k", "-1"), ("--top-k", "top_k", "2.5"),
    ("--min-p", "min_p", "1"), ("--min-p", "min_p", "-0.1"), ("--repetition-penalty", "repetition_penalty", "0"),
    ("--repetition-penalty", "repetition_penalty", "-1"), ("--temperature", "temperature", "0"),
    ("--temperature", "temperature", "inf")])
def test_eval_refuses_a_bad_value_with_the_configs_error(capsys, flag, field, value):
    number = float(value) if "." in value or value == "inf" else int(value)
    with pytest.raises(ConfigError) as config_error:
        GRPOConfig(**{field: number}).validate()
    code, out, err = run_cli(capsys, "eval", "--samples", 2, flag, value)
    assert code == 2 and out == "" and err == f"grpo-kit: error: {flag}: {config_error.value}\n"


def test_eval_refuses_a_sampling_flag_when_nothing_is_sampled(capsys):
    code, _, err = run_cli(capsys, "eval", "--top-p", "0.9")
    assert code == 2 and "--top-p" in err and "--samples K or --self-consistency K" in err and err.count("\n") == 1


def test_eval_passes_the_flags_to_the_sampler(capsys, monkeypatch, items):
    calls = []
    real = inference.sample_groups

    def recording(model, tok, prompts, G, budget, temperature=1.0, gen=None, controls=None):
        calls.append((G, temperature, controls))
        return real(model, tok, prompts, G, budget, temperature, gen, controls)

    monkeypatch.setattr(inference, "sample_groups", recording)
    code, out, _ = run_cli(capsys, "eval", "--dataset", items, "--samples", 3, "--self-consistency", 2,
                           "--temperature", "0.7", "--top-k", 20, "--top-p", "0.9", "--min-p", "0.05",
                           "--repetition-penalty", "1.1")
    assert code == 0 and {"pass@3", "self_consistency@2"} <= set(json.loads(out))
    want = SamplingControls(top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.1)
    assert calls[0] == (1, 0.0, None)  # greedy accuracy: plain argmax, whatever the flags
    assert calls[1:] == [(3, 0.7, want), (2, 0.7, want)]  # pass@3, then self-consistency@2
    calls.clear()
    assert run_cli(capsys, "eval", "--dataset", items, "--samples", 2)[0] == 0
    assert calls[1:] == [(2, 1.0, SamplingControls())]  # no flag: temperature 1, every control off


def test_top_k_one_makes_every_sample_the_greedy_completion(capsys, items):
    # with top_k 1 the sampler can only draw the argmax, so pass@1 = pass@4 = greedy accuracy; at temperature 1
    # without it the tiny base's samples disagree (checked: pass@4 > pass@1)
    code, out, _ = run_cli(capsys, "eval", "--dataset", items, "--samples", 4, "--top-k", 1)
    r = json.loads(out)
    assert code == 0 and r["pass@1"] == r["pass@4"] == r["greedy_accuracy"]
    code, out, _ = run_cli(capsys, "eval", "--dataset", items, "--samples", 4)
    r = json.loads(out)
    assert code == 0 and r["pass@4"] > r["pass@1"]


RUN = "steps: 2\nnum_prompts: 2\nnum_generations: 4\neval_size: 4\neval_every: 0\ncheckpoint_every: 0\nthreads: 1\n" \
      "device: cpu\n"


def history(tmp_path, capsys, yaml_text: str, name: str) -> list[dict]:
    (tmp_path / f"{name}.yaml").write_text(yaml_text)
    code, _, err = run_cli(capsys, "train", "--config", tmp_path / f"{name}.yaml", "--out", tmp_path / name)
    assert code == 0, err
    return [json.loads(line) for line in (tmp_path / name / "history.jsonl").read_text().splitlines()]


def test_a_run_sampling_with_top_p_and_top_k_logs_the_truncated_mass(tmp_path, capsys):
    steps = history(tmp_path, capsys, RUN + "top_p: 0.9\ntop_k: 20\n", "truncated")
    assert len(steps) == 2 and all(0.0 < m["sampling/truncated_mass"] < 1.0 for m in steps)
    # no control set: the sampler draws from the distribution the loss scores, and the metric is not logged
    plain = history(tmp_path, capsys, RUN, "plain")
    assert len(plain) == 2 and all("sampling/truncated_mass" not in m for m in plain)
