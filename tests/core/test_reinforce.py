"""The score-function estimate against the exact gradient of a small categorical policy."""
import pytest
import torch

from grpo_kit.core.reinforce import (
    exact_gradient,
    group_baseline_weights,
    kl_exact,
    kl_regularised_optimum,
    off_policy_gradients,
    sampled_gradients,
    score_terms,
)


def test_exact_gradient_by_hand():
    # two actions, equal logits: pi = (0.5, 0.5), r = (1, 0), J = 0.5; dJ/dtheta = pi * (r - 0.5) = (0.25, -0.25)
    assert exact_gradient(torch.zeros(2), torch.tensor([1.0, 0.0])).tolist() == [0.25, -0.25]
    # matches autograd on a random policy
    th = torch.randn(5, requires_grad=True)
    r = torch.randn(5)
    (torch.softmax(th, -1) * r).sum().backward()
    assert torch.allclose(exact_gradient(th.detach(), r), th.grad, atol=1e-6)


def test_score_terms_by_hand():
    # actions 0 and 1 drawn once each, rewards 1 and 0, no baseline: mean of 1 * (1 - .5, 0 - .5) and 0
    t = score_terms(torch.zeros(2), torch.tensor([0, 1]), torch.tensor([1.0, 0.0]))
    assert t.tolist() == [[0.5, -0.5], [0.0, 0.0]] and t.mean(0).tolist() == [0.25, -0.25]


def test_group_baselines_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert group_baseline_weights(r, "mean").tolist() == [[0.5, -0.5, -0.5, 0.5]]
    # leave-one-out: 1 - (0 + 0 + 1) / 3 = 2/3; 0 - 2/3 = -2/3
    assert group_baseline_weights(r, "loo") == pytest.approx(torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3]]))
    # the group-mean weight is the leave-one-out weight times (G - 1) / G: 0.5 = 2/3 * 3/4
    assert torch.allclose(group_baseline_weights(r, "mean"), group_baseline_weights(r, "loo") * 3 / 4)
    # a critic's value: the same number subtracted from every reward
    assert group_baseline_weights(r, "value", value=0.25).tolist() == [[0.75, -0.25, -0.25, 0.75]]
    with pytest.raises(ValueError, match="needs value="):
        group_baseline_weights(r, "value")
    with pytest.raises(ValueError, match="unknown baseline"):
        group_baseline_weights(r, "median")


def test_estimates_agree_with_the_exact_gradient_and_the_baseline_lowers_variance():
    logits, r = torch.tensor([1.0, 0.0, -1.0, 0.5]), torch.tensor([1.0, 0.2, 0.0, 0.6])
    exact = exact_gradient(logits, r)  # (K,)
    g = torch.Generator().manual_seed(0)
    N, G = 40000, 8
    est = {k: sampled_gradients(logits, r, N, G, k, g) for k in ("none", "mean", "loo")}  # (N, K) each
    se = {k: v.std(0) / N ** 0.5 for k, v in est.items()}  # (K,) standard error of the mean
    # unbiased: no baseline and leave-one-out agree with the exact gradient within 4 standard errors
    for k in ("none", "loo"):
        assert ((est[k].mean(0) - exact).abs() < 4 * se[k]).all(), k
    # the group mean including the own reward is biased by exactly (G - 1) / G
    assert ((est["mean"].mean(0) - exact * (G - 1) / G).abs() < 4 * se["mean"]).all()
    # a baseline lowers the total variance (the trace of the estimate's covariance): 0.030 -> 0.010 here.
    # Not every component's: the rarely drawn action 2 (reward 0) has almost no variance without one.
    total = {k: v.var(0).sum().item() for k, v in est.items()}
    assert total["none"] > 2.5 * total["loo"] and total["none"] > 2.5 * total["mean"]


def test_importance_ratio_corrects_samples_from_an_older_policy():
    old, new = torch.tensor([1.0, 0.0, -1.0, 0.5]), torch.tensor([0.2, 0.8, -1.0, 1.2])
    r = torch.tensor([1.0, 0.2, 0.0, 0.6])
    exact = exact_gradient(new, r)  # (K,) the gradient at the current policy
    g = torch.Generator().manual_seed(1)
    N, G = 40000, 8
    fixed = off_policy_gradients(new, old, r, N, G, True, g)  # (N, K)
    naive = off_policy_gradients(new, old, r, N, G, False, g)  # (N, K)
    se_f, se_n = fixed.std(0) / N ** 0.5, naive.std(0) / N ** 0.5
    assert ((fixed.mean(0) - exact).abs() < 4 * se_f).all()
    # without the ratio the estimate is of another gradient: off by far more than its noise
    assert ((naive.mean(0) - exact).abs() / se_n).max() > 10


def test_kl_by_hand_and_the_regularised_optimum():
    # pi = (1/2, 1/2), ref = (1/4, 3/4) (logits log 1, log 3): KL = 1/2 log 2 + 1/2 log(2/3)
    ref = torch.log(torch.tensor([1.0, 3.0]))
    want = 0.5 * torch.log(torch.tensor(2.0)) + 0.5 * torch.log(torch.tensor(2 / 3))
    assert kl_exact(torch.zeros(2), ref) == pytest.approx(want.item(), abs=1e-7)
    assert kl_exact(ref, ref).item() == pytest.approx(0.0, abs=1e-7)
    # pi* = pi_ref exp(r / beta) / Z: ref (1/4, 3/4), r = (1, 0), beta = 1 -> (e, 3) / (e + 3)
    e = torch.e
    star = kl_regularised_optimum(ref, torch.tensor([1.0, 0.0]), 1.0)
    assert star.tolist() == pytest.approx([e / (e + 3), 3 / (e + 3)], abs=1e-6)
    # it is a stationary point of J - beta KL: autograd's gradient there is zero
    th = star.log().clone().requires_grad_(True)
    p = torch.softmax(th, -1)
    (-(p * torch.tensor([1.0, 0.0])).sum() + kl_exact(th, ref)).backward()
    assert th.grad.abs().max() < 1e-6
