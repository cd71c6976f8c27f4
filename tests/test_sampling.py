import torch

from grpo_kit.sampling import completion_mask_from_ids, position_ids_from_mask, sample_groups


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
