"""Per-token advantages through the training step: (P, G, Tc) or (B, Tc) instead of (P, G).
The gradient by hand, per token, is in tests/core/test_losses.py."""
import pytest
import torch

from grpo_kit.loop.step import flat_advantages, train_step


def test_flat_advantages_shapes_and_errors():
    assert flat_advantages(torch.zeros(2, 3), 6, 4).shape == (6,)
    assert flat_advantages(torch.zeros(6), 6, 4).shape == (6,)
    assert flat_advantages(torch.zeros(2, 3, 4), 6, 4).shape == (6, 4)
    assert flat_advantages(torch.zeros(6, 4), 6, 4).shape == (6, 4)
    with pytest.raises(ValueError, match=r"\(P, G, 4\)"):
        flat_advantages(torch.zeros(2, 3, 5), 6, 4)


@pytest.mark.parametrize("loss_type,level", [("grpo", "token"), ("bnpo", "token"), ("dr_grpo", "token"),
                                             ("dapo", "token"), ("grpo", "sequence")])
def test_a_per_token_advantage_constant_over_tokens_is_the_per_completion_step(tiny, small_cfg, loss_type, level):
    from grpo_kit.model.sampling import sample_groups

    model, tok = tiny
    cfg = small_cfg.replace(loss_type=loss_type, importance_sampling_level=level, num_iterations=2, beta=0.04,
                            micro_batch_size=8)
    ro = sample_groups(model, tok, ["12+34=", "7+8=", "21+5=", "30+30="], 4, 6, 1.0,
                       torch.Generator().manual_seed(0))
    adv = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))  # (P, G)
    per_token = adv[..., None].expand(4, 4, ro.completion_ids.shape[1])  # (P, G, Tc)
    after = []
    for a in (adv, per_token):
        policy = type(model)(model.config)
        policy.load_state_dict(model.state_dict())
        ref = type(model)(model.config)
        ref.load_state_dict(model.state_dict())
        opt = torch.optim.SGD(policy.parameters(), lr=1e-2)  # AdamW would blow float rounding up to lr-sized steps
        m = train_step(policy, ref, opt, ro, a, cfg)
        after.append((m, [p.detach().clone() for p in policy.parameters()]))
    assert after[0][0]["loss"] == pytest.approx(after[1][0]["loss"], rel=1e-6, abs=1e-9)
    for p, q in zip(after[0][1], after[1][1]):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)
