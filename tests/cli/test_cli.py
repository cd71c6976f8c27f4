from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import run_cli

from grpo_kit.cli import main
from grpo_kit.errors import GRPOKitError
from grpo_kit.rewards.learned_judge import METADATA

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py); every test of the module

ROOT = Path(__file__).parents[2]


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bad_flag_is_one_line(capsys):
    code, _, err = _run(["demo", "--steps", "ten"], capsys)
    assert code == 2 and err.count("\n") == 1 and "ten" in err and "Traceback" not in err


def test_no_command(capsys):
    code, _, err = _run([], capsys)
    assert code == 2 and "no command" in err


def test_unreadable_checkpoint_is_one_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    code, _, err = _run(["eval", "--model", str(tmp_path)], capsys)
    assert code == 2 and err.startswith("grpo-kit: error: cannot load model") and err.count("\n") == 1


def test_missing_config_file(capsys, tmp_path):
    code, _, err = _run(["train", "--config", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "cannot read config" in err


def test_demo_writes_its_outputs(tmp_path):
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "grpo_kit.cli", "demo", "--steps", "3", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert {"base_accuracy", "final_accuracy", "steps", "wall_seconds", "seed"} <= set(s) and s["steps"] == 3
    assert len((out / "history.jsonl").read_text().splitlines()) == 3
    assert (out / "curves.png").stat().st_size > 10_000 and (out / "curves.html").is_file()
    assert "held-out greedy accuracy" in p.stdout


def test_train_resume_and_export(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: 2\nnum_prompts: 2\nnum_generations: 2\neval_size: 10\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out)]) == 0
    assert main(["train", "--config", str(cfg), "--out", str(out), "--steps", "3", "--resume",
                 "--allow-schedule-change"]) == 0  # cosine rate: 0 at step 2 of 2, a quarter of the peak at 2 of 3
    assert len((out / "history.jsonl").read_text().splitlines()) == 3
    assert main(["export", "--run", str(out), "--to", str(tmp_path / "exp")]) == 0
    assert (tmp_path / "exp" / "model.safetensors").is_file()
    capsys.readouterr()


# ---------------------------------------------------------------- The CLI shows one line, no traceback, for a user mistake; --debug shows the traceback.


BASE = "steps: 1\nnum_prompts: 2\nnum_generations: 2\neval_size: 5\nthreads: 1\n"


def _train(tmp_path, capsys, yaml_text, *extra):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml_text)
    code = main(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), *extra])
    err = capsys.readouterr().err
    return code, err


def _bad_rows(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": "four"}\n')
    return p


@pytest.mark.parametrize("yaml_text,extra,expected", [
    ("steps: [1,\n", [], "is not valid YAML: expected the node content, but found '<stream end>' at line 2"),
    ("steps: 1\n\tbeta: 2\n", [], "is not valid YAML"),
    ("- steps\n- 3\n", [], "must be a YAML mapping"),
    (BASE.replace("num_generations: 2\n", "num_generations: '4'\n"), [],
     "GRPOConfig.num_generations='4': must be a whole number >= 2"),
    (BASE + "num_generations: 4\n", [], "sets 'num_generations' twice (lines 3 and 6)"),
    (BASE + "num_generation: 4\n", [], "unknown config field(s) ['num_generation']"),
    (BASE + "reward_funcs: [exact, answer]\n", [], "unknown reward function 'exact'"),
    (BASE + "reward_funcs: exact_answer\n", [], "GRPOConfig.reward_funcs='exact_answer'"),
    (BASE + "reward_error_policy: ignore\n", [], "GRPOConfig.reward_error_policy='ignore'"),
    (BASE, ["--model", "/no/such/model"], "/no/such/model: no such model folder"),
    (BASE, ["--dataset", "DATA"], "d.jsonl, line 2: field 'answer' is not a number: 'four'"),
    (BASE, ["--dataset", "NOFILE"], "nope.jsonl: no such file"),
])
def test_user_mistakes_are_one_line(tmp_path, capsys, yaml_text, extra, expected):
    files = {"DATA": str(_bad_rows(tmp_path)), "NOFILE": str(tmp_path / "nope.jsonl")}
    code, err = _train(tmp_path, capsys, yaml_text, *[files.get(a, a) for a in extra])
    assert code == 2 and err.startswith("grpo-kit: error: ") and err.count("\n") == 1, err
    assert expected in err and "Traceback" not in err


def test_debug_shows_the_traceback(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("num_generations: 1\n")
    with pytest.raises(GRPOKitError, match="num_generations"):
        main(["--debug", "train", "--config", str(cfg)])


def test_unwritable_output_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")  # --out below a file: the folder cannot be made
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE)
    code = main(["train", "--config", str(cfg), "--out", str(tmp_path / "file" / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "file/run" in err and "Traceback" not in err


def test_skipping_bad_rows_from_the_config(tmp_path, capsys):
    data = _bad_rows(tmp_path)
    code, err = _train(tmp_path, capsys, BASE + "on_bad_row: skip\n", "--dataset", str(data))
    assert code == 0 and "skipped 1 malformed row(s) of 2" in err and "line 2" in err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1


def test_ctrl_c_in_train_says_where_to_resume(tmp_path, capsys, monkeypatch):
    import importlib

    loop = importlib.import_module("grpo_kit.loop.train")  # the module (grpo_kit.loop.train is also the function)

    step = loop.grpo_step

    def ctrl_c_during_the_step(run):
        m = step(run)
        if run.step == 1:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, caught by the loop's handler
            time.sleep(0.05)
        return m
    monkeypatch.setattr(loop, "grpo_step", ctrl_c_during_the_step)
    code, err = _train(tmp_path, capsys, BASE.replace("steps: 1", "steps: 5"))
    assert code == 130 and "stopped by Ctrl-C after step 1 of 5" in err and "--resume" in err
    assert (tmp_path / "run" / "checkpoints" / "step-000001").is_dir()
    assert len((tmp_path / "run" / "history.jsonl").read_text().splitlines()) == 1


# ================================================================ nothing of the user's is deleted
# Every command that writes a folder follows ``train --overwrite``'s rule: --overwrite removes only the
# command's own files and refuses a folder holding anything else; a folder that is or holds the
# command's input is refused; the folder the user stands in, one above it and the home folder are never
# cleared. Every probe here points HOME at a temp folder and runs from a nested temp folder: nothing
# outside ``tmp_path`` is ever a target.

RUN = "steps: 1\nnum_prompts: 2\nnum_generations: 4\neval_size: 4\neval_every: 0\nthreads: 1\ndevice: cpu\n"


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HOME is a temp folder; the test stands in ``home/work/here`` (below it: ``..`` is ``home/work``)."""
    h = tmp_path / "home"
    here = h / "work" / "here"
    here.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.chdir(here)
    return h


@pytest.fixture
def prefs(tmp_path):
    data = tmp_path / "in" / "prefs.jsonl"
    data.parent.mkdir()
    data.write_text("".join((ROOT / "datasets" / "add2_prefs.jsonl").read_text().splitlines(keepends=True)[:8]))
    return data


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("kit_run")
    (d / "c.yaml").write_text(RUN)
    assert main(["train", "--config", str(d / "c.yaml"), "--out", str(d / "run")]) == 0
    return d / "run"


# ---------------------------------------------------------------- train-judge

def test_train_judge_overwrite_refuses_a_folder_with_an_unrelated_file(tmp_path, prefs, capsys):
    out = tmp_path / "judge"
    out.mkdir()
    for name in ("config.json", "model.safetensors", METADATA, "important.txt"):  # an earlier judge, and a note
        (out / name).write_text(name)
    before = _snapshot(out)
    code, _, err = run_cli(capsys, "train-judge", "--data", prefs, "--out", out, "--steps", "1", "--overwrite")
    assert code == 2 and err.count("\n") == 1 and "important.txt" in err
    assert _snapshot(out) == before


def test_train_judge_refuses_an_out_folder_holding_its_data(tmp_path, capsys):
    proj = tmp_path / "myproj"
    proj.mkdir()
    data = proj / "prefs.jsonl"
    data.write_text("".join((ROOT / "datasets" / "add2_prefs.jsonl").read_text().splitlines(keepends=True)[:8]))
    before = _snapshot(proj)
    code, _, err = run_cli(capsys, "train-judge", "--data", data, "--out", proj, "--steps", "1", "--overwrite")
    assert code == 2 and err.count("\n") == 1 and "holds the input" in err
    assert _snapshot(proj) == before


def test_train_judge_overwrite_replaces_only_its_own_judge(tmp_path, prefs, capsys):
    out = tmp_path / "judge"
    args = ("train-judge", "--data", prefs, "--out", out, "--steps", "1", "--batch-size", "4", "--heldout", "0")
    assert run_cli(capsys, *args)[0] == 0
    (out / "model.safetensors").write_bytes(b"an older judge")
    code, _, err = run_cli(capsys, *args, "--overwrite")
    assert code == 0, err
    assert (out / "model.safetensors").read_bytes() != b"an older judge"
    assert json.loads((out / METADATA).read_text())["kind"] == "learned_judge"


def test_train_judge_overwrite_refuses_a_model_folder_it_did_not_write(tmp_path, prefs, capsys):
    """A downloaded model has the same file names as a judge: without grpo_kit_judge.json it is not replaced."""
    out = tmp_path / "some_model"
    shutil.copytree(ROOT / "grpo_kit" / "checkpoints" / "tiny-add2", out, ignore=shutil.ignore_patterns("base_*"))
    before = _snapshot(out)
    code, _, err = run_cli(capsys, "train-judge", "--data", prefs, "--out", out, "--steps", "1", "--overwrite")
    assert code == 2 and METADATA in err and _snapshot(out) == before


# ---------------------------------------------------------------- ., .., ~ and the command's input

def _own_files(folder: Path, command: str) -> None:
    """Files named as ``command`` writes them (so that only the protected-folder rule can refuse)."""
    names = {"train-judge": ("config.json", "model.safetensors", METADATA),
             "export": ("config.json", "model.safetensors", "grpo_config.yaml"),
             "train": ("config.yaml", "history.jsonl", "summary.json")}[command]
    for name in names:
        (folder / name).write_text("the user's " + name)


@pytest.mark.parametrize("command", ["train-judge", "export", "train"])
@pytest.mark.parametrize("target", [".", "..", "~"])
def test_overwrite_never_clears_the_current_folder_one_above_or_home(home, tmp_path, prefs, kit_run, command,
                                                                     target, capsys):
    folder = {".": Path.cwd(), "..": Path.cwd().parent, "~": home}[target]
    _own_files(folder, command)
    (folder / "notes.txt").write_text("mine") if target == ".." else None  # with a foreign file too
    cfg = tmp_path / "c.yaml"
    cfg.write_text(RUN)
    args = {"train-judge": ("--data", prefs, "--out", target, "--steps", "1"),
            "export": ("--run", kit_run, "--to", target),
            "train": ("--config", cfg, "--out", target)}[command]
    before = _snapshot(home)
    code, _, err = run_cli(capsys, command, *args, "--overwrite")
    assert code == 2 and err.count("\n") == 1, err
    assert _snapshot(home) == before  # nothing under HOME changed, the current folder included


def test_export_to_the_empty_current_folder_keeps_it(home, kit_run, capsys):
    """``--to .`` in an empty folder writes the export there; the folder itself stays (not renamed away)."""
    here = Path.cwd()
    code, _, err = run_cli(capsys, "export", "--run", kit_run, "--to", ".")
    assert code == 0, err
    assert Path.cwd() == here and (here / "model.safetensors").is_file()
    assert not [p for p in here.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_export_overwrite_keeps_files_it_did_not_write_out_of_reach(tmp_path, kit_run, capsys):
    dest = tmp_path / "exp"
    assert run_cli(capsys, "export", "--run", kit_run, "--to", dest)[0] == 0
    (dest / "README.txt").write_text("my notes on this export")
    before = _snapshot(dest)
    code, _, err = run_cli(capsys, "export", "--run", kit_run, "--to", dest, "--overwrite")
    assert code == 2 and "README.txt" in err and _snapshot(dest) == before


def test_export_refuses_a_folder_holding_the_run(tmp_path, kit_run, capsys):
    parent = tmp_path / "all"
    shutil.copytree(kit_run, parent / "run")
    before = _snapshot(parent)
    code, _, err = run_cli(capsys, "export", "--run", parent / "run", "--to", parent, "--overwrite")
    assert code == 2 and "overlaps the run folder" in err and _snapshot(parent) == before


# ---------------------------------------------------------------- make-base, export-verl, pregen

@pytest.mark.parametrize("target", ["mine", ".", "~"])
def test_make_base_refuses_a_folder_it_did_not_write_before_training(home, monkeypatch, capsys, target):
    import grpo_kit.lab.base as base

    def no_training(*a, **k):
        raise AssertionError("make-base trained although --out must be refused")
    monkeypatch.setattr(base, "train_base", no_training)
    folder = {"mine": Path.cwd() / "mine", ".": Path.cwd(), "~": home}[target]
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("the user's")
    before = _snapshot(home)
    code, _, err = run_cli(capsys, "make-base", "--out", target)
    assert code == 2 and "not empty" in err and _snapshot(home) == before
    code, _, err = run_cli(capsys, "make-base", "--out", target, "--overwrite")  # not a base it wrote, or protected
    assert code == 2 and err.count("\n") == 1 and _snapshot(home) == before


def test_export_verl_keeps_parquet_files_already_in_data_out(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(RUN)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"verl's own gsm8k split")
    code, _, err = run_cli(capsys, "export-verl", "--config", cfg, "--data-out", data)
    assert code == 2 and "--overwrite" in err and (data / "train.parquet").read_bytes() == b"verl's own gsm8k split"
    assert run_cli(capsys, "export-verl", "--config", cfg, "--data-out", data, "--overwrite")[0] == 0
    import pandas as pd

    assert len(pd.read_parquet(data / "train.parquet")) > 0 and sorted(p.name for p in data.iterdir()) == [
        "train.parquet", "val.parquet"]


def test_pregen_refuses_to_write_into_the_model_it_reads(tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(ROOT / "grpo_kit" / "checkpoints" / "tiny-add2", model)
    before = _snapshot(model)
    code, _, err = run_cli(capsys, "pregen", "--model", model, "--prompts", "2", "--k", "2", "--out",
                        model / "config.json")
    assert code == 2 and "inside the model folder" in err and _snapshot(model) == before


# ---------------------------------------------------------------- D19: export of an --engine trl run

@pytest.mark.parametrize("lora", [None, "{r: 4}"])
def test_export_of_a_finished_trl_run(tmp_path, capsys, lora):
    """A real 1-step ``train --engine trl`` run (a few seconds): its ``model/`` (full weights, or a LoRA
    adapter that export merges into the base) becomes a folder from_pretrained loads, same logits."""
    from transformers import AutoModelForCausalLM

    from grpo_kit.model.tiny import load_model

    cfg = tmp_path / "c.yaml"
    cfg.write_text(RUN + (f"lora: {lora}\n" if lora else ""))
    run, dest = tmp_path / "run", tmp_path / "exp"
    assert run_cli(capsys, "train", "--engine", "trl", "--config", cfg, "--out", run)[0] == 0
    from safetensors.torch import load_file, save_file

    weights = run / "model" / ("adapter_model.safetensors" if lora else "model.safetensors")
    tensors = load_file(weights)  # one step may leave the weights as they were (all rewards equal): move them
    save_file({k: v + 0.05 if ("lora_B" in k or not lora) else v for k, v in tensors.items()}, weights,
              metadata={"format": "pt"})
    code, out, err = run_cli(capsys, "export", "--run", run, "--to", dest)
    assert code == 0, err
    assert ("LoRA adapter merged" in out) == bool(lora)
    names = {p.name for p in dest.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "grpo_config.yaml"} <= names
    assert not names & {"adapter_config.json", "adapter_model.safetensors", "training_args.bin"}
    exported = AutoModelForCausalLM.from_pretrained(dest).eval()
    if lora:
        from peft import PeftModel

        trained = PeftModel.from_pretrained(load_model("tiny")[0], str(run / "model")).eval()
    else:
        trained = AutoModelForCausalLM.from_pretrained(run / "model").eval()
    ids = torch.tensor([[1, 5, 6, 7, 2, 3]])
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, trained(ids).logits, rtol=1e-5, atol=1e-5)
    base = load_model("tiny")[0].eval()
    with torch.no_grad():
        assert not torch.allclose(exported(ids).logits, base(ids).logits)  # the trained weights, not the base


def test_export_of_an_unfinished_trl_run_says_what_to_do(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(RUN)
    (run / "history.jsonl").write_text('{"step": 1}\n')
    code, _, err = run_cli(capsys, "export", "--run", run, "--to", tmp_path / "exp")
    assert code == 2 and err.count("\n") == 1 and "train it to the end" in err
    assert not (tmp_path / "exp").exists()
