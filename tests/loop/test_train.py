import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import CheckpointError, ConfigError, RewardError
from grpo_kit.loop.train import latest_checkpoint, setup, train


def _weights(run):
    return {k: v.detach().clone() for k, v in run.policy.state_dict().items()}


def test_exact_resume_matches_straight_run(small_cfg, tmp_path):
    cfg = small_cfg.replace(steps=10, checkpoint_every=5)
    straight = setup(cfg)
    list(train(cfg, straight))

    # the same 10-step run (same cosine schedule), stopped after step 5 with a checkpoint
    first = setup(cfg)
    list(train(cfg, first, out_dir=tmp_path, should_stop=lambda: first.step >= 5))
    assert first.step == 5 and latest_checkpoint(tmp_path).name == "step-000005"
    resumed = setup(cfg)  # a fresh process would start from the base weights
    list(train(cfg, resumed, out_dir=tmp_path, resume=True))

    assert resumed.step == 10
    a, b = _weights(straight), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the straight run"
    assert [m["loss"] for m in straight.history] == [m["loss"] for m in resumed.history]


def test_micro_batches_give_the_same_update(small_cfg):
    cfg = small_cfg.replace(steps=2, loss_type="dapo")
    full, micro = setup(cfg), setup(cfg.replace(micro_batch_size=4))
    list(train(cfg, full))
    list(train(cfg.replace(micro_batch_size=4), micro))
    a, b = _weights(full), _weights(micro)
    for k in a:  # AdamW moves a weight by up to lr = 3e-4 a step whatever its gradient's size, so float rounding
        # of a near-zero gradient can move it by a few 1e-5; a wrong share of the loss moves weights by whole steps
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-4)


def test_corrupt_checkpoint_is_a_clear_error(small_cfg, tmp_path):
    cfg = small_cfg.replace(steps=2)
    list(train(cfg, setup(cfg), out_dir=tmp_path))
    ckpt = latest_checkpoint(tmp_path)
    (ckpt / "trainer_state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="unreadable"):
        list(train(cfg.replace(steps=3), setup(cfg.replace(steps=3)), out_dir=tmp_path, resume=True))


def test_incompatible_checkpoint_names_the_fields(small_cfg, tmp_path):
    cfg = small_cfg.replace(steps=2)
    list(train(cfg, setup(cfg), out_dir=tmp_path))
    other = cfg.replace(steps=3, learning_rate=1e-3)
    with pytest.raises(CheckpointError, match="learning_rate"):
        list(train(other, setup(other), out_dir=tmp_path, resume=True))


def test_reward_function_errors_stop_training_with_its_name(small_cfg):
    def wrong_count(prompts, completions, **kw):
        return [0.0] * (len(completions) - 1)
    run = setup(small_cfg, reward_funcs=[wrong_count])
    with pytest.raises(RewardError, match="wrong_count"):
        list(train(small_cfg, run))


def test_metrics_use_trl_keys(small_cfg):
    cfg = small_cfg.replace(steps=1, eval_every=1)
    m = next(iter(train(cfg, setup(cfg))))
    for k in ("reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "clip_ratio/region_mean",
              "completions/mean_length", "loss", "grad_norm", "learning_rate", "step_time", "accuracy"):
        assert k in m, k


def test_clip_fractions_count_the_later_updates(small_cfg):
    # one update: the ratio is exactly 1, nothing can be clipped; a second update on the same
    # samples with a tiny trust region (GSPO-sized epsilon) must clip some tokens
    one = next(iter(train(small_cfg.replace(steps=1), setup(small_cfg.replace(steps=1)))))
    assert one["clip_ratio/region_mean"] == 0.0
    cfg = small_cfg.replace(steps=1, num_iterations=2, epsilon=3e-4, epsilon_high=4e-4)
    two = next(iter(train(cfg, setup(cfg))))
    assert 0.0 < two["clip_ratio/region_mean"] <= 0.5


# The keys of one step's metrics, in order, with the default config: the dashboard, the diagnostics,
# the fixtures and the notebooks read them, so a refactor of the step must keep them.
STEP_KEYS = ['loss', 'grad_norm', 'learning_rate', 'entropy', 'clip_ratio/low_mean', 'clip_ratio/high_mean',
             'clip_ratio/region_mean', 'skipped', 'kl', 'rewards/bad_samples', 'reward', 'reward_std',
             'frac_reward_zero_std', 'rewards/exact_answer/mean', 'completions/mean_length',
             'completions/min_length', 'completions/max_length', 'completions/clipped_ratio',
             'completions/mean_length_pos_adv', 'completions/mean_length_neg_adv', 'completions/mean_length_right',
             'completions/mean_length_wrong', 'completions/clipped_ratio_wrong', 'completions/distinct_frac',
             'advantages/max_abs', 'samples', 'num_generations', 'num_prompts', 'completions_generated',
             'completions_total', 'progress', 'step', 'step_time']


def test_a_step_logs_the_pinned_metric_keys_in_order():
    from grpo_kit.loop.train import grpo_step

    cfg = GRPOConfig(steps=2, threads=1, eval_size=10, seed=3)
    assert list(grpo_step(setup(cfg))) == STEP_KEYS


def test_train_reads_the_runs_own_config(small_cfg):
    """train(run) trains with run.cfg; train(cfg, run) with another cfg is refused, naming the fields."""
    run = setup(small_cfg)
    with pytest.raises(ConfigError, match=r"differs .* in \['steps'\].*train\(run\)"):
        next(train(small_cfg.replace(steps=small_cfg.steps + 1), run))
    with pytest.raises(TypeError, match="once"):
        next(train(run, run))
    assert run.step == 0  # nothing ran
    metrics = list(train(run))
    assert len(metrics) == small_cfg.steps == run.step
    run2 = setup(small_cfg)
    assert [m["loss"] for m in train(small_cfg, run2)] == [m["loss"] for m in metrics]  # the same computation


def test_every_field_of_a_run_is_declared(small_cfg):
    run = setup(small_cfg)
    with pytest.raises(AttributeError):
        run.variant_optimizers = {}  # state of an experiment lives in its own object (lab/population.Variants)
