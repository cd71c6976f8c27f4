"""The advantage zoo against numbers worked out by hand, plus property tests."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_kit.config import GRPOConfig
from grpo_kit.core.advantages import (
    ESTIMATORS,
    TOKEN_LEVEL,
    estimate_advantages,
    gae,
    group_zscore,
    hybrid_gae,
    kmeans_1d,
    kmeans_bucket,
    mean_centred,
    normalize_then_sum,
    pairwise_winrate,
    preferences_from_rewards,
    process_advantages,
    rank_based,
    rloo,
    sum_then_normalize,
    terminal_rewards,
    topk_baseline,
    topk_minus_own_BROKEN_SIGN,
)
from grpo_kit.engines.trl_engine import trl_kwargs
from grpo_kit.errors import ConfigError, DataError
from grpo_kit.loop.checks import check_config

S3 = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1] and of [1, 0, 0, 1]-like groups


def approx(t, expected, tol=1e-4):
    assert torch.as_tensor(t).flatten().tolist() == pytest.approx(list(expected), abs=tol)


# ---------------------------------------------------------------- RLOO
def test_rloo_by_hand():
    # [1,0,0,1]: 1 - mean(0,0,1) = 2/3 ; 0 - mean(0,1,1) = -2/3
    approx(rloo(torch.tensor([[1.0, 0.0, 0.0, 1.0]])), [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # [0,1,2]: 0 - 1.5, 1 - 1, 2 - 0.5
    approx(rloo(torch.tensor([[0.0, 1.0, 2.0]])), [-1.5, 0.0, 1.5])


# ---------------------------------------------------------------- rank and pairwise
def test_rank_by_hand_with_ties():
    # [3,1,1,7]: average ranks 3, 1.5, 1.5, 4 -> (2*rank - 5)/3 = 1/3, -2/3, -2/3, 1
    approx(rank_based(torch.tensor([[3.0, 1.0, 1.0, 7.0]])), [1 / 3, -2 / 3, -2 / 3, 1.0])


def test_pairwise_winrate_by_hand_with_a_soft_label():
    # 0 beats 1 (+1), 0 vs 2: 2 slightly better (-0.5), 2 beats 1 (+1); rows sum / (G-1) = /2
    M = torch.tensor([[[0.0, 1.0, -0.5], [-1.0, 0.0, -1.0], [0.5, 1.0, 0.0]]])
    approx(pairwise_winrate(M), [0.5 / 2, -2 / 2, 1.5 / 2])


def test_pairwise_rejects_a_non_antisymmetric_matrix():
    M = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    with pytest.raises(DataError, match=r"prompt p=0, pair \(i=0, j=1\) is contradictory"):
        pairwise_winrate(M)
    with pytest.raises(DataError, match=r"\[-1, 1\]"):
        pairwise_winrate(torch.tensor([[[0.0, 2.0], [-2.0, 0.0]]]))


# ---------------------------------------------------------------- k-means buckets
def test_kmeans_1d_by_hand():
    # init at the 0.25 and 0.75 quantiles of [0,1,10,11]: 0.75 and 10.25 -> {0,1}, {10,11} -> 0.5, 10.5
    labels, cent = kmeans_1d(torch.tensor([0.0, 1.0, 10.0, 11.0]), 2)
    assert labels.tolist() == [0, 0, 1, 1]
    approx(cent, [0.5, 10.5])


def test_kmeans_buckets_disagree_with_prompt_groups():
    # prompt 0: [0, 10], prompt 1: [1, 11]. Clusters {0,1} and {10,11}: within each, mean +-0.5,
    # unbiased std sqrt(0.5) -> -+0.5/(0.70711+1e-4). The 10 (best answer of prompt 0) gets a
    # NEGATIVE advantage, while per-prompt groups give it +0.707.
    r = torch.tensor([[0.0, 10.0], [1.0, 11.0]])
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    approx(kmeans_bucket(r, 2), [-a, -a, a, a])
    approx(group_zscore(r), [-a, a, -a, a])


def test_kmeans_on_binary_rewards_erases_the_signal():
    # 0/1 rewards: one cluster of 0s and one of 1s, each with std 0 -> all advantages 0
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    assert (kmeans_bucket(r, 8) == 0).all()


# ---------------------------------------------------------------- multi-objective
def test_normalize_then_sum_by_hand_and_where_it_differs():
    # one group, G=2, K=2, weights (2, 1): objective 0 = [1, 0], objective 1 = [0, 2]
    # z0 = +-0.5/(sqrt(.5)+1e-4); z1 = -+1/(sqrt(2)+1e-4); s = 2*z0 + z1 = [a, -a]
    # batch z-score of [a, -a]: mean 0, unbiased std a*sqrt(2) -> +-a/(a*sqrt(2)+1e-4)
    obj = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    z0 = 0.5 / (math.sqrt(0.5) + 1e-4)
    z1 = 1 / (math.sqrt(2) + 1e-4)
    a = 2 * z0 - z1
    approx(normalize_then_sum(obj, [2.0, 1.0]), [a / (a * math.sqrt(2) + 1e-4), -a / (a * math.sqrt(2) + 1e-4)])
    # sum first: 2*1 + 0 = 2 and 2*0 + 2 = 2 -> a zero-variance group, no signal at all
    assert (sum_then_normalize(obj, [2.0, 1.0]) == 0).all()


def test_multi_objective_weights_must_match_k():
    with pytest.raises(ConfigError, match="one weight per objective"):
        normalize_then_sum(torch.zeros(1, 2, 3), [1.0, 2.0])


# ---------------------------------------------------------------- process supervision
def test_process_advantages_by_hand():
    # G=2, S=2 steps, T=4. Completion 0: steps with rewards 1, 1 ending at tokens 0 and 2.
    # Completion 1: one real step (reward 0, ends at token 1) and a padding step.
    # Real steps [1, 1, 0]: mean 2/3, unbiased var ((1/3)^2*2 + (2/3)^2)/2 = 1/3.
    # r~ = (1/3)/(sqrt(1/3)+1e-4) = b for the 1s, -(2/3)/(sqrt(1/3)+1e-4) = -2b for the 0.
    # Completion 0: token 0 -> b + b; tokens 1, 2 -> b; token 3 -> 0 (after its last step).
    # Completion 1: tokens 0, 1 -> -2b; tokens 2, 3 -> 0.
    b = (1 / 3) / (S3 + 1e-4)
    adv = process_advantages(torch.tensor([[1.0, 1.0], [0.0, 5.0]]), torch.tensor([[0, 2], [1, 3]]), 4,
                             step_mask=torch.tensor([[True, True], [True, False]]))
    assert adv.shape == (2, 4)
    approx(adv, [2 * b, b, b, 0.0, -2 * b, -2 * b, 0.0, 0.0])
    # the padded (P, G, S) form gives the same per prompt
    batched = process_advantages(torch.tensor([[[1.0, 1.0], [0.0, 5.0]]] * 2), torch.tensor([[[0, 2], [1, 3]]] * 2),
                                 4, step_mask=torch.tensor([[[True, True], [True, False]]] * 2))
    assert torch.allclose(batched[1], adv)


def test_process_rejects_step_ends_outside_the_completion():
    with pytest.raises(DataError, match="step_ends"):
        process_advantages(torch.tensor([[1.0], [0.0]]), torch.tensor([[5], [0]]), 4)


# ---------------------------------------------------------------- GAE and the hybrid
def test_gae_by_hand():
    # values 0.5 everywhere, terminal reward 1 at t=2, gamma 1, lambda 0.5:
    # t=2: delta = 1 - 0.5 = 0.5; t=1: delta = 0 + 0.5 - 0.5 = 0 -> 0 + 0.5*0.5 = 0.25; t=0: 0.125
    # row 2 is right-padded (mask 1 1 0): reward on t=1, value 9 at t=2 is ignored
    # t=1: delta = 1 + 0 - 0.5 = 0.5; t=0: 0 + 0.5 - 0.5 + 0.5*0.5 = 0.25
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    r = terminal_rewards(torch.tensor([1.0, 1.0]), mask)
    assert r.tolist() == [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    adv, ret = gae(r, torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 9.0]]), mask, gamma=1.0, lam=0.5)
    approx(adv, [0.125, 0.25, 0.5, 0.25, 0.5, 0.0])
    approx(ret, [0.625, 0.75, 1.0, 0.75, 1.0, 0.0])


def test_hybrid_gae_by_hand():
    # rewards [1, 0]: group z-score +-0.5/(sqrt(.5)+1e-4) = +-g; V = 0 and lambda = 1 make GAE the
    # return-to-go: [1, 1] for the rewarded row, [0, 0] for the other.
    # hybrid = 0.3 * g + 0.7 * 1 and 0.3 * (-g) + 0.7 * 0
    g = 0.5 / (math.sqrt(0.5) + 1e-4)
    h = hybrid_gae(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2, 2), torch.ones(1, 2, 2), w=0.3, lam=1.0)
    approx(h, [0.3 * g + 0.7, 0.3 * g + 0.7, -0.3 * g, -0.3 * g])


# ---------------------------------------------------------------- top-k, broken and fixed
def test_topk_broken_sign_rewards_the_worst_answer():
    # [0,1,2,3], k=2: mean of the top 2 = 2.5. as often written: 2.5 - r; corrected: r - 2.5
    r = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    broken = topk_minus_own_BROKEN_SIGN(r, 2)
    approx(broken, [2.5, 1.5, 0.5, -0.5])
    assert int(broken.argmax()) == 0  # the worst answer (reward 0) gets the largest advantage
    approx(topk_baseline(r, 2), [-2.5, -1.5, -0.5, 0.5])
    # the variant's k=5 > G=4: the top-k mean is the group mean, so the fixed one is Dr. GRPO's mean-centred
    assert torch.equal(topk_baseline(r, 5), mean_centred(r))


# ---------------------------------------------------------------- dispatch and config
def test_every_estimator_is_finite_and_zero_on_a_zero_variance_batch():
    r = torch.full((2, 4), 3.0)
    for name in ESTIMATORS:
        if name in TOKEN_LEVEL:
            continue
        adv = estimate_advantages(name, r, objectives=torch.full((2, 4, 2), 1.5), preferences=torch.zeros(2, 4, 4))
        assert torch.isfinite(adv).all() and adv.abs().max() < 1e-6, name
    assert (process_advantages(torch.ones(4, 3), torch.tensor([[0, 1, 2]] * 4), 3) == 0).all()
    h = hybrid_gae(r, torch.rand(2, 4, 3), torch.ones(2, 4, 3))
    assert torch.isfinite(h).all()


def test_single_token_and_fully_masked_rows_are_finite():
    mask = torch.tensor([[1], [0]])  # T = 1: one single-token completion, one with no tokens
    adv, ret = gae(terminal_rewards(torch.tensor([1.0, 2.0]), mask), torch.tensor([[0.3], [0.7]]), mask)
    assert torch.isfinite(adv).all()
    approx(adv, [1 - 0.3, 0.0])  # delta = 1 - 0.3 on the single token; nothing on the empty row
    assert ret[1].item() == 0.0
    h = hybrid_gae(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 2, 1), mask.view(1, 2, 1))
    assert h[0, 1, 0] == 0  # fully masked row gets nothing
    # the single token: w * z-score of 1 in [1, 2] (-sqrt(1/2)) + (1 - w) * GAE delta (1 - 0), w = 0.3
    assert h[0, 0, 0].item() == pytest.approx(0.3 * -math.sqrt(0.5) + 0.7 * 1.0, abs=1e-4)  # 0.4879
    p = process_advantages(torch.tensor([[1.0], [0.0]]), torch.tensor([[0], [0]]), 1,
                           step_mask=torch.tensor([[True], [False]]))  # a single real step: std 0
    assert torch.isfinite(p).all() and (p == 0).all()


def test_estimators_that_need_more_inputs_say_so():
    r = torch.tensor([[1.0, 0.0]])
    with pytest.raises(ConfigError, match="preference matrix"):
        estimate_advantages("pairwise", r)
    with pytest.raises(ConfigError, match="per-objective"):
        estimate_advantages("normalize_then_sum", r)
    for name in TOKEN_LEVEL:
        with pytest.raises(ConfigError, match="per-token"):
            estimate_advantages(name, r)
    with pytest.raises(ConfigError, match="unknown advantage_estimator"):
        estimate_advantages("ppo", r)


def test_config_validates_the_estimator_names():
    assert GRPOConfig().advantage_estimator == "grpo" and GRPOConfig().kl_estimator == "k3"
    check_config(GRPOConfig(advantage_estimator="rloo", kl_estimator="k2"))
    with pytest.raises(ConfigError, match="advantage_estimator"):
        check_config(GRPOConfig(advantage_estimator="gae"))
    with pytest.raises(ConfigError, match="kl_estimator"):
        check_config(GRPOConfig(kl_estimator="k4"))
    assert trl_kwargs(GRPOConfig(advantage_estimator="normalize_then_sum"))["multi_objective_aggregation"] == \
        "normalize_then_sum"
    assert trl_kwargs(GRPOConfig())["multi_objective_aggregation"] == "sum_then_normalize"  # TRL's default
    with pytest.raises(ConfigError, match="TRL has no such estimator"):
        trl_kwargs(GRPOConfig(advantage_estimator="rloo"))
    with pytest.raises(ConfigError, match="entropy_coef"):
        check_config(GRPOConfig(entropy_coef=-0.1))
    with pytest.raises(ConfigError, match="TRL"):
        trl_kwargs(GRPOConfig(kl_estimator="k1"))
    assert trl_kwargs(GRPOConfig(entropy_coef=0.01))["entropy_coef"] == 0.01


def test_the_loop_uses_the_configured_estimator(small_cfg, monkeypatch):
    import importlib

    train_mod = importlib.import_module("grpo_kit.loop.train")  # the package re-exports train(), not the module

    seen = []
    real = train_mod.estimate_advantages

    def spy(name, rewards, **kw):
        seen.append((name, tuple(kw["objectives"].shape)))
        return real(name, rewards, **kw)

    monkeypatch.setattr(train_mod, "estimate_advantages", spy)
    cfg = small_cfg.replace(steps=1, advantage_estimator="normalize_then_sum", threads=1)
    hist = list(train_mod.train(cfg))
    assert seen == [("normalize_then_sum", (4, 4, 1))] and math.isfinite(hist[-1]["loss"])


# ---------------------------------------------------------------- properties
finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def reward_groups(draw):
    P, G = draw(st.integers(1, 4)), draw(st.integers(2, 8))
    vals = draw(st.lists(finite, min_size=P * G, max_size=P * G))
    return torch.tensor(vals, dtype=torch.float32).view(P, G)


CENTRED = ("grpo", "rloo", "rank", "sum_then_normalize")


@settings(max_examples=60, deadline=None)
@given(reward_groups(), st.sampled_from(["group", "batch", "none"]))
def test_property_every_estimator_finite_and_centred_ones_sum_to_zero(r, scale):
    objectives = torch.stack([r, -r, r * 0.5], dim=-1)  # (P, G, 3)
    prefs = preferences_from_rewards(r)
    for name in ESTIMATORS:
        if name in TOKEN_LEVEL:
            continue
        adv = estimate_advantages(name, r, scale_rewards=scale, objectives=objectives, preferences=prefs)
        assert adv.shape == r.shape and torch.isfinite(adv).all(), name
        if name in CENTRED:
            # centring is exact arithmetic: check it in float64, where near-equal large rewards
            # (e.g. 973.875 vs 973.861, a found case) do not lose their difference to rounding
            adv64 = estimate_advantages(name, r.double(), scale_rewards=scale, objectives=objectives.double(),
                                        preferences=prefs.double())
            tol = 1e-9 * (1 + adv64.abs().max().item())
            assert adv64.sum(dim=1).abs().max().item() <= tol, name


@settings(max_examples=60, deadline=None)
@given(reward_groups())
def test_property_rank_and_pairwise_relations(r):
    G = r.shape[1]
    assert torch.allclose(rloo(r), G / (G - 1) * mean_centred(r), atol=1e-2)
    rk = rank_based(r)
    assert rk.abs().max() <= 1 + 1e-6 and rk.sum(dim=1).abs().max() < 1e-5
    assert torch.equal(rk, rank_based(2 * r - 0.0)) and torch.equal(-rk, rank_based(-r))  # only the order matters
    nts = normalize_then_sum(torch.stack([r, 2 * r], dim=-1))
    assert torch.isfinite(nts).all() and abs(nts.sum().item()) < 1e-2 * (1 + nts.abs().max().item())


@settings(max_examples=40, deadline=None)
@given(reward_groups(), st.integers(1, 10))
def test_property_kmeans_buckets_centred_within_clusters(r, k):
    labels, _ = kmeans_1d(r.flatten(), k)
    adv = kmeans_bucket(r, k).flatten().double()
    assert torch.isfinite(adv).all()
    for c in labels.unique():
        assert abs(adv[labels == c].sum().item()) < 1e-3 * (1 + adv.abs().max().item())


def test_advantage_table_figure_and_sliders(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import grpo_kit.view.plotting
    from grpo_kit.core.advantages import advantage_table
    from grpo_kit.view.plotting import plot_advantage_bars
    from grpo_kit.view.widgets import advantage_sliders

    r = torch.tensor([[0.0, 0.5, 1.0]])
    table = advantage_table(r)
    assert set(table) == {"group", "batch", "none", "rloo", "rank", "kmeans", "topk", "topk_minus_own_BROKEN_SIGN"}
    fig = plot_advantage_bars(r[0], {n: a[0] for n, a in table.items()})
    assert len(fig.axes[0].patches) == 3 * len(table)
    drawn = []  # what each re-draw plotted: the rewards and every estimator's advantages

    def recording_plot(rewards, advantages):
        drawn.append((rewards.tolist(), {n: a.tolist() for n, a in advantages.items()}))
        return plot_advantage_bars(rewards, advantages)

    monkeypatch.setattr(grpo_kit.view.plotting, "plot_advantage_bars", recording_plot)
    panel = advantage_sliders([0.0, 0.5, 1.0])
    sliders = [s for box in panel.children[:2] for s in box.children]
    assert len(sliders) == 3 and len(drawn) == 1 and drawn[0][0] == [0.0, 0.5, 1.0]
    sliders[0].value = 1.0  # moving a slider re-draws with the new rewards and their advantages
    assert len(drawn) == 2 and drawn[1][0] == [1.0, 0.5, 1.0]
    want = advantage_table(torch.tensor([[1.0, 0.5, 1.0]]))
    assert drawn[1][1] == {n: a[0].tolist() for n, a in want.items()}
    assert drawn[1][1]["none"] == pytest.approx([1 / 6, -1 / 3, 1 / 6])  # mean-centred by hand: mean 5/6
