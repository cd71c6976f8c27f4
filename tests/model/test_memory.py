"""The memory estimator: parameter counts against real models, parts worked by hand, the
micro-batch suggestion, and the estimate against measured peak RSS of real steps."""
import sys
from pathlib import Path

import pytest

from grpo_kit.model.memory import (
    estimate_memory,
    lora_parameter_count,
    memory_table,
    model_shape,
    parameter_count,
    suggest_micro_batch,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not an installed package
from benchmarks import memory_check  # noqa: E402

# a toy shape whose numbers are easy to follow by hand
TOY = dict(vocab_size=10, hidden_size=4, intermediate_size=8, num_hidden_layers=2, num_attention_heads=2,
           num_key_value_heads=1, tie_word_embeddings=True)


def test_parameter_count_matches_the_real_models():
    from transformers import LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tiny_cfg = memory_check.model_config("tiny")
    assert parameter_count(model_shape(tiny_cfg)) == sum(p.numel() for p in LlamaForCausalLM(tiny_cfg).parameters())
    qwen = Qwen2Config(**{**TOY, "vocab_size": 50, "hidden_size": 8, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "tie_word_embeddings": False})  # q/k/v biases, untied head
    assert parameter_count(model_shape(qwen)) == sum(p.numel() for p in Qwen2ForCausalLM(qwen).parameters())
    # Qwen2-0.5B: 494M parameters (its model card), from the shape alone
    assert parameter_count(model_shape(memory_check.QWEN2_05B)) == pytest.approx(494e6, rel=0.002)


def test_toy_shape_by_hand():
    s = model_shape(TOY)  # head_dim 2, q = 4, kv = 2
    # per layer: q 4*4 + k 4*2 + v 4*2 + o 4*4 + MLP 3*4*8 + 2 norms of 4 = 152; embeddings 40; final norm 4
    assert parameter_count(s) == 40 + 2 * 152 + 4 == 348
    assert lora_parameter_count(s, r=2, targets=("q_proj", "v_proj")) == 2 * (2 * (4 + 4) + 2 * (4 + 2)) == 56
    e = estimate_memory(TOY, P=1, G=2, prompt_len=3, completion_len=2)
    assert (e["weights"], e["gradients"], e["optimizer"], e["reference"]) == (4 * 348, 4 * 348, 8 * 348, 0)
    assert estimate_memory(TOY, 1, 2, 3, 2, beta=0.04)["reference"] == 4 * 348
    lora = estimate_memory(TOY, 1, 2, 3, 2, beta=0.04, lora_r=2, lora_targets=("q_proj", "v_proj"))
    assert (lora["reference"], lora["gradients"], lora["optimizer"]) == (0, 4 * 56, 8 * 56)  # adapter off = reference
    # logits of a float32 micro-batch: b*Tc*V = 2*2*10 = 40 elements, kept + gradient (2 x 160 B) + 3 float32
    # temporaries (480 B) + the hidden states fed to the head 2*(2+1)*4 floats (96 B)
    assert e["logits"] == 320 + 480 + 96
    # bf16: logits and their gradient in bf16 (2 x 80 B), float32 chunk temporaries, the same hidden states
    assert estimate_memory(TOY, 1, 2, 3, 2, bf16=True)["logits"] == 160 + 480 + 96
    # generation cache: 2 (k, v) x 2 layers x 2 rows x 5 tokens x kv 2 x 4 B + 3 float32 (B, V)
    assert e["kv_cache"] == 2 * 2 * 2 * 5 * 2 * 4 + 3 * 2 * 10 * 4
    assert "| **peak** (at " in memory_table(e, unit="MiB")


def test_bigger_batches_need_more_and_checkpointing_needs_less():
    cfg = memory_check.QWEN2_05B
    kw = dict(P=16, G=8, prompt_len=256, completion_len=512, bf16=True)
    small, big = (estimate_memory(cfg, micro_batch=b, **kw)["peak"] for b in (8, 64))
    assert small < big
    acts = estimate_memory(cfg, micro_batch=64, **kw)["activations"]
    assert estimate_memory(cfg, micro_batch=64, gradient_checkpointing=True, **kw)["activations"] < acts / 4
    with pytest.raises(ValueError, match="must divide"):
        estimate_memory(cfg, micro_batch=3, **kw)


def test_suggest_micro_batch_is_the_largest_divisor_that_fits():
    cfg = memory_check.QWEN2_05B
    kw = dict(P=16, G=8, prompt_len=256, completion_len=512, bf16=True)
    peak = {b: estimate_memory(cfg, micro_batch=b, **kw)["peak"] for b in (8, 16)}
    assert suggest_micro_batch(peak[16], cfg, **kw) == 16
    assert suggest_micro_batch(peak[16] - 1, cfg, **kw) == 8  # 12..15 do not divide B = 128
    assert suggest_micro_batch(10 * 2**20, cfg, **kw) is None  # 10 MiB: not even the weights
    assert suggest_micro_batch(80 * 2**30, cfg, **kw) >= suggest_micro_batch(24 * 2**30, cfg, **kw)


def test_estimate_within_25_percent_of_measured_peak_rss_tiny_model():
    if not Path("/proc/self/status").exists():
        pytest.skip("peak RSS is read from /proc (Linux)")
    # freed blocks go back to the system (memory_check.RETURN_FREED): with glibc's default, the heap the
    # warm-up freed is reused without raising RSS, and the measured peak varied from 43 to 59 MiB between runs
    r = memory_check.run_case("tiny", steps=2, bf16=False, beta=0.0, threads=1, env=memory_check.RETURN_FREED)
    assert abs(r["error"]) < 0.25, r


@pytest.mark.full
def test_estimate_within_25_percent_of_measured_peak_rss_qwen2_shape_slice():
    """Two layers of Qwen2-0.5B's shape with its full vocabulary (~3.7 GB: embeddings, AdamW, logits)."""
    r = memory_check.run_case("qwen2-0.5b-2layers", steps=2, bf16=False, beta=0.0, threads=1)
    assert abs(r["error"]) < 0.25, r


def test_estimate_for_config_reads_lora_rank_and_targets_from_the_config():
    from grpo_kit.config import GRPOConfig
    from grpo_kit.model.memory import estimate_for_config

    cfg = GRPOConfig(num_prompts=1, num_generations=2, max_completion_length=2, beta=0.04, device="cpu",
                     lora={"r": 2, "target_modules": ["q_proj", "v_proj"]})
    e = estimate_for_config(cfg, TOY, prompt_len=3)
    # 56 adapter parameters (test_toy_shape_by_hand); the reference is the adapter off: no copy
    assert (e["reference"], e["gradients"], e["optimizer"]) == (0, 4 * 56, 8 * 56)
    assert e == estimate_memory(TOY, 1, 2, 3, 2, beta=0.04, log_kl=True, lora_r=2, lora_targets=("q_proj", "v_proj"),
                                device="cpu", pack_max_tokens=cfg.pack_max_tokens)  # 3 + 2 * 1 tokens: packed
    full = estimate_for_config(cfg.replace(lora=None), TOY, prompt_len=3)
    assert (full["reference"], full["gradients"]) == (4 * 348, 4 * 348)


def test_lora_estimate_within_25_percent_of_measured_peak_rss_tiny_model():
    """Measured with freed blocks returned to the system (``memory_check.RETURN_FREED``): with glibc's
    default, peft's freed temporaries stay on the heap and the high-water mark overstates live memory."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak RSS is read from /proc (Linux)")
    r = memory_check.run_case("tiny", steps=2, bf16=False, beta=0.0, threads=1, lora=True,
                              env=memory_check.RETURN_FREED)
    assert r["parts"]["gradients"] == 4 * 81_920  # r 8 on the 7 projections of 4 layers (test_lora.py counts them)
    assert abs(r["error"]) < 0.25, r


def test_a_run_the_machine_cannot_hold_is_refused_with_the_estimate_before_loading(monkeypatch):
    """Compare the estimate with the memory available before the weights, adapters, optimizer state or the
    step are allocated. The test makes the machine small (available memory patched), it allocates nothing big."""
    import importlib

    from grpo_kit.config import GRPOConfig
    from grpo_kit.errors import ConfigError
    from grpo_kit.model import memory
    from grpo_kit.model.tiny import load_model

    train = importlib.import_module("grpo_kit.loop.train")  # the module (grpo_kit.loop.train is also the function's name)
    cfg = GRPOConfig(num_prompts=2, num_generations=4, eval_size=8, eval_every=0, device="cpu", threads=1, steps=1)
    policy, tokenizer = load_model("tiny")
    peak = memory.estimate_for_config(cfg, policy.config, prompt_len=1, device="cpu")["peak"]
    monkeypatch.setattr(memory, "available_bytes", lambda device: peak // 2)

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the memory check")

    monkeypatch.setattr(train, "load_model", no_load)
    with pytest.raises(ConfigError, match=rf"needs at least {peak / 2**20:.1f} MiB of memory on cpu .*estimated peak "
                                          rf"{peak / 2**20:.1f} MiB.* {peak // 2 / 2**20:.1f} MiB is available"):
        train.setup(cfg)
    # a model passed in is already held: only what the run adds beyond it is compared
    held = sum(p.numel() * p.element_size() for p in policy.parameters())
    with pytest.raises(ConfigError, match=rf"needs at least {(peak - held) / 2**20:.1f} MiB .* beyond the"):
        train.setup(cfg, policy=policy, tokenizer=tokenizer)
    monkeypatch.setattr(memory, "available_bytes", lambda device: peak - held + 1)
    assert train.setup(cfg, policy=policy, tokenizer=tokenizer).policy is policy  # it fits: no refusal
    monkeypatch.setattr(memory, "available_bytes", lambda device: 0)
    monkeypatch.setenv(memory.NO_CHECK_ENV, "1")
    assert train.setup(cfg, policy=policy, tokenizer=tokenizer).policy is policy  # the documented way around it


def test_available_memory_without_psutil_reads_proc_meminfo(monkeypatch):
    from grpo_kit.model.memory import available_bytes

    if not Path("/proc/meminfo").exists():
        pytest.skip("Linux only")
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
              if line.startswith("MemAvailable:"))
    assert abs(available_bytes("cpu") - kb * 1024) < 2**30  # the system's figure moves a little between reads
