# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Group normalisation: what each advantage estimator does to a group of rewards
#
# **The question.** How does each advantage estimator, the group's z-score first, weigh the answers of a prompt solved k times out of G?
#
# GRPO has no critic. It samples **G answers to the same prompt** (a *group*) and turns their
# rewards into **advantages** by comparing each answer with the rest of its group. How exactly it
# compares them is the *advantage estimator*, one config field:
# `GRPOConfig(advantage_estimator=..., scale_rewards=...)`.
#
# **What you will learn**
# 1. the lesson that matters most for right/wrong (0/1) rewards: dividing by the group's std makes
#    a prompt solved 1 time in 8 push as hard as one solved 4 times in 8, and why Dr. GRPO drops
#    the division (a slider: k of G correct, `group` against `none`); and how large one z-scored
#    advantage can get;
# 2. what every estimator in `grpo_kit.core.advantages` does to one group (sliders);
# 3. what a group whose rewards are all equal does (nothing, if the code is careful);
# 4. how noisy the group's std is for 0/1 rewards, computed exactly and measured, and where the
#    textbook (Gaussian) formula is wrong for them;
# 5. a variant you will meet, k-means reward buckets, and what goes wrong with it.
#
# **How long it takes**: a few seconds with the default parameters or with `SMOKE = True` (4 s each,
# measured on 2026-12-03 with `make test-full`, headless on 2 quiet CPU cores); no training, only
# arithmetic on rewards.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: fewer simulated groups, a wider tolerance.
# GRPO_KIT_SMOKE=1 in the environment sets SMOKE too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEED = 0
REWARDS = [0.0, 0.3, 0.5, 0.9, 1.0, 0.2]   # the group you can edit with sliders below
GROUP_SIZE = 8                              # G for the k-of-G lesson
N_TRIALS = 20000                            # simulated groups per group size
G_VALUES = [2, 4, 8, 16, 32, 64]
P_CORRECT = 0.3                             # chance that one answer is right (0/1 rewards)
TOLERANCE = 0.05                            # allowed relative gap between simulation and exact theory

# %%
import math
from itertools import pairwise

import ipywidgets as W
import matplotlib.pyplot as plt
import torch
from grpo_kit.core import advantages as A
from grpo_kit.view import (
    advantage_sliders,
    plot_advantage_bars,
    plot_buckets_vs_groups,
    plot_vs_theory,
    record,
    redraw_on_change,
    smoke_banner,
)
from IPython.display import display

if SMOKE:
    N_TRIALS, TOLERANCE = 4000, 0.12
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(SEED)
smoke_banner(SMOKE)
print("estimators selectable by GRPOConfig.advantage_estimator:", A.ESTIMATORS)

# %% [markdown]
# ## 1 · Right or wrong: a prompt solved k times out of G
#
# Start with the rewards you will meet most: right (1) or wrong (0).
# With 0/1 rewards a group is described by one number: k of its G answers are right. Write
# p = k/G. The group mean is p, so with `scale_rewards="none"` (Dr. GRPO) a right answer gets
# 1 − p and a wrong one −p.
#
# With `scale_rewards="group"` both are divided by the group's std. The kit (like TRL) uses the
# **sample** std, divisor G − 1 (`torch.std`'s default), not the population std √(p(1−p)):
#
# $$s = \sqrt{\tfrac{G}{G-1}\, p(1-p)}, \qquad A_{\text{right}} = \frac{1-p}{s + \varepsilon_{std}}, \qquad A_{\text{wrong}} = \frac{-p}{s + \varepsilon_{std}}, \qquad \varepsilon_{std} = 10^{-4}$$
#
# The fewer right answers, the larger a right answer's advantage, √((G−1)(1−p)/(Gp)) (ε_std aside);
# the fewer wrong answers, the larger a wrong answer's. It is largest at k = 1, where p = 1/G and
# s = 1/√G, so the lone right answer gets (G−1)/√G: 2.47 at G = 8, and no advantage can exceed
# that (checked below, under "How large can one advantage get?"). Add the squares over the group:
# under `group`, $\sum_i A_i^2 = G-1$ for **every** k between 1 and G−1, so a prompt solved once in 8 tries pushes
# on the model as hard as one solved 4 times in 8. Under `none`, $\sum_i A_i^2 = G\,p(1-p)$: largest
# for prompts the model gets right half the time, small for prompts it almost always, or almost
# never, gets right. Liu et al. 2025 ("Understanding R1-Zero-Like Training: A Critical
# Perspective", the Dr. GRPO paper) call the std division a *question-level difficulty bias*: it
# up-weights the too-easy and too-hard prompts. That is why Dr. GRPO drops it, and why the kit's
# default is `scale_rewards="none"`.

# %%
G = GROUP_SIZE
rows = []
for k in range(G + 1):
    rk = torch.tensor([[1.0] * k + [0.0] * (G - k)])                     # (1, G) k right answers
    a_group, a_none = A.compute_advantages(rk, "group")[0], A.compute_advantages(rk, "none")[0]  # (G,)
    pk = k / G
    s = math.sqrt(G / (G - 1) * pk * (1 - pk))                           # sample std, divisor G - 1
    rows.append(dict(k=k, right=float(a_group[0]) if k else None, wrong=float(a_group[-1]) if k < G else None,
                     right_formula=(1 - pk) / (s + A.EPS), wrong_formula=-pk / (s + A.EPS),
                     sq_group=float((a_group ** 2).sum()), sq_none=float((a_none ** 2).sum()),
                     sq_none_formula=G * pk * (1 - pk), none_right=1 - pk, none_wrong=-pk))
print(f"G = {G}   {'k':>2} {'A right':>8} {'A wrong':>8} {'sum A^2':>8} | {'none: right':>11} {'wrong':>7} {'sum A^2':>8}")
for row in rows:
    right = f"{row['right']:+8.3f}" if row["right"] is not None else f"{'-':>8}"
    wrong = f"{row['wrong']:+8.3f}" if row["wrong"] is not None else f"{'-':>8}"
    print(f"{'':>9}{row['k']:>2} {right} {wrong} {row['sq_group']:8.3f} | {row['none_right']:+11.3f} "
          f"{row['none_wrong']:+7.3f} {row['sq_none']:8.3f}")

# %%
inner = rows[1:-1]                                                       # 0 < k < G: groups with a signal
formula_gap = max(max(abs(row["right"] - row["right_formula"]), abs(row["wrong"] - row["wrong_formula"]))
                  for row in inner)
lone_right = [row["right"] for row in inner]                             # k = 1 .. G-1
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), constrained_layout=True)
ks = [row["k"] for row in inner]
axes[0].plot(ks, [row["right"] for row in inner], "o-", color="C2", label="right answer, group")
axes[0].plot(ks, [row["wrong"] for row in inner], "o-", color="C3", label="wrong answer, group")
axes[0].plot(ks, [row["none_right"] for row in inner], "s--", color="C2", alpha=0.6, label="right answer, none")
axes[0].plot(ks, [row["none_wrong"] for row in inner], "s--", color="C3", alpha=0.6, label="wrong answer, none")
axes[0].axhline(0, color="k", lw=0.6)
axes[0].set(xlabel=f"k right out of G={G}", ylabel="advantage", title="advantage of one answer")
axes[0].legend(fontsize=8)
axes[1].plot(ks, [row["sq_group"] for row in inner], "o-", label="group (z-score): G - 1")
axes[1].plot(ks, [row["sq_none"] for row in inner], "s--", label="none (Dr. GRPO): G p(1-p)")
axes[1].set(xlabel=f"k right out of G={G}", ylabel="sum of A² over the group", title="how hard the prompt pushes")
axes[1].legend(fontsize=8)
plt.show()

# %% [markdown]
# ### How large can one advantage get?
# Not arbitrarily large. For any G numbers, no value lies further from their mean than
# (G−1)/√G sample stds (Samuelson's inequality, written for the sample std, divisor G − 1, the
# one the kit uses; with the population std, divisor G, the bound would be √(G−1)). So under the
# kit's `group` estimator every advantage has |A_i| < (G−1)/√G, whatever the rewards, and the lone
# right answer at k = 1 reaches it, less a hair for ε_std: exactly (1 − 1/G)/(1/√G + ε_std). The
# bound grows like √G with the group size, but for a given G it is fixed. The cell checks it for
# every k and for 1000 groups of random rewards.

# %%
bound_gen = torch.Generator().manual_seed(SEED + 1)       # its own generator: section 4's draws stay the same
bound_rows = []
for g_size in (2, 4, 8, 16, 64):
    one_right = torch.tensor([[1.0] + [0.0] * (g_size - 1)])                                  # (1, G) k = 1
    lone = float(A.compute_advantages(one_right, "group")[0, 0])
    exact = (1 - 1 / g_size) / (math.sqrt(1 / g_size) + A.EPS)         # s = 1/sqrt(G) at k = 1
    bound = (g_size - 1) / math.sqrt(g_size)
    every_k = torch.tensor([[1.0] * k + [0.0] * (g_size - k) for k in range(1, g_size)])      # (G-1, G)
    random_rewards = torch.rand(1000, g_size, generator=bound_gen)                            # (1000, G)
    largest = max(float(A.compute_advantages(x, "group").abs().max()) for x in (every_k, random_rewards))
    assert abs(lone - exact) < 1e-5, (g_size, lone, exact)
    assert largest <= bound and bound - lone < 1e-3 * bound, (g_size, lone, largest, bound)
    bound_rows.append((g_size, lone, bound, largest))
    print(f"G={g_size:>2}: lone right answer {lone:.4f}, bound (G-1)/sqrt(G) {bound:.4f}, "
          f"largest |A| over every k and 1000 random groups {largest:.4f}; population-std bound sqrt(G-1) "
          f"{math.sqrt(g_size - 1):.4f}")

# %% [markdown]
# ### Try it: k of G correct, `group` against `none`
# Move k and switch the estimator: the bars are the G advantages of that group (green: right
# answers, red: wrong). At k = 1 under `group` the lone right answer gets a push of about 2.5;
# under `none` it gets 0.875, and the prompt's total push shrinks.

# %%
def k_of_g_figure(k, scale, G=GROUP_SIZE):
    rk = torch.tensor([[1.0] * k + [0.0] * (G - k)])                     # (1, G)
    adv = A.compute_advantages(rk, scale)[0]                              # (G,)
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(range(G), adv.tolist(), color=["C2"] * k + ["C3"] * (G - k))
    ax.axhline(0, color="k", lw=0.6)
    ax.set(ylim=(-3, 3), xlabel="answer", ylabel="advantage",
           title=f"{k} of {G} right, scale_rewards={scale!r}: sum A² = {float((adv ** 2).sum()):.2f}")
    return fig


k_slider = W.IntSlider(value=1, min=0, max=GROUP_SIZE, description="k right", continuous_update=False)
scale_buttons = W.ToggleButtons(options=["group", "none"], value="group", description="scale_rewards")
k_out = redraw_on_change([k_slider, scale_buttons], lambda: k_of_g_figure(k_slider.value, scale_buttons.value))
display(W.VBox([W.HBox([k_slider, scale_buttons]), k_out]))

# %% [markdown]
# ## 2 · Every estimator on one group
#
# `advantage_table` runs each estimator that needs only rewards. Things to notice:
# - `group` (DeepSeekMath's z-score) and `batch` coincide here (the batch is this one group);
#   `none` (Dr. GRPO) is the same shape without the division by the std, and `rloo` is `none` times
#   G/(G-1).
# - `rank` only sees the order: each step up one rank is worth the same, whether the rewards differ by
#   0.1 or by 0.5.
# - `kmeans` compares each answer with answers of *similar* reward, so its signs look random (section 5).
# - `topk` (r minus the mean of the top-k rewards, k = 5) pushes most of the group down (4 of 6 here);
#   `topk_minus_own_BROKEN_SIGN` is its mirror image, a sign error you will meet in code:
#   [05](05_failure_collapse.ipynb) trains with it and shows what it does to a run.

# %%
r = torch.tensor([REWARDS])  # (1, G)
table = {name: adv[0] for name, adv in A.advantage_table(r).items()}
for name, adv in table.items():
    print(f"{name:>28}: " + " ".join(f"{v:+.3f}" for v in adv.tolist()))
fig = plot_advantage_bars(r[0], table, title=f"one group, G={r.shape[1]}")
plt.show()

# %% [markdown]
# ### Try it: drag the rewards
#
# The sliders redraw the same chart for the group you set (in a live kernel; a headless run shows
# the static chart above). Try: make two answers tie; make one answer an outlier (0.0 among 1.0s)
# and compare `group` with `rank`; set all rewards equal.

# %%
advantage_sliders(REWARDS)

# %% [markdown]
# ## 3 · A zero-variance group
#
# When every answer gets the same reward (all right, or all wrong) there is nothing to compare.
# The std is 0, and a z-score written without care divides 0 by 0. A variant you will meet in
# quick implementations writes exactly `(g - g.mean()) / g.std()`. The kit adds TRL's
# eps = 1e-4, and every estimator in the table returns 0 there.

# %%
flat = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
naive = (flat - flat.mean()) / flat.std()          # the eps-free z-score
print("z-score without eps:", naive.tolist())
zero_table = A.advantage_table(flat)
for name, adv in zero_table.items():
    print(f"{name:>28}: {adv.tolist()}")
zero_var_max = max(float(a.abs().max()) for a in zero_table.values())
naive_is_nan = bool(torch.isnan(naive).all())

# %% [markdown]
# ## 4 · How noisy is the group's std, for 0/1 rewards?
#
# GRPO divides by the std of G rewards, estimated from those same G rewards. Textbooks give its
# noise for **Gaussian** rewards: the sample std follows a chi distribution, and its relative
# noise std(s)/E[s] is `A.sample_std_relative_noise(G)`. The rewards here are not Gaussian: each
# answer is right with probability p, so k ~ Binomial(G, p) and the sample std is a function of
# k alone, $s_k = \sqrt{k(G-k) / (G(G-1))}$. Its noise can be computed exactly by summing over
# k. We keep the groups with 0 < k < G (the all-equal ones get advantage 0 whatever s is):
#
# $$E[s] = \sum_{k=1}^{G-1} w_k\, s_k, \quad E[s^2] = \sum_{k=1}^{G-1} w_k\, s_k^2, \quad
# w_k = \frac{\binom{G}{k} p^k (1-p)^{G-k}}{1 - p^G - (1-p)^G}$$
#
# We compare that with `N_TRIALS` simulated groups for each G, and draw the Gaussian formula
# beside it. The second panel is what the noise does to one right answer's advantage: its spread
# across groups (exact sum over the other G − 1 answers, and simulated). The third panel is the
# chance of a zero-variance group, p^G + (1−p)^G.

# %%
def bernoulli_std_noise(G, p):
    """Exact std(s)/E[s] of the sample std over groups with 0 < k < G, k ~ Binomial(G, p)."""
    ks = range(1, G)
    w = [math.comb(G, k) * p ** k * (1 - p) ** (G - k) for k in ks]
    z = sum(w)
    s = [math.sqrt(k * (G - k) / (G * (G - 1))) for k in ks]
    mean = sum(wk * sk for wk, sk in zip(w, s)) / z
    var = sum(wk * sk * sk for wk, sk in zip(w, s)) / z - mean ** 2
    return math.sqrt(max(var, 0.0)) / mean


def right_answer_spread(G, p):
    """Exact std of a right answer's z-score advantage: the other G-1 answers hold k-1 ~ Binomial(G-1, p) right."""
    ks = range(1, G)                                                      # k = G: all right, advantage 0, left out
    w = [math.comb(G - 1, k - 1) * p ** (k - 1) * (1 - p) ** (G - k) for k in ks]
    z = sum(w)
    adv = [(1 - k / G) / (math.sqrt(k * (G - k) / (G * (G - 1))) + A.EPS) for k in ks]
    mean = sum(wk * ak for wk, ak in zip(w, adv)) / z
    return math.sqrt(max(sum(wk * ak * ak for wk, ak in zip(w, adv)) / z - mean ** 2, 0.0))


rel_measured, rel_exact, rel_gauss, spread_measured, spread_exact, zero_measured, zero_theory = ([] for _ in range(7))
for G in G_VALUES:
    b = (torch.rand(N_TRIALS, G, generator=gen, dtype=torch.float64) < P_CORRECT).double()  # (N, G) 0/1 rewards
    k = b.sum(1)                                                          # (N,)
    keep = (k > 0) & (k < G)
    s = b[keep].std(dim=1)                                                # (n,) sample std, divisor G - 1
    rel_measured.append(float(s.std() / s.mean()))
    rel_exact.append(bernoulli_std_noise(G, P_CORRECT))
    rel_gauss.append(A.sample_std_relative_noise(G))
    b[:, 0] = 1.0                                                         # answer 0 is right
    mixed = b.sum(1) < G
    spread_measured.append(float(A.group_zscore(b[mixed])[:, 0].std()))
    spread_exact.append(right_answer_spread(G, P_CORRECT))
    zero_measured.append(float((~keep).double().mean()))
    zero_theory.append(A.zero_variance_probability(P_CORRECT, G))

fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
plot_vs_theory(G_VALUES, rel_measured, rel_exact, "group size G", "std(s) / E[s]",
               f"noise of the group std, 0/1 rewards (p={P_CORRECT})", ax=axes[0])
axes[0].plot(G_VALUES, rel_gauss, ":", color="0.4", label="Gaussian (chi) formula")
axes[0].legend()
plot_vs_theory(G_VALUES, spread_measured, spread_exact, "group size G", "std of the advantage",
               "spread of a right answer's advantage", ax=axes[1])
plot_vs_theory(G_VALUES, zero_measured, zero_theory, "group size G", "fraction of groups",
               f"zero-variance groups, p={P_CORRECT}", ax=axes[2])
plt.tight_layout()
plt.show()
for G, m, e, g, sm, se in zip(G_VALUES, rel_measured, rel_exact, rel_gauss, spread_measured, spread_exact):
    print(f"G={G:>3}: relative noise of s {m:.4f} (exact {e:.4f}, Gaussian formula {g:.4f}); "
          f"right answer's advantage spread {sm:.3f} (exact {se:.3f})")

# %% [markdown]
# What the numbers say:
# - For 0/1 rewards the Gaussian formula **overstates** the std's noise at every G here, and gets
#   the shape wrong. At G = 2 every group with a signal is one right and one wrong answer, so s is
#   always the same (noise 0, not 0.76). The noise rises to a peak near G = 8 (for p = 0.3), then
#   falls as G grows.
# - The right answer's advantage follows the same pattern: its spread is largest around G = 8 and
#   falls from there on; at small G the groups with a signal are so few kinds that it hardly varies.
# - Small groups pay a different price instead: many are all-wrong or all-right and teach nothing
#   (third panel: 58% of groups at G = 2, p = 0.3).
# - What this noise does to training: the same right answer, to the same prompt, gets a different
#   push from one group to the next (the spread printed above for your G), because its advantage
#   depends on which other answers happened to be drawn with it. That noise averages out over steps;
#   it does not bias the update, it only makes each step's gradient noisier.

# %% [markdown]
# ## 5 · A variant you will meet: k-means reward buckets
#
# Cluster the whole batch's rewards with k-means and normalise within each cluster, instead of
# within each prompt's group (the kit's `advantage_estimator="kmeans"`; we know of no paper that
# tests it). Below, 8 prompts of different difficulty, 8 answers each, with partial-credit
# rewards. The x axis is the usual per-prompt advantage, the y axis the bucket advantage; points
# in the top-left and bottom-right quadrants get the opposite push under the two schemes.

# %%
P, G = 8, 8
difficulty = torch.linspace(0.1, 0.9, P).unsqueeze(1)                    # (P, 1) mean reward per prompt
rb = (difficulty + 0.15 * torch.randn(P, G, generator=gen)).clamp(0, 1)  # (P, G) partial credit
group_adv = A.group_zscore(rb)                                            # (P, G)
bucket_adv = A.kmeans_bucket(rb, n_clusters=4)                            # (P, G)
prompt_of = torch.arange(P).repeat_interleave(G)
fig = plot_buckets_vs_groups(group_adv.flatten(), bucket_adv.flatten(), prompt_of)
plt.show()
moving = (group_adv.abs() > 0.1) & (bucket_adv.abs() > 0.1)
sign_disagree = float(((group_adv.sign() != bucket_adv.sign()) & moving).float().sum() / moving.float().sum())
print(f"answers pushed in opposite directions: {sign_disagree:.1%}")

binary = (torch.rand(P, G, generator=gen) < 0.5).float()                 # 0/1 rewards
binary_bucket_max = float(A.kmeans_bucket(binary, n_clusters=4).abs().max())
binary_group_max = float(A.group_zscore(binary).abs().max())
print(f"0/1 rewards: largest bucket advantage {binary_bucket_max}, largest group advantage {binary_group_max:.3f}")

# %% [markdown]
# On 0/1 rewards each bucket holds only 0s or only 1s, so k-means buckets remove all the signal:
# every advantage is 0. With graded rewards they compare each answer with answers of similar
# reward from *other* prompts: an answer that is the best for its hard prompt can be pushed down
# because it sits at the low end of its bucket.


# %% [markdown]
# ## The claims, checked
# Every claim runs in smoke mode too (fewer simulated groups, tolerance 12% instead of 5%); the
# full run only tightens the simulation-against-theory checks.

# %%
record("k_of_g_formula_gap", formula_gap)
record("k_of_g_lone_right_advantage", lone_right)
record("k_of_g_sum_sq_group", [row["sq_group"] for row in inner])
record("z_score_bound_rows", bound_rows)
record("zero_variance_max_abs_advantage", zero_var_max)
record("eps_free_formula_gives_nan", naive_is_nan)
record("std_noise_measured", rel_measured)
record("std_noise_exact_bernoulli", rel_exact)
record("std_noise_gaussian_formula", rel_gauss)
record("right_answer_spread_measured", spread_measured)
record("right_answer_spread_exact", spread_exact)
record("zero_variance_fraction_measured", zero_measured)
record("kmeans_sign_disagreement", sign_disagree)
record("kmeans_binary_max_abs_advantage", binary_bucket_max)

# k of G: the formulas with the sample std; a right answer's advantage is largest at k = 1, a wrong one's at k = G-1
assert formula_gap < 1e-5, f"group advantages differ from (1-p)/s, -p/s by {formula_gap}"
assert all(a > b for a, b in pairwise(lone_right)), f"right answer's advantage should fall as k grows: {lone_right}"
wrong_adv = [row["wrong"] for row in inner]
assert all(a > b for a, b in pairwise(wrong_adv)), f"wrong answer's advantage should grow in size with k: {wrong_adv}"
for row in inner:
    assert abs(row["sq_group"] - (GROUP_SIZE - 1)) < 1e-2, row    # the same total push for every k
    assert abs(row["sq_none"] - row["sq_none_formula"]) < 1e-5, row
# zero-variance groups
assert naive_is_nan, "the eps-free z-score should give NaN on a zero-variance group"
assert zero_var_max == 0.0, f"a zero-variance group must give zero advantages, got {zero_var_max}"
# std noise for 0/1 rewards: simulation matches the exact sum, the Gaussian formula overstates it
for G, m, e, g in zip(G_VALUES, rel_measured, rel_exact, rel_gauss):
    assert abs(m - e) <= TOLERANCE * e + 1e-9, f"G={G}: measured relative noise {m:.4f} vs exact {e:.4f}"
    assert g > 1.4 * e, f"G={G}: the Gaussian formula ({g:.4f}) should overstate the 0/1 noise ({e:.4f})"
for G, m, e in zip(G_VALUES, spread_measured, spread_exact):
    assert abs(m - e) <= TOLERANCE * e + 1e-9, f"G={G}: right answer's spread {m:.4f} vs exact {e:.4f}"
big = [m for G, m in zip(G_VALUES, spread_measured) if G >= 8]
assert all(a > b for a, b in pairwise(big)), f"from G=8 on the spread should fall: {big}"
for G, m, t in zip(G_VALUES, zero_measured, zero_theory):
    assert abs(m - t) < 4 * (t * (1 - t) / N_TRIALS) ** 0.5 + 1e-9, f"G={G}: zero-var fraction {m} vs {t}"
# the k-means variant
assert binary_bucket_max == 0.0 and binary_group_max > 0, "k-means buckets should erase 0/1 rewards"
assert sign_disagree > 0.05, f"buckets and groups should disagree on some answers ({sign_disagree:.1%})"
print("claims hold: with the z-score a prompt's total push is G-1 whatever k, and the lone right (wrong) answer's "
      f"advantage reaches {lone_right[0]:.2f} at k=1, the bound (G-1)/sqrt(G); zero-variance groups give 0 (eps-free: NaN); "
      f"the 0/1 std noise matches the exact sum within {TOLERANCE:.0%} and the Gaussian formula overstates it; "
      f"k-means buckets disagree with prompt groups on {sign_disagree:.0%} of answers and erase 0/1 rewards")

# %% [markdown]
# ## Summary
# - With 0/1 rewards and `scale_rewards="group"`, every group with 0 < k < G right answers has
#   Σ A² = G − 1: a prompt solved once in 8 pushes on the model as hard as one solved 4 times in 8.
#   Without the division (`none`, Dr. GRPO) the push is G p(1 − p), largest at k = G/2.
# - The kit's z-score divides by the sample std (divisor G − 1), so no advantage exceeds
#   (G − 1)/√G in size, whatever the rewards; the lone right answer at k = 1 reaches it (2.47 at G = 8).
# - A group whose rewards are all equal gets advantage 0 from every estimator in the table; the
#   z-score written without ε_std gives NaN there.
# - For 0/1 rewards the noise of the group's std can be computed exactly from Binomial(G, p); the
#   Gaussian (chi) formula overstates it at every G from 2 to 64.
# - k-means reward buckets erase 0/1 rewards (every advantage 0) and, with graded rewards, push
#   some answers against their own group's verdict.
#
# ## Questions
# 1. G = 8 and one answer is right. Predict its `group` advantage and that of each wrong answer.
# 2. Can any answer in a group of 8 get a `group` advantage of 3, with rewards of your choosing?
# 3. The lone right answer's `group` advantage is 2.47 at G = 8. Predict it at G = 32.
# 4. At G = 2 with 0/1 rewards, why does the group's std not vary at all across the groups that
#    have a signal?
# 5. Why do k-means buckets give every answer an advantage of 0 when rewards are 0 or 1?
#
# <details><summary>Answers</summary>
#
# 1. p = 1/8 and s = 1/√8 = 0.354: the right answer gets (7/8)/0.354 = 2.47 = 7/√8, each wrong
#    answer −(1/8)/0.354 = −0.35 (the table in section 1 prints both).
# 2. No: |A_i| < (G − 1)/√G = 7/√8 = 2.47 for any rewards, with the sample std the kit uses.
# 3. (G − 1)/√G = 31/√32 = 5.48 (a hair less for ε_std): larger, like √G, yet fixed for each G.
# 4. A group of two with a signal is always one right and one wrong answer, so its std is always
#    1/√2 (the all-equal pairs are left out; they get advantage 0 whatever the std).
# 5. Each bucket holds rewards close to each other; with only two values each bucket holds only 0s
#    or only 1s, so every answer equals its bucket's mean.
# </details>
#
# ## Exercises
# 1. A prompt is solved 2 times out of 16. Under `group`, what advantage does each right answer
#    get, and what does each right answer get under `none`? (Use the formulas of section 1, then
#    check with `A.compute_advantages`.)
# 2. **Code.** Under `none` a prompt's total push is Σ A² = G p(1−p). For G = 8, which k pushes
#    hardest, and how many times harder than k = 1? Check both with `A.compute_advantages`, and
#    compare with `group`, where every k from 1 to 7 pushes G − 1 = 7.
# 3. Why does `rloo` give exactly `none` times G/(G−1)? (Write the mean of the *other* G−1 rewards.)
#
# <details><summary>Solutions to 1 and 3</summary>
#
# 1. p = 1/8, s = √(16/15 · 1/8 · 7/8) = 0.3416, so a right answer gets 0.875/0.3416 = 2.56 under
#    `group` and 0.875 under `none`.
# 3. r_i − (S − r_i)/(G−1) = (G r_i − S)/(G−1) = G/(G−1) · (r_i − S/G), with S the group's sum.
# </details>
#
# The solution to 2 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 2: G p(1-p) is largest at p = 1/2, k = 4: 8 * 1/4 = 2; at k = 1 it is 8 * 1/8 * 7/8 = 0.875.
G = 8
push = {}
for k in range(1, G):
    rk = torch.tensor([[1.0] * k + [0.0] * (G - k)])                     # (1, G) k right answers
    push[k] = float((A.compute_advantages(rk, "none") ** 2).sum())
hardest = max(push, key=push.get)
assert hardest == G // 2 and abs(push[hardest] - 2.0) < 1e-6 and abs(push[1] - 0.875) < 1e-6, push
assert abs(push[hardest] / push[1] - 16 / 7) < 1e-5
print("none, sum of A^2 by k:", {k: round(v, 3) for k, v in push.items()})
print(f"k = {hardest} pushes {push[hardest] / push[1]:.2f} times harder than k = 1 (16/7); under group every k pushes 7")

# %% [markdown]
# **Next:** [02 · The GRPO loss](02_the_grpo_loss.ipynb): what the clip, the KL term and the
# aggregation each do to the gradient.
