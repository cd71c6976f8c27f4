"""One GRPO step, kit vs TRL, on a 2-layer slice of Qwen2-0.5B's shape, where the logits dominate.

    PYTHONPATH=. python benchmarks/bench_qwen2_slice.py --reps 5 --out runs/bench_qwen2_slice.json
    PYTHONPATH=. python benchmarks/bench_qwen2_slice.py --beta 0.04 --reps 5      # reference model on both sides
    PYTHONPATH=. python benchmarks/bench_qwen2_slice.py --smoke                   # tiny Qwen2, one round (the test)

On a 2-core CPU one round (a TRL step and a kit step) takes 2 to 3 minutes; to keep each command short,
time with ``--reps 2 --warmup 0 --mem-steps 0`` and measure memory apart with ``--reps 0 --warmup 0
--mem-steps 1`` (no timing).

The model is ``transformers.Qwen2ForCausalLM`` with Qwen2-0.5B's published dimensions
(``memory_check.QWEN2_05B``: vocabulary 151,936, hidden 896, MLP 4864, 14 query / 2 key-value heads,
tied embeddings, rope_theta 1e6) but ``--layers`` (2) decoder layers, random weights
(``torch.manual_seed(--seed)``), float32, CPU: about 166M parameters, of which the tied 151,936 x 896
embedding / output head is 136M, so sampling and scoring are mostly the vocabulary projection and the
log-softmax over it. Nothing is downloaded: the model and a tokenizer covering all 151,936 ids
(:func:`build_tokenizer`) are written with ``save_pretrained`` into a temporary folder, and both sides
load that folder (the kit through ``GRPOConfig(model=folder)``, i.e. ``tiny.load_model``).

Both sides: the ``add2`` train split, P prompts x G completions (4 x 4), max completion length 64,
temperature 1 (top_k 0, top_p 1), ``loss_type="dapo"``, ``scale_rewards="none"``, beta 0 (the kit
with ``log_kl=False``; ``--beta 0.04`` makes both run the reference), one optimizer update per batch
(``grpo_kit.engines.trl_engine.trl_kwargs`` maps the kit's config to TRL's).

Reward (the same function objects on both sides, ``resolve.get_reward_funcs``): ``exact_answer`` plus
``judges.distinct_n_reward(2, "char")`` (distinct character bigrams / all bigrams of the decoded
completion). A random model almost never states the right sum, so ``exact_answer`` alone would give
every group zero advantage; the diversity judge varies from row to row on the random text, so the
advantages, the loss and the update are real work on both sides.

Measured in one process, alternating (TRL's training loop drives the rounds; after each TRL step a
callback runs one kit step, as in ``bench_step.py``): wall and process-CPU seconds per step, median,
and TRL / kit. Each side's own batch metrics (``BATCH_KEYS``) show the work was the same: the mean
completion length (a random model rarely samples EOS, so both should sit at the cap, 64) and the share of
groups whose rewards are all equal (zero advantage; should be about 0). Peak memory: each side again alone in a fresh
interpreter (load, ``--mem-steps`` steps), ``VmHWM`` and the RSS before the first step.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not an installed package
from benchmarks.bench_step import (
    current_rss_mb,
    have_trl,
    kit_stepper,
    rss_mb,
    show_and_write,
    trl_memory,
)
from benchmarks.memory_check import QWEN2_05B
from grpo_kit.config import GRPOConfig
from grpo_kit.data.tasks import get_task
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.model.tiny import build_tokenizer as build_tiny_tokenizer
from grpo_kit.model.tiny import load_model
from grpo_kit.rewards.resolve import get_reward_funcs

REWARDS = ["exact_answer", {"function": "grpo_kit.rewards.judges:distinct_n_reward", "args": {"n": 2, "unit": "char"}}]
LENGTH, ZERO_STD = "completions/mean_length", "frac_reward_zero_std"
BATCH_KEYS = (LENGTH, ZERO_STD, "reward", "reward_std")
"""Read from each side's metrics every timed step: the kit's ``grpo_step`` and TRL's log both use these names."""
SMOKE = {"vocab": 512, "hidden": 64, "intermediate": 128, "heads": 4, "kv_heads": 2, "layers": 2,
         "prompts": 2, "G": 2, "length": 4, "reps": 1, "warmup": 0, "mem_steps": 1, "threads": 1}


# ---------------------------------------------------------------- model and tokenizer, built here

def synthetic_tokens(n: int) -> list[str]:
    """``n`` distinct lowercase words of two letters or more (aa, ab, ..., zz, aaa, ...): they stand in for
    Qwen2's byte-pair tokens (about 4 characters on average at Qwen2's size), so a sampled id decodes to text."""
    out: list[str] = []
    for k in itertools.count(2):
        for t in itertools.product(string.ascii_lowercase, repeat=k):
            if len(out) == n:
                return out
            out.append("".join(t))
    return out  # unreachable


def build_tokenizer(vocab_size: int):
    """A ``PreTrainedTokenizerFast`` with exactly ``vocab_size`` ids: the tiny model's tokenizer (its specials and
    printable characters keep their ids, so prompts encode as for the tiny model) with synthetic words appended
    to its vocabulary up to the size."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tiny = build_tiny_tokenizer()
    spec = json.loads(tiny.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]  # WordLevel: token -> id, ids 0 .. len-1
    n = len(vocab)
    if vocab_size < n:
        raise SystemExit(f"--vocab {vocab_size}: needs at least {n} ids")
    vocab.update({w: n + i for i, w in enumerate(synthetic_tokens(vocab_size - n))})
    special = {k: getattr(tiny, k) for k in ("pad_token", "bos_token", "eos_token", "unk_token")}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), **special,
                                  padding_side="left", clean_up_tokenization_spaces=False)
    tok.model_max_length = 4096
    assert len(tok) == vocab_size
    return tok


def write_model(args, folder: str) -> int:
    """The Qwen2 slice with random weights and its tokenizer, saved into ``folder``; its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(args.vocab)
    shape = {k: v for k, v in QWEN2_05B.items() if k != "model_type"}
    shape.update(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                 num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads)
    config = Qwen2Config(**shape, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, attn_implementation="sdpa")
    torch.manual_seed(args.seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- the two steps

def bench_config(args) -> GRPOConfig:
    return GRPOConfig(model=args.model_dir, task="add2", reward_funcs=REWARDS, num_prompts=args.prompts,
                      num_generations=args.G, max_completion_length=args.length, temperature=1.0, beta=args.beta,
                      log_kl=False, loss_type="dapo", scale_rewards="none", learning_rate=args.lr,
                      threads=args.threads, device="cpu", steps=10**6, eval_every=0, eval_size=1, seed=args.seed)


def trl_trainer(cfg: GRPOConfig, out_dir: str, max_steps: int, callbacks):
    """``trl.GRPOTrainer`` on the saved slice with ``cfg``'s settings and reward functions, CPU, logging off."""
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from datasets import Dataset

    policy, tok = load_model(cfg.model, "cpu")
    data = Dataset.from_list([{k: it[k] for k in ("prompt", "answer", "reverse_digits")}
                              for it in get_task(cfg.task).splits()["train"]])
    kw = trl_kwargs(cfg)
    kw.update(max_steps=max_steps, output_dir=out_dir, use_cpu=True, report_to="none", save_strategy="no",
              logging_strategy="no", disable_tqdm=True, log_completions=False, dataloader_num_workers=0,
              per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=1, bf16=False)
    return GRPOTrainer(model=policy, reward_funcs=get_reward_funcs(cfg.reward_funcs), args=TRLConfig(**kw),
                       train_dataset=data, processing_class=tok, callbacks=callbacks)


def trl_batch_metrics(trainer) -> dict:
    """``BATCH_KEYS`` as TRL recorded them for its latest generation batch (``trainer._metrics``: with logging
    off nothing clears them); NaN for a key it has not recorded."""
    kept = getattr(trainer, "_metrics", {}).get("train", {})
    return {k: float(kept[k][-1]) if kept.get(k) else float("nan") for k in BATCH_KEYS}


def measure(cfg: GRPOConfig, reps: int, warmup: int, use_trl: bool, log=print):
    """Alternating rounds (TRL step, then kit step): seconds, CPU seconds and mean completion length per step."""
    kit = kit_stepper(cfg)
    names = ["trl", "kit"] if use_trl else ["kit"]
    rec = {v: {"times_s": [], "cpu_s": [], "batch": []} for v in names}

    def kit_step(i: int):
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = kit()
        if i >= warmup:
            rec["kit"]["times_s"].append(time.perf_counter() - t0)
            rec["kit"]["cpu_s"].append(time.process_time() - c0)
            rec["kit"]["batch"].append({k: float(metrics[k]) for k in BATCH_KEYS})
        log(f"  round {i + 1}/{warmup + reps}" + ("" if i >= warmup else " (warm-up)"))

    if not use_trl:
        for i in range(warmup + reps):
            kit_step(i)
        return rec

    from transformers import TrainerCallback

    class Alternate(TrainerCallback):
        i, t0, c0, trainer = 0, 0.0, 0.0, None

        def on_step_begin(self, args, state, control, **kw):
            torch.set_num_threads(cfg.threads)
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            if self.i >= warmup:
                rec["trl"]["times_s"].append(time.perf_counter() - self.t0)
                rec["trl"]["cpu_s"].append(time.process_time() - self.c0)
                rec["trl"]["batch"].append(trl_batch_metrics(self.trainer))
            kit_step(self.i)
            self.i += 1

    with tempfile.TemporaryDirectory() as d:
        alternate = Alternate()
        alternate.trainer = trainer = trl_trainer(cfg, d, warmup + reps, [alternate])
        torch.set_num_threads(cfg.threads)
        trainer.train()
    return rec


# ---------------------------------------------------------------- peak memory, one side per interpreter

def run_probe(cfg: GRPOConfig, variant: str, steps: int) -> dict:
    """Inside the probe subprocess: load ``variant``, note RSS, run ``steps`` steps, note the peak."""
    torch.set_num_threads(cfg.threads)
    if variant == "kit":
        fn = kit_stepper(cfg)
        rss0 = current_rss_mb()
        for _ in range(steps):
            fn()
        return {"rss_before_steps_mb": rss0, "peak_rss_mb": rss_mb()}
    return trl_memory(trl_trainer, cfg, steps)


def memory_probe(variant: str, argv: list[str], model_dir: str) -> dict:
    cmd = [sys.executable, __file__, *argv, "--only", variant, "--model-dir", model_dir, "--_probe"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe for {variant} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- report

def summarise(args, cfg: GRPOConfig, rec: dict, memory: dict, params: int) -> dict:
    out = {
        "settings": {"model": "Qwen2ForCausalLM, random weights", "layers": args.layers, "vocab_size": args.vocab,
                     "hidden_size": args.hidden, "intermediate_size": args.intermediate, "heads": args.heads,
                     "kv_heads": args.kv_heads, "parameters": params, "task": cfg.task,
                     "reward_funcs": [f if isinstance(f, str) else f["function"] + str(f["args"]) for f in REWARDS],
                     "P": cfg.num_prompts, "G": cfg.num_generations,
                     "max_completion_length": cfg.max_completion_length, "temperature": cfg.temperature,
                     "beta": cfg.beta, "loss_type": cfg.loss_type, "scale_rewards": cfg.scale_rewards,
                     "learning_rate": cfg.learning_rate, "threads": cfg.threads, "reps": args.reps,
                     "warmup": args.warmup, "mem_steps": args.mem_steps},
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "loadavg_1m": os.getloadavg()[0]},
        "median_s": {v: statistics.median(r["times_s"]) for v, r in rec.items() if r["times_s"]},
        "median_cpu_s": {v: statistics.median(r["cpu_s"]) for v, r in rec.items() if r["cpu_s"]},
        "per_step_mean": {v: {k: statistics.fmean(b[k] for b in r["batch"]) for k in BATCH_KEYS}
                          for v, r in rec.items() if r["batch"]},
        "times_s": {v: r["times_s"] for v, r in rec.items()},
        "cpu_s": {v: r["cpu_s"] for v, r in rec.items()},
        "batch_metrics": {v: r["batch"] for v, r in rec.items()},
        "memory": memory,
    }
    med, cpu = out["median_s"], out["median_cpu_s"]
    if "trl" in med and "kit" in med:
        out["ratio_trl_over_kit"] = med["trl"] / med["kit"]
        out["cpu_ratio_trl_over_kit"] = cpu["trl"] / cpu["kit"]
    if have_trl():
        import trl
        out["machine"]["trl"] = trl.__version__
    return out


def report(res: dict) -> str:
    s = res["settings"]
    head = (f"Qwen2 slice: {s['layers']} layers, vocab {s['vocab_size']}, hidden {s['hidden_size']} "
            f"({s['parameters'] / 1e6:.1f}M parameters); P={s['P']} G={s['G']} len={s['max_completion_length']} "
            f"beta={s['beta']} threads={s['threads']} reps={s['reps']} (load {res['machine']['loadavg_1m']:.1f})")
    columns = (f"{'variant':8s} {'median s':>9s} {'min s':>8s} {'median CPU s':>13s} {'mean len':>9s} "
               f"{'zero-std groups':>16s} {'peak RSS MiB':>13s} {'RSS before MiB':>15s}")
    lines = [head, columns]
    nan = float("nan")
    for v in res["times_s"]:
        t, m, b = res["times_s"][v], res["memory"].get(v, {}), res["per_step_mean"].get(v, {})
        lines.append(f"{v:8s} {res['median_s'].get(v, nan):9.3f} {min(t, default=nan):8.3f} "
                     f"{res['median_cpu_s'].get(v, nan):13.3f} {b.get(LENGTH, nan):9.1f} {b.get(ZERO_STD, nan):16.2f} "
                     f"{m.get('peak_rss_mb', nan):13.0f} {m.get('rss_before_steps_mb', nan):15.0f}")
    for k in ("ratio_trl_over_kit", "cpu_ratio_trl_over_kit"):
        if k in res:
            lines.append(f"{k}: {res[k]:.2f}")
    return "\n".join(lines)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=5, help="timed rounds (one TRL and one kit step each); "
                   "--reps 0 --warmup 0: peak memory only")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--mem-steps", type=int, default=2, help="steps each memory subprocess runs (0: no memory)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompts", type=int, default=4, help="P")
    p.add_argument("-G", type=int, default=4, help="group size")
    p.add_argument("--length", type=int, default=64, help="max_completion_length")
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-trl", action="store_true", help="the kit alone")
    p.add_argument("--out", help="write the results as JSON here")
    shape = p.add_argument_group("model shape (Qwen2-0.5B's but the layers; change only for tests)")
    shape.add_argument("--layers", type=int, default=2)
    shape.add_argument("--vocab", type=int, default=QWEN2_05B["vocab_size"])
    shape.add_argument("--hidden", type=int, default=QWEN2_05B["hidden_size"])
    shape.add_argument("--intermediate", type=int, default=QWEN2_05B["intermediate_size"])
    shape.add_argument("--heads", type=int, default=QWEN2_05B["num_attention_heads"])
    shape.add_argument("--kv-heads", type=int, default=QWEN2_05B["num_key_value_heads"])
    p.add_argument("--smoke", action="store_true", help="a tiny Qwen2 and batch, one round: checks that it runs")
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--only", help=argparse.SUPPRESS)
    p.add_argument("--_probe", action="store_true", help=argparse.SUPPRESS)
    if p.parse_args(argv).smoke:
        p.set_defaults(**SMOKE)  # flags given explicitly still win
    return p.parse_args(argv)


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    torch.set_num_threads(args.threads)
    if args._probe:
        print(json.dumps(run_probe(bench_config(args), args.only, args.mem_steps)))
        return {}
    use_trl = not args.no_trl and have_trl()
    if not args.no_trl and not use_trl:
        print("trl is not installed: timing the kit alone (pip install -r requirements.txt)")
    with tempfile.TemporaryDirectory(prefix="qwen2-slice-") as folder:
        params = write_model(args, folder)
        args.model_dir = folder
        cfg = bench_config(args)
        print(f"{'trl, kit' if use_trl else 'kit'} on {params / 1e6:.1f}M parameters ...")
        if args.reps + args.warmup:
            rec = measure(cfg, args.reps, args.warmup, use_trl)
        else:  # memory only
            rec = {v: {"times_s": [], "cpu_s": [], "batch": []} for v in (["trl", "kit"] if use_trl else ["kit"])}
        memory = {}
        if args.mem_steps:
            for v in rec:
                memory[v] = memory_probe(v, argv, folder)
    res = summarise(args, cfg, rec, memory, params)
    return show_and_write(res, report(res), args.out)


if __name__ == "__main__":
    main()
