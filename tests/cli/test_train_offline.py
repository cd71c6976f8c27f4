"""grpo-kit train-offline: a preference file from grpo-kit pregen to a run folder, the folder's rules,
and each bad input refused in one line before anything is written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_cli

ROOT = Path(__file__).parents[2]
PREFS = ROOT / "datasets" / "add2_prefs.jsonl"


def _config(path: Path, **fields) -> Path:
    base = dict(steps=3, batch_prompts=4, eval_every=0, eval_size=10, checkpoint_every=2, threads=1, device="cpu")
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in {**base, **fields}.items()))
    return path


def test_pregen_then_train_offline_end_to_end(tmp_path, capsys):
    prefs = tmp_path / "prefs.jsonl"
    code, out, err = run_cli(capsys, "pregen", "--model", "tiny", "--prompts", "6", "--k", "4", "--out", prefs)
    assert code == 0, err
    cfg = _config(tmp_path / "c.yaml", preferences=str(prefs), loss="bt", stage1_steps=1)
    run = tmp_path / "run"
    code, out, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", run)
    assert code == 0, err
    assert "after 3 offline steps (bt loss)" in out and "checkpoints/ (latest step-000003)" in out
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [m["step"] for m in history] == [1, 2, 3] and [m["stage"] for m in history] == [1, 2, 2]
    assert "accuracy" in history[-1] and all(k in history[0] for k in ("loss", "grad_norm", "winner_nll"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["kind"] == "offline" and summary["steps"] == 3 and [s for s, _ in summary["evals"]] == [0, 3]
    assert (run / "curves.png").is_file() and (run / "config.yaml").is_file()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step-000002", "step-000003"]
    ck = run / "checkpoints" / "step-000003"
    state = torch.load(ck / "trainer_state.pt", weights_only=True)  # plain values: no unrestricted pickle
    assert state["kind"] == "offline" and {"optimizer", "batch_gen", "baselines", "torch_rng"} <= set(state)
    assert (ck / "model.safetensors").is_file()
    # the run folder is what the dashboard's side-by-side view reads: a line in each offline panel
    from grpo_kit.view import compare_runs
    from grpo_kit.view.plotting import OFFLINE_PANELS

    fig = compare_runs({"offline bt": run}, keys=[key for key, _ in OFFLINE_PANELS])
    assert [len(ax.get_lines()) >= 1 for ax in fig.axes[:4]] == [True] * 4

    # the folder's rules: a second run is refused without a flag; --resume with more steps continues it
    code, _, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", run)
    assert code == 2 and "is not empty" in err and "--resume" in err
    (run / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", run, "--overwrite")
    assert code == 2 and "did not write (notes.txt)" in err  # never deletes what it did not write
    (run / "notes.txt").unlink()
    _config(cfg, preferences=str(prefs), loss="bt", stage1_steps=1, steps=5)
    code, out, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", run, "--resume")
    assert code == 0, err
    assert [json.loads(line)["step"] for line in (run / "history.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 5]
    # a resume with another loss is refused, and config.yaml stays as it was
    before = (run / "config.yaml").read_text()
    _config(cfg, preferences=str(prefs), loss="margin", stage1_steps=1, steps=6)
    code, _, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", run, "--resume")
    assert code == 2 and "different config (loss: 'bt' -> 'margin')" in err
    assert (run / "config.yaml").read_text() == before
    # grpo-kit export takes an offline run's model too
    code, out, err = run_cli(capsys, "export", "--run", run, "--to", tmp_path / "exported")
    assert code == 0, err
    assert (tmp_path / "exported" / "model.safetensors").is_file()


def _one_completion(tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_text(json.dumps({"prompt": "1+1=", "responses": ["2"], "preference_matrix": [[0.0]]}) + "\n")
    return {"preferences": str(p)}


def _malformed(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"prompt": "1+1=", "responses": ["2", "3"], "preference_matrix": [[0, 1], [1, 0]]}) + "\n")
    return {"preferences": str(p)}


@pytest.mark.parametrize("fields,problem,fix", [
    (_one_completion, "1 response: a preference group needs at least 2 to compare", "pregen --k 2 or more"),
    (lambda t: {"preferences": str(t / "missing.jsonl")}, "missing.jsonl: no such file", "grpo-kit pregen --out"),
    (lambda t: {"preferences": str(PREFS), "loss": "dpo"}, "OfflineConfig.loss='dpo'", "choose 'margin', 'bt', 'baseline'"),
    (_malformed, "line 1: preference matrix at pair (i=0, j=1) is contradictory", "they must be opposite"),
    (lambda t: {}, "OfflineConfig.preferences is not set", "grpo-kit pregen --out FILE writes one"),
], ids=["one completion", "missing file", "unknown loss", "malformed matrix", "no file named"])
def test_a_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, fields, problem, fix):
    cfg = _config(tmp_path / "c.yaml", **fields(tmp_path))
    code, _, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert problem in err and fix in err, err
    assert not (tmp_path / "run").exists()  # nothing written, not even the folder


def test_the_two_kinds_of_run_do_not_resume_each_other(tmp_path, capsys):
    online = tmp_path / "online"  # a GRPO run's checkpoint (its trainer state has no kind: offline)
    (online / "checkpoints" / "step-000001").mkdir(parents=True)
    torch.save({"step": 1, "config": {}}, online / "checkpoints" / "step-000001" / "trainer_state.pt")
    (online / "checkpoints" / "latest").write_text("step-000001")
    cfg = _config(tmp_path / "c.yaml", preferences=str(PREFS))
    code, _, err = run_cli(capsys, "train-offline", "--config", cfg, "--out", online, "--resume")
    assert code == 2 and "not an offline preference run's" in err and "grpo-kit train --resume" in err

    offline = tmp_path / "offline"
    (offline / "checkpoints" / "step-000001").mkdir(parents=True)
    torch.save({"kind": "offline", "step": 1}, offline / "checkpoints" / "step-000001" / "trainer_state.pt")
    (offline / "checkpoints" / "latest").write_text("step-000001")
    (tmp_path / "g.yaml").write_text("steps: 2\nnum_prompts: 2\nnum_generations: 2\neval_size: 4\nthreads: 1\n")
    code, _, err = run_cli(capsys, "train", "--config", tmp_path / "g.yaml", "--out", offline, "--resume")
    assert code == 2 and "offline preference run" in err and "train-offline --resume" in err


def test_the_documented_config_is_the_shipped_one_and_valid():
    from grpo_kit.config import OfflineConfig

    shipped = (ROOT / "configs" / "offline.yaml").read_text()
    assert "```yaml\n" + shipped + "```" in (ROOT / "docs" / "command-line.md").read_text()
    cfg = OfflineConfig.from_yaml(ROOT / "configs" / "offline.yaml")
    assert cfg.preferences == "datasets/add2_prefs.jsonl" and (ROOT / cfg.preferences).is_file()
