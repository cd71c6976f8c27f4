"""Notebooks 04 (group sizes and curricula over a run) and 04b (dynamic sampling, replay, temperature
mixes) run headlessly and assert their claims; here we read back what they recorded."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "04_curriculum_group_sizes.ipynb"
NB_B = NB.parent / "04b_informative_groups.ipynb"
STRATEGIES = {"G4", "G8", "G16", "G32", "G64", "large->small", "small->large", "adaptive", "easy first", "format first"}


def _common(values):
    assert values["baseline_noise_max_relative_gap"] < 0.12 and values["zero_variance_max_abs_gap"] < 0.04
    assert values["bad_schedule_names_entry"] is True
    assert values["exact_budget"] is True and values["schedule_followed"] is True
    assert values["adaptive_changes_have_reasons"] is True
    assert set(values["summary"]) == STRATEGIES and values["summary"]["G8"]["verdict"] == "(reference)"
    cost = values["large_group_cost"]
    assert [cost[f"G{g}"]["P"] for g in (4, 8, 16, 32, 64)] == sorted((cost[f"G{g}"]["P"] for g in (4, 8, 16, 32, 64)),
                                                                       reverse=True)
    assert cost["G64"]["B16"] == 1024 and cost["G64"]["prompts"] * 8 == cost["G8"]["prompts"]
    assert set(values["curriculum_phases"]) == {"easy first", "format first"}


def _common_b(values):
    d = values["distinct_fraction_by_temperature"]
    assert d["1.2"] > d["0.7"]
    assert values["dynamic_kept_beats_drawn_every_step"] is True
    assert values["replayed_groups"] > 0
    gap = values["replay_stored_logp_gap"]
    assert gap["sampler"] < 1e-4 and gap["updated"] > 100 * max(gap["sampler"], 1e-7)
    assert set(values["summary"]) == {"grpo", "dynamic", "replay", "temperature mix"}
    assert values["steps"]["replay"] > values["steps"]["grpo"] >= values["steps"]["dynamic"]


@pytest.mark.notebook
@pytest.mark.headless
def test_notebook_04_smoke(tmp_path):
    SMOKE_CHECKS[NB.stem](run_notebook(NB, tmp_path / "04.ipynb", parameters={"SMOKE": True}, timeout=900))


@pytest.mark.notebook
@pytest.mark.headless
def test_notebook_04b_smoke(tmp_path):
    SMOKE_CHECKS[NB_B.stem](run_notebook(NB_B, tmp_path / "04b.ipynb", parameters={"SMOKE": True}, timeout=900))


# what the smoke run must have recorded; the headless tests above and the browser test (make test) check it
SMOKE_CHECKS = {NB.stem: _common, NB_B.stem: _common_b}


@pytest.mark.notebook
@pytest.mark.full
def test_notebook_04_full(tmp_path):
    values = run_notebook(NB, tmp_path / "04.ipynb", parameters={"SMOKE": False}, timeout=1800)
    _common(values)
    assert values["baseline_noise_max_relative_gap"] < 0.05 and values["zero_variance_max_abs_gap"] < 0.02
    summary = values["summary"]
    assert max(row["final_mean"] for row in summary.values()) > values["base_accuracy"]
    assert all(spent == 8192 for spent in values["spent"].values())
    fmt = values["curriculum_phases"]["format first"]["dead"]
    assert fmt[0] > fmt[1]


@pytest.mark.notebook
@pytest.mark.full
def test_notebook_04b_full(tmp_path):
    values = run_notebook(NB_B, tmp_path / "04b.ipynb", parameters={"SMOKE": False}, timeout=1800)
    _common_b(values)
    assert values["dynamic_mixed_steps"] > 0
    assert all(len(row["per_seed"]) == 3 for row in values["summary"].values())
