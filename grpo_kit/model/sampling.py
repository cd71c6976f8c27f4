"""Batched group sampling: P prompts x G completions in one left-padded batch.

Row ``b = p * G + g`` holds completion ``g`` of prompt ``p``, so any (B,) tensor reshapes to
(P, G) with ``.view(P, G)``. Generation is a plain loop over a key-value cache that works for
any Hugging Face causal LM; sampling draws from a ``torch.Generator`` whose state is
checkpointed, which is what makes resumed runs exact. The generator must live on the model's
device (``torch.multinomial`` draws on the device of the probabilities).

Sampling runs under whatever autocast the caller set (``train.grpo_step`` uses the run's, the
one scoring uses: see the dtype policy in ``step.py``); the sampling distribution is the
float32 softmax of the last position's logits over the temperature (narrowed by the sampling
controls when a run sets them: ``truncation.py``), and ``Rollouts.sampling_logp`` keeps the
log-prob of each sampled token under it.

The completion mask is 1 up to and including the first EOS and 0 after it; a row that never
emits EOS within ``max_new_tokens`` is *truncated* (``is_truncated``).
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch

from grpo_kit.model.truncation import (
    check_sampling_controls,
    keep_mask,
    penalize_repeats,
    truncated_mass,
)


@dataclass(frozen=True)
class SamplingControls:
    """``top_k`` (0 off), ``top_p`` (1.0 off), ``min_p`` (0 off), ``repetition_penalty`` (1.0 off): see
    truncation.py. A value out of its range is a ValueError (GRPOConfig's rule for the field)."""
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        check_sampling_controls(self.top_k, self.top_p, self.min_p, self.repetition_penalty)

    @property
    def active(self) -> bool:
        return bool(self.top_k) or self.top_p < 1.0 or self.min_p > 0.0 or self.repetition_penalty != 1.0


@dataclass
class Rollouts:
    prompt_ids: torch.Tensor       # (B, Tp) left-padded
    prompt_mask: torch.Tensor      # (B, Tp) 1 on real prompt tokens
    completion_ids: torch.Tensor   # (B, Tc) pad after EOS
    completion_mask: torch.Tensor  # (B, Tc) 1 up to and including the first EOS
    is_truncated: torch.Tensor     # (B,) no EOS within max_new_tokens
    prompts: list[str]             # (B,) prompt text of each row
    completions: list[str]         # (B,) decoded completion text, special tokens removed
    num_generations: int           # G
    sampling_logp: torch.Tensor | None = None  # (B, Tc) float32 log-prob of each token when it was sampled
    truncated_mass: torch.Tensor | None = None  # (B, Tc) with sampling controls: mass the sampler could not draw

    @property
    def num_prompts(self) -> int:
        return len(self.prompts) // self.num_generations

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(-1)  # (B,)


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: the first real token of each row is position 0."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it (all ones if no EOS)."""
    is_eos = completion_ids == eos_id  # (B, Tc)
    eos_before = is_eos.long().cumsum(-1) - is_eos.long()  # (B, Tc) number of EOS strictly before t
    return (eos_before == 0).long()  # (B, Tc)


def row_temperatures(temperature, P: int, G: int, device) -> torch.Tensor:
    """Per-row temperatures (B, 1): one float for all, or a list cycled within each group."""
    temps = [float(temperature)] * G if isinstance(temperature, (int, float)) else \
        [float(temperature[g % len(temperature)]) for g in range(G)]
    return torch.tensor(temps * P, device=device).unsqueeze(-1)  # (B, 1)


def cache_argument(model) -> str:
    """The forward argument that takes the key-value cache (``cache`` from transformers 5.2x on); a peft
    model (LoRA) passes it on to the transformers model it wraps, whose signature decides."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_argument_of(type(inner))


@functools.cache
def _cache_argument_of(cls) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def repeated_groups(x: torch.Tensor, group_size: int) -> bool:
    """True when the rows of ``x`` (B, ...) come in runs of ``group_size`` identical rows."""
    B = x.shape[0]
    if group_size <= 1 or B % group_size:
        return False
    first = x[::group_size].repeat_interleave(group_size, dim=0)  # (B, ...) each group's first row
    return torch.equal(first, x)


def prefill(model, prompt_ids, prompt_mask, group_size: int = 1, **kwargs):
    """Forward the prompts into a fresh key-value cache -> (model output, cache keyword).

    When rows come in groups of ``group_size`` identical prompts (``sample_groups`` lays them
    out so), each distinct prompt is run once and the cache and logits are repeated G times:
    the prompt costs P rows instead of B = P*G. Without grad the result matches running all B
    rows (up to float rounding of a smaller matrix product); with grad, the gradient of the
    shared prompt activations is the sum over the group, as it is for B separate rows.
    """
    cache = {cache_argument(model): new_cache(model)}  # filled in place by each forward
    share = repeated_groups(prompt_ids, group_size) and repeated_groups(prompt_mask, group_size)
    ids, mask = (prompt_ids[::group_size], prompt_mask[::group_size]) if share else (prompt_ids, prompt_mask)
    mask = mask.long()
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=True,
                **cache, **kwargs)  # logits (P or B, Tp or kept, V)
    if share:
        next(iter(cache.values())).batch_repeat_interleave(group_size)
        out.logits = out.logits.repeat_interleave(group_size, dim=0)  # (B, ., V)
    return out, cache


@torch.no_grad()
def generate(model, prompt_ids, prompt_mask, max_new_tokens: int, eos_id: int, pad_id: int,
             temperature=1.0, generator: torch.Generator | None = None, group_size: int = 1,
             return_logp: bool = False, controls: SamplingControls | None = None):
    """Sample continuations; ``temperature`` is a float or a (B, 1) tensor, 0 means greedy.

    ``group_size``: rows come in runs of this many identical prompts (see :func:`prefill`);
    the prompts are then encoded once per group.

    Rows that have emitted EOS leave the batch: each later forward runs only the rows still
    decoding. The random draws do not change: every step still draws one token for each of the B
    rows (an ended row's draw is replaced by padding), so a seed gives the same completions as
    forwarding every row to the end. Rows are independent in the forward; a smaller matrix product
    can round differently (on the tiny model on CPU: the same tokens in 24 seeded batches, and
    ``sampling_logp`` within 2.4e-6), so a token can only change when its draw falls within
    rounding of a boundary between two tokens.

    ``controls`` (:class:`SamplingControls`; ``truncation.py`` says what each does and which
    distribution the loss scores under) narrow the distribution each token is drawn from; with
    none active the draws are exactly those of plain temperature sampling. A repetition penalty
    also changes greedy rows' argmax (as in Hugging Face ``generate`` and vLLM); top-k, top-p and
    min-p always keep the most likely token, so they leave greedy rows alone.

    Returns completion_ids (B, Tc) and completion_mask (B, Tc), Tc <= max_new_tokens; with
    ``return_logp`` also (B, Tc) float32 log-probs of the sampled tokens under the sampling
    distribution (log-softmax of logits / temperature, after the controls; 0 on greedy rows), and
    with active controls (B, Tc) the truncated mass of each token (``truncation.truncated_mass``).
    """
    B = prompt_ids.shape[0]
    device = prompt_ids.device
    temps = torch.as_tensor(temperature, dtype=torch.float32, device=device).expand(B, 1)  # (B, 1)
    greedy = temps <= 0  # (B, 1)
    attn = prompt_mask.long()  # (B, Tp)
    pos = position_ids_from_mask(attn)  # (B, Tp)
    out, cache = prefill(model, prompt_ids, attn, group_size, logits_to_keep=1)
    logits = out.logits[:, -1, :].float()  # (B, V) next-token logits of every row
    live = torch.arange(B, device=device)  # (A,) rows the cache holds: those still decoding
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
    tokens, logps, cut = [], [], []
    active = controls is not None and controls.active
    penalty = controls.repetition_penalty if active else 1.0
    if penalty != 1.0:  # (B, V) tokens already in each row: its prompt, then its own
        seen = torch.zeros(B, logits.shape[-1], device=device).scatter_add_(1, prompt_ids, attn.float()) > 0
    for t in range(max_new_tokens):
        raw = penalize_repeats(logits, seen, penalty) if penalty != 1.0 else logits  # (B, V) greedy rows too
        tok = raw.argmax(-1)  # (B,)
        if not bool(greedy.all()):  # greedy decoding draws no random numbers
            z = raw / temps.clamp(min=1e-6)  # (B, V)
            if active:
                keep = keep_mask(z, controls.top_k, controls.top_p, controls.min_p)  # (B, V)
                z = z.masked_fill(~keep, float("-inf"))
                scored = logits / temps.clamp(min=1e-6)  # (B, V) the distribution the loss scores the token under
                cut.append(torch.where(greedy.squeeze(-1), torch.zeros(B, device=device), truncated_mass(scored, keep)))
            probs = torch.softmax(z, dim=-1)  # (B, V)
            sampled = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
            tok = torch.where(greedy.squeeze(-1), tok, sampled)  # (B,)
            if return_logp:
                lp = torch.log_softmax(z, -1).gather(-1, tok[:, None]).squeeze(-1)  # (B,)
                logps.append(torch.where(greedy.squeeze(-1), torch.zeros_like(lp), lp))
        elif return_logp:
            logps.append(torch.zeros(B, device=device))
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        tokens.append(tok)
        if penalty != 1.0:
            seen[torch.arange(B, device=device), tok] |= ~done
        done = done | (tok == eos_id)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)  # (B, Tp+t+1)
        pos = pos[:, -1:] + 1  # (B, 1)
        still = ~done[live]  # (A,) which cached rows keep decoding
        if not bool(still.all()):  # rows that just ended leave the batch (and the cache)
            next(iter(cache.values())).batch_select_indices(still.nonzero().squeeze(-1))
            live = live[still]  # (A',)
        out = model(input_ids=tok[live, None], attention_mask=attn[live], position_ids=pos[live], use_cache=True,
                    **cache)  # logits (A, 1, V)
        logits = logits.index_copy(0, live, out.logits[:, -1, :].float())  # (B, V) ended rows keep stale logits
    completion_ids = torch.stack(tokens, dim=1)  # (B, Tc)
    completion_mask = completion_mask_from_ids(completion_ids, eos_id)  # (B, Tc)
    if return_logp and active:
        return (completion_ids, completion_mask, torch.stack(logps, dim=1) * completion_mask,  # (B, Tc) each
                torch.stack(cut, dim=1) * completion_mask if cut else torch.zeros_like(completion_mask, dtype=torch.float32))
    if return_logp:
        return completion_ids, completion_mask, torch.stack(logps, dim=1) * completion_mask  # (B, Tc)
    return completion_ids, completion_mask


def render_prompt(tokenizer, prompt) -> str:
    """A prompt as the text the model continues: a string as is; a conversation (a list of
    ``{"role", "content"}`` messages, TRL's conversational format) through the tokenizer's chat
    template with the generation prompt appended, as TRL renders it."""
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None) is None:
        from grpo_kit.errors import DataError

        raise DataError("conversational prompts (lists of {'role', 'content'} messages) need a tokenizer with a "
                        "chat template, and this one has none; set tokenizer.chat_template or give text prompts")
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def uses_chat_template(tokenizer, mode: str = "auto") -> bool:
    """Whether text prompts go through the tokenizer's chat template (``GRPOConfig.chat_template``):
    'auto' when the tokenizer has one (``tokenizer.chat_template``), 'on' always (a
    :class:`ConfigError` when it has none), 'off' never."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if mode == "on" and not has:
        from grpo_kit.errors import ConfigError

        raise ConfigError("GRPOConfig.chat_template='on': this tokenizer has no chat template "
                          "(tokenizer.chat_template is empty); use 'auto' or 'off' to send the prompt text as is, "
                          "or a model whose tokenizer ships a template (an instruct/chat model)")
    return mode == "on" or (mode == "auto" and has)


def chat_items(items: list[dict], tokenizer, mode: str = "auto") -> list[dict]:
    """``items`` with each text prompt made one user message, ``[{"role": "user", "content": text}]``,
    when :func:`uses_chat_template` says so; :func:`render_prompt` then renders it with the template
    and the generation prompt, and TRL's trainer does the same with such a dataset. Else unchanged."""
    if not uses_chat_template(tokenizer, mode):
        return items
    return [{**it, "prompt": [{"role": "user", "content": it["prompt"]}]} if isinstance(it["prompt"], str) else it
            for it in items]


def encode_prompts(tokenizer, prompts: list[str], device):
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)  # (B, Tp), (B, Tp)


def sample_groups(model, tokenizer, prompts: list[str], num_generations: int, max_new_tokens: int,
                  temperature=1.0, generator: torch.Generator | None = None,
                  controls: SamplingControls | None = None) -> Rollouts:
    """G completions for each of P prompts, in one batch of B = P * G rows (``controls``: see :func:`generate`)."""
    if num_generations < 1:
        raise ValueError(f"num_generations={num_generations}: need at least 1")
    device = next(model.parameters()).device
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"the sampling generator is on {generator.device} but the model on {device}: "
                         f"make it with torch.Generator({device.type!r})")
    P, G = len(prompts), num_generations
    rows = [p for p in prompts for _ in range(G)]  # (B,) prompt p repeated G times, contiguous
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)  # (P, Tp) each prompt once
    prompt_ids, prompt_mask = prompt_ids.repeat_interleave(G, 0), prompt_mask.repeat_interleave(G, 0)  # (B, Tp)
    temps = row_temperatures(temperature, P, G, device)  # (B, 1)
    was_training = model.training
    model.eval()
    out = generate(model, prompt_ids, prompt_mask, max_new_tokens, tokenizer.eos_token_id,
                   tokenizer.pad_token_id, temps, generator, group_size=G, return_logp=True, controls=controls)
    completion_ids, completion_mask, sampling_logp = out[:3]
    cut = out[3] if len(out) > 3 else None
    model.train(was_training)
    has_eos = ((completion_ids == tokenizer.eos_token_id) & completion_mask.bool()).any(-1)  # (B,)
    texts = tokenizer.batch_decode(completion_ids * completion_mask + tokenizer.pad_token_id * (1 - completion_mask),
                                   skip_special_tokens=True)
    return Rollouts(prompt_ids, prompt_mask, completion_ids, completion_mask, ~has_eos, rows, texts, G,
                    sampling_logp, cut)
