"""The 2-SE reading of a gap between arms, on numbers worked out by hand."""
import math

import pytest

from grpo_kit.eval import (
    arm_summary,
    arm_table_rows,
    findings_lines,
    gap_reading,
    se_of_gap,
)


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
    assert g.fields() == {"gap": pytest.approx(0.2), "se": pytest.approx(0.1 / 3 ** 0.5), "verdict": "higher"}
    # gap 0.1 against 2 SE = 0.115: within the noise
    assert gap_reading([0.4, 0.5, 0.6], [0.6, 0.6, 0.6]).verdict == "no clear difference"
    # one seed per arm: never a verdict, however large the gap
    assert gap_reading([0.0], [1.0]).verdict == "one seed: no verdict"
    assert "2 SE n/a" in gap_reading([0.0], [1.0]).text()
    assert gap_reading([0.4, 0.5, 0.6], [0.7, 0.7, 0.7]).text() == \
        "50.0 -> 70.0 (+20.0 points, 2 SE 11.5, 3 seeds): higher"
    assert gap_reading([8.5, 8.5, 8.6], [8.7, 8.6, 8.7]).text(unit=1.0, suffix=" tokens", digits=2) == \
        "8.53 -> 8.67 (+0.13 tokens, 2 SE 0.09, 3 seeds): higher"


def test_an_empty_arm_is_an_error():
    with pytest.raises(ValueError, match="one value per arm"):
        gap_reading([], [0.5])


def test_arm_summary_by_hand():
    # reference: final 0.5, 0.6, 0.7 (mean 0.6); base 0.4 each. sd = 0.1, se = 0.1/sqrt(3) = 0.0577:
    # 0.6 - 0.4 = 0.2 > 2 se = 0.115, so it learns.
    # "up": 0.9 each: gap +0.3 against 2 SE = 2 * sqrt(0.01/3) = 0.115: better.
    # "flat": 0.55, 0.65, 0.75 (mean 0.65): gap +0.05 against 2 SE = 2 * sqrt(0.02/3) = 0.163: no clear difference.
    final = {"ref": [0.5, 0.6, 0.7], "up": [0.9, 0.9, 0.9], "flat": [0.55, 0.65, 0.75]}
    base = {k: [0.4, 0.4, 0.4] for k in final}
    rows = arm_summary(final, base, {"ref": "ref", "up": "ref", "flat": "ref"})
    assert rows["ref"]["verdict"] == "(reference)" and rows["ref"]["learns"]
    assert rows["ref"]["final_sd"] == pytest.approx(0.1) and rows["ref"]["base_sd"] == pytest.approx(0.0, abs=1e-12)
    assert rows["up"]["verdict"] == "better" and rows["up"]["vs_ref"] == pytest.approx(0.3)
    assert rows["flat"]["verdict"] == "no clear difference" and rows["flat"]["vs_ref"] == pytest.approx(0.05)
    # "down": 0.2 each, below its base 0.4: worse than ref, and it does not learn
    rows = arm_summary({"ref": [0.5, 0.6, 0.7], "down": [0.2, 0.2, 0.2]}, {"ref": [0.4] * 3, "down": [0.4] * 3},
                       {"ref": "ref", "down": "ref"})
    assert rows["down"]["verdict"] == "worse" and not rows["down"]["learns"]


def test_one_seed_learns_nothing_and_gives_no_verdict():
    rows = arm_summary({"ref": [0.9], "b": [0.1]}, {"ref": [0.4], "b": [0.4]}, {"ref": "ref", "b": "ref"})
    assert not rows["ref"]["learns"] and rows["b"]["verdict"] == "no clear difference"
    text = findings_lines(rows, {"ref": "ref", "b": "ref"}, {"ref": "plain GRPO"})
    assert text.splitlines() == [
        "- **ref** (plain GRPO) does not clearly learn (40.0% -> 90.0%).",
        "- **b** does not clearly learn (40.0% -> 10.0%); it gives **nothing measurable over ref** at this budget "
        "(-80.0%, one seed: no spread to judge by)."]


def test_findings_lines_name_the_verdict():
    final = {"ref": [0.5, 0.6, 0.7], "up": [0.9, 0.9, 0.9]}
    rows = arm_summary(final, {k: [0.4] * 3 for k in final}, {"ref": "ref", "up": "ref"})
    assert findings_lines(rows, {"ref": "ref", "up": "ref"}).splitlines()[1] == (
        "- **up** learns (40.0% -> 90.0%); it is **better** than ref by 30.0% "
        "(more than twice the standard error over seeds).")
    smoke = findings_lines(rows, {"ref": "ref", "up": "ref"}, smoke=True).splitlines()
    assert smoke[0].startswith("*(SMOKE run") and smoke[1] == "" and smoke[3].startswith("- **up** learns")


def test_arm_table_rows_print_the_summary():
    rows = arm_summary({"ref": [0.5, 0.6, 0.7]}, {"ref": [0.4] * 3}, {"ref": "ref"})
    assert arm_table_rows(rows, vs="vs plain") == [{
        "arm": "ref", "base": "40.0% ± 0.0%", "final": "60.0% ± 10.0%", "per seed": "50.0% 60.0% 70.0%",
        "learns": "yes", "vs plain": "+0.0%", "verdict": "(reference)"}]
