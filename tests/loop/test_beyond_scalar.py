"""The estimators beyond one scalar per completion, in the loop (beyond_scalar.py): process rewards
from a step judge, the GAE hybrid with its value head, pairwise judges; by hand, then end to end
from YAML through ``grpo-kit train``, and the value head's exact resume."""
import json
import math
from types import SimpleNamespace

import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.core.advantages import pairwise_winrate, rank_based
from grpo_kit.core.preferences import average_orders
from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.loop import beyond_scalar as bs
from grpo_kit.loop.train import setup, train
from grpo_kit.model.critic import explained_variance, fit_value_head, value_head
from grpo_kit.model.sampling import Rollouts
from grpo_kit.model.tiny import build_tokenizer
from grpo_kit.rewards.pairwise import correctness_rule

TOK = build_tokenizer()


def approx(x, want, tol=1e-3):
    got = torch.as_tensor(x, dtype=torch.float64).reshape(-1)
    want = torch.as_tensor(want, dtype=torch.float64).reshape(-1)
    assert got.shape == want.shape and torch.allclose(got, want, atol=tol), (got.tolist(), want.tolist())


def rollouts(prompts: list[str], completions: list[str], G: int) -> Rollouts:
    """Rollouts of the given texts with the tiny tokenizer (one token per character, then EOS, right-padded)."""
    ids = [TOK(c, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id] for c in completions]
    T = max(map(len, ids))
    comp = torch.tensor([x + [TOK.pad_token_id] * (T - len(x)) for x in ids])  # (B, Tc)
    mask = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in ids])  # (B, Tc)
    B = len(completions)
    return Rollouts(torch.zeros(B, 1, dtype=torch.long), torch.ones(B, 1, dtype=torch.long), comp, mask,
                    torch.zeros(B, dtype=torch.bool), [p for p in prompts for _ in range(G)], completions, G)


# ---------------------------------------------------------------- process rewards, by hand

def test_column_sum_steps_by_hand():
    # 47+85: column sums 7+5 = 12, 4+8+1 = 13, answer 132 written reversed "231"
    assert bs.column_sum_steps("47+85=", "12 13|231", scratchpad=True) == [(1.0, 2), (1.0, 5), (1.0, 9)]
    assert bs.column_sum_steps("47+85=", "12 14|241", scratchpad=True) == [(1.0, 2), (0.0, 5), (0.0, 9)]
    # an extra column and no answer
    assert bs.column_sum_steps("47+85=", "12 13 7", scratchpad=True) == [(1.0, 2), (1.0, 5), (0.0, 7)]
    assert bs.column_sum_steps("47+85=", "", scratchpad=True) == []
    with pytest.raises(RewardError, match="scratchpad task.*add2s"):
        bs.column_sum_steps("47+85=", "231", scratchpad=False)


class PiecesTokenizer:
    """A tokenizer whose token k decodes to pieces[k] (several characters per token)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def batch_decode(self, seqs, skip_special_tokens=True):
        return ["".join(self.pieces[i] for i in s) for s in seqs]


def test_step_ends_map_to_the_token_that_holds_the_last_character():
    ids = TOK("12 13|231", add_special_tokens=False)["input_ids"] + [TOK.eos_token_id]
    ends = bs.token_char_ends(TOK, ids)
    assert ends == [1, 2, 3, 4, 5, 6, 7, 8, 9, 9]  # one character per token; EOS decodes to nothing
    assert [bs.char_to_token(ends, e) for e in (2, 5, 9)] == [1, 4, 8]  # not the EOS
    # "12", " 1", "3|", "231": characters end at 2, 4, 6, 9; a step ending at 5 ends inside token 2
    ends = bs.token_char_ends(PiecesTokenizer(["12", " 1", "3|", "231"]), [0, 1, 2, 3])
    assert ends == [2, 4, 6, 9]
    assert [bs.char_to_token(ends, e) for e in (2, 5, 9)] == [0, 2, 3]
    with pytest.raises(RewardError, match="past the decoded completion"):
        bs.char_to_token(ends, 10)


@pytest.mark.parametrize("out,problem", [
    ({"a": 1}, "returned a dict"),
    ([(1.0, 2, 3)], r"step 0 is \(1.0, 2, 3\), not a \(score, end\) pair"),
    ([(float("nan"), 2)], "step 0 has score nan"),
    ([(True, 2)], "step 0 has score True"),
    ([(1.0, 5), (1.0, 5)], r"step 1 ends at 5, not a whole number in 6..9"),
    ([(1.0, 10)], r"step 0 ends at 10, not a whole number in 1..9"),
    ([(1.0, 2.0)], "step 0 ends at 2.0"),
])
def test_a_malformed_step_judge_is_a_clear_error(out, problem):
    with pytest.raises(RewardError, match=f"step judge 'j' on completion 3 .*{problem}.*return a list of"):
        bs.check_steps_output(out, "12 13|231", "j", 3)


def test_process_advantages_of_one_group_by_hand():
    # steps [1, 1, 1] and [1, 0, 0], each ending on tokens 1, 4, 8 (characters 2, 5, 9).
    # Over the group's 6 steps: mean 2/3, unbiased std sqrt(4/15); a 1 -> +0.6455, a 0 -> -1.2910.
    # Token t sums the steps ending at or after t; EOS (token 9) ends no step: 0.
    ro = rollouts(["47+85="], ["12 13|231", "12 14|241"], 2)
    run = SimpleNamespace(step_judge=bs.column_sum_steps, tokenizer=TOK)
    items = [{"prompt": "47+85=", "answer": "132", "scratchpad": True}]
    adv, m = bs.process_step(run, None, items, ro)
    up, down = (1 / 3) / math.sqrt(4 / 15), (2 / 3) / math.sqrt(4 / 15)
    approx(adv[0, 0], [3 * up] * 2 + [2 * up] * 3 + [up] * 4 + [0])
    approx(adv[0, 1], [up - 2 * down] * 2 + [-2 * down] * 3 + [-down] * 4 + [0])
    assert m == {"process/steps_mean": 3.0, "process/step_score_mean": pytest.approx(4 / 6),
                 "process/no_step_frac": 0.0}


def test_a_step_judge_that_raises_is_named():
    def broken(prompt, text, **_):
        raise KeyError("x")

    ro = rollouts(["1+1="], ["2", "3"], 2)
    with pytest.raises(RewardError, match="step judge 'broken' raised KeyError.*completion 0"):
        bs.judge_steps(broken, TOK, ro, {})


# ---------------------------------------------------------------- the value head

def test_explained_variance_by_hand():
    r = torch.tensor([[1.0, 0.0, 9.0], [1.0, 0.0, 9.0]])  # (B, T); the 9s are padding
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    assert explained_variance(r, r, mask) == 1.0  # a perfect critic
    assert explained_variance(torch.full_like(r, 0.5), r, mask) == 0.0  # the mean of the returns
    assert explained_variance(1 - r, r, mask) == -3.0  # 1 - Var(2r - 1) / Var(r) = 1 - 4


def test_the_value_head_fits_returns_with_its_own_optimizer():
    torch.manual_seed(0)
    head = value_head(4)
    opt = torch.optim.AdamW(head.parameters(), lr=0.05)
    hidden = torch.randn(3, 2, 4)  # (B, T, H)
    returns, mask = hidden[..., 0] * 2 + 1, torch.ones(3, 2)  # (B, T): linear in the hidden state
    first = fit_value_head(head, opt, hidden, returns, mask)
    assert first == pytest.approx(float((returns ** 2).mean()))  # V = 0 at the start: the loss is mean(R^2)
    for _ in range(300):
        last = fit_value_head(head, opt, hidden, returns, mask)
    assert last < 1e-3 * first


# ---------------------------------------------------------------- pairwise judges, by hand

GROUP = ["5", "4", "5", "7"]  # answer 5: right, wrong, right, wrong


def first_wins_ties(prompt, a, b, answer, **_):
    """correctness, except that a tie goes to whichever completion it reads first (a position bias)."""
    v = correctness_rule(prompt, a, b, answer)
    return v if v != 0 else 1.0


def test_both_orders_cancel_a_position_bias():
    fair = bs.resolve_pairwise_judge("correctness")
    biased = bs.resolve_pairwise_judge(first_wins_ties)
    cols = {"answer": ["5"]}
    m_fair, stats_fair = bs.pairwise_preferences([fair], ["2+3="], [GROUP], cols)
    m_biased, stats_biased = bs.pairwise_preferences([biased], ["2+3="], [GROUP], cols)
    assert torch.equal(m_fair, m_biased)  # the bias cancels exactly
    # M = c_i - c_j; win rates: right answers beat 2 of 3, wrong ones lose 2 of 3
    approx(pairwise_winrate(m_fair), [2 / 3, -2 / 3, 2 / 3, -2 / 3])
    assert stats_fair["pairwise/position_bias"] == 0.0
    # the two tied pairs (0, 2), (1, 3) are answered +1 in both orders: bias 1 on 4 of 12 ordered pairs
    assert stats_biased["pairwise/position_bias"] == pytest.approx(1 / 3)
    assert stats_biased["pairwise/tie_frac"] == pytest.approx(2 / 6)
    assert stats_biased["pairwise/cycle_groups"] == 0.0


def test_average_orders_by_hand_with_soft_labels():
    # (0 first) 0.6, (1 first) 0.2: in probabilities 0.8 and 0.6; M = (0.6 - 0.2)/2 = 0.2, bias 0.4
    v = torch.tensor([[0.0, 0.6], [0.2, 0.0]])
    m, bias = average_orders(v)
    approx(m, [0.0, 0.2, -0.2, 0.0])
    approx(bias, [0.0, 0.4, 0.4, 0.0])
    q = (0.8 + 1 - 0.6) / 2  # the same in probabilities: (q(0 first) + 1 - q(1 first)) / 2
    assert (m[0, 1] + 1) / 2 == pytest.approx(q)


def rock_paper_scissors(prompt, a, b, **_):
    beats = {("r", "s"), ("s", "p"), ("p", "r")}
    return 1.0 if (a, b) in beats else -1.0 if (b, a) in beats else 0.0


def test_matrix_statistics_count_cycles_and_soft_labels():
    m, stats = bs.pairwise_preferences([bs.resolve_pairwise_judge(rock_paper_scissors)], ["?", "?"],
                                       [["r", "p", "s"], ["r", "r", "s"]], {})
    assert stats["pairwise/cycle_groups"] == 1.0  # the first group cycles, the second does not
    approx(pairwise_winrate(m)[0], [0, 0, 0])  # a cycle: nobody wins on average
    assert stats["pairwise/tie_frac"] == pytest.approx(1 / 6)  # (r, r) of the second group
    assert stats["pairwise/soft_frac"] == 0.0


def test_two_judges_agreement_and_the_mean_ensemble_by_hand():
    # answer 5, group 5, 4, 5, 9: correctness and closeness agree on 5 of the 6 pairs; on (4, 9)
    # correctness ties (both wrong) and closeness prefers 4. The mean gives that pair 0.5 (a soft label).
    js = [bs.resolve_pairwise_judge("correctness"), bs.resolve_pairwise_judge("closeness")]
    m, stats = bs.pairwise_preferences(js, ["2+3="], [["5", "4", "5", "9"]], {"answer": ["5"]})
    assert m[0, 1, 3].item() == pytest.approx(0.5)
    assert stats["pairwise/agreement"] == pytest.approx(5 / 6)
    assert stats["pairwise/correctness/agreement_with_ensemble"] == pytest.approx(5 / 6)
    assert stats["pairwise/closeness/agreement_with_ensemble"] == 1.0
    assert stats["pairwise/soft_frac"] == pytest.approx(1 / 6) and stats["pairwise/tie_frac"] == pytest.approx(1 / 6)
    vote, _ = bs.pairwise_preferences(js, ["2+3="], [["5", "4", "5", "9"]], {"answer": ["5"]}, [2.0, 1.0], "vote")
    assert vote[0, 1, 3].item() == 1.0  # weights 2 (tie, sign 0) and 1 (+1): the weighted majority is +1


def test_a_scalar_judge_gives_the_centred_rank():
    # a win rate from scalar scores is the centred rank of the scores: no new information
    j = bs.resolve_pairwise_judge("reward:exact_answer")
    groups = [["35", "53", "35", "x"], ["11", "11", "11", "11"]]
    cols = {"answer": ["53", "11"], "reverse_digits": [True, True]}
    m, stats = bs.pairwise_preferences([j], ["12+41=", "5+6="], groups, cols)
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # exact_answer by hand
    approx(pairwise_winrate(m), rank_based(r))
    assert stats["pairwise/position_bias"] == 0.0


def test_learned_judges_wrap_the_scalar_reward_function_judges_resolves(monkeypatch):
    # resolve.resolve_reward_func("learned:PATH") loads a learned judge; stubbed here with a scalar
    # judge whose scores are known (the completion's length), so the matrix can be checked by hand
    from grpo_kit.rewards import resolve

    asked = []
    real = resolve.resolve_reward_func

    def resolve_stub(spec):
        if isinstance(spec, str) and spec.startswith("learned:"):
            asked.append(spec)
            return lambda prompts, completions, **_: [float(len(c)) for c in completions]
        return real(spec)

    monkeypatch.setattr(resolve, "resolve_reward_func", resolve_stub)
    hard = bs.resolve_pairwise_judge("learned:/tmp/judge")
    m, _ = bs.pairwise_preferences([hard], ["?"], [["a", "abc", "ab"]], {})
    approx(m[0], [[0, -1, -1], [1, 0, 1], [1, -1, 0]])
    soft = bs.resolve_pairwise_judge("learned:/tmp/judge", temperature=1.0)
    m, stats = bs.pairwise_preferences([soft], ["?"], [["a", "abc", "ab"]], {})
    assert m[0, 1, 0].item() == pytest.approx(math.tanh(2 / 2), abs=1e-6)  # tanh((3 - 1) / (2 T))
    assert stats["pairwise/soft_frac"] == 1.0
    assert asked == ["learned:/tmp/judge"] * 2
    cfg = GRPOConfig(advantage_estimator="pairwise", pairwise_judges=["learned:/tmp/judge", "correctness"])
    assert cfg.validate().pairwise_judges[0] == "learned:/tmp/judge"


def test_unknown_pairwise_judges_are_config_errors():
    with pytest.raises(ConfigError, match="unknown pairwise judge 'fair'"):
        bs.resolve_pairwise_judge("fair")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module'"):
        bs.resolve_pairwise_judge("no_such_module:rule")


# ---------------------------------------------------------------- end to end from YAML

YAMLS = {
    "process": "advantage_estimator: process\ntask: add2s\nmodel: tiny-add2s\nmax_completion_length: 12\n",
    "hybrid_gae": "advantage_estimator: hybrid_gae\nhybrid_weight: 0.5\nvalue_lr: 0.01\n",
    "pairwise": "advantage_estimator: pairwise\npairwise_judges: [correctness, closeness]\npairwise_weights: [2, 1]\n",
}
NEW_METRICS = {
    "process": {"process/steps_mean", "process/step_score_mean", "process/no_step_frac"},
    "hybrid_gae": {"value/loss", "value/explained_variance", "value/mean", "advantages/group_std",
                   "advantages/gae_std", "advantages/group_share"},
    "pairwise": {"pairwise/tie_frac", "pairwise/soft_frac", "pairwise/cycle_groups", "pairwise/position_bias",
                 "pairwise/agreement", "pairwise/correctness/position_bias",
                 "pairwise/closeness/agreement_with_ensemble"},
}


@pytest.mark.parametrize("name", sorted(YAMLS))
def test_each_estimator_trains_from_yaml_with_grpo_kit_train(name, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(YAMLS[name] + "steps: 2\nnum_prompts: 3\nnum_generations: 4\neval_every: 0\neval_size: 10\n"
                   "threads: 1\ndevice: cpu\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == 2
    for h in history:
        assert NEW_METRICS[name] <= set(h), NEW_METRICS[name] - set(h)
        assert math.isfinite(h["loss"]) and h["skipped"] == 0.0
    assert any(h["advantages/max_abs"] > 0 for h in history)  # the estimator gave the update some signal
    if name == "hybrid_gae":
        assert history[0]["value/mean"] == 0.0  # the head starts at zero ...
        assert history[1]["value/mean"] != 0.0  # ... and its own optimizer moved it after one step
        w = 0.5
        s_grp, s_gae = history[0]["advantages/group_std"], history[0]["advantages/gae_std"]
        assert history[0]["advantages/group_share"] == pytest.approx(w * s_grp / (w * s_grp + (1 - w) * s_gae))


# ---------------------------------------------------------------- the value head resumes exactly

def test_hybrid_gae_stopped_and_resumed_equals_a_straight_run(tmp_path):
    cfg = GRPOConfig(steps=4, num_prompts=3, num_generations=4, eval_every=0, eval_size=10, checkpoint_every=0,
                     threads=1, device="cpu", advantage_estimator="hybrid_gae", value_lr=0.01)
    straight = setup(cfg)
    list(train(cfg, straight, out_dir=tmp_path / "straight"))

    first = setup(cfg)
    list(train(cfg, first, out_dir=tmp_path / "resumed", should_stop=lambda: first.step >= 2))
    assert first.step == 2  # stopped after step 2, with a checkpoint
    second = setup(cfg)
    list(train(cfg, second, out_dir=tmp_path / "resumed", resume=True))

    def plain(history):  # the stop evaluates and marks step 2; everything else must match bit for bit
        return [{k: v for k, v in m.items() if k not in ("step_time", "stopped", "accuracy")} for m in history]

    assert plain(second.history) == plain(straight.history)
    assert second.history[3]["value/loss"] == straight.history[3]["value/loss"]
    assert second.history[3]["accuracy"] == straight.history[3]["accuracy"]
    for a, b in zip(straight.critic.state_dict().values(), second.critic.state_dict().values()):
        assert torch.equal(a, b)
    sa, sb = straight.critic_optimizer.state_dict()["state"], second.critic_optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)
    assert not torch.equal(straight.critic.weight, torch.zeros_like(straight.critic.weight))  # it did learn


def test_hybrid_weight_1_is_plain_grpo_and_the_critic_only_trains_itself():
    # w = 1 keeps only the group term: the policy's updates are those of advantage_estimator='grpo'
    # (the values are computed without gradient and the value head has its own optimizer)
    base = dict(steps=2, num_prompts=3, num_generations=4, eval_every=0, eval_size=10, threads=1, device="cpu",
                scale_rewards="group")
    runs = []
    for kw in ({}, {"advantage_estimator": "hybrid_gae", "hybrid_weight": 1.0}):
        cfg = GRPOConfig(**base, **kw)
        runs.append(setup(cfg))
        list(train(cfg, runs[-1]))
    assert [m["loss"] for m in runs[0].history] == [m["loss"] for m in runs[1].history]
    assert [m["grad_norm"] for m in runs[0].history] == [m["grad_norm"] for m in runs[1].history]
    assert runs[1].history[1]["advantages/group_share"] == 1.0


def steps_past_the_text(prompt, text, **_):
    """A step judge with a bug: its one step ends one character past the completion."""
    return [(1.0, len(text) + 1)]


def test_a_malformed_step_judge_stops_grpo_kit_train_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("advantage_estimator: process\nstep_judge: test_beyond_scalar:steps_past_the_text\nsteps: 2\n"
                   "num_prompts: 2\nnum_generations: 2\neval_every: 0\neval_size: 5\nthreads: 1\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar: one line
    assert err.startswith("grpo-kit: error: step judge 'steps_past_the_text' on completion 0")
    assert "not a whole number in 1.." in err


def test_a_checkpoint_without_the_value_head_is_refused(tmp_path):
    from grpo_kit.errors import CheckpointError
    from grpo_kit.loop.train import latest_checkpoint

    cfg = GRPOConfig(steps=1, num_prompts=2, num_generations=2, eval_every=0, eval_size=5, threads=1, device="cpu",
                     advantage_estimator="hybrid_gae")
    list(train(cfg, setup(cfg), out_dir=tmp_path))
    state_file = latest_checkpoint(tmp_path) / "trainer_state.pt"
    state = torch.load(state_file, weights_only=True)
    assert set(state["critic"]) == {"head", "optimizer"}
    del state["critic"]
    torch.save(state, state_file)
    with pytest.raises(CheckpointError, match="has no value head.*hybrid_gae"):
        list(train(cfg.replace(steps=2), setup(cfg.replace(steps=2)), out_dir=tmp_path, resume=True))
