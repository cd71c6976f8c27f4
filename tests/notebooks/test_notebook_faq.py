"""The GRPO FAQ notebook (10) runs headlessly: smoke mode under `pytest -m headless` (every cell, short runs), the full
run under ``full``; each of its ten answers is asserted in the notebook and its key values are checked here."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks"
SMOKE = {"SMOKE": True, "THREADS": 1}


def _check(values):
    loss = values["faq_loss"]
    assert loss["max_abs_loss"] < 0.05 and loss["min_grad_norm"] > 0 and loss["moved"]
    assert loss["reward_last20"] > loss["reward_first20"] + 0.2  # the saved 500-step run
    assert values["faq_flat_reward"]["first_finding"] == "zero_variance_stall"
    assert all(f == 1.0 for f in values["faq_zero_std"]["hard"]) and all(f < 0.5 for f in values["faq_zero_std"]["dense"])
    assert values["faq_truncated"]["short"] == 1.0 and values["faq_truncated"]["default"] < 0.1
    sizes = [b or 0 for b in values["faq_memory"].values()]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]
    assert values["faq_batch"]["batch_size"] == 64 and values["faq_batch"]["refused"]
    assert values["faq_entropy"]["first_finding"] == "entropy_collapse"
    assert values["faq_entropy_explodes"]["first_finding"] == "kl_blowup"
    assert values["faq_entropy_explodes"]["max"] > 1.3 * values["faq_entropy_explodes"]["first"]
    assert values["faq_late"]["grad_explosion"] == "grad_explosion" and values["faq_late"]["late_decline"] == "late_decline"
    assert values["faq_nan"] == {"skipped": 1.0, "unchanged": True}
    assert values["faq_resume"]["identical"]


@pytest.mark.notebook
@pytest.mark.headless
def test_faq_notebook_smoke(tmp_path):
    SMOKE_CHECKS["10_grpo_faq"](run_notebook(NB / "10_grpo_faq.ipynb", tmp_path / "10.ipynb", parameters=SMOKE,
                                             timeout=300))


def smoke_check(values):
    _check(values)
    assert values["faq_resume"]["checkpoint"] == "step-000002"


# what the smoke run must have recorded; the headless test above and the browser test (make test) both check it
SMOKE_CHECKS = {"10_grpo_faq": smoke_check}


@pytest.mark.full
@pytest.mark.notebook
def test_faq_notebook_full(tmp_path):
    values = run_notebook(NB / "10_grpo_faq.ipynb", tmp_path / "10.ipynb", timeout=600)
    _check(values)
    assert values["faq_resume"]["checkpoint"] == "step-000004"
