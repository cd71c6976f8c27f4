"""A tiny learned critic for the hybrid GRPO + GAE estimator (``advantages.hybrid_gae``).

The value head is one linear layer on the policy's last hidden states: V_t estimates the
return from the state in which completion token t is generated (the same position whose
logits predict token t). It is trained by regression on the GAE returns:

    value_loss = sum_t m_t (V_t - R_t)^2 / sum_t m_t        (masked mean squared error)

| piece | source |
|---|---|
| value head on the LM's hidden states, MSE to returns | PPO for LMs (Ziegler et al. 2019; Ouyang et al. 2022) |
| returns R = A_GAE + V | GAE, Schulman et al. 2016 |
"""
from __future__ import annotations

import torch
from torch import nn

from grpo_kit.model.sampling import position_ids_from_mask


def value_head(hidden_size: int) -> nn.Linear:
    """A linear map hidden state (H,) -> value (1,), initialised at zero so V starts at 0."""
    head = nn.Linear(hidden_size, 1)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    return head


def completion_hidden(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """Last hidden states at the positions that generate each completion token: (B, Tc, H)."""
    Tp = prompt_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, Tp+Tc)
    attn = torch.cat([prompt_mask, completion_mask], dim=1).long()  # (B, Tp+Tc)
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                use_cache=False, output_hidden_states=True, logits_to_keep=1)  # no (B, T, V) logits
    return out.hidden_states[-1][:, Tp - 1:-1, :]  # (B, Tc, H)


def values(head: nn.Linear, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """V_t per completion token: hidden (B, T, H), mask (B, T) -> (B, T), 0 on padding."""
    return head(hidden.float()).squeeze(-1) * mask.to(torch.float32)  # (B, T)


def value_loss(v: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean squared error between values and (detached) returns, all (B, T) -> (). 0 if no tokens."""
    m = mask.to(v.dtype)  # (B, T)
    return (((v - returns.detach()) ** 2) * m).sum() / m.sum().clamp(min=1)


def rollout_hidden(model, rollouts, slices, ctx) -> torch.Tensor:
    """``completion_hidden`` of every rollout row, micro-batch by micro-batch, without gradients: (B, Tc, H).

    The values of a step come from the policy as it sampled (before its update) and never carry
    gradient into the policy: the value head learns on these detached states alone.
    """
    out = []
    for s in slices:
        with ctx, torch.inference_mode():
            h = completion_hidden(model, rollouts.prompt_ids[s], rollouts.prompt_mask[s],
                                  rollouts.completion_ids[s], rollouts.completion_mask[s])  # (b, Tc, H)
        out.append(h.float().clone())  # out of inference mode, so the head can train on it
    return torch.cat(out)  # (B, Tc, H)


def fit_value_head(head: nn.Linear, optimizer: torch.optim.Optimizer, hidden: torch.Tensor,
                   returns: torch.Tensor, mask: torch.Tensor) -> float:
    """One optimizer step of ``value_loss`` on (detached) hidden (B, T, H) and returns (B, T); the loss before it."""
    optimizer.zero_grad(set_to_none=True)
    loss = value_loss(values(head, hidden, mask), returns, mask)  # ()
    loss.backward()
    optimizer.step()
    return loss.item()


def explained_variance(v: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) over the masked tokens (PPO's diagnostic): 1 a perfect critic, 0 one that
    predicts the mean, below 0 worse than the mean; NaN when the returns do not vary."""
    m = mask.bool()  # (B, T)
    r, err = returns[m].double(), (returns - v)[m].double()  # (N,) each
    var = r.var(unbiased=False) if r.numel() else r.new_zeros(())
    return float(1 - err.var(unbiased=False) / var) if var > 0 else float("nan")
