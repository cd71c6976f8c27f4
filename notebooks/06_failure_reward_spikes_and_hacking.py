# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Failure lab II: reward spikes and reward hacking
#
# **The question.** Which advantage normalisation amplifies a spiky or noisy judge, and what shows that a judge is being gamed?
#
# **What you will learn.** Two failures that start in the *judge*, not in the optimiser:
# 1. **reward spikes**: a judge that now and then pays a huge reward (a bonus that almost never
#    fires, a scorer bug) or that is noisy. Which advantage normalisation *amplifies* the damage and
#    which *damps* it, worked out on one group and then measured on training runs;
# 2. **reward hacking**: a proxy judge with a loophole (it pays for length, "effort", instead of
#    correctness). The training reward climbs; only a second opinion, a *gold* judge scored on the
#    same completions and never trained on (`GRPOConfig.gold_reward_funcs`), shows that the model
#    is getting worse.
#
# Each is broken on purpose, watched on the dashboard, named by `diagnose`, fixed and compared.
#
# **Time:** 26 s on 2 quiet CPU cores (full run); `SMOKE=True` runs every cell in 10 s.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few steps per run (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEED = 0
THREADS = 2

# %%
import inspect

import torch
from grpo_kit.core import compute_advantages
from grpo_kit.eval import report
from grpo_kit.lab import FAILURES, compare_table, dashboard_hook, failures, finding_marks, run_failure
from grpo_kit.view import Dashboard, compare_runs, record, smoke_banner

SHORT = 6 if SMOKE else None
EVAL_SIZE = 30 if SMOKE else 200
THREADS = 1 if SMOKE else THREADS  # smoke runs share the cores with other tests
smoke_banner(SMOKE)

# %% [markdown]
# ## 1. One group, three normalisations
#
# Take two groups of G = 4 completions. In the first, one *wrong* completion hit a **jackpot**: the
# jackpot judge (printed below) pays exact_answer plus 40, so it scores 0 + 40; of the other three,
# one is right (r = 1) and two are wrong (r = 0). In the second, all four are wrong, but the judge is **noisy**:
# it adds a little Gaussian noise (std 0.05) to every score. The advantages under
# `scale_rewards='none'` (Dr. GRPO: r - mean), `'group'` (DeepSeekMath: z-score within the group)
# and `'batch'` (divide by the std of the whole batch):

# %%
g = torch.Generator().manual_seed(SEED)
jackpot = torch.tensor([[0.0, 1.0, 0.0, 40.0]])                               # (1, G)
noisy = torch.zeros(1, 4) + 0.05 * torch.randn(1, 4, generator=g)            # (1, G) all wrong + noise
batch = torch.cat([jackpot, noisy])                                           # (P=2, G=4)
adv = {s: compute_advantages(batch, s) for s in ("none", "group", "batch")}
print(f"{'':<8}{'jackpot group':>34}{'noisy all-wrong group':>36}")
for s, a in adv.items():
    print(f"{s:<8}{[round(x, 2) for x in a[0].tolist()]!s:>34}{[round(x, 2) for x in a[1].tolist()]!s:>36}")
print(inspect.getsource(failures.jackpot_judge))
RIGHT = 1  # the jackpot group's one right answer (r = 1)
for s, a in adv.items():  # the jackpot lifts the group mean to 10.25: the right answer sits below it
    assert a[0, RIGHT] < 0, (s, a[0, RIGHT])
    assert a[0, RIGHT] > a[0, 0], (s, a[0])  # still above the wrong answers: the order survives, the sign does not

# %% [markdown]
# **The right answer is pushed down.** Look at the second number of the jackpot group: under
# `'none'` the one right answer gets A = −9.25. The jackpot lifts the group's mean reward to
# (0 + 1 + 0 + 40) / 4 = 10.25, and a reward of 1 is far below that mean, so the update makes the
# right answer *less* likely. `'group'` and `'batch'` do not rescue it: they divide r − mean by a
# positive std, which shrinks A (−0.47 and −0.66 in the table) but cannot change its sign. The cell
# asserts that the right answer's A is negative under all three. The baseline is what the jackpot
# broke, and no rescaling repairs a baseline: the exercise at the end clips the judge instead.
#
# Read the two columns:
# - **the jackpot** goes straight into the update under `'none'`: its advantage is about 30, where a
#   right answer in a group without a jackpot gets at most 1. `'group'` bounds every group's advantages
#   by (G − 1)/√G (1.5 at G = 4; [01](01_group_normalization.ipynb) derives it), whatever
#   the reward scale: it **damps** a spike. (`'batch'` damps it too, and shrinks every other group's
#   advantages along with it.)
# - **the noisy group** has no real signal, yet `'group'` divides noise by noise and hands it
#   advantages as large as a real right-vs-wrong difference: it **amplifies** judge noise. `'none'`
#   keeps it at the noise's own size (about 0.05).
#
# So neither normalisation is safe against both: clip or fix the judge.

# %%
max_abs = {s: (a[0].abs().max().item(), a[1].abs().max().item()) for s, a in adv.items()}
record("spike_max_abs_adv", {s: v[0] for s, v in max_abs.items()})
record("noise_max_abs_adv", {s: v[1] for s, v in max_abs.items()})
assert max_abs["none"][0] > 10 * max_abs["group"][0]          # none passes the jackpot through, group damps it
assert max_abs["group"][1] > 10 * max_abs["none"][1]          # group amplifies noise, none keeps it small
assert max_abs["group"][0] <= (4 - 1) / 4 ** 0.5 + 1e-4        # the bound (G - 1)/sqrt(G) (sample std, as in 01)

# %% [markdown]
# ## 2. Break it: a jackpot judge with small groups and no scaling
#
# `FAILURES["reward_spike"]`: the jackpot judge (one sample in 200 gets +40), groups of 4,
# `scale_rewards='none'`. The gold judge (`exact_answer`) is logged beside it. Watch the reward band
# and the grad-norm panel.

# %%
dash = Dashboard(total_steps=SHORT or FAILURES["reward_spike"].steps, title="reward spikes: none vs group")
spike = run_failure("reward_spike", seed=SEED, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE,
                    on_step=dashboard_hook(dash, "none"), should_stop=dash.should_stop)
spike_fixed = run_failure("reward_spike", seed=SEED, fixed=True, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE,
                          on_step=dashboard_hook(dash, "group"), should_stop=dash.should_stop)
dash.close()
print(report(spike.findings))
print()
print(compare_table([spike, spike_fixed], keys=("reward", "gold_reward", "advantages/max_abs", "grad_norm")))

# %%
spikes = {"none": spike, "group": spike_fixed}
fig = compare_runs(spikes, keys=("reward", "gold_reward", "advantages/max_abs", "grad_norm"), styles=dash.styles,
                   marks=finding_marks(spikes, "reward_spike"))

# %% [markdown]
# The judge still pays the jackpot under `'group'`: the *reward* curve spikes the same. What changes
# is what the update does with it: the largest advantage and the gradient norm (the table above shows
# what each run did to the gold reward). `diagnose` reports a `reward_spike` only when the step's
# largest |A| is also above what group z-scores can give one sample, (G − 1)/√G = 1.5 for G = 4: a
# spike the normalisation bounds no longer dominates the update, so the `'group'` run reports nothing
# (the full run asserts it below). The judge is still broken, though: the real fix is in the judge
# (clip it, or remove the bonus).

# %% [markdown]
# ## 3. Reward hacking: a judge that pays for length
#
# `FAILURES["reward_hacking"]` trains on `length_judge` (min(len, 8) / 8, whatever the answer) and
# logs `exact_answer` as the gold reward:

# %%
print(inspect.getsource(failures.length_judge))
dash = Dashboard(total_steps=SHORT or FAILURES["reward_hacking"].steps, title="reward hacking: proxy vs gold")
hack = run_failure("reward_hacking", seed=SEED, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE,
                   on_step=dashboard_hook(dash, "proxy judge"), should_stop=dash.should_stop)
dash.close()
print(report(hack.findings))
last = hack.history[-1]
print("\nlatest group:", last["samples"]["prompt"], last["samples"]["completions"], last["samples"]["rewards"])

# %% [markdown]
# The fix the finding proposes: train on the judge without the loophole (here: the gold judge itself).

# %%
hack_fixed = run_failure("reward_hacking", seed=SEED, fixed=True, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE)
print(compare_table([hack, hack_fixed], keys=("reward", "gold_reward", "completions/mean_length",
                                              "completions/clipped_ratio")))
hacks = {"proxy judge": hack, "gold judge (fix)": hack_fixed}
fig = compare_runs(hacks, keys=("reward", "gold_reward", "completions/mean_length"), styles=dash.styles,
                   marks=finding_marks(hacks, "reward_hacking"))

# %% [markdown]
# ## What the runs showed
#
# In smoke mode the runs are too short for the failures to develop: only the single-group
# arithmetic of section 1 and the pipeline are asserted; the full run asserts that each failure is
# the first finding of its run, that its fixed run reports nothing (a jackpot that group z-scores
# bound no longer dominates the advantages, so it is not reported), and what its fix does, as measured.

# %%
def summary(r, kind):
    f = r.first(kind)
    tail = r.history[-20:]
    mean = lambda k: sum(m[k] for m in tail if k in m) / max(sum(1 for m in tail if k in m), 1)
    return {"detected_at": f.step if f else None, "evidence": sorted(f.evidence) if f else [],
            "first_finding": r.findings[0].kind if r.findings else None, "findings": r.kinds(),
            "final_accuracy": r.run.evals[-1][1], "max_abs_adv": max(m["advantages/max_abs"] for m in r.history),
            "gold_reward_tail": mean("gold_reward"), "reward_tail": mean("reward"),
            "reward_head": sum(m["reward"] for m in r.history[:10]) / len(r.history[:10])}

lab = {"reward_spike": summary(spike, "reward_spike"), "reward_spike + fix": summary(spike_fixed, "reward_spike"),
       "reward_hacking": summary(hack, "reward_hacking"), "reward_hacking + fix": summary(hack_fixed, "reward_hacking")}
record("spikes_and_hacking_lab", lab)
for k, v in lab.items():
    print(f"{k:<22} detected at {v['detected_at']}  final accuracy {v['final_accuracy']:.1%}  "
          f"max |A| {v['max_abs_adv']:.2f}  gold (last 20) {v['gold_reward_tail']:.3f}")
if not SMOKE:
    assert lab["reward_spike"]["detected_at"] is not None
    for name in ("reward_spike", "reward_hacking"):  # the cause comes first; the fix leaves nothing to report
        assert lab[name]["first_finding"] == name, lab[name]["findings"]
        assert lab[name + " + fix"]["findings"] == [], lab[name + " + fix"]["findings"]
    assert lab["reward_spike"]["max_abs_adv"] > 10 * lab["reward_spike + fix"]["max_abs_adv"]
    assert lab["reward_hacking"]["detected_at"] is not None and lab["reward_hacking + fix"]["detected_at"] is None
    assert lab["reward_hacking"]["reward_tail"] > lab["reward_hacking"]["reward_head"]  # the proxy reward climbs
    assert lab["reward_hacking + fix"]["gold_reward_tail"] > lab["reward_hacking"]["gold_reward_tail"]

# %% [markdown]
# ## Try this
# - `run_failure("reward_spike", num_generations=16)`: do larger groups dilute the jackpot under `'none'`?
# - Swap the jackpot for `failures.noisy_judge(seed, sigma=0.2)` with `scale_rewards='group'`, G = 2:
#   does the noise alone stall learning?
# - Give the length judge a KL anchor (`beta=0.1`): does it slow the hack, or only delay it?

# %% [markdown]
# ## Summary
# - On one group with a jackpot of 40, `'none'` passes the spike straight into the advantages
#   (|A| about 30) while `'group'` bounds every advantage by (G − 1)/√G; on an all-wrong group with
#   judge noise of std 0.05, `'group'` blows the noise up more than tenfold and `'none'` does not.
# - The jackpot also moves the baseline: the one right answer's advantage is negative under all
#   three normalisations (−9.25 under `'none'`), and clipping the judge to [0, 1] makes it positive again.
# - On the `reward_spike` runs, the full run asserts that `diagnose` names the spike first, that
#   `'group'` cuts the largest |A| more than tenfold, and that the fixed run reports nothing.
# - On the `reward_hacking` runs, the full run asserts that the proxy reward climbs, that `diagnose`
#   names `reward_hacking` first, and that training on the gold judge ends with a higher gold reward.
#
# ## Questions
# 1. A group's rewards are [0, 1, 0, 40]. Predict the right answer's advantage under `'none'`. Is it
#    positive under `'group'`?
# 2. Four wrong completions get 0 plus judge noise of std 0.05. Predict the size of the largest |A|
#    under `'none'` and under `'group'`.
# 3. The `'group'` run's *reward* still spikes when the jackpot fires. Why does `diagnose` report
#    nothing on it?
# 4. The proxy reward climbs in the reward-hacking run. Which logged number shows the model is not
#    getting better, and why is it never used for training?
# 5. Clipping the jackpot group to [0, 1] gives the wrong jackpot completion r = 1. What advantage
#    does it get under `'none'`, and what fix would not pay it?
#
# <details><summary>Answers</summary>
#
# 1. A = 1 − 10.25 = −9.25. No: `'group'` divides by the group's std (a positive number), so it stays
#    negative (−0.47). Normalisation rescales r − mean; it cannot move the mean.
# 2. Under `'none'`, the size of the noise itself (about 0.1 in the table); under `'group'`, about 1
#    (1.32 in the table): dividing noise by its own std makes it unit-size, like a real right-vs-wrong gap.
# 3. Its `reward_spike` check also asks for the step's largest |A| above (G − 1)/√G, the most group
#    z-scores give one sample. Under `'group'` the spike cannot exceed it, so it does not dominate the
#    update, and nothing is reported. The judge is still broken.
# 4. `gold_reward`, the exact-answer judge scored on the same completions. If it were trained on, it
#    would be one more target the policy can find loopholes in, and it would no longer be an
#    independent check.
# 5. The same +0.5 as the right answer: clipping bounds the damage but still credits a wrong answer.
#    Removing the bonus from the judge (exact_answer alone) gives it r = 0 and A = −0.25.
# </details>
#
# ## Exercises
# 1. **Code.** Write a judge `clipped(judge, hi=1.0)` that wraps any reward function and clips its
#    scores to [0, hi]. Call it on a judge that reproduces section 1's jackpot group, recompute the
#    advantages under `'none'`, and check that the right answer's advantage turns positive.
# 2. Pass `clipped` around `failures.jackpot_judge(SEED)` as the reward function of
#    `run_failure("reward_spike", reward_funcs=[...])`: does `diagnose` still find a spike?

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 1** (the next cell): one group, no training.

# %% jupyter={"source_hidden": true}
from grpo_kit.rewards import exact_answer


def clipped(judge, hi=1.0):
    """``judge`` with every score clipped to [0, hi]."""
    def f(prompts, completions, **columns):
        return [min(max(r, 0.0), hi) for r in judge(prompts, completions, **columns)]
    f.__name__ = f"clipped_{getattr(judge, '__name__', 'judge')}"
    return f


def section1_judge(prompts, completions, answer, **columns):
    """exact_answer, plus a jackpot of 40 on the fourth completion: section 1's jackpot group."""
    right = exact_answer(prompts, completions, answer=answer, **columns)
    return [r + (40.0 if i == 3 else 0.0) for i, r in enumerate(right)]


prompts1, completions1, answers1 = ["12+13="] * 4, ["24", "25", "26", "27"], ["25"] * 4  # one right: the second
raw1 = torch.tensor([section1_judge(prompts1, completions1, answer=answers1)])                # (1, G)
clip1 = torch.tensor([clipped(section1_judge)(prompts1, completions1, answer=answers1)])      # (1, G)
assert torch.equal(raw1, jackpot)                                                             # section 1's group
adv_raw1, adv_clip1 = compute_advantages(raw1, "none"), compute_advantages(clip1, "none")     # (1, G) each
print("rewards", raw1.tolist(), "-> A", adv_raw1.tolist())
print("clipped", clip1.tolist(), "-> A", adv_clip1.tolist())
assert adv_raw1[0, RIGHT] < 0 < adv_clip1[0, RIGHT]        # clipping the jackpot restores the right answer's sign
assert adv_clip1.abs().max() <= 1.0                         # and no advantage is larger than the clipped range
assert adv_clip1[0, 3] == adv_clip1[0, RIGHT]               # but the wrong jackpot completion is paid like a right one

# %% [markdown]
# **Next:** [07 · The troubleshooting clinic](07_troubleshooting_clinic.ipynb): the usual GRPO
# troubleshooting advice, tried on the tiny model, with each claim set against what one seed can show.
