import math

import pytest
import torch

from grpo_kit.errors import RewardError
from grpo_kit.rewards.judges import combine, exact_answer, format_reward, score


def test_exact_answer_reversed_and_plain():
    got = exact_answer(["12+34="] * 3, ["64", "46", "6x"], answer=["46"] * 3, reverse_digits=[True] * 3)
    assert got == [1.0, 0.0, 0.0]
    assert exact_answer(["q"], ["so the total is 1,234."], answer=["1234"]) == [1.0]
    # free text goes through the full extractor: the #### marker wins over a later number
    assert exact_answer(["q"], ["3 + 4 = 7\n#### 7 (checked in 2 ways)"], answer=["7"]) == [1.0]


def test_format_reward():
    assert format_reward([""] * 4, ["12", "-3", "1 2", ""]) == [1.0, 1.0, 0.0, 0.0]


def _cols(n):
    return {"answer": ["1"] * n}


def test_raising_reward_function_is_named():
    def broken(prompts, completions, **kw):
        raise KeyError("score")
    with pytest.raises(RewardError, match="'broken' raised KeyError"):
        score([broken], ["p"] * 2, ["c"] * 2, _cols(2))


def test_wrong_count_is_named():
    def short(prompts, completions, **kw):
        return [1.0]
    with pytest.raises(RewardError, match="'short' returned 1 values for 3 completions"):
        score([short], ["p"] * 3, ["c"] * 3, _cols(3))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_reward_names_function_and_sample(bad):
    def nanny(prompts, completions, **kw):
        return [0.0, bad]
    with pytest.raises(RewardError, match=r"'nanny' returned (nan|inf) for sample 1"):
        score([nanny], ["p0", "p1"], ["c0", "c1"], _cols(2))


def test_none_is_skipped_but_all_none_is_an_error():
    def a(prompts, completions, **kw):
        return [None, 1.0]
    def b(prompts, completions, **kw):
        return [2.0, None]
    r, per = score([a, b], ["p"] * 2, ["c"] * 2, _cols(2), weights=[1.0, 0.5])
    assert r.tolist() == [1.0, 1.0] and math.isnan(per[0, 0])
    with pytest.raises(RewardError, match="no reward function scored sample 0"):
        combine(torch.tensor([[float("nan")]]))
