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

from grpo_kit.errors import ConfigError

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- validation (called by GRPOConfig.validate)

def _is_frac(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0


def _check_entries(name: str, sched, value_ok, value_rule: str) -> None:
    """A schedule is a non-empty list of [fraction, value] with fractions in [0, 1], strictly rising, first 0.0."""
    if not isinstance(sched, list) or not sched:
        raise ConfigError(f"GRPOConfig.{name}={sched!r}: must be a non-empty list of [fraction, value] entries "
                          f"(or None), e.g. [[0.0, ...], [0.5, ...]]")
    prev = None
    for i, e in enumerate(sched):
        where = f"GRPOConfig.{name}[{i}]={e!r}"
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise ConfigError(f"{where}: each entry must be a pair [fraction, value]")
        frac, value = e
        if not _is_frac(frac):
            raise ConfigError(f"{where}: the fraction must be a number in [0, 1] (the share of the run "
                              f"after which the value applies)")
        if i == 0 and frac != 0.0:
            raise ConfigError(f"{where}: the first entry must start at fraction 0.0, so the run starts with a value")
        if prev is not None and frac <= prev:
            raise ConfigError(f"{where}: fractions must rise strictly (the previous entry starts at {prev}); "
                              f"put the entries in order")
        if not value_ok(value):
            raise ConfigError(f"{where}: {value_rule}")
        prev = frac


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_steering(cfg) -> None:
    """Check the steering fields of ``cfg``; raise :class:`ConfigError` naming the field or entry."""
    from grpo_kit.data.tasks import TASKS
    from grpo_kit.rewards.judges import REWARD_FUNCS

    def need(ok, name, rule):
        if not ok:
            raise ConfigError(f"GRPOConfig.{name}={getattr(cfg, name)!r}: {rule}")

    need(cfg.samples_per_step is None or (_is_int(cfg.samples_per_step) and cfg.samples_per_step >= 2),
         "samples_per_step", "must be a whole number >= 2 (or None for num_prompts*num_generations)")
    B = samples_per_step(cfg)
    if cfg.group_size_schedule is not None:
        _check_entries("group_size_schedule", cfg.group_size_schedule, lambda g: _is_int(g) and g >= 2,
                       "the group size must be a whole number >= 2 (a group of one has nothing to compare)")
        for i, (_, g) in enumerate(cfg.group_size_schedule):
            if B % g:
                raise ConfigError(f"GRPOConfig.group_size_schedule[{i}]={cfg.group_size_schedule[i]!r}: G={g} does "
                                  f"not divide samples_per_step={B}, so P = B/G is not whole; pick a divisor of {B} "
                                  f"or change samples_per_step")
    need(isinstance(cfg.adaptive_group_size, bool), "adaptive_group_size", "must be true or false")
    need(isinstance(cfg.group_size_bounds, list) and len(cfg.group_size_bounds) == 2
         and all(_is_int(g) and g >= 2 for g in cfg.group_size_bounds)
         and cfg.group_size_bounds[0] <= cfg.group_size_bounds[1], "group_size_bounds",
         "must be [G_min, G_max], whole numbers >= 2 with G_min <= G_max")
    need(_is_frac(cfg.adaptive_grow_above), "adaptive_grow_above", "must be a fraction in [0, 1]")
    need(_is_frac(cfg.adaptive_shrink_below) and cfg.adaptive_shrink_below < cfg.adaptive_grow_above,
         "adaptive_shrink_below", f"must be a fraction below adaptive_grow_above={cfg.adaptive_grow_above} "
                                  f"(the gap between the two is the hysteresis)")
    need(_is_int(cfg.adaptive_patience) and cfg.adaptive_patience >= 1, "adaptive_patience",
         "must be a whole number >= 1 (steps in a row past a threshold before G changes)")
    if cfg.adaptive_group_size:
        need(cfg.group_size_schedule is None, "adaptive_group_size",
             "cannot be combined with group_size_schedule; choose one way to set G")
        lo, hi = cfg.group_size_bounds
        need(lo <= cfg.num_generations <= hi, "num_generations",
             f"is the starting G of the adaptive rule and must lie within group_size_bounds={cfg.group_size_bounds}")
        for g in adaptive_sizes(cfg):
            if B % g:
                raise ConfigError(f"GRPOConfig.group_size_bounds={cfg.group_size_bounds!r}: the adaptive rule can reach "
                                  f"G={g} (num_generations={cfg.num_generations} doubled/halved), which does not divide "
                                  f"samples_per_step={B}; use powers of two for both")
    elif cfg.group_size_schedule is None and B % cfg.num_generations:
        need(False, "samples_per_step", f"must be a multiple of num_generations={cfg.num_generations}")
    for name, ok, rule in (
            ("task_schedule", lambda v: _task_list(v) is not None and all(t in TASKS for t in _task_list(v)),
             f"the value must name a task or a list of tasks from {sorted(TASKS)}"),
            ("reward_schedule", lambda v: _name_list(v) is not None and all(
                n in REWARD_FUNCS for n in _name_list(v)),
             f"the value must name a reward function or a list of them from {sorted(REWARD_FUNCS)}")):
        if getattr(cfg, name) is not None:
            _check_entries(name, getattr(cfg, name), ok, rule)
    need(cfg.task_schedule is None or cfg.dataset is None, "task_schedule",
         "cannot be combined with a dataset file; the schedule picks built-in tasks")
    need(cfg.curriculum_by in ("fraction", "accuracy"), "curriculum_by", "choose 'fraction' or 'accuracy'")
    need(_is_frac(cfg.curriculum_accuracy), "curriculum_accuracy", "must be a fraction in [0, 1]")
    need(isinstance(cfg.dynamic_sampling, bool), "dynamic_sampling", "must be true or false")
    need(_is_int(cfg.dynamic_max_rounds) and cfg.dynamic_max_rounds >= 1, "dynamic_max_rounds",
         "must be a whole number >= 1 (rounds of P prompts drawn per step at most, the first included)")
    need(_is_frac(cfg.replay_fraction) and cfg.replay_fraction < 1, "replay_fraction",
         "must be a fraction in [0, 1) of each batch's groups taken from the replay buffer")
    need(_is_int(cfg.replay_capacity) and cfg.replay_capacity >= 1, "replay_capacity", "must be a whole number >= 1")
    need(_is_int(cfg.replay_max_age) and cfg.replay_max_age >= 1, "replay_max_age",
         "must be a whole number >= 1 (steps a stored group may wait)")
    need(isinstance(cfg.replay_min_abs_advantage, (int, float)) and not isinstance(cfg.replay_min_abs_advantage, bool)
         and cfg.replay_min_abs_advantage >= 0, "replay_min_abs_advantage", "must be a number >= 0")
    need(cfg.completion_budget is None or (_is_int(cfg.completion_budget) and cfg.completion_budget >= 1),
         "completion_budget", "must be a whole number >= 1 (or None to run cfg.steps steps)")


def _task_list(v) -> list[str] | None:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and v and all(isinstance(t, str) for t in v):
        return list(v)
    return None


_name_list = _task_list


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


def adaptive_sizes(cfg) -> list[int]:
    """Every G the adaptive rule can reach: num_generations doubled/halved within the bounds."""
    lo, hi = cfg.group_size_bounds
    sizes, g = [], cfg.num_generations
    while g // 2 >= lo and g % 2 == 0:
        g //= 2
    while g <= hi:
        if g >= lo:
            sizes.append(g)
        g *= 2
    return sizes


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
    return _task_list(_entry(cfg, cfg.task_schedule, frac, st)) if cfg.task_schedule is not None else None


def rewards_at(cfg, frac: float, st: SteerState) -> list[str] | None:
    """Reward function names this step (None: the run's own reward functions)."""
    return _name_list(_entry(cfg, cfg.reward_schedule, frac, st)) if cfg.reward_schedule is not None else None


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
