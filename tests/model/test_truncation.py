"""Sampling controls on a small categorical, worked out by hand."""
import math

import pytest
import torch

from grpo_kit.model.truncation import (
    check_sampling_controls,
    keep_mask,
    penalize_repeats,
    truncated_mass,
)

# probabilities 0.5, 0.25, 0.15, 0.1 (logits are their logs)
P = torch.tensor([[0.5, 0.25, 0.15, 0.1]])
Z = P.log()


def kept(**kw):
    return keep_mask(Z, **kw)[0].tolist()


def test_top_k_keeps_the_k_most_likely():
    assert kept(top_k=2) == [True, True, False, False]
    assert kept(top_k=0) == [True] * 4 and kept(top_k=10) == [True] * 4


def test_top_p_keeps_the_token_that_crosses_it():
    # cumulative 0.5, 0.75, 0.9, 1.0: top_p 0.45 keeps the first only (it crosses 0.45); 0.6 keeps two; 0.76 three
    # (values away from the boundaries, where float32 rounding of 0.5 would decide)
    assert kept(top_p=0.45) == [True, False, False, False]
    assert kept(top_p=0.6) == [True, True, False, False]
    assert kept(top_p=0.76) == [True, True, True, False]
    assert kept(top_p=1.0) == [True] * 4


def test_min_p_is_relative_to_the_most_likely():
    # min_p 0.28: threshold 0.14, so 0.15 stays and 0.1 goes; min_p 0.45: threshold 0.225, 0.15 goes too
    assert kept(min_p=0.28) == [True, True, True, False]
    assert kept(min_p=0.45) == [True, True, False, False]


def test_controls_apply_in_order_each_on_what_the_last_kept():
    # top_k 3 keeps 0.5, 0.25, 0.15; renormalised 0.5/0.9 = 0.556, 0.278, 0.167; top_p 0.8 then keeps two
    assert kept(top_k=3, top_p=0.8) == [True, True, False, False]
    # top_k 2 renormalises to 2/3, 1/3; min_p 0.6 keeps the tokens >= 0.4: only the first
    assert kept(top_k=2, min_p=0.6) == [True, False, False, False]


def test_truncated_mass_is_what_the_sampler_cannot_draw():
    assert truncated_mass(Z, keep_mask(Z, top_k=2))[0].item() == pytest.approx(0.25)
    assert truncated_mass(Z, keep_mask(Z))[0].item() == 0.0


def test_repetition_penalty_as_ctrl():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    seen = torch.tensor([[True, True, False]])
    out = penalize_repeats(logits, seen, 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5]]  # positive / p, negative * p, unseen unchanged
    assert torch.equal(penalize_repeats(logits, seen, 1.0), logits)


@pytest.mark.parametrize("kw, word", [({"top_k": -1}, "top_k"), ({"top_k": 1.5}, "top_k"), ({"top_p": 0.0}, "top_p"),
                                      ({"top_p": 1.2}, "top_p"), ({"min_p": 1.0}, "min_p"), ({"min_p": -0.1}, "min_p"),
                                      ({"repetition_penalty": 0.0}, "repetition_penalty")])
def test_bad_values_name_the_control_and_its_range(kw, word):
    with pytest.raises(ValueError, match=word):
        check_sampling_controls(**kw)


def test_sampling_follows_the_kept_distribution():
    # 20000 draws from top_p 0.76: the three kept tokens in proportion 0.5 : 0.25 : 0.15 (of 0.9), the fourth never
    keep = keep_mask(Z, top_p=0.76)
    q = torch.softmax(Z.masked_fill(~keep, float("-inf")), -1)[0]
    draws = torch.multinomial(q, 20000, replacement=True, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=4).float() / 20000
    want = torch.tensor([0.5, 0.25, 0.15, 0.0]) / 0.9
    se = (want * (1 - want) / 20000).sqrt()
    assert freq[3] == 0 and ((freq - want).abs() <= 4 * se + 1e-9).all()
    assert math.isclose(float(q.sum()), 1.0, rel_tol=1e-6)


def test_top_k_one_samples_the_greedy_answer_and_no_controls_change_nothing():
    from grpo_kit import load_model
    from grpo_kit.model.sampling import SamplingControls, sample_groups

    policy, tok = load_model("tiny")
    prompts = ["12+34=", "47+85="]
    greedy = sample_groups(policy, tok, prompts, 1, 6, temperature=0.0)
    top1 = sample_groups(policy, tok, prompts, 4, 6, 1.0, torch.Generator().manual_seed(0), SamplingControls(top_k=1))
    assert top1.completions == [c for c in greedy.completions for _ in range(4)]
    assert top1.truncated_mass is not None and float(top1.truncated_mass.max()) > 0
    plain = sample_groups(policy, tok, prompts, 4, 6, 1.0, torch.Generator().manual_seed(0))
    off = sample_groups(policy, tok, prompts, 4, 6, 1.0, torch.Generator().manual_seed(0), SamplingControls())
    assert plain.completions == off.completions and off.truncated_mass is None


def test_a_run_with_top_p_and_top_k_logs_the_truncated_mass():
    from grpo_kit import GRPOConfig, setup, train

    common = dict(steps=2, num_prompts=2, num_generations=4, eval_every=0, eval_size=4, threads=1, checkpoint_every=0)
    cfg = GRPOConfig(**common, top_p=0.9, top_k=20)  # the settings TRL users bring (the tiny model has 99 tokens)
    history = list(train(cfg, setup(cfg)))
    assert len(history) == 2 and all(0.0 < m["sampling/truncated_mass"] < 1.0 for m in history)
    cfg = GRPOConfig(**common, top_p=0.9)  # top_p alone keeps at least 90% of each token's distribution
    assert all(m["sampling/truncated_mass"] <= 0.1 + 1e-6 for m in train(cfg, setup(cfg)))
    plain = GRPOConfig(**common)
    assert all("sampling/truncated_mass" not in m for m in train(plain, setup(plain)))


@pytest.mark.parametrize("field, value", [("top_p", 0.0), ("top_k", -1), ("min_p", 1.0), ("repetition_penalty", 0.0)])
def test_the_config_refuses_a_control_out_of_range(field, value):
    from grpo_kit import GRPOConfig
    from grpo_kit.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        GRPOConfig(**{field: value}).validate()
