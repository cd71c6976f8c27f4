"""Per-step metrics, with TRL's key names where TRL logs the same quantity.

Keys: ``reward``, ``reward_std`` (std of all rewards in the batch), ``frac_reward_zero_std``
(groups whose rewards are all equal), ``rewards/<func>/mean``, ``completions/mean_length``,
``completions/min_length``, ``completions/max_length``, ``completions/clipped_ratio``
(truncated: no EOS), ``completions/mean_length_right`` / ``_wrong`` and ``completions/clipped_ratio_wrong``
(length and truncation by right/wrong, see :func:`correct_mask`; with ``cfg.gold_reward_funcs`` the first gold
function says which), ``completions/distinct_frac`` (distinct completions per group / G, averaged: 1 = every
completion differs, 1/G = the group is G copies of one text), ``gold_reward`` (the mean of
``cfg.gold_reward_funcs``, logged only, never trained on), ``advantages/max_abs``,
``samples`` (the first group of the step, as text: :func:`group_samples`), plus what ``step.train_step`` returns (``loss``, ``grad_norm``,
``learning_rate``, ``kl``, ``entropy``, ``clip_ratio/*``) and ``accuracy`` when an eval runs.
"""
from __future__ import annotations

import math

import torch

from grpo_kit.core.advantages import zero_std_groups


def reward_metrics(rewards: torch.Tensor, per_func: torch.Tensor | None = None,
                   func_names: list[str] | None = None) -> dict:
    """rewards (P, G); per_func (B, K) -> summary floats."""
    flat = rewards.reshape(-1)  # (B,)
    flat = flat[~torch.isnan(flat)]  # (B',) samples skipped by reward_error_policy='skip' are NaN
    out = {
        "reward": flat.mean().item() if flat.numel() else float("nan"),
        "reward_std": flat.std().item() if flat.numel() > 1 else 0.0,
        "frac_reward_zero_std": zero_std_groups(rewards).float().mean().item(),
    }
    if per_func is not None and func_names:
        for k, name in enumerate(func_names):
            out[f"rewards/{name}/mean"] = torch.nanmean(per_func[:, k]).item()
    return out


def length_metrics(lengths: torch.Tensor, is_truncated: torch.Tensor, adv: torch.Tensor | None = None,
                   correct: torch.Tensor | None = None) -> dict:
    """lengths (B,) completion tokens incl. EOS; is_truncated (B,) bool; adv (B,) optional;
    correct (B,) bool optional.

    With ``adv``, also the mean length of completions pushed up (A > 0) and pushed down (A < 0):
    the two quantities Dr. GRPO's length bias is about. With ``correct``, the mean length of right
    and of wrong answers and the truncation rate of the wrong ones. A key is absent when no
    completion falls in its set.
    """
    l = lengths.float()
    out = {
        "completions/mean_length": l.mean().item(),
        "completions/min_length": l.min().item(),
        "completions/max_length": l.max().item(),
        "completions/clipped_ratio": is_truncated.float().mean().item(),
    }
    if adv is not None:
        for name, sel in (("pos_adv", adv > 0), ("neg_adv", adv < 0)):
            if bool(sel.any()):
                out[f"completions/mean_length_{name}"] = l[sel].mean().item()
    if correct is not None:
        for name, sel in (("right", correct), ("wrong", ~correct)):
            if bool(sel.any()):
                out[f"completions/mean_length_{name}"] = l[sel].mean().item()
        if bool((~correct).any()):
            out["completions/clipped_ratio_wrong"] = is_truncated[~correct].float().mean().item()
    return out


CORRECTNESS_JUDGES = ("exact_answer", "math_answer")  # reward functions that score right (1) / wrong (0)


def correct_mask(rewards: torch.Tensor, per_func: torch.Tensor | None = None,
                 func_names: list[str] | None = None) -> torch.Tensor:
    """Which completions count as right: rewards (B,), per_func (B, K) -> (B,) bool.

    The first correctness judge among the reward functions (``exact_answer``, ``math_answer``)
    decides: its reward > 0. Without one, the combined reward > 0 (a format bonus then counts
    as right, so say so where it matters). NaN (a skipped sample) is wrong.
    """
    for name in CORRECTNESS_JUDGES:
        if per_func is not None and func_names and name in func_names:
            return per_func[:, func_names.index(name)] > 0  # (B,)
    return rewards.reshape(-1) > 0  # (B,)


def group_samples(prompts: list[str], completions: list[str], rewards: torch.Tensor, adv: torch.Tensor,
                  max_chars: int = 200) -> dict:
    """The first group of a step, as JSON-ready text: rewards (P, G), adv (P, G) (or (P, G, T):
    the mean over tokens) with ``prompts``/``completions`` the B = P*G strings of the rollouts.

    -> {"prompt": str, "completions": [G str], "rewards": [G], "advantages": [G]}; strings are cut
    at ``max_chars`` and NaN becomes None, so the dict stays small and valid JSON.
    """
    G = rewards.shape[1]
    a = adv[0] if adv.dim() == 2 else adv[0].float().mean(-1)  # (G,)

    def num(x):
        x = float(x)
        return None if math.isnan(x) else x

    return {"prompt": prompts[0][:max_chars], "completions": [c[:max_chars] for c in completions[:G]],
            "rewards": [num(x) for x in rewards[0]], "advantages": [num(x) for x in a]}


def completion_rows(step: int, prompts: list[str], completions: list[str], rewards: torch.Tensor, adv: torch.Tensor,
                    per_func: torch.Tensor, names: list[str], gold: torch.Tensor | None = None,
                    gold_names: list[str] = (), max_groups: int = 0) -> list[dict]:
    """Every completion of a step as a JSON-ready row: rewards (P, G), adv (P, G) (or (P, G, T): the
    mean over tokens), per_func (P*G, K) under ``names``, gold (P*G, K') under ``gold_names``;
    ``prompts``/``completions`` the B = P*G strings. ``max_groups`` > 0 keeps the first that many groups.

    -> [{"step", "group", "index", "prompt", "completion", "reward", "advantage", "rewards/<name>": ...,
    "gold_rewards/<name>": ...}], group-major (the G rows of group 0 first); NaN becomes None."""
    P, G = rewards.shape[0], rewards.shape[1]
    a = adv if adv.dim() == 2 else adv.float().mean(-1)  # (P, G)
    keep = P if max_groups <= 0 else min(P, max_groups)

    def num(x):
        x = float(x)
        return None if math.isnan(x) else x

    rows = []
    for b in range(keep * G):
        p, g = divmod(b, G)
        row = {"step": step, "group": p, "index": g, "prompt": prompts[b], "completion": completions[b],
               "reward": num(rewards[p, g]), "advantage": num(a[p, g])}
        row.update({f"rewards/{n}": num(per_func[b, k]) for k, n in enumerate(names)})
        if gold is not None:
            row.update({f"gold_rewards/{n}": num(gold[b, k]) for k, n in enumerate(gold_names)})
        rows.append(row)
    return rows


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021): 1 - C(n-c, k)/C(n, k)."""
    if k > n:
        raise ValueError(f"pass@k needs k <= n samples, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def distinct_n(texts: list[str], n: int = 2) -> float:
    """Distinct n-grams (characters) over all n-grams in ``texts``: 1.0 = no repetition."""
    grams = [t[i:i + n] for t in texts for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def distinct_frac(completions: list[str], G: int) -> float:
    """Mean over groups of (distinct completions in the group) / G; completions are (B,) = P groups of G.

    ``["a", "a", "b", "c"]`` with G = 2 -> groups {a, a} (1/2) and {b, c} (2/2) -> 0.75.
    """
    P = len(completions) // G
    per_group = [len(set(completions[p * G:(p + 1) * G])) / G for p in range(P)]  # (P,)
    return sum(per_group) / P if P else float("nan")
