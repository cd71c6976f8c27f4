"""Cells of notebooks/01_group_normalization.ipynb (built by tools/build_notebooks.py)."""
from build_notebooks import code, md

NAME = "01_group_normalization.ipynb"

CELLS = [
    md("""
# 01 · Group normalisation: what each advantage estimator does to a group of rewards

GRPO has no critic. It samples **G answers to the same prompt** (a *group*) and turns their
rewards into **advantages** by comparing each answer with the rest of its group. How exactly it
compares them is the *advantage estimator*, and it is one config field:
`GRPOConfig(advantage_estimator=..., scale_rewards=...)`.

This notebook puts every estimator in `grpo_kit.advantages` side by side on one group, then asks
four questions:
1. What happens to a group whose rewards are all equal?
2. How noisy is the group's std, the number GRPO divides by, as a function of G?
3. When do k-means reward buckets (a seed design) disagree with per-prompt groups?
4. What does the seed's "top-k minus own reward" do?

It ends by asserting each answer.
"""),
    code("""
# Parameters (papermill overrides these). SMOKE=True uses fewer simulated groups.
SMOKE = False
SEED = 0
REWARDS = [0.0, 0.3, 0.5, 0.9, 1.0, 0.2]   # the group you can edit with sliders below
N_TRIALS = 20000                            # simulated groups per group size
G_VALUES = [2, 4, 8, 16, 32, 64]
P_CORRECT = 0.3                             # Bernoulli success rate for the zero-variance simulation
TOLERANCE = 0.05                            # allowed relative gap between simulation and theory
""", tags=["parameters"]),
    code("""
import inspect

import matplotlib.pyplot as plt
import torch

from grpo_kit import advantages as A
from grpo_kit.nbtools import record
from grpo_kit.plotting import plot_advantage_bars, plot_buckets_vs_groups, plot_vs_theory

if SMOKE:
    N_TRIALS, TOLERANCE = 4000, 0.12
gen = torch.Generator().manual_seed(SEED)
print(A.__doc__)
"""),
    md("""
## 1 · Every estimator on one group

`advantage_table` runs each estimator that needs only rewards. Things to notice:
- `group` (DeepSeekMath) and `batch` coincide here (the batch is this one group); `none` (Dr. GRPO)
  is the same shape without the division by the std, and `rloo` is `none` times G/(G-1).
- `rank` only sees the order: the gap between 0.9 and 1.0 counts as much as between 0.0 and 0.5.
- `kmeans` compares each answer with answers of *similar* reward, so its signs look random.
- `topk` (corrected) pushes nearly everyone down; `topk_minus_own_BROKEN_SIGN` is its mirror image.
"""),
    code("""
r = torch.tensor([REWARDS])  # (1, G)
table = {name: adv[0] for name, adv in A.advantage_table(r).items()}
for name, adv in table.items():
    print(f"{name:>28}: " + " ".join(f"{v:+.3f}" for v in adv.tolist()))
fig = plot_advantage_bars(r[0], table, title=f"one group, G={r.shape[1]}")
plt.show()
"""),
    md("""
### Try it: drag the rewards

The sliders below redraw the same chart for the group you set (in a live kernel; a headless run
shows the static chart above). Try: make two answers tie; make one answer an outlier (0.0 among
1.0s) and compare `group` with `rank`; set all rewards equal.
"""),
    code("""
from grpo_kit.widgets import advantage_sliders

advantage_sliders(REWARDS)
"""),
    md("""
## 2 · A zero-variance group

When every answer gets the same reward (all right, or all wrong) there is nothing to compare.
The std is 0, and a naive z-score divides 0 by 0. Seed document 000 writes exactly that:
`(g - g.mean()) / g.std()`. The kit adds TRL's eps = 1e-4, and every estimator returns 0 there.
"""),
    code("""
flat = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
naive = (flat - flat.mean()) / flat.std()          # the seed's formula, without eps
print("seed 000's formula:", naive.tolist())
zero_table = A.advantage_table(flat)
for name, adv in zero_table.items():
    print(f"{name:>28}: {adv.tolist()}")
zero_var_max = max(float(a.abs().max()) for a in zero_table.values())
naive_is_nan = bool(torch.isnan(naive).all())
record("zero_variance_max_abs_advantage", zero_var_max)
record("seed_formula_gives_nan", naive_is_nan)
"""),
    md("""
## 3 · How noisy is the group's std?

GRPO divides by the std of G rewards, estimated from those same G rewards. With few answers that
estimate is noisy, and so is every advantage. For Gaussian rewards the sample std follows a chi
distribution, which gives its relative noise exactly:
""" + "\n```python\n" + "# see inspect.getsource(A.sample_std_relative_noise)\n```\n" + """
We simulate `N_TRIALS` groups for each G and compare with the theory line. The second panel is
the advantage of one fixed answer, one true std above the mean: its spread across groups is the
noise GRPO injects into that answer's gradient.

With 0/1 rewards the other danger is a group that is all-right or all-wrong: probability
p^G + (1-p)^G, the third panel.
"""),
    code("""
print(inspect.getsource(A.sample_std_relative_noise))
rel_measured, rel_theory, adv_spread, zero_measured, zero_theory = [], [], [], [], []
for G in G_VALUES:
    x = torch.randn(N_TRIALS, G, generator=gen, dtype=torch.float64)     # (N, G) Gaussian rewards
    s = x.std(dim=1)                                                      # (N,) sample std, unbiased
    rel_measured.append(float(s.std() / s.mean()))
    rel_theory.append(A.sample_std_relative_noise(G))
    x[:, 0] = 1.0                                                         # answer 0: one std above the mean
    adv_spread.append(float(A.group_zscore(x)[:, 0].std()))
    b = (torch.rand(N_TRIALS, G, generator=gen) < P_CORRECT).float()     # (N, G) Bernoulli rewards
    zero_measured.append(float(A.zero_std_groups(b).float().mean()))
    zero_theory.append(A.zero_variance_probability(P_CORRECT, G))

fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
plot_vs_theory(G_VALUES, rel_measured, rel_theory, "group size G", "std(s) / E[s]",
               "noise of the group std (Gaussian rewards)", ax=axes[0])
axes[1].plot(G_VALUES, adv_spread, "o-")
axes[1].set_xscale("log", base=2)
axes[1].set(xlabel="group size G", ylabel="std of the advantage", title="noise of one answer's advantage")
plot_vs_theory(G_VALUES, zero_measured, zero_theory, "group size G", "fraction of groups",
               f"zero-variance groups, Bernoulli(p={P_CORRECT})", ax=axes[2])
plt.tight_layout()
plt.show()
for G, m, t, a in zip(G_VALUES, rel_measured, rel_theory, adv_spread):
    print(f"G={G:>3}: relative std of s {m:.4f} (theory {t:.4f}), advantage spread {a:.3f}")
record("std_relative_noise_measured", rel_measured)
record("std_relative_noise_theory", rel_theory)
record("advantage_spread", adv_spread)
record("zero_variance_fraction_measured", zero_measured)
record("zero_variance_fraction_theory", zero_theory)
"""),
    md("""
## 4 · k-means reward buckets vs per-prompt groups

Seed document 000 proposes clustering the whole batch's rewards with k-means and normalising
within each cluster. Below, 8 prompts of different difficulty, 8 answers each, with partial-credit
rewards. The x axis is the usual per-prompt advantage, the y axis the bucket advantage; points in
the top-left and bottom-right quadrants get the opposite push under the two schemes.
"""),
    code("""
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
record("kmeans_sign_disagreement", sign_disagree)
record("kmeans_binary_max_abs_advantage", binary_bucket_max)
"""),
    md("""
On 0/1 rewards each bucket holds only 0s or only 1s, so k-means buckets remove all the signal:
every advantage is 0. With graded rewards they compare each answer with answers of similar
reward from *other* prompts: an answer that is the best for its hard prompt can be pushed down
because it sits at the low end of its bucket.

## 5 · "Top-k minus own reward"

Seed document 001 writes `advantages[i] = mean(rewards[top_k]) - rewards[i]`. With that sign
the worst answer gets the largest advantage: gradient ascent makes the model worse. The kit
ships it as `topk_minus_own_BROKEN_SIGN` (for the failure-mode notebooks) beside the corrected
`topk_baseline`.
"""),
    code("""
print(inspect.getsource(A.topk_minus_own_BROKEN_SIGN))
broken = table["topk_minus_own_BROKEN_SIGN"]
worst, best = int(r[0].argmin()), int(r[0].argmax())
print(f"worst answer (r={REWARDS[worst]}): broken advantage {broken[worst]:+.3f}; "
      f"best answer (r={REWARDS[best]}): {broken[best]:+.3f}")
record("broken_topk_argmax_is_worst", int(broken.argmax()) == worst)
record("fixed_topk_argmax_is_best", int(table["topk"].argmax()) == best)
"""),
    md("""
## The claims, checked
"""),
    code("""
assert naive_is_nan, "the seed's eps-free z-score should give NaN on a zero-variance group"
assert zero_var_max == 0.0, f"a zero-variance group must give zero advantages, got {zero_var_max}"
for G, m, t in zip(G_VALUES, rel_measured, rel_theory):
    assert abs(m - t) / t < TOLERANCE, f"G={G}: measured relative std {m:.4f} vs theory {t:.4f}"
for G, m, t in zip(G_VALUES, zero_measured, zero_theory):
    assert abs(m - t) < 4 * (t * (1 - t) / N_TRIALS) ** 0.5 + 1e-9, f"G={G}: zero-var fraction {m} vs {t}"
assert all(a > b for a, b in zip(adv_spread, adv_spread[1:])), "advantage noise should fall with G"
assert binary_bucket_max == 0.0 and binary_group_max > 0, "k-means buckets should erase 0/1 rewards"
assert sign_disagree > 0.05, f"buckets and groups should disagree on some answers ({sign_disagree:.1%})"
assert int(broken.argmax()) == worst and int(table["topk"].argmax()) == best
print("claims hold: zero-variance groups give 0 (the seed's formula gives NaN); the std's noise follows "
      f"the chi theory within {TOLERANCE:.0%} for G in {G_VALUES}; k-means buckets disagree with prompt groups on "
      f"{sign_disagree:.0%} of answers and erase 0/1 rewards; the seed's top-k sign rewards the worst answer")
"""),
]
