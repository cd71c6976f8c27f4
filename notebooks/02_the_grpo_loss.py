# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · The GRPO loss: clipping, KL estimators, aggregation, and variants side by side
#
# **The question.** What do the clip, the KL term and the aggregation each do to the gradient, and do the published variants built from them all train?
#
# The loss that GRPO minimises, per completion token t of completion i (DeepSeekMath eq. 3):
#
# $$L_{i,t} = -\min\big(\rho_{i,t} A_i,\ \mathrm{clip}(\rho_{i,t}, 1-\varepsilon_{\text{clip}}, 1+\varepsilon_{\text{high}}) A_i\big) + \beta\, \mathrm{KL}_{i,t},
# \qquad \rho_{i,t} = \frac{\pi_\theta(o_{i,t}\mid\cdot)}{\pi_{old}(o_{i,t}\mid\cdot)}$$
#
# and the per-token losses are then **aggregated** into one number. ρ is the importance ratio, A
# the advantage, β the KL coefficient ([00b](00b_from_reinforce_to_grpo.ipynb) derives each piece
# on a policy small enough to check by hand; [the reference card](REFERENCE.md) lists the notation).
#
# **What you will learn**, one piece at a time:
# 1. the clipped objective as a function of the ratio, and where its gradient is zero (sliders);
# 2. three estimators of the KL term, k1, k2 and k3, against the true KL;
# 3. per-completion versus token-level aggregation, and the length bias Dr. GRPO describes, on
#    real tiny-model runs of a task whose answers vary in length;
# 4. four published variants trained side by side, 3 seeds each, on the live dashboard, with
#    the spread between seeds.
#
# **How long it takes**: 7 minutes with the default parameters (15 training runs: 3 of 150 steps, 12 of
# 120 steps with 2 updates each), 16 s with `SMOKE = True` (run headless on 2 quiet CPU cores).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: fewer samples and a few steps per run; the
# training claims need the full run. GRPO_KIT_SMOKE=1 in the environment sets SMOKE too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEED = 0
KL_SAMPLES = 200_000        # samples per KL estimate
LENGTH_STEPS = 150          # GRPO steps per aggregation run (section 3)
COMPARE_STEPS = 120         # GRPO steps per variant and seed (section 4)
SEEDS = [0, 1, 2]           # seeds per variant (section 4)
EVAL_SIZE = 200             # held-out problems per evaluation
THREADS = 2

# %%
import inspect
import time

import ipywidgets as W
import matplotlib.pyplot as plt
import torch
from grpo_kit import GRPOConfig, setup, train
from grpo_kit.core import losses as L
from grpo_kit.view import Dashboard, record, redraw_on_change, smoke_banner, smooth
from IPython.display import display

if SMOKE:
    KL_SAMPLES, LENGTH_STEPS, COMPARE_STEPS, EVAL_SIZE, THREADS, SEEDS = 20_000, 2, 2, 20, 1, SEEDS[:2]
torch.manual_seed(SEED)
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. The clipped objective
#
# With one update per batch (`num_iterations=1`) the ratio is exactly 1 when the gradient is taken,
# and clipping never acts. It matters when the same samples are used for several updates, or are
# stale. The interval [1 − ε_clip, 1 + ε_high] is the **trust region**: inside it a token's ratio may
# move freely; past its edge, in the direction the advantage asks for, the token stops pushing.
# The objective per token, as a function of the ratio ρ:

# %%
print(inspect.getsource(L.clipped_surrogate))

def objective_curves(epsilon=0.2, epsilon_high=0.28):
    r = torch.linspace(0.0, 2.0, 401, requires_grad=True)
    curves = {}
    for a in (1.0, -1.0):
        obj = -L.clipped_surrogate(r[:, None], torch.tensor([a]), epsilon, epsilon_high)[:, 0]  # (N,)
        grad, = torch.autograd.grad(obj.sum(), r)
        curves[a] = (obj.detach(), grad)
    return r.detach(), curves

def plot_objective(epsilon=0.2, epsilon_high=0.28):
    r, curves = objective_curves(epsilon, epsilon_high)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
    for ax, a in zip(axes, (1.0, -1.0)):
        obj, grad = curves[a]
        ax.plot(r, obj, label="min(ρA, clip(ρ)A)")
        ax.plot(r, r * a, ls=":", color="0.5", label="rA (unclipped)")
        flat = grad == 0
        ax.scatter(r[flat], obj[flat], s=4, color="C3", label="zero gradient")
        ax.axvline(1 - epsilon, color="0.8"); ax.axvline(1 + epsilon_high, color="0.8")
        ax.set_title(f"A = {a:+.0f}"); ax.set_xlabel("ratio ρ"); ax.legend(fontsize=8)
    return fig

fig = plot_objective()

# %%
# Drag the sliders in JupyterLab (the static figure above is what a headless run shows).
eps_slider = W.FloatSlider(value=0.2, min=0.05, max=0.5, step=0.01, description="epsilon", continuous_update=False)
eps_high_slider = W.FloatSlider(value=0.28, min=0.05, max=0.8, step=0.01, description="epsilon_high",
                                continuous_update=False)
objective_out = redraw_on_change([eps_slider, eps_high_slider],
                                 lambda: plot_objective(eps_slider.value, eps_high_slider.value))
display(W.VBox([W.HBox([eps_slider, eps_high_slider]), objective_out]))

# %%
# The claim: for A > 0 the gradient vanishes once r > 1 + epsilon_high (no more pushing up a token
# already made more likely); for A < 0 once r < 1 - epsilon. Elsewhere it is A.
r, curves = objective_curves(0.2, 0.28)
g_pos, g_neg = curves[1.0][1], curves[-1.0][1]
assert torch.all(g_pos[r > 1.28 + 1e-6] == 0) and torch.all(g_pos[r < 1.28 - 1e-6] == 1)
assert torch.all(g_neg[r < 0.8 - 1e-6] == 0) and torch.all(g_neg[r > 0.8 + 1e-6] == -1)
print("clipping removes the gradient exactly where the ratio has moved past the trust region")


# %% [markdown]
# ## 2. Estimating the KL term
#
# The KL penalty needs KL(π_θ ‖ π_ref) per token, but only the sampled token's log-probabilities
# are at hand. With d = log π_ref(o) − log π_θ(o) for o sampled from π_θ (Schulman, "Approximating
# KL divergence"):
# - k1 = −d: unbiased, but often negative, high variance;
# - k2 = d²/2: biased, low variance;
# - k3 = e^d − d − 1 (the one DeepSeekMath uses): unbiased and always ≥ 0.

# %%
def kl_experiment(shift, V=12, n=KL_SAMPLES, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(V, generator=g)
    ref_logits = logits + shift * torch.randn(V, generator=g)
    logp_all, ref_all = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)   # (V,)
    true_kl = (logp_all.exp() * (logp_all - ref_all)).sum().item()
    o = torch.multinomial(logp_all.exp(), n, replacement=True, generator=g)               # (n,)
    logp, ref = logp_all[o][None], ref_all[o][None]                                      # (1, n)
    est = {k: L.kl_estimate(logp, ref, k)[0] for k in ("k1", "k2", "k3")}                # (n,)
    return true_kl, est

rows = []
for shift in (0.1, 0.5, 1.0, 2.0):
    true_kl, est = kl_experiment(shift)
    for k, v in est.items():
        se = v.std().item() / len(v) ** 0.5
        rows.append(dict(shift=shift, true_kl=true_kl, estimator=k, mean=v.mean().item(), std=v.std().item(),
                         se=se, frac_negative=(v < 0).float().mean().item()))
print(f"{'shift':>5} {'true KL':>8} {'est':>4} {'mean':>8} {'std':>8} {'neg %':>6}")
for r_ in rows:
    print(f"{r_['shift']:>5} {r_['true_kl']:>8.4f} {r_['estimator']:>4} {r_['mean']:>8.4f} {r_['std']:>8.4f} "
          f"{100 * r_['frac_negative']:>5.1f}%")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
for k in ("k1", "k2", "k3"):
    sub = [r_ for r_ in rows if r_["estimator"] == k]
    axes[0].plot([r_["true_kl"] for r_ in sub], [r_["mean"] for r_ in sub], "o-", label=k)
    axes[1].plot([r_["true_kl"] for r_ in sub], [r_["std"] for r_ in sub], "o-", label=k)
lim = max(r_["true_kl"] for r_ in rows)
axes[0].plot([0, lim], [0, lim], ":", color="0.5", label="true KL")
axes[0].set(xlabel="true KL", ylabel="mean of estimator", title="bias"); axes[0].legend()
axes[1].set(xlabel="true KL", ylabel="std of one sample's estimate", title="noise"); axes[1].legend()

# %%
# Claims: k1 and k3 are unbiased (mean within 4 standard errors of the true KL); k3 is never
# negative while k1 often is; at small KL k3 is far less noisy than k1; k2 is biased at large KL.
for r_ in rows:
    if r_["estimator"] in ("k1", "k3"):
        assert abs(r_["mean"] - r_["true_kl"]) < 4 * r_["se"] + 1e-6, r_
k3_small = next(r_ for r_ in rows if r_["estimator"] == "k3" and r_["shift"] == 0.1)
k1_small = next(r_ for r_ in rows if r_["estimator"] == "k1" and r_["shift"] == 0.1)
k2_big = next(r_ for r_ in rows if r_["estimator"] == "k2" and r_["shift"] == 2.0)
assert all(r_["frac_negative"] == 0 for r_ in rows if r_["estimator"] == "k3")
assert k1_small["frac_negative"] > 0.1 and k3_small["std"] < 0.2 * k1_small["std"]
assert abs(k2_big["mean"] - k2_big["true_kl"]) > 4 * k2_big["se"]
record("kl_k3_std_over_k1_std_small_kl", k3_small["std"] / k1_small["std"])
record("kl_k2_bias_large_kl", k2_big["mean"] - k2_big["true_kl"])

# %% [markdown]
# ## 3. Aggregation and the length bias
#
# Every aggregation sums the same per-token losses; they differ in the weight each token gets.
# For completion i with |o_i| tokens in a batch of B completions (max length L):
#
# | `loss_type` | weight of one token | a whole completion's weight |
# |---|---|---|
# | `grpo` (DeepSeekMath) | 1 / (B · \|o_i\|) | 1 / B, whatever its length |
# | `dr_grpo` (Dr. GRPO) | 1 / (B · L) | \|o_i\| / (B · L): grows with length |
# | `dapo` / `bnpo` | 1 / Σ\|o\| | \|o_i\| / Σ\|o\| |
#
# Dr. GRPO's argument: under `grpo`, a **long wrong answer is penalised less per token** than a short
# one, and a short right answer is rewarded more per token, so training drifts towards long wrong
# answers. First the weights, read off the gradient of a real batch:

# %%
print(inspect.getsource(L.aggregate))
lengths = torch.tensor([2, 6, 12])                                   # three completions, L = 16
mask = (torch.arange(16)[None] < lengths[:, None]).long()           # (3, 16)
weights = {}
for lt in ("grpo", "dr_grpo", "dapo"):
    per_token = torch.zeros(3, 16, requires_grad=True)
    L.aggregate(per_token, mask, lt, max_completion_length=16).backward()
    weights[lt] = per_token.grad[:, 0]                               # (3,) weight of one token
    print(f"{lt:<8} per-token weight {[round(w, 4) for w in weights[lt].tolist()]}   "
          f"whole completion {[round(w, 4) for w in (weights[lt] * lengths).tolist()]}")
# by hand: grpo 1/(3*2), 1/(3*6), 1/(3*12); dr_grpo 1/(3*16) each; dapo 1/20 each
assert torch.allclose(weights["grpo"], 1 / (3 * lengths.float()))
assert torch.allclose(weights["dr_grpo"], torch.full((3,), 1 / 48))
assert torch.allclose(weights["dapo"], torch.full((3,), 1 / 20))


# %% [markdown]
# Now on real runs. Task `add2s` makes the model write a scratchpad of column sums before the
# answer (`47+85=` → `12 13|231`), so completion lengths vary (3 to 10 tokens) and a wrong answer
# can run long. The shipped base `tiny-add2s` was trained on it to about 40%. We train it with each
# aggregation for `LENGTH_STEPS` steps, everything else equal, at `learning_rate=1e-4` (at the default 3e-4 this base
# collapsed to about 0% accuracy under every aggregation when we tried: try it), and watch the
# length of the completions that get a negative advantage (the wrong ones). The dashboard shows
# the three runs as they train (completion length of right and wrong answers in its fifth panel).

# %%
def run_variant(steps, seed=SEED, dash=None, label=None, **changes):
    """Train one config; feed the dashboard (if any) as it goes. Returns the run and its seconds."""
    cfg = GRPOConfig(seed=seed, steps=steps, eval_every=max(steps // 4, 1), eval_size=EVAL_SIZE, threads=THREADS,
                     **changes)
    run, t0 = setup(cfg), time.time()
    for m in train(cfg, run, should_stop=dash.should_stop if dash else None):
        if dash is not None:
            dash.update(m, variant=label, run=run)
    return run, time.time() - t0


def tail_mean(history, key, n=30):
    vals = [m[key] for m in history[-n:] if key in m]
    return sum(vals) / len(vals) if vals else float("nan")


length_dash = Dashboard(total_steps=LENGTH_STEPS, title="add2s: three aggregations")
length_runs = {}
for lt in ("grpo", "dr_grpo", "dapo"):
    run, secs = run_variant(LENGTH_STEPS, dash=length_dash, label=f"{lt} seed {SEED}", model="tiny-add2s",
                            task="add2s", max_completion_length=16, loss_type=lt, learning_rate=1e-4)
    length_runs[lt] = run
    print(f"{lt:<8} {secs:5.0f} s  accuracy {run.evals[0][1]:.1%} -> {run.evals[-1][1]:.1%}   "
          f"length of A<0 completions (last 30 steps) {tail_mean(run.history, 'completions/mean_length_neg_adv'):.2f}   "
          f"A>0 {tail_mean(run.history, 'completions/mean_length_pos_adv'):.2f}")
length_dash.close()

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
for lt, run in length_runs.items():
    for ax, key in zip(axes, ("completions/mean_length_neg_adv", "completions/mean_length_pos_adv")):
        pts = [(m["step"], m[key]) for m in run.history if key in m]
        ax.plot([p[0] for p in pts], smooth([p[1] for p in pts], 15), label=lt)
axes[0].set(title="length of completions pushed down (A < 0)", xlabel="step", ylabel="tokens")
axes[1].set(title="length of completions pushed up (A > 0)", xlabel="step", ylabel="tokens")
for ax in axes:
    ax.legend()

# %%
# What did we measure? The claim (Dr. GRPO): under per-sequence normalisation wrong answers get
# longer than under a constant normaliser. We report what this run shows, whichever way it goes:
# one seed of 150 steps is not enough to assert it either way.
neg = {lt: tail_mean(run.history, "completions/mean_length_neg_adv") for lt, run in length_runs.items()}
gap = neg["grpo"] - neg["dr_grpo"]
record("length_neg_adv_grpo", neg["grpo"])
record("length_neg_adv_dr_grpo", neg["dr_grpo"])
record("length_neg_adv_dapo", neg["dapo"])
if SMOKE:
    print("SMOKE run: too short to say anything about length bias")
elif gap > 0.25:
    print(f"the length bias shows: wrong answers are {gap:.2f} tokens longer under 'grpo' than under 'dr_grpo'")
else:
    print(f"the length bias does NOT show at this scale: the gap is {gap:+.2f} tokens "
          "(the per-token weights above still differ exactly as derived)")

# %% [markdown]
# ## 4. Four variants side by side, three seeds each
#
# Each published variant is a handful of config fields; the names below say exactly what runs.
# To make the ratio-dependent parts (clip-higher, GSPO's sequence ratio) act at all, every
# variant takes `num_iterations=2` updates per sampled batch; with a single update the ratio is 1
# and GSPO and clip-higher reduce to plain GRPO. One run of RL is one draw: we train each variant
# with 3 seeds and show the mean and the min-max range. The dashboard draws all 12 runs as they
# train (one colour per variant, one line style per seed).

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
for name, changes in VARIANTS.items():
    print(f"{name}\n    {changes}")

# %%
compare_dash = Dashboard(total_steps=COMPARE_STEPS, title=f"four variants x {len(SEEDS)} seeds")
compare, t_all = {}, time.time()
for name, changes in VARIANTS.items():
    short = name.split()[0]
    for seed in SEEDS:
        run, secs = run_variant(COMPARE_STEPS, seed=seed, dash=compare_dash, label=f"{short} seed {seed}",
                                num_iterations=2, **changes)
        compare[(short, seed)] = run
        print(f"{short:<8} seed {seed}  {secs:5.0f} s  held-out accuracy {run.evals[0][1]:.1%} -> "
              f"{run.evals[-1][1]:.1%}  clip ratio {tail_mean(run.history, 'clip_ratio/region_mean'):.3f}")
compare_dash.close()
compare_seconds = time.time() - t_all
print(f"\nall {len(compare)} runs: {compare_seconds:.0f} s")

# %%
shorts = [name.split()[0] for name in VARIANTS]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
summary = {}
for short in shorts:
    runs = [compare[(short, seed)] for seed in SEEDS]
    steps = [st for st, _ in runs[0].evals]
    accs = torch.tensor([[a for _, a in r.evals] for r in runs])                      # (seeds, evals)
    axes[1].plot(steps, accs.mean(0), "o-", color=compare_dash.styles.variant_colour(short), label=short)
    axes[1].fill_between(steps, accs.min(0).values, accs.max(0).values, color=compare_dash.styles.variant_colour(short), alpha=0.2)
    rewards = torch.tensor([smooth([m["reward"] for m in r.history], 20) for r in runs])  # (seeds, steps)
    xs = [m["step"] for m in runs[0].history]
    axes[0].plot(xs, rewards.mean(0), color=compare_dash.styles.variant_colour(short), label=short)
    axes[0].fill_between(xs, rewards.min(0).values, rewards.max(0).values, color=compare_dash.styles.variant_colour(short), alpha=0.2)
    final_accs = accs[:, -1]
    summary[short] = dict(mean=float(final_accs.mean()), min=float(final_accs.min()), max=float(final_accs.max()),
                          std=float(final_accs.std()) if len(SEEDS) > 1 else 0.0, per_seed=final_accs.tolist())
axes[0].set(title="reward (20-step mean; band: min-max over seeds)", xlabel="step")
axes[1].set(title="held-out greedy accuracy (mean; band: min-max)", xlabel="step")
axes[1].legend(fontsize=8)
plt.show()
base_acc = compare[(shorts[0], SEEDS[0])].evals[0][1]
print(f"base: {base_acc:.1%} on {EVAL_SIZE} held-out problems; after {COMPARE_STEPS} steps:")
print(f"{'variant':<9} {'mean':>6} {'min':>6} {'max':>6} {'std':>6}   per seed")
for short, row in summary.items():
    print(f"{short:<9} {row['mean']:6.1%} {row['min']:6.1%} {row['max']:6.1%} {row['std']:6.1%}   "
          + " ".join(f"{a:.1%}" for a in row["per_seed"]))

# %% [markdown]
# ## The claims, checked
# Smoke mode checks what needs no long run: clipping's zero-gradient regions, the KL estimators'
# bias and sign, the aggregation weights derived above, and that every run of sections 3 and 4
# trains with finite losses. **Only the full run** checks that every variant, with every seed,
# beats the base model's held-out accuracy after `COMPARE_STEPS` steps.

# %%
record("variant_summary", summary)
record("variant_base_accuracy", base_acc)
record("compare_seconds", compare_seconds)
for key, run in list(compare.items()) + list(length_runs.items()):
    assert all(torch.isfinite(torch.tensor([m["loss"] for m in run.history]))), key
stopped_early = compare_dash.stopped or length_dash.stopped
if SMOKE or stopped_early:
    print("the math claims hold; the training claim needs the full run (SMOKE=False, not stopped).")
else:
    # every variant is a working GRPO: with every seed it improves held-out accuracy over the base
    for short, row in summary.items():
        assert row["min"] > base_acc, f"{short}: worst seed {row['min']:.1%} <= base {base_acc:.1%}"
    print("claim holds: every variant, with every seed, beats the base "
          f"({base_acc:.1%} -> worst seed {min(r['min'] for r in summary.values()):.1%})")

# %% [markdown]
# ## Summary
# - GRPO's per-token loss is −min(ρA, clip(ρ, 1 − ε_clip, 1 + ε_high) A) + β KL: the clip makes a
#   token's gradient exactly zero once its ratio has moved past the trust region in the direction
#   its advantage asks for, and never in the other direction.
# - The KL term is estimated from the sampled tokens: k1 is unbiased but often negative, k2 is
#   biased at large KL, k3 is unbiased and never negative (the kit's default).
# - The aggregation sets each token's weight: averaging per completion (`grpo`) gives a token of
#   a short answer more weight than one of a long answer; `dapo` and `dr_grpo` weigh every token alike.
# - The four published variants differ in a few config fields; the full run checks that each one
#   trains (beats the base with every seed), not that one beats another.
#
# ## Questions
# 1. A token has A > 0 and ρ = 1.3 with ε_clip = 0.2. What is its gradient? And if A < 0?
# 2. The KL is never negative. Why can the k1 estimate of one token be negative?
# 3. In one batch, a completion has 4 tokens and another 16. Under `grpo` aggregation, whose tokens
#    weigh more? Under `dapo`?
# 4. Which of the four variants is pulled back toward the reference model, and by which field?
#
# <details><summary>Answers</summary>
#
# 1. Zero: the token has already moved far enough in the direction its advantage asks. With A < 0
#    the min picks the unclipped term and the gradient pushes the token down.
# 2. k1 = log π_θ − log π_ref of the sampled token: negative whenever the reference likes that token
#    more than the policy does. Only its average over samples is the KL.
# 3. Under `grpo`, the 4-token completion's: each completion's tokens share weight 1/(B·|o_i|).
#    Under `dapo` every token in the batch weighs the same.
# 4. `grpo_kl`, with `beta = 0.04`; the others set β = 0 and only log the KL.
# </details>
#
# ## Exercises
# 1. Why does GSPO need an epsilon about a thousand times smaller than GRPO's?
# 2. Look at the dashboard's KL panel: which variant stays closest to the reference, and why?
# 3. **Code.** For a completion of 4 tokens with advantage A = −1 in a batch of B = 2 completions
#    (the other has 8 tokens), compute the weight of one of its tokens under `grpo`, `dr_grpo`
#    (L = 16) and `dapo` by back-propagating through `L.aggregate`, as in section 3.
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
# Solution to exercise 3: weights 1/(B*|o_i|) = 1/8 (grpo), 1/(B*L) = 1/32 (dr_grpo), 1/(4+8) = 1/12 (dapo).
lengths3 = torch.tensor([4, 8])
mask3 = (torch.arange(16)[None] < lengths3[:, None]).long()           # (2, 16)
for lt, want in (("grpo", 1 / 8), ("dr_grpo", 1 / 32), ("dapo", 1 / 12)):
    per_token = torch.zeros(2, 16, requires_grad=True)
    L.aggregate(per_token, mask3, lt, max_completion_length=16).backward()
    w = float(per_token.grad[0, 0])
    assert abs(w - want) < 1e-7, (lt, w, want)
    print(f"{lt:<8} weight of one token of the 4-token completion: {w:.4f}")

# %% [markdown]
# **Next:** [03 · Judges and preferences](03_judges_and_preferences.ipynb): where rewards come
# from, preference matrices, and learning from ranked groups offline.
