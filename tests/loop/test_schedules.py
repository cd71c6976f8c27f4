"""Group-size schedules, the adaptive rule, curricula, dynamic sampling and temperature mixes (hand-worked numbers)."""
import logging

import pytest
import torch

from grpo_kit.config import GRPOConfig
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.errors import ConfigError
from grpo_kit.loop.checks import check_config
from grpo_kit.loop.dynamic import cat_rollouts, choose_groups, enough, take_groups
from grpo_kit.loop.schedules import (
    AdaptiveState,
    SteerState,
    adapt_group_size,
    end_step,
    group_size,
    preview,
    rewards_at,
    tasks_at,
)
from grpo_kit.model.sampling import Rollouts, row_temperatures

SCHED = [[0.0, 16], [0.3, 8], [0.7, 4]]


def test_group_size_schedule_over_a_run():
    cfg = GRPOConfig(steps=10, samples_per_step=128, group_size_schedule=SCHED).validate()
    Gs = [group_size(cfg, s / cfg.steps) for s in range(cfg.steps)]
    assert Gs == [16, 16, 16, 8, 8, 8, 8, 4, 4, 4]  # 0.3 and 0.7 start the new G
    assert [p["P"] for p in preview(cfg, 3)] == [8, 16, 32]  # fractions 0, 0.5, 1: P = 128 / G


@pytest.mark.parametrize("sched, where", [
    ([[0.0, 16], [0.3, 6]], "group_size_schedule[1]"),        # 6 does not divide 128
    ([[0.0, 16], [0.7, 8], [0.3, 4]], "group_size_schedule[2]"),  # out of order
    ([[0.0, 16], [1.5, 8]], "group_size_schedule[1]"),        # outside [0, 1]
    ([[0.0, 16], [0.5, 1]], "group_size_schedule[1]"),        # G < 2
    ([[0.1, 16], [0.5, 8]], "group_size_schedule[0]"),        # does not start at 0
    ([[0.0, 16, 3]], "group_size_schedule[0]"),               # not a pair
])
def test_bad_group_size_schedules_name_the_entry(sched, where):
    with pytest.raises(ConfigError, match=where.replace("[", r"\[").replace("]", r"\]")):
        check_config(GRPOConfig(samples_per_step=128, group_size_schedule=sched))


def test_other_bad_steering_configs():
    with pytest.raises(ConfigError, match=r"task_schedule\[1\].*add9"):
        check_config(GRPOConfig(task_schedule=[[0.0, "add1"], [0.5, "add9"]]))
    with pytest.raises(ConfigError, match=r"reward_schedule\[0\]"):
        check_config(GRPOConfig(reward_schedule=[[0.0, ["no_such_reward"]]]))
    with pytest.raises(ConfigError, match="adaptive_group_size.*group_size_schedule"):
        check_config(GRPOConfig(samples_per_step=128, group_size_schedule=SCHED, adaptive_group_size=True))
    with pytest.raises(ConfigError, match="adaptive_shrink_below"):
        check_config(GRPOConfig(adaptive_grow_above=0.3, adaptive_shrink_below=0.4))
    with pytest.raises(ConfigError, match="micro_batch_size.*128"):
        check_config(GRPOConfig(samples_per_step=128, group_size_schedule=SCHED, micro_batch_size=48))
    with pytest.raises(ConfigError, match="group_size_bounds.*G=32"):  # 8 doubled twice = 32 does not divide 48
        check_config(GRPOConfig(samples_per_step=48, adaptive_group_size=True, group_size_bounds=[4, 32]))


def test_adaptive_sizes():
    assert GRPOConfig(num_generations=8, group_size_bounds=[4, 16]).adaptive_sizes() == [4, 8, 16]
    assert GRPOConfig(num_generations=4, group_size_bounds=[2, 32]).adaptive_sizes() == [2, 4, 8, 16, 32]


def _script(fracs, G=8, patience=2, bounds=(4, 16)):
    st, Gs, reasons = AdaptiveState(G), [], []
    for f in fracs:
        st, reason = adapt_group_size(st, f, grow_above=0.5, shrink_below=0.2, patience=patience, bounds=bounds)
        Gs.append(st.G)
        reasons.append(reason)
    return Gs, reasons


def test_adaptive_rule_decisions_on_a_scripted_sequence():
    fracs = [0.6, 0.4, 0.6, 0.6, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    Gs, reasons = _script(fracs)
    # 0.6 counts 1; 0.4 (between the thresholds) resets; 0.6, 0.6 -> 2 in a row: grow to 16;
    # then 0.1 x2 -> 8, 0.1 x2 -> 4, 0.1 x2 -> would be 2 < G_min 4: stays.
    assert Gs == [8, 8, 8, 16, 16, 8, 8, 4, 4, 4]
    assert [r is not None for r in reasons] == [False, False, False, True, False, True, False, True, False, False]
    assert reasons[3].startswith("frac_reward_zero_std > 0.5 for 2 steps (last 0.600): G 8 -> 16")
    assert "G 8 -> 4" in reasons[7]


def test_adaptive_rule_does_not_flap():
    Gs, reasons = _script([0.6, 0.1] * 6)  # swings across both thresholds, never twice in a row
    assert Gs == [8] * 12 and reasons == [None] * 12
    Gs, _ = _script([0.6, 0.6, 0.1, 0.1], patience=3)  # patience 3 never reached
    assert Gs == [8, 8, 8, 8]


def test_adaptive_changes_are_logged_in_metrics_and_log(caplog):
    cfg = GRPOConfig(samples_per_step=64, adaptive_group_size=True, adaptive_patience=1).validate()

    class R:
        pass
    run = R()
    run.cfg, run.step, run.steer = cfg, 5, SteerState(adaptive=AdaptiveState(8))
    plan = R()
    plan.cfg, plan.frac = cfg.replace(num_prompts=8), 0.1
    m = {"frac_reward_zero_std": 0.75}
    with caplog.at_level(logging.INFO, logger="grpo_kit.loop.schedules"):
        end_step(run, plan, m, generated=64)
    assert m["num_generations"] == 8 and m["num_prompts"] == 8 and m["group_size/next"] == 16.0
    assert m["group_size/reason"].endswith("G 8 -> 16") and "G 8 -> 16" in caplog.text
    assert run.steer.changes == [(5, 8, 16, m["group_size/reason"])] and run.steer.generated == 64


def test_curricula_by_fraction_and_by_stage():
    cfg = GRPOConfig(task_schedule=[[0.0, "add1"], [0.5, ["add1", "add2"]]],
                     reward_schedule=[[0.0, "format"], [0.25, ["format", "exact_answer"]]]).validate()
    st = SteerState()
    assert tasks_at(cfg, 0.49, st) == ["add1"] and tasks_at(cfg, 0.5, st) == ["add1", "add2"]
    assert rewards_at(cfg, 0.2, st) == ["format"] and rewards_at(cfg, 0.3, st) == ["format", "exact_answer"]
    by_acc = cfg.replace(curriculum_by="accuracy")
    assert tasks_at(by_acc, 0.9, SteerState(stage=0)) == ["add1"]  # stages ignore the fraction
    assert tasks_at(by_acc, 0.0, SteerState(stage=1)) == ["add1", "add2"]
    assert tasks_at(by_acc, 0.0, SteerState(stage=5)) == ["add1", "add2"]  # past the last stage: the last


def test_add1_has_a_small_split():
    from grpo_kit.data.tasks import get_task

    s = get_task("add1").splits()
    assert (len(s["test"]), len(s["val"]), len(s["train"])) == (20, 10, 70)


# ---------------------------------------------------------------- dynamic sampling

def test_dynamic_sampling_stopping_rule():
    T, F = True, False
    assert not enough([[T, F, F]], P=3, max_rounds=3)             # 1 kept of 3
    assert enough([[T, F, F], [F, T, T]], P=3, max_rounds=3)      # 3 kept
    assert not enough([[F, F, F], [T, F, F]], P=3, max_rounds=3)  # 1 kept, round 2 of 3
    assert enough([[F, F, F], [T, F, F]], P=3, max_rounds=2)      # the cap
    assert enough([[F, F, F]], P=3, max_rounds=1)                 # cap 1 = plain sampling


def test_dynamic_sampling_choice():
    T, F = True, False
    assert choose_groups([[T, F, F], [F, T, T]], 3) == [(0, 0), (1, 1), (1, 2)]
    assert choose_groups([[T, T, F], [T, T, T]], 3) == [(0, 0), (0, 1), (1, 0)]  # the first P kept
    assert choose_groups([[F, F, F], [T, F, F]], 3) == [(1, 0), (0, 0), (0, 1)]  # cap hit: top up with dropped


def _ro(prompt_rows, comp_rows, G):
    pid = torch.tensor([r[0] for r in prompt_rows])
    pm = torch.tensor([r[1] for r in prompt_rows])
    cid = torch.tensor([r[0] for r in comp_rows])
    cm = torch.tensor([r[1] for r in comp_rows])
    n = len(prompt_rows)
    return Rollouts(pid, pm, cid, cm, torch.zeros(n, dtype=torch.bool), [f"p{i // G}" for i in range(n)],
                    [f"c{i}" for i in range(n)], G)


def test_take_groups_and_cat_rollouts_pad_prompts_left_and_completions_right():
    a = _ro([([5, 6], [1, 1])] * 2 + [([0, 7], [0, 1])] * 2, [([1, 2], [1, 1])] * 4, G=2)
    b = _ro([([8, 8, 9], [1, 1, 1])] * 2, [([3, 4, 2], [1, 1, 1])] * 2, G=2)
    g1 = take_groups(a, [1])
    assert g1.prompt_ids.tolist() == [[0, 7], [0, 7]] and g1.completions == ["c2", "c3"]
    c = cat_rollouts([g1, b], pad_id=0)
    assert c.prompt_ids.tolist() == [[0, 0, 7], [0, 0, 7], [8, 8, 9], [8, 8, 9]]
    assert c.prompt_mask.tolist() == [[0, 0, 1], [0, 0, 1], [1, 1, 1], [1, 1, 1]]
    assert c.completion_ids.tolist() == [[1, 2, 0], [1, 2, 0], [3, 4, 2], [3, 4, 2]]
    assert c.completion_mask.tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]]
    assert c.num_prompts == 2


def test_dynamic_sampling_run_fills_with_signal_and_respects_the_cap(tiny, small_cfg):
    from grpo_kit.loop.train import grpo_step, setup

    policy, tok = tiny
    import copy
    cfg = small_cfg.replace(dynamic_sampling=True, dynamic_max_rounds=2, log_kl=False)
    run = setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok)
    for _ in range(3):
        m = grpo_step(run)
        assert 1 <= m["dynamic/rounds"] <= 2 and m["dynamic/groups_drawn"] == 4 * m["dynamic/rounds"]
        assert m["completions_generated"] == 16 * m["dynamic/rounds"] and m["num_prompts"] == 4
        if m["dynamic/rounds"] == 1:  # stopped early: every group in the batch has signal
            assert m["dynamic/groups_kept"] == 4


# ---------------------------------------------------------------- temperature mixes

def test_temperature_mix_gives_each_row_its_temperature():
    t = row_temperatures([0.7, 0.7, 1.0, 1.2], P=2, G=4, device="cpu")
    assert t.squeeze(-1).tolist() == pytest.approx([0.7, 0.7, 1.0, 1.2] * 2)
    t = row_temperatures([0.5, 1.0], P=1, G=3, device="cpu")  # cycled within the group
    assert t.squeeze(-1).tolist() == pytest.approx([0.5, 1.0, 0.5])


def test_temperature_mix_log_probs_use_the_row_temperature(tiny):
    from grpo_kit.model.logprobs import completion_logprobs
    from grpo_kit.model.sampling import sample_groups

    policy, tok = tiny
    temps = [0.7, 1.0, 1.3]
    r = sample_groups(policy, tok, ["12+34="], 3, 6, temps, torch.Generator().manual_seed(0))
    with torch.no_grad():
        mixed, _ = completion_logprobs(policy, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask,
                                       row_temperatures(temps, 1, 3, "cpu").unsqueeze(-1))
        for g, t in enumerate(temps):
            one, _ = completion_logprobs(policy, r.prompt_ids[g:g + 1], r.prompt_mask[g:g + 1],
                                         r.completion_ids[g:g + 1], r.completion_mask[g:g + 1], t)
            assert torch.allclose(mixed[g], one[0], atol=1e-5)
        plain, _ = completion_logprobs(policy, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask, 1.0)
    m = r.completion_mask.bool()
    assert not torch.allclose(mixed[0][m[0]], plain[0][m[0]])  # 0.7 is not 1.0: the temperature matters


def test_task_and_reward_curricula_in_a_run(tiny, small_cfg):
    import copy
    import re

    from grpo_kit.loop.train import setup, train

    policy, tok = tiny
    cfg = small_cfg.replace(task_schedule=[[0.0, "add1"], [0.5, "add2"]],
                            reward_schedule=[[0.0, ["format"]], [0.5, ["exact_answer"]]], log_kl=False)
    hist = list(train(cfg, setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok)))
    assert ["rewards/format_reward/mean" in m for m in hist] == [True, True, False, False]
    assert ["rewards/exact_answer/mean" in m for m in hist] == [False, False, True, True]
    assert all(re.fullmatch(r"\d\+\d=", m["samples"]["prompt"]) for m in hist[:2])  # add1: one digit each


def test_curriculum_by_accuracy_moves_on_at_an_evaluation(tiny, small_cfg):
    import copy

    from grpo_kit.loop.schedules import after_eval, state
    from grpo_kit.loop.train import setup

    policy, tok = tiny
    cfg = small_cfg.replace(task_schedule=[[0.0, "add1"], [0.5, "add2"]], curriculum_by="accuracy",
                            curriculum_accuracy=0.0, eval_size=4, log_kl=False)
    run = setup(cfg, policy=copy.deepcopy(policy), tokenizer=tok)
    m = {}
    after_eval(run, m)  # any accuracy >= 0.0: stage 0 -> 1
    assert state(run).stage == 1 and m["curriculum/reason"].endswith("stage 1") and 0 <= m["curriculum/accuracy"] <= 1
    m = {}
    after_eval(run, m)  # already at the last stage
    assert state(run).stage == 1 and "curriculum/reason" not in m
    strict = setup(cfg.replace(curriculum_accuracy=1.0), policy=copy.deepcopy(policy), tokenizer=tok)
    after_eval(strict, {})  # the base model does not get every add1 problem right
    assert state(strict).stage == 0


def test_steering_fields_do_not_export_to_trl():
    with pytest.raises(ConfigError, match="group_size_schedule.*no TRL equivalent"):
        trl_kwargs(GRPOConfig(samples_per_step=128, group_size_schedule=SCHED))
    with pytest.raises(ConfigError, match="replay_fraction"):
        trl_kwargs(GRPOConfig(replay_fraction=0.25))
