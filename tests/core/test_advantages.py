import pytest
import torch

from grpo_kit.core.advantages import (
    batch_scaled,
    compute_advantages,
    group_zscore,
    mean_centred,
    zero_std_groups,
)


def test_group_zscore_by_hand():
    # group [1,0,0,1]: mean 0.5, unbiased std sqrt(4*0.25/3) = 0.57735 -> +-0.5/0.57745 = +-0.8659
    # group [0,1,2]:   mean 1,   std 1 -> [-1, 0, 1]/1.0001
    adv = group_zscore(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert adv.flatten().tolist() == pytest.approx([0.8659, -0.8659, -0.8659, 0.8659], abs=1e-4)
    adv = group_zscore(torch.tensor([[0.0, 1.0, 2.0]]))
    assert adv.flatten().tolist() == pytest.approx([-0.9999, 0.0, 0.9999], abs=1e-4)


def test_zero_variance_group_gives_zeros_not_nan():
    r = torch.tensor([[3.0, 3.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0]])
    for name in ("group", "batch", "none"):
        adv = compute_advantages(r, name)
        assert torch.isfinite(adv).all() and (adv == 0).all(), name
    assert zero_std_groups(r).tolist() == [True, True]


def test_batch_scaled_by_hand():
    # centred [[-1, 1], [0, 0]]; std of [0,2,0,0]: mean .5, sq devs .25+2.25+.25+.25 = 3, /3 -> 1
    adv = batch_scaled(torch.tensor([[0.0, 2.0], [0.0, 0.0]]))
    assert adv.flatten().tolist() == pytest.approx([-0.9999, 0.9999, 0.0, 0.0], abs=1e-4)


def test_mean_centred_by_hand():
    assert mean_centred(torch.tensor([[1.0, 0.0, 0.0, 1.0]])).tolist() == [[0.5, -0.5, -0.5, 0.5]]


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="at least 2"):
        compute_advantages(torch.tensor([[1.0], [0.0]]))
    with pytest.raises(ValueError, match="NaN"):
        compute_advantages(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="scale_rewards"):
        compute_advantages(torch.tensor([[1.0, 0.0]]), "zscore")


def test_nanstd_by_hand():
    from grpo_kit.core.advantages import nanstd

    x = torch.tensor([[1.0, 3.0, float("nan")], [5.0, float("nan"), float("nan")]])  # (2, 3)
    # row 0: mean 2, squared deviations 1 + 1: unbiased sqrt(2 / 1), population sqrt(2 / 2) = 1
    assert nanstd(x, dim=1).tolist() == pytest.approx([2 ** 0.5, 0.0])  # one value: 0
    assert nanstd(x, dim=1, unbiased=False).tolist() == pytest.approx([1.0, 0.0])
    assert nanstd(torch.tensor([2.0, 4.0, 6.0]), unbiased=False).item() == pytest.approx((8 / 3) ** 0.5)
