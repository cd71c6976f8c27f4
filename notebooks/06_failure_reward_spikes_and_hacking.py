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
# **The question.** What does a spiky, noisy or gameable judge do to GRPO's advantages and to the run, as its instruments show it?
#
# **What you will learn.** Two failures that start in the *judge*, not in the optimiser:
# 1. **reward spikes**: a judge that now and then pays a huge reward (a bonus that almost never
#    fires, a scorer bug) or that is noisy. Which advantage normalisation *amplifies* the damage and
#    which *damps* it, worked out on one group and then measured on training runs, beside the fix
#    in the judge itself (a clipped reward);
# 2. **reward hacking**: a proxy judge with a loophole (it pays for length, "effort", instead of
#    correctness). The training reward climbs; only a second opinion, a *gold* judge scored on the
#    same completions and never trained on (`GRPOConfig.gold_reward_funcs`), shows that the model
#    is getting worse. Then three mitigations you can apply without a better judge (a KL anchor, a
#    length cap, a format gate), each on 3 seeds: which one helps, and how far.
#
# Each is broken on purpose, watched on the dashboard, named by `diagnose`, fixed and compared.
#
# **Time:** 2.3 minutes on 2 CPU cores (full run, measured by `make test-full` on 2026-12-06; 3 min 54 s
# the same day with `THREADS=1` while other jobs shared the cores); `SMOKE=True` runs every cell in
# about 25 s.

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
from grpo_kit.eval import gap_reading, report
from grpo_kit.lab import FAILURES, compare_table, dashboard_hook, failures, finding_marks, run_failure
from grpo_kit.view import Dashboard, compare_runs, record, smoke_banner

SHORT = 3 if SMOKE else None
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
# broke, and no rescaling repairs a baseline: section 2's third run clips the judge instead (and the
# first exercise builds the clip by hand).
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
# `scale_rewards='none'`. The gold judge (`exact_answer`) is logged beside it. Three runs on the
# same seed, so the jackpots fire on the same draws:
# - **none**: the failure as it is;
# - **group**: the fix in the *normalisation*, `scale_rewards='group'`;
# - **clipped judge**: the fix in the *judge*, `clipped_jackpot_judge` (printed below: the same
#   jackpot judge, every score clipped to [0, 1]), still with `scale_rewards='none'`.
#
# `log_completions=True` hands every completion of every step, with its advantage, to `on_step`;
# the cell keeps them, so that we can read what each run did to the *right* answers. Watch the
# reward band and the grad-norm panel.

# %%
print(inspect.getsource(failures.clipped_jackpot_judge))


def keep_groups(hook, rows):
    """``on_step`` that feeds the dashboard and keeps every logged completion (one dict each) in ``rows``."""
    def on_step(m):
        hook(m)
        rows.extend(m.get("groups", []))
    return on_step


SPIKE_ARMS = {"none": {}, "group": {"fixed": True}, "clipped judge": {"reward_funcs": ["clipped_jackpot_judge"]}}
groups = {name: [] for name in SPIKE_ARMS}
dash = Dashboard(total_steps=SHORT or FAILURES["reward_spike"].steps, title="reward spikes: none, group, clipped judge")
spikes = {name: run_failure("reward_spike", seed=SEED, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE,
                            log_completions=True, on_step=keep_groups(dashboard_hook(dash, name), groups[name]),
                            should_stop=dash.should_stop, **kw)
          for name, kw in SPIKE_ARMS.items()}
dash.close()
spike, spike_fixed, spike_clipped = spikes.values()
spike_clipped.name = "reward_spike, clipped judge"  # its label in the tables
print(report(spike.findings))
print()
print(compare_table(list(spikes.values()), keys=("reward", "gold_reward", "advantages/max_abs", "grad_norm")))

# %%
fig = compare_runs(spikes, keys=("reward", "gold_reward", "advantages/max_abs", "grad_norm"), styles=dash.styles,
                   marks=finding_marks(spikes, "reward_spike"))

# %% [markdown]
# The judge still pays the jackpot under `'group'`: the *reward* curve spikes the same. What changes
# is what the update does with it: the largest advantage and the gradient norm (the table above shows
# what each run did to the gold reward; one seed each, so read it as what happened, not as a ranking).
# `diagnose` reports a `reward_spike` only when the step's largest |A| is also above both
# `diagnose.spike_adv_min` = 2.0 and what group z-scores can give one sample, (G − 1)/√G = 1.5 for
# G = 4 (so above 2.0 here): a spike the normalisation bounds no longer
# dominates the update, so the `'group'` run reports nothing (the full run asserts it below).
#
# Section 1 showed on one group that `'group'` leaves the jackpot's second harm in place: the right
# answer beside a jackpot gets a *negative* advantage. Now over whole runs: every right answer
# (`exact_answer` = 1) each run trained on, and the advantage it got.

# %%
G = FAILURES["reward_spike"].changes["num_generations"]
right_adv = {name: [row["advantage"] for row in rows if row["gold_rewards/exact_answer"] == 1.0]
             for name, rows in groups.items()}
spike_runs = {}
for name, r in spikes.items():
    a = right_adv[name]
    spike_runs[name] = {"max_abs_adv": max(m["advantages/max_abs"] for m in r.history),
                        "max_grad_norm": max(m["grad_norm"] for m in r.history), "right_answers": len(a),
                        "right_pushed_down": sum(x < 0 for x in a), "min_right_adv": min(a, default=float("nan")),
                        "findings": r.kinds()}
    v = spike_runs[name]
    print(f"{name:<14} max |A| {v['max_abs_adv']:6.2f}   max grad norm {v['max_grad_norm']:6.2f}   "
          f"right answers {v['right_answers']:4d}, pushed down (A < 0) {v['right_pushed_down']:2d}, "
          f"smallest A of a right answer {v['min_right_adv']:+.2f}")
record("spike_runs", spike_runs)
clip = spike_runs["clipped judge"]
# at any length: rewards in [0, 1] under 'none' give |A| = |r - mean| <= (G - 1)/G, and a right answer
# (r = 1, the top of the range) never sits below its group's mean
assert clip["max_abs_adv"] <= (G - 1) / G + 1e-6, clip
assert clip["right_pushed_down"] == 0, clip
if not SMOKE:  # measured on this seed's 40 steps
    assert clip["min_right_adv"] > 0 and clip["findings"] == [], clip
    for name in ("none", "group"):  # a jackpot beside a right answer pushed it down under both normalisations
        assert spike_runs[name]["right_pushed_down"] >= 1, (name, spike_runs[name])
    assert spike_runs["none"]["max_abs_adv"] > 10 * clip["max_abs_adv"]
    assert clip["max_grad_norm"] < spike_runs["none"]["max_grad_norm"]

# %% [markdown]
# Read the three rows:
# - **none** passes the jackpot into the update (its largest |A|, printed above, is a jackpot's);
# - **group** bounds every |A| by 1.5, yet a right answer that shared its group with a jackpot was
#   still pushed down (the full run asserts at least one such answer in each of the two runs): the
#   normalisation damps the spike, it does not repair the baseline;
# - **clipped judge** keeps `'none'` and fixes the judge: no reward leaves [0, 1], so no |A| exceeds
#   (G − 1)/G = 0.75, the most a right/wrong judge can give in a group of 4, and every right answer
#   got a positive advantage (asserted at any length: a reward of 1 is the top of the range, so it
#   never sits below its group's mean). `diagnose` reports nothing on it, and its largest gradient
#   norm is below the unclipped run's (asserted in the full run).
#
# The clip does not make the judge right: a wrong completion that hits the jackpot is now paid 1,
# like a right one (the second exercise finds them). Removing the bonus does that; the clip only
# bounds what the bug can do to the update.

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
# The finding proposes to fix the loophole or to train on the gold judge. Here we can: the gold judge
# is `exact_answer`. A user whose judge has a loophole usually cannot: if they had a judge without
# the loophole, they would already be training on it. So the run that trains on the gold judge is
# **the ideal you do not have**: it stays below as the upper reference, and the gold judge stays what
# it is for, a measurement.

# %%
hack_fixed = run_failure("reward_hacking", seed=SEED, fixed=True, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE)
print(compare_table([hack, hack_fixed], keys=("reward", "gold_reward", "completions/mean_length",
                                              "completions/clipped_ratio", "kl")))
hacks = {"proxy judge": hack, "gold judge (ideal)": hack_fixed}
fig = compare_runs(hacks, keys=("reward", "gold_reward", "completions/mean_length"), styles=dash.styles,
                   marks=finding_marks(hacks, "reward_hacking"))

# %% [markdown]
# ## 4. Mitigations that do not need the gold judge
#
# Three things a practitioner can do with the flawed judge still in the reward, each trained on
# `length_judge` like the hacked run, with `exact_answer` logged as the gold reward and never trained on:
# - **a KL anchor** (`beta=0.1`): a penalty on the policy's distance from the reference (the model
#   before training). The hack needs the policy to move far (the hacked run's KL in the table above
#   ends above 1 nat per token), so the anchor makes every step of it cost;
# - **a length cap** (`max_completion_length=3`): the longest right answer has 3 digits
#   (99 + 99 = 198), so the cap cuts no digit of a right answer, and the proxy can pay at most 3/8;
# - **a format gate** (`format_gated_length_judge`, printed below): the proxy pays only when the
#   completion is one well-formed integer. It checks the form, never the answer, so it is not the
#   gold judge.
#
# Each arm runs on 3 seeds, beside the unmitigated proxy and the ideal, with the same steps, prompts
# and group size, so every arm generates the same number of completions. The readings compare each
# arm with the proxy run: a gap counts only when it is larger than twice its standard error over seeds.

# %%
print(inspect.getsource(failures.format_gated_length_judge))
MITIGATIONS = {"KL anchor (beta=0.1)": {"beta": 0.1}, "length cap (3 tokens)": {"max_completion_length": 3},
               "format gate": {"reward_funcs": ["format_gated_length_judge"]}}
ARMS = {"proxy judge": {}, **MITIGATIONS, "gold judge (ideal)": {"fixed": True}}
SEEDS = [SEED] if SMOKE else [SEED, SEED + 1, SEED + 2]
done = {("proxy judge", SEED): hack, ("gold judge (ideal)", SEED): hack_fixed}  # section 3's runs, reused
arms = {arm: [done[arm, s] if (arm, s) in done else
              run_failure("reward_hacking", seed=s, steps=SHORT, threads=THREADS, eval_size=EVAL_SIZE, **kw)
              for s in SEEDS]
        for arm, kw in ARMS.items()}


acc = {arm: [r.run.evals[-1][1] for r in rs] for arm, rs in arms.items()}           # held-out accuracy at the end
gold = {arm: [r.tail_mean("gold_reward") for r in rs] for arm, rs in arms.items()}  # last 20 steps
print(f"held-out accuracy at the start: {hack.run.evals[0][1]:.1%} (the same model for every arm)\n")
print(f"{'arm':<24}{'held-out accuracy':>24}{'gold reward':>22}{'reward':>8}{'length':>8}  findings (seed {SEED})")
for arm, rs in arms.items():
    print(f"{arm:<24}{' '.join(f'{a:6.1%}' for a in acc[arm]):>24}{' '.join(f'{g:6.3f}' for g in gold[arm]):>22}"
          f"{sum(r.tail_mean('reward') for r in rs) / len(rs):8.3f}"
          f"{sum(r.tail_mean('completions/mean_length') for r in rs) / len(rs):8.2f}  "
          + (", ".join(f"{f.kind}@{f.step}" for f in rs[0].findings) or "-"))
readings = {arm: {"accuracy": gap_reading(acc["proxy judge"], acc[arm]),
                  "gold_reward": gap_reading(gold["proxy judge"], gold[arm])} for arm in ARMS if arm != "proxy judge"}
print("\nagainst the proxy judge (proxy -> arm):")
for arm, g in readings.items():
    print(f"  {arm:<24} held-out accuracy {g['accuracy'].text()}")
    print(f"  {'':<24} gold reward       {g['gold_reward'].text()}")
kl_vs_ideal = gap_reading(acc["KL anchor (beta=0.1)"], acc["gold judge (ideal)"])
print(f"\nKL anchor -> ideal, held-out accuracy: {kl_vs_ideal.text()}")
record("hacking_mitigations", {arm: {"accuracy": acc[arm], "gold_reward_tail": gold[arm],
                                     "findings": [r.kinds() for r in rs],
                                     **({f"{k}_verdict": g.verdict for k, g in readings[arm].items()}
                                        if arm in readings else {})}
                               for arm, rs in arms.items()})
gated = arms["format gate"][0].history[-1]["samples"]
print(f"\nthe format gate's latest group (seed {SEED}):", gated["prompt"], gated["completions"], gated["rewards"])
fig = compare_runs({arm: rs[0] for arm, rs in arms.items()}, keys=("reward", "gold_reward", "completions/mean_length", "kl"),
                   title=f"seed {SEED}")

# %% [markdown]
# What each did, over 40 steps (the full run asserts each reading below):
# - **the KL anchor** holds: no finding on any seed, and both the held-out accuracy and the gold
#   reward read *higher* than the proxy's. But it holds the model near where it was; it teaches
#   nothing (the proxy has nothing to teach), so its held-out accuracy is not above its start on any seed.
# - **the length cap** does nothing useful: over nine in ten completions run into the cap (the proxy
#   still pays 3 characters more than 2), and the held-out accuracy falls to near zero like the
#   proxy's (no clear difference). Its gold reward stays under one point on every seed: the 2-SE rule
#   may read that as *higher* than the proxy's zero, but the gap is a fraction of a point. The cap
#   bounds *how long* the hack gets, not whether it happens.
# - **the format gate** does nothing: the hacked completions are strings of digits (its latest group
#   is printed above), which is a well-formed integer, so the gate pays them in full; `diagnose` still
#   names `reward_hacking` on every seed, and neither reading differs from the proxy's.
# - **the ideal** (training on the gold judge) reads higher than the proxy, but over 40 steps its
#   held-out accuracy is not clearly above the KL anchor's: neither has moved far from the start.
#
# Does the anchor stop the hack, or only slow it? One longer run of each (120 steps, seed `SEED`; one
# seed each, so what each run did, not a ranking):

# %%
LONG = SHORT or 120
long_runs = {"KL anchor (beta=0.1)": run_failure("reward_hacking", seed=SEED, steps=LONG, threads=THREADS,
                                                 eval_size=EVAL_SIZE, beta=0.1),
             "gold judge (ideal)": run_failure("reward_hacking", seed=SEED, fixed=True, steps=LONG, threads=THREADS,
                                               eval_size=EVAL_SIZE)}
long_runs["KL anchor (beta=0.1)"].name = "reward_hacking, KL anchor"  # its label in the table
print(compare_table(list(long_runs.values()), keys=("reward", "gold_reward", "completions/mean_length", "kl")))


def head_mean(r, key, first=20):
    xs = [m[key] for m in r.history[:first] if key in m]
    return sum(xs) / len(xs)


longer = {name: {"accuracy": r.run.evals, "findings": r.kinds(),
                 **{f"{k}_{w}": f(r, k) for k in ("reward", "gold_reward", "completions/mean_length")
                    for w, f in (("first20", head_mean), ("last20", lambda r, k: r.tail_mean(k)))}}
          for name, r in long_runs.items()}
for name, v in longer.items():
    print(f"{name:<22} proxy/training reward {v['reward_first20']:.3f} -> {v['reward_last20']:.3f}   "
          f"length {v['completions/mean_length_first20']:.2f} -> {v['completions/mean_length_last20']:.2f}   "
          f"gold reward {v['gold_reward_first20']:.3f} -> {v['gold_reward_last20']:.3f}   held-out accuracy "
          + " -> ".join(f"{a:.1%}" for _, a in v["accuracy"]))
record("hacking_longer", longer)
fig = compare_runs(long_runs, keys=("reward", "gold_reward", "completions/mean_length", "kl"))

# %% [markdown]
# It only slows it. Over 120 steps the anchored run's proxy reward climbs and its completions grow
# longer, while its gold reward drifts *down*: the hack has started, in small steps the KL penalty
# lets through (`diagnose` does not name it yet). The run on the gold judge, over the same 120 steps,
# lifts held-out accuracy well above its start. So without the gold judge, the anchor buys time and
# keeps what the model had; only a judge that checks the answer makes it better. Keep logging the
# gold judge you have (even on a sample of the completions) to know when the time runs out.

# %% [markdown]
# ## What the runs showed
#
# In smoke mode the runs are too short for the failures to develop: only what holds at any length is
# asserted (section 1's arithmetic, the clipped judge's bound on |A| and the sign of its right answers'
# advantages) and the pipeline runs. The full run asserts that each failure is the first finding of
# its run, that its fixed run reports nothing (a jackpot that group z-scores bound no longer dominates
# the advantages, so it is not reported), and what each fix and each mitigation did, as measured.

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
    assert hack.tail_mean("kl") > 1.0                                               # far from the reference
    assert lab["reward_hacking + fix"]["gold_reward_tail"] > lab["reward_hacking"]["gold_reward_tail"]
    # section 4, 3 seeds per arm: every proxy run is named reward_hacking; what each mitigation did
    assert all("reward_hacking" in r.kinds() for r in arms["proxy judge"]), acc
    assert max(acc["proxy judge"]) < 0.05 and max(gold["proxy judge"]) < 0.01, (acc, gold)
    kl, cap, gate = (readings[a] for a in MITIGATIONS)
    assert kl["accuracy"].verdict == "higher" and kl["gold_reward"].verdict == "higher", (kl, acc, gold)
    assert all(r.findings == [] for r in arms["KL anchor (beta=0.1)"])              # holds for 40 steps
    assert max(acc["KL anchor (beta=0.1)"]) <= hack.run.evals[0][1]                  # and teaches nothing
    assert cap["accuracy"].verdict == "no clear difference", cap                     # the cap does not help
    assert max(acc["length cap (3 tokens)"]) < 0.05 and max(gold["length cap (3 tokens)"]) < 0.01, (acc, gold)
    assert cap["gold_reward"].gap < 0.01, cap                                         # whatever its verdict reads
    assert all(r.tail_mean("completions/clipped_ratio") > 0.9 for r in arms["length cap (3 tokens)"])
    assert gate["accuracy"].verdict == gate["gold_reward"].verdict == "no clear difference", gate  # nor the gate
    assert all("reward_hacking" in r.kinds() for r in arms["format gate"])
    assert readings["gold judge (ideal)"]["accuracy"].verdict == "higher"
    assert kl_vs_ideal.verdict == "no clear difference", kl_vs_ideal                 # 40 steps: neither moved far
    # the longer pair (one seed each): the anchor only slows the hack; the gold judge teaches
    v = longer["KL anchor (beta=0.1)"]
    assert v["reward_last20"] > v["reward_first20"] + 0.05, v
    assert v["completions/mean_length_last20"] > v["completions/mean_length_first20"], v
    assert v["gold_reward_last20"] < v["gold_reward_first20"] and v["findings"] == [], v
    w = longer["gold judge (ideal)"]
    assert w["accuracy"][-1][1] > w["accuracy"][0][1] + 0.15, w

# %% [markdown]
# ## Try this
# - `run_failure("reward_spike", num_generations=16)`: do larger groups dilute the jackpot under `'none'`?
# - Swap the jackpot for `failures.noisy_judge(seed, sigma=0.2)` with `scale_rewards='group'`, G = 2:
#   does the noise alone stall learning?
# - A stronger anchor, `beta=0.5`, over the 120 steps of section 4: does the proxy reward still climb?
# - Add the format judge to the proxy instead of gating it, `reward_funcs=["length_judge", "format"]`:
#   does a sum of two judges that both ignore the answer do better than the gate?

# %% [markdown]
# ## Summary
# - On one group with a jackpot of 40, `'none'` passes the spike straight into the advantages while
#   `'group'` bounds every advantage by (G − 1)/√G; on an all-wrong group with judge noise of std
#   0.05, `'group'` blows the noise up more than tenfold and `'none'` does not.
# - The jackpot also moves the baseline: a right answer beside it gets a negative advantage under every
#   normalisation, on one group and over whole runs (`'none'` and `'group'`). Clipping the judge to
#   [0, 1] fixes both harms at once: no |A| above (G − 1)/G, every right answer pushed up, nothing
#   for `diagnose` to report; it still pays a wrong jackpot like a right answer.
# - Reward hacking is caught by the gold judge logged beside the proxy: the proxy reward climbs
#   while the gold reward and the held-out accuracy fall to about zero (3 seeds).
# - Without the gold judge to train on (3 seeds per arm): a KL anchor (`beta=0.1`) holds the model
#   near where it was for 40 steps, and only slows the hack (over 120 steps the proxy reward climbs
#   and the gold reward drifts down); a length cap and a format gate leave held-out accuracy near
#   zero, like no mitigation. Over 120 steps (one seed) the run on the gold judge, the ideal you do
#   not have, lifts held-out accuracy well above its start; the anchored run does not.
#
# ## Questions
# 1. A group's rewards are [0, 1, 0, 40]. Predict the right answer's advantage under `'none'`. Is it
#    positive under `'group'`?
# 2. The `'group'` run's *reward* still spikes when the jackpot fires. Why does `diagnose` report
#    nothing on it?
# 3. The proxy reward climbs in the reward-hacking run. Which logged number shows the model is not
#    getting better, and why is it never used for training?
# 4. Clipping the jackpot group to [0, 1] gives the wrong jackpot completion r = 1. What advantage
#    does it get under `'none'`, and what fix would not pay it?
# 5. The format gate did nothing against the length judge, and the KL anchor held for 40 steps. What
#    would a gate have to check to stop this hack, and why is the anchor no licence to train on a
#    flawed judge?
#
# <details><summary>Answers</summary>
#
# 1. A = 1 − 10.25 = −9.25. No: `'group'` divides by the group's std (a positive number), so it stays
#    negative (−0.47). Normalisation rescales r − mean; it cannot move the mean.
# 2. Its `reward_spike` check also asks for the step's largest |A| above both 2.0
#    (`diagnose.spike_adv_min`) and (G − 1)/√G, the most group z-scores give one sample (1.5 at
#    G = 4). Under `'group'` no |A| can exceed 1.5, so the spike does not dominate the
#    update, and nothing is reported. The judge is still broken: a right answer beside a jackpot is
#    still pushed down.
# 3. `gold_reward`, the exact-answer judge scored on the same completions. If it were trained on, it
#    would be one more target the policy can find loopholes in, and it would no longer be an
#    independent check.
# 4. The same +0.5 as the right answer: clipping bounds the damage but still credits a wrong answer.
#    Removing the bonus from the judge (exact_answer alone) gives it r = 0 and A = −0.25.
# 5. The hacked completions are runs of digits, a well-formed integer, so a format gate pays them. To
#    stop the hack a gate would have to tell a right number from a wrong one, and a gate that checks
#    the answer *is* the gold judge, which the setting assumes you do not have. The anchor holds the
#    model near the reference; it cannot add what the judge does not reward. Over 40 steps its held-out
#    accuracy was not above the start, and over 120 steps the proxy reward climbed while the gold
#    reward drifted down: it buys time to fix the judge.
# </details>
#
# ## Exercises
# 1. **Code.** Write a judge `clipped(judge, hi=1.0)` that wraps any reward function and clips its
#    scores to [0, hi]. Call it on a judge that reproduces section 1's jackpot group, recompute the
#    advantages under `'none'`, and check that the right answer's advantage turns positive.
# 2. In section 2's clipped run (`groups["clipped judge"]`: every completion it trained on), find the
#    wrong completions the clipped judge paid 1 (a jackpot on a wrong answer). What advantage did each
#    get, and how does it compare with a right answer's in the same group?

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
# the clip by hand, around the lab's jackpot judge, is section 2's clipped_jackpot_judge (jackpots made frequent here)
prompts8, completions8, answers8 = ["12+13="] * 8, ["25", "24"] * 4, ["25"] * 8
by_hand = clipped(failures.jackpot_judge(SEED, p=0.5))(prompts8, completions8, answer=answers8)
assert by_hand == failures.clipped_jackpot_judge(SEED, p=0.5)(prompts8, completions8, answer=answers8)
assert max(failures.jackpot_judge(SEED, p=0.5)(prompts8, completions8, answer=answers8)) > 1 >= max(by_hand)

# %% [markdown] jupyter={"source_hidden": true}
# **Solution to 2** (the next cell): read the completions section 2 kept; no training.

# %% jupyter={"source_hidden": true}
rows = groups["clipped judge"]
by_group = {}
for row in rows:
    by_group.setdefault((row["step"], row["group"]), []).append(row)
paid_wrong = [row for row in rows if row["reward"] == 1.0 and row["gold_rewards/exact_answer"] == 0.0]
print(f"{len(paid_wrong)} wrong completions paid 1, out of {len(rows)}")
for row in paid_wrong:
    right_beside = [o["advantage"] for o in by_group[row["step"], row["group"]] if o["gold_rewards/exact_answer"] == 1.0]
    print(f"step {row['step']:3d}  {row['prompt']}{row['completion']:<8} A = {row['advantage']:+.2f}   "
          f"right answers in its group: {right_beside or '-'}")
    assert row["advantage"] >= 0                                # r = 1 is the top of [0, 1]: never below the mean
    assert all(a == row["advantage"] for a in right_beside)     # the same reward, the same advantage as a right one
if not SMOKE:
    assert paid_wrong  # over 40 steps the jackpot fired on wrong answers

# %% [markdown]
# **Next:** [07 · The troubleshooting clinic](07_troubleshooting_clinic.ipynb): the usual GRPO
# troubleshooting advice, tried on the tiny model, with each claim set against what one seed can show.
