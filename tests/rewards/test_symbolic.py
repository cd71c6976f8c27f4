"""math_verify_answer (math-verify) beside the kit's math_answer on the shipped answer cases."""
import math

import pytest
from test_answers import CASES, LIMITS

from grpo_kit.errors import RewardError
from grpo_kit.rewards.judges import REWARD_FUNCS, math_answer
from grpo_kit.rewards.resolve import resolve_reward_func
from grpo_kit.rewards.symbolic import math_verify_answer


def _ref(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


# the kit's cases with a reference answer, then symbolic ones (completion, reference)
SYMBOLIC = [(r"\boxed{\frac{1}{2}}", "0.5"), ("0.5", r"\frac{1}{2}"), (r"\boxed{\sqrt{2}}", r"\sqrt{2}"),
            (r"\boxed{\sqrt{2}}", "2"), (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"), (r"\boxed{\{1, 2\}}", r"\{2, 1\}"),
            (r"\boxed{(0, 1)}", "(0, 1]"), (r"\boxed{\pi}", r"\pi"), (r"\boxed{x^2+2x+1}", "(x+1)^2")]
ROWS = [(t, _ref(w)) for t, w in CASES if w is not None] + [(t, _ref(w)) for t, w, _ in LIMITS if w is not None] \
    + SYMBOLIC

# where they differ: (completion, reference) -> (kit, math-verify); "error" = the kit raises
DIFFER = {
    ("I think 7.\n#### 8\nextra 9", "8"): (1.0, 0.0),
    ("first \\boxed{1} then \\boxed{2}", "2"): (1.0, 0.0),
    ("\\fbox{9}", "9"): (1.0, 0.0),
    ("(-8)", "-8"): (1.0, 0.0),
    ("+4", "4"): (1.0, 0.0),
    ("\u22127", "-7"): (1.0, 0.0),
    ("x = \u22123.5", "-3.5"): (1.0, 0.0),
    ("5-3", "3"): (1.0, 0.0),
    ("answer = 2.5e3", "2500"): (1.0, 0.0),
    ("1.5e-3", "0.0015"): (1.0, 0.0),
    ("6.02E23", "6.02e+23"): (1.0, 0.0),
    ("-\\frac34", "-0.75"): (1.0, 0.0),
    ("1,23", "1.23"): (0.0, 1.0),
    ("the total is 1 000", "1000"): (0.0, 1.0),
    ("\\boxed{\\sqrt{2}}", "2"): (1.0, 0.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"): (0.0, 1.0),
    ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}"): (0.0, 1.0),
    ("\\boxed{(0, 1)}", "(0, 1]"): (1.0, 0.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2"): (0.0, 1.0),
    ("\\boxed{\\pi}", "\\pi"): ("error", 1.0),
}


def _kit(text, ref):
    try:
        return math_answer(["q"], [text], answer=[ref])[0]
    except RewardError:
        return "error"


def test_math_verify_beside_math_answer_on_the_answer_cases():
    got = {(t, a): (_kit(t, a), math_verify_answer(["q"], [t], answer=[a])[0]) for t, a in ROWS}
    differ = {k: v for k, v in got.items() if v[0] != v[1]}
    assert differ == DIFFER  # the table in symbolic.py's docstring
    assert len(ROWS) == 56 and len(ROWS) - len(differ) == 36  # they agree on the other 36
    # both right on the symbolic fraction and on plain numbers
    assert got[(r"\boxed{\frac{1}{2}}", "0.5")] == (1.0, 1.0) and got[("0.5", r"\frac{1}{2}")] == (1.0, 1.0)
    assert got[("#### 1,234", "1234")] == (1.0, 1.0)


def test_math_verify_answer_is_a_reward_function():
    assert REWARD_FUNCS["math_verify_answer"] is math_verify_answer
    f = resolve_reward_func("math_verify_answer")
    done = [[{"role": "assistant", "content": r"so \boxed{\frac{3}{6}}"}], [{"role": "assistant", "content": "3"}]]
    assert f(prompts=["q", "q"], completions=done, answer=["1/2", "1/2"]) == [1.0, 0.0]


def test_math_verify_answer_refuses_what_it_cannot_read():
    with pytest.raises(RewardError, match="sample 1: math-verify cannot parse the reference answer"):
        math_verify_answer(["q", "q"], ["1", "2"], answer=["1", "\\frac{"])
    with pytest.raises(RewardError, match="sample 0: .*reverse_digits.*use math_answer"):
        math_verify_answer(["12+34="], ["64"], answer=["46"], reverse_digits=[True])


def test_missing_package_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify -> ImportError
    with pytest.raises(RewardError, match=r"pip install math-verify==0\.9\.0"):
        math_verify_answer(["q"], ["1"], answer=["1"])
    assert math.isclose(math_answer(["q"], ["1"], answer=["1"])[0], 1.0)  # the kit's judge needs no package
