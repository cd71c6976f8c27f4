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
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from .advantages import estimate_advantages
from .config import GRPOConfig
from .errors import CheckpointError
from .inference import columns_of, greedy_accuracy
from .judges import get_reward_funcs, score
from .metrics import length_metrics, reward_metrics
from .sampling import sample_groups
from .step import train_step
from .tasks import get_task, load_items, heldout_split
from .tiny import load_model


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
        train_items = load_items(cfg.dataset) if cfg.dataset else get_task(cfg.task).splits()["train"]
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
    rewards, per_func = score(run.reward_funcs, rollouts.prompts, rollouts.completions,
                              columns_of(items, repeat=G), cfg.reward_weights)  # (B,), (B, K)
    rewards = rewards.view(cfg.num_prompts, G)  # (P, G)
    adv = estimate_advantages(cfg.advantage_estimator, rewards, scale_rewards=cfg.scale_rewards,
                              objectives=per_func.view(cfg.num_prompts, G, -1),
                              weights=cfg.reward_weights)  # (P, G); "grpo" = compute_advantages
    metrics = train_step(run.policy, run.ref, run.optimizer, rollouts, adv, cfg, run.scheduler)
    run.step += 1
    names = [getattr(f, "__name__", f"func{k}") for k, f in enumerate(run.reward_funcs)]
    metrics.update(reward_metrics(rewards, per_func, names))
    metrics.update(length_metrics(rollouts.lengths, rollouts.is_truncated, adv.reshape(-1)))
    metrics["step"] = run.step
    metrics["step_time"] = time.perf_counter() - t0
    return metrics


def evaluate(run: Run) -> float:
    acc = greedy_accuracy(run.policy, run.tokenizer, run.eval_items, max(run.cfg.max_completion_length, 1))
    run.evals.append((run.step, acc))
    return acc


def train(cfg: GRPOConfig, run: Run | None = None, out_dir: str | Path | None = None,
          resume: bool = False, should_stop: Callable[[], bool] | None = None) -> Iterator[dict]:
    """Run ``cfg.steps`` GRPO steps, yielding each step's metrics (with ``accuracy`` on eval steps).

    With ``out_dir``: checkpoints every ``cfg.checkpoint_every`` steps and at the end, and
    ``resume=True`` continues from the latest one. ``should_stop()`` returning True ends the run
    after the current step, with a checkpoint.
    """
    run = run or setup(cfg)
    if resume and out_dir is not None and latest_checkpoint(out_dir) is not None:
        load_checkpoint(run, latest_checkpoint(out_dir))
    if not run.evals:
        evaluate(run)
    while run.step < cfg.steps:
        metrics = grpo_step(run)
        last = run.step == cfg.steps or (should_stop is not None and should_stop())
        if last or (cfg.eval_every and run.step % cfg.eval_every == 0):
            metrics["accuracy"] = evaluate(run)
        run.history.append(metrics)
        if out_dir is not None and (last or (cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0)):
            save_checkpoint(run, out_dir)
        yield metrics
        if last:
            break


# ---------------------------------------------------------------- checkpoints

STATE_FILE = "trainer_state.pt"
# fields that may differ between a checkpoint and the run resuming it
RESUMABLE_CHANGES = {"steps", "eval_every", "checkpoint_every", "keep_checkpoints", "threads", "device",
                     "share_prompt_prefix"}


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    pointer = Path(out_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = Path(out_dir) / "checkpoints" / pointer.read_text().strip()
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
    saved, now = state["config"], run.cfg.to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in changed)
        raise CheckpointError(f"checkpoint {path} was written with a different config ({diffs}); "
                              f"resume with the same config or start a new output folder")
    missing, unexpected = run.policy.load_state_dict(weights, strict=False)
    if [m for m in missing if "lm_head" not in m] or unexpected:
        raise CheckpointError(f"checkpoint {path} does not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.data_gen.set_state(state["data_gen"])
    run.sample_gen.set_state(state["sample_gen"])
    torch.set_rng_state(state["torch_rng"])
    run.step, run.history, run.evals = state["step"], state["history"], [tuple(e) for e in state["evals"]]


def write_history(history: list[dict], path: str | Path) -> None:
    with open(path, "w") as f:
        for m in history:
            f.write(json.dumps(m) + "\n")
