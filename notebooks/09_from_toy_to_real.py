# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · From the toy to a real model
#
# **The question.** What changes, and what does not, when the model is a real one?
#
# Everything so far ran on a 0.9M-parameter model that adds 2-digit numbers. This notebook shows
# that nothing in the kit is specific to it: **the same config and the same reward functions**
# train a real Hugging Face model when you change three parameters, and the same run can be
# handed to an engine built for many GPUs when one machine is not enough.
#
# **What you will learn**
# - what changes between the tiny model and a real one (three parameters), and what the model
#   really sees: the prompt with or without a chat template;
# - the GSM8K-format reward functions on example completions, and that a saved model loads by
#   path, the same `from_pretrained` call a hub model takes;
# - LoRA against full fine-tuning at the same number of generated completions: held-out accuracy
#   and peak memory, both measured, and why LoRA saves nothing on a model this small;
# - how much GPU memory a GRPO step needs for common model sizes on common GPUs, and the largest
#   micro-batch that fits (the kit's estimator, and what it leaves out);
# - graduation: `grpo-kit export` (a folder that `from_pretrained` and vLLM load), the same config
#   as TRL and verl settings, and the `accelerate launch` command for many GPUs.
#
# **How long it takes**: 3 minutes with the default parameters (two 300-step runs, the
# memory measurements and a 2-step run with TRL's trainer; measured headless on 2 quiet CPU cores,
# 7 to 9 minutes when other work shared them), about 10 s with `SMOKE = True` (measured headless on quiet cores).
#
# ## Three parameters
#
# | parameter | here (the test suite runs this) | a real model on a GPU |
# |---|---|---|
# | `MODEL` | `"tiny"` (ships with the kit) | `"Qwen/Qwen2.5-0.5B-Instruct"` (any causal LM: a hub name or a `save_pretrained` folder) |
# | `DATASET` | `None` (the built-in 2-digit sums) | `"datasets/gsm8k_sample.jsonl"` (GSM8K rows: `question`, `answer` ending in `#### n`) |
# | `DEVICE` | `"cpu"` | `"cuda"` |
#
# Everything else follows from these: the task's held-out split (the sums, or
# `datasets/gsm8k_test.jsonl`), the completion length and learning rates of the recipe table
# below, and the chat template, which `chat_template="auto"` applies whenever the tokenizer has
# one (an instruct model's does; the tiny model's has none). The reward functions are the same in
# both: `math_answer` reads the final number of a completion (in the digit order the sums are
# written in), `gsm8k_format` pays for a last line `#### <number>`.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: short runs that check every cell; the accuracy
# and memory claims need the full run. GRPO_KIT_SMOKE=1 in the environment sets it too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
MODEL = "tiny"             # e.g. "Qwen/Qwen2.5-0.5B-Instruct"
DATASET = None             # e.g. "datasets/gsm8k_sample.jsonl" (relative to the repository)
DEVICE = "cpu"             # e.g. "cuda"
SEED = 0
STEPS = 300                # GRPO steps of each of the two runs (LoRA, full fine-tuning)
THREADS = 2

# %%
import contextlib
import copy
import io
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from grpo_kit import GRPOConfig, check_config, load_model, setup, train
from grpo_kit.cli import main as cli_main
from grpo_kit.core import compute_advantages
from grpo_kit.data import DATASETS_DIR, heldout_split, load_gsm8k
from grpo_kit.engines import trl_kwargs, verl_overrides
from grpo_kit.eval import columns_of, greedy_accuracy, read_history
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
    sample_groups,
    suggest_micro_batch,
)
from grpo_kit.rewards import get_reward_funcs, score
from grpo_kit.view import Dashboard, plot_history, record, smoke_banner

if SMOKE:
    STEPS, THREADS = 4, 1
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)
REPO = DATASETS_DIR.parent                        # the repository: DATASET and the scripts are relative to it
WORK = Path(tempfile.mkdtemp(prefix="grpo-kit-09-"))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           TOKENIZERS_PARALLELISM="false")        # for the command-line runs below

TASK = "add2" if DATASET is None else "gsm8k"     # which held-out split goes with the data
RECIPES = {  # per task: completion length, and the learning rates of full fine-tuning and of LoRA
    "add2": dict(max_completion_length=8, full_lr=3e-4, lora_lr=2e-3),
    "gsm8k": dict(max_completion_length=256, full_lr=1e-6, lora_lr=1e-5),
}
RECIPE = RECIPES[TASK]
LORA = {"r": 8, "alpha": 16}                      # adapters on every projection of every layer
cfg = GRPOConfig(model=MODEL, dataset=str(REPO / DATASET) if DATASET else None, device=DEVICE, task=TASK,
                 reward_funcs=["math_answer", "gsm8k_format"], chat_template="auto",
                 max_completion_length=RECIPE["max_completion_length"], learning_rate=RECIPE["full_lr"],
                 seed=SEED, steps=STEPS, threads=THREADS, eval_every=50 if not SMOKE else STEPS,
                 eval_size=50 if SMOKE else 500, diagnose_every=0)
check_config(cfg)  # every field and every name the config gives, before anything is loaded
print(f"model {cfg.model!r}, task {cfg.task!r}, data {DATASET or 'the built-in sums'}, device {cfg.device!r}; "
      f"P={cfg.num_prompts} x G={cfg.num_generations} completions a step, {cfg.steps} steps; "
      f"rewards {cfg.reward_funcs}")

# %% [markdown]
# Where the learning rates come from. The `add2` row is measured: the full run of this notebook
# trains with it and asserts the gain. The `gsm8k` row is a starting point, not a measurement:
# full fine-tuning's 1e-6 is TRL's `GRPOConfig` default (checked in the next cell against the TRL
# installed here), and LoRA's ten times more is a rule of thumb (adapters start at zero and train
# far fewer weights), a guess to start a sweep from. A real run also wants more steps and a
# longer completion budget than a test suite can afford: `configs/gsm8k.yaml` is the same setup as
# a file for `grpo-kit train`.

# %%
from trl import GRPOConfig as TRLGRPOConfig  # TRL is installed with the kit; 2 steps with it run below

trl_default_lr = TRLGRPOConfig.__dataclass_fields__["learning_rate"].default
print(f"TRL's GRPOConfig learning_rate default: {trl_default_lr}; the gsm8k recipe's full fine-tuning rate: "
      f"{RECIPES['gsm8k']['full_lr']}")
assert trl_default_lr == RECIPES["gsm8k"]["full_lr"]

# %% [markdown]
# ## 1 · The same config, the same reward functions
#
# ### What the model sees
# `setup()` wraps each text prompt as a user message and renders it with the tokenizer's chat
# template when the tokenizer has one (`chat_template="auto"`, as TRL renders a conversational
# prompt), else it sends the text as it is.

# %%
model, tokenizer = load_model(cfg.model, device=pick_device(cfg.device))
item = heldout_split(cfg.task)[0]
seen = render_prompt(tokenizer, chat_items([item], tokenizer, cfg.chat_template)[0]["prompt"])
has_template = bool(getattr(tokenizer, "chat_template", None))
print(f"the tokenizer {'has' if has_template else 'has no'} chat template; the model continues this text:")
print(repr(seen))

# ChatML, the format Qwen2.5's template writes (its real template also adds a default system message)
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
templated = copy.deepcopy(tokenizer)
templated.chat_template = templated.chat_template or CHATML
seen_chat = render_prompt(templated, chat_items([item], templated, "auto")[0]["prompt"])
print("\nthe same prompt through a chat template:")
print(repr(seen_chat))

# %% [markdown]
# ### The reward functions on example completions
# One GSM8K-format problem from the shipped sample, and one sum of the built-in task. `math_answer`
# compares the final number with the reference (the sums are written least-significant digit first,
# and the judge reads them that way); `gsm8k_format` looks only at the form of the last line.

# %%
math_answer, gsm8k_format = get_reward_funcs(cfg.reward_funcs)
problem = load_gsm8k(DATASETS_DIR / "gsm8k_sample.jsonl")[0]
print(f"GSM8K-format problem: {problem['prompt']!r}, reference answer {problem['answer']!r}\n")
gsm8k_examples = ["Mia has 4*6 = 24 pencils. 24-5 = 19 are left.\n#### 19",   # right, in format
                  "Mia has 4*6 = 24 pencils.\n#### 24",                        # wrong, in format
                  "She has 19 pencils left."]                                  # right, no #### line
gsm8k_scores = score([math_answer, gsm8k_format], [problem["prompt"]] * 3, gsm8k_examples,
                     {"answer": [problem["answer"]] * 3}).per_func             # (3, 2) one column per function
sum_item = heldout_split("add2")[0]
sum_examples = [sum_item["completion"], sum_item["completion"][::-1]]          # as the task writes it; reversed
sum_scores = score([math_answer, gsm8k_format], [sum_item["prompt"]] * 2, sum_examples,
                   columns_of([sum_item], repeat=2)).per_func                  # (2, 2)
print(f"{'completion':<58}{'math_answer':>12}{'gsm8k_format':>14}")
for c, (a, f) in zip(gsm8k_examples + sum_examples, torch.cat([gsm8k_scores, sum_scores]).tolist()):
    print(f"{c!r:<58}{a:>12.0f}{f:>14.0f}")
print(f"\n(the sum: {sum_item['prompt']!r}, correct completion {sum_item['completion']!r})")

# %% [markdown]
# On the sums `gsm8k_format` pays 0 to every completion the tiny model writes, so it cannot change
# an advantage: a reward that is the same for every member of a group cancels against the group's
# mean. We check that on a sampled batch. (On GSM8K it varies, and it teaches the `#### n` line.)

# %%
P, G = 4, 8
prompts = [it["prompt"] for it in heldout_split("add2")[:P]]
gen = torch.Generator().manual_seed(SEED)
groups = sample_groups(model, tokenizer, prompts, num_generations=G, max_new_tokens=8, temperature=1.0,
                       generator=gen)
per_func = score([math_answer, gsm8k_format], groups.prompts, groups.completions,
                 columns_of(heldout_split("add2")[:P], repeat=G)).per_func     # (P*G, 2)
adv_both = compute_advantages(per_func.sum(1).view(P, G), cfg.scale_rewards)   # (P, G) both rewards
adv_math = compute_advantages(per_func[:, 0].view(P, G), cfg.scale_rewards)    # (P, G) math_answer alone
format_paid = float(per_func[:, 1].sum())
print(f"gsm8k_format paid {format_paid:.0f} in total to {P * G} sampled sums; largest advantage difference "
      f"with and without it: {float((adv_both - adv_math).abs().max()):.1e}")

# %% [markdown]
# ### A saved model loads by path
# `model: tiny` is a name the kit resolves to a folder inside the package; any other value goes to
# `AutoModelForCausalLM.from_pretrained` as it is: a hub name, or a folder written by
# `save_pretrained`. We save the model and load it through the config's `model` field.

# %%
saved = WORK / "saved-model"
model.save_pretrained(saved)
tokenizer.save_pretrained(saved)
cfg_saved = cfg.replace(model=str(saved))
reloaded, reloaded_tok = load_model(cfg_saved.model, device=pick_device(cfg.device))
same_weights = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
check_items = heldout_split(cfg.task)[:50]
acc_original, acc_reloaded = (greedy_accuracy(m, t, check_items) for m, t in ((model, tokenizer),
                                                                              (reloaded, reloaded_tok)))
print(f"saved to {saved.name}/: {sorted(p.name for p in saved.iterdir())}")
print(f"same weights: {same_weights}; greedy accuracy on {len(check_items)} held-out problems: "
      f"{acc_original:.1%} (in memory) and {acc_reloaded:.1%} (loaded by path)")

# %% [markdown]
# ### A real model, when this machine has one
# With a CUDA GPU and `REAL_MODEL` in the local Hugging Face cache (fetch it once, on a machine with
# a network, with `huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct`), the next cell trains it for
# `REAL_STEPS` steps on the GSM8K sample with the `gsm8k` recipe above and prints one held-out
# problem's greedy completion before and after. Without them it says why, and runs the same
# function on the tiny model saved above (by its path, on the sums), so you see what it prints.
# Nothing is downloaded. A handful of steps shows the pipeline working on a real model, not a gain:
# for that, `configs/gsm8k.yaml` with `grpo-kit train`.

# %%
REAL_MODEL, REAL_STEPS = "Qwen/Qwen2.5-0.5B-Instruct", 20


def real_model_missing(name):
    """Why a real model cannot run here (None when it can): a CUDA device and the model's files cached locally."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(name, "config.json"), str):
        return f"{name} is not in the local Hugging Face cache (huggingface-cli download {name})"
    return None


def before_and_after(c):
    """Train config c for c.steps steps (no files written); one held-out prompt and its greedy completion
    before and after, and the run."""
    run_ = setup(c)
    item = run_.eval_items[:1]
    _, before, _ = greedy_accuracy(run_.policy, run_.tokenizer, item, c.max_completion_length, return_completions=True)
    for _ in train(c, run_):
        pass
    _, after, _ = greedy_accuracy(run_.policy, run_.tokenizer, item, c.max_completion_length, return_completions=True)
    return item[0]["prompt"], before[0], after[0], run_


missing = real_model_missing(REAL_MODEL)
if missing is None:
    real_cfg = cfg.replace(model=REAL_MODEL, dataset=str(REPO / "datasets" / "gsm8k_sample.jsonl"), device="cuda",
                           task="gsm8k", max_completion_length=RECIPES["gsm8k"]["max_completion_length"],
                           learning_rate=RECIPES["gsm8k"]["full_lr"], steps=REAL_STEPS, eval_every=REAL_STEPS,
                           eval_size=20)
    print(f"training {REAL_MODEL} on CUDA for {REAL_STEPS} steps")
else:
    real_cfg = cfg_saved.replace(steps=2 if SMOKE else REAL_STEPS, eval_every=0)
    print(f"skipped the real model: {missing}. The same function on the tiny model saved above ({saved.name}/):")
prompt_, before_, after_, real_run = before_and_after(real_cfg)
print(f"prompt: {prompt_!r}\nbefore: {before_!r}\nafter {real_cfg.steps} steps: {after_!r}")
assert len(real_run.history) == real_cfg.steps and all(math.isfinite(m["loss"]) for m in real_run.history)
record("real_model_skipped_because", missing)

# %% [markdown]
# ## 2 · LoRA against full fine-tuning, at the same number of completions
#
# LoRA (Hu et al. 2021, arXiv:2106.09685) freezes the weights and trains a low-rank update
# $W + \frac{\alpha}{r} B A$ of each projection; `lora={"r": 8, "alpha": 16}` puts one on every
# projection of every layer. The reference policy of the KL term is the same model with the
# adapter switched off, so LoRA needs no second copy of the weights.
#
# Both runs sample the same P x G = 128 completions a step for the same number of steps. Full
# fine-tuning keeps the default learning rate; LoRA's adapters start at zero and need a larger one.
# While they train, two other processes measure the **peak memory** of two GRPO steps of each
# with `benchmarks/memory_check.py`: in a fresh interpreter, the RSS high-water mark minus the RSS
# before the model was built (one process for full fine-tuning, one for LoRA; the tiny model, and
# a 2-layer slice of Qwen2-0.5B, randomly initialised from its published shape; full run only,
# they take about a minute).

# %%
MEMORY_CASES = "tiny,qwen2-0.5b-2layers"


def start_memory_check(lora: bool) -> tuple[subprocess.Popen, Path]:
    """benchmarks/memory_check.py in the background (one thread); its JSON lands in the returned path."""
    out = WORK / f"memory-{'lora' if lora else 'full'}.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "memory_check.py"), "--cases", MEMORY_CASES,
           "--threads", "1", "--out", str(out)] + (["--lora"] if lora else [])
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out


memory_jobs = {} if SMOKE else {"full fine-tuning": start_memory_check(False), "LoRA": start_memory_check(True)}

# %%
configs = {"full fine-tuning": cfg,
           "LoRA": cfg.replace(lora=LORA, learning_rate=RECIPE["lora_lr"], checkpoint_every=0)}
runs, seconds = {}, {}
dash = Dashboard(total_steps=cfg.steps, title=f"GRPO on {cfg.model}: full fine-tuning vs LoRA")
for label, c in configs.items():
    run = setup(c)
    t0 = time.perf_counter()
    if label == "LoRA":  # its checkpoint is exported below; a new folder each time the cell runs
        WORK.mkdir(exist_ok=True)
        lora_run_dir = Path(tempfile.mkdtemp(dir=WORK, prefix="lora-run-"))
    out_dir = lora_run_dir if label == "LoRA" else None
    for m in train(c, run, out_dir=out_dir, should_stop=dash.should_stop):
        dash.update(m, variant=label, run=run)
    runs[label], seconds[label] = run, time.perf_counter() - t0
dash.close()
stopped_early = dash.stopped  # the Stop button ends a run early: the accuracy claim is then not checked

trainable = {k: sum(p.numel() for p in r.policy.parameters() if p.requires_grad) for k, r in runs.items()}
accuracy = {k: (r.evals[0][1], r.evals[-1][1]) for k, r in runs.items()}
completions = {k: r.history[-1]["completions_total"] for k, r in runs.items()}  # generated over the run
print(f"{'':<18}{'trainable':>12}{'lr':>8}{'completions':>13}{'held-out accuracy':>22}{'seconds':>9}")
for k in runs:
    print(f"{k:<18}{trainable[k]:>12,}{configs[k].learning_rate:>8g}{completions[k]:>13,}"
          f"{accuracy[k][0]:>13.1%} -> {accuracy[k][1]:.1%}{seconds[k]:>9.0f}")

# %%
fig, ax = plt.subplots(figsize=(6, 3.4), constrained_layout=True)
for k, r in runs.items():
    ax.plot([s for s, _ in r.evals], [a for _, a in r.evals], "o-", label=f"{k} (trainable {trainable[k]:,})")
ax.set_xlabel("step"); ax.set_ylabel("held-out greedy accuracy"); ax.set_ylim(0, 1)
ax.set_title(f"{cfg.model}: same completions per step"); ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ### Peak memory, measured

# %%
memory = {}
for label, (proc, out) in memory_jobs.items():
    _, err = proc.communicate()
    assert proc.returncode == 0, f"benchmarks/memory_check.py ({label}) failed:\n{err[-2000:]}"
    memory[label] = {r["case"]: r for r in json.loads(out.read_text())}
MiB = 2**20
print(f"{'case':<22}{'full fine-tuning':>24}{'LoRA':>24}   (measured, estimated: MiB)")
for case in memory.get("LoRA", {}):
    f, lo = memory["full fine-tuning"][case], memory["LoRA"][case]
    print(f"{case:<22}{f['measured_bytes'] / MiB:>12.1f}{f['estimated_bytes'] / MiB:>12.1f}"
          f"{lo['measured_bytes'] / MiB:>12.1f}{lo['estimated_bytes'] / MiB:>12.1f}")
peak = {case: {k: memory[k][case]["measured_bytes"] for k in memory} for case in memory.get("LoRA", {})}
if SMOKE:
    print("smoke mode: the memory measurements are skipped")

# %% [markdown]
# Read the `tiny` row honestly: **on a 0.9M-parameter model LoRA saves nothing, and its measured peak
# can come out higher than full fine-tuning's.** Its
# weights, gradients and AdamW state together are about 13 MiB; the activations and logits of
# 128 completions, and the allocator's own overhead, are larger than all of that, and peft's
# per-layer temporaries add a little. With glibc's default allocator LoRA's high-water mark can
# even come out *above* full fine-tuning's (`benchmarks/memory_check.py --return-freed` shows the
# effect of the allocator). On a real shape the parameters are many, and there LoRA's saving is
# the whole point: the 2-layer Qwen2-0.5B slice (full run only) holds a 136M-parameter embedding,
# and full fine-tuning keeps a float32 gradient and two AdamW moments for every one of them.
#
# The estimator's breakdown for the whole Qwen2.5-0.5B (the same shape with all 24 layers) at the
# sizes of the table in section 3, in bf16 on a GPU. Read which parts LoRA shrinks (gradients,
# AdamW's moments and scratch: one float32 number or more per *trainable* parameter) and which it
# cannot touch (the frozen weights, their bf16 copies, the activations, the logits):

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
EST = dict(P=8, G=8, prompt_len=256, completion_len=512, bf16=True, device="cuda")  # B = 64 completions a step
LORA_R = LORA["r"]

full_05b = estimate_memory(SHAPES["Qwen2.5-0.5B"], micro_batch=8, **EST)
lora_05b = estimate_memory(SHAPES["Qwen2.5-0.5B"], micro_batch=8, lora_r=LORA_R, **EST)
print(f"{'part (GiB), micro-batch 8':<28}{'full':>9}{'LoRA':>9}")
for part in full_05b:
    if part not in ("peak", "peak_at"):
        print(f"{part:<28}{full_05b[part] / GiB:>9.3f}{lora_05b[part] / GiB:>9.3f}")
print(f"{'peak':<28}{full_05b['peak'] / GiB:>9.3f}{lora_05b['peak'] / GiB:>9.3f}   "
      f"(at {full_05b['peak_at']} / {lora_05b['peak_at']})")

# %% [markdown]
# ## 3 · How much memory: common models on common GPUs
#
# The estimator (`grpo_kit.model.memory`) counts, for a Llama/Qwen2-style decoder and one GRPO step:
# the float32 master weights, a frozen reference copy when the KL term needs one (never with LoRA),
# gradients and AdamW's two moments for each trainable parameter, AdamW's scratch, the bf16 weight
# copies autocast makes, the activations autograd keeps for one micro-batch (counted per token and
# layer), the logits and log-softmax, and generation's key-value cache; the peak is the largest of
# sampling, the no-gradient forwards, the forward/backward and the optimizer step. It has been
# checked against the measured peak RSS of real steps on a CPU (`benchmarks/memory_check.py`,
# the rows above).
#
# **It does not count** the CUDA context and cuBLAS workspaces (some hundreds of MiB), the caching
# allocator's fragmentation, a vLLM engine sharing the GPU (its `gpu_memory_utilization` is yours to
# subtract), sharding across GPUs (DeepSpeed ZeRO, FSDP divide weights, gradients and optimizer
# state by the number of GPUs), quantised base weights (QLoRA), or other architectures (mixture of
# experts, sliding-window attention). So we keep 10% of each card free, a rule of thumb rather than
# a measurement.
#
# The settings: P = 8 prompts x G = 8 completions, prompts of 256 tokens and completions of 512,
# bf16 autocast with float32 master weights, no KL reference (`beta = 0`), LoRA r = 8 on every
# projection. The cell is the largest micro-batch (rows per forward/backward, a divisor of
# B = 64; `suggest_micro_batch`) that fits, or "-" when not even one row does.

# %%
GPUS = {"24 GB": 24, "40 GB": 40, "80 GB": 80, "141 GB": 141}  # RTX 4090/L4-class, A100 40GB, A100/H100 80GB, H200
HEADROOM = 0.9
B = EST["P"] * EST["G"]
sizes = dict(P=EST["P"], G=EST["G"], prompt_len=EST["prompt_len"], completion_len=EST["completion_len"])
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
# micro-batch: float32 weights, gradient and AdamW's two moments are 16 bytes a parameter (113 GiB
# for Qwen2.5-7B), and AdamW's step adds a float32 scratch copy. That is where sharding across
# GPUs comes in (DeepSpeed ZeRO, section 4). LoRA brings the same models onto one 80 GB card; most
# of what is left of its peak is the frozen base in float32 (28 GiB for 7.6B parameters) and the
# bf16 copy autocast makes of it. A base stored in bf16, as many LoRA recipes load it, needs less;
# the kit trains float32 weights, and the estimator counts what the kit does. Gradient checkpointing
# (`gradient_checkpointing=True`) trades a second forward for most of the activations; exercise 2
# tries it.
#
# ## 4 · Graduation: export, serve, hand over to TRL or verl
#
# ### `grpo-kit export`
# The LoRA run above wrote checkpoints to a run folder. `grpo-kit export` merges the adapter into the
# weights ($W + \frac{\alpha}{r}BA$) and writes a folder with the tokenizer and a
# `generation_config.json` that samples as the run did; it prints the command that serves it.

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

# %%
from transformers import AutoModelForCausalLM, AutoTokenizer

device = pick_device(cfg.device)
exported = AutoModelForCausalLM.from_pretrained(export_dir).to(device).eval()
exported_tok = AutoTokenizer.from_pretrained(export_dir)
exported_tok.padding_side = "left"                            # generation appends on the right
shown = [render_prompt(exported_tok, it["prompt"]) for it in chat_items(check_items[:4], exported_tok, cfg.chat_template)]
batch = exported_tok(shown, return_tensors="pt", padding=True).to(device)
torch.manual_seed(SEED)
with torch.no_grad():
    out = exported.generate(**batch, generation_config=exported.generation_config)  # samples as the run did
for p_, row in zip(check_items[:4], out):
    print(f"{p_['prompt']!r:<10} sampled {exported_tok.decode(row[batch['input_ids'].shape[1]:], skip_special_tokens=True)!r}"
          f"   (correct {p_.get('completion', p_['answer'])!r})")
lora_run = runs["LoRA"]
acc_lora_policy = greedy_accuracy(lora_run.policy, lora_run.tokenizer, lora_run.eval_items)
acc_exported = greedy_accuracy(exported, exported_tok, lora_run.eval_items)
print(f"\ngreedy held-out accuracy: the LoRA policy {acc_lora_policy:.1%}, the exported (merged) model {acc_exported:.1%}")

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


cfg_lora = configs["LoRA"]
trl_args = trl_kwargs(cfg_lora)
verl_overrides = verl_overrides(cfg_lora)
display(Markdown(md_table(trl_args, "trl.GRPOConfig argument", "value")))
print("peft_config (TRL's GRPOTrainer(peft_config=...)):", peft_config(cfg_lora.lora))
display(Markdown(md_table(verl_overrides, "verl override", "value")))
if not any("lora" in k for k in verl_overrides):
    print(f"verl_overrides() carries no LoRA setting: with verl add actor_rollout_ref.model.lora_rank={LORA['r']} "
          f"actor_rollout_ref.model.lora_alpha={LORA['alpha']} (its target_modules default is all linear layers)")

# %% [markdown]
# ### Many GPUs: `accelerate launch`
# With a YAML of this config, the same run goes to TRL on 8 GPUs with DeepSpeed ZeRO-2 (the config
# files are in `configs/`; ZeRO-3 also shards the weights, and `--trl-arg use_vllm=true` generates
# with vLLM; [Graduating to many GPUs](../docs/graduating.md) shows those variants). We print the command and do not run it here.

# %%
config_file = WORK / "config.yaml"
config_file.write_text(cfg_lora.to_yaml())
print(f"accelerate launch --config_file configs/deepspeed_zero2.yaml -m grpo_kit.cli train --engine trl "
      f"--config {config_file.name} --out runs/big")

# %% [markdown]
# On one CPU, two steps of the same config through TRL's trainer (full run only) write the kit's
# `history.jsonl`, which the kit's plotting reads like any other run:

# %%
trl_history = []
if not SMOKE:
    trl_cfg = WORK / "trl.yaml"
    trl_cfg.write_text(cfg_lora.replace(steps=2, eval_every=0, eval_size=50).to_yaml())
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
# In smoke mode (and in the full run): the prompt is rendered as the template mode says; the reward
# functions score the examples as worked out by hand; the format reward moves no advantage on the
# sums; the saved model loads by path with the same weights; both runs sampled the same number of
# completions; the estimated parameter counts match the published
# ones within 1%, every suggested micro-batch fits while the next larger one does not, and the
# table reads as the text says (full fine-tuning of 7-8B fits no single card, LoRA fits 80 GB); the
# export loads and scores what the LoRA policy scores. **Only the full run** checks that both LoRA
# and full fine-tuning raise held-out accuracy by at least 20 points in 300 steps, that LoRA's
# peak on the Qwen2-0.5B slice is less than half of full fine-tuning's, and that on the tiny model
# it saves less than 20% (both measured); and that TRL's 2 steps left a history.

# %%
gsm8k_expected = [[1, 1], [0, 1], [1, 0]]            # right & formatted, wrong & formatted, right & unformatted
sum_expected = [[1, 0], [0, 0]]                      # the sum as the task writes it; reversed (the usual order)
record("prompt_has_template", has_template)
record("chat_prompt_ends_with_assistant_turn", seen_chat.endswith("<|im_start|>assistant\n"))
record("gsm8k_example_scores", gsm8k_scores.tolist())
record("sum_example_scores", sum_scores.tolist())
record("format_reward_paid_on_sums", format_paid)
record("saved_model_same_weights", same_weights)
record("saved_model_accuracy", [acc_original, acc_reloaded])
record("completions", completions)
record("base_accuracy", {k: a[0] for k, a in accuracy.items()})
record("final_accuracy", {k: a[1] for k, a in accuracy.items()})
record("trainable_parameters", trainable)
record("train_seconds", seconds)
record("peak_memory_bytes", peak)
record("estimated_memory_bytes", {c: {k: memory[k][c]["estimated_bytes"] for k in memory} for c in peak})
record("estimate_params", {n: parameter_count(model_shape(s)) for n, s in SHAPES.items()})
record("largest_micro_batch", {f"{n} {m} {g}": table[n, m, g] for n, m, g in table})
record("min_peak_gib", {f"{n} {m}": min_peak[n, m] / GiB for n, m in min_peak})
record("exported_accuracy", acc_exported)
record("lora_policy_accuracy", acc_lora_policy)
record("vllm_command", vllm_line)
record("trl_history_steps", len(trl_history))

assert (seen == item["prompt"]) == (not has_template), "the prompt was rendered against the chat_template mode"
assert seen_chat.endswith("<|im_start|>assistant\n") or has_template
assert gsm8k_scores.tolist() == gsm8k_expected and sum_scores.tolist() == sum_expected, (gsm8k_scores, sum_scores)
if TASK == "add2":
    assert format_paid == 0 and torch.equal(adv_both, adv_math), "the format reward changed an advantage on the sums"
assert same_weights and acc_original == acc_reloaded
assert len(set(completions.values())) == 1 or stopped_early, f"the two runs sampled different numbers of completions: {completions}"
for n, want in PUBLISHED_PARAMS.items():
    got = parameter_count(model_shape(SHAPES[n]))
    assert abs(got / want - 1) < 0.01, f"{n}: the written-out shape has {got:,} parameters, published {want:,.0f}"
for (n, mode, gpu), b in table.items():
    kw = dict(bf16=True, device="cuda", **({"lora_r": LORA_R} if mode == "LoRA" else {}))
    budget = HEADROOM * GPUS[gpu] * GiB
    bigger = [d for d in range(b + 1 if b else 1, B + 1) if B % d == 0]
    assert b is None or estimate_memory(SHAPES[n], micro_batch=b, **sizes, **kw)["peak"] <= budget
    assert not bigger or estimate_memory(SHAPES[n], micro_batch=bigger[0], **sizes, **kw)["peak"] > budget
for n in ("Qwen2.5-7B", "Llama-3.1-8B"):  # the reading of section 3's table
    assert table[n, "full", "141 GB"] is None and table[n, "LoRA", "80 GB"] is not None, n
assert abs(acc_exported - acc_lora_policy) <= 1 / len(lora_run.eval_items) + 1e-9, (
    f"the exported model scores {acc_exported:.1%}, the LoRA policy {acc_lora_policy:.1%}")
assert all(v > 0 for case in peak.values() for v in case.values())
if SMOKE or stopped_early:
    print("the pipeline holds; the accuracy and memory claims need the full run (SMOKE=False, not stopped).")
else:
    for k, (base, final) in accuracy.items():
        assert final - base >= 0.20, f"{k}: held-out accuracy {base:.1%} -> {final:.1%} (claim: at least +20 points)"
    if "qwen2-0.5b-2layers" in peak:
        big = peak["qwen2-0.5b-2layers"]
        assert big["LoRA"] < 0.5 * big["full fine-tuning"], big
    tiny = peak["tiny"]
    assert tiny["LoRA"] > 0.8 * tiny["full fine-tuning"], f"LoRA saved more than 20% on the tiny model: {tiny}"
    assert len(trl_history) == 2 and all("reward" in m for m in trl_history)
    print("claims hold: " + "; ".join(f"{k} {a[0]:.1%} -> {a[1]:.1%}" for k, a in accuracy.items())
          + f"; peak memory on the Qwen2-0.5B slice {big['LoRA'] / MiB:.0f} MiB (LoRA) against "
          f"{big['full fine-tuning'] / MiB:.0f} MiB (full)")

# %% [markdown]
# ## Summary
# - The same `GRPOConfig` and reward functions train the tiny model and a real one; `MODEL`,
#   `DATASET` and `DEVICE` change, and the chat template is applied when the tokenizer has one.
# - A saved model loads by path, the same `from_pretrained` call a hub name takes.
# - LoRA trains adapters only; on a model this small it saves no memory (activations and logits
#   dominate), on a 0.5B-shaped slice it cuts the peak to less than half (both measured in the full run).
# - The memory estimator gives the largest micro-batch for a model on a GPU, and the same config
#   becomes TRL and verl settings when one machine is not enough.
#
# ## Questions
# 1. Which three parameters change between the tiny model and a real one, and what follows from them?
# 2. Why does LoRA save almost nothing on the tiny model but more than half on the Qwen2-0.5B slice?
# 3. The estimator says full fine-tuning of a 7B model fits no single 141 GB card. Which part of its
#    memory would you shard first, and why does the peak not fall in proportion?
# 4. After 20 steps on a real model the completion barely changed. Is the pipeline broken?
#
# <details><summary>Answers</summary>
#
# 1. `MODEL`, `DATASET` and `DEVICE`; the held-out split, the completion length, the learning rates
#    and the chat template follow from them.
# 2. LoRA removes the gradients and AdamW state of the frozen weights. On the tiny model those are
#    a few MiB against activations and logits; on the slice they are most of the memory.
# 3. AdamW's two moments (twice the weights in fp32); the peak is the largest of several moments
#    (forward/backward, the optimizer step), and the activations do not shrink with sharding.
# 4. Not necessarily: at the recipe's learning rate 20 steps move a real model little; the loss being
#    finite and the run finishing is what the cell checks. A gain needs a real run.
# </details>
#
# ## Exercises
# 1. Section 3's Qwen2.5-7B rows: how many 80 GB GPUs (90% usable) would full fine-tuning need at
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
shutil.rmtree(WORK, ignore_errors=True)  # the scratch folder: the saved model, the runs, the export (copy it first to keep it)
