"""Preference matrices: builders, validation (property tests), rules, ensembles, TRL, offline groups."""
import json
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_kit.core.preferences import (
    ATOL,
    PreferenceCycleWarning,
    PreferenceError,
    check_preferences,
    ensemble_preferences,
    find_cycle,
    preference_agreement,
    preferences_from_scores,
    stack_groups,
)
from grpo_kit.errors import DataError, RewardError
from grpo_kit.rewards.judges import math_answer
from grpo_kit.rewards.pairwise import (
    closeness_rule,
    correctness_rule,
    load_preference_groups,
    preferences_from_judge,
    preferences_from_rule,
    preferences_from_trl_pairwise,
    rule_from_scalar,
    to_trl_pairwise,
    write_preference_groups,
)


def reference_valid(m) -> bool:
    """The rules, written out entry by entry (independent of the vectorised check)."""
    P, G = len(m), len(m[0])
    for p in range(P):
        for i in range(G):
            for j in range(G):
                v, w = m[p][i][j], m[p][j][i]
                if not math.isfinite(v) or abs(v) > 1 + ATOL:
                    return False
                if i == j and abs(v) > ATOL:
                    return False
                if i != j and math.isfinite(w) and abs(v + w) > ATOL:
                    return False
    return True


def offends(m, p, i, j) -> bool:
    v, w = m[p][i][j], m[p][j][i]
    return (not math.isfinite(v) or abs(v) > 1 + ATOL or (i == j and abs(v) > ATOL)
            or (i != j and (not math.isfinite(w) or abs(v + w) > ATOL)))


# ---------------------------------------------------------------- hand-worked builders

def test_hard_and_soft_from_scores():
    m = preferences_from_scores([1.0, 2.0, 2.0])
    # s = (1, 2, 2): 0 loses to 1 and 2; 1 and 2 tie
    assert m.tolist() == [[0, -1, -1], [1, 0, 0], [1, 0, 0]]
    soft = preferences_from_scores([[0.0, 1.0]], temperature=1.0)
    # 2 sigmoid(-1) - 1 = 2 * 0.268941 - 1 = -0.462117
    assert soft[0, 0, 1].item() == pytest.approx(-0.462117, abs=1e-6)
    assert soft[0, 1, 0].item() == -soft[0, 0, 1].item()
    with pytest.raises(PreferenceError, match=r"prompt p=0, completion i=1 is nan"):
        preferences_from_scores([[0.0, float("nan")]])
    with pytest.raises(PreferenceError, match="temperature"):
        preferences_from_scores([0.0, 1.0], temperature=0.0)


def test_from_judge_groups_consecutive_completions():
    comps = ["#### 4", "#### 5", "#### 6", "#### 6"]
    m = preferences_from_judge(math_answer, ["a"] * 4, comps, {"answer": ["4", "4", "6", "6"]}, num_generations=2)
    # group 0: right vs wrong -> +1; group 1: both right -> tie
    assert m.tolist() == [[[0, 1], [-1, 0]], [[0, 0], [0, 0]]]
    with pytest.raises(PreferenceError, match="groups of num_generations=3"):
        preferences_from_judge(math_answer, ["a"] * 4, comps, {"answer": ["4"] * 4}, num_generations=3)


def test_errors_name_the_pair():
    with pytest.raises(PreferenceError, match=r"pair \(i=0, j=1\) is contradictory: M\[0, 1\] = 1.0 but M\[1, 0\] = 1.0"):
        check_preferences([[0, 1], [1, 0]])
    m = torch.zeros(2, 3, 3)
    m[1, 0, 2], m[1, 2, 0] = 0.5, -0.25
    with pytest.raises(PreferenceError, match=r"prompt p=1, pair \(i=0, j=2\)") as e:
        check_preferences(m)
    assert (e.value.p, e.value.i, e.value.j) == (1, 0, 2)
    with pytest.raises(PreferenceError, match=r"pair \(i=1, j=1\) is 0.5 on the diagonal"):
        check_preferences([[0, 0], [0, 0.5]])
    with pytest.raises(PreferenceError, match="outside"):
        check_preferences([[0, 2], [-2, 0]])
    with pytest.raises(PreferenceError, match="shape"):
        check_preferences(torch.zeros(2, 3))


def test_soft_labels_are_allowed():
    assert issubclass(PreferenceError, DataError)  # callers of advantages.check_preferences catch DataError
    m = check_preferences([[0, 0.3], [-0.3, 0]])
    assert m.dtype == torch.float32 and m[0, 1].item() == pytest.approx(0.3)


def test_cycles_warn_by_default_and_can_be_errors():
    cyc = [[0, 1, -1], [-1, 0, 1], [1, -1, 0]]  # 0 > 1 > 2 > 0
    assert find_cycle(torch.tensor(cyc, dtype=torch.float32)) == [0, 1, 2, 0]
    with pytest.warns(PreferenceCycleWarning, match="0 > 1 > 2 > 0"):
        check_preferences(cyc)
    with pytest.raises(PreferenceError, match="non-transitive"):
        check_preferences(cyc, cycles="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_preferences(cyc, cycles="ignore")
        check_preferences([[0, 1, 0], [-1, 0, 0], [0, 0, 0]])  # a tie is no cycle
    assert find_cycle(torch.tensor([[0.0, 1, 0, 0], [-1, 0, 1, 0], [0, -1, 0, 1], [0, 0, -1, 0]])) is None


def _ranking(order):
    """The matrix of a judge that ranks items in ``order`` (best first)."""
    pos = {x: k for k, x in enumerate(order)}
    n = len(order)
    return [[0.0 if i == j else (1.0 if pos[i] < pos[j] else -1.0) for j in range(n)] for i in range(n)]


def test_condorcet_majority_of_transitive_judges_cycles():
    judges = [_ranking([0, 1, 2]), _ranking([1, 2, 0]), _ranking([2, 0, 1])]
    for j in judges:
        assert find_cycle(torch.tensor(j)) is None
    with pytest.warns(PreferenceCycleWarning):
        vote = ensemble_preferences(judges, method="vote")
    # 0 beats 1 for judges 1 and 3; 1 beats 2 for judges 1 and 2; 2 beats 0 for judges 2 and 3
    assert vote.tolist() == [[0, 1, -1], [-1, 0, 1], [1, -1, 0]]
    # the mean is the soft version: each pair 2 votes to 1 -> (1 + 1 - 1) / 3, cyclic too
    with pytest.warns(PreferenceCycleWarning):
        mean = ensemble_preferences(judges, method="mean")
    assert mean[0, 1].item() == pytest.approx(1 / 3)


def test_ensemble_weights_and_agreement():
    a = _ranking([0, 1, 2])
    b = _ranking([2, 1, 0])
    ens = ensemble_preferences([a, b], weights=[3, 1], method="vote")
    assert torch.equal(ens, torch.tensor(a))  # weight 3 against 1
    stats = preference_agreement([a, b], ens, ["a", "b"])
    # pairs (0,1), (0,2), (1,2): b disagrees with a on all three
    assert stats["with_ensemble"] == {"a": 1.0, "b": 0.0}
    assert stats["between"][0, 1].item() == 0.0
    # a tie counts as its own verdict: ensemble of a and b with equal weights ties everywhere
    tie = ensemble_preferences([a, b], method="vote")
    assert tie.abs().sum().item() == 0
    assert preference_agreement([a, b], tie)["with_ensemble"] == {"judge0": 0.0, "judge1": 0.0}


# ---------------------------------------------------------------- rules

def test_correctness_and_closeness_rules():
    group = ["#### 4", "#### 5", "I don't know", "#### 10"]
    m = preferences_from_rule(correctness_rule, ["q"], [group], {"answer": ["4"]})
    # right beats each wrong one; the three wrong ones tie
    assert m[0, 0].tolist() == [0, 1, 1, 1] and m[0, 1:, 1:].abs().sum() == 0
    fine = preferences_from_rule(closeness_rule, ["q"], [group], {"answer": ["4"]})
    # distances 0, 1, inf, 6: 0 > 1 > 3 > 2
    assert fine[0].tolist() == _ranking([0, 1, 3, 2])


def test_rules_read_answers_in_the_tasks_digit_order():
    # add2 writes 47+85=132 as "231"; "132" written in this order means 231: wrong, and 99 away
    cols = {"answer": ["132"], "reverse_digits": [True]}
    m = preferences_from_rule(correctness_rule, ["47+85="], [["231", "132"]], cols)
    assert m[0].tolist() == [[0, 1], [-1, 0]]
    # "331" reads 133 (1 away) and beats "132" (231, 99 away); without the column "132" would win
    fine = preferences_from_rule(closeness_rule, ["47+85="], [["331", "132"]], cols)
    assert fine[0].tolist() == [[0, 1], [-1, 0]]
    assert preferences_from_rule(closeness_rule, ["47+85="], [["331", "132"]], {"answer": ["132"]})[0, 0, 1] == -1
    # with a scratchpad the answer is read after "|"
    pad = {"answer": ["132"], "reverse_digits": [True], "scratchpad": [True]}
    assert preferences_from_rule(correctness_rule, ["47+85="], [["12 13|231", "12 13|132"]], pad)[0, 0, 1] == 1


def test_position_biased_rule_is_caught_or_averaged():
    def first_wins(prompt, a, b, **_):
        return 1.0

    with pytest.raises(PreferenceError, match=r"prompt p=0, pair \(i=0, j=1\) is contradictory"):
        preferences_from_rule(first_wins, ["q"], [["x", "y", "z"]])
    # averaging both orders cancels a pure position bias: (1 - 1) / 2 = 0 everywhere
    assert preferences_from_rule(first_wins, ["q"], [["x", "y"]], orders="average").abs().sum() == 0

    def biased_correctness(prompt, a, b, answer):  # +0.5 for whoever is shown first
        return 0.5 * correctness_rule(prompt, a, b, answer) + 0.5

    m = preferences_from_rule(biased_correctness, ["q"], [["#### 1", "#### 2"]], {"answer": ["1"]}, orders="average")
    # (a, b) = 0.5*1 + 0.5 = 1; (b, a) = 0.5*(-1) + 0.5 = 0; average (1 - 0) / 2 = 0.5
    assert m[0, 0, 1].item() == 0.5


def test_rule_failures_are_named():
    def crashes(prompt, a, b, **_):
        raise ZeroDivisionError("x")

    with pytest.raises(RewardError, match=r"'crashes' raised ZeroDivisionError.*pair \(i=0, j=1\)"):
        preferences_from_rule(crashes, ["q"], [["a", "b"]])

    def too_big(prompt, a, b, **_):
        return 3

    with pytest.raises(PreferenceError, match=r"'too_big' returned 3.0 at prompt p=0"):
        preferences_from_rule(too_big, ["q"], [["a", "b"]])
    with pytest.raises(PreferenceError, match="same G"):
        preferences_from_rule(correctness_rule, ["q", "r"], [["a", "b"], ["c"]], {"answer": ["1", "2"]})


def test_rule_from_scalar():
    rule = rule_from_scalar(math_answer)
    assert rule("q", "#### 4", "#### 5", answer="4") == 1.0
    assert rule("q", "#### 5", "#### 4", answer="4") == -1.0
    assert rule("q", "#### 5", "#### 6", answer="4") == 0.0


# ---------------------------------------------------------------- TRL's pairwise interface

def test_trl_pairwise_adapter_round_trip():
    judge = to_trl_pairwise(correctness_rule)
    pairs = [["#### 4", "#### 5"], ["#### 5", "#### 4"], ["#### 5", "#### 6"]]
    assert judge.judge(["q"] * 3, pairs, answer=["4"] * 3) == [0, 1, -1]
    assert judge.judge(["q"] * 3, pairs, return_scores=True, answer=["4"] * 3) == [1.0, 0.0, 0.5]
    group = ["#### 4", "#### 5", "#### 6"]
    m = preferences_from_trl_pairwise(judge, ["q"], [group], return_scores=True, columns={"answer": ["4"]})
    assert torch.equal(m, preferences_from_rule(correctness_rule, ["q"], [group], {"answer": ["4"]}))
    with pytest.raises(RewardError, match=r"answered -1 at prompt p=0, pair \(i=1, j=2\)"):
        preferences_from_trl_pairwise(judge, ["q"], [group], columns={"answer": ["4"]})


def test_a_trl_style_judge_builds_matrices():
    class PrefersShorter:  # the shape of TRL's documented BasePairwiseJudge example
        def judge(self, prompts, completions, shuffle_order=False, return_scores=False):
            return [0 if len(a) < len(b) else 1 for a, b in completions]

    m = preferences_from_trl_pairwise(PrefersShorter(), ["q"], [["aaa", "a", "aa"]])
    assert m[0].tolist() == _ranking([1, 2, 0])


# ---------------------------------------------------------------- property tests

@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=6), min_size=1, max_size=4)
       .filter(lambda rows: len({len(r) for r in rows}) == 1),
       st.one_of(st.none(), st.floats(0.01, 100)))
def test_any_matrix_from_scores_is_valid(scores, temperature):
    m = preferences_from_scores(scores, temperature)  # (P, G, G)
    assert reference_valid(m.double().tolist())
    s = torch.tensor(scores, dtype=torch.float64)
    agree = torch.sign(m.double()) == torch.sign(s[:, :, None] - s[:, None, :])
    if temperature is None:
        assert bool(agree.all())
    else:  # a tiny difference can round to a soft label of 0, never to the wrong sign
        assert bool((agree | (m == 0)).all())


@st.composite
def perturbed_matrices(draw):
    P, G = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    m = [[[0.0] * G for _ in range(G)] for _ in range(P)]
    for p in range(P):
        for i in range(G):
            for j in range(i + 1, G):
                v = draw(st.sampled_from([-1.0, 0.0, 1.0]) | st.floats(-1, 1))
                m[p][i][j], m[p][j][i] = v, -v
    bad = st.sampled_from([2.0, -1.5, float("nan"), float("inf"), 0.25, 1.0, -1.0, 1e-9, 1e-5, 2e-5, 1.00001, 1.0001])
    for _ in range(draw(st.integers(0, 2))):
        p, i, j = draw(st.integers(0, P - 1)), draw(st.integers(0, G - 1)), draw(st.integers(0, G - 1))
        m[p][i][j] = draw(bad | st.floats(-2, 2))
    return m


@settings(max_examples=200, deadline=None)
@given(perturbed_matrices())
def test_random_matrices_are_accepted_iff_valid_and_errors_name_a_real_pair(m):
    valid = reference_valid(m)
    try:
        out = check_preferences(m, cycles="ignore")
    except PreferenceError as e:
        assert not valid
        assert e.p is not None and offends(m, e.p, e.i, e.j), (e, m)
        assert f"p={e.p}, pair (i={e.i}, j={e.j})" in str(e)
    else:
        assert valid
        assert out.shape == (len(m), len(m[0]), len(m[0]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=3, max_size=3), min_size=2, max_size=5),
       st.sampled_from(["mean", "vote"]))
def test_ensembles_of_valid_matrices_are_valid(uppers, method):
    mats = []
    for u in uppers:  # each judge: upper triangle of a 3 x 3 matrix
        m = torch.zeros(3, 3)
        for v, (i, j) in zip(u, [(0, 1), (0, 2), (1, 2)]):
            m[i, j], m[j, i] = v, -v
        mats.append(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreferenceCycleWarning)
        out = ensemble_preferences(mats, method=method)
    assert reference_valid([out.double().tolist()])


# ---------------------------------------------------------------- offline preference groups

def _records():
    return [{"prompt": "2+2=", "responses": ["4", "5", "x"], "answer": "4",
             "preference_matrix": preferences_from_rule(correctness_rule, ["2+2="], [["4", "5", "x"]],
                                                        {"answer": ["4"]})[0]},
            {"prompt": "1+1=", "responses": ["2", "2", "3"], "answer": "2",
             "preference_matrix": [[0, 0, 1], [0, 0, 1], [-1, -1, 0]]}]


def test_groups_round_trip(tmp_path):
    path = tmp_path / "groups.jsonl"
    write_preference_groups(_records(), path)
    back = load_preference_groups(path)
    assert [r["answer"] for r in back] == ["4", "2"]  # extra columns survive
    prompts, responses, prefs = stack_groups(back)
    assert prompts == ["2+2=", "1+1="] and responses[1] == ["2", "2", "3"] and prefs.shape == (2, 3, 3)
    assert prefs[0, 0].tolist() == [0, 1, 1]


def _write_lines(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")


@pytest.mark.parametrize("row,problem", [
    ({"responses": ["a", "b"], "preference_matrix": [[0, 1], [-1, 0]]}, "field 'prompt'"),
    ({"prompt": "q", "responses": ["a"], "preference_matrix": [[0]]}, "1 response: a preference group needs at least 2"),
    ({"prompt": "q", "responses": ["a", 3], "preference_matrix": [[0, 1], [-1, 0]]}, "at least 2 strings"),
    ({"prompt": "q", "responses": ["a", "b"], "preference_matrix": [[0, 1]]}, "2 x 2 list of lists"),
    ({"prompt": "q", "responses": ["a", "b"], "preference_matrix": [[0, True], [-1, 0]]}, r"\[0\]\[1\] is True"),
    ({"prompt": "q", "responses": ["a", "b"], "preference_matrix": [[0, 1], [1, 0]]},
     r"pair \(i=0, j=1\) is contradictory"),
    ({"prompt": "q", "responses": ["a", "b", "c"],
      "preference_matrix": [[0, 1, 1], [-1, 0, 1], [-1, -1, 0]]}, "3 responses, but the first record has 2"),
    ("{not json", "not valid JSON"),
])
def test_loader_names_file_line_and_problem(tmp_path, row, problem):
    path = tmp_path / "g.jsonl"
    good = {"prompt": "p", "responses": ["a", "b"], "preference_matrix": [[0, -1], [1, 0]]}
    _write_lines(path, [good, row])
    with pytest.raises(DataError, match=rf"g.jsonl, line 2: .*{problem}"):
        load_preference_groups(path)


def test_writer_refuses_bad_records(tmp_path):
    bad = _records()
    bad[1]["preference_matrix"] = [[0, 1, 1], [1, 0, 1], [-1, -1, 0]]
    with pytest.raises(DataError, match=r"not written.*line 2: .*pair \(i=0, j=1\) is contradictory"):
        write_preference_groups(bad, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
