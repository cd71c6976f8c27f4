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


@pytest.mark.notebook
def test_group_normalization_notebook_claims(tmp_path):
    values = run_notebook(NB / "01_group_normalization.ipynb", tmp_path / "01.ipynb", timeout=120)
    assert values["zero_variance_max_abs_advantage"] == 0.0 and values["seed_formula_gives_nan"] is True
    for m, t in zip(values["std_relative_noise_measured"], values["std_relative_noise_theory"]):
        assert abs(m - t) / t < 0.05
    spread = values["advantage_spread"]
    assert all(a > b for a, b in zip(spread, spread[1:]))
    assert values["kmeans_binary_max_abs_advantage"] == 0.0 and values["kmeans_sign_disagreement"] > 0.05
    assert values["broken_topk_argmax_is_worst"] is True and values["fixed_topk_argmax_is_best"] is True
