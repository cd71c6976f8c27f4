"""The failure-lab notebooks (05-07) run headlessly: smoke mode under `pytest -m headless` (every cell, short
runs), the full runs under ``full`` (each failure appears, is detected, and its fix is measured)."""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks"
SMOKE = {"SMOKE": True, "THREADS": 1}


@pytest.mark.notebook
@pytest.mark.headless
def test_collapse_notebook_smoke(tmp_path):
    SMOKE_CHECKS["05_failure_collapse"](run_notebook(NB / "05_failure_collapse.ipynb", tmp_path / "05.ipynb",
                                                     parameters=SMOKE, timeout=300))


def smoke_check_collapse(values):
    lab = values["collapse_lab"]
    assert values["broken_topk_argmax_is_worst"] is True and values["fixed_topk_argmax_is_best"] is True
    assert set(lab) == {"entropy_collapse", "entropy_collapse + fix", "kl_blowup", "kl_blowup + fix", "sign_error",
                        "sign_error + fix"}


@pytest.mark.notebook
@pytest.mark.headless
def test_spikes_and_hacking_notebook_smoke(tmp_path):
    SMOKE_CHECKS["06_failure_reward_spikes_and_hacking"](
        run_notebook(NB / "06_failure_reward_spikes_and_hacking.ipynb", tmp_path / "06.ipynb", parameters=SMOKE,
                     timeout=300))


def smoke_check_spikes(values):
    # the single-group arithmetic holds whatever the run length: none passes a jackpot, group amplifies noise
    assert values["spike_max_abs_adv"]["none"] > 10 * values["spike_max_abs_adv"]["group"]
    assert values["noise_max_abs_adv"]["group"] > 10 * values["noise_max_abs_adv"]["none"]
    assert set(values["spikes_and_hacking_lab"]) == {"reward_spike", "reward_spike + fix", "reward_hacking",
                                                     "reward_hacking + fix"}


@pytest.mark.notebook
@pytest.mark.headless
def test_clinic_notebook_smoke(tmp_path):
    SMOKE_CHECKS["07_troubleshooting_clinic"](run_notebook(NB / "07_troubleshooting_clinic.ipynb", tmp_path / "07.ipynb",
                                                           parameters=SMOKE, timeout=400))


def smoke_check_clinic(values):
    assert len(values["clinic_verdicts"]) == 17  # the verdict rows of both advice tables and the memory row
    assert values["clinic"]["GPU out of memory -> smaller batch or gradient accumulation"]["group_stats_share"] < 0.01


# what each smoke run must have recorded; the headless tests above and the browser test (make test) both check it
SMOKE_CHECKS = {"05_failure_collapse": smoke_check_collapse,
                "06_failure_reward_spikes_and_hacking": smoke_check_spikes,
                "07_troubleshooting_clinic": smoke_check_clinic}


@pytest.mark.full
@pytest.mark.notebook
def test_collapse_notebook_full(tmp_path):
    values = run_notebook(NB / "05_failure_collapse.ipynb", tmp_path / "05.ipynb", timeout=1800)
    lab = values["collapse_lab"]
    assert 0.5 < values["collapse_kl_max_median"] < 1.5  # the collapse's KL stays near one nat per token
    kinds = {"entropy_collapse": "entropy_collapse", "kl_blowup": "kl_blowup", "sign_error": "reward_decline"}
    for name, kind in kinds.items():  # the cause is the first finding; the fix leaves nothing to report
        assert (lab[name]["first_finding"] or "").startswith(kind + "@"), lab[name]["findings"]
        assert lab[f"{name} + fix"]["findings"] == [], lab[f"{name} + fix"]["findings"]


@pytest.mark.full
@pytest.mark.notebook
def test_spikes_and_hacking_notebook_full(tmp_path):
    lab = run_notebook(NB / "06_failure_reward_spikes_and_hacking.ipynb", tmp_path / "06.ipynb",
                       timeout=1800)["spikes_and_hacking_lab"]
    assert lab["reward_spike"]["detected_at"] is not None and lab["reward_hacking"]["detected_at"] is not None
    assert lab["reward_hacking + fix"]["detected_at"] is None
    for name in ("reward_spike", "reward_hacking"):
        assert lab[name]["first_finding"] == name and lab[name + " + fix"]["findings"] == [], lab[name]["findings"]


@pytest.mark.full
@pytest.mark.notebook
def test_clinic_notebook_full(tmp_path):
    values = run_notebook(NB / "07_troubleshooting_clinic.ipynb", tmp_path / "07.ipynb", timeout=2400)
    assert len(values["clinic_verdicts"]) == 17  # the verdict rows of both advice tables and the memory row
