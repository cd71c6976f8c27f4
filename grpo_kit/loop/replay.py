"""Replay buffer: past groups with a strong signal, mixed into later batches off-policy.

With ``replay_fraction`` f > 0, each step takes k = round(f * P) of its P groups from the
buffer (when it holds that many of the current G) and samples only P - k fresh ones, so a
step generates (P - k) * G completions instead of P * G. After the update, each fresh group
whose mean |advantage| exceeds ``replay_min_abs_advantage`` is stored with

- its rows (prompt and completion ids, masks), its advantages as computed in its own group;
- the per-token log-probs of the policy that generated it (the *behaviour* policy), taken
  without gradient just before the update, at the sampling temperature;
- the step that generated it.

Which groups are replayed: the highest mean |advantage| first (ties: the newest), each group
once (it leaves the buffer when replayed). Groups older than ``replay_max_age`` steps are
evicted; past ``replay_capacity`` groups the weakest are dropped.

How the loss treats replayed rows: ``train_step`` gets the stored behaviour log-probs as
``old`` for those rows, so the per-token ratio is pi_theta / pi_behaviour (the importance
ratio of off-policy data, :func:`importance_weights`) and the clipped objective of PPO/GRPO
applies: a replayed token whose ratio has left [1 - epsilon, 1 + epsilon_high] in the
direction its advantage pushes gives no gradient. Fresh rows keep old = the current policy
(ratio 1 at the first update). The ``replay/*`` metrics give the number of replayed groups,
the buffer size, their mean age and their mean importance ratio before the update.

Replay of high-reward or high-advantage rollouts is a variant you will meet in LLM RL, e.g.
"RePO: Replay-Enhanced Policy Optimization" (Li et al. 2025, arXiv 2506.09340) and the prioritised replay of
Schaul et al. (2016); notebook 04 runs replay as one strategy at an equal budget of completions.
"""
from __future__ import annotations

import torch

from grpo_kit.model.sampling import Rollouts


def importance_weights(logp_now: torch.Tensor, logp_behaviour: torch.Tensor, mask: torch.Tensor,
                       level: str = "token") -> torch.Tensor:
    """Ratios pi_now / pi_behaviour: per token (B, Tc), 0 on padding; or ``level='sequence'``
    (GSPO) one ratio per row (B,), exp of the mean log-ratio over the row's tokens."""
    log_ratio = (logp_now - logp_behaviour) * mask  # (B, Tc)
    if level == "token":
        return torch.exp(log_ratio) * mask  # (B, Tc)
    return torch.exp(log_ratio.sum(-1) / mask.sum(-1).clamp(min=1))  # (B,)


def _trim(ids: torch.Tensor, mask: torch.Tensor, left: bool):
    """Drop the columns no row of a group uses (padding), so stored groups stay small."""
    used = mask.any(0).nonzero().flatten()
    if used.numel() == 0:
        return ids[:, :1], mask[:, :1]
    sl = slice(int(used[0]), None) if left else slice(0, int(used[-1]) + 1)
    return ids[:, sl], mask[:, sl]


class ReplayBuffer:
    def __init__(self, capacity: int, max_age: int, min_abs_advantage: float = 0.0):
        self.capacity, self.max_age, self.min_abs_advantage = capacity, max_age, min_abs_advantage
        self.groups: list[dict] = []

    def __len__(self) -> int:
        return len(self.groups)

    def add(self, rollouts: Rollouts, advantages: torch.Tensor, behaviour_logp: torch.Tensor, step: int,
            groups: list[int] | None = None) -> int:
        """Store the groups (default all) of ``rollouts`` whose mean |advantage| > min_abs_advantage -> count."""
        G = rollouts.num_generations
        adv = advantages.reshape(-1, G).float().cpu()  # (P, G)
        added = 0
        for p in (range(adv.shape[0]) if groups is None else groups):
            score = adv[p].abs().mean().item()
            if not score > self.min_abs_advantage:
                continue
            rows = slice(p * G, (p + 1) * G)
            c_ids, c_mask = _trim(rollouts.completion_ids[rows].cpu(), rollouts.completion_mask[rows].cpu(), False)
            p_ids, p_mask = _trim(rollouts.prompt_ids[rows].cpu(), rollouts.prompt_mask[rows].cpu(), True)
            self.groups.append({
                "prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask,
                "is_truncated": rollouts.is_truncated[rows].cpu(), "prompts": rollouts.prompts[rows],
                "completions": rollouts.completions[rows], "G": G, "advantages": adv[p].clone(),
                "logp": behaviour_logp[rows, :c_ids.shape[1]].detach().float().cpu(), "step": step, "score": score})
            added += 1
        if len(self.groups) > self.capacity:  # keep the strongest; among equals the newest
            self.groups.sort(key=lambda e: (e["score"], e["step"]), reverse=True)
            self.groups = self.groups[:self.capacity]
        return added

    def evict(self, step: int) -> int:
        """Drop groups older than ``max_age`` steps at ``step`` (age = step - the step that generated it)."""
        before = len(self.groups)
        self.groups = [e for e in self.groups if step - e["step"] <= self.max_age]
        return before - len(self.groups)

    def take(self, k: int, G: int, step: int) -> list[dict]:
        """Remove and return up to k groups of size G, strongest first (ties: newest), after evicting old ones."""
        self.evict(step)
        fit = sorted((e for e in self.groups if e["G"] == G), key=lambda e: (e["score"], e["step"]), reverse=True)[:k]
        chosen = {id(e) for e in fit}
        self.groups = [e for e in self.groups if id(e) not in chosen]
        return fit

    def state_dict(self) -> dict:
        return {"groups": [dict(e) for e in self.groups]}

    def load_state_dict(self, d: dict) -> None:
        self.groups = [dict(e) for e in d["groups"]]


def as_rollouts(entries: list[dict], pad_id: int, device) -> tuple[Rollouts, torch.Tensor, torch.Tensor]:
    """Stored groups -> (Rollouts, advantages (k*G,), behaviour log-probs (k*G, Tc)) on ``device``."""
    from grpo_kit.loop.dynamic import cat_rollouts, pad_to

    parts = [Rollouts(e["prompt_ids"], e["prompt_mask"], e["completion_ids"], e["completion_mask"],
                      e["is_truncated"], list(e["prompts"]), list(e["completions"]), e["G"]) for e in entries]
    ro = cat_rollouts(parts, pad_id)
    Tc = ro.completion_ids.shape[1]
    logp = torch.cat([pad_to(e["logp"], Tc, 0, False) if e["logp"].shape[1] < Tc else e["logp"] for e in entries])
    adv = torch.cat([e["advantages"] for e in entries])  # (k*G,)
    ro = Rollouts(*(t.to(device) for t in (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                           ro.is_truncated)), ro.prompts, ro.completions, ro.num_generations)
    return ro, adv.to(device), logp.to(device)


def rescore(policy, entries: list[dict], cfg, pad_id: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor,
                                                                               torch.Tensor]:
    """Stored groups scored again under ``policy``, as :func:`mix` scores a replayed batch: (log-probs
    under ``policy`` (k*G, Tc), the behaviour log-probs the buffer stored (k*G, Tc), the completion mask
    (k*G, Tc) as floats). Under the policy that sampled the groups the first two agree up to float
    rounding; ``exp`` of their difference is the importance ratio the loss uses."""
    from grpo_kit.loop.step import batch_logprobs, micro_slices, run_autocast, scoring
    from grpo_kit.model.sampling import row_temperatures

    ro, _, stored = as_rollouts(entries, pad_id, device)
    temps = row_temperatures(cfg.temperature, ro.num_prompts, ro.num_generations, device).unsqueeze(-1)  # (B, 1, 1)
    now = batch_logprobs(policy, ro, temps, micro_slices(ro.completion_ids.shape[0], cfg.micro_batch_size),
                         run_autocast(cfg, device), **scoring(cfg))  # (B, Tc)
    return now, stored, ro.completion_mask.float()


# ---------------------------------------------------------------- what train.py calls

def take_for_step(buf: ReplayBuffer | None, cfg, step: int) -> list[dict]:
    """The groups step ``step`` replays from ``buf`` (None: replay is off): round(replay_fraction * P)
    of the current G, if the buffer has them."""
    if buf is None:
        return []
    k = round(cfg.replay_fraction * cfg.num_prompts)
    k = min(k, cfg.num_prompts - 1)  # at least one fresh group per step
    return buf.take(k, cfg.num_generations, step) if k > 0 else []


def mix(run, buf: ReplayBuffer, cfg, fresh: Rollouts, adv: torch.Tensor, sample_mask, replayed: list[dict]):
    """Store the fresh groups in the buffer and append the replayed ones to the batch.

    Returns a ``step.Update``: the rows, advantages (B,), sample_mask (B,) or None, and for the
    replayed rows ``behaviour_logp`` / ``behaviour_rows``; its metrics are ``replay/*``.
    """
    from grpo_kit.loop.step import (
        Update,
        batch_logprobs,
        micro_slices,
        run_autocast,
        scoring,
    )
    from grpo_kit.model.sampling import row_temperatures

    device = fresh.completion_ids.device
    ctx = run_autocast(cfg, device)
    step = run.step + 1  # the step being taken (metrics["step"])
    ages = [step - e["step"] for e in replayed]
    if replayed:
        old, old_adv, old_logp = as_rollouts(replayed, run.tokenizer.pad_token_id, device)
        from grpo_kit.loop.dynamic import cat_rollouts

        batch = cat_rollouts([fresh, old], run.tokenizer.pad_token_id)
    else:
        batch = fresh
    B, nf = batch.completion_ids.shape[0], fresh.completion_ids.shape[0]
    temps = row_temperatures(cfg.temperature, batch.num_prompts, batch.num_generations, device).unsqueeze(-1)
    logp_now = batch_logprobs(run.policy, batch, temps, micro_slices(B, cfg.micro_batch_size), ctx,
                              **scoring(cfg))  # (B, Tc)
    Tc_f = fresh.completion_ids.shape[1]
    buf.add(fresh, adv, logp_now[:nf, :Tc_f], step)  # the behaviour log-probs of the fresh groups
    metrics = {"replay/groups": float(len(replayed)), "replay/buffer_size": float(len(buf)),
               "replay/mean_age": sum(ages) / len(ages) if ages else 0.0}
    if not replayed:
        return Update(fresh, adv.reshape(-1), None if sample_mask is None else sample_mask.reshape(-1),
                      metrics=metrics)
    behaviour = torch.zeros_like(logp_now)  # (B, Tc)
    behaviour[nf:, :old_logp.shape[1]] = old_logp
    rows = torch.zeros(B, dtype=torch.bool, device=device)
    rows[nf:] = True  # (B,) replayed rows
    w = importance_weights(logp_now[nf:], behaviour[nf:], batch.completion_mask[nf:].float())  # (k*G, Tc)
    metrics["replay/ratio_mean"] = (w.sum() / batch.completion_mask[nf:].sum().clamp(min=1)).item()
    adv_all = torch.cat([adv.reshape(-1).to(device), old_adv.float()])  # (B,)
    mask = None
    if sample_mask is not None:
        mask = torch.cat([sample_mask.reshape(-1).to(device), torch.ones(B - nf, dtype=torch.bool, device=device)])
    return Update(batch, adv_all, mask, behaviour, rows, metrics)
