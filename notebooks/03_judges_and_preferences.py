# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Judges and preferences: scoring, comparing, and learning from ranked groups
#
# **The question.** Where do rewards come from when there is no exact answer to check, and can a model learn from ranked answers collected offline?
#
# GRPO needs a number per completion. Where a task has an exact answer, a **rule judge** extracts
# it and compares. Where it does not, a judge can still **compare two answers**, and a group of G
# answers gives a G x G **preference matrix** (G(G-1)/2 comparisons).
#
# **What you will learn**
# 1. how rule judges read a final answer out of free text (and that they never execute it);
# 2. how a preference matrix is built, checked (a contradictory one is rejected, naming the pair)
#    and turned into win-rate advantages;
# 3. ties and soft labels;
# 4. how an ensemble of consistent judges can hold a view none of them holds (a cycle);
# 5. how to train the tiny model from *offline* ranked groups (generated beforehand by
#    `grpo-kit pregen`), and how that compares with online GRPO.
#
# **How long it takes**: 72 s with the default parameters (three training runs), 10 s with
# `SMOKE = True` (run headless on 2 quiet CPU cores).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few training steps only; the training claims
# need the full run. GRPO_KIT_SMOKE=1 in the environment sets SMOKE too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEED = 0
OFFLINE_STEPS = 300
BATCH_PROMPTS = 16
NLL_COEF = 1.0              # weight of the likelihood anchor on the clear winners (0: pure preference loss)
EVAL_SIZE = 500             # held-out problems per evaluation
THREADS = 2

# %%
import warnings

import matplotlib.pyplot as plt
import torch
from grpo_kit import GRPOConfig, load_model, setup, train
from grpo_kit.core import group_zscore, pairwise_winrate
from grpo_kit.core import preferences as PR
from grpo_kit.data import DATASETS_DIR, heldout_split
from grpo_kit.lab import train_offline
from grpo_kit.rewards import judges as J
from grpo_kit.rewards import pairwise as PW
from grpo_kit.view import Dashboard, record, smoke_banner

if SMOKE:
    OFFLINE_STEPS, EVAL_SIZE, THREADS = 6, 50, 1
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. Rule judges on real-looking answers
#
# `final_answer` looks, in order, for GSM8K's `#### 42`, `\\boxed{42}`, "the answer is 42", and
# falls back on the last number. Numbers may carry commas, signs (also the unicode minus), decimals
# and fractions. Judges only read text: nothing a model writes is ever executed.

# %%
EXAMPLES = [
    ("She has 3 apples, buys 4 more: 3 + 4 = 7.\n#### 7", 7),
    ("So the total is $1,234.", 1234),
    ("The answer is −5 degrees", -5),
    ("x = \\boxed{\\frac{3}{4}}", 0.75),
    ("First 12, then 30, so the answer is 42.", 42),
    ("I am not sure.", None),
    ("Cost: 2.50 each, 4 of them, 10.00 in all", 10.0),
    ("__import__('os').system('touch /tmp/pwned') 9", 9),
]
print(f"{'completion':<58} {'extracted':>9}")
for text, want in EXAMPLES:
    got = J.final_answer(text)
    print(f"{text.replace(chr(10), ' / '):<58} {got!s:>9}")
    assert J.numbers_match(got, want) if want is not None else got is None, (text, got, want)

# %% [markdown]
# ## 2. From comparisons to a preference matrix, and win-rate advantages
#
# `M[i, j] = +1` when answer i beats answer j, `-1` when it loses, `0` for a tie: M is
# antisymmetric with a zero diagonal, and the builder rejects anything else, naming the pair.
# A win-rate advantage is each answer's wins minus losses in its group, divided by G - 1.

# %%
scores = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.5]])           # (P=1, G=5) e.g. right/wrong/partial
M = PR.preferences_from_scores(scores)                         # (1, 5, 5)
print(M[0].int())
wr = pairwise_winrate(M)                                       # (1, 5)
print("win-rate advantages:", [round(v, 3) for v in wr[0].tolist()])
print("z-score advantages: ", [round(v, 3) for v in group_zscore(scores)[0].tolist()])
assert torch.allclose(M, -M.transpose(1, 2)) and abs(wr.sum().item()) < 1e-6
assert wr[0, 0] > wr[0, 4] > wr[0, 1]
bad = M.clone()
bad[0, 1, 2] = 1.0                                             # says 1 beats 2, while M[2, 1] says they tie
try:
    PR.check_preferences(bad)
except PR.PreferenceError as e:
    rejected = str(e)
    print("rejected:", rejected)
else:
    raise AssertionError("a contradictory preference matrix was accepted")
assert "M[1, 2]" in rejected and "M[2, 1]" in rejected, f"the error should name the pair: {rejected}"

# %% [markdown]
# ## 3. Ties and soft labels
#
# Equal scores tie at 0. A judge that is unsure can give a *soft* label. The **Bradley-Terry model**
# (Bradley and Terry, 1952) says that an answer with score s_i beats one with score s_j with
# probability sigmoid(s_i − s_j); with a temperature T that sets how sure the judge is,
# `M[i, j] = 2 sigmoid((s_i - s_j) / T) - 1` is that probability rescaled to [-1, 1].

# %%
s = torch.tensor([0.9, 0.8, 0.8, 0.1])
for T in (None, 0.05, 0.3):
    m = PR.preferences_from_scores(s, temperature=T)
    print(f"T={T}:\n{m.numpy().round(2)}")
soft = PR.preferences_from_scores(s, temperature=0.3)
assert soft[1, 2] == 0 and 0 < soft[0, 1] < soft[0, 3] < 1

# %% [markdown]
# ## 4. An ensemble that disagrees with every member
#
# Three judges, each perfectly consistent (a strict ranking of answers a, b, c), vote by
# majority. Every pair is decided 2 to 1, and the majority goes round in a circle: a beats b,
# b beats c, c beats a (Condorcet's paradox). No member holds that view.

# %%
rankings = {"judge A": [3.0, 2.0, 1.0], "judge B": [1.0, 3.0, 2.0], "judge C": [2.0, 1.0, 3.0]}
members = [PR.preferences_from_scores(torch.tensor(r)) for r in rankings.values()]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    vote = PR.ensemble_preferences(members, method="vote")
print(vote.int())
cycle = PR.find_cycle(vote)
print("cycle:", cycle, "| warnings:", [str(w.message)[:80] for w in caught])
stats = PR.preference_agreement(members, vote, names=list(rankings))
print(stats)
assert cycle is not None and all(PR.find_cycle(m) is None for m in members)

# %% [markdown]
# ## 5. Learning from offline ranked groups
#
# `datasets/add2_prefs.jsonl` was written by
# `grpo-kit pregen --model tiny --task add2 --prompts 256 --k 8 --out datasets/add2_prefs.jsonl`:
# 8 answers sampled from the base for each of 256 training prompts, every pair judged: right
# beats wrong (±1), and ties between two wrong answers resolved by a finer judge, the closer
# number (±0.5). Training is **staged**: first the clear pairs only, then every pair. The loss is
# the pairwise margin hinge on sequence log-probabilities, relu(log π(worse) − log π(better) + 1),
# plus a likelihood **anchor**: the mean per-token negative log-likelihood of the clear winners.
#
# Why the anchor: a pure preference loss only fixes *differences* of log-probabilities, so it can
# push both sides of every pair down and hand the probability to answers nobody sampled. Measured on
# 2026-12-03 with this section's cell and `NLL_COEF = 0` (seed 0): held-out accuracy fell from 41%
# to about 31% with the margin loss at lr 3e-4, and to 18% with the Bradley-Terry loss
# (−log sigmoid of the difference, the loss whose model says i beats j with probability
# sigmoid(s_i − s_j); see section 3) at lr 1e-4. Set `NLL_COEF = 0` to see it at this cell's settings.

# %%
records = PW.load_preference_groups(DATASETS_DIR / "add2_prefs.jsonl")
K = len(records[0]["responses"])
print(f"{len(records)} groups of {K}; first group:", records[0]["prompt"], records[0]["responses"])
print(records[0]["preference_matrix"].numpy().round(1))
test = heldout_split("add2")[:EVAL_SIZE]
policy, tok = load_model("tiny")
offline = list(train_offline(policy, None, tok, records, OFFLINE_STEPS, test, batch_prompts=BATCH_PROMPTS,
                             lr=1e-4, loss="margin", stage1_steps=OFFLINE_STEPS // 2, nll_coef=NLL_COEF,
                             eval_every=50, seed=SEED))
base_acc, offline_acc = offline[0]["accuracy"], offline[-1]["accuracy"]
print(f"offline: {base_acc:.1%} -> {offline_acc:.1%} after {OFFLINE_STEPS} steps on {len(records) * K} pre-generated answers")

# %% [markdown]
# ## 6. Offline against online
# Online GRPO (notebook 00's recipe) samples fresh answers from the current model at every step.
# Two fair budgets: the **same number of judged answers** as the offline file holds
# (256 × 8 = 2048, i.e. 16 online steps of 128), and the **same number of updates** (`OFFLINE_STEPS`).
# The dashboard shows both online runs.
#
# Two things differ besides the data. The learning rates: the offline loss trains at lr 1e-4 and online
# GRPO at its default 3e-4, so each arm is a *recipe* (data, loss and learning rate together), not the
# data alone. And there is one seed per arm: the comparison shows an order on this seed, not a verdict
# above the seed-to-seed noise (notebook 04 shows how large that noise is).

# %%
cfg = GRPOConfig(seed=SEED, threads=THREADS, eval_every=0, eval_size=EVAL_SIZE)
same_samples = max(1, len(records) * K // cfg.batch_size)
if SMOKE:
    same_samples = 2
online = {}
online_dash = Dashboard(total_steps=OFFLINE_STEPS, title="online GRPO, two budgets")
for label, short, steps in (("same judged answers", "grpo same-answers", same_samples),
                            ("same updates", "grpo same-updates", OFFLINE_STEPS)):
    c = cfg.replace(steps=steps)
    run = setup(c)
    for m in train(c, run, should_stop=online_dash.should_stop):
        online_dash.update(m, variant=short, run=run)
    online[label] = (steps, run.evals[-1][1])
    print(f"online GRPO, {label}: {steps} steps, {steps * c.batch_size} sampled answers -> {run.evals[-1][1]:.1%}")
online_dash.close()

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([m["step"] for m in offline if "accuracy" in m], [m["accuracy"] for m in offline if "accuracy" in m],
        "o-", label="offline ranked groups (margin loss)")
for label, (steps, acc) in online.items():
    ax.scatter([steps], [acc], label=f"online GRPO, {label}", zorder=3)
ax.axvline(OFFLINE_STEPS // 2, color="0.8", ls=":")
ax.text(OFFLINE_STEPS // 2, 0.05, " stage 2")
ax.set(xlabel="update steps", ylabel="held-out greedy accuracy", ylim=(0, 1))
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The claims, checked
# Smoke mode checks sections 1-4 (they run above, in plain cells): the extraction examples, the
# rejected contradictory matrix that names its pair, win-rate advantages, soft labels, and the
# majority vote's cycle. **Only the full run** checks the training claims of sections 5-6, with
# what we measured (seed 0, 500 held-out problems, 2026-12-03): offline training raises held-out accuracy
# (41.0% → 75.0%); with the same 2048 judged answers, offline beats online GRPO, which
# is still in its early dip after 16 steps (34.8%); with the same 300 updates,
# online GRPO beats offline (89.4%): it keeps sampling the current model's mistakes.

# %%
record("extraction_examples", len(EXAMPLES))
record("rejected_message", rejected)
record("vote_cycle", cycle)
record("base_accuracy", base_acc)
record("offline_accuracy", offline_acc)
record("online_same_samples_accuracy", online["same judged answers"][1])
record("online_same_updates_accuracy", online["same updates"][1])
stopped_early = online_dash.stopped
if SMOKE or stopped_early:
    print("claims of sections 1-4 hold; the training claims need the full run (SMOKE=False, not stopped).")
else:
    same_answers, same_updates = online["same judged answers"][1], online["same updates"][1]
    assert offline_acc > base_acc, f"offline training did not help: {base_acc:.1%} -> {offline_acc:.1%}"
    assert offline_acc > same_answers, f"same answers: offline {offline_acc:.1%} <= online {same_answers:.1%}"
    assert same_updates > offline_acc, f"same updates: online {same_updates:.1%} <= offline {offline_acc:.1%}"
    print(f"claims hold: offline {base_acc:.1%} -> {offline_acc:.1%}; online with the same answers "
          f"{same_answers:.1%}, with the same updates {same_updates:.1%}")

# %% [markdown]
# ## Summary
# - A rule judge reads the final answer out of free text and compares it with the expected one; it
#   never executes what the model wrote.
# - Comparisons inside a group make a G × G preference matrix; a contradictory one is rejected with
#   the pair named; each answer's win rate against the others is its advantage; ties and soft
#   labels fit the same matrix.
# - A majority vote of judges that are each consistent can cycle: the ensemble holds a view that no
#   member holds.
# - Ranked groups recorded offline can train the model; online GRPO keeps sampling the current
#   model's mistakes (the full run compares both at equal judged answers and at equal updates).
#
# ## Questions
# 1. Why does a rule judge extract and compare the number instead of evaluating the answer's text?
# 2. Three judges each rank A, B and C consistently. Give rankings whose majority vote is a cycle.
# 3. What win-rate advantage does an answer get that beats every other answer in its group?
# 4. Offline against online was compared twice: at the same number of judged answers and at the same
#    number of updates. What does each comparison hold fixed, and why do they disagree?
#
# <details><summary>Answers</summary>
#
# 1. The text comes from a model: evaluating it would run whatever it wrote (the last example of
#    section 1 is such a text, and the judge only reads its final number).
# 2. A > B > C, B > C > A and C > A > B: A beats B twice, B beats C twice, C beats A twice.
# 3. +1: it wins all G − 1 comparisons, and the win rate is (wins − losses) / (G − 1).
# 4. Equal judged answers holds fixed what generating and judging cost; equal updates holds fixed the
#    optimizer steps. Offline data is cheap per update but is used up; online sampling keeps finding
#    the current model's mistakes, so with enough updates it wins.
# </details>
#
# ## Exercises
# 1. Why can the offline data stop helping after a while, when online GRPO keeps improving?
# 2. Set `NLL_COEF = 0` and re-run section 5. What happens to held-out accuracy, and why?
# 3. **Code.** Build the preference matrix of a group scored `[0.2, 0.9, 0.9, 0.5]` with
#    `PR.preferences_from_scores`, compute its win-rate advantages with `pairwise_winrate`, and
#    check by hand that answer 1 gets (1 win + 1 tie + 1 win) / 3 = 2/3.
#
# <details><summary>Solutions to 1 and 2</summary>
#
# 1. The answers were sampled from the *base* model. As the policy improves, its own answers
#    differ from the recorded ones, and the recorded wrong answers are ones it no longer makes:
#    the data is off-policy and used up, while online sampling keeps finding the current model's
#    mistakes.
# 2. When we tried it at lr 3e-4 (2026-12-03, section 5's cell with `NLL_COEF = 0`), accuracy fell
#    (41% → about 31%); at this notebook's lr 1e-4 run it and see: a pure preference loss only fixes
#    *differences* of log-probabilities, so both sides of each pair were pushed down and the
#    probability went to answers nobody had sampled.
# </details>
#
# The solution to 3 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 3: M[i, j] = sign(s_i - s_j); win rate = row sum / (G - 1).
M3 = PR.preferences_from_scores(torch.tensor([[0.2, 0.9, 0.9, 0.5]]))    # (1, 4, 4)
wr3 = pairwise_winrate(M3)[0]                                             # (4,)
print(M3[0].int())
print("win-rate advantages:", [round(v, 3) for v in wr3.tolist()])
assert abs(float(wr3[1]) - 2 / 3) < 1e-6 and abs(float(wr3[0]) + 1) < 1e-6

# %% [markdown]
# **Next:** [04 · Curriculum group sizes](04_curriculum_group_sizes.ipynb): how many answers to
# sample per prompt, and whether to change that number during training, at a fixed budget.
