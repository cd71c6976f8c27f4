# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Capstone: diagnose a broken run and fix it within a budget
#
# **The question.** Can you find out from the instruments why an inherited run fails, fix it, and reach a stated accuracy within a budget of completions?
#
# You inherit a GRPO run that does not work. Find out why from the instruments alone, fix it, and
# reach a stated held-out accuracy without spending more than a stated number of generated
# completions.
#
# The setup you inherit has **two** things wrong: one in the judge (what the reward r pays for) and
# one in the config (how the optimiser moves). You have the instruments of the series:
# - the live `Dashboard` ([00](00_quickstart.ipynb)) and `compare_runs` panels;
# - a **gold judge** logged beside the training reward (`GRPOConfig.gold_reward_funcs`, the
#   `gold_reward` metric, [06](06_failure_reward_spikes_and_hacking.ipynb)): it is scored on the same
#   completions and never used for the advantages A;
# - `grpo_kit.eval.diagnostics.diagnose(history)`, which names failures from the metrics, the likely
#   cause first ([05](05_failure_collapse.ipynb)).
#
# **The exam.** Held-out greedy accuracy of at least `TARGET` on the first 200 problems of the
# held-out split, within `BUDGET` generated completions (`GRPOConfig.completion_budget`, as in
# [04](04_curriculum_group_sizes.ipynb): the run stops once it has generated that many, and the
# cosine learning-rate decay runs by the share of the budget spent). Both numbers are set in the
# cell after the parameters; the base model's accuracy is measured there too.
#
# **Time:** 47 s on 2 quiet CPU cores (full run; the worked solution trains one seed), 17 s with
# `SMOKE=True` (both measured on 2026-12-06 with the notebook's tests in
# `tests/notebooks/test_notebook_capstone.py`).

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few steps per run (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEED = 0
THREADS = 2

# %%
import copy
import inspect
import time

from grpo_kit import GRPOConfig, load_model, setup, train
from grpo_kit.data import get_task, heldout_split
from grpo_kit.eval import diagnose, greedy_accuracy, report
from grpo_kit.lab import failures
from grpo_kit.view import Dashboard, compare_runs, record, smoke_banner

TARGET = 0.70                         # held-out greedy accuracy to reach (fraction of EVAL_SIZE problems)
BUDGET = 3 * 128 if SMOKE else 25_600  # generated completions the fixed run may spend (full: 200 steps of 128)
LOOK_STEPS = 4 if SMOKE else 40       # steps of each diagnostic run (sections 1-3)
EVAL_SIZE = 30 if SMOKE else 200
THREADS = 1 if SMOKE else THREADS     # smoke runs share the cores with other tests
smoke_banner(SMOKE)

base_policy, tok = load_model("tiny")  # loaded once; each run trains its own copy
train_items = get_task("add2").splits()["train"]
eval_items = heldout_split("add2")[:EVAL_SIZE]
base_acc = greedy_accuracy(base_policy, tok, eval_items)
record("base_accuracy", base_acc)
record("target", TARGET)
record("budget", BUDGET)
print(f"base model: held-out greedy accuracy {base_acc:.1%} on {len(eval_items)} problems")
print(f"the exam: at least {TARGET:.0%} within {BUDGET} generated completions")


def fresh_run(cfg):
    """A Run on a fresh copy of the base model, evaluated on the same held-out problems."""
    return setup(cfg, policy=copy.deepcopy(base_policy), tokenizer=tok, train_items=train_items,
                 eval_items=eval_items)


def train_with(changes, steps, dash=None, variant="run", seed=SEED):
    """Train the default config with ``changes`` for ``steps`` steps; returns the Run."""
    cfg = GRPOConfig(**{"eval_every": 0, "eval_size": EVAL_SIZE, "threads": THREADS, "checkpoint_every": 0,
                        "steps": steps, **changes, "seed": seed})
    run = fresh_run(cfg)
    for m in train(cfg, run, should_stop=dash.should_stop if dash else None):
        if dash is not None:
            dash.update(m, variant=variant, run=run)
    return run


# %% [markdown]
# ## 1. The run you inherit
#
# Here is the config you were handed (only the fields it changes from the defaults). The judge is
# `exact_answer` (1 for the right sum, else 0) plus an "effort" bonus, `length_judge`, weighted 3.
# `exact_answer` is also logged as the gold judge. Read the bonus's source, then run the config for a
# few dozen steps and watch the dashboard: the **reward** panel (the judge the run trains on), the
# **gold reward**, the completion **length** and the **KL** to the reference.

# %%
INHERITED = dict(
    reward_funcs=["exact_answer", "grpo_kit.lab.failures:length_judge"],
    reward_weights=[1.0, 3.0],
    gold_reward_funcs=["exact_answer"],
    learning_rate=1e-3,
    lr_schedule="constant",
)
print(inspect.getsource(failures.length_judge))
dash = Dashboard(total_steps=LOOK_STEPS, title="the inherited run, then one change")
t0 = time.time()
inherited = train_with(INHERITED, LOOK_STEPS, dash, "inherited")
print(f"{LOOK_STEPS} steps in {time.time() - t0:.0f} s")

# %% [markdown]
# ## 2. Read the instruments
#
# `diagnose` reads only the metric rows. The likely cause comes first; a finding that probably
# follows from it is marked "likely a consequence of".

# %%
inherited_findings = diagnose(inherited.history, inherited.cfg)
print(report(inherited_findings))
last = inherited.history[-1]
print("\nlatest group:", last["samples"]["prompt"], last["samples"]["completions"], last["samples"]["rewards"])
print(f"held-out accuracy {inherited.evals[0][1]:.1%} -> {inherited.evals[-1][1]:.1%}")

# %%
fig = compare_runs({"inherited": inherited}, keys=("reward", "gold_reward", "completions/mean_length", "kl"),
                   styles=dash.styles)

# %% [markdown]
# **Your reading first.** Before you open the note below, write down in one sentence each: what is
# the run being paid for, what happens to the gold reward, and which of `INHERITED`'s fields you would
# change first. Then check.
#
# <details><summary>What the panels say (open after you have written yours)</summary>
#
# The training reward climbs towards 3 while the gold reward falls towards
# 0, and the completions grow to `max_completion_length` (8 tokens): a completion of 8 wrong
# characters earns 3 × 8/8 = 3, a short right answer such as `64` earns 1 + 3 × 2/8 = 1.75, so the
# judge pays more for writing long than for being right. That is reward hacking, and `diagnose`
# names it first. The KL is high too, and `diagnose` files it as *likely a consequence* of the
# hacking: a policy that writes 8 characters where the reference wrote 2 or 3 is far from it.
#
# "Likely a consequence" is a guess from the order of events, not a proof. A second problem can
# hide behind the first. The way to know is the one the series used throughout: change **one**
# thing and look again.
# </details>

# %% [markdown]
# ## 3. Change one thing: the judge
#
# Same config, same seed, but the run trains on the gold judge alone. If the KL was only a
# consequence of the hacking, it should now stay low.

# %%
judge_fixed = train_with({**INHERITED, "reward_funcs": ["exact_answer"], "reward_weights": None},
                         LOOK_STEPS, dash, "judge fixed")
dash.close()
judge_fixed_findings = diagnose(judge_fixed.history, judge_fixed.cfg)
print(report(judge_fixed_findings) or "no findings")
print(f"held-out accuracy {judge_fixed.evals[0][1]:.1%} -> {judge_fixed.evals[-1][1]:.1%}")

# %%
look = {"inherited": inherited, "judge fixed": judge_fixed}
fig = compare_runs(look, keys=("reward", "gold_reward", "kl", "learning_rate"), styles=dash.styles)

# %% [markdown]
# Read the KL and learning-rate panels of the second run yourself before you go on: what does the
# policy do when the reward can no longer be gamed, and which field of `INHERITED` sets the size of
# each step? Questions 2 and 3 at the end ask it; the answers are there.

# %% [markdown]
# ## 4. Your turn
#
# Write your config below: a dict of `GRPOConfig` fields that replaces fields of `INHERITED`
# (`GRPOConfig?` lists every field with its meaning). `exam_run` trains it with
# `completion_budget=BUDGET` and the same held-out problems, whatever you set, and `grade` checks
# the two rules of the exam. A run of the full budget took 20 to 50 s on 2 cores when we measured. Try
# a few seeds before you trust a config: on this model, one seed's final accuracy can differ from
# another's by 20 points.

# %%
def exam_run(changes, seed=SEED, dash=None, variant="exam"):
    """Train INHERITED updated with ``changes`` under the exam's rules: the budget and the held-out set are fixed."""
    rules = dict(completion_budget=BUDGET, steps=100_000, eval_every=0, eval_size=EVAL_SIZE)
    cfg = GRPOConfig(**{"threads": THREADS, "checkpoint_every": 0, **INHERITED, **changes, **rules, "seed": seed})
    run = fresh_run(cfg)
    for m in train(cfg, run, should_stop=dash.should_stop if dash else None):
        if dash is not None:
            dash.update(m, variant=variant, run=run)
    return run


def grade(run):
    """(passed, accuracy, completions spent) under the exam's rules; prints the verdict."""
    acc, spent = run.evals[-1][1], int(run.history[-1]["completions_total"])
    passed = acc >= TARGET and spent <= BUDGET
    print(f"held-out accuracy {acc:.1%} (target {TARGET:.0%}), {spent} completions spent (budget {BUDGET}): "
          f"{'PASS' if passed else 'not yet'}")
    return passed, acc, spent


# %%
# ---------------------------------------------------------------- YOUR CONFIG
MY_CHANGES = {
    # "reward_funcs": [...],
    # ...
}
TRY_IT = False  # set True and run this cell to train your config
if TRY_IT:
    mine = exam_run(MY_CHANGES)
    grade(mine)
    print(report(diagnose(mine.history, mine.cfg)) or "diagnose: no findings")

# %% [markdown]
# ## Summary
# - The inherited judge pays 3 × min(len, 8)/8 for length and only 1 for a right answer, so the
#   training reward climbs while the gold reward (`exact_answer`, logged beside it) falls, and
#   `diagnose` names `reward_hacking` first (asserted in the full run, below).
# - Fixing the judge alone, on the same seed, is the experiment that tells a consequence from a
#   second cause: `diagnose` then names `kl_blowup` for the constant learning rate of 1e-3
#   (asserted in the full run, below).
# - The worked solution trains on the gold judge with the default learning rate and its cosine
#   decay, a sampling temperature of 0.7, group z-scored rewards and a short warm-up; it spends no
#   more than the budget (asserted in every mode) and clears the target (asserted in the full run).
# - `completion_budget` makes the exam fair: a run stops once it has generated `BUDGET` completions,
#   whatever its group size or number of steps.
#
# ## Questions
# 1. A group of G = 8 has one right answer `64` (2 characters) and seven wrong completions of 8
#    characters under the inherited judge. Which completion gets the largest advantage A?
# 2. After the judge is fixed, the KL still climbs and the held-out accuracy falls. Which field of
#    `INHERITED` do you suspect, and what does the learning-rate panel show about it?
# 3. `diagnose` listed the KL as "likely a consequence" of the hacking in the inherited run. Why
#    could it not tell from that run alone that the config was wrong too?
# 4. Your config passes on seed 0. Why is that not enough to say it meets the target?
# 5. Under a completion budget, what does a larger `num_iterations` cost, and what does it not cost?
#
# <details><summary>Answers</summary>
#
# 1. The wrong ones: each earns 3 × 8/8 = 3, the right answer 1 + 3 × 2/8 = 1.75. The right answer
#    sits below the group mean, so its A is negative: the update makes it less likely.
# 2. `learning_rate=1e-3` with `lr_schedule="constant"`: the panel stays flat at 1e-3, more than
#    three times the default 3e-4, and never decays, so every update moves the policy as far as the
#    first one ([05](05_failure_collapse.ipynb), the KL blow-up).
# 3. Both failures raise the KL: the hacking moves the policy to long completions, the large step
#    moves it anywhere. With both present the metrics cannot separate them; a run with one of them
#    removed can.
# 4. One seed is one draw: on this model final accuracies of the same config differ by many points
#    from seed to seed. The target should be cleared by every seed you try, with room to spare.
# 5. More optimiser updates (wall time), not more completions: the budget counts generated
#    completions, so extra updates per batch are free under it, and risk an entropy collapse
#    ([05](05_failure_collapse.ipynb)).
# </details>
#
# ## Exercises
# 1. **The exam.** Reach the target within the budget (section 4). Check your config on three seeds.
# 2. Which of the solution's changes matter? Remove one at a time (keep the fixed judge) and grade
#    each on the same seed.
# 3. Halve the budget: what is the highest target your config still clears on three seeds?
#
# The worked solution to 1 is in the next cell (click to expand it). Measured on 2026-12-06 on three
# seeds, with the solution's config trained by `setup` and `train` as `exam_run(SOLUTION, seed=s)`
# does (budget 25,600, the same 200 held-out problems, one thread per run on a shared 2-core
# machine): held-out accuracy 86.0%, 86.5% and 84.5% for seeds 0, 1 and 2 (base 44.5%), in 42, 49
# and 21 s. The same budget with the default config and the fixed judge gave 78.5%, 53.5% and 70.0%:
# the judge fix alone does not pass on every seed. The notebook trains seed 0 only.
#
# Three of the solution's changes come from no instrument of this exam; they are choices the
# series' measurements suggest, tried together and not one at a time (exercise 2 asks which
# matters): `scale_rewards="group"` ended ahead of the default at 150 steps in 00's Try-this table
# (78.0% against 72.5%, one seed); `warmup_steps=10` softens Adam's first steps, which 00 showed
# move every weight by about `lr`; `temperature=0.7` samples closer to the policy's most likely
# answers (05 shows what a temperature too low does when combined with many updates a batch).

# %% jupyter={"source_hidden": true}
# Worked solution to exercise 1.
SOLUTION = dict(
    reward_funcs=["exact_answer"], reward_weights=None,  # the judge: pay for the right answer only
    learning_rate=3e-4, lr_schedule="cosine",            # the config: the default step size, decayed
    temperature=0.7, scale_rewards="group", warmup_steps=10,
)
sol_dash = Dashboard(total_steps=BUDGET // 128, title="the worked solution")
t0 = time.time()
solution = exam_run(SOLUTION, dash=sol_dash, variant="solution")
sol_dash.close()
passed, sol_acc, spent = grade(solution)
print(f"trained in {time.time() - t0:.0f} s")
record("solution_accuracy", sol_acc)
record("solution_completions", spent)
record("inherited_findings", [f.kind for f in inherited_findings])
record("judge_fixed_findings", [f.kind for f in judge_fixed_findings])

# what holds at any size: the budget is respected, both judges were logged at every step, findings carry evidence
assert spent <= BUDGET and solution.history[-1]["completions_total"] == sum(
    m["completions_generated"] for m in solution.history)
assert all("reward" in m and "gold_reward" in m for m in inherited.history + judge_fixed.history)
for f in inherited_findings + judge_fixed_findings:
    assert f.evidence and f.cause and f.fix
if not SMOKE:
    assert inherited_findings and inherited_findings[0].kind == "reward_hacking", report(inherited_findings)
    assert "kl_blowup" in [f.kind for f in judge_fixed_findings], report(judge_fixed_findings)
    assert sol_acc >= TARGET, (sol_acc, TARGET)

# %% [markdown]
# **Next:** [back to the index](README.md): the notebooks, what each asserts, and two workshop plans.
