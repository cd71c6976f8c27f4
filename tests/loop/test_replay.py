"""Replay buffer: importance weights and the age limit by hand; the clipped ratio on replayed rows; exact resume."""
import copy
import math

import pytest
import torch

from grpo_kit.loop.replay import ReplayBuffer, as_rollouts, importance_weights
from grpo_kit.model.sampling import Rollouts


def test_importance_weights_by_hand():
    now = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    beh = torch.tensor([[-1.5, -2.0, -1.0], [-1.0, -0.25, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # the last token is padding
    w = importance_weights(now, beh, mask)
    assert w.flatten().tolist() == pytest.approx([math.exp(0.5), 1.0, 0.0, math.exp(0.5), math.exp(-0.25), 0.0])
    seq = importance_weights(now, beh, mask, level="sequence")  # exp(mean log-ratio over real tokens)
    assert seq.tolist() == pytest.approx([math.exp(0.25), math.exp(0.125)])


def _groups(P, G, Tc=2, advs=None):
    B = P * G
    ro = Rollouts(torch.arange(B).view(B, 1) + 10, torch.ones(B, 1, dtype=torch.long),
                  torch.arange(B * Tc).view(B, Tc), torch.ones(B, Tc, dtype=torch.long),
                  torch.zeros(B, dtype=torch.bool), [f"p{b // G}" for b in range(B)], [f"c{b}" for b in range(B)], G)
    adv = torch.tensor(advs, dtype=torch.float32) if advs is not None else torch.ones(P, G)
    return ro, adv, -torch.arange(B * Tc, dtype=torch.float32).view(B, Tc) / 10


def test_age_limit():
    buf = ReplayBuffer(capacity=10, max_age=2)
    for step in (1, 2, 3):
        ro, adv, lp = _groups(1, 2)
        buf.add(ro, adv, lp, step)
    assert buf.evict(4) == 1  # the step-1 group is 3 steps old at step 4 > 2; step 2 (age 2) stays
    assert sorted(e["step"] for e in buf.groups) == [2, 3]
    assert [e["step"] for e in buf.take(5, G=2, step=6)] == []  # at step 6 both are too old
    assert len(buf) == 0


def test_what_is_stored_and_taken():
    ro, adv, lp = _groups(3, 2, advs=[[0.5, -0.5], [0.0, 0.0], [1.0, -1.0]])  # group 1 has no signal
    buf = ReplayBuffer(capacity=10, max_age=5)
    assert buf.add(ro, adv, lp, step=1) == 2
    e = buf.groups[1]  # group 2: rows 4 and 5
    assert e["completions"] == ["c4", "c5"] and e["advantages"].tolist() == [1.0, -1.0]
    assert torch.equal(e["logp"], lp[4:6]) and e["score"] == 1.0
    taken = buf.take(1, G=2, step=2)
    assert [t["score"] for t in taken] == [1.0] and len(buf) == 1  # strongest first, and it leaves the buffer
    assert buf.take(1, G=4, step=2) == []  # only groups of the current G are replayed
    small = ReplayBuffer(capacity=1, max_age=5)
    small.add(ro, adv, lp, step=1)
    assert [e["score"] for e in small.groups] == [1.0]  # over capacity: the weakest goes
    r, a, l = as_rollouts(taken, pad_id=0, device="cpu")
    assert r.completions == ["c4", "c5"] and a.tolist() == [1.0, -1.0] and torch.equal(l, lp[4:6])


def test_replayed_rows_use_the_behaviour_log_probs_as_old(tiny, small_cfg):
    """Behaviour = current: same update as on-policy. Behaviour far below current (ratio e > 1 + eps)
    with positive advantages: every token is clipped, so no gradient and no change."""
    from grpo_kit.loop.step import (
        autocast_for,
        batch_logprobs,
        micro_slices,
        train_step,
    )
    from grpo_kit.model.sampling import sample_groups

    policy, tok = tiny
    cfg = small_cfg.replace(log_kl=False, max_grad_norm=1e9)
    r = sample_groups(policy, tok, ["12+34=", "5+7="], 2, 4, 1.0, torch.Generator().manual_seed(0))
    adv = torch.tensor([1.0, 0.5, 1.0, 0.25])
    temps = torch.ones(4, 1, 1)
    now = batch_logprobs(policy, r, temps, micro_slices(4, None), autocast_for(torch.device("cpu"), False))
    rows = torch.ones(4, dtype=torch.bool)
    results = []
    for beh in (None, now, now - 1.0):
        p = copy.deepcopy(policy)
        opt = torch.optim.SGD(p.parameters(), lr=0.1)
        kw = {} if beh is None else {"behaviour_logp": beh, "behaviour_rows": rows}
        m = train_step(p, None, opt, r, adv, cfg, **kw)
        results.append((m, p))
    (m0, _), (m1, _), (m2, p2) = results
    assert m0["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-4) and m0["grad_norm"] > 0
    assert m2["grad_norm"] == 0.0 and m2["clip_ratio/high_mean"] == pytest.approx(1.0)
    assert all(torch.equal(a, b) for a, b in zip(policy.parameters(), p2.parameters()))


def test_replay_run_mixes_groups_and_resumes_exactly(tiny, small_cfg, tmp_path):
    """Replay + adaptive G + dynamic sampling: checkpoint at step 3, resume, same weights as straight."""
    from grpo_kit.loop.train import load_checkpoint, setup, train

    policy, tok = tiny
    cfg = small_cfg.replace(steps=6, replay_fraction=0.5, replay_max_age=3, adaptive_group_size=True,
                            group_size_bounds=[2, 8], adaptive_patience=1, adaptive_grow_above=0.3,
                            adaptive_shrink_below=0.1, dynamic_sampling=True, dynamic_max_rounds=2,
                            lr_schedule="constant", checkpoint_every=1, keep_checkpoints=10, log_kl=False)
    straight = setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok)
    hist = list(train(cfg, straight, out_dir=tmp_path))
    assert sum(m["replay/groups"] for m in hist) > 0 and len({m["num_generations"] for m in hist}) > 1
    assert all(m["completions_generated"] == (4 - m["replay/groups"]) * m["num_generations"] * m["dynamic/rounds"]
               for m in hist if m["num_prompts"] == 4)
    resumed = setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok)
    load_checkpoint(resumed, tmp_path / "checkpoints" / "step-000003")
    assert len(resumed.steer.replay) == len(torch.load(tmp_path / "checkpoints" / "step-000003" / "trainer_state.pt",
                                                       weights_only=True)["steer"]["replay"]["groups"])
    rest = list(train(cfg, resumed))
    assert [m["loss"] for m in rest] == [m["loss"] for m in hist[3:]]
    assert all(torch.equal(a, b) for a, b in zip(straight.policy.parameters(), resumed.policy.parameters()))


def test_rescore_gives_back_the_stored_log_probs_under_the_sampler_only(tiny, small_cfg):
    """The groups a step stores carry the log-probs of the policy that sampled them: rescoring them under a
    copy of that policy gives them back (float32 rounding of a differently padded batch: 1e-4), and under
    the policy after the step's update they differ (the importance ratio is not 1)."""
    from grpo_kit.loop.replay import rescore
    from grpo_kit.loop.train import setup, train

    policy, tok = tiny
    cfg = small_cfg.replace(steps=4, replay_fraction=0.5, replay_max_age=3, lr_schedule="constant", log_kl=False,
                            checkpoint_every=0, eval_every=0)
    run = setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok)
    sampler = {1: copy.deepcopy(run.policy)}  # step -> the policy that sampled that step's groups
    seen = {}  # every group the buffer held at the end of some step (replayed groups leave it)
    for m in train(cfg, run):
        sampler[m["step"] + 1] = copy.deepcopy(run.policy)
        seen.update({id(e): e for e in run.steer.replay.groups})
    stored = list(seen.values())
    assert stored and all(1 <= e["step"] <= cfg.steps for e in stored)
    for e in stored:
        then, logp, mask = rescore(sampler[e["step"]], [e], cfg, tok.pad_token_id)
        now, logp2, _ = rescore(run.policy, [e], cfg, tok.pad_token_id)
        assert torch.equal(logp, logp2) and then.shape == logp.shape == mask.shape
        assert ((then - logp).abs() * mask).max() < 1e-4
        assert ((now - logp).abs() * mask).max() > 1e-3  # every stored group's step was followed by its update
