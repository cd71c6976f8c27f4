"""The sampling controls against TRL 1.16's own code: a real ``trl.GRPOTrainer`` built from
``trl.GRPOConfig(**trl_kwargs(cfg))`` for a kit config with ``top_p 0.9, top_k 20, min_p 0.05,
repetition_penalty 1.1``.

- Its ``__init__`` builds the ``GenerationConfig`` it samples with (``GRPOTrainer.__init__``, the branch
  without vLLM) and keeps the values it hands vLLM: both carry the kit's values.
- That ``GenerationConfig``, run through transformers' own ``generate`` (``output_scores``: the scores after
  every logits processor), keeps the tokens the kit's ``keep_mask`` keeps and gives the distribution the kit
  samples from, step by step, with each control alone and all four together, on the shipped tiny model and
  on a random one (whose flat logits make top-k the control that cuts).
- TRL scores the sampled tokens (``_get_per_token_logps_and_entropies``) under the temperature-scaled full
  distribution: its log-prob of a token is the sampler's plus log(1 - the mass the truncation removed), the
  mass the kit logs as ``sampling/truncated_mass``.
"""
from __future__ import annotations

import copy

import pytest
import torch
import trl
from transformers import LlamaConfig, LlamaForCausalLM

from datasets import Dataset
from grpo_kit import load_model
from grpo_kit.config import GRPOConfig
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.model.sampling import completion_mask_from_ids
from grpo_kit.model.truncation import keep_mask, penalize_repeats, truncated_mass

CONTROLS = {"top_p": 0.9, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1}
OFF = {"top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0}  # TRL's values for "off"
T = 0.7
PROMPTS = ["12+34=", "47+85=", "90+11=", "5+77=?"]  # the same length: no padding, which HF's penalty would count
STEPS = 4


def trainer_for(model, tok, tmp_path):
    cfg = GRPOConfig(num_prompts=2, num_generations=4, max_completion_length=STEPS, temperature=T, device="cpu",
                     **CONTROLS)
    args = trl.GRPOConfig(**trl_kwargs(cfg), output_dir=str(tmp_path), report_to="none", save_strategy="no",
                          logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    return trl.GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                           train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS[:2]]),
                           processing_class=tok)


@pytest.fixture(scope="module")
def tiny_trainer(tmp_path_factory):
    model, tok = load_model("tiny")
    return trainer_for(model, tok, tmp_path_factory.mktemp("trl")), tok


def random_model(tok):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                        max_position_embeddings=64, eos_token_id=tok.eos_token_id,
                                        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)).eval()


def test_trl_samples_with_the_kits_values(tiny_trainer):
    trainer, _ = tiny_trainer
    g = trainer.generation_config  # what GRPOTrainer passes to model.generate
    assert g.do_sample and g.temperature == T
    assert (g.top_p, g.top_k, g.min_p, g.repetition_penalty) == tuple(CONTROLS.values())
    # what it would hand vLLM (VLLMGeneration(top_p=self.top_p, ...))
    assert (trainer.top_p, trainer.top_k, trainer.min_p, trainer.repetition_penalty) == tuple(CONTROLS.values())


def hf_steps(model, tok, gen_config):
    """transformers' generate with ``gen_config``: per step, (ids so far (B, Tp + t), raw logits (B, V), the
    scores after every logits processor (B, V), -inf where a token was removed), and the sampled tokens."""
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    assert bool(enc["attention_mask"].all())
    gen_config = copy.deepcopy(gen_config)
    gen_config.update(max_new_tokens=STEPS, output_scores=True, output_logits=True, return_dict_in_generate=True)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**enc, generation_config=gen_config)
    Tp = enc["input_ids"].shape[1]
    steps = [(out.sequences[:, :Tp + t], raw.float(), s.float()) for t, (raw, s) in enumerate(zip(out.logits, out.scores))]
    return steps, out.sequences[:, Tp:]


def kit_step(ids, raw, temperature, top_k=0, top_p=1.0, min_p=None, repetition_penalty=1.0):
    """The kit's sampler on the same logits (model/sampling.py ``generate``): the kept tokens, the distribution it
    draws from, and the truncated mass under the scored distribution."""
    seen = torch.zeros_like(raw, dtype=torch.bool).scatter(1, ids, True)  # (B, V) tokens of the prompt and completion
    z = penalize_repeats(raw, seen, repetition_penalty) / temperature  # (B, V)
    keep = keep_mask(z, top_k, top_p, min_p or 0.0)
    return keep, torch.softmax(z.masked_fill(~keep, float("-inf")), -1), truncated_mass(raw / temperature, keep)


@pytest.mark.parametrize("model_name", ["tiny", "random"])
@pytest.mark.parametrize("only", [None, "top_p", "top_k", "min_p", "repetition_penalty"])
def test_transformers_samples_from_the_distribution_the_kit_samples_from(tiny_trainer, model_name, only):
    trainer, tok = tiny_trainer
    model = load_model("tiny")[0].eval() if model_name == "tiny" else random_model(tok)  # the trainer's is patched
    gen_config = copy.deepcopy(trainer.generation_config)
    controls = dict(CONTROLS) if only is None else {**OFF, only: CONTROLS[only]}
    for name, value in controls.items():
        setattr(gen_config, name, value)
    acted = False
    steps, _ = hf_steps(model, tok, gen_config)
    for ids, raw, scores in steps:
        keep, q, _ = kit_step(ids, raw, T, **controls)
        assert torch.equal(keep, torch.isfinite(scores))
        torch.testing.assert_close(q, torch.softmax(scores, -1), rtol=0, atol=1e-6)
        acted |= bool((~keep).any()) or bool((q - torch.softmax(raw / T, -1)).abs().max() > 1e-4)
    if model_name == "tiny" or only in (None, "top_k"):  # the random model's flat logits: top-k is what cuts there
        assert acted, "the control changed nothing here: the comparison would show nothing"


def test_trl_scores_the_tokens_under_the_full_distribution(tiny_trainer):
    trainer, tok = tiny_trainer
    gen_config = copy.deepcopy(trainer.generation_config)
    gen_config.repetition_penalty = 1.0  # truncation alone: the sampler's q is the scored p cut and renormalised
    steps, completion = hf_steps(load_model("tiny")[0].eval(), tok, gen_config)
    ids = torch.cat([steps[0][0], completion], 1)  # (B, Tp + Tc)
    Tc = completion.shape[1]
    m = completion_mask_from_ids(completion, tok.eos_token_id).bool()  # (B, Tc) up to and including EOS
    with torch.no_grad():  # TRL's scoring, with its fused LM head at the temperature
        trl_logp = trainer._get_per_token_logps_and_entropies(trainer.model, ids, torch.ones_like(ids), Tc)[0]
    kit = [kit_step(i, raw, T, **{**CONTROLS, "repetition_penalty": 1.0}) for i, raw, _ in steps]
    q = torch.stack([k[1].gather(1, completion[:, t:t + 1])[:, 0] for t, k in enumerate(kit)], 1)  # (B, Tc)
    mass = torch.stack([k[2] for k in kit], 1)  # (B, Tc)
    full = torch.stack([torch.log_softmax(raw / T, -1).gather(1, completion[:, t:t + 1])[:, 0]
                        for t, (_, raw, _) in enumerate(steps)], 1)  # (B, Tc)
    trl_logp = trl_logp.float()[m]
    torch.testing.assert_close(trl_logp, full[m], rtol=0, atol=1e-4)  # the full distribution
    torch.testing.assert_close(trl_logp, (q.log() + torch.log1p(-mass))[m], rtol=0, atol=1e-4)
    assert float(mass[m].max()) > 0.05  # the truncation removed mass: TRL's log-probs are not the sampler's
