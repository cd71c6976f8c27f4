"""Encoding each group's prompt once (share_prompt_prefix) gives the plain forward's numbers."""
import torch

from grpo_kit.logprobs import completion_logprobs
from grpo_kit.sampling import generate, repeated_groups, sample_groups
from grpo_kit.step import shared_group

PROMPTS = ["12+34=", "7+5=", "99+1="]  # different lengths: left padding inside the batch


def _rollouts(tiny, G=4, seed=0):
    model, tok = tiny
    return sample_groups(model, tok, PROMPTS, G, 6, 1.0, torch.Generator().manual_seed(seed))


def test_repeated_groups_detects_runs_of_identical_rows():
    x = torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4]])  # two groups of two
    assert repeated_groups(x, 2)
    assert not repeated_groups(x, 4)  # [1,2] != [3,4]
    assert not repeated_groups(x, 3)  # 4 rows do not split into groups of 3
    assert not repeated_groups(x, 1)  # nothing to share


def test_shared_prompt_logprobs_and_grads_match_the_plain_forward(tiny):
    model, _ = tiny
    ro = _rollouts(tiny)
    model.train()
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    plain, _ = completion_logprobs(model, *args)
    shared, _ = completion_logprobs(model, *args, group_size=4)
    m = ro.completion_mask.bool()
    torch.testing.assert_close(shared[m], plain[m], rtol=0, atol=1e-5)
    params = list(model.parameters())
    g_plain = torch.autograd.grad((plain * m).sum(), params)
    g_shared = torch.autograd.grad((shared * m).sum(), params)
    for a, b in zip(g_plain, g_shared):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)  # float rounding, not a different gradient
    model.eval()


def test_mismatched_groups_fall_back_to_the_plain_forward(tiny):
    model, _ = tiny
    ro = _rollouts(tiny)
    ids = ro.prompt_ids.clone()
    ids[1] = ids[4]  # row 1 no longer has its group's prompt: sharing would be wrong
    args = (ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    with torch.no_grad():
        assert torch.equal(completion_logprobs(model, *args, group_size=4)[0], completion_logprobs(model, *args)[0])


def test_shared_prefill_samples_the_same_completions(tiny):
    model, tok = tiny
    ro = _rollouts(tiny, G=4, seed=3)
    kw = dict(max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.0)
    a = generate(model, ro.prompt_ids, ro.prompt_mask, generator=torch.Generator().manual_seed(5), **kw)
    b = generate(model, ro.prompt_ids, ro.prompt_mask, generator=torch.Generator().manual_seed(5), group_size=4, **kw)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_micro_batches_share_only_whole_groups():
    assert shared_group(slice(0, 8), 4, True) == 4
    assert shared_group(slice(4, 8), 4, True) == 4
    assert shared_group(slice(2, 6), 4, True) == 1  # cuts through two groups
    assert shared_group(slice(0, 8), 4, False) == 1  # switched off
