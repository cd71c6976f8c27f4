"""train_arms: every arm with every seed, each run from a copy of its base, the dashboard fed with its label."""
import torch

from grpo_kit import load_model
from grpo_kit.lab import train_arms


class FakeDash:  # the part of view.Dashboard that train_arms uses
    def __init__(self, stop_after=None):
        self.labels, self.stop_after = [], stop_after

    def should_stop(self):
        return self.stop_after is not None and len(self.labels) >= self.stop_after

    def update(self, m, variant, run):
        self.labels.append((variant, m["step"]))


COMMON = dict(steps=2, num_prompts=2, num_generations=2, eval_every=0, eval_size=4, threads=1, checkpoint_every=0)


def test_every_arm_and_seed_trains_from_a_copy_of_its_base():
    policy, tok = load_model("tiny")
    before = [p.detach().clone() for p in policy.parameters()]
    dash, lines = FakeDash(), []
    runs = train_arms({"a": {}, "b": {"learning_rate": 1e-3}}, [0, 1], COMMON, dash=dash,
                      bases={"tiny": (policy, tok)}, log=lines.append)
    assert sorted(runs) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert all(r.step == 2 for r in runs.values()) and runs["b", 1].cfg.learning_rate == 1e-3
    assert runs["a", 0].cfg.seed == 0 and runs["a", 1].cfg.seed == 1
    assert all(torch.equal(p, q) for p, q in zip(before, policy.parameters()))  # the base itself is untouched
    assert runs["a", 0].policy is not policy and runs["a", 0].policy is not runs["b", 0].policy
    assert dash.labels[:2] == [("a seed 0", 1), ("a seed 0", 2)] and dash.labels[-1] == ("b seed 1", 2)
    assert len(lines) == 4 and lines[0].startswith("a ")


def test_stop_ends_the_run_in_progress_and_every_later_one_after_its_first_step():
    # Stop is pressed once the first update has arrived: the loop reads it during the next step, which is the last
    runs = train_arms({"a": {}}, [0, 1], {**COMMON, "steps": 5}, dash=FakeDash(stop_after=1), log=None)
    assert runs["a", 0].step == 2 and runs["a", 1].step == 1
    assert runs["a", 0].stopped_by == "should_stop"
