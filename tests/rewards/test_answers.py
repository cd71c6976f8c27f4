"""Answer extraction and numeric comparison on hand-written answer strings (issue 4)."""
import math

import pytest

from grpo_kit.errors import RewardError
from grpo_kit.rewards.judges import (
    REWARD_FUNCS,
    extract_answer,
    final_answer,
    math_answer,
    numbers_in,
    numbers_match,
    parse_number,
)

# (completion, the final answer a careful reader takes from it, or None)
CASES = [
    # GSM8K marker
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", 72),
    ("#### 1,234", 1234),
    ("#### -5", -5),
    ("#### 42 apples.", 42),
    ("I think 7.\n#### 8\nextra 9", 8),                     # the marker beats later numbers
    ("#### 3\n#### 4", 4),                                  # the last marker wins
    ("####", None),                                         # marker but nothing in it: no fallback
    ("earlier 12\n#### none", None),                        # marker wins even without a number
    # boxed, including nested braces
    (r"so \boxed{42}", 42),
    (r"\boxed{\frac{3}{4}}", 0.75),                         # nested braces
    (r"\boxed{\dfrac{-3}{4}}", -0.75),
    (r"\boxed{-\frac{1}{2}}", -0.5),
    (r"\boxed{\frac{1}{\frac{1}{2}}}", 2),                 # nested fractions, innermost first
    (r"\boxed{\frac{x}{2}}", None),                        # a symbolic fraction is no number
    (r"first \boxed{1} then \boxed{2}", 2),
    (r"\boxed{x = 5}", 5),
    (r"\boxed{1{,}000}", 1000),                             # LaTeX thousands separator
    (r"\boxed{12} and then \boxed{13", 12),                 # the unclosed box is truncated output
    (r"\fbox{9}", 9),
    (r"\boxed{\text{seven}}", None),
    # "the answer is"
    ("The answer is 42.", 42),
    ("So the final answer is: -17", -17),
    ("the answer is 42. Check: 40+2=42", 42),
    ("Answer: $1,234.50", 1234.5),
    ("The answer is 3/4.", 0.75),
    ("answer = 2.5e3", 2500),
    # last number fallback, signs, separators, adversarial text
    ("I have 3 apples and 4 pears, so 7", 7),
    ("no number here", None),
    ("", None),
    ("\u22127", -7),                                        # unicode minus U+2212
    ("x = \u22123.5", -3.5),
    ("it is 5.", 5),                                        # trailing period
    ("it is 5...", 5),
    ("1,234,567", 1234567),
    ("5-3", 3),                                             # a minus glued to a number is an operator
    ("x=-3", -3),
    ("-0", 0),                                              # negative zero equals zero
    ("+4", 4),
    (".5", 0.5),
    ("1.5e-3", 0.0015),
    ("6.02E23", 6.02e23),
    ("50%", 50),                                            # percent sign dropped
    ("50\\%", 50),
    ("3/0", None),                                          # division by zero is no number
    ("7/2", 3.5),
    (r"-\frac34", -0.75),
    ("__import__('os').system('rm -rf /')", None),
    ("(-8)", -8),
    ("cost: $12", 12),
]


# Known limits of the parser (judges.py lists them): what a careful reader takes, which the parser
# does not. Strict expected failures: the day one is fixed, its test says so.
LIMITS = [
    (r"3\frac{1}{2}", 3.5, "mixed numbers are read as two numbers (3 and 1/2), the last one wins"),
    ("1 1/2", 1.5, "mixed numbers are read as two numbers (1 and 1/2), the last one wins"),
    ("1,23", 1.23, "decimal commas are not supported: '1,23' is the two numbers 1 and 23"),
    ("one hundred", 100, "numbers spelled in words are not read"),
    ("the total is 1 000", 1000, "space thousands separators are not read: '1 000' is 1 and 0"),
    (r"1.5 \times 10^{3}", 1500, r"LaTeX '\times 10^{3}' is not read: the last number, 3, wins"),
    ("version 1.2.3", None, "a dotted version string has no answer, but the last-number fallback reads 1.2"),
]


@pytest.mark.parametrize("text,want", CASES)
def test_final_answer(text, want):
    got = final_answer(text)
    if want is None:
        assert got is None
    else:
        assert got is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (text, got)


@pytest.mark.parametrize("text,want,reason", LIMITS)
def test_parser_limits(text, want, reason, request):
    request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    got = final_answer(text)
    assert (got is None) if want is None else (got is not None and math.isclose(got, want, rel_tol=1e-9)), got


def test_extract_answer_names_its_source():
    assert extract_answer("a 1\n#### 2")[0] == "####"
    assert extract_answer(r"\boxed{3}")[0] == "boxed"
    assert extract_answer("The answer is 4")[0] == "answer is"
    assert extract_answer("4 and 5") == ("last", "4 and 5")
    assert extract_answer("nothing") is None


def test_numbers_in_order_and_operators():
    # "12-7=5": the minus after a digit is an operator, so 12, 7, 5
    assert numbers_in("12-7=5") == [12.0, 7.0, 5.0]
    assert numbers_in("between -2 and 3/4") == [-2.0, 0.75]
    assert parse_number("1 and 2", which="first") == 1.0 and parse_number(None) is None


def test_negative_zero_and_tolerance():
    assert numbers_match(parse_number("-0"), parse_number("0"))
    assert numbers_match(1 / 3, 0.3333333)          # |diff| / (1/3) = 1e-7 < rel_tol 1e-6
    assert not numbers_match(1 / 3, 0.33)           # |diff| / (1/3) = 0.01
    assert numbers_match(0.33, 1 / 3, rel_tol=0.02)
    assert not numbers_match(None, 0.0) and not numbers_match(0.0, None)


def test_math_answer_reward():
    comps = ["... #### 1,234", r"\boxed{1234}", "the answer is 1235", "no idea", "1234.0"]
    assert math_answer(["q"] * 5, comps, answer=["1234"] * 5) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert math_answer(["q", "q"], [r"\boxed{\frac{3}{4}}", "0.75"], answer=["3/4", "0.75"]) == [1.0, 1.0]
    assert REWARD_FUNCS["math_answer"] is math_answer


def test_math_answer_kit_task_reads_reversed_digits():
    # 12+34=46, written least-significant digit first: "64"
    assert math_answer(["12+34="] * 2, ["64", "46"], answer=["46"] * 2, reverse_digits=[True, True]) == [1.0, 0.0]
    # the scratchpad task: the answer is after the last "|"
    got = math_answer(["p"] * 3, ["64|64", "64|46", "64"], answer=["46"] * 3, reverse_digits=[True] * 3,
                      scratchpad=[True] * 3)
    assert got == [1.0, 0.0, 0.0]


def test_math_answer_bad_reference_names_the_sample():
    with pytest.raises(RewardError, match="sample 1: the reference answer 'abc'"):
        math_answer(["q", "q"], ["1", "2"], answer=["1", "abc"])
