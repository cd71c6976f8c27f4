"""Evaluation: greedy accuracy on a split, sampled pass@k, and self-consistency (majority vote over k samples)."""
from __future__ import annotations

import torch

from grpo_kit.data.tasks import RESERVED_COLUMNS, check_columns, columns_of  # noqa: F401  (re-exported: their old home)
from grpo_kit.errors import DataError
from grpo_kit.model.sampling import SamplingControls, render_prompt, sample_groups
from grpo_kit.rewards.judges import exact_answer


def max_answer_tokens(items: list[dict]) -> int:
    """A completion budget for items: the longest reference completion plus EOS and slack."""
    longest = max(len(it.get("completion", it["answer"])) for it in items)
    return longest + 3


def _free_bytes(device) -> int | None:
    """Memory free for new tensors on ``device`` (CUDA: the driver's figure; CPU: available RAM)."""
    import os

    if torch.device(device).type == "cuda":
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def generation_bytes(model, rows: int, tokens: int) -> int:
    """Rough peak memory of generating ``rows`` sequences of ``tokens`` tokens at once: the key-value
    cache (2 x layers x kv heads x head size per token) plus two float32 copies of the logits (rows x V)."""
    c = model.config
    layers = getattr(c, "num_hidden_layers", None) or getattr(c, "n_layer", 12)
    hidden = getattr(c, "hidden_size", None) or getattr(c, "n_embd", 768)
    heads = getattr(c, "num_attention_heads", None) or getattr(c, "n_head", 12)
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    elt = next(model.parameters()).element_size()
    vocab = getattr(c, "vocab_size", 32000)
    kv = 2 * layers * kv_heads * head_dim * elt * rows * tokens
    return kv + 2 * 4 * rows * vocab + 4 * rows * tokens * hidden


def check_generation_memory(model, rows: int, tokens: int, what: str = "evaluation") -> None:
    """Refuse, with advice, a generation batch whose estimate exceeds 80% of the free memory."""
    need = generation_bytes(model, rows, tokens)
    free = _free_bytes(next(model.parameters()).device)
    if free is not None and need > 0.8 * free:
        fits = max(1, int(rows * 0.8 * free / need))
        raise DataError(f"{what}: generating {rows} sequences of {tokens} tokens at once needs about "
                        f"{need / 2**30:.1f} GiB, and {free / 2**30:.1f} GiB is free; lower the batch size "
                        f"(grpo-kit eval --batch-size {fits}, or batch_size={fits})")


@torch.no_grad()
def greedy_completions(model, tokenizer, items: list[dict], max_new_tokens: int | None = None,
                       batch_size: int = 512) -> list[str]:
    out = []
    budget = max_new_tokens or max_answer_tokens(items)
    batch_size = max(1, batch_size)
    texts = [render_prompt(tokenizer, it["prompt"]) for it in items]  # conversations through the chat template
    longest = max(len(t) for t in texts) + 1 if items else 1  # characters bound tokens from above
    check_generation_memory(model, min(batch_size, len(items)), longest + budget)
    for i in range(0, len(items), batch_size):
        r = sample_groups(model, tokenizer, texts[i:i + batch_size], 1, budget, temperature=0.0)
        out.extend(r.completions)
    return out


def greedy_accuracy(model, tokenizer, items: list[dict], max_new_tokens: int | None = None,
                    return_completions: bool = False, batch_size: int = 512):
    """Fraction of items whose greedy completion is judged correct by ``exact_answer``."""
    completions = greedy_completions(model, tokenizer, items, max_new_tokens, batch_size)
    scores = exact_answer([it["prompt"] for it in items], completions, **columns_of(items))
    acc = sum(scores) / len(scores)
    return (acc, completions, scores) if return_completions else acc


def _sampled_groups(model, tokenizer, items: list[dict], k: int, temperature: float, seed: int,
                    max_new_tokens: int | None, batch_size: int, what: str,
                    controls: SamplingControls | None = None):
    """Yield ``(chunk, prompts, completions)``: k sampled completions per item of ``chunk``, item by
    item (k * len(chunk) of each), drawn at ``temperature`` with the sampling ``controls`` (top-k,
    top-p, min-p, repetition penalty: ``model/truncation.py``). At most ``batch_size`` completions
    are generated at once (a large k is split into several passes over one item), so memory does
    not grow with k."""
    gen = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    budget = max_new_tokens or max_answer_tokens(items)
    batch_size = max(1, batch_size)
    longest = max(len(it["prompt"]) for it in items) + 1 if items else 1
    check_generation_memory(model, min(batch_size, k * len(items)), longest + budget, what)
    per = max(1, batch_size // k)  # items per pass when k fits a batch
    for i in range(0, len(items), per):
        chunk = items[i:i + per]
        if k <= batch_size:
            r = sample_groups(model, tokenizer, [it["prompt"] for it in chunk], k, budget, temperature, gen, controls)
            yield chunk, r.prompts, r.completions
        else:  # one item, k samples in passes of batch_size
            prompts, completions = [], []
            for done in range(0, k, batch_size):
                r = sample_groups(model, tokenizer, [chunk[0]["prompt"]], min(batch_size, k - done), budget,
                                  temperature, gen, controls)
                prompts += r.prompts
                completions += r.completions
            yield chunk, prompts, completions


@torch.no_grad()
def pass_at_k_eval(model, tokenizer, items: list[dict], k: int, temperature: float = 1.0,
                   seed: int = 0, max_new_tokens: int | None = None, batch_size: int = 512,
                   controls: SamplingControls | None = None) -> dict:
    """Sample k completions per item (at ``temperature``, with the sampling ``controls``); mean
    unbiased pass@1 and pass@k (Chen et al. 2021).

    At most ``batch_size`` completions are generated at once (a large k is split into several
    passes over one item), so memory does not grow with k.
    """
    from grpo_kit.core.metrics import pass_at_k

    p1 = pk = 0.0
    for chunk, prompts, completions in _sampled_groups(model, tokenizer, items, k, temperature, seed,
                                                       max_new_tokens, batch_size, f"pass@{k}", controls):
        scores = exact_answer(prompts, completions, **columns_of(chunk, repeat=k))
        for j in range(len(chunk)):
            c = int(sum(scores[j * k:(j + 1) * k]))
            p1 += pass_at_k(k, c, 1)
            pk += pass_at_k(k, c, k)
    return {"pass@1": p1 / len(items), f"pass@{k}": pk / len(items), "samples": k}


def majority_vote(answers: list) -> int | None:
    """Self-consistency's vote (Wang et al. 2023): the index of the sample whose answer the most
    samples state, or None when no sample states one (``None`` entries do not vote).

    Ties go to the answer that appeared first among the samples, and the index returned is
    that answer's first sample: ``[7, 5, 5, 7]`` -> 0 (7 and 5 have two votes each; 7 came first).
    Answers are compared with ``==`` (the parsed numbers of :func:`judges.stated_answers`).
    """
    counts: dict = {}
    first: dict = {}
    for i, a in enumerate(answers):
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
            first.setdefault(a, i)
    if not counts:
        return None
    top = max(counts.values())
    return min(first[a] for a, c in counts.items() if c == top)


@torch.no_grad()
def self_consistency_eval(model, tokenizer, items: list[dict], k: int, temperature: float = 1.0,
                          seed: int = 0, max_new_tokens: int | None = None, batch_size: int = 512,
                          controls: SamplingControls | None = None) -> dict:
    """Sample k completions per item (at ``temperature``, with the sampling ``controls``), read each one's answer with the task's extractor
    (:func:`judges.stated_answers`), take the :func:`majority_vote` and score the voted
    completion with ``exact_answer`` (the judge of greedy accuracy). An item where no sample
    states an answer counts as wrong. Returns ``{"self_consistency@k": accuracy, "samples": k}``."""
    from grpo_kit.rewards.judges import stated_answers

    right = 0.0
    for chunk, prompts, completions in _sampled_groups(model, tokenizer, items, k, temperature, seed,
                                                       max_new_tokens, batch_size, f"self-consistency@{k}",
                                                       controls):
        cols = columns_of(chunk, repeat=k)
        answers = stated_answers(completions, cols.get("reverse_digits"), cols.get("scratchpad"))
        for j, it in enumerate(chunk):
            vote = majority_vote(answers[j * k:(j + 1) * k])
            if vote is not None:
                right += exact_answer([prompts[j * k + vote]], [completions[j * k + vote]],
                                      **columns_of([it]))[0]
    return {f"self_consistency@{k}": right / len(items), "samples": k}


def model_context(model) -> int | None:
    """Positions the model was built for (``max_position_embeddings`` or ``n_positions``), if it says."""
    c = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(c, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def check_prompts(model, tokenizer, items: list[dict], max_completion_length: int, truncate: bool = False,
                  where: str = "items") -> list[dict]:
    """Prompts checked against the model's context and the tokenizer's vocabulary.

    A prompt whose tokens plus ``max_completion_length`` do not fit the context is a
    :class:`DataError` naming it, or with ``truncate`` keeps its last tokens (a warning counts
    them). Characters the tokenizer maps to its unknown token are counted and warned about once.
    Returns the items (copies of the truncated ones).
    """
    import logging

    from grpo_kit.data.runfolder import quote

    log = logging.getLogger("grpo_kit.eval.inference")
    from grpo_kit.model.sampling import render_prompt

    if not items:
        return items
    texts = [render_prompt(tokenizer, it["prompt"]) for it in items]  # conversations through the chat template
    ids = tokenizer(texts)["input_ids"]
    context = model_context(model)
    out = list(items)
    if context is not None:
        room = context - max_completion_length
        if room < 2:
            raise DataError(f"max_completion_length={max_completion_length} leaves no room for a prompt in the "
                            f"model's context of {context} positions; lower max_completion_length")
        long = [i for i, x in enumerate(ids) if len(x) > room]
        if long and not truncate:
            i = max(long, key=lambda j: len(ids[j]))
            raise DataError(f"{where}: {len(long)} prompt(s) do not fit the model's context: prompt tokens + "
                            f"max_completion_length ({max_completion_length}) must be <= {context}, and the longest "
                            f"has {len(ids[i])} tokens (item {i + 1}: {quote(texts[i], 80)}); shorten them, "
                            f"lower max_completion_length, or set truncate_prompts: true to keep their last tokens")
        chats = [i for i in long if not isinstance(items[i]["prompt"], str)]
        if chats:
            raise DataError(f"{where}: item {chats[0] + 1} is a conversation too long for the model's context "
                            f"({len(ids[chats[0]])} tokens); truncate_prompts cuts text prompts only: shorten it")
        specials = set(tokenizer.all_special_ids)
        for i in long:
            body = [t for t in ids[i] if t not in specials]
            keep = room - (len(ids[i]) - len(body))  # room left after BOS and other added tokens
            text = tokenizer.decode(body[-keep:], skip_special_tokens=True)
            while len(tokenizer(text)["input_ids"]) > room and text:  # BPE may re-merge differently
                text = text[1:]
            out[i] = {**items[i], "prompt": text}
        if long:
            log.warning("%s: %d prompt(s) longer than the context allows were cut to their last tokens "
                        "(truncate_prompts)", where, len(long))
    unk = tokenizer.unk_token_id
    if unk is not None:
        flagged = [i for i, x in enumerate(ids) if unk in x]
        if flagged:
            chars = sorted({c for i in flagged[:50] for c in set(texts[i])
                            if unk in tokenizer(c, add_special_tokens=False)["input_ids"]})
            log.warning("%s: %d of %d prompts hold characters the tokenizer cannot represent (%s); the model "
                        "sees them as %s", where, len(flagged), len(items),
                        quote("".join(chars[:20]), 80), tokenizer.unk_token)
    return out
