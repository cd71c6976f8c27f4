"""The population of LoRA policies (population.py): weights, guard and reset rule against numbers
worked out by hand, and one real step on the tiny model."""
import math

import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.lab.population import (
    add_variants,
    copy_variant,
    group_advantages,
    leader,
    naive_group_zscore,
    owners,
    perturbed_copy,
    population_step,
    reset_pair,
    variant_scores,
    variant_weights,
)
from grpo_kit.loop.train import lr_lambda, setup

S3 = math.sqrt(3) / 2  # (1 - 0.5) / std([1, 1, 0, 0]) with the unbiased std sqrt(1/3)


def test_owners_split_each_group_among_the_variants():
    assert owners(8, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="multiple of the number of variants"):
        owners(6, 4)


def test_scores_and_softmax_weights_by_hand():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0],   # variant 0 right twice, variant 1 wrong twice
                            [1.0, 0.0, 1.0, 0.0]])  # one each: advantages +-S3 cancel within each variant
    adv = group_advantages(rewards)
    torch.testing.assert_close(adv, torch.tensor([[S3, S3, -S3, -S3], [S3, -S3, S3, -S3]]), atol=1e-3, rtol=0)
    scores = variant_scores(adv, owners(4, 2), 2)
    torch.testing.assert_close(scores, torch.tensor([S3 / 2, -S3 / 2]), atol=1e-3, rtol=0)  # (S3 + S3 + 0) / 4
    w = variant_weights(scores, tau=1.0)
    assert w[0].item() == pytest.approx(1 / (1 + math.exp(-S3)), abs=1e-3)  # 0.7040
    assert w.sum().item() == pytest.approx(1.0)
    # a low temperature backs the leader: the score gap S3 over tau = 0.1
    assert variant_weights(scores, tau=0.1)[0].item() == pytest.approx(1 / (1 + math.exp(-S3 / 0.1)), abs=1e-6)  # 0.99983


def test_a_zero_variance_group_makes_the_naive_weights_nan_and_the_guarded_ones_finite():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0],   # everyone right: nothing to tell apart
                            [1.0, 1.0, 0.0, 0.0]])
    naive = variant_weights(variant_scores(naive_group_zscore(rewards), owners(4, 2), 2))
    assert torch.isnan(naive).all()  # 0 / 0 in the first group poisons every weight
    adv = group_advantages(rewards)
    assert adv[0].tolist() == [0.0, 0.0, 0.0, 0.0]  # the zero-variance group credits nobody
    w = variant_weights(variant_scores(adv, owners(4, 2), 2))
    assert torch.isfinite(w).all() and w[0].item() == pytest.approx(1 / (1 + math.exp(-S3)), abs=1e-3)
    flat = variant_weights(variant_scores(group_advantages(torch.ones(3, 4)), owners(4, 2), 2))
    assert flat.tolist() == [0.5, 0.5]  # all groups flat: equal weights


def test_reset_pair_and_perturbed_copy():
    assert reset_pair(torch.tensor([0.3, -0.2, 0.9, -0.2])) == (1, 2)  # tie for worst: the lower index
    w = {"A": torch.tensor([1.0, 2.0, 3.0]), "B": torch.zeros(3)}
    out = perturbed_copy(w, 0.5, torch.Generator().manual_seed(0))
    noise = torch.randn(3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out["A"], w["A"] + 0.5 * 1.0 * noise)  # std([1, 2, 3]) = 1
    assert torch.equal(out["B"], torch.zeros(3))  # LoRA's zero B stays zero
    assert perturbed_copy(w, 0.0, torch.Generator())["A"].tolist() == [1.0, 2.0, 3.0]


def test_one_population_step_trains_every_variant_and_a_reset_copies_the_best():
    cfg = GRPOConfig(num_prompts=4, num_generations=4, device="cpu", threads=1, eval_size=4, steps=3,
                     lora={"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, learning_rate=1e-2)
    run = setup(cfg, reward_funcs=[lambda prompts, completions, **kw: [float(len(c)) for c in completions]])
    variants = add_variants(run, 2)
    names = variants.names
    assert names == ["default", "variant1"]
    params = dict(run.policy.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items() if "lora_B" in n}
    m = population_step(run, variants, tau=1.0, reset_every=0, sigma=0.1)
    assert len(m["weights"]) == 2 and sum(m["weights"]) == pytest.approx(1.0)
    # each variant's step ran at K w_k times the scheduled rate (1e-2 at the first step)
    assert m["learning_rates"] == pytest.approx([1e-2 * 2 * w for w in m["weights"]])
    assert variants.optimizers["default"][0].param_groups[0]["lr"] == pytest.approx(1e-2 * lr_lambda(cfg)(1))
    moved = {name: any(not torch.equal(before[n], params[n]) for n in before if f".{name}." in n) for name in names}
    assert moved == {"default": True, "variant1": True}  # lengths differ within groups: every variant learns
    copy_variant(run.policy, "default", "variant1", 0.0, torch.Generator())
    for n, w in params.items():
        if ".default." in n:
            assert torch.equal(w, params[n.replace(".default.", ".variant1.")])
    variants.score_sums = torch.tensor([0.2, -0.1])
    assert leader(variants) == "default"
