"""Sampling controls on a small categorical, worked out by hand."""
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
    # top_p 0.76 keeps 0.5, 0.25, 0.15 (the mass before 0.15 is 0.75); min_p 0.25 then drops tokens under a quarter
    # of the top one: 0.15 / 0.5 = 0.3 stays. (min_p first, as vLLM orders them, drops 0.1 (0.2 < 0.25) and
    # renormalises to 0.556, 0.278, 0.167; top_p 0.76 then keeps two: the order matters here)
    assert kept(top_p=0.76, min_p=0.25) == [True, True, True, False]
    vllm_order = keep_mask(Z.masked_fill(~keep_mask(Z, min_p=0.25), float("-inf")), top_p=0.76)[0].tolist()
    assert vllm_order == [True, True, False, False]


def test_truncated_mass_is_what_the_sampler_cannot_draw():
    assert truncated_mass(Z, keep_mask(Z, top_k=2))[0].item() == pytest.approx(0.25)
    assert truncated_mass(Z, keep_mask(Z))[0].item() == 0.0


def test_repetition_penalty_as_ctrl():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    seen = torch.tensor([[True, True, False]])
    out = penalize_repeats(logits, seen, 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5]]  # positive / p, negative * p, unseen unchanged
    assert torch.equal(penalize_repeats(logits, seen, 1.0), logits)


BAD = [("top_k", -1), ("top_k", 1.5), ("top_k", True), ("top_p", 0.0), ("top_p", 1.2), ("top_p", float("nan")),
       ("min_p", 1.0), ("min_p", -0.1), ("repetition_penalty", 0.0), ("repetition_penalty", float("inf"))]


@pytest.mark.parametrize("field, value", BAD)
def test_bad_values_are_refused_in_the_configs_words(field, value):
    from grpo_kit import GRPOConfig
    from grpo_kit.errors import ConfigError
    from grpo_kit.model.sampling import SamplingControls

    with pytest.raises(ConfigError) as config_error:
        GRPOConfig(**{field: value}).validate()
    rule = str(config_error.value).split(": ", 1)[1]
    with pytest.raises(ValueError) as error:
        SamplingControls(**{field: value})
    assert str(error.value) == f"{field}={value!r}: {rule}"


def test_values_in_range_pass_and_the_defaults_are_off():
    from grpo_kit.model.sampling import SamplingControls

    assert check_sampling_controls(20, 0.9, 0.05, 1.1) is None and SamplingControls(20, 0.9, 0.05, 1.1).active
    assert not SamplingControls().active


def constant_model(z: torch.Tensor):
    """A Llama whose next-token logits are ``z`` (V,) whatever it reads: every embedding is ones, the
    layers add nothing to the residual (o_proj and down_proj are zero), the final RMSNorm (eps 0) leaves
    ones and the head's first column is z. Token V-1 is its EOS and padding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    V = z.numel()
    cfg = LlamaConfig(vocab_size=V, hidden_size=4, intermediate_size=4, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, max_position_embeddings=8, rms_norm_eps=0.0, tie_word_embeddings=False,
                      bos_token_id=0, eos_token_id=V - 1, pad_token_id=V - 1)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, 0] = z
    return model


def draw(controls, n=20000, temperature=1.0, seed=0):
    """n one-token draws from the constant model after the prompt [token 0]: tokens (n,), log-probs, masses."""
    from grpo_kit.model.sampling import generate

    model = constant_model(Z[0])
    ids = torch.zeros(n, 1, dtype=torch.long)
    out = generate(model, ids, torch.ones_like(ids), 1, 3, 3, temperature, torch.Generator().manual_seed(seed),
                   group_size=n, return_logp=True, controls=controls)
    return out[0][:, 0], out[2][:, 0], (out[3][:, 0] if len(out) > 3 else None)


def assert_frequencies(tokens, want):
    freq = torch.bincount(tokens, minlength=4).float() / len(tokens)
    se = (want * (1 - want) / len(tokens)).sqrt()
    assert ((freq - want).abs() <= 4 * se + 1e-9).all(), (freq, want)


def test_the_sampler_draws_from_the_kept_distribution():
    from grpo_kit.model.sampling import SamplingControls

    assert torch.allclose(torch.softmax(constant_model(Z[0])(torch.zeros(1, 2, dtype=torch.long)).logits, -1), P)
    tokens, logp, mass = draw(SamplingControls(top_p=0.76))  # keeps 0.5, 0.25, 0.15 of 0.9; never token 3
    assert (tokens != 3).all()
    assert_frequencies(tokens, torch.tensor([0.5, 0.25, 0.15, 0.0]) / 0.9)
    assert torch.allclose(logp, (P[0] / 0.9).log()[tokens])  # log-probs under what was drawn from
    assert torch.allclose(mass, torch.full_like(mass, 0.1))  # what top_p cut, under the scored distribution
    tokens, _, mass = draw(None)  # no controls: the model's own distribution, no mass reported
    assert_frequencies(tokens, P[0]) and mass is None


def test_the_truncated_mass_is_measured_at_the_temperature_the_loss_scores_at():
    from grpo_kit.model.sampling import SamplingControls

    # at temperature 2 the scored probabilities are sqrt(p) renormalised: 0.7071, 0.5, 0.3873, 0.3162 over 1.9106;
    # top_k 2 cuts (0.3873 + 0.3162) / 1.9106 = 0.3682 (at temperature 1 it would be 0.25)
    tokens, _, mass = draw(SamplingControls(top_k=2), n=4, temperature=2.0)
    assert (tokens < 2).all() and torch.allclose(mass, torch.full_like(mass, 0.3682), atol=1e-4)


def test_the_repetition_penalty_in_the_sampler():
    from grpo_kit.model.sampling import SamplingControls

    # the prompt holds token 0 (logit log 0.5 < 0): penalty 2 doubles it, so token 0 weighs 0.25 like token 1;
    # renormalised over 0.75: 1/3, 1/3, 0.2, 0.1333. Nothing is cut: the truncated mass is 0
    tokens, logp, mass = draw(SamplingControls(repetition_penalty=2.0))
    want = torch.tensor([0.25, 0.25, 0.15, 0.1]) / 0.75
    assert_frequencies(tokens, want)
    assert torch.allclose(logp, want.log()[tokens]) and (mass == 0).all()
    # greedy rows: penalty 3 makes token 0 weigh 0.125 and token 1 (0.25) the argmax; without it, token 0
    assert draw(SamplingControls(repetition_penalty=3.0), n=2, temperature=0.0)[0].tolist() == [1, 1]
    assert draw(None, n=2, temperature=0.0)[0].tolist() == [0, 0]


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


def test_top_p_cuts_at_most_one_minus_top_p_at_every_position():
    from grpo_kit import GRPOConfig, setup, train

    # top_p keeps the token that crosses it, so at least 90% of each position's mass stays
    cfg = GRPOConfig(steps=2, num_prompts=2, num_generations=4, eval_every=0, eval_size=4, threads=1,
                     checkpoint_every=0, top_p=0.9)
    history = list(train(cfg, setup(cfg)))
    assert len(history) == 2 and all(0.0 < m["sampling/truncated_mass"] <= 0.1 + 1e-6 for m in history)
