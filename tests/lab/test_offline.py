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
