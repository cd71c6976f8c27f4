"""The learned judge trains on preference pairs and agrees with held-out preferences above chance."""
import json
import math
import re
from pathlib import Path

import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.data.tasks import get_task
from grpo_kit.errors import CheckpointError, ConfigError, DataError
from grpo_kit.loop.train import train as train_loop
from grpo_kit.rewards.judges import score
from grpo_kit.rewards.learned_judge import (
    METADATA,
    as_reward,
    judge_scores,
    learned_reward,
    load_learned_judge,
    new_learned_judge,
    pairwise_agreement,
    perturbed_groups,
    preference_pairs,
    save_learned_judge,
    split_groups,
    train_learned_judge,
)
from grpo_kit.rewards.pairwise import load_preference_groups
from grpo_kit.rewards.resolve import resolve_reward_func


def test_preference_pairs_from_groups():
    rec = {"prompt": "p", "responses": ["a", "b", "c"],
           "preference_matrix": [[0, 1, 0], [-1, 0, -0.5], [0, 0.5, 0]]}
    # (a, b): q = (1 + 1) / 2 = 1; (a, c) tie left out; (b, c): q = (-0.5 + 1) / 2 = 0.25
    assert preference_pairs([rec]) == [("p", "a", "b", 1.0), ("p", "b", "c", 0.25)]
    assert len(preference_pairs([rec], include_ties=True)) == 3
    tie = {"prompt": "p", "responses": ["a", "b"], "preference_matrix": [[0, 0], [0, 0]]}
    with pytest.raises(DataError, match="every pair is a tie"):
        train_learned_judge([tie], steps=1)


def test_learned_judge_agrees_on_held_out_groups(tmp_path):
    splits = get_task("add2").splits()
    train = perturbed_groups(splits["train"][:400], K=4, seed=0)
    held_out = perturbed_groups(splits["test"][:80], K=4, seed=1)  # prompts never trained on
    # one right and three wrong per group: 3 non-tied pairs per group
    assert len(preference_pairs(held_out)) == 240
    model, tok, report = train_learned_judge(train, steps=50, batch_size=32, lr=1e-3, threads=1)
    agree = pairwise_agreement(model, tok, held_out)
    assert agree >= 0.6, (agree, report)  # chance is 0.5; measured 0.654 with these seeds
    r = score([as_reward(model, tok)], ["12+34="] * 2, ["64", "65"], {}).rewards
    assert r.shape == (2,) and torch.isfinite(r).all()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = new_learned_judge(tmp_path)
    assert torch.allclose(judge_scores(again, tok2, ["12+34="] * 2, ["64", "65"]), r, atol=1e-5)


# ---------------------------------------------------------------- on disk: train-judge, learned:PATH

def _records(n):
    return [{"prompt": f"{i}+0=", "responses": ["a", "b"], "preference_matrix": [[0, 1], [-1, 0]]} for i in range(n)]


def test_split_groups_holds_out_whole_groups_seeded():
    recs = _records(10)
    train, held = split_groups(recs, 0.3, seed=0)
    assert len(train) == 7 and len(held) == 3  # round(0.3 * 10) = 3 groups, none on both sides
    assert sorted(r["prompt"] for r in train + held) == sorted(r["prompt"] for r in recs)
    assert [recs.index(r) for r in held] == sorted(recs.index(r) for r in held)  # the file's order kept
    assert split_groups(recs, 0.3, seed=0) == (train, held) and split_groups(recs, 0.3, seed=1)[1] != held
    assert len(split_groups(recs, 0.01)[1]) == 1 and split_groups(recs, 0.0) == (recs, [])  # at least one; none
    for frac, n in ((1.0, 10), (-0.1, 10), (0.5, 1)):
        with pytest.raises(DataError):
            split_groups(_records(n), frac)


def test_saved_judge_loads_once_and_refuses_other_folders(tmp_path, tiny):
    model, tok = new_learned_judge("tiny", seed=3)
    save_learned_judge(model, tok, tmp_path / "judge", {"steps": 0})
    again, tok2, meta = load_learned_judge(tmp_path / "judge")
    want = judge_scores(model, tok, ["12+34="] * 2, ["64", "65"])  # (2,)
    assert torch.allclose(judge_scores(again, tok2, ["12+34="] * 2, ["64", "65"]), want, atol=1e-6)
    assert meta == {"kind": "learned_judge", "steps": 0}
    f = resolve_reward_func(f"learned:{tmp_path / 'judge'}")
    assert torch.allclose(torch.tensor(f(prompts=["12+34="] * 2, completions=["64", "65"])), want, atol=1e-6)
    assert learned_reward(tmp_path / "judge") is learned_reward(tmp_path / "judge")  # loaded once
    # a policy checkpoint would load with a random head: refused, as is a missing folder
    tiny[0].save_pretrained(tmp_path / "policy")
    tiny[1].save_pretrained(tmp_path / "policy")
    with pytest.raises(CheckpointError, match="not a learned judge folder .*grpo-kit train-judge"):
        load_learned_judge(tmp_path / "policy")
    cfg = GRPOConfig(reward_funcs=[f"learned:{tmp_path / 'nope'}"]).validate()  # validating loads nothing (D3)
    with pytest.raises(ConfigError, match="reward function 'learned:.*nope': learned judge .* no such folder"):
        resolve_reward_func(cfg.reward_funcs[0])  # as train's setup does
    with pytest.raises(ConfigError, match="write it as 'learned:PATH'"):
        resolve_reward_func("learned:")


def test_train_judge_cli_prints_held_out_agreement(tmp_path, capsys):
    from grpo_kit.cli import main

    data = tmp_path / "prefs.jsonl"
    shipped = Path(__file__).parents[2] / "datasets" / "add2_prefs.jsonl"
    data.write_text("".join(shipped.read_text().splitlines(keepends=True)[:12]))
    out = tmp_path / "add2_judge"
    assert main(["train-judge", "--data", str(data), "--out", str(out), "--steps", "2", "--batch-size", "8",
                 "--heldout", "0.25", "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    meta = json.loads((out / METADATA).read_text())
    _, held = split_groups(load_preference_groups(data), 0.25, seed=1)  # the same 3 groups, never trained on
    model, tok, _ = load_learned_judge(out)
    assert meta["heldout_groups"] == 3 and meta["train_groups"] == 9
    assert meta["heldout_agreement"] == pytest.approx(pairwise_agreement(model, tok, held), abs=1e-9)
    assert f"held-out pairwise agreement {meta['heldout_agreement']:.3f} on {meta['heldout_pairs']}" in printed
    # a run scores with it from YAML
    cfg = GRPOConfig.from_yaml_text(f"steps: 1\nnum_prompts: 2\nnum_generations: 2\neval_size: 4\nthreads: 1\n"
                                    f"device: cpu\nreward_funcs: ['learned:{out}']\n")
    m = next(train_loop(cfg))
    assert math.isfinite(m["rewards/learned_add2_judge/mean"])
    # and judges pairs online: the same saved judge as a pairwise judge (advantage_estimator: pairwise)
    cfg = GRPOConfig.from_yaml_text(f"steps: 1\nnum_prompts: 2\nnum_generations: 4\neval_size: 4\nthreads: 1\n"
                                    f"device: cpu\nadvantage_estimator: pairwise\npairwise_judges: ['learned:{out}']\n")
    m = next(train_loop(cfg))
    assert math.isfinite(m["loss"]) and 0.0 <= m["pairwise/tie_frac"] <= 1.0
    assert m["pairwise/position_bias"] == 0.0  # a scalar judge scores each completion once: no order to favour
    assert main(["train-judge", "--data", str(data), "--out", str(out), "--steps", "1"]) == 2  # not empty
    assert "is not empty" in capsys.readouterr().err


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("grpo-kit: error: "), err  # one line, no traceback
    return err[0]


def test_train_judge_cli_refuses_bad_numbers_and_a_base_that_is_not_a_model(tmp_path, capsys):
    from grpo_kit.cli import main

    data = tmp_path / "prefs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records(6)))
    run = ["train-judge", "--data", str(data), "--out", str(tmp_path / "judge"), "--steps", "1"]
    for extra, words in ((["--batch-size", "0"], "--batch-size 0: choose at least 1"),
                         (["--lr", "nan"], "--lr nan: choose a finite number > 0"),
                         (["--heldout", "1.5"], r"--heldout 1.5: choose a fraction in \[0, 1\)")):
        assert main(run + extra) == 2
        assert re.search(words, _one_error_line(capsys))
    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    (not_a_model / "todo.txt").write_text("read the paper\n")
    assert main(run + ["--base", str(not_a_model)]) == 2
    assert "judge base" in (line := _one_error_line(capsys)) and "no config.json" in line
    (not_a_model / "config.json").write_text("{not json")
    assert main(run + ["--base", str(not_a_model)]) == 2
    assert "cannot be loaded" in _one_error_line(capsys)
    assert not (tmp_path / "judge").exists()  # nothing written
    with pytest.raises(ConfigError, match="batch_size=0"):  # the same rule for the Python API
        train_learned_judge(_records(2), steps=1, batch_size=0)


def test_a_judge_folder_whose_metadata_is_not_an_object_is_named(tmp_path):
    model, tok = new_learned_judge("tiny", seed=3)
    folder = save_learned_judge(model, tok, tmp_path / "judge", {"steps": 0})
    (folder / METADATA).write_text("[1, 2]\n")
    with pytest.raises(CheckpointError, match=f"{METADATA} holds a JSON array, not an object"):
        load_learned_judge(folder)
    (folder / METADATA).write_text("{\"kind\": ")
    with pytest.raises(CheckpointError, match=f"{METADATA} is not readable JSON"):
        load_learned_judge(folder)


def test_all_ties_error_names_the_command_line_flag_that_trains_on_ties(tmp_path, capsys):
    from grpo_kit.cli import main

    data = tmp_path / "ties.jsonl"
    data.write_text("".join(json.dumps({**r, "preference_matrix": [[0, 0], [0, 0]]}) + "\n" for r in _records(6)))
    run = ["train-judge", "--data", str(data), "--out", str(tmp_path / "judge"), "--steps", "1", "--batch-size", "2"]
    assert main(run) == 2
    assert "--include-ties" in _one_error_line(capsys)
    assert main(run + ["--include-ties"]) == 0
    assert "only tied pairs: agreement not measured" in capsys.readouterr().out  # no non-tied pair to agree on
    assert json.loads((tmp_path / "judge" / METADATA).read_text())["include_ties"] is True
