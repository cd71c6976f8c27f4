"""The 2-SE reading of a gap between arms, on numbers worked out by hand."""
import math

import pytest

from grpo_kit.eval import gap_reading, se_of_gap


def test_se_of_gap_by_hand():
    # a = 0.4, 0.5, 0.6: mean 0.5, var (0.01 + 0 + 0.01) / 2 = 0.01; b = 0.7, 0.7, 0.7: var 0
    # se = sqrt(0.01/3 + 0/3) = 0.0577...
    assert se_of_gap([0.4, 0.5, 0.6], [0.7, 0.7, 0.7]) == pytest.approx(math.sqrt(0.01 / 3))
    assert math.isinf(se_of_gap([0.4], [0.5, 0.6]))


def test_verdicts_follow_the_two_se_rule():
    # gap 0.2 against 2 SE = 0.115: higher; reversed: lower
    g = gap_reading([0.4, 0.5, 0.6], [0.7, 0.7, 0.7])
    assert g.gap == pytest.approx(0.2) and g.verdict == "higher"
    assert gap_reading([0.7, 0.7, 0.7], [0.4, 0.5, 0.6]).verdict == "lower"
    # gap 0.1 against 2 SE = 0.115: within the noise
    assert gap_reading([0.4, 0.5, 0.6], [0.6, 0.6, 0.6]).verdict == "no clear difference"
    # one seed per arm: never a verdict, however large the gap
    assert gap_reading([0.0], [1.0]).verdict == "one seed: no verdict"
    assert "2 SE n/a" in gap_reading([0.0], [1.0]).text()
    assert gap_reading([0.4, 0.5, 0.6], [0.7, 0.7, 0.7]).text() == \
        "50.0 -> 70.0 (+20.0 points, 2 SE 11.5, 3 seeds): higher"


def test_an_empty_arm_is_an_error():
    with pytest.raises(ValueError, match="one value per arm"):
        gap_reading([], [0.5])
