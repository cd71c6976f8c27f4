"""Notebook 04 (curriculum group sizes and other strategies) runs headlessly and asserts its claims."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "04_curriculum_group_sizes.ipynb"


def _common(values):
    assert values["baseline_noise_max_relative_gap"] < 0.12 and values["zero_variance_max_abs_gap"] < 0.04
    assert values["bad_schedule_names_entry"] is True
    assert values["equal_budget"] is True and values["schedule_followed"] is True
    assert values["adaptive_changes_have_reasons"] is True
    assert values["dynamic_kept_fraction"] >= values["dynamic_drawn_nonzero_fraction"] - 1e-9
    assert values["replayed_groups"] > 0
    assert set(values["strategy_table"]) == {"G4", "G8", "G16", "large->small", "small->large", "adaptive",
                                             "dynamic", "replay"}


@pytest.mark.notebook
@pytest.mark.headless
def test_notebook_04_smoke(tmp_path):
    SMOKE_CHECKS[NB.stem](run_notebook(NB, tmp_path / "04.ipynb", parameters={"SMOKE": True}, timeout=900))


# what the smoke run must have recorded; the headless test above and the browser test (make test) both check it
SMOKE_CHECKS = {NB.stem: _common}


@pytest.mark.notebook
@pytest.mark.full
def test_notebook_04_full(tmp_path):
    values = run_notebook(NB, tmp_path / "04.ipynb", parameters={"SMOKE": False}, timeout=1800)
    _common(values)
    assert values["baseline_noise_max_relative_gap"] < 0.05 and values["zero_variance_max_abs_gap"] < 0.02
    table = values["strategy_table"]
    assert max(row["mean"] for row in table.values()) > values["base_accuracy"]
    assert all(8192 <= row["spent"] < 8192 + 3 * 128 for row in table.values())
