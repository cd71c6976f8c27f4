# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04b · Keeping groups informative: dynamic sampling, replay and temperature mixes
#
# **The question.** When many groups carry no learning signal, does drawing more groups, replaying stored ones or mixing temperatures within a group beat plain GRPO at the same number of generated completions?
#
# **What you will learn**
# 1. Three strategies you will meet for groups whose rewards are all equal (advantage 0, nothing
#    learned, [04](04_curriculum_group_sizes.ipynb) section 1): DAPO's dynamic sampling, a replay
#    buffer of informative groups, and a mix of sampling temperatures inside a group; each is one
#    config field.
# 2. What each costs, counted in the unit you pay: generated completions. Dynamic sampling pays
#    for its extra rounds with updates; replay reuses old groups and needs the importance ratio ρ
#    of [00b](00b_from_reinforce_to_grpo.ipynb) to do so.
# 3. How they compare with plain GRPO at the same budget, over 3 seeds, read with the 2-SE rule.
#
# **Time**: about 2 minutes with the full parameters (1.8 min measured on 2026-12-07 with `pytest -m
# full` while other jobs shared the 2 CPU cores; 12 training runs of 8192 completions each);
# `SMOKE=True` runs every cell in about 20 s.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: tiny budgets, every cell still runs.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEEDS = [0, 1, 2]
SAMPLES_PER_STEP = 128      # B: completions per step; P = B / G = 16 prompts of G = 8
BUDGET = 8192               # generated completions per run (64 steps of 128 for plain GRPO)
EVAL_EVERY = 16             # steps between held-out evaluations
EVAL_SIZE = 200             # held-out problems per evaluation
THREADS = 2

# %%
import copy
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from grpo_kit import GRPOConfig, load_model, setup, train
from grpo_kit.eval import arm_summary, arm_table_rows, findings_lines
from grpo_kit.lab import train_arms
from grpo_kit.loop import replay
from grpo_kit.model import row_temperatures, sample_groups
from grpo_kit.view import Dashboard, record, smoke_banner
from IPython.display import Markdown, display

if SMOKE:
    SEEDS, SAMPLES_PER_STEP, BUDGET, EVAL_EVERY, EVAL_SIZE, THREADS = [0], 32, 96, 2, 20, 1
T0 = time.time()
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)
base_policy, tok = load_model("tiny")  # loaded once; each run trains its own copy

# %% [markdown]
# ## 1. Three answers to dead groups
#
# A group whose G rewards are all equal gets advantage 0 for every completion: its completions
# were paid for and teach nothing. Three strategies you will meet:
#
# * **Dynamic sampling** (DAPO, Yu et al. 2025, arXiv 2503.14476, section 3.2): a step draws rounds
#   of P prompts and keeps only the groups with unequal rewards, until it has P of them or has drawn
#   `dynamic_max_rounds` rounds (then it tops up with dead groups). Every round is paid for out of
#   the budget, so at an equal budget it takes fewer updates.
# * **Replay** (in the spirit of RePO, Li et al. 2025, arXiv 2506.09340, and the prioritised replay
#   of Schaul et al. 2016): informative groups are stored with the log-probabilities the policy gave
#   them when they were sampled (the *behaviour* policy); later steps train on some of them again.
#   Those completions come from an older policy, so the loss weights each token by the importance
#   ratio ρ = π_θ / π_behaviour and clips it, as PPO does for its own reused samples. A replayed
#   group costs nothing from the budget, so replay takes more updates.
# * **A temperature mix**: `temperature=[0.7, 0.7, 1.0, 1.2]` samples the rows of a group at
#   different temperatures (cycled over its G rows), to make a group's answers differ more. Each
#   row's log-probs in the loss are taken at its own temperature, so ρ compares like with like.
#
# First the temperature mix on the base model: 64 groups of eight completions for one prompt,
# counted by temperature.

# %%
temps = [0.7, 0.7, 1.0, 1.2]
ro = sample_groups(base_policy, tok, ["47+85="] * 64, 8, 8, temps, torch.Generator().manual_seed(0))
row_t = row_temperatures(temps, 64, 8, "cpu").squeeze(-1)  # (512,) the temperature of each row
distinct_frac = {}
for t in sorted(set(temps)):
    texts = [c for c, rt in zip(ro.completions, row_t.tolist()) if abs(rt - t) < 1e-6]
    distinct_frac[t] = len(set(texts)) / len(texts)
    print(f"T={t}: {len(set(texts))} distinct of {len(texts)} completions ({distinct_frac[t]:.0%}), e.g. {texts[:4]}")
record("distinct_fraction_by_temperature", {str(k): v for k, v in distinct_frac.items()})
assert distinct_frac[1.2] > distinct_frac[0.7], distinct_frac  # a hotter row gives more different answers

# %% [markdown]
# ## 2. Four arms at the same number of generated completions
#
# | name | config |
# |---|---|
# | `grpo` | G = 8, P = 16: plain GRPO, the reference |
# | `dynamic` | `dynamic_sampling=True`, at most 3 rounds of 16 prompts per step |
# | `replay` | `replay_fraction=0.25`: 4 of the 16 groups of a step replayed, at most 4 steps old |
# | `temperature mix` | `temperature=[0.7, 0.7, 1.0, 1.2]` |
#
# Every run stops at the first step that reaches `completion_budget` generated completions; the
# budget, not the step count, drives the cosine learning-rate decay. All runs feed one live dashboard.

# %%
ARMS = {
    "grpo": {},
    "dynamic": dict(dynamic_sampling=True, dynamic_max_rounds=3),
    "replay": dict(replay_fraction=0.25, replay_max_age=4),
    "temperature mix": dict(temperature=[0.7, 0.7, 1.0, 1.2]),
}
COMMON = dict(steps=100_000, completion_budget=BUDGET, samples_per_step=SAMPLES_PER_STEP,
              num_generations=8, num_prompts=SAMPLES_PER_STEP // 8, eval_every=EVAL_EVERY, eval_size=EVAL_SIZE,
              threads=THREADS, log_kl=False, checkpoint_every=0)
dash = Dashboard(total_steps=BUDGET // SAMPLES_PER_STEP, title="notebook 04b: arms at equal completions")
t_runs = time.time()
runs = train_arms(ARMS, SEEDS, COMMON, dash=dash, bases={"tiny": (base_policy, tok)})  # (arm, seed) -> run
dash.close()
print(f"{len(runs)} runs in {time.time() - t_runs:.0f} s")

# %% [markdown]
# ## 3. The table: final held-out accuracy at equal generated completions
#
# "vs grpo" is the difference of means to plain GRPO; an arm counts as **better** / **worse** only
# when that difference exceeds twice its standard error over seeds (`grpo_kit.eval.arm_summary`);
# otherwise "no clear difference". "steps" is the number of updates each arm took with the budget.

# %%
final = {n: [runs[n, s].evals[-1][1] for s in SEEDS] for n in ARMS}
base = {n: [runs[n, s].evals[0][1] for s in SEEDS] for n in ARMS}
REFERENCE = {n: "grpo" for n in ARMS}
summary = arm_summary(final, base, REFERENCE)
table = pd.DataFrame(arm_table_rows(summary, vs="vs grpo")).set_index("arm")
table["steps"] = [np.mean([runs[n, s].step for s in SEEDS]) for n in table.index]
table["spent"] = [np.mean([runs[n, s].history[-1]["completions_total"] for s in SEEDS]) for n in table.index]
display(table)
record("summary", summary)
record("steps", {n: float(table.loc[n, "steps"]) for n in ARMS})

findings = findings_lines(summary, REFERENCE, {"grpo": "plain GRPO, G = 8"}, smoke=SMOKE)
display(Markdown(findings))
record("findings_text", findings)

fig, axes = plt.subplots(1, 2, figsize=(13, 3.8), constrained_layout=True)
for name in ARMS:
    colour = dash.styles.variant_colour(name)
    for s in SEEDS:
        r = runs[name, s]
        at = {0: 0.0, **{m["step"]: m["completions_total"] for m in r.history}}
        axes[0].plot([at[st] for st, _ in r.evals], [a for _, a in r.evals], color=colour, alpha=0.7,
                     label=name if s == SEEDS[0] else None)
        axes[1].plot([m["completions_total"] for m in r.history], [m["frac_reward_zero_std"] for m in r.history],
                     color=colour, alpha=0.5, label=name if s == SEEDS[0] else None)
axes[0].set(title="held-out greedy accuracy, every seed", xlabel="completions generated")
axes[1].set(title="fraction of drawn groups with equal rewards", xlabel="completions generated")
axes[0].legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 4. What each strategy did, and what it cost
#
# Dynamic sampling: its rounds per step, and the share of trained groups that carry a signal
# against the share of drawn ones. Replay: how many groups a step replayed, how old they were, and
# their mean importance ratio before the update.

# %%
dyn = [m for s in SEEDS for m in runs["dynamic", s].history]
P = SAMPLES_PER_STEP // 8
print(f"dynamic: {np.mean([m['dynamic/rounds'] for m in dyn]):.2f} rounds per step on average; "
      f"{np.mean([m['dynamic/groups_kept'] for m in dyn]) / P:.0%} of trained groups with signal against "
      f"{1 - np.mean([m['frac_reward_zero_std'] for m in dyn]):.0%} of drawn groups")
rep = [m for s in SEEDS for m in runs["replay", s].history]
ratios = [m["replay/ratio_mean"] for m in rep if "replay/ratio_mean" in m]
print(f"replay: {np.mean([m['replay/groups'] for m in rep]):.2f} replayed groups per step, mean age "
      f"{np.mean([m['replay/mean_age'] for m in rep if m['replay/groups']] or [0]):.1f} steps, "
      f"mean importance ratio {np.mean(ratios) if ratios else float('nan'):.4f} "
      f"(range {min(ratios, default=float('nan')):.4f} to {max(ratios, default=float('nan')):.4f})")
for name in ARMS:
    spent_text = ", ".join(f"{runs[name, s].history[-1]['completions_total']:.0f}" for s in SEEDS)
    print(f"{name:<16} updates: {', '.join(str(runs[name, s].step) for s in SEEDS)};  completions generated: {spent_text}")

# Per step: whenever some drawn group was dead and some was not, dynamic sampling trains on a strictly
# larger share of groups with signal than it drew (it keeps the live ones and drops the dead ones).
mixed_steps = [m for m in dyn if 0 < m["frac_reward_zero_std"] < 1]
kept_beats_drawn = all(m["dynamic/groups_kept"] / P > 1 - m["frac_reward_zero_std"] for m in mixed_steps)
record("dynamic_kept_beats_drawn_every_step", kept_beats_drawn)
record("dynamic_mixed_steps", len(mixed_steps))
record("replayed_groups", float(sum(m["replay/groups"] for m in rep)))

# %% [markdown]
# ### Replay trains on what the buffer stored
#
# The importance ratio is only right if the behaviour log-probs are the ones the policy gave the
# completions when it sampled them, not log-probs recomputed later (then ρ would be 1 and the
# correction would do nothing). A short replay run checks it: we keep a copy of the policy before
# every step; each group the buffer stored must carry the log-probs of the copy that sampled it,
# and the policy at the end of the run gives them different ones.

# %%
cfg = GRPOConfig(**{**COMMON, "completion_budget": None, "eval_every": 0, "steps": 4}, **ARMS["replay"], seed=0)
check_run = setup(cfg, policy=copy.deepcopy(base_policy), tokenizer=tok)
sampler = {1: copy.deepcopy(check_run.policy)}  # step -> the policy that sampled that step's groups
seen = {}  # every group the buffer held after some step (a replayed group leaves the buffer)
for m in train(cfg, check_run):
    sampler[m["step"] + 1] = copy.deepcopy(check_run.policy)
    seen.update({id(e): e for e in check_run.steer.replay.groups})
gap_then = gap_now = 0.0
for e in seen.values():
    then, logp_stored, mask = replay.rescore(sampler[e["step"]], [e], cfg, tok.pad_token_id)  # (G, Tc) each
    now, _, _ = replay.rescore(check_run.policy, [e], cfg, tok.pad_token_id)
    gap_then = max(gap_then, ((then - logp_stored).abs() * mask).max().item())
    gap_now = max(gap_now, ((now - logp_stored).abs() * mask).max().item())
print(f"{len(seen)} groups stored over {cfg.steps} steps; largest |log-prob difference| to the stored ones: "
      f"{gap_then:.2e} under the policy that sampled them, {gap_now:.2e} under the policy after the run")
record("replay_stored_logp_gap", {"sampler": gap_then, "updated": gap_now})
# same weights, same tokens, a different batch around them: float32 differences only
assert seen and gap_then < 1e-4 and gap_now > 100 * max(gap_then, 1e-7), (gap_then, gap_now)

# %% [markdown]
# ## 5. What the runs support
#
# The checks below hold whatever the accuracies come out to be: plain GRPO and the temperature mix
# spend exactly the budget (B completions at every step), dynamic sampling and replay stop at the
# first step past it; dynamic sampling trains on a larger share of groups with signal than it draws
# at every step where that can differ; replay replays and takes more updates than plain GRPO,
# dynamic sampling fewer whenever it drew an extra round. Which strategy *helped* is read from the
# table, not asserted.

# %%
spent = {n: [runs[n, s].history[-1]["completions_total"] for s in SEEDS] for n in ARMS}
assert all(v == BUDGET for n in ("grpo", "temperature mix") for v in spent[n]), spent
assert all(BUDGET <= v < BUDGET + 3 * SAMPLES_PER_STEP for vs in spent.values() for v in vs), spent
assert kept_beats_drawn and (SMOKE or mixed_steps), len(mixed_steps)
assert sum(m["replay/groups"] for m in rep) > 0
assert all(runs["replay", s].step > runs["grpo", s].step for s in SEEDS)
assert all(runs["dynamic", s].step <= runs["grpo", s].step for s in SEEDS)
assert all(np.isfinite(m["loss"]) for r in runs.values() for m in r.history)
record("wall_seconds", time.time() - T0)
print(f"notebook ran in {time.time() - T0:.0f} s")

# %% [markdown]
# **Does a replay buffer cure late-training decline?** You will meet that advice too. This notebook
# tests replay only as one strategy at an equal budget, not against a provoked decline;
# [07](07_troubleshooting_clinic.ipynb) gives the experiment to run if you want that answer.
#
# ## Summary
# - Dynamic sampling, a replay buffer and a temperature mix are each one config field, and each
#   changes how many updates a budget of generated completions buys: dynamic sampling fewer (its
#   extra rounds are paid for), replay more (replayed groups are free).
# - Dynamic sampling trains on a larger share of groups with signal than it draws, at every step
#   where some drawn group was dead (asserted).
# - Replayed groups carry the log-probabilities of the policy that sampled them, and the loss weights
#   them by ρ = π_θ / π_behaviour (checked on a short run).
# - The answer to the question, at this budget: no. The findings above are written from your run; in
#   the full run we measured (2026-12-07, `pytest -m full`) none of the three differed from plain GRPO
#   by more than twice its standard error (dynamic sampling +1.2, replay −3.8, the temperature mix
#   +1.7 points), with half the updates for dynamic sampling and a third more for replay.
#
# ## Questions
# 1. A step of dynamic sampling drew 3 rounds. How many completions did it cost, and how many did it
#    train on?
# 2. Why does a replayed group need the importance ratio, and what would happen if the kit recomputed
#    its behaviour log-probs at the time of the replay?
# 3. At the same budget, why does `replay` take more updates than `grpo`?
# 4. Why are the log-probs of a row sampled at T = 1.2 taken at T = 1.2 in the loss, and not at 1.0?
#
# <details><summary>Answers</summary>
#
# 1. 3 × 16 × 8 = 384 completions generated, and it trained on 128 (16 groups of 8): the budget counts
#    every completion drawn, kept or not.
# 2. Its completions were sampled by an older policy; the ratio reweights them to estimate the current
#    policy's objective (00b, section 4) and the clip limits how far one update follows them.
#    Recomputed log-probs would give ρ = 1: the old samples would be treated as the current policy's
#    own, which they are not.
# 3. A replayed group is trained on again without being generated again: 4 of each step's 16 groups
#    cost nothing, so the budget of 8192 completions lasts more steps.
# 4. The row was drawn from the policy's distribution at T = 1.2; ρ compares the probability of the same
#    token under the same sampling distribution, before and after the update. Taken at 1.0, ρ would
#    differ from 1 before any update.
# </details>
#
# ## Exercises
#
# 1. Set `dynamic_max_rounds=1`: what do the `dynamic/*` metrics show, and how does the run differ from
#    `grpo`?
# 2. Raise `replay_max_age` to 16 and `replay_fraction` to 0.5: how far from 1 does
#    `replay/ratio_mean` move, and what does the clip do to those rows (`clip_ratio/region_mean`)?
# 3. **Code:** from `runs["dynamic", seed].history`, compute for each seed the completions the run spent
#    on groups it dropped (`dynamic/groups_drawn - dynamic/groups_kept`, times G), and check that the
#    completions it generated, step by step, add up to `completions_total` at the end.
# 4. Try `temperature=[1.0, 1.0, 1.0, 1.6]`: does one hot row per four raise the share of groups with
#    signal (`frac_reward_zero_std`) at the start of training?

# %% [markdown]
# The solution to 3 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 3: dropped groups times G; the per-step spend adds up to the run's total.
for s in SEEDS:
    h = runs["dynamic", s].history
    dropped = sum((m["dynamic/groups_drawn"] - m["dynamic/groups_kept"]) * 8 for m in h)
    print(f"seed {s}: {dropped:.0f} of {h[-1]['completions_total']:.0f} completions were in dropped groups")
    assert sum(m["completions_generated"] for m in h) == h[-1]["completions_total"]
    assert all(m["completions_generated"] == m["dynamic/rounds"] * SAMPLES_PER_STEP for m in h)
    assert 0 <= dropped < h[-1]["completions_total"]

# %% [markdown]
# Every field used here can also be set from YAML with `grpo-kit train --config`
# (`dynamic_sampling`, `replay_fraction`, `temperature`, `completion_budget`, ...).
#
# **Next:** [05 · Failure lab I](05_failure_collapse.ipynb): when training breaks: a collapse, a
# divergence and a sign error, each reproduced, detected and fixed.
