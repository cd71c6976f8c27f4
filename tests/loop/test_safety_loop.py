"""Issue 23, training loop and scoring harness: a spent completion budget is a normal end (D5);
judges cannot change each other's inputs (D6); a resume with another ``steps`` says what the
schedules do (D7); a hung reward call has a time limit and ends on one SIGTERM (D11); a reward
function's SystemExit is a named error (D13)."""
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.errors import CheckpointError, RewardError
from grpo_kit.loop import schedules
from grpo_kit.loop.train import latest_checkpoint, setup, train
from grpo_kit.rewards import judges
from grpo_kit.rewards.judges import exact_answer, judge, score_with_policy

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


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
    judge([_vandal, _recorder(seen)], prompts, completions, columns, timeout_s=timeout_s)
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
        score_with_policy([_exits], *args, timeout_s=timeout_s)
    _, _, bad, reasons = score_with_policy([_exits, exact_answer], *args, policy="zero", timeout_s=timeout_s)
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
            judge([hangs], ["p"], ["c"], {}, policy="zero", timeout_s=60)  # not a bad value: the step ends
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
