# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Beyond one scalar per answer: pairwise judges, process rewards, a value head, a learned judge
#
# **The question.** Do pairwise judges, process rewards, a critic or a learned judge beat one number per answer?
#
# Plain GRPO gives each completion one number (its reward) and compares it with its group. The
# kit can make the advantages from more than that, each switched on with one config field
# (`advantage_estimator`):
#
# | estimator | what it uses | advantage | source |
# |---|---|---|---|
# | `grpo` (plain) | one reward r_i per completion | A_i = r_i - mean_g(r) (`scale_rewards='none'`, the kit's default) | DeepSeekMath (Shao et al. 2024); Dr. GRPO |
# | `pairwise` | a (G, G) preference matrix M from `pairwise_judges` (each pair judged in both orders) | A_i = sum_{j != i} M[i, j] / (G - 1), the win rate minus the loss rate | pairwise judges with the order swap of MT-Bench (Zheng et al. 2023) |
# | `process` | a score per *step* of each completion (`step_judge`) | step scores z-scored over the group's steps; token t gets the sum of the scores of the steps ending at or after t | process supervision, DeepSeekMath sec. 4.1.3 |
# | `hybrid_gae` | the reward and a value head V trained in the loop | A_t = w (r_i - mean_g r) + (1 - w) GAE_t, GAE_t = sum_l (gamma lambda)^l delta_{t+l}, delta_t = r_t + gamma V_{t+1} - V_t | GAE (Schulman et al. 2016); the mix is a variant you will meet |
#
# A learned judge (a reward model trained on preference pairs with the Bradley-Terry loss, as
# in InstructGPT, Ouyang et al. 2022) plugs in as `learned:DIR`, as a reward or as a pairwise judge.
#
# **What you will learn**
# 1. When a pairwise judge adds nothing: built from a scalar reward it gives exactly the
#    centred rank of that reward (computed and checked here, not just claimed).
# 2. How to train a learned judge from preference groups and read its held-out agreement.
# 3. How the four estimators compare with plain GRPO **at the same number of generated
#    completions** (same P, G and steps), over 3 seeds each, on the live dashboard, and how to
#    read the table honestly: a difference counts only where the spread between seeds allows it.
# 4. What the GAE mix weight w means once the two terms are on their own scales.
#
# **Time**: 7 minutes headless with the full parameters (a learned judge and 21 training runs,
# one thread, measured on 2 CPU cores shared with other work); `SMOKE=True` runs every cell in
# about 10 s (measured headless on quiet cores).

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
import copy
import inspect
import math
import tempfile
import time

import ipywidgets as W
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from grpo_kit import GRPOConfig, load_model, setup, train
from grpo_kit.core import (
    compute_advantages,
    hybrid_gae,
    hybrid_gae_terms,
    pairwise_winrate,
    process_advantages,
    rank_based,
)
from grpo_kit.data import DATASETS_DIR, get_task
from grpo_kit.eval import columns_of, greedy_accuracy, se_of_gap
from grpo_kit.loop import beyond_scalar
from grpo_kit.model import sample_groups
from grpo_kit.rewards import exact_answer, learned_judge, load_preference_groups
from grpo_kit.view import Dashboard, record, redraw_on_change, smoke_banner, smooth
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
print(("it beats a coin on held-out pairs" if beats_chance else "it is NOT distinguishable from a coin on held-out pairs")
      + f"; training groups minus held out: {agree_train - agree_heldout:+.3f} (a large gap is overfitting)")
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
# ## 3. Seven runs, three seeds each, at equal generated completions
#
# Every run takes the same `STEPS` updates of P x G completions at the same learning rate
# (`LEARNING_RATE`, cosine decay). Five variants train the add2 base on add2 (answers written
# with the digits reversed, `47+85=` -> `231`):
#
# | name | config |
# |---|---|
# | `grpo` | plain GRPO (`advantage_estimator='grpo'`, exact-answer reward) |
# | `pairwise_closeness` | `advantage_estimator='pairwise'`, `pairwise_judges=['closeness']` |
# | `pairwise_learned` | `advantage_estimator='pairwise'`, `pairwise_judges=['learned:DIR']` (the judge above) |
# | `hybrid_w0.3`, `hybrid_w0.7` | `advantage_estimator='hybrid_gae'`, `hybrid_weight` 0.3 / 0.7 (value head lr 1e-3) |
#
# Process rewards need steps, so two runs train the scratchpad base `tiny-add2s` on task
# `add2s` (`47+85=` -> `12 13|231`: the column sums, then the answer), with
# `max_completion_length=16` (at a learning rate of 3e-4 this base collapses, see notebook 02):
#
# | name | config |
# |---|---|
# | `scratchpad_grpo` | plain GRPO on add2s |
# | `process` | `advantage_estimator='process'`, `step_judge='column_sums'`: each column sum is a step, 1 if right |
#
# The reward functions are scored and logged in every run (the `reward` panel is the exact-answer
# reward for all of them), whatever the advantages are made from.

# %%
COMMON = dict(steps=STEPS, num_prompts=NUM_PROMPTS, num_generations=NUM_GENERATIONS, learning_rate=LEARNING_RATE,
              eval_every=EVAL_EVERY, eval_size=EVAL_SIZE, threads=THREADS, log_kl=False, checkpoint_every=0)
SCRATCHPAD = dict(model="tiny-add2s", task="add2s", max_completion_length=16)
VARIANTS = {
    "grpo": {},
    "pairwise_closeness": dict(advantage_estimator="pairwise", pairwise_judges=["closeness"]),
    "pairwise_learned": dict(advantage_estimator="pairwise", pairwise_judges=[f"learned:{JUDGE_DIR}"]),
    "hybrid_w0.3": dict(advantage_estimator="hybrid_gae", hybrid_weight=0.3),
    "hybrid_w0.7": dict(advantage_estimator="hybrid_gae", hybrid_weight=0.7),
    "scratchpad_grpo": dict(SCRATCHPAD),
    "process": dict(SCRATCHPAD, advantage_estimator="process", step_judge="column_sums"),
}
REFERENCE = {name: "scratchpad_grpo" if "model" in kw else "grpo" for name, kw in VARIANTS.items()}
bases = {"tiny": (base_policy, base_tok), "tiny-add2s": load_model("tiny-add2s")}

dash = Dashboard(total_steps=STEPS, title=f"notebook 08: {len(VARIANTS)} estimators x {len(SEEDS)} seeds")
runs, t_runs = {}, time.time()
for name, kw in VARIANTS.items():
    for seed in SEEDS:
        cfg = GRPOConfig(**COMMON, **kw, seed=seed)
        policy, tok = bases[cfg.model]
        run, t0 = setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok), time.time()
        for m in train(cfg, run, should_stop=dash.should_stop):
            dash.update(m, variant=f"{name} seed {seed}", run=run)
        runs[name, seed] = run
        print(f"{name:<19} seed {seed}: held-out accuracy {run.evals[0][1]:.3f} -> {run.evals[-1][1]:.3f} "
              f"({run.step} steps, {time.time() - t0:.0f} s)")
dash.close()
run_seconds = time.time() - t_runs
print(f"{len(runs)} runs in {run_seconds:.0f} s")
record("run_seconds", run_seconds)
record("completions_per_run", {f"{n} seed {s}": r.step * NUM_PROMPTS * NUM_GENERATIONS for (n, s), r in runs.items()})

# %% [markdown]
# ## 4. The table: held-out accuracy, base and final, mean ± spread over seeds
#
# "spread" is the standard deviation over seeds. "vs plain" is the difference of final means to
# the plain GRPO run on the same task and base. A variant counts as **better** / **worse** than
# plain GRPO only when that difference exceeds twice its standard error over seeds; otherwise
# "no clear difference". A run **learns** when its final accuracy beats its base accuracy by
# more than twice the standard error of the final mean.

# %%
def mean_sd(xs):
    xs = np.asarray(xs, dtype=float)
    return float(xs.mean()), float(xs.std(ddof=1)) if len(xs) > 1 else 0.0


final = {n: np.array([runs[n, s].evals[-1][1] for s in SEEDS]) for n in VARIANTS}
base = {n: np.array([runs[n, s].evals[0][1] for s in SEEDS]) for n in VARIANTS}
summary, rows = {}, []
for n in VARIANTS:
    (b_mean, b_sd), (f_mean, f_sd) = mean_sd(base[n]), mean_sd(final[n])
    f_se = f_sd / math.sqrt(len(SEEDS)) if len(SEEDS) > 1 else float("inf")
    learns = f_mean - b_mean > 2 * f_se
    ref = REFERENCE[n]
    diff = f_mean - final[ref].mean()
    se = se_of_gap(final[n], final[ref])
    verdict = "(reference)" if n == ref else "better" if diff > 2 * se else "worse" if diff < -2 * se \
        else "no clear difference"
    summary[n] = dict(task=runs[n, SEEDS[0]].cfg.task, base_mean=b_mean, base_sd=b_sd, final_mean=f_mean,
                      final_sd=f_sd, per_seed=final[n].tolist(), learns=bool(learns), vs_plain=float(diff),
                      verdict=verdict)
    rows.append({"variant": n, "task": summary[n]["task"], "base": f"{b_mean:.1%} ± {b_sd:.1%}",
                 "final": f"{f_mean:.1%} ± {f_sd:.1%}", "per seed": " ".join(f"{a:.1%}" for a in final[n]),
                 "learns": "yes" if learns else "no", "vs plain": f"{diff:+.1%}", "verdict": verdict})
table = pd.DataFrame(rows).set_index("variant")
display(table)
record("summary", summary)
record("table_markdown", "\n".join(["| variant | " + " | ".join(table.columns) + " |", "|---" * (len(table.columns) + 1) + "|"]
                                   + [f"| {n} | " + " | ".join(map(str, row)) + " |" for n, row in table.iterrows()]))

# %% [markdown]
# What the table says, written from the numbers above (rerun with other seeds and it rewrites itself):

# %%
def findings_text(summary):
    lines = []
    for n, row in summary.items():
        ref = REFERENCE[n]
        learn = (f"learns ({row['base_mean']:.1%} -> {row['final_mean']:.1%})" if row["learns"]
                 else f"does not clearly learn ({row['base_mean']:.1%} -> {row['final_mean']:.1%})")
        if n == ref:
            lines.append(f"- **{n}** (plain GRPO on {row['task']}) {learn}.")
        elif row["verdict"] == "no clear difference":
            why = "within twice the standard error over seeds" if len(SEEDS) > 1 else "one seed: no spread to judge by"
            lines.append(f"- **{n}** {learn}; it gives **nothing measurable over plain GRPO** at this budget "
                         f"({row['vs_plain']:+.1%}, {why}).")
        else:
            lines.append(f"- **{n}** {learn}; it is **{row['verdict']}** than plain GRPO by {abs(row['vs_plain']):.1%} "
                         f"(more than twice the standard error over seeds).")
    return "\n".join(lines)


findings = findings_text(summary)
if SMOKE:
    findings = "*(SMOKE run: a few steps per run, too short to read anything from.)*\n\n" + findings
display(Markdown(findings))
record("findings_text", findings)

# %% [markdown]
# A learned judge is a model, and a policy trained against a model can find answers the model
# likes that are wrong (reward hacking, notebook 06). We check it on the `pairwise_learned` runs:
# the judge's mean score of the greedy answers to the held-out problems, and their accuracy,
# before and after training.

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
    (b_score, b_acc, _), (f_score, f_acc, examples) = judged(bases["tiny"][0], run), judged(run.policy, run)
    hack[s] = dict(base_score=b_score, final_score=f_score, base_acc=b_acc, final_acc=f_acc)
    print(f"seed {s}: judge score {b_score:+.2f} -> {f_score:+.2f}, accuracy {b_acc:.1%} -> {f_acc:.1%}; "
          f"final answers (text, right, score): {examples[:4]}")
hacked = [s for s, h in hack.items() if h["final_score"] > h["base_score"] and h["final_acc"] < h["base_acc"]]
d_score = np.array([h["final_score"] - h["base_score"] for h in hack.values()])  # (seeds,) change of the judge's score
d_acc = np.array([h["final_acc"] - h["base_acc"] for h in hack.values()])        # (seeds,) change of accuracy


def two_se_above_zero(x):
    """The mean is more than twice its standard error above 0 (never with one seed: no spread to judge by)."""
    return len(x) > 1 and x.mean() > 2 * x.std(ddof=1) / math.sqrt(len(x))


# the verdict "hacked" needs both moves above the noise over seeds, the rule of the table above
hacking_verdict = "hacked" if two_se_above_zero(d_score) and two_se_above_zero(-d_acc) else "no clear sign of hacking"
print(f"the judge's score rose while accuracy fell for {len(hacked)} of {len(SEEDS)} seeds; over seeds the score "
      f"moved {d_score.mean():+.2f} and accuracy {d_acc.mean():+.1%}: {hacking_verdict}"
      + (" (the policy learned what the judge likes, not what is right)" if hacking_verdict == "hacked" else ""))
record("learned_judge_hacking", {str(s): h for s, h in hack.items()})
record("learned_judge_hacking_verdict", hacking_verdict)

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
# ## 5. What the GAE mix weight means after normalisation
#
# First, what the value head is. A **critic** (or value function) predicts the reward a situation
# will lead to: here, from each prefix of a completion, the reward the finished answer will get.
# PPO uses one as its baseline; GRPO drops it and uses the group's mean reward instead
# ([00b](00b_from_reinforce_to_grpo.ipynb), section 7, measures what that costs). `hybrid_gae`
# brings one back: a linear head on the policy's last hidden state, trained in the loop by
# regression on the returns. Its gift is a value per *token*: GAE (Schulman et al. 2016) turns the
# changes of V along an answer into per-token advantages, so the tokens where the prediction rose
# or fell get more credit or blame than the rest.
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
# ## 6. What the process judge saw
#
# `process/step_score_mean` is the fraction of right steps (column sums and the final answer),
# `process/steps_mean` the steps per completion. A process reward pays for right column sums even
# in a completion whose final answer is wrong, so it gives a signal in groups where every final
# answer is wrong (or right) and plain GRPO's advantage is 0. Here is one such group, by hand:
# four answers to `47+85=` on the scratchpad task (the column sums, then the reversed result;
# the right one is `12 13|231`), every final answer wrong, with 2, 1, 1 and 0 right column sums.
# The shipped step judge scores each step; `process_advantages` (the function the `process`
# estimator calls) turns the step scores into per-character advantages here, since each step's
# end is a character position.

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
# The runs: how often the process judge found right steps, and how many groups had final answers
# all alike (where plain GRPO has no signal).

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
# ## 7. What the runs support
#
# Always (smoke and full): a pairwise judge built from a scalar reward gives exactly the centred
# rank, and the correctness rule on a 0/1 reward exactly G/(G-1) times plain GRPO's advantage;
# the closeness rule ties fewer pairs than the correctness rule; every run spent the same
# number of completions and trained with finite losses; every estimator logged its metrics.
#
# Full run only: the learned judge agrees with held-out preferences more often than chance
# (beyond 3 standard errors); plain GRPO learns on both tasks with every seed. Whether a
# variant beats plain GRPO is **not** asserted: the table's verdicts and the text under it come
# from the runs.

# %%
assert rank_gap < 1e-9, rank_gap
assert grpo_gap < 1e-6, grpo_gap
assert stats_close["pairwise/tie_frac"] < stats_corr["pairwise/tie_frac"]
stopped_early = dash.stopped  # Stop pressed on the dashboard: every later run ended after one step
record("stopped_early", stopped_early)
assert stopped_early or all(r.step == STEPS for r in runs.values()), {k: r.step for k, r in runs.items()}
for key, run in runs.items():
    assert all(math.isfinite(m["loss"]) for m in run.history), key
for n, key in (("process", "process/step_score_mean"), ("hybrid_w0.3", "advantages/group_share"),
               ("pairwise_closeness", "pairwise/tie_frac"), ("pairwise_learned", "pairwise/tie_frac")):
    assert all(key in m for s in SEEDS for m in runs[n, s].history), (n, key)
if not SMOKE and not stopped_early:
    assert agree_heldout > 0.5 + chance_band, (agree_heldout, chance_band)
    for ref in ("grpo", "scratchpad_grpo"):
        assert (final[ref] > base[ref]).all(), (ref, final[ref], base[ref])
    print("full-run claims hold: the judge beats chance on held-out pairs; plain GRPO learns on both tasks "
          "with every seed")
record("wall_seconds", time.time() - T0)
print(f"notebook ran in {time.time() - T0:.0f} s")

# %% [markdown]
# ## Summary
# - An advantage can be made from more than one reward per answer, each with one config field:
#   win rates from a pairwise judge, scores per step, a value per token (GAE), a learned judge.
# - A pairwise judge built from a scalar reward adds nothing: it gives exactly the centred rank of
#   that reward, and the correctness rule exactly G/(G−1) times plain GRPO's advantage.
# - A process judge gives a signal in groups whose final answers are all wrong, where plain GRPO
#   has none; a value head gives each token its own advantage.
# - A judge that was trained can be learned by the policy instead of the task: check it against the
#   true answers. The table's verdicts, not this summary, say which variant helped at this budget.
#
# ## Questions
# 1. A pairwise judge compares two answers by their 0/1 correctness. What advantage does it give,
#    compared with plain GRPO's?
# 2. In a group where every final answer is wrong, which estimators of this notebook still move the
#    policy, and why?
# 3. What is a critic, and what does GRPO use in its place?
# 4. The learned judge's score rose while held-out accuracy fell. What happened, and what in this
#    notebook tells it apart from a judge that is right?
#
# <details><summary>Answers</summary>
#
# 1. G/(G − 1) times plain GRPO's (mean-centred) advantage: the same direction, a constant scale.
# 2. `process` (right column sums earn credit), `hybrid_gae` (the value head's GAE part does not
#    vanish with the group's spread) and a pairwise judge that compares more than correctness (the
#    closeness rule, a learned judge); plain `grpo` and a correctness-only pairwise judge give 0.
# 3. A model of the expected reward from a state (a prefix); GRPO uses the group's mean reward.
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
# 3. **Code:** write a step judge for add2s that gives 0.5 to a column sum that is off by one
#    and 1 to a right one (copy `beyond_scalar.column_sum_steps`, shown below), pass it as
#    `step_judge=my_judge` to `setup()`'s config, and train 20 steps.
# 4. Set `hybrid_weight=1.0` and `0.0`: which one is plain GRPO, and what does the other train on?

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 3.**
#
# ```python
# import re
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
# **Solution to 4** (the next cell): with one group of two completions, by hand.

# %% jupyter={"source_hidden": true}
# Solution to exercise 4: w = 1 is plain GRPO's advantage on every token; w = 0 is GAE alone.
rewards4 = torch.tensor([[1.0, 0.0]])                        # (P=1, G=2) one right, one wrong
values4 = torch.tensor([[[0.2, 0.4, 0.6], [0.2, 0.1, 0.0]]])  # (1, 2, T=3) a value head's predictions
mask4 = torch.ones(1, 2, 3, dtype=torch.bool)
grp4, gae4, _ = hybrid_gae_terms(rewards4, values4, mask4)   # (1, 2, 3) each
assert torch.allclose(hybrid_gae(rewards4, values4, mask4, w=1.0), grp4)
assert torch.allclose(hybrid_gae(rewards4, values4, mask4, w=0.0), gae4)
assert torch.allclose(grp4[0, :, 0], compute_advantages(rewards4, "group")[0])  # the group term is plain GRPO's
print("w = 1:", hybrid_gae(rewards4, values4, mask4, w=1.0)[0].tolist())
print("w = 0:", hybrid_gae(rewards4, values4, mask4, w=0.0)[0].tolist())

# %% [markdown]
# **The shipped step judge**, for reading:

# %%
print(inspect.getsource(beyond_scalar.column_sum_steps))

# %% [markdown]
# **Next:** [09 · From the toy to a real model](09_from_toy_to_real.ipynb). Every field used here
# works from YAML in `grpo-kit train --config` (`advantage_estimator`, `pairwise_judges`,
# `step_judge`, `hybrid_weight`, `value_lr`), and `grpo-kit serve-judge` serves any of these
# judges over HTTP for another trainer.
