"""Advantages from more than one scalar per completion, inside the training loop.

``train.grpo_step`` calls :func:`step_advantages` when ``GRPOConfig.advantage_estimator`` is one of
:data:`ONLINE`; the reward functions are still scored and logged as in every run, but the
advantages come from:

| estimator | input made each step | advantages | source |
|---|---|---|---|
| `process` | the step judge (``step_judge``): a score and an end position per step of each completion | per token (P, G, Tc): step scores z-scored over the group's steps, token t gets the sum of its own and later steps' (``advantages.process_advantages``) | DeepSeekMath (Shao et al. 2024) sec. 4.1.3, process supervision |
| `hybrid_gae` | a value head (``critic.py``) on the policy's last hidden states, trained every step on the GAE returns | per token: w * group advantage + (1 - w) * GAE (``advantages.hybrid_gae``) | GAE (Schulman et al. 2016); value head as in PPO for LMs (Ouyang et al. 2022); the mix is a variant you will meet |
| `pairwise` | a (P, G, G) preference matrix from ``pairwise_judges``, each pair judged in both orders | per completion (P, G): its mean preference over the others (``advantages.pairwise_winrate``) | win rates from pairwise judges; the order swap as in MT-Bench (Zheng et al. 2023) |

Process rewards. A step judge is called ``judge(prompt, text, **columns) -> [(score, end), ...]``
with the completion's text second and the item's columns as keywords (the built-in tasks' items
carry ``answer``, ``completion`` (the reference), ``reverse_digits``, ``scratchpad``: do not name a
parameter after one of them). It returns one finite score per step and the character offset in
``text`` just past the step's last character, strictly increasing (``end`` as Python slices
count it). :func:`token_char_ends` decodes every prefix of the sampled tokens, so a step ends
on the token whose decoded prefix first reaches ``end`` (:func:`char_to_token`); this works for
any tokenizer, the tiny model's one-token-per-character one included. The shipped judge ``column_sums`` reads the scratchpad
task (``add2s``): each column sum is a step, right when it equals the true column sum, and the
answer after ``|`` is the last step.

The GAE hybrid, and what its weight means. The two terms are on different scales: with
``scale_rewards='group'`` the group term is a z-score (std 1 inside each group with any
signal; with 'none', the default, it is r - mean(r), in reward units), the GAE term is in
reward units (0/1 rewards, gamma = 1: within [-1, 1], and smaller as the critic learns to
predict the reward). So ``hybrid_weight`` w is not the share of the
advantage that comes from the group: that share is about w s_grp / (w s_grp + (1 - w) s_gae),
with s the std of each term over the batch's tokens, logged as ``advantages/group_std``,
``advantages/gae_std`` and ``advantages/group_share`` every step.

Pairwise judges. Preferences are the kit's [-1, 1] labels (``preferences.py``): +1 i wins, -1
j wins, 0 a tie, soft labels in between (a probability q that i wins is the label 2q - 1, so
a tie q = 0.5 is 0). A rule is asked (i, j) and (j, i) and the two verdicts averaged,
``M = (V - V^T) / 2`` (``preferences.average_orders``): a judge that favours whichever
completion it reads first by b gives the same M as one without the bias, and the bias is
logged. A scalar judge (``learned:PATH``, ``reward:NAME``) scores each completion once and
compares scores (it has no order to be biased by).
"""
from __future__ import annotations

import bisect
import math
import re
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch

from grpo_kit.core.advantages import (
    hybrid_gae_terms,
    nanstd,
    pairwise_winrate,
    process_advantages,
)
from grpo_kit.core.preferences import (
    ATOL,
    PreferenceCycleWarning,
    average_orders,
    check_preferences,
    ensemble_preferences,
    find_cycle,
    preference_agreement,
)
from grpo_kit.data.tasks import column_sums, read_completion
from grpo_kit.errors import CheckpointError, ConfigError, RewardError
from grpo_kit.eval.inference import columns_of
from grpo_kit.loop.step import micro_slices, run_autocast
from grpo_kit.model import critic
from grpo_kit.rewards import judges, resolve
from grpo_kit.rewards.pairwise import (
    closeness_rule,
    correctness_rule,
    preferences_from_judge,
    rule_verdicts,
)

ONLINE = ("process", "hybrid_gae", "pairwise")


# ---------------------------------------------------------------- process supervision

_SUM_PROMPT = re.compile(r"\s*(\d+)\+(\d+)=\s*")


def column_sum_steps(prompt: str, text: str, scratchpad=None, **_) -> list[tuple[float, int]]:
    """The scratchpad task's step judge: ``47+85=`` -> ``12 13|231`` has three steps.

    Each whitespace-separated chunk before ``|`` is a column step, 1.0 when it equals that
    column's true sum (with the true carry, ``tasks.column_sums``), else 0.0 (extra chunks 0.0);
    ``|`` and the answer after it are the last step, 1.0 when the answer is a + b. A completion
    with nothing in it has no steps. ``12 14|241`` -> ``[(1.0, 2), (0.0, 5), (0.0, 9)]``.
    """
    m = _SUM_PROMPT.fullmatch(prompt)
    if not scratchpad or m is None:
        raise RewardError(f"step judge 'column_sums' reads the scratchpad task's column sums (prompts 'a+b=', items "
                          f"with scratchpad=True), got prompt {prompt[:40]!r}; train on task 'add2s' or give a "
                          f"step_judge for your completions ('package.module:function')")
    a, b = int(m.group(1)), int(m.group(2))
    want = column_sums(a, b).split()
    body, bar, tail = text.partition("|")
    steps = [(1.0 if k < len(want) and c.group() == want[k] else 0.0, c.end())
             for k, c in enumerate(re.finditer(r"\S+", body))]
    if bar:
        right = read_completion(text, reverse_digits=True, scratchpad=True) == a + b
        steps.append((1.0 if right else 0.0, len(body) + 1 + len(tail.rstrip())))
    return steps


STEP_JUDGES = {"column_sums": column_sum_steps}


def check_step_judge(spec) -> None:
    """``step_judge`` checked by its form only (nothing imported; see ``judges.check_reward_spec``)."""
    if callable(spec) or (isinstance(spec, str) and spec in STEP_JUDGES):
        return
    if isinstance(spec, str) and ":" in spec:
        judges.check_import_path(spec, "step_judge")
        return
    raise ConfigError(f"unknown step_judge {spec!r}: choose from {sorted(STEP_JUDGES)} or name an importable "
                      f"'package.module:function' returning [(score, end), ...] per completion")


def resolve_step_judge(spec) -> Callable:
    """``step_judge`` -> a callable: a name of :data:`STEP_JUDGES`, ``"package.module:function"`` (imported,
    which runs the module's code), or a callable."""
    check_step_judge(spec)
    if callable(spec):
        return spec
    if spec in STEP_JUDGES:
        return STEP_JUDGES[spec]
    f = judges.import_object(spec)
    if not callable(f):
        raise ConfigError(f"step_judge {spec!r} is a {type(f).__name__}, not a function")
    return f


def check_steps_output(out, text: str, name: str, row: int) -> list[tuple[float, int]]:
    """A step judge's answer for one completion, checked: [(finite score, end)], ends strictly
    increasing within 1..len(text). Anything else is a RewardError naming the judge, row and problem."""
    def bad(problem):
        return RewardError(f"step judge {name!r} on completion {row} ({text[:40]!r}): {problem}; return a list of "
                           f"(score, end) pairs, end = the character offset just past the step, increasing")

    if not isinstance(out, (list, tuple)):
        raise bad(f"returned a {type(out).__name__}")
    steps, last = [], 0
    for k, pair in enumerate(out):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise bad(f"step {k} is {pair!r}, not a (score, end) pair")
        s, end = pair
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise bad(f"step {k} has score {s!r}, not a finite number")
        if isinstance(end, bool) or not isinstance(end, int) or not last < end <= len(text):
            raise bad(f"step {k} ends at {end!r}, not a whole number in {last + 1}..{len(text)}")
        steps.append((float(s), end))
        last = end
    return steps


def token_char_ends(tokenizer, ids: list[int]) -> list[int]:
    """ends[k] = characters in the decoded text of tokens 0..k (special tokens dropped, as the
    completions are decoded): the tiny tokenizer gives [1, 2, ..., len(ids)]."""
    texts = tokenizer.batch_decode([ids[:k + 1] for k in range(len(ids))], skip_special_tokens=True)
    return [len(t) for t in texts]


def char_to_token(ends: list[int], char_end: int) -> int:
    """The first token whose decoded prefix reaches ``char_end`` characters (the step's last token)."""
    k = bisect.bisect_left(ends, char_end)
    if k == len(ends):
        raise RewardError(f"a step ends at character {char_end}, past the decoded completion "
                          f"({ends[-1] if ends else 0} characters)")
    return k


def judge_steps(judge: Callable, tokenizer, rollouts, columns: dict[str, list]) -> list[list[tuple[float, int]]]:
    """Per completion, [(step score, index of the step's last completion token)] from ``judge``."""
    name = judges.func_name(judge)
    out = []
    for b, text in enumerate(rollouts.completions):
        ctx = {k: v[b] for k, v in columns.items()}
        try:
            raw = judge(rollouts.prompts[b], text, **ctx)
        except RewardError:
            raise
        except Exception as e:  # noqa: BLE001 - re-raised with the judge's name and the row
            raise RewardError(f"step judge {name!r} raised {type(e).__name__}: {e} on completion {b}") from e
        steps = check_steps_output(raw, text, name, b)
        ids = rollouts.completion_ids[b][rollouts.completion_mask[b].bool()].tolist()
        ends = token_char_ends(tokenizer, ids) if steps else []
        out.append([(s, char_to_token(ends, e)) for s, e in steps])
    return out


def step_tensors(steps: list[list[tuple[float, int]]], P: int, G: int) -> tuple[torch.Tensor, ...]:
    """Ragged per-completion steps -> step rewards, end tokens and a mask, each (P, G, S) padded to the most steps."""
    S = max(1, max(len(s) for s in steps))
    r = torch.zeros(P * G, S)  # (B, S)
    ends = torch.zeros(P * G, S, dtype=torch.long)  # (B, S)
    mask = torch.zeros(P * G, S, dtype=torch.bool)  # (B, S)
    for b, row in enumerate(steps):
        for k, (s, t) in enumerate(row):
            r[b, k], ends[b, k], mask[b, k] = s, t, True
    return r.view(P, G, S), ends.view(P, G, S), mask.view(P, G, S)


def process_step(run, cfg, items, rollouts) -> tuple[torch.Tensor, dict]:
    """``process``: step judge -> per-token advantages (P, G, Tc) and the ``process/*`` metrics."""
    P, G, Tc = len(items), rollouts.num_generations, rollouts.completion_ids.shape[1]
    steps = judge_steps(run.step_judge, run.tokenizer, rollouts, columns_of(items, repeat=G))
    r, ends, mask = step_tensors(steps, P, G)  # (P, G, S) each
    adv = process_advantages(r, ends, Tc, mask)  # (P, G, Tc)
    n = mask.sum(-1).float()  # (P, G) steps per completion
    return adv, {"process/steps_mean": n.mean().item(),
                 "process/step_score_mean": r[mask].mean().item() if bool(mask.any()) else float("nan"),
                 "process/no_step_frac": (n == 0).float().mean().item()}


# ---------------------------------------------------------------- the GAE hybrid

def make_critic(cfg, policy) -> tuple[torch.nn.Linear, torch.optim.Optimizer]:
    """A zero-initialised value head on the policy's hidden size and its own AdamW (``value_lr``)."""
    device = next(policy.parameters()).device
    head = critic.value_head(policy.config.hidden_size).to(device)
    return head, torch.optim.AdamW(head.parameters(), lr=cfg.value_lr)


def hybrid_step(run, cfg, rollouts, rewards: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """``hybrid_gae``: values before the update, advantages (P, G, Tc), one value-head step on the returns."""
    P, G = rewards.shape
    device = next(run.policy.parameters()).device
    B, Tc = rollouts.completion_ids.shape
    slices = micro_slices(B, cfg.micro_batch_size)
    hidden = critic.rollout_hidden(run.policy, rollouts, slices, run_autocast(cfg, device))  # (B, Tc, H) detached
    mask = rollouts.completion_mask.to(device)  # (B, Tc)
    with torch.no_grad():
        v = critic.values(run.critic, hidden, mask)  # (B, Tc)
    grp, g, ret = hybrid_gae_terms(rewards.to(device, torch.float32), v.view(P, G, Tc), mask.view(P, G, Tc),
                                   cfg.gae_gamma, cfg.gae_lambda, cfg.scale_rewards)  # (P, G, Tc) each
    adv = cfg.hybrid_weight * grp + (1 - cfg.hybrid_weight) * g  # (P, G, Tc)
    loss = critic.fit_value_head(run.critic, run.critic_optimizer, hidden, ret.view(B, Tc), mask)
    pad = ~mask.view(P, G, Tc).bool()  # (P, G, Tc) positions after a completion's end
    s_grp, s_gae = (nanstd(x.double().masked_fill(pad, float("nan")), unbiased=False).item() for x in (grp, g))
    w = cfg.hybrid_weight
    share = w * s_grp / (w * s_grp + (1 - w) * s_gae) if w * s_grp + (1 - w) * s_gae > 0 else float("nan")
    return adv, {"value/loss": loss, "value/explained_variance": critic.explained_variance(v, ret.view(B, Tc), mask),
                 "value/mean": v[mask.bool()].mean().item(), "advantages/group_std": s_grp,
                 "advantages/gae_std": s_gae, "advantages/group_share": share}


# ---------------------------------------------------------------- pairwise judges

@dataclass(frozen=True)
class PairwiseJudge:
    """A judge of ``pairwise_judges``: ``verdicts(prompts (P,), groups (P lists of G), columns one per prompt)``
    -> (P, G, G) raw verdicts, ``[p, i, j]`` with completion i shown first."""
    name: str
    verdicts: Callable


PAIRWISE_RULES = {"correctness": correctness_rule, "closeness": closeness_rule}


def _scalar_verdicts(func, temperature, prompts, groups, columns) -> torch.Tensor:
    """A scalar judge scores each completion once; the verdicts compare scores (no order, so no position bias)."""
    G = len(groups[0])
    flat_cols = {k: [x for x in v for _ in range(G)] for k, v in columns.items()}  # one value per completion
    return preferences_from_judge(func, [p for p in prompts for _ in range(G)], [c for g in groups for c in g],
                                  flat_cols, G, temperature).double()  # (P, G, G)


def check_pairwise_judge(spec) -> None:
    """One ``pairwise_judges`` entry checked by its form only (nothing imported or loaded; see
    ``judges.check_reward_spec``); :func:`resolve_pairwise_judge` accepts what this accepts."""
    if callable(spec):
        return
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"pairwise judge {spec!r}: write a rule name {sorted(PAIRWISE_RULES)}, 'learned:PATH', "
                          f"'reward:NAME' or 'package.module:function'")
    if spec in PAIRWISE_RULES:
        return
    if spec.startswith("learned:"):
        judges.check_reward_spec(spec)
    elif spec.startswith("reward:"):
        judges.check_reward_spec(spec[len("reward:"):])
    elif ":" in spec:
        judges.check_import_path(spec, "pairwise judge")
    else:
        raise ConfigError(f"unknown pairwise judge {spec!r}: choose from {sorted(PAIRWISE_RULES)}, 'learned:PATH', "
                          f"'reward:NAME' or an importable rule 'package.module:function'")


def resolve_pairwise_judge(spec, temperature: float | None = None) -> PairwiseJudge:
    """One ``pairwise_judges`` entry -> a :class:`PairwiseJudge`.

    - ``"correctness"`` / ``"closeness"``: the shipped rules of ``preferences.py``;
    - ``"learned:PATH"``: the scalar reward function ``resolve.resolve_reward_func("learned:PATH")`` gives;
    - ``"reward:SPEC"``: any ``reward_funcs`` entry (``"reward:exact_answer"``), as a scalar judge;
    - ``"package.module:function"``: a rule ``rule(prompt, a, b, **columns) -> v in [-1, 1]``;
    - a callable: a rule.
    Scalar judges compare scores as ``preferences_from_scores(scores, temperature)`` does.
    """
    if callable(spec):
        return PairwiseJudge(judges.func_name(spec), partial(rule_verdicts, spec))
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"pairwise judge {spec!r}: write a rule name {sorted(PAIRWISE_RULES)}, 'learned:PATH', "
                          f"'reward:NAME' or 'package.module:function'")
    if spec in PAIRWISE_RULES:
        return PairwiseJudge(spec, partial(rule_verdicts, PAIRWISE_RULES[spec]))
    if spec.startswith("learned:"):
        return PairwiseJudge(spec, partial(_scalar_verdicts, resolve.resolve_reward_func(spec), temperature))
    if spec.startswith("reward:"):
        return PairwiseJudge(spec, partial(_scalar_verdicts, resolve.resolve_reward_func(spec[len("reward:"):]),
                                           temperature))
    if ":" in spec:
        rule = judges.import_object(spec)
        if not callable(rule):
            raise ConfigError(f"pairwise judge {spec!r} is a {type(rule).__name__}, not a function")
        return PairwiseJudge(spec, partial(rule_verdicts, rule))
    raise ConfigError(f"unknown pairwise judge {spec!r}: choose from {sorted(PAIRWISE_RULES)}, 'learned:PATH', "
                      f"'reward:NAME' or an importable rule 'package.module:function'")


def matrix_stats(m: torch.Tensor, atol: float = ATOL) -> dict:
    """Ties, soft labels and cycles of preference matrices (P, G, G), over the pairs i < j."""
    G = m.shape[-1]
    iu = torch.triu_indices(G, G, 1)  # (2, G(G-1)/2)
    a = m[:, iu[0], iu[1]].abs()  # (P, N)
    return {"pairwise/tie_frac": (a <= atol).float().mean().item(),
            "pairwise/soft_frac": ((a > atol) & (a < 1 - atol)).float().mean().item(),
            "pairwise/cycle_groups": float(sum(find_cycle(x, atol) is not None for x in m))}


def mean_off_diagonal(x: torch.Tensor) -> float:
    """Mean of |x| over the off-diagonal entries of (..., G, G)."""
    G = x.shape[-1]
    off = ~torch.eye(G, dtype=torch.bool)  # (G, G)
    return x.abs()[..., off].mean().item()


def pairwise_preferences(judge_list: list[PairwiseJudge], prompts, groups, columns, weights=None,
                         method: str = "mean") -> tuple[torch.Tensor, dict]:
    """Every judge in both orders, averaged; the ensemble (P, G, G) and the matrix statistics."""
    averaged, metrics = [], {}
    for j in judge_list:
        m, bias = average_orders(j.verdicts(prompts, groups, columns))  # (P, G, G) each
        averaged.append(check_preferences(m, cycles="ignore"))
        metrics[f"pairwise/{j.name}/position_bias"] = mean_off_diagonal(bias)
    biases = [metrics[f"pairwise/{j.name}/position_bias"] for j in judge_list]
    metrics["pairwise/position_bias"] = sum(biases) / len(biases)
    if len(judge_list) == 1:
        ens = averaged[0]  # (P, G, G)
    else:
        with warnings.catch_warnings():  # cycles are counted in the metrics, not warned about every step
            warnings.simplefilter("ignore", PreferenceCycleWarning)
            ens = ensemble_preferences(averaged, weights, method)  # (P, G, G)
        agree = preference_agreement(averaged, ens, [j.name for j in judge_list])
        K = len(judge_list)
        between = agree["between"][~torch.eye(K, dtype=torch.bool)]  # (K(K-1),)
        metrics["pairwise/agreement"] = between.nanmean().item()
        for name, frac in agree["with_ensemble"].items():
            metrics[f"pairwise/{name}/agreement_with_ensemble"] = frac
    metrics.update(matrix_stats(ens))
    return ens, metrics


def pairwise_step(run, cfg, items, rollouts) -> tuple[torch.Tensor, dict]:
    """``pairwise``: preferences of ``run.pairwise_judges`` -> win-rate advantages (P, G) and ``pairwise/*`` metrics."""
    G = rollouts.num_generations
    prompts = rollouts.prompts[::G]  # (P,)
    groups = [rollouts.completions[p * G:(p + 1) * G] for p in range(len(prompts))]
    prefs, metrics = pairwise_preferences(run.pairwise_judges, prompts, groups, columns_of(items),
                                          cfg.pairwise_weights, cfg.pairwise_ensemble)  # (P, G, G)
    return pairwise_winrate(prefs), metrics  # (P, G)


# ---------------------------------------------------------------- dispatch, run state and checkpoints

def setup(run, cfg) -> None:
    """Give ``run`` what its estimator needs: the step judge, the value head and its optimizer, or the judges."""
    if cfg.advantage_estimator == "process":
        run.step_judge = resolve_step_judge(cfg.step_judge)
    elif cfg.advantage_estimator == "hybrid_gae":
        run.critic, run.critic_optimizer = make_critic(cfg, run.policy)
    elif cfg.advantage_estimator == "pairwise":
        run.pairwise_judges = [resolve_pairwise_judge(j, cfg.pairwise_temperature) for j in cfg.pairwise_judges]


def state_dict(run) -> dict:
    """What a checkpoint keeps of the estimator: ``{"critic": {"head", "optimizer"}}`` with a value head, else {}."""
    if run.critic is None:
        return {}
    return {"critic": {"head": run.critic.state_dict(), "optimizer": run.critic_optimizer.state_dict()}}


def load_state_dict(run, state: dict, path) -> None:
    """Restore the value head and its optimizer from a checkpoint's state (see :func:`state_dict`)."""
    if run.critic is None:
        return
    if "critic" not in state:
        raise CheckpointError(f"checkpoint {path} has no value head, and advantage_estimator='hybrid_gae' needs "
                              f"one; resume with the config it was written with or start a new output folder")
    run.critic.load_state_dict(state["critic"]["head"])
    run.critic_optimizer.load_state_dict(state["critic"]["optimizer"])


def step_advantages(run, cfg, items, rollouts, rewards: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Advantages of one step for an estimator of :data:`ONLINE`: (P, G) or (P, G, Tc), and its metrics."""
    if cfg.advantage_estimator == "process":
        return process_step(run, cfg, items, rollouts)
    if cfg.advantage_estimator == "hybrid_gae":
        return hybrid_step(run, cfg, rollouts, rewards)
    if cfg.advantage_estimator == "pairwise":
        return pairwise_step(run, cfg, items, rollouts)
    raise ConfigError(f"advantage_estimator={cfg.advantage_estimator!r} is not one of {ONLINE}")


def per_completion(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One number per completion for the length and sample logs: (P, G) as is; (P, G, Tc) -> the mean
    over each completion's tokens (B, Tc mask), (P, G)."""
    if adv.dim() == 2:
        return adv
    m = mask.view_as(adv).to(adv)  # (P, G, Tc) on the device and in the dtype of adv
    return (adv * m).sum(-1) / m.sum(-1).clamp(min=1)  # (P, G)
