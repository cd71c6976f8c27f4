import copy
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import CheckpointError, ConfigError, RewardError, TrainingError
from grpo_kit.loop.step import train_step
from grpo_kit.loop.train import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    setup,
    train,
)
from grpo_kit.model.sampling import sample_groups
from grpo_kit.rewards.judges import exact_answer


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


# ---------------------------------------------------------------- Training under bad numbers: skipped updates leave the weights alone, too many stop the run;

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py)


def _model_weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def nan_in_training_forward(run):
    """A hook that makes the logits NaN whenever gradients are on: sampling works, every loss is NaN."""
    def poison(module, inputs, out):
        return out * float("nan") if torch.is_grad_enabled() else out
    return run.policy.lm_head.register_forward_hook(poison)


def one_step(run, **kw):
    """Train ``run`` for one step of its own config, then close the loop (its lock and signal handlers)."""
    steps = train(run, **kw)
    next(steps)
    steps.close()


def test_nan_loss_skips_the_update_and_leaves_weights_and_optimizer_alone(small_cfg):
    cfg = small_cfg.replace(threads=1, steps=3, max_consecutive_skips=0)
    run = setup(cfg)
    one_step(run)  # one real update, so the optimizer has state
    before, opt_before = _model_weights(run.policy), copy.deepcopy(run.optimizer.state_dict())
    hook = nan_in_training_forward(run)
    history = list(train(cfg, run))
    hook.remove()
    assert [m["skipped"] for m in history] == [1.0, 1.0]
    assert all(m["loss"] != m["loss"] for m in history)  # NaN loss logged
    assert _same(before, _model_weights(run.policy))
    after = run.optimizer.state_dict()["state"]
    assert all(torch.equal(opt_before["state"][k]["exp_avg"], after[k]["exp_avg"]) for k in after)


def test_too_many_skips_in_a_row_stop_with_a_report(small_cfg, tmp_path):
    cfg = small_cfg.replace(threads=1, steps=10, max_consecutive_skips=3, checkpoint_every=1)
    run = setup(cfg)
    one_step(run, out_dir=tmp_path)
    nan_in_training_forward(run)
    with pytest.raises(TrainingError) as e:
        list(train(cfg, run, out_dir=tmp_path))
    msg = str(e.value)
    assert "stopped at step 4: the last 3 updates were all skipped (max_consecutive_skips=3)" in msg
    assert "weights are those of step 1" in msg and "learning_rate" in msg and "step-000003" in msg
    assert [m["skipped"] for m in run.history] == [0.0, 1.0, 1.0, 1.0]


def test_skip_policy_gives_bad_samples_no_gradient(tiny, small_cfg):
    policy, tok = tiny
    cfg = small_cfg.replace(threads=1, log_kl=False)
    prompts = ["12+34=", "5+7=", "40+2=", "9+9="]
    g = torch.Generator().manual_seed(0)
    rollouts = sample_groups(policy, tok, prompts, 4, cfg.max_completion_length, 1.0, g)
    adv = torch.randn(4, 4, generator=g)  # (P, G)
    keep = torch.rand(4, 4, generator=g) > 0.4  # (P, G)
    other = torch.where(keep, adv, adv * 100 - 7)  # differs only where masked
    results = []
    for a in (adv, other):
        model = copy.deepcopy(policy)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        train_step(model, None, opt, rollouts, a, cfg, sample_mask=keep)
        results.append(_model_weights(model))
    assert _same(*results), "a masked sample moved the weights"
    model = copy.deepcopy(policy)
    m = train_step(model, None, torch.optim.AdamW(model.parameters()), rollouts, adv, cfg,
                   sample_mask=torch.zeros(4, 4, dtype=torch.bool))
    assert m["skipped"] == 1.0 and _same(_model_weights(policy), _model_weights(model))


def every_third_is_nan(prompts, completions, answer, **kw):
    good = exact_answer(prompts, completions, answer, **kw)
    return [float("nan") if i % 3 == 0 else r for i, r in enumerate(good)]


@pytest.mark.parametrize("policy", ["skip", "zero"])
def test_bad_reward_policy_in_training_is_counted(small_cfg, policy):
    cfg = small_cfg.replace(threads=1, steps=2, reward_error_policy=policy)
    run = setup(cfg, reward_funcs=[every_third_is_nan])
    history = list(train(cfg, run))
    # B = 16 samples, indices 0, 3, ..., 15 -> 6 NaN rewards a step
    assert [m["rewards/bad_samples"] for m in history] == [6.0, 6.0]
    assert all(m["skipped"] == 0.0 and m["loss"] == m["loss"] and m["reward"] == m["reward"] for m in history)


def test_every_reward_bad_skips_then_stops(small_cfg):
    def always_nan(prompts, completions, **kw):
        return [float("nan")] * len(completions)
    cfg = small_cfg.replace(threads=1, steps=5, reward_error_policy="skip", max_consecutive_skips=2)
    run = setup(cfg, reward_funcs=[always_nan])
    before = _model_weights(run.policy)
    with pytest.raises(TrainingError, match="check the reward functions"):
        list(train(cfg, run))
    assert run.step == 2 and _same(before, _model_weights(run.policy))
    assert [m["rewards/bad_samples"] for m in run.history] == [16.0, 16.0]


# ---------------------------------------------------------------- checkpoints

@pytest.fixture(scope="module")
def _trained_once(tmp_path_factory):
    cfg = GRPOConfig(steps=2, num_prompts=4, num_generations=4, eval_every=1, eval_size=20, checkpoint_every=0,
                     threads=1)
    run = setup(cfg)
    out = tmp_path_factory.mktemp("two_steps")
    list(train(cfg, run, out_dir=out))
    return cfg, run, out


@pytest.fixture
def two_steps(_trained_once, tmp_path):
    """A 2-step run with its output folder; each test gets its own copy of the folder to damage."""
    cfg, run, out = _trained_once
    shutil.copytree(out, tmp_path / "run")
    return cfg, run, tmp_path / "run"


def test_checkpoint_holds_history_and_evals(two_steps):
    cfg, run, out = two_steps
    state = torch.load(latest_checkpoint(out) / "trainer_state.pt", weights_only=True)
    assert state["history"] == run.history and len(state["history"]) == 2
    assert [tuple(e) for e in state["evals"]] == run.evals and [s for s, _ in run.evals] == [0, 1, 2]
    fresh = setup(cfg)
    load_checkpoint(fresh, latest_checkpoint(out))
    assert fresh.history == run.history and fresh.evals == run.evals and fresh.step == 2


@pytest.mark.parametrize("damage,message", [
    (lambda ck, root: (root / "latest").write_text("../../etc"), "not a checkpoint name"),
    (lambda ck, root: (root / "latest").write_text("step-000099"), "does not exist"),
    (lambda ck, root: (ck / "model.safetensors").write_bytes(b"\x00" * 10), "unreadable"),
    (lambda ck, root: (ck / "trainer_state.pt").unlink(), "unreadable"),
    (lambda ck, root: torch.save({"step": 2}, ck / "trainer_state.pt"), "not a grpo-kit trainer state"),
    (lambda ck, root: torch.save([1, 2], ck / "trainer_state.pt"), "not a grpo-kit trainer state"),
    (lambda ck, root: save_file({k: torch.zeros(3) for k in load_file(ck / "model.safetensors")},
                                ck / "model.safetensors"), "does not fit"),
])
def test_damaged_checkpoints_are_clear_errors(two_steps, damage, message):
    cfg, _, out = two_steps
    ck = latest_checkpoint(out)
    damage(ck, out / "checkpoints")
    more = cfg.replace(steps=3)
    with pytest.raises(CheckpointError, match=message):
        list(train(more, setup(more), out_dir=out, resume=True))


def test_a_checkpoint_from_before_a_new_config_field_still_resumes(two_steps):
    cfg, _, out = two_steps
    ck = latest_checkpoint(out)
    state = torch.load(ck / "trainer_state.pt", weights_only=True)
    del state["config"]["reward_error_policy"]  # written by an older grpo-kit
    torch.save(state, ck / "trainer_state.pt")
    run = setup(cfg.replace(steps=3))
    list(train(cfg.replace(steps=3), run, out_dir=out, resume=True, allow_schedule_change=True))  # cosine: 0 -> 7.5e-5
    assert run.step == 3


def test_half_written_checkpoints_are_ignored_and_removed(two_steps):
    cfg, run, out = two_steps
    root = out / "checkpoints"
    (root / "step-000009.tmp").mkdir()
    (root / "step-000009.tmp" / "model.safetensors").write_bytes(b"partial")
    (root / "latest.tmp").write_text("step-000009")
    resumed = setup(cfg.replace(steps=3))
    list(train(cfg.replace(steps=3), resumed, out_dir=out, resume=True, allow_schedule_change=True))
    assert resumed.history[:2] == run.history and resumed.step == 3
    assert not list(root.glob("*.tmp")) and latest_checkpoint(out).name == "step-000003"


def test_save_checkpoint_pause_hook_only_fires_on_its_step(two_steps, monkeypatch):
    _, run, out = two_steps
    monkeypatch.setenv("GRPO_KIT_PAUSE_IN_CHECKPOINT", "7")
    assert save_checkpoint(run, out).name == "step-000002"  # would sleep 600 s if it fired


# ---------------------------------------------------------------- Ctrl-C handler

def test_first_ctrl_c_asks_to_stop_second_interrupts_and_the_old_handler_comes_back():
    import os
    import signal
    import threading
    import time

    from grpo_kit.loop.train import StopOnSignals as StopOnSigint

    before = signal.getsignal(signal.SIGINT)
    with StopOnSigint() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs at the next bytecode boundary
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is before

    seen = []
    def in_a_thread():  # signal handlers can only be set from the main thread: do nothing there
        with StopOnSigint() as s:
            seen.append(s.active)
    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert seen == [False] and signal.getsignal(signal.SIGINT) is before
