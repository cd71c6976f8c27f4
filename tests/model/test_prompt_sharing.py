"""Encoding each distinct prompt once (share_prompt_prefix) and scoring identical rows once
(dedupe_completions) give the plain forward's numbers and gradients."""
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.loop.step import train_step
from grpo_kit.model.logprobs import completion_logprobs, distinct_rows
from grpo_kit.model.sampling import generate, repeated_groups, sample_groups

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
    shared, _ = completion_logprobs(model, *args, share_prompt=True)
    m = ro.completion_mask.bool()
    torch.testing.assert_close(shared[m], plain[m], rtol=0, atol=1e-5)
    params = list(model.parameters())
    g_plain = torch.autograd.grad((plain * m).sum(), params)
    g_shared = torch.autograd.grad((shared * m).sum(), params)
    for a, b in zip(g_plain, g_shared):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)  # float rounding, not a different gradient
    model.eval()


def test_a_row_whose_prompt_differs_from_its_group_reads_its_own_prompt(tiny):
    model, _ = tiny
    ro = _rollouts(tiny)
    ids = ro.prompt_ids.clone()
    ids[1] = ids[4]  # row 1 now has group 2's prompt: sharing is by content, not by position
    args = (ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    with torch.no_grad():
        shared = completion_logprobs(model, *args, share_prompt=True)[0]
        plain = completion_logprobs(model, *args)[0]
    m = ro.completion_mask.bool()
    torch.testing.assert_close(shared[m], plain[m], rtol=0, atol=1e-5)


def test_all_distinct_prompts_take_the_plain_forward(tiny):
    model, _ = tiny
    ro = _rollouts(tiny, G=1)  # one row per prompt: nothing to share
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    with torch.no_grad():
        assert torch.equal(completion_logprobs(model, *args, share_prompt=True)[0], completion_logprobs(model, *args)[0])


def test_shared_prefill_samples_the_same_completions(tiny):
    model, tok = tiny
    ro = _rollouts(tiny, G=4, seed=3)
    kw = dict(max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.0)
    a = generate(model, ro.prompt_ids, ro.prompt_mask, generator=torch.Generator().manual_seed(5), **kw)
    b = generate(model, ro.prompt_ids, ro.prompt_mask, generator=torch.Generator().manual_seed(5), group_size=4, **kw)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_distinct_rows_by_hand():
    x = torch.tensor([[3, 1], [1, 2], [3, 1], [1, 2], [5, 5]])
    t = torch.tensor([[0], [0], [0], [1], [0]])  # row 3 differs from row 1 in this column only
    keep, inv = distinct_rows(x, t)
    assert keep.tolist() == [0, 1, 3, 4]  # first row of each distinct row, in order of appearance
    assert inv.tolist() == [0, 1, 0, 2, 3]
    assert torch.equal(x[keep][inv], x) and torch.equal(t[keep][inv], t)


def _with_duplicates(tiny):
    ro = _rollouts(tiny, G=4, seed=1)
    cids, cmask = ro.completion_ids.clone(), ro.completion_mask.clone()
    cids[1], cmask[1] = cids[0], cmask[0]  # rows 0, 1, 2 of group 0 say the same thing
    cids[2], cmask[2] = cids[0], cmask[0]
    cids[9], cmask[9] = cids[8], cmask[8]
    return ro.prompt_ids, ro.prompt_mask, cids, cmask


def test_dedupe_gives_the_same_logprobs_entropies_and_gradients(tiny):
    model, _ = tiny
    args = _with_duplicates(tiny)
    temps = torch.tensor([1.0, 0.7, 1.0, 1.0] * 3).view(-1, 1, 1)  # row 1 was sampled at another temperature
    model.train()
    m = args[3].bool()
    outs = {}
    for dedupe in (False, True):
        lp, ent = completion_logprobs(model, *args, temps, with_entropy=True, entropy_grad=True, share_prompt=True,
                                      dedupe=dedupe)
        loss = (lp * m * torch.arange(1.0, 13.0).view(-1, 1)).sum() + (ent * m).sum()  # every row weighted differently
        outs[dedupe] = (lp, ent, torch.autograd.grad(loss, list(model.parameters())))
    model.eval()
    (lp0, ent0, g0), (lp1, ent1, g1) = outs[False], outs[True]
    torch.testing.assert_close(lp1[m], lp0[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(ent1[m], ent0[m], rtol=0, atol=1e-5)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)  # each copy's gradient adds up
    assert not torch.allclose(lp1[1][m[1]], lp1[0][m[0]])  # the 0.7 row was not merged into the 1.0 rows


def test_dedupe_forwards_only_the_distinct_rows(tiny):
    model, _ = tiny
    args = _with_duplicates(tiny)
    seen = []
    hook = model.model.embed_tokens.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[0]))
    try:
        with torch.no_grad():
            completion_logprobs(model, *args, dedupe=True)
    finally:
        hook.remove()
    assert seen == [distinct_rows(*args)[0].numel()] and seen[0] <= 12 - 3  # at least 3 copies not forwarded


def test_train_step_is_the_same_with_and_without_dedupe(tiny):
    import copy

    model, _ = tiny
    ro = _rollouts(tiny, G=4, seed=1)
    assert distinct_rows(ro.prompt_ids, ro.completion_ids)[0].numel() < 12  # the batch has identical rows to merge
    adv = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))  # (P, G)
    results = []
    for dedupe in (False, True):
        policy = copy.deepcopy(model)
        ref = copy.deepcopy(model).requires_grad_(False)
        cfg = GRPOConfig(beta=0.04, dedupe_completions=dedupe, micro_batch_size=8, max_completion_length=6)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)  # weights move by lr * gradient (Adam would hide a wrong scale)
        metrics = train_step(policy, ref, opt, ro, adv, cfg)
        results.append((metrics, torch.cat([p.detach().flatten() for p in policy.parameters()])))
    (m0, w0), (m1, w1) = results
    for k in ("loss", "kl", "entropy", "grad_norm"):
        assert abs(m0[k] - m1[k]) <= 1e-5 * max(1.0, abs(m0[k])), k
    torch.testing.assert_close(w1, w0, rtol=0, atol=1e-6)
