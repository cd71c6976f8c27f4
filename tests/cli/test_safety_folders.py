"""Nothing of the user's is deleted: every command that writes a folder follows ``train --overwrite``'s rule.

--overwrite removes only the command's own files and refuses a folder holding anything else; a
folder that is or holds the command's input is refused; the folder the user stands in, one above
it and the home folder are never cleared. Every probe here points HOME at a temp folder and runs
from a nested temp folder: nothing outside ``tmp_path`` is ever a target.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.rewards.learned_judge import METADATA

ROOT = Path(__file__).parents[2]
RUN = "steps: 1\nnum_prompts: 2\nnum_generations: 4\neval_size: 4\neval_every: 0\nthreads: 1\ndevice: cpu\n"


def _cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


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
    code, _, err = _cli(capsys, "train-judge", "--data", prefs, "--out", out, "--steps", "1", "--overwrite")
    assert code == 2 and err.count("\n") == 1 and "important.txt" in err
    assert _snapshot(out) == before


def test_train_judge_refuses_an_out_folder_holding_its_data(tmp_path, capsys):
    proj = tmp_path / "myproj"
    proj.mkdir()
    data = proj / "prefs.jsonl"
    data.write_text("".join((ROOT / "datasets" / "add2_prefs.jsonl").read_text().splitlines(keepends=True)[:8]))
    before = _snapshot(proj)
    code, _, err = _cli(capsys, "train-judge", "--data", data, "--out", proj, "--steps", "1", "--overwrite")
    assert code == 2 and err.count("\n") == 1 and "holds the input" in err
    assert _snapshot(proj) == before


def test_train_judge_overwrite_replaces_only_its_own_judge(tmp_path, prefs, capsys):
    out = tmp_path / "judge"
    args = ("train-judge", "--data", prefs, "--out", out, "--steps", "1", "--batch-size", "4", "--heldout", "0")
    assert _cli(capsys, *args)[0] == 0
    (out / "model.safetensors").write_bytes(b"an older judge")
    code, _, err = _cli(capsys, *args, "--overwrite")
    assert code == 0, err
    assert (out / "model.safetensors").read_bytes() != b"an older judge"
    assert json.loads((out / METADATA).read_text())["kind"] == "learned_judge"


def test_train_judge_overwrite_refuses_a_model_folder_it_did_not_write(tmp_path, prefs, capsys):
    """A downloaded model has the same file names as a judge: without grpo_kit_judge.json it is not replaced."""
    out = tmp_path / "some_model"
    shutil.copytree(ROOT / "grpo_kit" / "checkpoints" / "tiny-add2", out, ignore=shutil.ignore_patterns("base_*"))
    before = _snapshot(out)
    code, _, err = _cli(capsys, "train-judge", "--data", prefs, "--out", out, "--steps", "1", "--overwrite")
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
    code, _, err = _cli(capsys, command, *args, "--overwrite")
    assert code == 2 and err.count("\n") == 1, err
    assert _snapshot(home) == before  # nothing under HOME changed, the current folder included


def test_export_to_the_empty_current_folder_keeps_it(home, kit_run, capsys):
    """``--to .`` in an empty folder writes the export there; the folder itself stays (not renamed away)."""
    here = Path.cwd()
    code, _, err = _cli(capsys, "export", "--run", kit_run, "--to", ".")
    assert code == 0, err
    assert Path.cwd() == here and (here / "model.safetensors").is_file()
    assert not [p for p in here.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_export_overwrite_keeps_files_it_did_not_write_out_of_reach(tmp_path, kit_run, capsys):
    dest = tmp_path / "exp"
    assert _cli(capsys, "export", "--run", kit_run, "--to", dest)[0] == 0
    (dest / "README.txt").write_text("my notes on this export")
    before = _snapshot(dest)
    code, _, err = _cli(capsys, "export", "--run", kit_run, "--to", dest, "--overwrite")
    assert code == 2 and "README.txt" in err and _snapshot(dest) == before


def test_export_refuses_a_folder_holding_the_run(tmp_path, kit_run, capsys):
    parent = tmp_path / "all"
    shutil.copytree(kit_run, parent / "run")
    before = _snapshot(parent)
    code, _, err = _cli(capsys, "export", "--run", parent / "run", "--to", parent, "--overwrite")
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
    code, _, err = _cli(capsys, "make-base", "--out", target)
    assert code == 2 and "not empty" in err and _snapshot(home) == before
    code, _, err = _cli(capsys, "make-base", "--out", target, "--overwrite")  # not a base it wrote, or protected
    assert code == 2 and err.count("\n") == 1 and _snapshot(home) == before


def test_export_verl_keeps_parquet_files_already_in_data_out(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(RUN)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"verl's own gsm8k split")
    code, _, err = _cli(capsys, "export-verl", "--config", cfg, "--data-out", data)
    assert code == 2 and "--overwrite" in err and (data / "train.parquet").read_bytes() == b"verl's own gsm8k split"
    assert _cli(capsys, "export-verl", "--config", cfg, "--data-out", data, "--overwrite")[0] == 0
    import pandas as pd

    assert len(pd.read_parquet(data / "train.parquet")) > 0 and sorted(p.name for p in data.iterdir()) == [
        "train.parquet", "val.parquet"]


def test_pregen_refuses_to_write_into_the_model_it_reads(tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(ROOT / "grpo_kit" / "checkpoints" / "tiny-add2", model)
    before = _snapshot(model)
    code, _, err = _cli(capsys, "pregen", "--model", model, "--prompts", "2", "--k", "2", "--out",
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
    assert _cli(capsys, "train", "--engine", "trl", "--config", cfg, "--out", run)[0] == 0
    from safetensors.torch import load_file, save_file

    weights = run / "model" / ("adapter_model.safetensors" if lora else "model.safetensors")
    tensors = load_file(weights)  # one step may leave the weights as they were (all rewards equal): move them
    save_file({k: v + 0.05 if ("lora_B" in k or not lora) else v for k, v in tensors.items()}, weights,
              metadata={"format": "pt"})
    code, out, err = _cli(capsys, "export", "--run", run, "--to", dest)
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
    code, _, err = _cli(capsys, "export", "--run", run, "--to", tmp_path / "exp")
    assert code == 2 and err.count("\n") == 1 and "train it to the end" in err
    assert not (tmp_path / "exp").exists()
