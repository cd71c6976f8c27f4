"""Notebooks 09 (from the toy to a real model) and 09b (memory, export and the big engines) run headlessly
and assert their claims; here we read them back.

09 smoke (``SMOKE=True``): the prompt rendering, the reward functions on hand-scored examples, loading a
saved model by path, both short runs and the estimator's breakdown of LoRA against full fine-tuning.
09 full: the accuracy gains of LoRA and of full fine-tuning and the measured peak memory.
09b smoke: the estimator's table, a short LoRA run, its export loaded back. 09b full: the LoRA run changed
the base's answers, and the 2-step run with TRL's trainer.
"""
from pathlib import Path

import pytest

from grpo_kit.view.nbtools import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "09_from_toy_to_real.ipynb"
NB_B = NB.parent / "09b_memory_export_and_engines.ipynb"
RUNS = {"full fine-tuning", "LoRA"}


def check_pipeline(v):
    assert v["prompt_has_template"] is False and v["chat_prompt_ends_with_assistant_turn"] is True
    # right & formatted, wrong & formatted, right & unformatted; the sum as written, then reversed
    assert v["gsm8k_example_scores"] == [[1, 1], [0, 1], [1, 0]]
    assert v["sum_example_scores"] == [[1, 0], [0, 0]]
    assert v["format_reward_paid_on_sums"] == 0
    assert v["saved_model_same_weights"] is True and len(set(v["saved_model_accuracy"])) == 1
    assert v["dataset_forms_same_items"] == {"parquet": True, "save_to_disk": True, "Dataset object": True}
    assert set(v["completions"]) == RUNS and len(set(v["completions"].values())) == 1
    assert v["trainable_parameters"]["LoRA"] < v["trainable_parameters"]["full fine-tuning"] / 5
    est = v["qwen05b_estimate_gib"]   # LoRA shrinks gradients and AdamW state, not activations or logits
    assert est["LoRA"]["gradients"] < 0.02 * est["full"]["gradients"]
    assert est["LoRA"]["logits"] == est["full"]["logits"] and est["LoRA"]["peak"] < est["full"]["peak"]
    assert v["exercise_reference_bytes"]["LoRA"] == 0 < v["exercise_reference_bytes"]["full"]


def check_pipeline_b(v):
    # published sizes: Qwen2.5 0.49B / 1.54B / 7.61B, Llama-3.1 8.03B
    for name, want in {"Qwen2.5-0.5B": 0.49e9, "Qwen2.5-1.5B": 1.54e9, "Qwen2.5-7B": 7.61e9,
                       "Llama-3.1-8B": 8.03e9}.items():
        assert abs(v["estimate_params"][name] / want - 1) < 0.01
    mb = v["largest_micro_batch"]
    assert mb["Qwen2.5-7B full 141 GB"] is None and mb["Qwen2.5-7B LoRA 80 GB"] is not None
    assert v["exported_weight_change"] > 0                     # the adapter was merged into the weights
    assert v["exported_accuracy"] == pytest.approx(v["lora_policy_accuracy"], abs=0.01)
    assert v["exported_same_answers"] >= 0.98
    assert v["vllm_command"].startswith("vllm serve ") and "--generation-config auto" in v["vllm_command"]


@pytest.mark.notebook
@pytest.mark.headless
def test_from_toy_to_real_smoke(tmp_path):
    SMOKE_CHECKS[NB.stem](run_notebook(NB, tmp_path / "09.out.ipynb", parameters={"SMOKE": True}, timeout=600))


@pytest.mark.notebook
@pytest.mark.headless
def test_memory_export_and_engines_smoke(tmp_path):
    SMOKE_CHECKS[NB_B.stem](run_notebook(NB_B, tmp_path / "09b.out.ipynb", parameters={"SMOKE": True}, timeout=600))


def smoke_check(v):
    check_pipeline(v)
    assert v["completions"]["LoRA"] == 4 * 128          # 4 steps of 16 prompts x 8 completions
    assert v["peak_memory_bytes"] == {}                  # measured in the full run only


def smoke_check_b(v):
    check_pipeline_b(v)
    assert v["lora_steps"] == 4 and v["lora_completions"] == 4 * 128
    assert v["trl_history_steps"] == 0                   # the TRL run is in the full run only


# what the smoke runs must have recorded; the headless tests above and the browser test (make test) both check it
SMOKE_CHECKS = {NB.stem: smoke_check, NB_B.stem: smoke_check_b}


@pytest.mark.notebook
@pytest.mark.full
def test_from_toy_to_real_full(tmp_path):
    v = run_notebook(NB, tmp_path / "09.out.ipynb", parameters={}, timeout=1800)
    check_pipeline(v)
    assert v["completions"]["LoRA"] == 300 * 128
    for k in RUNS:
        assert v["final_accuracy"][k] - v["base_accuracy"][k] >= 0.20, (k, v["base_accuracy"], v["final_accuracy"])
    big, tiny = v["peak_memory_bytes"]["qwen2-0.5b-2layers"], v["peak_memory_bytes"]["tiny"]
    assert big["LoRA"] < 0.5 * big["full fine-tuning"]
    assert tiny["LoRA"] > 0.8 * tiny["full fine-tuning"]   # nothing measurable saved on a 0.9M-parameter model


@pytest.mark.notebook
@pytest.mark.full
def test_memory_export_and_engines_full(tmp_path):
    v = run_notebook(NB_B, tmp_path / "09b.out.ipynb", parameters={}, timeout=1800)
    check_pipeline_b(v)
    assert v["lora_steps"] == 60 and v["lora_completions"] == 60 * 128
    assert v["answers_changed_from_base"] > 0             # the exported policy is not the base model
    assert v["trl_history_steps"] == 2
