"""A population of LoRA policies on one base: a variant you will meet in GRPO write-ups (an experiment).

K LoRA adapters share one frozen base (peft named adapters). Every group of G completions is
sampled by all of them, G / K each; the group-relative advantages are computed over the whole
group, so the variants are compared on the same prompts. Each variant is updated on its own
samples with its learning rate scaled by K times its softmax weight: variants whose samples beat
their group's mean take larger steps. (Scaling the variant's loss instead would change next to
nothing: each variant has its own AdamW, which divides by the gradient's own scale.) Every ``reset_every`` steps the variant with the lowest score is
replaced by a perturbed copy of the best one (the exploit/explore step of population-based
training, Jaderberg et al. 2017, arXiv:1711.09846).

| function | formula | shape |
|---|---|---|
| ``group_advantages`` | (r - mean_g) / (std_g + eps), 0 in a zero-variance group | (P, G) |
| ``variant_scores`` | s_k = mean advantage of variant k's samples over all groups | (K,) |
| ``variant_weights`` | w = softmax(s / tau) | (K,) |
| ``reset_pair`` | (argmin s, argmax s) of the scores summed since the last reset | ints |
| ``perturbed_copy`` | W_best + sigma * std(W_best) * N(0, 1), per tensor | as W |

The naive z-score divides by the group's std: a group whose rewards are all equal (all right, or
all wrong: common) gives 0 / 0 = NaN, and one NaN makes every softmax weight NaN. Here the
std gets ``eps`` and a zero-variance group's advantages are exactly 0 (no variant is credited
for a group nobody could tell apart).

``benchmarks/population.py`` compares it with plain full-model GRPO and plain LoRA-GRPO at the
same number of generated completions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

EPS = 1e-4


def naive_group_zscore(rewards: torch.Tensor) -> torch.Tensor:
    """(r - mean) / std per group, no guard: NaN in a zero-variance group (kept to show why the guard exists)."""
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    return (rewards - mean) / rewards.std(dim=1, keepdim=True)  # (P, G)


def group_advantages(rewards: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Group z-scores with the guard: ``eps`` under the std, and 0 for a zero-variance group. (P, G) -> (P, G)"""
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    std = rewards.std(dim=1, keepdim=True)  # (P, 1) unbiased
    adv = (rewards - mean) / (std + eps)  # (P, G)
    return torch.where(std > 0, adv, torch.zeros_like(adv))  # (P, G)


def owners(G: int, K: int) -> torch.Tensor:
    """Which variant sampled each column of a group: the first G / K columns variant 0, and so on. (G,)"""
    if G % K:
        raise ValueError(f"group size G={G} must be a multiple of the number of variants K={K}")
    return torch.arange(K).repeat_interleave(G // K)  # (G,)


def variant_scores(adv: torch.Tensor, owner: torch.Tensor, K: int) -> torch.Tensor:
    """Mean advantage of each variant's samples over all groups: adv (P, G), owner (G,) -> (K,)."""
    onehot = torch.nn.functional.one_hot(owner, K).to(adv.dtype)  # (G, K)
    return (adv @ onehot).sum(0) / (adv.shape[0] * onehot.sum(0))  # (K,)


def variant_weights(scores: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Softmax of the scores at temperature ``tau``: (K,) -> (K,), sums to 1."""
    return torch.softmax(scores / tau, dim=0)  # (K,)


def reset_pair(score_sums: torch.Tensor) -> tuple[int, int]:
    """(worst, best) variant by the scores summed since the last reset; ties go to the lower index."""
    return int(torch.argmin(score_sums)), int(torch.argmax(score_sums))


def perturbed_copy(tensors: dict[str, torch.Tensor], sigma: float, generator: torch.Generator) -> dict:
    """Each tensor plus Gaussian noise of ``sigma`` times its own std (a zero tensor, LoRA's B at the
    start, is copied unchanged)."""
    out = {}
    for k, w in tensors.items():
        noise = torch.randn(w.shape, generator=generator, dtype=w.dtype).to(w.device)  # as w
        out[k] = w + sigma * w.std() * noise if w.numel() > 1 else w.clone()
    return out


# ---------------------------------------------------------------- the loop (peft named adapters)

@dataclass
class Variants:
    """The population's state beside the run: the adapters' names, each one's AdamW and schedule,
    their scores summed since the last reset, and the config of one variant's update (G/K rows)."""
    names: list[str]
    optimizers: dict  # name -> (AdamW, LambdaLR)
    score_sums: torch.Tensor  # (K,)
    cfg: object  # GRPOConfig


def add_variants(run, K: int) -> Variants:
    """Give ``run.policy`` (a LoRA run, ``cfg.lora`` set) K adapters of the same settings, each with its own
    AdamW and learning-rate schedule (the first is the run's own, ``default``)."""
    from grpo_kit.loop.train import lr_lambda

    policy, cfg = run.policy, run.cfg
    names = ["default"] + [f"variant{k}" for k in range(1, K)]
    for name in names[1:]:
        policy.add_adapter(name, policy.peft_config["default"])  # A random (torch's generator), B zero
    optimizers = {}
    for name in names:
        params = [p for n, p in policy.named_parameters() if f".{name}." in n]
        opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        optimizers[name] = (opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg)))
    return Variants(names, optimizers, torch.zeros(K),
                    cfg.replace(num_generations=cfg.num_generations // K, beta=0.0, log_kl=False))  # G/K rows each


def activate(policy, name: str) -> None:
    """Switch the adapter that runs (and trains) to ``name``."""
    policy.set_adapter(name)
    for n, p in policy.named_parameters():
        p.requires_grad_(f".{name}." in n)


def population_step(run, variants: Variants, tau: float, reset_every: int, sigma: float) -> dict:
    """One step: P prompts; each of the K variants samples G / K completions of every prompt; rewards (P, G);
    advantages (``cfg.scale_rewards``) over the whole group; each variant updated on its samples at K w_k times
    its scheduled learning rate; every ``reset_every`` steps the worst variant becomes a perturbed copy of the best."""
    from grpo_kit.core.advantages import compute_advantages
    from grpo_kit.loop.dynamic import collect_groups, draw_items
    from grpo_kit.loop.step import train_step

    cfg, policy, names = run.cfg, run.policy, variants.names
    K = len(names)
    P, G = cfg.num_prompts, cfg.num_generations
    items = draw_items(run, run.train_items, P)  # the stages of grpo_step: the same P prompts for every variant
    parts = []
    for name in names:
        activate(policy, name)
        parts.append(collect_groups(run, variants.cfg, items, run.reward_funcs))  # G/K completions per prompt
    rewards = torch.cat([b.rewards for b in parts], dim=1)  # (P, G) columns grouped by variant, as owners() lays out
    adv = compute_advantages(rewards, cfg.scale_rewards)  # (P, G)
    scores = variant_scores(group_advantages(rewards), owners(G, K), K)  # (K,)
    weights = variant_weights(scores, tau)  # (K,)
    variants.score_sums += scores
    lrs = []
    for k, (name, part) in enumerate(zip(names, parts)):
        activate(policy, name)
        opt, sched = variants.optimizers[name]
        for group in opt.param_groups:  # this update only: the scheduler sets the next unweighted rate
            group["lr"] *= K * weights[k].item()
        cols = slice(k * (G // K), (k + 1) * (G // K))
        lrs.append(train_step(policy, None, opt, part.rollouts, adv[:, cols], variants.cfg, sched)["learning_rate"])
    run.step += 1
    out = {"step": run.step, "reward": rewards.mean().item(), "weights": weights.tolist(), "scores": scores.tolist(),
           "learning_rates": lrs}
    if reset_every and run.step % reset_every == 0 and run.step < cfg.steps:  # the last period picks the leader
        worst, best = reset_pair(variants.score_sums)
        if worst != best:
            copy_variant(policy, names[best], names[worst], sigma, torch.Generator().manual_seed(cfg.seed + run.step))
            variants.optimizers[names[worst]][0].state.clear()  # fresh AdamW moments for the new variant
            out["reset"] = [names[worst], names[best]]
        variants.score_sums.zero_()
    return out


def copy_variant(policy, src: str, dst: str, sigma: float, generator: torch.Generator) -> None:
    """Adapter ``dst`` := ``perturbed_copy`` of adapter ``src`` (tensor by tensor, in place)."""
    params = dict(policy.named_parameters())
    source = {n: p.detach() for n, p in params.items() if f".{src}." in n}
    with torch.no_grad():
        for n, w in perturbed_copy(source, sigma, generator).items():
            params[n.replace(f".{src}.", f".{dst}.")].copy_(w)


def leader(variants: Variants) -> str:
    """The variant with the highest score summed since the last reset (chosen without the held-out set)."""
    return variants.names[int(torch.argmax(variants.score_sums))]
