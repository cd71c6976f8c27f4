# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Quickstart: watch GRPO make a small model better at addition
#
# **The question.** How does a right/wrong reward alone, through repeated GRPO steps, make a tiny model better at addition?
#
# **Win first, then take it apart.** In a few minutes on a laptop CPU this notebook takes a tiny
# language model (about 0.9M parameters, one token per character) that half-knows 2-digit
# addition, and improves it with **GRPO** (Group Relative Policy Optimization) using nothing but
# a right/wrong reward. No downloads: the model ships with the kit.
#
# **What you will learn**
# - what one GRPO step does, by hand: sample a group, score it, advantages, log-probabilities,
#   the loss, backward, an optimizer step, and how much more likely the rewarded answers became
#   (and why one AdamW step can make them less likely);
# - what a full run looks like on the live dashboard: reward, held-out accuracy, KL, entropy (the
#   spread of the model's next-token distribution, H = −Σ_v π(v) log π(v): high while it still
#   explores, near 0 once it always writes the same answer);
# - which knobs matter (group size, learning rate, advantage scaling), with numbers we measured.
#
# **How long it takes**: 71 s with the default parameters (500 training steps), 13 s with
# `SMOKE = True` (measured on 2026-12-03 with `make test-full`, headless on 2 quiet CPU cores; in
# JupyterLab the live dashboard adds under 1%).
#
# The model writes the sum **least-significant digit first** (`12+34=` → `64`, i.e. 46 read
# backwards). That is the order in which a left-to-right model can work out carries, and it makes
# addition learnable by a model this small.
#
# The recipe, one step of GRPO:
# 1. take P prompts, sample **G completions for each** (a *group*);
# 2. score each completion with a **reward function** (here: 1 if the answer is right, else 0);
# 3. turn rewards into **advantages** by comparing each completion with its own group
#    (better than the group's mean → pushed up, worse → pushed down);
# 4. take a policy-gradient step on the completions' tokens, weighted by their advantage.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a short run that checks the pipeline and the
# by-hand step; the accuracy claim needs the full run. GRPO_KIT_SMOKE=1 in the environment sets it too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEED = 0
STEPS = 500
SGD_LR = 0.01              # step size of the by-hand gradient step
THREADS = 2

# %%
import copy

import torch
from grpo_kit import GRPOConfig, load_model, setup, train
from grpo_kit.core import aggregate, compute_advantages, grpo_per_token_loss
from grpo_kit.data import heldout_split
from grpo_kit.eval import columns_of, diagnose, greedy_accuracy
from grpo_kit.model import completion_logprobs, sample_groups
from grpo_kit.rewards import exact_answer, score
from grpo_kit.view import Dashboard, record, smoke_banner

if SMOKE:
    STEPS, THREADS = 20, 1
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)
cfg = GRPOConfig(seed=SEED, steps=STEPS, eval_size=100 if SMOKE else 500, threads=THREADS)
print(f"P={cfg.num_prompts} prompts x G={cfg.num_generations} completions per step, {cfg.steps} steps, "
      f"lr={cfg.learning_rate}, advantages: scale_rewards={cfg.scale_rewards!r}, loss_type={cfg.loss_type!r}")

# %% [markdown]
# ## The starting point: a half-trained model
#
# `load_model("tiny")` is an ordinary `AutoModelForCausalLM.from_pretrained` on the checkpoint that
# ships inside the kit (`grpo-kit make-base` rebuilds it). It was trained by supervised learning and
# stopped on purpose at about 40% held-out accuracy, leaving room for RL.

# %%
model, tokenizer = load_model("tiny")
test = heldout_split(cfg.task)[:cfg.eval_size]
base_acc, base_completions, _ = greedy_accuracy(model, tokenizer, test, return_completions=True)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
print(f"held-out greedy accuracy of the base: {base_acc:.1%} on {len(test)} problems\n")
for it, c in list(zip(test, base_completions))[:6]:
    mark = "✓" if c == it["completion"] else "✗"
    print(f"{it['prompt']:<8} model wrote {c!r:<7} correct {it['completion']!r:<7} {mark}")

# %% [markdown]
# ## One GRPO step, by hand
#
# ### 1. Sample a group per prompt and score it
# Four prompts, G = 8 completions each, sampled at temperature 1 (B = P·G = 32 rows).

# %%
P, G = 4, 8
gen = torch.Generator().manual_seed(SEED)
items = test[:P]
groups = sample_groups(model, tokenizer, [it["prompt"] for it in items], num_generations=G,
                       max_new_tokens=cfg.max_completion_length, temperature=1.0, generator=gen)
rewards = score([exact_answer], groups.prompts, groups.completions, columns_of(items, repeat=G)).rewards
rewards = rewards.view(P, G)                                  # (P, G) 1 = right, 0 = wrong
print(rewards)

# %% [markdown]
# ### 2. Advantages: compare each answer with its own group
# The training below runs with the kit's default `scale_rewards="none"` (Dr. GRPO's estimator,
# Liu et al. 2025), so we use the same one here: **advantage = reward − the group's mean reward**.
# The group's mean is the [baseline](00b_from_reinforce_to_grpo.ipynb) each answer is compared with.
# A right answer in a group that is mostly wrong gets a large positive advantage; a group where
# every answer is right (or every answer wrong) gets all zeros and teaches nothing.
# (DeepSeekMath's original GRPO also divides by the group's std, `scale_rewards="group"`;
# notebook 01 shows what that division does.)

# %%
adv = compute_advantages(rewards, cfg.scale_rewards)          # (P, G) = rewards - group mean
assert torch.allclose(adv, rewards - rewards.mean(dim=1, keepdim=True))
for p, it in enumerate(items):
    print(f"prompt {it['prompt']!r} (correct: {it['completion']!r}), group mean reward {rewards[p].mean():.3f}")
    print("   " + "  ".join(f"{groups.completions[p * G + g]!r}:{adv[p, g]:+.2f}" for g in range(G)))

# %% [markdown]
# ### 3. Log-probabilities of the sampled tokens
# The model gives, for each completion token $o_{i,t}$, its log-probability given the prompt $q_i$
# and the tokens before it: $\log \pi_\theta(o_{i,t} \mid q_i, o_{i,<t})$, a (B, T) tensor. A mask
# marks the real tokens (up to and including the end-of-sequence token).
#
# We work on a copy of the model, so `model` stays the base for the before/after table.

# %%
policy = copy.deepcopy(model).train()
logp, _ = completion_logprobs(policy, groups.prompt_ids, groups.prompt_mask,
                              groups.completion_ids, groups.completion_mask)   # (B, T)
mask = groups.completion_mask.float()                                          # (B, T)
A = adv.reshape(-1)                                                            # (B,)
print("log-probs of the first completion's tokens:", logp[0][mask[0] > 0].detach().numpy().round(3))

# %% [markdown]
# ### 4. The loss
# With one update per batch and no KL term (the defaults: `num_iterations=1`, `beta=0`) the GRPO
# loss is the policy-gradient loss, averaged over every completion token of the batch
# (`loss_type="dapo"`, the token mean):
#
# $$L(\theta) = -\frac{1}{\sum_i |o_i|} \sum_{i=1}^{B} \sum_{t=1}^{|o_i|} A_i \, \log \pi_\theta(o_{i,t} \mid q_i, o_{i,<t})$$
#
# Minimising it raises the log-probability of tokens with $A_i > 0$ and lowers it for $A_i < 0$.
# The kit writes the same loss in its general, [clipped](00b_from_reinforce_to_grpo.ipynb) form,
# $-\min(\rho A, \mathrm{clip}(\rho, 1-\varepsilon_{clip}, 1+\varepsilon_{clip}) A)$ with the
# [ratio](00b_from_reinforce_to_grpo.ipynb) $\rho = \pi_\theta / \pi_{\text{old}}$, where $\pi_{\text{old}}$ is
# the policy that sampled the batch (notebook 02); at the
# first update $\rho = 1$, and its gradient is exactly the gradient of the line above. We check that
# on the real numbers. (The [KL](00b_from_reinforce_to_grpo.ipynb) term, off here, pulls the model
# back toward its starting weights when `beta > 0`.)

# %%
loss = -(A[:, None] * logp * mask).sum() / mask.sum()                # the equation above
kit_per_token, _ = grpo_per_token_loss(logp, logp.detach(), None, A, mask)  # (B, T) clipped form, ρ = 1
kit_loss = aggregate(kit_per_token, mask, cfg.loss_type)
params = list(policy.parameters())
g_hand = torch.autograd.grad(loss, params, retain_graph=True)
g_kit = torch.autograd.grad(kit_loss, params, retain_graph=True)
grad_gap = max(float((a - b).abs().max()) for a, b in zip(g_hand, g_kit))
print(f"loss = {loss.item():.4f}; largest difference between the two gradients: {grad_gap:.2e}")

# %% [markdown]
# ### 5. Backward and one small gradient step
# `loss.backward()` fills every weight's `.grad`; a plain gradient step moves the weights against it,
# $\theta \leftarrow \theta - \eta\, \nabla_\theta L$. For a small enough step $\eta$ the loss
# falls, so completions with $A > 0$ become more likely. We measure the probability of each
# completion of one group before and after:
# $\pi_\theta(o_i \mid q_i) = \exp \sum_t \log \pi_\theta(o_{i,t} \mid \dots)$.

# %%
def completion_probs(net):
    """(B,) probability of each sampled completion under ``net``."""
    with torch.no_grad():
        lp, _ = completion_logprobs(net, groups.prompt_ids, groups.prompt_mask,
                                    groups.completion_ids, groups.completion_mask)  # (B, T)
    return (lp * mask).sum(-1).exp()                                             # (B,)


seq_before = (logp.detach() * mask).sum(-1).exp()                    # (B,) before the step
base_weights = copy.deepcopy(policy.state_dict())                    # to replay the step with AdamW below
loss.backward()                                                      # fills p.grad for every weight
grads = [p.grad.clone() for p in params]
sgd = torch.optim.SGD(params, lr=SGD_LR)
sgd.step()                                                           # theta <- theta - SGD_LR * grad
seq_sgd = completion_probs(policy)                                   # (B,) after the step

mixed = [p for p in range(P) if 0 < rewards[p].sum() < G]           # groups with something to learn
assert mixed, "no group had both right and wrong answers; try another SEED"
p = mixed[0]
print(f"group of prompt {items[p]['prompt']!r}, one gradient step with lr {SGD_LR}:")
for g in range(G):
    b = p * G + g
    print(f"   {groups.completions[b]!r:<7} reward {rewards[p, g]:.0f}  advantage {A[b]:+.2f}   "
          f"probability {seq_before[b]:.4f} -> {seq_sgd[b]:.4f}")
rewarded = [b for b in range(P * G) if A[b] > 0]                     # every rewarded completion in the batch
ratios = (seq_sgd[rewarded] / seq_before[rewarded]).tolist()
print("\nevery rewarded completion (A > 0), probability after / before:", [round(x, 3) for x in ratios])

# %% [markdown]
# ### 6. What `train()` does instead: AdamW
# Training uses AdamW (`learning_rate=3e-4`, and the run's `weight_decay`, read from `cfg`: 0 by
# default, which makes it plain Adam) after clipping the gradient's norm to `max_grad_norm`.
# Adam divides each weight's gradient by a running estimate of its size, so its **first** step
# moves every weight whose gradient is well above Adam's eps (1e-8) by about `lr`, whatever that
# gradient's size (weights with tiny gradients move less; the printout counts those within 1% of `lr`):
# it follows the *sign* of the gradient, not its length. That is a large, blunt step. Replay the
# same gradient with AdamW and measure again:

# %%
policy.load_state_dict(base_weights)
for w, g in zip(params, grads):
    w.grad = g.clone()
grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
adamw = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)  # as train() builds it
adamw.step()
moved = torch.cat([(w.detach() - base_weights[n]).abs().flatten()
                   for (n, _), w in zip(policy.named_parameters(), params)])          # (#weights,)
has_grad = torch.cat([g.flatten() != 0 for g in grads])
frac_moved_lr = float(((moved[has_grad] - cfg.learning_rate).abs() < 0.01 * cfg.learning_rate).float().mean())
median_move = float(moved[has_grad].median()) / cfg.learning_rate   # 1.0: the typical weight moved by lr
seq_adam = completion_probs(policy)
adam_ratios = (seq_adam[rewarded] / seq_before[rewarded]).tolist()
print(f"gradient norm {float(grad_norm):.3f}; {frac_moved_lr:.1%} of the weights with a gradient moved by lr "
      f"= {cfg.learning_rate} (within 1%); the median weight moved by {median_move:.3f} x lr")
print("every rewarded completion, probability after / before one AdamW step:", [round(x, 3) for x in adam_ratios])
print(f"{sum(x < 1 for x in adam_ratios)} of {len(adam_ratios)} rewarded completions became less likely")

# %% [markdown]
# Read the two lists. The small gradient step raised every rewarded completion (the last cell
# checks it). The single AdamW step moved most of the weights by the same amount, `lr`, and is far
# from "small": the line under the second list counts the rewarded completions it made *less*
# likely. Over many steps Adam's running averages make its steps follow the gradient on average,
# and the learning-rate schedule shrinks them (the default, `lr_schedule="cosine"`, decays `lr`
# along half a cosine from its start to 0 at the last step); one step proves little.

# %% [markdown]
# ## Train
#
# `train(cfg, run)` is that step in a loop (plus a held-out evaluation every `eval_every` steps);
# it yields one metrics dict per step (TRL's key names: `reward`, `kl`, `entropy`,
# `frac_reward_zero_std`, ...). The dashboard draws them as they come; its **Stop** button ends
# the run after the current step. Run headless (papermill), it draws the same panels once at the end.

# %%
run = setup(cfg)
dash = Dashboard(total_steps=cfg.steps, title="GRPO on the tiny model")
for m in train(cfg, run, should_stop=dash.should_stop):
    dash.update(m, variant=f"default seed {SEED}", run=run)
    if "accuracy" in m:
        print(f"step {m['step']:4d}  reward {m['reward']:.2f}  held-out accuracy {m['accuracy']:.1%}  "
              f"KL {m['kl']:.3f}  entropy {m['entropy']:.2f}")
dash.close()
stopped_early = dash.stopped   # the Stop button ends the run early: the accuracy claim is then not checked

# %% [markdown]
# ## Before and after

# %%
after_acc, after_completions, _ = greedy_accuracy(run.policy, run.tokenizer, test, return_completions=True)
print(f"{'prompt':<9}{'correct':<9}{'before':<9}{'after':<9}")
for it, b, a in list(zip(test, base_completions, after_completions))[:10]:
    print(f"{it['prompt']:<9}{it['completion']:<9}{b:<9}{a:<9}")
print(f"\nheld-out greedy accuracy: {base_acc:.1%} -> {after_acc:.1%} ({100 * (after_acc - base_acc):+.1f} points)")
low_step, low_acc = min(run.evals, key=lambda e: e[1])
if low_acc < base_acc and low_step < run.evals[-1][0]:
    print(f"on the way it dipped: {low_acc:.1%} at step {low_step}, below the base, before it rose (the early dip)")
else:
    print("no eval in this run fell below the base: no early dip this time")

# %% [markdown]
# ## What to notice
# - **Reward** on the training samples and **held-out accuracy** both end higher: the model is not
#   memorising, the held-out problems were never sampled in training. The two differ in level
#   because the reward scores samples drawn at temperature 1, while accuracy takes each problem's
#   single most likely (greedy) answer.
# - Not in a straight line: held-out accuracy often falls below the base first, the **early dip**
#   you will meet in later notebooks (the line above says whether this run dipped). Greedy accuracy
#   counts only the answer on top; the first updates move many weights at once (Adam's first steps
#   move every weight that has a gradient by about `lr`, as the by-hand AdamW step showed) and
#   reshuffle which answer is on top before enough groups have shown which answers are right. How
#   deep it goes varies from run to run and with the config: in the Try-this table below, a smaller
#   learning rate dips less and 4 prompts a step dips more. A short run can end inside it, below the
#   base: that is why smoke runs are not results.
# - **Entropy** falls: the model becomes surer of its answers, the answers in a group become
#   alike, more and more groups are all-right (`frac_reward_zero_std` rises) and teach nothing.
#   That is why GRPO slows down as a task is mastered.
# - **KL** to the starting model (the KL column above) rises from 0 in the first steps: GRPO moved
#   the model. With `beta = 0` (the default) nothing pulls it back; with `beta > 0` the loss does.
#
# ## Try this
# Change `cfg` and re-run the training cell. Each line below was measured on 2026-12-03 with
# `GRPOConfig(steps=150, eval_size=200, ...)` (seed 0, 200 held-out problems, on which the base
# scores 44.5%).
#
# | change | held-out accuracy at step 50 / 150 | what happened |
# |---|---|---|
# | none (G=8, P=16, lr 3e-4, `scale_rewards="none"`) | 52.0% / 72.5% | the reference |
# | small groups: `num_generations=2, num_prompts=64` (same 128 samples a step) | 45.0% / 58.5% | in the last 10 steps 68% of the pairs were both right or both wrong (`frac_reward_zero_std`): no signal |
# | large groups: `num_generations=32, num_prompts=4` | 25.0% / 47.0% | only 4 prompts a step: a noisy step, a deep early dip |
# | `learning_rate=1e-4` | 58.0% / 71.0% | steadier early, slower late |
# | `learning_rate=2e-3` | 0.0% / 0.0% | collapsed by step 50: in the last 10 steps every group was all wrong (`frac_reward_zero_std` = 1), so every advantage is 0 and nothing can pull it back; entropy *rose* from 0.83 (first step) to 1.26 (last 10 steps) |
# | `scale_rewards="group"` (DeepSeekMath's z-score) | 37.5% / 78.0% | a deeper early dip, then ahead at 150 steps (notebook 01 explains the division) |
#
# The reference row is the run above cut to 150 steps: its cosine schedule decays three times
# sooner and it is scored on 200 problems, so its step-50 number need not match the run above (one
# run is one draw; notebook 02b shows how far seeds of one config land apart).
#
# ## The claims, checked
# In smoke mode (and in the full run) this cell checks the by-hand step: the advantages are the
# training's estimator, the loss equation has the kit's gradient, and one step made the rewarded
# completion more likely. **Only the full run** (500 steps) checks that GRPO raises held-out
# accuracy by at least 25 points.

# %%
record("by_hand_grad_gap", grad_gap)
record("sgd_rewarded_prob_ratios", ratios)
record("adamw_rewarded_prob_ratios", adam_ratios)
record("adamw_frac_weights_moved_by_lr", frac_moved_lr)
record("adamw_median_move_over_lr", median_move)
record("base_accuracy", base_acc)
record("final_accuracy", after_acc)
record("steps", run.step)
record("findings", [f.kind for f in diagnose(run.history, cfg)])  # what the instruments report on this healthy run
assert grad_gap < 1e-6, f"the loss equation and the kit's loss have different gradients (gap {grad_gap})"
assert min(ratios) > 1, f"a small gradient step should raise every rewarded completion: ratios {ratios}"
assert abs(median_move - 1) < 0.01 and frac_moved_lr > 0.5, (
    f"AdamW's first step should move most weights by lr: median {median_move:.3f} x lr, {frac_moved_lr:.1%} within 1%")
assert (run.step == STEPS or stopped_early) and all(torch.isfinite(torch.tensor([m["loss"] for m in run.history])))
if SMOKE or stopped_early:
    print("the by-hand step holds; the accuracy claim needs the full run (SMOKE=False, not stopped).")
else:
    gain = after_acc - base_acc
    assert gain >= 0.25, f"GRPO gained only {gain:+.1%} held-out accuracy (claim: at least +25 points)"
    print("claims hold: a small gradient step raised every rewarded completion; "
          f"GRPO raised held-out accuracy by {100 * gain:.1f} points")

# %% [markdown]
# ## Summary
# - With the kit's default `scale_rewards="none"`, an answer's advantage is its reward minus its
#   group's mean reward (checked against `compute_advantages`); a group whose answers all get the
#   same reward has every advantage 0 and adds nothing to the update.
# - The policy-gradient loss written by hand, −Σ A log π / Σ|o|, has the same gradient as the kit's
#   clipped loss at ρ = 1 (checked to 1e-6).
# - One small plain gradient step on that loss made every rewarded completion more likely (checked).
#   AdamW's first step is not small: it moves most weights by `lr` (the cell prints the share), following the sign of
#   its gradient, not its size (checked: the median weight moved by `lr`).
# - The full run (500 steps, `SMOKE = False`) checks that GRPO raises held-out greedy accuracy by at
#   least 25 points with nothing but a right/wrong reward.
#
# ## Questions
# 1. A group of G = 8 answers has 2 right (reward 1) and 6 wrong (reward 0). Predict each answer's
#    advantage under `scale_rewards="none"`.
# 2. Why is the held-out accuracy, not the training reward, the number that shows the model learned
#    addition?
# 3. At the first update of a batch the ratio ρ is exactly 1. Why does the clip not change the
#    gradient there?
# 4. Why does Adam's *first* step move a weight by about `lr` whether its gradient is 1e-6 or 10?
# 5. As training goes on, more and more groups are all right. Why does that slow learning down?
#
# <details><summary>Answers</summary>
#
# 1. The group's mean is 2/8 = 0.25: each right answer gets 1 − 0.25 = +0.75, each wrong one −0.25.
# 2. The training reward is measured on the prompts the model is trained on; the held-out problems
#    are never sampled in training, so a gain there is not memorisation.
# 3. ρ = 1 lies inside [1 − ε_clip, 1 + ε_clip], so the two terms of the min are equal and the
#    gradient is A ∇log π, the gradient of the plain policy-gradient loss (section 4 checks it).
# 4. On its first step Adam's two running averages are g and g² (after bias correction), so the
#    update is lr · g / (|g| + eps) ≈ lr · sign(g) for any |g| well above eps = 1e-8.
# 5. In an all-right group every reward equals the mean, so every advantage is 0: the samples cost
#    compute and push nothing (`frac_reward_zero_std` counts those groups).
# </details>
#
# ## Exercises
# 1. Build by hand a `rewards` row where all 8 answers of a group are right (the sampled batch may
#    have none) and compute its advantages as the by-hand step does. What do you get, and what does
#    that group contribute to the update?
# 2. **Code.** The kit's `loss_type="grpo"` (DeepSeekMath) averages each completion's tokens first,
#    then averages over completions. Write that loss by hand from `logp`, `mask` and `A`, and check
#    that its gradient equals the kit's `aggregate(..., "grpo")`.
#
# <details><summary>Solution to 1</summary>All advantages are 0 (every reward equals the group's
# mean), so the group contributes no policy gradient; it only cost the compute of sampling it.</details>
#
# The solution to 2 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 2: per-completion token mean, then the mean over completions.
logp2, _ = completion_logprobs(policy, groups.prompt_ids, groups.prompt_mask,
                               groups.completion_ids, groups.completion_mask)       # (B, T)
hand_grpo = (-(A[:, None] * logp2 * mask).sum(-1) / mask.sum(-1)).mean()           # ()
kit_pt, _ = grpo_per_token_loss(logp2, logp2.detach(), None, A, mask)              # (B, T)
kit_grpo = aggregate(kit_pt, mask, "grpo")
gh = torch.autograd.grad(hand_grpo, params, retain_graph=True)
gk = torch.autograd.grad(kit_grpo, params)
gap = max(float((a - b).abs().max()) for a, b in zip(gh, gk))
assert gap < 1e-6, gap
print(f"same gradient (largest gap {gap:.1e})")

# %% [markdown]
# **Next:** [00b · From REINFORCE to GRPO](00b_from_reinforce_to_grpo.ipynb): where each term of
# the loss comes from, on a policy small enough to compute exactly.
