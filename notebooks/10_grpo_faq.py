# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · GRPO FAQ: ten questions users ask, each reproduced on the tiny model
#
# **The question.** What do GRPO users ask most, and what is the answer to each, reproduced?
#
# **What you will learn.** The ten questions that come up again and again when people train with
# GRPO (in TRL, verl, Unsloth or their own loop), each one reproduced on the kit's tiny model
# (a 0.87M-parameter Llama that half-knows 2-digit addition), answered in plain words, and checked
# by an `assert`. Where a saved run history already holds the answer, the notebook reads it instead
# of training again. Each question ends with a link to the notebook of the series that teaches it.
#
# **Time:** about 25 s on 2 CPU cores, full run and `SMOKE=True` alike (measured on 2026-12-06 with
# `pytest tests/notebooks/test_notebook_faq.py`; smoke mode runs shorter live runs on one thread).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: shorter runs (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEED = 0
THREADS = 2

# %%
import itertools
import tempfile
from pathlib import Path

import torch
from grpo_kit import ConfigError, GRPOConfig, RunFolderError, setup, train
from grpo_kit.data import DATASETS_DIR
from grpo_kit.eval import diagnose, read_history, report, series
from grpo_kit.loop import resume_run
from grpo_kit.model import estimate_memory, suggest_micro_batch
from grpo_kit.view import record, smoke_banner

THREADS = 1 if SMOKE else THREADS  # smoke runs share the cores with other tests
STEPS = 3 if SMOKE else 20          # steps of the short live runs
RESUME_STEPS = 4 if SMOKE else 8    # steps of the straight run in question 10
DATA = DATASETS_DIR.parent / "tests" / "data"  # the saved run histories of the repository
torch.manual_seed(SEED)
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# one small config for every live run: 8 prompts x 8 completions per step, no evaluation, CPU
BASE = GRPOConfig(steps=STEPS, num_prompts=8, num_generations=8, eval_every=0, eval_size=20, checkpoint_every=0,
                  threads=THREADS, device="cpu", diagnose_every=0, seed=SEED)


def weights(run):
    return {k: v.detach().clone() for k, v in run.policy.state_dict().items()}


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def saved(name):
    return read_history(DATA / f"failure_{name}.jsonl")


# %% [markdown]
# ## 1. "The loss is 0 (or ~0). Is training broken?"
#
# No. With one update per batch (`num_iterations=1`) the ratio ρ is exactly 1 when the gradient is
# taken, and the advantages A of a group are its rewards minus their mean, so they sum to zero. The
# loss is then about −mean(A), which is about 0. Its *gradient* is not 0: it is Σ A ∇log π, which
# pushes up the completions with A > 0 and down the others. Watch `grad_norm` and the reward, not
# the loss.

# %%
run = setup(BASE)
before = weights(run)
h1 = list(train(BASE, run))
max_abs_loss = max(abs(m["loss"]) for m in h1)
min_grad = min(m["grad_norm"] for m in h1)
moved = not same(before, weights(run))
for m in h1:
    print(f"step {m['step']:>2}  loss {m['loss']:+.5f}  grad_norm {m['grad_norm']:.3f}  reward {m['reward']:.3f}")
healthy = read_history(DATA / "healthy_seed0.jsonl")  # a saved 500-step run of the default config
reward_course = [v for _, v in series(healthy, "reward")]
first20, last20 = sum(reward_course[:20]) / 20, sum(reward_course[-20:]) / 20
print(f"largest |loss| {max_abs_loss:.5f}, smallest grad_norm {min_grad:.3f}, weights changed: {moved}")
print(f"saved 500-step run: mean reward of the first 20 steps {first20:.3f}, of the last 20 {last20:.3f}")
assert max_abs_loss < 0.05 and min_grad > 0 and moved
assert last20 > first20 + 0.2
record("faq_loss", {"max_abs_loss": max_abs_loss, "min_grad_norm": min_grad, "moved": moved,
                    "reward_first20": first20, "reward_last20": last20})

# %% [markdown]
# Taught in [00 · Quickstart](00_quickstart.ipynb) (the loss as an equation, in the step by hand) and
# [02 · The GRPO loss](02_the_grpo_loss.ipynb) (with one update per batch ρ = 1 and the clip never acts).
#
# ## 2. "The reward does not go up."
#
# First check whether there is anything to learn from. GRPO learns only from groups whose completions
# got *different* rewards: if every completion of a group is wrong, every A in it is 0. On a task
# too hard for the model (3-digit sums for a model that half-knows 2-digit ones) almost every group
# is all wrong, and the reward stays flat. The saved history of exactly that run shows it, and
# `diagnose` names it:

# %%
hard = saved("zero_variance_stall_hard")
hard_findings = diagnose(hard)
hard_reward = [v for _, v in series(hard, "reward")]
hard_zero = [v for _, v in series(hard, "frac_reward_zero_std")]
print(f"{len(hard)} steps: largest reward {max(hard_reward):.4f}, "
      f"mean share of zero-std groups {sum(hard_zero) / len(hard_zero):.3f}")
print(report(hard_findings))
assert max(hard_reward) < 0.05 and hard_findings[0].kind == "zero_variance_stall"
record("faq_flat_reward", {"max_reward": max(hard_reward), "first_finding": hard_findings[0].kind})

# %% [markdown]
# Taught in [04 · Curriculum group sizes](04_curriculum_group_sizes.ipynb).
#
# ## 3. "`frac_reward_zero_std` is 1."
#
# It is the share of groups whose G rewards are all equal (the kit logs it under the same name as
# TRL). At 1, every advantage is 0 and the gradient is exactly 0 (with β = 0): the step does
# nothing. Reproduced live on the 3-digit task, then fixed with a denser reward (partial credit
# for each right digit, `digit_credit`), which gives the groups a spread again:

# %%
hard_cfg = BASE.replace(task="add3", steps=2)
h_hard = list(train(hard_cfg, setup(hard_cfg)))
dense_cfg = hard_cfg.replace(reward_funcs=["grpo_kit.lab.failures:digit_credit"])
h_dense = list(train(dense_cfg, setup(dense_cfg)))
for label, h in (("right/wrong reward", h_hard), ("partial credit", h_dense)):
    for m in h:
        print(f"{label:<19} step {m['step']}  frac_reward_zero_std {m['frac_reward_zero_std']:.3f}  "
              f"grad_norm {m['grad_norm']:.3f}")
assert all(m["frac_reward_zero_std"] == 1.0 and m["grad_norm"] == 0.0 for m in h_hard)
assert all(m["frac_reward_zero_std"] < 0.5 and m["grad_norm"] > 0 for m in h_dense)
record("faq_zero_std", {"hard": [m["frac_reward_zero_std"] for m in h_hard],
                        "dense": [m["frac_reward_zero_std"] for m in h_dense]})

# %% [markdown]
# Other fixes: an easier task or a curriculum, more completions per group (a larger G makes an
# all-wrong group rarer), or dynamic sampling (`dynamic_sampling=True` drops all-equal groups).
# Taught in [04 · Curriculum group sizes](04_curriculum_group_sizes.ipynb) and
# [04b · Keeping groups informative](04b_informative_groups.ipynb).
#
# ## 4. "Every completion is truncated at the max length."
#
# A completion that reaches `max_completion_length` without an end token is truncated; the share
# of them is `completions/clipped_ratio`. If it sits at 1, the limit is too short for the answers
# (or the model learned to ramble). Reproduced with a limit of 2 tokens, where a sum and its end
# token need 3 or 4:

# %%
short_cfg = BASE.replace(max_completion_length=2, steps=1)
short = list(train(short_cfg, setup(short_cfg)))[-1]
default_clipped = max(m["completions/clipped_ratio"] for m in h1)
print(f"max_completion_length=2: clipped_ratio {short['completions/clipped_ratio']:.3f}; "
      f"default ({BASE.max_completion_length}): at most {default_clipped:.3f} over question 1's run")
assert short["completions/clipped_ratio"] == 1.0 and default_clipped < 0.1
record("faq_truncated", {"short": short["completions/clipped_ratio"], "default": default_clipped})

# %% [markdown]
# Taught in [06 · Failure lab II](06_failure_reward_spikes_and_hacking.ipynb).
#
# ## 5. "Out of memory."
#
# A GRPO step holds P·G completions, and the logits and activations grow with their length. The
# kit's estimator (`estimate_memory`, `suggest_micro_batch`) gives the largest micro-batch whose
# estimated peak fits a memory budget. Here the budget is what the whole batch of 128 needs at the
# default 8 completion tokens; as the completions grow, the micro-batch that fits shrinks (None:
# not even one row fits):

# %%
tiny_config = run.policy.config
budget = estimate_memory(tiny_config, P=16, G=8, prompt_len=8, completion_len=8)["peak"]
fits = {L: suggest_micro_batch(budget, tiny_config, P=16, G=8, prompt_len=8, completion_len=L)
        for L in (8, 32, 64, 128)}
print(f"budget {budget / 2**20:.1f} MiB")
for L, b in fits.items():
    print(f"completion length {L:>4}: largest micro-batch {b}")
sizes = [b or 0 for b in fits.values()]
assert fits[8] == 128 and all(a >= b for a, b in itertools.pairwise(sizes)) and sizes[-1] < sizes[0]
record("faq_memory", {str(L): b for L, b in fits.items()})

# %% [markdown]
# Taught in [09b · Graduating: memory, export and the big engines](09b_memory_export_and_engines.ipynb)
# (what LoRA shrinks, and what it cannot, in [09](09_from_toy_to_real.ipynb)).
#
# ## 6. "Batch size vs number of generations?"
#
# In the kit, a step draws `num_prompts` prompts (P) and samples `num_generations` completions (G)
# for each, so it generates P·G completions (`cfg.batch_size`). TRL counts the other way: the
# generation batch is in completions and must be divisible by `num_generations`, so that it splits
# into whole groups. The kit's `samples_per_step` follows the same rule:

# %%
print(f"P={BASE.num_prompts}, G={BASE.num_generations}: batch_size {BASE.batch_size}, "
      f"completions generated per step {h1[0]['completions_generated']:.0f}")
try:
    GRPOConfig(num_generations=8, samples_per_step=60).validate()
    refused = None
except ConfigError as e:
    refused = str(e)
print("samples_per_step=60 with G=8:", refused)
assert BASE.batch_size == BASE.num_prompts * BASE.num_generations == h1[0]["completions_generated"]
assert refused is not None and "multiple of num_generations" in refused
record("faq_batch", {"batch_size": BASE.batch_size, "refused": refused})

# %% [markdown]
# Taught in [04 · Curriculum group sizes](04_curriculum_group_sizes.ipynb).
#
# ## 7. "Entropy collapses (or explodes)."
#
# Entropy falling to near 0 means the policy has settled on one completion per prompt: the groups
# become copies, their rewards become equal, and learning stops. The usual cause is fitting each
# batch too hard (many updates per batch, a low sampling temperature, a high learning rate). The
# failure lab's saved run of eight updates per batch at temperature 0.5:

# %%
collapse = saved("entropy_collapse")
collapse_findings = diagnose(collapse)
ent = [v for _, v in series(collapse, "entropy")]
print(f"entropy: first step {ent[0]:.3f}, last step {ent[-1]:.3f}")
print(report(collapse_findings))
assert collapse_findings[0].kind == "entropy_collapse" and ent[-1] < ent[0]
record("faq_entropy", {"first": ent[0], "last": ent[-1], "first_finding": collapse_findings[0].kind})

# %% [markdown]
# The fix measured in the lab: one update per batch and a decaying learning rate. Taught in
# [05 · Failure lab I](05_failure_collapse.ipynb).
#
# **Entropy that explodes** is the other direction: the policy spreads its probability over more
# and more tokens, moving away from what the base model wrote (the KL to the reference climbs with
# it) and its answers degrade. The lab's saved run with a learning rate of 1e-3, constant, and no
# KL term shows it:

# %%
blowup = saved("kl_blowup")
blowup_ent = [v for _, v in series(blowup, "entropy")]
blowup_kl = [v for _, v in series(blowup, "kl")]
blowup_findings = diagnose(blowup)
print(f"entropy: first step {blowup_ent[0]:.3f}, highest {max(blowup_ent):.3f}; KL: highest {max(blowup_kl):.2f}")
print(report(blowup_findings))
assert max(blowup_ent) > 1.3 * blowup_ent[0] and blowup_findings[0].kind == "kl_blowup"
record("faq_entropy_explodes", {"first": blowup_ent[0], "max": max(blowup_ent), "first_finding": blowup_findings[0].kind})

# %% [markdown]
# `diagnose` names the cause, not the symptom: the KL blow-up. The fix measured in the lab is the
# default learning rate with a decay and a KL penalty (05).
#
# ## 8. "Late gibberish and grad-norm spikes."
#
# Two saved runs. A judge that rarely pays a jackpot of 200, with no reward scaling and gradient
# clipping off, makes `grad_norm` spike; a constant learning rate a third above the default lets
# held-out accuracy climb, then fall late in the run. `diagnose` names both:

# %%
spikes, late = saved("grad_explosion"), saved("late_decline")
spike_findings, late_findings = diagnose(spikes), diagnose(late)
grads = [v for _, v in series(spikes, "grad_norm")]
print(f"grad_explosion: grad_norm median {sorted(grads)[len(grads) // 2]:.2f}, largest {max(grads):.1f}")
print(report(spike_findings))
print(report(late_findings))
assert spike_findings[0].kind == "grad_explosion" and late_findings[0].kind == "late_decline"
record("faq_late", {"grad_explosion": spike_findings[0].kind, "late_decline": late_findings[0].kind,
                    "max_grad_norm": max(grads)})

# %% [markdown]
# Fixes: group-scaled rewards and gradient clipping (`max_grad_norm=1.0`, the default) for the
# spikes; a decaying learning rate for the late decline. The spikes, and what group scaling does to
# a jackpot, are taught in [06 · Failure lab II](06_failure_reward_spikes_and_hacking.ipynb); the
# cosine decay is measured as a fix in [05 · Failure lab I](05_failure_collapse.ipynb). The late
# decline is what "late gibberish" looks like in the metrics: held-out accuracy falls late while the
# run goes on. It has no notebook of its own: the two findings above are all the series shows of it,
# and the replay buffer often advised for it is not tested here ([07](07_troubleshooting_clinic.ipynb),
# row 3, gives the experiment).
#
# ## 9. "NaN loss."
#
# A non-finite loss or gradient must not reach the weights: one NaN step would make every later
# step NaN. The kit skips such an update (weights and optimizer untouched), logs `skipped` = 1,
# and stops the run after `max_consecutive_skips` skipped updates in a row. Reproduced by making the
# training forward pass return NaN logits:

# %%
nan_cfg = BASE.replace(steps=1)
nan_run = setup(nan_cfg)
before = weights(nan_run)
hook = nan_run.policy.lm_head.register_forward_hook(  # NaN logits whenever gradients are on
    lambda module, inputs, out: out * float("nan") if torch.is_grad_enabled() else out)
nan_step = list(train(nan_cfg, nan_run))[-1]
hook.remove()
unchanged = same(before, weights(nan_run))
print(f"loss {nan_step['loss']}, skipped {nan_step['skipped']:.0f}, weights unchanged: {unchanged}, "
      f"max_consecutive_skips {nan_cfg.max_consecutive_skips}")
assert nan_step["loss"] != nan_step["loss"] and nan_step["skipped"] == 1.0 and unchanged
record("faq_nan", {"skipped": nan_step["skipped"], "unchanged": unchanged})

# %% [markdown]
# No other notebook covers this: the cell above is the series' demonstration. On a real model in
# bf16 the usual causes are an overflow in the loss or a reward function that returns NaN; for the
# latter the kit stops by default (`reward_error_policy="raise"`) with an error naming the function
# and the sample.
#
# ## 10. "A resume that does not continue."
#
# A resumed run continues only if it restores everything the straight run carries: weights, the
# optimizer's moments, the learning-rate schedule, the step and every random generator. The kit's
# checkpoints hold all of these; `resume_run` loads the latest one. Below: N steps straight against
# N/2 steps, a stop, and a resume for the rest, in a temporary folder. A new run pointed at a folder
# that holds another run's checkpoints is refused rather than silently starting over.

# %%
res_cfg = BASE.replace(steps=RESUME_STEPS, checkpoint_every=1)
straight = setup(res_cfg)
list(train(res_cfg, straight))
folder = Path(tempfile.mkdtemp(prefix="grpo-kit-10-"))
first = setup(res_cfg)
for m in train(res_cfg, first, out_dir=folder):
    if m["step"] == RESUME_STEPS // 2:
        break  # stop half-way: the checkpoint of this step is on disk
try:
    list(train(res_cfg, setup(res_cfg), out_dir=folder))  # a fresh run, no resume
    refused_folder = None
except RunFolderError as e:
    refused_folder = str(e)
resumed = setup(res_cfg)
ck = resume_run(resumed, folder)
list(train(res_cfg, resumed, out_dir=folder))
identical = same(weights(straight), weights(resumed))
print(f"resumed from {ck.name}; fresh run in that folder refused: {refused_folder is not None}")
print(f"{RESUME_STEPS} steps straight == {RESUME_STEPS // 2} + resume {RESUME_STEPS // 2}, bit for bit: {identical}")
assert ck.name == f"step-{RESUME_STEPS // 2:06d}" and refused_folder is not None and identical
record("faq_resume", {"identical": identical, "checkpoint": ck.name})

# %% [markdown]
# Bit for bit holds here because both runs use float32 on the same CPU; on a GPU, expect equality
# up to the non-determinism of its kernels. No other notebook covers checkpoints; from the command
# line, `grpo-kit train --config ... --out DIR --resume` continues a run from the latest checkpoint
# in `DIR`.
#
# ## Summary
#
# - With one update per batch the loss was within 0.05 of 0 at every step while `grad_norm` was
#   above 0 and the weights changed; the saved 500-step run's reward rose all the same.
# - An all-wrong task gave `frac_reward_zero_std` = 1 and a gradient of exactly 0; a partial-credit
#   reward brought the share under one half and the gradient back.
# - A too-short `max_completion_length` truncated every completion (`completions/clipped_ratio` = 1),
#   and the memory estimator's largest micro-batch shrank as completions grew.
# - `diagnose` named the saved entropy collapse, gradient explosion and late decline as their first
#   finding.
# - A NaN update was skipped with the weights untouched, and N/2 steps plus a resume gave the same
#   weights as N steps straight.
#
# ## Questions
#
# 1. Predict `loss` at the first step of a run with `num_iterations=1` when every group has
#    exactly one right completion. Why is the update not zero?
# 2. A run logs `frac_reward_zero_std` = 0.9. What share of its groups give a gradient, and name
#    two ways to raise it.
# 3. `completions/clipped_ratio` climbs from 0 to 1 during a run while `max_completion_length`
#    is unchanged. What has changed, and which saved failure of the lab shows it?
# 4. Why does a resume that restores the weights and the optimizer, but not the random
#    generators, not continue the straight run?
#
# <details><summary>Answers</summary>
#
# 1. About 0: ρ = 1 and the advantages of each group sum to 0, so the token-weighted mean of −ρA
#    is close to 0. The gradient is Σ A ∇log π, which raises the right completion and lowers the
#    others.
# 2. One in ten. An easier task or a curriculum, a partial-credit reward, more completions per
#    group, or dynamic sampling.
# 3. The policy writes longer completions (it learned that length pays, or rambles); the failure
#    lab's `length_blowup` (`grpo_kit.lab.failures.FAILURES["length_blowup"]`, saved as
#    `tests/data/failure_length_blowup.jsonl`).
# 4. It samples other prompts and other completions from step N/2 on, so it takes other updates:
#    a valid run, but not the same one.
#
# </details>
#
# ## Exercises
#
# 1. Rerun question 3 with `num_generations=32` and the right/wrong reward. Does a larger group
#    find a right 3-digit sum often enough to lower `frac_reward_zero_std`?
# 2. **Code:** from the saved `zero_variance_stall_easy` history, show that a reward the model
#    already earns on every sample also stalls (every group all *right*), and that `diagnose` names
#    it the same way.

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 2.**

# %% jupyter={"source_hidden": true}
easy = saved("zero_variance_stall_easy")
easy_findings = diagnose(easy)
easy_reward = [v for _, v in series(easy, "reward")]
print(f"reward: first step {easy_reward[0]:.3f}, last step {easy_reward[-1]:.3f}")
print(report(easy_findings))
assert min(easy_reward) > 0.9 and easy_findings[0].kind == "zero_variance_stall"

# %% [markdown]
# **Next:** [11 · Capstone](11_capstone.ipynb): diagnose a broken run and fix it within a budget.
