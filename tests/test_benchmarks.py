"""Smoke tests: the benchmark scripts run end to end on a tiny setting (they assert no times)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not an installed package
from benchmarks import (
    bench_qwen2_slice,
    bench_step,
    gpu_check,
    lora_check,
    population,
    sweep,
)

TINY = ["--quick", "--threads", "1", "--prompts", "2", "-G", "2", "--length", "3"]


@pytest.mark.full  # 20 s each of a 2-core machine: make test-full runs it, make test keeps to its 10 minutes
def test_bench_step_kit_and_floor_write_json(tmp_path):
    out = tmp_path / "bench.json"
    res = bench_step.main(TINY + ["--variants", "kit,floor", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert set(saved["median_s"]) == {"kit", "floor"}
    assert saved["ratio_kit_over_floor"] == pytest.approx(saved["median_s"]["kit"] / saved["median_s"]["floor"])
    assert all(saved["memory"][v]["peak_rss_mb"] >= saved["memory"][v]["rss_before_steps_mb"] > 0 for v in ("kit", "floor"))
    assert res["settings"]["G"] == 2 and len(saved["times_s"]["kit"]) == 1


@pytest.mark.full  # 20 s each of a 2-core machine: make test-full runs it, make test keeps to its 10 minutes
def test_bench_step_against_trl(tmp_path):
    if not bench_step.have_trl():
        pytest.skip("trl is not installed; the TRL comparison needs `pip install -r requirements.txt`")
    res = bench_step.main(TINY + ["--variants", "trl,kit", "--mem-steps", "0", "--out", str(tmp_path / "b.json")])
    assert set(res["median_s"]) == {"trl", "kit"} and "ratio_kit_over_trl" in res


def test_missing_trl_is_skipped_with_a_message(monkeypatch, capsys):
    monkeypatch.setattr(bench_step, "have_trl", lambda: False)
    res = bench_step.main(TINY + ["--variants", "trl,kit", "--mem-steps", "0"])
    assert "trl is not installed" in capsys.readouterr().out
    assert set(res["median_s"]) == {"kit"}


@pytest.mark.full  # a minute of a 2-core machine: make test-full runs it, make test keeps to its 10 minutes
def test_bench_qwen2_slice_smoke_writes_json(tmp_path):
    """A tiny Qwen2 (vocab 512, hidden 64) through the whole script: model and tokenizer written, kit and TRL
    alternating, a memory probe for each side, the JSON keys. No times are asserted."""
    out = tmp_path / "slice.json"
    bench_qwen2_slice.main(["--smoke", "--out", str(out)])
    saved = json.loads(out.read_text())
    sides = {"trl", "kit"} if bench_step.have_trl() else {"kit"}
    assert {"settings", "machine", "median_s", "median_cpu_s", "per_step_mean", "times_s", "memory"} <= set(saved)
    assert set(saved["median_s"]) == set(saved["memory"]) == sides
    assert all(saved["memory"][v]["peak_rss_mb"] >= saved["memory"][v]["rss_before_steps_mb"] > 0 for v in sides)
    assert all(saved["per_step_mean"][v]["completions/mean_length"] > 0 for v in sides)
    assert saved["settings"]["vocab_size"] == 512 and saved["settings"]["max_completion_length"] == 4
    if "trl" in sides:
        assert saved["ratio_trl_over_kit"] == pytest.approx(saved["median_s"]["trl"] / saved["median_s"]["kit"])


def test_qwen2_slice_tokenizer_decodes_every_id():
    tok = bench_qwen2_slice.build_tokenizer(1000)
    assert len(tok) == 1000 and tok.pad_token_id == 0 and tok.eos_token_id == 2
    assert tok.decode(tok("37+15=")["input_ids"], skip_special_tokens=True) == "37+15="
    words = tok.convert_ids_to_tokens(list(range(99, 1000)))
    assert len(set(words)) == 901 and all(w.isalpha() and len(w) >= 2 for w in words)


@pytest.mark.full  # as above: make test-full runs it
def test_sweep_writes_json_and_png(tmp_path):
    pts = sweep.main(["--groups", "2", "--lengths", "3", "--G", "2", "--length", "3", "--prompts", "2", "--reps", "1",
                      "--warmup", "0", "--threads", "1", "--out", str(tmp_path)])
    assert [(p["G"], p["length"], p["B"]) for p in pts] == [(2, 3, 4)]  # the length axis repeats (2, 3): run once
    assert (tmp_path / "sweep.png").stat().st_size > 0 and json.loads((tmp_path / "sweep.json").read_text())["points"]


def test_gpu_check_runs_its_checks_on_cpu(tmp_path):
    """The GPU check's code path (bf16 autocast, reference, two updates, resume) on a CPU, small sizes."""
    out = tmp_path / "gpu.json"
    res = gpu_check.main(["--device", "cpu", "--small", "--steps", "1", "--prompts", "2", "-G", "2", "--length", "3",
                          "--threads", "1", "--out", str(out)])
    assert [r["model"] for r in res] == ["tiny", "qwen2-0.5b"] and json.loads(out.read_text())[0]["checks"]
    for r in res:
        assert r["ok"], r["checks"]
        assert r["first_update_max_logp_diff"] == 0.0 and r["resume_max_weight_diff"] == 0.0
        assert r["peak_memory_bytes"] > 0 and r["estimated_peak_bytes"] > 0


def test_lora_check_trains_and_reports_accuracy(capsys):
    res = lora_check.main(["--steps", "2", "--eval-size", "10", "--memory-cases", ""])
    assert [s for s, _ in res["train"]["evals"]] == [0, 2] and "memory" not in res
    assert "held-out greedy accuracy" in capsys.readouterr().out


def test_population_benchmark_prints_a_table_over_seeds(capsys):
    res = population.main(["--steps", "1", "--seeds", "0,1", "--eval-size", "10", "--reset-every", "1"])
    assert set(res) == set(population.METHODS) and all(len(v) == 2 for v in res.values())
    out = capsys.readouterr().out
    assert all(f"| {m} | " in out for m in population.METHODS)
    assert out.count("(128 completions") == 6  # 1 step x 16 prompts x 8 for every method and seed: the same budget
