"""Where the kit's GRPO step spends its time: cProfile (or torch.profiler) over a few steps, or
the CPU seconds of each phase (sampling, reference forward, policy forward/backward).

    PYTHONPATH=. python benchmarks/profile_step.py --steps 10 [--torch] [--log-kl] [--beta 0.04]
    PYTHONPATH=. python benchmarks/profile_step.py --phases [--beta 0.04]

``--phases`` reports the best (least loaded) process CPU time of each phase over ``--steps``
repetitions, with and without prompt sharing: on a busy machine the minimum is the stable figure.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.loop.train import grpo_step, setup


def phases(run, reps: int) -> dict[str, float]:
    """Best-of-``reps`` process CPU seconds of each phase of one step, on one sampled batch."""
    import time

    from grpo_kit.model.logprobs import completion_logprobs
    from grpo_kit.model.sampling import row_temperatures, sample_groups

    cfg = run.cfg
    prompts = [it["prompt"] for it in run.train_items[:cfg.num_prompts]]
    G = cfg.num_generations

    def best(fn):
        t = float("inf")
        for _ in range(reps):
            t0 = time.process_time()
            fn()
            t = min(t, time.process_time() - t0)
        return t

    out = {"sampling": best(lambda: sample_groups(run.policy, run.tokenizer, prompts, G, cfg.max_completion_length,
                                                  cfg.temperature, run.sample_gen))}
    ro = sample_groups(run.policy, run.tokenizer, prompts, G, cfg.max_completion_length, cfg.temperature,
                       run.sample_gen)
    temps = row_temperatures(cfg.temperature, cfg.num_prompts, G, "cpu").unsqueeze(-1)  # (B, 1, 1)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, temps)
    ref = run.ref if run.ref is not None else run.policy
    for g, tag in ((G, "shared prompt"), (1, "plain")):
        with torch.inference_mode():
            out[f"reference forward ({tag})"] = best(lambda: completion_logprobs(ref, *args, share_prompt=g > 1))

        def fwd_bwd():
            lp, _ = completion_logprobs(run.policy, *args, with_entropy=True, share_prompt=g > 1)
            lp.sum().backward()
            run.policy.zero_grad(set_to_none=True)

        run.policy.train()
        out[f"policy fwd/bwd ({tag})"] = best(fwd_bwd)
        run.policy.eval()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--log-kl", action="store_true")
    p.add_argument("--torch", action="store_true", help="torch.profiler table instead of cProfile")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (a reference forward in the step)")
    p.add_argument("--phases", action="store_true", help="CPU seconds per phase instead of a profile")
    args = p.parse_args(argv)
    cfg = GRPOConfig(threads=args.threads, device="cpu", log_kl=args.log_kl, beta=args.beta, eval_size=1,
                     eval_every=0)
    run = setup(cfg)
    if args.phases:
        for name, seconds in phases(run, args.steps).items():
            print(f"{name:28s} {seconds:.4f} CPU s")
        return
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
