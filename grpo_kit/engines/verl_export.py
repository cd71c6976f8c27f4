"""The kit's run for verl (0.9.1): the reward function behind verl's custom reward interface, and the command.

verl loads a custom reward function from a file (``reward.custom_reward_function.path`` and
``.name``; this file and ``compute_score``) and its reward manager calls it once per completion
with keyword arguments (``verl/experimental/reward_loop/reward_manager/naive.py``)::

    compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)

``solution_str`` is the decoded completion, ``ground_truth`` the row's ``reward_model.ground_truth``
(the kit's ``answer``), ``extra_info`` the row's ``extra_info`` dict plus verl's own entries;
``reward_kwargs`` come from ``reward.custom_reward_function.reward_kwargs``, where
``GRPOConfig.to_verl()`` puts the config's ``reward_funcs`` and ``reward_weights``.
:func:`compute_score` runs those kit reward functions on the one completion (the row's
``extra_info`` entries, less verl's, become the dataset columns) and returns their weighted sum,
leaving out a function that returns None (TRL's and the kit's ``nansum``).

verl imports this file by path, outside the package, so it imports the kit absolutely:
``grpo_kit`` must be installed where verl's reward workers run.
"""
from __future__ import annotations

import math
import shlex

REWARD_NAME = "compute_score"
VERL_ENTRIES = ("num_turns", "rollout_reward_scores", "index", "split", "tools_kwargs", "interaction_kwargs")
"""Keys verl itself writes into ``extra_info``; they are not dataset columns."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, reward_funcs=None, reward_weights=None,
                  **kwargs) -> float:
    """The weighted sum of the kit reward functions ``reward_funcs`` (default ``["math_answer"]``) on one
    completion ``solution_str`` whose reference answer is ``ground_truth``."""
    from grpo_kit.rewards.resolve import get_reward_funcs

    funcs = get_reward_funcs(list(reward_funcs or ["math_answer"]))
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(funcs)
    columns = {k: [v] for k, v in (extra_info or {}).items() if k not in VERL_ENTRIES}
    columns["answer"] = [str(ground_truth)]
    total = 0.0
    for f, w in zip(funcs, weights):
        value = f(prompts=[""], completions=[solution_str], **columns)[0]
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
    """``python3 -m verl.trainer.main_ppo`` with ``overrides`` (from ``GRPOConfig.to_verl()``) and the data
    files, one override per line."""
    pairs = {**overrides, "data.train_files": train_files, "data.val_files": val_files}
    lines = ["python3 -m verl.trainer.main_ppo"] + [f"    {shlex.quote(f'{k}={hydra_value(v)}')}" for k, v in pairs.items()]
    return " \\\n".join(lines)
