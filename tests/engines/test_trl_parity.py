"""The kit against TRL 1.16's own ``GRPOTrainer`` code, on the same rollouts, in float64.

Each case trains one generated batch both ways, from the same random tiny Llama:

- TRL: a real ``trl.GRPOTrainer`` built (full ``__init__``) from ``trl.GRPOConfig(**trl_kwargs(cfg))``
  and run with ``trainer.train()``: its sampler, ``_generate_and_score_completions`` (reward
  functions called by ``_calculate_rewards``, group/batch/none scaling, multi-objective
  aggregation, ``num_items_in_batch``, old and reference log-probs), ``_prepare_inputs`` (the
  row shuffle and the split into micro-batches, reused over ``num_iterations``), ``compute_loss``
  and the Trainer's gradient accumulation, optimizer and LR scheduler. Two things are replaced:
  ``_generate`` returns fixed completions (sampling is random, and what is compared is what
  happens to a batch once sampled), and, in float64, the fused LM head TRL installs on the model
  (``add_fused_lm_head``, whose kernel computes in float32 whatever the model's dtype) by the
  same log-softmax in float64; ``test_float32_with_trls_own_fused_head`` keeps TRL's kernel.
- the kit: ``advantages.estimate_advantages`` on the same rewards and ``step.train_step`` with
  ``cfg`` and the same kind of optimizer and schedule.

Compared: advantages and the token count (1e-9), the loss, every optimizer update's gradient
and the final weights (1e-6 absolute). Both optimizers are plain SGD with a large rate that
record the gradient they are given, so later updates are off-policy and clipping acts
(asserted). ``max_grad_norm`` is huge so clipping of the norm does not hide a difference.

Micro-batches: TRL shuffles the rows of a generated batch before cutting it into micro-batches;
the kit keeps each group together. Losses that sum over rows (grpo, dr_grpo, dapo) do not
depend on that, and the kit runs unshuffled against TRL's shuffle. bnpo and the entropy bonus
average over each micro-batch's tokens, so they do depend on it: ``trl_kwargs()`` refuses them with
more than one micro-batch, and here the kit is given TRL's permutation (read from TRL's own
``shuffle_sequence_dict``) to show that its arithmetic matches on the same partition.

The paper-formula reference (written in this repository, no TRL) is tests/core/test_paper_reference.py.
"""
from __future__ import annotations

import copy
import types

import pytest
import torch
import trl
import trl.trainer.grpo_trainer as trl_grpo
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import FusedCausalLMOutput

from datasets import Dataset
from grpo_kit.config import GRPOConfig
from grpo_kit.core.advantages import estimate_advantages
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.loop.step import train_step
from grpo_kit.loop.train import lr_lambda
from grpo_kit.model.sampling import Rollouts, encode_prompts
from grpo_kit.model.tiny import build_tokenizer

P, G, L = 3, 4, 5  # prompts, group size, max completion length; B = 12
B = P * G
PROMPTS = ["12+34=", "5+7=", "8+90=?"]  # different lengths: left padding (TRL passes no position ids; RoPE
#                                         depends on relative positions only, so both sides agree)
LR = 3.0


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of the gradients of every update."""

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.grads = []

    def step(self, closure=None):
        self.grads.append([p.grad.detach().clone() for p in self.param_groups[0]["params"]])
        return super().step(closure)


def exact_head(model, temperature):
    """In place of TRL's fused LM head: the same outputs (log-probs and entropies of the labels at
    ``temperature``, 0 where the label is -100) from the model's plain forward, in its dtype."""
    plain = type(model).forward

    def forward(self, *args, fused_lm_head=False, labels=None, **kw):
        if not fused_lm_head:
            return plain(self, *args, **kw)
        logits = plain(self, *args, use_cache=False, **kw).logits[:, :-1] / temperature  # (b, T-1, V)
        lab = labels[:, 1:]
        mask = lab != -100
        logp = torch.log_softmax(logits, -1)
        picked = logp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        zero = torch.zeros((), dtype=logits.dtype)
        return FusedCausalLMOutput(log_probs=torch.where(mask, picked, zero), entropy=torch.where(mask, entropy, zero),
                                   label_mask=mask)

    model.forward = types.MethodType(forward, model)


def tiny_model(tok, dtype):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                      pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).to(dtype)


def fixed_completions(tok):
    """G completions per prompt (token ids up to and including EOS), with short, EOS-ended and
    truncated (no EOS, L tokens) rows; and K=2 rewards per completion, multiples of 1/4."""
    g = torch.Generator().manual_seed(5)
    comps, rewards = {}, {}
    for p in PROMPTS:
        rows = []
        for i in range(G):
            n = [1, 3, L, 2][i]  # n < L: n tokens and EOS; n = L: truncated, no EOS
            ids = torch.randint(4, len(tok), (n,), generator=g).tolist()
            rows.append(ids + [tok.eos_token_id] if n < L else ids)
        comps[p] = rows
        for ids in rows:
            rewards[tuple(ids)] = [float(torch.randint(0, 9, (), generator=g)) / 4,
                                   float(torch.randint(0, 5, (), generator=g)) / 4]
    comps[PROMPTS[1]][2] = comps[PROMPTS[1]][0][:1] + [tok.eos_token_id]  # a row of one token + EOS
    rewards[tuple(comps[PROMPTS[1]][2])] = [0.5, 1.0]
    for q in range(G):  # one group with equal rewards: zero std
        rewards[tuple(comps[PROMPTS[2]][q])] = [1.0, 0.25]
    return comps, rewards


def reward_funcs(rewards, K):
    def first(prompts, completions, completion_ids, **kw):
        return [rewards[tuple(ids)][0] for ids in completion_ids]

    def second(prompts, completions, completion_ids, **kw):
        return [rewards[tuple(ids)][1] for ids in completion_ids]

    return [first, second][:K]


# loss_type, level, scale_rewards, beta, epsilon_high, delta, entropy_coef, micro_batch_size, num_iterations, extra
CASES = [
    ("grpo", "token", "group", 0.0, None, None, 0.0, None, 1, {}),
    ("grpo", "sequence", "batch", 0.04, 0.28, None, 0.0, 6, 2, {}),
    ("grpo", "token", "none", 0.04, None, 1.5, 0.05, None, 2, {}),
    ("bnpo", "token", "group", 0.04, 0.28, 1.5, 0.0, 4, 2, {}),
    ("bnpo", "sequence", "none", 0.0, None, None, 0.05, 6, 1, {}),
    ("bnpo", "token", "batch", 0.0, None, None, 0.0, None, 3, {}),
    ("dr_grpo", "token", "batch", 0.04, None, 1.5, 0.0, 6, 2, {}),
    ("dr_grpo", "sequence", "group", 0.0, 0.28, None, 0.05, None, 2, {}),
    ("dr_grpo", "token", "none", 0.04, 0.28, None, 0.0, 4, 1, {"mask_truncated_completions": True}),
    # a limit above every completion: dr_grpo divides by the limit, not by the batch's padded length
    ("dr_grpo", "token", "group", 0.0, None, None, 0.0, None, 1, {"max_completion_length": L + 3}),
    ("dapo", "token", "group", 0.04, 0.28, 1.5, 0.0, 4, 3, {}),
    ("dapo", "sequence", "none", 0.04, None, None, 0.0, 6, 2, {"temperature": 0.7}),
    ("dapo", "token", "batch", 0.0, None, None, 0.05, 6, 2, {}),
    ("dapo", "token", "group", 0.0, None, None, 0.0, 6, 2,
     {"advantage_estimator": "normalize_then_sum", "reward_weights": [1.0, 0.5]}),
    ("grpo", "token", "group", 0.04, None, None, 0.0, 4, 2,
     {"advantage_estimator": "sum_then_normalize", "reward_weights": [0.5, 2.0]}),
]


def kit_config(case) -> GRPOConfig:
    loss_type, level, scale, beta, eps_high, delta, ent, micro, iters, extra = case
    return GRPOConfig(**{**dict(num_prompts=P, num_generations=G, max_completion_length=L, steps=1, loss_type=loss_type,
                                importance_sampling_level=level, scale_rewards=scale, beta=beta, epsilon_high=eps_high,
                                delta=delta, entropy_coef=ent, micro_batch_size=micro, num_iterations=iters,
                                max_grad_norm=1e9, learning_rate=LR, device="cpu", log_kl=False, threads=1,
                                reward_funcs=["exact_answer"] * len(extra.get("reward_weights", [1]))), **extra})


def partition_matters(cfg: GRPOConfig) -> bool:
    return (cfg.micro_batch_size or B) < B and (cfg.loss_type == "bnpo" or cfg.entropy_coef != 0)


def trl_args(cfg: GRPOConfig, out_dir, dtype):
    if partition_matters(cfg):  # trl_kwargs refuses these (see the module docstring): same fields, TRL's micro-batches
        with pytest.raises(Exception, match="micro-batch"):
            trl_kwargs(cfg)
        kw = trl_kwargs(cfg.replace(micro_batch_size=None))
        ga = B // cfg.micro_batch_size
        kw.update(per_device_train_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=ga,
                  steps_per_generation=ga)
    else:
        kw = trl_kwargs(cfg)
    kw.update(output_dir=str(out_dir), report_to="none", save_strategy="no", logging_strategy="no",
              disable_tqdm=True, dataloader_num_workers=0, log_completions=False,
              model_init_kwargs={"dtype": dtype})
    return trl.GRPOConfig(**kw)


def run_trl(cfg, tok, model, comps, rewards, out_dir, dtype, monkeypatch, exact=True):
    """Train one generated batch with TRL; returns what TRL computed along the way."""
    seen = {"perms": [], "batches": [], "losses": [], "prompts": []}
    shuffle = trl_grpo.shuffle_sequence_dict

    def recording_shuffle(d):  # TRL's own shuffle; the permutation it draws is read off the same RNG state
        state = torch.get_rng_state()
        seen["perms"].append(torch.randperm(len(d["prompt_ids"])))
        torch.set_rng_state(state)
        return shuffle(d)

    monkeypatch.setattr(trl_grpo, "shuffle_sequence_dict", recording_shuffle)
    K = len(cfg.reward_weights or [1])
    opt = RecordingSGD(model.parameters(), LR)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=reward_funcs(rewards, K), args=trl_args(cfg, out_dir, dtype),
                              train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
                              processing_class=tok, optimizers=(opt, None))
    if exact:
        exact_head(trainer.model, trainer.temperature)
        if trainer.ref_model is not None:
            assert next(trainer.ref_model.parameters()).dtype == dtype
            exact_head(trainer.ref_model, trainer.temperature)

    def fake_generate(prompts):
        seen["prompts"].append(list(prompts))
        count = {}
        cids = []
        for p in prompts:
            cids.append(comps[p][count.get(p, 0)])
            count[p] = count.get(p, 0) + 1
        pids = [tok(p)["input_ids"] for p in prompts]
        return pids, cids, None, tok.batch_decode(cids, skip_special_tokens=True), None, {}, None, None

    trainer._generate = fake_generate
    generate_and_score = trainer._generate_and_score_completions

    def recording_generate_and_score(inputs):
        out = generate_and_score(inputs)
        seen["batches"].append(out)
        return out

    trainer._generate_and_score_completions = recording_generate_and_score
    compute_loss = trainer.compute_loss

    def recording_compute_loss(*a, **k):
        loss = compute_loss(*a, **k)
        seen["losses"].append(loss.detach().item())
        return loss

    trainer.compute_loss = recording_compute_loss
    trainer.train()
    assert len(seen["batches"]) == 1, "one generated batch, reused for num_iterations updates"
    seen["grads"] = opt.grads
    return seen


def kit_rollouts(tok, comps, prompt_order, perm=None):
    prompts = [p for p in prompt_order]
    rows = []
    for p in dict.fromkeys(prompts):
        rows += [(p, ids) for ids in comps[p]]
    assert [p for p, _ in rows] == prompts, "TRL's batch comes in groups of G rows of one prompt"
    pid, pmask = encode_prompts(tok, [p for p, _ in rows], "cpu")  # (B, Tp) left-padded, as TRL pads them
    cid = torch.full((B, L), tok.pad_token_id)
    cmask = torch.zeros(B, L, dtype=torch.long)
    for i, (_, ids) in enumerate(rows):
        cid[i, :len(ids)] = torch.tensor(ids)
        cmask[i, :len(ids)] = 1
    truncated = torch.tensor([ids[-1] != tok.eos_token_id for _, ids in rows])
    r = Rollouts(pid, pmask, cid, cmask, truncated, [p for p, _ in rows],
                 tok.batch_decode([ids for _, ids in rows], skip_special_tokens=True), G)
    if perm is not None:
        r = Rollouts(r.prompt_ids[perm], r.prompt_mask[perm], r.completion_ids[perm], r.completion_mask[perm],
                     r.is_truncated[perm], [r.prompts[i] for i in perm], [r.completions[i] for i in perm], G)
    return r, [ids for _, ids in rows]


def run_kit(cfg, tok, model, ref, comps, rewards, prompt_order, perm):
    rollouts, ids = kit_rollouts(tok, comps, prompt_order)
    K = len(cfg.reward_weights or [1])
    per_func = torch.tensor([rewards[tuple(i)][:K] for i in ids], dtype=torch.float64)  # (B, K)
    w = torch.tensor(cfg.reward_weights or [1.0] * K, dtype=torch.float64)
    adv = estimate_advantages(cfg.advantage_estimator, (per_func * w).sum(-1).view(P, G),
                              scale_rewards=cfg.scale_rewards, objectives=per_func.view(P, G, K),
                              weights=cfg.reward_weights).reshape(B)  # (B,)
    if perm is not None:  # the partition TRL used (only where it matters, see the module docstring)
        rollouts, _ = kit_rollouts(tok, comps, prompt_order, perm)
        adv = adv[perm]
    ref = ref.requires_grad_(False) if cfg.beta else None
    opt = RecordingSGD(model.parameters(), LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    metrics = train_step(model, ref, opt, rollouts, adv, cfg, sched)
    return adv if perm is None else adv[torch.argsort(perm)], metrics, opt.grads, rollouts


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture
def float64():
    torch.set_num_threads(1)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # TRL builds its reward table with the default dtype
    yield torch.float64
    torch.set_default_dtype(old)


def compare(case, tok, tmp_path, monkeypatch, dtype, exact=True, tol=1e-6):
    cfg = kit_config(case)
    comps, rewards = fixed_completions(tok)
    model = tiny_model(tok, dtype)
    ref = copy.deepcopy(model)  # a reference model away from the policy, so the KL and its gradient are not 0
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    ref.save_pretrained(tmp_path / "ref")  # TRL builds its reference model from the policy's name_or_path
    model.config._name_or_path = str(tmp_path / "ref")
    kit_model = copy.deepcopy(model)
    trl_seen = run_trl(cfg, tok, model, comps, rewards, tmp_path / "trl", dtype, monkeypatch, exact)
    batch = trl_seen["batches"][0]
    order = trl_seen["prompts"][0]
    assert len(trl_seen["perms"]) == 1  # TRL shuffled the generated batch once, and reused it for every update
    perm = trl_seen["perms"][0] if partition_matters(cfg) else None
    adv, metrics, kit_grads, rollouts = run_kit(cfg, tok, kit_model, ref, comps, rewards, order, perm)

    # advantages and dapo's token count, before any update
    assert (batch["advantages"] - adv).abs().max().item() < (1e-9 if dtype == torch.float64 else 1e-6)
    mask = rollouts.completion_mask * (~rollouts.is_truncated).long().unsqueeze(-1) \
        if cfg.mask_truncated_completions else rollouts.completion_mask
    assert batch["num_items_in_batch"].item() == mask.sum().item()
    # the loss: TRL's micro-batch losses add up to each update's loss; the kit reports their mean over updates
    ga = B // (cfg.micro_batch_size or B)
    per_update = [sum(trl_seen["losses"][u * ga:(u + 1) * ga]) for u in range(cfg.num_iterations)]
    assert len(trl_seen["losses"]) == ga * cfg.num_iterations
    assert abs(sum(per_update) / cfg.num_iterations - metrics["loss"]) < tol
    # every update's gradient, then the weights
    assert len(trl_seen["grads"]) == len(kit_grads) == cfg.num_iterations
    for u, (gt, gk) in enumerate(zip(trl_seen["grads"], kit_grads)):
        worst = max((a - b).abs().max().item() for a, b in zip(gt, gk))
        assert worst < tol, f"update {u}: gradients differ by {worst:.3g}"
        assert max(a.abs().max().item() for a in gk) > 1e-3  # a real gradient, not two zeros
    worst = max((a - b).abs().max().item() for a, b in zip(model.parameters(), kit_model.parameters()))
    assert worst < tol * LR * cfg.num_iterations
    return metrics


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-b{c[3]}-mb{c[7]}-it{c[8]}")
def test_kit_matches_trls_grpo_trainer(case, tok, tmp_path, monkeypatch, float64):
    metrics = compare(case, tok, tmp_path, monkeypatch, float64)
    if case[8] > 1 and case[4] is None and case[5] is None and case[1] == "token":  # plain clipping after update 1
        assert metrics["clip_ratio/region_mean"] > 0, "later updates are off-policy enough that clipping acts"


def test_float32_with_trls_own_fused_head(tok, tmp_path, monkeypatch):
    """TRL's own fused LM-head kernel (float32 inside) against the kit's log-softmax in float32."""
    torch.set_num_threads(1)
    case = ("dapo", "token", "group", 0.04, 0.28, None, 0.0, 6, 2, {})
    compare(case, tok, tmp_path, monkeypatch, torch.float32, exact=False, tol=2e-5)


def test_trls_default_kl_weighting_is_a_different_gradient(tok, tmp_path, monkeypatch, float64):
    """Why trl_kwargs() sets use_bias_correction_kl=False: with TRL's default the KL gradient changes."""
    cfg = kit_config(("grpo", "token", "group", 0.04, None, None, 0.0, None, 1, {}))
    kw = trl_kwargs(cfg)
    assert kw["use_bias_correction_kl"] is False
    monkeypatch.setitem(globals(), "trl_kwargs", lambda cfg: {**kw, "use_bias_correction_kl": True})
    with pytest.raises(AssertionError, match="gradients differ"):
        compare(("grpo", "token", "group", 0.04, None, None, 0.0, None, 1, {}), tok, tmp_path, monkeypatch,
                float64)
