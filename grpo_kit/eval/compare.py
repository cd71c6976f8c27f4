"""Reading a difference between two arms of runs: a verdict only above the noise.

An arm is one number per seed (a held-out accuracy, say). Two arms differ **clearly** when the
difference of their means is larger than twice its standard error over seeds; with fewer than two
seeds in an arm there is no spread to judge by, so there is no verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def mean(xs) -> float:
    xs = [float(x) for x in xs]
    return sum(xs) / len(xs)


def sample_var(xs) -> float:
    """The unbiased variance (divides by n - 1); nan with one value."""
    xs = [float(x) for x in xs]
    if len(xs) < 2:
        return float("nan")
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def se_of_gap(a, b) -> float:
    """Standard error of mean(b) - mean(a) for independent seeds: sqrt(var_a/n_a + var_b/n_b)
    (Welch's form; inf when an arm has fewer than two seeds)."""
    if len(a) < 2 or len(b) < 2:
        return float("inf")
    return math.sqrt(sample_var(a) / len(a) + sample_var(b) / len(b))


@dataclass
class Gap:
    """mean(b) - mean(a), its standard error over seeds, and the verdict the 2-SE rule gives."""
    a: list
    b: list
    gap: float
    se: float
    verdict: str  # "higher" / "lower" (b than a), "no clear difference", or "one seed: no verdict"

    def text(self, unit: float = 100.0, suffix: str = " points") -> str:
        """One line: both means, the gap, 2 SE and the verdict (accuracies printed in points by default)."""
        two = "n/a" if math.isinf(self.se) else f"{unit * 2 * self.se:.1f}"
        return (f"{unit * mean(self.a):.1f} -> {unit * mean(self.b):.1f} ({unit * self.gap:+.1f}{suffix}, "
                f"2 SE {two}, {len(self.b)} seeds): {self.verdict}")


def gap_reading(a, b) -> Gap:
    """Compare arm ``b`` with arm ``a`` (one value per seed each): "higher" or "lower" only when
    |mean(b) - mean(a)| > 2 standard errors over seeds."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError("gap_reading needs at least one value per arm (one per seed)")
    gap, se = mean(b) - mean(a), se_of_gap(a, b)
    if math.isinf(se):
        verdict = "one seed: no verdict"
    elif abs(gap) > 2 * se:
        verdict = "higher" if gap > 0 else "lower"
    else:
        verdict = "no clear difference"
    return Gap(a, b, gap, se, verdict)
