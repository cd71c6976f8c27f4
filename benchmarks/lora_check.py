"""LoRA GRPO on the tiny model: held-out accuracy before and after, and peak memory against full fine-tuning.

    PYTHONPATH=. python benchmarks/lora_check.py                         # train (150 steps) + memory
    PYTHONPATH=. python benchmarks/lora_check.py --steps 0 --memory-cases tiny,qwen2-0.5b-2layers

Training: the demo's settings (``GRPOConfig()`` defaults: 16 prompts x 8 completions, cosine
schedule) with ``lora={"r": R, "alpha": ALPHA}`` on every projection and ``--lr``; greedy
accuracy on the 500 held-out problems before and after. Memory: ``memory_check.run_case`` for
each case, full fine-tuning and LoRA (``memory_check.LORA``) with the same script, the same
steps and settings; each in a fresh interpreter, peak RSS added by the run (see memory_check.py),
with glibc's default allocator and with freed blocks returned (``memory_check.RETURN_FREED``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def train_lora(steps: int, r: int, alpha: float, lr: float, seed: int, threads: int, eval_size: int = 500) -> dict:
    from grpo_kit.config import GRPOConfig
    from grpo_kit.loop.train import setup, train

    cfg = GRPOConfig(lora={"r": r, "alpha": alpha}, learning_rate=lr, steps=steps, seed=seed, eval_every=50,
                     device="cpu", threads=threads, diagnose_every=0, eval_size=eval_size)
    run = setup(cfg)
    t0 = time.time()
    for m in train(cfg, run):
        if "accuracy" in m:
            print(f"  step {m['step']:4d}  held-out accuracy {m['accuracy']:.1%}  reward {m['reward']:.2f}", flush=True)
    return {"evals": run.evals, "seconds": time.time() - t0}


def memory(cases: list[str], threads: int) -> list[dict]:
    from benchmarks.memory_check import RETURN_FREED, run_case

    rows = []
    for case in cases:
        for env, allocator in ((None, "glibc default"), (RETURN_FREED, "freed returned")):
            if case != "tiny" and env is not None:
                continue  # the big cases' peaks are weights and AdamW: the allocator does not matter
            full, lora = (run_case(case, 2, False, 0.0, threads, lora=flag, env=env) for flag in (False, True))
            rows.append({"case": case, "allocator": allocator, "full": full, "lora": lora})
            print(f"  {case:20s} ({allocator:14s}) full fine-tuning {full['measured_bytes'] / 2**20:8.1f} MiB "
                  f"(est. {full['estimated_bytes'] / 2**20:7.1f})   LoRA {lora['measured_bytes'] / 2**20:8.1f} MiB "
                  f"(est. {lora['estimated_bytes'] / 2**20:7.1f})", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=150, help="GRPO steps (0: memory only)")
    p.add_argument("--r", type=int, default=8)
    p.add_argument("--alpha", type=float, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--memory-cases", default="tiny", help="comma list of memory_check cases ('' = none)")
    p.add_argument("--eval-size", type=int, default=500, help="held-out problems evaluated")
    args = p.parse_args(argv)
    out = {}
    if args.steps:
        print(f"LoRA GRPO, r={args.r} alpha={args.alpha} lr={args.lr}, {args.steps} steps, seed {args.seed}:")
        res = out["train"] = train_lora(args.steps, args.r, args.alpha, args.lr, args.seed, args.threads, args.eval_size)
        (_, base), (_, final) = res["evals"][0], res["evals"][-1]
        print(f"held-out greedy accuracy {base:.1%} -> {final:.1%} in {res['seconds']:.0f} s")
    cases = [c for c in args.memory_cases.split(",") if c]
    if cases:
        print("peak memory added by 2 GRPO steps (2 = AdamW state allocated):")
        out["memory"] = memory(cases, args.threads)
    return out


if __name__ == "__main__":
    main()
