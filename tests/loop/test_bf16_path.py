"""The bf16 code path CUDA runs, run on a CPU (``torch.autocast("cpu", bfloat16)`` via
``bf16_on_cpu``), and the dtype policy of ``step.py``: logits stay bf16 until the log-softmax,
only completion positions are projected, sampling runs under the scoring autocast, and the
first update's ratio is exactly 1. Plus the device rules (generator, ``device='cuda'``, resume).
"""
import logging

import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import ConfigError
from grpo_kit.loop import dynamic as dynamic_mod
from grpo_kit.loop import step as step_mod
from grpo_kit.loop.step import autocast_for, run_autocast
from grpo_kit.loop.train import STATE_FILE, grpo_step, latest_checkpoint, setup, train
from grpo_kit.model.logprobs import (
    completion_logits,
    completion_logprobs,
    token_logprobs,
)
from grpo_kit.model.sampling import sample_groups

PROMPTS = ["12+34=", "7+5="]
BF16 = torch.autocast("cpu", dtype=torch.bfloat16)


def _cfg(**kw):
    base = dict(steps=2, num_prompts=2, num_generations=4, max_completion_length=5, eval_every=0, eval_size=2,
                checkpoint_every=0, threads=1, device="cpu", bf16=True, bf16_on_cpu=True)
    return GRPOConfig(**{**base, **kw})


def _rollouts(model, tok, seed=0):
    with BF16:
        return sample_groups(model, tok, PROMPTS, 4, 5, [0.7, 1.0], torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the autocast choice

def test_autocast_is_bf16_on_cuda_and_on_cpu_only_when_asked():
    with autocast_for("cpu", bf16=True):
        assert not torch.is_autocast_enabled("cpu")  # CPU training stays float32 by default
    with autocast_for("cpu", bf16=True, on_cpu=True):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast_for("cpu", bf16=False, on_cpu=True):
        assert not torch.is_autocast_enabled("cpu")
    assert isinstance(autocast_for("cuda", bf16=True), torch.autocast)  # the object only; nothing runs on CUDA
    with run_autocast(_cfg(), torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu")


def test_config_checks_bf16_on_cpu_and_a_missing_gpu():
    with pytest.raises(ConfigError, match="bf16_on_cpu"):
        _cfg(bf16_on_cpu="yes").validate()
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"device='cuda'.*no CUDA GPU"):
            GRPOConfig(device="cuda").validate()


# ---------------------------------------------------------------- the chunked log-softmax

def test_bf16_token_logprobs_and_grads_match_float64_with_temperature():
    torch.manual_seed(0)
    B, T, V = 3, 4, 50
    logits = torch.randn(B, T, V).bfloat16().requires_grad_()
    targets = torch.randint(V, (B, T))
    temps = torch.tensor([0.7, 1.0, 1.3]).view(B, 1, 1)  # float32, one per row
    w = torch.randn(B, T)
    for chunk in (10**9, T * V):  # one chunk, then one row per chunk: the same numbers
        logp = token_logprobs(logits, targets, temps, chunk_elements=chunk)  # (B, T)
        assert logp.dtype == torch.float32
        (grad,) = torch.autograd.grad((logp * w).sum(), logits)
        x = logits.detach().double().requires_grad_()
        ref = torch.log_softmax(x / temps.double(), -1).gather(-1, targets[..., None])[..., 0]  # (B, T)
        (ref_grad,) = torch.autograd.grad((ref * w.double()).sum(), x)
        torch.testing.assert_close(logp.double(), ref, rtol=0, atol=1e-5)
        assert grad.dtype == torch.bfloat16  # the gradient of bf16 logits is bf16, like the logits
        torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-2, atol=1e-3)  # bf16 rounding of the result


def test_logits_stay_bf16_and_only_completion_positions_are_projected(tiny):
    model, tok = tiny
    ro = _rollouts(model, tok)
    B, Tc, V = ro.completion_ids.shape[0], ro.completion_ids.shape[1], model.config.vocab_size
    seen = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: seen.append((o.dtype, tuple(o.shape))))
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t

    temps = torch.tensor([0.7, 1.0] * 4).view(B, 1, 1)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, temps)
    try:
        model.train()
        with BF16, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp, ent = completion_logprobs(model, *args, with_entropy=True)  # plain path
        logp.sum().backward()
    finally:
        hook.remove()
        model.zero_grad(set_to_none=True)
        model.eval()
    assert seen == [(torch.bfloat16, (B, Tc + 1, V))]  # logits_to_keep: Tc + 1 positions, not Tp + Tc
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all() and torch.isfinite(ent).all()
    # nothing autograd keeps is a float32 (., ., V) tensor: the float32 log-softmax is transient, per chunk
    full_vocab = [(d, s) for d, s in saved if len(s) == 3 and s[-1] == V]
    assert full_vocab and all(d == torch.bfloat16 for d, s in full_vocab), full_vocab


def test_shared_prefix_and_plain_logprobs_agree_within_bf16_tolerance(tiny):
    model, tok = tiny
    ro = _rollouts(model, tok, seed=1)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, 1.0)
    with BF16, torch.no_grad():
        plain, _ = completion_logprobs(model, *args)
        shared, _ = completion_logprobs(model, *args, share_prompt=True)
        logits = completion_logits(model, *args[:4], share_prompt=True)
    m = ro.completion_mask.bool()
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(shared[m], plain[m], rtol=0, atol=0.05)  # bf16: 8 mantissa bits, |logit| ~ 10


# ---------------------------------------------------------------- the step under bf16

def test_bf16_step_samples_under_autocast_and_the_first_ratio_is_one(monkeypatch):
    cfg = _cfg(num_iterations=2, epsilon=0.01, beta=0.04)
    run = setup(cfg)
    dtypes = []
    hook = run.policy.lm_head.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    seen = []
    real = step_mod.grpo_loss  # the step calls the pure loss once per micro-batch

    def spy(logp, old, *a, **kw):
        seen.append((logp.detach().clone(), old.clone()))
        return real(logp, old, *a, **kw)

    monkeypatch.setattr(step_mod, "grpo_loss", spy)
    rollouts = {}
    real_sample = dynamic_mod.sample_groups  # grpo_step samples through dynamic.sample_batch

    def keep(*a, **kw):
        rollouts["r"] = real_sample(*a, **kw)
        return rollouts["r"]

    monkeypatch.setattr(dynamic_mod, "sample_groups", keep)
    m = grpo_step(run)
    hook.remove()
    assert dtypes and set(dtypes) == {torch.bfloat16}  # sampling and scoring both ran under bf16 autocast
    assert torch.isfinite(torch.tensor([m["loss"], m["grad_norm"], m["kl"]])).all() and m["skipped"] == 0
    (logp0, old0), (logp1, old1) = seen  # one micro-batch, two updates
    assert torch.equal(logp0, old0)  # ratio exactly 1 at the first update: old and new come from one forward
    assert torch.equal(old1, old0) and not torch.equal(logp1, old1)  # the second update sees the moved policy
    r = rollouts["r"]
    mask = r.completion_mask.bool()
    # old log-probs (full forward, bf16) vs the sampling-time ones (cached decoding, bf16): rounding only
    torch.testing.assert_close(old0[mask], r.sampling_logp[mask], rtol=0, atol=0.05)


def test_bf16_and_float32_steps_agree_roughly():
    cfg = _cfg(steps=1)
    a, b = setup(cfg), setup(cfg.replace(bf16_on_cpu=False))
    ma, mb = grpo_step(a), grpo_step(b)
    # bf16 rounds the logits (8 mantissa bits), and a CPU without native bf16 kernels rounds in other
    # places than one with them: a draw or two of the B = 8 may flip, so the mean reward (each
    # completion 0 or 1) agrees to two completions' worth, not bit for bit
    assert abs(ma["reward"] - mb["reward"]) <= 2 / 8
    assert ma["loss"] == pytest.approx(mb["loss"], abs=0.02)


# ---------------------------------------------------------------- devices and resume

def test_sampling_generator_must_be_on_the_models_device(tiny):
    model, tok = tiny
    run = setup(_cfg(bf16_on_cpu=False), policy=model, tokenizer=tok)
    assert run.sample_gen.device == next(model.parameters()).device

    class Elsewhere:  # stands in for a CUDA generator on a CPU-only machine
        device = torch.device("cuda")

    with pytest.raises(ValueError, match="torch.Generator"):
        sample_groups(model, tok, PROMPTS, 2, 3, 1.0, Elsewhere())


def test_resume_from_another_device_type_warns_and_continues(tmp_path, caplog):
    cfg = _cfg(bf16_on_cpu=False, steps=2)
    first = setup(cfg)
    list(train(cfg, first, out_dir=tmp_path, should_stop=lambda: first.step >= 1))
    state_file = latest_checkpoint(tmp_path) / STATE_FILE
    state = torch.load(state_file, weights_only=True)
    state["device"], state["sample_gen"] = "cuda", torch.zeros(16, dtype=torch.uint8)  # as a CUDA run writes it
    torch.save(state, state_file)
    resumed = setup(cfg)
    with caplog.at_level(logging.WARNING, logger="grpo_kit.loop.train"):
        list(train(cfg, resumed, out_dir=tmp_path, resume=True))
    assert resumed.step == 2 and "written on cuda and resumes on cpu" in caplog.text
