"""The capstone notebook (11) runs headlessly: smoke mode under `pytest -m headless` (every cell, short runs),
the full run under ``full`` (the inherited run is diagnosed, and the worked solution clears the target
within the completion budget)."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks"
SMOKE = {"SMOKE": True, "THREADS": 1}


@pytest.mark.notebook
@pytest.mark.headless
def test_capstone_notebook_smoke(tmp_path):
    SMOKE_CHECKS["11_capstone"](run_notebook(NB / "11_capstone.ipynb", tmp_path / "11.ipynb", parameters=SMOKE,
                                             timeout=300))


def smoke_check(values):
    assert 0.0 < values["base_accuracy"] < 1.0
    assert values["solution_completions"] <= values["budget"]
    assert isinstance(values["inherited_findings"], list) and isinstance(values["judge_fixed_findings"], list)


# what the smoke run must have recorded; the headless test above and the browser test (make test) both check it
SMOKE_CHECKS = {"11_capstone": smoke_check}


@pytest.mark.full
@pytest.mark.notebook
def test_capstone_notebook_full(tmp_path):
    values = run_notebook(NB / "11_capstone.ipynb", tmp_path / "11.ipynb", timeout=1200)
    assert values["budget"] == 25_600 and values["solution_completions"] <= values["budget"]
    assert values["target"] > values["base_accuracy"] + 0.15  # the target is well above the base
    assert values["solution_accuracy"] >= values["target"], values
    assert values["inherited_findings"][0] == "reward_hacking", values["inherited_findings"]
    assert "kl_blowup" in values["judge_fixed_findings"], values["judge_fixed_findings"]
