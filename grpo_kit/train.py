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

from .advantages import estimate_advantages, masked_advantages
from .config import GRPOConfig
from .errors import CheckpointError, TrainingError
from .inference import columns_of, greedy_accuracy
from .judges import get_reward_funcs, score_with_policy
from .metrics import correct_mask, group_samples, length_metrics, reward_metrics
from .sampling import sample_groups
from .step import train_step
from .tasks import get_task, load_items, heldout_split
from .tiny import load_model


log = logging.getLogger(__name__)


@dataclass
class Run:
    cfg: GRPOConfig
    policy: torch.nn.Module
    ref: torch.nn.Module | None
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


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("device='cuda' but no CUDA GPU is visible; use device='cpu' or 'auto'")
    return torch.device(name)


def lr_lambda(cfg: GRPOConfig):
    def f(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "cosine":
            t = (step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1)
            return 0.5 * (1 + torch.cos(torch.tensor(min(t, 1.0) * torch.pi)).item())
        return 1.0
    return f


def setup(cfg: GRPOConfig, policy=None, tokenizer=None, reward_funcs=None, train_items=None,
          eval_items=None) -> Run:
    """Build everything a run needs from ``cfg``; pass objects to override the defaults."""
    cfg.validate()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    if policy is None:
        policy, tokenizer = load_model(cfg.model, device)
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    ref = None
    if cfg.beta != 0.0 or cfg.log_kl:
        ref = copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.learning_rate,
                            weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    if train_items is None:
        train_items = load_items(cfg.dataset, cfg.on_bad_row) if cfg.dataset else get_task(cfg.task).splits()["train"]
    if eval_items is None:
        eval_items = heldout_split(cfg.task)[:cfg.eval_size]
    funcs = get_reward_funcs(reward_funcs or cfg.reward_funcs)
    return Run(cfg, policy, ref, tokenizer, opt, sched, funcs, train_items, eval_items,
               torch.Generator().manual_seed(cfg.seed), torch.Generator(device).manual_seed(cfg.seed + 1))


def grpo_step(run: Run) -> dict:
    """One step: P prompts -> P*G completions -> rewards (P, G) -> advantages -> update."""
    cfg, t0 = run.cfg, time.perf_counter()
    idx = torch.randint(len(run.train_items), (cfg.num_prompts,), generator=run.data_gen).tolist()
    items = [run.train_items[i] for i in idx]
    G = cfg.num_generations
    rollouts = sample_groups(run.policy, run.tokenizer, [it["prompt"] for it in items], G,
                             cfg.max_completion_length, cfg.temperature, run.sample_gen)
    rewards, per_func, bad, reasons = score_with_policy(
        run.reward_funcs, rollouts.prompts, rollouts.completions, columns_of(items, repeat=G), cfg.reward_weights,
        cfg.reward_error_policy, cfg.reward_timeout_s)  # (B,), (B, K), (B,) bool
    rewards, bad = rewards.view(cfg.num_prompts, G), bad.view(cfg.num_prompts, G)  # (P, G)
    if cfg.reward_error_policy == "skip" and bool(bad.any()):  # validate(): only with advantage_estimator='grpo'
        adv = masked_advantages(rewards, ~bad, cfg.scale_rewards)  # (P, G) 0 for the bad samples
        metrics = train_step(run.policy, run.ref, run.optimizer, rollouts, adv, cfg, run.scheduler, sample_mask=~bad)
    else:
        adv = estimate_advantages(cfg.advantage_estimator, rewards, scale_rewards=cfg.scale_rewards,
                                  objectives=per_func.view(cfg.num_prompts, G, -1),
                                  weights=cfg.reward_weights)  # (P, G); "grpo" = compute_advantages
        metrics = train_step(run.policy, run.ref, run.optimizer, rollouts, adv, cfg, run.scheduler)
    if reasons:
        log.warning("step %d: %d bad reward sample(s), policy %r: %s", run.step + 1, int(bad.sum()),
                    cfg.reward_error_policy, reasons[0])
    metrics["rewards/bad_samples"] = float(bad.sum())
    run.step += 1
    names = [getattr(f, "__name__", f"func{k}") for k, f in enumerate(run.reward_funcs)]
    metrics.update(reward_metrics(rewards, per_func, names))
    correct = correct_mask(rewards, per_func, names)  # (B,) bool: right answers, for the length split
    metrics.update(length_metrics(rollouts.lengths, rollouts.is_truncated, adv.reshape(-1), correct))
    metrics["samples"] = group_samples(rollouts.prompts, rollouts.completions, rewards, adv)  # first group, text
    metrics["step"] = run.step
    metrics["step_time"] = time.perf_counter() - t0
    return metrics


def evaluate(run: Run) -> float:
    acc = greedy_accuracy(run.policy, run.tokenizer, run.eval_items, max(run.cfg.max_completion_length, 1))
    run.evals.append((run.step, acc))
    return acc


class StopOnSigint:
    """While active, the first Ctrl-C (SIGINT) only sets ``requested``; a second one interrupts at once.

    Installed only in the main thread (``signal`` allows nothing else) and only while a step
    runs, so Ctrl-C in the code that consumes ``train()``'s metrics behaves as usual. The
    previous handler is restored on exit.
    """

    def __init__(self):
        self.requested, self.previous, self.active = False, None, False

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
            self.active = True
        return self

    def _handle(self, signum, frame):
        if self.requested:
            self._restore()
            raise KeyboardInterrupt
        self.requested = True
        print("grpo-kit: Ctrl-C: stopping after this step (with a checkpoint if there is an output folder); "
              "press Ctrl-C again to abort now", file=sys.stderr, flush=True)

    def _restore(self):
        if self.active:
            signal.signal(signal.SIGINT, self.previous if self.previous is not None else signal.default_int_handler)
            self.active = False

    def __exit__(self, *exc):
        self._restore()


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


def train(cfg: GRPOConfig, run: Run | None = None, out_dir: str | Path | None = None,
          resume: bool = False, should_stop: Callable[[], bool] | None = None) -> Iterator[dict]:
    """Run ``cfg.steps`` GRPO steps, yielding each step's metrics (with ``accuracy`` on eval steps).

    With ``out_dir``: checkpoints every ``cfg.checkpoint_every`` steps and at the end, and
    ``resume=True`` continues from the latest one (half-written ``*.tmp`` checkpoints are
    removed). ``should_stop()`` returning True, or Ctrl-C (SIGINT, in the main thread) during a
    step, ends the run after the current step, with a checkpoint; ``metrics["stopped"]`` is 1.
    ``cfg.max_consecutive_skips`` skipped updates in a row raise :class:`TrainingError`.
    """
    run = run or setup(cfg)
    if out_dir is not None:
        remove_partial_checkpoints(out_dir)
    if resume and out_dir is not None and latest_checkpoint(out_dir) is not None:
        load_checkpoint(run, latest_checkpoint(out_dir))
    if not run.evals:
        evaluate(run)
    while run.step < cfg.steps:
        with StopOnSigint() as sigint:
            metrics = grpo_step(run)
            stop = sigint.requested or (should_stop is not None and should_stop())
            last = run.step == cfg.steps or stop
            if last or (cfg.eval_every and run.step % cfg.eval_every == 0):
                metrics["accuracy"] = evaluate(run)
            if stop:
                metrics["stopped"] = 1.0
            run.history.append(metrics)
            skips = _skipped_steps(run.history, cfg.num_iterations)
            if cfg.max_consecutive_skips and skips >= cfg.max_consecutive_skips:
                raise _too_many_skips(run, out_dir)
            if out_dir is not None and (last or (cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0)):
                save_checkpoint(run, out_dir)
        yield metrics
        if last:
            break


# ---------------------------------------------------------------- checkpoints

STATE_FILE = "trainer_state.pt"
# fields that may differ between a checkpoint and the run resuming it
RESUMABLE_CHANGES = {"steps", "eval_every", "checkpoint_every", "keep_checkpoints", "threads", "device",
                     "reward_timeout_s", "max_consecutive_skips", "share_prompt_prefix"}
_STEP_DIR = re.compile(r"step-\d+")


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


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(run: Run, out_dir: str | Path) -> Path:
    """Write ``checkpoints/step-NNNNNN`` atomically (temp folder, then rename), then point ``latest`` at it."""
    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{run.step:06d}"
    tmp, final = root / (name + ".tmp"), root / name
    shutil.rmtree(tmp, ignore_errors=True)
    run.policy.save_pretrained(tmp)
    run.tokenizer.save_pretrained(tmp)
    state = {
        "step": run.step, "config": run.cfg.to_dict(), "history": run.history, "evals": run.evals,
        "optimizer": run.optimizer.state_dict(), "scheduler": run.scheduler.state_dict(),
        "data_gen": run.data_gen.get_state(), "sample_gen": run.sample_gen.get_state(),
        "torch_rng": torch.get_rng_state(),
    }
    torch.save(state, tmp / STATE_FILE)
    _pause_for_tests(run.step, tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    _atomic_write_text(root / "latest", name)
    kept = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in kept[:-run.cfg.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(run: Run, path: str | Path) -> None:
    """Restore ``run`` in place from a checkpoint folder written by :func:`save_checkpoint`."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        state = torch.load(path / STATE_FILE, weights_only=False)
        weights = load_file(path / "model.safetensors")
    except Exception as e:  # noqa: BLE001 - any read failure means the checkpoint is unusable
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(e).__name__}: {e}); "
                              f"delete it or resume from an earlier one") from None
    need = {"step", "config", "history", "evals", "optimizer", "scheduler", "data_gen", "sample_gen", "torch_rng"}
    if not isinstance(state, dict) or need - set(state):
        lacking = sorted(need - set(state)) if isinstance(state, dict) else "everything"
        raise CheckpointError(f"checkpoint {path}: {STATE_FILE} is not a grpo-kit trainer state (missing {lacking}); "
                              f"resume from a folder written by grpo-kit or start a new output folder")
    # a field added to GRPOConfig after the checkpoint was written counts as its default
    saved, now, default = state["config"], run.cfg.to_dict(), GRPOConfig().to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and saved.get(k, default[k]) != now[k])
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k, default[k])!r} -> {now[k]!r}" for k in changed)
        raise CheckpointError(f"checkpoint {path} was written with a different config ({diffs}); "
                              f"resume with the same config or start a new output folder")
    try:
        missing, unexpected = run.policy.load_state_dict(weights, strict=False)
        if [m for m in missing if "lm_head" not in m] or unexpected:
            raise CheckpointError(f"checkpoint {path} does not fit the model "
                                  f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        run.optimizer.load_state_dict(state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
        run.data_gen.set_state(state["data_gen"])
        run.sample_gen.set_state(state["sample_gen"])
        torch.set_rng_state(state["torch_rng"])
    except (RuntimeError, ValueError, TypeError, KeyError) as e:
        if isinstance(e, CheckpointError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} does not fit this model/optimizer ({first}); "
                              f"resume with the model it was trained from or start a new output folder") from e
    run.step, run.history, run.evals = state["step"], state["history"], [tuple(e) for e in state["evals"]]


def write_history(history: list[dict], path: str | Path) -> None:
    with open(path, "w") as f:
        for m in history:
            f.write(json.dumps(m) + "\n")
