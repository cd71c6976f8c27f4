"""One command for a person with a GPU: does the kit's bf16 training step work there, how fast, how big?

    PYTHONPATH=. python benchmarks/gpu_check.py                      # CUDA if present: tiny + random Qwen2-0.5B shape
    PYTHONPATH=. python benchmarks/gpu_check.py --device cpu --small  # the same checks on a CPU, small sizes (CI)

For each model (the shipped tiny model, and a *randomly initialised* model with Qwen2-0.5B's
shape, built from a config: no download) it runs ``--steps`` GRPO steps with bf16 autocast
(on a CPU through ``bf16_on_cpu``), ``beta=0.04`` (a reference forward) and
``num_iterations=2`` (old log-probs and a ratio), and reports:

- step time (median) and generated tokens per second during sampling;
- peak memory (``torch.cuda.max_memory_allocated`` on CUDA, RSS high-water mark above the
  baseline on a CPU) against ``memory.estimate_memory``;

and checks (each ``ok`` or a failure; the exit status is 1 when one fails):

- ``finite``: loss, gradient norm and KL are finite in every step;
- ``ratio_one``: at each step's first update the new log-probs equal the old ones exactly;
- ``shared_vs_plain``: shared-prompt and plain log-probs agree within bf16 tolerance;
- ``packed_vs_plain``: the same for the packed row (``logprobs.pack_rows``: one forward, a block attention mask);
- ``resume``: save a checkpoint, step, load it back, step again: the same loss and weights.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.memory_check import QWEN2_05B, model_config, reset_peak, warm_up_code  # noqa: E402

SMALL_QWEN = {**QWEN2_05B, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2}
BF16_TOL = 0.1  # |log-prob| difference allowed between two bf16 forwards of different shapes


def _rss_bytes(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(field + ":")) * 1024
    except (OSError, StopIteration):
        return 0


def build(name: str, small: bool, device: torch.device):
    """(model, tokenizer, config for the estimate) on ``device``."""
    from grpo_kit.model.tiny import build_tokenizer, load_model

    if name == "tiny":
        model, tok = load_model("tiny", device)
        return model, tok, model.config
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    config = model_config(SMALL_QWEN if small else QWEN2_05B)
    return Qwen2ForCausalLM(config).to(device), build_tokenizer(), config


def check_model(name: str, args, device: torch.device) -> dict:
    from grpo_kit.config import GRPOConfig
    from grpo_kit.loop.step import run_autocast
    from grpo_kit.loop.train import grpo_step, load_checkpoint, save_checkpoint, setup
    from grpo_kit.model.logprobs import completion_logprobs
    from grpo_kit.model.memory import estimate_memory

    train_mod, step_mod = importlib.import_module("grpo_kit.loop.train"), importlib.import_module("grpo_kit.loop.step")
    dynamic_mod = importlib.import_module("grpo_kit.loop.dynamic")  # grpo_step samples through dynamic.sample_batch
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:  # load the code first (its pages count in RSS; a GPU's allocator never sees them)
        warm_up_code(args.threads, True, qwen=name != "tiny")
        base = _rss_bytes("VmRSS")
        reset_peak()
    model, tok, config = build(name, args.small, device)
    cfg = GRPOConfig(num_prompts=args.prompts, num_generations=args.G, max_completion_length=args.length,
                     beta=0.04, num_iterations=2, learning_rate=3e-4 if name == "tiny" else 1e-6,
                     device=device.type, bf16=True, bf16_on_cpu=not cuda, threads=args.threads,
                     eval_size=1, eval_every=0, steps=10**6, seed=args.seed)
    run = setup(cfg, policy=model, tokenizer=tok)

    seen = {"rollouts": None, "gen_s": 0.0, "gen_tokens": 0, "first": [], "Tp": 0, "Tc": 0}
    real_sample, real_loss = dynamic_mod.sample_groups, step_mod.grpo_loss

    def sample(*a, **kw):
        sync(device)
        t0 = time.perf_counter()
        r = real_sample(*a, **kw)
        sync(device)
        seen["gen_s"] += time.perf_counter() - t0
        seen["gen_tokens"] += int(r.completion_mask.sum())
        seen["rollouts"], seen["Tp"] = r, max(seen["Tp"], r.prompt_ids.shape[1])
        seen["Tc"] = max(seen["Tc"], r.completion_ids.shape[1])
        seen["calls"] = 0
        return r

    def loss(logp, old, *a, **kw):
        if seen["calls"] == 0:  # the first micro-batch of the first update
            seen["first"].append(float((logp.detach() - old).abs().max()))
        seen["calls"] += 1
        return real_loss(logp, old, *a, **kw)

    dynamic_mod.sample_groups, step_mod.grpo_loss = sample, loss
    try:
        times, metrics = [], []
        for _ in range(args.steps):
            sync(device)
            t0 = time.perf_counter()
            metrics.append(grpo_step(run))
            sync(device)
            times.append(time.perf_counter() - t0)
        peak = (torch.cuda.max_memory_allocated() if cuda else _rss_bytes("VmHWM")) - base

        ro = seen["rollouts"]  # shared-prompt vs plain log-probs of the last batch, bf16
        args_lp = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, 1.0)
        with run_autocast(cfg, device), torch.no_grad():
            plain = completion_logprobs(run.policy, *args_lp)[0]
            shared = completion_logprobs(run.policy, *args_lp, share_prompt=True)[0]
            packed = completion_logprobs(run.policy, *args_lp, share_prompt=True, pack_max_tokens=2**31)[0]
        m = ro.completion_mask.bool()
        shared_diff = float((plain - shared)[m].abs().max())
        packed_diff = float((plain - packed)[m].abs().max())  # the packed row: one forward, a block mask

        with tempfile.TemporaryDirectory() as d:  # resume: the same step twice from one checkpoint
            path = save_checkpoint(run, d)
            a = grpo_step(run)
            wa = {k: v.detach().float().cpu().clone() for k, v in run.policy.state_dict().items()}
            load_checkpoint(run, path)
            b = grpo_step(run)
            wb = {k: v.detach().float().cpu() for k, v in run.policy.state_dict().items()}
        resume_diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    finally:
        dynamic_mod.sample_groups, step_mod.grpo_loss = real_sample, real_loss

    est = estimate_memory(config, cfg.num_prompts, cfg.num_generations, seen["Tp"], seen["Tc"], bf16=True,
                          beta=cfg.beta, num_iterations=cfg.num_iterations, device=device.type,
                          pack_max_tokens=cfg.pack_max_tokens)
    finite = all(torch.isfinite(torch.tensor([x["loss"], x["grad_norm"], x["kl"]])).all() for x in metrics)
    checks = {
        "finite": finite,
        "ratio_one": all(d == 0.0 for d in seen["first"]),
        "shared_vs_plain": shared_diff <= BF16_TOL,
        "packed_vs_plain": packed_diff <= BF16_TOL,
        "resume": a["loss"] == b["loss"] and resume_diff <= 1e-6,
    }
    return {
        "model": name, "device": str(device), "parameters": sum(p.numel() for p in run.policy.parameters()),
        "P": cfg.num_prompts, "G": cfg.num_generations, "max_completion_length": cfg.max_completion_length,
        "step_time_s": statistics.median(times), "step_times_s": times,
        "generated_tokens_per_s": seen["gen_tokens"] / max(seen["gen_s"], 1e-9),
        "peak_memory_bytes": peak, "estimated_peak_bytes": est["peak"],
        "estimate_error": est["peak"] / peak - 1 if peak > 0 else float("nan"),
        "first_update_max_logp_diff": max(seen["first"]), "shared_vs_plain_max_diff": shared_diff,
        "packed_vs_plain_max_diff": packed_diff,
        "resume_max_weight_diff": resume_diff, "checks": checks, "ok": all(checks.values()),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def report(r: dict) -> str:
    mib = 2**20
    checks = " ".join(f"{k}={'ok' if v else 'FAIL'}" for k, v in r["checks"].items())
    return (f"{r['model']:10s} {r['device']:6s} {r['parameters'] / 1e6:7.1f}M params  step {r['step_time_s']:.3f} s  "
            f"{r['generated_tokens_per_s']:9.0f} gen tok/s  peak {r['peak_memory_bytes'] / mib:8.1f} MiB "
            f"(estimate {r['estimated_peak_bytes'] / mib:8.1f}, {r['estimate_error']:+.0%})  {checks}")


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--models", default="tiny,qwen2-0.5b", help="comma list of tiny, qwen2-0.5b")
    p.add_argument("--small", action="store_true", help="a small Qwen2-class model instead of the 0.5B shape (CPU smoke)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts", type=int, default=4, help="P")
    p.add_argument("-G", type=int, default=8)
    p.add_argument("--length", type=int, default=64, help="max_completion_length")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is visible to torch")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    torch.set_num_threads(args.threads)
    results = []
    for name in [m for m in args.models.split(",") if m]:
        if name not in ("tiny", "qwen2-0.5b"):
            raise SystemExit(f"unknown model {name!r}: choose tiny or qwen2-0.5b")
        r = check_model(name, args, device)
        results.append(r)
        print(report(r), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    if not all(r["ok"] for r in results):
        print("gpu_check: a check FAILED (see above)", file=sys.stderr)
        if __name__ == "__main__":
            sys.exit(1)
    return results


if __name__ == "__main__":
    main()
