import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_kit.core.advantages import compute_advantages, masked_advantages
from grpo_kit.errors import RewardError
from grpo_kit.rewards.judges import (
    combine,
    exact_answer,
    format_reward,
    score,
)


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
    r, per, _, _ = score([a, b], ["p"] * 2, ["c"] * 2, _cols(2), weights=[1.0, 0.5])
    assert r.tolist() == [1.0, 1.0] and math.isnan(per[0, 0])
    with pytest.raises(RewardError, match="no reward function scored sample 0"):
        combine(torch.tensor([[float("nan")]]))


# ---------------------------------------------------------------- Bad rewards: the 'raise' / 'skip' / 'zero' policies, the time limit, and masked advantages.

NAN, INF = float("nan"), float("inf")


def _args(n):
    return [f"p{i}" for i in range(n)], [f"c{i}" for i in range(n)], {"answer": ["1"] * n}


def values(vals):
    def fixed(prompts, completions, **kw):
        return list(vals)
    return fixed


def test_raise_policy_combines_by_hand():
    f, g = values([1.0, None, 0.5]), values([2.0, 3.0, None])
    r, per, bad, reasons = score([f, g], *_args(3), weights=[1.0, 0.5])
    assert r.tolist() == [2.0, 1.5, 0.5]  # 1 + 0.5*2, None + 0.5*3, 0.5 + None (TRL's nansum)
    assert per.nan_to_num(-7).tolist() == [[1.0, 2.0], [-7.0, 3.0], [0.5, -7.0]]
    assert not bad.any() and reasons == []
    with pytest.raises(RewardError, match="'fixed' returned nan for sample 1"):
        score([values([0.0, NAN])], *_args(2))


def test_uncombined_scores_allow_a_sample_no_function_scored():
    f, g = values([1.0, None]), values([2.0, None])
    with pytest.raises(RewardError, match="no reward function scored sample 1"):
        score([f, g], *_args(2))
    s = score([f, g], *_args(2), combined=False)  # ensembles and the judge server: None stays None
    assert s.rewards is None and s.per_func.nan_to_num(-7).tolist() == [[1.0, 2.0], [-7.0, -7.0]]


def test_skip_marks_bad_samples_and_names_them():
    f = values([1.0, NAN, "high", INF, None])
    g = values([0.5, 0.5, 0.5, 0.5, None])
    r, per, bad, reasons = score([f, g], *_args(5), policy="skip")
    assert bad.tolist() == [False, True, True, True, True]  # 4: no function scored it
    assert r[0].item() == 1.5 and all(math.isnan(x) for x in r[1:].tolist())  # 1.0 + 0.5
    assert len(reasons) == 4 and "sample 1" in reasons[0] and "'high'" in reasons[1]
    assert "no reward function scored sample 4" in reasons[3]


def test_zero_counts_a_bad_value_as_zero():
    f = values([1.0, NAN, "high", None])
    g = values([0.5, 0.5, 0.5, None])
    r, _, bad, _ = score([f, g], *_args(4), weights=[1.0, 2.0], policy="zero")
    # sample 0: 1*1 + 2*0.5 = 2; samples 1, 2: f's bad value -> 0, so 2*0.5 = 1; sample 3: unscored -> 0
    assert r.tolist() == [2.0, 1.0, 1.0, 0.0] and bad.tolist() == [False, True, True, True]


@pytest.mark.parametrize("policy", ["skip", "zero"])
def test_a_raising_or_miscounting_function_makes_every_sample_bad(policy):
    def broken(prompts, completions, **kw):
        raise ZeroDivisionError("oops")
    r, _, bad, reasons = score([broken, values([1.0, 1.0])], *_args(2), policy=policy)
    assert bad.all() and "'broken' raised ZeroDivisionError: oops" in reasons[0]
    _, _, bad, reasons = score([values([1.0])], *_args(2), policy=policy)
    assert bad.all() and "returned 1 values for 2 completions" in reasons[0]
    def as_text(prompts, completions, **kw):
        return "11"  # two characters for two completions: still not a list of rewards
    _, _, bad, reasons = score([as_text], *_args(2), policy=policy)
    assert bad.all() and "'as_text' returned str; return a list of 2 floats" in reasons[0]


def test_a_hung_function_times_out_with_its_name():
    def slow_judge(prompts, completions, **kw):
        time.sleep(3)
        return [1.0] * len(completions)
    t0 = time.perf_counter()
    with pytest.raises(RewardError, match=r"'slow_judge' did not return within reward_timeout_s=0.2 s on a batch "
                                          r"of 2 completions \(first prompt 'p0'\)"):
        score([slow_judge], *_args(2), timeout_s=0.2)
    _, _, bad, _ = score([slow_judge], *_args(2), policy="skip", timeout_s=0.2)
    assert bad.all() and time.perf_counter() - t0 < 2.0  # two 0.2 s limits, not two 3 s sleeps
    # within the limit: the thread's result and its exceptions come back as inline
    assert score([values([1.0, 2.0])], *_args(2), timeout_s=5)[0].tolist() == [1.0, 2.0]
    with pytest.raises(RewardError, match="'broken' raised KeyError"):
        def broken(prompts, completions, **kw):
            raise KeyError("x")
        score([broken], *_args(2), timeout_s=5)


def test_masked_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, NAN, 3.0], [2.0, INF, NAN, NAN]])
    valid = torch.tensor([[True, True, False, True], [True, False, False, False]])
    # group 0: valid 1, 0, 3 -> mean 4/3; centred -1/3, -4/3, 5/3
    got = masked_advantages(r, valid, "none")
    torch.testing.assert_close(got[0], torch.tensor([-1 / 3, -4 / 3, 0.0, 5 / 3]))
    assert got[1].tolist() == [0.0] * 4  # one valid sample: nothing to compare
    # 'group': unbiased std = sqrt((1/9 + 16/9 + 25/9) / 2) = sqrt(7/3)
    std = math.sqrt(7 / 3)
    torch.testing.assert_close(masked_advantages(r, valid, "group")[0],
                               torch.tensor([-1 / 3, -4 / 3, 0.0, 5 / 3]) / (std + 1e-4))
    # 'batch': std over the 4 valid rewards 1, 0, 3, 2 (mean 1.5): sqrt((.25 + 2.25 + 2.25 + .25) / 3) = sqrt(5/3)
    torch.testing.assert_close(masked_advantages(r, valid, "batch")[0],
                               torch.tensor([-1 / 3, -4 / 3, 0.0, 5 / 3]) / (math.sqrt(5 / 3) + 1e-4))


finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(2, 6), st.data())
def test_advantages_are_finite_and_masking_nothing_changes_nothing(P, G, data):
    # float64: in float32 two correct ways of taking a std differ by 1e-3 for rewards like 349296.0 vs 349296.5
    r = torch.tensor(data.draw(st.lists(finite, min_size=P * G, max_size=P * G)), dtype=torch.float64).view(P, G)
    for scale in ("group", "batch", "none"):
        a = compute_advantages(r, scale)
        assert torch.isfinite(a).all() and torch.isfinite(compute_advantages(r.float(), scale)).all()
        torch.testing.assert_close(masked_advantages(r, torch.ones(P, G, dtype=torch.bool), scale), a,
                                   rtol=1e-4, atol=1e-3)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.data())
def test_masked_group_equals_the_group_without_its_bad_samples(G, data):
    r = data.draw(st.lists(finite, min_size=G, max_size=G))
    valid = data.draw(st.lists(st.booleans(), min_size=G, max_size=G))
    junk = data.draw(st.sampled_from([NAN, INF, -INF, 1e30]))
    rt = torch.tensor([x if v else junk for x, v in zip(r, valid)], dtype=torch.float64).view(1, G)
    vt = torch.tensor(valid).view(1, G)
    for scale in ("group", "none"):
        got = masked_advantages(rt, vt, scale)  # (1, G)
        assert torch.isfinite(got).all() and (got[~vt] == 0).all()
        kept = [x for x, v in zip(r, valid) if v]
        if len(kept) >= 2:
            want = compute_advantages(torch.tensor(kept, dtype=torch.float64).view(1, -1), scale)
            torch.testing.assert_close(got[vt].view(1, -1), want, rtol=1e-4, atol=1e-3)
