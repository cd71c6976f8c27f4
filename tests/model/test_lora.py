"""LoRA GRPO (lora.py): the reference is the base model exactly, with no second copy of the weights;
config errors; exact checkpoint resume; adapters saved, loaded and merged."""
import pytest
import torch
from safetensors.torch import load_file

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import CheckpointError, ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.loop.step import batch_logprobs, micro_slices
from grpo_kit.loop.train import grpo_step, latest_checkpoint, setup, train
from grpo_kit.model.logprobs import activation_checkpointing, completion_logprobs
from grpo_kit.model.lora import AdapterOff, linear_module_names, merge_adapter
from grpo_kit.model.memory import lora_parameter_count, model_shape
from grpo_kit.model.sampling import row_temperatures, sample_groups
from grpo_kit.model.tiny import load_model

FAST = {"num_prompts": 2, "num_generations": 4, "eval_size": 8, "eval_every": 0, "device": "cpu", "threads": 1, "steps": 4}
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}


def _logprobs(model, rollouts, cfg):
    temps = row_temperatures(cfg.temperature, rollouts.num_prompts, rollouts.num_generations, "cpu").unsqueeze(-1)
    return batch_logprobs(model, rollouts, temps, micro_slices(rollouts.completion_ids.shape[0], None),
                          torch.no_grad(), share_prompt=True)  # (B, Tc)


def _adapter_of(model) -> list[torch.Tensor]:
    return [p for n, p in sorted(model.named_parameters()) if "lora_" in n]


def _rollouts(run):
    prompts = [it["prompt"] for it in run.train_items[:2]]
    return sample_groups(run.policy, run.tokenizer, prompts, 4, 8, generator=torch.Generator().manual_seed(3))


# Two loads of one model hold the same bits at other addresses; on some CPUs the float32 matmul
# kernels then sum in another order (9.5e-7 apart on the tiny model was seen on one machine, 0 on
# another). So a comparison with a *second load* of the base asserts the weights bit for bit and the
# log-probs to FP32_TWO_LOADS; what is the same computation on the same tensors in one process
# (the reference before and after updates; the adapter off vs a zero adapter) stays bit-exact.
FP32_TWO_LOADS = 1e-5  # a few float32 ulps of log-probs of size ~1-10, summed over 4 layers
BF16_TWO_LOADS = 0.05  # one bf16 rounding (8 bits of mantissa) of an activation, carried to the logits


def _base_weights_equal(policy, base) -> bool:
    """The frozen weights under ``policy``'s adapters are ``base``'s, bit for bit."""
    mine = {k.replace("base_layer.", ""): v for k, v in policy.get_base_model().state_dict().items() if "lora_" not in k}
    theirs = base.state_dict()
    return mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_reference_log_probs_equal_the_base_models_before_and_after_updates():
    cfg = GRPOConfig(**FAST, lora=LORA, beta=0.04, learning_rate=5e-3)
    run = setup(cfg)
    base, _ = load_model("tiny")
    assert isinstance(run.ref, AdapterOff) and run.ref.policy is run.policy
    assert _base_weights_equal(run.policy, base)
    ro = _rollouts(run)
    ref0 = _logprobs(run.ref, ro, cfg)
    assert torch.equal(ref0, _logprobs(run.policy, ro, cfg))  # adapter off == a zero adapter (B = 0 adds exact 0s)
    torch.testing.assert_close(ref0, _logprobs(base, ro, cfg), rtol=0, atol=FP32_TWO_LOADS)
    for _ in range(3):
        m = grpo_step(run)
    assert m["kl"] > 0  # the policy moved away from the reference ...
    assert not torch.allclose(_logprobs(run.policy, ro, cfg), ref0, atol=1e-3)
    assert torch.equal(_logprobs(run.ref, ro, cfg), ref0)  # ... which is still the base, bit for bit
    assert _base_weights_equal(run.policy, base)


def test_the_reference_holds_no_weights_of_its_own():
    run = setup(GRPOConfig(**FAST, lora=LORA, log_kl=True))
    base_n = 865_792  # the tiny model (test_memory checks parameter_count against it)
    # adapters: r (in + out) per target per layer = 4 layers x 4 x ((128+128) + (128+128) + (384+128)) = 16384
    adapter_n = 4 * 4 * (256 + 256 + 512)
    assert adapter_n == lora_parameter_count(model_shape(run.policy.config), 4, LORA["target_modules"]) == 16_384
    params = list(run.policy.parameters())
    assert len({p.data_ptr() for p in params}) == len(params)
    assert sum(p.numel() for p in params) == base_n + adapter_n  # one copy of the base in the whole run
    assert sum(p.numel() for p in params if p.requires_grad) == adapter_n
    assert sum(p.numel() for g in run.optimizer.param_groups for p in g["params"]) == adapter_n
    assert vars(run.ref) == {"policy": run.policy}  # the reference is a view of the policy, nothing more
    ro = _rollouts(run)
    before = _logprobs(run.ref, ro, run.cfg)
    with torch.no_grad():  # a change to the policy's base weights is a change to the reference
        run.policy.get_base_model().model.layers[0].mlp.up_proj.weight.mul_(2)
    assert not torch.equal(_logprobs(run.ref, ro, run.cfg), before)


def test_reference_forward_keeps_the_policy_mode_and_skips_dropout():
    run = setup(GRPOConfig(**FAST, lora={**LORA, "dropout": 0.5}, log_kl=True))
    ro = _rollouts(run)
    run.policy.train()
    a, b = _logprobs(run.ref, ro, run.cfg), _logprobs(run.ref, ro, run.cfg)
    assert torch.equal(a, b) and run.policy.training


@pytest.mark.parametrize("lora, words", [
    ({"rank": 8}, "unknown key(s) ['rank']"),
    ({"r": 0}, "r=0 must be a whole number >= 1"),
    ({"alpha": -1}, "alpha=-1 must be a finite number > 0"),
    ({"dropout": 1.0}, "dropout=1.0 must be a number in [0, 1)"),
    ({"target_modules": []}, "must be a non-empty list"),
    ([8], "must be a mapping"),
])
def test_bad_lora_settings_are_named(lora, words):
    with pytest.raises(ConfigError) as e:
        check_config(GRPOConfig(lora=lora))
    assert words in str(e.value)


def test_unknown_target_module_lists_the_models_linear_modules():
    model, _ = load_model("tiny")
    assert linear_module_names(model) == ["down_proj", "gate_proj", "k_proj", "lm_head", "o_proj", "q_proj",
                                          "up_proj", "v_proj"]
    with pytest.raises(ConfigError) as e:
        setup(GRPOConfig(**FAST, lora={"target_modules": ["q_proj", "c_attn"]}))
    assert "['c_attn'] are not linear modules" in str(e.value) and "'down_proj', 'gate_proj'" in str(e.value)


def test_lora_with_gradient_checkpointing_gets_the_same_gradients():
    grads = []
    for ckpt in (False, True):
        run = setup(GRPOConfig(**FAST, lora=LORA, gradient_checkpointing=ckpt, log_kl=False))
        ro = _rollouts(run)
        run.policy.train()
        assert activation_checkpointing(run.policy) == ckpt  # seen through the peft wrapper
        lp, _ = completion_logprobs(run.policy, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                    ro.completion_mask, 1.0)
        ((lp * ro.completion_mask).sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in run.policy.parameters() if p.requires_grad]))
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def _adapter(ckpt):
    return load_file(ckpt / "adapter_model.safetensors")


def test_checkpoint_resume_is_exact(tmp_path):
    cfg = GRPOConfig(**FAST, lora={**LORA, "dropout": 0.1}, learning_rate=5e-3, checkpoint_every=2, beta=0.04)
    straight = setup(cfg)
    list(train(cfg, straight, out_dir=tmp_path / "straight"))
    cut = setup(cfg)
    list(train(cfg, cut, out_dir=tmp_path / "cut", should_stop=lambda: cut.step >= 2))
    assert cut.step == 2 and (tmp_path / "cut/checkpoints/step-000002/adapter_config.json").is_file()
    assert not (tmp_path / "cut/checkpoints/step-000002/model.safetensors").exists()  # the adapter only
    resumed = setup(cfg)
    list(train(cfg, resumed, out_dir=tmp_path / "cut", resume=True))
    a, b = _adapter(latest_checkpoint(tmp_path / "straight")), _adapter(latest_checkpoint(tmp_path / "cut"))
    assert a.keys() == b.keys() and len(a) == 4 * 3 * 2
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], _adapter(tmp_path / "cut/checkpoints/step-000002")[k]) for k in a)
    sa, sb = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)


def test_resume_with_other_lora_settings_is_refused(tmp_path):
    cfg = GRPOConfig(**{**FAST, "steps": 1}, lora=LORA)
    list(train(cfg, setup(cfg), out_dir=tmp_path))
    for other in (cfg.replace(lora={**LORA, "r": 8}), cfg.replace(lora=None)):
        with pytest.raises(CheckpointError, match="different config .*lora: "):
            list(train(other, setup(other), out_dir=tmp_path, resume=True))


def test_saved_adapter_loads_with_peft_and_merges_into_the_weights(tmp_path):
    cfg = GRPOConfig(**{**FAST, "steps": 2}, lora=LORA, learning_rate=5e-2)
    run = setup(cfg)
    list(train(cfg, run, out_dir=tmp_path))
    ckpt = latest_checkpoint(tmp_path)
    ro = _rollouts(run)
    trained = _logprobs(run.policy, ro, cfg)
    from peft import PeftModel

    loaded = PeftModel.from_pretrained(load_model("tiny")[0], str(ckpt))
    assert all(torch.equal(a, b) for a, b in zip(_adapter_of(loaded), _adapter_of(run.policy)))  # the adapter, bit for bit
    torch.testing.assert_close(_logprobs(loaded, ro, cfg), trained, rtol=0, atol=FP32_TWO_LOADS)  # a second load
    merged = merge_adapter(load_model("tiny")[0], ckpt)
    assert type(merged).__name__ == "LlamaForCausalLM" and not any("lora" in n for n, _ in merged.named_parameters())
    assert not torch.allclose(trained, _logprobs(load_model("tiny")[0], ro, cfg), atol=1e-3)  # the adapter matters
    torch.testing.assert_close(_logprobs(merged, ro, cfg), trained, rtol=0, atol=1e-5)


def test_lora_settings_read_from_yaml():
    cfg = GRPOConfig.from_yaml_text("lora:\n  r: 4\n  target_modules: [q_proj, v_proj]\n")
    assert cfg.lora == {"r": 4, "target_modules": ["q_proj", "v_proj"]}
    assert GRPOConfig.from_yaml_text(cfg.to_yaml()).lora == cfg.lora
    with pytest.raises(ConfigError, match="unknown key"):
        check_config(GRPOConfig.from_yaml_text("lora: {rank: 4}"))


def test_lora_on_the_bf16_autocast_path():
    """The CUDA code path on a CPU (bf16_on_cpu): the reference is still the base under the same autocast."""
    from grpo_kit.loop.step import autocast_for

    cfg = GRPOConfig(**FAST, lora=LORA, beta=0.04, bf16=True, bf16_on_cpu=True, learning_rate=5e-3)
    run = setup(cfg)
    base, _ = load_model("tiny")
    ro = _rollouts(run)
    temps = row_temperatures(1.0, ro.num_prompts, ro.num_generations, "cpu").unsqueeze(-1)
    slices = micro_slices(ro.completion_ids.shape[0], None)

    def bf16_logprobs(mdl):
        return batch_logprobs(mdl, ro, temps, slices, autocast_for("cpu", True, True), True)

    ref0 = bf16_logprobs(run.ref)
    assert torch.equal(ref0, bf16_logprobs(run.policy))  # adapter off == a zero adapter, under autocast too
    m = grpo_step(run)
    assert all(torch.isfinite(torch.tensor(m[k])) for k in ("loss", "grad_norm", "kl"))
    assert torch.equal(bf16_logprobs(run.ref), ref0)  # the update moved the adapter only
    assert _base_weights_equal(run.policy, base)
    mask = ro.completion_mask.bool()
    torch.testing.assert_close(ref0[mask], bf16_logprobs(base)[mask], rtol=0, atol=BF16_TWO_LOADS)  # a second load


def _smallest_targeted_size(targets):
    base, _ = load_model("tiny")
    return min(min(m.in_features, m.out_features) for name, m in base.named_modules()
               if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets)


def test_a_rank_above_the_targeted_layers_sizes_is_refused_before_peft_allocates(monkeypatch):
    """lora: {r: 1000000} once let peft allocate r x (in + out) per layer until the OOM killer ended the process:
    r is bounded by min(in, out) of the targeted layers, checked before peft is asked for anything."""
    import peft

    from grpo_kit.model.lora import add_lora

    targets = ["q_proj", "down_proj"]
    limit = _smallest_targeted_size(targets)

    def must_not_allocate(*a, **k):
        raise AssertionError("peft.get_peft_model was called with a rank above the layers' sizes")

    monkeypatch.setattr(peft, "get_peft_model", must_not_allocate)
    for r in (limit + 1, 1_000_000):
        with pytest.raises(ConfigError, match=rf"lora r={r} exceeds {limit}\b.*choose r <= {limit}"):
            setup(GRPOConfig(**FAST, lora={"r": r, "target_modules": targets}))
        with pytest.raises(ConfigError, match=rf"r={r} exceeds {limit}\b"):
            add_lora(load_model("tiny")[0], {"r": r, "target_modules": targets})
    monkeypatch.undo()
    model = add_lora(load_model("tiny")[0], {"r": limit, "target_modules": targets})  # the bound itself is allowed
    assert model.peft_config["default"].r == limit
