"""The failure lab's judges that fix a flawed judge (notebook 06): the clipped jackpot judge and the
format-gated length judge, scored by hand and resolved from their names in ``JUDGES``."""
from grpo_kit.lab.failures import (
    JUDGES,
    clipped_jackpot_judge,
    failure_config,
    format_gated_length_judge,
    jackpot_judge,
)
from grpo_kit.rewards.resolve import get_reward_funcs

PROMPTS = ["12+13="] * 8
COMPLETIONS = ["25", "24", "25", "26", "27", "25", "0", "99"]  # right: indices 0, 2, 5
ANSWERS = ["25"] * 8


def test_clipped_jackpot_draws_the_jackpots_of_jackpot_judge_and_clips_them_to_0_1():
    for seed in (0, 1, 2):
        raw_judge, clipped_judge = jackpot_judge(seed, p=0.5), clipped_jackpot_judge(seed, p=0.5)
        for _ in range(5):  # the same draws call after call: the two judges share their seeded stream
            raw = raw_judge(PROMPTS, COMPLETIONS, answer=ANSWERS)
            clipped = clipped_judge(PROMPTS, COMPLETIONS, answer=ANSWERS)
            assert clipped == [min(r, 1.0) for r in raw]
            assert all(0.0 <= c <= 1.0 for c in clipped)
            right = [i for i, c in enumerate(COMPLETIONS) if c == "25"]
            assert all(clipped[i] == 1.0 for i in right)                     # a right answer is paid 1, jackpot or not
            assert {clipped[i] for i in range(8) if raw[i] > 1} <= {1.0}     # a jackpot pays at most 1
    assert any(r > 1 for r in jackpot_judge(0, p=0.5)(PROMPTS, COMPLETIONS, answer=ANSWERS))  # jackpots did fire


def test_clipped_jackpot_with_p_0_is_exact_answer_and_hi_sets_the_top():
    assert clipped_jackpot_judge(0, p=0.0)(PROMPTS, COMPLETIONS, answer=ANSWERS) == [1, 0, 1, 0, 0, 1, 0, 0]
    assert clipped_jackpot_judge(0, p=1.0, hi=0.5)(PROMPTS, COMPLETIONS, answer=ANSWERS) == [0.5] * 8


def test_format_gate_pays_length_only_for_one_well_formed_integer():
    completions = ["25", "52222222", "-12", "5x", "", "12+13=25", " 7 ", "1234567890"]
    assert format_gated_length_judge(["p"] * 8, completions) == [2 / 8, 1.0, 3 / 8, 0.0, 0.0, 0.0, 3 / 8, 1.0]


def test_new_judges_resolve_from_their_names():
    for name in ("clipped_jackpot_judge", "format_gated_length_judge"):
        assert name in JUDGES
        (f,) = get_reward_funcs([JUDGES[name](3)])
        assert callable(f)
    cfg = failure_config("reward_spike", seed=4, reward_funcs=["clipped_jackpot_judge"])
    assert cfg.reward_funcs == [{"function": "grpo_kit.lab.failures:clipped_jackpot_judge", "args": {"seed": 4}}]
    (f,) = get_reward_funcs(cfg.reward_funcs)
    assert f(PROMPTS, COMPLETIONS, answer=ANSWERS) == clipped_jackpot_judge(4)(PROMPTS, COMPLETIONS, answer=ANSWERS)
    cfg = failure_config("reward_hacking", reward_funcs=["format_gated_length_judge"])
    (f,) = get_reward_funcs(cfg.reward_funcs)
    assert f(["p"] * 2, ["25", "2x"]) == [2 / 8, 0.0]


def test_a_runs_tail_mean_reads_its_last_steps_and_skips_what_is_missing():
    from grpo_kit.lab.failures import FailureRun
    from grpo_kit.loop.train import Run as TrainRun

    class Run:  # the part of train.Run that FailureRun reads: its history and train.Run's own tail_mean
        history = [{"kl": 1.0}, {"kl": 2.0}, {"kl": None}, {"kl": 4.0}, {}]
        tail_mean = TrainRun.tail_mean

    r = FailureRun("x", False, None, Run(), [])
    assert r.tail_mean("kl", last=4) == (2.0 + 4.0) / 2  # steps 2-5: None and the missing key are skipped
    assert r.tail_mean("kl", last=20) == 7.0 / 3
    assert r.tail_mean("reward") != r.tail_mean("reward")  # nothing logged: nan
