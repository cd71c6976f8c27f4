"""Name a failing GRPO run from its metrics: ``diagnose(history) -> list[Finding]``.

``history`` is the list of metric dicts ``train()`` yields (or ``history.jsonl`` read back with
:func:`read_history`). Each detector looks for one classic failure and, when it holds, returns a
:class:`Finding`: its ``kind``, the first ``step`` at which it holds, the metric values that show
it (``evidence``), the likely ``cause`` in one sentence and a ``fix`` to try. ``train()`` runs
the detectors every ``cfg.diagnose_every`` steps and logs a warning the first time each kind is
found; the CLI prints them at the end and writes them into ``summary.json``.

Detectors (kind: what it reads), each a small function in ``DETECTORS``:

- ``entropy_collapse``: token ``entropy`` and ``completions/distinct_frac`` (distinct
  completions per group / G) both fall far below their start while the reward is not high:
  the groups are G copies of one (wrong) answer.
- ``reward_hacking``: ``reward`` climbs while ``gold_reward`` (``cfg.gold_reward_funcs``, a
  second judge never trained on) stays flat or falls.
- ``reward_spike``: one step's ``reward`` far outside the recent steps (robust z-score over a
  trailing window, median and MAD).
- ``kl_blowup``: ``kl`` to the reference above an absolute level (nats per token) over a window (its
  median: one step's k3 estimate can read 100 nats while the policy has not moved).
- ``zero_variance_stall``: most groups have all-equal rewards (``frac_reward_zero_std``) for a
  whole window and the reward has not moved since the start: no signal, no gradient.
- ``length_blowup``: ``completions/clipped_ratio`` (truncated: no EOS) high for a window and
  far above its start; length by right/wrong in the evidence.
- ``reward_decline``: the reward falls well below where it started (it never rose first): the
  update pushes the wrong way (a sign error, for example ``topk_minus_own_BROKEN_SIGN``).
- ``late_decline``: the reward (window mean) or the held-out ``accuracy`` (eval steps) rose, then
  fell well below its best.
- ``grad_explosion``: the (pre-clip) ``grad_norm`` many times its trailing median, or
  non-finite, or updates skipped.

A failing run usually trips several detectors (a policy pushed the wrong way also drifts from the
reference and ends with every group wrong), so :func:`order_findings` puts the likely cause first:
by step, the two detectors of consequences (``kl_blowup``, ``reward_decline``) waiting one window
for a detector of a mechanism, a finding before those it can cause (``CONSEQUENCE_OF``), then a
stated ``PRIORITY``; each consequence carries ``consequence_of`` and is listed under its cause.

Thresholds are keyword arguments of :func:`diagnose` (``DEFAULTS`` lists them); the measured values
are in ``DEFAULTS_MEASURED`` below, next to each threshold, so a reader can see the margin on each
side. Which runs set them and which only check them:

- **Set on** (looked at while choosing every threshold and ordering rule): the healthy runs
  (``grpo-kit demo`` seeds 0, 1, 2, 500 steps; the four notebook-02 variants, 200 steps;
  ``tests/data/healthy_*.jsonl``) and the failure-lab runs at seeds 0, 5 and 7, broken and fixed
  (seed 0 saved as ``tests/data/failure_*.jsonl``).
- **Only checked on** (written once every rule above was fixed, never used to change one): the
  held-out set in ``tests/data/heldout/``: the demo at seed 11 (500 steps) and every failure-lab run
  at seed 11, broken and fixed. ``tests/lab/test_failures.py`` asserts on it in the fast suite that each
  failure's first finding is its own kind and that the fixed runs and the healthy run report none.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo_kit.errors import ConfigError

KINDS = ("entropy_collapse", "reward_hacking", "reward_spike", "kl_blowup", "zero_variance_stall",
         "length_blowup", "reward_decline", "late_decline", "grad_explosion")


@dataclass
class Finding:
    kind: str
    step: int          # first step at which the condition holds
    evidence: dict     # metric name -> value(s) that show it
    cause: str         # the likely cause, one sentence
    fix: str           # what to try
    consequence_of: str | None = None  # the kind of the earlier finding this one likely follows from

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        ev = ", ".join(f"{k}={_fmt(v)}" for k, v in self.evidence.items())
        if self.consequence_of:
            return (f"step {self.step}: {self.kind}, likely a consequence of {self.consequence_of}: {ev}. "
                    f"(Fix the {self.consequence_of} first.)")
        return f"step {self.step}: {self.kind}: {ev}. Cause: {self.cause} Try: {self.fix}"



def _now(cfg, field: str) -> str:
    """", now <value>" for a fix's advice when the run's config is known, else nothing (diagnose without cfg)."""
    return f", now {getattr(cfg, field)}" if hasattr(cfg, field) else ""

def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


# Each default and what set it. "healthy" = the largest (or smallest) value seen on the seven healthy
# runs at the point the detector compares; "failing" = the value on the failure run of that kind.
DEFAULTS = {
    "window": 20,
    # steps averaged for every "over a window" condition: 20 steps x 128 completions of 0/1
    # rewards give a window mean with std < 0.01, so window means are not noise.
    "start_window": 3,
    # steps averaged for the level "at the start" that later windows are compared with: short, because
    # a failure can take hold within 20 steps (the sign error drives the reward to 0 in about 10).
    "collapse_entropy_ratio": 0.5,
    # entropy_collapse: window-mean entropy below this fraction of the first window's.
    "collapse_distinct_max": 0.35,
    # ... and window-mean distinct_frac below this (1/G = 0.125 is every group one text).
    "collapse_reward_max": 0.3,
    # ... while the window-mean reward is below this: a healthy run converges too (entropy and
    # distinctness fall as groups agree on the right answer) but with the reward near 1.
    "hacking_reward_gain": 0.15,
    # reward_hacking: reward window mean at least this above its start ...
    "hacking_gold_gain": 0.02,
    # ... while gold_reward's window mean rose by at most this (flat or falling).
    "spike_z": 8.0,
    # reward_spike: robust z-score (x - median) / (1.4826 MAD) of one step's reward against the
    # trailing window.
    "spike_std_ratio": 4.0,
    # ... and the step's reward_std (spread over the batch) at least this many times its trailing
    # median: a spike is a few samples far outside the usual range, not the whole batch doing better
    # (a healthy run's reward can jump by 0.3 in one step while it learns fast; its spread cannot,
    # 0/1 rewards have a std of at most 0.5).
    "spike_adv_min": 2.0,
    # ... and the step's largest |advantage| above this and above (G-1)/sqrt(G), the most that group
    # z-scores give one sample in a group of G (1.5 for G=4, 2.47 for G=8): a spike that the advantage
    # normalisation bounds does not dominate the batch.
    "spike_floor": 0.1,
    # floor under the trailing MAD (x 0.1) and the trailing median reward_std: after a collapse the
    # reward sits at exactly 0 (MAD 0, spread 0) and one right answer in 128 must not count as a spike.
    "kl_max": 1.0,
    # kl_blowup: window-median KL (nats per token) above this. A median, not a mean: the k3 estimate
    # exp(ref - logp) - (ref - logp) - 1 is heavy-tailed (one sampled token that the reference gives
    # e^9 times the policy's probability adds 8000 to the sum), so a single step can read 100+ nats
    # among steps below 1; a policy that has left the reference reads high on most steps of a window.
    "collapse_kl_max": 1.5,
    # a kl_blowup whose window-median KL is below this waits one window for entropy_collapse and is
    # then listed under it: a policy collapsed onto one answer sits -log p_ref(answer) nats per token
    # from the reference (1.1 for an answer the reference gave a third of its probability), so a
    # collapse crosses kl_max by itself; a step too large crosses it by a wider margin.
    "decline_kl_split": 0.75,
    # when kl_blowup and reward_decline both hold: the mean KL over the updates before the reward fell
    # (kl_while_reward_fell) at or above this names the step size (kl_blowup) first, below it the
    # direction of the update (reward_decline).
    "stall_zero_std_min": 0.9,
    # zero_variance_stall: window-mean frac_reward_zero_std at least this ...
    "stall_reward_gain": 0.1,
    # ... and the reward moved less than this since the start (a run that learned and then
    # agrees on right answers has gained far more).
    "length_clipped_min": 0.5,
    # length_blowup: window-mean truncation rate at least this ...
    "length_clipped_rise": 0.3,
    # ... and at least this above its start.
    "decline_frac": 0.4,
    # reward_decline: window-mean reward at most this fraction of its start (the reward of the
    # untrained policy is low, about 0.1 on the demo, so the fall is measured relative to it) ...
    "decline_min_drop": 0.02,
    # ... and at least this far below it in reward units (a start near 0 is noise, not a level).
    "decline_drop": 0.15,
    # late_decline: after rising at least this far above its start, the window-mean reward falls
    # at least this far below its best window mean so far.
    "late_acc_drop": 0.15,
    # late_decline, on held-out accuracy (the eval steps): at least this far below its best eval so far ...
    "late_acc_gain": 0.1,
    # ... after that best eval had risen at least this far above the first eval in the history.
    "grad_ratio": 20.0,
    # grad_explosion: grad_norm this many times the trailing-window median ...
    "grad_min": 10.0,
    # ... and at least this large in absolute terms (pre-clip norm) ...
    "grad_min_spikes": 2,
    # ... on at least this many steps within one window: a single spike, clipped to max_grad_norm, leaves
    # no trace (the notebook-02 Dr. GRPO run had one of 52, 131x its median, at step 92 and trained to 89%).
}

# What each threshold was set against: the extreme value on the healthy runs (tests/data/healthy_*.jsonl:
# demo seeds 0, 1 and 2, 500 steps; notebook-02 GRPO, Dr. GRPO, DAPO and GSPO, 200 steps) and the value on the failure
# run of that kind (tests/data/failure_*.jsonl, seed 0) where it was first detected. Window = 20-step mean.
DEFAULTS_MEASURED = {
    "collapse_*": "healthy: window-mean entropy falls to 0.39-0.60 and distinct_frac to 0.37-0.49 as the runs "
                  "converge, but with the reward at 0.5-0.6 then; entropy_collapse runs (seeds 0, 5, 7): entropy "
                  "0.24-0.26 of 0.49-0.53 (0.46-0.50), distinct_frac 0.29-0.31, reward 0.27-0.30 (steps 64-76; "
                  "the reward bar is the thin margin)",
    "hacking_*": "healthy runs log no gold reward; reward_hacking run: reward 0.29 -> 1.0 while gold 0.06 -> 0.0 "
                 "(step 20)",
    "spike_*": "healthy: robust z of the reward up to 11.1 (fast learning), reward_std ratio at most 1.32, "
               "largest |advantage| 2.47 (group z-scores, G=8) or 0.875 (Dr. GRPO); "
               "reward_spike run: z 14.6, reward_std ratio 24.9, |advantage| 30 (step 25); grad_explosion run: "
               "z 22, ratio 75, |advantage| 150; their fixes (group z-scores, G=4) bound it at 1.5",
    "kl_max": "healthy: window-median KL at most 0.46 (raw single steps up to 3.7, GSPO); at step 20 the "
              "kl_blowup run 1.87, sign_error 2.57, length_blowup 1.89, reward_hacking 1.81 (their highest "
              "3.5, 3.3, 4.1, 4.8); entropy_collapse runs reach 0.84-1.09 (seeds 0, 5, 7; seed 7 crosses 1.0 "
              "at step 85, after collapsing at 62; seed 0 at one thread at step 67, before collapsing at 86), "
              "one with a single step at 122.8 (seed 0, step 31: a window mean of 6.9 named a blowup that was "
              "one heavy-tailed k3 sample)",
    "collapse_kl_max": "window-median KL at the step kl_blowup fires: kl_blowup, length_blowup, reward_hacking and "
                       "sign_error runs 1.81-2.57 (step 20; seed 11: 1.76-3.48); entropy_collapse runs 1.01-1.04 "
                       "(steps 67 and 85)",
    "decline_kl_split": "mean KL over the updates before the reward fell: kl_blowup runs 0.98-1.66 (seeds 0, 5, "
                        "7), sign_error runs 0.35-0.59",
    "stall_*": "healthy: frac_reward_zero_std at most 0.41; stall runs 0.93 (format reward) and 0.997 (add3), "
               "reward within 0.01 of its start (step 20)",
    "length_*": "healthy: window-mean clipped_ratio at most 0.032; length_blowup runs 0.50-0.52 from 0.0 at the "
                "start (steps 23-34; wrong answers 0.86-0.96 truncated, 7.6-7.9 tokens of 8)",
    "decline_*": "healthy: the reward never falls below its start window by more than noise and its late drop from "
                 "the peak is at most 0.04, held-out accuracy falls at most 0.064 below its best eval (seed 0: 57.6% -> "
                 "51.2%); late_decline run (constant lr 4e-4): accuracy 44.5% (step 100) -> 19.0% (step 125); sign_error run: 0.015 against a start of 0.060 (step 20); the "
                 "entropy_collapse and kl_blowup runs fall the same way within 20 steps",
    "grad_*": "healthy: grad_norm at most 4.5x its trailing median (raw max 5.4) on six runs, and one isolated "
              "spike in the notebook-02 Dr. GRPO run (52.2, 131x its median, step 92, re-measured 2026-12-03); "
              "grad_explosion run: 19.2 (38x the median) at step 10 and 49.3 (76x) at step 12, found at step 12",
}


def read_history(path: str | Path) -> list[dict]:
    """A ``history.jsonl`` (one metrics dict per line) back into a list of dicts."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------- helpers over a history

def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def series(history: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) for every step whose metrics carry a finite ``key``."""
    return [(int(m.get("step", i + 1)), float(m[key])) for i, m in enumerate(history) if _finite(m.get(key))]


def rolling_means(pts: list[tuple[int, float]], w: int) -> list[tuple[int, float]]:
    """(step, mean of this value and the w - 1 before it) from the w-th point on."""
    out, acc = [], 0.0
    for i, (s, v) in enumerate(pts):
        acc += v
        if i >= w:
            acc -= pts[i - w][1]
        if i >= w - 1:
            out.append((s, acc / w))
    return out


def rolling_medians(pts: list[tuple[int, float]], w: int) -> list[tuple[int, float]]:
    """(step, median of this value and the w - 1 before it) from the w-th point on."""
    return [(pts[i][0], statistics.median(v for _, v in pts[i - w + 1:i + 1])) for i in range(w - 1, len(pts))]


def start_mean(pts: list[tuple[int, float]], n: int) -> float | None:
    """Mean of the first ``n`` values: the level a run starts from."""
    return _mean(v for _, v in pts[:n]) if pts else None


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _at(history: list[dict], step: int, key: str):
    for m in history:
        if m.get("step") == step and _finite(m.get(key)):
            return float(m[key])
    return None


# ---------------------------------------------------------------- detectors
# each: (history, thresholds, cfg) -> Finding | None

def entropy_collapse(h, t, cfg=None):
    w = t["window"]
    ent, dis, rew = (dict(rolling_means(series(h, k), w)) for k in ("entropy", "completions/distinct_frac", "reward"))
    if not ent or not dis:
        return None
    e0 = start_mean(series(h, "entropy"), t["start_window"])
    for s in sorted(set(ent) & set(dis) & set(rew)):
        if ent[s] < t["collapse_entropy_ratio"] * e0 and dis[s] < t["collapse_distinct_max"] \
                and rew[s] < t["collapse_reward_max"]:
            return Finding("entropy_collapse", s,
                           {"entropy": ent[s], "entropy_at_start": e0, "completions/distinct_frac": dis[s],
                            "reward": rew[s], "window": w},
                           "The policy has become near-deterministic on answers that are not right: each group is "
                           "a few copies of one completion, so there is nothing to compare and no way out.",
                           f"fewer updates per batch (num_iterations{_now(cfg, 'num_iterations')}), a "
                           "higher temperature, an entropy bonus (entropy_coef), a lower learning_rate or a KL "
                           "penalty (beta > 0); resume from a checkpoint before this step")
    return None


def reward_hacking(h, t, cfg=None):
    w = t["window"]
    # the reward's rolling median, not its mean: a rare huge reward (a jackpot) lifts a mean, not a median
    rew, gold = dict(rolling_medians(series(h, "reward"), w)), dict(rolling_means(series(h, "gold_reward"), w))
    if not gold or not rew:
        return None
    steps = sorted(set(rew) & set(gold))
    r0 = statistics.median(v for _, v in series(h, "reward")[:t["start_window"]])
    g0 = start_mean(series(h, "gold_reward"), t["start_window"])
    for s in steps:
        if rew[s] - r0 >= t["hacking_reward_gain"] and gold[s] - g0 <= t["hacking_gold_gain"]:
            return Finding("reward_hacking", s,
                           {"reward": rew[s], "reward_at_start": r0, "gold_reward": gold[s],
                            "gold_reward_at_start": g0, "window": w},
                           "The training reward climbs while the gold judge does not: the policy is exploiting a "
                           "loophole in the reward function (a pattern, a length) rather than solving the task.",
                           "fix the reward function's loophole (check the completions it scores highest), add the "
                           "gold judge to reward_funcs, or add a KL penalty (beta > 0) to slow the drift")
    return None


def reward_spike(h, t, cfg=None):
    w, pts = t["window"], series(h, "reward")
    spread = dict(series(h, "reward_std"))
    for i in range(t["start_window"], len(pts)):  # the trailing window: up to w steps, at least start_window
        prev = [v for _, v in pts[max(i - w, 0):i]]
        med = statistics.median(prev)
        mad = statistics.median(abs(v - med) for v in prev)
        s, v = pts[i]
        z = abs(v - med) / (1.4826 * max(mad, 0.1 * t["spike_floor"]))
        std_before = statistics.median(spread.get(x, 0.0) for x, _ in pts[max(i - w, 0):i])
        ratio = spread.get(s, 0.0) / max(std_before, t["spike_floor"])
        adv, g = _at(h, s, "advantages/max_abs"), _at(h, s, "num_generations") or getattr(cfg, "num_generations", None)
        bound = max(t["spike_adv_min"], (g - 1) / math.sqrt(g) if g and g > 1 else 0.0)
        if z >= t["spike_z"] and ratio >= t["spike_std_ratio"] and (adv is None or adv > bound):
            ev = {"reward": v, "reward_median_before": med, "robust_z": z, "reward_std_ratio": ratio, "window": w}
            for k in ("reward_std", "advantages/max_abs", "grad_norm"):
                x = _at(h, s, k)
                if x is not None:
                    ev[k] = x
            return Finding("reward_spike", s, ev,
                           "A few samples got rewards far outside the usual range (a rare large reward or a noisy "
                           "judge), and with few completions per group they dominate the batch's advantages.",
                           "clip or rescale the reward, use scale_rewards='group' (bounds each group's advantages) "
                           "or larger groups (num_generations); for a noisy judge, average several judgements")
    return None


def kl_blowup(h, t, cfg=None):
    w = t["window"]
    for s, v in rolling_medians(series(h, "kl"), w):
        if v > t["kl_max"]:
            return Finding("kl_blowup", s, {"kl": v, "kl_step": _at(h, s, "kl"), "window": w},
                           "The policy has drifted far from the reference model: updates are too large or nothing "
                           "holds it near the reference.",
                           f"a KL penalty (beta > 0{_now(cfg, 'beta')}), a lower learning_rate, fewer "
                           f"num_iterations per batch, or a tighter clip (epsilon)")
    return None


def zero_variance_stall(h, t, cfg=None):
    w = t["window"]
    zs, rew = dict(rolling_means(series(h, "frac_reward_zero_std"), w)), dict(rolling_means(series(h, "reward"), w))
    if not zs or not rew:
        return None
    r0 = start_mean(series(h, "reward"), t["start_window"])
    for s in sorted(set(zs) & set(rew)):
        collapsed = rew[s] <= t["decline_frac"] * r0 and r0 - rew[s] >= t["decline_min_drop"]  # reward_decline's
        if zs[s] >= t["stall_zero_std_min"] and abs(rew[s] - r0) < t["stall_reward_gain"] and not collapsed:
            easy = rew[s] > 0.5
            return Finding("zero_variance_stall", s,
                           {"frac_reward_zero_std": zs[s], "reward": rew[s], "reward_at_start": r0, "window": w},
                           f"Almost every group's completions get the same reward (the task is too "
                           f"{'easy' if easy else 'hard'} for this model), so every advantage is 0 and there is "
                           f"no gradient.",
                           f"{'a harder' if easy else 'an easier'} task or curriculum, a partial-credit reward, more "
                           f"completions per group (num_generations), or dynamic sampling (drop all-equal groups)")
    return None


def length_blowup(h, t, cfg=None):
    w = t["window"]
    clip = rolling_means(series(h, "completions/clipped_ratio"), w)
    if not clip:
        return None
    c0 = start_mean(series(h, "completions/clipped_ratio"), t["start_window"])
    for s, v in clip:
        if v >= t["length_clipped_min"] and v - c0 >= t["length_clipped_rise"]:
            ev = {"completions/clipped_ratio": v, "clipped_ratio_at_start": c0, "window": w}
            for k in ("completions/mean_length", "completions/mean_length_right", "completions/mean_length_wrong",
                      "completions/clipped_ratio_wrong"):
                x = _at(h, s, k)
                if x is not None:
                    ev[k] = x
            return Finding("length_blowup", s, ev,
                           "Completions grow until they hit max_completion_length: long (usually wrong) answers are "
                           "penalised less per token than short ones, or the reward pays for length.",
                           "loss_type='dr_grpo' or 'dapo' (no per-sequence length normaliser), "
                           "mask_truncated_completions=True, an overlong penalty (soft_overlong_punishment), or a "
                           "reward that does not pay for length")
    return None


def _reward_course(h, t, medians: bool = False):
    """The reward's rolling means over ``window`` steps and its mean over the first ``start_window``
    steps; with ``medians``, medians instead, so that a rare huge reward (a jackpot) makes no rise."""
    raw = series(h, "reward")
    if not medians:
        return rolling_means(raw, t["window"]), start_mean(raw, t["start_window"])
    start = statistics.median(v for _, v in raw[:t["start_window"]]) if raw else None
    return rolling_medians(raw, t["window"]), start


def reward_decline(h, t, cfg=None):
    pts, r0 = _reward_course(h, t)
    best = -math.inf
    for s, v in pts:
        best = max(best, v)
        if best - r0 >= t["decline_drop"]:
            return None  # it rose first: a later fall is late_decline's
        if v <= t["decline_frac"] * r0 and r0 - v >= t["decline_min_drop"]:
            return Finding("reward_decline", s, {"reward": v, "reward_at_start": r0, "window": t["window"]},
                           "The training reward falls from the start: the updates push the wrong way (an advantage "
                           "with the wrong sign, a reward that is negated, a loss that is maximised).",
                           "check the sign of the advantages (higher reward must mean higher advantage; "
                           "advantage_estimator='topk_minus_own_BROKEN_SIGN' is the known wrong one), then lower "
                           "the learning_rate")
    return None


def _accuracy_decline(h, t):
    acc = series(h, "accuracy")
    best, best_step = -math.inf, None
    for s, a in acc:
        if a > best:
            best, best_step = a, s
        if acc and best - acc[0][1] >= t["late_acc_gain"] and best - a >= t["late_acc_drop"]:
            return Finding("late_decline", s, {"accuracy": a, "accuracy_peak": best, "peak_step": best_step,
                                               "accuracy_first_eval": acc[0][1]},
                           "Held-out accuracy rose and then fell well below its best: late updates are undoing what "
                           "was learned (a step size that is too large for a policy that is already sharp).",
                           "decay the learning rate (lr_schedule='cosine'), keep the best checkpoint, add a KL "
                           "penalty (beta > 0); a replay buffer of earlier good samples is a variant you will meet")
    return None


def late_decline(h, t, cfg=None):
    by_acc = _accuracy_decline(h, t)
    by_reward = _late_reward_decline(h, t)
    found = [f for f in (by_acc, by_reward) if f is not None]
    return min(found, key=lambda f: f.step) if found else None


def _late_reward_decline(h, t):
    pts, r0 = _reward_course(h, t, medians=True)
    best, best_step = -math.inf, None
    for s, v in pts:
        if v > best:
            best, best_step = v, s
        if best - r0 >= t["decline_drop"] and best - v >= t["decline_drop"]:
            ev = {"reward": v, "reward_peak": best, "peak_step": best_step, "reward_at_start": r0,
                  "window": t["window"]}
            acc = series(h, "accuracy")
            if acc:
                ev["accuracy_evals"] = [a for _, a in acc if _ <= s][-3:]
            return Finding("late_decline", s, ev,
                           "The reward rose and then fell well below its peak: late updates are undoing what was "
                           "learned (a step size that is too large for a policy that is already sharp).",
                           "decay the learning rate (lr_schedule='cosine'), keep the best checkpoint, add a KL "
                           "penalty (beta > 0); a replay buffer of earlier good samples is a variant you will meet")
    return None


def grad_explosion(h, t, cfg=None):
    w, pts = t["window"], series(h, "grad_norm")
    for m in h:  # non-finite gradients skip the update: an explosion by definition
        if m.get("skipped", 0.0) and m.get("skipped", 0.0) > 0:
            return Finding("grad_explosion", int(m.get("step", 0)),
                           {"grad_norm": m.get("grad_norm"), "skipped": m.get("skipped")},
                           "The gradient was NaN/inf and the update was skipped.",
                           "a lower learning_rate, a smaller max_grad_norm, bf16=False; check the rewards for "
                           "extreme values")
    spikes = []  # (step, grad_norm, trailing median) of every step far above its trailing median
    for i in range(t["start_window"], len(pts)):
        med = statistics.median(v for _, v in pts[max(i - w, 0):i])
        s, v = pts[i]
        if v >= t["grad_min"] and v >= t["grad_ratio"] * med:
            spikes.append((s, v, med))
        recent = [x for x in spikes if x[0] > s - w]
        if len(recent) >= t["grad_min_spikes"]:  # one isolated spike is clipped and gone: not an explosion
            return Finding("grad_explosion", recent[0][0],  # the step of the first spike it counts
                           {"grad_norm": v, "grad_norm_median_before": med, "ratio": v / max(med, 1e-12),
                            "confirmed_at": s,
                            "spikes_in_window": [(x[0], round(x[1], 3)) for x in recent],
                            "max_grad_norm": getattr(cfg, "max_grad_norm", None), "window": w},
                           "The gradient norm jumped far above its recent level: the policy is in a region where the "
                           "loss is very steep (large advantages, tiny probabilities, or a high learning rate).",
                           "clip the gradient (max_grad_norm, 1.0), lower the learning_rate, rescale the rewards")
    return None


# ---------------------------------------------------------------- cause first
# A failing run usually trips several detectors: a policy pushed the wrong way also drifts from the
# reference (kl_blowup) and ends with every group wrong (zero_variance_stall). The report names the
# cause first. Findings are ordered by the step they start and, at one step, by PRIORITY: the
# detectors that name a mechanism (a judge's loophole, an unbounded update, a rare huge reward,
# paid-for length, lost diversity, no signal) before the two that describe what almost every failure
# does in the end (the reward falls; the policy leaves the reference).
PRIORITY = ("reward_hacking", "grad_explosion", "reward_spike", "length_blowup", "entropy_collapse",
            "zero_variance_stall", "late_decline", "reward_decline", "kl_blowup")

# effect -> the kinds it is a known consequence of. A finding is reported as "likely a consequence of"
# the first such finding listed before it, and is listed under it.
CONSEQUENCE_OF = {
    "kl_blowup": ("reward_hacking", "grad_explosion", "reward_spike", "length_blowup", "reward_decline",
                  "entropy_collapse"),
    # a policy that runs after a loophole, a jackpot or the wrong way drifts from the reference; one
    # collapsed onto a single answer sits about a nat per token from it (see collapse_kl_max)
    "reward_decline": ("grad_explosion", "reward_spike", "length_blowup", "entropy_collapse", "kl_blowup"),
    "zero_variance_stall": ("reward_hacking", "length_blowup", "entropy_collapse", "reward_decline",
                            "kl_blowup"),  # a collapsed or saturated reward leaves every group all-equal
    "entropy_collapse": ("reward_decline", "kl_blowup"),
    "length_blowup": ("reward_hacking", "kl_blowup"),  # a degenerate policy stops emitting EOS
    "late_decline": ("entropy_collapse", "kl_blowup"),
}

# The two detectors of consequences wait one window for the detectors of a mechanism: the KL to the
# reference and a 20-step reward mean cross their bars early in almost any failure, while the evidence
# of the mechanism (a 20-step mean of truncations, a second gradient spike) can take a few steps more.
WAITS_FOR = {"kl_blowup": ("reward_hacking", "grad_explosion", "reward_spike", "length_blowup"),
             "reward_decline": ("grad_explosion", "reward_spike", "length_blowup", "entropy_collapse"),
             "zero_variance_stall": ("reward_hacking", "grad_explosion", "reward_spike", "length_blowup",
                                     "entropy_collapse")}


def kl_while_reward_fell(h: list[dict], t: dict) -> tuple[int, float] | None:
    """(onset, mean KL over the updates up to it): the onset is the first step at which the reward,
    averaged over ``start_window`` steps, is at most ``decline_frac`` of its start; the KL is averaged
    over steps 2 to the onset (step 1's KL is 0: no update yet). Tells a too-large step (each update
    moves the policy far, so the KL is up before the reward falls) from a push the wrong way (the
    reward falls while the policy is still near the reference). None if the reward never fell that far."""
    raw, n = series(h, "reward"), t["start_window"]
    r0 = start_mean(raw, n)
    kl = series(h, "kl")
    for i in range(n - 1, len(raw)):
        if _mean(v for _, v in raw[i - n + 1:i + 1]) <= t["decline_frac"] * r0:
            onset = raw[i][0]
            moved = [v for s, v in kl[1:] if s <= onset]
            return (onset, _mean(moved)) if moved else None
    return None


def order_findings(found: list[Finding], h: list[dict], t: dict) -> list[Finding]:
    """The findings with the likely cause first: each root finding followed by the findings that are
    likely its consequences (``consequence_of`` set).

    Order: by step; a ``kl_blowup`` or ``reward_decline`` waits (``WAITS_FOR``) for a mechanism found
    within one window after it; at one step a finding comes before those it can cause
    (``CONSEQUENCE_OF``, when that does not also run the other way), then by ``PRIORITY``. When both
    ``reward_decline`` and ``kl_blowup`` hold, :func:`kl_while_reward_fell` decides which came first
    (the KL at or over ``decline_kl_split`` while the reward fell: ``kl_blowup``; below: ``reward_decline``),
    since their windows usually close at the same step.
    """
    rank = {k: float(i) for i, k in enumerate(PRIORITY)}
    by = {f.kind: f for f in found}
    at = {f.kind: f.step for f in found}  # the step each finding is ordered at
    for kind, mechanisms in WAITS_FOR.items():
        if kind in by:
            waits = [*mechanisms, *(("entropy_collapse",) if kind == "kl_blowup"
                                    and by[kind].evidence["kl"] < t["collapse_kl_max"] else ())]
            later = [by[m].step for m in waits if m in by and by[m].step <= by[kind].step + t["window"]]
            at[kind] = max([by[kind].step, *later])
    if "kl_blowup" in by and "reward_decline" in by:
        dec = by["reward_decline"]
        fell = kl_while_reward_fell(h, t)
        if fell is not None:
            dec.evidence["reward_fell_at"], dec.evidence["kl_while_reward_fell"] = fell
            big_steps = fell[1] >= t["decline_kl_split"]
            first, second = ("kl_blowup", "reward_decline") if big_steps else ("reward_decline", "kl_blowup")
            at["kl_blowup"] = at["reward_decline"] = min(at["kl_blowup"], at["reward_decline"])
            lo = min(rank["kl_blowup"], rank["reward_decline"])  # still after the mechanism detectors
            rank[first], rank[second] = lo, lo + 0.5

    def causes(a: str, b: str) -> bool:  # a can cause b, and not the other way
        return a in CONSEQUENCE_OF.get(b, ()) and b not in CONSEQUENCE_OF.get(a, ())

    ordered, left = [], sorted(found, key=lambda f: (at[f.kind], rank[f.kind]))
    while left:
        step = at[left[0].kind]
        same = [f for f in left if at[f.kind] == step]
        f = next(f for f in same if not any(causes(g.kind, f.kind) for g in same if g is not f))
        ordered.append(f)
        left.remove(f)
    roots: list[Finding] = []
    root_of: dict[int, Finding] = {}
    under: dict[int, list[Finding]] = {}
    for i, f in enumerate(ordered):
        cause = next((c for c in ordered[:i] if c.kind in CONSEQUENCE_OF.get(f.kind, ())), None)
        f.consequence_of = cause.kind if cause else None
        if cause is None:
            roots.append(f)
            root_of[id(f)], under[id(f)] = f, []
        else:
            root_of[id(f)] = root_of[id(cause)]
            under[id(root_of[id(f)])].append(f)
    return [x for r in roots for x in (r, *under[id(r)])]


DETECTORS = {"entropy_collapse": entropy_collapse, "reward_hacking": reward_hacking, "reward_spike": reward_spike,
             "kl_blowup": kl_blowup, "zero_variance_stall": zero_variance_stall, "length_blowup": length_blowup,
             "reward_decline": reward_decline, "late_decline": late_decline, "grad_explosion": grad_explosion}


def diagnose(history: list[dict], cfg=None, kinds=None, **thresholds) -> list[Finding]:
    """Every failure the metrics show, the likely cause first (:func:`order_findings`); ``[]`` for a
    healthy run. A finding that is likely a consequence of an earlier one has ``consequence_of`` set
    and follows it.

    ``thresholds`` override ``DEFAULTS`` by name (an unknown name raises ConfigError); ``kinds``
    limits the detectors run (default: all of ``DETECTORS``). ``cfg`` (the run's GRPOConfig) only
    makes the advice name current values.
    """
    unknown = sorted(set(thresholds) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"diagnose: unknown threshold(s) {unknown}; choose from {sorted(DEFAULTS)}")
    bad_kinds = sorted(set(kinds or ()) - set(DETECTORS))
    if bad_kinds:
        raise ConfigError(f"diagnose: unknown kind(s) {bad_kinds}; choose from {list(DETECTORS)}")
    t = {**DEFAULTS, **thresholds}
    found = [f for k in (kinds or DETECTORS) if (f := DETECTORS[k](history, t, cfg)) is not None]
    return order_findings(found, history, t)


def report(findings: list[Finding]) -> str:
    """The findings as text, one paragraph each (what the CLI prints)."""
    if not findings:
        return "diagnostics: no failure found"
    lines = [f"diagnostics: {len(findings)} finding(s), the likely cause first"]
    lines += [("      + " if f.consequence_of else "  - ") + f.summary() for f in findings]
    return "\n".join(lines)
