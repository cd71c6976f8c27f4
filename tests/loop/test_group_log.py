"""log_completions: every group of a logged step on record in completions.jsonl (TRL's name), one
row per completion; resume and --overwrite keep it in step with history.jsonl; the dashboard's
group table pages through the latest step's groups."""
import json

import pandas as pd
import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.core.metrics import completion_rows
from grpo_kit.loop.train import setup, train
from grpo_kit.view.dashboard import Dashboard, groups_of


def test_completion_rows_by_hand():
    rewards = torch.tensor([[1.0, 0.0], [0.5, float("nan")]])  # (P, G) = (2, 2)
    adv = torch.tensor([[0.7, -0.7], [0.0, 0.0]])
    per_func = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.5, 0.0], [0.0, 1.0]])  # (B, K) = (4, 2)
    gold = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    rows = completion_rows(7, ["1+1=", "1+1=", "2+2=", "2+2="], ["2", "3", "4", "x"], rewards, adv, per_func,
                           ["exact_answer", "format"], gold, ["exact_answer"])
    assert rows[0] == {"step": 7, "group": 0, "index": 0, "prompt": "1+1=", "completion": "2", "reward": 1.0,
                       "advantage": pytest.approx(0.7), "rewards/exact_answer": 1.0, "rewards/format": 0.0,
                       "gold_rewards/exact_answer": 1.0}
    assert [(r["group"], r["index"], r["completion"]) for r in rows] == [(0, 0, "2"), (0, 1, "3"), (1, 0, "4"), (1, 1, "x")]
    assert rows[3]["reward"] is None and rows[3]["rewards/format"] == 1.0  # NaN -> None: valid JSON
    assert len(completion_rows(7, ["a"] * 4, ["b"] * 4, rewards, adv, per_func, ["f", "g"], max_groups=1)) == 2
    per_token = adv[..., None].expand(2, 2, 3)  # (P, G, T): the mean over tokens
    assert completion_rows(7, ["a"] * 4, ["b"] * 4, rewards, per_token, per_func, ["f", "g"])[1]["advantage"] == \
        pytest.approx(-0.7)
    groups = groups_of(rows)
    assert [g["prompt"] for g in groups] == ["1+1=", "2+2="] and groups[1]["completions"] == ["4", "x"]


def _cfg(**kw):
    base = dict(steps=3, num_prompts=3, num_generations=2, eval_every=0, eval_size=4, checkpoint_every=1,
                threads=1, device="cpu", log_completions=True, gold_reward_funcs=["format"])
    return GRPOConfig(**{**base, **kw})


def _rows(out):
    return [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]


def test_a_train_run_writes_every_group_of_every_step(tmp_path):
    cfg = _cfg()
    yielded = list(train(cfg, setup(cfg), out_dir=tmp_path / "run"))
    # dtype: else pandas reads the completion "111" as the number 111
    df = pd.read_json(tmp_path / "run" / "completions.jsonl", lines=True, dtype={"prompt": str, "completion": str})
    assert len(df) == 3 * 3 * 2  # steps x prompts x group size
    assert df.groupby("step").size().tolist() == [6, 6, 6]
    assert {"prompt", "completion", "reward", "advantage", "rewards/exact_answer", "gold_rewards/format_reward"} <= set(df.columns)
    # a group's advantages are its rewards' z-scores (scale_rewards='group'): they sum to 0
    assert df.groupby(["step", "group"])["advantage"].sum().abs().max() < 1e-5
    assert all(len(m["groups"]) == 6 for m in yielded)  # the caller (a dashboard) gets them too ...
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert not any("groups" in m for m in history)  # ... and the history does not
    assert df[df.step == 1].completion.tolist() == [r["completion"] for r in yielded[0]["groups"]]


def test_every_n_steps_and_at_most_k_groups(tmp_path):
    cfg = _cfg(steps=4, log_completions_every=2, log_completions_max_groups=1)
    list(train(cfg, setup(cfg), out_dir=tmp_path / "run"))
    rows = _rows(tmp_path / "run")
    assert [(r["step"], r["group"]) for r in rows] == [(2, 0), (2, 0), (4, 0), (4, 0)]
    cfg = _cfg(log_completions=False)
    list(train(cfg, setup(cfg), out_dir=tmp_path / "off"))
    assert not (tmp_path / "off" / "completions.jsonl").exists()


def test_resume_and_overwrite_keep_the_log_in_step_with_the_history(tmp_path):
    cfg = _cfg(steps=4)
    out = tmp_path / "run"
    first = setup(cfg)
    list(train(cfg, first, out_dir=out, should_stop=lambda: first.step >= 2))
    assert [r["step"] for r in _rows(out)] == [1] * 6 + [2] * 6
    # a step written after the last checkpoint (a kill between the log line and the checkpoint) is dropped
    with open(out / "completions.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "group": 0, "index": 0, "prompt": "p", "completion": "stale"}) + "\n")
    second = setup(cfg)
    list(train(cfg, second, out_dir=out, resume=True))
    rows = _rows(out)
    assert [r["step"] for r in rows] == [s for s in (1, 2, 3, 4) for _ in range(6)]  # nothing twice, nothing lost
    assert "stale" not in {r["completion"] for r in rows}
    straight = setup(cfg)
    list(train(cfg, straight, out_dir=tmp_path / "straight"))
    assert _rows(tmp_path / "straight") == rows  # the resumed run logs what a straight run logs
    from grpo_kit.data.runfolder import check_out_folder
    check_out_folder(out, overwrite=True)  # --overwrite: the log is the run's own file
    assert not (out / "completions.jsonl").exists()


def test_the_dashboard_pages_through_the_latest_steps_groups():
    pytest.importorskip("anywidget")
    rows = [{"step": 1, "group": g, "index": i, "prompt": f"p{g}", "completion": f"c{g}{i}", "reward": float(i),
             "advantage": 1.0 - 2 * i} for g in range(3) for i in range(2)]
    dash = Dashboard(total_steps=2, live=True, min_interval_s=0.0)
    dash.update({"step": 1, "reward": 0.5, "samples": groups_of(rows)[0], "groups": rows}, variant="g")
    assert dash.group_picker.max == 2 and "group 0 of 3" in dash.table.value and "c01" in dash.table.value
    dash.group_picker.value = 2
    assert "group 2 of 3" in dash.table.value and "p2" in dash.table.value and "c21" in dash.table.value
    # without log_completions only the first group is there: nothing to page
    dash.update({"step": 2, "reward": 0.5, "samples": groups_of(rows)[1]}, variant="g")
    assert dash.group_picker.max == 0 and "p1" in dash.table.value and "group 0 of" not in dash.table.value
