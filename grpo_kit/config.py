"""``GRPOConfig``: every knob of a run, its default, and what it means.

Field names follow TRL's ``GRPOConfig`` wherever TRL has the same knob (``num_generations``,
``beta``, ``epsilon``, ``epsilon_high``, ``delta``, ``loss_type``, ``scale_rewards``,
``importance_sampling_level``, ``max_completion_length``, ``temperature``, ``learning_rate``,
``max_grad_norm``, ``num_iterations``, ``mask_truncated_completions``), with TRL's meaning, so
that ``to_trl()`` is a plain copy. Defaults are tuned for the tiny model on a 2-core CPU.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import ConfigError


def _is_int(v) -> bool:
    """A whole number, and not a bool (``True`` is an int in Python but never a count)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    """A finite int or float, not a bool."""
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))


def _task_names() -> list[str]:
    """Built-in generators and tasks that ship a held-out ``datasets/<task>_test.jsonl``."""
    from .tasks import DATASETS_DIR, TASKS

    shipped = {p.name[:-len("_test.jsonl")] for p in DATASETS_DIR.glob("*_test.jsonl")}
    return sorted(set(TASKS) | shipped)


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
    steps: int = 500
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
    lr_schedule: str = "cosine"
    """'cosine' (decay to 0 over ``steps``, after ``warmup_steps`` of linear warm-up) or 'constant'.

    Cosine is the default because at a constant 3e-4 the tiny model's held-out accuracy still
    swings by +-10 points late in a run (seed 1 ended at 64% after touching 75%); decaying the
    step size lets it settle (91-94% at 500 steps for seeds 0-2)."""
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

    # --- steering a run over time (schedules.py, dynamic.py, replay.py; notebook 04)
    samples_per_step: int | None = None
    """B: completions per step, fixed while G changes (P = B / G); None means num_prompts * num_generations."""
    group_size_schedule: list | None = None
    """G by fraction of the run, e.g. [[0.0, 16], [0.3, 8], [0.7, 4]] (each G must divide samples_per_step); None = fixed."""
    adaptive_group_size: bool = False
    """Double G when frac_reward_zero_std stays above adaptive_grow_above, halve it when it stays below
    adaptive_shrink_below (for adaptive_patience steps in a row); starts at num_generations."""
    group_size_bounds: list[int] = field(default_factory=lambda: [4, 16])
    """[G_min, G_max] of the adaptive rule."""
    adaptive_grow_above: float = 0.5
    """Fraction of zero-variance groups above which the adaptive rule counts towards doubling G."""
    adaptive_shrink_below: float = 0.2
    """Fraction of zero-variance groups below which it counts towards halving G (the gap is the hysteresis)."""
    adaptive_patience: int = 3
    """Steps in a row past a threshold before G changes; each change resets the count."""
    task_schedule: list | None = None
    """Difficulty curriculum: [[0.0, "add1"], [0.5, "add2"]]; a value may list tasks to mix. None = ``task``."""
    reward_schedule: list | None = None
    """Reward curriculum: [[0.0, ["format"]], [0.2, ["exact_answer"]]]. None = ``reward_funcs``."""
    curriculum_by: str = "fraction"
    """'fraction': schedule entries start at their fraction of the run; 'accuracy': they are stages, and
    the run moves on at the first evaluation whose held-out accuracy on the stage's task reaches curriculum_accuracy."""
    curriculum_accuracy: float = 0.8
    """Held-out greedy accuracy that ends a curriculum stage (curriculum_by='accuracy')."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop groups whose rewards are all equal and draw more rounds of P prompts."""
    dynamic_max_rounds: int = 3
    """Rounds drawn per step at most (the first included); then the batch is topped up with dropped groups."""
    replay_fraction: float = 0.0
    """Share of each batch's groups taken from the replay buffer (0 = off); the rest is sampled fresh."""
    replay_capacity: int = 64
    """Groups the replay buffer holds at most (the weakest mean |advantage| are dropped first)."""
    replay_max_age: int = 4
    """Steps a stored group may wait before it is evicted (its behaviour policy grows stale)."""
    replay_min_abs_advantage: float = 0.0
    """Only groups with mean |advantage| above this are stored (0 keeps every group with any signal)."""
    completion_budget: int | None = None
    """Stop after this many generated completions (``steps`` is then an upper bound); schedules and the
    LR schedule then run by the share of the budget spent, so strategies compare at equal generation cost."""

    # --- bookkeeping
    eval_every: int = 50
    """Held-out greedy accuracy every N steps (0 = only before and after)."""
    eval_size: int = 500
    """Items of the held-out test split used for evaluation."""
    checkpoint_every: int = 100
    """Write a checkpoint every N steps when an output folder is given (0 = only at the end)."""
    keep_checkpoints: int = 2
    """How many recent checkpoints to keep."""

    # --- reliability (what happens when input or numbers go bad)
    on_bad_row: str = "raise"
    """Malformed rows in ``dataset``: 'raise' a DataError naming file, line and reason, or 'skip' and count them."""
    reward_error_policy: str = "raise"
    """A reward that raises or is NaN/inf: 'raise' a RewardError, 'skip' the sample (advantage 0, masked
    from the loss) or 'zero' it (that function's reward becomes 0); counted in ``rewards/bad_samples``."""
    reward_timeout_s: float | None = None
    """Seconds a reward function may take per batch; None runs it inline without a limit (see judges.py)."""
    max_consecutive_skips: int = 5
    """Stop with a TrainingError after this many steps in a row whose update was skipped (0 = never stop)."""

    # ------------------------------------------------------------------ methods
    @property
    def batch_size(self) -> int:
        """B = P * G completions per step."""
        return self.num_prompts * self.num_generations

    def validate(self) -> "GRPOConfig":
        """Check every field, its type first; raise :class:`ConfigError` naming the field, value and allowed range."""
        def need(ok, name, rule):
            if not ok:
                raise ConfigError(f"GRPOConfig.{name}={getattr(self, name)!r}: {rule}")

        def choice(name, options):
            need(isinstance(getattr(self, name), str) and getattr(self, name) in options, name,
                 "choose " + ", ".join(repr(o) for o in options))

        def integer(name, low, optional=False, extra=""):
            v = getattr(self, name)
            need((optional and v is None) or (_is_int(v) and v >= low), name,
                 f"must be a whole number >= {low}{' (or None)' if optional else ''}{extra}")

        def number(name, rule, ok, optional=False):
            v = getattr(self, name)
            need((optional and v is None) or (_is_num(v) and ok(v)), name,
                 f"must be a finite number {rule}{' (or None)' if optional else ''}")

        def boolean(name):
            need(isinstance(getattr(self, name), bool), name, "must be true or false")

        # what to train
        need(isinstance(self.model, str) and self.model.strip() != "", "model",
             "must be a model folder, a Hugging Face hub name or 'tiny'")
        need(isinstance(self.task, str) and self.task in _task_names(), "task", f"choose one of {_task_names()}")
        need(self.dataset is None or (isinstance(self.dataset, str) and self.dataset.strip() != ""), "dataset",
             "must be the path of a jsonl file (or None)")
        need(isinstance(self.reward_funcs, list) and len(self.reward_funcs) > 0
             and all((isinstance(f, str) and f != "") or callable(f) for f in self.reward_funcs), "reward_funcs",
             "must be a non-empty list of reward function names (see judges.REWARD_FUNCS)")
        need(self.reward_weights is None or (isinstance(self.reward_weights, list)
                                             and all(_is_num(w) for w in self.reward_weights)
                                             and len(self.reward_weights) == len(self.reward_funcs)),
             "reward_weights", f"needs one finite weight per reward function ({len(self.reward_funcs)}) (or None)")
        integer("seed", 0)
        need(self.seed < 2**63, "seed", "must be < 2**63 (torch generators take 64-bit seeds)")
        # sampling
        integer("steps", 0)
        integer("num_prompts", 1)
        integer("num_generations", 2, extra=" (a group of one completion has nothing to be compared with)")
        integer("max_completion_length", 1)
        temps = self.temperature if isinstance(self.temperature, list) else [self.temperature]
        need(len(temps) > 0 and all(_is_num(t) and t > 0 for t in temps), "temperature",
             "must be a finite number > 0 (or a non-empty list of them)")
        # the objective
        choice("scale_rewards", ("group", "batch", "none"))
        from .advantages import ESTIMATORS

        choice("advantage_estimator", tuple(ESTIMATORS))
        choice("kl_estimator", ("k1", "k2", "k3"))
        number("entropy_coef", ">= 0 (a negative bonus would punish exploration)", lambda v: v >= 0)
        choice("loss_type", ("grpo", "bnpo", "dr_grpo", "dapo"))
        number("beta", ">= 0 (it weighs a KL penalty)", lambda v: v >= 0)
        number("epsilon", "in (0, 1)", lambda v: 0 < v < 1)
        number("epsilon_high", f">= epsilon={self.epsilon}", lambda v: v >= self.epsilon, optional=True)
        hi = self.epsilon if self.epsilon_high is None else self.epsilon_high
        number("delta", f"> 1 + epsilon_high = {1 + hi}", lambda v: v > 1 + hi, optional=True)
        choice("importance_sampling_level", ("token", "sequence"))
        integer("num_iterations", 1)
        boolean("mask_truncated_completions")
        boolean("log_kl")
        boolean("share_prompt_prefix")
        # optimisation
        number("learning_rate", "> 0", lambda v: v > 0)
        number("weight_decay", ">= 0", lambda v: v >= 0)
        choice("lr_schedule", ("constant", "cosine"))
        integer("warmup_steps", 0)
        number("max_grad_norm", "> 0", lambda v: v > 0)
        integer("micro_batch_size", 1, optional=True)
        from .schedules import samples_per_step, validate_steering

        validate_steering(self)  # steering fields: schedules, adaptive G, curricula, dynamic sampling, replay
        B = samples_per_step(self)
        need(self.micro_batch_size is None or B % self.micro_batch_size == 0, "micro_batch_size",
             f"must divide the batch B = {'samples_per_step' if self.samples_per_step else 'num_prompts*num_generations'}"
             f" = {B} (or None)")
        # hardware
        choice("device", ("auto", "cpu", "cuda"))
        boolean("bf16")
        boolean("gradient_checkpointing")
        integer("threads", 1, optional=True)
        # bookkeeping
        integer("eval_every", 0)
        integer("eval_size", 1)
        integer("checkpoint_every", 0)
        integer("keep_checkpoints", 1)
        # reliability
        choice("on_bad_row", ("raise", "skip"))
        choice("reward_error_policy", ("raise", "skip", "zero"))
        number("reward_timeout_s", "> 0", lambda v: v > 0, optional=True)
        integer("max_consecutive_skips", 0)
        need(self.reward_error_policy != "skip" or self.advantage_estimator == "grpo", "reward_error_policy",
             f"'skip' needs advantage_estimator='grpo' (it is {self.advantage_estimator!r}, which cannot leave "
             f"samples out); use 'zero' or 'raise'")
        return self

    # --- serialisation
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GRPOConfig":
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a mapping of field: value, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(repr(k) if not isinstance(k, str) else k for k in d if k not in names)
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
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or " ".join(str(e).split())
            raise ConfigError(f"config {source} is not valid YAML: {problem}{where}") from None
        if not isinstance(d, dict):
            raise ConfigError(f"config {source} must be a YAML mapping of field: value")
        return cls.from_dict(d)

    def replace(self, **changes) -> "GRPOConfig":
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}")
        return dataclasses.replace(self, **changes).validate()

    def to_trl(self) -> dict:
        """Keyword arguments for ``trl.GRPOConfig`` that give the same objective."""
        steering = [k for k in ("group_size_schedule", "adaptive_group_size", "task_schedule", "reward_schedule",
                                "dynamic_sampling", "replay_fraction", "completion_budget", "samples_per_step")
                    if getattr(self, k) not in (None, False, 0.0)]
        if steering:
            raise ConfigError(f"GRPOConfig fields {steering} steer the run over time and have no TRL equivalent; "
                              f"reset them to their defaults to export to TRL")
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
