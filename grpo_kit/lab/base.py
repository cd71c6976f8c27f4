"""The tiny model's supervised base (``grpo-kit make-base``): the arithmetic task taught by
supervised learning, on purpose only part of the way. :func:`train_base` stops as soon as validation
greedy accuracy reaches ``target_accuracy``, so that GRPO has room to show a gain. Learning is sharp
(about 15% -> 90% in 200 steps), so a fixed step count would land far from the target on another
seed; stopping on a measured target lands the base where it is useful.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from grpo_kit.data.tasks import DATASETS_DIR, get_task, save_items
from grpo_kit.eval.inference import greedy_accuracy
from grpo_kit.model.tiny import build_tokenizer, new_tiny_model, sft_batch

BASE_REPORT = "base_report.json"
"""What :func:`save_base` writes beside the model: the sign that ``make-base`` wrote a folder."""


def train_base(task: str = "add2", target_accuracy: float = 0.40, max_steps: int = 1500,
               batch_size: int = 64, lr: float = 1e-3, eval_every: int = 10, seed: int = 0,
               out_dir: str | Path | None = None, log=print):
    """Supervised training from scratch; stop when validation greedy accuracy >= target.

    Returns ``(model, tokenizer, report)``; with ``out_dir`` also saves both there with
    ``save_pretrained`` and writes ``base_report.json``.
    """
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    model = new_tiny_model(tokenizer, seed)
    splits = get_task(task).splits()
    train, val = splits["train"], splits["val"]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    t0, step, val_acc = time.time(), 0, 0.0
    model.train()
    for step in range(1, max_steps + 1):
        idx = torch.randint(len(train), (batch_size,), generator=g).tolist()
        ids, mask, lab = sft_batch(tokenizer, [train[i] for i in idx])
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % eval_every == 0:
            val_acc = greedy_accuracy(model, tokenizer, val)
            model.train()
            if log:
                log(f"step {step:4d}  loss {loss.item():.3f}  val greedy accuracy {val_acc:.3f}")
            if val_acc >= target_accuracy:
                break
    model.eval()
    report = {
        "task": task, "seed": seed, "steps": step, "target_accuracy": target_accuracy,
        "val_accuracy": val_acc, "test_accuracy": greedy_accuracy(model, tokenizer, splits["test"]),
        "parameters": sum(p.numel() for p in model.parameters()), "wall_seconds": round(time.time() - t0, 1),
    }
    if out_dir is not None:
        save_base(model, tokenizer, report, out_dir)
    return model, tokenizer, report


def save_base(model, tokenizer, report: dict, out_dir: str | Path) -> None:
    """Write a base from :func:`train_base` into ``out_dir`` (``save_pretrained``, ``base_report.json``)
    and, in a checkout, its task's test split into ``datasets/``."""
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / BASE_REPORT).write_text(json.dumps(report, indent=2) + "\n")
    if DATASETS_DIR.is_dir():
        save_items(get_task(report["task"]).splits()["test"], DATASETS_DIR / f"{report['task']}_test.jsonl")
