# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · The troubleshooting clinic: does the usual GRPO advice hold?
#
# **The question.** Does the advice that circulates for GRPO's symptoms hold when you test it, and what can one seed show?
#
# A troubleshooting table circulates with GRPO advice. It reads like this:
#
# | symptom | advised fix |
# |---|---|
# | unstable reward | larger or fixed groups |
# | outputs too conservative | fewer groups or an entropy bonus |
# | late-training decline | a replay buffer |
# | GPU out of memory | smaller batch or gradient accumulation |
#
# **What you will learn.** For each row we reproduce the symptom on the tiny model, let
# `diagnose` look at it, apply the advised fix *and* an alternative, and print what the runs show,
# with the numbers. Each training run uses **one seed**: a gap between two runs can be seed luck,
# so the clinic prints every held-out accuracy gap next to twice its standard error and calls none
# of the training rows a verdict. It also sets each fix beside the cause the advice assumes, and
# says whether the notebook tests that cause.
#
# **Time:** 3 minutes on 2 quiet CPU cores (full run); `SMOKE=True` runs every cell in 29 s.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few steps per run (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEED = 0
THREADS = 2

# %%
import torch
from grpo_kit.eval import report
from grpo_kit.lab import compare_table, measure_step_memory, run_failure
from grpo_kit.view import compare_runs, record, smoke_banner

SHORT = 6 if SMOKE else None
EVAL_SIZE = 30 if SMOKE else 200
THREADS = 1 if SMOKE else THREADS  # smoke runs share the cores with other tests
smoke_banner(SMOKE)
verdicts = {}  # what each row shows (the "verdict" field says whether it is one)


def tail(r, key, n=20):
    xs = [m[key] for m in r.history[-n:] if isinstance(m.get(key), (int, float))]
    return sum(xs) / len(xs) if xs else float("nan")


def swing(r, key="gold_reward"):
    """Mean |change| of ``key`` from one step to the next: how much the curve jumps around."""
    xs = [m[key] for m in r.history if isinstance(m.get(key), (int, float))]
    return sum(abs(a - b) for a, b in zip(xs[1:], xs)) / max(len(xs) - 1, 1)


def two_se(a, b, n=EVAL_SIZE):
    """Twice the standard error of the gap b - a between two held-out accuracies on n problems each
    (binomial, as if independent): the eval set's own noise. One seed adds seed-to-seed noise on top,
    which a single run cannot measure."""
    return 2 * ((a * (1 - a) + b * (1 - b)) / n) ** 0.5


def reading(base, acc):
    """What one seed can say about a held-out accuracy gap acc - base: never a verdict."""
    gap, noise = acc - base, two_se(base, acc)
    size = "below the noise" if abs(gap) < noise else "above the eval set's noise, seed luck unmeasured"
    return (f"{base:.1%} -> {acc:.1%} ({100 * gap:+.1f} points, 2 SE {100 * noise:.1f} points): "
            f"one seed, {size}, not a verdict")


# %% [markdown]
# ## Row 1 · "Unstable reward → larger or fixed groups"
#
# **Symptom.** A judge that is a little noisy (exact answer plus Gaussian noise, std 0.05), groups of
# G = 2, group z-scores. **Advised:** larger groups (G = 8, with 4x fewer prompts, so the same 128
# completions per step). **Alternative:** keep G = 2 and stop dividing by the group's std
# (`scale_rewards='none'`), which section 1 of notebook 06 showed is what turns noise into full-size
# advantages. We measure the gold reward (noise-free exact answer) and its swing.
#
# **The advice's claimed cause:** a group of few samples gives a noisy baseline (its mean and std),
# so the advantages are noisy. **Tested here?** No: the rows compare held-out accuracy and the gold
# reward's swing, not the noise of the advantages. The "fixed groups" half of the advice is not tried.

# %%
noisy = dict(reward_funcs=["noisy_judge"], gold_reward_funcs=["exact_answer"], scale_rewards="group")
row1 = {
    "symptom: G=2, group z-score": run_failure("reward_spike", seed=SEED, steps=SHORT or 80, threads=THREADS,
                                               eval_size=EVAL_SIZE, **noisy, num_generations=2, num_prompts=64),
    "advised: G=8": run_failure("reward_spike", seed=SEED, steps=SHORT or 80, threads=THREADS, eval_size=EVAL_SIZE,
                                **noisy, num_generations=8, num_prompts=16),
    "alternative: G=2, no std scaling": run_failure("reward_spike", seed=SEED, steps=SHORT or 80, threads=THREADS,
                                                    eval_size=EVAL_SIZE, **{**noisy, "scale_rewards": "none"},
                                                    num_generations=2, num_prompts=64),
}
for label, r in row1.items():
    print(f"{label:<36} accuracy {r.run.evals[0][1]:.1%} -> {r.run.evals[-1][1]:.1%}  gold reward (last 20) "
          f"{tail(r, 'gold_reward'):.3f}  swing {swing(r):.3f}  findings {[f.kind for f in r.findings]}")
fig = compare_runs(row1, smooth=5, keys=("reward", "gold_reward", "advantages/max_abs"))

# %%
acc1 = {k: r.run.evals[-1][1] for k, r in row1.items()}
s, adv, alt = acc1.values()
verdicts["unstable reward -> larger or fixed groups"] = {
    "symptom": acc1, "gap": {"advised": adv - s, "alternative": alt - s},
    "two_se": {"advised": two_se(s, adv), "alternative": two_se(s, alt)},
    "verdict": f"held-out accuracy with G=8: {reading(s, adv)}; G=2 without std scaling: {reading(s, alt)}"}
print(verdicts["unstable reward -> larger or fixed groups"]["verdict"])

# %% [markdown]
# ## Row 2 · "Outputs too conservative → fewer groups or an entropy bonus"
#
# **Symptom.** `FAILURES["entropy_collapse"]`: every group's completions become copies of each
# other. **Advised:** an entropy bonus (`entropy_coef=0.01`) and fewer groups per step (8 prompts
# instead of 16). **Alternative:** the fix `diagnose` proposes first (one update per batch instead of
# eight, with the default cosine decay).
#
# **The advice's claimed cause:** the policy's entropy has collapsed, so it stops exploring (the
# entropy bonus pays for entropy); for "fewer groups" the advice names no cause. **Tested here?**
# Partly: the rows measure entropy and distinct completions and whether `diagnose` still reports a
# collapse, but the symptom's own cause is known by construction (eight updates per batch at
# temperature 0.5), and only the alternative removes it.

# %%
row2 = {
    "symptom": run_failure("entropy_collapse", seed=SEED, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE),
    "advised: entropy bonus": run_failure("entropy_collapse", seed=SEED, steps=SHORT, threads=THREADS,
                                          eval_size=EVAL_SIZE, entropy_coef=0.01),
    "advised: fewer groups": run_failure("entropy_collapse", seed=SEED, steps=SHORT, threads=THREADS,
                                         eval_size=EVAL_SIZE, num_prompts=8),
    "alternative: diagnose's fix": run_failure("entropy_collapse", seed=SEED, fixed=True, steps=SHORT,
                                               threads=THREADS, eval_size=EVAL_SIZE),
}
print(report(row2["symptom"].findings), "\n")
print(compare_table(list(row2.values()), keys=("reward", "entropy", "completions/distinct_frac")))
for label, r in row2.items():
    print(f"{label:<30} collapse found: {r.first('entropy_collapse') is not None}")
fig = compare_runs(row2, smooth=5, keys=("reward", "entropy", "completions/distinct_frac"))

# %%
gone = {k: r.first("entropy_collapse") is None for k, r in row2.items()}
acc2 = {k: r.run.evals[-1][1] for k, r in row2.items()}


def collapse_reading(label):
    """Whether the collapse is still reported, what else is, and the accuracy gap to the symptom run:
    a run that fails some other way (the reward broke first, say) has no collapse to report and is
    still broken, so the accuracy is read too."""
    others = sorted({f.kind for f in row2[label].findings} - {"entropy_collapse"})
    return (("no entropy collapse reported" if gone[label] else "the collapse is still reported")
            + (f", still reported: {', '.join(others)}" if others else "")
            + f"; held-out accuracy {reading(acc2['symptom'], acc2[label])}")


verdicts["outputs too conservative -> fewer groups or an entropy bonus"] = {
    "collapse_gone": gone, "accuracy": acc2,
    "gap": {k: acc2[k] - acc2["symptom"] for k in row2 if k != "symptom"},
    "verdict": "; ".join(f"{k.split(': ')[-1]}: {collapse_reading(k)}" for k in row2 if k != "symptom")}
print(verdicts["outputs too conservative -> fewer groups or an entropy bonus"]["verdict"])

# %% [markdown]
# ## Row 3 · "Late-training decline → a replay buffer"
#
# **Symptom.** `FAILURES["late_decline"]`: a constant learning rate of 4e-4 (a third above the default);
# held-out accuracy climbs back to its start, then falls by more than 20 points and keeps swinging.
# (This symptom is fragile on the tiny model: measured on 2026-12-03 with
# `run_failure("late_decline", seed=0, learning_rate=...)`, the default 3e-4 held constant only
# swung, and 6e-4 collapsed from the start.)
# **Advised:** a replay buffer (`replay_fraction=0.25`: a quarter of each batch is past groups with
# a large |advantage|, reweighted by importance ratios; see notebook 04). **Alternative:** decaying
# the learning rate (cosine), the fix this failure ships with (`fixed=True`).
#
# **The advice's claimed cause:** the policy forgets what it learned earlier, and replaying past
# groups keeps them in the batch. **Tested here?** No: nothing here measures forgetting. The
# symptom's cause is a constant learning rate, by construction; the cosine alternative removes that
# cause, on one seed.

# %%
row3 = {"symptom: constant lr": run_failure("late_decline", seed=SEED, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE),
        "advised: replay buffer": run_failure("late_decline", seed=SEED, steps=SHORT, threads=THREADS,
                                              eval_size=EVAL_SIZE, replay_fraction=0.25, replay_max_age=4),
        "alternative: cosine decay": run_failure("late_decline", seed=SEED, fixed=True, steps=SHORT, threads=THREADS,
                                                 eval_size=EVAL_SIZE)}
print(report(row3["symptom: constant lr"].findings), "\n")
print(compare_table(list(row3.values()), keys=("reward", "entropy", "kl")))
fig = compare_runs(row3, smooth=5, keys=("reward", "kl"))

# %%
found3 = {k: r.first("late_decline") is not None for k, r in row3.items()}
acc3 = {k: r.run.evals[-1][1] for k, r in row3.items()}
best3 = {k: max(a for _, a in r.run.evals) for k, r in row3.items()}


def decline_reading(label):
    found = "decline still reported" if found3[label] else "no decline reported"
    if label == "symptom: constant lr":
        return f"{found}, held-out accuracy best {best3[label]:.1%} final {acc3[label]:.1%}"
    return (f"{found}, best {best3[label]:.1%}; final held-out accuracy "
            f"{reading(acc3['symptom: constant lr'], acc3[label])}")


verdicts["late-training decline -> a replay buffer"] = {
    "decline_found": found3, "accuracy": acc3, "best_accuracy": best3,
    "verdict": f"constant lr: {decline_reading('symptom: constant lr')}; replay buffer: "
               f"{decline_reading('advised: replay buffer')}; cosine decay: {decline_reading('alternative: cosine decay')}"}
print(verdicts["late-training decline -> a replay buffer"]["verdict"])

# %% [markdown]
# ## Row 4 · "GPU out of memory → smaller batch or gradient accumulation"
#
# Where does the memory of a GRPO step go? The group statistics (a reward, a mean, a std and an
# advantage per completion: a few floats per row) are tiny; the forward and backward passes keep
# activations for every token of every completion, and the logits are B x T x V floats. We measure
# the peak resident memory one `train_step` adds, in a fresh process each (on the CPU: this notebook
# measures no GPU), for a large batch (64 prompts x 16 completions), for gradient accumulation over
# 8 micro-batches, and for a batch half the size.
#
# **The advice's claimed cause:** a step's memory grows with the rows each forward and backward pass
# holds (their activations and logits). **Tested here?** Yes, on the CPU: the step's peak is
# measured with the full batch, with 8 micro-batches and with half the batch, beside the sizes of
# the logits, the hidden states and the group statistics. Each configuration is measured once, so
# a difference counts only if it is at least 1 MiB and a tenth of the full batch's peak.

# %%
big = dict(num_prompts=8 if SMOKE else 64, num_generations=16, max_completion_length=16)
B = big["num_prompts"] * big["num_generations"]
mem = {"full batch": measure_step_memory(**big),
       "gradient accumulation (B/8 per pass)": measure_step_memory(**big, micro_batch_size=B // 8),
       "half the batch": measure_step_memory(**{**big, "num_prompts": big["num_prompts"] // 2})}
print(f"{'':<38}{'step peak MiB':>14}{'logits MiB':>12}{'hidden MiB':>12}{'group stats MiB':>17}")
for k, v in mem.items():
    print(f"{k:<38}{v['step_peak_mib']:>14.1f}{v['logits_mib']:>12.2f}{v['hidden_states_mib']:>12.2f}"
          f"{v['group_stats_mib']:>17.4f}")
qwen_logits_gib = B * 600 * 151_936 * 2 / 2**30   # Qwen2.5: V = 151,936; 600 tokens; bf16
print(f"\nfor scale: the same batch on Qwen2.5 with 600-token sequences would hold {qwen_logits_gib:.0f} GiB of "
      f"bf16 logits, against {mem['full batch']['group_stats_mib'] * 1024:.0f} KiB of group statistics")

# %%
full, accum, half = (mem[k]["step_peak_mib"] for k in mem)
MIB_MARGIN = max(1.0, 0.1 * full)  # one measurement each: a smaller drop is not read as a difference
clear = full - accum >= MIB_MARGIN and full - half >= MIB_MARGIN
verdicts["GPU out of memory -> smaller batch or gradient accumulation"] = {
    "peak_mib": {k: v["step_peak_mib"] for k, v in mem.items()}, "margin_mib": MIB_MARGIN,
    "group_stats_share": mem["full batch"]["group_stats_mib"] / max(full, 1e-9),
    "verdict": (f"holds on the CPU, one measurement each: the step's peak falls from {full:.1f} MiB (B={B}) to "
                f"{accum:.1f} MiB with 8 micro-batches and {half:.1f} MiB with half the batch (both drops >= "
                f"{MIB_MARGIN:.1f} MiB); the group statistics are {mem['full batch']['group_stats_mib'] * 1024:.1f} KiB")
               if clear else
               f"no verdict: full {full:.1f} MiB, accumulation {accum:.1f} MiB, half batch {half:.1f} MiB: a drop "
               f"under {MIB_MARGIN:.1f} MiB (one measurement each) is within the noise"}
print(verdicts["GPU out of memory -> smaller batch or gradient accumulation"]["verdict"])

# %% [markdown]
# ## What the clinic can say, and what it cannot
#
# | row | advised fix | the advice's claimed cause | does this notebook test that cause? |
# |---|---|---|---|
# | unstable reward | larger or fixed groups | few samples per group give a noisy baseline, so noisy advantages | no: it compares outcomes (accuracy, swing), not the advantages' noise |
# | outputs too conservative | an entropy bonus; fewer groups | entropy collapse: the policy stops exploring (no cause given for fewer groups) | partly: entropy and the collapse finding are measured; the symptom's cause (8 updates per batch) is known by construction |
# | late-training decline | a replay buffer | the policy forgets what it learned earlier | no: forgetting is not measured; the symptom's cause (a constant learning rate) is known by construction |
# | GPU out of memory | smaller batch or gradient accumulation | memory grows with the rows per forward/backward pass | yes, on the CPU: the step's peak is measured for each |
#
# Rows 1 to 3 each train **one seed** per setting. Their lines below give every held-out accuracy
# gap with twice its standard error on the EVAL_SIZE problems (the eval set's noise alone; the
# seed-to-seed noise, which one seed cannot measure, comes on top). A gap below that is below the
# noise; a gap above it is a lead worth rerunning with more seeds. Neither is a verdict. Row 4 is
# read as a verdict only if both drops clear its margin.
#
# Smoke mode checks that every row runs and prints its line (the runs are too short for a symptom
# to develop). The full run asserts what was measured: that the entropy collapse and the late
# decline appear and are detected, that both memory fixes lower the step's peak, and (in both
# modes) that the group statistics are under 1% of a step's memory.

# %%
for k, v in verdicts.items():
    print(f"{k}\n    {v['verdict']}\n")
record("clinic_verdicts", {k: v["verdict"] for k, v in verdicts.items()})
record("clinic", verdicts)
assert verdicts["GPU out of memory -> smaller batch or gradient accumulation"]["group_stats_share"] < 0.01
if not SMOKE:
    assert row2["symptom"].first("entropy_collapse") is not None
    assert row3["symptom: constant lr"].first("late_decline") is not None
    assert accum < full and half < full

# %% [markdown]
# ## Try this
# - Row 1 with `sigma` = 0.2 (`failures.noisy_judge`): at what noise level do larger groups stop helping?
# - Row 2 with `entropy_coef` = 0.001, 0.01, 0.05: is there a value that stops the collapse without
#   hurting accuracy?
# - Row 4 with `gradient_checkpointing=True`: how much of the peak goes?
# - Rows 1 to 3 with `SEED` = 1 and 2: do the gaps keep their sign?

# %% [markdown]
# ## Summary
# - Each row reproduces its symptom on the tiny model and trains the advised fix beside an
#   alternative; the full run asserts that `diagnose` reports the entropy collapse (row 2) and the
#   late decline (row 3) on their symptom runs.
# - Rows 1 to 3 use one seed per setting: the clinic prints every held-out accuracy gap next to
#   twice its standard error and calls none of them a verdict.
# - Of the four claimed causes, only the memory row's is tested here: the full run asserts that a
#   step's peak falls with gradient accumulation and with half the batch.
# - The group statistics (3 floats per row) are under 1% of a step's memory, asserted in both
#   modes; the logits are B × T × V floats, and the exercise checks that arithmetic against the
#   kit's estimate and a real tensor.
#
# ## Questions
# 1. Two runs, one seed each, score 62% and 66% on 200 held-out problems. Is the second setting
#    better? Work out twice the standard error of the gap.
# 2. With gradient accumulation over 8 micro-batches, which memory terms of a step shrink about 8
#    times, and which do not shrink at all?
# 3. Row 1 keeps 128 completions per step. How many prompts per step does G = 8 leave, and what
#    does that trade away?
# 4. The late decline here is produced by a constant learning rate. Which of the two fixes tried
#    removes that cause, and which one treats a different cause?
# 5. For Qwen2.5 (V = 151,936) with 600-token sequences in bf16, roughly how many bytes of logits
#    does one completion hold, against the bytes of its group statistics?
#
# <details><summary>Answers</summary>
#
# 1. Not shown. Each accuracy has a standard error of about √(0.64 · 0.36 / 200) ≈ 3.4 points, so
#    the gap's 2 SE is about 2 · √(2 · 3.4²) ≈ 9.6 points: a 4-point gap is below the noise, and
#    seed-to-seed noise comes on top. Rerun with more seeds.
# 2. The per-pass terms, the activations and the logits (B/8 rows at a time), shrink about 8x.
#    The parameters, their gradients and the optimiser state do not shrink at all.
# 3. 128 / 8 = 16 prompts instead of 64: a better baseline per prompt, but a quarter as many
#    problems seen per step.
# 4. Cosine decay removes it (it lowers the learning rate late in training). The replay buffer
#    treats forgetting, which this reproduction neither causes nor measures.
# 5. 600 · 151,936 · 2 bytes ≈ 174 MiB of logits per completion, against a few floats (a reward,
#    an advantage, a share of the group's mean and std: about 12 bytes).
# </details>
#
# ## Exercises
# 1. **Code.** Check the memory row's arithmetic by hand: from the `B`, `T`, `V` and
#    `micro_batch_size` the kit reports for each measurement, compute the logits' size (4-byte
#    floats) and the group statistics' size (3 floats per row), check them against the kit's
#    estimates and against the bytes of a real tensor of that shape, and check that the
#    accumulation row holds 8 times fewer rows per pass.
# 2. Add a row: "reward climbs but answers get worse → check the judge". Reproduce it with
#    `FAILURES["reward_hacking"]`, and write what `diagnose`'s finding says, and what one seed can
#    and cannot show.

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 1** (the next cell): arithmetic on the measurements above, no training.

# %% jupyter={"source_hidden": true}
for k, v in mem.items():
    rows, T, V = v["micro_batch_size"], v["T"], v["V"]
    logits = torch.empty(rows, T, V)                                   # (rows per pass, T, V) float32
    by_hand = rows * T * V * 4 / 2**20                                 # MiB
    assert abs(by_hand - v["logits_mib"]) < 1e-9, (k, by_hand, v["logits_mib"])
    assert logits.element_size() * logits.nelement() / 2**20 == by_hand
    assert abs(3 * v["B"] * 4 / 2**20 - v["group_stats_mib"]) < 1e-12   # reward, advantage, mean/std: 3 floats a row
    print(f"{k:<38} logits {rows} x {T} x {V} x 4 B = {by_hand:.3f} MiB, group stats {3 * v['B'] * 4} B")
acc_rows = mem["gradient accumulation (B/8 per pass)"]["micro_batch_size"]
assert acc_rows * 8 == mem["full batch"]["micro_batch_size"] == B   # 8 times fewer rows per pass

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 2** (the next cell): a short training run (40 steps in the full run).

# %% jupyter={"source_hidden": true}
hack = run_failure("reward_hacking", seed=SEED, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE)
f = hack.first("reward_hacking")
print("reward hacking:", f.summary() if f else "not detected in this (short) run")
print("held-out accuracy", reading(hack.run.evals[0][1], hack.run.evals[-1][1]))

# %% [markdown]
# **Next:** [08 · Beyond scalar rewards](08_beyond_scalar_rewards.ipynb): advantages made
# from more than one reward per completion: pairwise judges, a score per step, a value head and a
# learned judge.
