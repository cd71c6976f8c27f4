"""Models: loading, sampling groups, log-probs, LoRA and the memory a step needs.

- ``tiny``: the kit's char-level tokenizer and tiny Llama; ``load_model`` loads it or any
  ``save_pretrained`` folder / Hugging Face name.
- ``sampling``: prompts rendered (chat template or plain), groups of completions sampled in one batch.
- ``logprobs``: per-token log-probs and entropies of completions.
- ``lora``, ``memory``, ``critic``: LoRA adapters; the memory estimate of a step; a value head.

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.model.logprobs import completion_logprobs
from grpo_kit.model.lora import peft_config
from grpo_kit.model.memory import (
    GiB,
    estimate_memory,
    lora_parameter_count,
    model_shape,
    parameter_count,
    suggest_micro_batch,
)
from grpo_kit.model.sampling import (
    chat_items,
    render_prompt,
    row_temperatures,
    sample_groups,
)
from grpo_kit.model.tiny import load_model

__all__ = ["completion_logprobs", "peft_config", "GiB", "estimate_memory", "lora_parameter_count", "model_shape",
           "parameter_count", "suggest_micro_batch", "chat_items", "render_prompt", "row_temperatures",
           "sample_groups", "load_model"]
