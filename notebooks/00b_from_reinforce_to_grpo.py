# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # From REINFORCE to GRPO: the policy gradient on a policy you can differentiate by hand
#
# **The question.** Where does each term of GRPO's loss come from?
#
# A language model that answers a question is a *policy*: it picks each next token with some
# probability. GRPO changes those probabilities so that answers with a higher reward become more
# likely. Before the model, here is the whole idea on a policy with four actions, small enough
# that the true gradient can be written down and every estimate checked against it.
#
# **What you will learn**
# 1. the objective, the expected reward, and its exact gradient for a softmax policy;
# 2. the log-derivative trick (REINFORCE): a gradient you can estimate from samples alone, and that
#    it agrees with the exact one;
# 3. a baseline: why subtracting a reference reward lowers the variance of the estimate without
#    changing what it estimates, and what GRPO's baseline (the mean reward of the group) does;
# 4. samples from an older policy (off-policy) and the importance ratio ρ that corrects them;
# 5. PPO's clip: what it stops, and what it costs;
# 6. the KL penalty to a reference policy, and the policy it leads to;
# 7. what a critic (a value function) is, and why GRPO can drop it.
#
# Every step is checked against the exact answer, which this small policy lets us compute.
# The notation (ρ, r, A, G, ε_clip, β) is the one every later notebook and
# [the reference card](REFERENCE.md) use.
#
# **How long it takes**: about 25 s (measured by `make test-full` on 2026-12-06, 2 cores); no model,
# only arithmetic on four probabilities.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: fewer sampled groups.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEED = 0
LOGITS = [1.0, 0.0, -1.0, 0.5]    # the policy's preferences for actions 0-3
REWARDS = [0.7, 0.2, 0.0, 0.6]    # the reward of each action (from section 5 on: its chance of being right)
GROUP_SIZE = 8                    # G: samples drawn per estimate (GRPO's group)
GROUPS = 40000                    # independent estimates drawn

# %%
from itertools import pairwise

import matplotlib.pyplot as plt
import torch
from grpo_kit.core import (
    clipped_surrogate,
    draw,
    exact_gradient,
    kl_exact,
    kl_k3,
    kl_regularised_optimum,
    off_policy_gradients,
    rloo,
    sampled_gradients,
)
from grpo_kit.view import record, smoke_banner

if SMOKE:
    GROUPS = 4000
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(SEED)
theta, r = torch.tensor(LOGITS), torch.tensor(REWARDS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. The objective and its exact gradient
#
# The policy is $\pi = \mathrm{softmax}(\theta)$ over four actions; the objective is the expected
# reward $J(\theta) = \sum_a \pi_a r_a$. Differentiating the softmax gives
# $\partial J / \partial \theta = \pi \odot (r - J)$: an action's logit goes up when its reward is
# above the average the policy currently gets, in proportion to how often it is picked.
# `exact_gradient` computes that line; autograd agrees:

# %%
pi = torch.softmax(theta, -1)
J = (pi * r).sum()
exact = exact_gradient(theta, r)
th = theta.clone().requires_grad_(True)
(torch.softmax(th, -1) * r).sum().backward()
print("pi       ", [round(x, 3) for x in pi.tolist()], " J =", round(J.item(), 4))
print("exact    ", [round(x, 4) for x in exact.tolist()])
print("autograd ", [round(x, 4) for x in th.grad.tolist()])
assert torch.allclose(exact, th.grad, atol=1e-6)
record("autograd_gap", (exact - th.grad).abs().max().item())

# %% [markdown]
# ## 2. The log-derivative trick: a gradient from samples
#
# A language model has far too many possible answers to sum over. The trick is the identity
# $\nabla_\theta \pi_a = \pi_a \nabla_\theta \log \pi_a$, which turns the gradient into an
# expectation over the policy's own samples:
#
# $$\nabla_\theta J = \mathbb{E}_{a \sim \pi}\left[r(a)\, \nabla_\theta \log \pi_a\right],
# \qquad \nabla_\theta \log \pi_a = \mathrm{onehot}(a) - \pi .$$
#
# $\nabla_\theta \log \pi_a$ is called the **score function** (the estimate above is also called
# the score-function estimator); for a softmax policy it is onehot(a) − π, as written on the right.
#
# So: draw actions, score them, and push up the log-probability of each in proportion to its
# reward (REINFORCE, Williams 1992). The average over many groups of `GROUP_SIZE` samples lands on
# the exact gradient, within its standard error:

# %%
plain = sampled_gradients(theta, r, GROUPS, GROUP_SIZE, "none", gen)   # (GROUPS, 4)
se_plain = plain.std(0) / GROUPS ** 0.5                                 # (4,)
print("mean of the estimates", [round(x, 4) for x in plain.mean(0).tolist()])
print("exact gradient       ", [round(x, 4) for x in exact.tolist()])
print("standard error       ", [round(x, 4) for x in se_plain.tolist()])
z_plain = ((plain.mean(0) - exact) / se_plain).abs()
assert (z_plain < 4).all(), z_plain
record("reinforce_z", z_plain.tolist())

# %% [markdown]
# ## 3. A baseline lowers the variance; GRPO's group mean is one
#
# Any reference value $b$ that does not depend on the sampled action can be subtracted from the
# reward: $\mathbb{E}[b\, \nabla_\theta \log \pi_a] = b \sum_a \nabla_\theta \pi_a = b\, \nabla_\theta 1 = 0$.
# The expectation is unchanged, the spread is not: with no reward negative, plain REINFORCE never
# pushes a sampled action down; it pushes the good ones up harder and relies on the averaging. With a baseline,
# below-average answers are pushed down. The weight r − b is the **advantage** A: how much better the
# sampled answer did than the baseline.
#
# GRPO has no learned baseline (no critic). It uses the mean reward of the other answers to the
# same prompt. Three ways to take it, each a variant you will meet:
# - `loo`: the mean of the *other* G - 1 rewards (leave-one-out, RLOO; Kool et al., 2019): unbiased;
# - `mean`: the mean of all G rewards, the sample's own included (GRPO's code): each weight is the
#   leave-one-out weight times (G - 1) / G, so the estimate is scaled by (G - 1) / G;
# - `zscore`: `mean`, then divided by the group's standard deviation (DeepSeekMath): the direction
#   is kept per group, the scale changes from group to group.

# %%
est = {"none": plain, **{k: sampled_gradients(theta, r, GROUPS, GROUP_SIZE, k, gen) for k in ("loo", "mean", "zscore")}}
total_var = {k: v.var(0).sum().item() for k, v in est.items()}   # trace of each estimate's covariance
scale = {k: (v.mean(0) @ exact / (exact @ exact)).item() for k, v in est.items()}  # projection on the exact gradient
for k in est:
    print(f"{k:<7} total variance {total_var[k]:.4f}   mean estimate = {scale[k]:.3f} x exact gradient"
          f"   variance / scale² {total_var[k] / scale[k] ** 2:.4f}")
G = GROUP_SIZE
se = {k: v.std(0) / GROUPS ** 0.5 for k, v in est.items()}
assert (((est["loo"].mean(0) - exact) / se["loo"]).abs() < 4).all()
assert (((est["mean"].mean(0) - exact * (G - 1) / G) / se["mean"]).abs() < 4).all()
assert total_var["none"] > 2.5 * total_var["loo"]
assert total_var["zscore"] / scale["zscore"] ** 2 < total_var["none"] / scale["none"] ** 2  # at the same scale
record("baseline_total_variance", total_var)
record("baseline_scale", scale)

# %% [markdown]
# Read the variances at the same scale. `loo` and `mean` estimate the gradient itself (times 1 and
# (G − 1)/G), so their variance compares directly with `none`'s: the baseline lowers it. `zscore`
# divides by each group's std, which multiplies the whole estimate (by the factor in the middle
# column), so its raw variance looks large; divided by that factor squared (the last column) it is
# below `none`'s too (the cell asserts it). The direction is what a gradient step uses, and the
# learning rate sets the scale.

# %%
fig, ax = plt.subplots(figsize=(7, 3.2), constrained_layout=True)
for k, c in (("none", "tab:gray"), ("loo", "tab:blue")):
    ax.hist(est[k][:, 0].numpy(), bins=60, alpha=0.6, color=c, label=f"{k}: var {est[k][:, 0].var().item():.4f}")
ax.axvline(exact[0].item(), color="k", lw=1, label="exact")
ax.set_xlabel("estimate of dJ/dθ for action 0 (one group of G samples)")
ax.set_ylabel("groups")
ax.legend(frameon=False)
plt.show()

# %% [markdown]
# ## 4. Samples from an older policy: the importance ratio ρ
#
# Sampling answers from a language model is the expensive part of a training step, so trainers
# reuse one batch of samples for more than one gradient step (`num_iterations` in the kit and in
# TRL) or keep old batches around (a replay buffer). After the first step the samples come from an
# *older* policy π_old, not from the one being trained: they are **off-policy**. (On-policy: every
# sample comes from the policy whose gradient we take.) Averaging them as if π_θ had drawn them
# estimates the wrong gradient. The fix reweights each sample by how much more (or less) likely
# the current policy makes it, the importance ratio ρ:
#
# $$\rho(a) = \frac{\pi_\theta(a)}{\pi_{\text{old}}(a)}, \qquad
# \nabla_\theta J = \mathbb{E}_{a\sim\pi_{\text{old}}}\left[\rho(a)\, A(a)\, \nabla_\theta \log \pi_\theta(a)\right].$$
#
# Below, the policy has moved (its logits changed by `SHIFT`) while the samples still come from the
# old one. A is the leave-one-out advantage of section 3.

# %%
SHIFT = torch.tensor([-0.8, 0.8, 0.0, 0.7])   # how far the current policy's logits moved from the sampler's
new = theta + SHIFT                              # pi_theta; the groups are drawn from theta (pi_old)
exact_new = exact_gradient(new, r)               # (4,) the gradient we want, at the current policy
fixed = off_policy_gradients(new, theta, r, GROUPS, GROUP_SIZE, True, gen)   # (GROUPS, 4) with rho
naive = off_policy_gradients(new, theta, r, GROUPS, GROUP_SIZE, False, gen)  # (GROUPS, 4) without
z_fixed = ((fixed.mean(0) - exact_new) / (fixed.std(0) / GROUPS ** 0.5)).abs()  # (4,)
z_naive = ((naive.mean(0) - exact_new) / (naive.std(0) / GROUPS ** 0.5)).abs()  # (4,)
print(f"KL(pi_theta || pi_old) = {kl_exact(new, theta).item():.3f} nats")
print("exact gradient at pi_theta ", [round(x, 4) for x in exact_new.tolist()])
print("with rho                   ", [round(x, 4) for x in fixed.mean(0).tolist()],
      f" largest gap {z_fixed.max().item():.1f} standard errors")
print("without rho                ", [round(x, 4) for x in naive.mean(0).tolist()],
      f" largest gap {z_naive.max().item():.1f} standard errors")
assert (z_fixed < 4).all() and z_naive.max() > 10

# The price of the correction: the further the policy has moved, the noisier the corrected estimate.
var_by_kl = []
for step in (0.0, 0.5, 1.0, 2.0):
    moved = theta + step * SHIFT
    est_moved = off_policy_gradients(moved, theta, r, GROUPS, GROUP_SIZE, True, gen)  # (GROUPS, 4)
    var_by_kl.append((kl_exact(moved, theta).item(), est_moved.var(0).sum().item()))
    print(f"KL {var_by_kl[-1][0]:.3f} nats from the sampler: total variance {var_by_kl[-1][1]:.4f}")
assert all(a[1] < b[1] for a, b in pairwise(var_by_kl))
record("off_policy_z", {"with_rho": z_fixed.max().item(), "without_rho": z_naive.max().item()})
record("off_policy_variance_by_kl", var_by_kl)

# %% [markdown]
# With ρ the estimate lands on the current policy's gradient; without it, it is many standard
# errors off. The variance grows as the policy leaves the sampler: a sample the old policy rarely
# drew but the new one favours carries a large ρ.
#
# ## 5. PPO's clip: each sample stops pushing once its ratio has moved far enough
#
# Reusing one batch for many steps lets ρ drift far from 1, and then a handful of samples decide a
# large move. PPO (Schulman et al., 2017) maximises a clipped objective instead, the one GRPO keeps:
#
# $$\min\Big(\rho A,\ \operatorname{clip}(\rho,\, 1-\varepsilon_{\text{clip}},\, 1+\varepsilon_{\text{clip}})\, A\Big).$$
#
# When a sample's ratio has moved past 1 + ε_clip in the direction its advantage asks for (A > 0),
# or below 1 − ε_clip (A < 0), the clipped term is the constant, and its gradient is zero: that
# sample stops pushing. Moves in the other direction are never clipped. `clipped_surrogate` is the
# kit's own function (the one its GRPO loss calls; it returns the negative, a loss to minimise):

# %%
EPS_CLIP = 0.2
rho_grid = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5]).repeat(2, 1).requires_grad_(True)  # (2, 5)
adv_grid = torch.tensor([[1.0] * 5, [-1.0] * 5])                                        # (2, 5) A = +1, A = -1
clipped_surrogate(rho_grid, adv_grid, EPS_CLIP).sum().backward()
print("rho                  ", rho_grid[0].tolist())
print("d loss / d rho, A = +1", rho_grid.grad[0].tolist())
print("d loss / d rho, A = -1", rho_grid.grad[1].tolist())
assert rho_grid.grad[0].tolist() == [-1.0, -1.0, -1.0, -1.0, 0.0]   # A > 0: silent once rho > 1.2
assert rho_grid.grad[1].tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]      # A < 0: silent once rho < 0.8

# %% [markdown]
# What the clip buys, measured: many independent batches, each one group of G answers with 0/1
# rewards (each action is right with the probability `REWARDS` gives it, so a batch can mislead),
# each used for `CLIP_STEPS` plain gradient steps on its own group, with and without the clip.
# Each batch trains its own copy of the logits; the change in the true expected reward J tells
# whether the batch helped.

# %%
CLIP_BATCHES = 1000 if SMOKE else 4000
CLIP_STEPS, LR = 64, 1.0
acts = draw(theta, CLIP_BATCHES, GROUP_SIZE, gen)                       # (B, G) one group per batch
adv = rloo(torch.bernoulli(r[acts], generator=gen))                     # (B, G) 0/1 rewards -> A
old_logp = torch.log_softmax(theta, -1)[acts]                           # (B, G) log pi_old of each sample


def reuse_batch(clip):
    """CLIP_STEPS SGD steps on each batch's own group; the change in true J and KL to pi_old, each (B,)."""
    th = theta.expand(CLIP_BATCHES, -1).clone().requires_grad_(True)  # (B, 4) one policy per batch
    opt = torch.optim.SGD([th], lr=LR)
    for _ in range(CLIP_STEPS):
        rho = (torch.log_softmax(th, -1).gather(1, acts) - old_logp).exp()  # (B, G)
        loss = clipped_surrogate(rho, adv, EPS_CLIP) if clip else -(rho * adv)  # (B, G)
        opt.zero_grad()
        loss.mean(1).sum().backward()
        opt.step()
    p = torch.softmax(th.detach(), -1)  # (B, 4)
    return (p * r).sum(1) - J, (p * (p.log() - torch.log_softmax(theta, -1))).sum(1)


clip_runs = {"clipped": reuse_batch(True), "no clip": reuse_batch(False)}
clip_table = {}
for name, (dJ, kl) in clip_runs.items():
    clip_table[name] = {"mean_dJ": dJ.mean().item(), "se_dJ": (dJ.std() / CLIP_BATCHES ** 0.5).item(),
                        "worst_5pct_dJ": dJ.quantile(0.05).item(), "mean_kl": kl.mean().item()}
    t = clip_table[name]
    print(f"{name:<8} change in J: mean {t['mean_dJ']:+.4f} ± {t['se_dJ']:.4f}, worst 5% of batches "
          f"{t['worst_5pct_dJ']:+.4f}; KL to pi_old {t['mean_kl']:.3f} nats")
c, u = clip_table["clipped"], clip_table["no clip"]
assert u["mean_kl"] > 5 * c["mean_kl"]                       # the clip keeps the policy near the sampler
assert u["worst_5pct_dJ"] < min(3 * c["worst_5pct_dJ"], -0.05)  # the worst batches lose far more without it
assert c["mean_kl"] < 0.1                                    # "a few hundredths of a nat"
assert u["mean_dJ"] - c["mean_dJ"] > 2 * (u["se_dJ"] ** 2 + c["se_dJ"] ** 2) ** 0.5  # ... and the average gains more
record("clip_table", clip_table)

fig, ax = plt.subplots(figsize=(7, 3.2), constrained_layout=True)
for name, colour in (("no clip", "tab:red"), ("clipped", "tab:blue")):
    ax.hist(clip_runs[name][0].numpy(), bins=80, alpha=0.6, color=colour, label=name)
ax.axvline(0, color="k", lw=1)
ax.set_xlabel(f"change in the true expected reward J after {CLIP_STEPS} steps on one batch")
ax.set_ylabel("batches")
ax.legend(frameon=False)
plt.show()

# %% [markdown]
# Read the table honestly: without the clip, the *average* batch gains more here, because most
# batches point the right way and this policy has only four actions to move. What the clip buys is
# the tail: a misleading batch (a lucky 0/1 reward on a poor action) can pull the unclipped policy
# far from the sampler and lose much of J, while the clipped policy stays within a few hundredths
# of a nat. The clip is insurance, paid for in progress per batch; `epsilon` (and DAPO's
# `epsilon_high`) set the trade.
#
# ## 6. The KL penalty to a reference policy
#
# DeepSeekMath's GRPO also subtracts β · KL(π_θ ‖ π_ref) from the objective, with π_ref the model
# before RL training, so that the policy does not wander far from what it knew. For this policy the
# maximiser of E[r] − β KL has a closed form, π* ∝ π_ref · exp(r / β) (`kl_regularised_optimum`):
# each action's probability is the reference's, tilted by its reward. Gradient ascent on the exact
# objective finds it. In training the KL is estimated from the sampled tokens; the kit's default,
# k3 = e^d − d − 1 with d = log π_ref − log π_θ (Schulman, 2020), is unbiased and never negative.
# Notebook 02 compares it with the other estimators.

# %%
BETAS = [0.05, 0.2, 1.0]
KL_SAMPLES = 20000 if SMOKE else 200000
kl_table = {}
for beta in BETAS:
    th = theta.clone().requires_grad_(True)
    opt = torch.optim.Adam([th], lr=0.05)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 3000)  # a constant step keeps circling the optimum
    for _ in range(3000):
        objective = (torch.softmax(th, -1) * r).sum() - beta * kl_exact(th, theta)
        opt.zero_grad()
        (-objective).backward()
        opt.step()
        decay.step()
    found, star = torch.softmax(th.detach(), -1), kl_regularised_optimum(theta, r, beta)  # (4,) each
    a = draw(th.detach(), 1, KL_SAMPLES, gen)[0]                                          # (S,) samples of pi*
    k3 = kl_k3(torch.log_softmax(th.detach(), -1)[a], torch.log_softmax(theta, -1)[a])    # (S,)
    kl_table[beta] = {"J": (found * r).sum().item(), "KL": kl_exact(th.detach(), theta).item(),
                      "gap_to_closed_form": (found - star).abs().max().item(),
                      "k3_mean": k3.mean().item(), "k3_se": (k3.std() / KL_SAMPLES ** 0.5).item()}
    t = kl_table[beta]
    print(f"beta {beta:<5} pi = {[round(x, 3) for x in found.tolist()]}  J {t['J']:.3f}  KL {t['KL']:.3f} "
          f"(k3 from samples {t['k3_mean']:.3f} ± {t['k3_se']:.3f}); max gap to the closed form {t['gap_to_closed_form']:.1e}")
    assert t["gap_to_closed_form"] < 1e-3
    if beta >= 0.2:   # at beta = 0.05 the sample mean of k3 is heavy-tailed: see below
        assert abs(t["k3_mean"] - t["KL"]) < 4 * t["k3_se"]
Js, KLs = [kl_table[b]["J"] for b in BETAS], [kl_table[b]["KL"] for b in BETAS]
assert Js[0] > Js[1] > Js[2] > J and KLs[0] > KLs[1] > KLs[2] > 0   # a larger beta: closer to pi_ref, less reward
record("kl_table", {str(b): v for b, v in kl_table.items()})

# %% [markdown]
# A larger β keeps the policy closer to π_ref and earns less reward; every β still earns more
# than π_ref's own J. Without a penalty (β → 0) the optimum puts all its probability on the best
# action. Many recent recipes set β = 0 (Dr. GRPO, DAPO); notebook 02b trains both.
#
# Look at the k3 column for β = 0.05. The policy gives actions 1 and 2 almost no probability while
# the reference gives them 0.17 and 0.06, so d = log π_ref − log π_θ is large for them: one draw of
# such an action adds e^d, thousands of nats, to the sum. k3 is unbiased, but its average over a
# finite sample is heavy-tailed: usually a little below the KL (the rare draws are missing) and
# now and then far above it. That is why a single step's KL in a training log can spike, and
# why the kit's KL detector reads a median over a window of steps rather than one step.
#
# ## 7. The critic, and why GRPO drops it
#
# The natural baseline is the expected reward itself: the *value* of the situation,
# V(q) = E_{a∼π}[r(a)] for a prompt q. PPO learns it: a second network, the **critic** or **value
# function**, trained by regression to predict the reward from the prompt (and, for a language model,
# from every prefix of the answer: one value per token). For a language model the critic is usually a
# network the size of the policy, trained beside it.
#
# GRPO (Shao et al., 2024) drops the critic: the mean reward of the G answers sampled for the same
# prompt is a Monte-Carlo estimate of V(q), paid for with G samples per prompt and no second network.
# How much variance does it give up against a *perfect* critic, one that knows J exactly
# (`value=J` below)? A learned critic is only as good as its predictions, so this is the critic's
# best case:

# %%
CRITIC_GROUPS = 40000   # also in smoke mode: neighbouring ratios differ by 5%, and 4000 groups measure each to about 4%
critic_ratio = {}
for g_size in (2, 4, 8, 16, 32):
    perfect = sampled_gradients(theta, r, CRITIC_GROUPS, g_size, "value", gen, value=J.item()).var(0).sum().item()
    loo = sampled_gradients(theta, r, CRITIC_GROUPS, g_size, "loo", gen).var(0).sum().item()
    critic_ratio[g_size] = loo / perfect
    print(f"G = {g_size:>2}: variance with the group's leave-one-out mean / with a perfect critic = {loo / perfect:.2f}")
ratios = list(critic_ratio.values())
assert all(a > b for a, b in pairwise(ratios)) and ratios[0] > 1.5 and critic_ratio[8] < 1.3 and ratios[-1] < 1.15
record("critic_ratio", critic_ratio)

# %% [markdown]
# With G = 2 the group's baseline is far noisier than a perfect critic; by G = 8 the gap is under
# 30 percent and it keeps shrinking as G grows, with no second network to train. That is GRPO's trade: more
# samples per prompt (which a language model needs anyway for the comparison) instead of a value
# model. What it gives up is a value *per token*: the group mean is one number per prompt, so every
# token of an answer gets the same advantage. Notebook 08b brings a per-token value back (GAE) as a
# variant.
#
# ## From this policy to GRPO on a language model
#
# | piece | on four actions (here) | in GRPO on a language model | `GRPOConfig` field | notebook |
# |---|---|---|---|---|
# | score function | onehot(a) − π | ∇ log π_θ of each sampled token | | 00 |
# | baseline | the group's mean reward | A = r − group mean (÷ group std) | `scale_rewards` | 01 |
# | ratio ρ | π_θ(a) / π_old(a) | per token (or per sequence, GSPO) | `num_iterations`, `importance_sampling_level` | 02 |
# | clip | ε_clip on ρ | the same, per token | `epsilon`, `epsilon_high` | 02 |
# | KL to π_ref | β KL, estimated by k3 | per token, summed into the loss | `beta`, `kl_estimator` | 02 |
# | critic | dropped (group mean instead) | dropped; GAE brings one back | `advantage_estimator` variants | 08b |

# %% [markdown]
# ## Summary
# - For a softmax policy the gradient of the expected reward is π ⊙ (r − J); the log-derivative
#   trick turns it into an average over the policy's own samples, which is all a language model allows.
# - A baseline that does not depend on the sampled answer keeps the estimate's expectation and
#   lowers its variance. GRPO's baseline is the group's mean reward; including the sample's own
#   reward scales the gradient by (G − 1)/G, and dividing by the group's std rescales each group.
# - Samples from an older policy need the ratio ρ; PPO's clip silences a sample once ρ has moved
#   ε_clip in the direction it pushes, which bounds the damage of a misleading batch at the price
#   of progress per batch.
# - The KL penalty tilts the reference by exp(r / β); a larger β stays closer and earns less.
# - The group mean stands in for a critic: at G = 8 or more it gives up little variance against a
#   perfect one, and needs no second network.
#
# ## Questions
# 1. Why can a language-model trainer not compute the exact gradient of section 1, and what does
#    the log-derivative trick need instead?
# 2. Every reward is positive and there is no baseline: which way does the estimate push the
#    log-probability of a sampled wrong answer? What changes with a baseline?
# 3. With G = 2 and GRPO's `mean` baseline, what fraction of the exact gradient does the estimate
#    follow on average? (Predict, then run exercise 2.)
# 4. A sample has A < 0 and ρ = 0.7 with ε_clip = 0.2. Does it still push? And with ρ = 1.3?
# 5. Why does the importance-corrected estimate get noisier as the policy moves away from the sampler?
#
# <details><summary>Answers</summary>
#
# 1. The sum runs over every possible answer. The trick needs only samples from the policy, their
#    rewards and ∇ log π of each, which autograd gives.
# 2. Up: every term has a positive weight, and the averaging has to sort out which answers were
#    better. With a baseline, below-average answers get a negative weight and are pushed down.
# 3. (G − 1)/G = 1/2.
# 4. At ρ = 0.7 (below 1 − ε_clip, with A < 0) the gradient is zero: it has already been pushed
#    down far enough. At ρ = 1.3 it pushes (down): moves against the advantage are never clipped.
# 5. ρ = π_θ/π_old is large for answers the sampler rarely drew but the policy now favours, and
#    those few samples carry much of the estimate.
# </details>
#
# ## Exercises
# 1. Change `REWARDS` so that the best action is the one the policy likes least (action 2). Predict
#    the sign of each component of the exact gradient, then rerun section 1.
# 2. **Code.** Measure the scale of GRPO's `mean` baseline for G = 2, 3 and 4 with
#    `sampled_gradients` and check it against (G − 1)/G within 4 standard errors. (Solution below.)
# 3. **Code.** Rerun `reuse_batch` with ε_clip = 0.1 and 0.4. Which keeps the policy closer to the
#    sampler, and which has the worse worst 5% of batches? (Solution below.)

# %% jupyter={"source_hidden": true}
# Solution to exercise 2: project the mean estimate on the exact gradient and compare with (G - 1) / G.
for g_size in (2, 3, 4):
    est_g = sampled_gradients(theta, r, GROUPS, g_size, "mean", gen)  # (GROUPS, 4)
    proj = est_g @ exact / (exact @ exact)                              # (GROUPS,) each estimate's scale
    print(f"G = {g_size}: scale {proj.mean().item():.3f} ± {proj.std().item() / GROUPS ** 0.5:.3f}, "
          f"(G - 1) / G = {(g_size - 1) / g_size:.3f}")
    assert abs(proj.mean().item() - (g_size - 1) / g_size) < 4 * proj.std().item() / GROUPS ** 0.5

# %% jupyter={"source_hidden": true}
# Solution to exercise 3: a smaller epsilon keeps the policy closer to the sampler and loses less on bad batches.
by_eps = {}
for EPS_CLIP in (0.1, 0.2, 0.4):
    dJ, kl = reuse_batch(True)
    by_eps[EPS_CLIP] = (kl.mean().item(), dJ.quantile(0.05).item())
    print(f"epsilon {EPS_CLIP}: KL to pi_old {by_eps[EPS_CLIP][0]:.3f}, worst 5% change in J {by_eps[EPS_CLIP][1]:+.4f}")
EPS_CLIP = 0.2
kls, worst = [v[0] for v in by_eps.values()], [v[1] for v in by_eps.values()]
assert kls[0] < kls[1] < kls[2] and worst[0] > worst[1] > worst[2]
record("exercise_clip_by_eps", {str(k): v for k, v in by_eps.items()})

# %% [markdown]
# **Next:** [01 · Group normalisation](01_group_normalization.ipynb): GRPO's baseline on real
# groups of answers: what dividing by the group's std does when k of G answers are right.
