"""Reading, validating, printing and exporting a config runs none of the code it names; only the commands
that score with it (train) import its ``module:function`` entries and call its factories (issue 23, D3)."""
import sys
import uuid

import pytest

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.rewards.judges import check_reward_spec


@pytest.fixture
def named(tmp_path, monkeypatch):
    """Two fresh modules on sys.path: importing the first creates ``imported``; calling the second's factory
    creates ``called``. Returns (config yaml path, marker paths, module names)."""
    a, b = f"d3_import_{uuid.uuid4().hex}", f"d3_factory_{uuid.uuid4().hex}"
    imported, called = tmp_path / "IMPORTED", tmp_path / "CALLED"
    (tmp_path / f"{a}.py").write_text(f"open({str(imported)!r}, 'w').close()\n"
                                      f"def reward(prompts, completions, **_):\n    return [0.0] * len(completions)\n")
    (tmp_path / f"{b}.py").write_text(f"def factory(**_):\n    open({str(called)!r}, 'w').close()\n"
                                      f"    return lambda prompts, completions, **kw: [1.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"reward_funcs: ['{a}:reward', {{function: '{b}:factory', args: {{}}}}]\n"
                   f"steps: 1\nnum_prompts: 1\nnum_generations: 2\neval_every: 0\neval_size: 2\nthreads: 1\n"
                   f"device: cpu\nmax_completion_length: 4\n")
    yield cfg, (imported, called), (a, b)
    for m in (a, b):
        sys.modules.pop(m, None)


def test_reading_validating_printing_and_exporting_a_config_run_none_of_its_code(named, tmp_path, capsys):
    cfg_file, markers, (a, _) = named
    cfg = GRPOConfig.from_yaml(cfg_file).validate()
    cfg.to_yaml()
    cfg.replace(steps=2)
    verl = tmp_path / "verl.yaml"
    verl.write_text(f"reward_funcs: ['{a}:reward']\n")  # verl names rewards by string only
    assert main(["export-verl", "--config", str(verl)]) == 0
    assert f"{a}:reward" in capsys.readouterr().out
    assert not any(m.exists() for m in markers)


def test_train_imports_and_calls_them_and_export_of_its_run_does_not(named, tmp_path, capsys):
    cfg_file, markers, modules = named
    assert main(["train", "--config", str(cfg_file), "--out", str(tmp_path / "run")]) == 0
    assert all(m.exists() for m in markers)  # train scores with them: imported, the factory called
    for m in markers:
        m.unlink()
    for name in modules:
        sys.modules.pop(name)  # so that importing again would run the module again
    assert main(["export", "--run", str(tmp_path / "run"), "--to", str(tmp_path / "exp")]) == 0
    GRPOConfig.from_yaml(tmp_path / "run" / "config.yaml")  # the run folder's own config, read back
    assert not any(m.exists() for m in markers)


def test_a_module_that_does_not_import_is_refused_when_training_starts(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("reward_funcs: ['no_such_module_d3:f']\nsteps: 1\nnum_prompts: 1\nnum_generations: 2\n"
                   "eval_every: 0\nthreads: 1\ndevice: cpu\n")
    GRPOConfig.from_yaml(cfg)  # the form is right: reading it imports nothing
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot import 'no_such_module_d3'" in err
    assert not (tmp_path / "run" / "config.yaml").exists()  # refused before the run folder got anything


@pytest.mark.parametrize("spec", ["os:", ":system", "os system", "os:sys tem", "1os:system", "os:system()",
                                  {"function": "os;system", "args": {}}, "learned:", "nope"])
def test_malformed_entries_are_refused_by_their_form(spec):
    with pytest.raises(ConfigError, match="reward function"):
        check_reward_spec(spec)
    with pytest.raises(ConfigError, match="reward function"):
        check_config(GRPOConfig(reward_funcs=[spec]))
