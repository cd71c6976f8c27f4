# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Judges and preferences: scoring answers, and comparing them
#
# **The question.** How does a judge turn a group of free-text answers into the numbers GRPO trains on?
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
# 4. how an ensemble of consistent judges can hold a view none of them holds (a cycle).
#
# Training from ranked groups recorded beforehand is [03b](03b_learning_from_ranked_groups_offline.ipynb).
#
# **How long it takes**: a few seconds, with the default parameters and with `SMOKE = True` (no
# training runs here).

# %% tags=["parameters"]
# Parameters (papermill overrides these). Nothing here trains, so SMOKE changes only the banner.
# GRPO_KIT_SMOKE=1 in the environment sets SMOKE too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"

# %%
import warnings

import torch
from grpo_kit.core import group_zscore, pairwise_winrate
from grpo_kit.core import preferences as PR
from grpo_kit.rewards import judges as J
from grpo_kit.view import record, smoke_banner

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
# ## The claims, checked
# Each claim is asserted where it is made, in smoke mode and in full: the extraction examples, the
# rejected contradictory matrix that names its pair, win-rate advantages, soft labels, and the
# majority vote's cycle. Here they are recorded for the test suite.

# %%
record("extraction_examples", len(EXAMPLES))
record("rejected_message", rejected)
record("vote_cycle", cycle)
print(f"{len(EXAMPLES)} extraction examples, the rejected pair named, the vote's cycle {cycle}")

# %% [markdown]
# ## Summary
# - A rule judge reads the final answer out of free text and compares it with the expected one; it
#   never executes what the model wrote.
# - Comparisons inside a group make a G × G preference matrix; a contradictory one is rejected with
#   the pair named; each answer's win rate against the others is its advantage; ties and soft
#   labels fit the same matrix.
# - A majority vote of judges that are each consistent can cycle: the ensemble holds a view that no
#   member holds.
# - A group's preference matrix is what a model can learn from offline, without a number per answer
#   ([03b](03b_learning_from_ranked_groups_offline.ipynb)).
#
# ## Questions
# 1. Why does a rule judge extract and compare the number instead of evaluating the answer's text?
# 2. Three judges each rank A, B and C consistently. Give rankings whose majority vote is a cycle.
# 3. What win-rate advantage does an answer get that beats every other answer in its group?
# 4. Soft labels with temperature T: what does M[i, j] tend to as T → 0, and as T grows large?
#
# <details><summary>Answers</summary>
#
# 1. The text comes from a model: evaluating it would run whatever it wrote (the last example of
#    section 1 is such a text, and the judge only reads its final number).
# 2. A > B > C, B > C > A and C > A > B: A beats B twice, B beats C twice, C beats A twice.
# 3. +1: it wins all G − 1 comparisons, and the win rate is (wins − losses) / (G − 1).
# 4. As T → 0 it tends to the hard label sign(s_i − s_j) (±1, and 0 for a tie); as T grows it tends
#    to 0 for every pair: a judge that is sure of nothing.
# </details>
#
# ## Exercises
# 1. Write a completion that `final_answer` reads wrongly (its number is not the one the text means),
#    and say which rule of section 1 picked the wrong number.
# 2. In section 4, replace the majority vote with `method="mean"` of `PR.ensemble_preferences` and
#    look for a cycle again. Then average the three judges' *scores* first and build one matrix
#    from them: why can that one not cycle?
# 3. **Code.** Build the preference matrix of a group scored `[0.2, 0.9, 0.9, 0.5]` with
#    `PR.preferences_from_scores`, compute its win-rate advantages with `pairwise_winrate`, and
#    check by hand that answer 1 gets (1 win + 1 tie + 1 win) / 3 = 2/3.
#
# <details><summary>Solutions to 1 and 2</summary>
#
# 1. For example "3 + 4 = 7, not 8" gives 8: with no `####`, box or "the answer is", the last
#    number wins. A judge that reads free text needs the answer in a format it asks for.
# 2. Averaging the members' matrices of scores gives M[i, j] = mean of sign(s_i − s_j) over judges;
#    with these three rankings every pair averages to ±1/3 and a cycle can still appear, because
#    each entry is still a majority of signs. Only averaging the *scores* first, then comparing,
#    orders the answers along one line, and a line has no cycle.
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
# **Next:** [03b · Learning from ranked groups offline](03b_learning_from_ranked_groups_offline.ipynb):
# training on preference groups recorded once, against online GRPO.
