"""Where the kit's GRPO step spends its time: cProfile (or torch.profiler) over a few steps.

    PYTHONPATH=. python benchmarks/profile_step.py --steps 10 [--torch] [--log-kl]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.train import grpo_step, setup


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--log-kl", action="store_true")
    p.add_argument("--torch", action="store_true", help="torch.profiler table instead of cProfile")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    cfg = GRPOConfig(threads=args.threads, device="cpu", log_kl=args.log_kl, eval_size=1, eval_every=0)
    run = setup(cfg)
    grpo_step(run)  # warm-up
    if args.torch:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                grpo_step(run)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
        return
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(args.steps):
        grpo_step(run)
    pr.disable()
    pstats.Stats(pr).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
