"""The GRPO loop: sample groups, judge, compute advantages, update; checkpoint and resume exactly.

    run = setup(cfg)                       # model, reference, optimizer, data, random generators
    for metrics in train(cfg, run):        # one dict per step (see metrics.py for the keys)
        ...
    run.policy                             # the trained model

Everything a step depends on lives in ``Run`` and is saved in a checkpoint: weights, optimizer
and scheduler state, the two random generators (prompt order, sampling), torch's global RNG,
the step counter and the history. So ``5 steps + checkpoint + resume + 5 steps`` gives the same
weights as 10 straight steps.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.core.advantages import estimate_advantages, masked_advantages
from grpo_kit.core.metrics import (
    completion_rows,
    correct_mask,
    distinct_frac,
    group_samples,
    length_metrics,
    reward_metrics,
)
from grpo_kit.data.runfolder import (
    RunLock,
    append_line,
    atomic_write_text,
    disk_full,
    has_run,
    is_disk_full,
)
from grpo_kit.data.sources import load_source, source_of, source_path
from grpo_kit.data.tasks import (
    check_columns,
    columns_of,
    get_task,
    heldout_split,
)
from grpo_kit.errors import (
    CheckpointError,
    ConfigError,
    GRPOKitError,
    RunFolderError,
    StopRequested,
    TrainingError,
)
from grpo_kit.eval.inference import check_prompts, greedy_accuracy
from grpo_kit.loop import beyond_scalar, dynamic, replay, schedules
from grpo_kit.loop.checks import check_config
from grpo_kit.loop.schedules import (
    lr_lambda,  # the learning-rate schedule (population.py and tests import it from here)
)
from grpo_kit.loop.step import Update, train_step
from grpo_kit.model import lora, memory
from grpo_kit.model.sampling import chat_items
from grpo_kit.model.tiny import hub_reachable, load_model, resolve_model
from grpo_kit.rewards import judges
from grpo_kit.rewards.judges import RewardLog, score
from grpo_kit.rewards.resolve import get_reward_funcs

log = logging.getLogger(__name__)


@dataclass(slots=True)  # every field declared: setting another attribute is an AttributeError
class Run:
    cfg: GRPOConfig
    policy: torch.nn.Module
    ref: torch.nn.Module | None      # a frozen copy, or lora.AdapterOff(policy) with cfg.lora
    tokenizer: object
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    reward_funcs: list[Callable]
    train_items: list[dict]
    eval_items: list[dict]
    data_gen: torch.Generator        # which prompts each step
    sample_gen: torch.Generator      # which tokens are sampled
    step: int = 0
    history: list[dict] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out greedy accuracy)
    stopped_by: str | None = None    # "Ctrl-C", "SIGTERM", "SIGHUP" or "should_stop" when a run ended early
    steer: object = None  # [steer] schedules.SteerState: adaptive G, curriculum stage, spend, replay buffer
    gold_funcs: list[Callable] = field(default_factory=list)  # cfg.gold_reward_funcs: logged, never trained on
    findings: list = field(default_factory=list)  # diagnostics.Finding, each kind once, found while training
    step_judge: Callable | None = None  # advantage_estimator='process': cfg.step_judge resolved
    critic: torch.nn.Module | None = None  # advantage_estimator='hybrid_gae': the value head (critic.py)
    critic_optimizer: torch.optim.Optimizer | None = None  # its own AdamW (cfg.value_lr)
    pairwise_judges: list = field(default_factory=list)  # advantage_estimator='pairwise': beyond_scalar.PairwiseJudge

    def tail_mean(self, key: str, last: int = 20) -> float:
        """The mean of metric ``key`` over the run's last ``last`` steps (nan when none logged it)."""
        xs = [m[key] for m in self.history[-last:] if isinstance(m.get(key), (int, float))]
        return sum(xs) / len(xs) if xs else float("nan")


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("GRPOConfig.device='cuda': no CUDA GPU is visible to torch; use device='cpu' or 'auto'")
    return torch.device(name)


def capped_threads(n: int) -> int:
    """``n`` torch threads, at most the machine's CPU count (more only slows down: 1000 ran 11x slower)."""
    cpus = os.cpu_count() or 1
    if n > cpus:
        log.warning("threads=%d is more than the %d CPU(s) of this machine; using %d", n, cpus, cpus)
        return cpus
    return n


def setup(cfg: GRPOConfig, policy=None, tokenizer=None, reward_funcs=None, train_items=None,
          eval_items=None, gold_reward_funcs=None) -> Run:
    """Build everything a run needs from ``cfg``; pass objects to override the defaults."""
    check_config(cfg)  # every field and every name, before anything is loaded
    if cfg.threads:
        torch.set_num_threads(capped_threads(cfg.threads))
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    if policy is None:
        checked = check_memory(cfg, local_model_config(cfg.model), device)  # before the weights are loaded
        policy, tokenizer = load_model(cfg.model, device)
    else:
        checked = False
    if not checked:  # the loaded model's own config; what it holds already is not asked for again
        check_memory(cfg, policy.config, device, held=sum(p.numel() * p.element_size() for p in policy.parameters()))
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    if cfg.lora is not None:  # train adapters; the reference is the same weights with the adapter off
        policy = lora.add_lora(policy, cfg.lora)
    ref = None
    if cfg.beta != 0.0 or cfg.log_kl:
        ref = lora.AdapterOff(policy) if cfg.lora is not None else copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.learning_rate,
                            weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    train_items, eval_items = run_items(cfg, policy, tokenizer, train_items, eval_items)
    funcs = get_reward_funcs(reward_funcs or cfg.reward_funcs)
    sample_device = next(policy.parameters()).device  # torch.multinomial draws where the logits are
    run = Run(cfg, policy, ref, tokenizer, opt, sched, funcs, train_items, eval_items,
              torch.Generator().manual_seed(cfg.seed), torch.Generator(sample_device).manual_seed(cfg.seed + 1),
              gold_funcs=get_reward_funcs(gold_reward_funcs or cfg.gold_reward_funcs))
    beyond_scalar.setup(run, cfg)  # the step judge, value head or pairwise judges of its estimator
    return run


def local_model_config(name) -> dict | None:
    """A local model folder's ``config.json`` as a dict (read before loading the weights); None otherwise."""
    try:
        path = resolve_model(name, warn=False)
        return json.loads((path / "config.json").read_text()) if isinstance(path, Path) else None
    except (OSError, ValueError, GRPOKitError):
        return None


def check_memory(cfg: GRPOConfig, model_config, device, held: int = 0) -> bool:
    """Refuse (ConfigError) before a large allocation: a LoRA rank above the targeted layers' sizes
    (``lora.check_rank``), or an estimated peak above the memory ``device`` has (``memory.check_fits``).
    False when ``model_config`` is None (nothing to check yet)."""
    if model_config is None:
        return False
    if cfg.lora is not None:
        try:
            sizes = {k: min(v) for k, v in memory.linear_shapes(memory.model_shape(model_config)).items()}
        except (ValueError, TypeError):  # not a Llama/Qwen2-style config: add_lora checks the loaded layers
            sizes = {}
        lora.check_rank(cfg.lora, sizes)
    memory.check_fits(cfg, model_config, device, held)
    return True


def run_items(cfg: GRPOConfig, policy, tokenizer, train_items=None, eval_items=None) -> tuple[list[dict], list[dict]]:
    """The training and held-out items of a run: the caller's, else ``cfg.dataset`` (or the task's train
    split) and the task's held-out split; prompts made chat messages when ``cfg.chat_template`` says so."""
    # prompts from a file or from the caller are checked against the model (context, vocabulary);
    # the built-in tasks' prompts are a few characters of the tokenizer's own alphabet
    given = train_items is not None or cfg.dataset is not None
    where = "train_items" if train_items is not None or cfg.dataset is None else source_of(cfg.dataset).where
    if train_items is None:
        train_items = dataset_items(cfg) if cfg.dataset is not None else get_task(cfg.task).splits()["train"]
    train_items = chat_items(train_items, tokenizer, cfg.chat_template)
    if given:
        check_columns(train_items, where)
        train_items = check_prompts(policy, tokenizer, train_items, cfg.max_completion_length, cfg.truncate_prompts,
                                    where)
    if eval_items is None:
        eval_items = chat_items(heldout_split(cfg.task)[:cfg.eval_size], tokenizer, cfg.chat_template)
    else:
        eval_items = check_prompts(policy, tokenizer, chat_items(eval_items, tokenizer, cfg.chat_template),
                                   cfg.max_completion_length, cfg.truncate_prompts, "eval_items")
    return train_items, eval_items


def dataset_items(cfg: GRPOConfig) -> list[dict]:
    """The items of ``cfg.dataset`` in any of its forms (``data/sources.py``), mapped by ``dataset_columns``; the
    hub is asked whether it answers only for a Hub name."""
    return load_source(cfg.dataset, cfg.dataset_columns, cfg.dataset_split, cfg.dataset_config, cfg.on_bad_row,
                       online=hub_reachable)


def grpo_step(run: Run) -> dict:
    """One step as named stages: plan -> collect -> advantages -> replay -> update -> metrics -> steer.

    P prompts -> P*G completions -> rewards (P, G) -> advantages -> one update of the policy.
    [steer] This step's G, P, prompt pool and reward functions come from ``schedules.plan_step``;
    :func:`collect` draws the groups (more rounds with dynamic sampling, dynamic.py) and
    :func:`add_replayed` adds replayed groups (replay.py).
    """
    t0 = time.perf_counter()
    plan = schedules.plan_step(run)  # [steer] G, P, task pool, reward functions of this step
    replayed = replay.take_for_step(schedules.state(run).replay, plan.cfg, run.step + 1)  # [steer] [] when off
    batch, reward_log = collect(run, plan, plan.cfg.num_prompts - len(replayed))  # Batch: rewards, bad (P, G)
    adv, sample_mask, estimator_metrics = advantages_for(run, plan.cfg, batch)  # (P, G[, Tc]); (P, G) bool or None
    update = add_replayed(run, plan.cfg, batch, adv, sample_mask, replayed)  # Update: fresh (+ replayed) rows
    metrics = apply_update(run, plan, update)  # train_step: loss, grad_norm, clip ratios, entropy, kl
    run.step += 1
    metrics.update(step_metrics(run, plan, batch, adv, reward_log))
    metrics.update(update.metrics | estimator_metrics | batch.info)  # replay/*, the estimator's, dynamic/*
    schedules.end_step(run, plan, metrics, metrics.pop("completions_generated"))  # [steer] spend, G/P log, adaptive
    metrics.update(step=run.step, step_time=time.perf_counter() - t0)
    return metrics


def collect(run: Run, plan, P: int) -> tuple[dynamic.Batch, RewardLog]:
    """P fresh groups of this step's G from its prompt pool, judged by its reward functions (dynamic
    sampling draws more rounds); what the reward functions logged through TRL's ``log_metric`` /
    ``log_extra``. A bad reward sample is logged as a warning here."""
    reward_log = RewardLog()
    batch = dynamic.sample_batch(run, plan.cfg, plan.items, plan.reward_funcs, P, reward_log, trainer_state(run))
    if batch.reasons:
        log.warning("step %d: %d bad reward sample(s), policy %r: %s", run.step + 1, int(batch.bad.sum()),
                    plan.cfg.reward_error_policy, batch.reasons[0])
    return batch, reward_log


def add_replayed(run: Run, cfg: GRPOConfig, batch: dynamic.Batch, adv: torch.Tensor, sample_mask,
                 replayed: list[dict]) -> Update:
    """The rows this step trains on: the fresh groups, and with ``replay_fraction`` > 0 the fresh groups
    go into the buffer and the ``replayed`` ones are appended (``replay.mix``)."""
    if run.cfg.replay_fraction == 0:
        return Update(batch.rollouts, adv, sample_mask)
    return replay.mix(run, schedules.state(run).replay, cfg, batch.rollouts, adv, sample_mask, replayed)


def apply_update(run: Run, plan, update: Update) -> dict:
    """``train_step`` on ``update`` with the run's optimizer and schedule. [steer] With a completion
    budget, the learning rate follows the share of the budget spent, not the step count."""
    cfg = plan.cfg
    if run.cfg.completion_budget:
        for group in run.optimizer.param_groups:
            group["lr"] = cfg.learning_rate * lr_lambda(cfg)(plan.frac * cfg.steps * cfg.num_iterations)  # counts updates
    return train_step(run.policy, run.ref, run.optimizer, update.rollouts, update.advantages, cfg, run.scheduler,
                      sample_mask=update.sample_mask, behaviour_logp=update.behaviour_logp,
                      behaviour_rows=update.behaviour_rows)


def advantages_for(run: Run, cfg: GRPOConfig, batch: dynamic.Batch) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """The batch's advantages: (P, G) or, for the token-level estimators, (P, G, Tc); the sample mask
    (P, G) bool when the bad samples are skipped (else None); the estimator's metrics."""
    P, G = batch.rewards.shape
    if cfg.reward_error_policy == "skip" and bool(batch.bad.any()):  # validate(): only with advantage_estimator='grpo'
        return masked_advantages(batch.rewards, ~batch.bad, cfg.scale_rewards), ~batch.bad, {}  # (P, G) 0 if bad
    if cfg.advantage_estimator in beyond_scalar.ONLINE:  # step judge, value head or pairwise judges
        adv, metrics = beyond_scalar.step_advantages(run, cfg, batch.items, batch.rollouts, batch.rewards)
        return adv, None, metrics  # (P, G[, Tc])
    adv = estimate_advantages(cfg.advantage_estimator, batch.rewards, scale_rewards=cfg.scale_rewards,
                              objectives=batch.per_func.view(P, G, -1),
                              weights=cfg.reward_weights)  # (P, G); "grpo" = compute_advantages
    return adv, None, {}


def step_metrics(run: Run, plan, batch: dynamic.Batch, adv: torch.Tensor, reward_log: RewardLog) -> dict:
    """What a step logs about its fresh groups (replayed ones excluded): bad samples, what the reward
    functions logged, rewards per function, gold rewards, lengths by right/wrong, distinct completions,
    the largest advantage, the first group's text and, with ``log_completions``, every group."""
    cfg, fresh, G = plan.cfg, batch.rollouts, plan.cfg.num_generations
    metrics = {"rewards/bad_samples": float(batch.bad.sum())}
    metrics.update(reward_log.averages())  # log_metric(name, value) from reward functions, averaged as TRL does
    if reward_log.extra:
        metrics["log_extra"] = reward_log.extra  # log_extra(column, values): per-sample columns
    names = [getattr(f, "__name__", f"func{k}") for k, f in enumerate(plan.reward_funcs)]
    metrics.update(reward_metrics(batch.drawn, batch.per_func, names))  # drawn (rounds*P, G): every group sampled
    gold, correct, gold_per = _gold_metrics(run, fresh, batch.items)  # correct (P*G,) bool by the first gold function
    metrics.update(gold)
    if correct is None:
        correct = correct_mask(batch.rewards, batch.per_func, names)  # (P*G,) bool: right answers, for the length split
    per_sample = beyond_scalar.per_completion(adv, fresh.completion_mask)  # (P, G): token advantages averaged
    metrics.update(length_metrics(fresh.lengths, fresh.is_truncated, per_sample.reshape(-1), correct))  # fresh rows
    metrics["completions/distinct_frac"] = distinct_frac(fresh.completions, G)
    if fresh.truncated_mass is not None:  # top_k / top_p / min_p / repetition_penalty: the off-policy gap
        m = fresh.completion_mask.float()  # (B, Tc)
        metrics["sampling/truncated_mass"] = float((fresh.truncated_mass * m).sum() / m.sum().clamp(min=1))
    metrics["advantages/max_abs"] = adv.abs().max().item()
    metrics["samples"] = group_samples(fresh.prompts, fresh.completions, batch.rewards, per_sample)  # first group
    if cfg.log_completions and run.step % cfg.log_completions_every == 0:  # every group: completions.jsonl
        metrics["groups"] = completion_rows(run.step, fresh.prompts, fresh.completions, batch.rewards, per_sample,
                                            batch.per_func, names, gold_per,
                                            [_func_name(f, k) for k, f in enumerate(run.gold_funcs)],
                                            cfg.log_completions_max_groups)
    return metrics


def trainer_state(run: Run):
    """The ``trainer_state`` TRL passes to reward functions: a ``transformers.TrainerState`` whose
    ``global_step`` (updates done before this batch) and ``max_steps`` count optimizer updates,
    ``num_iterations`` per kit step, as TRL's do."""
    from transformers import TrainerState

    cfg = run.cfg
    return TrainerState(global_step=run.step * cfg.num_iterations, max_steps=cfg.steps * cfg.num_iterations,
                        train_batch_size=cfg.micro_batch_size or cfg.batch_size)


def _gold_metrics(run: Run, rollouts, items) -> tuple[dict, torch.Tensor | None]:
    """``gold_reward``: the mean of ``cfg.gold_reward_funcs`` on this step's completions (never trained on),
    per function too; which completions are right by the first gold function (its reward > 0); and the
    values (B, K) of every gold function. (None, None) in their place without gold functions."""
    if not run.gold_funcs:
        return {}, None, None
    policy = "zero" if run.cfg.reward_error_policy != "raise" else "raise"
    G = len(rollouts.completions) // len(items)
    gold, gold_per, _, _ = score(run.gold_funcs, rollouts.prompts, rollouts.completions,
                                 columns_of(items, repeat=G), None, policy)  # (B,), (B, K)
    out = {"gold_reward": torch.nanmean(gold).item()}
    for k, f in enumerate(run.gold_funcs):
        out[f"gold_rewards/{_func_name(f, k)}/mean"] = torch.nanmean(gold_per[:, k]).item()
    return out, gold_per[:, 0].cpu() > 0, gold_per.cpu()  # (B,), (B, K)


def _func_name(f, k: int) -> str:
    return getattr(f, "__name__", f"func{k}")

def evaluate(run: Run) -> float:
    acc = greedy_accuracy(run.policy, run.tokenizer, run.eval_items, max(run.cfg.max_completion_length, 1))
    run.evals.append((run.step, acc))
    return acc


STOP_SIGNALS = {getattr(signal, n): label for n, label in
                (("SIGINT", "Ctrl-C"), ("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP")) if hasattr(signal, n)}


class StopOnSignals:
    """While active, the first Ctrl-C (SIGINT), SIGTERM or SIGHUP only sets ``requested`` (and
    ``signal_name``); a second one of them interrupts at once (``KeyboardInterrupt``).

    ``train()`` holds one for its whole loop, so a request is never forgotten: one that arrives
    during a step or its evaluation ends the run after that step; one that arrives during a
    checkpoint write or in the caller's loop body ends it before the next step. SIGTERM (a
    container stop, a batch queue's preemption) and SIGHUP (a closed ssh session) are treated
    as Ctrl-C. A signal the process ignores (``nohup`` ignores SIGHUP) stays ignored. Installed
    only in the main thread (``signal`` allows nothing else); the previous handlers are restored
    on exit.

    A step stuck in a reward call does not end by itself: the request also tells the scoring
    harness (``judges.request_stop``), which gives a reward call still running
    ``judges.REWARD_STOP_GRACE_S`` (5 s) more and then gives the step up, so one SIGTERM ends such
    a run within that grace period (plus the time to write history and checkpoint), keeping the
    last finished step (reward calls under ``reward_timeout_s``, the default; an inline one,
    ``reward_timeout_s=None``, needs the second signal).
    """

    def __init__(self):
        self.requested, self.signal_name, self.previous, self.active = False, None, {}, False

    def __enter__(self):
        judges.clear_stop()
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                prev = signal.getsignal(sig)
                if prev == signal.SIG_IGN:  # nohup (SIGHUP) or a background job (SIGINT): leave it ignored
                    continue
                self.previous[sig] = prev
                signal.signal(sig, self._handle)
            self.active = True
        return self

    def _handle(self, signum, frame):
        if self.requested:
            self._restore()
            raise KeyboardInterrupt
        self.requested, self.signal_name = True, STOP_SIGNALS.get(signum, f"signal {signum}")
        judges.request_stop()  # a reward call still running gives up after the grace period
        again = "press Ctrl-C" if signum == signal.SIGINT else f"send {self.signal_name}"
        try:  # after SIGHUP the terminal may be gone: the stop must not fail on a message
            print(f"grpo-kit: {self.signal_name}: stopping after this step (with a checkpoint if there is an "
                  f"output folder); {again} again to abort now", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def _restore(self):
        if self.active:
            for sig, prev in self.previous.items():
                signal.signal(sig, prev if prev is not None else
                              (signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL))
            self.active = False

    def __exit__(self, *exc):
        self._restore()
        judges.clear_stop()


StopOnSigint = StopOnSignals  # the earlier name, for code written against it


def _skipped_steps(history: list[dict], num_iterations: int) -> int:
    """How many of the last steps in a row skipped every one of their ``num_iterations`` updates."""
    n = 0
    for m in reversed(history):
        if m.get("skipped", 0.0) < num_iterations:
            break
        n += 1
    return n


def _too_many_skips(run: Run, out_dir) -> TrainingError:
    cfg, last = run.cfg, run.history[-1]
    n = _skipped_steps(run.history, cfg.num_iterations)
    where = latest_checkpoint(out_dir) if out_dir is not None else None
    bad = sum(m.get("rewards/bad_samples", 0.0) for m in run.history[-n:])
    return TrainingError(
        f"stopped at step {run.step}: the last {n} updates were all skipped "
        f"(max_consecutive_skips={cfg.max_consecutive_skips}); "
        f"last loss={last.get('loss')}, grad_norm={last.get('grad_norm')}, bad reward samples in those steps={bad:g}. "
        f"The weights are those of step {run.step - n} (skipped updates never change them). Try: "
        + ("check the reward functions (they gave bad values in those steps); " if bad else "")
        + f"a lower learning_rate (now {cfg.learning_rate}), a smaller max_grad_norm (now {cfg.max_grad_norm}), "
        f"bf16=False, or check the data for extreme inputs"
        + (f"; the last checkpoint is {where}" if where is not None else ""))


def train(cfg: GRPOConfig | Run, run: Run | None = None, out_dir: str | Path | None = None,
          resume: bool = False, should_stop: Callable[[], bool] | None = None,
          allow_schedule_change: bool = False) -> Iterator[dict]:
    """Run ``cfg.steps`` GRPO steps, yielding each step's metrics (with ``accuracy`` on eval steps).

    ``train(run)`` trains a run built by :func:`setup`; ``train(cfg)`` builds it first. The loop reads
    ``run.cfg`` only: ``train(cfg, run)`` with a ``cfg`` other than ``run.cfg`` is refused, naming the
    fields that differ (a changed config needs a new ``setup``).

    With ``out_dir``: the folder is locked against a second process (:class:`RunLock`);
    ``history.jsonl`` gets one line per finished step; checkpoints are written every
    ``cfg.checkpoint_every`` steps and at the end; ``resume=True`` continues from the latest
    one (half-written ``*.tmp`` checkpoints are removed) and raises when there is none. A new
    run (``run.step == 0``, no ``resume``) refuses a folder that holds another run's checkpoints.
    ``should_stop()`` returning True, or Ctrl-C / SIGTERM / SIGHUP (in the main thread), ends
    the run after the current step, with a checkpoint; ``metrics["stopped"]`` is 1 and
    ``run.stopped_by`` names the signal. ``cfg.max_consecutive_skips`` skipped updates in a row
    raise :class:`TrainingError`. ``allow_schedule_change``: a resume with another ``steps`` may
    move the schedules at the resumed step (see :func:`load_checkpoint`).
    """
    run = one_run(cfg, run)
    lock = RunLock(out_dir).acquire() if out_dir is not None else None
    try:
        with StopOnSignals() as signals:
            yield from _loop(run, Path(out_dir) if out_dir is not None else None, resume, should_stop, signals,
                             allow_schedule_change)
    finally:
        if lock is not None:
            lock.release()


def one_run(cfg: GRPOConfig | Run, run: Run | None) -> Run:
    """The run ``train`` trains: ``cfg`` itself when it is a :class:`Run`, else ``run`` (or ``setup(cfg)``),
    whose config must be ``cfg``."""
    if isinstance(cfg, Run):
        if run is not None:
            raise TypeError("train(run) takes the run once: pass train(run) or train(cfg, run)")
        return cfg
    if run is None:
        return setup(cfg)
    if run.cfg != cfg:
        differ = [f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(run.cfg, f.name)]
        raise ConfigError(f"train(cfg, run): cfg differs from the config the run was set up with in {differ}; "
                          f"call train(run) to train with run.cfg, or setup(cfg) again for the new config")
    return run


def resume_run(run: Run, out_dir: str | Path, allow_schedule_change: bool = False) -> Path:
    """Restore ``run`` from the latest checkpoint in ``out_dir``; raise when there is none (and, see
    :func:`load_checkpoint`, when another ``steps`` would move a schedule, unless ``allow_schedule_change``)."""
    remove_partial_checkpoints(out_dir)
    ck = latest_checkpoint(out_dir)
    if ck is None:
        raise RunFolderError(f"nothing to resume: {out_dir} has no checkpoint (no checkpoints/latest); "
                             f"check the path, or start a new run there")
    load_checkpoint(run, ck, allow_schedule_change)
    return ck


def _loop(run: Run, out_dir: Path | None, resume: bool, should_stop, signals: StopOnSignals,
          allow_schedule_change: bool = False):
    cfg = run.cfg
    saved = None  # step of the newest checkpoint on disk
    if out_dir is not None:
        remove_partial_checkpoints(out_dir)
        if resume:
            saved = int(resume_run(run, out_dir, allow_schedule_change).name.split("-")[1])
        elif run.step == 0 and has_run(out_dir):
            raise RunFolderError(f"{out_dir} holds another run's checkpoints; pass resume=True to continue it, "
                                 f"or another out_dir")
        elif latest_checkpoint(out_dir) is not None:
            saved = int(latest_checkpoint(out_dir).name.split("-")[1])
        write_history(run.history, out_dir / "history.jsonl")  # the finished steps; a resume drops the rest
        keep_completions(out_dir / COMPLETIONS_FILE, run.step)  # and their groups, no later ones

    def stop_now():
        return signals.requested or (should_stop is not None and bool(should_stop()))

    if not run.evals:
        evaluate(run)
    while run.step < cfg.steps and not schedules.budget_spent(run):  # [steer] completion_budget
        if signals.requested:  # arrived during the last checkpoint write or in the caller's loop body
            _end_early(run, out_dir, saved, signals.signal_name)
            break
        before = _rng_states(run)
        try:
            metrics = grpo_step(run)
        except StopRequested as e:  # a reward call outlived the grace period after a stop request
            log.warning("%s: %s", signals.signal_name or "stop", e)
            _give_up_step(run, out_dir, saved, signals.signal_name, before)
            break
        groups = metrics.pop("groups", None)  # completions.jsonl and the caller; not kept in the history
        due_eval = bool(cfg.eval_every) and run.step % cfg.eval_every == 0
        evaluated = False
        while True:  # a stop request that arrives during the evaluation still counts for this step
            stop = stop_now()
            last = run.step == cfg.steps or stop or schedules.budget_spent(run)
            if evaluated or not (last or due_eval):
                break
            metrics["accuracy"] = evaluate(run)
            schedules.after_eval(run, metrics)  # [steer] curriculum by held-out accuracy
            evaluated = True
        if stop:
            metrics["stopped"] = 1.0
            run.stopped_by = signals.signal_name if signals.requested else "should_stop"
        run.history.append(metrics)
        if cfg.diagnose_every and (run.step % cfg.diagnose_every == 0 or last):
            metrics.update(_new_findings(run))  # before the history line, so history.jsonl has them
        if out_dir is not None:
            append_line(out_dir / "history.jsonl", _json_line(metrics))
            if groups:
                append_line(out_dir / COMPLETIONS_FILE, "".join(_json_line(r) + "\n" for r in groups).rstrip("\n"))
        skips = _skipped_steps(run.history, cfg.num_iterations)
        if cfg.max_consecutive_skips and skips >= cfg.max_consecutive_skips:
            raise _too_many_skips(run, out_dir)
        if out_dir is not None and (last or (cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0)):
            save_checkpoint(run, out_dir)
            saved = run.step
        yield metrics if groups is None else {**metrics, "groups": groups}
        if last:
            break


def _end_early(run: Run, out_dir: Path | None, saved: int | None, why: str | None) -> None:
    """A stop request that came between steps: evaluate, mark and checkpoint the last finished step."""
    run.stopped_by = why or "signal"
    if not run.history:
        return
    if run.evals[-1][0] != run.step:
        run.history[-1]["accuracy"] = evaluate(run)
    run.history[-1]["stopped"] = 1.0
    if out_dir is not None:
        write_history(run.history, out_dir / "history.jsonl")
        if saved != run.step:
            save_checkpoint(run, out_dir)


def _rng_states(run: Run) -> dict:
    """The random generators' states before a step (a few KB), to undo a step given up midway."""
    out = {"step": run.step, "data_gen": run.data_gen.get_state(), "sample_gen": run.sample_gen.get_state(),
           "torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["cuda_rng"] = torch.cuda.get_rng_state_all()
    return out


def _give_up_step(run: Run, out_dir: Path | None, saved: int | None, why: str | None, before: dict) -> None:
    """End the run after a step given up in a reward call: the finished steps' history, and a checkpoint
    of the last finished step. Before the update (the usual case: rewards come before it) the random
    generators are put back, so that checkpoint resumes exactly as if the step had never begun; with a
    replay buffer (taken from before the rewards) or after the update (a gold judge) no new checkpoint is
    written and the last one on disk stays. No evaluation: the run ends as fast as it can."""
    run.stopped_by = why or "signal"
    exact = run.step == before["step"] and schedules.state(run).replay is None
    if exact:
        run.data_gen.set_state(before["data_gen"])
        run.sample_gen.set_state(before["sample_gen"])
        torch.set_rng_state(before["torch_rng"])
        if "cuda_rng" in before:
            torch.cuda.set_rng_state_all(before["cuda_rng"])
    run.step = before["step"]  # the steps whose metrics are in the history
    if run.history:
        run.history[-1]["stopped"] = 1.0
    if out_dir is not None:
        write_history(run.history, out_dir / "history.jsonl")
        if exact and run.history and saved != run.step:
            save_checkpoint(run, out_dir)


def _new_findings(run: Run) -> dict:
    """Run the detectors on the history; warn once per new kind of finding; ``{"findings": [...]}`` if any."""
    from grpo_kit.eval.diagnostics import diagnose

    seen = {f.kind for f in run.findings}
    new = [f for f in diagnose(run.history, run.cfg) if f.kind not in seen]
    for f in new:
        log.warning("%s", f.summary())
    run.findings.extend(new)
    return {"findings": [f.to_dict() for f in new]} if new else {}


# ---------------------------------------------------------------- checkpoints

STATE_FILE = "trainer_state.pt"
# fields that may differ between a checkpoint and the run resuming it
RESUMABLE_CHANGES = {"steps", "eval_every", "checkpoint_every", "keep_checkpoints", "threads", "device",
                     "reward_timeout_s", "max_consecutive_skips", "share_prompt_prefix", "dedupe_completions", "pack_max_tokens",
                     "diagnose_every", "log_completions", "log_completions_every", "log_completions_max_groups"}
_STEP_DIR = re.compile(r"step-\d+")
_STEP_NUM = re.compile(r"step-(\d+)")


def remove_partial_checkpoints(out_dir: str | Path) -> list[Path]:
    """Delete ``*.tmp`` leftovers of a checkpoint write that was killed; they are never read."""
    root = Path(out_dir) / "checkpoints"
    gone = sorted(root.glob("*.tmp")) if root.is_dir() else []
    for p in gone:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return gone


def _pause_for_tests(step: int, tmp: Path) -> None:
    """Test hook: with ``GRPO_KIT_PAUSE_IN_CHECKPOINT=<step>`` the process sleeps once the temp
    folder of that step is complete and before it is renamed, so a test can SIGKILL it there."""
    if os.environ.get("GRPO_KIT_PAUSE_IN_CHECKPOINT") == str(step):
        print(f"grpo-kit: paused in checkpoint {tmp}", file=sys.stderr, flush=True)
        time.sleep(600)


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    pointer = Path(out_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    if not _STEP_DIR.fullmatch(name):
        raise CheckpointError(f"{pointer} holds {name[:40]!r}, not a checkpoint name like 'step-000010'; "
                              f"write the name of a checkpoint folder into it or delete it to start afresh")
    path = Path(out_dir) / "checkpoints" / name
    if not path.is_dir():
        raise CheckpointError(f"{pointer} names {path.name}, which does not exist; delete {pointer} to start afresh")
    return path


def _step_of(p: Path) -> int | None:
    m = _STEP_NUM.fullmatch(p.name)
    return int(m.group(1)) if m else None


def _is_disk_full(e: BaseException) -> bool:
    """ENOSPC as an OSError, or as the RuntimeError torch.save / safetensors raise for it."""
    text = str(e).lower()
    return is_disk_full(e) or "no space left" in text or "os error 28" in text or "file write failed" in text


def save_checkpoint(run: Run, out_dir: str | Path) -> Path:
    """Write ``checkpoints/step-NNNNNN`` (the model, its tokenizer and the trainer state) with
    :func:`write_checkpoint`, keeping ``cfg.keep_checkpoints`` of them."""
    state = {
        "step": run.step, "config": run.cfg.to_dict(), "history": run.history, "evals": run.evals,
        "optimizer": run.optimizer.state_dict(), "scheduler": run.scheduler.state_dict(),
        "data_gen": run.data_gen.get_state(), "sample_gen": run.sample_gen.get_state(),
        "torch_rng": torch.get_rng_state(), "fingerprints": fingerprints(run.cfg),
        "device": run.sample_gen.device.type,
        "steer": schedules.state(run).state_dict(),  # [steer] adaptive G, curriculum stage, spend, replay buffer
    }
    state.update(beyond_scalar.state_dict(run))  # the value head and its optimizer, with hybrid_gae
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return write_checkpoint(out_dir, run.step, run.cfg.keep_checkpoints,
                            [(lora.weights_file(run.policy), run.policy.save_pretrained),
                             ("tokenizer.json", run.tokenizer.save_pretrained)], state)


def write_checkpoint(out_dir: str | Path, step: int, keep: int, files: list[tuple[str, Callable[[Path], object]]],
                     state: dict) -> Path:
    """Write ``checkpoints/step-NNNNNN`` atomically (temp folder, then rename), then point ``latest`` at it.

    ``files``: (file name, ``save(folder)``) pairs, each writing that file (and any others) into the
    folder, e.g. a model's and a tokenizer's ``save_pretrained``; then ``state`` goes to ``trainer_state.pt``
    as plain values only (:func:`storable`: :func:`read_trainer_state` reads it back with
    ``weights_only=True``). Older checkpoints beyond ``keep`` are removed, ordered by step number; the
    one just written is never removed. A failed write (disk full: :class:`DiskFullError` naming the file)
    removes the temp folder and leaves the previous checkpoint and ``latest`` as they were.
    """
    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    tmp, final = root / (name + ".tmp"), root / name
    shutil.rmtree(tmp, ignore_errors=True)
    writing = tmp
    try:
        for file, save in files:
            writing = tmp / file
            save(tmp)
        writing = tmp / STATE_FILE
        torch.save(storable(state), tmp / STATE_FILE)  # plain values only: read back with weights_only=True
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if _is_disk_full(e):
            before = latest_checkpoint(out_dir)
            raise disk_full(e, writing, f"the partial checkpoint was removed; "
                                        f"{'the previous checkpoint ' + before.name + ' is intact' if before else 'no earlier checkpoint exists'}") from e
        raise
    _pause_for_tests(step, tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / "latest", name)
    kept = sorted((p for p in root.iterdir() if p.is_dir() and _step_of(p) is not None), key=_step_of)
    for old in kept[:-keep]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


# ---------------------------------------------------------------- content fingerprints

_HASHES: dict[tuple, str] = {}


def content_hash(path: str | Path) -> str | None:
    """sha256 of a file, or of a folder's files (names and bytes, top level, hidden files left out);
    None when ``path`` is not on disk. Cached per (path, sizes, modification times)."""
    import hashlib

    p = Path(path)
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
    else:
        return None
    key = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if key not in _HASHES:
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode("utf-8", "surrogateescape") + b"\0" if p.is_dir() else b"")
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def fingerprints(cfg: GRPOConfig) -> dict:
    """Content hashes of the run's starting model and dataset (None for a hub name, a datasets object or no dataset)."""
    from grpo_kit.model.tiny import resolve_model

    model = resolve_model(cfg.model, warn=False)
    return {"model": content_hash(model) if isinstance(model, Path) else None,
            "dataset": content_hash(path) if (path := source_path(cfg.dataset, cfg.dataset_split)) else None}


def storable(v):
    """``v`` in the forms ``torch.load(weights_only=True)`` reads back without running code: tensors, dicts,
    lists, tuples, str, int, float, bool and None. A numpy value becomes its Python number or list, a
    dataclass its dict, a set a list, a function (a ``reward_funcs`` callable in the config) its
    ``"module:name"``, a dict key of another type its str, anything else its str."""
    import dataclasses

    if v is None or type(v) in (str, int, float, bool) or isinstance(v, torch.Tensor):
        return v
    if isinstance(v, dict):
        return {k if k is None or type(k) in (str, int, float, bool) else str(k): storable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(storable(x) for x in v) if type(v) in (list, tuple) else [storable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return [storable(x) for x in sorted(v, key=repr)]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return storable(dataclasses.asdict(v))
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', None) or '?'}:{v.__qualname__}"
    if hasattr(v, "tolist"):  # numpy scalars and arrays
        return storable(v.tolist())
    for kind in (bool, int, float, str):  # a subclass (an enum, a str subclass) as the plain value
        if isinstance(v, kind):
            return kind(v) if kind is not str else str.__str__(v)
    return str(v)


def _numpy_globals() -> list:
    """numpy's scalar and array types, which :func:`storable` leaves out but checkpoints written before
    it (grpo-kit before December 2026) may hold in a reward function's logged values: allowed when reading."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    return [core.multiarray.scalar, core.multiarray._reconstruct, np.ndarray, np.dtype,
            *{type(np.dtype(c)) for c in np.typecodes["All"]}]


def read_trainer_state(path: str | Path):
    """``trainer_state.pt`` of the checkpoint folder ``path``, read with ``weights_only=True``: a file that
    names any other function or class (a crafted pickle that would run code) is refused unread.

    Raises :class:`CheckpointError` naming the file and the fix; a checkpoint you wrote yourself with an
    older grpo-kit and a Python function in its config can be rewritten once with :func:`convert_checkpoint`.
    """
    import contextlib
    import pickle

    file = Path(path) / STATE_FILE
    allow = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with allow(_numpy_globals()) if allow else contextlib.nullcontext():
            return torch.load(file, weights_only=True, map_location="cpu")  # RNG states are CPU tensors
    except Exception as e:  # noqa: BLE001 - any read failure means the checkpoint is unusable
        text = str(e)
        # weights_only met a function or class it does not allow
        found = isinstance(e, pickle.UnpicklingError) and re.search(r"GLOBAL (\S+)", text)
        if found:
            raise CheckpointError(f"checkpoint {path}: {STATE_FILE} holds {found.group(1)}, not only tensors and "
                                  f"plain values, so it was not loaded (loading it could run code); use a run folder "
                                  f"you trust, or, only if you wrote it yourself with an older grpo-kit, rewrite it "
                                  f"once with python -c \"from grpo_kit.loop.train import convert_checkpoint; "
                                  f"convert_checkpoint('{path}')\"") from None
        why = re.search(r"WeightsUnpickler error:\s*(.+)", text)
        first = why.group(1) if why else text.strip().splitlines()[0] if text.strip() else ""
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(e).__name__}: {first.strip()[:200]}); "
                              f"delete it or resume from an earlier one") from None


def convert_checkpoint(path: str | Path) -> None:
    """Rewrite the ``trainer_state.pt`` of checkpoint folder ``path`` in the plain form
    :func:`read_trainer_state` accepts (see :func:`storable`). This unpickles the file the old way,
    which runs whatever code it names: only for a checkpoint you wrote yourself."""
    file = Path(path) / STATE_FILE
    state = torch.load(file, weights_only=False, map_location="cpu")
    tmp = file.with_name(file.name + ".tmp")
    torch.save(storable(state), tmp)
    os.replace(tmp, file)


def load_checkpoint(run: Run, path: str | Path, allow_schedule_change: bool = False) -> None:
    """Restore ``run`` in place from a checkpoint folder written by :func:`save_checkpoint` (its trainer
    state read with :func:`read_trainer_state`, which runs no code).

    A ``run.cfg`` with another ``steps`` than the checkpoint's stretches every fraction-based schedule
    over the new total (:func:`schedules.resume_changes`): when that changes a value at the resumed
    step (a cosine rate that jumps, G going back to an earlier entry) it raises :class:`CheckpointError`
    listing the changes, unless ``allow_schedule_change``; allowed changes are logged as a warning.
    """
    from safetensors.torch import load_file

    path = Path(path)
    state = read_trainer_state(path)
    try:
        weights = load_file(path / lora.weights_file(run.policy)) if (path / lora.weights_file(run.policy)).exists() \
            else None  # a LoRA checkpoint and a full one hold different files: the config check below says which
    except Exception as e:  # noqa: BLE001 - any read failure means the checkpoint is unusable
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(e).__name__}: {e}); "
                              f"delete it or resume from an earlier one") from None
    if isinstance(state, dict) and state.get("kind") == "offline":
        raise CheckpointError(f"checkpoint {path} is an offline preference run (grpo-kit train-offline), not a GRPO "
                              f"run; continue it with grpo-kit train-offline --resume, or start a new output folder")
    need = {"step", "config", "history", "evals", "optimizer", "scheduler", "data_gen", "sample_gen", "torch_rng"}
    if not isinstance(state, dict) or need - set(state):
        lacking = sorted(need - set(state)) if isinstance(state, dict) else "everything"
        raise CheckpointError(f"checkpoint {path}: {STATE_FILE} is not a grpo-kit trainer state (missing {lacking}); "
                              f"resume from a folder written by grpo-kit or start a new output folder")
    # a field added to GRPOConfig after the checkpoint was written counts as its default
    check_same_run(path, state["config"], storable(run.cfg.to_dict()), GRPOConfig().to_dict(), RESUMABLE_CHANGES,
                   state.get("fingerprints") or {}, fingerprints(run.cfg))
    if weights is None:
        raise CheckpointError(f"checkpoint {path} is unreadable (no {lora.weights_file(run.policy)}); "
                              f"delete it or resume from an earlier one")
    try:
        if lora.is_lora(run.policy):
            lora.load_adapter_weights(run.policy, weights, path)
            missing, unexpected = [], []
        else:
            missing, unexpected = run.policy.load_state_dict(weights, strict=False)
        if [m for m in missing if "lm_head" not in m] or unexpected:
            raise CheckpointError(f"checkpoint {path} does not fit the model "
                                  f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        run.optimizer.load_state_dict(state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
        _follow_schedule(run)
        run.data_gen.set_state(state["data_gen"])
        _restore_sample_gen(run, state, path)
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and torch.cuda.is_available() and len(state["cuda_rng"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        if state.get("steer") is not None:  # [steer]
            schedules.state(run).load_state_dict(state["steer"])
        beyond_scalar.load_state_dict(run, state, path)
    except (RuntimeError, ValueError, TypeError, KeyError) as e:
        if isinstance(e, CheckpointError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} does not fit this model/optimizer ({first}); "
                              f"resume with the model it was trained from or start a new output folder") from e
    _check_schedules(run, state, path, allow_schedule_change)  # last, so a checkpoint that does not fit says so first
    run.step, run.history, run.evals = state["step"], state["history"], [tuple(e) for e in state["evals"]]
    run.findings = _logged_findings(run.history)


def check_same_run(path, saved: dict, now: dict, default: dict, resumable, then_fp: dict, now_fp: dict) -> None:
    """Refuse (:class:`CheckpointError`) to resume checkpoint ``path`` when an input changed or the config did.

    Inputs with a content hash in both ``then_fp`` and ``now_fp`` (the model, the data) are compared by
    content: a moved file resumes, a file changed in place does not; their config fields (paths) are
    then not compared. Every other field of ``now`` outside ``resumable`` must equal the ``saved`` one (a
    field the checkpoint lacks, added to the config later, counts as its ``default``)."""
    by_content = {k for k in then_fp if then_fp.get(k) and now_fp.get(k)}
    edited = [k for k in sorted(by_content) if then_fp[k] != now_fp[k]]
    if edited:
        raise CheckpointError(f"checkpoint {path}: the {' and the '.join(edited)} changed since it was written "
                              f"(content hash differs: {', '.join(repr(now[k]) for k in edited)}); resume with "
                              f"the files it was trained on or start a new output folder")
    changed = sorted(k for k in now if k not in resumable and k not in by_content
                     and saved.get(k, default[k]) != now[k])
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k, default[k])!r} -> {now[k]!r}" for k in changed)
        raise CheckpointError(f"checkpoint {path} was written with a different config ({diffs}); "
                              f"resume with the same config or start a new output folder")


def _check_schedules(run: Run, state: dict, path: Path, allow: bool) -> None:
    """Refuse (or, allowed, announce) a resume whose new ``steps`` moves a schedule at the resumed step."""
    then_steps = state["config"].get("steps", run.cfg.steps)
    if then_steps == run.cfg.steps or run.cfg.steps < state["step"]:  # fewer steps than done: nothing to run
        return
    generated = (state.get("steer") or {}).get("generated", 0)
    changes = schedules.resume_changes(dataclasses.replace(run.cfg, steps=then_steps), run.cfg, state["step"], generated)
    if not changes:
        return
    what = (f"resuming at step {state['step']} with steps {then_steps} -> {run.cfg.steps} stretches the "
            f"schedules over the new total: {', '.join(changes)}")
    if not allow:
        keep = (f"the run finished its {then_steps} steps: extend it" if state["step"] >= then_steps
                else f"resume with the same steps ({then_steps}) to keep them, or accept the change")
        raise CheckpointError(f"checkpoint {path}: {what}; {keep} with --allow-schedule-change "
                              f"(allow_schedule_change=True in Python)")
    log.warning("%s (allowed)", what)


def _logged_findings(history: list[dict]) -> list:
    """The findings the live diagnostics logged into ``history`` (so a resumed run warns once per kind, as
    an uninterrupted one does)."""
    from grpo_kit.eval.diagnostics import Finding

    return [Finding(**d) for m in history for d in m.get("findings", [])]


def _follow_schedule(run: Run) -> None:
    """Set the learning rate of the step to come from the schedule of ``run.cfg``.

    The same ``steps`` as the checkpoint gives the very value saved with the optimizer (an exact
    resume); a larger ``steps`` (extending a finished run) recomputes the schedule over the new
    total, so the resumed steps get the learning rate a run planned for the new total has at
    that step, rather than the stale final value of the shorter schedule (0 for cosine).
    """
    sched = run.scheduler
    for group, base, f in zip(run.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas):
        group["lr"] = base * f(sched.last_epoch)
    sched._last_lr = [g["lr"] for g in run.optimizer.param_groups]


def _plain(v):
    """A tensor or numpy value as a Python number or list (for json); anything else as its str."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if hasattr(v, "item"):
        return v.item()
    return str(v)


def _json_line(m: dict) -> str:
    return json.dumps(m, default=_plain)


def _restore_sample_gen(run: Run, state: dict, path: Path) -> None:
    """Continue the sampling stream; a checkpoint from another device type (a CUDA generator's
    state does not fit a CPU one) starts a new stream, seeded by seed and step, with a warning."""
    saved = state.get("device", "cpu")
    if saved == run.sample_gen.device.type:
        run.sample_gen.set_state(state["sample_gen"])
        return
    run.sample_gen.manual_seed(run.cfg.seed + 1 + 1_000_003 * state["step"])
    log.warning("checkpoint %s was written on %s and resumes on %s: weights, optimizer and prompt order carry "
                "over, but the sampled tokens cannot continue the same random stream (device generators differ), "
                "so this run will not repeat a straight %s run exactly", path, saved, run.sample_gen.device.type, saved)


COMPLETIONS_FILE = "completions.jsonl"  # cfg.log_completions: one row per completion of each logged step


def keep_completions(path: str | Path, last_step: int) -> None:
    """Drop the rows of ``completions.jsonl`` after ``last_step`` (a resume continues from there, and
    writes those steps again); nothing to do when the file is absent."""
    path = Path(path)
    if not path.is_file():
        return
    lines = path.read_text().splitlines()
    kept = [ln for ln in lines if ln.strip() and json.loads(ln).get("step", 0) <= last_step]
    if len(kept) != len(lines):
        atomic_write_text(path, "".join(ln + "\n" for ln in kept))


def write_history(history: list[dict], path: str | Path) -> None:
    """All of ``history`` as jsonl, atomically (the old file stays whole until the new one is complete)."""
    atomic_write_text(path, "".join(_json_line(m) + "\n" for m in history))
