"""The shipped GSM8K-format sample, the gsm8k task, and chat-template prompts.

The sample (``datasets/gsm8k_sample.jsonl``, 32 rows; held-out ``datasets/gsm8k_test.jsonl``,
10 rows) was written for the kit. Each row is checked here by arithmetic this file does itself:
every ``<<expr=value>>`` step evaluates to its value, every operand is a number of the question,
an earlier step's result or a unit constant, and ``#### n`` is the last step's result.
"""
from __future__ import annotations

import ast
import json
import operator
import re
from pathlib import Path

import pytest

from grpo_kit.config import GRPOConfig
from grpo_kit.data.tasks import DATASETS_DIR, heldout_split, load_gsm8k, load_items
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.model.sampling import chat_items, render_prompt, uses_chat_template
from grpo_kit.model.tiny import build_tokenizer
from grpo_kit.rewards.resolve import get_reward_funcs

ROOT = Path(__file__).resolve().parents[2]
SAMPLE, HELDOUT = DATASETS_DIR / "gsm8k_sample.jsonl", DATASETS_DIR / "gsm8k_test.jsonl"
UNITS = {1, 2, 3, 7, 60, 100, 1000}  # "and herself", "twice"/"and back", "a third", days a week, minutes, percent, ml
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def evaluate(node):
    """Value and operands of + - * / over numbers, by this test's own walk of the syntax tree."""
    if isinstance(node, ast.Constant):
        return node.value, [node.value]
    left, lops = evaluate(node.left)
    right, rops = evaluate(node.right)
    return OPS[type(node.op)](left, right), lops + rops


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("path", [SAMPLE, HELDOUT], ids=["sample", "heldout"])
def test_every_worked_solution_computes_its_answer(path):
    data = rows(path)
    assert len(data) == (32 if path == SAMPLE else 10)
    for r in data:
        steps = re.findall(r"<<([^=>]+)=([^>]+)>>", r["answer"])
        assert steps, r["question"]
        known = {float(x) for x in re.findall(r"\d+", r["question"])} | UNITS
        for expr, value in steps:
            got, operands = evaluate(ast.parse(expr, mode="eval").body)
            assert got == float(value), (r["question"], expr)
            assert all(o in known for o in operands), (r["question"], expr, operands)
            known.add(got)
        assert r["answer"].rsplit("####", 1)[1].strip() == steps[-1][1], r["question"]


def test_loader_keeps_the_number_and_the_solution():
    items = load_gsm8k(SAMPLE)
    first = items[0]
    assert first["prompt"].startswith("Mia has 4 boxes") and first["answer"] == "19"
    assert first["solution"] == ("Mia has 4*6 = <<4*6=24>>24 pencils.\n"
                                 "After giving some away she has 24-5 = <<24-5=19>>19 pencils.")
    assert load_items(SAMPLE) == items  # 'auto' reads GSM8K rows
    assert len(heldout_split("gsm8k")) == 10 and not {i["prompt"] for i in heldout_split("gsm8k")} & {i["prompt"] for i in items}


def test_answer_judges_score_a_gsm8k_item():
    item = load_gsm8k(SAMPLE)[0]
    math_answer, gsm8k_format = get_reward_funcs(["math_answer", "gsm8k_format"])
    right, wrong, unformatted = "4*6 = 24, 24-5 = 19\n#### 19", "4*6 = 24\n#### 24", "The answer is 19."
    comps = [right, wrong, unformatted]
    assert math_answer([item["prompt"]] * 3, comps, answer=[item["answer"]] * 3) == [1.0, 0.0, 1.0]
    assert gsm8k_format([item["prompt"]] * 3, comps) == [1.0, 1.0, 0.0]


def test_a_held_out_only_task_needs_a_training_file():
    with pytest.raises(ConfigError, match="held-out split.*dataset"):
        check_config(GRPOConfig(task="gsm8k"))
    check_config(GRPOConfig(task="gsm8k", dataset=str(SAMPLE)))


def test_chat_template_modes():
    plain, chat = build_tokenizer(), build_tokenizer()
    chat.chat_template = TEMPLATE
    items = [{"prompt": "2+3=", "answer": "5"}]
    assert uses_chat_template(chat, "auto") and not uses_chat_template(plain, "auto")
    assert not uses_chat_template(chat, "off") and uses_chat_template(chat, "on")
    with pytest.raises(ConfigError, match="chat_template='on'.*no chat template"):
        uses_chat_template(plain, "on")
    assert chat_items(items, plain, "auto") == items  # no template: the plain prompt
    assert chat_items(items, chat, "off") == items
    converted = chat_items(items, chat, "auto")
    assert converted == [{"prompt": [{"role": "user", "content": "2+3="}], "answer": "5"}]
    assert render_prompt(chat, converted[0]["prompt"]) == "<user>2+3=\n<assistant>"
    with pytest.raises(ConfigError, match="chat_template"):
        GRPOConfig(chat_template="yes").validate()


def test_training_renders_prompts_with_the_template(monkeypatch):
    """setup() turns the prompts into messages; the sampler sees the rendered template text."""
    from grpo_kit.loop import dynamic
    from grpo_kit.loop.train import evaluate, grpo_step, setup
    from grpo_kit.model.tiny import load_model

    model, tok = load_model("tiny")
    tok.chat_template = TEMPLATE
    seen = []
    real = dynamic.sample_groups

    def spy(model, tokenizer, prompts, *a, **k):
        seen.extend(prompts)
        return real(model, tokenizer, prompts, *a, **k)

    monkeypatch.setattr(dynamic, "sample_groups", spy)
    cfg = GRPOConfig(num_prompts=2, num_generations=2, steps=1, eval_size=4, device="cpu", threads=1)
    run = setup(cfg, policy=model, tokenizer=tok)
    assert run.train_items[0]["prompt"][0]["role"] == "user" and run.eval_items[0]["prompt"][0]["role"] == "user"
    grpo_step(run)
    assert seen and all(p.startswith("<user>") and p.endswith("=\n<assistant>") for p in seen)
    from grpo_kit.eval import inference

    seen.clear()
    monkeypatch.setattr(inference, "sample_groups", spy)
    assert 0.0 <= evaluate(run) <= 1.0  # held-out greedy accuracy: the same rendering
    assert len(seen) == 4 and all(p.startswith("<user>") and p.endswith("=\n<assistant>") for p in seen)


def test_cli_trains_on_the_gsm8k_sample(tmp_path, monkeypatch):
    from grpo_kit.cli import main

    monkeypatch.chdir(ROOT)  # the config names datasets/gsm8k_sample.jsonl relative to the repository
    out = tmp_path / "run"
    assert main(["train", "--config", "configs/gsm8k.yaml", "--dataset", str(SAMPLE), "--out", str(out)]) == 0
    hist = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [m["step"] for m in hist] == [1, 2]
    for m in hist:
        assert 0.0 <= m["rewards/math_answer/mean"] <= 1.0 and 0.0 <= m["rewards/gsm8k_format/mean"] <= 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["evals"]) == 2 and (out / "curves.png").is_file()


def test_a_curriculum_pool_goes_through_the_template_too():
    from grpo_kit.loop.schedules import plan_step
    from grpo_kit.loop.train import setup
    from grpo_kit.model.tiny import load_model

    model, tok = load_model("tiny")
    tok.chat_template = TEMPLATE
    cfg = GRPOConfig(task_schedule=[[0.0, "add1"]], num_prompts=2, num_generations=2, steps=1, eval_size=4,
                     device="cpu", threads=1, log_kl=False)
    pool = plan_step(setup(cfg, policy=model, tokenizer=tok)).items
    assert pool[0]["prompt"] == [{"role": "user", "content": pool[0]["prompt"][0]["content"]}]
    assert len(pool) == 70  # add1's train split
