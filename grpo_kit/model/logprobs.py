"""Per-token log-probabilities and entropies of completions under a causal LM.

Three ways to run the forward, the same numbers up to float rounding (``completion_logprobs``):
the plain one (every row whole, left-padded, as TRL does); the shared-cache one (each distinct
prompt encoded once into a key-value cache its rows read, then the completions padded to the
longest); the packed one (:func:`pack_rows`: the distinct prompts and every completion's real
tokens in one row with a block attention mask, for batches of at most ``pack_max_tokens``).

dtype policy (see ``step.py``): the model's logits arrive in the forward's dtype (bf16 under
autocast) and stay in it; the temperature is applied in float32 *inside* the log-softmax, a
chunk of rows at a time, so no full (B, Tc, V) float32 copy is made, in the forward or in the
backward (:class:`_ChunkedLogProb` recomputes the softmax chunk by chunk in backward).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_kit.model.sampling import position_ids_from_mask, prefill

LOGSOFTMAX_CHUNK = 2**22  # float32 elements (16 MiB) of log-softmax held at once for low-precision logits
ENTROPY_CHUNK = LOGSOFTMAX_CHUNK  # the same bound for entropy_from_logits


def _rows_per_chunk(logits: torch.Tensor, chunk_elements: int) -> int:
    B, T, V = logits.shape
    return max(1, chunk_elements // max(T * V, 1))


def _as_row_temps(temperature, B: int, device) -> torch.Tensor:
    """Temperature as a float32 (B, 1, 1) tensor (a float, (B, 1) or (B, 1, 1) in)."""
    t = torch.as_tensor(temperature, dtype=torch.float32, device=device)
    return t.reshape(-1, 1, 1).expand(B, 1, 1) if t.numel() in (1, B) else t  # (B, 1, 1)


class _ChunkedLogProb(torch.autograd.Function):
    """log softmax(logits / T)[target] for low-precision logits (B, T, V) -> float32 (B, T).

    Forward and backward each hold one chunk of rows in float32; the graph keeps only the
    low-precision logits (which the caller holds anyway) and the (B, T) log-sum-exp.
    Gradient: d logp / d logits = (onehot(target) - softmax(logits / T)) / T.
    """

    @staticmethod
    def forward(ctx, logits, targets, temps, rows):
        out, lse = [], []
        for l, t, tt in zip(logits.split(rows), targets.split(rows), temps.split(rows)):
            z = l.float() / tt  # (b, T, V) float32, one chunk
            s = torch.logsumexp(z, -1)  # (b, T)
            out.append(z.gather(-1, t.unsqueeze(-1)).squeeze(-1) - s)  # (b, T)
            lse.append(s)
        ctx.save_for_backward(logits, targets, temps, torch.cat(lse))
        ctx.rows = rows
        return torch.cat(out)  # (B, T)

    @staticmethod
    def backward(ctx, grad_out):
        logits, targets, temps, lse = ctx.saved_tensors
        grads = []
        for l, t, tt, s, g in zip(logits.split(ctx.rows), targets.split(ctx.rows), temps.split(ctx.rows),
                                  lse.split(ctx.rows), grad_out.split(ctx.rows)):
            p = torch.exp(l.float() / tt - s.unsqueeze(-1))  # (b, T, V) softmax, float32, one chunk
            grad = -p
            grad.scatter_add_(-1, t.unsqueeze(-1), torch.ones_like(t, dtype=grad.dtype).unsqueeze(-1))
            grads.append((grad * (g.unsqueeze(-1) / tt)).to(logits.dtype))  # (b, T, V)
        return torch.cat(grads), None, None, None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature=1.0,
                   chunk_elements: int = LOGSOFTMAX_CHUNK) -> torch.Tensor:
    """log p(target) per position under softmax(logits / temperature): logits (B, T, V),
    targets (B, T), temperature a float or (B, 1) / (B, 1, 1) -> (B, T) float32.

    float32 logits: gather minus logsumexp (no log-softmax copy; one scaled copy when T != 1).
    Lower precision (bf16): :class:`_ChunkedLogProb`, float32 one chunk of rows at a time.
    """
    plain_t = not isinstance(temperature, torch.Tensor) and temperature == 1.0
    if logits.dtype in (torch.float32, torch.float64):  # float64: the TRL parity tests
        z = logits if plain_t else logits / _as_row_temps(temperature, logits.shape[0], logits.device)  # (B, T, V)
        picked = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return picked - torch.logsumexp(z, dim=-1)  # (B, T)
    temps = _as_row_temps(temperature, logits.shape[0], logits.device)  # (B, 1, 1) float32
    return _ChunkedLogProb.apply(logits, targets, temps, _rows_per_chunk(logits, chunk_elements))  # (B, T)


def entropy_from_logits(logits: torch.Tensor, temperature=1.0, chunk_elements: int = ENTROPY_CHUNK) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) per position: (B, T, V) -> (B, T) float32.

    Rows are taken a chunk at a time, as many as fit in ``chunk_elements`` float32 values, so
    the float32 copy stays small for a big vocabulary while a tiny model does one batched call
    (a Python loop over rows used to cost a tenth of the tiny model's step). With gradients
    (an entropy bonus) autograd keeps each chunk's float32 log-softmax for backward.
    """
    plain_t = not isinstance(temperature, torch.Tensor) and temperature == 1.0
    temps = _as_row_temps(temperature, logits.shape[0], logits.device)  # (B, 1, 1)
    rows = _rows_per_chunk(logits, chunk_elements)
    out = []
    for l, tt in zip(logits.split(rows), temps.split(rows)):  # (b, T, V) with b <= rows
        x = l if l.dtype == torch.float64 else l.float()  # float64 stays (TRL parity tests)
        logp = torch.log_softmax(x if plain_t else x / tt, -1)  # (b, T, V)
        out.append(-(logp.exp() * logp).sum(-1))  # (b, T)
    return torch.cat(out)  # (B, T)


def activation_checkpointing(model) -> bool:
    """Whether the model recomputes activations in backward (transformers 5 renamed the flag); a peft
    model (LoRA) answers for the transformers model it wraps."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name) or name in getattr(model, "__dict__", {}):
            return bool(getattr(model, name))
    return False


def distinct_rows(*cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of ``cols`` (each (B, ...), compared side by side), in order of first
    appearance: ``keep`` (U,) indexes the first row of each, ``inverse`` (B,) maps every row to its
    distinct row, so ``x[keep][inverse]`` equals ``x`` for each column ``x``."""
    key = torch.cat([c.reshape(c.shape[0], -1).long() for c in cols], dim=1)  # (B, K)
    B = key.shape[0]
    _, inv = torch.unique(key, dim=0, return_inverse=True)  # (B,) sorted-order ids 0..U-1
    rows = torch.arange(B, device=key.device)  # (B,)
    first = torch.full((int(inv.max()) + 1,), B, dtype=torch.long, device=key.device)
    first = first.scatter_reduce(0, inv, rows, "amin")  # (U,) first row of each distinct row
    order = first.argsort()  # (U,) distinct rows by first appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=key.device)  # (U,) sorted id -> appearance id
    return first[order], rank[inv]  # (U,), (B,)


@dataclass
class Packing:
    """A batch laid out as one row without padding (:func:`pack_rows`): every distinct prompt's
    tokens, then each row's completion tokens that are inputs (all but the last real one)."""
    input_ids: torch.Tensor     # (1, N) N = distinct prompt tokens + sum over rows of (length - 1)
    position_ids: torch.Tensor  # (1, N) a prompt from 0; a completion goes on from its prompt's length
    attend: torch.Tensor        # (1, 1, N, N) bool: token i sees token j
    keep: torch.Tensor          # (K,) positions whose logits are needed: each prompt's last token, each input
    source: torch.Tensor        # (B, Tc) index into ``keep`` of the logits that predict completion token t
    valid: torch.Tensor         # (B, Tc) bool: the completion mask (0 where a row has ended)


def pack_rows(prompt_ids, prompt_mask, completion_ids, completion_mask, max_tokens: int) -> Packing | None:
    """The packed layout of a batch, or None when it would have more than ``max_tokens`` tokens
    (the attention mask is N x N) or the completion mask is not 1s then 0s.

    Token i sees token j when both belong to the same prompt and either j is in i's own segment (the
    prompt, or i's completion) at or before i, or j is in the prompt and i in a completion. Each completion then sees exactly what it sees in its own padded row
    (its prompt and its own prefix, at the same positions), so the log-probs and gradients are those
    of separate rows, and every distinct prompt is encoded once.
    """
    B, Tc = completion_ids.shape
    dev = completion_ids.device
    keep_p, inv = distinct_rows(prompt_ids, prompt_mask)  # (P,) one row per distinct prompt, (B,) its prompt
    pm = prompt_mask[keep_p].bool()  # (P, Tp)
    plen = pm.sum(-1)  # (P,) real prompt tokens
    clen = completion_mask.sum(-1)  # (B,) completion tokens up to and including EOS
    t = torch.arange(Tc, device=dev)  # (Tc,)
    valid = t[None, :] < clen[:, None]  # (B, Tc)
    if not torch.equal(valid, completion_mask.bool()):
        return None  # not 1s then 0s: the packed layout would misplace tokens
    nin = (clen - 1).clamp(min=0)  # (B,) completion tokens fed as inputs (the last real one predicts nothing)
    Np, Nc = int(plen.sum()), int(nin.sum())
    N = Np + Nc
    if N > max_tokens:
        return None
    fed = t[None, :] < nin[:, None]  # (B, Tc) input slots of each row
    ids = torch.cat([prompt_ids[keep_p][pm], completion_ids[fed]])  # (N,)
    rows = torch.arange(B, device=dev)[:, None].expand(B, Tc)[fed]  # (Nc,) row of each completion input
    offset = t[None, :].expand(B, Tc)[fed]  # (Nc,) its place in the completion
    pos = torch.cat([(pm.long().cumsum(-1) - 1)[pm], plen[inv][rows] + offset])  # (N,)
    prompt_of = torch.cat([torch.repeat_interleave(torch.arange(plen.numel(), device=dev), plen), inv[rows]])  # (N,)
    row_of = torch.cat([torch.full((Np,), -1, device=dev), rows])  # (N,) -1 on prompt tokens
    idx = torch.arange(N, device=dev)  # (N,)
    before = idx[None, :] <= idx[:, None]  # (N, N) j at or before i
    same_segment = row_of[:, None] == row_of[None, :]  # (N, N) both in the prompts, or both in one completion
    completion_sees_prompt = (row_of != -1)[:, None] & (row_of == -1)[None, :]  # (N, N)
    attend = (prompt_of[:, None] == prompt_of[None, :]) & ((same_segment & before) | completion_sees_prompt)  # (N, N)
    last = plen.cumsum(0) - 1  # (P,) packed index of each prompt's last token
    keep = torch.cat([last, Np + torch.arange(Nc, device=dev)])  # (K,) = (P + Nc,)
    first_in = plen.numel() + nin.cumsum(0) - nin  # (B,) index in keep of each row's first input
    source = torch.where(t[None, :] == 0, inv[:, None], first_in[:, None] + t[None, :] - 1)  # (B, Tc)
    source = torch.where(valid, source, 0)  # ended positions read any logits; they are masked out
    return Packing(ids[None], pos[None], attend[None, None], keep, source, valid)


def packed_logits(model, packing: Packing) -> torch.Tensor:
    """Logits (B, Tc, V) that predict each completion token, from one forward of the packed row;
    positions where a row has ended hold some other position's logits (mask them out)."""
    out = model(input_ids=packing.input_ids, attention_mask=packing.attend, position_ids=packing.position_ids,
                use_cache=False, logits_to_keep=packing.keep)  # logits (1, K, V)
    B, Tc = packing.source.shape
    return out.logits[0].index_select(0, packing.source.reshape(-1)).view(B, Tc, -1)  # (B, Tc, V)


def completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                      share_prompt: bool = False) -> torch.Tensor:
    """Logits that predict each completion token: (B, Tc, V), in the forward's dtype (bf16 under
    autocast), *not* divided by the temperature (:func:`token_logprobs` does that in float32).

    Only completion positions reach the vocabulary projection: the plain forward asks the model
    for the last Tc + 1 positions (``logits_to_keep``), the shared-prompt forward for the last
    prompt position and the completion positions.

    ``share_prompt``: each distinct prompt (a group's G rows share one) is encoded once into a
    key-value cache that its rows share; the forward and backward then cost P*Tp + B*Tc tokens
    instead of B*(Tp+Tc), and the gradient of a shared prompt activation is the sum over its
    rows, as for separate rows. The log-probs equal the plain forward's up to float rounding (a
    few 1e-6 on the tiny model). A model that cannot take a cache in training (gradient
    checkpointing), or a batch whose prompts are all different, gets the plain forward.
    """
    Tp, Tc = prompt_ids.shape[1], completion_ids.shape[1]
    attn = torch.cat([prompt_mask, completion_mask], dim=1).long()  # (B, Tp+Tc)
    pos = position_ids_from_mask(attn)  # (B, Tp+Tc)
    checkpointing = model.training and activation_checkpointing(model)
    if share_prompt and not checkpointing:
        keep, inv = distinct_rows(prompt_ids, prompt_mask)  # (P,) one row per distinct prompt, (B,)
        if keep.numel() < prompt_ids.shape[0]:
            first, cache = prefill(model, prompt_ids[keep], prompt_mask[keep], logits_to_keep=1)  # logits (P, 1, V)
            next(iter(cache.values())).batch_select_indices(inv)  # each row reads its prompt's keys and values
            first_logits = first.logits[inv]  # (B, 1, V)
            if Tc == 1:
                return first_logits
            out = model(input_ids=completion_ids[:, :-1], attention_mask=attn[:, :-1], position_ids=pos[:, Tp:-1],
                        use_cache=True, **cache)  # logits (B, Tc-1, V): the last completion token predicts nothing
            return torch.cat([first_logits, out.logits], dim=1)  # (B, Tc, V) t predicts token t
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, Tp+Tc)
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=pos, use_cache=False,
                logits_to_keep=Tc + 1)  # logits (B, Tc+1, V): positions Tp-1 .. Tp+Tc-1
    return out.logits[:, :-1, :]  # (B, Tc, V) position Tp-1+t predicts completion token t


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                        temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                        share_prompt: bool = False, dedupe: bool = False, pack_max_tokens: int = 0):
    """(B, Tc) float32 log-probs of the completion tokens under softmax(logits / temperature), and
    (B, Tc) entropies if asked (else None). ``temperature``: a float or (B, 1) / (B, 1, 1) tensor
    (the sampling temperature, as TRL does, so that log-probs are those of the distribution
    that was sampled).

    ``entropy_grad=True`` keeps the entropies in the graph (for an entropy bonus in the loss);
    ``share_prompt``: see :func:`completion_logits` (encodes each distinct prompt once).
    ``dedupe``: identical rows (same prompt, completion and temperature; a group often samples
    the same short answer several times) go through the model once and are copied back by
    index, so the forward and backward cost the distinct rows only. The copy is part of the
    graph: each copy's gradient flows back and adds up, exactly the gradient of B separate rows.
    ``pack_max_tokens`` (with ``share_prompt``): when the batch's distinct prompt tokens plus its
    completion tokens number at most this, the batch is scored as one row with no padding
    (:func:`pack_rows`): one forward, no key-value cache, no token after a row's end. Positions
    where a row has ended (``completion_mask`` 0) then hold 0, in the log-probs and the entropies.
    """
    B = completion_ids.shape[0]
    if dedupe:
        temps = _as_row_temps(temperature, B, completion_ids.device)  # (B, 1, 1) float32
        keep, inv = distinct_rows(prompt_ids, prompt_mask, completion_ids, completion_mask,
                                  temps.reshape(B, 1).contiguous().view(torch.int32))  # (U,), (B,)
        if keep.numel() < B:
            logp, ent = completion_logprobs(model, prompt_ids[keep], prompt_mask[keep], completion_ids[keep],
                                            completion_mask[keep], temps[keep], with_entropy, entropy_grad,
                                            share_prompt, pack_max_tokens=pack_max_tokens)  # (U, Tc) each
            return logp[inv], (ent[inv] if ent is not None else None)  # (B, Tc)
    packing = None
    if share_prompt and pack_max_tokens > 0:
        packing = pack_rows(prompt_ids, prompt_mask, completion_ids, completion_mask, pack_max_tokens)
    if packing is not None:
        logits = packed_logits(model, packing)  # (B, Tc, V) forward dtype
    else:
        logits = completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                   share_prompt)  # (B, Tc, V) forward dtype
    logp = token_logprobs(logits, completion_ids, temperature)  # (B, Tc) float32
    ent = None
    if with_entropy:
        ent = entropy_from_logits(logits if entropy_grad else logits.detach(), temperature)  # (B, Tc)
    if packing is not None:  # ended positions read another position's logits: 0 there
        logp = torch.where(packing.valid, logp, torch.zeros_like(logp))
        ent = torch.where(packing.valid, ent, torch.zeros_like(ent)) if ent is not None else None
    return logp, ent
