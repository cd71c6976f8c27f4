"""``verl_overrides(GRPOConfig)`` and ``compute_score`` against verl 0.9.1's own files (installed without its
dependencies by ``make install``, requirements-verl.txt): every override key is in the default trainer
config the wheel ships, and verl's reward manager and loader can call the reward function."""
from __future__ import annotations

import ast
import asyncio
import importlib.util
import os
import shlex
from pathlib import Path

import pytest
import yaml

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.data.tasks import DATASETS_DIR, load_gsm8k
from grpo_kit.engines.verl_export import (
    compute_score,
    hydra_value,
    verl_overrides,
    verl_rows,
)
from grpo_kit.errors import ConfigError
from grpo_kit.rewards.judges import math_answer

SAMPLE = str(DATASETS_DIR / "gsm8k_sample.jsonl")


def verl_file(rel: str) -> Path:
    """A file of the installed verl package, found without importing verl (its imports need ray, ...)."""
    spec = importlib.util.find_spec("verl")
    assert spec is not None, "verl is not installed: make install (pip install --no-deps -r requirements-verl.txt)"
    path = Path(spec.submodule_search_locations[0]) / rel
    assert path.is_file(), path
    return path


def lookup(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"{dotted}: no {part!r} in verl's default config"
        node = node[part]
    return node


CONFIGS = [GRPOConfig(),
           GRPOConfig(task="gsm8k", dataset=SAMPLE, reward_funcs=["math_answer", "gsm8k_format"],
                      reward_weights=[1.0, 0.5], beta=0.04, epsilon_high=0.28, delta=2.0, loss_type="dr_grpo",
                      scale_rewards="group", micro_batch_size=32, kl_estimator="k2"),
           GRPOConfig(importance_sampling_level="sequence", loss_type="grpo", num_iterations=2, lr_schedule="constant"),
           GRPOConfig(lora={"r": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"]}, learning_rate=2e-3)]


def test_lora_reaches_verl_and_a_dropout_is_refused():
    got = verl_overrides(CONFIGS[3])
    assert (got["actor_rollout_ref.model.lora_rank"], got["actor_rollout_ref.model.lora_alpha"],
            got["actor_rollout_ref.model.target_modules"]) == (16, 32, ["q_proj", "v_proj"])
    assert "actor_rollout_ref.model.lora_rank" not in verl_overrides(CONFIGS[0])  # full fine-tuning: verl's default rank 0
    with pytest.raises(ConfigError, match="lora.*no dropout"):
        verl_overrides(GRPOConfig(lora={"dropout": 0.1}))


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "gsm8k_drgrpo", "gspo", "lora"])
def test_every_override_key_is_in_verls_default_config(cfg):
    default = yaml.safe_load(verl_file("trainer/config/_generated_ppo_trainer.yaml").read_text())
    for key in verl_overrides(cfg):
        if key.startswith("+"):  # Hydra's "add a key": the parent must exist and the key must not
            parent = key[1:].rsplit(".", 1)[0]
            head, _, rest = parent.rpartition(".")
            assert rest == "reward_kwargs" and isinstance(lookup(default, head), dict)
            assert rest not in lookup(default, head), f"{key}: verl already has it; drop the '+'"
        else:
            lookup(default, key)


def test_the_mapping_by_hand():
    v = verl_overrides(CONFIGS[1], max_prompt_length=200, rollout="sglang")
    a = "actor_rollout_ref.actor."
    assert v["algorithm.adv_estimator"] == "grpo" and v["algorithm.norm_adv_by_std_in_grpo"] is True
    assert (v["data.train_batch_size"], v["actor_rollout_ref.rollout.n"], v[a + "ppo_mini_batch_size"]) == (16, 8, 16)
    assert (v[a + "ppo_micro_batch_size_per_gpu"], v[a + "ppo_epochs"]) == (32, 1)
    assert (v[a + "clip_ratio_low"], v[a + "clip_ratio_high"], v[a + "clip_ratio_c"]) == (0.2, 0.28, 2.0)
    assert (v[a + "use_kl_loss"], v[a + "kl_loss_coef"], v[a + "kl_loss_type"]) == (True, 0.04, "k2")
    assert (v[a + "loss_agg_mode"], v[a + "loss_scale_factor"]) == ("seq-mean-token-sum-norm", 8)
    assert (v["data.max_prompt_length"], v["data.max_response_length"]) == (200, 8)
    assert v["actor_rollout_ref.rollout.name"] == "sglang" and v[a + "optim.lr"] == 3e-4
    d = verl_overrides(CONFIGS[0])
    assert d[a + "loss_agg_mode"] == "token-mean" and d[a + "use_kl_loss"] is False
    assert d["algorithm.norm_adv_by_std_in_grpo"] is False and d[a + "clip_ratio_c"] == 1e9
    g = verl_overrides(CONFIGS[2])
    assert g[a + "policy_loss.loss_mode"] == "gspo" and g[a + "loss_agg_mode"] == "seq-mean-token-mean"
    assert g[a + "ppo_epochs"] == 2
    assert Path(d["actor_rollout_ref.model.path"], "config.json").is_file()  # "tiny": the shipped folder
    r = "actor_rollout_ref.rollout."
    assert (d[r + "top_k"], d[r + "top_p"]) == (-1, 1.0)  # verl's "off" for top-k is -1, the kit's 0
    t = verl_overrides(GRPOConfig(top_k=20, top_p=0.9))
    assert (t[r + "top_k"], t[r + "top_p"]) == (20, 0.9)


@pytest.mark.parametrize("change, field", [
    ({"advantage_estimator": "rloo"}, "advantage_estimator"), ({"scale_rewards": "batch"}, "scale_rewards"),
    ({"loss_type": "bnpo"}, "loss_type"), ({"mask_truncated_completions": True}, "mask_truncated_completions"),
    ({"temperature": [0.7, 1.0]}, "temperature"), ({"importance_sampling_level": "sequence", "delta": 2.0}, "delta"),
    ({"reward_funcs": [{"function": "grpo_kit.rewards.judges:distinct_n_reward", "args": {"n": 2}}]}, "reward_funcs"),
    ({"num_iterations": 2}, "num_iterations"), ({"dynamic_sampling": True}, "dynamic_sampling"),
    ({"min_p": 0.05}, "min_p"), ({"repetition_penalty": 1.1}, "repetition_penalty")])
def test_what_verl_cannot_express_is_refused(change, field):
    with pytest.raises(ConfigError, match=field):
        verl_overrides(GRPOConfig(**change))


def compute_score_call_keywords() -> set[str]:
    """The keyword arguments verl's naive reward manager passes to compute_score (read from its source)."""
    tree = ast.parse(verl_file("experimental/reward_loop/reward_manager/naive.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "compute_score"]
    assert calls, "verl's naive reward manager no longer calls self.compute_score"
    keywords = [{k.arg for k in c.keywords} for c in calls]
    assert all(k == keywords[0] for k in keywords)  # the async and the sync call agree
    return keywords[0]


def verl_loader():
    """verl's own ``load_module`` (verl/utils/import_utils.py), run from its source without importing verl."""
    source = verl_file("utils/import_utils.py").read_text()
    tree = ast.parse(source)
    keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name == "load_module")
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", "").endswith("_PATH_PREFIX") for t in n.targets))]
    namespace = {"os": os, "importlib": importlib, "Optional": object, "sys": __import__("sys")}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "import_utils.py", "exec"), namespace)  # noqa: S102
    return namespace["load_module"]


def test_verl_loads_and_calls_compute_score_as_it_does():
    assert compute_score_call_keywords() == {"data_source", "solution_str", "ground_truth", "extra_info", None}
    v = verl_overrides(CONFIGS[1])
    r = "reward.custom_reward_function."
    fn = getattr(verl_loader()(v[r + "path"]), v[r + "name"])
    assert "reward_kwargs = dict(reward_fn_config.get(\"reward_kwargs\", {}))" in verl_file("trainer/ppo/reward.py").read_text()
    kwargs = {"reward_funcs": v["+" + r + "reward_kwargs.reward_funcs"],
              "reward_weights": v["+" + r + "reward_kwargs.reward_weights"]}  # verl's _call_with_kwargs merges them
    item = load_gsm8k(SAMPLE)[0]  # answer 19
    extra = {"solution": item["solution"], "num_turns": None, "rollout_reward_scores": {}}  # verl adds the last two

    def score(text):
        return fn(data_source="grpo_kit", solution_str=text, ground_truth=item["answer"], extra_info=dict(extra),
                  **kwargs)

    assert score("4*6 = 24 and 24-5 = 19\n#### 19") == 1.5  # math_answer 1 + 0.5 * gsm8k_format 1
    assert score("#### 24") == 0.5
    assert score("The answer is 19.") == 1.0
    assert compute_score("x", "9", "9") == 1.0  # default reward: math_answer



def test_compute_score_awaits_an_async_reward_function():
    async def async_math(prompts, completions, answer, **kw):
        await asyncio.sleep(0)
        return math_answer(prompts, completions, answer)
    assert compute_score("grpo_kit", "#### 19", "19", {}, [async_math, "gsm8k_format"], [1.0, 0.5]) == 1.5
    assert compute_score("grpo_kit", "#### 18", "19", {}, [async_math]) == 0.0

def test_reward_manager_reads_the_row_fields_verl_rows_writes():
    source = verl_file("experimental/reward_loop/reward_manager/naive.py").read_text()
    for needle in ('non_tensor_batch["data_source"]', 'non_tensor_batch["reward_model"]["ground_truth"]',
                   'non_tensor_batch.get("extra_info"'):
        assert needle in source
    row = verl_rows([{"prompt": "2+3=", "answer": "5", "reverse_digits": True}])[0]
    assert row == {"prompt": [{"role": "user", "content": "2+3="}], "data_source": "grpo_kit",
                   "reward_model": {"style": "rule", "ground_truth": "5"}, "extra_info": {"reverse_digits": True}}
    # the arithmetic task's column comes back through extra_info: "5" reversed is 5, "23" reversed is 32
    assert compute_score("grpo_kit", "5", "5", row["extra_info"], ["exact_answer"]) == 1.0
    assert compute_score("grpo_kit", "23", "32", {"reverse_digits": True}, ["exact_answer"]) == 1.0


def test_cli_prints_the_command_and_writes_the_data(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    CONFIGS[1].to_yaml(cfg)
    assert main(["export-verl", "--config", str(cfg), "--data-out", str(tmp_path / "data")]) == 0
    words = shlex.split(capsys.readouterr().out.replace("\\\n", " "))
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    pairs = dict(w.split("=", 1) for w in words[3:])
    for k, value in verl_overrides(CONFIGS[1]).items():
        assert pairs[k] == hydra_value(value)
    assert pairs["+reward.custom_reward_function.reward_kwargs.reward_funcs"] == '["math_answer","gsm8k_format"]'
    import pandas as pd

    train = pd.read_parquet(pairs["data.train_files"])
    assert len(train) == 32 and train["reward_model"][0]["ground_truth"] == "19"
    assert len(pd.read_parquet(pairs["data.val_files"])) == 10


def test_the_values_are_ones_verl_accepts():
    """loss_agg_mode, kl_loss_type and policy_loss.loss_mode against the names verl's own code accepts."""
    import re

    actor = ast.parse(verl_file("workers/config/actor.py").read_text())
    agg = next(ast.literal_eval(n.value) for n in ast.walk(actor) if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", "") == "valid_loss_agg_modes")
    algos = verl_file("trainer/ppo/core_algos.py").read_text()
    kl_names = {name for group in re.findall(r"if kl_penalty in \(([^)]*)\)", algos)
                for name in ast.literal_eval("(" + group + ",)")}
    losses = set(re.findall(r'@register_policy_loss\("([^"]+)"\)', algos))
    a = "actor_rollout_ref.actor."
    cases = [GRPOConfig(loss_type=t, kl_estimator=k, importance_sampling_level=lvl)
             for t, k, lvl in (("grpo", "k1", "token"), ("dapo", "k2", "sequence"), ("dr_grpo", "k3", "token"))]
    for cfg in cases:
        v = verl_overrides(cfg)
        assert v[a + "loss_agg_mode"] in agg and v[a + "kl_loss_type"] in kl_names
        assert v[a + "policy_loss.loss_mode"] in losses and v[a + "optim.lr_scheduler_type"] in ("constant", "cosine")
