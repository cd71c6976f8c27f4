"""One step as named stages (train.grpo_step) and the update they end in (step.train_step).

Each stage runs alone here; composed by hand they give exactly grpo_step's weights and metrics
(the same computation in one process, so bit for bit). train_step reads the device once per
optimizer update (the finite check and the gradient norm) and once per step (the logged sums).
"""
import os
import sys

import pytest
import torch

from grpo_kit.loop import schedules
from grpo_kit.loop.dynamic import Batch
from grpo_kit.loop.step import Update, train_step
from grpo_kit.loop.train import (
    add_replayed,
    advantages_for,
    apply_update,
    collect,
    grpo_step,
    setup,
    step_metrics,
)


def test_each_stage_alone_and_composed_by_hand_is_grpo_step(small_cfg):
    cfg = small_cfg.replace(steps=2, beta=0.04, num_iterations=2)
    by_step, by_hand = setup(cfg), setup(cfg)
    want = grpo_step(by_step)

    plan = schedules.plan_step(by_hand)
    assert (plan.cfg.num_prompts, plan.cfg.num_generations) == (4, 4)
    batch, reward_log = collect(by_hand, plan, plan.cfg.num_prompts)
    assert isinstance(batch, Batch) and batch.rewards.shape == (4, 4) and len(batch.items) == 4
    assert batch.rollouts.completion_ids.shape[0] == 16 and batch.info == {"completions_generated": 16}
    adv, sample_mask, extra = advantages_for(by_hand, plan.cfg, batch)
    assert adv.shape == (4, 4) and sample_mask is None and extra == {}
    assert torch.allclose(adv.sum(1), torch.zeros(4), atol=1e-5)  # group-relative: each group sums to 0
    update = add_replayed(by_hand, plan.cfg, batch, adv, sample_mask, [])  # replay off: the fresh rows as they are
    assert isinstance(update, Update) and update.rollouts is batch.rollouts and update.advantages is adv
    got = apply_update(by_hand, plan, update)
    by_hand.step += 1
    got.update(step_metrics(by_hand, plan, batch, adv, reward_log))

    for key in ("loss", "grad_norm", "kl", "entropy", "reward", "clip_ratio/region_mean"):
        assert got[key] == want[key], key
    for (name, a), (_, b) in zip(by_step.policy.named_parameters(), by_hand.policy.named_parameters()):
        assert torch.equal(a, b), name


class _Reads:
    """Counts the calls in the update and the loss (step.py, losses.py) that copy a tensor's values to the
    host, each one a device sync on a GPU. Not counted: packing and merging rows read their lengths
    (logprobs.py: the shapes they allocate), AdamW reads its step counter (a CPU tensor)."""
    NAMES = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")
    FILES = (os.path.join("loop", "step.py"), os.path.join("core", "losses.py"))

    def __init__(self, monkeypatch):
        self.calls = []
        for name in self.NAMES:
            real = getattr(torch.Tensor, name)

            def counted(t, *a, _real=real, _name=name, **k):
                if sys._getframe(1).f_code.co_filename.endswith(self.FILES):
                    self.calls.append(_name)
                return _real(t, *a, **k)
            monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.mark.parametrize("num_iterations,micro_batch_size", [(1, None), (3, 4)])
def test_train_step_reads_the_device_once_per_update_and_once_per_step(tiny, small_cfg, monkeypatch,
                                                                       num_iterations, micro_batch_size):
    from grpo_kit.model.sampling import sample_groups

    model, tok = tiny
    cfg = small_cfg.replace(num_iterations=num_iterations, micro_batch_size=micro_batch_size, beta=0.04)
    ro = sample_groups(model, tok, ["12+34=", "7+8=", "21+5=", "30+30="], 4, 6, 1.0,
                       torch.Generator().manual_seed(0))
    adv = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))  # (P, G)
    policy = type(model)(model.config)
    policy.load_state_dict(model.state_dict())
    ref = type(model)(model.config)
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    reads = _Reads(monkeypatch)
    m = train_step(policy, ref, opt, ro, adv, cfg)
    monkeypatch.undo()
    # 4 micro-batches of 4 rows with micro_batch_size=4: still one read per update, none per micro-batch
    assert reads.calls == ["tolist"] * (num_iterations + 1), reads.calls
    assert m["skipped"] == 0.0 and m["kl"] >= 0.0
