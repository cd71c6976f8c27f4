"""``grpo-kit export``: a folder that from_pretrained loads (full and LoRA runs), with the run's
sampling settings in generation_config.json and the vLLM command printed."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.loop.train import setup, train
from grpo_kit.model.tiny import load_model

FAST = {"num_prompts": 2, "num_generations": 4, "eval_size": 8, "eval_every": 0, "device": "cpu", "threads": 1,
        "steps": 2, "temperature": 0.7, "max_completion_length": 6}
PROMPTS = ["12+34=", "5+5=", "99+1="]


def _logits(model, tok):
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits  # (3, T, V)


@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8}])
def test_export_loads_with_from_pretrained_and_computes_what_the_run_does(tmp_path, capsys, lora):
    cfg = GRPOConfig(**FAST, lora=lora, learning_rate=5e-2 if lora else 3e-4)
    run = setup(cfg)
    list(train(cfg, run, out_dir=tmp_path / "run"))
    capsys.readouterr()
    assert main(["export", "--run", str(tmp_path / "run"), "--to", str(tmp_path / "exp")]) == 0
    out = capsys.readouterr().out
    exp = tmp_path / "exp"
    assert f"vllm serve {exp} --generation-config auto --dtype auto --max-model-len 256" in out
    assert ("LoRA adapter merged" in out) == (lora is not None)
    files = sorted(p.name for p in exp.iterdir())
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= set(files)
    assert not {"trainer_state.pt", "adapter_model.safetensors", "adapter_config.json"} & set(files)
    model, tok = AutoModelForCausalLM.from_pretrained(exp), AutoTokenizer.from_pretrained(exp)
    assert not any("lora" in n for n, _ in model.named_parameters())
    tok.padding_side = "left"
    run.policy.eval()
    want = _logits(run.policy, tok)  # the LoRA model (adapter on), or the fully trained one
    if lora is None:  # the trained weights bit for bit; the logits of a second load to float32 rounding
        # (another CPU's kernels may sum in another order for tensors at other addresses)
        trained = run.policy.state_dict()
        assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())
        torch.testing.assert_close(_logits(model, tok), want, rtol=0, atol=1e-5)
    else:
        torch.testing.assert_close(_logits(model, tok), want, rtol=0, atol=1e-5)  # merged: rounding only
        assert not torch.allclose(_logits(load_model("tiny")[0], tok), want, atol=1e-3)  # the adapter mattered
    g = GenerationConfig.from_pretrained(exp)
    assert (g.do_sample, g.temperature, g.top_p, g.top_k, g.max_new_tokens) == (True, 0.7, 1.0, 0, 6)
    assert g.eos_token_id == tok.eos_token_id and g.pad_token_id == tok.pad_token_id
    assert json.loads((exp / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_the_generation_config_carries_the_runs_sampling_controls():
    from grpo_kit.engines.export import generation_config

    tok = load_model("tiny")[1]
    run = {"temperature": 0.7, "max_completion_length": 6, "top_k": 20, "top_p": 0.9, "min_p": 0.05,
           "repetition_penalty": 1.1}
    g = generation_config(run, tok)
    assert (g.temperature, g.top_k, g.top_p, g.min_p, g.repetition_penalty) == (0.7, 20, 0.9, 0.05, 1.1)
    old = generation_config({"temperature": 0.7, "max_completion_length": 6}, tok)  # a run from before the controls
    assert (old.top_k, old.top_p, old.min_p, old.repetition_penalty) == (0, 1.0, None, 1.0)
