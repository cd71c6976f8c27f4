# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09b · Graduating: memory, export and the big engines
#
# **The question.** How much memory will a real run need, and how do you hand a trained policy to vLLM, TRL or verl?
#
# [09](09_from_toy_to_real.ipynb) showed that the same config and reward functions train the tiny
# model and a real one, and measured what LoRA saves. Two things stand between you and a real run:
# whether one step of it fits the GPU you have, and how the policy you trained leaves the kit, for
# an inference server or for a trainer built for many GPUs. Both are answered here, on the
# published shapes of real models (nothing is downloaded) and on a short LoRA run of the tiny model.
#
# **What you will learn**
# - how much GPU memory one GRPO step needs for Qwen2.5-0.5B/1.5B/7B and Llama-3.1-8B, fully
#   fine-tuned or with LoRA, and the largest micro-batch that fits a 24, 40, 80 or 141 GB card (the
#   kit's estimator, and what it leaves out);
# - `grpo-kit export`: a LoRA run merged into one folder that `from_pretrained` and vLLM load, and
#   that answers what the LoRA policy answers;
# - the same config as TRL's `GRPOConfig` arguments and verl's overrides, the `accelerate launch`
#   command for many GPUs, and 2 steps with TRL's trainer.
#
# **Time**: about half a minute with the default parameters (a 60-step LoRA run, 2 steps with TRL's
# trainer and a few seconds of estimates: 0.4 min measured on 2026-12-07 with `pytest -m full` on 2
# shared CPU cores); about 15 s with `SMOKE = True` (12 s measured on 2026-12-07 with
# `pytest -m headless`, 30 s while other work shared the 2 cores).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a 4-step LoRA run and no TRL run; the estimates
# and the export are checked all the same. GRPO_KIT_SMOKE=1 in the environment sets it too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEED = 0
STEPS = 60                 # GRPO steps of the LoRA run that is exported (09's LoRA arm ran 300)
THREADS = 1                # torch threads; on a shared 2-core machine one thread was faster than two

# %%
import contextlib
import io
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from grpo_kit import GRPOConfig, check_config, load_model, setup, train
from grpo_kit.cli import main as cli_main
from grpo_kit.engines import trl_kwargs, verl_overrides
from grpo_kit.eval import greedy_accuracy, read_history
from grpo_kit.loop import pick_device
from grpo_kit.model import (
    GiB,
    chat_items,
    estimate_memory,
    lora_parameter_count,
    model_shape,
    parameter_count,
    peft_config,
    render_prompt,
    suggest_micro_batch,
)
from grpo_kit.view import Dashboard, plot_history, record, smoke_banner

if SMOKE:
    STEPS = 4
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)
WORK = Path(tempfile.mkdtemp(prefix="grpo-kit-09b-"))

LORA = {"r": 8, "alpha": 16}                      # 09's adapters: every projection of every layer
cfg = GRPOConfig(model="tiny", task="add2", reward_funcs=["math_answer", "gsm8k_format"], chat_template="auto",
                 max_completion_length=8, lora=LORA, learning_rate=2e-3, seed=SEED, steps=STEPS,
                 threads=THREADS, eval_every=STEPS, eval_size=50 if SMOKE else 500, diagnose_every=0,
                 checkpoint_every=0)                # a checkpoint at the end of the run, the one exported
check_config(cfg)
print(f"09's LoRA arm, {cfg.steps} steps: model {cfg.model!r}, task {cfg.task!r}, LoRA {cfg.lora}, "
      f"learning rate {cfg.learning_rate:g}, P={cfg.num_prompts} x G={cfg.num_generations} completions a step")

# %% [markdown]
# ## 1 · How much memory: common models on common GPUs
#
# The estimator (`grpo_kit.model.memory`) counts, for a Llama/Qwen2-style decoder and one GRPO step:
# the float32 master weights, a frozen reference copy when the KL term needs one (never with LoRA),
# gradients and AdamW's two moments for each trainable parameter, AdamW's scratch, the bf16 weight
# copies autocast makes, the activations autograd keeps for one micro-batch (counted per token and
# layer), the logits and log-softmax, and generation's key-value cache; the peak is the largest of
# sampling, the no-gradient forwards, the forward/backward and the optimizer step. It has been
# checked against the measured peak RSS of real steps on a CPU (`benchmarks/memory_check.py`, the
# measured rows of [09](09_from_toy_to_real.ipynb)'s section 2).
#
# **It does not count** the CUDA context and cuBLAS workspaces (some hundreds of MiB), the caching
# allocator's fragmentation, a vLLM engine sharing the GPU (its `gpu_memory_utilization` is yours to
# subtract), sharding across GPUs (DeepSpeed ZeRO, FSDP divide weights, gradients and optimizer
# state by the number of GPUs), quantised base weights (QLoRA), or other architectures (mixture of
# experts, sliding-window attention). So we keep 10% of each card free, a rule of thumb rather than
# a measurement.
#
# The models are written out from their published `config.json` values, and the estimator's
# parameter count is checked against each model's published size first.

# %%
Q = dict(model_type="qwen2")  # Qwen2's attention projections have biases
SHAPES = {  # the published config.json values of each model (nothing is downloaded)
    "Qwen2.5-0.5B": dict(Q, vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "Qwen2.5-1.5B": dict(Q, vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    "Qwen2.5-7B": dict(Q, vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False),
    "Llama-3.1-8B": dict(model_type="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         tie_word_embeddings=False),
}
PUBLISHED_PARAMS = {"Qwen2.5-0.5B": 0.49e9, "Qwen2.5-1.5B": 1.54e9, "Qwen2.5-7B": 7.61e9, "Llama-3.1-8B": 8.03e9}
LORA_R = LORA["r"]
for name, shape in SHAPES.items():
    print(f"{name:<14}{parameter_count(model_shape(shape)) / 1e9:>7.3f}B parameters from its shape "
          f"(published {PUBLISHED_PARAMS[name] / 1e9:.2f}B); LoRA r={LORA_R} trains "
          f"{lora_parameter_count(model_shape(shape), LORA_R) / 1e6:.1f}M")

# %% [markdown]
# The settings: P = 8 prompts x G = 8 completions, prompts of 256 tokens and completions of 512,
# bf16 autocast with float32 master weights, no KL reference (`beta = 0`), LoRA r = 8 on every
# projection. The cell is the largest micro-batch (rows per forward/backward, a divisor of
# B = 64; `suggest_micro_batch`) that fits, or "-" when not even one row does.

# %%
sizes = dict(P=8, G=8, prompt_len=256, completion_len=512)
B = sizes["P"] * sizes["G"]                                     # 64 completions a step
GPUS = {"24 GB": 24, "40 GB": 40, "80 GB": 80, "141 GB": 141}  # RTX 4090/L4-class, A100 40GB, A100/H100 80GB, H200
HEADROOM = 0.9
table, min_peak = {}, {}
for name, shape in SHAPES.items():
    for mode, extra in (("full", {}), ("LoRA", {"lora_r": LORA_R})):
        kw = dict(bf16=True, device="cuda", **extra)
        min_peak[name, mode] = estimate_memory(shape, micro_batch=1, **sizes, **kw)["peak"]
        for gpu, gb in GPUS.items():
            table[name, mode, gpu] = suggest_micro_batch(HEADROOM * gb * GiB, shape, **sizes, **kw)

print(f"{'model':<14}{'mode':<6}{'trainable':>12}" + "".join(f"{g:>9}" for g in GPUS) + f"{'peak at b=1':>14}")
for name, shape in SHAPES.items():
    s = model_shape(shape)
    for mode in ("full", "LoRA"):
        n = parameter_count(s) if mode == "full" else lora_parameter_count(s, LORA_R)
        cells = "".join(f"{table[name, mode, g] or '-'!s:>9}" for g in GPUS)
        print(f"{name:<14}{mode:<6}{n / 1e6:>11.1f}M{cells}{min_peak[name, mode] / GiB:>10.1f} GiB")
n7 = parameter_count(model_shape(SHAPES["Qwen2.5-7B"]))
print(f"\nQwen2.5-7B: float32 weights, gradient and AdamW's two moments, 16 bytes a parameter: {16 * n7 / GiB:.0f} GiB; "
      f"its frozen float32 base alone: {4 * n7 / GiB:.0f} GiB")

fig, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
x = range(len(SHAPES))
for i, mode in enumerate(("full", "LoRA")):
    ax.bar([j + (i - 0.5) * 0.38 for j in x], [min_peak[n, mode] / GiB for n in SHAPES], width=0.38,
           label=f"{mode} fine-tuning" if mode == "full" else f"LoRA r={LORA_R}")
for gpu, gb in GPUS.items():
    ax.axhline(HEADROOM * gb, color="grey", ls="--", lw=0.8)
    ax.text(len(SHAPES) - 0.45, HEADROOM * gb, f"{gpu} (90%)", va="bottom", ha="right", fontsize=7, color="grey")
ax.set_xticks(list(x), list(SHAPES)); ax.set_yscale("log"); ax.set_ylabel("estimated peak, GiB")
ax.set_title("one GRPO step at micro-batch 1 (P=8, G=8, 256+512 tokens, bf16)"); ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Read the rows: full fine-tuning of a 7-8B model does not fit one 141 GB card even at one row per
# micro-batch: float32 weights, gradient and AdamW's two moments are 16 bytes a parameter (the cell
# prints what that is for Qwen2.5-7B), and AdamW's step adds a float32 scratch copy. That is where
# sharding across GPUs comes in (DeepSpeed ZeRO, section 2; exercise 1 works out how many cards).
# LoRA brings the same models onto one 80 GB card; most of what is left of its peak is the frozen
# base in float32 (printed above) and the bf16 copy autocast makes of it. A base stored in bf16, as
# many LoRA recipes load it, needs less; the kit trains float32 weights, and the estimator counts
# what the kit does. Gradient checkpointing (`gradient_checkpointing=True`) trades a second forward
# for most of the activations; exercise 2 tries it.
#
# ## 2 · Graduation: export, serve, hand over to TRL or verl
#
# ### A LoRA run to export
# Something to hand over first: 09's LoRA arm on the tiny model, for `STEPS` steps instead of 300,
# writing its run folder (the config, `history.jsonl`, a checkpoint at the end). A checkpoint of a
# LoRA run holds the adapter only, in peft's format.

# %%
dash = Dashboard(total_steps=cfg.steps, title=f"LoRA r={LORA_R} on {cfg.model}: the run to export")
lora_run = setup(cfg)
WORK.mkdir(exist_ok=True)                                             # the last cell removes it
lora_run_dir = Path(tempfile.mkdtemp(dir=WORK, prefix="lora-run-"))  # a new folder each time the cell runs
for m in train(cfg, lora_run, out_dir=lora_run_dir, should_stop=dash.should_stop):
    dash.update(m, variant="LoRA", run=lora_run)
dash.close()
print(f"{lora_run.step} steps, {lora_run.history[-1]['completions_total']:,.0f} completions; held-out greedy accuracy "
      f"{lora_run.evals[0][1]:.1%} -> {lora_run.evals[-1][1]:.1%}; checkpoints: "
      f"{sorted(p.name for p in (lora_run_dir / 'checkpoints').iterdir())}")

# %% [markdown]
# ### `grpo-kit export`
# `grpo-kit export` merges the adapter into the weights ($W + \frac{\alpha}{r}BA$) and writes a
# folder with the tokenizer and a `generation_config.json` that samples as the run did; it prints
# the command that serves it.

# %%
export_dir = WORK / "exported"


def grpo_kit_cli(*args: str) -> str:
    """Run ``grpo-kit ARGS`` in this kernel (``grpo_kit.cli.main``, what the command calls); its standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(args))
    assert code == 0, f"grpo-kit {' '.join(args)} failed (exit {code}); its message is above"
    return out.getvalue()


printed = grpo_kit_cli("export", "--run", str(lora_run_dir), "--to", str(export_dir), "--overwrite")
print(printed)
vllm_line = next(line.strip() for line in printed.splitlines() if line.strip().startswith("vllm serve"))
print("files:", sorted(p.name for p in export_dir.iterdir()))

# %% [markdown]
# The folder loads with plain `transformers`, no peft and no kit: a few sampled answers (with the
# run's own sampling settings), then the greedy answers of the exported model, of the LoRA policy
# in memory and of the base model on the held-out sums. The merge is exact up to float rounding, so
# the first two should agree; the base shows what the adapter changed.

# %%
from transformers import AutoModelForCausalLM, AutoTokenizer

device = pick_device(cfg.device)
exported = AutoModelForCausalLM.from_pretrained(export_dir).to(device).eval()
exported_tok = AutoTokenizer.from_pretrained(export_dir)
exported_tok.padding_side = "left"                            # generation appends on the right
items = lora_run.eval_items                                   # the held-out sums of the run's evaluations
shown = [render_prompt(exported_tok, it["prompt"]) for it in chat_items(items[:4], exported_tok, cfg.chat_template)]
batch = exported_tok(shown, return_tensors="pt", padding=True).to(device)
torch.manual_seed(SEED)
with torch.no_grad():
    out = exported.generate(**batch, generation_config=exported.generation_config)  # samples as the run did
for p_, row in zip(items[:4], out):
    print(f"{p_['prompt']!r:<10} sampled {exported_tok.decode(row[batch['input_ids'].shape[1]:], skip_special_tokens=True)!r}"
          f"   (correct {p_.get('completion', p_['answer'])!r})")

base, base_tok = load_model(cfg.model, device=device)
acc_lora_policy, lora_says, _ = greedy_accuracy(lora_run.policy, lora_run.tokenizer, items, return_completions=True)
acc_exported, exported_says, _ = greedy_accuracy(exported, exported_tok, items, return_completions=True)
acc_base, base_says, _ = greedy_accuracy(base, base_tok, items, return_completions=True)
same_answers = sum(a == b for a, b in zip(exported_says, lora_says)) / len(items)
changed_answers = sum(a != b for a, b in zip(lora_says, base_says)) / len(items)
base_weights = base.state_dict()
weight_change = max((w - base_weights[k]).abs().max().item() for k, w in exported.state_dict().items()
                    if k in base_weights)
print(f"\ngreedy held-out accuracy on {len(items)} sums: base {acc_base:.1%}, the LoRA policy {acc_lora_policy:.1%}, "
      f"the exported (merged) model {acc_exported:.1%}")
print(f"the exported model writes the LoRA policy's greedy answer on {same_answers:.1%} of them; the adapter changed "
      f"the base's answer on {changed_answers:.1%}; the largest weight change the merge wrote: {weight_change:.2e}")

# %% [markdown]
# ### The same config for TRL and verl
# `trl_kwargs(cfg)` gives `trl.GRPOConfig`'s arguments for the same objective and schedule (`grpo-kit
# train --engine trl` runs TRL's `GRPOTrainer` with them, the kit's reward functions and data, and
# hands `lora` over as peft's `LoraConfig`); `verl_overrides(cfg)` gives verl's Hydra overrides
# (`grpo-kit export-verl` prints the whole command).

# %%
from IPython.display import Markdown, display


def md_table(d: dict, left: str, right: str) -> str:
    return "\n".join([f"| {left} | {right} |", "|---|---|"] + [f"| `{k}` | `{v!r}` |" for k, v in d.items()])


trl_args = trl_kwargs(cfg)
verl_args = verl_overrides(cfg)
display(Markdown(md_table(trl_args, "trl.GRPOConfig argument", "value")))
print("peft_config (TRL's GRPOTrainer(peft_config=...)):", peft_config(cfg.lora))
display(Markdown(md_table(verl_args, "verl override", "value")))
lora_keys = {k: v for k, v in verl_args.items() if "lora" in k}
print("the LoRA settings verl gets:", lora_keys)
assert lora_keys, "verl_overrides() dropped the run's LoRA adapters"

# %% [markdown]
# ### Many GPUs: `accelerate launch`
# With a YAML of this config, the same run goes to TRL on 8 GPUs with DeepSpeed ZeRO-2 (the config
# files are in `configs/`; ZeRO-3 also shards the weights, and `--trl-arg use_vllm=true` generates
# with vLLM; [Graduating to many GPUs](../docs/graduating.md) shows those variants). We print the command and do not run it here.

# %%
config_file = WORK / "config.yaml"
config_file.write_text(cfg.to_yaml())
print(f"accelerate launch --config_file configs/deepspeed_zero2.yaml -m grpo_kit.cli train --engine trl "
      f"--config {config_file.name} --out runs/big")

# %% [markdown]
# On one CPU, two steps of the same config through TRL's trainer (full run only) write the kit's
# `history.jsonl`, which the kit's plotting reads like any other run:

# %%
trl_history = []
if not SMOKE:
    trl_cfg = WORK / "trl.yaml"
    trl_cfg.write_text(cfg.replace(steps=2, eval_every=0, eval_size=50).to_yaml())
    grpo_kit_cli("train", "--engine", "trl", "--config", str(trl_cfg), "--out", str(WORK / "trl-run"))
    trl_history = read_history(WORK / "trl-run" / "history.jsonl")
    print(f"TRL wrote {len(trl_history)} steps; step 1: reward {trl_history[0]['reward']:.3f}, "
          f"loss {trl_history[0]['loss']:.4f}")
    fig = plot_history(trl_history, title="2 steps with --engine trl")
    plt.show()
else:
    print("smoke mode: the 2-step TRL run is skipped")

# %% [markdown]
# ## The claims, checked
# In smoke mode (and in the full run): the estimated parameter counts match the published ones
# within 1%; every suggested micro-batch fits while the next larger one does not; the table reads
# as the text says (full fine-tuning of 7-8B fits no single card, LoRA fits 80 GB); the merge
# changed the weights, and the export loads and scores what the LoRA policy scores, writing its
# greedy answer on at least 98% of the held-out sums; the printed vLLM command reads the exported
# sampling settings. **Only the full run** checks that the LoRA run changed the base's greedy
# answers and that TRL's 2 steps left a history.

# %%
record("estimate_params", {n: parameter_count(model_shape(s)) for n, s in SHAPES.items()})
record("largest_micro_batch", {f"{n} {m} {g}": table[n, m, g] for n, m, g in table})
record("min_peak_gib", {f"{n} {m}": min_peak[n, m] / GiB for n, m in min_peak})
record("lora_steps", lora_run.step)
record("lora_completions", lora_run.history[-1]["completions_total"])
record("lora_accuracy", [a for _, a in lora_run.evals])
record("base_accuracy", acc_base)
record("lora_policy_accuracy", acc_lora_policy)
record("exported_accuracy", acc_exported)
record("exported_same_answers", same_answers)
record("answers_changed_from_base", changed_answers)
record("exported_weight_change", weight_change)
record("vllm_command", vllm_line)
record("trl_history_steps", len(trl_history))

for n, want in PUBLISHED_PARAMS.items():
    got = parameter_count(model_shape(SHAPES[n]))
    assert abs(got / want - 1) < 0.01, f"{n}: the written-out shape has {got:,} parameters, published {want:,.0f}"
for (n, mode, gpu), b in table.items():
    kw = dict(bf16=True, device="cuda", **({"lora_r": LORA_R} if mode == "LoRA" else {}))
    budget = HEADROOM * GPUS[gpu] * GiB
    bigger = [d for d in range(b + 1 if b else 1, B + 1) if B % d == 0]
    assert b is None or estimate_memory(SHAPES[n], micro_batch=b, **sizes, **kw)["peak"] <= budget
    assert not bigger or estimate_memory(SHAPES[n], micro_batch=bigger[0], **sizes, **kw)["peak"] > budget
for n in ("Qwen2.5-7B", "Llama-3.1-8B"):  # the reading of section 1's table
    assert table[n, "full", "141 GB"] is None and table[n, "LoRA", "80 GB"] is not None, n
assert weight_change > 0, "the export wrote the base's weights: the adapter was not merged"
assert abs(acc_exported - acc_lora_policy) <= 1 / len(items) + 1e-9, (
    f"the exported model scores {acc_exported:.1%}, the LoRA policy {acc_lora_policy:.1%}")
assert same_answers >= 0.98, f"the exported model writes the LoRA policy's greedy answer on only {same_answers:.1%}"
assert vllm_line.startswith(f"vllm serve {export_dir}") and "--generation-config auto" in vllm_line, vllm_line
if SMOKE or dash.stopped:
    print("the pipeline holds; the changed answers and TRL's steps need the full run (SMOKE=False, not stopped).")
else:
    assert changed_answers > 0, "the LoRA run did not change one greedy answer of the base"
    assert len(trl_history) == 2 and all("reward" in m for m in trl_history)
    print(f"claims hold: the LoRA run changed {changed_answers:.1%} of the base's greedy answers "
          f"({acc_base:.1%} -> {acc_lora_policy:.1%}), the export writes the same answers on {same_answers:.1%}; "
          f"TRL wrote {len(trl_history)} steps")

# %% [markdown]
# ## Summary
# - **How much memory:** `estimate_memory` counts one GRPO step part by part, and
#   `suggest_micro_batch` gives the largest micro-batch that fits a card. At 8 x 8 completions of
#   256 + 512 tokens, full fine-tuning of a 7-8B model fits no single card, not even 141 GB; LoRA
#   fits it on one 80 GB card.
# - The estimate leaves out the CUDA context, fragmentation, a vLLM engine on the same GPU and
#   sharding: keep headroom (10% here) and check on the real card.
# - **To vLLM:** `grpo-kit export` merges a LoRA adapter into the weights and writes one folder that
#   `from_pretrained` and `vllm serve --generation-config auto` load; it answers what the LoRA
#   policy answers and samples as the run did.
# - **To TRL or verl:** `trl_kwargs(cfg)` and `verl_overrides(cfg)` turn the same config into their
#   settings; `grpo-kit train --engine trl` under `accelerate launch` runs it on many GPUs and writes
#   the same `history.jsonl`.
#
# ## Questions
# 1. The estimator says full fine-tuning of a 7B model fits no single 141 GB card. Which part of its
#    memory would you shard first, and why does the peak not fall in proportion?
# 2. LoRA brings Qwen2.5-7B onto one 80 GB card. What is most of what is left of its peak?
# 3. vLLM shares the 80 GB card with the trainer at `gpu_memory_utilization=0.3`. What budget would you
#    pass to `suggest_micro_batch`, keeping this notebook's 10% headroom?
# 4. Why does `grpo-kit export` merge the adapter instead of shipping it beside the base, and why
#    should the merged model write the LoRA policy's greedy answers?
#
# <details><summary>Answers</summary>
#
# 1. AdamW's two moments (twice the weights in fp32); the peak is the largest of several moments
#    (forward/backward, the optimizer step), and the activations do not shrink with sharding.
# 2. The frozen base in float32 and the bf16 copy autocast makes of it; the adapters' gradients and
#    AdamW state are small. Activations come on top, and grow with the micro-batch.
# 3. (1 - 0.3 - 0.1) x 80 GB = 48 GB: vLLM's share is of the whole card, and the headroom stays.
# 4. One folder that any loader reads, with no peft at serving time. The merged weight is
#    $W + \frac{\alpha}{r}BA$, the very function the policy computed, so only float rounding can tell
#    the two apart; a greedy answer flips only where two tokens are almost tied.
# </details>
#
# ## Exercises
# 1. Section 1's Qwen2.5-7B rows: how many 80 GB GPUs (90% usable) would full fine-tuning need at
#    micro-batch 1 if ZeRO-3 divided the weights, gradients, AdamW state and AdamW's scratch evenly
#    among them and everything else stayed whole on every GPU? Work it out from `estimate_memory`'s
#    parts (remember the peak is the largest of several moments).
# 2. **Code.** Find, with `estimate_memory`, the longest completion (a multiple of 256 tokens) that
#    Qwen2.5-1.5B with LoRA can train on a 24 GB card at micro-batch 8, with and without
#    `gradient_checkpointing=True`.
#
# The solutions to 1 and 2 are in the next two cells (click to expand them).

# %% jupyter={"source_hidden": true}
# Solution to exercise 1: ZeRO-3 as the exercise states it divides the sharded parts by n GPUs and
# keeps the rest whole; the peak is the larger of the two moments, the optimizer step and the
# forward/backward.
p7 = estimate_memory(SHAPES["Qwen2.5-7B"], micro_batch=1, **sizes, bf16=True, device="cuda")
SHARDED = ("weights", "gradients", "optimizer", "optimizer_scratch")
WHOLE = ("bf16_weight_copies", "activations", "logits")
print("parts at micro-batch 1 (GiB):", {k: round(p7[k] / GiB, 1) for k in SHARDED + WHOLE})


def zero3_peak(n):
    step = sum(p7[k] for k in SHARDED) / n                                          # the optimizer step
    fwd_bwd = sum(p7[k] for k in SHARDED if k != "optimizer_scratch") / n + sum(p7[k] for k in WHOLE)
    return max(step, fwd_bwd)


budget_80 = HEADROOM * 80 * GiB
gpus_needed = next(n for n in range(1, 65) if zero3_peak(n) <= budget_80)
for n in range(1, gpus_needed + 1):
    print(f"{n} GPUs: peak {zero3_peak(n) / GiB:.1f} GiB of {budget_80 / GiB:.0f}")
# the answer fits, and one GPU fewer does not
assert zero3_peak(gpus_needed) <= budget_80 and (gpus_needed == 1 or zero3_peak(gpus_needed - 1) > budget_80)
record("exercise_zero3_gpus", gpus_needed)
# (Real ZeRO-3 also shards the bf16 copies, gathering one layer's weights at a time, so it does a
# little better than this.)

# %% jupyter={"source_hidden": true}
# Solution to exercise 2: lengthen the completion until the estimated peak no longer fits.
def longest_completion(shape, budget_bytes, checkpointing):
    best = None
    for length in range(256, 8193, 256):
        est = estimate_memory(shape, P=8, G=8, prompt_len=256, completion_len=length, micro_batch=8, bf16=True,
                              lora_r=LORA_R, gradient_checkpointing=checkpointing, device="cuda")
        if est["peak"] > budget_bytes:
            break
        best = length
    return best


longest = {ckpt: longest_completion(SHAPES["Qwen2.5-1.5B"], HEADROOM * 24 * GiB, ckpt) for ckpt in (False, True)}
for ckpt, length in longest.items():
    print(f"gradient checkpointing {ckpt}: longest completion that fits {length} tokens")
assert longest[False] is not None and longest[True] > longest[False]  # checkpointing trades compute for length
record("exercise_longest_completion", {str(k): v for k, v in longest.items()})

# %% [markdown]
# This is the last lesson; a FAQ and a capstone follow. For a real run: `configs/gsm8k.yaml` with `grpo-kit train`,
# then [Graduating to many GPUs](../docs/graduating.md): TRL with accelerate and DeepSpeed, or verl on Ray.
#
# **Next:** [10 · GRPO FAQ](10_grpo_faq.ipynb): the questions GRPO users ask most, each reproduced on the tiny model and answered.

# %%
shutil.rmtree(WORK, ignore_errors=True)  # the scratch folder: the LoRA run, the export, TRL's run (copy it first to keep it)
