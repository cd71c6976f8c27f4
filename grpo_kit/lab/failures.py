"""Classic GRPO failures, reproduced on demand on the tiny model, each with the fix that was measured.

    from grpo_kit.lab.failures import FAILURES, run_failure
    broken = run_failure("reward_hacking", seed=0)            # the failure
    fixed = run_failure("reward_hacking", seed=0, fixed=True) # the same run with the fix applied
    broken.findings, fixed.findings                          # what diagnostics.diagnose says

A failure is a named set of ``GRPOConfig`` changes (plus, where the failure is in the judge, a
reward function from this module), the kind of finding ``diagnose`` should report, and a fix
(more config changes). Runs are deterministic per seed on one machine (the judges that draw
random numbers use a generator seeded by the run's seed). Each runs in about a minute or less
on 2 quiet cores; ``steps`` can shorten it.

The failures (``FAILURES``; the numbers measured are in each entry's ``measured``):

- ``entropy_collapse``: eight updates per batch (``num_iterations=8``) at temperature 0.5, constant
  learning rate: the groups turn into copies of one completion while the KL stays below 1.
- ``kl_blowup``: learning rate 3x the default, constant: the policy leaves the reference in a
  few steps.
- ``reward_hacking``: a proxy judge that pays for length ("effort") instead of correctness;
  ``gold_reward_funcs=["exact_answer"]`` shows it.
- ``reward_spike``: a judge that, rarely, pays a jackpot of 40, with small groups (G=4) and no
  reward scaling (Dr. GRPO's ``scale_rewards='none'``), so the jackpot sample's advantage is ~30.
- ``grad_explosion``: the same jackpot judge with gradient clipping switched off.
- ``zero_variance_stall_hard`` / ``zero_variance_stall_easy``: 3-digit addition for a model that
  knows 2-digit addition; a format reward the model already earns on every sample.
- ``length_blowup``: a bonus for length (weight 3) on top of the answer reward: a long wrong
  completion outscores a short right one, and completions run to ``max_completion_length``.
- ``sign_error``: ``advantage_estimator='topk_minus_own_BROKEN_SIGN'`` (training reward falls).
- ``late_decline``: a constant learning rate of 4e-4: held-out accuracy climbs, then falls back.
  (With the default 3e-4 held constant, the merged code's seed-0 run only swung by 14.5 points and
  ended at 80.5%: below the detector's 15 points. At 6e-4 it collapses from the start instead.)
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.rewards.judges import exact_answer, format_reward

# ---------------------------------------------------------------- judges with a flaw

def length_judge(prompts: list[str], completions: list[str], **_) -> list[float]:
    """A proxy judge with a loophole: it scores "effort" as length, min(len, 8) / 8, whatever the answer."""
    return [min(len(c), 8) / 8 for c in completions]


def digit_credit(prompts: list[str], completions: list[str], completion: list[str], **_) -> list[float]:
    """Partial credit: the fraction of the reference completion's characters the completion gets right, in
    place, over the longer of the two (``"25"`` for ``"25"`` = 1, ``"24"`` = 0.5, ``"2"`` = 0.5)."""
    out = []
    for c, ref in zip(completions, completion):
        c = c.strip()
        hits = sum(a == b for a, b in zip(c, ref))
        out.append(hits / max(len(c), len(ref), 1))
    return out


def jackpot_judge(seed: int = 0, p: float = 0.005, size: float = 40.0) -> Callable:
    """exact_answer plus, with probability ``p`` per sample, a jackpot of ``size``: a judge with rare
    large rewards (a buggy scorer, a bonus that almost never fires). Deterministic per ``seed``."""
    rng = random.Random(seed)

    def jackpot(prompts, completions, answer, **columns):
        right = exact_answer(prompts, completions, answer=answer, **columns)
        return [r + (size if rng.random() < p else 0.0) for r in right]
    return jackpot


def clipped_jackpot_judge(seed: int = 0, p: float = 0.005, size: float = 40.0, hi: float = 1.0) -> Callable:
    """:func:`jackpot_judge` (the same draws for the same ``seed``) with every score clipped to [0, ``hi``]:
    the jackpot is fixed in the judge, so a reward never leaves the range a right/wrong judge pays."""
    jackpot = jackpot_judge(seed, p, size)

    def clipped_jackpot(prompts, completions, answer, **columns):
        return [min(max(r, 0.0), hi) for r in jackpot(prompts, completions, answer=answer, **columns)]
    return clipped_jackpot


def format_gated_length_judge(prompts: list[str], completions: list[str], **_) -> list[float]:
    """:func:`length_judge` behind a format gate: it pays min(len, 8) / 8 only when the completion is one
    well-formed integer (``format_reward``), else 0. The gate checks the form, never the answer."""
    return [length if ok else 0.0
            for length, ok in zip(length_judge(prompts, completions), format_reward(prompts, completions))]


def noisy_judge(seed: int = 0, sigma: float = 0.05) -> Callable:
    """exact_answer plus Gaussian noise of std ``sigma``: a judge that does not give the same score twice."""
    rng = random.Random(seed)

    def noisy(prompts, completions, answer, **columns):
        right = exact_answer(prompts, completions, answer=answer, **columns)
        return [r + rng.gauss(0.0, sigma) for r in right]
    return noisy


# the judges above as GRPOConfig reward functions (importable, so a config file or the CLI can name them);
# the ones that draw random numbers are factories seeded by the run's seed
JUDGES = {"length_judge": lambda seed: "grpo_kit.lab.failures:length_judge",
          "digit_credit": lambda seed: "grpo_kit.lab.failures:digit_credit",
          "jackpot_judge": lambda seed: {"function": "grpo_kit.lab.failures:jackpot_judge", "args": {"seed": seed}},
          "noisy_judge": lambda seed: {"function": "grpo_kit.lab.failures:noisy_judge", "args": {"seed": seed}},
          "big_jackpot_judge": lambda seed: {"function": "grpo_kit.lab.failures:jackpot_judge",
                                             "args": {"seed": seed, "p": 0.005, "size": 200.0}},
          "clipped_jackpot_judge": lambda seed: {"function": "grpo_kit.lab.failures:clipped_jackpot_judge",
                                                 "args": {"seed": seed}},
          "format_gated_length_judge": lambda seed: "grpo_kit.lab.failures:format_gated_length_judge"}


# ---------------------------------------------------------------- the failures

@dataclass
class Failure:
    name: str
    kind: str                    # the diagnostics kind it should produce
    what: str                    # what is broken, one sentence
    changes: dict                # GRPOConfig fields (reward_funcs may name JUDGES here)
    fix: dict                    # further changes that fix it (applied over ``changes``)
    fix_note: str                # what the fix is and what it was measured to do
    steps: int = 100
    measured: dict = field(default_factory=dict)  # filled in from the runs: see the module docstring


BASE = dict(eval_every=25, eval_size=200, threads=2)

FAILURES: dict[str, Failure] = {f.name: f for f in [
    Failure("entropy_collapse", "entropy_collapse",
            "eight updates on every batch (num_iterations=8) at sampling temperature 0.5, constant learning "
            "rate: each batch is fitted hard, the policy sharpens, and the groups turn into copies of one "
            "completion while the KL stays moderate",
            dict(temperature=0.5, num_iterations=8, lr_schedule="constant"),
            dict(num_iterations=1, lr_schedule="cosine"),
            "one update per batch (num_iterations=1) and the default cosine decay: the policy no longer "
            "over-fits each batch", steps=100),
    Failure("kl_blowup", "kl_blowup",
            "a learning rate of 1e-3 (3x the default), constant, no KL: the policy leaves the reference",
            dict(learning_rate=1e-3, lr_schedule="constant"),
            dict(learning_rate=3e-4, lr_schedule="cosine", beta=0.04),
            "the default learning rate with cosine decay and a KL penalty", steps=50),
    Failure("length_blowup", "length_blowup",
            "a bonus for longer completions (length_judge, weight 3) on top of the answer reward: a long wrong "
            "completion outscores a short right one, so completions run to max_completion_length",
            dict(reward_funcs=["exact_answer", "length_judge"], reward_weights=[1.0, 3.0]),
            dict(reward_weights=[1.0, 0.5]),
            "a bonus that can never outscore a right answer (weight 0.5: at most 0.5 against 1)", steps=40),
    Failure("reward_hacking", "reward_hacking",
            "a proxy judge that pays for length instead of correctness; the gold judge (exact_answer) is logged",
            dict(reward_funcs=["length_judge"], gold_reward_funcs=["exact_answer"]),
            dict(reward_funcs=["exact_answer"]),
            "train on the judge without the loophole", steps=40),
    Failure("reward_spike", "reward_spike",
            "a judge that rarely pays a jackpot of 40, groups of 4, no reward scaling",
            dict(reward_funcs=["jackpot_judge"], num_generations=4, scale_rewards="none",
                 gold_reward_funcs=["exact_answer"]),
            dict(scale_rewards="group"),
            "group z-scores bound a group's advantages by (G-1)/sqrt(G), whatever the reward scale", steps=40),
    Failure("grad_explosion", "grad_explosion",
            "a judge that rarely pays a jackpot of 200, no reward scaling, gradient clipping off",
            dict(reward_funcs=["big_jackpot_judge"], num_generations=4, scale_rewards="none", max_grad_norm=1e6,
                 gold_reward_funcs=["exact_answer"]),
            dict(scale_rewards="group", max_grad_norm=1.0),
            "group z-scores and gradient clipping", steps=40),
    Failure("zero_variance_stall_hard", "zero_variance_stall",
            "3-digit addition for a model trained on 2-digit addition: almost every group is all wrong",
            dict(task="add3", eval_size=100),
            dict(reward_funcs=["digit_credit"], gold_reward_funcs=["exact_answer"], beta=0.04),
            "a partial-credit reward (digits right) gives the groups a spread again; a KL penalty keeps the "
            "policy near the reference while it learns from it", steps=30),
    Failure("zero_variance_stall_easy", "zero_variance_stall",
            "a format reward the model already earns on every sample: every group is all right",
            dict(reward_funcs=["format"], gold_reward_funcs=["exact_answer"], eval_size=100),
            dict(reward_funcs=["exact_answer"]),
            "reward what the model cannot yet do (the answer, not its format)", steps=30),
    Failure("sign_error", "reward_decline",
            "advantage_estimator='topk_minus_own_BROKEN_SIGN': the best completion gets the most negative advantage",
            dict(advantage_estimator="topk_minus_own_BROKEN_SIGN"),
            dict(advantage_estimator="topk"),
            "the same estimator with the sign fixed ('topk')", steps=40),
    Failure("late_decline", "late_decline",
            "a constant learning rate of 4e-4 (a third above the default, without its decay): held-out accuracy "
            "climbs back to its start, then falls by more than 20 points, and keeps swinging",
            dict(learning_rate=4e-4, lr_schedule="constant"),
            dict(lr_schedule="cosine"),
            "cosine decay of the same learning rate", steps=300),
]}


def failure_config(name: str, seed: int = 0, fixed: bool = False, steps: int | None = None, **overrides) -> GRPOConfig:
    """The GRPOConfig of failure ``name`` (with its fix if ``fixed``); judge names from ``JUDGES`` become
    importable reward-function specs (seeded by ``seed`` where the judge draws random numbers)."""
    if name not in FAILURES:
        raise ConfigError(f"unknown failure {name!r}: choose one of {sorted(FAILURES)}")
    f = FAILURES[name]
    changes = {**BASE, **f.changes, **(f.fix if fixed else {}), "seed": seed, "steps": steps or f.steps, **overrides}
    for key in ("reward_funcs", "gold_reward_funcs"):
        if key in changes:
            changes[key] = _funcs(changes[key], seed)
    return check_config(GRPOConfig(**changes))


def _funcs(names: list, seed: int) -> list:
    """Judge names of this module as reward-function specs (``JUDGES``); anything else unchanged."""
    return [JUDGES[n](seed) if isinstance(n, str) and n in JUDGES else n for n in names]


@dataclass
class FailureRun:
    name: str
    fixed: bool
    cfg: GRPOConfig
    run: object          # train.Run
    findings: list       # diagnostics.Finding

    @property
    def history(self) -> list[dict]:
        return self.run.history

    def kinds(self) -> list[str]:
        return [f.kind for f in self.findings]

    @property
    def evals(self) -> list[tuple[int, float]]:
        return self.run.evals

    def first(self, kind: str):
        return next((f for f in self.findings if f.kind == kind), None)

    def tail_mean(self, key: str, last: int = 20) -> float:
        """The mean of metric ``key`` over the run's last ``last`` steps (nan when none logged it)."""
        return self.run.tail_mean(key, last)


def finding_marks(runs: dict[str, FailureRun], kind: str) -> list[tuple[int, str, str]]:
    """(step, kind, run name) where each run's first ``kind`` finding starts: the ``marks`` of
    ``dashboard.compare_runs``, drawn in each run's colour."""
    return [(f.step, kind, name) for name, r in runs.items() if (f := r.first(kind)) is not None]


def run_failure(name: str, seed: int = 0, fixed: bool = False, steps: int | None = None,
                on_step: Callable[[dict], None] | None = None, should_stop=None, **overrides) -> FailureRun:
    """Train failure ``name`` (or its fix) and diagnose it; ``on_step(metrics)`` sees every step (a dashboard)."""
    from grpo_kit.eval.diagnostics import diagnose
    from grpo_kit.loop.train import setup, train

    cfg = failure_config(name, seed, fixed, steps, **overrides)
    run = setup(cfg)
    for m in train(cfg, run, should_stop=should_stop):
        if on_step is not None:
            on_step(m)
    return FailureRun(name, fixed, cfg, run, diagnose(run.history, cfg))


def dashboard_hook(dash, variant: str) -> Callable[[dict], None]:
    """``on_step`` for :func:`run_failure` that feeds a ``dashboard.Dashboard`` (which marks each finding
    the live check reports, ``metrics["findings"]``, at the step it starts)."""
    def on_step(m: dict) -> None:
        dash.update(m, variant=variant)
    return on_step


def compare_table(runs: list[FailureRun], keys=("reward", "completions/distinct_frac", "entropy", "kl"),
                  last: int = 20) -> str:
    """A text table: each run's held-out accuracy (start -> end), the mean of ``keys`` over its last
    ``last`` steps, and its findings (kind@step). The line under the header says which columns are
    such means (a column named ``max_abs`` is the mean of a per-step maximum, not a maximum)."""
    head = f"{'run':<34}{'accuracy':>16}" + "".join(f"{k.split('/')[-1][:12]:>14}" for k in keys) + "  findings"
    note = f"{'':<34}{'start -> end':>16}" + f"  (each later column: the mean over the last {last} steps of {', '.join(keys)})"
    rows = [head, note]
    for r in runs:
        vals = [r.tail_mean(k, last) for k in keys]
        acc = f"{r.run.evals[0][1]:.1%} -> {r.run.evals[-1][1]:.1%}"
        label = f"{r.name}{' + fix' if r.fixed else ''}"
        found = ", ".join(f"{f.kind}@{f.step}" for f in r.findings) or "-"
        rows.append(f"{label:<34}{acc:>16}" + "".join(f"{v:>14.3f}" for v in vals) + f"  {found}")
    return "\n".join(rows)


# ---------------------------------------------------------------- where the memory of a step goes

def _rss_kib(field: str = "VmHWM") -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def _step_memory(changes: dict) -> dict:
    """In this process: collect one batch and its advantages (the stages of ``grpo_step``), reset the
    peak-RSS counter, run the update stage (``train_step``), and report the peak RSS it added (MiB)
    beside the bytes of the batch's logits, of the group statistics, and of the rollouts. Linux only
    (``/proc/self/clear_refs``)."""
    from grpo_kit.loop.dynamic import sample_batch
    from grpo_kit.loop.step import train_step
    from grpo_kit.loop.train import advantages_for, setup

    cfg = GRPOConfig(**{"threads": 1, "eval_size": 1, **changes})
    run = setup(cfg)
    batch = sample_batch(run, cfg, run.train_items, run.reward_funcs)  # P groups of G, judged
    adv, sample_mask, _ = advantages_for(run, cfg, batch)  # (P, G)
    ro = batch.rollouts
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM (peak RSS) to the current RSS
    before = _rss_kib("VmRSS")
    train_step(run.policy, run.ref, run.optimizer, ro, adv, cfg, sample_mask=sample_mask)
    peak = _rss_kib("VmHWM")
    B, Tc = ro.completion_ids.shape
    T = ro.prompt_ids.shape[1] + Tc
    V, H = run.policy.config.vocab_size, run.policy.config.hidden_size
    L = run.policy.config.num_hidden_layers
    return {"B": B, "T": T, "V": V, "micro_batch_size": cfg.micro_batch_size or B,
            "step_peak_mib": (peak - before) / 1024,
            "logits_mib": (cfg.micro_batch_size or B) * T * V * 4 / 2**20,
            "hidden_states_mib": (cfg.micro_batch_size or B) * T * H * L * 4 / 2**20,
            "group_stats_mib": 3 * B * 4 / 2**20}  # rewards, advantages, a mean/std per row: B floats each


def measure_step_memory(timeout: float = 300, **changes) -> dict:
    """:func:`_step_memory` in a fresh Python process (so nothing else sits in its peak RSS)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "grpo_kit.lab.failures", "--memory", json.dumps(changes)],
                         capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory measurement failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # python -m grpo_kit.lab.failures --memory '{"num_prompts": 64}'
    import json
    import sys

    if sys.argv[1:2] == ["--memory"]:
        print(json.dumps(_step_memory(json.loads(sys.argv[2]))))
