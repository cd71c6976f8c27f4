"""Evaluation: greedy accuracy on a split, and sampled pass@k."""
from __future__ import annotations

import torch

from .judges import exact_answer
from .sampling import sample_groups


def columns_of(items: list[dict], repeat: int = 1) -> dict[str, list]:
    """Extra columns of items (everything but ``prompt``), each value repeated ``repeat`` times."""
    keys = [k for k in items[0] if k != "prompt"]
    return {k: [it.get(k) for it in items for _ in range(repeat)] for k in keys}


def max_answer_tokens(items: list[dict]) -> int:
    """A completion budget for items: the longest reference completion plus EOS and slack."""
    longest = max(len(it.get("completion", it["answer"])) for it in items)
    return longest + 3


@torch.no_grad()
def greedy_completions(model, tokenizer, items: list[dict], max_new_tokens: int | None = None,
                       batch_size: int = 512) -> list[str]:
    out = []
    budget = max_new_tokens or max_answer_tokens(items)
    for i in range(0, len(items), batch_size):
        chunk = items[i:i + batch_size]
        r = sample_groups(model, tokenizer, [it["prompt"] for it in chunk], 1, budget, temperature=0.0)
        out.extend(r.completions)
    return out


def greedy_accuracy(model, tokenizer, items: list[dict], max_new_tokens: int | None = None,
                    return_completions: bool = False):
    """Fraction of items whose greedy completion is judged correct by ``exact_answer``."""
    completions = greedy_completions(model, tokenizer, items, max_new_tokens)
    scores = exact_answer([it["prompt"] for it in items], completions, **columns_of(items))
    acc = sum(scores) / len(scores)
    return (acc, completions, scores) if return_completions else acc


@torch.no_grad()
def pass_at_k_eval(model, tokenizer, items: list[dict], k: int, temperature: float = 1.0,
                   seed: int = 0, max_new_tokens: int | None = None) -> dict:
    """Sample k completions per item; mean unbiased pass@1 and pass@k (Chen et al. 2021)."""
    from .metrics import pass_at_k

    gen = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    budget = max_new_tokens or max_answer_tokens(items)
    p1 = pk = 0.0
    for i in range(0, len(items), max(1, 512 // k)):
        chunk = items[i:i + max(1, 512 // k)]
        r = sample_groups(model, tokenizer, [it["prompt"] for it in chunk], k, budget, temperature, gen)
        scores = exact_answer(r.prompts, r.completions, **columns_of(chunk, repeat=k))
        for j in range(len(chunk)):
            c = int(sum(scores[j * k:(j + 1) * k]))
            p1 += pass_at_k(k, c, 1)
            pk += pass_at_k(k, c, k)
    return {"pass@1": p1 / len(items), f"pass@{k}": pk / len(items), "samples": k}
