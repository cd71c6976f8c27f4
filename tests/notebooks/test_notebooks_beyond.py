"""Notebooks 08 (pairwise and learned judges) and 08b (process rewards and a critic) run headlessly and
assert their claims; here we read them back."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "08_beyond_scalar_rewards.ipynb"
NB_B = NB.parent / "08b_process_rewards_and_critics.ipynb"
VARIANTS = {"grpo", "pairwise_closeness", "pairwise_learned"}
VARIANTS_B = {"grpo", "hybrid_w0.3", "hybrid_w0.7", "scratchpad_grpo", "process"}


def _table(v, variants, seeds, completions):
    assert set(v["summary"]) == variants
    assert all(len(row["per_seed"]) == seeds for row in v["summary"].values())
    assert set(v["completions_per_run"].values()) == {completions}  # equal generated completions
    lines = v["findings_text"].splitlines()
    for n, row in v["summary"].items():  # the text under the table says what each verdict says
        line = next(x for x in lines if f"**{n}**" in x)
        if row["verdict"] == "no clear difference":
            assert "nothing measurable over" in line, line
        elif row["verdict"] in ("better", "worse"):
            assert f"**{row['verdict']}**" in line, line


def _common(v, seeds, completions):
    assert v["pairwise_from_scalar_minus_rank_max_abs"] < 1e-9     # a scalar judge's win rate is the centred rank
    assert v["correctness_winrate_minus_scaled_grpo_max_abs"] < 1e-6  # 0/1 correctness: G/(G-1) x plain GRPO
    assert v["tie_frac_closeness"] < v["tie_frac_correctness"]
    assert 0 <= v["judge_heldout_agreement"] <= 1 and v["judge_heldout_pairs"] > 0
    _table(v, VARIANTS, seeds, completions)


def _common_b(v, seeds, completions):
    g, p = v["process_by_hand"]["grpo"], v["process_by_hand"]["process_first_token"]
    assert all(a == 0 for a in g) and all(x != 0 for x in p)   # no right answer: GRPO 0, the process judge not
    tied = v["process_tied_groups"]
    assert tied["tied"] == 0 or tied["moved"] > 0
    _table(v, VARIANTS_B, seeds, completions)


@pytest.mark.notebook
@pytest.mark.headless
def test_notebook_08_smoke(tmp_path):
    SMOKE_CHECKS[NB.stem](run_notebook(NB, tmp_path / "08.ipynb", parameters={"SMOKE": True}, timeout=600))


@pytest.mark.notebook
@pytest.mark.headless
def test_notebook_08b_smoke(tmp_path):
    SMOKE_CHECKS[NB_B.stem](run_notebook(NB_B, tmp_path / "08b.ipynb", parameters={"SMOKE": True}, timeout=600))


# what each smoke run must have recorded; the headless tests above and the browser test (make test) both check it
SMOKE_CHECKS = {NB.stem: lambda v: _common(v, seeds=1, completions=3 * 4 * 4),
                NB_B.stem: lambda v: _common_b(v, seeds=1, completions=3 * 4 * 4)}


@pytest.mark.notebook
@pytest.mark.full
def test_notebook_08_full(tmp_path):
    v = run_notebook(NB, tmp_path / "08.ipynb", parameters={"SMOKE": False}, timeout=1800)
    _common(v, seeds=3, completions=80 * 16 * 8)
    assert v["stopped_early"] is False
    half_width = 3 * (0.25 / v["judge_heldout_pairs"]) ** 0.5
    assert v["judge_heldout_agreement"] > 0.5 + half_width   # the learned judge beats a coin on held-out pairs
    row = v["summary"]["grpo"]                                # plain GRPO learns with every seed
    assert row["learns"] and min(row["per_seed"]) > row["base_mean"], row


@pytest.mark.notebook
@pytest.mark.full
def test_notebook_08b_full(tmp_path):
    v = run_notebook(NB_B, tmp_path / "08b.ipynb", parameters={"SMOKE": False}, timeout=1800)
    _common_b(v, seeds=3, completions=80 * 16 * 8)
    assert v["stopped_early"] is False
    assert v["process_tied_groups"]["tied"] > 0               # the sampled batch has groups plain GRPO cannot use
    shares = v["hybrid_group_share"]
    assert 0 < shares["hybrid_w0.3"] < shares["hybrid_w0.7"] < 1  # a larger w gives the group term a larger share
    for ref in ("grpo", "scratchpad_grpo"):                   # plain GRPO learns with every seed on both tasks
        row = v["summary"][ref]
        assert row["learns"] and min(row["per_seed"]) > row["base_mean"], (ref, row)
