"""The run folder (grpo_kit/data/runfolder.py and the loop's use of it). No run is lost: output folders,
the lock, checkpoint rotation, resume, export, disk full, history."""
import errno
import importlib
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import run_cli

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.data.runfolder import LOCK_FILE, RunLock
from grpo_kit.errors import CheckpointError, DiskFullError, RewardError, RunFolderError
from grpo_kit.loop.train import latest_checkpoint, save_checkpoint, setup, train
from grpo_kit.rewards.judges import exact_answer

loop = importlib.import_module("grpo_kit.loop.train")  # the module (grpo_kit.loop.train is also the function)
BASE = "steps: 2\nnum_prompts: 2\nnum_generations: 2\neval_size: 5\neval_every: 0\nthreads: 1\ncheckpoint_every: 1\n"


@pytest.fixture(scope="module")
def _cli_run(tmp_path_factory):
    """A 2-step run written by ``grpo-kit train`` (config.yaml, history, checkpoints step 1 and 2)."""
    d = tmp_path_factory.mktemp("cli_run")
    (d / "c.yaml").write_text(BASE)
    assert main(["train", "--config", str(d / "c.yaml"), "--out", str(d / "run")]) == 0
    return d


@pytest.fixture
def cli_run(_cli_run, tmp_path):
    shutil.copytree(_cli_run, tmp_path / "w")
    return tmp_path / "w"


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- a new run into a run folder

def test_a_new_run_into_a_run_folder_is_refused_and_changes_nothing(cli_run, capsys):
    before = _snapshot(cli_run / "run")
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--steps", "1")
    assert code == 2 and err.count("\n") == 1 and "is not empty" in err and "--resume" in err and "--overwrite" in err
    assert _snapshot(cli_run / "run") == before


def test_overwrite_removes_the_old_run_first(cli_run, capsys):
    (cli_run / "run" / "checkpoints" / "step-000009").mkdir()  # an old, higher-numbered checkpoint
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--steps", "1",
                        "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in (cli_run / "run" / "checkpoints").iterdir()) == ["latest", "step-000001"]
    assert len((cli_run / "run" / "history.jsonl").read_text().splitlines()) == 1


def test_overwrite_refuses_a_folder_grpo_kit_did_not_write(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(BASE)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("precious")
    code, _, err = run_cli(capsys, "train", "--config", tmp_path / "c.yaml", "--out", tmp_path / "out", "--overwrite")
    assert code == 2 and "thesis.tex" in err and (tmp_path / "out" / "thesis.tex").read_text() == "precious"


# ---------------------------------------------------------------- rotation

def test_rotation_orders_checkpoints_by_step_number_and_keeps_the_newest(cli_run):
    cfg = GRPOConfig.from_yaml(cli_run / "c.yaml").replace(keep_checkpoints=1)
    run = setup(cfg)
    out = cli_run / "rot"
    for step in (999_999, 1_000_000):  # "step-1000000" < "step-999999" as strings
        run.step = step
        save_checkpoint(run, out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest", "step-1000000"]
    assert latest_checkpoint(out).name == "step-1000000"


def test_rotation_never_deletes_the_checkpoint_just_written(cli_run):
    cfg = GRPOConfig.from_yaml(cli_run / "c.yaml").replace(keep_checkpoints=1)
    run = setup(cfg)
    out = cli_run / "rot"
    (out / "checkpoints" / "step-000050").mkdir(parents=True)  # a stray later checkpoint
    run.step = 3
    save_checkpoint(run, out)
    assert latest_checkpoint(out).name == "step-000003" and (out / "checkpoints" / "step-000003").is_dir()


# ---------------------------------------------------------------- the lock

@pytest.fixture
def other_process():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()


def test_a_second_process_gets_a_clear_error_naming_the_holder(cli_run, capsys, other_process):
    (cli_run / "run" / LOCK_FILE).write_text(f"{other_process} {__import__('socket').gethostname()}\n")
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--resume",
                        "--steps", "3")
    assert code == 2 and f"in use by process {other_process}" in err and err.count("\n") == 1
    assert (cli_run / "run" / LOCK_FILE).is_file()  # the holder's lock is left alone


def test_a_stale_lock_is_taken_over_with_a_warning_and_released_at_the_end(cli_run, capsys):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # a pid that is gone
    (cli_run / "run" / LOCK_FILE).write_text(f"{p.pid} {__import__('socket').gethostname()}\n")
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--resume",
                        "--steps", "3", "--allow-schedule-change")
    assert code == 0, err
    assert f"taking over the lock of process {p.pid}" in err
    assert not (cli_run / "run" / LOCK_FILE).exists()


def test_the_lock_is_released_when_training_fails(tmp_path, small_cfg):
    def boom(prompts, completions, **kw):
        raise ValueError("broken judge")

    with pytest.raises(RewardError):
        list(train(small_cfg, setup(small_cfg, reward_funcs=[boom]), out_dir=tmp_path / "run"))
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    with RunLock(tmp_path / "run"):  # re-entrant in one process, released by the outermost exit
        with RunLock(tmp_path / "run"):
            pass
        assert (tmp_path / "run" / LOCK_FILE).is_file()
    assert not (tmp_path / "run" / LOCK_FILE).exists()


# ---------------------------------------------------------------- resume

def test_a_refused_resume_changes_nothing(cli_run, capsys):
    before = _snapshot(cli_run / "run")
    (cli_run / "other.yaml").write_text(BASE + "beta: 0.1\n")
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "other.yaml", "--out", cli_run / "run", "--resume",
                        "--steps", "3")
    assert code == 2 and "different config (beta: 0.0 -> 0.1)" in err
    assert _snapshot(cli_run / "run") == before  # config.yaml included: export would ship the right one


@pytest.mark.parametrize("make", ["missing", "empty", "no_checkpoint"])
def test_resume_with_nothing_to_resume_stops(tmp_path, capsys, make):
    (tmp_path / "c.yaml").write_text(BASE)
    out = tmp_path / "run"
    if make != "missing":
        out.mkdir()
    if make == "no_checkpoint":
        (out / "history.jsonl").write_text("")
    code, _, err = run_cli(capsys, "train", "--config", tmp_path / "c.yaml", "--out", out, "--resume")
    assert code == 2 and "nothing to resume" in err
    assert out.exists() == (make != "missing") and not (out / "checkpoints").exists()


def test_resume_to_fewer_steps_than_done_is_an_error(cli_run, capsys):
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--resume",
                        "--steps", "1")
    assert code == 2 and "already at step 2" in err


def test_extending_a_finished_cosine_run_follows_the_longer_schedule(tmp_path, small_cfg):
    cfg = small_cfg.replace(steps=2, lr_schedule="cosine")
    list(train(cfg, setup(cfg), out_dir=tmp_path))  # its cosine ends at 0
    longer = cfg.replace(steps=4)
    run = setup(longer)
    history = list(train(longer, run, out_dir=tmp_path, resume=True, allow_schedule_change=True))  # 0 -> 1.5e-4
    # step 3 of a 4-step cosine: lr = 3e-4 * (1 + cos(pi * 2/4)) / 2 = 1.5e-4; then 3e-4 * (1 + cos(3pi/4)) / 2
    assert [m["learning_rate"] for m in history] == pytest.approx([1.5e-4, 3e-4 * (1 + math.cos(3 * math.pi / 4)) / 2])


def _dataset(path):
    path.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a), "reverse_digits": True}) + "\n"
                            for a in range(10, 30)))
    return path


def test_resume_compares_the_dataset_by_content_not_by_path(tmp_path, small_cfg):
    data = _dataset(tmp_path / "a.jsonl")
    cfg = small_cfg.replace(steps=1, dataset=str(data))
    list(train(cfg, setup(cfg), out_dir=tmp_path / "run"))
    moved = data.rename(tmp_path / "b.jsonl")  # the same file under another name: resumes
    cfg2 = cfg.replace(steps=2, dataset=str(moved))
    run = setup(cfg2)
    list(train(cfg2, run, out_dir=tmp_path / "run", resume=True, allow_schedule_change=True))
    assert run.step == 2
    moved.write_text(moved.read_text().replace('"20"', '"21"'))  # the same path, other content: refused
    cfg3 = cfg2.replace(steps=3)
    with pytest.raises(CheckpointError, match="dataset changed since it was written"):
        list(train(cfg3, setup(cfg3), out_dir=tmp_path / "run", resume=True))


def test_resume_compares_the_model_by_content_not_by_path(tmp_path, small_cfg):
    from grpo_kit.model.tiny import SHIPPED

    shutil.copytree(SHIPPED, tmp_path / "m1")
    cfg = small_cfg.replace(steps=1, model=str(tmp_path / "m1"))
    list(train(cfg, setup(cfg), out_dir=tmp_path / "run"))
    (tmp_path / "m1").rename(tmp_path / "m2")
    moved = cfg.replace(steps=2, model=str(tmp_path / "m2"))
    run = setup(moved)
    list(train(moved, run, out_dir=tmp_path / "run", resume=True, allow_schedule_change=True))
    assert run.step == 2


def test_the_library_refuses_a_new_run_over_an_old_one_and_a_resume_of_nothing(tmp_path, small_cfg):
    cfg = small_cfg.replace(steps=1)
    list(train(cfg, setup(cfg), out_dir=tmp_path / "run"))
    with pytest.raises(RunFolderError, match="holds another run"):
        list(train(cfg, setup(cfg), out_dir=tmp_path / "run"))
    with pytest.raises(RunFolderError, match="nothing to resume"):
        list(train(cfg, setup(cfg), out_dir=tmp_path / "empty", resume=True))


# ---------------------------------------------------------------- export

def test_export_refuses_a_non_empty_folder_and_overwrite_replaces_it(cli_run, capsys):
    dest = cli_run / "exp"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep")
    code, _, err = run_cli(capsys, "export", "--run", cli_run / "run", "--to", dest)
    assert code == 2 and "not empty" in err and (dest / "mine.txt").read_text() == "keep"
    code, _, err = run_cli(capsys, "export", "--run", cli_run / "run", "--to", dest, "--overwrite")
    assert code == 2 and "mine.txt" in err and (dest / "mine.txt").read_text() == "keep"  # not the kit's file
    (dest / "mine.txt").unlink()
    assert run_cli(capsys, "export", "--run", cli_run / "run", "--to", dest)[0] == 0
    (dest / "model.safetensors").write_bytes(b"an older export")
    code, _, err = run_cli(capsys, "export", "--run", cli_run / "run", "--to", dest, "--overwrite")
    assert code == 0, err  # an earlier export is replaced
    assert (dest / "model.safetensors").read_bytes() != b"an older export"
    assert (dest / "grpo_config.yaml").read_text() == (cli_run / "run" / "config.yaml").read_text()


@pytest.mark.parametrize("to", ["run", "run/checkpoints", "."])
def test_export_never_replaces_the_run_it_exports(cli_run, capsys, to):
    before = _snapshot(cli_run / "run")
    code, _, err = run_cli(capsys, "export", "--run", cli_run / "run", "--to", cli_run / to, "--overwrite")
    assert code == 2 and "overlaps the run folder" in err and _snapshot(cli_run / "run") == before


def test_export_is_atomic(cli_run, capsys, monkeypatch):
    dest = cli_run / "exp"
    assert run_cli(capsys, "export", "--run", cli_run / "run", "--to", dest)[0] == 0
    before = _snapshot(dest)
    real, calls = shutil.copy2, []

    def copy_then_fail(src, dst):
        calls.append(src)
        if len(calls) == 3:
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return real(src, dst)
    monkeypatch.setattr(shutil, "copy2", copy_then_fail)
    code, _, err = run_cli(capsys, "export", "--run", cli_run / "run", "--to", dest, "--overwrite")
    assert code == 2 and "Input/output error" in err
    assert _snapshot(dest) == before  # the old export is whole
    assert sorted(p.name for p in cli_run.iterdir()) == ["c.yaml", "exp", "run"]  # no temp folder left


# ---------------------------------------------------------------- disk full, history

def test_disk_full_during_a_checkpoint_is_one_line_and_keeps_the_previous_one(cli_run, capsys, monkeypatch):
    real = torch.save

    def full(obj, path, *a, **k):
        if "step-000003" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, path, *a, **k)
    monkeypatch.setattr(torch, "save", full)
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--resume",
                        "--steps", "4", "--allow-schedule-change")
    errors = [line for line in err.splitlines() if "grpo-kit:" in line and "(allowed)" not in line]  # not the
    assert code == 2 and len(errors) == 1 and errors[0].startswith("grpo-kit: error: disk full"), err  # schedule note
    assert "disk full: could not write" in err and "step-000003.tmp/trainer_state.pt" in err
    assert "previous checkpoint step-000002 is intact" in err
    ck = cli_run / "run" / "checkpoints"
    assert latest_checkpoint(cli_run / "run").name == "step-000002" and not list(ck.glob("*.tmp"))
    assert len((cli_run / "run" / "history.jsonl").read_text().splitlines()) == 3  # step 3 finished
    assert not (cli_run / "run" / LOCK_FILE).exists()


def test_disk_full_on_the_history_leaves_no_partial_line(tmp_path, small_cfg, monkeypatch):
    rf = importlib.import_module("grpo_kit.data.runfolder")
    real, calls = rf._write, []

    def full(fd, data):
        calls.append(data)
        if len(calls) == 2:
            real(fd, data[:7])  # half a line reaches the disk, then it is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(rf, "_write", full)
    with pytest.raises(DiskFullError, match="history.jsonl"):
        list(train(small_cfg, setup(small_cfg), out_dir=tmp_path))
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["step"] == 1


def test_a_run_that_dies_part_way_keeps_the_history_of_its_finished_steps(tmp_path, small_cfg):
    calls = []

    def dies_in_step_3(prompts, completions, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the judge server went away")
        return exact_answer(prompts, completions, **kw)

    run = setup(small_cfg, reward_funcs=[dies_in_step_3])
    with pytest.raises(RewardError):
        list(train(small_cfg, run, out_dir=tmp_path))
    lines = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2] and lines == json.loads(json.dumps(run.history))


# ---------------------------------------------------------------- paths

@pytest.mark.parametrize("out,message", [("", "--out is empty"), ("run\ud800", "cannot be encoded"),
                                         ("c.yaml", "is a file, not a folder")])
def test_bad_output_paths_are_one_line(tmp_path, capsys, out, message):
    (tmp_path / "c.yaml").write_text(BASE)
    code, _, err = run_cli(capsys, "train", "--config", tmp_path / "c.yaml", "--out", tmp_path / out if out else out)
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert (tmp_path / "c.yaml").read_text() == BASE


def test_resume_and_overwrite_together_are_refused(cli_run, capsys):
    before = _snapshot(cli_run / "run")
    code, _, err = run_cli(capsys, "train", "--config", cli_run / "c.yaml", "--out", cli_run / "run", "--resume",
                        "--overwrite")
    assert code == 2 and "pass one of them" in err and _snapshot(cli_run / "run") == before
