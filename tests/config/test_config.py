import pytest

from grpo_kit.config import GRPOConfig
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config


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
