import pytest
import torch

from grpo_kit.core.preferences import check_preferences
from grpo_kit.data.tasks import heldout_split
from grpo_kit.lab.offline import (
    encode_groups,
    group_logprobs,
    offline_loss,
    pregenerate,
    stage_preferences,
)


def test_stage_one_keeps_only_clear_pairs():
    m = torch.tensor([[[0.0, 1.0, 0.5], [-1.0, 0.0, -0.5], [-0.5, 0.5, 0.0]]])
    assert stage_preferences(m, 1).tolist() == [[[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]
    assert torch.equal(stage_preferences(m, 2), m)


def test_encode_groups_masks_each_response_plus_eos(tiny):
    _, tok = tiny
    pi, pm, ci, cm = encode_groups(tok, ["1+2="], [["3", "21"]], "cpu")
    assert cm.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert ci[0, 1].item() == tok.eos_token_id and ci[1, 2].item() == tok.eos_token_id


def test_group_logprobs_prefers_what_the_model_says(tiny):
    model, tok = tiny
    # the base answers 1+1= with "2" (greedy); a wrong long answer is far less likely
    lp = group_logprobs(model, tok, ["1+1="], [["2", "9999"]])
    assert lp.shape == (1, 2) and lp[0, 0] > lp[0, 1]


def test_margin_loss_by_hand():
    # s = [-1, -3]; 0 preferred to 1: relu(s1 - s0 + 1) = relu(-2 + 1) = 0; margin 3 -> relu(1) = 1
    s = torch.tensor([[-1.0, -3.0]])
    m = torch.tensor([[[0.0, 1.0], [-1.0, 0.0]]])
    assert offline_loss(s, m, "margin", margin=1.0).item() == 0.0
    assert offline_loss(s, m, "margin", margin=3.0).item() == 1.0


def test_pregenerate_labels_are_valid_and_consistent(tiny):
    model, tok = tiny
    items = heldout_split("add2")[:6]
    recs = pregenerate(model, tok, items, k=4, seed=0)
    assert len(recs) == 6
    for r in recs:
        m = check_preferences(r["preference_matrix"])
        assert len(r["responses"]) == 4 and set(m.abs().flatten().tolist()) <= {0.0, 0.5, 1.0}
        assert r["answer"] and "completion" not in r


def test_clear_winners_and_anchor_nll_by_hand():
    from grpo_kit.lab.offline import anchor_nll, clear_winners

    # response 0 beats 1 clearly; 1 and 2 tie softly: only 0 is a clear winner
    m = torch.tensor([[[0.0, 1.0, 1.0], [-1.0, 0.0, 0.5], [-1.0, -0.5, 0.0]]])
    assert clear_winners(m).tolist() == [[True, False, False]]
    # winner's summed log-prob -3 over 2 tokens -> NLL per token 1.5
    seq = torch.tensor([[-3.0, -10.0, -20.0]])
    assert anchor_nll(seq, torch.tensor([[2, 4, 5]]), clear_winners(m)).item() == 1.5
    assert anchor_nll(seq, torch.tensor([[2, 4, 5]]), torch.zeros(1, 3, dtype=torch.bool)).item() == 0.0


# one group of 3 responses: 0 is right, 1 and 2 wrong, 1 the closer (a soft 0.5 over 2)
GROUP = torch.tensor([[[0.0, 1.0, 1.0], [-1.0, 0.0, 0.5], [-1.0, -0.5, 0.0]]])  # (1, 3, 3)


def test_bt_loss_by_hand_on_a_three_response_group():
    # summed log-probs s = [-1, -2, -4], reference [-1.5, -1.5, -1.5]: implicit rewards r = s - ref = [0.5, -0.5, -2.5]
    # beta 0.5; a pair (i over j) costs -log sigmoid(beta (r_i - r_j)) = log(1 + exp(-beta (r_i - r_j))):
    #   (0 over 1): beta * 1 = 0.5 -> log(1 + e^-0.5) = 0.474077, weight 1
    #   (0 over 2): beta * 3 = 1.5 -> log(1 + e^-1.5) = 0.201413, weight 1
    #   (1 over 2): beta * 2 = 1.0 -> log(1 + e^-1)   = 0.313262, weight 0.5
    # weighted mean: (0.474077 + 0.201413 + 0.5 * 0.313262) / 2.5 = 0.832121 / 2.5 = 0.332848
    s = torch.tensor([[-1.0, -2.0, -4.0]], requires_grad=True)
    ref = torch.full((1, 3), -1.5)
    loss = offline_loss(s, GROUP, "bt", ref, beta=0.5)
    assert loss.item() == pytest.approx(0.332848, abs=1e-6)
    # d/ds_i: each pair sends -beta sigmoid(-beta d) w / 2.5 to its winner and the opposite to its loser;
    # sigmoid(-0.5) = 0.377541, sigmoid(-1.5) = 0.182426, sigmoid(-1) = 0.268941:
    #   s0: -0.5 (0.377541 + 0.182426) / 2.5 = -0.111993
    #   s1: 0.5 (0.377541 - 0.5 * 0.268941) / 2.5 = 0.048614
    #   s2: 0.5 (0.182426 + 0.5 * 0.268941) / 2.5 = 0.063379   (the three sum to 0)
    loss.backward()
    assert s.grad[0].tolist() == pytest.approx([-0.111993, 0.048614, 0.063379], abs=1e-6)
    # stage 1 keeps the clear pairs only: (0.474077 + 0.201413) / 2 = 0.337745
    assert offline_loss(s, stage_preferences(GROUP, 1), "bt", ref, beta=0.5).item() == pytest.approx(0.337745, abs=1e-6)


def test_learnable_baseline_loss_by_hand_on_a_three_response_group():
    from grpo_kit.core.losses import learned_baseline_loss
    from grpo_kit.lab.offline import baseline_update, preference_rewards

    # r_i = sum_j max(M_ij, 0) / (K - 1): r0 = (1 + 1) / 2 = 1, r1 = 0.5 / 2 = 0.25, r2 = 0; group mean 1.25 / 3
    r = preference_rewards(GROUP)
    assert r[0].tolist() == pytest.approx([1.0, 0.25, 0.0])
    assert preference_rewards(stage_preferences(GROUP, 1))[0].tolist() == pytest.approx([1.0, 0.0, 0.0])
    # b = 0.2: advantages r - b = [0.8, 0.05, -0.2]; with s = [-1, -2, -4]:
    # loss = -mean([0.8 * -1, 0.05 * -2, -0.2 * -4]) = -mean([-0.8, -0.1, 0.8]) = 0.1 / 3 = 0.033333
    s = torch.tensor([[-1.0, -2.0, -4.0]], requires_grad=True)
    b = torch.tensor([[0.2]])
    loss = offline_loss(s, GROUP, "baseline", baseline=b)
    assert loss.item() == pytest.approx(0.1 / 3, abs=1e-6)
    loss.backward()
    assert s.grad[0].tolist() == pytest.approx([-0.8 / 3, -0.05 / 3, 0.2 / 3], abs=1e-6)  # -(r - b) / 3
    # the visit moves b half-way (lr 0.5) to the group mean: 0.2 + 0.5 (0.416667 - 0.2) = 0.308333,
    # which is one SGD step of size lr / 2 = 0.25 on mean_k (r_k - b)^2 (its gradient -2 (0.416667 - 0.2))
    assert baseline_update(b, r, 0.5).item() == pytest.approx(0.308333, abs=1e-6)
    leaf = b.clone().requires_grad_()
    learned_baseline_loss(s.detach(), r, leaf)[1].backward()
    assert (b - 0.25 * leaf.grad).item() == pytest.approx(0.308333, abs=1e-6)
    assert baseline_update(b, r, 0.0).item() == pytest.approx(0.2)  # lr 0: b stays (REINFORCE with b fixed)


def test_a_baseline_step_updates_the_drawn_groups_once(tiny):
    from grpo_kit.lab.offline import offline_step

    model, tok = tiny
    policy = __import__("copy").deepcopy(model)
    group = {"prompt": "1+1=", "responses": ["2", "3", "4"], "preference_matrix": GROUP[0]}
    baselines = torch.zeros(2)  # a file of two groups; the second is not drawn
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    # group 0 twice in the batch: its baseline moves once, 0 + 0.5 (1.25 / 3) = 0.208333
    m = offline_step(policy, None, tok, opt, [group, group], loss="baseline", baselines=baselines,
                     group_ids=[0, 0], baseline_lr=0.5)
    assert baselines.tolist() == pytest.approx([0.208333, 0.0], abs=1e-6)
    assert m["baseline"] == 0.0 and m["pairs"] == 6 and m["winner_nll"] > 0
