"""Classic GRPO failures, reproduced on demand on the tiny model, each with the fix that was measured.

    from grpo_kit.failures import FAILURES, run_failure
    broken = run_failure("reward_hacking", seed=0)            # the failure
    fixed = run_failure("reward_hacking", seed=0, fixed=True) # the same run with the fix applied
    broken.findings, fixed.findings                          # what diagnostics.diagnose says

A failure is a named set of ``GRPOConfig`` changes (plus, where the failure is in the judge, a
reward function from this module), the kind of finding ``diagnose`` should report, and a fix
(more config changes). Runs are deterministic per seed on one machine (the judges that draw
random numbers use a generator seeded by the run's seed). Each runs in about a minute or less
on 2 quiet cores; ``steps`` can shorten it.

The failures (``FAILURES``; the numbers measured are in each entry's ``measured``):

- ``entropy_collapse``: learning rate 10x the default, constant, no KL.
- ``kl_blowup``: learning rate 10x the default, constant: the policy leaves the reference in a
  few steps.
- ``reward_hacking``: a proxy judge that pays for length ("effort") instead of correctness;
  ``gold_reward_funcs=["exact_answer"]`` shows it.
- ``reward_spike``: a judge that, rarely, pays a jackpot of 40, with small groups (G=4) and no
  reward scaling (Dr. GRPO's ``scale_rewards='none'``), so the jackpot sample's advantage is ~30.
- ``grad_explosion``: the same jackpot judge with gradient clipping switched off.
- ``zero_variance_stall_hard`` / ``zero_variance_stall_easy``: 3-digit addition for a model that
  knows 2-digit addition; a format reward the model already earns on every sample.
- ``length_blowup``: the scratchpad task with per-sequence normalisation (loss_type 'grpo') and
  group z-scores at the default learning rate.
- ``sign_error``: ``advantage_estimator='topk_minus_own_BROKEN_SIGN'`` (training reward falls).
- ``late_decline``: a constant learning rate above the default: the reward rises, then falls.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from .config import GRPOConfig
from .errors import ConfigError
from .judges import exact_answer


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


def noisy_judge(seed: int = 0, sigma: float = 0.05) -> Callable:
    """exact_answer plus Gaussian noise of std ``sigma``: a judge that does not give the same score twice."""
    rng = random.Random(seed)

    def noisy(prompts, completions, answer, **columns):
        right = exact_answer(prompts, completions, answer=answer, **columns)
        return [r + rng.gauss(0.0, sigma) for r in right]
    return noisy


JUDGES = {"length_judge": lambda seed: length_judge, "digit_credit": lambda seed: digit_credit,
          "jackpot_judge": lambda seed: jackpot_judge(seed), "noisy_judge": lambda seed: noisy_judge(seed),
          "big_jackpot_judge": lambda seed: jackpot_judge(seed, p=0.005, size=200.0)}


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
            "learning rate 1e-3 (3x the default), constant, no KL: the policy sharpens onto wrong answers",
            dict(learning_rate=1e-3, lr_schedule="constant"),
            dict(learning_rate=3e-4, lr_schedule="cosine", beta=0.04),
            "the default learning rate with cosine decay and a KL penalty", steps=120),
    Failure("kl_blowup", "kl_blowup",
            "learning rate 3e-3 (10x the default), constant: the policy leaves the reference within 10 steps",
            dict(learning_rate=3e-3, lr_schedule="constant"),
            dict(learning_rate=3e-4, lr_schedule="cosine"),
            "the default learning rate (a KL penalty alone does not hold a 10x step size)", steps=60),
    Failure("reward_hacking", "reward_hacking",
            "a proxy judge that pays for length instead of correctness; the gold judge (exact_answer) is logged",
            dict(reward_funcs=["length_judge"], gold_reward_funcs=["exact_answer"]),
            dict(reward_funcs=["exact_answer"]),
            "train on the judge without the loophole", steps=80),
    Failure("reward_spike", "reward_spike",
            "a judge that rarely pays a jackpot of 40, groups of 4, no reward scaling",
            dict(reward_funcs=["jackpot_judge"], num_generations=4, scale_rewards="none", gold_reward_funcs=["exact_answer"]),
            dict(scale_rewards="group"),
            "group z-scores bound a group's advantages by sqrt(G-1), whatever the reward scale", steps=100),
    Failure("grad_explosion", "grad_explosion",
            "a judge that rarely pays a jackpot of 200, no reward scaling, gradient clipping off",
            dict(reward_funcs=["big_jackpot_judge"], num_generations=4, scale_rewards="none", max_grad_norm=1e6,
                 gold_reward_funcs=["exact_answer"]),
            dict(scale_rewards="group", max_grad_norm=1.0),
            "group z-scores and gradient clipping", steps=100),
    Failure("zero_variance_stall_hard", "zero_variance_stall",
            "3-digit addition for a model trained on 2-digit addition: almost every group is all wrong",
            dict(task="add3", eval_size=100),
            dict(reward_funcs=["digit_credit"], gold_reward_funcs=["exact_answer"]),
            "a partial-credit reward (digits right) gives the groups a spread again", steps=40),
    Failure("zero_variance_stall_easy", "zero_variance_stall",
            "a format reward the model already earns on every sample: every group is all right",
            dict(reward_funcs=["format"], gold_reward_funcs=["exact_answer"], eval_size=100),
            dict(reward_funcs=["exact_answer"]),
            "reward what the model cannot yet do (the answer, not its format)", steps=40),
    Failure("length_blowup", "length_blowup",
            "the scratchpad task (answers of 3 to 10 tokens, budget 16) with per-sequence normalisation "
            "(loss_type='grpo') and group z-scores at the default learning rate",
            dict(model="tiny-add2s", task="add2s", max_completion_length=16, loss_type="grpo", scale_rewards="group"),
            dict(loss_type="dr_grpo", scale_rewards="none", learning_rate=1e-4),
            "a constant normaliser (Dr. GRPO) and a lower learning rate", steps=100),
    Failure("sign_error", "reward_decline",
            "advantage_estimator='topk_minus_own_BROKEN_SIGN': the best completion gets the most negative advantage",
            dict(advantage_estimator="topk_minus_own_BROKEN_SIGN"),
            dict(advantage_estimator="topk"),
            "the same estimator with the sign fixed ('topk')", steps=60),
    Failure("late_decline", "late_decline",
            "a constant learning rate of 5e-4: the reward rises, then falls back",
            dict(learning_rate=5e-4, lr_schedule="constant"),
            dict(lr_schedule="cosine"),
            "cosine decay of the same learning rate", steps=200),
]}


def failure_config(name: str, seed: int = 0, fixed: bool = False, steps: int | None = None, **overrides) -> GRPOConfig:
    """The GRPOConfig of failure ``name`` (with its fix if ``fixed``); judge names from ``JUDGES`` stay names
    here (``run_failure`` turns them into functions seeded by ``seed``)."""
    if name not in FAILURES:
        raise ConfigError(f"unknown failure {name!r}: choose one of {sorted(FAILURES)}")
    f = FAILURES[name]
    changes = {**BASE, **f.changes, **(f.fix if fixed else {}), "seed": seed, "steps": steps or f.steps, **overrides}
    cfg = GRPOConfig(**changes).validate()
    return cfg


def _funcs(names: list, seed: int) -> list:
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

    def first(self, kind: str):
        return next((f for f in self.findings if f.kind == kind), None)


def run_failure(name: str, seed: int = 0, fixed: bool = False, steps: int | None = None,
                on_step: Callable[[dict], None] | None = None, should_stop=None, **overrides) -> FailureRun:
    """Train failure ``name`` (or its fix) and diagnose it; ``on_step(metrics)`` sees every step (a dashboard)."""
    from .diagnostics import diagnose
    from .train import setup, train

    cfg = failure_config(name, seed, fixed, steps, **overrides)
    run = setup(cfg, reward_funcs=_funcs(cfg.reward_funcs, seed), gold_reward_funcs=_funcs(cfg.gold_reward_funcs, seed))
    for m in train(cfg, run, should_stop=should_stop):
        if on_step is not None:
            on_step(m)
    return FailureRun(name, fixed, cfg, run, diagnose(run.history, cfg))
