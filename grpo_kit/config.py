"""``GRPOConfig``: every knob of a run, its default, and what it means.

Field names follow TRL's ``GRPOConfig`` wherever TRL has the same knob (``num_generations``,
``beta``, ``epsilon``, ``epsilon_high``, ``delta``, ``loss_type``, ``scale_rewards``,
``importance_sampling_level``, ``max_completion_length``, ``temperature``, ``learning_rate``,
``max_grad_norm``, ``num_iterations``, ``mask_truncated_completions``), with TRL's meaning;
``grpo_kit.engines.trl_engine.trl_kwargs`` maps the rest (a kit step is ``num_iterations`` TRL
optimizer steps) and refuses what TRL cannot express. Defaults are tuned for the tiny model on a
2-core CPU.

``validate()`` checks what a config says by itself: types, ranges and the rules between fields. The
names a config gives (a task, reward functions, an estimator, step and pairwise judges, LoRA
targets, schedules) are checked against the kit's registries by ``grpo_kit.loop.checks.check_config``,
which ``setup()`` and every CLI command run before anything is loaded; this module imports nothing
of the kit but its errors.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from grpo_kit.errors import ConfigError


def _is_int(v) -> bool:
    """A whole number, and not a bool (``True`` is an int in Python but never a count)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    """A finite int or float, not a bool."""
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))


def _show(value, limit: int = 200) -> str:
    """A bounded repr: deep or huge values (a YAML alias bomb) are cut, never expanded in full."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxdict, r.maxtuple, r.maxset = 3, 8, 8, 8, 8
    r.maxstring, r.maxother, r.maxlong = limit, limit, 60
    text = r.repr(value)
    return text if len(text) <= limit + 20 else text[:limit] + "..."


_FLOAT_TEXT = __import__("re").compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
MAX_YAML_NODES = 100_000
"""A config is a few dozen values; a YAML document that expands (through aliases) past this many
nodes is refused before it is built (a "billion laughs" file would take gigabytes)."""


def _yaml_size(node, seen: dict) -> int:
    """Nodes in the expanded document (aliases counted every time they are used), memoised per node."""
    key = id(node)
    if key in seen:
        return seen[key]
    seen[key] = 1  # a cycle counts once
    value = node.value if isinstance(node.value, list) else []
    n = 1
    for child in value:
        for part in (child if isinstance(child, tuple) else (child,)):
            n += _yaml_size(part, seen)
            if n > MAX_YAML_NODES:
                break
    seen[key] = n
    return n


TRL_ONLY_LOSS_TYPES = ("cispo", "sapo", "luspo", "vespo")


def datasets_type(v) -> str | None:
    """'Dataset' or 'DatasetDict' for such an object of the ``datasets`` library (known by its type, without
    importing ``datasets``), else None."""
    name = type(v).__name__
    return name if type(v).__module__.split(".")[0] == "datasets" and name in ("Dataset", "DatasetDict") else None


def whole(default, low: int, optional: bool = False, why: str = ""):
    """A field that holds a whole number >= ``low`` (or None when ``optional``); ``why`` ends the error."""
    rule = f"must be a whole number >= {low}{' (or None)' if optional else ''}{why}"
    return field(default=default, metadata={"rule": (rule, lambda v: _is_int(v) and v >= low, optional)})


def real(default, rule: str, ok: Callable[[float], bool], optional: bool = False):
    """A field that holds a finite number for which ``ok`` holds (``rule`` says which, in the error)."""
    text = f"must be a finite number {rule}{' (or None)' if optional else ''}"
    return field(default=default, metadata={"rule": (text, lambda v: _is_num(v) and ok(v), optional)})


def field_rule(name: str, annotation, cls=None) -> tuple[str, Callable, bool] | None:
    """(rule text, test, None allowed) of a field of ``cls`` (default :class:`GRPOConfig`): from its
    ``whole``/``real`` metadata, a ``Literal`` of its choices, or ``bool``; None for a field checked by a
    named rule in ``validate()``."""
    f = (cls or GRPOConfig).__dataclass_fields__[name]
    if "rule" in f.metadata:
        return f.metadata["rule"]
    if typing.get_origin(annotation) is Literal:
        options = typing.get_args(annotation)
        return "choose " + ", ".join(repr(o) for o in options), lambda v: isinstance(v, str) and v in options, False
    if annotation is bool:
        return "must be true or false", lambda v: isinstance(v, bool), False
    return None


def names_in(v) -> list[str] | None:
    """A schedule value as a list of names (a task or reward function, or a list of them); None when it is neither."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and v and all(isinstance(t, str) for t in v):
        return list(v)
    return None


def schedule_entries(cfg, name: str, value_ok: Callable, value_rule: str) -> None:
    """A schedule is a non-empty list of [fraction, value] with fractions in [0, 1], strictly rising, first 0.0;
    a :class:`ConfigError` names the entry."""
    sched = getattr(cfg, name)
    if not isinstance(sched, list) or not sched:
        cfg.refuse(name, "must be a non-empty list of [fraction, value] entries (or None), e.g. [[0.0, ...], [0.5, ...]]")
    prev = None
    for i, e in enumerate(sched):
        where = f"GRPOConfig.{name}[{i}]={_show(e)}"
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise ConfigError(f"{where}: each entry must be a pair [fraction, value]")
        frac, value = e
        if not (_is_num(frac) and 0.0 <= frac <= 1.0):
            raise ConfigError(f"{where}: the fraction must be a number in [0, 1] (the share of the run "
                              f"after which the value applies)")
        if i == 0 and frac != 0.0:
            raise ConfigError(f"{where}: the first entry must start at fraction 0.0, so the run starts with a value")
        if prev is not None and frac <= prev:
            raise ConfigError(f"{where}: fractions must rise strictly (the previous entry starts at {prev}); "
                              f"put the entries in order")
        if not value_ok(value):
            raise ConfigError(f"{where}: {value_rule}")
        prev = frac


class ConfigFile:
    """What :class:`GRPOConfig` and :class:`OfflineConfig` share: YAML in and out, unknown fields refused,
    each field's declared rule checked (``whole``, ``real``, a ``Literal`` of choices, ``bool``), and
    :meth:`refuse`, the one error every check raises. A subclass is a dataclass with a ``validate()``."""

    def refuse(self, name: str, rule: str):
        """Raise the :class:`ConfigError` every check raises: the field, its value (cut when huge) and the rule."""
        raise ConfigError(f"{type(self).__name__}.{name}={_show(getattr(self, name))}: {rule}")

    def check_declared(self) -> None:
        """Each field's own rule, from its declaration, in the order of the fields."""
        for name, annotation in _hints(type(self)).items():
            rule = field_rule(name, annotation, type(self))
            v = getattr(self, name)
            if rule is not None and not (rule[2] and v is None) and not rule[1](v):
                self.refuse(name, rule[0])

    def validate(self):
        self.check_declared()
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a mapping of field: value, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(_show(k, 60) if not isinstance(k, str) else k[:60] for k in d if k not in names)
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown[:5]}{' and more' if len(unknown) > 5 else ''}; "
                              f"valid fields: {sorted(names)}")
        return cls(**d).validate()

    def to_yaml(self, path: str | Path | None = None) -> str:
        import yaml

        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_yaml(cls, path: str | Path):
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
        return cls.from_yaml_text(text, source=str(path))

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<text>"):
        import yaml

        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            if node is not None and _yaml_size(node, {}) > MAX_YAML_NODES:
                raise ConfigError(f"config {source} expands to more than {MAX_YAML_NODES} values (through YAML "
                                  f"aliases); a config is a mapping of a few dozen fields: write them out")
            if isinstance(node, yaml.MappingNode):  # YAML keeps the last of two equal keys without a word
                first: dict = {}
                for key, _ in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value in first:
                        raise ConfigError(f"config {source} sets {key.value[:60]!r} twice (lines "
                                          f"{first[key.value]} and {key.start_mark.line + 1}); keep one")
                    if isinstance(key, yaml.ScalarNode):
                        first[key.value] = key.start_mark.line + 1
            d = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or " ".join(str(e).split())
            raise ConfigError(f"config {source} is not valid YAML: {problem}{where}") from None
        if not isinstance(d, dict):
            raise ConfigError(f"config {source} must be a YAML mapping of field: value")
        return cls.from_dict(_numbers_from_text(d, cls))

    def replace(self, **changes):
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}")
        return dataclasses.replace(self, **changes).validate()


@dataclass
class GRPOConfig(ConfigFile):
    # --- what to train
    model: str = "tiny"
    """A model folder written by ``save_pretrained``, a Hugging Face hub name, or ``"tiny"`` (the shipped base)."""
    task: str = "add2"
    """Built-in arithmetic task for prompts and the held-out split (see ``tasks.TASKS``)."""
    dataset: str | object | None = None
    """Training items, in place of the task's train split (the held-out split stays the task's): a ``.jsonl``
    (kit or GSM8K rows), ``.parquet`` or ``.csv`` file, a folder written by ``Dataset.save_to_disk``, a Hugging
    Face Hub name ``owner/name`` (read with ``datasets.load_dataset``; offline only from the local cache), or in
    Python a ``datasets.Dataset`` / ``DatasetDict`` (which ``to_yaml`` cannot write). See ``data/sources.py``."""
    dataset_columns: dict | None = None
    """Which columns of ``dataset`` hold the prompt and the answer, e.g. ``{prompt: question, answer: answer}``;
    None (or a key left out): ``prompt`` (GSM8K's ``question`` when there is no ``prompt``) and ``answer``.
    An answer ``"... #### 42"`` (GSM8K) is read as 42 with its worked ``solution``; the other columns
    reach reward functions as keyword arguments."""
    dataset_split: str | None = None
    """The split of a ``dataset`` that has splits (a Hub dataset, a ``DatasetDict`` or its folder); None: ``train``."""
    dataset_config: str | None = None
    """The configuration of a Hub ``dataset`` (``load_dataset``'s second argument: ``main`` for ``openai/gsm8k``)."""
    reward_funcs: list = field(default_factory=lambda: ["exact_answer"])
    """Reward functions, each a name from ``judges.REWARD_FUNCS``, an importable function
    ``"package.module:function"`` (``"trl.rewards:think_format_reward"``), or a factory with arguments
    ``{"function": "trl.rewards:get_soft_overlong_punishment", "args": {"max_completion_len": 8,
    "soft_punish_cache": 4}}``, a learned judge saved by ``grpo-kit train-judge`` as ``"learned:DIR"``, or a
    judge served over HTTP as ``"remote:http://127.0.0.1:PORT/get_reward"`` (``grpo-kit serve-judge``;
    timeout and retries through the factory ``grpo_kit.rewards.remote:remote_reward``); they get TRL's keyword
    arguments (see judges.py). Callables can be passed to ``setup()`` directly. Validating a config checks
    each entry's form only; ``setup()`` (train) and ``serve-judge`` import the modules and call the factories,
    which runs their code as a Python script would."""
    reward_weights: list[float] | None = None
    """One weight per reward function (TRL's ``reward_weights``); None means all 1."""
    gold_reward_funcs: list = field(default_factory=list)
    """Reward functions scored on the same completions every step and logged (``gold_reward``) beside the
    training reward, never used for the advantages: a second opinion that shows reward hacking
    (the training reward climbs while the gold one does not; see ``diagnostics.py``). Empty = none."""
    chat_template: Literal["auto", "on", "off"] = "auto"
    """How text prompts reach the model: 'auto' wraps each one as a user message and renders it with the
    tokenizer's chat template (``apply_chat_template(..., add_generation_prompt=True)``, as TRL renders a
    conversational prompt) when the tokenizer has one (``tokenizer.chat_template``), else sends the text
    as is; 'on' requires a template (a ConfigError at setup when the tokenizer has none); 'off' always
    sends the text as is. Prompts given as conversations always go through the template."""
    seed: int = whole(0, 0)
    """Seeds prompt order, sampling and initialisation; a run is deterministic per seed on one machine."""

    # --- sampling (one step samples P prompts x G completions)
    steps: int = whole(500, 0)
    """Number of GRPO updates. The same ``steps`` resumes bit-exactly. Resuming with another ``steps``
    stretches every schedule set by the fraction of the run (the learning-rate cosine and warm-up,
    ``group_size_schedule``, fraction curricula) over the new total, so from the resumed step on the
    values are those a run planned for the new total has there (a finished cosine run, which ended
    near 0, picks up at the middle of the longer curve). When that changes a value at the resumed step,
    the resume is refused with the list of changes unless ``--allow-schedule-change``
    (``train(..., allow_schedule_change=True)``); a resume that changes nothing (constant rate, no
    fraction schedule) goes ahead."""
    num_prompts: int = whole(16, 1)
    """P: prompts per step."""
    num_generations: int = whole(8, 2, why=" (a group of one completion has nothing to be compared with)")
    """G: completions per prompt (TRL's ``num_generations``); at least 2, a group needs a comparison."""
    max_completion_length: int = whole(8, 1)
    """Tokens generated per completion at most (TRL's name); also the Dr. GRPO normaliser."""
    temperature: float | list[float] = 1.0
    """Sampling temperature; a list gives each group a mix (cycled over its G completions; TRL has one
    temperature, so ``trl_kwargs()`` refuses a list)."""
    top_k: int = whole(0, 0, why=" (0 turns it off)")
    """Sample only from the k most likely tokens (TRL's and vLLM's ``top_k``); 0 is off. The loss still
    scores tokens under the temperature-scaled full distribution, as TRL does: the gap is logged as
    ``sampling/truncated_mass`` (``grpo_kit.model.truncation``)."""
    top_p: float = real(1.0, "in (0, 1] (1.0 turns it off)", lambda v: 0 < v <= 1)
    """Nucleus sampling (TRL's and vLLM's ``top_p``): the smallest set of likely tokens reaching this mass; 1.0 is off."""
    min_p: float = real(0.0, "in [0, 1) (0 turns it off)", lambda v: 0 <= v < 1)
    """Drop tokens below ``min_p`` times the most likely token's probability (TRL's and vLLM's ``min_p``); 0 is off."""
    repetition_penalty: float = real(1.0, "> 0 (1.0 turns it off)", lambda v: v > 0)
    """CTRL's penalty on tokens already in the prompt or completion (TRL's and vLLM's ``repetition_penalty``); 1.0 is off."""

    # --- the objective
    scale_rewards: Literal["group", "batch", "none"] = "none"
    """Advantage normalisation (TRL's name): 'group' z-score (DeepSeekMath), 'batch', or 'none' (Dr. GRPO)."""
    advantage_estimator: str = "grpo"
    """Advantage estimator by name (see ``advantages.ESTIMATORS``): 'grpo' uses ``scale_rewards`` (the
    default); 'rloo', 'rank', 'kmeans', 'topk', 'topk_minus_own_BROKEN_SIGN' (wrong sign, for study),
    'normalize_then_sum' / 'sum_then_normalize' (one objective per reward function, ``reward_weights``).
    'process' (per-token advantages from ``step_judge``), 'hybrid_gae' (group advantage mixed with GAE
    from a value head trained in the loop, ``hybrid_weight``) and 'pairwise' (win rates from
    ``pairwise_judges``) make more than one scalar per completion (``beyond_scalar.py``); the reward
    functions are still scored and logged with them. TRL has none of these three (``trl_kwargs()`` refuses them)."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    """Aggregation of per-token losses: 'grpo', 'bnpo', 'dr_grpo' or 'dapo' (TRL's names and normalisers;
    TRL 1.16's 'cispo', 'sapo', 'luspo' and 'vespo' are not implemented and refused by ``validate()``)."""
    beta: float = real(0.0, ">= 0 (it weighs a KL penalty)", lambda v: v >= 0)
    """KL coefficient against the frozen reference (k3 estimator); 0 drops the KL term from the loss.
    The KL term is not multiplied by the importance ratio (TRL's ``use_bias_correction_kl=False``,
    which ``trl_kwargs()`` sets; TRL's default True changes the KL gradient)."""
    epsilon: float = real(0.2, "in (0, 1)", lambda v: 0 < v < 1)
    """Lower clip: ratios below 1 - epsilon stop pulling down negative-advantage tokens."""
    epsilon_high: float | None = None
    """Upper clip (DAPO's clip-higher, 0.28); None means equal to ``epsilon``."""
    delta: float | None = None
    """Optional cap on the unclipped ratio (INTELLECT-2 two-sided clipping); must exceed 1 + epsilon_high."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """'token' ratios (GRPO) or one 'sequence' ratio per completion (GSPO)."""
    num_iterations: int = whole(1, 1)
    """Updates per sampled batch (mu in DeepSeekMath); >1 makes the ratio and clipping matter."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator for ``beta`` and the logged KL: 'k1' (logp - ref), 'k2' (0.5 (logp - ref)^2) or 'k3' (TRL's)."""
    entropy_coef: float = real(0.0, ">= 0 (a negative bonus would punish exploration)", lambda v: v >= 0)
    """Entropy bonus (TRL's ``entropy_coef``): loss - entropy_coef * mean token entropy, whatever the loss_type; 0 = off."""
    mask_truncated_completions: bool = False
    """Drop completions that hit ``max_completion_length`` without EOS from the loss (DAPO)."""
    log_kl: bool = True
    """Compute and log KL to the reference even when beta == 0 (one extra forward per step)."""

    # --- beyond one scalar per completion (beyond_scalar.py; advantage_estimator 'process', 'hybrid_gae', 'pairwise')
    step_judge: str = "column_sums"
    """``advantage_estimator='process'``: the judge of each completion's steps, a name of
    ``beyond_scalar.STEP_JUDGES`` or ``"package.module:function"`` with the signature
    ``judge(prompt, text, **columns) -> [(score, end), ...]`` (the completion's text second, the item's
    columns as keywords): one finite score per step and the character offset in ``text`` just past
    the step (increasing); the loop maps each end to the completion token it falls in, z-scores the
    scores over the group's steps and gives token t the sum of the scores of the steps ending at or
    after it. 'column_sums' (the default) reads the scratchpad task ``add2s``: each column sum is a
    step (1 right, 0 wrong), the answer after ``|`` the last one. A malformed answer is a RewardError."""
    hybrid_weight: float = real(0.3, "in [0, 1]", lambda v: 0 <= v <= 1)
    """``advantage_estimator='hybrid_gae'``: w in A = w * group advantage + (1 - w) * GAE, in [0, 1]
    (0.3 is a value you will meet in GRPO write-ups). The terms have different scales: with
    ``scale_rewards='group'`` the group term is a z-score (unit std in any group with signal), with
    'none' (the default) it is r - mean(r), in reward units; the GAE term is in reward units and
    shrinks as the value head learns to predict the reward. So w is not the share of the advantage
    that comes from the group term; the loop logs that share as
    ``advantages/group_share`` = w s_grp / (w s_grp + (1 - w) s_gae), with the two stds
    ``advantages/group_std`` and ``advantages/gae_std``."""
    gae_gamma: float = real(1.0, "in [0, 1]", lambda v: 0 <= v <= 1)
    """``hybrid_gae``: the discount gamma of GAE over completion tokens, in [0, 1] (1: no discount, as for LMs)."""
    gae_lambda: float = real(0.95, "in [0, 1]", lambda v: 0 <= v <= 1)
    """``hybrid_gae``: GAE's lambda in [0, 1] (0: one-step TD, trusts the value head; 1: Monte-Carlo return)."""
    value_lr: float = real(1e-3, "> 0", lambda v: v > 0)
    """``hybrid_gae``: learning rate of the value head's own AdamW (constant; one update per step on
    the GAE returns, logged as ``value/loss``). The head and its optimizer are saved in checkpoints."""
    pairwise_judges: list = field(default_factory=list)
    """``advantage_estimator='pairwise'``: the judges that build each step's (P, G, G) preference
    matrix, each pair asked in both orders and averaged (a position bias cancels). Entries:
    'correctness' or 'closeness' (rules of ``preferences.py``), ``"learned:PATH"`` (a learned judge's
    scalar reward function), ``"reward:NAME"`` (any ``reward_funcs`` entry as a scalar judge), or
    ``"package.module:function"`` (a rule ``rule(prompt, a, b, **columns) -> v``, v in [-1, 1]:
    +1 a wins, -1 b wins, 0 a tie, soft labels between; a probability q that a wins is 2q - 1).
    Empty (the default) with any other estimator."""
    pairwise_weights: list[float] | None = None
    """One non-negative weight per pairwise judge for the ensemble; None means all 1."""
    pairwise_ensemble: str = "mean"
    """How several pairwise judges combine: 'mean' (weighted mean of their matrices, soft labels) or
    'vote' (weighted majority of their signs, ties 0); see ``preferences.ensemble_preferences``."""
    pairwise_temperature: float | None = real(None, "> 0", lambda v: v > 0, optional=True)
    """Scalar pairwise judges (``learned:``, ``reward:``): None compares scores by sign (hard labels,
    equal scores tie); a temperature T > 0 gives soft Bradley-Terry labels tanh((s_i - s_j) / (2T))."""
    lora: dict | None = None
    """Train LoRA adapters instead of every weight (``lora.py``, peft): ``{"r": 8, "alpha": 16, "dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}``;
    a key left out takes that default, ``{}`` takes them all. The reference policy is the same model with
    the adapter switched off (no second copy of the weights); checkpoints hold the adapter, ``grpo-kit
    export`` merges it into the weights. None = full fine-tuning. LoRA wants a larger ``learning_rate``
    than full fine-tuning (the adapter starts at zero)."""

    # --- optimisation
    learning_rate: float = real(3e-4, "> 0", lambda v: v > 0)
    """AdamW learning rate (the tiny model; a 0.5B model wants about 1e-6)."""
    weight_decay: float = real(0.0, ">= 0", lambda v: v >= 0)
    """AdamW weight decay."""
    lr_schedule: Literal["constant", "cosine"] = "cosine"
    """'cosine' (decay to 0 over the run's ``steps * num_iterations`` optimizer updates, after
    ``warmup_steps`` of linear warm-up) or 'constant' (after the warm-up, if any).

    The schedule advances once per optimizer update, with transformers' formulas (warm-up factor
    u / warmup_steps at update u, counted from 0), as TRL's trainer does; with ``num_iterations=1``
    an update is a step.

    Cosine is the default because at a constant 3e-4 the tiny model's held-out accuracy still
    swings by +-10 points late in a run (seed 1 ended at 64% after touching 75%); decaying the
    step size lets it settle (91-94% at 500 steps for seeds 0-2)."""
    warmup_steps: int = whole(0, 0)
    """Linear warm-up, in optimizer updates (TRL's ``warmup_steps``; = steps when ``num_iterations=1``)."""
    max_grad_norm: float = real(1.0, "> 0", lambda v: v > 0)
    """Global gradient-norm clip."""
    micro_batch_size: int | None = whole(None, 1, optional=True)
    """Rows per forward/backward; None means the whole batch (B = P*G). Must divide B."""

    # --- hardware
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """'auto' (CUDA if present), 'cpu' or 'cuda'."""
    bf16: bool = True
    """bf16 autocast on CUDA for every forward (sampling, reference, training); ignored on a CPU,
    which trains in float32, unless ``bf16_on_cpu`` (see the dtype policy in ``step.py``)."""
    bf16_on_cpu: bool = False
    """With ``bf16``, run the same bf16 autocast on a CPU too: the CUDA code path, for tests and
    for checking a bf16 run without a GPU (slower than float32 on most CPUs; off by default)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory (large models)."""
    share_prompt_prefix: bool = True
    """Encode each group's prompt once and share its key-value cache among the G completions, in
    sampling and in the log-prob forwards (P*Tp + B*Tc tokens instead of B*(Tp+Tc)); the same
    numbers up to float rounding. Off, or with gradient checkpointing: the plain forward."""
    dedupe_completions: bool = True
    """Score identical rows (same prompt, completion and temperature: a group often samples the
    same short answer several times) once in the log-prob forwards and copy the result back, in
    the graph, so the gradient is the sum over the copies, as for separate rows; the same numbers
    up to float rounding, for the cost of the distinct rows (``logprobs.completion_logprobs``)."""
    pack_max_tokens: int = whole(1024, 0)
    """With ``share_prompt_prefix``: score a micro-batch as one row without padding (its distinct
    prompts, then each completion; a block attention mask lets each completion see its prompt and
    its own prefix, ``logprobs.pack_rows``) when that row has at most this many tokens: one forward,
    no key-value cache, no padding after a completion's end. The mask is N x N, so longer batches
    take the shared-cache path; 0 never packs. The same numbers up to float rounding."""
    threads: int | None = whole(2, 1, optional=True)
    """torch CPU threads (None leaves torch's default)."""

    # --- steering a run over time (schedules.py, dynamic.py, replay.py; notebook 04)
    samples_per_step: int | None = whole(None, 2, optional=True, why=": None means num_prompts*num_generations")
    """B: completions per step, fixed while G changes (P = B / G); None means num_prompts * num_generations."""
    group_size_schedule: list | None = None
    """G by fraction of the run, e.g. [[0.0, 16], [0.3, 8], [0.7, 4]] (each G must divide samples_per_step); None = fixed."""
    adaptive_group_size: bool = False
    """Double G when frac_reward_zero_std stays above adaptive_grow_above, halve it when it stays below
    adaptive_shrink_below (for adaptive_patience steps in a row); starts at num_generations."""
    group_size_bounds: list[int] = field(default_factory=lambda: [4, 16])
    """[G_min, G_max] of the adaptive rule."""
    adaptive_grow_above: float = real(0.5, "in [0, 1] (a fraction)", lambda v: 0 <= v <= 1)
    """Fraction of zero-variance groups above which the adaptive rule counts towards doubling G."""
    adaptive_shrink_below: float = real(0.2, "in [0, 1] (a fraction)", lambda v: 0 <= v <= 1)
    """Fraction of zero-variance groups below which it counts towards halving G (the gap is the hysteresis)."""
    adaptive_patience: int = whole(3, 1, why=" (steps in a row past a threshold before G changes)")
    """Steps in a row past a threshold before G changes; each change resets the count."""
    task_schedule: list | None = None
    """Difficulty curriculum: [[0.0, "add1"], [0.5, "add2"]]; a value may list tasks to mix. None = ``task``."""
    reward_schedule: list | None = None
    """Reward curriculum: [[0.0, ["format"]], [0.2, ["exact_answer"]]]. None = ``reward_funcs``."""
    curriculum_by: Literal["fraction", "accuracy"] = "fraction"
    """'fraction': schedule entries start at their fraction of the run; 'accuracy': they are stages, and
    the run moves on at the first evaluation whose held-out accuracy on the stage's task reaches curriculum_accuracy."""
    curriculum_accuracy: float = real(0.8, "in [0, 1] (a fraction)", lambda v: 0 <= v <= 1)
    """Held-out greedy accuracy that ends a curriculum stage (curriculum_by='accuracy')."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop groups whose rewards are all equal and draw more rounds of P prompts."""
    dynamic_max_rounds: int = whole(3, 1, why=" (rounds of P prompts drawn per step at most, the first included)")
    """Rounds drawn per step at most (the first included); then the batch is topped up with dropped groups."""
    replay_fraction: float = real(0.0, "in [0, 1) (a share of each batch's groups)", lambda v: 0 <= v < 1)
    """Share of each batch's groups taken from the replay buffer (0 = off); the rest is sampled fresh."""
    replay_capacity: int = whole(64, 1)
    """Groups the replay buffer holds at most (the weakest mean |advantage| are dropped first)."""
    replay_max_age: int = whole(4, 1, why=" (steps a stored group may wait)")
    """Steps a stored group may wait before it is evicted (its behaviour policy grows stale)."""
    replay_min_abs_advantage: float = real(0.0, ">= 0", lambda v: v >= 0)
    """Only groups with mean |advantage| above this are stored (0 keeps every group with any signal)."""
    completion_budget: int | None = whole(None, 1, optional=True, why=": None runs cfg.steps steps")
    """Stop after this many generated completions (``steps`` is then an upper bound); schedules and the
    LR schedule then run by the share of the budget spent, so strategies compare at equal generation cost."""

    # --- bookkeeping
    eval_every: int = whole(50, 0)
    """Held-out greedy accuracy every N steps (0 = only before and after)."""
    eval_size: int = whole(500, 1)
    """Items of the held-out test split used for evaluation."""
    checkpoint_every: int = whole(100, 0)
    """Write a checkpoint every N steps when an output folder is given (0 = only at the end)."""
    keep_checkpoints: int = whole(2, 1)
    """How many recent checkpoints to keep."""
    log_completions: bool = False
    """Keep every group on record (TRL's name): each logged step writes one row per completion to
    ``completions.jsonl`` in the run folder (step, group, prompt, completion, reward, advantage, each
    reward function's and gold function's value; ``pandas.read_json(path, lines=True, dtype={"prompt": str,
    "completion": str})`` opens it, keeping "111" a string), and
    the dashboard's group table pages through the step's groups. Off: only the first group of each
    step is kept, in ``history.jsonl``'s ``samples``."""
    log_completions_every: int = whole(1, 1)
    """With ``log_completions``: log every N-th step (1 = every step)."""
    log_completions_max_groups: int = whole(0, 0)
    """With ``log_completions``: at most this many groups per logged step, the first ones (0 = all P)."""

    # --- reliability (what happens when input or numbers go bad)
    on_bad_row: Literal["raise", "skip"] = "raise"
    """Malformed rows in ``dataset``: 'raise' a DataError naming file, line and reason, or 'skip' and count them."""
    reward_error_policy: Literal["raise", "skip", "zero"] = "raise"
    """A reward that raises or is NaN/inf: 'raise' a RewardError, 'skip' the sample (advantage 0, masked
    from the loss) or 'zero' it (that function's reward becomes 0); counted in ``rewards/bad_samples``."""
    reward_timeout_s: float | None = real(60.0, "> 0", lambda v: v > 0, optional=True)
    """Seconds a reward function may take per batch (it runs in a worker thread; an ``async def`` one on the
    kit's event loop, where it is cancelled when it runs over); a function that takes longer is a bad value for
    the whole batch, handled by ``reward_error_policy`` ('raise': a RewardError naming it). 60 s is far above what a rule-based judge or a small learned judge needs for a batch, and
    ends a hung one (a stuck network call, a deadlock) instead of training never moving on. While a reward
    call runs, one SIGTERM / Ctrl-C / SIGHUP ends the run within ``judges.REWARD_STOP_GRACE_S`` (5 s),
    keeping the last finished step. None runs the function inline without a limit (then only a second
    signal interrupts it); see judges.py. ``--engine trl`` calls reward functions without a limit and
    accepts only this default or None."""
    max_consecutive_skips: int = whole(5, 0)
    """Stop with a TrainingError after this many steps in a row whose update was skipped (0 = never stop)."""
    truncate_prompts: bool = False
    """A prompt longer than the model's context minus ``max_completion_length``: False raises a DataError
    naming it; True keeps its last tokens (the end, where the question usually is) and warns once."""

    # --- diagnostics (grpo_kit/eval/diagnostics.py)
    diagnose_every: int = whole(10, 0)
    """Run the failure detectors over the history every N steps during ``train()`` and log a warning the
    first time each kind of failure is found (0 = never; ``diagnostics.diagnose`` works on any history)."""

    # ------------------------------------------------------------------ methods
    @property
    def batch_size(self) -> int:
        """B = P * G completions per step."""
        return self.num_prompts * self.num_generations

    def validate(self) -> "GRPOConfig":
        """Check every field, its type first; raise :class:`ConfigError` naming the field, value and allowed range.

        Each field's own rule comes from its declaration (``whole``, ``real``, a ``Literal`` of choices,
        ``bool``), checked in the order of the fields; the rules below them are those of fields whose
        form is richer or that depend on another field."""
        def need(ok, name, rule):
            if not ok:
                self.refuse(name, rule)

        need(self.loss_type not in TRL_ONLY_LOSS_TYPES, "loss_type",
             "is one of TRL 1.16's loss types (cispo, sapo, luspo, vespo) that the kit does not implement; "
             "choose 'grpo', 'bnpo', 'dr_grpo' or 'dapo' (or train it with TRL's GRPOTrainer)")
        self.check_declared()
        # what to train
        need(isinstance(self.model, str) and self.model.strip() != "", "model",
             "must be a model folder, a Hugging Face hub name or 'tiny'")
        need(isinstance(self.task, str) and self.task.strip() != "", "task",
             "must be the name of a task (grpo_kit.data.tasks.task_names())")
        need(self.dataset is None or (isinstance(self.dataset, str) and self.dataset.strip() != "")
             or datasets_type(self.dataset) is not None, "dataset",
             "must be a .jsonl, .parquet or .csv file, a folder written by save_to_disk, a Hugging Face Hub name "
             "(owner/name), or in Python a datasets.Dataset or DatasetDict (or None)")
        cols = self.dataset_columns
        need(cols is None or (isinstance(cols, dict) and set(cols) <= {"prompt", "answer"}
                              and all(isinstance(c, str) and c.strip() for c in cols.values())
                              and len(set(cols.values())) == len(cols)), "dataset_columns",
             "must map prompt and/or answer to two different column names of the dataset, e.g. "
             "{prompt: question, answer: answer} (or None)")
        for name in ("dataset_split", "dataset_config"):
            v = getattr(self, name)
            need(v is None or (isinstance(v, str) and v.strip() != ""), name, "must be a name (or None)")
        need(isinstance(self.reward_funcs, list) and len(self.reward_funcs) > 0
             and all((isinstance(f, (str, dict)) and f) or callable(f) for f in self.reward_funcs), "reward_funcs",
             "must be a non-empty list of reward function names (see judges.REWARD_FUNCS), 'package.module:function' "
             "strings or {'function': ..., 'args': {...}} factories")
        need(self.reward_weights is None or (isinstance(self.reward_weights, list)
                                             and all(_is_num(w) for w in self.reward_weights)
                                             and len(self.reward_weights) == len(self.reward_funcs)),
             "reward_weights", f"needs one finite weight per reward function ({len(self.reward_funcs)}) (or None)")
        need(isinstance(self.gold_reward_funcs, list)
             and all((isinstance(f, (str, dict)) and f) or callable(f) for f in self.gold_reward_funcs),
             "gold_reward_funcs", "must be a list of reward functions written as in reward_funcs, empty for none")
        need(self.seed < 2**63, "seed", "must be < 2**63 (torch generators take 64-bit seeds)")
        # sampling and the objective
        temps = self.temperature if isinstance(self.temperature, list) else [self.temperature]
        need(len(temps) > 0 and all(_is_num(t) and t > 0 for t in temps), "temperature",
             "must be a finite number > 0 (or a non-empty list of them)")
        need(isinstance(self.advantage_estimator, str) and self.advantage_estimator != "", "advantage_estimator",
             "must be the name of an estimator (grpo_kit.core.advantages.ESTIMATORS)")
        self._validate_beyond_scalar(need)
        self._validate_steering(need)
        eh = self.epsilon_high
        need(eh is None or (_is_num(eh) and eh >= self.epsilon), "epsilon_high",
             f"must be a finite number >= epsilon={self.epsilon} (or None)")
        hi = self.epsilon if eh is None else eh
        need(self.delta is None or (_is_num(self.delta) and self.delta > 1 + hi), "delta",
             f"must be a finite number > 1 + epsilon_high = {1 + hi} (or None)")
        if self.device == "cuda":
            import torch

            need(torch.cuda.is_available(), "device",
                 "no CUDA GPU is visible to torch (torch.cuda.is_available() is False); "
                 "use device='cpu' or 'auto', or install a CUDA build of torch")
        need(self.reward_error_policy != "skip" or self.advantage_estimator == "grpo", "reward_error_policy",
             f"'skip' needs advantage_estimator='grpo' (it is {self.advantage_estimator!r}, which cannot leave "
             f"samples out); use 'zero' or 'raise'")
        return self

    def _validate_beyond_scalar(self, need) -> None:
        """The fields of 'process', 'hybrid_gae' and 'pairwise' (see beyond_scalar.py) with richer forms."""
        est = self.advantage_estimator
        need(self.pairwise_ensemble in ("mean", "vote"), "pairwise_ensemble", "choose 'mean' or 'vote'")
        need((isinstance(self.step_judge, str) and self.step_judge) or callable(self.step_judge), "step_judge",
             "must be a name of grpo_kit.loop.beyond_scalar.STEP_JUDGES or 'package.module:function'")
        judges_ = self.pairwise_judges
        need(isinstance(judges_, list) and all((isinstance(j, str) and j) or callable(j) for j in judges_),
             "pairwise_judges", "must be a list of judges: 'correctness', 'closeness', 'learned:PATH', "
                                "'reward:NAME' or 'package.module:function'")
        need(est == "pairwise" or not judges_, "pairwise_judges",
             f"is set but advantage_estimator={est!r} does not use it; set advantage_estimator: pairwise, "
             f"or remove pairwise_judges")
        need(est != "pairwise" or judges_, "pairwise_judges",
             "is empty; advantage_estimator='pairwise' needs at least one judge, e.g. [correctness]")
        w = self.pairwise_weights
        need(w is None or (isinstance(w, list) and len(w) == len(judges_) and all(_is_num(x) and x >= 0 for x in w)
                           and sum(w) > 0), "pairwise_weights",
             f"needs one finite weight >= 0 per pairwise judge ({len(judges_)}), with a positive sum (or None)")
        need(self.replay_fraction == 0 or est not in ("process", "hybrid_gae"), "replay_fraction",
             f"replays stored per-completion advantages, and advantage_estimator={est!r} makes them per token; "
             f"set replay_fraction: 0")

    def _validate_steering(self, need) -> None:
        """The steering fields with richer forms or rules between fields (schedules.py, dynamic.py,
        replay.py); the names a schedule gives are checked against the registries by ``check_config``."""
        B = self.samples_per_step if self.samples_per_step is not None else self.batch_size
        if self.group_size_schedule is not None:
            schedule_entries(self, "group_size_schedule", lambda g: _is_int(g) and g >= 2,
                             "the group size must be a whole number >= 2 (a group of one has nothing to compare)")
            for i, (_, g) in enumerate(self.group_size_schedule):
                if B % g:
                    raise ConfigError(f"GRPOConfig.group_size_schedule[{i}]={self.group_size_schedule[i]!r}: G={g} "
                                      f"does not divide samples_per_step={B}, so P = B/G is not whole; pick a "
                                      f"divisor of {B} or change samples_per_step")
        bounds = self.group_size_bounds
        need(isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(g) and g >= 2 for g in bounds)
             and bounds[0] <= bounds[1], "group_size_bounds",
             "must be [G_min, G_max], whole numbers >= 2 with G_min <= G_max")
        need(self.adaptive_shrink_below < self.adaptive_grow_above, "adaptive_shrink_below",
             f"must be a fraction below adaptive_grow_above={self.adaptive_grow_above} (the gap between the two "
             f"is the hysteresis)")
        if self.adaptive_group_size:
            need(self.group_size_schedule is None, "adaptive_group_size",
                 "cannot be combined with group_size_schedule; choose one way to set G")
            need(bounds[0] <= self.num_generations <= bounds[1], "num_generations",
                 f"is the starting G of the adaptive rule and must lie within group_size_bounds={bounds}")
            for g in self.adaptive_sizes():
                if B % g:
                    raise ConfigError(f"GRPOConfig.group_size_bounds={bounds!r}: the adaptive rule can reach G={g} "
                                      f"(num_generations={self.num_generations} doubled/halved), which does not "
                                      f"divide samples_per_step={B}; use powers of two for both")
        elif self.group_size_schedule is None and B % self.num_generations:
            need(False, "samples_per_step", f"must be a multiple of num_generations={self.num_generations}")
        for name in ("task_schedule", "reward_schedule"):  # the form here; the names in check_config
            if getattr(self, name) is not None:
                schedule_entries(self, name, lambda v: names_in(v) is not None,
                                 "the value must be a name or a non-empty list of names")
        need(self.task_schedule is None or self.dataset is None, "task_schedule",
             "cannot be combined with a dataset file; the schedule picks built-in tasks")

    def adaptive_sizes(self) -> list[int]:
        """Every G the adaptive rule can reach: num_generations doubled/halved within group_size_bounds."""
        lo, hi = self.group_size_bounds
        sizes, g = [], self.num_generations
        while g // 2 >= lo and g % 2 == 0:
            g //= 2
        while g <= hi:
            if g >= lo:
                sizes.append(g)
            g *= 2
        return sizes

    def on_cuda(self) -> bool:
        """Whether this config trains on CUDA (where ``bf16`` applies) on this machine."""
        if self.device == "auto":
            import torch

            return torch.cuda.is_available()
        return self.device == "cuda"

    def steering_fields(self) -> list[str]:
        """The fields set away from their defaults that steer the run over time (schedules, curricula,
        dynamic sampling, replay, budgets): other engines have none of them."""
        return [k for k in ("group_size_schedule", "adaptive_group_size", "task_schedule", "reward_schedule",
                            "dynamic_sampling", "replay_fraction", "completion_budget", "samples_per_step")
                if getattr(self, k) not in (None, False, 0.0)]


@dataclass
class OfflineConfig(ConfigFile):
    """``grpo-kit train-offline``: train a policy on preference groups sampled and judged beforehand
    (``grpo-kit pregen``), with no sampling while it trains (``grpo_kit.lab.offline``). Each step draws
    ``batch_prompts`` groups at random (with replacement) and takes one AdamW step (weight decay 0.01)
    on the loss below, plus ``nll_coef`` times the per-token NLL of each group's clear winners."""

    # --- what to train on
    preferences: str | None = None
    """The preference groups: a jsonl of ``{prompt, responses: [K strings], preference_matrix: K x K}``
    (``grpo-kit pregen --out FILE`` writes one; ``datasets/add2_prefs.jsonl`` ships). Required."""
    model: str = "tiny"
    """The model to train: a folder written by ``save_pretrained``, a hub name, or ``"tiny"`` (the shipped base)."""
    task: str = "add2"
    """The task whose held-out split measures greedy accuracy (``grpo_kit.data.tasks.task_names()``)."""

    # --- the loss
    loss: Literal["margin", "bt", "baseline"] = "margin"
    """``margin``: relu(log pi(w) - log pi(b) + margin) per pair (b beats w), on summed log-probs;
    ``bt``: Bradley-Terry, -log sigmoid(beta (r_b - r_w)) with r = log pi - log pi_ref (DPO's implicit
    reward; the reference is the starting model); ``baseline``: REINFORCE on each answer's share of
    its group beaten, r_i = sum_j max(M_ij, 0) / (K - 1), minus a learnable per-group baseline b_p
    (``core.losses.learned_baseline_loss``). Each pair is weighted by its label (1, or a soft 0.5)."""
    stage1_steps: int = whole(0, 0)
    """Staging: the first N steps train on the clear pairs only (|M| = 1, right against wrong), the
    rest on every labelled pair (ties resolved by a finer judge included). 0: every pair from the start."""
    margin: float = real(1.0, ">= 0", lambda v: v >= 0)
    """``loss: margin``: the log-probability gap (nats) above which a pair gives no gradient."""
    beta: float = real(0.1, "> 0", lambda v: v > 0)
    """``loss: bt``: the scale of the implicit reward difference inside the sigmoid."""
    baseline_lr: float = real(0.5, "in [0, 1]", lambda v: 0 <= v <= 1)
    """``loss: baseline``: each time a group is drawn, b_p moves this fraction of the way to the group's
    mean reward (one SGD step of size baseline_lr / 2 on mean_k (r_pk - b_p)^2); b starts at 0, so 0
    keeps it there (REINFORCE without a baseline)."""
    nll_coef: float = real(1.0, ">= 0", lambda v: v >= 0)
    """Weight of the likelihood anchor, the per-token NLL of the clear winners: preference losses fix
    only differences of log-probabilities, and without it both sides can fall together. 0: none."""

    # --- optimisation
    steps: int = whole(300, 1)
    """Optimizer steps."""
    batch_prompts: int = whole(16, 1)
    """Groups per step (each of K responses)."""
    learning_rate: float = real(1e-4, "> 0", lambda v: v > 0)
    """AdamW's learning rate (constant)."""
    max_grad_norm: float = real(1.0, "> 0", lambda v: v > 0)
    """Gradients are clipped to this global norm."""
    seed: int = whole(0, 0)
    """Seeds the order in which groups are drawn (and torch's global generator)."""

    # --- evaluation, checkpoints, machine
    eval_every: int = whole(50, 0)
    """Held-out greedy accuracy every N steps (and at step 0 and the last step); 0: only those two."""
    eval_size: int = whole(500, 1)
    """Held-out problems per evaluation (the first N of the task's held-out split)."""
    checkpoint_every: int = whole(50, 0)
    """A checkpoint (weights, optimizer, baselines, batch-order state) every N steps and at the end; 0: at the end only."""
    keep_checkpoints: int = whole(2, 1)
    """Newest checkpoints kept; older ones are removed."""
    threads: int | None = whole(2, 1, optional=True)
    """torch CPU threads (None: leave torch's setting)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: CUDA when torch sees a GPU, else CPU."""

    def validate(self) -> "OfflineConfig":
        self.check_declared()
        for name in ("model", "task"):
            if not (isinstance(getattr(self, name), str) and getattr(self, name).strip()):
                self.refuse(name, "must be a name" + (", a model folder or 'tiny'" if name == "model" else ""))
        if self.preferences is not None and not (isinstance(self.preferences, str) and self.preferences.strip()):
            self.refuse("preferences", "must be the path of a preference-group jsonl (grpo-kit pregen writes one)")
        if self.seed >= 2**63:
            self.refuse("seed", "must be < 2**63 (torch generators take 64-bit seeds)")
        if self.stage1_steps > self.steps:
            self.refuse("stage1_steps", f"is more than steps={self.steps}; the clear-pairs stage is part of the run "
                                        f"(set stage1_steps: {self.steps} to train on clear pairs only)")
        return self


@functools.lru_cache(maxsize=4)
def _hints(cls=None) -> dict:
    """Each field's annotation, evaluated (``from __future__ import annotations`` keeps them as text)."""
    return typing.get_type_hints(cls or GRPOConfig)


_INT_EXP_TEXT = __import__("re").compile(r"\+?\d+(\.\d*)?[eE]\+?\d+")


def _numbers_from_text(d: dict, cls=None) -> dict:
    """YAML 1.1 reads ``3e-4`` (no dot) as the string '3e-4': read such strings as numbers for the
    float fields of ``cls`` (default :class:`GRPOConfig`), and ``1e3`` as 1000 for the whole-number
    fields. Other strings stay strict (``"4"`` in quotes is text, ``"false"`` is not a bool)."""
    fields = dataclasses.fields(cls or GRPOConfig)
    floats = {f.name for f in fields if "float" in str(f.type)}
    ints = {f.name for f in fields if str(f.type).startswith("int")}
    out = dict(d)
    for k, v in d.items():
        if k in ints and isinstance(v, str) and _INT_EXP_TEXT.fullmatch(v.strip()) and float(v).is_integer() \
                and float(v) < 2**63:
            out[k] = int(float(v))
        elif k in floats and isinstance(v, str) and _FLOAT_TEXT.fullmatch(v.strip()):
            out[k] = float(v)
        elif k in floats and isinstance(v, list):
            out[k] = [float(x) if isinstance(x, str) and _FLOAT_TEXT.fullmatch(x.strip()) else x for x in v]
    return out
