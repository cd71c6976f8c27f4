"""How much memory a GRPO step needs, from a model config and the batch shape, before loading anything.

    est = estimate_memory(config, P=16, G=8, prompt_len=256, completion_len=512, micro_batch=16)
    print(memory_table(est))                         # one row per part, in GiB
    suggest_micro_batch(80 * 2**30, config, ...)     # the largest micro-batch that fits 80 GiB

The parts (bytes), following what ``train.setup`` and ``step.train_step`` hold:

- ``weights``: the policy's parameters (float32 master copy, ``weight_bytes=4``).
- ``reference``: a frozen copy of the policy when ``beta != 0`` or ``log_kl`` (none with LoRA:
  the reference is the base with the adapter switched off).
- ``gradients``, ``optimizer``: one float32 gradient and AdamW's two float32 moments per
  *trainable* parameter (all of them, or the LoRA adapters').
- ``optimizer_scratch``: AdamW's temporaries during ``step()``: the foreach implementation
  (CUDA) makes one float32 tensor per parameter, the per-tensor one (CPU) two of the largest.
- ``bf16_weight_copies``: under bf16 autocast every matmul weight is cast to bf16 once per
  forward and kept for backward.
- ``activations``: tensors autograd keeps for backward in one micro-batch's training forward,
  per token and layer (counted with ``saved_tensors_hooks`` on a Llama/Qwen2 layer with SDPA):
  float32 ``28h + 16I + 8q + 8kv`` bytes, bf16 autocast ``28h + 8I + 4q + 4kv`` (the residual
  stream stays float32), h hidden, I MLP width, q = heads x head_dim, kv = KV heads x head_dim;
  with gradient checkpointing one float32 layer input per layer plus one layer's full set.
  The shared-prompt forward (``share_prompt_prefix``) runs P*Tp + B*(Tc-1) tokens and keeps the
  prompt's key-value cache repeated for each completion; when those tokens number at most
  ``pack_max_tokens`` the batch is packed into one row instead (``logprobs.pack_rows``): the same
  tokens, no repeated cache, and an N x N attention mask (bool, and the float copy SDPA makes).
  Every row is counted as distinct and full length: with ``dedupe_completions`` a batch whose
  groups repeat answers forwards fewer rows, and a packed batch forwards only the tokens up to
  each row's end, so the estimate is what the worst batch of this shape needs (the one to plan for).
- ``logits``: the (b, Tc, V) logits of one micro-batch in the dtype the step uses (bf16 under
  autocast, float32 otherwise), their gradient, and the float32 log-softmax copies: the whole
  tensor in float32, or one chunk (``logprobs.LOGSOFTMAX_CHUNK``) for bf16 logits.
- ``kv_cache``: generation's key-value cache for B rows of Tp + Tc tokens (in the forward's
  dtype), plus the float32 (B, V) sampling distribution.

The peak is the largest of three moments: sampling (the previous step's gradients are still
allocated), the policy's forward/backward, and the optimizer step. Checked against measured
peak RSS on a CPU by ``benchmarks/memory_check.py`` and ``tests/model/test_memory.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from grpo_kit.errors import ConfigError
from grpo_kit.model.lora import LORA_TARGETS, lora_settings

GiB = 2**30


@dataclass(frozen=True)
class Shape:
    """The numbers of a Llama/Qwen2-style decoder that memory depends on."""
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim


def model_shape(config) -> Shape:
    """A :class:`Shape` from a Hugging Face config object or a dict with the same keys."""
    get = (lambda k, d=None: config.get(k, d)) if isinstance(config, dict) else \
        (lambda k, d=None: getattr(config, k, d))
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if get(k) is None]
    if missing:
        raise ValueError(f"model config lacks {missing}: pass a Llama/Qwen2-style Hugging Face config or a dict "
                         f"with vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads")
    heads = int(get("num_attention_heads"))
    hidden = int(get("hidden_size"))
    return Shape(vocab=int(get("vocab_size")), hidden=hidden, intermediate=int(get("intermediate_size")),
                 layers=int(get("num_hidden_layers")), heads=heads,
                 kv_heads=int(get("num_key_value_heads") or heads),
                 head_dim=int(get("head_dim") or hidden // heads),
                 tied=bool(get("tie_word_embeddings", False)),
                 qkv_bias=bool(get("attention_bias", False)) or get("model_type") == "qwen2")


def linear_shapes(s: Shape) -> dict[str, tuple[int, int]]:
    """(in, out) of each projection of one decoder layer."""
    h, I = s.hidden, s.intermediate
    return {"q_proj": (h, s.q), "k_proj": (h, s.kv), "v_proj": (h, s.kv), "o_proj": (s.q, h),
            "gate_proj": (h, I), "up_proj": (h, I), "down_proj": (I, h)}


def parameter_count(s: Shape) -> int:
    """Parameters of the decoder: embeddings, layers, final norm, LM head (unless tied)."""
    per_layer = sum(i * o for i, o in linear_shapes(s).values()) + 2 * s.hidden
    per_layer += (s.q + 2 * s.kv) if s.qkv_bias else 0
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.layers * per_layer + s.hidden


def lora_parameter_count(s: Shape, r: int, targets=LORA_TARGETS) -> int:
    """Adapter parameters: r * (in + out) per targeted projection per layer."""
    shapes = linear_shapes(s)
    unknown = [t for t in targets if t not in shapes]
    if unknown:
        raise ValueError(f"unknown LoRA target(s) {unknown}; choose from {list(shapes)}")
    return s.layers * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets)


def _chunk(elements: int) -> int:
    from grpo_kit.model.logprobs import LOGSOFTMAX_CHUNK

    return min(elements, LOGSOFTMAX_CHUNK)


def activation_bytes(s: Shape, tokens: int, bf16: bool, checkpointing: bool = False, lora_r: int = 0,
                     lora_targets=LORA_TARGETS) -> int:
    """Bytes autograd keeps for backward in the decoder layers for ``tokens`` tokens."""
    h, I, q, kv = s.hidden, s.intermediate, s.q, s.kv
    per_token_layer = (28 * h + 8 * I + 4 * q + 4 * kv) if bf16 else (28 * h + 16 * I + 8 * q + 8 * kv)
    per_token_layer += 2 * lora_r * len(lora_targets) * (2 if bf16 else 4)  # x A and the dropout/scale input
    per_token_layer += 4 * s.heads  # attention log-sum-exp
    if checkpointing:  # each layer's float32 input, and one layer recomputed at a time
        return tokens * (s.layers * 4 * h + per_token_layer)
    return tokens * s.layers * per_token_layer + tokens * 8 * h  # + final norm


def logits_bytes(s: Shape, rows: int, completion_len: int, bf16: bool, temperature_scaled: bool = False,
                 grad: bool = True) -> int:
    """Logits of ``rows`` completions and what the log-prob/entropy computation adds (see the module doc)."""
    n = rows * completion_len * s.vocab  # elements of (b, Tc, V)
    if bf16:
        held = 2 * n * (2 if grad else 1)  # bf16 logits (+ their bf16 gradient)
        return held + 3 * 4 * _chunk(n)  # float32 chunk: scaled logits, exp, product
    held = 4 * n * (2 if grad else 1) + (4 * n if temperature_scaled else 0)
    return held + 3 * 4 * _chunk(n)  # logsumexp's and the entropy's float32 temporaries


def kv_cache_bytes(s: Shape, rows: int, tokens: int, bf16: bool) -> int:
    """Key and value of every layer for ``rows`` sequences of ``tokens`` tokens."""
    return 2 * s.layers * rows * tokens * s.kv * (2 if bf16 else 4)


def estimate_memory(config, P: int, G: int, prompt_len: int, completion_len: int, micro_batch: int | None = None,
                    bf16: bool = False, beta: float = 0.0, log_kl: bool = False, num_iterations: int = 1,
                    gradient_checkpointing: bool = False, share_prompt: bool = True, lora_r: int | None = None,
                    lora_targets=LORA_TARGETS, weight_bytes: int = 4, device: str = "cuda",
                    temperature_scaled: bool = False, pack_max_tokens: int = 0) -> dict[str, int]:
    """Bytes of each part of one GRPO step and ``peak`` (see the module doc); ``micro_batch`` None = B.

    ``bf16``: the step runs under bf16 autocast (CUDA with ``bf16=True``); ``device``: 'cuda'
    or 'cpu' (only changes AdamW's scratch); ``lora_r``: train LoRA adapters of this rank on
    ``lora_targets`` instead of every weight.
    """
    s = model_shape(config)
    B = P * G
    b = micro_batch or B
    if B % b:
        raise ValueError(f"micro_batch={b} must divide B = P*G = {B}")
    n_params = parameter_count(s)
    trainable = lora_parameter_count(s, lora_r, lora_targets) if lora_r else n_params
    largest = s.vocab * s.hidden
    need_ref = beta != 0 or log_kl
    part = {
        "weights": n_params * weight_bytes + (trainable * 4 if lora_r else 0),
        "reference": n_params * weight_bytes if need_ref and not lora_r else 0,
        "gradients": trainable * 4,
        "optimizer": 2 * trainable * 4,
        "optimizer_scratch": trainable * 4 if device == "cuda" else 2 * 4 * min(largest, trainable),
        # the input embedding is looked up, not multiplied: no bf16 copy unless it is also the (tied) LM head
        "bf16_weight_copies": 2 * (n_params - (0 if s.tied else s.vocab * s.hidden)) if bf16 else 0,
    }
    shared = share_prompt and G > 1 and not gradient_checkpointing and b % G == 0
    # shared: P prompts once, then the completion tokens but the last (it predicts nothing: logprobs.completion_logits)
    tokens = (b // G) * prompt_len + b * max(completion_len - 1, 0) if shared else b * (prompt_len + completion_len)
    packed = shared and tokens <= pack_max_tokens  # one row, no padding (logprobs.pack_rows)
    acts = activation_bytes(s, tokens, bf16, gradient_checkpointing, lora_r or 0, lora_targets)
    if packed:  # the N x N attention mask: bool, and the float mask SDPA builds from it
        acts += 5 * tokens * tokens
    elif shared:  # the prompt's cache, repeated for each of the b rows, is kept for backward
        acts += kv_cache_bytes(s, b, prompt_len, bf16)
    part["activations"] = acts
    part["logits"] = logits_bytes(s, b, completion_len, bf16, temperature_scaled) + b * (completion_len + 1) * s.hidden * 4
    # forwards without gradients (reference, old log-probs): a cache for the shared prompt, one micro-batch's logits
    no_grad = logits_bytes(s, b, completion_len, bf16, temperature_scaled, grad=False)
    if packed:
        no_grad += 5 * tokens * tokens
    elif shared:
        no_grad += kv_cache_bytes(s, b, prompt_len + completion_len, bf16)
    part["no_grad_forward"] = no_grad if (need_ref or num_iterations > 1) else 0
    part["kv_cache"] = kv_cache_bytes(s, B, prompt_len + completion_len, bf16) + 3 * B * s.vocab * 4
    static = part["weights"] + part["reference"] + part["optimizer"]
    moments = {
        "sampling": static + part["gradients"] + part["kv_cache"],
        "no_grad_forward": static + part["gradients"] + part["no_grad_forward"],
        "forward_backward": static + part["gradients"] + part["bf16_weight_copies"] + part["activations"]
        + part["logits"],
        "optimizer_step": static + part["gradients"] + part["optimizer_scratch"],
    }
    part["peak"] = max(moments.values())
    part["peak_at"] = max(moments, key=moments.get)  # type: ignore[assignment]
    return part


def estimate_for_config(cfg, model_config, prompt_len: int, completion_len: int | None = None,
                        device: str | None = None) -> dict[str, int]:
    """:func:`estimate_memory` for a ``GRPOConfig``: P, G, micro-batch, bf16, the KL reference, updates per
    batch, checkpointing, prompt sharing, packing and LoRA (``cfg.lora``'s r and target modules) come from ``cfg``;
    ``completion_len`` defaults to ``max_completion_length``, ``device`` to where ``cfg`` trains."""
    import torch


    if device is None:
        device = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu"
    lora = lora_settings(cfg.lora) if cfg.lora is not None else None
    return estimate_memory(model_config, cfg.num_prompts, cfg.num_generations, prompt_len,
                           completion_len or cfg.max_completion_length, micro_batch=cfg.micro_batch_size,
                           bf16=cfg.bf16 and (device == "cuda" or cfg.bf16_on_cpu), beta=cfg.beta, log_kl=cfg.log_kl,
                           num_iterations=cfg.num_iterations, gradient_checkpointing=cfg.gradient_checkpointing,
                           share_prompt=cfg.share_prompt_prefix, lora_r=lora["r"] if lora else None,
                           lora_targets=tuple(lora["target_modules"]) if lora else LORA_TARGETS, device=device,
                           pack_max_tokens=cfg.pack_max_tokens)


def available_bytes(device) -> int | None:
    """Memory free for new allocations on ``device``: the CUDA driver's free figure, or the RAM the system
    says is available (``psutil`` if installed, else ``MemAvailable`` in /proc/meminfo); None when unknown."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        import psutil
    except ImportError:
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024  # kB
        except (OSError, ValueError, IndexError):
            return None
        return None
    return int(psutil.virtual_memory().available)


NO_CHECK_ENV = "GRPO_KIT_NO_MEMORY_CHECK"
"""Set to 1 to skip :func:`check_fits` (when the estimate is known to be wrong for a model)."""


def check_fits(cfg, model_config, device, held: int = 0) -> None:
    """ConfigError when a run of ``cfg`` cannot fit: the estimated peak (:func:`estimate_for_config`, with
    one-token prompts: a lower bound) minus ``held`` (bytes of the model already loaded) exceeds the memory
    ``device`` has available. Nothing is checked for a config the estimator cannot read (not Llama/Qwen2-style)."""
    import os

    import torch

    if os.environ.get(NO_CHECK_ENV, "") not in ("", "0"):
        return
    device = torch.device(device)
    try:
        est = estimate_for_config(cfg, model_config, prompt_len=1, device=device.type)
    except (ValueError, TypeError):
        return
    have = available_bytes(device)
    need = est["peak"] - held
    if have is not None and need > have:
        more = f" beyond the {_size(held)} its model holds" if held else ""
        raise ConfigError(f"this run needs at least {_size(need)} of memory on {device.type}{more} (estimated peak "
                          f"{_size(est['peak'])} at {est['peak_at']}: grpo_kit.model.memory.estimate_for_config) "
                          f"but {_size(have)} is available; lower micro_batch_size, num_generations or "
                          f"max_completion_length, or train LoRA adapters (lora: {{r: 8}}); set {NO_CHECK_ENV}=1 "
                          f"to skip this check")


def _size(n: float) -> str:
    """Bytes as GiB, or MiB below one GiB."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / 2**20:.1f} MiB"


def suggest_micro_batch(memory_bytes: float, config, P: int, G: int, prompt_len: int, completion_len: int,
                        **kw) -> int | None:
    """The largest micro-batch (a divisor of B = P*G) whose estimated peak fits ``memory_bytes``;
    None when not even one row fits (then try LoRA, gradient checkpointing or a shorter completion)."""
    B = P * G
    for b in sorted((d for d in range(1, B + 1) if B % d == 0), reverse=True):
        if estimate_memory(config, P, G, prompt_len, completion_len, micro_batch=b, **kw)["peak"] <= memory_bytes:
            return b
    return None


def memory_table(est: dict, unit: str = "GiB") -> str:
    """A readable table of :func:`estimate_memory`'s parts (markdown, for a notebook or a README)."""
    div = {"GiB": GiB, "MiB": 2**20}[unit]
    rows = [f"| part | {unit} |", "|---|---|"]
    for k, v in est.items():
        if k in ("peak", "peak_at"):
            continue
        rows.append(f"| {k} | {v / div:.3f} |")
    rows.append(f"| **peak** (at {est['peak_at']}) | **{est['peak'] / div:.3f}** |")
    return "\n".join(rows)
