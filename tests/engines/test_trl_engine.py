"""``--engine trl``: TRL's GRPOTrainer on the tiny model (CPU, a few steps), logged as the kit logs it."""
from __future__ import annotations

import json

import pytest

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.engines import trl_engine
from grpo_kit.engines.trl_engine import (
    KitHistory,
    check_trl_engine,
    ensure_pad_token,
    kit_metrics,
    parse_trl_overrides,
    trl_config,
    trl_kwargs,
)
from grpo_kit.errors import ConfigError
from grpo_kit.eval.diagnostics import diagnose, read_history
from grpo_kit.view.plotting import plot_history, xy

CORE = ("reward", "reward_std", "frac_reward_zero_std", "rewards/exact_answer/mean", "completions/mean_length",
        "completions/clipped_ratio", "loss", "grad_norm", "learning_rate", "entropy", "clip_ratio/region_mean",
        "step", "step_time")


def test_kit_metrics_merges_the_updates_of_one_step():
    """Two updates of one generated batch (num_iterations=2): TRL logs the generation metrics with the
    first; entropy and kl come from the first, grad_norm from the last, the rest is the mean."""
    first = {"loss": 0.5, "grad_norm": 2.0, "learning_rate": 1e-3, "epoch": 0.1, "num_tokens": 40.0,
             "reward": 0.25, "completions/mean_length": 3.5, "entropy": 1.2, "kl": 0.0,
             "clip_ratio/region_mean": 0.0, "rewards/exact_answer/mean": 0.25, "some_text": "x", "none": None}
    second = {"loss": 0.25, "grad_norm": 4.0, "learning_rate": 9e-4, "epoch": 0.2, "entropy": 1.0, "kl": 0.01,
              "clip_ratio/region_mean": 0.5}
    m = kit_metrics([first, second], step=7)
    assert m == {"loss": 0.375, "grad_norm": 4.0, "learning_rate": 0.00095, "reward": 0.25,
                 "completions/mean_length": 3.5, "entropy": 1.2, "kl": 0.0, "clip_ratio/region_mean": 0.25,
                 "rewards/exact_answer/mean": 0.25, "step": 7}


def test_trl_arguments_from_the_config(tmp_path):
    cfg = GRPOConfig(num_prompts=2, num_generations=4, steps=3, num_iterations=2, device="cpu")
    args = trl_config(cfg, tmp_path, parse_trl_overrides(["use_vllm=false", "vllm_mode=server"], cfg))
    assert (args.max_steps, args.num_generations, args.logging_steps) == (6, 4, 1)
    assert args.use_vllm is False and args.vllm_mode == "server" and args.report_to == []
    with pytest.raises(ConfigError, match="no field 'use_vllmm'"):
        parse_trl_overrides(["use_vllmm=true"], cfg)
    with pytest.raises(ConfigError, match="beta.*kit's field"):
        parse_trl_overrides(["beta=0.1"], cfg)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_trl_overrides(["use_vllm"], cfg)


@pytest.mark.parametrize("field, value", [("gold_reward_funcs", ["math_answer"]), ("reward_error_policy", "zero"),
                                          ("reward_timeout_s", 5.0)])
def test_fields_trl_cannot_honour_are_refused(field, value):
    with pytest.raises(ConfigError, match=field):
        check_trl_engine(GRPOConfig(**{field: value}))


def test_cli_refuses_a_field_trl_cannot_honour_before_writing_anything(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(gold_reward_funcs=["math_answer"], steps=2, eval_every=0, device="cpu").to_yaml(cfg)
    out = tmp_path / "run"
    assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(out)]) == 2
    assert "gold_reward_funcs" in capsys.readouterr().err and not out.exists()  # no folder, no config.yaml


def test_cli_trains_with_trl_and_writes_the_kits_run_folder(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(num_prompts=2, num_generations=4, steps=2, num_iterations=2, beta=0.04, eval_every=0, eval_size=8,
               device="cpu", threads=2).to_yaml(cfg)
    out = tmp_path / "run"
    assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    history = read_history(out / "history.jsonl")
    assert [m["step"] for m in history] == [1, 2]  # kit steps, each 2 TRL updates
    for m in history:
        assert all(k in m for k in CORE), sorted(set(CORE) - set(m))
        assert 0.0 <= m["reward"] <= 1.0 and m["kl"] >= 0.0
    lrs = [m["learning_rate"] for m in history]
    assert lrs == pytest.approx([3e-4, 1.5e-4])  # cosine over 4 updates, at updates 0 and 2: 0.5 (1 + cos(pi/2))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "trl" and [s for s, _ in summary["evals"]] == [0, 2]
    assert history[-1]["accuracy"] == summary["final_accuracy"]
    assert isinstance(diagnose(history, GRPOConfig.from_yaml(out / "config.yaml")), list)
    assert xy(history, "reward")[0] == [1, 2]
    plot_history(history, summary["evals"])
    assert (out / "curves.png").is_file() and (out / "curves.html").is_file()
    assert (out / "model" / "config.json").is_file() and "model/" in printed
    from grpo_kit.data.runfolder import check_out_folder

    assert check_out_folder(out, overwrite=True) == out and not any(out.iterdir())  # --overwrite replaces a TRL run


def test_cli_refuses_trl_arguments_without_the_trl_engine(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig().to_yaml(cfg)
    assert main(["train", "--config", str(cfg), "--trl-arg", "use_vllm=true", "--out", str(tmp_path / "run")]) == 2
    assert "--trl-arg needs --engine trl" in capsys.readouterr().err
    assert main(["train", "--engine", "trl", "--resume", "--config", str(cfg), "--out", str(tmp_path / "r2")]) == 2
    assert "--resume works with the kit's engine only" in capsys.readouterr().err


def test_a_tokenizer_without_pad_token_pads_with_eos():
    from grpo_kit.model.tiny import build_tokenizer

    tok = build_tokenizer()
    tok.pad_token = None
    assert ensure_pad_token(tok).pad_token == "<eos>" and tok.pad_token_id == tok.eos_token_id


def test_other_processes_of_a_launch_leave_the_run_folder_to_process_0(tmp_path, monkeypatch, capsys):
    """Under accelerate launch (RANK set per process), process 1 trains but writes no run-folder file."""
    calls = []

    def fake_train(cfg, out_dir, overrides=None, quiet=True):
        calls.append((out_dir, overrides))
        return KitHistory(cfg, None, [], None)

    monkeypatch.setattr(trl_engine, "train_with_trl", fake_train)
    monkeypatch.setenv("RANK", "1")
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(steps=2).to_yaml(cfg)
    out = tmp_path / "run"
    assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(out),
                 "--trl-arg", "use_vllm=false"]) == 0
    assert calls == [(out, {"use_vllm": False})]
    assert not out.exists() and capsys.readouterr().out == ""


def graduation_commands() -> list[list[str]]:
    """The command lines of docs/graduating.md (the README links it), split as a shell would."""
    import shlex
    from pathlib import Path

    section = (Path(__file__).resolve().parents[2] / "docs" / "graduating.md").read_text()
    lines = [line for block in section.split("```")[1::2] for line in block.splitlines()
             if line.strip() and not line.startswith("#")]
    return [[w for w in shlex.split(line) if not w.startswith("CUDA_VISIBLE_DEVICES=")] for line in lines]


def test_the_readme_commands_parse_with_accelerate_torchrun_and_trl():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser
    from trl.scripts.vllm_serve import make_parser

    commands = graduation_commands()
    assert len(commands) == 6
    (torchrun,) = [c for c in commands if c[0] == "torchrun"]  # the run on 2 CPU processes
    a = get_args_parser().parse_args(torchrun[1:])
    assert a.module and a.standalone and a.nproc_per_node == "2" and a.training_script == "grpo_kit.cli"
    assert a.training_script_args[:3] == ["train", "--engine", "trl"]
    launches = [c for c in commands if c[:2] == ["accelerate", "launch"]]
    assert len(launches) == 4
    for words in launches:
        a = launch_command_parser().parse_args(words[2:])
        assert a.module and a.training_script == "grpo_kit.cli"
        cfg_file = load_config_from_file(a.config_file)
        assert cfg_file.distributed_type == "DEEPSPEED" and cfg_file.deepspeed_config["zero_stage"] in (2, 3)
        rest = a.training_script_args
        assert rest[:3] == ["train", "--engine", "trl"]
        pairs = [rest[i + 1] for i, w in enumerate(rest) if w == "--trl-arg"]
        parse_trl_overrides(pairs, GRPOConfig())  # every --trl-arg is a trl.GRPOConfig field trl_kwargs leaves free
    serve = next(c for c in commands if c[:2] == ["trl", "vllm-serve"])
    (script_args,) = make_parser(prog="trl vllm-serve").parse_args_and_config(serve[2:])
    assert script_args.model == "Qwen/Qwen2.5-0.5B-Instruct" and script_args.port == 8000  # the server URL above


def test_several_processes_share_the_rows_of_a_step():
    """Under a launch of N processes a kit step is still B = P*G rows: B / N each, in micro-batches."""
    cfg = GRPOConfig(num_prompts=4, num_generations=4, micro_batch_size=4)  # B = 16
    assert trl_kwargs(cfg)["per_device_train_batch_size"] == 4 and trl_kwargs(cfg)["steps_per_generation"] == 4
    two = trl_kwargs(cfg, num_processes=2)  # TRL's generation batch: 4 rows x 2 processes x 2 micro-batches = 16
    assert (two["per_device_train_batch_size"], two["steps_per_generation"], two["gradient_accumulation_steps"]) == (
        4, 2, 2)
    assert trl_kwargs(cfg.replace(micro_batch_size=None), num_processes=8)["per_device_train_batch_size"] == 2
    with pytest.raises(ConfigError, match="16 rows cannot be split evenly over 3 processes"):
        trl_kwargs(cfg, num_processes=3)
    with pytest.raises(ConfigError, match="each of 2 processes takes 12 of a step's 24 rows, which micro_batch_size"):
        trl_kwargs(GRPOConfig(num_prompts=6, num_generations=4, micro_batch_size=8), num_processes=2)
    with pytest.raises(ConfigError, match="with 2 micro-batches over 2 processes, loss_type='bnpo'"):
        trl_kwargs(cfg.replace(micro_batch_size=None, loss_type="bnpo"), num_processes=2)


def test_a_launch_the_batch_cannot_split_over_is_refused_before_the_run_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "3")
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(num_prompts=2, num_generations=4).to_yaml(cfg)
    assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(tmp_path / "run")]) == 2
    assert "cannot be split evenly over 3 processes" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_several_processes_measure_no_accuracy(caplog):
    """KitHistory evaluates in a single process only (under accelerate launch the model is sharded); process 0
    says so, once."""
    from types import SimpleNamespace

    h = KitHistory(GRPOConfig(), None, [{"prompt": "1+1=", "answer": "2"}], None)
    h.on_train_begin(SimpleNamespace(world_size=2), SimpleNamespace(is_world_process_zero=False), None, model=None)
    assert h.evals == [] and "not measured" not in caplog.text
    h.on_train_begin(SimpleNamespace(world_size=2), SimpleNamespace(is_world_process_zero=True), None, model=None)
    assert h.evals == [] and "not measured" in caplog.text


def test_trl_engine_trains_lora_adapters_with_the_kits_settings(tmp_path, capsys):
    """cfg.lora reaches TRL as its peft_config: only the adapter trains, the saved model is an adapter."""
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(num_prompts=2, num_generations=4, steps=1, eval_every=0, eval_size=4, device="cpu", threads=2,
               learning_rate=2e-3, lora={"r": 4, "target_modules": ["q_proj", "v_proj"]}).to_yaml(cfg)
    out = tmp_path / "run"
    assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(out)]) == 0
    assert "model/ (the trained LoRA adapter" in capsys.readouterr().out  # not "no checkpoint"
    adapter = json.loads((out / "model" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert not (out / "model" / "model.safetensors").exists()  # the adapter only, not a second copy of the weights


def test_trl_arguments_that_need_a_missing_package_name_it_before_trl_starts(tmp_path, capsys, monkeypatch):
    """use_vllm without vLLM, report_to=wandb without wandb: one line naming the package, not TRL's traceback.
    The packages are made to look missing (installed or not here), and no training starts."""
    monkeypatch.setattr(trl_engine, "find_spec", lambda name: None)
    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(reward_timeout_s=None).to_yaml(cfg)
    for arg, package in (("use_vllm=true", "vllm"), ("report_to=wandb", "wandb"),
                         ("report_to=[none, tensorboard]", "tensorboard")):
        assert main(["train", "--engine", "trl", "--config", str(cfg), "--out", str(tmp_path / "run"),
                     "--trl-arg", arg]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"needs the {package} package, which is not installed; pip install {package}" in err[0]
        assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="needs the vllm package"):  # the Python API checks the same
        trl_engine.train_with_trl(GRPOConfig(reward_timeout_s=None), overrides={"use_vllm": True})
    assert parse_trl_overrides(["report_to=none", "use_vllm=false"], GRPOConfig()) == {"report_to": "none",
                                                                                      "use_vllm": False}


LAUNCHERS = {"torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
             "accelerate": ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                            "--main_process_port", "0"]}
"""Two processes on one machine. ``accelerate launch --cpu --num_processes 2`` would start one process (accelerate
launches several CPU processes through mpirun only); ``--multi_gpu`` on a machine without a GPU starts two through
torch's launcher, as ``accelerate launch`` does on one machine with GPUs, with or without DeepSpeed."""


@pytest.mark.full
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_processes_train_as_one_and_only_process_0_writes(tmp_path, launcher):
    """``torchrun --standalone --nproc_per_node 2 -m grpo_kit.cli train --engine trl`` on a CPU (gloo), and the
    same under ``accelerate launch``: each process samples and trains on half of a step's B = P*G rows; process 0
    alone writes the run folder; the history has each step once, with the metrics TRL gathered over both
    processes; both processes end with bit-identical weights. ``rank_probe.py`` runs the same ``main`` and records
    what each process did."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    import grpo_kit

    cfg = tmp_path / "cfg.yaml"
    GRPOConfig(num_prompts=2, num_generations=4, steps=2, eval_every=0, eval_size=4, device="cpu", threads=1,
               seed=1).to_yaml(cfg)  # seed 1 samples mixed rewards in a group at both steps: the weights move
    out, records = tmp_path / "run", tmp_path / "records"
    records.mkdir()
    here = Path(__file__).resolve().parent
    path = [str(Path(grpo_kit.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]  # children import this grpo_kit
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *LAUNCHERS[launcher], str(here / "rank_probe.py"), str(records),
                           "train", "--engine", "trl", "--config", str(cfg), "--out", str(out)],
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}, capture_output=True, text=True,
                          timeout=300)
    print(f"{launcher}, 2 processes, 2 steps: {time.perf_counter() - t0:.1f} s wall")
    assert done.returncode == 0, done.stderr[-3000:]
    zero, one = (json.loads((records / f"rank{r}.json").read_text()) for r in (0, 1))
    for r in (zero, one):
        assert r["exit"] == 0 and r["backend"] == "gloo"
        assert r["batch"] == {"world_size": 2, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
                              "steps_per_generation": 1, "generation_batch_size": 8}  # B = 8 rows a step, 4 each
    print("process 0 wrote:", zero["wrote"], "\nprocess 1 wrote:", one["wrote"])
    assert one["wrote"] == []  # process 1 trains and writes nothing in the run folder
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    written = {w.split(" ", 1)[1] for w in zero["wrote"]}
    assert {"config.yaml", "history.jsonl", "summary.json", "curves.png", "model/config.json"} <= files
    native = {"model/model.safetensors", "model/tokenizer.json", "model/training_args.bin"}  # by native code (unseen)
    assert files - written == native and "os.mkdir model" in zero["wrote"]  # into model/, which process 0 made
    assert done.stdout.count("accuracy not measured after 2 steps; wrote") == 1  # process 0 reports
    history = read_history(out / "history.jsonl")
    assert [m["step"] for m in history] == [1, 2] and len(zero["history"]) == len(one["history"]) == 2
    for kept, m0, m1 in zip(history, zero["history"], one["history"]):
        del kept["step_time"], m0["step_time"], m1["step_time"]  # each process's own clock
        assert kept == pytest.approx(m0, nan_ok=True) and m0 == pytest.approx(m1, nan_ok=True)  # gathered values
        assert m0["frac_reward_zero_std"] == 0.5  # one group mixed, one not: a process's own value is 0 or 1
    assert zero["before"] == one["before"] != zero["after"] == one["after"]  # trained, to bit-identical weights
