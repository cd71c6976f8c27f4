"""``grpo-kit export``: a run's latest checkpoint as a folder that ``from_pretrained`` and vLLM load.

    write_export(checkpoint, folder, run_config)   # weights (LoRA merged), tokenizer, generation_config.json
    print(vllm_command(folder))                    # how to serve it

The folder holds plain transformers weights (a LoRA run's adapter is merged into the base:
W + (alpha / r) B A, ``lora.merge_adapter``), the tokenizer, and a ``generation_config.json``
that samples as the run did: ``temperature``, ``top_k``, ``top_p``, ``min_p`` and
``repetition_penalty`` (off unless the run set them), ``max_new_tokens`` = ``max_completion_length``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from grpo_kit.data.runfolder import MODEL_FILES
from grpo_kit.model import lora
from grpo_kit.model.tiny import load_model

SKIP = {"trainer_state.pt", "adapter_model.safetensors", "adapter_config.json", "README.md", "training_args.bin"}
"""Checkpoint files that are not part of the exported model (the trainer state, TRL's pickled training
arguments in an ``--engine trl`` run's ``model/``; the adapter once merged)."""
OWN_FILES = (*MODEL_FILES, "grpo_config.yaml")
"""What an export writes (names or patterns): what ``export --overwrite`` may remove from ``--to``."""


def sampling_temperature(temperature) -> float:
    """The run's temperature; a per-group list (``GRPOConfig.temperature``) exports as its mean."""
    return float(sum(temperature) / len(temperature)) if isinstance(temperature, list) else float(temperature)


def generation_config(run_config: dict, tokenizer):
    """A ``transformers.GenerationConfig`` that samples as the run sampled."""
    from transformers import GenerationConfig

    return GenerationConfig(do_sample=True, temperature=sampling_temperature(run_config["temperature"]),
                            top_p=float(run_config.get("top_p", 1.0)), top_k=int(run_config.get("top_k", 0)),
                            min_p=float(run_config.get("min_p", 0.0)) or None,
                            repetition_penalty=float(run_config.get("repetition_penalty", 1.0)),
                            max_new_tokens=int(run_config["max_completion_length"]),
                            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                            bos_token_id=tokenizer.bos_token_id)


def write_export(checkpoint: Path, dest: Path, run_config: dict) -> None:
    """Write the model of ``checkpoint`` into the (empty) folder ``dest``: the saved weights as they are
    (full fine-tuning) or merged into the base ``run_config["model"]`` (LoRA), the tokenizer, and
    ``generation_config.json``."""
    if run_config.get("lora") is not None:
        base, _ = load_model(run_config["model"])
        lora.merge_adapter(base, checkpoint).save_pretrained(dest)
    for f in sorted(checkpoint.iterdir()):  # the tokenizer files, and the full model's weights and config
        if f.is_file() and f.name not in SKIP and not (dest / f.name).exists():
            shutil.copy2(f, dest / f.name)
    from transformers import AutoTokenizer

    generation_config(run_config, AutoTokenizer.from_pretrained(dest)).save_pretrained(dest)


def vllm_command(dest: Path) -> str:
    """The ``vllm serve`` line for an exported folder: ``--generation-config auto`` takes the default
    sampling parameters from its ``generation_config.json``, ``--max-model-len`` is the model's context."""
    import json
    import shlex

    context = json.loads((dest / "config.json").read_text()).get("max_position_embeddings")
    line = f"vllm serve {shlex.quote(str(dest))} --generation-config auto --dtype auto"
    return line + (f" --max-model-len {context}" if context else "")
