"""``GRPOConfig``: every knob of a run, its default, and what it means.

Field names follow TRL's ``GRPOConfig`` wherever TRL has the same knob (``num_generations``,
``beta``, ``epsilon``, ``epsilon_high``, ``delta``, ``loss_type``, ``scale_rewards``,
``importance_sampling_level``, ``max_completion_length``, ``temperature``, ``learning_rate``,
``max_grad_norm``, ``num_iterations``, ``mask_truncated_completions``), with TRL's meaning, so
that ``to_trl()`` is a plain copy. Defaults are tuned for the tiny model on a 2-core CPU.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import ConfigError


@dataclass
class GRPOConfig:
    # --- what to train
    model: str = "tiny"
    """A model folder written by ``save_pretrained``, a Hugging Face hub name, or ``"tiny"`` (the shipped base)."""
    task: str = "add2"
    """Built-in arithmetic task for prompts and the held-out split (see ``tasks.TASKS``)."""
    dataset: str | None = None
    """Optional jsonl of training items (kit rows or GSM8K rows); replaces the task's train split."""
    reward_funcs: list[str] = field(default_factory=lambda: ["exact_answer"])
    """Names from ``judges.REWARD_FUNCS``; callables can be passed to ``train()`` directly."""
    reward_weights: list[float] | None = None
    """One weight per reward function (TRL's ``reward_weights``); None means all 1."""
    seed: int = 0
    """Seeds prompt order, sampling and initialisation; a run is deterministic per seed on one machine."""

    # --- sampling (one step samples P prompts x G completions)
    steps: int = 400
    """Number of GRPO updates."""
    num_prompts: int = 16
    """P: prompts per step."""
    num_generations: int = 8
    """G: completions per prompt (TRL's ``num_generations``); at least 2, a group needs a comparison."""
    max_completion_length: int = 8
    """Tokens generated per completion at most (TRL's name); also the Dr. GRPO normaliser."""
    temperature: float | list[float] = 1.0
    """Sampling temperature; a list gives each group a mix (cycled over its G completions)."""

    # --- the objective
    scale_rewards: str = "none"
    """Advantage normalisation (TRL's name): 'group' z-score (DeepSeekMath), 'batch', or 'none' (Dr. GRPO)."""
    advantage_estimator: str = "grpo"
    """Advantage estimator by name (see ``advantages.ESTIMATORS``): 'grpo' uses ``scale_rewards`` (the
    default); 'rloo', 'rank', 'kmeans', 'topk', 'topk_minus_own_BROKEN_SIGN' (wrong sign, for study),
    'normalize_then_sum' / 'sum_then_normalize' (one objective per reward function, ``reward_weights``).
    'pairwise', 'process', 'hybrid_gae' need inputs the loop does not make and raise there."""
    loss_type: str = "dapo"
    """Aggregation of per-token losses: 'grpo', 'bnpo', 'dr_grpo' or 'dapo' (TRL's names and normalisers)."""
    beta: float = 0.0
    """KL coefficient against the frozen reference (k3 estimator); 0 drops the KL term from the loss."""
    epsilon: float = 0.2
    """Lower clip: ratios below 1 - epsilon stop pulling down negative-advantage tokens."""
    epsilon_high: float | None = None
    """Upper clip (DAPO's clip-higher, 0.28); None means equal to ``epsilon``."""
    delta: float | None = None
    """Optional cap on the unclipped ratio (INTELLECT-2 two-sided clipping); must exceed 1 + epsilon_high."""
    importance_sampling_level: str = "token"
    """'token' ratios (GRPO) or one 'sequence' ratio per completion (GSPO)."""
    num_iterations: int = 1
    """Updates per sampled batch (mu in DeepSeekMath); >1 makes the ratio and clipping matter."""
    kl_estimator: str = "k3"
    """KL estimator for ``beta`` and the logged KL: 'k1' (logp - ref), 'k2' (0.5 (logp - ref)^2) or 'k3' (TRL's)."""
    entropy_coef: float = 0.0
    """Entropy bonus (TRL's ``entropy_coef``): loss - entropy_coef * mean token entropy, whatever the loss_type; 0 = off."""
    mask_truncated_completions: bool = False
    """Drop completions that hit ``max_completion_length`` without EOS from the loss (DAPO)."""
    log_kl: bool = True
    """Compute and log KL to the reference even when beta == 0 (one extra forward per step)."""

    # --- optimisation
    learning_rate: float = 3e-4
    """AdamW learning rate (the tiny model; a 0.5B model wants about 1e-6)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lr_schedule: str = "constant"
    """'constant' or 'cosine' (with ``warmup_steps`` of linear warm-up)."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    micro_batch_size: int | None = None
    """Rows per forward/backward; None means the whole batch (B = P*G). Must divide B."""

    # --- hardware
    device: str = "auto"
    """'auto' (CUDA if present), 'cpu' or 'cuda'."""
    bf16: bool = True
    """bf16 autocast on CUDA (ignored on CPU, which trains in float32)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory (large models)."""
    share_prompt_prefix: bool = True
    """Encode each group's prompt once and share its key-value cache among the G completions, in
    sampling and in the log-prob forwards (P*Tp + B*Tc tokens instead of B*(Tp+Tc)); the same
    numbers up to float rounding. Off, or with gradient checkpointing: the plain forward."""
    threads: int | None = 2
    """torch CPU threads (None leaves torch's default)."""

    # --- bookkeeping
    eval_every: int = 50
    """Held-out greedy accuracy every N steps (0 = only before and after)."""
    eval_size: int = 500
    """Items of the held-out test split used for evaluation."""
    checkpoint_every: int = 100
    """Write a checkpoint every N steps when an output folder is given (0 = only at the end)."""
    keep_checkpoints: int = 2
    """How many recent checkpoints to keep."""

    # ------------------------------------------------------------------ methods
    @property
    def batch_size(self) -> int:
        """B = P * G completions per step."""
        return self.num_prompts * self.num_generations

    def validate(self) -> "GRPOConfig":
        """Check every field; raise :class:`ConfigError` naming the field, value and allowed range."""
        def need(ok, name, rule):
            if not ok:
                raise ConfigError(f"GRPOConfig.{name}={getattr(self, name)!r}: {rule}")

        need(isinstance(self.num_generations, int) and self.num_generations >= 2, "num_generations",
             "must be an integer >= 2 (a group of one completion has nothing to be compared with)")
        need(isinstance(self.num_prompts, int) and self.num_prompts >= 1, "num_prompts", "must be an integer >= 1")
        need(isinstance(self.steps, int) and self.steps >= 0, "steps", "must be an integer >= 0")
        need(isinstance(self.max_completion_length, int) and self.max_completion_length >= 1,
             "max_completion_length", "must be an integer >= 1")
        temps = self.temperature if isinstance(self.temperature, list) else [self.temperature]
        need(len(temps) > 0 and all(isinstance(t, (int, float)) and t > 0 for t in temps), "temperature",
             "must be > 0 (or a non-empty list of values > 0)")
        need(self.scale_rewards in ("group", "batch", "none"), "scale_rewards", "choose 'group', 'batch' or 'none'")
        from .advantages import ESTIMATORS

        need(self.advantage_estimator in ESTIMATORS, "advantage_estimator", f"choose one of {list(ESTIMATORS)}")
        need(self.kl_estimator in ("k1", "k2", "k3"), "kl_estimator", "choose 'k1', 'k2' or 'k3'")
        need(self.entropy_coef >= 0, "entropy_coef", "must be >= 0 (a negative bonus would punish exploration)")
        need(self.loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"), "loss_type",
             "choose 'grpo', 'bnpo', 'dr_grpo' or 'dapo'")
        need(self.beta >= 0, "beta", "must be >= 0 (it weighs a KL penalty)")
        need(0 < self.epsilon < 1, "epsilon", "must be in (0, 1)")
        need(self.epsilon_high is None or self.epsilon_high >= self.epsilon, "epsilon_high",
             f"must be >= epsilon={self.epsilon} (or None)")
        hi = self.epsilon if self.epsilon_high is None else self.epsilon_high
        need(self.delta is None or self.delta > 1 + hi, "delta", f"must be > 1 + epsilon_high = {1 + hi} (or None)")
        need(self.importance_sampling_level in ("token", "sequence"), "importance_sampling_level",
             "choose 'token' or 'sequence'")
        need(isinstance(self.num_iterations, int) and self.num_iterations >= 1, "num_iterations", "must be >= 1")
        need(self.learning_rate > 0, "learning_rate", "must be > 0")
        need(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        need(self.lr_schedule in ("constant", "cosine"), "lr_schedule", "choose 'constant' or 'cosine'")
        need(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "must be > 0")
        need(self.micro_batch_size is None or (isinstance(self.micro_batch_size, int) and self.micro_batch_size >= 1
                                               and self.batch_size % self.micro_batch_size == 0),
             "micro_batch_size", f"must divide the batch B = num_prompts*num_generations = {self.batch_size} (or None)")
        need(self.device in ("auto", "cpu", "cuda"), "device", "choose 'auto', 'cpu' or 'cuda'")
        need(self.eval_every >= 0, "eval_every", "must be >= 0")
        need(self.eval_size >= 1, "eval_size", "must be >= 1")
        need(self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0")
        need(self.keep_checkpoints >= 1, "keep_checkpoints", "must be >= 1")
        need(self.reward_weights is None or len(self.reward_weights) == len(self.reward_funcs), "reward_weights",
             f"needs one weight per reward function ({len(self.reward_funcs)})")
        return self

    # --- serialisation
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GRPOConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}; valid fields: {sorted(names)}")
        return cls(**d).validate()

    def to_yaml(self, path: str | Path | None = None) -> str:
        import yaml

        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_yaml(cls, path: str | Path) -> "GRPOConfig":
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
        return cls.from_yaml_text(text, source=str(path))

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<text>") -> "GRPOConfig":
        import yaml

        try:
            d = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config {source} is not valid YAML: {e}") from None
        if not isinstance(d, dict):
            raise ConfigError(f"config {source} must be a YAML mapping of field: value")
        return cls.from_dict(d)

    def replace(self, **changes) -> "GRPOConfig":
        return dataclasses.replace(self, **changes).validate()

    def to_trl(self) -> dict:
        """Keyword arguments for ``trl.GRPOConfig`` that give the same objective."""
        if self.advantage_estimator not in ("grpo", "sum_then_normalize", "normalize_then_sum"):
            raise ConfigError(f"GRPOConfig.advantage_estimator={self.advantage_estimator!r} has no TRL equivalent; "
                              f"use 'grpo', 'sum_then_normalize' or 'normalize_then_sum' to export to TRL")
        if self.kl_estimator != "k3":
            raise ConfigError(f"GRPOConfig.kl_estimator={self.kl_estimator!r}: TRL's GRPOTrainer uses k3 only; "
                              f"set kl_estimator='k3' to export to TRL")
        return {
            "multi_objective_aggregation": "normalize_then_sum" if self.advantage_estimator == "normalize_then_sum"
            else "sum_then_normalize",
            "num_generations": self.num_generations,
            "max_completion_length": self.max_completion_length,
            "temperature": self.temperature if not isinstance(self.temperature, list) else self.temperature[0],
            "scale_rewards": self.scale_rewards, "loss_type": self.loss_type, "beta": self.beta,
            "epsilon": self.epsilon, "epsilon_high": self.epsilon_high, "delta": self.delta,
            "importance_sampling_level": self.importance_sampling_level,
            "num_iterations": self.num_iterations,
            "mask_truncated_completions": self.mask_truncated_completions, "entropy_coef": self.entropy_coef,
            "learning_rate": self.learning_rate, "weight_decay": self.weight_decay,
            "lr_scheduler_type": "constant" if self.lr_schedule == "constant" else "cosine",
            "warmup_steps": self.warmup_steps, "max_grad_norm": self.max_grad_norm,
            "max_steps": self.steps, "seed": self.seed, "reward_weights": self.reward_weights,
            "per_device_train_batch_size": self.micro_batch_size or self.batch_size,
            "gradient_accumulation_steps": self.batch_size // (self.micro_batch_size or self.batch_size),
            "bf16": self.bf16 and self.device != "cpu",
            "top_k": 0, "top_p": 1.0,
        }
