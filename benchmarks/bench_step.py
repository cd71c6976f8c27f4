"""One GRPO training step, three ways, on the same model, prompts, reward and settings.

    PYTHONPATH=. python benchmarks/bench_step.py --reps 20 --out runs/bench.json

Variants (measured in one process, alternating: trl, kit, floor, trl, kit, floor, ...):

| name    | what one step is |
|---------|------------------|
| `kit`   | ``grpo_kit.loop.train.grpo_step``: draw P prompts, sample P*G completions, judge, advantages, reference forward (when the config needs one), policy forward/backward, clip, AdamW, metrics |
| `trl`   | one optimizer step of ``trl.GRPOTrainer`` (on CPU, no vLLM) with the same settings, timed from ``on_step_begin`` to ``on_step_end`` of a ``TrainerCallback`` |
| `floor` | the compute no GRPO step can avoid: the kit's ``sampling.generate`` on prompts tokenised once, one policy forward/backward (``logprobs.completion_logprobs``) of ``-(adv * logp)`` over completion tokens, one reference forward (only when the config needs one), ``AdamW.step`` and ``zero_grad``; no judging, no entropy, no gradient clipping, no metrics. Same prompt sharing and merging of identical rows as the kit (``share_prompt_prefix``, ``dedupe_completions``) |
| `floor_plain` | (opt-in) the floor with every row forwarded whole (prompt encoded per row, identical rows not merged), as TRL does |

Settings shared by all three: the shipped tiny model and tokenizer, the arithmetic task's train
split, ``judges.exact_answer``, P prompts x G completions, max completion length, temperature
(top_k=0, top_p=1), beta, loss type, scale_rewards, learning rate, one optimizer update per batch.
TRL builds no reference model when beta == 0, so the kit runs with ``log_kl=False`` unless
``--log-kl`` is given (then the kit alone does an extra reference forward, as the demo does).

Peak memory: each variant also runs alone in a fresh subprocess (setup, warm-up and ``--mem-steps``
steps) and reports its RSS high-water mark (``VmHWM`` from ``/proc/self/status``), and
the RSS just before its first step. A TRL process also imports trl, datasets and accelerate:
that is part of what using TRL costs.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.data.tasks import get_task
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.loop.train import grpo_step, setup
from grpo_kit.model.logprobs import completion_logprobs
from grpo_kit.model.sampling import encode_prompts, generate, row_temperatures
from grpo_kit.model.tiny import load_model

VARIANTS = ("trl", "kit", "floor")  # also selectable: floor_plain (the floor without prompt sharing)


def have_trl() -> bool:
    try:
        import trl  # noqa: F401
    except ImportError:
        return False
    return True


def rss_mb() -> float:
    """RSS high-water mark of this process in MiB: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``,
    which a child inherits from the parent that forked it), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024  # KiB
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def current_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def bench_config(args) -> GRPOConfig:
    return GRPOConfig(num_prompts=args.prompts, num_generations=args.G, max_completion_length=args.length,
                      beta=args.beta, log_kl=args.log_kl, loss_type=args.loss_type,
                      scale_rewards=args.scale_rewards, learning_rate=args.lr, threads=args.threads,
                      device="cpu", steps=10**6, eval_every=0, eval_size=1, seed=args.seed,
                      share_prompt_prefix=not args.no_share, dedupe_completions=not args.no_dedupe,
                      **({"pack_max_tokens": 0} if args.no_pack else {}))


# ---------------------------------------------------------------- the three steps

def kit_stepper(cfg: GRPOConfig):
    run = setup(cfg)
    return lambda: grpo_step(run)


def floor_stepper(cfg: GRPOConfig):
    """Generate + policy forward/backward + reference forward (if needed) + AdamW, nothing else.

    With ``cfg.share_prompt_prefix``, ``cfg.dedupe_completions`` and ``cfg.pack_max_tokens`` (the defaults)
    it uses the kit's shared-prompt encoding, packing and scores identical rows once too, so ``kit / floor`` is what the kit
    adds around its compute; ``floor_plain`` turns both off (every row forwarded whole, as TRL does).
    """
    policy, tok = load_model(cfg.model, "cpu")
    ref = load_model(cfg.model, "cpu")[0].requires_grad_(False) if (cfg.beta != 0 or cfg.log_kl) else None
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate)
    items = get_task(cfg.task).splits()["train"]
    g = torch.Generator().manual_seed(cfg.seed)
    P, G = cfg.num_prompts, cfg.num_generations
    rows = [items[i]["prompt"] for i in torch.randint(len(items), (P,), generator=g).tolist() for _ in range(G)]
    prompt_ids, prompt_mask = encode_prompts(tok, rows, "cpu")  # (B, Tp) tokenised once, outside the timing
    temps = row_temperatures(cfg.temperature, P, G, "cpu")  # (B, 1)
    adv = torch.randn(P * G, 1, generator=g)  # (B, 1) stands in for judged advantages
    share = G if cfg.share_prompt_prefix else 1
    lp_kw = dict(share_prompt=cfg.share_prompt_prefix, dedupe=cfg.dedupe_completions, pack_max_tokens=cfg.pack_max_tokens)

    def step():
        policy.eval()
        cids, cmask = generate(policy, prompt_ids, prompt_mask, cfg.max_completion_length, tok.eos_token_id,
                               tok.pad_token_id, temps, g, group_size=share)  # (B, Tc), (B, Tc)
        if ref is not None:
            with torch.no_grad():
                completion_logprobs(ref, prompt_ids, prompt_mask, cids, cmask, temps.unsqueeze(-1), **lp_kw)
        policy.train()
        logp, _ = completion_logprobs(policy, prompt_ids, prompt_mask, cids, cmask, temps.unsqueeze(-1),
                                      **lp_kw)  # (B, Tc)
        m = cmask.float()
        loss = -(adv * logp * m).sum() / m.sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def stepper(cfg: GRPOConfig, variant: str):
    if variant == "kit":
        return kit_stepper(cfg)
    if variant == "floor":
        return floor_stepper(cfg)
    if variant == "floor_plain":
        return floor_stepper(cfg.replace(share_prompt_prefix=False, dedupe_completions=False, pack_max_tokens=0))
    raise SystemExit(f"unknown variant {variant!r}: choose from trl, kit, floor, floor_plain")


def trl_trainer(cfg: GRPOConfig, out_dir: str, max_steps: int, callbacks):
    """A ``trl.GRPOTrainer`` on the tiny model with ``cfg``'s settings, on CPU, logging and saving off."""
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from datasets import Dataset
    from grpo_kit.rewards.judges import exact_answer

    policy, tok = load_model(cfg.model, "cpu")
    items = get_task(cfg.task).splits()["train"]
    data = Dataset.from_list([{"prompt": it["prompt"], "answer": it["answer"],
                               "reverse_digits": it["reverse_digits"]} for it in items])
    kw = trl_kwargs(cfg)
    kw.update(max_steps=max_steps, output_dir=out_dir, use_cpu=True, report_to="none", save_strategy="no",
              logging_strategy="no", disable_tqdm=True, log_completions=False, dataloader_num_workers=0,
              per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=1, bf16=False)
    args = TRLConfig(**kw)
    trainer = GRPOTrainer(model=policy, reward_funcs=[exact_answer], args=args, train_dataset=data,
                          processing_class=tok, callbacks=callbacks)
    return trainer


# ---------------------------------------------------------------- measuring

def measure(cfg: GRPOConfig, variants, reps: int, warmup: int, log=print):
    """Wall and process-CPU seconds per step for each variant: ``warmup`` untimed rounds, then
    ``reps`` alternating rounds. Returns two dicts variant -> list of seconds."""
    steppers = {v: stepper(cfg, v) for v in variants if v != "trl"}
    times: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}  # process CPU seconds (all threads) per step

    def round_of_others(i: int):
        for v, fn in steppers.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            if i >= warmup:
                times[v].append(time.perf_counter() - t0)
                cpu[v].append(time.process_time() - c0)

    if "trl" not in variants:
        for i in range(warmup + reps):
            round_of_others(i)
            log(f"  round {i + 1}/{warmup + reps}" + ("" if i >= warmup else " (warm-up)"))
        return times, cpu

    from transformers import TrainerCallback

    class Alternate(TrainerCallback):  # TRL's loop drives the rounds: after each TRL step, the others
        i, t0, c0 = 0, 0.0, 0.0

        def on_step_begin(self, args, state, control, **kw):
            torch.set_num_threads(cfg.threads)
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            if self.i >= warmup:
                times["trl"].append(time.perf_counter() - self.t0)
                cpu["trl"].append(time.process_time() - self.c0)
            round_of_others(self.i)
            log(f"  round {self.i + 1}/{warmup + reps}" + ("" if self.i >= warmup else " (warm-up)"))
            self.i += 1

    with tempfile.TemporaryDirectory() as d:
        trainer = trl_trainer(cfg, d, warmup + reps, [Alternate()])
        torch.set_num_threads(cfg.threads)
        trainer.train()
    return times, cpu


def memory_probe(args) -> dict:
    """Run one variant alone in a fresh interpreter; its RSS before the first step and at peak."""
    cmd = [sys.executable, __file__, "--only", args.only_probe, "--_probe", *args.shared_argv]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe for {args.only_probe} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def trl_memory(make_trainer, cfg: GRPOConfig, steps: int) -> dict:
    """``steps`` steps of the trainer ``make_trainer(cfg, out_dir, max_steps, callbacks)`` builds: the RSS
    when its training begins and the process's peak."""
    from transformers import TrainerCallback

    before = {}

    class Note(TrainerCallback):
        def on_train_begin(self, *a, **kw):
            before["rss"] = current_rss_mb()

    with tempfile.TemporaryDirectory() as d:
        make_trainer(cfg, d, steps, [Note()]).train()
    return {"rss_before_steps_mb": before["rss"], "peak_rss_mb": rss_mb()}


def run_probe(cfg: GRPOConfig, variant: str, steps: int) -> dict:
    """Inside the probe subprocess: set up ``variant``, note RSS, run ``steps`` steps, note peak."""
    torch.set_num_threads(cfg.threads)
    if variant == "trl":
        return trl_memory(trl_trainer, cfg, steps)
    fn = stepper(cfg, variant)
    rss0 = current_rss_mb()
    for _ in range(steps):
        fn()
    return {"rss_before_steps_mb": rss0, "peak_rss_mb": rss_mb()}


def summarise(cfg: GRPOConfig, times: dict, cpu: dict, memory: dict, args) -> dict:
    med = {v: statistics.median(t) for v, t in times.items() if t}
    cpu_med = {v: statistics.median(t) for v, t in cpu.items() if t}
    out = {
        "settings": {"model": cfg.model, "task": cfg.task, "P": cfg.num_prompts, "G": cfg.num_generations,
                     "max_completion_length": cfg.max_completion_length, "temperature": cfg.temperature,
                     "beta": cfg.beta, "log_kl": cfg.log_kl, "loss_type": cfg.loss_type,
                     "scale_rewards": cfg.scale_rewards, "learning_rate": cfg.learning_rate,
                     "threads": cfg.threads, "share_prompt_prefix": cfg.share_prompt_prefix, "dedupe_completions": cfg.dedupe_completions,
                     "pack_max_tokens": cfg.pack_max_tokens,
                     "reps": args.reps, "warmup": args.warmup},
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "loadavg_1m": os.getloadavg()[0]},
        "median_s": med,
        "median_cpu_s": cpu_med,
        "times_s": times,
        "cpu_s": cpu,
        "memory": memory,
    }
    for other in ("trl", "floor"):
        if other in med and "kit" in med:
            out[f"ratio_kit_over_{other}"] = med["kit"] / med[other]
            out[f"cpu_ratio_kit_over_{other}"] = cpu_med["kit"] / cpu_med[other]
    try:
        import trl
        out["machine"]["trl"] = trl.__version__
    except ImportError:
        pass
    return out


def report(res: dict) -> str:
    s = res["settings"]
    lines = [f"P={s['P']} G={s['G']} len={s['max_completion_length']} beta={s['beta']} log_kl={s['log_kl']} "
             f"loss={s['loss_type']} threads={s['threads']} reps={s['reps']} (load {res['machine']['loadavg_1m']:.1f})",
             f"{'variant':11s} {'median s':>9s} {'min s':>8s} {'median CPU s':>13s} {'peak RSS MiB':>13s} "
             f"{'RSS before MiB':>15s}"]
    for v, med in res["median_s"].items():
        m = res["memory"].get(v, {})
        lines.append(f"{v:11s} {med:9.4f} {min(res['times_s'][v]):8.4f} {res['median_cpu_s'][v]:13.4f} "
                     f"{m.get('peak_rss_mb', float('nan')):13.1f} {m.get('rss_before_steps_mb', float('nan')):15.1f}")
    for k in ("ratio_kit_over_trl", "ratio_kit_over_floor", "cpu_ratio_kit_over_trl", "cpu_ratio_kit_over_floor"):
        if k in res:
            lines.append(f"{k}: {res[k]:.2f}")
    return "\n".join(lines)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=10, help="timed rounds per variant")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--quick", action="store_true", help="one round, no warm-up, one memory step (smoke test)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompts", type=int, default=16, help="P")
    p.add_argument("-G", type=int, default=8, help="group size")
    p.add_argument("--length", type=int, default=8, help="max_completion_length")
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--log-kl", action="store_true", help="kit also computes KL to the reference (demo default)")
    p.add_argument("--loss-type", default="dapo")
    p.add_argument("--scale-rewards", default="none")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma list of trl,kit,floor,floor_plain")
    p.add_argument("--no-share", action="store_true", help="kit and floor without share_prompt_prefix")
    p.add_argument("--no-dedupe", action="store_true", help="kit and floor without dedupe_completions")
    p.add_argument("--no-pack", action="store_true", help="kit and floor without packing (pack_max_tokens=0)")
    p.add_argument("--mem-steps", type=int, default=3, help="steps each memory subprocess runs (0: no memory)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--only", help=argparse.SUPPRESS)
    p.add_argument("--_probe", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.warmup, args.mem_steps = 1, 0, 1
    return args


def show_and_write(res: dict, text: str, out: str | None) -> dict:
    """Print the report; with ``out``, write the results there as JSON. Returns ``res``."""
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {out}")
    return res


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    cfg = bench_config(args)
    torch.set_num_threads(args.threads)
    if args._probe:
        print(json.dumps(run_probe(cfg, args.only, args.mem_steps)))
        return {}
    variants = [v for v in args.variants.split(",") if v]
    if "trl" in variants and not have_trl():
        print("trl is not installed: skipping the TRL variant (pip install -r requirements.txt)")
        variants.remove("trl")
    print(f"timing {variants} ...")
    times, cpu = measure(cfg, variants, args.reps, args.warmup)
    memory = {}
    if args.mem_steps:
        args.shared_argv = [a for a in argv if a not in ("--quick",)] + ["--mem-steps", str(args.mem_steps)]
        for v in variants:
            args.only_probe = v
            memory[v] = memory_probe(args)
    res = summarise(cfg, times, cpu, memory, args)
    return show_and_write(res, report(res), args.out)


if __name__ == "__main__":
    main()
