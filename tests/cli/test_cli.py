import json
import subprocess
import sys

from grpo_kit.cli import main


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
