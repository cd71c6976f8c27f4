# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02b · Published variants side by side: GRPO with KL, Dr. GRPO, DAPO, GSPO
#
# **The question.** Which of the published GRPO variants (GRPO with KL, Dr. GRPO, DAPO, GSPO) trains the tiny model best at the same budget of generated completions?
#
# [02](02_the_grpo_loss.ipynb) took the loss apart: the clip, the KL term, the aggregation. The
# variants you will read about are choices of those pieces, plus the advantage's scaling from
# [01](01_group_normalization.ipynb):
#
# | variant | paper | what it changes |
# |---|---|---|
# | `grpo_kl` | DeepSeekMath (Shao et al., 2024, arXiv 2402.03300) | z-score advantages, per-completion mean, a KL penalty (k3, β = 0.04) |
# | `dr_grpo` | Dr. GRPO (Liu et al., 2025, arXiv 2503.20783) | no std scaling, a constant normaliser (no length bias) |
# | `dapo` | DAPO (Yu et al., 2025, arXiv 2503.14476) | clip-higher (ε_high = 0.28 > ε_clip = 0.2), token-level mean |
# | `gspo` | GSPO (Zheng et al., 2025, arXiv 2507.18071) | one ratio per sequence (the geometric mean of the token ratios), clipped at 3e-4 / 4e-4 |
#
# DAPO's dynamic sampling and overlong shaping are left out here: [04b](04b_informative_groups.ipynb)
# runs dynamic sampling.
#
# **What you will learn**
# 1. each variant as a config diff, and why the ratio-dependent ones need more than one update per batch;
# 2. how to compare runs of RL fairly: the same generated completions per arm, several seeds, and a
#    gap read against twice its standard error;
# 3. what the clip ratio on the dashboard says about which variant's clip acts.
#
# **How long it takes**: about 4 minutes with the default parameters (12 runs of 120 steps with
# 2 updates each), about 15 s with `SMOKE = True` (run headless on 2 quiet CPU cores).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: two seeds of a few steps each; the training
# claims need the full run. GRPO_KIT_SMOKE=1 in the environment sets SMOKE too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
COMPARE_STEPS = 120         # GRPO steps per variant and seed
SEEDS = [0, 1, 2]           # seeds per variant
EVAL_SIZE = 200             # held-out problems per evaluation
THREADS = 2

# %%
import time

import matplotlib.pyplot as plt
import torch
from grpo_kit import GRPOConfig
from grpo_kit.eval import diagnose, gap_reading
from grpo_kit.lab import train_arms
from grpo_kit.view import Dashboard, record, smoke_banner, smooth

if SMOKE:
    COMPARE_STEPS, EVAL_SIZE, THREADS, SEEDS = 2, 20, 1, SEEDS[:2]
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. Each variant is a config diff
#
# The names below say exactly what runs; everything not listed is the kit's default
# (`GRPOConfig()`: G = 8, 16 prompts per step, lr 3e-4, temperature 1.0). To make the
# ratio-dependent parts (clip-higher, GSPO's sequence ratio) act at all, every variant takes
# `num_iterations=2` updates per sampled batch: with a single update the ratio ρ is exactly 1 when
# the gradient is taken ([02](02_the_grpo_loss.ipynb), section 1), and GSPO and clip-higher reduce
# to plain GRPO. Whether two updates are enough for a clip to act is measured (section 4 prints the
# share of tokens each variant's clip stopped).

# %%
VARIANTS = {
    # name (its first word picks the dashboard colour): config fields
    "grpo_kl (DeepSeekMath: z-score, per-completion mean, KL k3 beta 0.04)":
        dict(scale_rewards="group", loss_type="grpo", beta=0.04, kl_estimator="k3"),
    "dr_grpo (Dr. GRPO: mean-centred, constant normaliser)":
        dict(scale_rewards="none", loss_type="dr_grpo"),
    "dapo (DAPO's clip-higher 0.28 + token mean; no dynamic sampling, no overlong shaping)":
        dict(scale_rewards="group", loss_type="dapo", epsilon_high=0.28),
    "gspo (GSPO: one sequence-level ratio, clip 3e-4 / 4e-4)":
        dict(scale_rewards="group", loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4,
             epsilon_high=4e-4),
}
default = GRPOConfig()
for name, changes in VARIANTS.items():
    diff = {k: (getattr(default, k), v) for k, v in changes.items() if getattr(default, k) != v}
    print(f"{name}\n    changes from the default: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in diff.items()))

# %% [markdown]
# ## 2. Twelve runs on the dashboard
#
# One run of RL is one draw: the same config with another seed samples other completions and ends
# elsewhere. So each variant trains with every seed in `SEEDS`, all at the same number of steps,
# hence the same generated completions (steps × 128). The dashboard draws every run as it trains
# (one colour per variant, one line style per seed). Watch its KL panel: only one variant has a
# term in its loss that pulls it back.

# %%
COMMON = dict(steps=COMPARE_STEPS, eval_every=max(COMPARE_STEPS // 4, 1), eval_size=EVAL_SIZE, threads=THREADS,
              num_iterations=2)
ARMS = {name.split()[0]: changes for name, changes in VARIANTS.items()}  # the short name: its config fields
compare_dash = Dashboard(total_steps=COMPARE_STEPS, title=f"four variants x {len(SEEDS)} seeds")
t_all = time.time()
compare = train_arms(ARMS, SEEDS, COMMON, dash=compare_dash)  # (variant, seed) -> run
compare_dash.close()
for (short, seed), run in compare.items():
    print(f"{short:<8} seed {seed}  clipped tokens (last 30 steps) {run.tail_mean('clip_ratio/region_mean', 30):.3f}")
compare_seconds = time.time() - t_all
# what diagnose reports on each healthy run (nothing, we expect: a finding here would be a false alarm)
record("variant_findings", {f"{short} seed {seed}": [f.kind for f in diagnose(run.history, run.cfg)]
                             for (short, seed), run in compare.items()})
print(f"\nall {len(compare)} runs: {compare_seconds:.0f} s")

# %% [markdown]
# ## 3. Mean and spread over seeds
#
# Left, the training reward (each answer right or wrong, averaged over the step's 128 completions);
# right, greedy accuracy on held-out problems the runs never train on. The line is the mean over
# seeds, the band the lowest and highest seed.

# %%
shorts = [name.split()[0] for name in VARIANTS]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
summary = {}
for short in shorts:
    runs = [compare[(short, seed)] for seed in SEEDS]
    colour = compare_dash.styles.variant_colour(short)
    steps = [st for st, _ in runs[0].evals]
    accs = torch.tensor([[a for _, a in r.evals] for r in runs])                      # (seeds, evals)
    axes[1].plot(steps, accs.mean(0), "o-", color=colour, label=short)
    axes[1].fill_between(steps, accs.min(0).values, accs.max(0).values, color=colour, alpha=0.2)
    rewards = torch.tensor([smooth([m["reward"] for m in r.history], 20) for r in runs])  # (seeds, steps)
    xs = [m["step"] for m in runs[0].history]
    axes[0].plot(xs, rewards.mean(0), color=colour, label=short)
    axes[0].fill_between(xs, rewards.min(0).values, rewards.max(0).values, color=colour, alpha=0.2)
    final_accs = accs[:, -1]                                                           # (seeds,)
    summary[short] = dict(mean=float(final_accs.mean()), min=float(final_accs.min()), max=float(final_accs.max()),
                          std=float(final_accs.std()) if len(SEEDS) > 1 else 0.0, per_seed=final_accs.tolist(),
                          clipped=sum(r.tail_mean("clip_ratio/region_mean", 30) for r in runs) / len(runs))
axes[0].set(title="reward (20-step mean; band: min-max over seeds)", xlabel="step")
axes[1].set(title="held-out greedy accuracy (mean; band: min-max)", xlabel="step")
axes[1].legend(fontsize=8)
plt.show()
base_acc = compare[(shorts[0], SEEDS[0])].evals[0][1]
print(f"base: {base_acc:.1%} on {EVAL_SIZE} held-out problems; after {COMPARE_STEPS} steps:")
print(f"{'variant':<9} {'mean':>6} {'min':>6} {'max':>6} {'std':>6} {'clipped':>8}   per seed")
for short, row in summary.items():
    print(f"{short:<9} {row['mean']:6.1%} {row['min']:6.1%} {row['max']:6.1%} {row['std']:6.1%} "
          f"{row['clipped']:8.3f}   " + " ".join(f"{a:.1%}" for a in row["per_seed"]))

# %% [markdown]
# ## 4. Reading the gaps
#
# A gap between two variants is a verdict only when it is larger than twice its standard error over
# seeds (`grpo_kit.eval.gap_reading`, the rule notebooks 04-08 use too). Here every variant is read
# against `grpo_kl`, DeepSeekMath's recipe; a spread like the one in the table above (one seed of a
# variant can end 20 points below another) is why one seed per arm decides nothing.

# %%
gaps = {}
for short in shorts[1:]:
    g = gap_reading(summary[shorts[0]]["per_seed"], summary[short]["per_seed"])
    gaps[short] = g
    print(f"{short:<8} against {shorts[0]}: {g.text()}")
clear = [s for s, g in gaps.items() if g.verdict in ("higher", "lower")]
if SMOKE:
    print("SMOKE run: these are not results (a few steps, two seeds)")
elif clear:
    print("clear at this budget: " + ", ".join(f"{s} {gaps[s].verdict}" for s in clear)
          + "; every other gap is within 2 SE")
else:
    print(f"no variant ends clearly above or below {shorts[0]} at {COMPARE_STEPS} steps and {len(SEEDS)} seeds: "
          "every gap is within 2 SE")
worst_clip = max(summary, key=lambda s: summary[s]["clipped"])
print(f"the clip acts most in {worst_clip} ({summary[worst_clip]['clipped']:.3f} of tokens); "
      + ", ".join(f"{s} {row['clipped']:.3f}" for s, row in summary.items() if s != worst_clip))
if summary["dapo"]["clipped"] < 0.01:
    print(f"clip-higher barely acted ({summary['dapo']['clipped']:.3f} of dapo's tokens were clipped): at this learning "
          "rate two updates rarely move a token's ratio past 1 ± 0.2, so here the dapo arm tests its token-level "
          "aggregation, not clip-higher")

# %% [markdown]
# ## The claims, checked
# Smoke mode checks that every variant's runs train with finite losses and that each config differs
# from the default in exactly the fields its name lists. **Only the full run** checks that every
# variant, with every seed, beats the base model's held-out accuracy after `COMPARE_STEPS` steps,
# and that GSPO's tight sequence-level clip acts on more tokens than any token-level clip. Which
# variant is ahead is read with the 2-SE rule above and reported, not asserted.

# %%
record("variant_summary", summary)
record("variant_base_accuracy", base_acc)
record("variant_gaps", {s: g.fields() for s, g in gaps.items()})
record("compare_seconds", compare_seconds)
for key, run in compare.items():
    assert all(torch.isfinite(torch.tensor([m["loss"] for m in run.history]))), key
for name, changes in VARIANTS.items():
    cfg = GRPOConfig(**changes)
    assert all(getattr(cfg, k) == v for k, v in changes.items()), name
if SMOKE or compare_dash.stopped:
    print("every run trained with finite losses; the training claims need the full run (SMOKE=False, not stopped).")
else:
    for short, row in summary.items():
        assert row["min"] > base_acc, f"{short}: worst seed {row['min']:.1%} <= base {base_acc:.1%}"
    assert worst_clip == "gspo", f"the clip acted most in {worst_clip}, not in GSPO's 3e-4 band"
    print("claims hold: every variant, with every seed, beats the base "
          f"({base_acc:.1%} -> worst seed {min(r['min'] for r in summary.values()):.1%}); GSPO's clip acts most")

# %% [markdown]
# ## Summary
# - Each published variant is a few config fields: the advantage's scaling (`scale_rewards`), the
#   aggregation (`loss_type`), the clip (`epsilon`, `epsilon_high`, `importance_sampling_level`) and
#   the KL penalty (`beta`).
# - Clip-higher and GSPO's sequence ratio only act when a batch is used for more than one update
#   (`num_iterations` > 1); GSPO's band of 3e-4 / 4e-4 clips a large share of tokens, the others almost none.
# - Every variant trains the tiny model with every seed; the seeds of one variant can end far apart,
#   so a ranking needs several seeds per arm and a gap larger than twice its standard error.
# - The answer to the question, at this budget: none of them. In our full run (2026-12-07,
#   `pytest -m full`) `grpo_kl` ended highest (mean 82.0%, the others 68-76%), but every gap was within
#   2 SE; the table above gives your run's reading.
#
# ## Questions
# 1. Why does every run here use `num_iterations=2`? What would GSPO and DAPO's clip-higher reduce to with 1?
# 2. Which of the four variants is pulled back toward the reference model, and by which field?
# 3. Two variants end 6 points apart on one seed. What do you need before you say one is better?
# 4. Why must every arm of a comparison spend the same number of generated completions?
#
# <details><summary>Answers</summary>
#
# 1. With one update per batch the ratio ρ is exactly 1 when the gradient is taken, so no token is
#    ever clipped: GSPO and clip-higher then train exactly as plain GRPO with the same aggregation.
# 2. `grpo_kl`, with `beta = 0.04`; the others set β = 0 and only log the KL.
# 3. Several seeds per arm (here 3) and a gap larger than twice its standard error over seeds; the
#    table's spread shows that one seed of a variant can end 20 points from another.
# 4. More completions means more signal: an arm that sampled more would win for that reason alone.
# </details>
#
# ## Exercises
# 1. Why does GSPO need an epsilon about a thousand times smaller than GRPO's?
# 2. Look at the dashboard's KL panel: which variant stays closest to the reference, and why?
# 3. **Code.** GSPO's sequence ratio is exp of the mean per-token log-ratio. For a completion whose
#    three token ratios are 1.1, 0.9 and 1.2, compute the sequence ratio and say whether GSPO's clip
#    (1 ± 3e-4 / 4e-4) would stop the gradient for A > 0.
#
# <details><summary>Solutions to 1 and 2</summary>
#
# 1. GSPO's ratio is the exponential of the *mean* per-token log-ratio, which moves far less than a
#    single token's ratio; the GSPO paper uses 3e-4 / 4e-4.
# 2. `grpo_kl`: it is the only variant whose loss has the KL term (beta = 0.04) pulling it back
#    toward the reference; the others only log the KL.
# </details>
#
# The solution to 3 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 3: exp(mean(log 1.1, log 0.9, log 1.2)) = (1.1 * 0.9 * 1.2) ** (1/3) = 1.0591.
from grpo_kit.core import losses as L

token_ratios = torch.tensor([[1.1, 0.9, 1.2]])                           # (1, 3)
seq_ratio = torch.exp(torch.log(token_ratios).mean(-1))                  # (1,)
assert abs(float(seq_ratio) - (1.1 * 0.9 * 1.2) ** (1 / 3)) < 1e-6
r = seq_ratio.clone().requires_grad_(True)
obj = -L.clipped_surrogate(r[:, None], torch.tensor([1.0]), 3e-4, 4e-4).sum()
grad, = torch.autograd.grad(obj, r)
assert float(seq_ratio) > 1 + 4e-4 and float(grad) == 0.0          # past the band: no gradient for A > 0
print(f"sequence ratio {float(seq_ratio):.4f} > 1.0004: GSPO's clip stops the gradient (grad {float(grad)})")

# %% [markdown]
# **Next:** [03 · Judges and preferences](03_judges_and_preferences.ipynb): how a judge turns
# free-text answers into rewards and comparisons.
