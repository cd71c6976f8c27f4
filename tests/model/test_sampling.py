import torch

from grpo_kit.model.sampling import (
    completion_mask_from_ids,
    position_ids_from_mask,
    sample_groups,
)


def test_mask_stops_at_first_eos():
    eos = 2
    ids = torch.tensor([[5, 2, 7, 2], [2, 0, 0, 0], [5, 6, 7, 8]])
    assert completion_mask_from_ids(ids, eos).tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def test_positions_skip_left_padding():
    assert position_ids_from_mask(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])).tolist() == \
        [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_sample_groups_shapes_masks_and_determinism(tiny):
    model, tok = tiny
    prompts = ["12+34=", "5+7=", "99+99="]
    g = torch.Generator().manual_seed(0)
    r = sample_groups(model, tok, prompts, 4, 8, 1.0, g)
    assert r.completion_ids.shape[0] == 12 and r.num_prompts == 3
    assert r.prompts == [p for p in prompts for _ in range(4)]
    eos = tok.eos_token_id
    for ids, m, trunc in zip(r.completion_ids.tolist(), r.completion_mask.tolist(), r.is_truncated.tolist()):
        if eos in ids:
            first = ids.index(eos)
            assert m == [1] * (first + 1) + [0] * (len(ids) - first - 1)
            assert all(t == tok.pad_token_id for t in ids[first + 1:])
            assert not trunc
        else:
            assert all(m) and trunc
    # same generator state -> same samples
    r2 = sample_groups(model, tok, prompts, 4, 8, 1.0, torch.Generator().manual_seed(0))
    assert torch.equal(r.completion_ids, r2.completion_ids)


def test_left_padding_does_not_change_greedy_answers(tiny):
    model, tok = tiny
    alone = sample_groups(model, tok, ["3+4="], 1, 6, 0.0).completions
    padded = sample_groups(model, tok, ["3+4=", "98+76="], 1, 6, 0.0).completions
    assert alone[0] == padded[0]


def _naive_sample(model, ids, mask, steps, eos, pad, generator):
    """Sampling without a cache: the whole sequence of every row is forwarded at every step."""
    B = ids.shape[0]
    done, tokens = torch.zeros(B, dtype=torch.bool), []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
        probs = torch.softmax(logits[:, -1, :].float(), -1)  # (B, V)
        tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,) one draw per row, ended or not
        tok = torch.where(done, torch.full_like(tok, pad), tok)
        tokens.append(tok)
        done = done | (tok == eos)
        if bool(done.all()):
            break
        ids, mask = torch.cat([ids, tok[:, None]], 1), torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return torch.stack(tokens, 1)  # (B, Tc)


def test_ended_rows_leave_the_batch_and_the_draws_do_not_change(tiny):
    """generate() forwards only the rows still decoding, yet draws the same tokens as forwarding every
    row's whole sequence at every step with the same generator."""
    from grpo_kit.model.sampling import encode_prompts, generate

    model, tok = tiny
    model.eval()
    rows = [p for p in ["12+34=", "5+7=", "99+99=", "40+2="] for _ in range(6)]  # (B,) = 24 rows
    ids, mask = encode_prompts(tok, rows, "cpu")
    seen = []  # rows in each decoding forward (the prefill is the first call)
    hook = model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        for seed in range(4):
            seen.clear()
            cids, _ = generate(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id, 1.0,
                               torch.Generator().manual_seed(seed))
            live = [int((~(cids[:, :t] == tok.eos_token_id).any(-1)).sum()) for t in range(1, cids.shape[1])]
            assert seen[1:] == live, (seen, live)  # each decoding step forwards exactly the rows not yet ended
            assert min(live) < len(rows)  # some row ended before the last step (else the test shows nothing)
            ref = _naive_sample(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                torch.Generator().manual_seed(seed))
            assert torch.equal(cids, ref)
    finally:
        hook.remove()
