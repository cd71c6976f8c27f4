"""Self-consistency: the majority vote by hand, the evaluation on hand-made samples, and grpo-kit eval on a saved model."""
import json

import pytest

from grpo_kit.cli import main
from grpo_kit.data.tasks import heldout_split, save_items
from grpo_kit.eval import inference
from grpo_kit.eval.inference import (
    greedy_accuracy,
    majority_vote,
    self_consistency_eval,
)


@pytest.mark.parametrize("answers,want", [
    ([46.0, 56.0, 56.0], 1),            # 56 has two votes: its first sample, index 1
    ([7.0, 5.0, 5.0, 7.0], 0),          # tie 2-2: 7 appeared first
    ([None, 3.0, 4.0, 4.0], 2),         # None does not vote
    ([1.0, 2.0, 3.0], 0),               # three-way tie: the first
    ([2.0, 9.0, 9.0, 2.0, 9.0], 1),     # 9 wins 3-2
    ([None, None], None),               # no answer at all
    ([0.5, 0.5], 0),
])
def test_majority_vote_by_hand(answers, want):
    assert majority_vote(answers) == want


def test_self_consistency_eval_on_hand_made_samples(monkeypatch):
    # add2 writes the sum digits reversed: 12+34=46 is "64", 10+46=56 is "65"
    items = [{"prompt": "12+34=", "answer": "46", "completion": "64", "reverse_digits": True},
             {"prompt": "10+46=", "answer": "56", "completion": "65", "reverse_digits": True},
             {"prompt": "20+25=", "answer": "45", "completion": "54", "reverse_digits": True}]
    samples = ["64", "65", "65", "64",   # 46 vs 56 tie 2-2: 46 came first -> right
               "66", "66", "65", "x",    # 66 wins 2-1 -> wrong
               "x", "y", "54", "z"]      # one answer, 45 -> right

    def fake(model, tok, its, k, *args):
        assert k == 4
        yield its, [it["prompt"] for it in its for _ in range(k)], samples

    monkeypatch.setattr(inference, "_sampled_groups", fake)
    assert self_consistency_eval(None, None, items, 4) == {"self_consistency@4": pytest.approx(2 / 3), "samples": 4}


def test_eval_self_consistency_on_a_saved_model(tmp_path, capsys, tiny):
    model, tok = tiny
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    items = heldout_split("add2")[:24]
    save_items(items, tmp_path / "items.jsonl")
    assert main(["eval", "--model", str(tmp_path / "model"), "--dataset", str(tmp_path / "items.jsonl"),
                 "--samples", "4", "--self-consistency", "4"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r) == {"items", "greedy_accuracy", "pass@1", "pass@4", "self_consistency@4", "samples"}
    # a voted answer that is right was sampled, so it counts for pass@4 too; 24 items: multiples of 1/24
    assert 0 <= r["self_consistency@4"] <= r["pass@4"] and round(r["self_consistency@4"] * 24, 9).is_integer()
    # at temperature 0 every sample is the greedy one: the vote is the greedy answer
    assert self_consistency_eval(model, tok, items, 3, temperature=0.0)["self_consistency@3"] == \
        greedy_accuracy(model, tok, items) == r["greedy_accuracy"]
    assert main(["eval", "--self-consistency", "1"]) == 2 and "no vote" in capsys.readouterr().err
