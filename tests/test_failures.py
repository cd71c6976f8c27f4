"""The detectors on real runs: quiet on the healthy runs, firing on each reproduced failure.

Fast tests read the histories saved under tests/data/ (written by ``tools/diag_fixtures.py``);
the ``full`` tests regenerate the runs and check the same claims on the fresh histories.
"""
import json
from pathlib import Path

import pytest

from grpo_kit.diagnostics import KINDS, diagnose, read_history
from grpo_kit.failures import FAILURES, failure_config, run_failure

DATA = Path(__file__).resolve().parent / "data"
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
def test_each_failure_run_is_detected_and_names_its_evidence(name):
    f = FAILURES[name]
    h = read_history(DATA / f"failure_{name}.jsonl")
    found = {x.kind: x for x in diagnose(h)}
    assert f.kind in found, (name, sorted(found))
    finding = found[f.kind]
    assert finding.evidence and all(isinstance(k, str) for k in finding.evidence)
    json.dumps(finding.to_dict())
    assert 1 <= finding.step <= len(h)


def test_every_kind_is_reproduced_by_some_failure():
    assert {f.kind for f in FAILURES.values()} == set(KINDS)


def test_failure_configs_validate_and_fixes_change_them():
    for name, f in FAILURES.items():
        broken, fixed = failure_config(name), failure_config(name, fixed=True)
        assert broken != fixed and broken.steps == f.steps, name


@pytest.mark.parametrize("name", ["sign_error"])
def test_a_short_failure_run_is_deterministic_and_detected(name):
    a = run_failure(name, seed=0, steps=25, threads=1, eval_size=20)
    b = run_failure(name, seed=0, steps=25, threads=1, eval_size=20)
    assert [m["reward"] for m in a.history] == [m["reward"] for m in b.history]
    assert FAILURES[name].kind in a.kinds()


@pytest.mark.full
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_demo_seeds_stay_quiet(seed):
    from grpo_kit import GRPOConfig, setup, train

    cfg = GRPOConfig(seed=seed)
    run = setup(cfg)
    for _ in train(cfg, run):
        pass
    assert diagnose(run.history, cfg) == [] and run.findings == []


@pytest.mark.full
@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_full_notebook_02_variants_stay_quiet(variant):
    import sys

    sys.path.insert(0, str(DATA.parent.parent / "tools"))
    from diag_fixtures import history_of

    h = history_of(f"healthy_nb02_{variant}")
    assert diagnose(h) == []


@pytest.mark.full
@pytest.mark.parametrize("name", sorted(FAILURES))
def test_full_failure_runs_detected(name):
    r = run_failure(name, seed=0)
    out = DATA.parent.parent / "runs" / "failure_runs"  # what each run found, for the README's table
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"findings": [f.to_dict() for f in r.findings],
                                                  "evals": r.run.evals, "steps": r.run.step}, indent=1, default=str))
    assert FAILURES[name].kind in r.kinds(), [f.summary() for f in r.findings]
    assert FAILURES[name].kind in [f.kind for f in r.run.findings]  # the live check found it too


def test_live_findings_survive_a_resume_and_are_not_warned_twice(tmp_path):
    from grpo_kit.train import setup, train

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
