"""Sampling controls with TRL's and vLLM's meaning: ``repetition_penalty``, ``top_k``, ``top_p``, ``min_p``.

Applied in the order Hugging Face ``generate`` applies its logits processors (transformers'
``GenerationMixin._get_logits_processor``, which is what TRL's ``GRPOTrainer`` samples with when
``use_vllm`` is off): the repetition penalty on the raw logits, then the temperature, then top-k,
top-p and min-p, each on what the one before it kept (renormalised).

- ``repetition_penalty`` p (CTRL, Keskar et al. 2019): every token already in the row (prompt and
  completion so far) has its logit divided by p when positive, multiplied by p when negative;
  1.0 is off. It also acts on greedy rows (temperature 0), as in Hugging Face and vLLM.
- ``top_k`` k: keep the k most likely tokens; 0 is off.
- ``top_p`` (nucleus, Holtzman et al. 2020): keep the smallest set of most likely tokens whose
  probability reaches top_p (the token that crosses it is kept); 1.0 is off.
- ``min_p`` m: keep the tokens whose probability is at least m times the most likely one's; 0 is off.

vLLM (V1 sampler) applies min-p *before* top-k and top-p. min-p compares each probability with
the largest, a ratio no renormalisation changes, so the order matters only when ``min_p`` and
``top_p`` are both on: vLLM then takes top-p's cut on the mass min-p left, and keeps the same
tokens as here or fewer (``tests/model/test_truncation.py`` works an example by hand).

**Which distribution the loss sees.** The kit, like TRL, scores the sampled tokens (the old and
reference log-probs, and the policy's) under the temperature-scaled *full* softmax: no penalty, no
truncation (TRL 1.16: ``GRPOTrainer._get_per_token_logps_and_entropies`` runs the model with the
fused LM head ``add_fused_lm_head(model, temperature=...)`` installs, a log-softmax of logits /
temperature over the whole vocabulary). With any control on, the sampler draws from another
distribution than the one the ratio ρ assumes: an off-policy gap. Its size is logged per step as
``sampling/truncated_mass``: the mean over sampled tokens of the probability, under the scored
distribution, of the tokens the sampler could not draw. For truncation alone that is also the
total-variation distance between the two distributions. The repetition penalty reshapes the
distribution without removing tokens, so the metric does not see it (alone, it logs 0). With no
control on, the sampler draws from the scored distribution and the metric is not logged.
"""
from __future__ import annotations

import math

import torch

# each control's range, in the words of GRPOConfig's rule for the field of the same name
# (tests/model/test_truncation.py checks that the two say the same)
RULES = {"top_k": "must be a whole number >= 0 (0 turns it off)",
         "top_p": "must be a finite number in (0, 1] (1.0 turns it off)",
         "min_p": "must be a finite number in [0, 1) (0 turns it off)",
         "repetition_penalty": "must be a finite number > 0 (1.0 turns it off)"}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_sampling_controls(top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                            repetition_penalty: float = 1.0) -> None:
    """Raise ValueError naming the control, its value and its range when a value is outside it."""
    ok = {"top_k": isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 0,
          "top_p": _finite(top_p) and 0.0 < top_p <= 1.0,
          "min_p": _finite(min_p) and 0.0 <= min_p < 1.0,
          "repetition_penalty": _finite(repetition_penalty) and repetition_penalty > 0.0}
    values = {"top_k": top_k, "top_p": top_p, "min_p": min_p, "repetition_penalty": repetition_penalty}
    for name, good in ok.items():
        if not good:
            raise ValueError(f"{name}={values[name]!r}: {RULES[name]}")


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's penalty: logits (B, V), ``seen`` (B, V) bool (token already in the row) -> (B, V)."""
    if penalty == 1.0:
        return logits
    hit = torch.where(logits > 0, logits / penalty, logits * penalty)  # (B, V)
    return torch.where(seen, hit, logits)


def keep_mask(z: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Temperature-scaled logits z (B, V) -> (B, V) bool, the tokens the sampler may draw."""
    keep = torch.ones_like(z, dtype=torch.bool)  # (B, V)
    if top_k:
        kth = torch.topk(z, min(top_k, z.shape[-1]), dim=-1).values[:, -1:]  # (B, 1) the k-th largest logit
        keep &= z >= kth
    if top_p < 1.0:
        probs = torch.softmax(z.masked_fill(~keep, float("-inf")), -1)  # (B, V) renormalised over the kept
        sorted_p, order = probs.sort(-1, descending=True)  # (B, V)
        before = sorted_p.cumsum(-1) - sorted_p  # (B, V) mass of the more likely tokens
        keep_sorted = before < top_p  # the token that crosses top_p is kept
        keep &= torch.zeros_like(keep).scatter(-1, order, keep_sorted)
    if min_p > 0.0:
        probs = torch.softmax(z.masked_fill(~keep, float("-inf")), -1)  # (B, V)
        keep &= probs >= min_p * probs.max(-1, keepdim=True).values
    return keep


def truncated_mass(z: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """(B,) probability under softmax(z) of the tokens outside ``keep``: what the sampler cannot draw."""
    return torch.softmax(z, -1).masked_fill(keep, 0.0).sum(-1)
