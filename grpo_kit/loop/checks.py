"""A config's names checked against the kit's registries, before anything is loaded.

``GRPOConfig.validate()`` checks what a config says by itself (types, ranges, the rules between
fields) and imports nothing of the kit. What a config *names* (a task, reward functions, an
advantage estimator, step and pairwise judges, LoRA target modules, schedules and curricula) is
checked here, against the registries of the layers below: :func:`check_config` is what ``setup()``
and every CLI command run first. Names are checked by their form only: a ``"package.module:function"``
is not imported (importing runs its code); the commands that score import it. The dataset is looked up
without being read: a file's type, a folder's form, and for a Hub name while offline the local cache.
"""
from __future__ import annotations

from grpo_kit.config import GRPOConfig
from grpo_kit.core.advantages import ESTIMATORS
from grpo_kit.data.sources import check_source, hub_reachable, source_of
from grpo_kit.data.tasks import TASKS, task_names
from grpo_kit.loop.beyond_scalar import check_pairwise_judge, check_step_judge
from grpo_kit.loop.schedules import check_schedule_names, samples_per_step
from grpo_kit.model.lora import check_lora
from grpo_kit.rewards.judges import check_reward_spec


def check_config(cfg: GRPOConfig) -> GRPOConfig:
    """``cfg.validate()``, then every name the config gives; a :class:`ConfigError` names the field.
    Returns ``cfg``."""
    cfg.validate()

    def need(ok, name, rule):
        if not ok:
            cfg.refuse(name, rule)

    names = task_names()
    need(cfg.task in names, "task", f"choose one of {names}")
    need(cfg.task in TASKS or cfg.dataset is not None or cfg.task_schedule is not None, "task",
         f"ships only a held-out split (datasets/{cfg.task}_test.jsonl), no training items: give a training "
         f"file in dataset (e.g. datasets/{cfg.task}_sample.jsonl) or choose a task of {sorted(TASKS)}")
    if cfg.dataset is not None:  # by form and the file system: nothing read; a Hub name offline and not cached: refused
        check_source(source_of(cfg.dataset), cfg.dataset_split, cfg.dataset_config, online=hub_reachable)
    for name in ("dataset_columns", "dataset_split", "dataset_config"):  # here, not in validate(): a YAML config may
        need(getattr(cfg, name) is None or cfg.dataset is not None, name,  # leave dataset to --dataset
             "applies to a dataset, and dataset is None; set dataset or remove it")
    for f in [*cfg.reward_funcs, *cfg.gold_reward_funcs]:
        check_reward_spec(f)  # by form only: nothing imported
    est = cfg.advantage_estimator
    need(est in ESTIMATORS, "advantage_estimator", "choose " + ", ".join(repr(o) for o in ESTIMATORS))
    if est == "process":
        check_step_judge(cfg.step_judge)  # unknown name, malformed path (nothing imported)
        scratchpad = cfg.task in TASKS and TASKS[cfg.task].scratchpad
        need(cfg.step_judge != "column_sums" or cfg.dataset is not None or cfg.task_schedule is not None
             or scratchpad, "step_judge",
             f"'column_sums' reads the scratchpad task's column sums, and task={cfg.task!r} has no scratchpad; "
             f"use task: add2s, or a step judge for your completions ('package.module:function')")
    for j in cfg.pairwise_judges if est == "pairwise" else ():
        check_pairwise_judge(j)  # names the entry (nothing imported or loaded)
    check_schedule_names(cfg)  # the tasks and reward functions of the curricula
    B = samples_per_step(cfg)
    need(cfg.micro_batch_size is None or B % cfg.micro_batch_size == 0, "micro_batch_size",
         f"must divide the batch B = {'samples_per_step' if cfg.samples_per_step else 'num_prompts*num_generations'}"
         f" = {B} (or None)")
    check_lora(cfg.lora)  # keys, rank, alpha, dropout, target names (checked against the model in setup)
    return cfg
