"""Per-token log-probabilities and entropies of completions under a causal LM."""
from __future__ import annotations

import torch

from .sampling import position_ids_from_mask, prefill, repeated_groups


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position: logits (B, T, V), targets (B, T) -> (B, T) float32.

    float32 logits: gather minus logsumexp, with no (B, T, V) log-softmax copy. Lower
    precision: one row at a time in float32, so the full-vocab float32 copy is one row.
    """
    if logits.dtype in (torch.float32, torch.float64):  # float64: tests that compare with TRL
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return picked - torch.logsumexp(logits, dim=-1)  # (B, T)
    rows = [torch.log_softmax(l.float(), -1).gather(-1, t.unsqueeze(-1)).squeeze(-1)
            for l, t in zip(logits, targets)]
    return torch.stack(rows)  # (B, T)


ENTROPY_CHUNK = 2**22  # float32 elements (16 MiB) of log-softmax held at once by entropy_from_logits


def entropy_from_logits(logits: torch.Tensor, chunk_elements: int = ENTROPY_CHUNK) -> torch.Tensor:
    """Entropy of the next-token distribution per position: (B, T, V) -> (B, T).

    Rows are taken a chunk at a time, as many as fit in ``chunk_elements`` float32 values, so
    the float32 copy stays small for a big vocabulary while a tiny model does one batched call
    (a Python loop over rows used to cost a tenth of the tiny model's step).
    """
    B, T, V = logits.shape
    rows = max(1, chunk_elements // max(T * V, 1))
    out = []
    for l in logits.split(rows):  # (b, T, V) with b <= rows
        logp = torch.log_softmax(l if l.dtype == torch.float64 else l.float(), -1)  # (b, T, V)
        out.append(-(logp.exp() * logp).sum(-1))  # (b, T)
    return torch.cat(out)  # (B, T)


def activation_checkpointing(model) -> bool:
    """Whether the model recomputes activations in backward (transformers 5 renamed the flag)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name) or name in getattr(model, "__dict__", {}):
            return bool(getattr(model, name))
    return False


def completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                      temperature: float = 1.0, group_size: int = 1) -> torch.Tensor:
    """Logits that predict each completion token: (B, Tc, V), divided by the sampling temperature
    (as TRL does, so that log-probs are those of the distribution that was sampled).

    ``group_size`` G > 1: rows come in runs of G identical prompts (as ``sample_groups`` lays
    them out), so each prompt is encoded once into a key-value cache that the G completions
    share; the forward and backward then cost P*Tp + B*Tc tokens instead of B*(Tp+Tc). The
    log-probs equal the plain forward's up to float rounding (a few 1e-6 on the tiny model). A
    model that cannot take a cache in training (gradient checkpointing) gets the plain forward.
    """
    Tp = prompt_ids.shape[1]
    attn = torch.cat([prompt_mask, completion_mask], dim=1).long()  # (B, Tp+Tc)
    pos = position_ids_from_mask(attn)  # (B, Tp+Tc)
    checkpointing = model.training and activation_checkpointing(model)
    if group_size > 1 and not checkpointing and repeated_groups(prompt_ids, group_size) \
            and repeated_groups(prompt_mask, group_size):
        first, cache = prefill(model, prompt_ids, prompt_mask, group_size, logits_to_keep=1)  # logits (B, 1, V)
        out = model(input_ids=completion_ids, attention_mask=attn, position_ids=pos[:, Tp:], use_cache=True,
                    **cache)  # logits (B, Tc, V)
        logits = torch.cat([first.logits, out.logits[:, :-1]], dim=1)  # (B, Tc, V) t predicts token t
    else:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, Tp+Tc)
        out = model(input_ids=input_ids, attention_mask=attn, position_ids=pos, use_cache=False)
        logits = out.logits[:, Tp - 1:-1, :]  # (B, Tc, V) position t predicts completion token t
    if isinstance(temperature, torch.Tensor) or temperature != 1.0:
        logits = logits / temperature  # temperature: float or (B, 1, 1)
    return logits


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                        temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                        group_size: int = 1):
    """(B, Tc) log-probs of the completion tokens, and (B, Tc) entropies if asked (else None).

    ``entropy_grad=True`` keeps the entropies in the graph (for an entropy bonus in the loss);
    ``group_size``: see :func:`completion_logits` (shares each group's prompt encoding)."""
    logits = completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature,
                               group_size)
    logp = token_logprobs(logits, completion_ids)  # (B, Tc)
    ent = entropy_from_logits(logits if entropy_grad else logits.detach()) if with_entropy else None  # (B, Tc)
    return logp, ent
