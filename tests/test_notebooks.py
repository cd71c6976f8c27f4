"""Each notebook runs headlessly and asserts its own claim; here we read back what it recorded."""
from pathlib import Path

import pytest

from grpo_kit.nbtools import run_notebook

NB = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.notebook
def test_quickstart_gains_at_least_25_points(tmp_path):
    values = run_notebook(NB / "00_quickstart.ipynb", tmp_path / "00.ipynb", parameters={"SMOKE": False})
    assert values["final_accuracy"] - values["base_accuracy"] >= 0.25
    assert values["steps"] == 400
