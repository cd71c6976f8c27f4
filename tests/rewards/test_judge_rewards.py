"""Format, length, diversity and process judges; safety; TRL adapters; scalar ensembles."""
import math
import os

import pytest
import torch

from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.rewards.judges import (
    REWARD_FUNCS,
    agreement,
    answer_in_place,
    boxed_format,
    check_steps,
    correct_steps,
    distinct_n_reward,
    ensemble_reward,
    ensemble_scores,
    final_answer,
    from_trl,
    gsm8k_format,
    math_answer,
    score,
    soft_overlong_punishment,
    to_trl,
)


def test_gsm8k_and_boxed_format():
    comps = ["48/2 = 24\n#### 72", "#### 72.", "#### 72 apples", "72", "#### 72\nmore text", "####"]
    assert gsm8k_format([""] * 6, comps) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    comps = [r"so \boxed{\frac{1}{2}}", r"\boxed{1} \boxed{2}", r"\boxed{two}", r"\boxed{3", "3"]
    assert boxed_format([""] * 5, comps) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert answer_in_place(r"\boxed{4}", "either") and answer_in_place("#### 4", "either")
    with pytest.raises(ConfigError, match="unknown answer style"):
        answer_in_place("4", "latex")


def test_soft_overlong_punishment_dapo_eq13():
    # L_max = 10, L_cache = 4: safe up to 6 chars; 8 chars -> (6 - 8) / 4 = -0.5;
    # 10 chars -> (6 - 10) / 4 = -1.0; 11 chars -> -1 (beyond L_max); 7 -> -0.25
    f = soft_overlong_punishment(10, 4)
    comps = ["x" * n for n in (0, 6, 7, 8, 10, 11)]
    assert f([""] * 6, comps) == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    # TRL passes completion_ids: lengths come from them, not from the text
    assert f(["", ""], ["a", "b"], completion_ids=[[1] * 9, [1] * 3]) == [-0.75, 0.0]
    assert soft_overlong_punishment(5, 0)([""] * 2, ["x" * 5, "x" * 6]) == [0.0, -1.0]
    with pytest.raises(ConfigError):
        soft_overlong_punishment(5, 6)


def test_soft_overlong_matches_trl():
    from trl.rewards import get_soft_overlong_punishment
    ours, theirs = soft_overlong_punishment(20, 8), get_soft_overlong_punishment(20, 8)
    ids = [[1] * n for n in range(0, 25)]
    assert ours([""] * 25, [""] * 25, completion_ids=ids) == theirs(completion_ids=ids)


def test_soft_overlong_counts_tokens_with_a_tokenizer(tiny):
    _, tok = tiny
    f = soft_overlong_punishment(4, 2, tokenizer=tok)  # char-level: 3 chars = 3 tokens -> (2 - 3) / 2
    assert f([""], ["abc"]) == [-0.5]


def test_distinct_n():
    f = distinct_n_reward(2)
    # "abab": bigrams ab, ba, ab -> 2 distinct / 3; "aaaa": aa x3 -> 1/3; "a": no bigram -> 0.0
    got = f([""] * 4, ["abab", "aaaa", "abcd", "a"])
    assert got == pytest.approx([2 / 3, 1 / 3, 1.0, 0.0])
    # words: "the cat the cat" -> (the cat), (cat the), (the cat): 2/3
    assert distinct_n_reward(2, "word")([""], ["the cat the cat"]) == pytest.approx([2 / 3])
    with pytest.raises(ConfigError):
        distinct_n_reward(0)


def test_check_steps_and_process_reward():
    text = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May. 48+24 = 72. "
            "3 × 4 = 13, 2+3*4=14, \u22122 + 5 = 3, 1,000 - 1 = 999")
    # right: 48/2=24, 48+24=72, 2+3*4=14 (precedence), -2+5=3, 1000-1=999; wrong: 3*4=13
    assert check_steps(text) == (5, 1)
    assert check_steps("10 / 0 = 1") == (0, 1)
    assert check_steps("48-24=24 and 5 - -2 = 7") == (2, 0)  # division by zero is a wrong step, not a crash
    assert correct_steps([""] * 3, [text, "no steps", "2+2=5"]) == pytest.approx([5 / 6, 0.0, 0.0])


def test_generated_code_is_only_parsed(tmp_path):
    marker = tmp_path / "pwned"
    evil = [f"__import__('os').system('touch {marker}')",
            f"#### __import__('os').system('touch {marker}')",
            f"\\boxed{{__import__('os').system('touch {marker}')}}",
            f"exec(\"open('{marker}', 'w')\") = 1 + 1 = 2"]
    cols = {"answer": ["2"] * len(evil)}
    for name, f in REWARD_FUNCS.items():
        f(prompts=[""] * len(evil), completions=evil, **cols)
    check_steps(evil[-1])
    assert not marker.exists() and not os.path.exists("/tmp/pwned")
    assert final_answer("__import__('os').system('touch /tmp/pwned')") is None


def test_to_trl_reads_conversations_and_keeps_the_name():
    f = to_trl(math_answer)
    assert f.__name__ == "math_answer"
    comps = [[{"role": "assistant", "content": "#### 5"}], [{"role": "assistant", "content": "#### 6"}]]
    prompts = [[{"role": "user", "content": "2+3?"}]] * 2
    assert f(prompts, comps, answer=["5", "5"], trainer_state=None, completion_ids=[[1], [2]]) == [1.0, 0.0]
    with pytest.raises(RewardError, match="cannot read int"):
        f([1], [2], answer=["5"])


def test_from_trl_runs_trl_reward_functions_as_kit_judges(tiny):
    from trl.rewards import get_soft_overlong_punishment, think_format_reward
    _, tok = tiny
    judge = from_trl(get_soft_overlong_punishment(4, 2), tokenizer=tok)  # needs completion_ids
    r, per, _, _ = score([judge], ["p", "p"], ["ab", "abcd"], {})
    assert r.tolist() == [0.0, -1.0]  # 4 chars: (2 - 4) / 2 = -1
    fmt = from_trl(think_format_reward, conversational=True)
    assert fmt(["p", "p"], ["<think>\nhm\n</think>\n4", "4"]) == [1.0, 0.0]


def test_ensemble_scores_mean_and_vote():
    s = torch.tensor([[1.0, 0.0, 1.0, float("nan")],
                      [1.0, 1.0, 0.0, float("nan")],
                      [0.0, 1.0, 0.0, 2.0]])  # (K=3, B=4)
    # mean: (1+1+0)/3, (0+1+1)/3, (1+0+0)/3, 2/1
    assert ensemble_scores(s).tolist() == pytest.approx([2 / 3, 2 / 3, 1 / 3, 2.0])
    # weights 2, 1, 1: sample 0 -> (2+1+0)/4
    assert ensemble_scores(s, [2, 1, 1])[0].item() == pytest.approx(0.75)
    # vote: 1 (two of three), 1, 0, 2 (only judge)
    assert ensemble_scores(s, method="vote").tolist() == [1.0, 1.0, 0.0, 2.0]
    # weighted vote: judge 0 with weight 3 outvotes the other two on sample 1
    assert ensemble_scores(s, [3, 1, 1], method="vote")[1].item() == 0.0
    # an exact tie of weights between values gives their mean: (1 + 0) / 2
    assert ensemble_scores(torch.tensor([[1.0], [0.0]]), method="vote").item() == 0.5
    assert math.isnan(ensemble_scores(torch.tensor([[float("nan")]])).item())
    with pytest.raises(ConfigError):
        ensemble_scores(s, [1, 1])


def test_ensemble_reward_and_agreement():
    def yes(prompts, completions, **_):
        return [1.0] * len(completions)

    ens = ensemble_reward([math_answer, gsm8k_format, yes], method="vote")
    comps = ["#### 4", "4", "#### 5"]
    # math_answer 1,1,0; gsm8k_format 1,0,1; yes 1,1,1 -> vote 1,1,1
    assert ens([""] * 3, comps, answer=["4"] * 3) == [1.0, 1.0, 1.0]
    labels = torch.tensor([[1.0, 1, 0], [1.0, 0, 1], [1.0, 1, 1]])  # (K=3, N=3)
    stats = agreement(labels, torch.tensor([1.0, 1, 1]), ["math", "format", "yes"])
    assert stats["with_ensemble"] == pytest.approx({"math": 2 / 3, "format": 2 / 3, "yes": 1.0})
    # math vs format agree on item 0 only: 1/3; the matrix is symmetric with 1 on the diagonal
    assert stats["between"][0, 1].item() == pytest.approx(1 / 3)
    assert torch.equal(stats["between"], stats["between"].T) and stats["between"].diagonal().eq(1).all()
    # a NaN verdict is left out of the count: 1 agreement out of 1 judged item
    assert agreement(torch.tensor([[1.0, float("nan")], [1.0, 0.0]]))["between"][0, 1].item() == 1.0


def test_ensemble_member_failure_is_named():
    def broken(prompts, completions, **_):
        raise ValueError("no")

    with pytest.raises(RewardError, match="'broken' raised ValueError"):
        ensemble_reward([math_answer, broken])([""], ["1"], answer=["1"])


def test_degenerate_completions_are_judged_in_linear_time():
    import time
    # each of these took seconds to a minute with a backtracking pattern or a rescan per box
    texts = ["1+" * 10000 + "1", "1+" * 10000 + "1=10001", "\\boxed{" * 3000, "\\frac{" * 3000 + "1}{2}" + "}" * 3000,
             "9" * 20000, "1," * 10000, "e1" * 10000]
    t0 = time.perf_counter()
    for f in REWARD_FUNCS.values():
        f(prompts=[""] * len(texts), completions=texts, answer=["1"] * len(texts))
    assert time.perf_counter() - t0 < 10.0  # about 0.5 s here
    assert check_steps("1+1+1+1+1+1+1+1+1=9") == (1, 0)  # a chain of 9 numbers, the longest read as a step


@pytest.mark.xfail(strict=True, reason="a chain longer than 9 numbers is not read as a step (the cap that keeps "
                                       "matching linear)")
def test_a_ten_number_chain_is_a_step():
    assert check_steps("1+1+1+1+1+1+1+1+1+1=10") == (1, 0)
