"""GRPO on LoRA adapters (peft): the policy trains low-rank adapters, the reference is the adapter off.

    cfg = GRPOConfig(lora={"r": 8, "alpha": 16}, learning_rate=2e-3)
    run = setup(cfg)                       # run.policy: a peft model; run.ref: AdapterOff(run.policy)

| piece | what it does | source |
|---|---|---|
| ``add_lora`` | W x + (alpha / r) B A dropout(x) on ``target_modules``; B starts at 0 | Hu et al. 2021, LoRA (arXiv:2106.09685) |
| ``AdapterOff`` | the reference policy: the same weights with the adapter switched off | what TRL does with a peft model |
| ``merge_adapter`` | W + (alpha / r) B A written into the weights, for export | LoRA section 4.1 |

Every weight of the base model exists once: the frozen base is the reference, so a run with
``beta != 0`` (or ``log_kl``) needs no second copy of the model, only one more forward. Only
the adapters are trained, so gradients and AdamW state are those of the adapters (see the
memory estimator, ``memory.py``).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from grpo_kit.errors import CheckpointError, ConfigError

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_DEFAULTS = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": list(LORA_TARGETS)}
ADAPTER_FILE = "adapter_model.safetensors"  # what peft's save_pretrained writes


def check_lora(lora) -> None:
    """``GRPOConfig.lora``: None, or a mapping of the keys of ``LORA_DEFAULTS`` with sound values (ConfigError)."""
    if lora is None:
        return

    def bad(rule: str):
        raise ConfigError(f"GRPOConfig.lora={lora!r:.200}: {rule}")

    if not isinstance(lora, dict):
        bad("must be a mapping such as {r: 8, alpha: 16, dropout: 0.0, target_modules: [q_proj, v_proj]} (or None)")
    unknown = sorted(str(k) for k in lora if k not in LORA_DEFAULTS)
    if unknown:
        bad(f"unknown key(s) {unknown}; the keys are {list(LORA_DEFAULTS)}")
    s = lora_settings(lora)
    r, alpha, dropout, targets = s["r"], s["alpha"], s["dropout"], s["target_modules"]
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        bad(f"r={r!r} must be a whole number >= 1 (the adapter's rank)")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0 or alpha == float("inf"):
        bad(f"alpha={alpha!r} must be a finite number > 0 (the update is scaled by alpha / r)")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        bad(f"dropout={dropout!r} must be a number in [0, 1)")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        bad(f"target_modules={targets!r} must be a non-empty list of linear module names, e.g. [q_proj, v_proj]")


def lora_settings(lora: dict) -> dict:
    """``GRPOConfig.lora`` with the defaults filled in."""
    return {**LORA_DEFAULTS, **lora}


def linear_module_names(model: torch.nn.Module) -> list[str]:
    """The last name part of every ``nn.Linear`` in ``model`` (what ``target_modules`` may name), sorted."""
    return sorted(linear_sizes(model))


def linear_sizes(model: torch.nn.Module) -> dict[str, int]:
    """Each ``nn.Linear`` name part (see :func:`linear_module_names`) -> the smallest min(in, out) among those layers."""
    sizes: dict[str, int] = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            key = name.rsplit(".", 1)[-1]
            sizes[key] = min(sizes.get(key, m.in_features), m.in_features, m.out_features)
    return sizes


def check_rank(lora: dict, sizes: dict[str, int]) -> None:
    """ConfigError when ``lora``'s r exceeds min(in, out) of a targeted layer (``sizes``: :func:`linear_sizes`, or
    ``memory.linear_shapes`` before loading): such a rank adds nothing a full update lacks, only memory."""
    s = lora_settings(lora)
    targeted = {t: sizes[t] for t in s["target_modules"] if t in sizes}
    if targeted and s["r"] > min(targeted.values()):
        limit = min(targeted.values())
        smallest = [t for t, n in targeted.items() if n == limit]
        raise ConfigError(f"GRPOConfig.lora r={s['r']} exceeds {limit}, the smallest in/out size of the targeted "
                          f"layers ({', '.join(smallest)}); choose r <= {limit}")


def add_lora(model: torch.nn.Module, lora: dict, adapter_name: str = "default"):
    """``model`` wrapped in a peft ``PeftModel`` with a LoRA adapter: the base weights frozen, the adapter
    trainable (A random from torch's generator, B zero: the wrapped model computes what ``model`` did).

    A target module name the model lacks is a ConfigError that lists the model's linear module names, and so
    is an r above a targeted layer's min(in, out) (:func:`check_rank`)."""
    from peft import get_peft_model

    s = lora_settings(lora)
    sizes = linear_sizes(model)
    missing = [t for t in s["target_modules"] if t not in sizes]
    if missing:
        raise ConfigError(f"GRPOConfig.lora target_modules {missing} are not linear modules of this model "
                          f"({type(model).__name__}); its linear modules are {sorted(sizes)}")
    check_rank(lora, sizes)  # before peft allocates r x (in + out) per layer
    with _quiet_peft():
        return get_peft_model(model, peft_config(lora), adapter_name=adapter_name)


def peft_config(lora: dict):
    """``GRPOConfig.lora`` as a peft ``LoraConfig`` (what ``add_lora`` applies, and what ``--engine trl``
    hands to TRL's ``GRPOTrainer(peft_config=...)``, whose reference is also the adapter switched off)."""
    from peft import LoraConfig

    s = lora_settings(lora)
    return LoraConfig(r=s["r"], lora_alpha=s["alpha"], lora_dropout=float(s["dropout"]),
                      target_modules=list(s["target_modules"]), bias="none", task_type="CAUSAL_LM")


def is_lora(model) -> bool:
    """Whether ``model`` is a peft model (its checkpoint is an adapter, its reference the adapter off)."""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def weights_file(model) -> str:
    """The file a checkpoint keeps ``model``'s trained weights in: the adapter's, or the whole model's."""
    return ADAPTER_FILE if is_lora(model) else "model.safetensors"


class AdapterOff:
    """The reference policy of a LoRA run: ``policy`` run with its adapter disabled, in eval mode.

    It holds no weights of its own: ``ref(**batch)`` is ``policy(**batch)`` under
    ``policy.disable_adapter()``, so the reference is the base model exactly, before and after
    any number of updates of the adapter."""

    training = False  # a reference never recomputes activations (logprobs.completion_logits asks)

    def __init__(self, policy):
        self.policy = policy

    @property
    def config(self):
        return self.policy.config

    def get_base_model(self):
        return self.policy.get_base_model()

    def __call__(self, *args, **kwargs):
        was_training = self.policy.training
        self.policy.eval()  # no dropout in the reference, whatever mode the policy is in
        try:
            with self.policy.disable_adapter():
                return self.policy(*args, **kwargs)
        finally:
            self.policy.train(was_training)


def load_adapter_weights(policy, weights: dict, path: Path) -> None:
    """Put a checkpoint's adapter tensors (``adapter_model.safetensors``) into ``policy``; every adapter
    tensor must be there and nothing else (CheckpointError otherwise)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    expected = set(get_peft_model_state_dict(policy))
    missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {path} holds another adapter than this run's LoRA settings make "
                              f"(missing {missing[:3]}, unexpected {unexpected[:3]}); resume with the lora "
                              f"settings it was written with")
    set_peft_model_state_dict(policy, weights)


def merge_adapter(base: torch.nn.Module, adapter_dir: str | Path) -> torch.nn.Module:
    """``base`` with the adapter saved in ``adapter_dir`` (peft ``save_pretrained``) merged into its
    weights: a plain transformers model with W + (alpha / r) B A in each targeted layer."""
    from peft import PeftModel

    with _quiet_peft():
        return PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()


@contextmanager
def _quiet_peft():
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` when it wraps a model: not the user's concern."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield
