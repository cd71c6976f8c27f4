import copy
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.errors import CheckpointError, ConfigError, RewardError, TrainingError
from grpo_kit.loop import schedules
from grpo_kit.loop.step import train_step
from grpo_kit.loop.train import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    setup,
    train,
)
from grpo_kit.model.sampling import sample_groups
from grpo_kit.rewards import judges
from grpo_kit.rewards.judges import exact_answer, score

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py); every test of the module

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


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


# ---------------------------------------------------------------- training under bad numbers
# Training under bad numbers: skipped updates leave the weights alone, too many stop the run;
# bad rewards by policy; corrupt, incompatible and half-written checkpoints.

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


def test_skipped_first_steps_advance_the_schedule_without_torchs_warning(small_cfg):
    # every update of steps 1-2 is skipped (NaN) before any optimizer.step(): the schedule still advances one
    # step per training step, and torch's "lr_scheduler.step() before optimizer.step()" warning is not raised
    cfg = small_cfg.replace(threads=1, steps=2, max_consecutive_skips=0)
    run = setup(cfg)
    hook = nan_in_training_forward(run)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*lr_scheduler.step.*")
        history = list(train(cfg, run))
    hook.remove()
    assert [m["skipped"] for m in history] == [1.0, 1.0]
    assert run.scheduler.last_epoch == 2


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


# ================================================================ the loop's safety (issue 23)
# Training loop and scoring harness: a spent completion budget is a normal end (D5); judges cannot
# change each other's inputs (D6); a resume with another ``steps`` says what the schedules do (D7); a
# hung reward call has a time limit and ends on one SIGTERM (D11); a reward function's SystemExit is a
# named error (D13).

def _cfg(**kw):
    base = dict(steps=2, num_prompts=2, num_generations=2, eval_every=0, eval_size=5, checkpoint_every=0,
                threads=1, device="cpu")
    return GRPOConfig(**{**base, **kw})


def _yaml(path: Path, **kw) -> Path:
    base = {"num_prompts": 2, "num_generations": 2, "eval_size": 5, "threads": 1, "eval_every": 0,
            "device": "cpu"}
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in {**base, **kw}.items()))
    return path


# ---------------------------------------------------------------- D5: a spent budget is a normal end

def test_a_run_ended_by_its_completion_budget_exits_0_and_says_so(tmp_path, capsys):
    cfg = _yaml(tmp_path / "c.yaml", steps=10, completion_budget=8)  # 4 completions a step: 2 steps
    code = main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "stopped by" not in err and "--resume" not in err
    assert "completion_budget=8 spent" in out and "after 2 steps" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["stopped_by"] is None and summary["budget_spent"] is True
    assert latest_checkpoint(tmp_path / "run").name == "step-000002"


# ---------------------------------------------------------------- D6: each judge gets its own inputs

def _vandal(prompts, completions, answer, completion_ids=None, **kw):
    """Edits every list it is given, in place and deep."""
    prompts[0] = "HACKED"
    if isinstance(completions[0], list):
        completions[0][0]["content"] = "HACKED"
        prompts[1][0]["content"] = "HACKED"
    else:
        completions[:] = ["HACKED"] * len(completions)
    answer[0] = "HACKED"
    if completion_ids is not None:
        completion_ids[0].append(-1)
    return [0.0] * len(completions)


def _recorder(seen):
    def record(prompts, completions, answer, completion_ids=None, **kw):
        seen.append(json.loads(json.dumps([prompts, completions, answer, completion_ids])))
        return [0.0] * len(completions)
    return record


@pytest.mark.parametrize("timeout_s", [None, 5.0])
@pytest.mark.parametrize("chat", [False, True])
def test_a_judge_that_edits_its_inputs_changes_nothing_for_the_next_judge_or_the_caller(timeout_s, chat):
    if chat:
        prompts = [[{"role": "user", "content": f"p{i}"}] for i in range(3)]
        completions = [[{"role": "assistant", "content": f"c{i}"}] for i in range(3)]
    else:
        prompts, completions = [f"p{i}" for i in range(3)], [f"c{i}" for i in range(3)]
    columns = {"answer": ["1", "2", "3"], "completion_ids": [[1, 2], [3], [4, 5]]}
    before = json.dumps([prompts, completions, columns])
    seen = []
    score([_vandal, _recorder(seen)], prompts, completions, columns, timeout_s=timeout_s, combined=False)
    assert json.dumps([prompts, completions, columns]) == before  # the caller's lists
    assert json.dumps(seen[0]) == json.dumps([prompts, completions, columns["answer"], columns["completion_ids"]])


def test_training_logs_the_samples_a_vandal_judge_was_given(small_cfg):
    cfg = small_cfg.replace(steps=1, num_prompts=2, num_generations=2)
    seen = []
    run = setup(cfg, reward_funcs=[_vandal, _recorder(seen), exact_answer])
    m = next(iter(train(cfg, run)))
    assert "HACKED" not in json.dumps(m["samples"]) and "HACKED" not in json.dumps(seen)
    assert m["samples"]["prompt"] == seen[0][0][0][:200]


# ---------------------------------------------------------------- D13: SystemExit from a judge

def _exits(prompts, completions, **kw):
    sys.exit(3)


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_systemexit_from_a_judge_is_a_reward_error_naming_it(timeout_s):
    args = (["p"], ["c"], {"answer": ["1"]})
    with pytest.raises(RewardError, match=r"reward function '_exits' raised SystemExit: 3"):
        score([_exits], *args, timeout_s=timeout_s)
    _, _, bad, reasons = score([_exits, exact_answer], *args, policy="zero", timeout_s=timeout_s)
    assert bad.all() and "SystemExit" in reasons[0]


def test_train_with_a_judge_that_calls_sys_exit_prints_one_line_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(judges.REWARD_FUNCS, "exits", _exits)
    cfg = _yaml(tmp_path / "c.yaml", steps=2, reward_funcs=["exits"])
    code = main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("grpo-kit: error: reward function '_exits' raised SystemExit: 3")


# ---------------------------------------------------------------- D11: hung reward calls

def test_reward_calls_have_a_finite_time_limit_by_default():
    limit = GRPOConfig().reward_timeout_s
    assert limit is not None and math.isfinite(limit) and limit > 0


def test_a_stop_request_gives_a_running_reward_call_the_grace_period_then_gives_it_up(monkeypatch):
    monkeypatch.setattr(judges, "REWARD_STOP_GRACE_S", 0.3)
    release = threading.Event()

    def hangs(prompts, completions, **kw):
        release.wait(30)
        return [0.0] * len(completions)
    try:
        judges.request_stop()
        t0 = time.monotonic()
        with pytest.raises(judges.StopRequested, match="'hangs' was still running"):
            score([hangs], ["p"], ["c"], {}, policy="zero", timeout_s=60)  # not a bad value: the step ends
        assert time.monotonic() - t0 < 5
    finally:
        judges.clear_stop()
        release.set()


def test_sigterm_during_a_hung_reward_call_keeps_the_last_step_and_resumes_exactly(tmp_path, monkeypatch):
    """The step given up is undone (random generators put back), so its checkpoint resumes as a straight run."""
    monkeypatch.setattr(judges, "REWARD_STOP_GRACE_S", 0.2)
    release, calls = threading.Event(), []

    def sometimes_hangs(prompts, completions, answer, **kw):
        calls.append(1)
        if len(calls) == 3:  # step 3: SIGTERM to this process, then hang
            os.kill(os.getpid(), signal.SIGTERM)
            release.wait(30)
        return exact_answer(prompts, completions, answer, **kw)
    cfg = _cfg(steps=4)
    try:
        run = setup(cfg, reward_funcs=[sometimes_hangs])
        history = list(train(cfg, run, out_dir=tmp_path / "a"))
    finally:
        release.set()
    assert run.stopped_by == "SIGTERM" and run.step == 2 and len(history) == 2
    assert history[-1]["stopped"] == 1.0 and latest_checkpoint(tmp_path / "a").name == "step-000002"
    assert len((tmp_path / "a" / "history.jsonl").read_text().splitlines()) == 2
    resumed = setup(cfg, reward_funcs=[exact_answer])
    list(train(cfg, resumed, out_dir=tmp_path / "a", resume=True))
    straight = setup(cfg, reward_funcs=[exact_answer])
    list(train(cfg, straight))
    a, b = resumed.policy.state_dict(), straight.policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "the resumed run differs from a straight one"


HANGS = r"""
import sys, time
from grpo_kit import judges
from grpo_kit.cli import main

calls = []
def hangs(prompts, completions, answer, **kw):
    calls.append(1)
    print("scoring", len(calls), flush=True)
    if len(calls) == 2:
        time.sleep(600)  # a stuck network call
    return judges.exact_answer(prompts, completions, answer, **kw)

judges.REWARD_FUNCS["hangs"] = hangs
sys.exit(main(sys.argv[1:]))
"""


def test_one_sigterm_ends_a_cli_run_stuck_in_a_reward_call_within_the_grace_period(tmp_path):
    cfg = _yaml(tmp_path / "c.yaml", steps=50, checkpoint_every=0, reward_funcs=["hangs"])
    p = subprocess.Popen([sys.executable, "-c", HANGS, "train", "--config", str(cfg), "--out", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    try:
        for line in p.stdout:
            if line.startswith("scoring 2"):
                break
        time.sleep(0.5)  # inside the hung call
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)  # once
        _, err = p.communicate(timeout=judges.REWARD_STOP_GRACE_S + 25)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert took < judges.REWARD_STOP_GRACE_S + 15
    assert "'hangs' was still running" in err and "stopped by SIGTERM after step 1 of 50" in err
    assert "Traceback" not in err
    assert latest_checkpoint(tmp_path / "run").name == "step-000001"
    assert len((tmp_path / "run" / "history.jsonl").read_text().splitlines()) == 1
    assert not (tmp_path / "run" / ".grpo-kit.lock").exists()


# ---------------------------------------------------------------- D7: resume with another steps

def test_resume_changes_lists_every_schedule_that_moves_at_the_resumed_step():
    old = _cfg(steps=4, lr_schedule="cosine", samples_per_step=4, group_size_schedule=[[0.0, 4], [0.5, 2]])
    new = old.replace(steps=16)
    changes = schedules.resume_changes(old, new, 2)  # frac 0.5 -> 0.125: G 2 -> 4, the cosine goes back up
    assert [c.split(" ")[0] for c in changes] == ["learning", "group", "prompts"]
    assert "group size G 2 -> 4" in changes and "prompts per step P 2 -> 1" in changes
    assert schedules.resume_changes(old, old, 2) == []
    flat = _cfg(steps=4, lr_schedule="constant")
    assert schedules.resume_changes(flat, flat.replace(steps=16), 4) == []


def test_resume_with_more_steps_refuses_a_jump_in_the_cosine_rate_unless_allowed(tmp_path, caplog):
    cfg = _cfg(steps=2)  # cosine: the rate at step 2 of 2 is 0, at step 2 of 4 half the peak
    list(train(cfg, setup(cfg), out_dir=tmp_path))
    more = cfg.replace(steps=4)
    with pytest.raises(CheckpointError, match=r"steps 2 -> 4 .*learning rate 0 -> 0.00015.*allow-schedule-change"):
        list(train(more, setup(more), out_dir=tmp_path, resume=True))
    assert latest_checkpoint(tmp_path).name == "step-000002"  # nothing trained
    run = setup(more)
    list(train(more, run, out_dir=tmp_path, resume=True, allow_schedule_change=True))
    assert run.step == 4 and "learning rate 0 -> 0.00015 (allowed)" in caplog.text


def test_resume_with_more_steps_that_moves_no_schedule_goes_ahead(tmp_path):
    cfg = _cfg(steps=2, lr_schedule="constant")
    list(train(cfg, setup(cfg), out_dir=tmp_path))
    run = setup(cfg.replace(steps=3))
    list(train(cfg.replace(steps=3), run, out_dir=tmp_path, resume=True))
    assert run.step == 3


def test_cli_resume_with_more_steps_is_one_line_then_the_flag_allows_it(tmp_path, capsys):
    cfg = _yaml(tmp_path / "c.yaml", steps=2)
    out = str(tmp_path / "run")
    assert main(["train", "--config", str(cfg), "--out", out]) == 0
    capsys.readouterr()
    assert main(["train", "--config", str(cfg), "--out", out, "--steps", "3", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "learning rate 0 -> " in err[0] and "--allow-schedule-change" in err[0]
    assert main(["train", "--config", str(cfg), "--out", out, "--steps", "3", "--resume",
                 "--allow-schedule-change"]) == 0
    assert "learning rate 0 -> " in capsys.readouterr().err
    assert len((tmp_path / "run" / "history.jsonl").read_text().splitlines()) == 3
