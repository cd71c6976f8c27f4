"""Check ``grpo_kit.model.memory.estimate_memory`` against the measured peak memory of real GRPO steps on a CPU.

    PYTHONPATH=. python benchmarks/memory_check.py                       # tiny + 2-layer slice + full 0.5B shape
    PYTHONPATH=. python benchmarks/memory_check.py --cases tiny,qwen2-0.5b-2layers --bf16
    PYTHONPATH=. python benchmarks/memory_check.py --cases tiny --lora      # LoRA adapters (r 8, alpha 16)

Each case runs in a fresh interpreter: import torch and transformers, note the RSS, build the
model (the shipped tiny model, or a *randomly initialised* model with Qwen2-0.5B's shape from a
config written here: no download), run ``--steps`` GRPO steps with ``train.grpo_step``, and
report the RSS high-water mark (``VmHWM``) minus the RSS before the model: the memory the run
added. Before the baseline a toy model runs two steps through the same code, so that code
pages, kernels and thread pools (about 130 MiB that a GPU's allocator never sees) are not
counted; the peak is reset (``/proc/self/clear_refs``) after the baseline, and again once a random
model is built (its initialisation briefly holds a second copy of the embedding, 0.5 GB at
Qwen2's vocabulary: more than a LoRA run's training peak; the weights themselves stay counted,
they are in the RSS). The estimate uses
the prompt and completion widths the batches really had. The estimate is ``estimate_memory``'s peak for the same shape and settings (float32 on
a CPU; ``--bf16`` runs the bf16 autocast path with ``bf16_on_cpu``). The full 0.5B case needs
about 9 GB of free RAM (float32 weights 2 GB, gradients 2 GB, AdamW 4 GB).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Qwen2-0.5B's published shape (config.json of Qwen/Qwen2-0.5B), written out: nothing is downloaded
QWEN2_05B = dict(model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                 num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True)

CASES = {  # name: (model config or "tiny", P, G, completion length)
    "tiny": ("tiny", 16, 8, 8),
    "qwen2-0.5b-2layers": ({**QWEN2_05B, "num_hidden_layers": 2}, 2, 4, 8),
    "qwen2-0.5b": (QWEN2_05B, 1, 4, 8),
}


def model_config(spec):
    """The tiny model's config, or a Qwen2 config from a dict."""
    if spec == "tiny":
        from grpo_kit.model.tiny import build_tokenizer, tiny_config

        tok = build_tokenizer()
        return tiny_config(len(tok), tok.eos_token_id, tok.bos_token_id, tok.pad_token_id)
    from transformers import Qwen2Config

    d = {k: v for k, v in spec.items() if k != "model_type"}
    return Qwen2Config(**d, attn_implementation="sdpa")


def prompt_length(task: str = "add2") -> int:
    """Longest tokenised prompt of the task's train split (the left-padded batch is at most this wide)."""
    from grpo_kit.data.tasks import get_task
    from grpo_kit.model.tiny import build_tokenizer

    tok = build_tokenizer()
    return max(len(tok(it["prompt"])["input_ids"]) for it in get_task(task).splits()["train"])


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))


LORA = {"r": 8, "alpha": 16}  # the --lora cases: every projection of every layer (lora.LORA_DEFAULTS)
RETURN_FREED = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""glibc's malloc with a fixed mmap threshold: freed blocks of 64 KiB and more go back to the system at once.
With glibc's default (a threshold that grows to the largest block freed so far) the tiny model's LoRA run
keeps peft's freed per-layer temporaries (about 1 MiB each) on the heap, and its RSS high-water mark
overstates the live memory by about 30 MiB (77 vs 47 MiB); ``--return-freed`` measures with this setting."""


def case_config(name: str, steps: int, bf16: bool, beta: float, threads: int, lora: bool = False):
    """The GRPOConfig a case trains with; the estimate reads the same config (``memory.estimate_for_config``)."""
    from grpo_kit.config import GRPOConfig

    _, P, G, L = CASES[name]
    return GRPOConfig(num_prompts=P, num_generations=G, max_completion_length=L, beta=beta, log_kl=False,
                      device="cpu", bf16=bf16, bf16_on_cpu=bf16, threads=threads, eval_size=1, eval_every=0,
                      learning_rate=1e-6, steps=steps, lora=LORA if lora else None,
                      dedupe_completions=False, pack_max_tokens=0)  # the estimate counts every row, distinct and
    # full length: a packed batch (pack_max_tokens) forwards only the tokens up to each row's end


def measure(name: str, steps: int, bf16: bool, beta: float, threads: int, lora: bool = False) -> dict:
    """Inside the child: run the case and return the memory it added (bytes)."""
    import importlib

    import torch
    import transformers  # noqa: F401 - imported before the baseline, as a user's process has it

    from grpo_kit.loop.train import grpo_step, setup
    from grpo_kit.model.tiny import build_tokenizer, load_model

    train_mod = importlib.import_module("grpo_kit.loop.train")  # the module (grpo_kit.loop.train is also a function)
    dynamic_mod = importlib.import_module("grpo_kit.loop.dynamic")  # grpo_step samples through dynamic.sample_batch

    torch.set_num_threads(threads)
    spec = CASES[name][0]
    tok = build_tokenizer()
    warm_up_code(threads, bf16, spec != "tiny", lora)  # load the code a step runs (its pages are RSS too), then measure from here
    base = _status_kib("VmRSS") * 1024
    reset_peak()
    shapes = {"prompt_len": 0, "completion_len": 0}
    real_sample = dynamic_mod.sample_groups

    def sample_and_note(*a, **kw):  # the widths the batches really had, for the estimate
        r = real_sample(*a, **kw)
        shapes["prompt_len"] = max(shapes["prompt_len"], r.prompt_ids.shape[1])
        shapes["completion_len"] = max(shapes["completion_len"], r.completion_ids.shape[1])
        return r

    dynamic_mod.sample_groups = sample_and_note
    if spec == "tiny":
        model, tok = load_model("tiny")
    else:
        from transformers import Qwen2ForCausalLM

        torch.manual_seed(0)
        model = Qwen2ForCausalLM(model_config(spec))
        reset_peak()  # random initialisation holds a second embedding for a moment; the weights stay in the RSS
    cfg = case_config(name, steps, bf16, beta, threads, lora)
    run = setup(cfg, policy=model, tokenizer=tok)
    for _ in range(steps):
        grpo_step(run)
    return {"added_bytes": _status_kib("VmHWM") * 1024 - base, "baseline_bytes": base, **shapes}


def reset_peak() -> None:
    """Set VmHWM back to the current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def warm_up_code(threads: int, bf16: bool, qwen: bool, lora: bool = False) -> None:
    """Two GRPO steps of a small model of the same class through the same code, then free it: code,
    kernels and thread pools are loaded before the baseline, as a long-running process has them."""
    import gc

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpo_kit.config import GRPOConfig
    from grpo_kit.loop.train import grpo_step, setup
    from grpo_kit.model.tiny import build_tokenizer, load_model

    tok = build_tokenizer()
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True, attn_implementation="sdpa")) if qwen else load_model("tiny")[0]
    cfg = GRPOConfig(num_prompts=1, num_generations=2, max_completion_length=2, log_kl=True, beta=0.04,
                     device="cpu", bf16=bf16, bf16_on_cpu=bf16, threads=threads, eval_size=1, eval_every=0,
                     lora=LORA if lora else None, dedupe_completions=False,
                     pack_max_tokens=0)
    run = setup(cfg, policy=model, tokenizer=tok)
    for _ in range(2):
        grpo_step(run)
    del run
    del model
    gc.collect()


def estimate(name: str, bf16: bool, beta: float, prompt_len: int | None = None,
             completion_len: int | None = None, lora: bool = False) -> dict:
    """The estimate for a case; lengths default to the task's longest prompt and the length limit."""
    from grpo_kit.model.memory import estimate_for_config

    cfg = case_config(name, 1, bf16, beta, 1, lora)
    return estimate_for_config(cfg, model_config(CASES[name][0]), prompt_len or prompt_length(), completion_len,
                               device="cpu")


def run_case(name: str, steps: int, bf16: bool, beta: float, threads: int, lora: bool = False,
             env: dict | None = None) -> dict:
    """Measure a case in a fresh interpreter (``env``: extra environment variables for it) and estimate it."""
    cmd = [sys.executable, __file__, "--_child", name, "--steps", str(steps), "--beta", str(beta),
           "--threads", str(threads)] + (["--bf16"] if bf16 else []) + (["--lora"] if lora else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TOKENIZERS_PARALLELISM="false", **(env or {}))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"memory case {name} failed:\n{out.stderr[-3000:]}")
    child = json.loads(out.stdout.strip().splitlines()[-1])
    measured = child["added_bytes"]
    est = estimate(name, bf16, beta, child["prompt_len"], child["completion_len"], lora)
    return {"case": name, "bf16": bf16, "beta": beta, "lora": lora, "measured_bytes": measured, "estimated_bytes": est["peak"],
            "prompt_len": child["prompt_len"], "completion_len": child["completion_len"],
            "peak_at": est["peak_at"], "error": est["peak"] / measured - 1, "parts": est}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"comma list of {list(CASES)}")
    p.add_argument("--steps", type=int, default=2, help="GRPO steps per case (the second one holds AdamW state)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast on the CPU (bf16_on_cpu)")
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (a reference copy when != 0)")
    p.add_argument("--lora", action="store_true", help=f"train LoRA adapters {LORA} instead of every weight")
    p.add_argument("--return-freed", action="store_true", help=f"run the cases with {RETURN_FREED} (see RETURN_FREED)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--_child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        print(json.dumps(measure(args._child, args.steps, args.bf16, args.beta, args.threads, args.lora)))
        return []
    results = []
    for name in [c for c in args.cases.split(",") if c]:
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}: choose from {list(CASES)}")
        r = run_case(name, args.steps, args.bf16, args.beta, args.threads, args.lora,
                     RETURN_FREED if args.return_freed else None)
        results.append(r)
        print(f"{name:20s} bf16={args.bf16!s:5s} lora={args.lora!s:5s} measured {r['measured_bytes'] / 2**20:9.1f} MiB  "
              f"estimated {r['estimated_bytes'] / 2**20:9.1f} MiB (peak at {r['peak_at']})  error {r['error']:+.1%}",
              flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
