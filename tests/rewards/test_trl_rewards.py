"""Reward functions written for TRL run unchanged in the kit: the same keyword arguments as TRL 1.16's
``GRPOTrainer._calculate_rewards``, TRL's shipped functions, conversational prompts, and YAML
entries that name an importable function or a factory with arguments."""
import json

import pytest
import torch
from transformers import TrainerState

from grpo_kit.cli import main
from grpo_kit.config import GRPOConfig
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.errors import ConfigError, DataError
from grpo_kit.loop.checks import check_config
from grpo_kit.loop.train import grpo_step, setup
from grpo_kit.model.tiny import load_model
from grpo_kit.rewards.resolve import resolve_reward_func

TINY = dict(num_prompts=2, num_generations=2, max_completion_length=8, steps=2, eval_size=2, eval_every=0,
            threads=1, device="cpu", log_kl=False)


def recorder(seen):
    def recording_reward(prompts, completions, **kwargs):
        seen.append({"prompts": prompts, "completions": completions, **kwargs})
        return [0.0] * len(prompts)
    return recording_reward


def trls_keyword_arguments(tmp_path):
    """What TRL's own GRPOTrainer passes to a reward function (one step of a real trainer)."""
    import trl

    from datasets import Dataset
    from grpo_kit.model.tiny import load_model

    seen = []
    policy, tok = load_model("tiny", "cpu")
    args = trl.GRPOConfig(**trl_kwargs(GRPOConfig(**{**TINY, "steps": 1})), output_dir=str(tmp_path), report_to="none",
                          save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    trainer = trl.GRPOTrainer(model=policy, reward_funcs=[recorder(seen)], args=args, processing_class=tok,
                              train_dataset=Dataset.from_list([{"prompt": "12+34=", "answer": "46"}] * 2))
    trainer.train()
    return seen[0], trainer.state.log_history[-1]


def test_kit_passes_the_keyword_arguments_trl_passes(tmp_path):
    torch.set_num_threads(1)
    trl_kw, trl_logged = trls_keyword_arguments(tmp_path)
    seen = []
    run = setup(GRPOConfig(**TINY), reward_funcs=[recorder(seen)],
                train_items=[{"prompt": "12+34=", "answer": "46"}])
    kit_metrics = grpo_step(run)
    kit_kw = seen[0]
    # metrics.py says the kit logs under TRL's key names where TRL logs the same quantity: these are TRL's keys
    shared = {"reward", "reward_std", "frac_reward_zero_std", "rewards/recording_reward/mean", "entropy",
              "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "completions/mean_length",
              "completions/min_length", "completions/max_length", "completions/clipped_ratio", "step_time"}
    assert shared <= set(trl_logged) and shared <= set(kit_metrics)
    assert set(kit_kw) == set(trl_kw) == {"prompts", "completions", "completion_ids", "answer", "trainer_state",
                                          "log_extra", "log_metric"}
    B = 4
    for kw in (trl_kw, kit_kw):
        assert all(isinstance(kw[k], list) and len(kw[k]) == B for k in ("prompts", "completions", "completion_ids",
                                                                         "answer"))
        assert all(isinstance(i, int) for ids in kw["completion_ids"] for i in ids)
        assert isinstance(kw["trainer_state"], TrainerState) and callable(kw["log_extra"]) and callable(kw["log_metric"])
    # the ids are the sampled tokens up to and including EOS, as TRL's are
    eos = run.tokenizer.eos_token_id
    assert all(ids[-1] == eos or len(ids) == 8 for ids in kit_kw["completion_ids"])
    assert run.tokenizer.batch_decode(kit_kw["completion_ids"], skip_special_tokens=True) == kit_kw["completions"]
    assert kit_kw["trainer_state"].global_step == 0 and kit_kw["trainer_state"].max_steps == 2


def test_log_metric_and_log_extra_reach_the_metrics():
    sums = []

    def logging_reward(prompts, completions, log_metric, log_extra, trainer_state, **_):
        sums.append(float(sum(map(len, completions))))
        log_metric("custom/len", sums[-1])
        log_metric("custom/len", 0.0)  # averaged over the step, as TRL does
        log_extra("step_seen", [trainer_state.global_step] * len(prompts))
        return [1.0] * len(prompts)

    run = setup(GRPOConfig(**{**TINY, "num_iterations": 2}), reward_funcs=[logging_reward])
    m1, m2 = grpo_step(run), grpo_step(run)
    assert sums[0] > 0 and m1["custom/len"] == sums[0] / 2 and m2["custom/len"] == sums[1] / 2
    assert m1["log_extra"] == {"step_seen": [0] * 4} and m2["log_extra"] == {"step_seen": [2] * 4}


def test_trls_soft_overlong_punishment_runs_unchanged_in_grpo_kit_train(tmp_path, capsys):
    # a factory named in YAML with its arguments; with L_max = L_cache = 8 the reward is -|y|/8,
    # |y| = completion tokens with EOS, so its mean is exactly -(mean completion length)/8
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: 2\nnum_prompts: 2\nnum_generations: 2\neval_size: 2\nthreads: 1\ndevice: cpu\n"
                   "reward_funcs:\n  - exact_answer\n"
                   "  - function: trl.rewards:get_soft_overlong_punishment\n"
                   "    args: {max_completion_len: 8, soft_punish_cache: 8}\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out)]) == 0, capsys.readouterr().err
    history = [json.loads(l) for l in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == 2
    for m in history:
        assert m["rewards/soft_overlong_punishment_reward/mean"] == pytest.approx(-m["completions/mean_length"] / 8,
                                                                                  abs=1e-6)
        assert m["rewards/soft_overlong_punishment_reward/mean"] < 0


def test_conversational_dataset_with_trls_think_format_reward(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "12+34="}], "answer": "46"},
            {"prompt": [{"role": "system", "content": ""}, {"role": "user", "content": "5+6="}], "answer": "11"}]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = []

    def content_length(prompts, completions, **_):
        seen.append((prompts, completions))
        return [float(len(c[0]["content"])) for c in completions]

    cfg = GRPOConfig(**TINY, dataset=str(data), reward_funcs=["trl.rewards:think_format_reward", "format"])
    funcs = [resolve_reward_func(f) for f in cfg.reward_funcs] + [content_length]
    with pytest.raises(DataError, match="chat template"):
        setup(cfg, reward_funcs=funcs)  # the tiny tokenizer has no chat template: refused before training
    policy, tok = load_model("tiny")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    run = setup(cfg, policy=policy, tokenizer=tok, reward_funcs=funcs)
    m = grpo_step(run)
    prompts, completions = seen[-1]
    assert all(p in [r["prompt"] for r in rows] for p in prompts)  # the messages themselves, G times each
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" and isinstance(c[0]["content"], str)
               for c in completions)
    assert m["rewards/think_format_reward/mean"] == 0.0  # the tiny model never writes <think>
    assert m["rewards/content_length/mean"] == pytest.approx(
        sum(len(c[0]["content"]) for c in completions) / len(completions))


@pytest.mark.parametrize("spec,message,when", [
    ("nope", "unknown reward function 'nope'", "check"),
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'", "setup"),
    ("trl.rewards:no_such_function", "has no attribute 'no_such_function'", "setup"),
    ({"function": "trl.rewards:get_soft_overlong_punishment", "args": {"wrong": 1}}, "rejected args", "setup"),
    ({"func": "trl.rewards:think_format_reward"}, "unknown keys", "check"),
])
def test_bad_reward_entries_are_config_errors(spec, message, when):
    """A malformed entry is refused when the config's names are checked (check_config, nothing imported); one
    that needs importing (which runs the module's code) is refused when training starts (setup), before
    anything is written."""
    cfg = GRPOConfig(reward_funcs=[spec], steps=1, num_prompts=1, num_generations=2, eval_every=0)
    if when == "setup":
        check_config(cfg)
    with pytest.raises(ConfigError, match=message):
        setup(cfg) if when == "setup" else check_config(cfg)
