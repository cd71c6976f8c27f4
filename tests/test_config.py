import pytest

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import ConfigError


def test_yaml_round_trip(tmp_path):
    cfg = GRPOConfig(num_generations=4, epsilon_high=0.28, temperature=[0.7, 1.0], reward_weights=[1.0])
    cfg.to_yaml(tmp_path / "c.yaml")
    assert GRPOConfig.from_yaml(tmp_path / "c.yaml") == cfg


@pytest.mark.parametrize("changes,field", [
    ({"num_generations": 1}, "num_generations"),
    ({"micro_batch_size": 5}, "micro_batch_size"),
    ({"epsilon_high": 0.1}, "epsilon_high"),
    ({"beta": -0.1}, "beta"),
    ({"loss_type": "ppo"}, "loss_type"),
    ({"scale_rewards": "zscore"}, "scale_rewards"),
])
def test_bad_values_name_the_field(changes, field):
    with pytest.raises(ConfigError, match=f"GRPOConfig.{field}="):
        GRPOConfig(**changes).validate()


def test_unknown_field_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="unknown config field"):
        GRPOConfig.from_yaml_text("num_generation: 4")
    (tmp_path / "bad.yaml").write_text("a: [1,")
    with pytest.raises(ConfigError, match="not valid YAML"):
        GRPOConfig.from_yaml(tmp_path / "bad.yaml")


def test_to_trl_uses_trl_names():
    d = GRPOConfig(num_generations=4, micro_batch_size=16).to_trl()
    assert d["num_generations"] == 4 and d["gradient_accumulation_steps"] == 4
    trl = pytest.importorskip("trl")
    trl.GRPOConfig(output_dir="/tmp/grpo-kit-trl-check", use_cpu=True, **d)
