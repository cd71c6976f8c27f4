"""Reward functions defined with ``async def``, as TRL 1.16's GRPOTrainer accepts them: awaited together
within a step, under the same time limit and error policy as synchronous ones."""
import asyncio
import functools
import time

import pytest

from grpo_kit.errors import RewardError
from grpo_kit.loop.train import train
from grpo_kit.rewards import judges
from grpo_kit.rewards.judges import from_trl, is_async_callable, score, to_trl
from grpo_kit.rewards.resolve import resolve_reward_func


def _args(n):
    return [f"p{i}" for i in range(n)], [f"c{i}" for i in range(n)], {"answer": ["1"] * n}


def slow_judge(value):
    async def slow(prompts, completions, **kw):
        await asyncio.sleep(0.5)
        return [value] * len(completions)
    return slow


def quick_judge(value):
    async def quick(prompts, completions, **kw):
        await asyncio.sleep(0)
        return [value] * len(completions)
    return quick


def test_two_slow_async_judges_in_one_step_take_the_time_of_one():
    t0 = time.perf_counter()
    s = score([slow_judge(1.0), slow_judge(2.0)], *_args(2), timeout_s=5)
    elapsed = time.perf_counter() - t0
    assert s.per_func.tolist() == [[1.0, 2.0], [1.0, 2.0]] and s.rewards.tolist() == [3.0, 3.0]
    # A check of concurrency, not a timing claim: awaited one after the other the two sleeps take
    # >= 1.0 s whatever the machine; together ~0.5 s plus the kit's overhead (a few ms). The 0.3 s of
    # headroom absorbs a loaded shared CPU without letting a serial run (>= 1.0 s) pass.
    assert elapsed < 0.8, f"{elapsed:.2f} s: the two judges were not awaited together"


def test_sync_and_async_functions_mix_in_one_step():
    def sync(prompts, completions, **kw):
        return [0.5] * len(completions)
    s = score([sync, slow_judge(2.0), sync], *_args(2), weights=[1.0, 2.0, 4.0], timeout_s=None)
    assert s.per_func.tolist() == [[0.5, 2.0, 0.5]] * 2 and s.rewards.tolist() == [6.5, 6.5]  # 0.5 + 4 + 2


def test_an_async_function_that_never_returns_is_stopped_by_the_timeout_and_named():
    cancelled = []

    async def never_returns(prompts, completions, **kw):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
    t0 = time.perf_counter()
    with pytest.raises(RewardError, match=r"'never_returns' did not return within reward_timeout_s=0.2 s on a batch of "
                                          r"2 completions \(first prompt 'p0'\); make it faster or raise "
                                          r"reward_timeout_s \(it was cancelled\)"):
        score([never_returns], *_args(2), timeout_s=0.2)
    s = score([never_returns, quick_judge(1.0)], *_args(2), policy="skip", timeout_s=0.2)  # the same limit as sync
    assert s.bad.all() and "'never_returns' did not return" in s.reasons[0] and len(s.reasons) == 1
    assert time.perf_counter() - t0 < 3.0
    time.sleep(0.05)  # the cancellation reaches the coroutine on the kit's loop
    assert cancelled == [True, True]


def test_an_async_function_that_blocks_its_loop_is_given_up_and_the_next_step_works(monkeypatch):
    monkeypatch.setattr(judges, "ASYNC_LOOP_GRACE_S", 0.2)

    async def blocks(prompts, completions, **kw):
        time.sleep(1.5)  # a synchronous call inside async def: no limit on the loop can fire
        return [1.0] * len(completions)
    t0 = time.perf_counter()
    with pytest.raises(RewardError, match=r"'blocks' did not return within reward_timeout_s=0.2 s .*held the event "
                                          r"loop without awaiting: await slow work, or run blocking code with "
                                          r"asyncio.to_thread"):
        score([blocks], *_args(2), timeout_s=0.2)
    assert time.perf_counter() - t0 < 1.0  # the limit and the grace, not the 1.5 s sleep
    assert score([slow_judge(3.0)], *_args(2), timeout_s=0.8).rewards.tolist() == [3.0, 3.0]  # a new loop


def test_a_stop_request_gives_a_running_async_call_the_grace_period_then_gives_it_up(monkeypatch):
    monkeypatch.setattr(judges, "REWARD_STOP_GRACE_S", 0.3)

    async def hangs(prompts, completions, **kw):
        await asyncio.sleep(30)
    try:
        judges.request_stop()  # what train()'s handler of SIGTERM, Ctrl-C or SIGHUP does
        t0 = time.monotonic()
        with pytest.raises(judges.StopRequested, match="functions 'hangs'\\) was still running 0.3 s after the stop"):
            score([hangs], *_args(2), policy="zero", timeout_s=60)  # not a bad value: the step ends
        assert time.monotonic() - t0 < 5
    finally:
        judges.clear_stop()
    assert score([quick_judge(1.0)], *_args(2), timeout_s=5).rewards.tolist() == [1.0, 1.0]


def _raises(error):
    def broken(prompts, completions, **kw):
        raise error
    return broken


def _raises_async(error):
    async def broken(prompts, completions, **kw):
        await asyncio.sleep(0)
        raise error
    return broken


@pytest.mark.parametrize("policy", ["raise", "skip", "zero"])
@pytest.mark.parametrize("error", [KeyError("score"), SystemExit(3)])
def test_an_async_function_that_raises_is_handled_as_a_sync_one(policy, error):
    outcomes = []
    for broken in (_raises(error), _raises_async(error)):
        try:
            s = score([broken, quick_judge(1.0)], *_args(2), policy=policy, timeout_s=5)
            outcomes.append((s.rewards.nan_to_num(-7).tolist(), s.bad.tolist(), s.reasons))
        except RewardError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]
    if policy == "raise":
        assert outcomes[1].startswith(f"reward function 'broken' raised {type(error).__name__}")
    else:
        assert outcomes[1][1] == [True, True] and "'broken' raised" in outcomes[1][2][0]


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_an_async_function_returning_the_wrong_length_is_refused_as_a_sync_one(policy):
    def short(prompts, completions, **kw):
        return [1.0]

    async def short_async(prompts, completions, **kw):
        return [1.0]
    short_async.__name__ = "short"
    messages = []
    for f in (short, short_async):
        try:
            messages.append(score([f], *_args(3), policy=policy, timeout_s=5).reasons[0])
        except RewardError as e:
            messages.append(str(e))
    assert messages[0] == messages[1] == "reward function 'short' returned 1 values for 3 completions; " \
                                         "return one float per completion"


def test_a_sync_function_returning_a_coroutine_is_told_to_be_async():
    async def judge(prompts, completions, **kw):
        return [1.0] * len(completions)

    def wrapper(prompts, completions, **kw):  # a wrapper that is not itself async def
        return judge(prompts, completions, **kw)
    with pytest.raises(RewardError, match="'wrapper' returned coroutine; return a list of 2 floats \\(a coroutine: "
                                          "define the function itself with async def"):
        score([wrapper], *_args(2))


def test_scoring_works_from_inside_a_running_event_loop():
    """As in a Jupyter cell, where the kernel's event loop is already running in this thread."""
    async def notebook_cell():
        asyncio.get_running_loop()  # a loop runs here: asyncio.run() would be refused
        t0 = time.perf_counter()
        s = score([slow_judge(1.0), slow_judge(2.0)], *_args(2), timeout_s=5)
        untimed = score([slow_judge(4.0)], *_args(2), timeout_s=None)
        return s.rewards.tolist(), untimed.rewards.tolist(), time.perf_counter() - t0
    together, untimed, elapsed = asyncio.run(notebook_cell())
    assert together == [3.0, 3.0] and untimed == [4.0, 4.0]
    assert elapsed < 1.3  # 0.5 s + 0.5 s: both calls ran, the first with its two judges together (serial: >= 1.5 s)


class AsyncJudge:
    async def __call__(self, prompts, completions, **kw):
        return [1.0] * len(completions)


async def _plain(prompts, completions, **kw):
    return [1.0] * len(completions)


def _sync(prompts, completions, **kw):
    return [1.0] * len(completions)


@pytest.mark.parametrize("f", [_plain, functools.partial(_plain), AsyncJudge(), _sync, len],
                         ids=["async_def", "partial", "async_call", "sync", "builtin"])
def test_async_is_recognised_as_trl_recognises_it(f):
    from trl.trainer.utils import is_async_callable as trls

    assert is_async_callable(f) == trls(f)
    if f is not len:
        assert score([f], *_args(2), timeout_s=5).rewards.tolist() == [1.0, 1.0]


def test_async_functions_by_import_path_and_from_the_registry(tmp_path, monkeypatch):
    (tmp_path / "async_judges_27.py").write_text(
        "import asyncio\n\n"
        "async def length(prompts, completions, **kw):\n"
        "    await asyncio.sleep(0)\n"
        "    return [float(len(c)) for c in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    by_path = resolve_reward_func("async_judges_27:length")
    monkeypatch.setitem(judges.REWARD_FUNCS, "async_length", by_path)
    registered = resolve_reward_func("async_length")  # text_view: also reads conversational completions
    assert is_async_callable(by_path) and is_async_callable(registered) and registered.__name__ == "length"
    chat = [[{"role": "assistant", "content": "abc"}], [{"role": "assistant", "content": "de"}]]
    assert score([by_path, registered], ["p", "q"], ["abc", "de"], {}).per_func.tolist() == [[3.0, 3.0], [2.0, 2.0]]
    assert score([registered], ["p", "q"], chat, {}).rewards.tolist() == [3.0, 2.0]


def test_trl_adapters_keep_a_function_async():
    seen = []

    async def trl_style(prompts, completions, trainer_state, **kw):
        seen.append((completions, trainer_state))
        return [1.0] * len(completions)
    kit = from_trl(trl_style, conversational=True)
    assert is_async_callable(kit) and is_async_callable(to_trl(trl_style))
    assert score([kit], ["p"], ["c"], {}).rewards.tolist() == [1.0]
    assert seen == [([[{"role": "assistant", "content": "c"}]], None)]
    msgs = [[{"role": "assistant", "content": "x"}]]
    assert asyncio.run(to_trl(trl_style)(prompts=["p"], completions=msgs, trainer_state=None)) == [1.0]
    assert seen[-1] == (["x"], None)


def test_two_training_steps_with_an_async_reward_function(small_cfg, tmp_path, monkeypatch):
    """Named by import path in the config, as in YAML, beside the same judge written synchronously."""
    (tmp_path / "async_exact_27.py").write_text(
        "import asyncio\n"
        "from grpo_kit.rewards.judges import exact_answer\n\n"
        "CALLS = []\n\n"
        "async def async_exact(prompts, completions, answer, **kw):\n"
        "    await asyncio.sleep(0)\n"
        "    CALLS.append(kw['trainer_state'].global_step)\n"
        "    return exact_answer(prompts, completions, answer, **kw)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = small_cfg.replace(steps=2, eval_size=4, reward_funcs=["async_exact_27:async_exact", "exact_answer"])
    history = list(train(cfg))
    import async_exact_27

    assert len(history) == 2 and async_exact_27.CALLS == [0, 1]  # awaited once per step, with TRL's kwargs
    for m in history:  # the async judge scores what the sync one scores, on the same completions
        assert m["rewards/async_exact/mean"] == m["rewards/exact_answer/mean"]
        assert m["reward"] == pytest.approx(2 * m["rewards/exact_answer/mean"])
