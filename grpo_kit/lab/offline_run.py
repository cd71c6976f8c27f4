"""An offline preference run: train on ranked groups recorded beforehand, checkpoint, resume exactly.

    cfg = OfflineConfig(preferences="datasets/add2_prefs.jsonl", loss="baseline", stage1_steps=100)
    run = setup_offline(cfg)                     # groups, held-out items, model (+ reference for bt), AdamW
    for m in train_offline_run(run, out_dir):    # one metrics dict per step, ``accuracy`` on eval steps
        ...

The step is :func:`grpo_kit.lab.offline.offline_step`. Everything a step depends on lives in
:class:`OfflineRun` and is saved in its checkpoint: the weights (safetensors), AdamW's state, the
per-group baselines (``loss: baseline``), the generator that draws each step's groups, torch's global
generator, the step, the history and the evaluations. So a run killed and resumed repeats the
uninterrupted run bit for bit on the same machine, also in a new process (``tests/lab/test_offline_run.py``
kills one with SIGKILL). The folder follows the online run's rules: the lock and the output-folder
checks of ``data/runfolder.py``, the atomic checkpoint writer of ``loop.train`` and its reader, which
reads ``trainer_state.pt`` with ``weights_only=True`` (a checkpoint someone shares is data, never code).

:func:`train_offline` is the same loop for notebooks: objects in, no folder.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import torch

from grpo_kit.config import OfflineConfig
from grpo_kit.data.runfolder import RunLock, append_line, has_run
from grpo_kit.data.tasks import heldout_split
from grpo_kit.errors import CheckpointError, ConfigError, DataError, RunFolderError
from grpo_kit.eval.inference import greedy_accuracy, max_answer_tokens
from grpo_kit.lab.offline import offline_step
from grpo_kit.loop.train import (
    capped_threads,
    check_same_run,
    content_hash,
    latest_checkpoint,
    pick_device,
    read_trainer_state,
    remove_partial_checkpoints,
    write_checkpoint,
    write_history,
)
from grpo_kit.model.tiny import load_model, resolve_model
from grpo_kit.rewards.pairwise import load_preference_groups

# fields that may differ between a checkpoint and the run resuming it (model and preferences: by content)
RESUMABLE_CHANGES = {"steps", "eval_every", "checkpoint_every", "keep_checkpoints", "threads", "device"}
WEIGHTS = "model.safetensors"


@dataclass(slots=True)
class OfflineRun:
    cfg: OfflineConfig
    policy: torch.nn.Module
    ref: torch.nn.Module | None      # loss 'bt': the frozen starting model
    tokenizer: object
    optimizer: torch.optim.Optimizer
    records: list[dict]              # the preference groups
    eval_items: list[dict]
    batch_gen: torch.Generator       # which groups each step draws
    baselines: torch.Tensor          # (N,) one learnable baseline per group (loss 'baseline'; 0 otherwise)
    step: int = 0
    history: list[dict] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out greedy accuracy)


# ---------------------------------------------------------------- inputs and setup

def offline_inputs(cfg: OfflineConfig) -> tuple[list[dict], list[dict]]:
    """The preference groups and the held-out items ``cfg`` names, each checked (a one-line error naming
    the problem and the fix); nothing is loaded into a model and nothing is written."""
    if cfg.preferences is None:
        raise ConfigError("OfflineConfig.preferences is not set: name the preference-group jsonl to train on "
                          "(grpo-kit pregen --out FILE writes one; datasets/add2_prefs.jsonl ships with the kit)")
    path = Path(cfg.preferences).expanduser()
    if path.is_dir():
        raise DataError(f"preferences {cfg.preferences} is a folder; name the jsonl file in it")
    if not path.exists():
        raise DataError(f"preferences {cfg.preferences}: no such file; write one with grpo-kit pregen --out "
                        f"{cfg.preferences}, or fix the path in the config (relative paths start where you run)")
    records = load_preference_groups(path)  # DataError naming the line: one response, a malformed matrix, ...
    resolve_model(cfg.model, warn=False)  # a path that is not on disk: CheckpointError now, not after the folder
    items = heldout_split(cfg.task)[:cfg.eval_size]  # an unknown task: DataError listing the tasks
    return records, items


def make_run(cfg: OfflineConfig, policy, ref, tokenizer, records: Sequence[dict], eval_items: list[dict]) -> OfflineRun:
    """An :class:`OfflineRun` at step 0 around given objects: AdamW over the trainable weights (weight
    decay 0.01, its default), the group-drawing generator seeded with ``cfg.seed``, baselines at 0.
    ``loss: bt`` without a ``ref`` takes a frozen copy of the policy as it is now."""
    if cfg.loss == "bt" and ref is None:
        ref = copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.learning_rate)
    return OfflineRun(cfg, policy, ref, tokenizer, opt, list(records), eval_items,
                      torch.Generator().manual_seed(cfg.seed), torch.zeros(len(records)))


def setup_offline(cfg: OfflineConfig, records: Sequence[dict] | None = None,
                  eval_items: list[dict] | None = None) -> OfflineRun:
    """Everything a run needs from ``cfg`` (the groups and items read by :func:`offline_inputs` unless given)."""
    cfg.validate()
    if records is None or eval_items is None:
        records, eval_items = offline_inputs(cfg)
    if cfg.threads:
        torch.set_num_threads(capped_threads(cfg.threads))
    torch.manual_seed(cfg.seed)
    policy, tokenizer = load_model(cfg.model, pick_device(cfg.device))
    return make_run(cfg, policy, None, tokenizer, records, eval_items)


def evaluate(run: OfflineRun) -> float:
    acc = greedy_accuracy(run.policy, run.tokenizer, run.eval_items, max_answer_tokens(run.eval_items))
    run.evals.append((run.step, acc))
    return acc


# ---------------------------------------------------------------- the loop

def train_offline_run(run: OfflineRun, out_dir: str | Path | None = None, resume: bool = False) -> Iterator[dict]:
    """Train to ``cfg.steps``, yielding each step's metrics (``accuracy`` on eval steps and the last one;
    the base accuracy, step 0, is in ``run.evals``).

    With ``out_dir``: the folder is locked; ``history.jsonl`` gets a line per finished step; a checkpoint
    is written every ``cfg.checkpoint_every`` steps and at the end; ``resume`` continues from the latest
    one (leftover ``*.tmp`` removed). A new run refuses a folder that holds another run's checkpoints.
    """
    cfg = run.cfg
    lock = RunLock(out_dir).acquire() if out_dir is not None else None
    try:
        if out_dir is not None:
            out_dir = Path(out_dir)
            remove_partial_checkpoints(out_dir)
            if resume:
                resume_offline(run, out_dir)
            elif run.step == 0 and has_run(out_dir):
                raise RunFolderError(f"{out_dir} holds another run's checkpoints; pass resume=True to continue it, "
                                     f"or another out_dir")
            write_history(run.history, out_dir / "history.jsonl")  # the finished steps; a resume drops the rest
        if not run.evals:
            evaluate(run)
        while run.step < cfg.steps:
            t0 = time.perf_counter()
            idx = torch.randint(len(run.records), (cfg.batch_prompts,), generator=run.batch_gen).tolist()
            run.step += 1
            stage = 1 if run.step <= cfg.stage1_steps else 2
            m = offline_step(run.policy, run.ref, run.tokenizer, run.optimizer, [run.records[i] for i in idx], stage,
                             cfg.loss, cfg.margin, cfg.beta, cfg.max_grad_norm, cfg.nll_coef, run.baselines, idx,
                             cfg.baseline_lr)
            m.update(step=run.step, step_time=time.perf_counter() - t0)
            last = run.step == cfg.steps
            if last or (cfg.eval_every and run.step % cfg.eval_every == 0):
                m["accuracy"] = evaluate(run)
            run.history.append(m)
            if out_dir is not None:
                append_line(out_dir / "history.jsonl", json.dumps(m))
                if last or (cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0):
                    save_offline_checkpoint(run, out_dir)
            yield m
    finally:
        if lock is not None:
            lock.release()


def train_offline(policy, ref, tokenizer, records: Sequence[dict], steps: int, eval_items: list[dict],
                  batch_prompts: int = 16, lr: float = 3e-4, loss: str = "margin", stage1_steps: int = 0,
                  margin: float = 1.0, beta: float = 0.1, eval_every: int = 50, seed: int = 0,
                  nll_coef: float = 0.0, baseline_lr: float = 0.5) -> Iterator[dict]:
    """Offline training of ``policy`` on ``records`` in this process, no folder: the loop of
    :func:`train_offline_run` with the settings of :class:`OfflineConfig` given as arguments.

    Yields one metrics dict per step (``accuracy`` on eval steps); the first is the base evaluation at step 0.
    ``loss="bt"`` uses ``ref`` (None: a frozen copy of ``policy`` as given).
    """
    cfg = OfflineConfig(loss=loss, stage1_steps=min(stage1_steps, steps), margin=margin, beta=beta,
                        baseline_lr=baseline_lr, nll_coef=nll_coef, steps=steps, batch_prompts=batch_prompts,
                        learning_rate=lr, seed=seed, eval_every=eval_every, eval_size=max(1, len(eval_items)),
                        checkpoint_every=0, threads=None).validate()
    run = make_run(cfg, policy, ref, tokenizer, records, eval_items)
    yield {"step": 0, "accuracy": evaluate(run)}
    yield from train_offline_run(run)


# ---------------------------------------------------------------- checkpoints

def fingerprints(cfg: OfflineConfig) -> dict:
    """Content hashes of the starting model (None for a hub name) and of the preference file."""
    model = resolve_model(cfg.model, warn=False)
    return {"model": content_hash(model) if isinstance(model, Path) else None,
            "preferences": content_hash(Path(cfg.preferences).expanduser()) if cfg.preferences else None}


def save_offline_checkpoint(run: OfflineRun, out_dir: str | Path) -> Path:
    """``checkpoints/step-NNNNNN``: the model and tokenizer (``save_pretrained``: safetensors) and
    ``trainer_state.pt`` in plain values (``kind: offline``), written atomically by ``write_checkpoint``."""
    state = {"kind": "offline", "step": run.step, "config": run.cfg.to_dict(), "history": run.history,
             "evals": run.evals, "optimizer": run.optimizer.state_dict(), "batch_gen": run.batch_gen.get_state(),
             "torch_rng": torch.get_rng_state(), "baselines": run.baselines.clone(),
             "fingerprints": fingerprints(run.cfg)}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return write_checkpoint(out_dir, run.step, run.cfg.keep_checkpoints,
                            [(WEIGHTS, run.policy.save_pretrained), ("tokenizer.json", run.tokenizer.save_pretrained)],
                            state)


def resume_offline(run: OfflineRun, out_dir: str | Path) -> Path:
    """Restore ``run`` from the latest checkpoint in ``out_dir``; :class:`RunFolderError` when there is none."""
    remove_partial_checkpoints(out_dir)
    ck = latest_checkpoint(out_dir)
    if ck is None:
        raise RunFolderError(f"nothing to resume: {out_dir} has no checkpoint (no checkpoints/latest); "
                             f"check the path, or start a new run there")
    load_offline_checkpoint(run, ck)
    return ck


def load_offline_checkpoint(run: OfflineRun, path: str | Path) -> None:
    """Restore ``run`` in place from a folder :func:`save_offline_checkpoint` wrote. Its trainer state is
    read with ``weights_only=True`` and its weights with safetensors: no code runs. Refused, with a
    :class:`CheckpointError` naming why, when it is not an offline run's, was written with another
    config (other than :data:`RESUMABLE_CHANGES`), or its model or preference file changed since."""
    from safetensors.torch import load_file

    path = Path(path)
    state = read_trainer_state(path)
    if not isinstance(state, dict) or state.get("kind") != "offline":
        raise CheckpointError(f"checkpoint {path} is not an offline preference run's (a GRPO run resumes with "
                              f"grpo-kit train --resume); resume a folder grpo-kit train-offline wrote, or start "
                              f"a new output folder")
    need = {"step", "config", "history", "evals", "optimizer", "batch_gen", "torch_rng", "baselines"}
    if need - set(state):
        raise CheckpointError(f"checkpoint {path} lacks {sorted(need - set(state))}; delete it or resume from an "
                              f"earlier one")
    check_same_run(path, state["config"], run.cfg.to_dict(), OfflineConfig().to_dict(), RESUMABLE_CHANGES,
                   state.get("fingerprints") or {}, fingerprints(run.cfg))
    if tuple(state["baselines"].shape) != tuple(run.baselines.shape):
        raise CheckpointError(f"checkpoint {path} holds {state['baselines'].shape[0]} group baselines and the "
                              f"preference file has {run.baselines.shape[0]} groups; resume with the file it was "
                              f"trained on")
    try:
        weights = load_file(path / WEIGHTS)
        missing, unexpected = run.policy.load_state_dict(weights, strict=False)
        if [m for m in missing if "lm_head" not in m] or unexpected:  # a tied lm_head is not saved
            raise CheckpointError(f"checkpoint {path} does not fit the model (missing {missing[:3]}, unexpected "
                                  f"{unexpected[:3]}); resume with the model it was trained from")
        run.optimizer.load_state_dict(state["optimizer"])
        run.batch_gen.set_state(state["batch_gen"])
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and torch.cuda.is_available() and len(state["cuda_rng"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - any read or fit failure means the checkpoint is unusable here
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} is unreadable or does not fit this model ({first}); delete it or "
                              f"resume from an earlier one") from None
    run.baselines.copy_(state["baselines"])
    run.step, run.history, run.evals = state["step"], state["history"], [tuple(e) for e in state["evals"]]
