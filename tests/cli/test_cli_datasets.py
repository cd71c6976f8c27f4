"""``grpo-kit train --dataset`` with the forms of grpo_kit/data/sources.py: a parquet file trains; a bad dataset
is one line on stderr, exit 2, and no run folder left behind."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import run_cli

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "gsm8k_sample.jsonl"
# tests/conftest.py's small config on the gsm8k task with configs/gsm8k.yaml's judges, two short steps
CFG = ("task: gsm8k\nreward_funcs: [math_answer, gsm8k_format]\nsteps: 2\nnum_prompts: 2\nnum_generations: 2\n"
       "max_completion_length: 8\neval_every: 0\neval_size: 2\ncheckpoint_every: 0\nthreads: 1\ndevice: cpu\n")


@pytest.fixture
def parquet(tmp_path):
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    path = tmp_path / "gsm8k.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def _train(tmp_path, capsys, extra_yaml="", *args):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CFG + extra_yaml)
    return run_cli(capsys, "train", "--config", cfg, "--out", tmp_path / "run", *args)


def test_train_from_a_parquet_file(tmp_path, capsys, parquet):
    code, out, err = _train(tmp_path, capsys, "", "--dataset", parquet)
    assert code == 0, err
    hist = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert [m["step"] for m in hist] == [1, 2]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["config"]["dataset"] == str(parquet)


@pytest.mark.parametrize("extra_yaml,args,expected", [
    ("dataset_columns: {prompt: problem}\n", ["--dataset", "PARQUET"],
     "gsm8k.parquet: no column 'problem' for the prompt (columns: 'question', 'answer')"),
    ("", ["--dataset", "PARQUET", "--dataset-split", "test"],
     "dataset_split='test', but this parquet source is one table without splits"),
    ("", ["--dataset", "TXT"], "notes.txt: unknown dataset file type '.txt'"),
    ("", ["--dataset", "openai/gsm8k", "--dataset-config", "main"],
     "openai/gsm8k: not a file or folder here, so read as a Hugging Face Hub dataset, but the hub cannot be reached "
     "(HF_HUB_OFFLINE is set)"),
])
def test_a_bad_dataset_is_one_line_and_leaves_no_run_folder(tmp_path, capsys, monkeypatch, parquet, extra_yaml, args,
                                                            expected):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    (tmp_path / "notes.txt").write_text("question,answer\n")
    files = {"PARQUET": str(parquet), "TXT": str(tmp_path / "notes.txt")}
    t0 = time.perf_counter()
    code, _, err = _train(tmp_path, capsys, extra_yaml, *[files.get(a, a) for a in args])
    took = time.perf_counter() - t0
    assert code == 2 and err.startswith("grpo-kit: error: ") and err.count("\n") == 1, err
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # refused before anything was written (the folder made for it removed)
    if "openai" in args:
        assert took < 2.0, took


def test_export_verl_writes_the_items_of_a_parquet_dataset(tmp_path, capsys, parquet):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CFG + f"dataset: {parquet}\n")
    code, out, err = run_cli(capsys, "export-verl", "--config", cfg, "--data-out", tmp_path / "data")
    assert code == 0, err
    import pyarrow.parquet as pq

    train = pq.read_table(tmp_path / "data" / "train.parquet").to_pylist()
    assert len(train) == 32 and train[0]["reward_model"]["ground_truth"] == "19"  # the sample's first answer, 4*6 - 5
