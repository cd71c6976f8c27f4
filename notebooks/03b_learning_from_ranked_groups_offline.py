# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03b · Learning from ranked groups collected offline
#
# **The question.** Can ranked groups of answers, sampled and judged once before training, teach the tiny model as well as online GRPO, which samples fresh answers at every step?
#
# Online GRPO ([00](00_quickstart.ipynb)) samples G answers from the *current* model at every step,
# judges them and updates. Sampling and judging are the expensive part on a real model, so a
# recipe you will meet records ranked groups once, from the base model, and trains on the file.
# [03](03_judges_and_preferences.ipynb) built the preference matrix such a file holds; here the
# model learns from it.
#
# **What you will learn**
# 1. a pairwise loss on sequence log-probabilities (the margin hinge; Bradley-Terry is its smooth
#    cousin), trained in two stages, and why it needs a likelihood anchor;
# 2. how to compare offline and online training fairly: at the same number of judged answers and
#    at the same number of updates, which hold different things fixed;
# 3. why one seed per arm can tell the wrong story: at the same number of updates, the seeds of
#    online GRPO land far apart;
# 4. how to test two claims you will meet (staging helps; a learnable per-group baseline helps), and
#    how to look for the mechanism when a claim fails.
#
# **How long it takes**: about 8 minutes with the default parameters (six training runs per
# seed, three seeds), about 30 s with `SMOKE = True` (run headless on 2 quiet CPU cores).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few training steps only; the training claims
# need the full run. GRPO_KIT_SMOKE=1 in the environment sets SMOKE too.
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"
SEEDS = [0, 1, 2]           # seeds per arm (batch order offline; sampling online)
OFFLINE_STEPS = 300
BATCH_PROMPTS = 16
NLL_COEF = 1.0              # weight of the likelihood anchor on the clear winners (0: pure preference loss)
EVAL_SIZE = 500             # held-out problems per evaluation
THREADS = 2

# %%
import matplotlib.pyplot as plt
import torch
from grpo_kit import GRPOConfig, OfflineConfig, load_model
from grpo_kit.data import DATASETS_DIR, heldout_split
from grpo_kit.eval import gap_reading
from grpo_kit.lab import offline as offline_lab
from grpo_kit.lab import offline_run, train_arms, train_offline
from grpo_kit.rewards import exact_answer
from grpo_kit.rewards import pairwise as PW
from grpo_kit.view import Dashboard, record, smoke_banner

if SMOKE:
    OFFLINE_STEPS, EVAL_SIZE, THREADS, SEEDS = 6, 50, 1, SEEDS[:2]
torch.set_num_threads(THREADS)
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. The ranked groups, and the loss
#
# `datasets/add2_prefs.jsonl` was written by
# `grpo-kit pregen --model tiny --task add2 --prompts 256 --k 8 --out datasets/add2_prefs.jsonl`:
# 8 answers sampled from the base for each of 256 training prompts, every pair judged: right
# beats wrong (±1), and ties between two wrong answers resolved by a finer judge, the closer
# number (±0.5). Each group is the preference matrix M of [03](03_judges_and_preferences.ipynb).
#
# The loss works on a whole answer's log-probability, log π(o) = Σ_t log π(o_t | ·). For a pair in
# which answer b beats answer w, the **margin hinge** is relu(log π(w) − log π(b) + 1): zero once the
# better answer is more likely by a margin of 1 nat; the batch's loss is the mean over its pairs,
# each weighted by its label (1 or 0.5). (The kit's Bradley-Terry loss, `loss="bt"`, is the smooth
# cousin: −log sigmoid(β (r_b − r_w)) with r = log π − log π_ref, DPO's implicit reward (Rafailov
# et al., 2023); its model is the one [03](03_judges_and_preferences.ipynb), section 3, defines.)
# Training is **staged**: first the clear pairs only (right against wrong), then every pair, the
# half-point ties included.
#
# A pure preference loss only fixes *differences* of log-probabilities, so it can push both sides of
# every pair down and hand the probability to answers nobody sampled. The **anchor** is the mean
# per-token negative log-likelihood of the clear winners, added with weight `NLL_COEF`. Measured on
# 2026-12-03 with the same `train_offline` call, one seed (0) and `NLL_COEF = 0`: held-out accuracy fell
# from 41% to about 31% with the margin loss at lr 3e-4, and to 18% with the Bradley-Terry loss at
# lr 1e-4. Exercise 2 asks you to see it at this notebook's settings.

# %%
records = PW.load_preference_groups(DATASETS_DIR / "add2_prefs.jsonl")
K = len(records[0]["responses"])
print(f"{len(records)} groups of {K}; first group:", records[0]["prompt"], records[0]["responses"])
print(records[0]["preference_matrix"].numpy().round(1))
test = heldout_split("add2")[:EVAL_SIZE]

# %% [markdown]
# ## 2. Offline training, one run per seed
#
# The file is fixed; the seed picks the order in which its groups are drawn (16 per step). The
# learning rate is 1e-4.

# %%
offline = {}
for seed in SEEDS:
    policy, tok = load_model("tiny")
    offline[seed] = list(train_offline(policy, None, tok, records, OFFLINE_STEPS, test, batch_prompts=BATCH_PROMPTS,
                                       lr=1e-4, loss="margin", stage1_steps=OFFLINE_STEPS // 2, nll_coef=NLL_COEF,
                                       eval_every=50, seed=seed))
    print(f"offline seed {seed}: {offline[seed][0]['accuracy']:.1%} -> {offline[seed][-1]['accuracy']:.1%} "
          f"after {OFFLINE_STEPS} steps on {len(records) * K} pre-generated answers")
base_acc = offline[SEEDS[0]][0]["accuracy"]
offline_acc = [offline[s][-1]["accuracy"] for s in SEEDS]

# %% [markdown]
# ## 3. Online GRPO at two budgets
#
# Online GRPO (notebook 00's recipe, 128 completions per step) samples fresh answers from the current
# model at every step. Two fair budgets:
# - the **same number of judged answers** as the offline file holds (256 × 8 = 2048, i.e. 16 online
#   steps of 128): what generating and judging cost is held fixed;
# - the **same number of updates** (`OFFLINE_STEPS`): the optimizer steps are held fixed, and online
#   GRPO generates far more answers (300 × 128).
#
# Two things differ besides the data. Online GRPO trains at its default lr 3e-4 and offline at 1e-4,
# so each arm is a *recipe* (data, loss and learning rate together), not the data alone. And the
# seed changes different things in the two arms: the batch order offline, the sampled answers online.
# The dashboard shows the online runs.

# %%
cfg = GRPOConfig(threads=THREADS, eval_every=0, eval_size=EVAL_SIZE)
same_samples = max(1, len(records) * K // cfg.batch_size)
if SMOKE:
    same_samples = 2
BUDGETS = (("same judged answers", "grpo same-answers", same_samples),
           ("same updates", "grpo same-updates", OFFLINE_STEPS))
online_dash = Dashboard(total_steps=OFFLINE_STEPS, title=f"online GRPO, two budgets x {len(SEEDS)} seeds")
online_runs = train_arms({short: dict(steps=steps) for _, short, steps in BUDGETS}, SEEDS,
                         dict(threads=THREADS, eval_every=0, eval_size=EVAL_SIZE), dash=online_dash, log=None)
online_dash.close()
online = {label: [online_runs[short, s].evals[-1][1] for s in SEEDS] for label, short, _ in BUDGETS}
for label, short, steps in BUDGETS:
    print(f"online GRPO, {label}: {steps} steps, {steps * cfg.batch_size} sampled answers per seed -> "
          + " ".join(f"{a:.1%}" for a in online[label]))

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for seed in SEEDS:
    pts = [(m["step"], m["accuracy"]) for m in offline[seed] if "accuracy" in m]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="C0", alpha=0.7,
            label="offline ranked groups (margin loss), one line per seed" if seed == SEEDS[0] else None)
for i, (label, _, steps) in enumerate(BUDGETS):
    ax.scatter([steps] * len(SEEDS), online[label], color=f"C{i + 1}", zorder=3, label=f"online GRPO, {label}")
ax.axvline(OFFLINE_STEPS // 2, color="0.8", ls=":")
ax.text(OFFLINE_STEPS // 2, 0.05, " stage 2")
ax.axhline(base_acc, color="0.5", lw=0.8, ls="--")
ax.set(xlabel="update steps", ylabel="held-out greedy accuracy", ylim=(0, 1))
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 4. Reading the gaps
#
# Each comparison is read with the rule of the later notebooks: a gap counts only when it is larger
# than twice its standard error over seeds (`grpo_kit.eval.gap_reading`).

# %%
readings = {
    "offline against the base": gap_reading([base_acc] * len(SEEDS), offline_acc),
    "offline against online, same judged answers": gap_reading(online["same judged answers"], offline_acc),
    "online, same updates, against offline": gap_reading(offline_acc, online["same updates"]),
}
for what, g in readings.items():
    print(f"{what:<45} {g.text()}")
record("base_accuracy", base_acc)
record("offline_accuracy", offline_acc)
record("online_same_samples_accuracy", online["same judged answers"])
record("online_same_updates_accuracy", online["same updates"])
record("readings", {k: g.fields() for k, g in readings.items()})

# %% [markdown]
# **At the same number of updates** the claim you will meet is that online GRPO wins, because it
# keeps sampling the current model's mistakes while the file is used up. The third line reads it.
# In our full run (2026-12-07, `make test-full`) it did not hold: online GRPO ended at 89.4%, 71.4%
# and 71.6% for seeds 0, 1 and 2, offline at 75.0%, 79.2% and 79.0%, a gap of −0.3 points against
# 2 SE of 12.2. Seed 0 alone, the only seed an earlier version of this notebook ran, put online
# 14 points ahead: the spread between seeds is larger than the gap.
#
# ## The claims, checked
# Smoke mode checks that every arm ran on every seed. **Only the full run** checks the training
# claims, each as a gap above 2 SE over three seeds: offline training raises held-out accuracy above
# the base; with the same 2048 judged answers, offline beats online GRPO (16 online steps is still
# the early dip of [00](00_quickstart.ipynb)). The same-updates reading is reported, not asserted.

# %%
assert all(len(v) == len(SEEDS) for v in online.values()) and len(offline_acc) == len(SEEDS)
if SMOKE or online_dash.stopped:
    print("every arm ran on every seed; the training claims need the full run (SMOKE=False, not stopped).")
else:
    for what in ("offline against the base", "offline against online, same judged answers"):
        assert readings[what].verdict == "higher", f"{what}: {readings[what].text()}"
    print("claims hold, each above 2 SE over three seeds: offline beats the base, and online GRPO at the same "
          f"judged answers; at the same updates: {readings['online, same updates, against offline'].verdict}")

# %% [markdown]
# ## 5. Two claims you will meet: staging, and a learnable baseline
#
# Two pieces of advice come with offline preference training. **Staging** (clear pairs first, the
# half-point ties later) is said to help, because the model should learn right from wrong before it
# learns which wrong answer is closer. A **learnable per-group baseline** is said to help a REINFORCE
# loss on the file: each answer's reward is the share of its group it beats,
# r_i = Σ_j max(M_ij, 0) / (K − 1), and the loss is −(r_i − b_p) log π(o_i), where b_p is a
# number per prompt that moves a step towards the group's mean reward each time the group is drawn
# (`baseline_lr = 0.5`: half the way). Without it (b = 0) every recorded answer that beats another
# is pushed up, the better ones more; with it, the answers below their group's mean are pushed down.
#
# The offline rewards never change, so the learnable baseline converges to the group's mean reward:
# the baseline GRPO computes directly ([00b](00b_from_reinforce_to_grpo.ipynb)). Three new arms,
# each at the same 300 updates on the same file and the same anchor, three seeds each:
# the margin loss **unstaged** (against section 2's staged runs), and the REINFORCE loss **with** and
# **without** the learnable baseline. These are the runs `grpo-kit train-offline --config
# configs/offline.yaml` makes, with `stage1_steps`, `loss` and `baseline_lr` changed.

# %%
def offline_arm(seed, **changes):
    """One run of `grpo-kit train-offline` in this process: OfflineConfig's defaults, this notebook's sizes."""
    arm_cfg = OfflineConfig(preferences=str(DATASETS_DIR / "add2_prefs.jsonl"), steps=OFFLINE_STEPS,
                            batch_prompts=BATCH_PROMPTS, nll_coef=NLL_COEF, seed=seed, eval_every=0,
                            eval_size=EVAL_SIZE, checkpoint_every=0, threads=THREADS, **changes)
    run = offline_run.setup_offline(arm_cfg, records, test)
    for _ in offline_run.train_offline_run(run):
        pass
    return run


ARMS = {"margin, unstaged": dict(loss="margin", stage1_steps=0),
        "REINFORCE, learnable baseline": dict(loss="baseline", baseline_lr=0.5),
        "REINFORCE, no baseline": dict(loss="baseline", baseline_lr=0.0)}
claims_runs = {(arm, seed): offline_arm(seed, **changes) for arm, changes in ARMS.items() for seed in SEEDS}
final = {"margin, staged": offline_acc,
         **{arm: [claims_runs[arm, s].evals[-1][1] for s in SEEDS] for arm in ARMS}}
for arm, accs in final.items():
    print(f"{arm:<30} " + " ".join(f"{a:.1%}" for a in accs))

# %% [markdown]
# Does the learnable baseline do what it says? After training, each group's b_p should sit on its
# group's mean reward (a group is drawn about 19 times in 300 steps of 16, and each visit halves
# the distance).

# %%
learned = claims_runs["REINFORCE, learnable baseline", SEEDS[0]]
group_mean = offline_lab.preference_rewards(torch.stack([r["preference_matrix"] for r in records]).float()).mean(-1)  # (N,)
baseline_error = (learned.baselines - group_mean).abs().mean().item()
print(f"mean |b_p - group mean reward| over {len(records)} groups: {baseline_error:.1e} "
      f"(the group means span {group_mean.min():.2f} to {group_mean.max():.2f})")

claim_readings = {
    "staging (staged against unstaged)": gap_reading(final["margin, unstaged"], final["margin, staged"]),
    "learnable baseline (with against without)": gap_reading(final["REINFORCE, no baseline"],
                                                             final["REINFORCE, learnable baseline"]),
}
for what, g in claim_readings.items():
    print(f"{what:<45} {g.text()}")
record("claims_accuracy", final)
record("claim_readings", {k: g.fields() for k, g in claim_readings.items()})
record("baseline_error", baseline_error)

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.2))
for i, (arm, accs) in enumerate(final.items()):
    ax.scatter(accs, [i] * len(accs), color=f"C{i}", zorder=3)
    ax.plot([sum(accs) / len(accs)] * 2, [i - 0.25, i + 0.25], color=f"C{i}")
ax.axvline(base_acc, color="0.5", lw=0.8, ls="--")
ax.text(base_acc, -0.45, " base", color="0.4")
ax.set(yticks=range(len(final)), yticklabels=list(final), xlabel="held-out greedy accuracy after 300 updates "
       "(dots: seeds, bar: mean)", xlim=(0, 1))
ax.invert_yaxis()
plt.show()

# %% [markdown]
# In our full run (2026-12-07, `pytest -m full`), staging made no clear difference (−0.6 points,
# 2 SE 4.2), and the learnable baseline made the REINFORCE loss *worse*: 65.5% against 74.7% without
# it, a gap of −9.2 points against 2 SE of 6.7. Both claims failed here; your run's lines above are
# the ones to read.
#
# Why would a baseline, which only lowers the variance of an *on-policy* gradient
# ([00b](00b_from_reinforce_to_grpo.ipynb)), hurt? Offline, the answers are fixed. With b at the group
# mean, every answer below it gets a negative weight, and the loss keeps pushing the same recorded
# wrong answers down long after they are unlikely: the probability it frees does not have to go to
# the right answers. Without a baseline every weight is ≥ 0, so every recorded answer is pushed up, the
# better ones more. The cell below measures where the probability went: the mean log-probability of
# the file's right and wrong answers under each trained model.

# %%
scored = records if not SMOKE else records[:32]    # smoke: the first 32 groups only
right = torch.tensor([exact_answer([r["prompt"]] * K, r["responses"], [r["answer"]] * K,
                                   [r.get("reverse_digits", False)] * K) for r in scored]) > 0  # (N, K)


def recorded_logp(policy, tokenizer):
    """Mean log π of the file's right answers and of its wrong ones."""
    policy.eval()
    with torch.no_grad():
        lp = offline_lab.group_logprobs(policy, tokenizer, [r["prompt"] for r in scored],
                                        [list(r["responses"]) for r in scored])  # (N, K)
    return lp[right].mean().item(), lp[~right].mean().item()


base_policy, base_tok = load_model("tiny")
base_right, base_wrong = recorded_logp(base_policy, base_tok)
print(f"{'base':<30} log π(right) {base_right:6.2f}   log π(wrong) {base_wrong:6.2f}")
where = {}
for arm in ("REINFORCE, learnable baseline", "REINFORCE, no baseline"):
    where[arm] = [recorded_logp(claims_runs[arm, s].policy, claims_runs[arm, s].tokenizer) for s in SEEDS]
    print(f"{arm:<30} log π(right) " + " ".join(f"{r:6.2f}" for r, _ in where[arm])
          + "   log π(wrong) " + " ".join(f"{w:6.2f}" for _, w in where[arm]))
readings_logp = {which: gap_reading([x[i] for x in where["REINFORCE, no baseline"]],
                                    [x[i] for x in where["REINFORCE, learnable baseline"]])
                 for i, which in enumerate(("right", "wrong"))}
for which, g in readings_logp.items():
    print(f"log π({which}), with the baseline against without: {g.text(unit=1, suffix=' nats', digits=2)}")
record("recorded_logp", {"base": [base_right, base_wrong], **where})
record("logp_readings", {k: g.fields() for k, g in readings_logp.items()})

# %% [markdown]
# In our run (2026-12-07) the base model gave the file's right answers a mean log-probability of
# −1.89 and its wrong ones −3.34. Without a baseline, the right answers rose to about −0.8 on every
# seed and the wrong ones fell to about −4.2. With the learnable baseline the wrong answers fell
# much further, to between −8.3 and −9.9 (a gap far above 2 SE), and the right answers ended less
# likely than without it on every seed (−0.97 to −2.25), a gap of −0.66 nats that stays inside
# 2 SE (0.80) because one seed fell much further than the others. What the baseline added was a
# push down on wrong answers that were already unlikely; it did not make the right answers more
# likely. A baseline lowers the variance of an on-policy gradient, but in a fixed file it also makes
# the below-mean half of the answers targets to push away from at every visit.
#
# The assertions below check, in the full run only, two mechanisms: the learned baselines reached
# their groups' mean rewards, and with them the file's wrong answers ended less likely than without
# them (a gap above 2 SE over three seeds). The verdicts on the two claims are reported, not asserted.

# %%
assert all(len(v) == len(SEEDS) for v in final.values())
if SMOKE:
    print("every claim arm ran on every seed; the baselines and the verdicts need the full run.")
else:
    assert baseline_error < 0.01, f"the learnable baselines did not reach their groups' mean rewards: {baseline_error}"
    wrong = readings_logp["wrong"]
    assert wrong.verdict == "lower", f"log π(wrong), with against without the baseline: {wrong}"
    print(f"the learned baselines sit on the group means (mean error {baseline_error:.1e}); with them the wrong "
          f"answers ended less likely ({wrong.text(unit=1, suffix=' nats', digits=2)}); staging: "
          f"{claim_readings['staging (staged against unstaged)'].verdict}; learnable baseline: "
          f"{claim_readings['learnable baseline (with against without)'].verdict}")

# %% [markdown]
# ## Summary
# - Ranked groups recorded once from the base model can train it: a pairwise loss on whole-answer
#   log-probabilities, with a likelihood anchor on the clear winners so that both sides of a pair
#   are not pushed down together.
# - At the same number of judged answers (the cost of sampling and judging), offline training on
#   the file beats 16 steps of online GRPO.
# - At the same number of updates (online GRPO then generates about 19 times more answers), the advice that
#   online wins did not clear the noise on three seeds in our run; one seed alone said it did.
# - Two claims you will meet, tested at equal updates over three seeds: staging made no clear
#   difference, and a learnable per-group baseline made a REINFORCE loss on the file worse. The
#   baselines did reach their groups' means; what they changed was where the probability went: the
#   file's wrong answers were pushed far down, and the right answers gained no more than without them.
#
# ## Questions
# 1. Offline against online was compared twice: at the same number of judged answers and at the same
#    number of updates. What does each comparison hold fixed, and which one is fair to online GRPO?
# 2. The margin hinge of a pair is zero. What does that say about the two answers' log-probabilities?
# 3. Why can a pure preference loss (no anchor) lower the probability of the *better* answer?
# 4. The seed changes the batch order offline and the sampled answers online. Why is that still a
#    fair way to read the gap over seeds?
# 5. Online, a baseline lowers the variance of the gradient and leaves its mean alone. Why does that
#    argument not protect the REINFORCE loss on a file recorded once from the base model?
#
# <details><summary>Answers</summary>
#
# 1. Equal judged answers holds fixed what generating and judging cost; equal updates holds fixed the
#    optimizer steps. At equal answers online GRPO has had only 16 updates; at equal updates it has
#    generated and judged about 19 times more answers. Each is fair to a different budget: say which one
#    you are spending.
# 2. The better answer is already more likely than the worse by at least the margin (1 nat): the pair
#    gives no gradient.
# 3. The loss depends only on log π(b) − log π(w): lowering both, the worse one more, lowers the loss
#    too, and the freed probability goes to answers nobody sampled.
# 4. In each arm the seed is the run's own source of chance; the spread over seeds is how much that
#    arm's result moves when only chance changes, which is what the standard error measures.
# 5. The argument holds for answers sampled from the current policy: the baseline term's expected
#    gradient is then zero. The file's answers were sampled from the base model, once; as training
#    goes on they stop being the policy's samples, the baseline's term no longer averages away, and
#    the same wrong answers are pushed down at every visit.
# </details>
#
# ## Exercises
# 1. Online GRPO's three seeds at the same updates ended 18 points apart. Why is a run of online RL
#    more variable than offline training on a fixed file?
# 2. Set `NLL_COEF = 0` and `SEEDS = [0]` and re-run section 2. What happens to held-out accuracy, and why?
# 3. **Code.** Compute the margin hinge relu(log π(w) − log π(b) + 1) by hand for a pair whose answers
#    have per-token log-probabilities [−0.1, −0.2] (better) and [−0.5, −0.4, −0.3] (worse), and check
#    it with `torch`.
#
# <details><summary>Solutions to 1 and 2</summary>
#
# 1. Online, the seed picks the sampled answers, and each update changes what is sampled next: a
#    different early update leads to a different run. Offline, the answers are fixed and the seed
#    only picks the order of the groups.
# 2. When we tried it at lr 3e-4 (2026-12-03, the training cell with `NLL_COEF = 0`), accuracy fell
#    (41% → about 31%); at this notebook's lr 1e-4 run it and see: a pure preference loss only fixes
#    *differences* of log-probabilities, so both sides of each pair were pushed down and the
#    probability went to answers nobody had sampled.
# </details>
#
# The solution to 3 is in the next cell (click to expand it).

# %% jupyter={"source_hidden": true}
# Solution to exercise 3: log π(b) = -0.3, log π(w) = -1.2; relu(-1.2 - (-0.3) + 1) = relu(0.1) = 0.1.
better = torch.tensor([-0.1, -0.2]).sum()
worse = torch.tensor([-0.5, -0.4, -0.3]).sum()
hinge = torch.relu(worse - better + 1.0)
assert abs(float(hinge) - 0.1) < 1e-6
print(f"log π(better) {float(better):.1f}, log π(worse) {float(worse):.1f}, margin hinge {float(hinge):.2f}")

# %% [markdown]
# **Next:** [04 · Curriculum group sizes](04_curriculum_group_sizes.ipynb): how many answers to
# sample per prompt, and whether to change that number during training, at a fixed budget.
