"""Packing a batch into one row without padding (GRPOConfig.pack_max_tokens, logprobs.pack_rows)
gives the numbers and gradients of separate padded rows, in one forward."""
import copy

import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.errors import ConfigError
from grpo_kit.loop.step import train_step
from grpo_kit.model.logprobs import completion_logprobs, pack_rows
from grpo_kit.model.memory import estimate_memory, kv_cache_bytes, model_shape
from grpo_kit.model.sampling import sample_groups

PROMPTS = ["12+34=", "7+5=", "99+1="]  # different lengths: left padding inside the batch


def _rollouts(tiny, G=4, seed=0, length=6):
    model, tok = tiny
    return sample_groups(model, tok, PROMPTS, G, length, 1.0, torch.Generator().manual_seed(seed))


def test_the_packed_layout_by_hand():
    # one prompt "5 6" (left-padded to 3) shared by two rows: row 0 = [7, 8, EOS=2], row 1 = [9, EOS, pad]
    pi, pm = torch.tensor([[0, 5, 6], [0, 5, 6]]), torch.tensor([[0, 1, 1], [0, 1, 1]])
    ci, cm = torch.tensor([[7, 8, 2], [9, 2, 0]]), torch.tensor([[1, 1, 1], [1, 1, 0]])
    p = pack_rows(pi, pm, ci, cm, max_tokens=5)
    # the prompt once, then each row's tokens but its last (the EOS predicts nothing)
    assert p.input_ids.tolist() == [[5, 6, 7, 8, 9]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 2]]  # row 1's token 9 sits where it sits in its own row
    assert p.attend[0, 0].int().tolist() == [[1, 0, 0, 0, 0],   # 5 sees itself
                                             [1, 1, 0, 0, 0],   # 6 sees the prompt up to itself
                                             [1, 1, 1, 0, 0],   # 7: the prompt and itself
                                             [1, 1, 1, 1, 0],   # 8: the prompt, 7 and itself
                                             [1, 1, 0, 0, 1]]   # 9: the prompt and itself, not row 0
    assert p.keep.tolist() == [1, 2, 3, 4]  # logits of the prompt's last token and of every input
    # row 0: 6 predicts 7, 7 predicts 8, 8 predicts EOS; row 1: 6 predicts 9, 9 predicts EOS, then ended
    assert p.source.tolist() == [[0, 1, 2], [0, 3, 0]]
    assert p.valid.tolist() == [[True, True, True], [True, True, False]]
    assert pack_rows(pi, pm, ci, cm, max_tokens=4) is None  # 5 tokens do not fit in 4
    assert pack_rows(pi, pm, ci, torch.tensor([[1, 0, 1], [1, 1, 0]]), max_tokens=99) is None  # not 1s then 0s


def test_packed_logprobs_entropies_and_gradients_match_the_plain_forward(tiny):
    model, _ = tiny
    ro = _rollouts(tiny)
    temps = torch.tensor([1.0, 0.7, 1.3, 1.0] * 3).view(-1, 1, 1)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, temps)
    m = ro.completion_mask.bool()
    assert not bool(m.all())  # some row ended early: padding the packed row leaves out
    weights = torch.arange(1.0, 13.0).view(-1, 1)  # every row weighted differently
    model.train()
    outs = []
    for kw in ({}, {"share_prompt": True, "pack_max_tokens": 4096}):
        lp, ent = completion_logprobs(model, *args, with_entropy=True, entropy_grad=True, **kw)
        loss = (lp * m * weights).sum() + (ent * m).sum()
        outs.append((lp, ent, torch.autograd.grad(loss, list(model.parameters()))))
    model.eval()
    (lp0, ent0, g0), (lp1, ent1, g1) = outs
    torch.testing.assert_close(lp1[m], lp0[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(ent1[m], ent0[m], rtol=0, atol=1e-5)
    for a, b in zip(g0, g1):  # float rounding, not a different gradient: RMSNorm computes in float32, and the
        # shared prompt's gradient is summed over its rows in another order (in float64 too: 1.4e-7 of the largest)
        assert (b - a).abs().max() <= 1e-5 * a.abs().max(), (b - a).abs().max()
    assert bool((lp1[~m] == 0).all()) and bool((ent1[~m] == 0).all())  # nothing is computed after a row's end


def test_a_packed_batch_is_one_forward_of_its_real_tokens(tiny):
    model, _ = tiny
    ro = _rollouts(tiny)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    seen = []
    hook = model.model.embed_tokens.register_forward_hook(lambda mod, inp, out: seen.append(tuple(inp[0].shape)))
    try:
        with torch.no_grad():
            completion_logprobs(model, *args, share_prompt=True, pack_max_tokens=4096)
            n = int(ro.prompt_mask[::4].sum() + (ro.completion_mask.sum(-1) - 1).sum())  # 3 prompts once + inputs
            assert seen == [(1, n)]
            seen.clear()
            completion_logprobs(model, *args, share_prompt=True, pack_max_tokens=n - 1)  # too long: the cache path
            assert len(seen) == 2 and seen[0][0] == 3 and seen[1][0] == 12  # prompts once, then the 12 rows
    finally:
        hook.remove()


def test_bf16_autocast_packed_logprobs_are_close_to_the_plain_forward(tiny):
    model, _ = tiny
    ro = _rollouts(tiny)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    m = ro.completion_mask.bool()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain, _ = completion_logprobs(model, *args)
        packed, _ = completion_logprobs(model, *args, share_prompt=True, pack_max_tokens=4096)
    assert packed.dtype == torch.float32
    torch.testing.assert_close(packed[m], plain[m], rtol=0, atol=0.1)  # bf16: a few hundredths


def test_train_step_is_the_same_packed_or_not(tiny):
    model, _ = tiny
    ro = _rollouts(tiny, seed=1)
    adv = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))  # (P, G)
    results = []
    for pack in (0, 1024):
        policy, ref = copy.deepcopy(model), copy.deepcopy(model).requires_grad_(False)
        cfg = GRPOConfig(beta=0.04, pack_max_tokens=pack, micro_batch_size=8, max_completion_length=6, num_iterations=2)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)  # weights move by lr * gradient
        metrics = train_step(policy, ref, opt, ro, adv, cfg)
        results.append((metrics, torch.cat([p.detach().flatten() for p in policy.parameters()])))
    (m0, w0), (m1, w1) = results
    for k in ("loss", "kl", "entropy", "grad_norm"):
        assert abs(m0[k] - m1[k]) <= 1e-5 * max(1.0, abs(m0[k])), k
    torch.testing.assert_close(w1, w0, rtol=0, atol=1e-5)


def test_pack_max_tokens_must_be_a_whole_number_not_below_zero():
    with pytest.raises(ConfigError, match="pack_max_tokens"):
        GRPOConfig(pack_max_tokens=-1).validate()
    GRPOConfig(pack_max_tokens=0).validate()


def test_memory_estimate_of_a_packed_batch_by_hand():
    toy = dict(vocab_size=10, hidden_size=4, intermediate_size=8, num_hidden_layers=2, num_attention_heads=2,
               num_key_value_heads=1, tie_word_embeddings=True)
    kw = dict(P=2, G=2, prompt_len=3, completion_len=4, beta=0.04)
    cache, packed = estimate_memory(toy, **kw), estimate_memory(toy, **kw, pack_max_tokens=12)
    n = 2 * 3 + 4 * (4 - 1)  # 2 prompts once, then 4 rows of 3 inputs: 18 tokens
    assert estimate_memory(toy, **kw, pack_max_tokens=n - 1) == cache  # 18 > 17: not packed
    packed = estimate_memory(toy, **kw, pack_max_tokens=n)
    s = model_shape(toy)
    # packed: no prompt cache repeated for the 4 rows (4 rows x 3 tokens x 2 layers x K and V x 2 floats x 4 B
    # = 384 B), and the 18 x 18 mask as bool and float (5 B each)
    assert kv_cache_bytes(s, 4, 3, False) == 384
    assert packed["activations"] - cache["activations"] == 5 * n * n - 384
    assert packed["no_grad_forward"] - cache["no_grad_forward"] == 5 * n * n - kv_cache_bytes(s, 4, 7, False)
