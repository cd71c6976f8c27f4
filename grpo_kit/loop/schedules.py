"""Steering a run over time: group-size schedules, adaptive G, difficulty and reward curricula.

Every strategy is one config field (see ``GRPOConfig``, section "steering"):

- fixed G (the default): ``num_generations`` for the whole run.
- ``group_size_schedule``: ``[[0.0, 16], [0.3, 8], [0.7, 4]]`` = G from each fraction of the
  run on. ``samples_per_step`` (B) stays fixed, so P = B / G prompts per step: a large G
  early spends the budget on a few prompts with a precise baseline, a small G late on many
  prompts (or the other way round).
- ``adaptive_group_size``: :func:`adapt_group_size` doubles G when the fraction of
  zero-variance groups (``frac_reward_zero_std``: all G rewards equal, no learning signal)
  stays above ``adaptive_grow_above`` for ``adaptive_patience`` steps in a row, and halves it
  when the fraction stays below ``adaptive_shrink_below`` as long; two thresholds and the
  patience are the hysteresis that keeps it from flapping. Bounds: ``group_size_bounds``.
  The idea of spending more samples where groups carry no signal is that of DAPO's dynamic
  sampling (Yu et al. 2025, see ``dynamic.py``); the rule here is the kit's.
- ``task_schedule`` / ``reward_schedule``: a difficulty curriculum (``[[0.0, "add1"],
  [0.5, "add2"]]``; an entry may name a list of tasks, mixed uniformly) and a reward curriculum
  (``[[0.0, ["format"]], [0.2, ["exact_answer"]]]``: format first, then correctness). With
  ``curriculum_by="fraction"`` the entries start at their fraction of the run; with
  ``"accuracy"`` the entries are stages taken in order, and the run moves to the next stage
  at the first evaluation whose held-out greedy accuracy on the current stage's task reaches
  ``curriculum_accuracy``.

"Fraction of the run" is ``step / steps``, or ``completions generated / completion_budget``
when a budget of generated completions is set (so strategies that generate more per step,
like dynamic sampling, move through their schedule by what they spend).

The state that changes during a run (current adaptive G and its counters, the curriculum
stage, completions generated, the replay buffer) lives in :class:`SteerState` on
``run.steer`` and is saved in checkpoints, so a run that changes G mid-way resumes exactly.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field

from grpo_kit.config import names_in
from grpo_kit.data.tasks import TASKS
from grpo_kit.errors import ConfigError
from grpo_kit.rewards.judges import REWARD_FUNCS

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- the names a curriculum gives (check_config)

def check_schedule_names(cfg) -> None:
    """Every name in ``task_schedule`` and ``reward_schedule`` is a task / shipped reward function; a
    :class:`ConfigError` names the entry. (The schedules' form and the rules between the steering fields
    are ``GRPOConfig.validate``'s.)"""
    for name, registry, what in (("task_schedule", TASKS, "a task or a list of tasks"),
                                 ("reward_schedule", REWARD_FUNCS, "a reward function or a list of them")):
        for i, entry in enumerate(getattr(cfg, name) or []):
            if not all(n in registry for n in names_in(entry[1])):
                raise ConfigError(f"GRPOConfig.{name}[{i}]={entry!r}: the value must name {what} from {sorted(registry)}")


# ---------------------------------------------------------------- schedule lookups (pure)

def samples_per_step(cfg) -> int:
    """B: completions per step; ``samples_per_step`` or, unset, num_prompts * num_generations."""
    return cfg.samples_per_step if cfg.samples_per_step is not None else cfg.num_prompts * cfg.num_generations


def value_at(schedule: list, frac: float):
    """The value of the last entry that starts at or before ``frac`` (entries sorted, first at 0.0)."""
    value = schedule[0][1]
    for start, v in schedule:
        if start <= frac:
            value = v
    return value


# ---------------------------------------------------------------- adaptive group size (pure)

@dataclass
class AdaptiveState:
    G: int
    above: int = 0   # steps in a row with frac_reward_zero_std > grow_above
    below: int = 0   # steps in a row with frac_reward_zero_std < shrink_below


def adapt_group_size(state: AdaptiveState, frac_zero_std: float, grow_above: float, shrink_below: float,
                     patience: int, bounds: tuple[int, int]) -> tuple[AdaptiveState, str | None]:
    """One decision after a step -> (new state, reason or None when G stays).

    Hysteresis: G doubles only after ``patience`` steps in a row above ``grow_above`` and halves
    only after ``patience`` steps in a row below ``shrink_below``; a step between the two
    thresholds resets both counters, and a change resets them too (the new G must prove itself).
    At a bound the counter keeps counting but G stays (the reason is then None).
    """
    lo, hi = bounds
    above = state.above + 1 if frac_zero_std > grow_above else 0
    below = state.below + 1 if frac_zero_std < shrink_below else 0
    if above >= patience and state.G * 2 <= hi:
        reason = (f"frac_reward_zero_std > {grow_above} for {above} steps (last {frac_zero_std:.3f}): "
                  f"G {state.G} -> {state.G * 2}")
        return AdaptiveState(state.G * 2), reason
    if below >= patience and state.G // 2 >= lo and state.G % 2 == 0:
        reason = (f"frac_reward_zero_std < {shrink_below} for {below} steps (last {frac_zero_std:.3f}): "
                  f"G {state.G} -> {state.G // 2}")
        return AdaptiveState(state.G // 2), reason
    return AdaptiveState(state.G, above, below), None


# ---------------------------------------------------------------- the run's steering state

@dataclass
class SteerState:
    """What changes during a run and is checkpointed: adaptive G, curriculum stage, spend, replay."""
    adaptive: AdaptiveState | None = None
    stage: int = 0                 # curriculum stage (curriculum_by='accuracy')
    generated: int = 0             # completions generated so far
    changes: list = field(default_factory=list)  # (step, old G, new G, reason) of the adaptive rule
    replay: object = None          # replay.ReplayBuffer when replay_fraction > 0

    def state_dict(self) -> dict:
        return {"adaptive": dataclasses.asdict(self.adaptive) if self.adaptive else None, "stage": self.stage,
                "generated": self.generated, "changes": list(self.changes),
                "replay": self.replay.state_dict() if self.replay is not None else None}

    def load_state_dict(self, d: dict) -> None:
        self.adaptive = AdaptiveState(**d["adaptive"]) if d["adaptive"] else None
        self.stage, self.generated, self.changes = d["stage"], d["generated"], list(d["changes"])
        if d["replay"] is not None and self.replay is not None:
            self.replay.load_state_dict(d["replay"])


def new_state(cfg) -> SteerState:
    from grpo_kit.loop.replay import ReplayBuffer

    return SteerState(adaptive=AdaptiveState(cfg.num_generations) if cfg.adaptive_group_size else None,
                      replay=ReplayBuffer(cfg.replay_capacity, cfg.replay_max_age, cfg.replay_min_abs_advantage)
                      if cfg.replay_fraction > 0 else None)


def state(run) -> SteerState:
    """``run.steer``, created on first use."""
    if getattr(run, "steer", None) is None:
        run.steer = new_state(run.cfg)
    return run.steer


def progress(run) -> float:
    """Fraction of the run done before this step: generated / completion_budget, or step / steps."""
    cfg = run.cfg
    if cfg.completion_budget:
        return min(state(run).generated / cfg.completion_budget, 1.0)
    return run.step / cfg.steps if cfg.steps else 0.0


def budget_spent(run) -> bool:
    cfg = run.cfg
    return bool(cfg.completion_budget) and state(run).generated >= cfg.completion_budget


def group_size(cfg, frac: float, st: SteerState | None = None) -> int:
    """This step's G: adaptive state, else the schedule at ``frac``, else num_generations."""
    if cfg.adaptive_group_size and st is not None and st.adaptive is not None:
        return st.adaptive.G
    if cfg.group_size_schedule is not None:
        return int(value_at(cfg.group_size_schedule, frac))
    return cfg.num_generations


def _entry(cfg, schedule, frac: float, st: SteerState):
    if cfg.curriculum_by == "accuracy":
        return schedule[min(st.stage, len(schedule) - 1)][1]
    return value_at(schedule, frac)


def tasks_at(cfg, frac: float, st: SteerState) -> list[str] | None:
    """Task names this step draws prompts from (None: the run's own train items)."""
    return names_in(_entry(cfg, cfg.task_schedule, frac, st)) if cfg.task_schedule is not None else None


def rewards_at(cfg, frac: float, st: SteerState) -> list[str] | None:
    """Reward function names this step (None: the run's own reward functions)."""
    return names_in(_entry(cfg, cfg.reward_schedule, frac, st)) if cfg.reward_schedule is not None else None


def preview(cfg, points: int = 11) -> list[dict]:
    """What a schedule does over the run, before anything runs: G, P, task and rewards at ``points`` fractions.

    For fixed and scheduled G only (the adaptive rule and accuracy rule depend on the run).
    """
    st, B = SteerState(), samples_per_step(cfg)
    out = []
    for i in range(points):
        frac = i / (points - 1)
        G = group_size(cfg, frac)
        out.append({"fraction": frac, "G": G, "P": B // G, "tasks": tasks_at(cfg, frac, st) or [cfg.task],
                    "rewards": rewards_at(cfg, frac, st) or list(cfg.reward_funcs)})
    return out


def lr_lambda(cfg):
    """Learning-rate factor at optimizer update u (counted from 0; ``num_iterations`` updates per step).

    transformers' ``get_cosine_schedule_with_warmup`` / ``get_constant_schedule_with_warmup``, which
    TRL's trainer uses: u / warmup_steps during the warm-up, then 0.5 (1 + cos(pi t)) over the
    remaining updates (cosine) or 1 (constant). The cosine is evaluated in float32, as it always
    was here, so runs with ``num_iterations=1`` and no warm-up are unchanged; it differs from
    transformers' float64 value by at most about 1e-7 of the rate.
    """
    import torch

    total = cfg.steps * cfg.num_iterations

    def f(update: int) -> float:
        if update < cfg.warmup_steps:
            return update / cfg.warmup_steps
        if cfg.lr_schedule == "cosine":
            t = (update - cfg.warmup_steps) / max(total - cfg.warmup_steps, 1)
            return 0.5 * (1 + torch.cos(torch.tensor(min(t, 1.0) * torch.pi)).item())
        return 1.0
    return f


def resume_changes(old, new, step: int, generated: int = 0) -> list[str]:
    """What resuming at ``step`` with config ``new`` instead of the checkpoint's ``old`` (another
    ``steps``) changes in the step to come, in words: every schedule set by the fraction of the run
    (the learning rate's cosine and warm-up, ``group_size_schedule``, ``task_schedule`` and
    ``reward_schedule`` with ``curriculum_by='fraction'``) is stretched over the new total, so its
    value at ``step`` can jump. ``[]`` when nothing changes (a constant rate, no such schedule, the
    same ``steps``, or a ``completion_budget`` that sets the fraction). ``generated``: completions
    generated so far (the fraction under a budget)."""
    def at(cfg) -> dict:
        frac = (min(generated / cfg.completion_budget, 1.0) if cfg.completion_budget
                else step / cfg.steps if cfg.steps else 0.0)
        update = frac * cfg.steps * cfg.num_iterations if cfg.completion_budget else step * cfg.num_iterations
        st, G = SteerState(), group_size(cfg, frac)
        out = {"learning rate": cfg.learning_rate * lr_lambda(cfg)(update)}
        if not cfg.adaptive_group_size:
            out["group size G"], out["prompts per step P"] = G, samples_per_step(cfg) // G
        if cfg.curriculum_by == "fraction":
            out["tasks"], out["reward functions"] = tasks_at(cfg, frac, st), rewards_at(cfg, frac, st)
        return out

    def same(k, a, b) -> bool:  # the rate's cosine is float32 arithmetic
        return math.isclose(a, b, rel_tol=1e-6) if k == "learning rate" else a == b

    then, now = at(old), at(new)
    show = {"learning rate": lambda v: f"{v:.3g}"}
    return [f"{k} {show.get(k, repr)(then[k])} -> {show.get(k, repr)(now[k])}" for k in then
            if not same(k, then[k], now[k])]


# ---------------------------------------------------------------- what train.py calls

@dataclass
class StepPlan:
    cfg: object          # the run's config with this step's num_generations / num_prompts
    frac: float          # fraction of the run done before this step
    items: list[dict]    # the pool prompts are drawn from
    reward_funcs: list   # this step's reward functions


_TASK_ITEMS: dict[str, list[dict]] = {}


def task_items(names: list[str]) -> list[dict]:
    """Train split of each named task, concatenated (a mix draws uniformly over all its items)."""
    from grpo_kit.data.tasks import get_task

    out = []
    for n in names:
        if n not in _TASK_ITEMS:
            _TASK_ITEMS[n] = get_task(n).splits()["train"]
        out.extend(_TASK_ITEMS[n])
    return out


def plan_step(run) -> StepPlan:
    """This step's G, P, prompt pool and reward functions from the schedules and the state."""
    from grpo_kit.rewards.resolve import get_reward_funcs

    cfg, st = run.cfg, state(run)
    frac = progress(run)
    G = group_size(cfg, frac, st)
    P = samples_per_step(cfg) // G
    names = tasks_at(cfg, frac, st)
    rewards = rewards_at(cfg, frac, st)
    step_cfg = dataclasses.replace(cfg, num_generations=G, num_prompts=P)  # not re-validated: validate() covered every G
    from grpo_kit.model.sampling import chat_items

    pool = chat_items(task_items(names), run.tokenizer, cfg.chat_template) if names else run.train_items
    return StepPlan(step_cfg, frac, pool,
                    get_reward_funcs(rewards) if rewards else run.reward_funcs)


def end_step(run, plan: StepPlan, metrics: dict, generated: int) -> None:
    """Book-keeping after a step: spend, logged G/P/stage, and the adaptive rule's decision."""
    cfg, st = run.cfg, state(run)
    st.generated += generated
    metrics["num_generations"] = plan.cfg.num_generations
    metrics["num_prompts"] = plan.cfg.num_prompts
    metrics["completions_generated"] = float(generated)
    metrics["completions_total"] = float(st.generated)
    metrics["progress"] = plan.frac
    if cfg.task_schedule is not None or cfg.reward_schedule is not None:
        metrics["curriculum/stage"] = float(st.stage)
    if st.adaptive is not None:
        new, reason = adapt_group_size(st.adaptive, metrics["frac_reward_zero_std"], cfg.adaptive_grow_above,
                                       cfg.adaptive_shrink_below, cfg.adaptive_patience, tuple(cfg.group_size_bounds))
        if reason is not None:
            st.changes.append((run.step, st.adaptive.G, new.G, reason))
            metrics["group_size/reason"] = reason
            log.info("step %d: adaptive group size: %s", run.step, reason)
        metrics["group_size/next"] = float(new.G)
        st.adaptive = new


def after_eval(run, metrics: dict) -> None:
    """Curriculum by accuracy: held-out greedy accuracy on the current stage's task; advance when it reaches the bar."""
    cfg, st = run.cfg, state(run)
    if cfg.curriculum_by != "accuracy" or (cfg.task_schedule is None and cfg.reward_schedule is None):
        return
    from grpo_kit.data.tasks import heldout_split
    from grpo_kit.eval.inference import greedy_accuracy

    names = tasks_at(cfg, 0.0, st) or [cfg.task]
    from grpo_kit.model.sampling import chat_items

    items = chat_items([it for n in names for it in heldout_split(n)[:cfg.eval_size // len(names) or 1]],
                       run.tokenizer, cfg.chat_template)
    acc = greedy_accuracy(run.policy, run.tokenizer, items, max(cfg.max_completion_length, 1))
    metrics["curriculum/accuracy"] = acc
    last = max(len(cfg.task_schedule or []), len(cfg.reward_schedule or [])) - 1
    if acc >= cfg.curriculum_accuracy and st.stage < last:
        st.stage += 1
        metrics["curriculum/reason"] = f"held-out accuracy {acc:.3f} >= {cfg.curriculum_accuracy}: stage {st.stage}"
        log.info("step %d: curriculum: %s", run.step, metrics["curriculum/reason"])
