"""KL estimators, entropy bonus, truncation masking, preference losses, learned baseline, value head."""
import math
from types import SimpleNamespace

import pytest
import torch

from grpo_kit.core.losses import (
    LOSS_TYPES,
    aggregate,
    bradley_terry_loss,
    bradley_terry_pairs,
    clipped_surrogate,
    entropy_bonus,
    grpo_per_token_loss,
    kl_estimate,
    kl_k1,
    kl_k2,
    kl_k3,
    learned_baseline_loss,
    pairwise_margin_loss,
)
from grpo_kit.errors import DataError
from grpo_kit.loop.step import loss_mask
from grpo_kit.model.critic import completion_hidden, value_head, value_loss, values


def approx(t, expected, tol=1e-5):
    assert torch.as_tensor(t).flatten().tolist() == pytest.approx(list(expected), abs=tol)


def test_k1_k2_k3_by_hand():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    approx(kl_k1(logp, ref), [0.5, -1.0])  # logp - ref
    approx(kl_k2(logp, ref), [0.125, 0.5])  # 0.5 * 0.5^2, 0.5 * 1^2
    # d = ref - logp = [-0.5, 1]: exp(-0.5) + 0.5 - 1 = 0.106531; e - 1 - 1 = 0.718282
    approx(kl_k3(logp, ref), [0.106531, 0.718282])
    assert torch.equal(kl_estimate(logp, ref, "k2"), kl_k2(logp, ref))
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_estimate(logp, ref, "k4")


def test_kl_estimator_is_selectable_in_the_per_token_loss():
    # adv 0 and ratio 1: the surrogate is 0, the loss is beta * KL_t of the chosen estimator
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    for name, want in (("k1", [0.05, -0.1]), ("k2", [0.0125, 0.05]), ("k3", [0.0106531, 0.0718282])):
        per_token, info = grpo_per_token_loss(logp, logp, ref, torch.zeros(1), mask, beta=0.1, kl_estimator=name)
        approx(per_token, want)


def test_entropy_bonus_by_hand():
    # masked token mean of H: (0.5 + 1.0 + 2.0) / 3 = 7/6; times coef 0.1 = 0.116667; two micro-batches: half
    H = torch.tensor([[0.5, 1.0], [2.0, 9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert entropy_bonus(H, mask, 0.1).item() == pytest.approx(0.1 * 3.5 / 3)
    assert entropy_bonus(H, mask, 0.1, num_micro_batches=2).item() == pytest.approx(0.1 * 3.5 / 6)
    assert entropy_bonus(H, torch.zeros(2, 2), 0.1).item() == 0.0  # no tokens: finite, 0


def test_per_token_advantages_in_the_surrogate():
    # ratio 1: -min(1*A, 1*A) = -A per token, A given per token (process supervision / hybrid GAE)
    approx(clipped_surrogate(torch.ones(1, 2), torch.tensor([[1.0, -2.0]])), [-1.0, 2.0])


def test_masking_truncated_completions_removes_them_from_the_loss():
    # row 0 hit the length limit (truncated) with per-token loss [5, 5]; row 1 ended: [1, 3]
    roll = SimpleNamespace(completion_mask=torch.tensor([[1, 1], [1, 1]]), is_truncated=torch.tensor([True, False]))
    per_token = torch.tensor([[5.0, 5.0], [1.0, 3.0]])
    m = loss_mask(roll, mask_truncated=True)
    assert m.tolist() == [[0, 0], [1, 1]]
    # dapo: (1+3)/2 = 2 (without masking (10+4)/4 = 3.5); grpo: mean(0 for the empty row, 2) = 1
    assert aggregate(per_token, m, "dapo").item() == pytest.approx(2.0)
    assert aggregate(per_token, loss_mask(roll, mask_truncated=False), "dapo").item() == pytest.approx(3.5)
    assert aggregate(per_token, m, "grpo").item() == pytest.approx(1.0)
    # and no gradient reaches the truncated row
    logp = torch.zeros(2, 2, requires_grad=True)
    pt, _ = grpo_per_token_loss(logp, logp.detach(), None, torch.tensor([1.0, 1.0]), m)
    aggregate(pt, m, "dapo").backward()
    # ratio 1, A = 1: d(-ratio * A)/d logp = -1 per token, over dapo's 2 unmasked tokens
    assert logp.grad[0].abs().sum() == 0 and logp.grad[1].tolist() == pytest.approx([-0.5, -0.5])


def test_fully_masked_and_single_token_rows_are_finite_for_every_loss_type():
    logp = torch.tensor([[-0.7], [-1.2]], requires_grad=True)  # T = 1
    ref = torch.tensor([[-0.9], [-1.0]])
    for mask in (torch.tensor([[1], [1]]), torch.tensor([[1], [0]]), torch.zeros(2, 1, dtype=torch.long)):
        for level in ("token", "sequence"):
            for kl in ("k1", "k2", "k3"):
                pt, _ = grpo_per_token_loss(logp, logp.detach(), ref, torch.tensor([0.0, 1.0]), mask, beta=0.1,
                                            level=level, kl_estimator=kl)
                for lt in LOSS_TYPES:
                    loss = aggregate(pt, mask, lt, max_completion_length=1)
                    assert torch.isfinite(loss), (mask.tolist(), level, kl, lt)
                    if mask.sum() == 0:
                        assert loss.item() == 0.0


def test_pairwise_margin_loss_by_hand():
    # s = [-1, -3, -2]; 0 preferred to 1 (weight 1), 2 preferred to 0 (soft label 0.5), margin 1
    # pair (0 over 1): relu(-3 - -1 + 1) = relu(-1) = 0; pair (2 over 0): relu(-1 - -2 + 1) = 2
    # weighted mean over preferred pairs: (1*0 + 0.5*2) / 1.5 = 0.666667
    s = torch.tensor([[-1.0, -3.0, -2.0]])
    M = torch.tensor([[[0.0, 1.0, -0.5], [-1.0, 0.0, 0.0], [0.5, 0.0, 0.0]]])
    assert pairwise_margin_loss(s, M, margin=1.0).item() == pytest.approx(2 / 3, abs=1e-6)


def test_bradley_terry_loss_by_hand():
    # same pairs: -log sigmoid(-1 - -3 = 2) = log(1 + e^-2) = 0.126928;
    # -log sigmoid(-2 - -1 = -1) = log(1 + e) = 1.313262; (0.126928 + 0.5*1.313262)/1.5 = 0.522373
    s = torch.tensor([[-1.0, -3.0, -2.0]])
    M = torch.tensor([[[0.0, 1.0, -0.5], [-1.0, 0.0, 0.0], [0.5, 0.0, 0.0]]])
    assert bradley_terry_loss(s, M).item() == pytest.approx(0.522373, abs=1e-5)
    # beta scales the score difference: beta=2 on pair (0 over 1) alone -> log(1 + e^-4) = 0.018150
    only = torch.tensor([[[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    assert bradley_terry_loss(s, only, beta=2.0).item() == pytest.approx(0.018150, abs=1e-5)


def test_preference_losses_without_preferred_pairs_are_zero_and_bad_input_is_named():
    s = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    for fn in (pairwise_margin_loss, bradley_terry_loss):
        loss = fn(s, torch.zeros(1, 2, 2))
        assert loss.item() == 0.0 and torch.isfinite(loss)
    with pytest.raises(DataError, match=r"\(P, G, G\)"):
        bradley_terry_loss(s, torch.zeros(1, 2, 3))


def test_learned_baseline_by_hand():
    # seq_logp [-1, -2], rewards [1, 0], b = 0.25: adv [0.75, -0.25]
    # policy = -mean(0.75*-1, -0.25*-2) = -mean(-0.75, 0.5) = 0.125; baseline = mean(0.75^2, 0.25^2) = 0.3125
    # d baseline / d b = mean(-2 (r - b)) = -(1.5 - 0.5)/2 = -0.5; the policy loss sends no gradient to b
    # d policy / d seq_logp = -adv / 2 = [-0.375, 0.125]
    b = torch.tensor([[0.25]], requires_grad=True)
    s = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    pol, base = learned_baseline_loss(s, torch.tensor([[1.0, 0.0]]), b)
    assert pol.item() == pytest.approx(0.125) and base.item() == pytest.approx(0.3125)
    pol.backward()
    assert b.grad is None
    approx(s.grad, [-0.375, 0.125])
    base.backward()
    assert b.grad.item() == pytest.approx(-0.5)


def test_value_loss_by_hand_and_empty_mask():
    # masked tokens only: ((1-0)^2 + (2-2)^2) / 2 = 0.5
    assert value_loss(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.0, 2.0, 5.0]]),
                      torch.tensor([[1, 1, 0]])).item() == pytest.approx(0.5)
    assert value_loss(torch.ones(1, 2), torch.zeros(1, 2), torch.zeros(1, 2)).item() == 0.0


def test_value_head_on_the_tiny_model_learns_the_returns(tiny):
    model, tok = tiny
    ids = torch.tensor([tok.encode("12+34=")] * 2)  # (2, Tp)
    comp = torch.tensor([tok.encode("64")] * 2)  # (2, Tc)
    cmask = torch.tensor([[1] * comp.shape[1], [1] + [0] * (comp.shape[1] - 1)])
    with torch.no_grad():
        h = completion_hidden(model, ids, torch.ones_like(ids), comp, cmask)  # (2, Tc, H)
    assert h.shape == (2, comp.shape[1], model.config.hidden_size)
    head = value_head(model.config.hidden_size)
    assert (values(head, h, cmask) == 0).all()  # zero-initialised
    returns = torch.tensor([[1.0] * comp.shape[1], [0.0] * comp.shape[1]]) * cmask
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    first = value_loss(values(head, h, cmask), returns, cmask).item()
    for _ in range(50):
        opt.zero_grad()
        loss = value_loss(values(head, h, cmask), returns, cmask)
        loss.backward()
        opt.step()
    assert math.isfinite(loss.item()) and loss.item() < 0.2 * first


@pytest.mark.parametrize("coef", [0.0, 1.0])
def test_entropy_bonus_in_the_step(small_cfg, coef):
    # zero advantages: the surrogate has no gradient, so only the entropy bonus can move the model
    from grpo_kit.loop.step import train_step
    from grpo_kit.loop.train import setup
    from grpo_kit.model.sampling import sample_groups

    cfg = small_cfg.replace(entropy_coef=coef, learning_rate=3e-3, threads=1, log_kl=False)
    run = setup(cfg)
    roll = sample_groups(run.policy, run.tokenizer, [it["prompt"] for it in run.train_items[:4]], 4,
                         cfg.max_completion_length, cfg.temperature, run.sample_gen)
    first = train_step(run.policy, None, run.optimizer, roll, torch.zeros(4, 4), cfg)
    second = train_step(run.policy, None, run.optimizer, roll, torch.zeros(4, 4), cfg)
    if coef == 0:
        assert second["entropy"] == pytest.approx(first["entropy"], abs=1e-6)
    else:
        assert second["entropy"] > first["entropy"] + 1e-3


def test_bradley_terry_pairs_by_hand():
    # r_a - r_b = 0 -> -log sigmoid(0) = log 2 = 0.693147 for q = 1
    assert bradley_terry_pairs(torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([1.0])).item() == \
        pytest.approx(0.693147, abs=1e-6)
    # at margin 2 with q = 1: log(1 + e^-2) = 0.126928
    assert bradley_terry_pairs(torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0])).item() == \
        pytest.approx(0.126928, abs=1e-6)


def test_the_two_bradley_terry_forms_are_one_loss():
    """Pairs (a, b, q) are groups of two with weight q on 'a over b' and 1 - q on 'b over a'."""
    a, b, q = torch.tensor([2.0, -1.0, 0.3]), torch.tensor([0.0, 0.5, 0.3]), torch.tensor([1.0, 0.25, 0.5])
    scores = torch.stack([a, b], dim=1)  # (3, 2)
    prefs = torch.zeros(3, 2, 2)
    prefs[:, 0, 1], prefs[:, 1, 0] = q, 1 - q
    assert bradley_terry_loss(scores, prefs).item() == pytest.approx(bradley_terry_pairs(a, b, q).item(), abs=1e-6)
