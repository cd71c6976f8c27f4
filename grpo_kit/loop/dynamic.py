"""Filling a step's batch: one round of P prompts, or DAPO's dynamic sampling.

Dynamic sampling (Yu et al. 2025, "DAPO", section 3.2): a group whose G rewards are all equal
has advantage 0 for every completion and teaches nothing, yet still costs a forward and
backward and dilutes the token-mean loss. With ``dynamic_sampling=True`` a step draws rounds
of P prompts (each round P*G completions) and keeps only groups with unequal rewards, until P
groups are kept or ``dynamic_max_rounds`` rounds are drawn (:func:`enough`). The batch is the
first P kept groups in the order drawn; if the cap is hit first, it is topped up with dropped
groups in the order drawn (they carry advantage 0), so B stays ``samples_per_step``
(:func:`choose_groups`). Each round spends P*G completions of the budget; the metrics
``dynamic/rounds``, ``dynamic/groups_kept`` and ``dynamic/groups_drawn`` say what it cost.

Reward metrics (``reward``, ``frac_reward_zero_std``) describe every group drawn, which is
what the policy does; the trained batch is filtered and would look better than the policy.

Also here: the rollout surgery that dynamic sampling and the replay buffer need
(:func:`take_groups`, :func:`cat_rollouts`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from grpo_kit.core.advantages import zero_std_groups
from grpo_kit.data.tasks import columns_of
from grpo_kit.loop.step import run_autocast
from grpo_kit.model.sampling import (
    Rollouts,
    SamplingControls,
    render_prompt,
    sample_groups,
)
from grpo_kit.rewards.judges import is_conversational, score, trl_reward_kwargs

# ---------------------------------------------------------------- the stopping rule and the choice (pure)

@dataclass
class Batch:
    """The groups one step trains on, as :func:`sample_batch` collects them."""
    items: list[dict]        # the P dataset rows, one per group
    rollouts: Rollouts       # P*G completions, group-major
    rewards: torch.Tensor    # (P, G) combined reward (NaN where a sample's reward was bad)
    per_func: torch.Tensor   # (P*G, K) one column per reward function
    bad: torch.Tensor        # (P, G) bool: a reward function failed on the sample
    reasons: list[str]       # what went wrong, one line per bad sample
    drawn: torch.Tensor      # (rounds*P, G) rewards of every group sampled (dynamic sampling draws more)
    info: dict = field(default_factory=dict)  # completions_generated, dynamic/* counts


def enough(kept_per_round: list[list[bool]], P: int, max_rounds: int) -> bool:
    """Stop drawing when P groups are kept or ``max_rounds`` rounds are drawn."""
    return sum(map(sum, kept_per_round)) >= P or len(kept_per_round) >= max_rounds


def choose_groups(kept_per_round: list[list[bool]], P: int) -> list[tuple[int, int]]:
    """(round, group) of the batch: the first P kept groups, then dropped ones if too few were kept."""
    order = [(r, g) for r, flags in enumerate(kept_per_round) for g in range(len(flags))]
    kept = [(r, g) for r, g in order if kept_per_round[r][g]]
    dropped = [(r, g) for r, g in order if not kept_per_round[r][g]]
    return (kept + dropped)[:P]


# ---------------------------------------------------------------- rollout surgery

def take_groups(r: Rollouts, groups: list[int]) -> Rollouts:
    """The rows of the given groups (in that order)."""
    G = r.num_generations
    rows = [p * G + g for p in groups for g in range(G)]
    idx = torch.tensor(rows, dtype=torch.long, device=r.prompt_ids.device)
    return Rollouts(r.prompt_ids[idx], r.prompt_mask[idx], r.completion_ids[idx], r.completion_mask[idx],
                    r.is_truncated[idx], [r.prompts[i] for i in rows], [r.completions[i] for i in rows], G,
                    truncated_mass=r.truncated_mass[idx] if r.truncated_mass is not None else None)


def pad_to(x: torch.Tensor, width: int, value: int, left: bool) -> torch.Tensor:
    n = width - x.shape[1]
    if n == 0:
        return x
    fill = x.new_full((x.shape[0], n), value)
    return torch.cat([fill, x] if left else [x, fill], dim=1)


def cat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Rollouts stacked row-wise: prompts re-padded on the left, completions on the right (masks 0 there)."""
    if len(parts) == 1:
        return parts[0]
    G = parts[0].num_generations
    if any(p.num_generations != G for p in parts):
        raise ValueError("cat_rollouts: all parts need the same group size")
    Tp = max(p.prompt_ids.shape[1] for p in parts)
    Tc = max(p.completion_ids.shape[1] for p in parts)
    return Rollouts(
        torch.cat([pad_to(p.prompt_ids, Tp, pad_id, True) for p in parts]),  # (B, Tp)
        torch.cat([pad_to(p.prompt_mask, Tp, 0, True) for p in parts]),
        torch.cat([pad_to(p.completion_ids, Tc, pad_id, False) for p in parts]),  # (B, Tc)
        torch.cat([pad_to(p.completion_mask, Tc, 0, False) for p in parts]),
        torch.cat([p.is_truncated for p in parts]),
        [s for p in parts for s in p.prompts], [s for p in parts for s in p.completions], G,
        truncated_mass=(torch.cat([pad_to(p.truncated_mass, Tc, 0.0, False) for p in parts])  # (B, Tc)
                        if all(p.truncated_mass is not None for p in parts) else None))


# ---------------------------------------------------------------- one step's batch

def draw_items(run, pool: list[dict], P: int) -> list[dict]:
    """P dataset rows drawn from ``pool`` with the run's prompt generator (with replacement)."""
    idx = torch.randint(len(pool), (P,), generator=run.data_gen).tolist()
    return [pool[i] for i in idx]


def collect_groups(run, cfg, items: list[dict], reward_funcs, reward_log=None, trainer_state=None) -> Batch:
    """One round: G = ``cfg.num_generations`` completions of each of the P ``items``, judged -> :class:`Batch`.

    Sampling runs under the run's autocast (the dtypes that score it, see step.py); reward
    functions get TRL's keyword arguments (``completion_ids``, ``trainer_state``, ``log_extra``,
    ``log_metric`` into ``reward_log``) and, for conversational prompts, TRL's message format.
    """
    P, G = len(items), cfg.num_generations
    with run_autocast(cfg, next(run.policy.parameters()).device):  # sample with the dtypes that score
        ro = sample_groups(run.policy, run.tokenizer, [render_prompt(run.tokenizer, it["prompt"]) for it in items],
                           G, cfg.max_completion_length, cfg.temperature, run.sample_gen,
                           SamplingControls(cfg.top_k, cfg.top_p, cfg.min_p, cfg.repetition_penalty))
    prompts, completions = ro.prompts, ro.completions
    if is_conversational(items[0]["prompt"]):  # reward functions see TRL's conversational format
        prompts = [it["prompt"] for it in items for _ in range(G)]
        completions = [[{"role": "assistant", "content": c}] for c in completions]
    trl_kwargs = (trl_reward_kwargs(ro.completion_ids, ro.completion_mask, trainer_state, reward_log)
                  if reward_log is not None else None)
    s = score(reward_funcs, prompts, completions, columns_of(items, repeat=G), cfg.reward_weights,
              cfg.reward_error_policy, cfg.reward_timeout_s, trl_kwargs=trl_kwargs)  # (B,), (B, K), (B,) bool
    rewards = s.rewards.view(P, G)  # (P, G)
    return Batch(items, ro, rewards, s.per_func, s.bad.view(P, G), s.reasons, rewards,
                 {"completions_generated": P * G})


def sample_batch(run, cfg, pool: list[dict], reward_funcs, P: int | None = None, reward_log=None,
                 trainer_state=None) -> Batch:
    """P groups of G = ``cfg.num_generations`` from ``pool``: one round of :func:`collect_groups`, or
    dynamic sampling's rounds (:func:`enough`, :func:`choose_groups`). Returns a :class:`Batch`."""
    P = cfg.num_prompts if P is None else P
    G = cfg.num_generations
    rounds, flags = [], []
    max_rounds = cfg.dynamic_max_rounds if cfg.dynamic_sampling else 1
    while True:
        rounds.append(collect_groups(run, cfg, draw_items(run, pool, P), reward_funcs, reward_log, trainer_state))
        flags.append((~zero_std_groups(torch.nan_to_num(rounds[-1].rewards))).tolist())
        if not cfg.dynamic_sampling or enough(flags, P, max_rounds):
            break
    if not cfg.dynamic_sampling:
        return rounds[0]
    chosen = choose_groups(flags, P)
    info = {"completions_generated": len(rounds) * P * G, "dynamic/rounds": float(len(rounds)),
            "dynamic/groups_drawn": float(len(rounds) * P),
            "dynamic/groups_kept": float(sum(flags[r][g] for r, g in chosen))}
    drawn = torch.cat([b.rewards for b in rounds])  # (rounds*P, G) every group sampled
    if len(rounds) == 1 and chosen == [(0, g) for g in range(P)]:
        return dataclasses.replace(rounds[0], drawn=drawn, info=info)
    parts = [take_groups(rounds[r].rollouts, [g]) for r, g in chosen]
    per_func = [rounds[r].per_func.view(P, G, -1)[g] for r, g in chosen]  # P of (G, K)
    return Batch([rounds[r].items[g] for r, g in chosen], cat_rollouts(parts, run.tokenizer.pad_token_id),
                 torch.stack([rounds[r].rewards[g] for r, g in chosen]),  # (P, G)
                 torch.stack(per_func).reshape(P * G, -1),  # (B, K)
                 torch.stack([rounds[r].bad[g] for r, g in chosen]),  # (P, G)
                 [s for b in rounds for s in b.reasons], drawn, info)
