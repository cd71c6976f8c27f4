# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08b · Beyond one number per answer, II: process rewards and a critic
#
# **The question.** Does giving credit to each step of an answer, from a judge of the steps or from a learned critic, train the tiny model better than one reward for the whole answer?
#
# Plain GRPO gives every token of a completion the same advantage, computed from the final answer.
# Two ways to tell the tokens apart, each one config field (`advantage_estimator`):
#
# | estimator | what it uses | advantage | source |
# |---|---|---|---|
# | `process` | a score per *step* of each completion (`step_judge`) | step scores z-scored over the group's steps; token t gets the sum of the scores of the steps ending at or after t | process supervision, DeepSeekMath sec. 4.1.3 |
# | `hybrid_gae` | the reward and a value head V trained in the loop | A_t = w (r_i - mean_g r) + (1 - w) GAE_t, GAE_t = sum_l (γλ)^l δ_{t+l}, δ_t = r_t + γ V_{t+1} - V_t, where r_t is 0 on every token but the last, which gets the answer's reward | GAE (Schulman et al. 2016); the mix is a variant you will meet |
#
# **A critic first.** A critic, or value function V, predicts the reward a situation will lead to:
# here, from each prefix of a completion, the reward the finished answer will get. PPO trains one
# beside the policy and uses it as its baseline; GRPO drops it and uses the group's mean reward
# instead ([00b](00b_from_reinforce_to_grpo.ipynb), section 7, measures what that costs).
# `hybrid_gae` brings one back: a linear head on the policy's last hidden state, trained in the
# loop by regression on the returns. Its gift is a value per *token*: GAE turns the changes of V
# along an answer into per-token advantages, so the tokens where the prediction rose or fell get
# more credit or blame than the rest. A **process judge** needs no training: it scores each step
# of the answer by a rule.
#
# **What you will learn**
# 1. what a process judge gives in a group whose final answers are all wrong, where plain GRPO
#    gives nothing: by hand, then on real samples;
# 2. how both estimators compare with plain GRPO **at the same number of generated completions**,
#    over 3 seeds each, on the live dashboard, read with the 2-SE rule;
# 3. what the GAE mix weight w means once the two terms are on their own scales (slider).
#
# **Time**: 4.5 minutes headless with the full parameters (15 training runs, one thread; measured
# with `pytest -m full` on 2026-12-07); `SMOKE=True` runs every cell in about 10 s.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few steps per run (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEEDS = [0, 1, 2]
STEPS = 80                  # GRPO updates per run, the same for every variant
NUM_PROMPTS = 16            # P
NUM_GENERATIONS = 8         # G: every run generates STEPS * P * G completions
LEARNING_RATE = 1e-4        # every run (the add2s base collapses at 3e-4)
EVAL_EVERY = 20             # steps between held-out evaluations
EVAL_SIZE = 200             # held-out problems per evaluation
SAMPLE_PROMPTS = 64         # section 1: prompts sampled from the add2s base, G answers each
THREADS = 1                 # torch threads; on a shared 2-core machine one thread was far faster than two

# %%
import inspect
import math
import time

import ipywidgets as W
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from grpo_kit import load_model
from grpo_kit.core import compute_advantages, hybrid_gae, hybrid_gae_terms, process_advantages
from grpo_kit.data import get_task
from grpo_kit.eval import arm_summary, arm_table_rows, columns_of, findings_lines
from grpo_kit.lab import train_arms
from grpo_kit.loop import beyond_scalar
from grpo_kit.model import sample_groups
from grpo_kit.rewards import exact_answer
from grpo_kit.view import Dashboard, record, redraw_on_change, smoke_banner, smooth
from IPython.display import Markdown, display

if SMOKE:
    SEEDS, STEPS, NUM_PROMPTS, NUM_GENERATIONS, EVAL_EVERY, EVAL_SIZE, SAMPLE_PROMPTS = [0], 3, 4, 4, 3, 20, 16
T0 = time.time()
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. A process judge where plain GRPO has no signal
#
# Task `add2s` makes the model write the column sums before the answer (`47+85=` -> `12 13|231`:
# the sums of the units and of the tens, then the result with its digits reversed). The shipped
# step judge, `column_sums`, scores each column sum and the final answer as a step, 1 if right.
# Here is a group of four answers to `47+85=`, every final answer wrong, with 2, 1, 1 and 0 right
# column sums. `process_advantages` (the function the `process` estimator calls) turns the step
# scores into advantages per position; here a position is a character, since each step's end is a
# character position.

# %%
wrong_group = ["12 13|230", "12 14|230", "11 13|239", "10 10|200"]
steps_by_hand = [beyond_scalar.column_sum_steps("47+85=", t, scratchpad=True) for t in wrong_group]
for t, st in zip(wrong_group, steps_by_hand, strict=True):
    print(f"{t}: step scores {[sc for sc, _ in st]} (each step ends before character {[e for _, e in st]})")
step_r = torch.tensor([[sc for sc, _ in st] for st in steps_by_hand])            # (G, S) step scores
step_e = torch.tensor([[e - 1 for _, e in st] for st in steps_by_hand])          # (G, S) index of each step's last character
final_right = step_r[:, -1:].T                                                   # (1, G) the final answer's step
grpo_adv = compute_advantages(final_right, "group")                              # (1, G) plain GRPO
proc_adv = process_advantages(step_r, step_e, len(wrong_group[0]))              # (G, T) per character
print("plain GRPO advantages:", grpo_adv[0].tolist())
print("process advantage of each answer's first character:", [round(v, 3) for v in proc_adv[:, 0].tolist()])
assert final_right.sum() == 0 and (grpo_adv == 0).all()                          # no final answer right: no signal
assert (proc_adv[:, 0] != 0).all()                                               # ... the process judge still has one
assert proc_adv[0, 0] > proc_adv[1, 0] > proc_adv[3, 0] and proc_adv[2, 0] > proc_adv[3, 0]  # more right steps, more credit
record("process_by_hand", {"grpo": grpo_adv[0].tolist(), "process_first_token": proc_adv[:, 0].tolist()})

# %% [markdown]
# Now on real samples: the add2s base answers `SAMPLE_PROMPTS` training prompts G times each. In a
# group whose final answers all score the same (all wrong, or all right), plain GRPO's advantages are
# all 0. How many of those groups does the process judge still move? (One whose answers also agree on
# every step, say eight copies of one answer, it cannot move either.)

# %%
sp_policy, sp_tok = load_model("tiny-add2s")
sp_items = get_task("add2s").splits()["train"][:SAMPLE_PROMPTS]
sp = sample_groups(sp_policy, sp_tok, [it["prompt"] for it in sp_items], NUM_GENERATIONS, 16, 1.0,
                   torch.Generator().manual_seed(0))
sp_cols = columns_of(sp_items, repeat=NUM_GENERATIONS)
sp_r = torch.tensor(exact_answer(sp.prompts, sp.completions, **sp_cols)).view(len(sp_items), NUM_GENERATIONS)  # (P, G)
sp_steps = beyond_scalar.judge_steps(beyond_scalar.resolve_step_judge("column_sums"), sp_tok, sp, sp_cols)
step_r3, step_e3, step_m3 = beyond_scalar.step_tensors(sp_steps, len(sp_items), NUM_GENERATIONS)  # (P, G, S) each
sp_adv = process_advantages(step_r3, step_e3, sp.completion_ids.shape[1], step_m3)                 # (P, G, Tc)
tied = (sp_r == sp_r[:, :1]).all(1)                          # (P,) final answers all alike: plain GRPO gives 0
moved = sp_adv.abs().flatten(1).amax(1) > 0                  # (P,) the process judge moves some token
n_tied, n_moved = int(tied.sum()), int((tied & moved).sum())
print(f"{len(sp_items)} groups of {NUM_GENERATIONS}: {n_tied} with every final answer alike "
      f"({int((tied & (sp_r[:, 0] == 0)).sum())} all wrong); the process judge gives a nonzero advantage in "
      f"{n_moved} of them")
record("process_tied_groups", {"tied": n_tied, "moved": n_moved, "groups": len(sp_items)})
if n_tied:
    assert n_moved > 0, "no group with tied final answers got a process advantage"

# %% [markdown]
# ## 2. Five runs, three seeds each, at equal generated completions
#
# Every run takes the same `STEPS` updates of P x G completions at the same learning rate
# (`LEARNING_RATE`, cosine decay). The critic runs train the add2 base on add2 (answers written
# with the digits reversed, `47+85=` -> `231`) against plain GRPO on the same task; process rewards
# need steps, so those runs train the scratchpad base `tiny-add2s` on `add2s`, with
# `max_completion_length=16`, against plain GRPO there:
#
# | name | config |
# |---|---|
# | `grpo` | plain GRPO on add2 |
# | `hybrid_w0.3`, `hybrid_w0.7` | `advantage_estimator='hybrid_gae'`, `hybrid_weight` 0.3 / 0.7 (value head lr 1e-3) |
# | `scratchpad_grpo` | plain GRPO on add2s |
# | `process` | `advantage_estimator='process'`, `step_judge='column_sums'`: each column sum is a step, 1 if right |
#
# The exact-answer reward is scored and logged in every run (the `reward` panel), whatever the
# advantages are made from.

# %%
COMMON = dict(steps=STEPS, num_prompts=NUM_PROMPTS, num_generations=NUM_GENERATIONS, learning_rate=LEARNING_RATE,
              eval_every=EVAL_EVERY, eval_size=EVAL_SIZE, threads=THREADS, log_kl=False, checkpoint_every=0)
SCRATCHPAD = dict(model="tiny-add2s", task="add2s", max_completion_length=16)
VARIANTS = {
    "grpo": {},
    "hybrid_w0.3": dict(advantage_estimator="hybrid_gae", hybrid_weight=0.3),
    "hybrid_w0.7": dict(advantage_estimator="hybrid_gae", hybrid_weight=0.7),
    "scratchpad_grpo": dict(SCRATCHPAD),
    "process": dict(SCRATCHPAD, advantage_estimator="process", step_judge="column_sums"),
}
REFERENCE = {name: "scratchpad_grpo" if "model" in kw else "grpo" for name, kw in VARIANTS.items()}
bases = {"tiny": load_model("tiny"), "tiny-add2s": (sp_policy, sp_tok)}

dash = Dashboard(total_steps=STEPS, title=f"notebook 08b: {len(VARIANTS)} estimators x {len(SEEDS)} seeds")
t_runs = time.time()
runs = train_arms(VARIANTS, SEEDS, COMMON, dash=dash, bases=bases)  # (arm, seed) -> run, each from a copy of its base
dash.close()
run_seconds = time.time() - t_runs
print(f"{len(runs)} runs in {run_seconds:.0f} s")
record("run_seconds", run_seconds)
record("completions_per_run", {f"{n} seed {s}": r.step * NUM_PROMPTS * NUM_GENERATIONS for (n, s), r in runs.items()})

# %% [markdown]
# ## 3. The table: held-out accuracy, base and final, mean ± spread over seeds
#
# Read as in [08](08_beyond_scalar_rewards.ipynb): each variant against plain GRPO on its own task
# and base, **better** / **worse** only when the gap exceeds twice its standard error over seeds.

# %%
final = {n: [runs[n, s].evals[-1][1] for s in SEEDS] for n in VARIANTS}
base = {n: [runs[n, s].evals[0][1] for s in SEEDS] for n in VARIANTS}
summary = arm_summary(final, base, REFERENCE)
table = pd.DataFrame(arm_table_rows(summary, vs="vs plain")).set_index("arm")
table.insert(0, "task", [runs[n, SEEDS[0]].cfg.task for n in table.index])
display(table)
record("summary", summary)
findings = findings_lines(summary, REFERENCE, {"grpo": "plain GRPO on add2", "scratchpad_grpo": "plain GRPO on add2s"}, smoke=SMOKE)
display(Markdown(findings))
record("findings_text", findings)

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4), constrained_layout=True)
for n in VARIANTS:
    ax = axes[0] if REFERENCE[n] == "grpo" else axes[1]
    steps_ = [st for st, _ in runs[n, SEEDS[0]].evals]
    accs = np.array([[a for _, a in runs[n, s].evals] for s in SEEDS])  # (seeds, evals)
    ax.plot(steps_, accs.mean(0), "o-", color=dash.styles.variant_colour(n), label=n)
    ax.fill_between(steps_, accs.min(0), accs.max(0), color=dash.styles.variant_colour(n), alpha=0.15)
axes[0].set(title="add2 base on add2: held-out accuracy (mean; band: min-max over seeds)", xlabel="step")
axes[1].set(title="add2s base on add2s (scratchpad)", xlabel="step")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 4. What the GAE mix weight means
#
# `hybrid_gae` adds two terms that need not be on the same scale: the group term r_i - mean_g r
# (reward units, std at most 0.5 for 0/1 rewards; with `scale_rewards='group'` a z-score, std 1)
# and GAE from the value head (reward units, shrinking as the head learns to predict the
# reward). So w is the share of the advantage that comes from the group only when the two stds
# are equal. The loop logs the share it actually has,
#
# $$\text{group share} = \frac{w\, s_{grp}}{w\, s_{grp} + (1 - w)\, s_{gae}},$$
#
# with s the std of each term over the batch's tokens (`advantages/group_std`,
# `advantages/gae_std`, `advantages/group_share`). The widget draws that share against w for
# the stds the runs measured (over their second half); the dots are the two trained weights.

# %%
def half_mean(n, key):
    """Mean of a metric over the second half of every seed's run."""
    xs = [m[key] for s in SEEDS for m in runs[n, s].history[len(runs[n, s].history) // 2:] if key in m]
    return float(np.nanmean(xs)) if xs else float("nan")


hybrid = {n: {k: half_mean(n, k) for k in ("advantages/group_std", "advantages/gae_std", "advantages/group_share",
                                           "value/loss", "value/explained_variance")}
          for n in ("hybrid_w0.3", "hybrid_w0.7")}
for n, h in hybrid.items():
    print(f"{n}: group std {h['advantages/group_std']:.3f}, GAE std {h['advantages/gae_std']:.3f}, "
          f"group share {h['advantages/group_share']:.2f}; value loss {h['value/loss']:.3f}, "
          f"explained variance {h['value/explained_variance']:.2f}")
record("hybrid_group_share", {n: h["advantages/group_share"] for n, h in hybrid.items()})
for n, h in hybrid.items():
    w = float(n.split("w")[-1])
    ratio = h["advantages/gae_std"] / h["advantages/group_std"]
    close = abs(h["advantages/group_share"] - w) < 0.05
    print(f"{n}: the group term is {h['advantages/group_share']:.0%} of the advantage for w = {w:.0%}: "
          + ("about w, because" if close else "not w, because") + f" the GAE term's std is {ratio:.2f}x the group "
          f"term's" + (" (a value head that explains little of the return leaves GAE about r - V, on the reward's"
                       " scale)" if close and h["value/explained_variance"] < 0.2 else ""))


def share_figure(w_now, which):
    """The group share as a function of w, for the stds the run ``which`` measured."""
    h = hybrid[which]
    s_grp, s_gae = h["advantages/group_std"], h["advantages/gae_std"]
    ws = np.linspace(0, 1, 101)
    fig, ax = plt.subplots(figsize=(6.5, 3.4), constrained_layout=True)
    ax.plot(ws, ws * s_grp / (ws * s_grp + (1 - ws) * s_gae + 1e-12), label=f"share (stds of {which})")
    ax.plot(ws, ws, ":", color="grey", label="share = w (equal scales)")
    for n, hh in hybrid.items():
        ax.plot(float(n.split("w")[-1]), hh["advantages/group_share"], "o", label=f"{n} (logged)")
    share_now = w_now * s_grp / (w_now * s_grp + (1 - w_now) * s_gae + 1e-12)
    ax.axvline(w_now, color="C3", alpha=0.4)
    ax.set(xlabel="hybrid_weight w", ylabel="share of the group term", ylim=(0, 1),
           title=f"w = {w_now:.2f}: the group term is {share_now:.0%} of the advantage")
    ax.legend(fontsize=8)
    return fig


w_slider = W.FloatSlider(value=0.3, min=0, max=1, step=0.05, description="w")
which_box = W.Dropdown(options=list(hybrid), value="hybrid_w0.3", description="stds of")
display(W.VBox([W.HBox([w_slider, which_box]),
                redraw_on_change([w_slider, which_box], lambda: share_figure(w_slider.value, which_box.value))]))

# %%
# The same figure as a plain image (what a headless run shows), and the share over training.
share_figure(0.3, "hybrid_w0.3")
plt.show()
fig, ax = plt.subplots(figsize=(6.5, 3.2), constrained_layout=True)
for n in hybrid:
    for s in SEEDS:
        pts = [m["advantages/group_share"] for m in runs[n, s].history]
        ax.plot(smooth(pts, 5), color=dash.styles.variant_colour(n), alpha=0.7, label=n if s == SEEDS[0] else None)
ax.set(xlabel="step", ylabel="advantages/group_share", title="logged group share during training")
ax.legend()
plt.show()

# %% [markdown]
# The value head's explained variance (printed above) says how much of the return it predicts: near
# 0, it has learned little, and GAE is then about r − V on the reward's scale, so the share stays
# close to w. The runs use `scale_rewards='none'`; with `scale_rewards='group'` the group term is a
# z-score with std 1, and the share moves away from w (exercise 1).

# %% [markdown]
# ## 5. What the process judge saw in training
#
# `process/step_score_mean` is the fraction of right steps (column sums and the final answer),
# `process/steps_mean` the steps per completion, and the right panel the groups whose final
# answers were all alike, where plain GRPO would have had no signal.

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), constrained_layout=True)
for s in SEEDS:
    h = runs["process", s].history
    axes[0].plot(smooth([m["process/step_score_mean"] for m in h], 5), color="C0", alpha=0.7,
                 label="process: right steps" if s == SEEDS[0] else None)
    axes[0].plot(smooth([m["reward"] for m in h], 5), color="C1", alpha=0.7,
                 label="process: right answers" if s == SEEDS[0] else None)
    axes[0].plot(smooth([m["reward"] for m in runs["scratchpad_grpo", s].history], 5), color="C2", alpha=0.7,
                 label="scratchpad_grpo: right answers" if s == SEEDS[0] else None)
    axes[1].plot(smooth([m["frac_reward_zero_std"] for m in h], 5), color="C0", alpha=0.7,
                 label="groups with all answers equal" if s == SEEDS[0] else None)
axes[0].set(xlabel="step", title="fraction right (5-step mean)")
axes[1].set(xlabel="step", title="process run: zero-variance answer groups")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()
proc = {k: half_mean("process", k) for k in ("process/steps_mean", "process/step_score_mean", "process/no_step_frac")}
print({k: round(v, 3) for k, v in proc.items()})
record("process_metrics", proc)

# %% [markdown]
# ## 6. What the runs support
#
# Always (smoke and full): by hand, in a group whose final answers are all wrong, plain GRPO gives
# 0 and the process judge gives more credit for more right steps; on real samples it moves some of
# the groups with tied final answers (17 of 20 when we ran it, 2026-12-07: a group whose answers
# also agree on every step stays at 0); every run spent the same number of completions and
# trained with finite losses; every estimator logged its metrics.
#
# Full run only: plain GRPO learns on both tasks with every seed, and a larger w gives the group
# term a larger share of the hybrid advantage. Whether a variant beats plain GRPO is **not**
# asserted: the table's verdicts and the text under it come from the runs.

# %%
stopped_early = dash.stopped  # Stop pressed on the dashboard: every later run ended after one step
record("stopped_early", stopped_early)
assert stopped_early or all(r.step == STEPS for r in runs.values()), {k: r.step for k, r in runs.items()}
for key, run in runs.items():
    assert all(math.isfinite(m["loss"]) for m in run.history), key
for n, key in (("process", "process/step_score_mean"), ("hybrid_w0.3", "advantages/group_share")):
    assert all(key in m for s in SEEDS for m in runs[n, s].history), (n, key)
if not SMOKE and not stopped_early:
    for ref in ("grpo", "scratchpad_grpo"):
        assert min(final[ref]) > max(base[ref]), (ref, final[ref], base[ref])
    assert hybrid["hybrid_w0.3"]["advantages/group_share"] < hybrid["hybrid_w0.7"]["advantages/group_share"]
    print("full-run claims hold: plain GRPO learns on both tasks with every seed; a larger w, a larger group share")
record("wall_seconds", time.time() - T0)
print(f"notebook ran in {time.time() - T0:.0f} s")

# %% [markdown]
# ## Summary
# - A critic (value function) predicts the reward from each prefix; GRPO replaces it with the group
#   mean, and `hybrid_gae` brings one back as a value head whose GAE gives each token its own
#   advantage.
# - A process judge scores each step: in a group whose final answers are all wrong it still gives
#   more credit for more right steps, where plain GRPO gives 0.
# - The GAE mix weight w is the group term's share of the advantage only when the two terms have the
#   same std; the loop logs the share it actually has.
# - The answer to the question, at this budget: in the full run we measured (2026-12-06,
#   `make test-full`, 3 seeds, 10,240 completions per run), neither the process judge nor the critic
#   at either weight gave anything measurable over plain GRPO (each gap within 2 SE). The table above
#   gives your run's verdicts.
#
# ## Questions
# 1. What is a critic, and what does GRPO use in its place?
# 2. In a group where every final answer is wrong, which estimators of this notebook still move the
#    policy, and why?
# 3. The value head's explained variance is near 0. What does GAE then give each token?
# 4. With w = 0.3, the group term's std is 0.4 and GAE's 0.2. What share of the advantage comes from
#    the group term?
#
# <details><summary>Answers</summary>
#
# 1. A model of the expected reward from a state (a prefix); GRPO uses the group's mean reward.
# 2. `process` (right column sums earn credit) and `hybrid_gae` (the value head's GAE part does not
#    vanish with the group's spread); plain `grpo` gives 0.
# 3. About r − V with V near a constant: every token of an answer gets roughly the answer's reward
#    minus a constant, the same signal as plain GRPO, on the reward's scale.
# 4. 0.3 · 0.4 / (0.3 · 0.4 + 0.7 · 0.2) = 0.12 / 0.26 ≈ 0.46.
# </details>
#
# ## Exercises
#
# 1. Train `hybrid_w0.3` with `scale_rewards='group'`: how far does the logged group share move from w?
# 2. Set `hybrid_weight=1.0` and `0.0`: which one is plain GRPO, and what does the other train on?
# 3. **Code:** write a step judge for add2s that gives 0.5 to a column sum that is off by one
#    and 1 to a right one (copy `beyond_scalar.column_sum_steps`, shown below), pass it as
#    `step_judge=my_judge` to `setup()`'s config, and train 20 steps.

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 3**, for reading (it trains, so it is not run here).
#
# ```python
# import copy
# import re
# from grpo_kit import GRPOConfig, setup, train
# from grpo_kit.loop.beyond_scalar import column_sum_steps
# from grpo_kit.data.tasks import column_sums
#
# def lenient_steps(prompt, text, scratchpad=None, **cols):
#     steps = column_sum_steps(prompt, text, scratchpad=scratchpad, **cols)
#     a, b = map(int, prompt.rstrip("=").split("+"))
#     want = column_sums(a, b).split()
#     chunks = re.findall(r"\S+", text.partition("|")[0])
#     out = []
#     for k, (score, end) in enumerate(steps):
#         if score == 0 and k < min(len(chunks), len(want)) and chunks[k].isdigit() \
#                 and abs(int(chunks[k]) - int(want[k])) == 1:
#             score = 0.5
#         out.append((score, end))
#     return out
#
# cfg = GRPOConfig(**{**COMMON, "steps": 20}, **SCRATCHPAD, advantage_estimator="process",
#                  step_judge=lenient_steps)  # a callable works where a name does
# run = setup(cfg, policy=copy.deepcopy(bases["tiny-add2s"][0]), tokenizer=bases["tiny-add2s"][1])
# list(train(cfg, run))
# ```

# %% [markdown]
# **Solution to 2** (the next cell): with one group of two completions, by hand.

# %% jupyter={"source_hidden": true}
# Solution to exercise 2: w = 1 is the group term on every token; w = 0 is GAE alone. The group term is
# hybrid_gae_terms' default z-score here; the runs above use scale_rewards='none', r - mean.
rewards4 = torch.tensor([[1.0, 0.0]])                        # (P=1, G=2) one right, one wrong
values4 = torch.tensor([[[0.2, 0.4, 0.6], [0.2, 0.1, 0.0]]])  # (1, 2, T=3) a value head's predictions
mask4 = torch.ones(1, 2, 3, dtype=torch.bool)
grp4, gae4, _ = hybrid_gae_terms(rewards4, values4, mask4)   # (1, 2, 3) each
assert torch.allclose(hybrid_gae(rewards4, values4, mask4, w=1.0), grp4)
assert torch.allclose(hybrid_gae(rewards4, values4, mask4, w=0.0), gae4)
assert torch.allclose(grp4[0, :, 0], compute_advantages(rewards4, "group")[0])  # the group term is GRPO's z-score
print("w = 1:", hybrid_gae(rewards4, values4, mask4, w=1.0)[0].tolist())
print("w = 0:", hybrid_gae(rewards4, values4, mask4, w=0.0)[0].tolist())

# %% [markdown]
# **The shipped step judge**, for reading:

# %%
print(inspect.getsource(beyond_scalar.column_sum_steps))

# %% [markdown]
# **Next:** [09 · From the toy to a real model](09_from_toy_to_real.ipynb). Every field used in 08
# and here works from YAML in `grpo-kit train --config` (`advantage_estimator`, `pairwise_judges`,
# `step_judge`, `hybrid_weight`, `value_lr`), and `grpo-kit serve-judge` serves any of these
# judges over HTTP for another trainer.
