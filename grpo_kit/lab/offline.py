"""Learning from offline preference groups: K responses per prompt, generated and judged beforehand.

One seed design (002) builds GRPO on pairwise comparisons inside a group and learns from ranked
groups that were generated ahead of time. The pieces:

- :func:`pregenerate`: sample K responses per prompt from a model, judge every pair with a
  *clear* rule (right beats wrong: +-1) and resolve the clear rule's ties with a *finer* rule
  (the numerically closer answer wins), scaled by ``tie_weight`` (a soft label, e.g. +-0.5).
  Records have the jsonl layout of :mod:`grpo_kit.core.preferences` (``prompt``, ``responses``,
  ``preference_matrix``, extra columns).
- :func:`offline_step`: one update on a batch of groups with one of :data:`OFFLINE_LOSSES`: the
  pairwise margin hinge on sequence log-probabilities (``margin``), a Bradley-Terry loss on
  ``beta * (log pi - log pi_ref)`` (``bt``, the DPO parameterisation: the policy's implicit reward),
  or REINFORCE on each answer's share of its group beaten, minus a learnable per-group baseline
  (``baseline``, :func:`preference_rewards`, :func:`baseline_update`); staged: ``stage=1`` keeps the
  clear pairs only (|M| = 1), ``stage=2`` every labelled pair, ties resolved by the finer judge included.

The loop, its checkpoints and exact resume (``grpo-kit train-offline``) and :func:`train_offline`,
the same loop for notebooks, are in :mod:`grpo_kit.lab.offline_run`.
"""
from __future__ import annotations

from typing import Sequence

import torch

from grpo_kit.core.losses import (
    bradley_terry_loss,
    learned_baseline_loss,
    pairwise_margin_loss,
)
from grpo_kit.core.preferences import check_preferences, preferences_from_scores
from grpo_kit.eval.inference import columns_of
from grpo_kit.model.logprobs import completion_logprobs
from grpo_kit.model.sampling import sample_groups
from grpo_kit.rewards.judges import exact_answer, stated_answers

OFFLINE_LOSSES = ("margin", "bt", "baseline")


def encode_groups(tokenizer, prompts: Sequence[str], groups: Sequence[Sequence[str]], device):
    """Tokenise P prompts x K given responses (each + EOS) as one batch of B = P*K rows.

    Returns prompt_ids (B, Tp) left-padded, prompt_mask (B, Tp), completion_ids (B, Tc)
    right-padded, completion_mask (B, Tc).
    """
    rows = [(p, r) for p, g in zip(prompts, groups) for r in g]
    enc = tokenizer([p for p, _ in rows], return_tensors="pt", padding=True, padding_side="left")
    comp = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for _, r in rows]
    Tc = max(map(len, comp))
    pad = tokenizer.pad_token_id
    completion_ids = torch.tensor([c + [pad] * (Tc - len(c)) for c in comp])  # (B, Tc)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (Tc - len(c)) for c in comp])  # (B, Tc)
    return (enc["input_ids"].to(device), enc["attention_mask"].to(device),
            completion_ids.to(device), completion_mask.to(device))


def group_logprobs(model, tokenizer, prompts, groups, return_lengths: bool = False):
    """Summed completion log-probabilities (P, K) of the given responses under ``model``
    (and their token counts (P, K), EOS included, with ``return_lengths``)."""
    device = next(model.parameters()).device
    pi, pm, ci, cm = encode_groups(tokenizer, prompts, groups, device)
    logp, _ = completion_logprobs(model, pi, pm, ci, cm)  # (B, Tc)
    seq = (logp * cm).sum(-1).view(len(prompts), -1)  # (P, K)
    return (seq, cm.sum(-1).view(len(prompts), -1)) if return_lengths else seq


def clear_winners(prefs: torch.Tensor) -> torch.Tensor:
    """(P, K) bool: responses that win at least one clear pair and lose none (the right answers)."""
    return (prefs >= 1 - 1e-6).any(-1) & ~(prefs <= -1 + 1e-6).any(-1)


def anchor_nll(seq_logp: torch.Tensor, lengths: torch.Tensor, winners: torch.Tensor) -> torch.Tensor:
    """Mean per-token negative log-likelihood of the clear winners (0 when there are none).

    Pure preference losses only fix *differences* of log-probabilities; both sides can fall
    together and the mass go to answers nobody sampled (likelihood displacement). This anchor
    keeps the winners likely (the NLL term of iterative RPO, Pang et al. 2024).
    """
    w = winners.float()  # (P, K)
    return -(seq_logp / lengths.clamp(min=1) * w).sum() / w.sum().clamp(min=1)


def stage_preferences(prefs: torch.Tensor, stage: int) -> torch.Tensor:
    """Stage 1 keeps only clear pairs (|M| = 1); stage 2 keeps every labelled pair. (P, K, K)"""
    if stage == 1:
        return torch.where(prefs.abs() >= 1 - 1e-6, prefs, torch.zeros_like(prefs))
    return prefs


def preference_rewards(prefs: torch.Tensor) -> torch.Tensor:
    """Each answer's share of its group beaten, each win weighted by its label:
    r_i = sum_j max(M_ij, 0) / (K - 1), in [0, 1]. (P, K, K) -> (P, K)

    Not the win rate (wins minus losses), whose group mean is 0 in every group (M is antisymmetric),
    so a per-group baseline would have nothing to learn; this one's mean differs from group to group."""
    return prefs.clamp(min=0).sum(-1) / (prefs.shape[-1] - 1)  # (P, K)


def baseline_update(baseline: torch.Tensor, rewards: torch.Tensor, lr: float) -> torch.Tensor:
    """The learnable baselines after one visit of their groups: b + lr (mean_k r - b), one SGD step of
    size lr / 2 on the per-group squared error mean_k (r_k - b)^2 of ``learned_baseline_loss``.
    (P, 1), (P, K) -> (P, 1)"""
    return baseline + lr * (rewards.mean(-1, keepdim=True) - baseline)  # (P, 1)


def offline_loss(seq_logp, prefs, loss: str = "margin", ref_seq_logp=None, margin: float = 1.0,
                 beta: float = 0.1, baseline=None) -> torch.Tensor:
    """``margin``: mean over preferred pairs of relu(s_j - s_i + margin) on summed log-probs.
    ``bt``: mean over preferred pairs of -log sigmoid(beta (r_i - r_j)), r = log pi - log pi_ref.
    ``baseline``: -mean((r - b) * s) with r = :func:`preference_rewards` and ``baseline`` b (P, 1)
    (the policy term of ``learned_baseline_loss``; b moves by :func:`baseline_update`)."""
    if loss == "margin":
        return pairwise_margin_loss(seq_logp, prefs, margin)
    if loss == "bt":
        if ref_seq_logp is None:
            raise ValueError("loss='bt' needs reference log-probs (the DPO-style implicit reward)")
        return bradley_terry_loss(seq_logp - ref_seq_logp, prefs, beta)
    if loss == "baseline":
        if baseline is None:
            raise ValueError("loss='baseline' needs the groups' baselines b (P, 1)")
        return learned_baseline_loss(seq_logp, preference_rewards(prefs), baseline)[0]
    raise ValueError(f"unknown offline loss {loss!r}: choose from {OFFLINE_LOSSES}")


def offline_step(policy, ref, tokenizer, optimizer, records: Sequence[dict], stage: int = 2,
                 loss: str = "margin", margin: float = 1.0, beta: float = 0.1, max_grad_norm: float = 1.0,
                 nll_coef: float = 0.0, baselines: torch.Tensor | None = None, group_ids=None,
                 baseline_lr: float = 0.5) -> dict:
    """One optimizer step on a batch of preference groups -> metrics.

    ``loss="baseline"``: ``baselines`` (N,) holds one learnable baseline per group of the file and
    ``group_ids`` (P,) says which groups ``records`` are; the drawn groups' baselines are updated in
    place after the step (a group drawn twice in one batch is updated once)."""
    prompts = [r["prompt"] for r in records]
    groups = [list(r["responses"]) for r in records]
    prefs = stage_preferences(torch.stack([r["preference_matrix"] for r in records]).float(), stage)  # (P, K, K)
    ref_lp = None
    if loss == "bt":
        with torch.no_grad():
            ref_lp = group_logprobs(ref, tokenizer, prompts, groups)  # (P, K)
    policy.train()
    seq_logp, lengths = group_logprobs(policy, tokenizer, prompts, groups, return_lengths=True)  # (P, K)
    prefs = prefs.to(seq_logp.device)
    b = None
    if loss == "baseline":
        ids = torch.as_tensor(group_ids)
        b = baselines[ids].to(seq_logp.device).unsqueeze(-1)  # (P, 1)
    value = offline_loss(seq_logp, prefs, loss, ref_lp, margin, beta, b)
    nll = anchor_nll(seq_logp, lengths, clear_winners(prefs))
    if nll_coef:
        value = value + nll_coef * nll
    optimizer.zero_grad(set_to_none=True)
    value.backward()
    gn = torch.nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    pairs = (prefs > 0).sum().item()
    m = {"loss": value.item(), "grad_norm": float(gn), "pairs": pairs, "stage": stage, "winner_nll": nll.item()}
    if loss == "baseline":
        baselines[ids] = baseline_update(b, preference_rewards(prefs), baseline_lr).squeeze(-1).to(baselines)
        m["baseline"] = b.mean().item()
    return m


# ---------------------------------------------------------------- pre-generation

def closeness_score(prompts, completions, answer, reverse_digits=None, scratchpad=None, **_) -> list[float]:
    """A finer scalar judge for the arithmetic tasks: minus the distance of the stated number to
    the right one (no number: -1e9, ranked last). Reads the task's digit order."""
    got = stated_answers(completions, reverse_digits, scratchpad)
    return [-abs(g - float(a)) if g is not None else -1e9 for g, a in zip(got, answer)]


@torch.no_grad()
def pregenerate(model, tokenizer, items: list[dict], k: int = 8, temperature: float = 1.0,
                max_new_tokens: int = 8, tie_weight: float = 0.5, seed: int = 0, batch_prompts: int = 64) -> list[dict]:
    """Sample k responses per item and label every pair: the clear judge (exact answer) decides
    right-vs-wrong pairs with +-1; its ties are resolved by the closeness judge with +-tie_weight."""
    gen = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    records = []
    for start in range(0, len(items), batch_prompts):
        chunk = items[start:start + batch_prompts]
        r = sample_groups(model, tokenizer, [it["prompt"] for it in chunk], k, max_new_tokens, temperature, gen)
        cols = columns_of(chunk, repeat=k)
        clear = torch.tensor(exact_answer(r.prompts, r.completions, **cols)).view(len(chunk), k)  # (P, K)
        fine = torch.tensor(closeness_score(r.prompts, r.completions, **cols)).view(len(chunk), k)  # (P, K)
        m_clear = preferences_from_scores(clear)  # (P, K, K) +-1 or 0
        m_fine = preferences_from_scores(fine)  # (P, K, K)
        prefs = torch.where(m_clear != 0, m_clear, tie_weight * m_fine)  # (P, K, K)
        for p, it in enumerate(chunk):
            extra = {key: v for key, v in it.items() if key not in ("prompt", "completion")}
            records.append({"prompt": it["prompt"], "responses": r.completions[p * k:(p + 1) * k],
                            "preference_matrix": check_preferences(prefs[p], cycles="ignore").tolist(), **extra})
    return records
