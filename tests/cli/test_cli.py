import json
import os
import signal
import subprocess
import sys
import time

import pytest

from grpo_kit.cli import main
from grpo_kit.errors import GRPOKitError

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py); every test of the module


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
