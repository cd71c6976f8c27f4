"""Reward-function specs -> functions: the one place where a ``reward_funcs`` entry (a shipped name,
``"package.module:function"``, a factory with arguments, a saved judge ``"learned:DIR"`` or a served
one ``"remote:URL"``) becomes a callable. This imports and calls what an entry names, so it runs
code; ``judges.check_reward_spec`` checks an entry's form without that (config validation uses it).
It sits above ``judges``, ``learned_judge`` and ``remote``, which know nothing of each other.
"""
from __future__ import annotations

from typing import Sequence

from grpo_kit.errors import CheckpointError, ConfigError
from grpo_kit.rewards.judges import (
    REWARD_FUNCS,
    RewardFunc,
    check_reward_spec,
    import_object,
    text_view,
)
from grpo_kit.rewards.learned_judge import learned_reward
from grpo_kit.rewards.remote import remote_reward


def resolve_reward_func(spec) -> RewardFunc:
    """One ``reward_funcs`` entry -> a callable.

    - a callable: itself;
    - a name of ``REWARD_FUNCS`` (``"exact_answer"``);
    - ``"package.module:function"``: that function, imported (``"trl.rewards:think_format_reward"``);
    - ``{"function": "package.module:factory", "args": {...}}``: ``factory(**args)``, for reward
      functions built by a factory (``trl.rewards:get_soft_overlong_punishment``);
    - ``"learned:PATH"``: a learned judge saved by ``grpo-kit train-judge`` (loaded once per process;
      see ``learned_judge.learned_reward``);
    - ``"remote:URL"``: a judge served over HTTP with OpenRLHF's remote reward model protocol
      (``grpo-kit serve-judge``; see ``remote.remote_reward``, whose factory form sets the timeout
      and retries).
    Raises :class:`ConfigError` naming the entry and what is wrong. This imports the module and calls the
    factory an entry names, running their code; :func:`check_reward_spec` checks the form without that.
    """
    check_reward_spec(spec)
    if callable(spec):
        return spec
    if isinstance(spec, dict):
        factory = import_object(spec["function"])
        try:
            f = factory(**spec.get("args", {}))
        except TypeError as e:
            raise ConfigError(f"reward function factory {spec['function']!r} rejected args {spec.get('args')}: {e}") from None
    elif isinstance(spec, str) and spec in REWARD_FUNCS:
        return text_view(REWARD_FUNCS[spec])
    elif isinstance(spec, str) and spec.startswith(("learned:", "remote:")):
        return text_view(_judge_from_prefix(spec))
    else:
        f = import_object(spec)
    if not callable(f):
        raise ConfigError(f"reward function {spec!r} is a {type(f).__name__}, not a function")
    return f


def _judge_from_prefix(spec: str) -> RewardFunc:
    """``"learned:PATH"`` or ``"remote:URL"`` -> the reward function; ConfigError naming the entry."""
    kind, _, where = spec.partition(":")
    try:
        if kind == "learned":
            return learned_reward(where)
        return remote_reward(where)
    except CheckpointError as e:
        raise ConfigError(f"reward function {spec!r}: {e}") from None


def get_reward_funcs(names: Sequence) -> list[RewardFunc]:
    """Every ``reward_funcs`` entry resolved (see :func:`resolve_reward_func`)."""
    return [resolve_reward_func(n) for n in names]
