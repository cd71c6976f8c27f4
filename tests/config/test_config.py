import dataclasses
import math
import sys
import uuid

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.rewards.judges import check_reward_spec


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
        check_config(GRPOConfig(**changes))


def test_unknown_field_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="unknown config field"):
        GRPOConfig.from_yaml_text("num_generation: 4")
    (tmp_path / "bad.yaml").write_text("a: [1,")
    with pytest.raises(ConfigError, match="not valid YAML"):
        GRPOConfig.from_yaml(tmp_path / "bad.yaml")


EXPORTED = GRPOConfig(num_prompts=6, num_generations=4, max_completion_length=12, temperature=0.8,
                      scale_rewards="batch", loss_type="dr_grpo", beta=0.02, epsilon=0.15, epsilon_high=0.3,
                      delta=1.8, importance_sampling_level="sequence", num_iterations=3,
                      mask_truncated_completions=True, learning_rate=5e-5, weight_decay=0.01, lr_schedule="cosine",
                      warmup_steps=7, max_grad_norm=0.5, steps=40, seed=11, reward_funcs=["exact_answer", "format"],
                      reward_weights=[1.0, 0.5], advantage_estimator="normalize_then_sum", micro_batch_size=8,
                      gradient_checkpointing=True, device="cpu")


@pytest.fixture(scope="module")
def trl_args(tmp_path_factory):
    import trl

    return trl.GRPOConfig(**trl_kwargs(EXPORTED), output_dir=str(tmp_path_factory.mktemp("trl")))


def test_trl_reads_back_every_exported_value(trl_args):
    a, c = trl_args, EXPORTED
    assert a.num_generations == c.num_generations
    assert a.max_completion_length == c.max_completion_length
    assert a.temperature == c.temperature
    assert (a.top_k, a.top_p, a.min_p, a.repetition_penalty) == (0, 1.0, None, 1.0)  # plain sampling, as the kit
    assert a.scale_rewards == c.scale_rewards
    assert a.multi_objective_aggregation == c.advantage_estimator
    assert a.reward_weights == c.reward_weights
    assert a.loss_type == c.loss_type
    assert a.beta == c.beta
    assert a.use_bias_correction_kl is False  # the kit's KL term is not importance-weighted
    assert a.epsilon == c.epsilon
    assert a.epsilon_high == c.epsilon_high
    assert a.delta == c.delta
    assert a.importance_sampling_level == c.importance_sampling_level
    assert a.num_iterations == c.num_iterations
    assert a.mask_truncated_completions is c.mask_truncated_completions
    assert a.entropy_coef == c.entropy_coef
    assert a.learning_rate == c.learning_rate
    assert a.weight_decay == c.weight_decay
    assert (str(a.optim.value), a.adam_beta1, a.adam_beta2, a.adam_epsilon) == ("adamw_torch", 0.9, 0.999, 1e-8)
    assert a.lr_scheduler_type.value == "cosine"
    assert a.get_warmup_steps(a.max_steps) == c.warmup_steps  # optimizer updates in both
    assert a.max_grad_norm == c.max_grad_norm
    assert a.max_steps == c.steps * c.num_iterations  # TRL counts optimizer updates: 3 per sampled batch
    assert a.seed == c.seed
    assert a.per_device_train_batch_size == c.micro_batch_size
    assert a.gradient_accumulation_steps == c.batch_size // c.micro_batch_size
    assert a.steps_per_generation == a.gradient_accumulation_steps
    assert a.generation_batch_size == c.batch_size  # one generated batch of P*G rows per kit step
    assert a.activation_checkpointing is True and a.gradient_checkpointing is True
    assert a.use_cpu is True and a.bf16 is False  # the kit's bf16 applies on CUDA only


@pytest.mark.parametrize("schedule,warmup", [("cosine", 7), ("cosine", 0), ("constant", 5), ("constant", 0)])
def test_lr_schedule_is_transformers_schedule_per_optimizer_update(schedule, warmup, tmp_path):
    import torch
    import trl
    from transformers import get_scheduler

    from grpo_kit.loop.train import lr_lambda

    cfg = EXPORTED.replace(lr_schedule=schedule, warmup_steps=warmup)
    a = trl.GRPOConfig(**trl_kwargs(cfg), output_dir=str(tmp_path))
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    theirs = get_scheduler(a.lr_scheduler_type, opt, num_warmup_steps=a.get_warmup_steps(a.max_steps),
                           num_training_steps=a.max_steps)
    ours = lr_lambda(cfg)
    for update in range(a.max_steps):
        assert abs(ours(update) - opt.param_groups[0]["lr"]) < 1e-6, update  # float32 cosine: within 1e-7
        opt.step()
        theirs.step()


@pytest.mark.parametrize("changes,message", [
    ({"temperature": [0.7, 1.0]}, "one temperature"),
    ({"kl_estimator": "k2"}, "k3 only"),
    ({"advantage_estimator": "rloo"}, "no such estimator"),
    ({"loss_type": "bnpo", "micro_batch_size": 8}, "shuffles rows across micro-batches"),
    ({"entropy_coef": 0.01, "micro_batch_size": 8}, "shuffles rows across micro-batches"),
])
def test_to_trl_refuses_what_trl_cannot_express(changes, message):
    with pytest.raises(ConfigError, match=message):
        trl_kwargs(GRPOConfig(num_prompts=4, num_generations=4, **changes).validate())


def test_to_trl_keeps_shuffle_independent_micro_batches():
    for loss_type in ("grpo", "dr_grpo", "dapo"):
        d = trl_kwargs(GRPOConfig(num_prompts=4, num_generations=4, loss_type=loss_type, micro_batch_size=8))
        assert d["gradient_accumulation_steps"] == 2
    assert trl_kwargs(GRPOConfig(loss_type="bnpo", entropy_coef=0.1))["per_device_train_batch_size"] == 128


@pytest.mark.parametrize("changes,message", [
    ({"advantage_estimator": "pairwise"}, r"pairwise_judges=\[\]: is empty; advantage_estimator='pairwise' needs"),
    ({"pairwise_judges": ["correctness"]}, "pairwise_judges.*is set but advantage_estimator='grpo' does not use it"),
    ({"advantage_estimator": "pairwise", "pairwise_judges": ["fairness"]}, "unknown pairwise judge 'fairness'"),
    ({"advantage_estimator": "pairwise", "pairwise_judges": ["correctness"], "pairwise_weights": [1.0, 2.0]},
     "pairwise_weights.*one finite weight >= 0 per pairwise judge \\(1\\)"),
    ({"advantage_estimator": "pairwise", "pairwise_judges": ["correctness"], "pairwise_ensemble": "median"},
     "pairwise_ensemble.*'mean' or 'vote'"),
    ({"advantage_estimator": "process"}, "step_judge='column_sums'.*task='add2' has no scratchpad.*add2s"),
    ({"advantage_estimator": "process", "task": "add2s", "step_judge": "checker"}, "unknown step_judge 'checker'"),
    ({"advantage_estimator": "hybrid_gae", "hybrid_weight": 1.5},
     r"hybrid_weight=1.5: must be a finite number in \[0, 1\]"),
    ({"advantage_estimator": "hybrid_gae", "value_lr": 0.0}, "value_lr=0.0: must be a finite number > 0"),
    ({"advantage_estimator": "hybrid_gae", "replay_fraction": 0.25}, "replay_fraction.*per token"),
])
def test_validate_checks_the_fields_of_the_estimators_beyond_one_scalar(changes, message):
    with pytest.raises(ConfigError, match=message):
        check_config(GRPOConfig(**changes))


@pytest.mark.parametrize("changes", [{"advantage_estimator": "pairwise", "pairwise_judges": ["correctness"]},
                                     {"advantage_estimator": "process", "task": "add2s"},
                                     {"advantage_estimator": "hybrid_gae"}])
def test_estimators_beyond_one_scalar_validate_and_are_refused_by_to_trl(changes):
    cfg = GRPOConfig(**changes).validate()
    with pytest.raises(ConfigError, match="TRL has no such estimator"):
        trl_kwargs(cfg)


def test_every_scalar_estimator_runs_in_the_loop():
    import torch

    from grpo_kit.core.advantages import ESTIMATORS, estimate_advantages
    from grpo_kit.loop.beyond_scalar import ONLINE

    r = torch.tensor([[1.0, 0.0, 0.5, 1.0], [0.0, 0.0, 1.0, 0.25]])  # (P, G)
    for name in ESTIMATORS:
        if name in ONLINE:  # their inputs come from beyond_scalar.py (tests/loop/test_beyond_scalar.py)
            continue
        GRPOConfig(advantage_estimator=name, reward_error_policy="raise").validate()
        adv = estimate_advantages(name, r, objectives=torch.stack([r, 1 - r], -1))  # what grpo_step passes
        assert adv.shape == r.shape and bool(torch.isfinite(adv).all()), name


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "luspo", "vespo"])
def test_trl_only_loss_types_are_refused_with_the_reason(loss_type):
    with pytest.raises(ConfigError, match="TRL 1.16's loss types .* does not implement"):
        GRPOConfig(loss_type=loss_type).validate()


# ---------------------------------------------------------------- Every GRPOConfig field is checked (type and range); random input only ever gives ConfigError.

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


# ---------------------------------------------------------------- Reading, validating, printing and exporting a config runs none of the code it names; only the commands

@pytest.fixture
def named(tmp_path, monkeypatch):
    """Two fresh modules on sys.path: importing the first creates ``imported``; calling the second's factory
    creates ``called``. Returns (config yaml path, marker paths, module names)."""
    a, b = f"d3_import_{uuid.uuid4().hex}", f"d3_factory_{uuid.uuid4().hex}"
    imported, called = tmp_path / "IMPORTED", tmp_path / "CALLED"
    (tmp_path / f"{a}.py").write_text(f"open({str(imported)!r}, 'w').close()\n"
                                      f"def reward(prompts, completions, **_):\n    return [0.0] * len(completions)\n")
    (tmp_path / f"{b}.py").write_text(f"def factory(**_):\n    open({str(called)!r}, 'w').close()\n"
                                      f"    return lambda prompts, completions, **kw: [1.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"reward_funcs: ['{a}:reward', {{function: '{b}:factory', args: {{}}}}]\n"
                   f"steps: 1\nnum_prompts: 1\nnum_generations: 2\neval_every: 0\neval_size: 2\nthreads: 1\n"
                   f"device: cpu\nmax_completion_length: 4\n")
    yield cfg, (imported, called), (a, b)
    for m in (a, b):
        sys.modules.pop(m, None)


def test_reading_validating_printing_and_exporting_a_config_run_none_of_its_code(named, tmp_path, capsys):
    cfg_file, markers, (a, _) = named
    cfg = GRPOConfig.from_yaml(cfg_file).validate()
    cfg.to_yaml()
    cfg.replace(steps=2)
    verl = tmp_path / "verl.yaml"
    verl.write_text(f"reward_funcs: ['{a}:reward']\n")  # verl names rewards by string only
    assert main(["export-verl", "--config", str(verl)]) == 0
    assert f"{a}:reward" in capsys.readouterr().out
    assert not any(m.exists() for m in markers)


def test_train_imports_and_calls_them_and_export_of_its_run_does_not(named, tmp_path, capsys):
    cfg_file, markers, modules = named
    assert main(["train", "--config", str(cfg_file), "--out", str(tmp_path / "run")]) == 0
    assert all(m.exists() for m in markers)  # train scores with them: imported, the factory called
    for m in markers:
        m.unlink()
    for name in modules:
        sys.modules.pop(name)  # so that importing again would run the module again
    assert main(["export", "--run", str(tmp_path / "run"), "--to", str(tmp_path / "exp")]) == 0
    GRPOConfig.from_yaml(tmp_path / "run" / "config.yaml")  # the run folder's own config, read back
    assert not any(m.exists() for m in markers)


def test_a_module_that_does_not_import_is_refused_when_training_starts(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("reward_funcs: ['no_such_module_d3:f']\nsteps: 1\nnum_prompts: 1\nnum_generations: 2\n"
                   "eval_every: 0\nthreads: 1\ndevice: cpu\n")
    GRPOConfig.from_yaml(cfg)  # the form is right: reading it imports nothing
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot import 'no_such_module_d3'" in err
    assert not (tmp_path / "run" / "config.yaml").exists()  # refused before the run folder got anything


@pytest.mark.parametrize("spec", ["os:", ":system", "os system", "os:sys tem", "1os:system", "os:system()",
                                  {"function": "os;system", "args": {}}, "learned:", "nope"])
def test_malformed_entries_are_refused_by_their_form(spec):
    with pytest.raises(ConfigError, match="reward function"):
        check_reward_spec(spec)
    with pytest.raises(ConfigError, match="reward function"):
        check_config(GRPOConfig(reward_funcs=[spec]))
