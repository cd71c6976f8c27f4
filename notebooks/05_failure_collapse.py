# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Failure lab I: collapse, divergence and a sign error
#
# **What you will learn.** How a GRPO run goes wrong when the policy moves too far or the wrong
# way, how to *see* it on the live dashboard, how `grpo_kit.eval.diagnostics.diagnose` names it from the
# metrics alone (with the evidence, a likely cause and a fix), and whether that fix works, measured
# on the same seed.
#
# Three failures, each a named config in `grpo_kit.lab.failures`:
# 1. **entropy / mode collapse**: eight updates on every batch (`num_iterations=8`) at sampling
#    temperature 0.5. Each batch is fitted hard, the policy sharpens, and the completions in a group
#    become copies of each other: the entropy halves, the groups stop disagreeing, and with nothing to
#    compare the run stops learning. The KL to the reference rises only to about one nat per token,
#    which is where a policy that has settled on one answer sits (minus the log of the probability
#    the reference gave that answer);
# 2. **KL blow-up**: a learning rate three times the default, held constant, throws the policy far
#    from the reference within a few updates;
# 3. **a sign error**: the "top-k minus own reward" advantage as it is sometimes written pushes up the
#    *worst* completion, and the training reward falls.
#
# A failing run trips several detectors at once (a policy pushed the wrong way also drifts from the
# reference), so `diagnose` lists the likely **cause first** and the findings that follow from it
# under it. Each failure here is measured, broken and fixed, on the same seed.
#
# **Time:** about 1.5 minutes on 2 quiet CPU cores (full run); `SMOKE=True` runs every cell in seconds.

# %% tags=["parameters"]
# Parameters (papermill overrides these). SMOKE=True: a few steps per run (pipeline check only).
import os

SMOKE = False
SMOKE = SMOKE or os.environ.get("GRPO_KIT_SMOKE") == "1"  # GRPO_KIT_SMOKE=1 sets it too
SEED = 0
THREADS = 2

# %%
import inspect

from grpo_kit.eval import diagnostics, report
from grpo_kit.lab import FAILURES, compare_table, dashboard_hook, finding_marks, run_failure
from grpo_kit.view import Dashboard, compare_runs, record

STEPS = {name: (6 if SMOKE else None) for name in ("entropy_collapse", "kl_blowup", "sign_error")}
EVAL_SIZE = 30 if SMOKE else 200
THREADS = 1 if SMOKE else THREADS  # smoke runs share the cores with other tests
for name in STEPS:
    f = FAILURES[name]
    print(f"{name:<18} {f.what}\n{'':<18} changes {f.changes}; fix {f.fix}\n")

# %% [markdown]
# ## 1. Break it: eight updates on every batch
#
# Watch the dashboard while it trains (in JupyterLab the panels update live; run headless, the same
# panels are drawn once at the end). Keep an eye on **entropy**, **distinct completions per group**
# and the **KL** panel. The vertical marks are findings of the live check, which runs every
# `diagnose_every` steps inside `train()` and logs a warning once per kind of failure.

# %%
dash = Dashboard(total_steps=STEPS["entropy_collapse"] or FAILURES["entropy_collapse"].steps,
                 title="entropy collapse: broken vs fixed")
broken = run_failure("entropy_collapse", seed=SEED, steps=STEPS["entropy_collapse"], threads=THREADS,
                     eval_size=EVAL_SIZE, on_step=dashboard_hook(dash, "broken"), should_stop=dash.should_stop)

# %% [markdown]
# ## 2. Let the detector explain
#
# `diagnose(history)` reads only the metric dicts. Each finding carries the first step it holds, the
# metric values that show it, a one-sentence cause and a fix; the likely cause comes first, and a
# finding that follows from it is marked "likely a consequence of". Here is the report for the broken
# run and the test the collapse detector applies:

# %%
print(report(broken.findings))
print(inspect.getsource(diagnostics.entropy_collapse).split("return Finding")[0])

# %%
COLLAPSE_KEYS = ("reward", "entropy", "completions/distinct_frac", "kl")
fig = compare_runs({"broken": broken}, keys=COLLAPSE_KEYS, styles=dash.styles, smooth=5,
                   marks=finding_marks({"broken": broken}, "entropy_collapse"))

# %% [markdown]
# ## 3. Apply the fix and compare
#
# The finding's advice starts with fewer updates per batch. The fix in
# `FAILURES["entropy_collapse"].fix` applies it: one update per batch (`num_iterations=1`) with the
# default cosine decay of the learning rate. Same seed, same prompts, same sampling noise:

# %%
fixed = run_failure("entropy_collapse", seed=SEED, fixed=True, steps=STEPS["entropy_collapse"], threads=THREADS,
                    eval_size=EVAL_SIZE, on_step=dashboard_hook(dash, "fixed"), should_stop=dash.should_stop)
dash.close()
print(compare_table([broken, fixed]))

# %%
pair = {"broken": broken, "fixed": fixed}
fig = compare_runs(pair, keys=COLLAPSE_KEYS, styles=dash.styles, smooth=5, marks=finding_marks(pair, "entropy_collapse"))

# %% [markdown]
# ## 4. Two cousins: divergence from the reference, and the sign error
#
# A learning rate three times the default, held constant, throws the policy far from the reference
# model within a few updates (the KL panel) and the reward falls. An advantage with the wrong sign
# trains the model *away* from its best answers: the reward falls first, while the policy is still
# near the reference, and the KL follows. Both runs trip both detectors; `diagnose` tells them apart
# by the KL while the reward fell (`kl_while_reward_fell` in the evidence), and names each one's cause
# first. Each is detected, then fixed:

# %%
others = {}
for name in ("kl_blowup", "sign_error"):
    others[name] = [run_failure(name, seed=SEED, fixed=fix, steps=STEPS[name], threads=THREADS, eval_size=EVAL_SIZE)
                    for fix in (False, True)]
    print(compare_table(others[name], keys=("reward", "kl", "completions/mean_length", "entropy")), "\n")
    print(report(others[name][0].findings), "\n")

# %%
cousins = {f"{r.name}{' + fix' if r.fixed else ''}": r for r in [*others["kl_blowup"], *others["sign_error"]]}
fig = compare_runs(cousins, keys=("reward", "kl", "completions/mean_length"), smooth=5)

# %% [markdown]
# ## What the runs showed
#
# The assertions below are the claims of this notebook. In smoke mode the runs are too short for a
# failure to develop: only the pipeline (every finding names its evidence; the fixed configs train)
# is checked there. The full run checks that each failure's **first** finding is its own kind, that
# its fixed run reports nothing at all, and that the fix ends with a higher held-out accuracy.

# %%
table = {}
for r in [broken, fixed, *others["kl_blowup"], *others["sign_error"]]:
    kind = FAILURES[r.name].kind
    table[f"{r.name}{' + fix' if r.fixed else ''}"] = {
        "kind": kind, "first_finding": f"{r.findings[0].kind}@{r.findings[0].step}" if r.findings else None,
        "findings": [f"{f.kind}@{f.step}" + (f" (after {f.consequence_of})" if f.consequence_of else "")
                     for f in r.findings],
        "final_accuracy": r.run.evals[-1][1]}
    for x in r.findings:
        assert x.evidence and x.cause and x.fix
record("collapse_lab", table)
for k, v in table.items():
    print(f"{k:<24} first finding {v['first_finding'] or '-':<22} final accuracy {v['final_accuracy']:.1%}"
          f"   all: {', '.join(v['findings']) or 'none'}")
if not SMOKE:
    for name in ("entropy_collapse", "kl_blowup", "sign_error"):
        kind = FAILURES[name].kind
        assert (table[name]["first_finding"] or "").startswith(kind + "@"), (name, table[name]["findings"])
        assert table[f"{name} + fix"]["findings"] == [], (name, table[f"{name} + fix"]["findings"])
        assert table[f"{name} + fix"]["final_accuracy"] > table[name]["final_accuracy"], name

# The collapse's KL: its highest window median (the statistic kl_blowup reads) stays near one nat per
# token, below the level at which a KL blow-up is named before a collapse.
W, KL_COLLAPSE = diagnostics.DEFAULTS["window"], diagnostics.DEFAULTS["collapse_kl_max"]
collapse_kl = max((v for _, v in diagnostics.rolling_medians(diagnostics.series(broken.history, "kl"), W)),
                  default=float("nan"))
print(f"entropy_collapse: highest {W}-step median KL {collapse_kl:.2f} nats per token")
record("collapse_kl_max_median", collapse_kl)
if not SMOKE:
    assert 0.5 < collapse_kl < KL_COLLAPSE, collapse_kl

# %% [markdown]
# ## Try this
# - Re-run the broken collapse config with `entropy_coef=0.01` (`run_failure("entropy_collapse",
#   entropy_coef=0.01)`): does an entropy bonus alone prevent it?
# - Lower `collapse_distinct_max` in `diagnose(broken.history, collapse_distinct_max=0.2)`: at what
#   value does the detector stop firing on the broken run?
# - Change `seed`: is the step of detection stable?
#
# ## Exercise
# Write a detector `distinct_floor(history, level)` that returns the first step at which the
# 10-step mean of `completions/distinct_frac` drops below `level` (or None), and run it on both runs.

# %% [markdown] jupyter={"source_hidden": true}
# **Solution** (the next cell).

# %% jupyter={"source_hidden": true}
from grpo_kit.eval import rolling_means, series


def distinct_floor(history, level=0.3):
    for step, v in rolling_means(series(history, "completions/distinct_frac"), 10):
        if v < level:
            return step
    return None

print("broken:", distinct_floor(broken.history), " fixed:", distinct_floor(fixed.history))

# %% [markdown]
# **Next:** [06 · reward spikes and reward hacking](06_failure_reward_spikes_and_hacking.ipynb).
