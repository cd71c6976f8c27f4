"""``train_step``: the one place the GRPO update runs.

Given rollouts (B = P*G completions) and their advantages, one call does ``num_iterations``
optimizer updates. Each update walks the batch in micro-batches of ``micro_batch_size`` rows,
back-propagates each micro-batch's share of the loss (gradient accumulation: the shares add
up to the loss of the whole batch, see ``losses.aggregate``), clips the global gradient norm
and steps; a learning-rate scheduler advances once per optimizer update.

dtype policy (``autocast_for``; the same code runs on CUDA and, for tests, on CPU):

- Weights, gradients and AdamW state are float32 (the master copy). With ``cfg.bf16`` on CUDA
  (or ``cfg.bf16`` and ``cfg.bf16_on_cpu`` on a CPU) every forward runs under
  ``torch.autocast(device, bfloat16)``: sampling, the reference and old-policy log-probs and
  the training forward alike, so that the policy that samples is the policy that is scored and
  with ``num_iterations > 1`` the ratio is exactly 1 at the first update. Plain CPU training
  (the default) is float32 throughout.
- Logits: only completion positions are projected onto the vocabulary (``logits_to_keep`` on
  the plain path and the packed path, ``logprobs.pack_rows``; the shared-cache path keeps the
  last prompt position only), and they stay
  in the forward's dtype (bf16 under autocast, (B, Tc, V)) until the log-softmax. The
  temperature divides them in float32 inside the log-softmax, one chunk of rows at a time
  (``logprobs.LOGSOFTMAX_CHUNK`` elements), in the forward and in the backward, so no
  (B, Tc, V) float32 copy is made (dividing bf16 logits by a float32 temperature tensor would
  upcast them all: about 40 GB at a 150k vocabulary with B = 128, Tc = 512).
- Log-probs (B, Tc), ratios, KL, advantages and the loss are float32 (a float64 model stays
  float64: the TRL parity tests run in float64).
- Sampling draws from float32 probabilities of the last position's (bf16) logits.

Tests that check bit-exact equality pin ``device="cpu"`` with bf16 off (float32 is
deterministic there); the bf16 tests compare within bf16 tolerance, except the first-update
ratio, which is exact because old and new log-probs come from the same forward.

A non-finite loss or gradient norm skips the optimizer step (weights and optimizer state
untouched) and reports ``skipped`` = the number of skipped updates; so does a batch whose
``sample_mask`` leaves no sample (every reward bad under ``reward_error_policy='skip'``).
"""
from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from grpo_kit.core.losses import LossStats, at_least_fp32, grpo_loss
from grpo_kit.model.logprobs import completion_logprobs
from grpo_kit.model.sampling import Rollouts, row_temperatures


def autocast_for(device: torch.device | str, bf16: bool, on_cpu: bool = False):
    """The autocast context every forward of a run uses: bf16 on CUDA when ``bf16``; on a CPU only
    when ``on_cpu`` too (``cfg.bf16_on_cpu``: the CUDA code path, run in CI); else none (float32)."""
    device = torch.device(device)
    if bf16 and (device.type == "cuda" or (device.type == "cpu" and on_cpu)):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def run_autocast(cfg, device):
    """``autocast_for`` with a config's ``bf16`` / ``bf16_on_cpu``."""
    return autocast_for(device, cfg.bf16, getattr(cfg, "bf16_on_cpu", False))


def micro_slices(B: int, micro: int | None) -> list[slice]:
    micro = micro or B
    return [slice(i, min(i + micro, B)) for i in range(0, B, micro)]


def loss_mask(rollouts: Rollouts, mask_truncated: bool, sample_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Completion mask (B, Tc), with truncated rows zeroed when ``mask_truncated`` (DAPO) and the rows
    ``sample_mask`` ((B,) or (P, G) bool) leaves out zeroed."""
    mask = rollouts.completion_mask
    if mask_truncated:
        mask = mask * (~rollouts.is_truncated).long().unsqueeze(-1)  # (B, Tc)
    if sample_mask is not None:
        mask = mask * sample_mask.reshape(-1, 1).to(device=mask.device, dtype=mask.dtype)  # (B, Tc)
    return mask


def scoring(cfg) -> dict:
    """How a config's log-prob forwards run: the ``completion_logprobs`` keywords for prompt sharing,
    merging identical rows and packing (off for a config that predates them)."""
    return {"share_prompt": getattr(cfg, "share_prompt_prefix", False),
            "dedupe": getattr(cfg, "dedupe_completions", False),
            "pack_max_tokens": getattr(cfg, "pack_max_tokens", 0)}


def batch_logprobs(model, rollouts: Rollouts, temps, slices, ctx, share_prompt: bool = False,
                   dedupe: bool = False, pack_max_tokens: int = 0) -> torch.Tensor:
    """Log-probs (B, Tc) of the rollouts under ``model``, without gradients, micro-batch by micro-batch."""
    out = []
    for s in slices:
        with ctx, torch.inference_mode():
            lp, _ = completion_logprobs(model, rollouts.prompt_ids[s], rollouts.prompt_mask[s],
                                        rollouts.completion_ids[s], rollouts.completion_mask[s], temps[s],
                                        share_prompt=share_prompt, dedupe=dedupe, pack_max_tokens=pack_max_tokens)
        out.append(at_least_fp32(lp))
    return torch.cat(out)  # (B, Tc)


def flat_advantages(advantages: torch.Tensor, B: int, Tc: int) -> torch.Tensor:
    """One advantage per completion, (P, G) or (B,) -> (B,); or one per completion token, (P, G, Tc)
    or (B, Tc) -> (B, Tc) (process rewards, a value baseline). Anything else is a ValueError."""
    if advantages.numel() == B and advantages.dim() <= 2:
        return advantages.reshape(B)  # (B,)
    if advantages.numel() == B * Tc and advantages.shape[-1] == Tc:
        return advantages.reshape(B, Tc)  # (B, Tc)
    raise ValueError(f"advantages of shape {tuple(advantages.shape)} fit neither B = {B} completions nor "
                     f"their Tc = {Tc} tokens: pass (P, G) / (B,) or, per token, (P, G, {Tc}) / (B, {Tc})")


@dataclass
class Update:
    """What one ``train_step`` trains on: B rollouts and their advantages, which rows count, and, for
    rows an earlier policy sampled (replay.py), that policy's log-probs."""
    rollouts: Rollouts
    advantages: torch.Tensor  # (P, G) / (B,), or per completion token (P, G, Tc) / (B, Tc)
    sample_mask: torch.Tensor | None = None  # (P, G) / (B,) bool: False rows are left out of the loss
    behaviour_logp: torch.Tensor | None = None  # (B, Tc) the sampling policy's log-probs of replayed rows
    behaviour_rows: torch.Tensor | None = None  # (B,) bool: the replayed rows
    metrics: dict = field(default_factory=dict)  # what building it measured (replay/*)


def train_step(policy, ref, optimizer, rollouts: Rollouts, advantages: torch.Tensor, cfg,
               scheduler=None, sample_mask: torch.Tensor | None = None,
               behaviour_logp: torch.Tensor | None = None, behaviour_rows: torch.Tensor | None = None) -> dict:
    """One GRPO update (``cfg.num_iterations`` optimizer steps) -> metrics dict of floats.

    ``advantages``: (B,) or (P, G), or per completion token (B, Tc) or (P, G, Tc) (each token's
    advantage multiplies its own ratio; every ``loss_type`` aggregates them the same way). ``ref`` may
    be None when ``cfg.beta == 0`` and ``cfg.log_kl`` is False. ``sample_mask`` (B,) or (P, G) bool:
    False rows are left out of the loss (no gradient, not in the token count); when no row is left
    the update is skipped. ``behaviour_logp`` (B, Tc) with ``behaviour_rows`` (B,) bool: rows
    generated by an earlier policy (replay.py); their ``old`` log-probs are these, so the clipped
    ratio is pi/pi_behaviour. Every log-prob is under the temperature-scaled full distribution, whatever
    sampling controls drew the rollouts (:func:`fixed_logprobs` says why, as TRL). Host syncs: one per optimizer update (the finite check and the
    gradient norm) and one per step (the logged sums).
    """
    device = next(policy.parameters()).device
    ctx = run_autocast(cfg, device)
    B = rollouts.completion_ids.shape[0]
    adv = at_least_fp32(flat_advantages(advantages, B, rollouts.completion_ids.shape[1]).to(device))  # (B,) or (B, Tc)
    mask = loss_mask(rollouts, cfg.mask_truncated_completions, sample_mask)  # (B, Tc)
    temps = row_temperatures(cfg.temperature, rollouts.num_prompts, rollouts.num_generations, device)  # (B, 1)
    temps = temps.unsqueeze(-1)  # (B, 1, 1) divides logits (B, Tc, V)
    slices = micro_slices(B, cfg.micro_batch_size)
    ref_logp, old_logp = fixed_logprobs(policy, ref, rollouts, temps, slices, ctx, cfg)  # (B, Tc) or None each
    nothing_to_learn = sample_mask is not None and not bool(sample_mask.any())  # every row left out
    params = [p for p in policy.parameters() if p.requires_grad]
    total, total_loss, skipped, grad_norm = None, 0.0, 0, 0.0  # LossStats summed over the step
    policy.train()
    lr = optimizer.param_groups[0]["lr"]  # the rate of this step's first update
    for it in range(cfg.num_iterations):
        if it and scheduler is not None:
            scheduler.step()  # the schedule advances once per optimizer update, as TRL's does
        if nothing_to_learn:
            skipped += 1
            continue
        optimizer.zero_grad(set_to_none=True)
        step_loss, stats = backward_pass(policy, cfg, it, rollouts, temps, slices, ctx, mask, adv, ref_logp,
                                         old_logp, behaviour_logp, behaviour_rows)  # () and LossStats, on the device
        total = stats if total is None else total + stats  # clip fractions: averaged over every update, as TRL
        gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        loss_value, grad_norm = torch.stack([step_loss.float(), gn.float().to(device)]).tolist()  # one host sync
        if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        total_loss += loss_value
    if scheduler is not None:
        with warnings.catch_warnings():
            # a step whose every update was skipped (not finite) still advances the schedule, as a taken step
            # does; torch warns when that happens before the first optimizer.step(), which is expected here
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
            scheduler.step()
    return update_metrics(total, mask.sum().float(), total_loss, skipped, grad_norm, lr, cfg.num_iterations,
                          with_kl=ref_logp is not None)


def fixed_logprobs(policy, ref, rollouts: Rollouts, temps, slices, ctx, cfg):
    """The log-probs an update divides by, without gradients: the reference's (when ``beta != 0`` or
    ``log_kl``) and the sampling policy's (when ``num_iterations > 1``; with a single update the
    sampling policy is the current one and ``old = logp.detach()``, as TRL). (B, Tc) or None each.

    Both, like the policy's own log-probs in :func:`backward_pass`, are log-softmax(logits / T) over
    the whole vocabulary: the temperature-scaled *full* distribution, also when the run samples with
    ``top_k`` / ``top_p`` / ``min_p`` / ``repetition_penalty``, as TRL 1.16 does
    (``GRPOTrainer._get_per_token_logps_and_entropies``, through the fused LM head that
    ``add_fused_lm_head(model, temperature=...)`` installs). The sampler then drew from another distribution
    than the one π_old stands for here (narrower; reshaped by a repetition penalty): an off-policy gap
    no ratio corrects. Truncation's part is logged as ``sampling/truncated_mass`` (the probability mass
    the controls removed, averaged over the sampled positions; ``model/truncation.py``). TRL with ``use_vllm`` (and its default
    ``vllm_importance_sampling_correction``) weights the loss by a clipped ratio of these full-distribution
    log-probs to vLLM's sampling log-probs (taken after the controls), which accounts for the gap; the
    kit has no such weight, and ``trl_kwargs`` configures TRL's transformers sampler, which has none either."""
    if cfg.beta != 0.0 and ref is None:
        raise ValueError("beta != 0 needs a reference model")
    kw = scoring(cfg)
    need_ref = ref is not None and (cfg.beta != 0.0 or cfg.log_kl)
    ref_logp = batch_logprobs(ref, rollouts, temps, slices, ctx, **kw) if need_ref else None  # (B, Tc)
    old_logp = batch_logprobs(policy, rollouts, temps, slices, ctx, **kw) if cfg.num_iterations > 1 else None
    return ref_logp, old_logp


def backward_pass(policy, cfg, it: int, rollouts: Rollouts, temps, slices, ctx, mask, adv, ref_logp, old_logp,
                  behaviour_logp, behaviour_rows) -> tuple[torch.Tensor, LossStats]:
    """Update ``it``'s forward and backward, micro-batch by micro-batch: each micro-batch back-propagates
    its share of :func:`grpo_loss` (the shares add up to the batch's loss). Returns the loss () and the
    summed :class:`LossStats`, both on the device (no host sync)."""
    batch_tokens = mask.sum().float()  # () completion tokens in the whole batch (dapo's normaliser)
    step_loss, total = torch.zeros((), device=mask.device), None  # () summed on the device
    for s in slices:
        with ctx:
            logp, ent = completion_logprobs(policy, rollouts.prompt_ids[s], rollouts.prompt_mask[s],
                                            rollouts.completion_ids[s], rollouts.completion_mask[s], temps[s],
                                            with_entropy=(it == 0 or cfg.entropy_coef != 0),
                                            entropy_grad=cfg.entropy_coef != 0, **scoring(cfg))
        logp = at_least_fp32(logp)  # (b, Tc)
        old = old_logprobs(logp, s, old_logp, behaviour_logp, behaviour_rows)  # (b, Tc)
        loss, stats = grpo_loss(logp, old, ref_logp[s] if ref_logp is not None else None, adv[s], mask[s],
                                **loss_settings(cfg), num_micro_batches=len(slices), batch_tokens=batch_tokens,
                                entropy=ent, log_batch=it == 0)  # entropy and KL: the batch as sampled
        loss.backward()
        step_loss = step_loss + loss.detach()
        total = stats if total is None else total + stats
    return step_loss, total


def old_logprobs(logp: torch.Tensor, s: slice, old_logp: torch.Tensor | None, behaviour_logp: torch.Tensor | None,
                 behaviour_rows: torch.Tensor | None) -> torch.Tensor:
    """The log-probs the ratio divides by, for micro-batch ``s``: the sampling policy's (``old_logp``, or
    ``logp.detach()`` with a single update, as TRL), and for replayed rows the behaviour policy's. (b, Tc)"""
    old = old_logp[s] if old_logp is not None else logp.detach()  # (b, Tc)
    if behaviour_logp is not None:  # replayed rows: ratio against the policy that sampled them
        old = torch.where(behaviour_rows[s].view(-1, 1).to(old.device), behaviour_logp[s].to(old), old)
    return old


def loss_settings(cfg) -> dict:
    """The config's arguments of :func:`grpo_loss` (the objective, its clip, KL and aggregation)."""
    return {"loss_type": cfg.loss_type, "beta": cfg.beta, "epsilon": cfg.epsilon, "epsilon_high": cfg.epsilon_high,
            "delta": cfg.delta, "level": cfg.importance_sampling_level, "kl_estimator": cfg.kl_estimator,
            "max_completion_length": cfg.max_completion_length, "entropy_coef": cfg.entropy_coef}


def update_metrics(total: LossStats | None, batch_tokens: torch.Tensor, total_loss: float, skipped: int,
                   grad_norm: float, lr: float, num_iterations: int, with_kl: bool) -> dict:
    """A step's logged metrics from its summed :class:`LossStats` and its updates (one host sync)."""
    sums = _host_sums(total, batch_tokens)  # one host sync for the step's logged sums
    ntok = max(sums["tokens"], 1.0)
    metrics = {
        "loss": total_loss / max(num_iterations - skipped, 1) if skipped < num_iterations else float("nan"),
        "grad_norm": grad_norm,
        "learning_rate": lr,
        "entropy": sums["entropy"] / ntok,
        "clip_ratio/low_mean": sums["low"] / (ntok * num_iterations),
        "clip_ratio/high_mean": sums["high"] / (ntok * num_iterations),
        "clip_ratio/region_mean": (sums["low"] + sums["high"]) / (ntok * num_iterations),
        "skipped": float(skipped),
    }
    if with_kl:
        metrics["kl"] = sums["kl"] / ntok
    return metrics


def _host_sums(total: LossStats | None, batch_tokens: torch.Tensor) -> dict[str, float]:
    """A step's :class:`LossStats` and its token count as floats, read from the device in one transfer
    (zero sums when no update ran)."""
    tokens = batch_tokens.float()
    if total is None:
        return {"low": 0.0, "high": 0.0, "entropy": 0.0, "kl": 0.0, "tokens": tokens.item()}
    zero = torch.zeros_like(total.clip_low)
    vals = torch.stack([total.clip_low, total.clip_high,
                        zero if total.entropy is None else total.entropy.to(zero),
                        zero if total.kl is None else total.kl.to(zero), tokens.to(zero)]).tolist()
    return dict(zip(("low", "high", "entropy", "kl", "tokens"), vals))
