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

    def fields(self) -> dict:
        """The gap, its standard error and the verdict, as a notebook records them."""
        return {"gap": self.gap, "se": self.se, "verdict": self.verdict}

    def text(self, unit: float = 100.0, suffix: str = " points", digits: int = 1) -> str:
        """One line: both means, the gap, 2 SE and the verdict (accuracies printed in points by default,
        ``digits`` after the decimal point)."""
        two = "n/a" if math.isinf(self.se) else f"{unit * 2 * self.se:.{digits}f}"
        return (f"{unit * mean(self.a):.{digits}f} -> {unit * mean(self.b):.{digits}f} "
                f"({unit * self.gap:+.{digits}f}{suffix}, 2 SE {two}, {len(self.b)} seeds): {self.verdict}")


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


def arm_summary(final: dict, base: dict, reference: dict) -> dict:
    """One row per arm of a comparison over seeds: ``final`` and ``base`` map an arm to one held-out
    accuracy per seed (after training, and at step 0), ``reference`` maps each arm to the arm it is
    read against (itself for a reference arm).

    Each row: the base and final mean and sample standard deviation over seeds, ``learns`` (the final
    mean above the base mean by more than twice the standard error of the final mean), ``vs_ref``
    (final mean minus the reference's) and ``verdict``: "(reference)", "better" / "worse" (the 2-SE
    rule of :func:`gap_reading`) or "no clear difference" (within 2 SE, or one seed: no spread to
    judge by).
    """
    rows = {}
    for arm, accs in final.items():
        accs, ref = [float(x) for x in accs], reference[arm]
        f_sd = math.sqrt(sample_var(accs)) if len(accs) > 1 else 0.0
        f_se = f_sd / math.sqrt(len(accs)) if len(accs) > 1 else float("inf")
        b = [float(x) for x in base[arm]]
        g = gap_reading(final[ref], accs)
        verdict = ("(reference)" if arm == ref else {"higher": "better", "lower": "worse"}.get(g.verdict,
                                                                                                "no clear difference"))
        rows[arm] = dict(base_mean=mean(b), base_sd=math.sqrt(sample_var(b)) if len(b) > 1 else 0.0,
                         final_mean=mean(accs), final_sd=f_sd, per_seed=accs,
                         learns=bool(mean(accs) - mean(b) > 2 * f_se), vs_ref=g.gap, verdict=verdict)
    return rows


SMOKE_NOTE = "*(SMOKE run: a few steps per run, too short to read anything from.)*"


def findings_lines(rows: dict, reference: dict, what: dict | None = None, smoke: bool = False) -> str:
    """The table of :func:`arm_summary` in words, one markdown bullet per arm, written from its numbers:
    whether the arm learns, and its verdict against its reference arm (``what`` names a reference arm
    in words, e.g. {"grpo": "plain GRPO on add2"}). ``smoke``: a notebook's smoke run, said first
    (:data:`SMOKE_NOTE`), so nobody reads its verdicts as results."""
    lines = [SMOKE_NOTE, ""] if smoke else []
    for arm, row in rows.items():
        ref = reference[arm]
        learn = (f"learns ({row['base_mean']:.1%} -> {row['final_mean']:.1%})" if row["learns"]
                 else f"does not clearly learn ({row['base_mean']:.1%} -> {row['final_mean']:.1%})")
        if arm == ref:
            lines.append(f"- **{arm}** ({(what or {}).get(arm, 'the reference')}) {learn}.")
        elif row["verdict"] == "no clear difference":
            why = ("within twice the standard error over seeds" if len(row["per_seed"]) > 1
                   else "one seed: no spread to judge by")
            lines.append(f"- **{arm}** {learn}; it gives **nothing measurable over {ref}** at this budget "
                         f"({row['vs_ref']:+.1%}, {why}).")
        else:
            lines.append(f"- **{arm}** {learn}; it is **{row['verdict']}** than {ref} by {abs(row['vs_ref']):.1%} "
                         f"(more than twice the standard error over seeds).")
    return "\n".join(lines)


def arm_table_rows(rows: dict, vs: str = "vs reference") -> list[dict]:
    """The rows of :func:`arm_summary` as printable dicts (one per arm, percentages as text), for a
    ``pandas.DataFrame(...).set_index("arm")``: base and final mean ± sd, each seed, learns, the gap to
    the reference (column ``vs``) and the verdict."""
    return [{"arm": arm, "base": f"{r['base_mean']:.1%} ± {r['base_sd']:.1%}",
             "final": f"{r['final_mean']:.1%} ± {r['final_sd']:.1%}",
             "per seed": " ".join(f"{a:.1%}" for a in r["per_seed"]), "learns": "yes" if r["learns"] else "no",
             vs: f"{r['vs_ref']:+.1%}", "verdict": r["verdict"]} for arm, r in rows.items()]
