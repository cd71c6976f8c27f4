"""``grpo-kit train --engine trl``: the same run through TRL 1.16's ``GRPOTrainer``, logged as the kit logs it.

    history = train_with_trl(cfg, out_dir)   # trl.GRPOConfig(**trl_kwargs(cfg)), the kit's data and judges

What is shared with the kit's engine: the config (``trl_kwargs(cfg)`` maps it and refuses what TRL
cannot express), the model and tokenizer (``tiny.load_model``: the shipped tiny model or any
``from_pretrained`` path), the training and held-out items (``train.run_items``: the dataset
file or the task, chat-template prompts included) as a ``datasets.Dataset``, and the reward
function objects (``resolve.get_reward_funcs``, which already take TRL's keyword arguments and
its conversational format). TRL samples, scores and updates.

:class:`KitHistory`, a ``TrainerCallback``, turns TRL's logs into the kit's per-step metric
dicts (:func:`kit_metrics`) and writes ``history.jsonl``; the CLI then draws the same plots and
runs the same diagnostics as after a kit run. TRL logs most quantities under the kit's names
already (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``rewards/<func>/mean``,
``completions/*``, ``kl``, ``entropy``, ``clip_ratio/*``, ``loss``, ``grad_norm``); what
differs is the unit: one kit step is ``num_iterations`` TRL optimizer updates on one generated
batch, so the logs of those updates are merged into one step as the kit computes it (see
:func:`kit_metrics`). Held-out greedy accuracy (``accuracy``) is measured by the kit's own
``inference.greedy_accuracy`` on the model TRL trains, at step 0, every ``eval_every`` steps
and at the end, in a single process only (with several processes, under ``torchrun`` or ``accelerate launch``,
it is left out: the history then has no ``accuracy``). With several processes a kit step is still B = P*G
rows, B / num_processes sampled and trained on by each (:func:`trl_kwargs`); process 0 alone writes the run folder.

Not carried over (``check_trl_engine`` refuses them): ``gold_reward_funcs``,
``reward_error_policy`` other than 'raise' and ``reward_timeout_s``, which TRL's trainer does
not have; and resuming (TRL's own checkpoints are a different format).
"""
from __future__ import annotations

import json
import logging
import os
import time
from importlib.util import find_spec
from pathlib import Path

from transformers import TrainerCallback

from grpo_kit.config import GRPOConfig
from grpo_kit.engines import refuse_steering
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.model import lora

log = logging.getLogger(__name__)

FIRST_UPDATE = ("entropy", "kl")
"""Describe the batch as sampled: the kit measures them on the first update of a step only."""
LAST_UPDATE = ("grad_norm",)
"""The kit logs the gradient norm of a step's last update."""
DROPPED = ("epoch", "num_tokens", "step")
"""Trainer bookkeeping with no kit meaning (``step`` is set from the kit's count)."""
ENGINE_ARGS = ("output_dir", "logging_steps", "logging_strategy")
"""trl.GRPOConfig fields this engine sets itself (logging every update is what the history is built from)."""
NEEDS = {"use_vllm": ("vllm",), "use_liger_kernel": ("liger_kernel",), "deepspeed": ("deepspeed",)}
"""trl.GRPOConfig fields that, when set, need a package (any of the importable names) TRL does not require."""
REPORTERS = {"wandb": ("wandb",), "tensorboard": ("tensorboard", "tensorboardX"), "mlflow": ("mlflow",),
             "comet_ml": ("comet_ml",), "neptune": ("neptune",), "trackio": ("trackio",), "clearml": ("clearml",),
             "dvclive": ("dvclive",), "swanlab": ("swanlab",), "codecarbon": ("codecarbon",), "dagshub": ("dagshub",),
             "flyte": ("flytekit",), "azure_ml": ("azureml",)}
"""``report_to`` names -> the package each needs (transformers' integrations)."""
PIP = {"liger_kernel": "liger-kernel", "comet_ml": "comet-ml", "flytekit": "flytekit", "azureml": "azureml-core"}
"""Importable names whose pip package is spelled otherwise."""



def trl_kwargs(cfg: GRPOConfig, num_processes: int = 1) -> dict:
    """Keyword arguments for ``trl.GRPOConfig`` (TRL 1.16) that give the same objective and schedule.

    Each field keeps its meaning (``tests/engines/test_trl_parity.py`` trains TRL's ``GRPOTrainer``
    configured by this dict and the kit side by side and compares gradients; ``tests/config/test_config.py``
    reads every value back from ``trl.GRPOConfig``):

    - a kit step samples one batch and makes ``num_iterations`` optimizer updates on it; TRL counts
      optimizer updates, so ``max_steps = steps * num_iterations``, and one generation batch of
      B = P*G rows spans ``steps_per_generation = gradient_accumulation_steps = B / micro_batch_size``
      micro-batches of ``per_device_train_batch_size = micro_batch_size`` rows;
    - with ``num_processes`` processes (data parallel, under ``torchrun`` or ``accelerate launch``) a
      step is still B rows: each process samples and trains on B / num_processes of them, in
      micro-batches of at most ``micro_batch_size`` rows (TRL's generation batch is
      ``per_device_train_batch_size * num_processes * steps_per_generation`` = B; it gathers the
      rewards of all processes before computing advantages, so a group may span processes);
    - the LR schedule advances per optimizer update in both (``lr_schedule``);
    - the KL term is not importance-weighted (``use_bias_correction_kl=False``, see ``beta``);
    - AdamW with torch's defaults (betas 0.9/0.999, eps 1e-8);
    - the sampling controls under the same names (``min_p`` 0, the kit's off, is TRL's None); TRL
      scores the sampled tokens under the full distribution as the kit does (``loop/step.py``,
      ``fixed_logprobs``; ``tests/engines/test_trl_sampling.py`` runs TRL's code).

    Refused (ConfigError) because TRL cannot express it: a list of temperatures (TRL has one);
    a KL estimator other than k3; an advantage estimator TRL lacks; a batch that does not split
    evenly over the processes; and, with more than one micro-batch (several processes make several),
    ``loss_type='bnpo'`` or ``entropy_coef != 0``: TRL shuffles the rows of each
    generated batch before cutting it into micro-batches, and these two average over each
    micro-batch's tokens, so their value depends on which rows share a micro-batch (the kit keeps
    each group's rows together). Every other objective is a sum over rows, which no shuffle changes.
    Also refused: the fields that steer a run over time (group-size schedules, curricula, dynamic
    sampling, replay, a completion budget), which TRL's trainer does not have.
    Not objective: TRL draws prompts without replacement per epoch, the kit with replacement.
    """
    def refuse(field_, rule):
        raise ConfigError(f"GRPOConfig.{field_}={getattr(cfg, field_)!r} cannot be exported to TRL: {rule}")

    refuse_steering(cfg, "TRL")
    if cfg.advantage_estimator not in ("grpo", "sum_then_normalize", "normalize_then_sum"):
        refuse("advantage_estimator", "TRL has no such estimator; use 'grpo', 'sum_then_normalize' or "
                                      "'normalize_then_sum'")
    if cfg.kl_estimator != "k3":
        refuse("kl_estimator", "TRL's GRPOTrainer uses k3 only; set kl_estimator='k3'")
    if isinstance(cfg.temperature, list):
        refuse("temperature", "TRL samples every completion at one temperature; give a single number")
    B = cfg.batch_size
    if B % num_processes:
        refuse("num_prompts", f"a step's B = num_prompts * num_generations = {B} rows cannot be split evenly over "
                              f"{num_processes} processes; make B a multiple of {num_processes}, or launch a "
                              f"number of processes that divides {B}")
    rows = B // num_processes  # each process's share of a step
    micro = min(cfg.micro_batch_size or rows, rows)
    if rows % micro:
        refuse("micro_batch_size", f"each of {num_processes} processes takes {rows} of a step's {B} rows, which "
                                   f"micro_batch_size must divide")
    if micro < B and (cfg.loss_type == "bnpo" or cfg.entropy_coef != 0):
        what = "loss_type='bnpo'" if cfg.loss_type == "bnpo" else f"entropy_coef={cfg.entropy_coef}"
        over = f" over {num_processes} processes" if num_processes > 1 else ""
        refuse("micro_batch_size", f"with {B // micro} micro-batches{over}, {what} averages over each "
                                   f"micro-batch's tokens and TRL shuffles rows across micro-batches, so the "
                                   f"objective would differ; use micro_batch_size=None (one micro-batch) in one "
                                   f"process, or loss_type='dapo' with entropy_coef=0")
    accumulation = rows // micro
    if cfg.lr_schedule == "cosine":
        schedule = "cosine"
    else:
        schedule = "constant_with_warmup" if cfg.warmup_steps else "constant"
    return {
        "multi_objective_aggregation": "normalize_then_sum" if cfg.advantage_estimator == "normalize_then_sum"
        else "sum_then_normalize",
        "num_generations": cfg.num_generations,
        "max_completion_length": cfg.max_completion_length,
        "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
        "min_p": cfg.min_p or None, "repetition_penalty": cfg.repetition_penalty,
        "scale_rewards": cfg.scale_rewards, "loss_type": cfg.loss_type, "beta": cfg.beta,
        "use_bias_correction_kl": False,
        "epsilon": cfg.epsilon, "epsilon_high": cfg.epsilon_high, "delta": cfg.delta,
        "importance_sampling_level": cfg.importance_sampling_level,
        "num_iterations": cfg.num_iterations,
        "mask_truncated_completions": cfg.mask_truncated_completions, "entropy_coef": cfg.entropy_coef,
        "learning_rate": cfg.learning_rate, "weight_decay": cfg.weight_decay,
        "optim": "adamw_torch", "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
        "lr_scheduler_type": schedule, "warmup_steps": cfg.warmup_steps, "max_grad_norm": cfg.max_grad_norm,
        "max_steps": cfg.steps * cfg.num_iterations, "seed": cfg.seed, "reward_weights": cfg.reward_weights,
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation, "steps_per_generation": accumulation,
        "activation_checkpointing": cfg.gradient_checkpointing,  # transformers 5 name of gradient_checkpointing
        "bf16": cfg.bf16 and cfg.on_cuda(), "use_cpu": not cfg.on_cuda(),
    }


def check_trl_engine(cfg: GRPOConfig) -> None:
    """ConfigError for the fields TRL's trainer has no equivalent of (beyond what ``trl_kwargs`` refuses)."""
    if cfg.gold_reward_funcs:
        raise ConfigError("GRPOConfig.gold_reward_funcs: --engine trl cannot score a second judge beside the "
                          "training reward; leave it empty, or train with the kit's engine")
    if cfg.reward_error_policy != "raise":
        raise ConfigError(f"GRPOConfig.reward_error_policy={cfg.reward_error_policy!r}: TRL's trainer has no such "
                          f"policy (a reward of None is left out of the sum, an exception stops the run); use 'raise'")
    if cfg.reward_timeout_s not in (None, GRPOConfig.reward_timeout_s):  # the default is no choice the user made
        raise ConfigError("GRPOConfig.reward_timeout_s: TRL's trainer calls reward functions without a time limit; "
                          "set it to null for --engine trl")


def parse_trl_overrides(pairs: list[str], cfg: GRPOConfig) -> dict:
    """``["use_vllm=true", "vllm_mode=colocate"]`` -> extra ``trl.GRPOConfig`` arguments (values read as YAML).

    Only fields ``trl.GRPOConfig`` has, and none that ``trl_kwargs(cfg)`` sets (change those in the kit
    config, so that both engines run the same objective) or that this engine sets (``ENGINE_ARGS``).
    """
    import dataclasses

    import trl
    import yaml

    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    owned = set(trl_kwargs(cfg)) | set(ENGINE_ARGS)
    out = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--trl-arg {pair!r}: write it as KEY=VALUE, e.g. --trl-arg use_vllm=true")
        if key not in fields:
            raise ConfigError(f"--trl-arg {key}: trl.GRPOConfig has no field {key!r} (TRL {trl.__version__})")
        if key in owned:
            raise ConfigError(f"--trl-arg {key}: set from the kit config by trl_kwargs(cfg) or by the engine; "
                              f"change the kit's field instead, so that both engines train the same objective")
        out[key] = yaml.safe_load(text) if text.strip() else None
    return out


def check_trl_packages(overrides: dict) -> None:
    """ConfigError naming the package an override needs when it is not installed (``use_vllm`` needs vLLM,
    ``report_to: wandb`` needs wandb, ...), checked before TRL starts and fails with a traceback."""
    wants = [(key, overrides[key], NEEDS[key]) for key in NEEDS if overrides.get(key)]
    report = overrides.get("report_to")
    for name in [report] if isinstance(report, str) else report if isinstance(report, (list, tuple)) else []:
        if name in REPORTERS:
            wants.append(("report_to", report, REPORTERS[name]))
    for key, value, modules in wants:
        if not any(find_spec(m) is not None for m in modules):
            raise ConfigError(f"--trl-arg {key}={value}: needs the {modules[0]} package, which is not installed; "
                              f"pip install {PIP.get(modules[0], modules[0])}, or leave the argument out")


def _number(v) -> float | None:
    """A finite-or-NaN float from a logged value; None for anything that is not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def kit_metrics(updates: list[dict], step: int) -> dict:
    """TRL's logs of the ``num_iterations`` optimizer updates of one kit step -> the kit's metric dict.

    ``updates``: one dict per update, in order, as ``GRPOTrainer.log`` passes them (logging every
    update). The generation metrics (``reward``, ``completions/*``, ``rewards/<func>/mean``, ...)
    are logged by the first update only, since TRL generates once per ``num_iterations`` updates;
    ``entropy`` and ``kl`` are taken from the first update (the batch as sampled, as the kit
    measures them), ``grad_norm`` from the last; every other value (``loss``, ``clip_ratio/*``)
    is the mean over the updates that logged it, as the kit averages them. Non-numbers, ``None``
    (TRL's value for a metric with no valid sample) and the Trainer's ``epoch`` / ``num_tokens``
    are left out.
    """
    values: dict[str, list[float]] = {}
    for logs in updates:
        for k, v in logs.items():
            x = _number(v)
            if x is not None and k not in DROPPED:
                values.setdefault(k, []).append(x)
    out = {}
    for k, xs in values.items():
        if k in FIRST_UPDATE:
            out[k] = xs[0]
        elif k in LAST_UPDATE:
            out[k] = xs[-1]
        else:
            out[k] = sum(xs) / len(xs)
    out["step"] = step
    return out


class KitHistory(TrainerCallback):
    """Collects TRL's logs into the kit's history, one dict per kit step; evaluates; writes ``history.jsonl``.

    ``history`` and ``evals`` (``(step, accuracy)``) have the shape ``train.Run`` has, so
    ``plotting`` and ``diagnostics`` read them unchanged.
    """

    def __init__(self, cfg: GRPOConfig, tokenizer, eval_items: list[dict], out_dir: str | Path | None = None,
                 quiet: bool = True):
        self.cfg, self.tokenizer, self.eval_items, self.quiet = cfg, tokenizer, eval_items, quiet
        self.bar = None
        self.path = Path(out_dir) / "history.jsonl" if out_dir is not None else None
        self.history: list[dict] = []
        self.evals: list[tuple[int, float]] = []
        self._updates: list[dict] = []
        self._lr: float | None = None
        self._t0 = 0.0

    def _single(self, args) -> bool:
        return args.world_size == 1

    def _evaluate(self, model, step: int) -> float:
        from grpo_kit.eval.inference import greedy_accuracy

        acc = greedy_accuracy(model, self.tokenizer, self.eval_items, max(self.cfg.max_completion_length, 1))
        self.evals.append((step, acc))
        return acc

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self.quiet and state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.cfg.steps, desc="GRPO (TRL)", unit="step", mininterval=0.5)
        if self._single(args) and self.eval_items:
            self._evaluate(model, 0)
        elif not self._single(args) and state.is_world_process_zero:
            log.warning("--engine trl with %d processes: held-out accuracy is not measured (single process only)",
                        args.world_size)

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        if state.global_step % self.cfg.num_iterations == 0:  # the first update of a kit step
            self._t0 = time.perf_counter()
            self._lr = optimizer.param_groups[0]["lr"] if optimizer is not None else None

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if not logs or "train_runtime" in logs:  # the Trainer's closing summary
            return
        self._updates.append(dict(logs))
        if state.global_step % self.cfg.num_iterations:
            return
        step = state.global_step // self.cfg.num_iterations
        m = kit_metrics(self._updates, step)
        self._updates = []
        if self._lr is not None:
            m["learning_rate"] = self._lr  # the rate of the step's first update, as the kit logs it
        due = self.cfg.eval_every and step % self.cfg.eval_every == 0
        if self._single(args) and self.eval_items and (due or step == self.cfg.steps):
            m["accuracy"] = self._evaluate(model, step)
        m["step_time"] = time.perf_counter() - self._t0
        self.history.append(m)
        if self.path is not None and state.is_world_process_zero:
            from grpo_kit.data.runfolder import append_line

            append_line(self.path, json.dumps(m, default=str))
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(reward=f"{m.get('reward', float('nan')):.2f}", refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


def ensure_pad_token(tokenizer):
    """Give a tokenizer without a pad token its EOS as one (as TRL does): prompts are padded in batches."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def num_processes() -> int:
    """The processes of this launch (``WORLD_SIZE``, set by ``torchrun`` and ``accelerate launch``); 1 without one."""
    return int(os.environ.get("WORLD_SIZE") or 1)


def trl_config(cfg: GRPOConfig, out_dir: str | Path, overrides: dict | None = None):
    """``trl.GRPOConfig(**trl_kwargs(cfg, num_processes()), ...)`` with logging every update, no TRL checkpoints
    or trackers, and the user's ``overrides`` (see :func:`parse_trl_overrides`)."""
    import trl

    kw = trl_kwargs(cfg, num_processes())
    kw.update(output_dir=str(out_dir), logging_steps=1, logging_strategy="steps", report_to="none",
              save_strategy="no", disable_tqdm=True, log_completions=False, dataloader_num_workers=0)
    kw.update(overrides or {})
    return trl.GRPOConfig(**kw)


def train_with_trl(cfg: GRPOConfig, out_dir: str | Path | None = None, policy=None, tokenizer=None,
                   overrides: dict | None = None, quiet: bool = True) -> KitHistory:
    """Train ``cfg`` with TRL's ``GRPOTrainer``; returns the :class:`KitHistory` (history, evals).

    ``policy``/``tokenizer`` default to ``tiny.load_model(cfg.model)``. With ``out_dir`` the history is
    written to ``out_dir/history.jsonl`` step by step (by process 0) and the trained model and tokenizer
    to ``out_dir/model`` (``from_pretrained`` loads it).
    """
    import tempfile

    check_config(cfg)
    check_trl_engine(cfg)
    check_trl_packages(overrides or {})
    with tempfile.TemporaryDirectory(prefix="grpo-kit-trl-") as scratch:  # TRL's output_dir: it saves nothing there
        return _train(cfg, trl_config(cfg, scratch, overrides), out_dir, policy, tokenizer, quiet)


def _train(cfg: GRPOConfig, args, out_dir, policy, tokenizer, quiet: bool) -> KitHistory:
    """The body of :func:`train_with_trl`, with TRL's arguments ``args`` built."""
    import torch
    import trl

    from datasets import Dataset
    from grpo_kit.loop.train import capped_threads, run_items
    from grpo_kit.model.tiny import load_model
    from grpo_kit.rewards.resolve import get_reward_funcs

    if cfg.threads:
        torch.set_num_threads(capped_threads(cfg.threads))
    torch.manual_seed(cfg.seed)
    if policy is None:
        policy, tokenizer = load_model(cfg.model)
    if cfg.lora is not None:  # before TRL's peft allocates r x (in + out) per targeted layer
        lora.check_rank(cfg.lora, lora.linear_sizes(policy))
    ensure_pad_token(tokenizer)
    train_items, eval_items = run_items(cfg, policy, tokenizer)
    history = KitHistory(cfg, tokenizer, eval_items, out_dir, quiet)
    trainer = trl.GRPOTrainer(model=policy, reward_funcs=get_reward_funcs(cfg.reward_funcs), args=args,
                              train_dataset=Dataset.from_list(train_items), processing_class=tokenizer,
                              callbacks=[history],
                              peft_config=lora.peft_config(cfg.lora) if cfg.lora is not None else None)
    from transformers import PrinterCallback, ProgressCallback

    for printer in (PrinterCallback, ProgressCallback):  # they print every log dict; KitHistory shows a bar by kit step
        trainer.remove_callback(printer)
    trainer.train()
    if out_dir is not None:
        trainer.save_model(str(Path(out_dir) / "model"))  # weights and tokenizer (processing_class), on process 0
    return history
