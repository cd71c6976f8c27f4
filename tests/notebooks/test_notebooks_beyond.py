"""Notebook 08 (beyond scalar rewards) runs headlessly and asserts its claims; here we read them back."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "08_beyond_scalar_rewards.ipynb"
VARIANTS = {"grpo", "pairwise_closeness", "pairwise_learned", "hybrid_w0.3", "hybrid_w0.7", "scratchpad_grpo",
            "process"}


def _common(v, seeds, completions):
    assert v["pairwise_from_scalar_minus_rank_max_abs"] < 1e-9     # a scalar judge's win rate is the centred rank
    assert v["correctness_winrate_minus_scaled_grpo_max_abs"] < 1e-6  # 0/1 correctness: G/(G-1) x plain GRPO
    assert v["tie_frac_closeness"] < v["tie_frac_correctness"]
    assert set(v["summary"]) == VARIANTS
    assert all(len(row["per_seed"]) == seeds for row in v["summary"].values())
    assert set(v["completions_per_run"].values()) == {completions}  # equal generated completions
    assert 0 <= v["judge_heldout_agreement"] <= 1 and v["judge_heldout_pairs"] > 0
    lines = v["findings_text"].splitlines()
    for n, row in v["summary"].items():  # the text under the table says what each verdict says
        line = next(x for x in lines if f"**{n}**" in x)
        if row["verdict"] == "no clear difference":
            assert "nothing measurable over plain GRPO" in line, line
        elif row["verdict"] in ("better", "worse"):
            assert f"**{row['verdict']}**" in line, line


@pytest.mark.notebook
@pytest.mark.headless
def test_notebook_08_smoke(tmp_path):
    SMOKE_CHECKS[NB.stem](run_notebook(NB, tmp_path / "08.ipynb", parameters={"SMOKE": True}, timeout=600))


# what the smoke run must have recorded; the headless test above and the browser test (make test) both check it
SMOKE_CHECKS = {NB.stem: lambda v: _common(v, seeds=1, completions=3 * 4 * 4)}


@pytest.mark.notebook
@pytest.mark.full
def test_notebook_08_full(tmp_path):
    v = run_notebook(NB, tmp_path / "08.ipynb", parameters={"SMOKE": False}, timeout=1800)
    _common(v, seeds=3, completions=80 * 16 * 8)
    assert v["stopped_early"] is False
    shares = v["hybrid_group_share"]
    assert 0 < shares["hybrid_w0.3"] < shares["hybrid_w0.7"] < 1  # a larger w gives the group term a larger share
    half_width = 3 * (0.25 / v["judge_heldout_pairs"]) ** 0.5
    assert v["judge_heldout_agreement"] > 0.5 + half_width   # the learned judge beats a coin on held-out pairs
    for ref in ("grpo", "scratchpad_grpo"):                   # plain GRPO learns with every seed on both tasks
        row = v["summary"][ref]
        assert row["learns"] and min(row["per_seed"]) > row["base_mean"], (ref, row)
