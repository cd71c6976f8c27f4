"""Every GRPOConfig field is checked (type and range); random input only ever gives ConfigError."""
import dataclasses
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config

FIELDS = [f.name for f in dataclasses.fields(GRPOConfig)]


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_rejects_a_wrong_type_by_name(name):
    # a set is a valid value for no field: each must be named with its value and its rule
    with pytest.raises(ConfigError, match=rf"GRPOConfig\.{name}=\{{'x'\}}: \w"):
        check_config(GRPOConfig(**{name: {"x"}}))


@pytest.mark.parametrize("changes,field,rule", [
    ({"num_generations": "4"}, "num_generations", "whole number >= 2"),
    ({"num_generations": True}, "num_generations", "whole number >= 2"),  # bool is not a count
    ({"num_prompts": 2.0}, "num_prompts", "whole number >= 1"),
    ({"steps": -1}, "steps", ">= 0"),
    ({"log_kl": 1}, "log_kl", "true or false"),
    ({"beta": float("nan")}, "beta", "finite number >= 0"),
    ({"learning_rate": float("inf")}, "learning_rate", "finite number > 0"),
    ({"learning_rate": True}, "learning_rate", "finite number > 0"),
    ({"epsilon": 1.0}, "epsilon", r"in \(0, 1\)"),
    ({"delta": 1.1}, "delta", r"> 1 \+ epsilon_high = 1.2"),
    ({"temperature": [1.0, 0.0]}, "temperature", "> 0"),
    ({"reward_funcs": []}, "reward_funcs", "non-empty list"),
    ({"reward_weights": [1.0, 2.0]}, "reward_weights", "one finite weight per reward function"),
    ({"task": "add9"}, "task", "choose one of"),
    ({"seed": 2**64}, "seed", "2\\*\\*63"),
    ({"num_prompts": 3, "num_generations": 2, "micro_batch_size": 4}, "micro_batch_size", "B = .* = 6"),
    ({"reward_error_policy": "ignore"}, "reward_error_policy", "'raise', 'skip', 'zero'"),
    ({"reward_timeout_s": 0}, "reward_timeout_s", "> 0 \\(or None\\)"),
    ({"max_consecutive_skips": -1}, "max_consecutive_skips", ">= 0"),
    ({"on_bad_row": "drop"}, "on_bad_row", "'raise', 'skip'"),
    ({"reward_error_policy": "skip", "advantage_estimator": "rloo"}, "reward_error_policy",
     "needs advantage_estimator='grpo'"),
    ({"entropy_coef": "0.1"}, "entropy_coef", ">= 0"),
])
def test_bad_values_name_field_value_and_rule(changes, field, rule):
    with pytest.raises(ConfigError, match=rf"GRPOConfig\.{field}=.*: .*{rule}"):
        check_config(GRPOConfig(**changes))


def test_not_a_mapping_and_unknown_keys():
    with pytest.raises(ConfigError, match="mapping"):
        GRPOConfig.from_dict([1, 2])
    with pytest.raises(ConfigError, match="unknown config field"):
        GRPOConfig.from_dict({1: 2, "steps": 3})
    with pytest.raises(ConfigError, match="unknown config field"):
        GRPOConfig().replace(step=3)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from(["group", "batch", "none", "dapo", "token", "sequence", "cosine", "cpu",
                                     "skip", "zero", "raise", "add1", "exact_answer", "format", ""]))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=3), scalars, max_size=2))
config_dicts = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config_dicts)
def test_random_dicts_only_ever_raise_config_error(d):
    try:
        cfg = GRPOConfig.from_dict(d)
    except ConfigError:
        return
    # it validated: it must survive a YAML round trip unchanged
    again = GRPOConfig.from_yaml_text(cfg.to_yaml())
    assert again == cfg


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), values, max_size=4))
def test_random_keys_only_ever_raise_config_error(d):
    try:
        GRPOConfig.from_dict(d)
    except ConfigError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_random_yaml_text_only_ever_raises_config_error(text):
    try:
        GRPOConfig.from_yaml_text(text)
    except ConfigError:
        pass


def test_validating_random_configs_do_occur():
    # guard against the property test passing only because everything is rejected
    ok = GRPOConfig.from_dict({"num_generations": 4, "temperature": [0.5, 1], "beta": 0, "delta": 2,
                               "reward_timeout_s": 1.5, "reward_error_policy": "skip"})
    assert GRPOConfig.from_yaml_text(ok.to_yaml()) == ok and math.isclose(ok.delta, 2)
    assert yaml.safe_load(ok.to_yaml())["reward_error_policy"] == "skip"
