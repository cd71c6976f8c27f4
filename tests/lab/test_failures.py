"""The detectors on real runs: quiet on the healthy runs, firing on each reproduced failure.

Fast tests read the histories saved under tests/data/ (written by ``tools/diag_fixtures.py``);
the ``full`` tests regenerate the runs and check the same claims on the fresh histories.
"""
import json
from pathlib import Path

import pytest

from grpo_kit.eval.diagnostics import (
    diagnose,
    read_history,
    rolling_means,
    rolling_medians,
)
from grpo_kit.lab.failures import FAILURES, failure_config, run_failure

DATA = Path(__file__).resolve().parents[1] / "data"
HEALTHY = sorted(p.stem for p in DATA.glob("healthy_*.jsonl"))


def test_healthy_fixtures_cover_the_demo_seeds_and_notebook_02():
    assert set(HEALTHY) == {"healthy_seed0", "healthy_seed1", "healthy_seed2", "healthy_nb02_grpo",
                            "healthy_nb02_dr_grpo", "healthy_nb02_dapo", "healthy_nb02_gspo"}


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_runs_are_quiet(name):
    h = read_history(DATA / f"{name}.jsonl")
    assert len(h) >= 200
    found = diagnose(h)
    assert found == [], [f.summary() for f in found]


MEASURED = sorted(n for n in FAILURES if (DATA / f"failure_{n}.jsonl").is_file())


def test_every_failure_has_a_measured_run():
    assert set(MEASURED) == set(FAILURES)


@pytest.mark.parametrize("name", MEASURED)
def test_each_failure_run_is_named_first_with_its_evidence(name):
    f = FAILURES[name]
    h = read_history(DATA / f"failure_{name}.jsonl")
    found = diagnose(h)
    assert found and found[0].kind == f.kind and found[0].consequence_of is None, [x.summary() for x in found]
    finding = found[0]
    assert finding.evidence and all(isinstance(k, str) for k in finding.evidence)
    json.dumps(finding.to_dict())
    assert 1 <= finding.step <= len(h)


# Held-out runs: seed 11 (tools/diag_fixtures.py heldout), written after every threshold and ordering
# rule in diagnostics.py was set; nothing was tuned on them. Each failure's first finding must be its own
# kind, its fixed run and the healthy demo run must report nothing (misses: HELDOUT_MISSES, HELDOUT_FIRST_MISSES).
HELDOUT = DATA / "heldout"
HELDOUT_SEED = 11


def test_the_held_out_set_is_complete():
    assert (HELDOUT / f"healthy_seed{HELDOUT_SEED}.jsonl").is_file()
    for name in FAILURES:
        for x in ("", "_fixed"):
            assert (HELDOUT / f"failure_{name}_s{HELDOUT_SEED}{x}.jsonl").is_file(), (name, x)


def test_held_out_healthy_run_is_quiet():
    h = read_history(HELDOUT / f"healthy_seed{HELDOUT_SEED}.jsonl")
    assert len(h) == 500
    assert diagnose(h) == [], [f.summary() for f in diagnose(h)]


# A held-out miss from changing kl_blowup's statistic from the window mean to the median (for a
# collapse run on another CPU whose one step read 122.8 nats), kept as measured, not tuned away.
HELDOUT_FIRST_MISSES = {
    "zero_variance_stall_hard": "kl_blowup@20 first: the stalled policy drifts (KL median 1.09) on AdamW's moments"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=HELDOUT_FIRST_MISSES[n], strict=True))
                                  if n in HELDOUT_FIRST_MISSES else n for n in sorted(FAILURES)])
def test_held_out_failure_is_named_first(name):
    broken = diagnose(read_history(HELDOUT / f"failure_{name}_s{HELDOUT_SEED}.jsonl"))
    assert broken and broken[0].kind == FAILURES[name].kind, [f.summary() for f in broken]


def test_held_out_stall_drifts_without_a_gradient():
    # Why the stall above is named kl_blowup first: every group is all-equal from step 3 on (gradient
    # exactly 0, weight_decay 0), yet the KL to the reference climbs from 0.06 to 1.4 nats per token.
    # AdamW's moment estimates keep applying the one gradient of step 2 (norm 0.19), each parameter's
    # step normalised to about the learning rate however small that gradient was. Its 20-step window
    # mean was 0.99 at step 20 and 1.04 at step 21: on the threshold under either statistic.
    h = read_history(HELDOUT / f"failure_zero_variance_stall_hard_s{HELDOUT_SEED}.jsonl")
    assert h[1]["grad_norm"] == pytest.approx(0.186344) and all(m["grad_norm"] == 0.0 for m in h[2:])
    assert all(m["frac_reward_zero_std"] == 1.0 for m in h[2:]) and len(h) == 30
    cfg = failure_config("zero_variance_stall_hard", seed=HELDOUT_SEED)
    assert (cfg.weight_decay, cfg.beta, cfg.entropy_coef) == (0.0, 0.0, 0.0)  # nothing else moves the weights
    assert h[2]["kl"] < 0.1 and min(m["kl"] for m in h[9:]) > 0.99
    kl = [(m["step"], m["kl"]) for m in h]
    assert dict(rolling_means(kl, 20))[20] < 1.0 < dict(rolling_medians(kl, 20))[20]


# The one held-out miss, kept as measured rather than tuned away: with the jackpot judge (200, p=0.005)
# the 3-step start level of reward_decline is a mean that one jackpot lifts (steps 1-3 of this run),
# so the fixed run's ordinary reward afterwards reads as a decline (reward_decline at step 21).
HELDOUT_MISSES = {"grad_explosion": "reward_decline: a jackpot in the first three steps lifts the start level"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=HELDOUT_MISSES[n], strict=True))
                                  if n in HELDOUT_MISSES else n for n in sorted(FAILURES)])
def test_held_out_fix_reports_nothing(name):
    fixed = diagnose(read_history(HELDOUT / f"failure_{name}_s{HELDOUT_SEED}_fixed.jsonl"))
    assert fixed == [], [f.summary() for f in fixed]


@pytest.mark.full
@pytest.mark.parametrize("seed", [1, 2])  # seed 0: notebook 00's full run asserts the same of its run
def test_full_demo_seeds_stay_quiet(seed):
    from grpo_kit import GRPOConfig, setup, train

    cfg = GRPOConfig(seed=seed)
    run = setup(cfg)
    for _ in train(cfg, run):
        pass
    assert diagnose(run.history, cfg) == [] and run.findings == []


# The published variants stay quiet on fresh runs: notebook 02b's full run asserts that diagnose reports
# nothing on any of its 12 runs (4 variants x 3 seeds); the saved healthy_nb02_* histories are checked above.


# notebook 05's full run asserts the same of these three at seed 0 (and reads them on three seeds)
IN_NOTEBOOK_05 = {"entropy_collapse", "kl_blowup", "sign_error"}


@pytest.mark.full
@pytest.mark.parametrize("name", sorted(set(FAILURES) - IN_NOTEBOOK_05))
def test_full_failure_runs_detected(name):
    r = run_failure(name, seed=0)
    out = DATA.parent.parent / "runs" / "failure_runs"  # what each run found, for the README's table
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"findings": [f.to_dict() for f in r.findings],
                                                  "evals": r.run.evals, "steps": r.run.step}, indent=1, default=str))
    assert r.findings and r.findings[0].kind == FAILURES[name].kind, [f.summary() for f in r.findings]
    fixed = run_failure(name, seed=0, fixed=True)
    assert fixed.findings == [], [f.summary() for f in fixed.findings]
    assert FAILURES[name].kind in [f.kind for f in r.run.findings]  # the live check found it too


def test_live_findings_survive_a_resume_and_are_not_warned_twice(tmp_path):
    from grpo_kit.loop.train import setup, train

    cfg = failure_config("sign_error", steps=25, threads=1, eval_size=20, checkpoint_every=25)
    first = setup(cfg)
    list(train(cfg, first, out_dir=tmp_path))
    kinds = [f.kind for f in first.findings]
    assert FAILURES["sign_error"].kind in kinds
    longer = failure_config("sign_error", steps=30, threads=1, eval_size=20, checkpoint_every=25)
    again = setup(longer)
    # 25 -> 30 steps moves the cosine rate at step 25: extending the run is what this test wants
    later = list(train(longer, again, out_dir=tmp_path, resume=True, allow_schedule_change=True))
    assert [f.kind for f in again.findings[:len(kinds)]] == kinds  # restored from the checkpoint's history
    new = [d["kind"] for m in later for d in m.get("findings", [])]
    assert not set(new) & set(kinds), new
