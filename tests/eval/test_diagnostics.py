"""Each detector on a scripted history with hand-made numbers: it fires where the failure is, names
its evidence, and stays quiet on a healthy-looking history. Real runs: tests/lab/test_failures.py."""
import json

import pytest

from grpo_kit.config import GRPOConfig
from grpo_kit.core.metrics import distinct_frac, length_metrics
from grpo_kit.errors import ConfigError
from grpo_kit.eval.diagnostics import (
    DEFAULTS,
    DETECTORS,
    KINDS,
    Finding,
    diagnose,
    read_history,
    report,
    rolling_means,
)

W = 4  # a short window keeps the hand-made histories short


def hist(n, **cols):
    """n steps; each column a constant, a list of n values, or a function of the step (1-based)."""
    out = []
    for i in range(n):
        m = {"step": i + 1}
        for k, v in cols.items():
            m[k.replace("__", "/")] = v(i + 1) if callable(v) else (v[i] if isinstance(v, list) else v)
        out.append(m)
    return out


def healthy(n=40):
    """Reward climbs 0.4 -> ~0.8, entropy eases, every group still mixed: nothing should fire."""
    return hist(n, reward=lambda s: 0.4 + 0.01 * s, entropy=lambda s: 1.0 - 0.01 * s,
                completions__distinct_frac=0.6, kl=lambda s: 0.002 * s, grad_norm=lambda s: 0.5 + 0.05 * (s % 3),
                frac_reward_zero_std=0.3, completions__clipped_ratio=0.0, gold_reward=lambda s: 0.4 + 0.01 * s)


def test_healthy_scripted_history_is_quiet():
    assert diagnose(healthy(), window=W) == []
    assert report([]) == "diagnostics: no failure found"


def test_rolling_means_by_hand():
    assert rolling_means([(1, 1.0), (2, 3.0), (3, 5.0), (4, 7.0)], 2) == [(2, 2.0), (3, 4.0), (4, 6.0)]


def test_distinct_frac_and_length_by_correctness_by_hand():
    assert distinct_frac(["a", "a", "b", "c"], 2) == 0.75
    assert distinct_frac(["x"] * 8, 8) == 1 / 8
    import torch
    m = length_metrics(torch.tensor([2, 8, 8, 4]), torch.tensor([False, True, True, False]),
                       correct=torch.tensor([True, False, False, False]))
    assert m == pytest.approx({"completions/mean_length": 5.5, "completions/min_length": 2.0,
                               "completions/max_length": 8.0, "completions/clipped_ratio": 0.5,
                               "completions/mean_length_right": 2.0, "completions/mean_length_wrong": 20 / 3,
                               "completions/clipped_ratio_wrong": 2 / 3})


def only(findings, kind):
    assert [f.kind for f in findings] == [kind], [f.summary() for f in findings]
    f = findings[0]
    assert isinstance(f, Finding) and f.cause and f.fix and f.evidence
    json.dumps(f.to_dict())  # evidence is plain JSON (summary.json)
    return f


def test_entropy_collapse_fires_when_entropy_and_distinctness_fall_with_low_reward():
    # entropy 1.0 until step 10, then 0.1; distinct 0.8 -> 0.125; reward 0.4 -> 0.2
    h = hist(30, entropy=lambda s: 1.0 if s <= 10 else 0.1, completions__distinct_frac=lambda s: 0.8 if s <= 10 else 0.125,
             reward=lambda s: 0.4 if s <= 10 else 0.2)
    f = only(diagnose(h, window=W, kinds=["entropy_collapse"]), "entropy_collapse")
    # window means at step 12: entropy (1 + 1 + 0.1 + 0.1) / 4 = 0.55 > 0.5 * 1.0; at step 13: 0.325, distinct
    # (0.8 + 3 * 0.125) / 4 = 0.294 < 0.35, reward (0.4 + 3 * 0.2) / 4 = 0.25 < 0.3
    assert f.step == 13 and f.evidence["entropy"] == pytest.approx(0.325)
    assert f.evidence["completions/distinct_frac"] == pytest.approx(0.29375)
    # without the run's config the advice names the field without inventing its value
    assert "num_iterations)" in f.fix and "now" not in f.fix
    with_cfg = only(diagnose(h, GRPOConfig(num_iterations=8), window=W, kinds=["entropy_collapse"]), "entropy_collapse")
    assert "num_iterations, now 8)" in with_cfg.fix
    # the same collapse with a high reward is convergence, not collapse
    converged = hist(30, entropy=lambda s: 1.0 if s <= 10 else 0.1,
                     completions__distinct_frac=lambda s: 0.8 if s <= 10 else 0.125, reward=0.95)
    assert diagnose(converged, window=W, kinds=["entropy_collapse"]) == []


def test_reward_hacking_needs_the_gold_reward_flat_while_reward_climbs():
    h = hist(30, reward=lambda s: 0.3 + 0.03 * s, gold_reward=lambda s: 0.3 - 0.005 * s)
    f = only(diagnose(h, window=W, kinds=["reward_hacking"]), "reward_hacking")
    # start (steps 1-3) 0.36; window mean at step s = 0.3 + 0.03 (s - 1.5): gain 0.03 (s - 1.5) - 0.06 >= 0.15 at s = 8.5
    assert f.step == 9 and f.evidence["reward_at_start"] == pytest.approx(0.36)
    assert f.evidence["gold_reward"] < f.evidence["gold_reward_at_start"]
    honest = hist(30, reward=lambda s: 0.3 + 0.02 * s, gold_reward=lambda s: 0.3 + 0.02 * s)
    assert diagnose(honest, window=W) == []
    no_gold = hist(30, reward=lambda s: 0.3 + 0.02 * s)
    assert diagnose(no_gold, window=W, kinds=["reward_hacking"]) == []


def test_reward_spike_robust_z_and_spread():
    base = [0.50, 0.52, 0.48, 0.50, 0.51, 0.49, 0.50, 0.50]
    h = hist(10, reward=base + [3.0, 0.5], reward_std=[0.5] * 8 + [5.0, 0.5], advantages__max_abs=[1.0] * 8 + [7.0, 1.0])
    f = only(diagnose(h, window=W, kinds=["reward_spike"]), "reward_spike")
    # window before step 9: 0.51 0.49 0.50 0.50 -> median 0.50, MAD 0.005 (floored at 0.01): z = 2.5 / (1.4826 * 0.01)
    assert f.step == 9 and f.evidence["reward_median_before"] == pytest.approx(0.5)
    assert f.evidence["robust_z"] == pytest.approx(2.5 / (1.4826 * 0.01))
    assert f.evidence["reward_std_ratio"] == pytest.approx(10.0) and f.evidence["advantages/max_abs"] == 7.0
    # the whole batch doing better (the same jump, spread unchanged) is learning, not a spike
    steady = hist(10, reward=base + [0.8, 0.8], reward_std=0.5)
    assert diagnose(steady, window=W, kinds=["reward_spike"]) == []


def test_kl_blowup_window_median_over_kl_max():
    h = hist(12, kl=[0.1] * 6 + [2.0] * 6)
    f = only(diagnose(h, window=W, kinds=["kl_blowup"]), "kl_blowup")
    # window medians (W=4, the mean of the middle two): step 7 = median(0.1, 0.1, 0.1, 2) = 0.1;
    # step 8 = median(0.1, 0.1, 2, 2) = 1.05 > 1.0
    assert f.step == 8 and f.evidence["kl"] == pytest.approx(1.05)


def test_one_heavy_tailed_kl_step_is_not_a_blowup():
    # k3 = exp(d) - d - 1 with d = ref - logp: one token the reference favours e^9 times over the policy
    # adds 8000 to a step's sum, so one step read 122.8 nats among steps at 0.3-1.2 in a real collapse
    # run. A window mean names a blowup: (0.5 * 3 + 120) / 4 = 30.4 > 1; the median stays at 0.5.
    h = hist(12, kl=[0.5] * 6 + [120.0] + [0.5] * 5)
    assert diagnose(h, window=W, kinds=["kl_blowup"]) == []
    assert rolling_means([(s, m["kl"]) for s, m in enumerate(h, 1)], W)[3] == (7, pytest.approx(30.375))
    # two such steps in one window are a policy that has left the reference
    h2 = hist(12, kl=[0.5] * 6 + [120.0, 0.5, 120.0] + [0.5] * 3)
    f = only(diagnose(h2, window=W, kinds=["kl_blowup"]), "kl_blowup")
    assert f.step == 9 and f.evidence["kl"] == pytest.approx(60.25)  # median(0.5, 120, 0.5, 120)


def test_zero_variance_stall_too_hard_and_too_easy_and_not_after_learning():
    hard = hist(20, frac_reward_zero_std=0.95, reward=0.01)
    f = only(diagnose(hard, window=W, kinds=["zero_variance_stall"]), "zero_variance_stall")
    assert f.step == W and "too hard" in f.cause and "easier" in f.fix
    easy = hist(20, frac_reward_zero_std=0.95, reward=0.98)
    assert "too easy" in only(diagnose(easy, window=W, kinds=["zero_variance_stall"]), "zero_variance_stall").cause
    learned = hist(40, frac_reward_zero_std=lambda s: 0.3 if s < 20 else 0.95, reward=lambda s: min(0.4 + 0.03 * s, 0.97))
    assert diagnose(learned, window=W, kinds=["zero_variance_stall"]) == []


def test_length_blowup_reports_length_by_right_and_wrong():
    h = hist(20, completions__clipped_ratio=lambda s: 0.0 if s <= 8 else 0.9, completions__mean_length_wrong=15.0,
             completions__mean_length_right=9.0)
    f = only(diagnose(h, window=W, kinds=["length_blowup"]), "length_blowup")
    # window means at step 10: 0.45, step 11: 0.675 >= 0.5 and 0.675 - 0 >= 0.3
    assert f.step == 11 and f.evidence["completions/mean_length_wrong"] == 15.0


def test_reward_decline_from_the_start_vs_late_decline_after_a_rise():
    sign = hist(20, reward=lambda s: 0.4 - 0.03 * s)
    f = only(diagnose(sign, window=W), "reward_decline")
    # start (steps 1-3) = 0.34; window mean at s = 0.4 - 0.03 (s - 1.5) <= 0.4 * 0.34 = 0.136 from s = 10.3 on
    assert f.step == 11 and f.evidence["reward_at_start"] == pytest.approx(0.34)
    # a start near 0 is no level to fall from: 0.02 -> 0.0 is quiet
    assert diagnose(hist(20, reward=lambda s: 0.015 if s <= 5 else 0.0), window=W, kinds=["reward_decline"]) == []
    late = hist(60, reward=lambda s: 0.4 + 0.02 * s if s <= 25 else 0.9 - 0.03 * (s - 25))
    f = only(diagnose(late, window=W), "late_decline")
    # late_decline reads rolling medians (a jackpot makes no rise): the best window, steps 23-26 =
    # 0.86, 0.88, 0.90, 0.87, has median (0.87 + 0.88) / 2 = 0.875 at step 26; the start is the median
    # of 0.42, 0.44, 0.46
    assert f.evidence["reward_peak"] == pytest.approx(0.875) and f.evidence["peak_step"] == 26
    assert f.evidence["reward_at_start"] == pytest.approx(0.44)
    assert f.step > 25


def test_late_decline_on_held_out_accuracy():
    # evals every 25 steps: 0.38 -> 0.535 (rose 0.155 >= 0.1) -> 0.42 (drop 0.115) -> 0.31 (drop 0.225 >= 0.15)
    acc = {25: 0.38, 50: 0.45, 100: 0.535, 125: 0.42, 175: 0.31, 200: 0.45}
    h = hist(200, reward=0.2)
    for m in h:
        if m["step"] in acc:
            m["accuracy"] = acc[m["step"]]
    f = only(diagnose(h, kinds=["late_decline"]), "late_decline")
    assert f.step == 175 and f.evidence["accuracy_peak"] == 0.535 and f.evidence["peak_step"] == 100
    # an early dip below the first eval, then a climb, is not a decline
    early = hist(200, reward=0.2)
    for m in early:
        if m["step"] in (50, 100, 150):
            m["accuracy"] = {50: 0.26, 100: 0.576, 150: 0.512}[m["step"]]
    assert diagnose(early, kinds=["late_decline"]) == []


def test_grad_explosion_ratio_and_skipped_updates():
    # one spike (clipped to max_grad_norm, gone the next step) is not an explosion; a second within the window is
    once = hist(12, grad_norm=[0.5] * 8 + [40.0, 0.5, 0.5, 0.5])
    assert diagnose(once, window=W, kinds=["grad_explosion"]) == []
    h = hist(12, grad_norm=[0.5] * 8 + [40.0, 0.5, 30.0, 0.5])
    f = only(diagnose(h, window=W, kinds=["grad_explosion"]), "grad_explosion")
    # reported at the first spike it counts (step 9), confirmed by the second (step 11)
    assert f.step == 9 and f.evidence["confirmed_at"] == 11
    assert f.evidence["ratio"] == pytest.approx(60.0)   # 30 / median(0.5, 0.5, 40, 0.5)
    assert f.evidence["spikes_in_window"] == [(9, 40.0), (11, 30.0)]
    # spikes further apart than the window do not add up
    apart = hist(16, grad_norm=[0.5] * 8 + [40.0] + [0.5] * 4 + [30.0, 0.5, 0.5])
    assert diagnose(apart, window=W, kinds=["grad_explosion"]) == []
    # large but steady gradients (a reward scale) are not an explosion
    assert diagnose(hist(12, grad_norm=40.0), window=W, kinds=["grad_explosion"]) == []
    skipped = hist(12, grad_norm=0.5, skipped=lambda s: 1.0 if s == 5 else 0.0)
    assert only(diagnose(skipped, window=W, kinds=["grad_explosion"]), "grad_explosion").step == 5


def test_every_kind_has_a_detector_and_bad_names_raise():
    assert set(KINDS) == set(DETECTORS)
    for name in ("entropy_collapse", "reward_hacking", "reward_spike", "kl_blowup", "zero_variance_stall",
                 "length_blowup", "late_decline", "grad_explosion"):
        assert name in KINDS
    with pytest.raises(ConfigError, match="unknown threshold"):
        diagnose([], windw=3)
    with pytest.raises(ConfigError, match="unknown kind"):
        diagnose([], kinds=["collapse"])
    assert set(DEFAULTS) >= {"window", "kl_max", "spike_z"}


def test_read_history_round_trip(tmp_path):
    h = healthy(10)
    p = tmp_path / "history.jsonl"
    p.write_text("".join(json.dumps(m) + "\n" for m in h))
    assert read_history(p) == h


# ---------------------------------------------------------------- the cause first

def order(findings):
    return [(f.kind, f.step, f.consequence_of) for f in findings]


RISE_THEN_NOTHING = [0.3, 0.3, 0.3] + [0.0] * 9  # the reward falls to 0 at step 4


def test_a_push_the_wrong_way_is_named_before_the_drift_it_causes():
    # reward_decline: window means (W=4) 0.225, 0.15, 0.075 at steps 4-6; 0.075 <= 0.4 * 0.3 -> step 6.
    # kl_blowup: KL 0.2 until step 5, then 4.0: window median at step 6 = median(0.2, 0.2, 0.2, 4) = 0.2,
    # at step 7 = median(0.2, 0.2, 4, 4) = 2.1 -> step 7. The reward fell (3-step mean 0.1 <= 0.12 at
    # step 5) while the KL over steps 2-5 was 0.2: the direction of the update, not its size ->
    # reward_decline first, kl_blowup its consequence.
    h = hist(12, reward=RISE_THEN_NOTHING, kl=[0.0, 0.2, 0.2, 0.2, 0.2] + [4.0] * 7)
    found = diagnose(h, window=W)
    assert order(found) == [("reward_decline", 6, None), ("kl_blowup", 7, "reward_decline")]
    assert found[0].evidence["reward_fell_at"] == 5
    assert found[0].evidence["kl_while_reward_fell"] == pytest.approx(0.2)
    assert "likely a consequence of reward_decline" in report(found)


def test_a_step_that_is_too_large_is_named_before_the_fall_it_causes():
    # KL 0.9 after the first updates, 3.0 from step 5 (mean over steps 2-5 = (0.9 * 3 + 3) / 4 = 1.425 >=
    # decline_kl_split 0.75): window median at step 6 = median(0.9, 0.9, 3, 3) = 1.95 -> kl_blowup at 6,
    # the same step as the decline; by PRIORITY alone reward_decline would come first
    h = hist(12, reward=RISE_THEN_NOTHING, kl=[0.0, 0.9, 0.9, 0.9] + [3.0] * 8)
    assert order(diagnose(h, window=W)) == [("kl_blowup", 6, None), ("reward_decline", 6, "kl_blowup")]


def test_kl_blowup_waits_one_window_for_the_mechanism():
    # KL 2.0 from step 2: window median of (0, 2, 2, 2) = 2.0 at step 4. Truncations from step 6: window
    # mean 0.5 at step 7. 7 <= 4 + W, so the KL waits for the length blow-up and is listed as its consequence
    h = hist(12, kl=[0.0] + [2.0] * 11, completions__clipped_ratio=[0.0] * 5 + [1.0] * 7)
    assert order(diagnose(h, window=W)) == [("length_blowup", 7, None), ("kl_blowup", 4, "length_blowup")]
    # truncations that start more than a window later are the consequence of the drift, not its cause
    late = hist(20, kl=[0.0] + [2.0] * 19, completions__clipped_ratio=[0.0] * 12 + [1.0] * 8)
    assert order(diagnose(late, window=W)) == [("kl_blowup", 4, None), ("length_blowup", 14, "kl_blowup")]


def test_a_modest_kl_blowup_waits_for_an_entropy_collapse():
    # A policy collapsed onto one answer sits about a nat per token from the reference, so a collapse
    # crosses kl_max by itself. KL 1.2 from step 2 (window median 1.2 at step 4, below collapse_kl_max
    # 1.5); entropy 1.0 -> 0.02 and distinct 0.6 -> 1/8 from step 5, reward 0.1: at step 7 the window
    # means are entropy (1 + 3 * 0.02) / 4 = 0.265 < 0.5 and distinct (0.6 + 3 / 8) / 4 = 0.244 < 0.35, so
    # entropy_collapse at 7, within one window (4) of the KL: the collapse is the cause, the KL under it.
    ent = [1.0] * 4 + [0.02] * 12
    h = hist(16, kl=[0.0] + [1.2] * 15, entropy=ent, completions__distinct_frac=[0.6] * 4 + [1 / 8] * 12, reward=0.1)
    found = diagnose(h, window=W, kinds=["kl_blowup", "entropy_collapse"])
    assert [f.kind for f in found] == ["entropy_collapse", "kl_blowup"]
    assert found[1].step == 4 and found[1].evidence["kl"] == pytest.approx(1.2)
    assert found[1].consequence_of == "entropy_collapse" and found[0].step == 7
    # a step far too large (median 3.0 >= collapse_kl_max) is named first, the collapse under it
    big = hist(16, kl=[0.0] + [3.0] * 15, entropy=ent, completions__distinct_frac=[0.6] * 4 + [1 / 8] * 12,
               reward=0.1)
    found = diagnose(big, window=W, kinds=["kl_blowup", "entropy_collapse"])
    assert [(f.kind, f.consequence_of) for f in found] == [("kl_blowup", None), ("entropy_collapse", "kl_blowup")]


def test_a_stall_at_the_step_the_policy_diverged_is_its_consequence():
    # every group all-equal from the start (frac 1.0, reward flat at 0) and the KL at 2.0: both hold at
    # step 4. A stall has no gradient and cannot move the policy; a policy that diverged can stall.
    h = hist(12, reward=0.0, frac_reward_zero_std=1.0, kl=[0.0] + [2.0] * 11)
    assert order(diagnose(h, window=W)) == [("kl_blowup", 4, None), ("zero_variance_stall", 4, "kl_blowup")]
    # without the KL it is a stall of its own
    assert order(diagnose(hist(12, reward=0.0, frac_reward_zero_std=1.0), window=W)) == [
        ("zero_variance_stall", 4, None)]


def test_a_reward_spike_the_advantages_bound_is_not_reported():
    base = [0.50, 0.52, 0.48, 0.50, 0.51, 0.49, 0.50, 0.50]
    spike = dict(reward=base + [3.0, 0.5], reward_std=[0.5] * 8 + [5.0, 0.5], num_generations=4)
    # group z-scores give one sample in a group of 4 at most (4 - 1) / sqrt(4) = 1.5
    assert diagnose(hist(10, advantages__max_abs=[0.87] * 8 + [1.5, 0.87], **spike), window=W,
                    kinds=["reward_spike"]) == []
    f = only(diagnose(hist(10, advantages__max_abs=[0.87] * 8 + [30.0, 0.87], **spike), window=W,
                      kinds=["reward_spike"]), "reward_spike")
    assert f.step == 9


def test_a_jackpot_lifts_no_median():
    # one step in four carries a jackpot (3.2) for 12 steps, the gold reward is flat: the 4-step mean
    # climbs from 0.12 to (3 * 0.12 + 3.2) / 4 = 0.89 and falls back (a "hack", then a "late decline"
    # by means); the medians stay at 0.12
    rewards = [0.12] * 3 + [3.2, 0.12, 0.12, 0.12] * 3 + [0.12] * 9
    h = hist(24, reward=rewards, gold_reward=0.12)
    assert max(v for _, v in rolling_means([(m["step"], m["reward"]) for m in h], W)) == pytest.approx(0.89)
    assert diagnose(h, window=W, kinds=["reward_hacking", "late_decline"]) == []
