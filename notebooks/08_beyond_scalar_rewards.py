# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Beyond one number per answer, I: pairwise and learned judges
#
# **The question.** Does a judge that compares the answers of a group, by a rule or a learned model, train the tiny model better than one right-or-wrong number per answer?
#
# Plain GRPO gives each completion one number (its reward) and compares it with its group. A
# **pairwise judge** compares the answers themselves: for each pair of a group it says which is
# better, and the group's G × G preference matrix M ([03](03_judges_and_preferences.ipynb)) turns
# into advantages by win rate. One config field switches it on:
#
# | estimator | what it uses | advantage | source |
# |---|---|---|---|
# | `grpo` (plain) | one reward r_i per completion | A_i = r_i - mean_g(r) (`scale_rewards='none'`, the kit's default) | DeepSeekMath (Shao et al. 2024); Dr. GRPO |
# | `pairwise` | a (G, G) preference matrix M from `pairwise_judges` (each pair judged in both orders) | A_i = sum_{j != i} M[i, j] / (G - 1), the win rate minus the loss rate | pairwise judges with the order swap of MT-Bench (Zheng et al. 2023) |
#
# The judge can be a rule, or a **learned judge**: a reward model trained on preference pairs with
# the Bradley-Terry loss, as in InstructGPT (Ouyang et al. 2022), plugged in as `learned:DIR`.
# Credit per reasoning step, from a process judge or a critic, is
# [08b](08b_process_rewards_and_critics.ipynb).
#
# **What you will learn**
# 1. When a pairwise judge adds nothing: built from a scalar reward it gives exactly the
#    centred rank of that reward (computed and checked here, not just claimed).
# 2. How to train a learned judge from preference groups and read its held-out agreement.
# 3. How a rule pairwise judge and the learned one compare with plain GRPO **at the same number
#    of generated completions**, over 3 seeds each, on the live dashboard, read with the 2-SE rule;
#    and how to tell when the policy games the learned judge.
#
# **Time**: 2.7 minutes headless with the full parameters (a learned judge and 9 training runs,
# one thread; measured with `pytest -m full` on 2026-12-07); `SMOKE=True` runs every cell in about 10 s.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few steps per run (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEEDS = [0, 1, 2]
STEPS = 80                  # GRPO updates per run, the same for every variant
NUM_PROMPTS = 16            # P
NUM_GENERATIONS = 8         # G: every run generates STEPS * P * G completions
LEARNING_RATE = 1e-4        # every run; at the default 3e-4 plain GRPO on add2 ended below its base for one
                            # seed of three after 80 steps when we tried (it dips first), at 6e-4 for all three
EVAL_EVERY = 20             # steps between held-out evaluations
EVAL_SIZE = 200             # held-out problems per evaluation
JUDGE_STEPS = 200           # learned judge: Bradley-Terry steps of 64 pairs
JUDGE_LR = 3e-4
THREADS = 1                 # torch threads; on a shared 2-core machine one thread was far faster than two

# %%
import math
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from grpo_kit import load_model
from grpo_kit.core import compute_advantages, pairwise_winrate, rank_based
from grpo_kit.data import DATASETS_DIR, get_task
from grpo_kit.eval import arm_summary, arm_table_rows, columns_of, findings_lines, gap_reading, greedy_accuracy
from grpo_kit.lab import train_arms
from grpo_kit.loop import beyond_scalar
from grpo_kit.model import sample_groups
from grpo_kit.rewards import exact_answer, learned_judge, load_preference_groups
from grpo_kit.view import Dashboard, record, smoke_banner
from IPython.display import Markdown, display

if SMOKE:
    SEEDS, STEPS, NUM_PROMPTS, NUM_GENERATIONS, EVAL_EVERY, EVAL_SIZE = [0], 3, 4, 4, 3, 20
    JUDGE_STEPS, THREADS = 3, 1
T0 = time.time()
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. When a pairwise judge adds nothing
#
# A judge that only has a scalar score per completion (`reward:exact_answer`, or a learned
# judge) makes the preference matrix M[i, j] = sign(s_i - s_j). Its win rate is then
# (#{j: s_j < s_i} - #{j: s_j > s_i}) / (G - 1): the **centred rank** of the score (the
# `rank` estimator). The comparison only re-encodes the scalar. With a 0/1 reward it is even
# less: k right answers of G give the right ones (G - k)/(G - 1) and the wrong ones -k/(G - 1),
# which is G/(G - 1) (r_i - mean_g r): plain GRPO's advantage times a constant (RLOO's).
#
# We check both on a real batch: the base model answers 16 training prompts 8 times each.

# %%
base_policy, base_tok = load_model("tiny")  # the add2 base; each run trains its own copy
items = get_task("add2").splits()["train"][:16]
G_DEMO = 8
ro = sample_groups(base_policy, base_tok, [it["prompt"] for it in items], G_DEMO, 8, 1.0,
                   torch.Generator().manual_seed(0))
cols = columns_of(items, repeat=G_DEMO)
r = torch.tensor(exact_answer(ro.prompts, ro.completions, **cols)).view(len(items), G_DEMO)  # (P, G) 0/1 rewards
groups = [ro.completions[p * G_DEMO:(p + 1) * G_DEMO] for p in range(len(items))]
prompts = [it["prompt"] for it in items]
judges = {name: beyond_scalar.resolve_pairwise_judge(name) for name in ("reward:exact_answer", "correctness")}
winrate = {name: pairwise_winrate(beyond_scalar.pairwise_preferences([j], prompts, groups, columns_of(items))[0])
           for name, j in judges.items()}  # (P, G) each
rank_gap = (winrate["reward:exact_answer"] - rank_based(r)).abs().max().item()
grpo_gap = (winrate["correctness"] - G_DEMO / (G_DEMO - 1) * compute_advantages(r, "none")).abs().max().item()
print(f"rewards of the first 4 groups:\n{r[:4].int()}")
print(f"win rate of 'reward:exact_answer' vs the centred rank: max |difference| = {rank_gap:.2e}")
print(f"win rate of the 'correctness' rule vs G/(G-1) x plain GRPO: max |difference| = {grpo_gap:.2e}")
record("pairwise_from_scalar_minus_rank_max_abs", rank_gap)
record("correctness_winrate_minus_scaled_grpo_max_abs", grpo_gap)

# %% [markdown]
# So a pairwise run with the `correctness` rule is plain GRPO with every advantage times 8/7,
# and AdamW, which is blind to a constant scale of the gradient (up to its eps), all but ignores that.
# A pairwise judge adds information only when it compares things the reward does not see. The
# shipped `closeness` rule does: among two **wrong** answers the numerically closer one wins,
# so it ranks wrong answers that the 0/1 reward ties. That is the rule judge we train with below.

# %%
clos = beyond_scalar.resolve_pairwise_judge("closeness")
m_close, stats_close = beyond_scalar.pairwise_preferences([clos], prompts, groups, columns_of(items))  # (P, G, G)
_, stats_corr = beyond_scalar.pairwise_preferences([judges["correctness"]], prompts, groups, columns_of(items))
wr_close = pairwise_winrate(m_close)  # (P, G)
print(f"group 0: {groups[0]} (answer {items[0]['answer']}, digits written in reverse)")
print(f"  0/1 reward          {r[0].tolist()}\n  closeness win rate  {[round(x, 2) for x in wr_close[0].tolist()]}")
print(f"tied pairs: correctness {stats_corr['pairwise/tie_frac']:.2f}, closeness {stats_close['pairwise/tie_frac']:.2f}")
record("tie_frac_correctness", stats_corr["pairwise/tie_frac"])
record("tie_frac_closeness", stats_close["pairwise/tie_frac"])

# %% [markdown]
# ## 2. A learned judge, trained here
#
# `datasets/add2_prefs.jsonl` holds 256 groups of 8 answers of the add2 task with a preference
# matrix each (right beats wrong, a closer wrong answer beats a farther one, soft labels 0.5).
# `train_learned_judge` puts a scalar head on the tiny base model and trains it on the pairs
# with the Bradley-Terry loss, -log sigmoid(s_winner - s_loser) (soft labels: the cross-entropy
# with q = (M + 1)/2). We hold out a fifth of the groups and measure **pairwise agreement**:
# the fraction of held-out non-tied pairs the judge orders as the matrix does (0.5 is chance).
# The same thing from a shell: `grpo-kit train-judge --data datasets/add2_prefs.jsonl --out DIR`.

# %%
records = load_preference_groups(DATASETS_DIR / "add2_prefs.jsonl")  # the shipped file, wherever the notebook runs
judge_train, judge_heldout = learned_judge.split_groups(records, 0.2, seed=0)
n_heldout_pairs = len(learned_judge.preference_pairs(judge_heldout))
t_judge = time.time()
judge_model, judge_tok, judge_report = learned_judge.train_learned_judge(
    judge_train, steps=JUDGE_STEPS, lr=JUDGE_LR, seed=0, threads=THREADS)
agree_train = learned_judge.pairwise_agreement(judge_model, judge_tok, judge_train)
agree_heldout = learned_judge.pairwise_agreement(judge_model, judge_tok, judge_heldout)
JUDGE_DIR = learned_judge.save_learned_judge(judge_model, judge_tok, tempfile.mkdtemp(prefix="nb08_judge_"),
                                             {"heldout_agreement": agree_heldout, **judge_report})
chance_band = 3 * math.sqrt(0.25 / n_heldout_pairs)  # 3 standard errors of a coin on this many pairs
print(f"{len(judge_train)} training groups, {len(judge_heldout)} held out ({n_heldout_pairs} non-tied pairs); "
      f"{JUDGE_STEPS} steps in {time.time() - t_judge:.0f} s")
print(f"pairwise agreement: training groups {agree_train:.3f}, held out {agree_heldout:.3f} "
      f"(chance 0.5 +- {chance_band:.3f} at 3 standard errors)")
beats_chance = agree_heldout > 0.5 + chance_band
overfit_gap = agree_train - agree_heldout
overfits = overfit_gap > chance_band  # more than 3 standard errors of the held-out agreement
print(("it beats a coin on held-out pairs" if beats_chance else "it is NOT distinguishable from a coin on held-out pairs")
      + f"; training groups minus held out: {overfit_gap:+.3f}, "
      + ("more than 3 standard errors: it fits its training groups better than new ones (overfitting)" if overfits
         else "within 3 standard errors: no sign of overfitting"))
record("judge_overfits", bool(overfits))
record("judge_heldout_agreement", agree_heldout)
record("judge_train_agreement", agree_train)
record("judge_heldout_pairs", n_heldout_pairs)

# %% [markdown]
# Read the two numbers above together: held-out agreement is what the judge will do on answers
# it never saw (the policy's answers, below), the gap to the training groups is how much it
# memorised. A judge far from perfect still orders many pairs right; whether that is enough to
# train on is what the `pairwise_learned` run measures. We use it as a pairwise judge,
# `pairwise_judges=["learned:DIR"]`: its scores are on an arbitrary scale, and the win rate only
# uses their order (section 1), so the scale does not matter.

# %% [markdown]
# ## 3. Three runs, three seeds each, at equal generated completions
#
# Every run takes the same `STEPS` updates of P x G completions at the same learning rate
# (`LEARNING_RATE`, cosine decay), from the add2 base on add2 (answers written with the digits
# reversed, `47+85=` -> `231`):
#
# | name | config |
# |---|---|
# | `grpo` | plain GRPO (`advantage_estimator='grpo'`, exact-answer reward) |
# | `pairwise_closeness` | `advantage_estimator='pairwise'`, `pairwise_judges=['closeness']` |
# | `pairwise_learned` | `advantage_estimator='pairwise'`, `pairwise_judges=['learned:DIR']` (the judge above) |
#
# The exact-answer reward is scored and logged in every run (the `reward` panel), whatever the
# advantages are made from.

# %%
COMMON = dict(steps=STEPS, num_prompts=NUM_PROMPTS, num_generations=NUM_GENERATIONS, learning_rate=LEARNING_RATE,
              eval_every=EVAL_EVERY, eval_size=EVAL_SIZE, threads=THREADS, log_kl=False, checkpoint_every=0)
VARIANTS = {
    "grpo": {},
    "pairwise_closeness": dict(advantage_estimator="pairwise", pairwise_judges=["closeness"]),
    "pairwise_learned": dict(advantage_estimator="pairwise", pairwise_judges=[f"learned:{JUDGE_DIR}"]),
}
REFERENCE = {name: "grpo" for name in VARIANTS}

dash = Dashboard(total_steps=STEPS, title=f"notebook 08: {len(VARIANTS)} estimators x {len(SEEDS)} seeds")
t_runs = time.time()
runs = train_arms(VARIANTS, SEEDS, COMMON, dash=dash, bases={"tiny": (base_policy, base_tok)})  # (arm, seed) -> run
dash.close()
run_seconds = time.time() - t_runs
print(f"{len(runs)} runs in {run_seconds:.0f} s")
record("run_seconds", run_seconds)
record("completions_per_run", {f"{n} seed {s}": r.step * NUM_PROMPTS * NUM_GENERATIONS for (n, s), r in runs.items()})

# %% [markdown]
# ## 4. The table: held-out accuracy, base and final, mean ± spread over seeds
#
# "spread" is the standard deviation over seeds. "vs plain" is the difference of final means to
# plain GRPO. A variant counts as **better** / **worse** than plain GRPO only when that difference
# exceeds twice its standard error over seeds (`grpo_kit.eval.arm_summary`, the 2-SE rule of
# `gap_reading`); otherwise "no clear difference". A run **learns** when its final accuracy beats its
# base accuracy by more than twice the standard error of the final mean.

# %%
final = {n: [runs[n, s].evals[-1][1] for s in SEEDS] for n in VARIANTS}
base = {n: [runs[n, s].evals[0][1] for s in SEEDS] for n in VARIANTS}
summary = arm_summary(final, base, REFERENCE)
table = pd.DataFrame(arm_table_rows(summary, vs="vs plain")).set_index("arm")
display(table)
record("summary", summary)

# %% [markdown]
# What the table says, written from the numbers above (rerun with other seeds and it rewrites itself):

# %%
findings = findings_lines(summary, REFERENCE, {"grpo": "plain GRPO on add2"}, smoke=SMOKE)
display(Markdown(findings))
record("findings_text", findings)

# %% [markdown]
# ### Is the learned judge being gamed?
#
# A learned judge is a model, and a policy trained against a model can find answers the model
# likes that are wrong (reward hacking, notebook 06). We check it on the `pairwise_learned` runs:
# the judge's mean score of the greedy answers to the held-out problems, and their accuracy,
# before and after training. (While those runs trained, the live check may have printed
# `reward_decline` rather than `reward_hacking`: the logged `reward` there is the exact-answer
# judge's, and no `gold_reward` is logged beside it, so `diagnose` sees only a reward that falls.
# It takes the comparison below, the judge's score against the true answers, to name the cause.)

# %%
judge_fn = learned_judge.learned_reward(JUDGE_DIR)


def judged(policy, run):
    """(mean judge score, accuracy, a few (answer, right, score)) of greedy answers to the held-out problems."""
    acc, texts, right = greedy_accuracy(policy, run.tokenizer, run.eval_items, run.cfg.max_completion_length,
                                        return_completions=True)
    scores = judge_fn([it["prompt"] for it in run.eval_items], texts)
    return float(np.mean(scores)), acc, list(zip(texts[:6], right[:6], np.round(scores[:6], 2).tolist()))


hack = {}
for s in SEEDS:
    run = runs["pairwise_learned", s]
    (b_score, b_acc, _), (f_score, f_acc, examples) = judged(base_policy, run), judged(run.policy, run)
    hack[s] = dict(base_score=b_score, final_score=f_score, base_acc=b_acc, final_acc=f_acc)
    print(f"seed {s}: judge score {b_score:+.2f} -> {f_score:+.2f}, accuracy {b_acc:.1%} -> {f_acc:.1%}; "
          f"final answers (text, right, score): {examples[:4]}")
hacked = [s for s, h in hack.items() if h["final_score"] > h["base_score"] and h["final_acc"] < h["base_acc"]]
d_score = np.array([h["final_score"] - h["base_score"] for h in hack.values()])  # (seeds,) change of the judge's score
d_acc = np.array([h["final_acc"] - h["base_acc"] for h in hack.values()])        # (seeds,) change of accuracy

# the verdict "hacked" needs both moves above the noise over seeds (each change read against no change with the
# 2-SE rule of the table above; one seed is never a verdict)
no_change = [0.0] * len(SEEDS)
score_up = gap_reading(no_change, d_score).verdict == "higher"
accuracy_down = gap_reading(no_change, d_acc).verdict == "lower"
hacking_verdict = "hacked" if score_up and accuracy_down else "no clear sign of hacking"
print(f"the judge's score rose while accuracy fell for {len(hacked)} of {len(SEEDS)} seeds; over seeds the score "
      f"moved {d_score.mean():+.2f} and accuracy {d_acc.mean():+.1%}: {hacking_verdict}"
      + (" (the policy learned what the judge likes, not what is right)" if hacking_verdict == "hacked" else ""))
record("learned_judge_hacking", {str(s): h for s, h in hack.items()})
record("learned_judge_hacking_verdict", hacking_verdict)

# %%
fig, ax = plt.subplots(figsize=(7.5, 4), constrained_layout=True)
for n in VARIANTS:
    steps_ = [st for st, _ in runs[n, SEEDS[0]].evals]
    accs = np.array([[a for _, a in runs[n, s].evals] for s in SEEDS])  # (seeds, evals)
    ax.plot(steps_, accs.mean(0), "o-", color=dash.styles.variant_colour(n), label=n)
    ax.fill_between(steps_, accs.min(0), accs.max(0), color=dash.styles.variant_colour(n), alpha=0.15)
ax.set(title="add2: held-out accuracy (mean; band: min-max over seeds)", xlabel="step")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 5. What the runs support
#
# Always (smoke and full): a pairwise judge built from a scalar reward gives exactly the centred
# rank, and the correctness rule on a 0/1 reward exactly G/(G-1) times plain GRPO's advantage;
# the closeness rule ties fewer pairs than the correctness rule; every run spent the same
# number of completions and trained with finite losses; every pairwise run logged its metrics.
#
# Full run only: the learned judge agrees with held-out preferences more often than chance
# (beyond 3 standard errors); plain GRPO learns with every seed. Whether a variant beats plain GRPO
# is **not** asserted: the table's verdicts and the text under it come from the runs.

# %%
assert rank_gap < 1e-9, rank_gap
assert grpo_gap < 1e-6, grpo_gap
assert stats_close["pairwise/tie_frac"] < stats_corr["pairwise/tie_frac"]
stopped_early = dash.stopped  # Stop pressed on the dashboard: every later run ended after one step
record("stopped_early", stopped_early)
assert stopped_early or all(r.step == STEPS for r in runs.values()), {k: r.step for k, r in runs.items()}
for key, run in runs.items():
    assert all(math.isfinite(m["loss"]) for m in run.history), key
for n in ("pairwise_closeness", "pairwise_learned"):
    assert all("pairwise/tie_frac" in m for s in SEEDS for m in runs[n, s].history), n
if not SMOKE and not stopped_early:
    assert agree_heldout > 0.5 + chance_band, (agree_heldout, chance_band)
    assert min(final["grpo"]) > max(base["grpo"]), (final["grpo"], base["grpo"])
    print("full-run claims hold: the judge beats chance on held-out pairs; plain GRPO learns with every seed")
record("wall_seconds", time.time() - T0)
print(f"notebook ran in {time.time() - T0:.0f} s")

# %% [markdown]
# ## Summary
# - A pairwise judge turns a group's G × G comparisons into advantages by win rate, with one config
#   field (`advantage_estimator='pairwise'`, `pairwise_judges`).
# - Built from a scalar reward it adds nothing: it gives exactly the centred rank of that reward,
#   and the correctness rule exactly G/(G−1) times plain GRPO's advantage. It adds information only
#   when it compares what the reward does not see (the closeness rule ranks wrong answers).
# - The answer to the question, at this budget: in the full run we measured (2026-12-06,
#   `make test-full`, 3 seeds, 10,240 completions per run), the closeness rule gave nothing
#   measurable over plain GRPO, and the learned judge was gamed (held-out accuracy 7.2% against
#   63.2% for plain GRPO). The table above gives your run's verdicts.
# - A trained judge can be learned by the policy instead of the task: check it against the true
#   answers, as section 4 does.
#
# ## Questions
# 1. A pairwise judge compares two answers by their 0/1 correctness. What advantage does it give,
#    compared with plain GRPO's?
# 2. Why does AdamW all but ignore a constant factor such as G/(G − 1) on every advantage?
# 3. In a group where every final answer is wrong, which pairwise judge still moves the policy, and why?
# 4. The learned judge's score rose while held-out accuracy fell. What happened, and what in this
#    notebook tells it apart from a judge that is right?
#
# <details><summary>Answers</summary>
#
# 1. G/(G − 1) times plain GRPO's (mean-centred) advantage: the same direction, a constant scale.
# 2. Adam divides each weight's gradient by a running estimate of its size, so multiplying every
#    gradient by a constant leaves the update unchanged (up to Adam's eps).
# 3. The closeness rule (a closer wrong number wins) and a learned judge: they rank wrong answers
#    that a 0/1 reward ties. The correctness rule gives 0, as plain GRPO does.
# 4. The policy found answers the judge likes that are wrong (reward hacking); the held-out
#    accuracy, measured by the rule judge beside the learned one, shows it.
# </details>
#
# ## Exercises
#
# 1. **An ensemble.** Train with `pairwise_judges=["closeness", f"learned:{JUDGE_DIR}"]` and
#    `pairwise_ensemble="vote"`. Read `pairwise/agreement` and `pairwise/cycle_groups` on the
#    dashboard: how often do the two judges disagree, and does a majority of two ever cycle?
# 2. **A better judge.** Train the judge for 400 steps, or at `JUDGE_LR=1e-3`: does held-out
#    agreement go up, and does the training-group agreement run away from it (overfitting)?
# 3. **Code.** For one group with 0/1 rewards `[1, 0, 0, 1, 0]`, compute the correctness win rates
#    from the preference matrix sign(r_i − r_j) with `pairwise_winrate`, and check that they are
#    G/(G − 1) times r − mean(r).
#
# The solution to 3 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 3: win rates (G - k)/(G - 1) = 3/4 for the right answers, -k/(G - 1) = -1/2 for the
# wrong ones (k = 2 right of G = 5); r - mean = 0.6 and -0.4, times 5/4 = 0.75 and -0.5.
r3 = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0]])                         # (1, G=5)
m3 = torch.sign(r3[:, :, None] - r3[:, None, :])                       # (1, 5, 5) M[i, j] = sign(r_i - r_j)
wr3 = pairwise_winrate(m3)                                              # (1, 5)
assert torch.allclose(wr3, 5 / 4 * compute_advantages(r3, "none"))
assert torch.allclose(wr3[0], torch.tensor([0.75, -0.5, -0.5, 0.75, -0.5]))
print("win rates:", wr3[0].tolist())

# %% [markdown]
# **Next:** [08b · Process rewards and a critic](08b_process_rewards_and_critics.ipynb): credit for
# each step of an answer, from a process judge or a learned value head (GAE).
