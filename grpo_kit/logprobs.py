"""Per-token log-probabilities and entropies of completions under a causal LM."""
from __future__ import annotations

import torch

from .sampling import position_ids_from_mask


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position: logits (B, T, V), targets (B, T) -> (B, T) float32.

    float32 logits: gather minus logsumexp, with no (B, T, V) log-softmax copy. Lower
    precision: one row at a time in float32, so the full-vocab float32 copy is one row.
    """
    if logits.dtype == torch.float32:
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return picked - torch.logsumexp(logits, dim=-1)  # (B, T)
    rows = [torch.log_softmax(l.float(), -1).gather(-1, t.unsqueeze(-1)).squeeze(-1)
            for l, t in zip(logits, targets)]
    return torch.stack(rows)  # (B, T)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution per position: (B, T, V) -> (B, T)."""
    rows = []
    for l in logits:  # one row at a time keeps the float32 copy small
        logp = torch.log_softmax(l.float(), -1)  # (T, V)
        rows.append(-(logp.exp() * logp).sum(-1))  # (T,)
    return torch.stack(rows)  # (B, T)


def completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                      temperature: float = 1.0) -> torch.Tensor:
    """Logits that predict each completion token: (B, Tc, V), divided by the sampling temperature
    (as TRL does, so that log-probs are those of the distribution that was sampled)."""
    Tp = prompt_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, Tp+Tc)
    attn = torch.cat([prompt_mask, completion_mask], dim=1).long()  # (B, Tp+Tc)
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                use_cache=False)
    logits = out.logits[:, Tp - 1:-1, :]  # (B, Tc, V) position t predicts completion token t
    if isinstance(temperature, torch.Tensor) or temperature != 1.0:
        logits = logits / temperature  # temperature: float or (B, 1, 1)
    return logits


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                        temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False):
    """(B, Tc) log-probs of the completion tokens, and (B, Tc) entropies if asked (else None).

    ``entropy_grad=True`` keeps the entropies in the graph (for an entropy bonus in the loss)."""
    logits = completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature)
    logp = token_logprobs(logits, completion_ids)  # (B, Tc)
    ent = entropy_from_logits(logits if entropy_grad else logits.detach()) if with_entropy else None  # (B, Tc)
    return logp, ent
