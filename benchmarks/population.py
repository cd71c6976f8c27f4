"""A population of LoRA policies against plain full-model GRPO and plain LoRA-GRPO, at equal generated completions.

    PYTHONPATH=. nice -n 19 python benchmarks/population.py                  # 3 seeds x 3 methods, short runs
    PYTHONPATH=. python benchmarks/population.py --steps 100 --seeds 0,1,2,3,4

Every method samples ``--steps`` x 16 prompts x 8 completions (the same count: the population's K
variants sample G / K completions of each group each) from the shipped tiny model, with the
demo's settings otherwise (cosine schedule, ``scale_rewards='none'``, no KL). Full GRPO trains
every weight at the demo's learning rate; LoRA-GRPO and the population train r 8 / alpha 16
adapters at ``--lora-lr``. The population's reported model is its leader (the variant with the
highest group-relative score over the last reset period, chosen without the held-out set). The
table is held-out greedy accuracy on the task's 500 held-out problems: mean +- sample std over
seeds, and each seed's figure.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METHODS = ("full GRPO", "LoRA GRPO", "LoRA population")


def config(method: str, seed: int, args):
    from grpo_kit.config import GRPOConfig

    common = {"steps": args.steps, "seed": seed, "eval_every": 0, "device": "cpu", "threads": args.threads,
              "diagnose_every": 0, "log_kl": False, "eval_size": args.eval_size}
    if method == "full GRPO":
        return GRPOConfig(**common)
    return GRPOConfig(**common, lora={"r": 8, "alpha": 16}, learning_rate=args.lora_lr)


def run_method(method: str, seed: int, args) -> tuple[float, float, int]:
    """(base accuracy, final held-out accuracy, completions generated) of one method and seed."""
    from grpo_kit.eval.inference import greedy_accuracy
    from grpo_kit.lab import population as pop
    from grpo_kit.loop.train import setup, train

    cfg = config(method, seed, args)
    run = setup(cfg)
    if method != "LoRA population":
        list(train(cfg, run))
        return run.evals[0][1], run.evals[-1][1], cfg.steps * cfg.batch_size
    base = greedy_accuracy(run.policy, run.tokenizer, run.eval_items)
    variants = pop.add_variants(run, args.variants)
    resets = 0
    while run.step < cfg.steps:
        resets += "reset" in pop.population_step(run, variants, args.tau, args.reset_every, args.sigma)
    pop.activate(run.policy, pop.leader(variants))
    return base, greedy_accuracy(run.policy, run.tokenizer, run.eval_items), cfg.steps * cfg.batch_size


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--lora-lr", type=float, default=2e-3)
    p.add_argument("--variants", type=int, default=4, help="K LoRA variants (must divide G = 8)")
    p.add_argument("--tau", type=float, default=0.2, help="softmax temperature of the variant weights")
    p.add_argument("--reset-every", type=int, default=10, help="steps between resets of the worst variant")
    p.add_argument("--sigma", type=float, default=0.1, help="perturbation: noise std relative to each tensor's std")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-size", type=int, default=500, help="held-out problems evaluated")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {m: [] for m in METHODS}
    for seed in seeds:
        for method in METHODS:
            t0 = time.time()
            base, acc, completions = run_method(method, seed, args)
            results[method].append(acc)
            print(f"seed {seed}  {method:16s} {base:.1%} -> {acc:.1%}  ({completions} completions, "
                  f"{time.time() - t0:.0f} s)", flush=True)
    print(f"\nheld-out greedy accuracy after {args.steps} steps x 128 completions, seeds {seeds} "
          f"(population: K={args.variants}, tau={args.tau}, reset every {args.reset_every}, sigma={args.sigma})")
    print("| method | mean ± std | per seed |\n|---|---|---|")
    for m in METHODS:
        v = results[m]
        sd = statistics.stdev(v) if len(v) > 1 else 0.0
        print(f"| {m} | {statistics.mean(v):.1%} ± {sd:.1%} | {', '.join(f'{x:.1%}' for x in v)} |")
    return results


if __name__ == "__main__":
    main()
