import math

import pytest
import torch

from grpo_kit.core.losses import (
    aggregate,
    clipped_surrogate,
    grpo_per_token_loss,
    importance_ratio,
    kl_k3,
)
from grpo_kit.model.logprobs import token_logprobs


def test_clipped_surrogate_by_hand():
    r = torch.tensor([[1.5, 0.5, 1.0]])
    # A = 2: min(3.0, 1.2*2) = 2.4; min(1.0, 0.8*2) = 1.0; 2.0 -> negated
    assert clipped_surrogate(r, torch.tensor([2.0]), 0.2).flatten().tolist() == pytest.approx([-2.4, -1.0, -2.0])
    # A = -1: min(-1.5, -1.2) = -1.5; min(-0.5, -0.8) = -0.8; -1 -> negated
    assert clipped_surrogate(r, torch.tensor([-1.0]), 0.2).flatten().tolist() == pytest.approx([1.5, 0.8, 1.0])
    # clip-higher: upper bound 1.28 -> min(3.0, 2.56)
    assert clipped_surrogate(r, torch.tensor([2.0]), 0.2, 0.28)[0, 0].item() == pytest.approx(-2.56)
    # delta caps the unclipped ratio: A=-1, r=1.5 -> min(-1.4, -1.2) = -1.4
    assert clipped_surrogate(r, torch.tensor([-1.0]), 0.2, None, 1.4)[0, 0].item() == pytest.approx(1.4)


def test_k3_by_hand():
    # logp = log .5, ref = log .25: d = log .5; exp(d) - d - 1 = .5 + .693147 - 1 = .193147
    v = kl_k3(torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]]))
    assert v.item() == pytest.approx(0.193147, abs=1e-6)
    assert kl_k3(torch.tensor([[-1.3]]), torch.tensor([[-1.3]])).item() == 0.0


def test_sequence_ratio_is_exp_of_mean_log_ratio():
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    old = torch.tensor([[-1.5, -2.0, -9.0]])
    mask = torch.tensor([[1, 1, 0]])
    # mean of log-ratios over the 2 unmasked tokens: (0.5 + 0) / 2 = 0.25
    assert importance_ratio(logp, old, mask, "sequence").item() == pytest.approx(math.exp(0.25))


PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize("loss_type,expected", [("grpo", 3.0), ("bnpo", 2.5), ("dr_grpo", 1.0), ("dapo", 2.5)])
def test_aggregate_by_hand(loss_type, expected):
    # grpo: seq means 2 and 4 -> 3; bnpo/dapo: 10 / 4 tokens; dr_grpo: 10 / (2 rows * 5)
    assert aggregate(PER_TOKEN, MASK, loss_type, max_completion_length=5).item() == pytest.approx(expected)


def test_micro_batched_aggregation_sums_to_the_batch_value():
    # dapo normalises by the whole batch's tokens: 6/4 + 4/4 = 2.5; grpo averages micro values: 2/2 + 4/2 = 3
    for loss_type, expected in (("dapo", 2.5), ("grpo", 3.0), ("dr_grpo", 1.0)):
        parts = [aggregate(PER_TOKEN[i:i + 1], MASK[i:i + 1], loss_type, max_completion_length=5,
                           num_micro_batches=2, batch_tokens=4.0) for i in range(2)]
        assert sum(p.item() for p in parts) == pytest.approx(expected), loss_type


@pytest.mark.parametrize("token_adv", [False, True], ids=["A_i", "A_it"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_gradient_at_ratio_one_is_minus_advantage_times_grad_logprob(loss_type, token_adv):
    """With old = logp.detach() the ratio is 1 and grad L = -sum_it w_it A_i grad logp_it,
    where w_it is the aggregation weight: 1/(B|o_i|) grpo, 1/sum|o| bnpo/dapo, 1/(B L) dr_grpo.
    Per-token advantages A_it (B, T) enter the same way, each token with its own."""
    torch.manual_seed(0)
    B, T, V, L = 3, 4, 7, 6
    logits = torch.randn(B, T, V, requires_grad=True)
    targets = torch.randint(V, (B, T))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    adv = torch.tensor([1.5, -0.5, 2.0])
    if token_adv:  # (B, T): the tokens of one completion pushed different ways
        adv = torch.tensor([[1.5, 0.0, -1.0, 2.0], [-0.5, 0.5, 9.0, 9.0], [2.0, 7.0, 7.0, 7.0]])
    logp = token_logprobs(logits, targets)
    per_token, _ = grpo_per_token_loss(logp, logp.detach(), None, adv, mask)
    aggregate(per_token, mask, loss_type, max_completion_length=L).backward()
    got = logits.grad.clone()

    logits.grad = None
    lengths = mask.sum(-1, keepdim=True).float()
    w = {"grpo": 1 / (B * lengths), "bnpo": 1 / mask.sum().float(), "dapo": 1 / mask.sum().float(),
         "dr_grpo": torch.tensor(1.0 / (B * L))}[loss_type]
    a = adv if token_adv else adv[:, None]  # (B, T) or (B, 1)
    surrogate = -(w * a * token_logprobs(logits, targets) * mask).sum()
    surrogate.backward()
    torch.testing.assert_close(got, logits.grad, rtol=1e-6, atol=1e-7)


def test_kl_term_is_added_with_beta():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    per_token, info = grpo_per_token_loss(logp, logp, ref, torch.tensor([0.0]), torch.ones(1, 1), beta=0.1)
    assert per_token.item() == pytest.approx(0.1 * 0.193147, abs=1e-6)
    with pytest.raises(ValueError, match="reference"):
        grpo_per_token_loss(logp, logp, None, torch.tensor([0.0]), torch.ones(1, 1), beta=0.1)


def test_token_logprobs_matches_log_softmax_in_float32_and_bf16():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 11)
    t = torch.randint(11, (2, 3))
    ref = torch.log_softmax(logits, -1).gather(-1, t[..., None])[..., 0]
    torch.testing.assert_close(token_logprobs(logits, t), ref)
    torch.testing.assert_close(token_logprobs(logits.bfloat16(), t),
                               torch.log_softmax(logits.bfloat16().float(), -1).gather(-1, t[..., None])[..., 0])
