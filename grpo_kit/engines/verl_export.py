"""The kit's run for verl (0.9.1): the reward function behind verl's custom reward interface, and the command.

verl loads a custom reward function from a file (``reward.custom_reward_function.path`` and
``.name``; this file and ``compute_score``) and its reward manager calls it once per completion
with keyword arguments (``verl/experimental/reward_loop/reward_manager/naive.py``)::

    compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)

``solution_str`` is the decoded completion, ``ground_truth`` the row's ``reward_model.ground_truth``
(the kit's ``answer``), ``extra_info`` the row's ``extra_info`` dict plus verl's own entries;
``reward_kwargs`` come from ``reward.custom_reward_function.reward_kwargs``, where
``verl_overrides(cfg)`` puts the config's ``reward_funcs`` and ``reward_weights``.
:func:`compute_score` runs those kit reward functions on the one completion (the row's
``extra_info`` entries, less verl's, become the dataset columns) and returns their weighted sum,
leaving out a function that returns None (TRL's and the kit's ``nansum``).

verl imports this file by path, outside the package, so it imports the kit absolutely:
``grpo_kit`` must be installed where verl's reward workers run.
"""
from __future__ import annotations

import math
import shlex
from pathlib import Path

REWARD_NAME = "compute_score"
VERL_ENTRIES = ("num_turns", "rollout_reward_scores", "index", "split", "tools_kwargs", "interaction_kwargs")
"""Keys verl itself writes into ``extra_info``; they are not dataset columns."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, reward_funcs=None, reward_weights=None,
                  **kwargs) -> float:
    """The weighted sum of the kit reward functions ``reward_funcs`` (default ``["math_answer"]``) on one
    completion ``solution_str`` whose reference answer is ``ground_truth``."""
    from grpo_kit.rewards.judges import call_reward
    from grpo_kit.rewards.resolve import get_reward_funcs

    funcs = get_reward_funcs(list(reward_funcs or ["math_answer"]))
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(funcs)
    columns = {k: [v] for k, v in (extra_info or {}).items() if k not in VERL_ENTRIES}
    columns["answer"] = [str(ground_truth)]
    total = 0.0
    for f, w in zip(funcs, weights):
        value = call_reward(f, prompts=[""], completions=[solution_str], **columns)[0]  # an async f awaited
        if value is not None and not math.isnan(float(value)):
            total += float(w) * float(value)
    return total


def verl_rows(items: list[dict], data_source: str = "grpo_kit") -> list[dict]:
    """Kit items -> rows in the layout verl's dataset and reward manager read: ``prompt`` as chat messages,
    ``data_source``, ``reward_model.ground_truth`` (the ``answer``) and the other columns in ``extra_info``
    (they come back to :func:`compute_score` as columns)."""
    rows = []
    for it in items:
        prompt = it["prompt"] if isinstance(it["prompt"], list) else [{"role": "user", "content": it["prompt"]}]
        extra = {k: v for k, v in it.items() if k not in ("prompt", "answer")}
        rows.append({"prompt": prompt, "data_source": data_source,
                     "reward_model": {"style": "rule", "ground_truth": str(it["answer"])}, "extra_info": extra})
    return rows


def hydra_value(v) -> str:
    """A Python value as Hydra override text: null, true/false, numbers, quoted strings in lists."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(f'"{x}"' if isinstance(x, str) else hydra_value(x) for x in v) + "]"
    return str(v)


def verl_command(overrides: dict, train_files: str = "TRAIN.parquet", val_files: str = "VAL.parquet") -> str:
    """``python3 -m verl.trainer.main_ppo`` with ``overrides`` (from ``verl_overrides(cfg)``) and the data
    files, one override per line."""
    pairs = {**overrides, "data.train_files": train_files, "data.val_files": val_files}
    lines = ["python3 -m verl.trainer.main_ppo"] + [f"    {shlex.quote(f'{k}={hydra_value(v)}')}" for k, v in pairs.items()]
    return " \\\n".join(lines)


def verl_overrides(cfg, max_prompt_length: int = 512, rollout: str = "vllm") -> dict:
    """verl 0.9.1 overrides (Hydra dotted keys of ``verl/trainer/config/ppo_trainer.yaml`` -> value) for
    the same objective with ``python3 -m verl.trainer.main_ppo``; ``grpo-kit export-verl`` prints them.

    Mapped: the GRPO advantage (``algorithm.adv_estimator=grpo``; ``scale_rewards`` 'group' /
    'none' -> ``norm_adv_by_std_in_grpo`` true / false), G (``rollout.n``), P (``data.train_batch_size``
    and ``ppo_mini_batch_size``, both counted in prompts: one update per pass over the batch),
    ``num_iterations`` (``ppo_epochs``), ``micro_batch_size`` (``ppo_micro_batch_size_per_gpu``, in
    completions), the clip range (``clip_ratio_low`` / ``clip_ratio_high``), ``delta`` (verl's dual-clip
    ``clip_ratio_c``, which caps the ratio of negative-advantage tokens: the same cap, since with
    ``delta > 1 + epsilon_high`` the cap only binds there; without ``delta`` it is set to 1e9, no cap),
    the KL loss (``use_kl_loss``, ``kl_loss_coef = beta``, ``kl_loss_type`` k1/k2/k3; verl clamps its
    k3 to [-10, 10]), the loss aggregation (``loss_agg_mode``: grpo -> seq-mean-token-mean, dapo ->
    token-mean, dr_grpo -> seq-mean-token-sum-norm with ``loss_scale_factor = max_completion_length``),
    GSPO (``policy_loss.loss_mode=gspo``), ``entropy_coeff``, LoRA (``model.lora_rank``, ``lora_alpha``,
    ``target_modules``; a LoRA dropout is refused), the optimizer (lr, weight decay, grad clip,
    warm-up, cosine or constant), the lengths, sampling (temperature, no top-k/top-p), the model, the seed,
    and the reward: ``compute_score`` of ``grpo_kit/engines/verl_export.py`` with this config's
    ``reward_funcs`` and ``reward_weights`` (``+`` adds keys the default config lacks).

    Refused (ConfigError): an advantage estimator other than 'grpo' or ``scale_rewards='batch'`` (verl's
    GRPO advantage is per group); ``loss_type='bnpo'`` (a mean over each micro-batch's tokens);
    ``mask_truncated_completions``; a list of temperatures; GSPO with ``delta``; reward functions given
    as callables or factories (verl imports them by name); ``num_iterations > 1`` with a cosine or
    warm-up schedule (the kit advances it per optimizer update; verl's count is not checked here); and
    the fields that steer a run over time.
    """
    from grpo_kit.engines import refuse_steering
    from grpo_kit.errors import ConfigError
    from grpo_kit.model.tiny import resolve_model

    def refuse(field_, rule):
        raise ConfigError(f"GRPOConfig.{field_}={getattr(cfg, field_)!r} cannot be exported to verl: {rule}")

    refuse_steering(cfg, "verl")
    if cfg.advantage_estimator != "grpo":
        refuse("advantage_estimator", "export 'grpo' (verl's estimators differ in detail from the kit's others)")
    if cfg.scale_rewards == "batch":
        refuse("scale_rewards", "verl's GRPO advantage normalises per group; use 'group' or 'none'")
    if cfg.loss_type == "bnpo":
        refuse("loss_type", "verl has no per-micro-batch token mean; use 'dapo' (token-mean over the batch), "
                            "'grpo' or 'dr_grpo'")
    if cfg.mask_truncated_completions:
        refuse("mask_truncated_completions", "verl's trainer has no such switch; set it to false")
    if isinstance(cfg.temperature, list):
        refuse("temperature", "verl samples every completion at one temperature; give a single number")
    if cfg.min_p or cfg.repetition_penalty != 1.0:
        refuse("min_p" if cfg.min_p else "repetition_penalty",
               "verl's rollout config has top_k and top_p only; set min_p 0 and repetition_penalty 1.0")
    if cfg.importance_sampling_level == "sequence" and cfg.delta is not None:
        refuse("delta", "verl's GSPO loss has no dual clip; set delta to null for importance_sampling_level "
                        "'sequence'")
    if not all(isinstance(f, str) for f in cfg.reward_funcs):
        refuse("reward_funcs", "verl imports the reward by name: give names or 'package.module:function' strings")
    if cfg.num_iterations > 1 and (cfg.lr_schedule != "constant" or cfg.warmup_steps):
        refuse("num_iterations", "with several updates per batch the kit advances the LR schedule per update; "
                                 "export with num_iterations=1, or lr_schedule='constant' and warmup_steps=0")
    if not (isinstance(max_prompt_length, int) and not isinstance(max_prompt_length, bool)
            and max_prompt_length >= 1):
        raise ConfigError(f"max_prompt_length={max_prompt_length!r}: give the prompt tokens verl reserves (>= 1)")
    actor, rollout_ = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
    reward = "reward.custom_reward_function."
    model = resolve_model(cfg.model, warn=False)
    return {**_verl_lora(cfg, refuse), **{
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.scale_rewards == "group",
        "algorithm.use_kl_in_reward": False,
        "data.train_batch_size": cfg.num_prompts,
        "data.max_prompt_length": max_prompt_length,
        "data.max_response_length": cfg.max_completion_length,
        "data.seed": cfg.seed,
        "actor_rollout_ref.model.path": str(model.resolve()) if isinstance(model, Path) else model,
        "actor_rollout_ref.model.enable_gradient_checkpointing": cfg.gradient_checkpointing,
        rollout_ + "name": rollout,
        rollout_ + "n": cfg.num_generations,
        rollout_ + "temperature": cfg.temperature,
        rollout_ + "top_k": cfg.top_k or -1,  # verl's off is -1
        rollout_ + "top_p": cfg.top_p,
        rollout_ + "seed": cfg.seed,
        actor + "ppo_mini_batch_size": cfg.num_prompts,
        actor + "ppo_micro_batch_size_per_gpu": cfg.micro_batch_size or cfg.batch_size,
        actor + "ppo_epochs": cfg.num_iterations,
        actor + "clip_ratio_low": cfg.epsilon,
        actor + "clip_ratio_high": cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high,
        actor + "clip_ratio_c": 1e9 if cfg.delta is None else cfg.delta,
        actor + "policy_loss.loss_mode": "gspo" if cfg.importance_sampling_level == "sequence" else "vanilla",
        actor + "loss_agg_mode": {"grpo": "seq-mean-token-mean", "dapo": "token-mean",
                                  "dr_grpo": "seq-mean-token-sum-norm"}[cfg.loss_type],
        actor + "loss_scale_factor": cfg.max_completion_length if cfg.loss_type == "dr_grpo" else None,
        actor + "use_kl_loss": cfg.beta > 0,
        actor + "kl_loss_coef": cfg.beta,
        actor + "kl_loss_type": cfg.kl_estimator,
        actor + "entropy_coeff": cfg.entropy_coef,
        actor + "optim.lr": cfg.learning_rate,
        actor + "optim.weight_decay": cfg.weight_decay,
        actor + "optim.clip_grad": cfg.max_grad_norm,
        actor + "optim.lr_warmup_steps": cfg.warmup_steps,
        actor + "optim.lr_scheduler_type": cfg.lr_schedule,
        "trainer.total_training_steps": cfg.steps,
        reward + "path": str(Path(__file__).resolve()),
        reward + "name": REWARD_NAME,
        "+" + reward + "reward_kwargs.reward_funcs": list(cfg.reward_funcs),
        "+" + reward + "reward_kwargs.reward_weights": cfg.reward_weights,
    }}


def _verl_lora(cfg, refuse) -> dict:
    """``lora`` as verl's actor model keys (rank, alpha, target modules); verl has no LoRA dropout."""
    if cfg.lora is None:
        return {}
    from grpo_kit.model.lora import lora_settings

    s = lora_settings(cfg.lora)
    if s["dropout"]:
        refuse("lora", "verl's LoRA has no dropout setting; set lora.dropout to 0")
    return {"actor_rollout_ref.model.lora_rank": s["r"], "actor_rollout_ref.model.lora_alpha": s["alpha"],
            "actor_rollout_ref.model.target_modules": list(s["target_modules"])}
