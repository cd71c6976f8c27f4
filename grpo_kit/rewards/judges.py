"""Judges: reward functions that score completions.

A reward function has TRL's signature ``f(prompts, completions, **kwargs) -> list[float]`` and
``train()`` calls it with the keyword arguments TRL 1.16's ``GRPOTrainer._calculate_rewards``
passes: ``prompts`` and ``completions`` (B strings; for a conversational dataset, whose prompts
are lists of ``{"role", "content"}`` messages, the prompt messages and ``[{"role": "assistant",
"content": text}]``), ``completion_ids`` (B lists of token ids, EOS included), every dataset
column but ``prompt`` as a list of B values (``answer=[...]``), ``trainer_state`` (a
``transformers.TrainerState`` whose ``global_step`` and ``max_steps`` count optimizer updates),
``log_extra(column, values)`` and ``log_metric(name, value)`` (see :class:`RewardLog`). So a
function written for ``GRPOTrainer(reward_funcs=...)`` works here unchanged, TRL's shipped ones
included (``tests/rewards/test_trl_rewards.py``), and vice versa. Return ``None`` for a sample the function
cannot score. A function defined with ``async def`` (an LLM judge behind an HTTP API) is awaited, as TRL
awaits it: the async functions of a step run together on the kit's event loop (see :func:`await_together`),
so two slow judges take the time of one. In a config, ``reward_funcs`` names shipped functions, or
importable ones as ``"package.module:function"``, or a factory with arguments as ``{"function":
"trl.rewards:get_soft_overlong_punishment", "args": {...}}``, or a saved learned judge as
``"learned:DIR"``, or a judge served over HTTP as ``"remote:URL"`` (``resolve.resolve_reward_func``
turns each into a function).

Reward functions only read text; they never execute it.

Shipped:
- ``exact_answer``: 1.0 when the completion's number equals the ``answer`` column.
- ``format_reward``: 1.0 when the completion is exactly one well-formed number.

``score(...)`` is the one entry point that scores: it runs a list of functions, checks what each
returns, and combines them with weights into a (B,) reward tensor. By default any problem raises
:class:`RewardError` naming the function and the sample; ``policy`` applies
``GRPOConfig.reward_error_policy`` instead ('skip' the sample, or 'zero' the value) and
``timeout_s`` ``reward_timeout_s`` (a function that does not return in time is a bad value for
the whole batch; see ``call_with_timeout`` for what happens to its thread; an async one is cancelled).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import math
import re
import threading
import time
from typing import Callable, NamedTuple, Sequence

import torch

from grpo_kit.core.ensembles import agreement, ensemble_scores  # noqa: F401  (re-exported: judges.agreement)
from grpo_kit.data.tasks import read_completion
from grpo_kit.errors import ConfigError, RewardError, StopRequested

RewardFunc = Callable[..., list]


def parse_answer(completion: str, reverse_digits: bool | None, scratchpad: bool | None = None) -> float | None:
    """The number a completion states: for the arithmetic tasks the whole completion (or the part
    after ``|`` with a scratchpad), digits in the task's order; in free text, :func:`final_answer`
    (``####``, ``\\boxed{}``, "the answer is", else the last number)."""
    if reverse_digits is None:
        return final_answer(completion)
    value = read_completion(completion, bool(reverse_digits), bool(scratchpad))
    return None if value is None else float(value)


def stated_answers(completions: list[str], reverse_digits: list[bool] | None = None,
                   scratchpad: list[bool] | None = None) -> list[float | None]:
    """:func:`parse_answer` over a batch, the per-row task columns defaulting to None."""
    n = len(completions)
    rev = reverse_digits if reverse_digits is not None else [None] * n
    pad = scratchpad if scratchpad is not None else [None] * n
    return [parse_answer(c, r, s) for c, r, s in zip(completions, rev, pad)]


def exact_answer(prompts: list[str], completions: list[str], answer: list[str],
                 reverse_digits: list[bool] | None = None, scratchpad: list[bool] | None = None,
                 **_) -> list[float]:
    """1.0 when the stated number equals the reference ``answer`` exactly, else 0.0."""
    got = stated_answers(completions, reverse_digits, scratchpad)
    return [1.0 if g is not None and g == float(str(a).replace(",", "")) else 0.0 for g, a in zip(got, answer)]


def format_reward(prompts: list[str], completions: list[str], **_) -> list[float]:
    """1.0 when the completion is one well-formed integer (optional sign, digits only)."""
    return [1.0 if re.fullmatch(r"-?\d+", c.strip()) else 0.0 for c in completions]


REWARD_FUNCS: dict[str, RewardFunc] = {"exact_answer": exact_answer, "format": format_reward}


_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def check_import_path(path: str, what: str = "reward function") -> None:
    """``"package.module:function"`` checked by its form only (a dotted module path, a colon, a name):
    nothing is imported. ConfigError when it is not of that form."""
    if not (isinstance(path, str) and _IMPORT_PATH.fullmatch(path)):
        raise ConfigError(f"{what} {path!r}: write an importable one as 'package.module:function'")


def import_object(path: str):
    """``"package.module:attr"`` -> the object; ConfigError naming what is missing. This imports the
    module, which runs its code: only the commands that score call it (see :func:`check_reward_spec`)."""
    import importlib

    check_import_path(path)
    module, _, attr = path.partition(":")
    try:
        obj = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - ImportError, or a bad name, or the module failing as it loads
        raise ConfigError(f"reward function {path!r}: cannot import {module!r} ({type(e).__name__}: {e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"reward function {path!r}: {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def check_reward_spec(spec) -> None:
    """One ``reward_funcs`` entry checked by its form only, as ``GRPOConfig.validate`` does: nothing is
    imported, called or loaded, so reading, validating, printing or exporting a config runs none of
    the code it names. Raises :class:`ConfigError` naming the entry (an unknown name, a malformed
    ``"package.module:function"``, factory or ``learned:``/``remote:`` entry); a module that fails to
    import, a missing function or a factory rejecting its args is found by ``resolve.resolve_reward_func``,
    when a command scores (``train``, ``eval``, ``serve-judge``).
    """
    if callable(spec) or (isinstance(spec, str) and spec in REWARD_FUNCS):
        return
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {"function", "args"})
        if unknown or not isinstance(spec.get("function"), str) or not isinstance(spec.get("args", {}), dict):
            raise ConfigError(f"reward function {spec!r}: write a factory as {{'function': 'package.module:factory', "
                              f"'args': {{name: value}}}}" + (f" (unknown keys {unknown})" if unknown else ""))
        check_import_path(spec["function"], "reward function factory")
    elif isinstance(spec, str) and spec.startswith(("learned:", "remote:")):
        kind, _, where = spec.partition(":")
        if not where.strip():
            raise ConfigError(f"reward function {spec!r}: write it as '{kind}:"
                              f"{'PATH' if kind == 'learned' else 'http://HOST:PORT/get_reward'}'")
    elif isinstance(spec, str) and ":" in spec:
        check_import_path(spec)
    else:
        raise ConfigError(f"unknown reward function {spec!r}: choose from {sorted(REWARD_FUNCS)}, name an importable "
                          f"one as 'package.module:function', a saved learned judge as 'learned:DIR', a served one as "
                          f"'remote:URL', or pass a callable")


class RewardLog:
    """Collects what reward functions log during one step through TRL's keyword arguments.

    ``log_extra(column, values)`` adds a column of per-sample values (TRL shows them in its
    completions table; here they land in the step's metrics under ``"log_extra"``);
    ``log_metric(name, value)`` records a scalar, averaged over the step as TRL does and reported
    as ``metrics[name]``.
    """

    def __init__(self):
        self.extra: dict[str, list] = {}
        self.metrics: dict[str, list[float]] = {}

    def log_extra(self, column: str, values: list) -> None:
        self.extra.setdefault(column, []).extend(values)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(float(value))

    def averages(self) -> dict[str, float]:
        return {name: sum(v) / len(v) for name, v in self.metrics.items()}


def is_conversational(prompt) -> bool:
    """TRL's test: a prompt given as a list of ``{"role", "content"}`` messages."""
    return isinstance(prompt, list) and len(prompt) > 0 and all(isinstance(m, dict) and "role" in m for m in prompt)


def trl_reward_kwargs(completion_ids: torch.Tensor, completion_mask: torch.Tensor, trainer_state,
                      log: RewardLog) -> dict:
    """The keyword arguments TRL passes to every reward function besides prompts, completions and
    the dataset columns: ``completion_ids`` (B lists of ints: the tokens under the mask, EOS
    included), ``trainer_state``, ``log_extra``, ``log_metric``."""
    mask = completion_mask.cpu().bool()  # (B, Tc)
    flat, lens = completion_ids.cpu()[mask].tolist(), mask.sum(-1).tolist()  # tokens under the mask, row by row
    ends = list(itertools.accumulate(lens))
    ids = [flat[e - n:e] for e, n in zip(ends, lens)]  # (B,) lists of ints
    return {"completion_ids": ids, "trainer_state": trainer_state, "log_extra": log.log_extra,
            "log_metric": log.log_metric}


def func_name(f) -> str:
    return getattr(f, "__name__", type(f).__name__)


REWARD_STOP_GRACE_S = 5.0
"""Seconds a reward call may still run after a stop request (the first Ctrl-C, SIGTERM or SIGHUP
during ``train()``) before the run gives it up and ends without finishing that step (see
:func:`call_with_timeout`)."""

_stop = {"at": None}  # time.monotonic() of the stop request train()'s signal handling made, or None


def request_stop() -> None:
    """Called by ``train``'s signal handler: reward calls waiting on their worker give up after
    :data:`REWARD_STOP_GRACE_S` seconds from now (or from their start, if later)."""
    _stop["at"] = time.monotonic()


def clear_stop() -> None:
    _stop["at"] = None


def _wait(done: threading.Event, what: str, timeout_s: float | None) -> bool:
    """Wait for ``done`` in slices, so a stop request is seen: True once it is set, False when
    ``timeout_s`` seconds passed first (None: no limit). :class:`StopRequested` when a stop request
    (:func:`request_stop`) came and :data:`REWARD_STOP_GRACE_S` seconds passed since it (or since the start)."""
    start = time.monotonic()
    while not done.is_set():
        now, asked = time.monotonic(), _stop["at"]
        if asked is not None and now >= max(asked, start) + REWARD_STOP_GRACE_S:
            raise StopRequested(f"{what} was still running {REWARD_STOP_GRACE_S:g} s after the stop request; "
                                f"the step was given up (its thread is left running)")
        if timeout_s is not None and now >= start + timeout_s:
            return False
        done.wait(0.1 if timeout_s is None else min(0.1, start + timeout_s - now))
    return True


def _timeout_error(f: RewardFunc, timeout_s: float, prompts, completions, fate: str) -> RewardError:
    """The error of a reward function that did not return within ``timeout_s``; ``fate`` says what became of it."""
    return RewardError(f"reward function {func_name(f)!r} did not return within reward_timeout_s={timeout_s} s "
                       f"on a batch of {len(completions)} completions (first prompt {prompts[0]!r}); "
                       f"make it faster or raise reward_timeout_s ({fate})")


def call_with_timeout(f: RewardFunc, prompts, completions, columns, timeout_s: float | None):
    """``f(prompts=..., completions=..., **columns)``; inline when ``timeout_s`` is None.

    With a time limit the call runs in a daemon thread and :class:`RewardError` is raised when
    it has not returned after ``timeout_s`` seconds. Python cannot stop a thread, so a hung
    function keeps running in the background: its result is discarded, it does not block the
    interpreter from exiting (daemon), and each further timeout leaves one more such thread.
    If the function holds a lock, a GPU or a network connection, restart the kernel/process.

    A stop request during ``train()`` (:func:`request_stop`: one SIGTERM, Ctrl-C or SIGHUP) gives
    a call still running :data:`REWARD_STOP_GRACE_S` more seconds, then raises
    :class:`StopRequested` so the run can end at once (``train`` keeps the last finished step).
    An inline call (``timeout_s=None``) cannot be waited on this way: a second signal interrupts it.
    """
    if timeout_s is None:
        return f(prompts=prompts, completions=completions, **columns)
    box, done = {}, threading.Event()

    def target():
        try:
            box["out"] = f(prompts=prompts, completions=completions, **columns)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            box["err"] = e
        finally:
            done.set()

    threading.Thread(target=target, name=f"reward-{func_name(f)}", daemon=True).start()
    if not _wait(done, f"reward function {func_name(f)!r}", timeout_s):
        raise _timeout_error(f, timeout_s, prompts, completions, "its thread is left running in the background")
    if "err" in box:
        raise box["err"]
    return box["out"]


# ---------------------------------------------------------------- async reward functions

def is_async_callable(f) -> bool:
    """Whether calling ``f`` returns a coroutine (TRL 1.16's ``is_async_callable``): an ``async def``
    function, a ``functools.partial`` of one, or an object whose ``__call__`` is ``async def``."""
    while isinstance(f, functools.partial):
        f = f.func
    return inspect.iscoroutinefunction(f) or inspect.iscoroutinefunction(getattr(f, "__call__", None))


ASYNC_LOOP_GRACE_S = 1.0
"""Seconds past ``reward_timeout_s`` the kit waits for the event loop of a step's async reward
functions before it gives up the ones that have not returned. Each has its own time limit on the
loop, but an ``async def`` that blocks (``time.sleep``, a synchronous HTTP call) instead of awaiting
holds the whole loop, so no limit on it can fire (see :func:`await_together`)."""

_loop = {"loop": None}  # the kit's event loop for async reward functions (running in its daemon thread), or None
_loop_lock = threading.Lock()


def _reward_loop() -> asyncio.AbstractEventLoop:
    """The event loop async reward functions run on: one per process, started on first use in a daemon
    thread (as TRL's trainer does), so a client that a function keeps between steps stays on one loop."""
    with _loop_lock:
        if _loop["loop"] is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="reward-event-loop", daemon=True).start()
            _loop["loop"] = loop
        return _loop["loop"]


def _retire(loop: asyncio.AbstractEventLoop) -> None:
    """Give up ``loop`` (it may be held by a function that blocks): the next step starts a new one."""
    with _loop_lock:
        if _loop["loop"] is loop:
            _loop["loop"] = None
    loop.call_soon_threadsafe(loop.stop)  # ends its thread, if it ever gets the loop back


async def _caught(f: RewardFunc, kwargs: dict) -> tuple:
    try:
        return await f(**kwargs), None
    except BaseException as e:  # noqa: BLE001 - SystemExit included: handed to the caller, who names the function
        return None, e


async def _bounded(f: RewardFunc, kwargs: dict, timeout_s: float | None) -> tuple:
    """``await f(**kwargs)`` -> ``(value, None)``, or ``(None, what it raised)``, or ``(None, RewardError)``
    when it did not return within ``timeout_s`` seconds (it is then cancelled)."""
    task = asyncio.ensure_future(_caught(f, kwargs))
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if done:
        return task.result()
    task.cancel()
    return None, _timeout_error(f, timeout_s, kwargs["prompts"], kwargs["completions"], "it was cancelled")


def await_together(calls: Sequence[tuple[RewardFunc, dict]], timeout_s: float | None) -> list[tuple]:
    """Every ``f(**kwargs)`` of ``calls`` (async reward functions) awaited together (``asyncio.gather``)
    on the kit's event loop -> one ``(value, error)`` per call, ``error`` None or what the function
    raised, or a :class:`RewardError` naming it when it did not return within ``timeout_s``.

    The loop runs in its own daemon thread (:func:`_reward_loop`), never in the caller's, so this works
    where a loop is already running, as in a Jupyter cell. The caller waits as :func:`call_with_timeout`
    does (a stop request is seen); a loop still held :data:`ASYNC_LOOP_GRACE_S` after the limit is given up
    with the functions that have not returned, and the next call starts a new one.
    """
    if not calls:
        return []
    out: dict[int, tuple] = {}

    async def one(k, f, kwargs):
        out[k] = await _bounded(f, kwargs, timeout_s)

    async def together():
        await asyncio.gather(*(one(k, f, kwargs) for k, (f, kwargs) in enumerate(calls)))

    loop, done = _reward_loop(), threading.Event()
    future = asyncio.run_coroutine_threadsafe(together(), loop)
    future.add_done_callback(lambda _: done.set())
    what = f"the step's async reward call (functions {', '.join(repr(func_name(f)) for f, _ in calls)})"
    try:
        finished = _wait(done, what, None if timeout_s is None else timeout_s + ASYNC_LOOP_GRACE_S)
    except StopRequested:
        _retire(loop)
        raise
    if not finished:
        _retire(loop)
    held = ("it or another async function of the step held the event loop without awaiting: await slow work, or "
            "run blocking code with asyncio.to_thread")
    return [out.get(k) or (None, _timeout_error(f, timeout_s, kw["prompts"], kw["completions"], held))
            for k, (f, kw) in enumerate(calls)]


def call_reward(f: RewardFunc, **kwargs):
    """``f(**kwargs)``, an async ``f`` awaited on the kit's event loop without a time limit: for the callers
    that time a call themselves (the judge server) or call one function on one completion (verl's
    ``compute_score``). :func:`score` is the way to score a batch."""
    if not is_async_callable(f):
        return f(**kwargs)
    return _result(await_together([(f, kwargs)], None)[0])


def _own_inputs(prompts, completions, columns: dict) -> tuple[list, list, dict]:
    """One judge's prompts, completions and columns, with its own copies of the lists (see :func:`_own_copy`)."""
    return _own_copy(prompts), _own_copy(completions), {c: _own_copy(v) if isinstance(v, list) else v
                                                        for c, v in columns.items()}


def _await_async(funcs: Sequence[RewardFunc], prompts, completions, columns: dict,
                 timeout_s: float | None) -> dict[int, tuple]:
    """The async functions of ``funcs``, all awaited together -> ``{k: (value, error)}``."""
    ks = [k for k, f in enumerate(funcs) if is_async_callable(f)]
    inputs = [_own_inputs(prompts, completions, columns) for _ in ks]
    outcomes = await_together([(funcs[k], {"prompts": p, "completions": c, **cols})
                               for k, (p, c, cols) in zip(ks, inputs)], timeout_s)
    return dict(zip(ks, outcomes))


def _unawaited(value) -> str:
    """What to add to the error of a function that returned ``value``: a hint when it is a coroutine (the
    coroutine is closed, so Python does not warn that it was never awaited)."""
    if not inspect.iscoroutine(value):
        return ""
    value.close()
    return " (a coroutine: define the function itself with async def, and score awaits it)"


def _result(outcome: tuple):
    value, error = outcome
    if error is not None:
        raise error
    return value


def _own_copy(values, depth: int = 2):
    """A copy of a list argument for one judge: lists, tuples and dicts copied ``depth`` levels down
    (messages of a conversational prompt, per-item dicts and lists of a column); strings, numbers and
    other objects shared. So a function that edits its inputs cannot change what later judges score
    or what the history logs."""
    if depth < 0 or isinstance(values, _SHARED):
        return values
    if isinstance(values, (list, tuple)):  # strings and numbers (most items) shared without a call each
        out = [v if isinstance(v, _SHARED) else _own_copy(v, depth - 1) for v in values]
        return out if isinstance(values, list) else tuple(out)
    if isinstance(values, dict):
        return {k: v if isinstance(v, _SHARED) else _own_copy(v, depth - 1) for k, v in values.items()}
    return values


_SHARED = (str, bytes, int, float, bool, type(None))  # immutable: a judge cannot edit them


def _run_each(funcs: Sequence[RewardFunc], prompts: list[str], completions: list[str], columns: dict[str, list],
              policy: str = "raise", timeout_s: float | None = None) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """:func:`score`'s harness: run every reward function -> (per_func (B, K), bad (B, K) bool, reasons);
    ``policy='raise'`` raises at the first bad value, 'skip' and 'zero' mark it in ``bad``."""
    if policy not in REWARD_ERROR_POLICIES:
        raise RewardError(f"reward_error_policy={policy!r}: choose from {REWARD_ERROR_POLICIES}")
    B = len(completions)
    out = torch.full((B, len(funcs)), float("nan"), dtype=torch.float32)  # (B, K)
    bad = torch.zeros(B, len(funcs), dtype=torch.bool)  # (B, K)
    reasons: list[str] = []

    def fail(message, rows):
        if policy == "raise":
            raise RewardError(message)
        bad[rows, k] = True
        reasons.append(message)

    awaited = _await_async(funcs, prompts, completions, columns, timeout_s)  # {k: (value, error)}
    for k, f in enumerate(funcs):
        try:  # each function gets its own copies of the lists: what it edits, no one else sees
            vals = _result(awaited[k]) if k in awaited else call_with_timeout(
                f, *_own_inputs(prompts, completions, columns), timeout_s)
        except RewardError as e:  # timed out, or the function's own RewardError
            fail(str(e), slice(None))
            continue
        except (KeyboardInterrupt, GeneratorExit, StopRequested):
            raise
        except BaseException as e:  # noqa: BLE001 - SystemExit included: re-raised with the judge's name
            what = f"reward function {func_name(f)!r} raised {type(e).__name__}: {e}" + (
                " (a reward function must return its values, not exit)" if isinstance(e, SystemExit) else "")
            if policy == "raise":
                raise RewardError(what) from e
            fail(what, slice(None))
            continue
        try:
            if isinstance(vals, (str, bytes, dict)):  # iterable, but not one value per completion
                raise TypeError
            vals = list(vals)
        except TypeError:
            fail(f"reward function {func_name(f)!r} returned {type(vals).__name__}; return a list of {B} floats"
                 + _unawaited(vals), slice(None))
            continue
        if len(vals) != B:
            fail(f"reward function {func_name(f)!r} returned {len(vals)} values for {B} completions; "
                 f"return one float per completion", slice(None))
            continue
        for i, v in enumerate(vals):
            if v is None:
                continue
            try:
                v = float(v)
            except (TypeError, ValueError, OverflowError):
                fail(f"reward function {func_name(f)!r} returned {v!r:.60} for sample {i} "
                     f"(prompt {prompts[i]!r}); return a float or None", i)
                continue
            if not math.isfinite(v):
                fail(f"reward function {func_name(f)!r} returned {v} for sample {i} (prompt {prompts[i]!r}, "
                     f"completion {completions[i]!r}); rewards must be finite: return None to skip a sample", i)
                continue
            out[i, k] = v
    return out, bad, reasons


def combine(per_func: torch.Tensor, weights: Sequence[float] | None = None) -> torch.Tensor:
    """Weighted sum over functions (B, K) -> (B,), ignoring NaN (TRL's nansum); a row where
    every function returned None is an error, since it has no reward at all."""
    K = per_func.shape[1]
    w = torch.tensor(list(weights) if weights is not None else [1.0] * K, dtype=per_func.dtype)  # (K,)
    if w.numel() != K:
        raise RewardError(f"{w.numel()} reward weights for {K} reward functions; give one weight per function")
    unscored = torch.isnan(per_func).all(-1)  # (B,)
    if bool(unscored.any()):
        i = int(unscored.nonzero()[0])
        raise RewardError(f"no reward function scored sample {i}: every function returned None")
    return (per_func * w).nansum(-1)  # (B,)


REWARD_ERROR_POLICIES = ("raise", "skip", "zero")


class Scores(NamedTuple):
    """What :func:`score` returns."""
    rewards: torch.Tensor | None  # (B,) the weighted sum over functions; None with combined=False
    per_func: torch.Tensor        # (B, K) one column per function, NaN where it said None (or the value was bad)
    bad: torch.Tensor             # (B,) bool: a sample with a bad value ('skip' / 'zero'; never True under 'raise')
    reasons: list[str]            # what went wrong, one line per bad value


def score(funcs: Sequence[RewardFunc], prompts: list, completions: list, columns: dict[str, list],
          weights: Sequence[float] | None = None, policy: str = "raise", timeout_s: float | None = None,
          trl_kwargs: dict | None = None, combined: bool = True) -> Scores:
    """The one way the kit scores completions: run every reward function, check what each returns,
    and combine them with ``weights`` (TRL's nansum) -> :class:`Scores`.

    Every function is called with ``prompts``, ``completions``, the ``columns`` and ``trl_kwargs``
    (the rest of what TRL passes, from :func:`trl_reward_kwargs`; they win over a column of the
    same name, as in TRL), each with its own copies of the lists, within ``timeout_s`` seconds.
    A value is bad when the function raised, timed out, returned the wrong count or type (all B
    values of that function are bad) or returned NaN/inf or a non-number. ``policy`` says what a
    bad value does (``GRPOConfig.reward_error_policy``):

    - ``raise`` (default): :class:`RewardError` at the first bad value, naming the function and the
      sample; so is a sample that no function scored (every one returned None).
    - ``skip``: a sample with any bad value, or that no function scored, is bad: its reward is
      NaN here, and the step gives it advantage 0 and masks it from the loss.
    - ``zero``: a bad value counts as 0 for that function (a sample no function scored gets 0);
      the sample trains normally and is still counted as bad.

    ``combined=False`` returns the per-function values only (``rewards`` None): a sample no function
    scored is then no error (ensembles and the judge server report it as None).
    """
    columns = {**columns, **(trl_kwargs or {})}
    per_func, bad, reasons = _run_each(funcs, prompts, completions, columns, policy, timeout_s)  # (B, K), (B, K)
    if not combined:
        return Scores(None, per_func, bad.any(-1), reasons)
    if policy == "raise":
        return Scores(combine(per_func, weights), per_func, bad.any(-1), reasons)
    unscored = torch.isnan(per_func).all(-1) & ~bad.any(-1)  # (B,) every function said None
    if bool(unscored.any()):
        reasons.append(f"no reward function scored sample {int(unscored.nonzero()[0])}: every function returned None")
    if policy == "zero":
        per_func = torch.where(bad, torch.zeros_like(per_func), per_func)  # (B, K)
        rewards = combine(torch.where(unscored.unsqueeze(-1), torch.zeros_like(per_func), per_func), weights)  # (B,)
        return Scores(rewards, per_func, bad.any(-1) | unscored, reasons)
    sample_bad = bad.any(-1) | unscored  # (B,)
    rewards = combine(torch.where(sample_bad.unsqueeze(-1), torch.zeros_like(per_func), per_func), weights)  # (B,)
    return Scores(torch.where(sample_bad, torch.full_like(rewards, float("nan")), rewards), per_func, sample_bad,
                  reasons)


# ================================================================ answers in free text
#
# Everything below reads generated text with regular expressions and a small arithmetic
# evaluator over parsed floats. Nothing here calls eval/exec/compile or imports anything a
# completion names: a completion such as ``__import__('os').system(...)`` is only a string.
#
# What ``parse_number`` reads (and what it does not):
# - integers, decimals (``3.5``, ``.5``), scientific notation (``1.5e-3``, ``2E4``);
# - a sign ``+``/``-`` or the unicode minus U+2212, when it is not glued to a preceding word
#   or number (``5-3`` is the two numbers 5 and 3, ``x=-3`` is -3);
# - thousands separators: commas in groups of three (``1,234,567``); ``1,23`` is read as
#   the two numbers 1 and 23 (decimal commas are not supported);
# - fractions ``3/4``, ``-3/4``, ``\frac{3}{4}``, ``\dfrac{-3}{4}``, ``-\frac34``, nested
#   ``\frac{1}{\frac{1}{2}}`` (x/0 and ``\frac{x}{2}`` are no number);
# - a percent sign is dropped: ``50%`` reads 50, because GSM8K writes percent answers as the
#   bare number;
# - a trailing period, ``$`` and ``\$`` around numbers are ignored; ``-0`` equals ``0``.
# Not read: mixed numbers (``1 1/2`` reads 1 and 1/2), numbers spelled in words, space
# thousands separators, LaTeX ``\times 10^{3}``.
#
# Shipped here (also in REWARD_FUNCS): ``math_answer``, ``gsm8k_format``, ``boxed_format``,
# ``distinct_2`` (from ``distinct_n_reward``), ``correct_steps``, and from symbolic.py
# ``math_verify_answer`` (math-verify's symbolic comparison; its docstring says where the two differ); factories
# ``soft_overlong_punishment`` (DAPO eq. 13) and ``distinct_n_reward``; adapters ``to_trl`` /
# ``from_trl``; scalar ensembles ``ensemble_reward`` and ``agreement``. Pairwise judges and
# preference matrices live in ``preferences.py``.


_MINUS = "\u2212"
_NUM_CORE = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+"
_NUMBER_RE = re.compile(
    rf"(?:(?<![\w.)\]}}])(?P<sign>[-+{_MINUS}]))?"
    rf"(?<![\d.])(?P<num>{_NUM_CORE})(?P<exp>[eE][-+]?\d+)?"
    rf"(?:\s*/\s*(?P<den>{_NUM_CORE})(?!\.?\d))?"
)


def _value(m: re.Match) -> float | None:
    sign = -1.0 if m.group("sign") in ("-", _MINUS) else 1.0
    num = float(m.group("num").replace(",", "") + (m.group("exp") or ""))
    if m.group("den") is not None:
        den = float(m.group("den").replace(",", ""))
        if den == 0:
            return None
        num /= den
    return math.copysign(num, sign) if sign < 0 else num


_FRAC_RE = re.compile(r"\\[dt]?frac\s*(?:\{([^{}]*)\}|(\d))\s*(?:\{([^{}]*)\}|(\d))")
_UNREADABLE = "\x00"  # stands for a fraction whose parts are not plain numbers


def _frac_value(m: re.Match) -> str:
    """The innermost ``\\frac{a}{b}`` as the decimal a/b when a and b are single plain numbers;
    anything else (``\\frac{x}{2}``, b = 0) becomes a mark that reads as no number."""
    parts = [m.group(1) if m.group(1) is not None else m.group(2),
             m.group(3) if m.group(3) is not None else m.group(4)]
    nums = [_NUMBER_RE.fullmatch(p.strip()) for p in parts]
    if None in nums or any(n.group("den") for n in nums):
        return _UNREADABLE
    a, b = (_value(n) for n in nums)
    if b == 0:
        return _UNREADABLE
    glued = m.start() > 0 and m.string[m.start() - 1].isdigit()  # 3\frac12 is not 30.5
    return (" " if glued else "") + repr(a / b)


def _normalise(text: str) -> str:
    """LaTeX fractions -> their decimal value, innermost first (a string rewrite of parsed
    numbers, no evaluation); ``\\$``, ``\\%``, ``\\!``, ``\\,`` and ``{,}`` removed."""
    for junk in ("\\$", "\\%", "\\!", "\\,", "{,}"):
        text = text.replace(junk, "")
    while True:
        new = _FRAC_RE.sub(_frac_value, text)
        if new == text:
            return new
        text = new


def numbers_in(text: str) -> list[float]:
    """Every number in ``text`` in order of appearance (see the rules above); x/0 is skipped."""
    vals = (_value(m) for m in _NUMBER_RE.finditer(_normalise(text)))
    return [v for v in vals if v is not None and math.isfinite(v)]


def parse_number(text: str | None, which: str = "last") -> float | None:
    """The ``"first"`` or ``"last"`` number in ``text``, or ``None`` when it holds none."""
    if text is None:
        return None
    found = numbers_in(text)
    if not found:
        return None
    return found[0] if which == "first" else found[-1]


def boxed_contents(text: str) -> list[str]:
    """The contents of every ``\\boxed{...}`` / ``\\fbox{...}`` in order of opening, braces
    matched (nested ok); an unclosed box (a truncated completion) is left out. One pass."""
    found, stack = [], []  # stack: the start of a box's contents, or None for a plain brace
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{|\{|\}", text):
        if m.group() == "}":
            start = stack.pop() if stack else None
            if start is not None:
                found.append((start, text[start:m.start()]))
        else:
            stack.append(m.end() if m.group() != "{" else None)
    return [c for _, c in sorted(found)]


_HASHES_RE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(r"(?:final\s+answer|answer)\s*(?:is|was|=|:)\s*:?\s*([^\n]*)", re.IGNORECASE)


def extract_answer(text: str) -> tuple[str, str] | None:
    """Where a completion states its final answer: ``(source, snippet)`` or ``None``.

    Sources, first present wins (an explicit marker beats a heuristic): ``"####"`` (GSM8K; the
    rest of the line after the last ``####``), ``"boxed"`` (the last closed ``\\boxed{}``),
    ``"answer is"`` (the rest of the line after the last "answer is" / "answer:"), ``"last"``
    (the whole text; its last number is read). A marker whose snippet holds no number still
    wins, so an answer outside the required place is not picked up as a fallback.
    """
    hashes = _HASHES_RE.findall(text)
    if hashes:
        return "####", hashes[-1]
    boxed = boxed_contents(text)
    if boxed:
        return "boxed", boxed[-1]
    said = _ANSWER_IS_RE.findall(text)
    if said:
        return "answer is", said[-1]
    return ("last", text) if numbers_in(text) else None


def final_answer(text: str) -> float | None:
    """The number a completion gives as its final answer, or ``None`` when it gives none.

    After ``####`` and "answer is" the first number of the snippet is read (``#### 42 apples``,
    ``the answer is 42. Check: 40+2=42``); inside a box and in the fallback, the last one
    (``\\boxed{x = 5}``, ``... so 3+4=7``).
    """
    found = extract_answer(text)
    if found is None:
        return None
    source, snippet = found
    return parse_number(snippet, "first" if source in ("####", "answer is") else "last")


def numbers_match(got: float | None, want: float | None, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Numeric equality with tolerance (``math.isclose``); ``None`` never matches."""
    if got is None or want is None:
        return False
    return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)


def _reference(a, i: int) -> float:
    want = parse_number(str(a))
    if want is None:
        raise RewardError(f"sample {i}: the reference answer {a!r} holds no number; fix the 'answer' column")
    return want


def math_answer(prompts: list[str], completions: list[str], answer: list[str],
                reverse_digits: list[bool] | None = None, scratchpad: list[bool] | None = None,
                **_) -> list[float]:
    """1.0 when the completion's final answer (:func:`final_answer`) equals the reference
    ``answer`` within tolerance (:func:`numbers_match`), else 0.0. Rows with a
    ``reverse_digits`` value (the kit's arithmetic tasks) are read as those tasks write numbers
    (after the ``|`` when the ``scratchpad`` column says so).

    Reads text only: the completion is parsed, never executed.
    """
    n = len(completions)
    rev = reverse_digits if reverse_digits is not None else [None] * n
    pad = scratchpad if scratchpad is not None else [None] * n
    out = []
    for i, (c, a, r, sp) in enumerate(zip(completions, answer, rev, pad)):
        got = parse_answer(c, r, sp) if r is not None else final_answer(c)
        out.append(1.0 if numbers_match(got, _reference(a, i)) else 0.0)
    return out


# ---------------------------------------------------------------- format

def answer_in_place(completion: str, style: str = "gsm8k") -> bool:
    """Is the final answer where the style requires it?

    - ``"gsm8k"``: the last non-blank line is ``#### <number>`` (an optional final period);
    - ``"boxed"``: exactly one closed ``\\boxed{...}`` and it holds a number;
    - ``"either"``: one of the two.
    """
    if style == "gsm8k":
        lines = [l for l in completion.strip().splitlines() if l.strip()]
        if not lines:
            return False
        m = re.fullmatch(r"\s*####\s*(.*?)\.?\s*", lines[-1])  # the answer, less a final period
        return m is not None and bool(numbers_in(m.group(1))) and \
            _NUMBER_RE.fullmatch(_normalise(m.group(1)).replace("$", "").replace("%", "").strip()) is not None
    if style == "boxed":
        boxes = boxed_contents(completion)
        return len(boxes) == 1 and completion.count("\\boxed") + completion.count("\\fbox") == 1 \
            and bool(numbers_in(boxes[0]))
    if style == "either":
        return answer_in_place(completion, "gsm8k") or answer_in_place(completion, "boxed")
    raise ConfigError(f"unknown answer style {style!r}: choose 'gsm8k', 'boxed' or 'either'")


def gsm8k_format(prompts: list[str], completions: list[str], **_) -> list[float]:
    """1.0 when the completion ends with the line ``#### <number>``, else 0.0."""
    return [1.0 if answer_in_place(c, "gsm8k") else 0.0 for c in completions]


def boxed_format(prompts: list[str], completions: list[str], **_) -> list[float]:
    """1.0 when the completion holds exactly one ``\\boxed{<number>}``, else 0.0."""
    return [1.0 if answer_in_place(c, "boxed") else 0.0 for c in completions]


# ---------------------------------------------------------------- length and diversity

def soft_overlong_punishment(max_len: int, cache: int, tokenizer=None) -> RewardFunc:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), a reward-function factory:

        R(y) = 0                              if |y| <= L_max - L_cache
             = ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
             = -1                             if |y| > L_max

    with ``L_max = max_len`` and ``L_cache = cache`` (TRL: ``get_soft_overlong_punishment``).
    |y| counts the ``completion_ids`` TRL passes when present, else the completion's tokens under
    ``tokenizer``, else its characters (the kit's tiny tokenizer is one token per character).
    """
    if max_len <= 0 or not 0 <= cache <= max_len:
        raise ConfigError(f"soft_overlong_punishment(max_len={max_len}, cache={cache}): need max_len > 0 "
                          f"and 0 <= cache <= max_len")
    safe = max_len - cache  # L_max - L_cache

    def soft_overlong(prompts, completions, completion_ids=None, **_):
        if completion_ids is not None:
            lengths = [len(ids) for ids in completion_ids]
        elif tokenizer is not None:
            lengths = [len(ids) for ids in tokenizer(list(completions), add_special_tokens=False)["input_ids"]]
        else:
            lengths = [len(c) for c in completions]
        return [0.0 if n <= safe else (safe - n) / cache if n <= max_len else -1.0 for n in lengths]

    soft_overlong.__name__ = f"soft_overlong_{max_len}_{cache}"
    return soft_overlong


def distinct_n_reward(n: int = 2, unit: str = "char") -> RewardFunc:
    """Diversity inside one completion: distinct n-grams / all n-grams (1.0 = no repeat).

    ``unit`` is ``"char"`` or ``"word"``; a completion with fewer than ``n`` units scores 0.0
    (no n-grams, no credit, so an empty completion is not rewarded). Complements TRL's
    ``get_repetition_penalty_reward``, which is ``(1 - this) * max_penalty`` on token ids.
    """
    if n < 1 or unit not in ("char", "word"):
        raise ConfigError(f"distinct_n_reward(n={n}, unit={unit!r}): need n >= 1 and unit 'char' or 'word'")

    def distinct(prompts, completions, **_):
        out = []
        for c in completions:
            units = c.split() if unit == "word" else c
            grams = [tuple(units[i:i + n]) for i in range(len(units) - n + 1)]
            out.append(len(set(grams)) / len(grams) if grams else 0.0)
        return out

    distinct.__name__ = f"distinct_{n}_{unit}"
    return distinct


# ---------------------------------------------------------------- process heuristic

_OP = r"[-+*/×÷x·\u2212]"
_NUM_TOKEN = rf"[-\u2212]?(?:{_NUM_CORE})"
# at most 8 operators per step keeps matching linear in the text (a degenerate "1+1+1+..."
# completion would otherwise backtrack quadratically); a longer chain is not read as a step
_STEP_RE = re.compile(rf"(?<![\w.])(?<!{_OP})(?<!{_OP}\s)"
                      rf"({_NUM_TOKEN}(?:\s*{_OP}\s*{_NUM_TOKEN}){{1,8}})\s*=\s*\$?\s*({_NUM_TOKEN})(?!\.?\d)")


def _arith(expr: str) -> float | None:
    """Value of ``n op n op ...`` with * and / before + and -; parsed floats only, no eval."""
    nums, ops, pos, text = [], [], 0, expr.replace(" ", "")
    while pos < len(text):  # alternate number, operator, number, ...: a '-' after a number is an operator
        m = re.compile(_NUM_TOKEN if len(nums) == len(ops) else _OP).match(text, pos)
        if m is None:
            return None
        if len(nums) == len(ops):
            nums.append(float(m.group().replace(_MINUS, "-").replace(",", "")))
        else:
            ops.append({"×": "*", "x": "*", "·": "*", "÷": "/", _MINUS: "-"}.get(m.group(), m.group()))
        pos = m.end()
    if len(nums) != len(ops) + 1:
        return None
    terms, signs, cur = [], [1.0], nums[0]
    for op, v in zip(ops, nums[1:]):
        if op == "*":
            cur *= v
        elif op == "/":
            if v == 0:
                return None
            cur /= v
        else:
            terms.append(cur)
            signs.append(1.0 if op == "+" else -1.0)
            cur = v
    terms.append(cur)
    return sum(s * t for s, t in zip(signs, terms))


def check_steps(text: str, rel_tol: float = 1e-6) -> tuple[int, int]:
    """(right, wrong): the steps ``a op b [op c ...] = d`` (up to 9 numbers on the left) in the
    text whose arithmetic holds,
    and those whose arithmetic does not (GSM8K's ``<<48/2=24>>`` annotations count as steps).
    The left side is evaluated by :func:`_arith` on parsed numbers; nothing is executed."""
    right = wrong = 0
    for m in _STEP_RE.finditer(text.replace("$", "")):
        lhs = _arith(m.group(1))
        rhs = float(m.group(2).replace(_MINUS, "-").replace(",", ""))
        if lhs is not None and math.isclose(lhs, rhs, rel_tol=rel_tol, abs_tol=1e-9):
            right += 1
        else:
            wrong += 1
    return right, wrong


def correct_steps(prompts: list[str], completions: list[str], **_) -> list[float]:
    """Process heuristic: the fraction of arithmetic steps that are right (0.0 with no step).

    A cheap stand-in for a process reward model: it rewards showing checkable work and
    punishes wrong intermediate arithmetic, whatever the final answer.
    """
    out = []
    for c in completions:
        right, wrong = check_steps(c)
        out.append(right / (right + wrong) if right + wrong else 0.0)
    return out


REWARD_FUNCS.update({"math_answer": math_answer, "gsm8k_format": gsm8k_format, "boxed_format": boxed_format,
                     "distinct_2": distinct_n_reward(2), "correct_steps": correct_steps})


def _register_symbolic() -> None:
    """``math_verify_answer`` (symbolic.py, backed by math-verify, imported only when it runs)."""
    from grpo_kit.rewards.symbolic import math_verify_answer

    REWARD_FUNCS["math_verify_answer"] = math_verify_answer


_register_symbolic()


# ---------------------------------------------------------------- TRL adapters

def _text(x) -> str:
    """A TRL prompt or completion as text: a string as is; a conversation (list of
    ``{"role", "content"}`` messages) as its last message's content."""
    if isinstance(x, str):
        return x
    if isinstance(x, dict) and "content" in x:
        return str(x["content"])
    if isinstance(x, list) and x and isinstance(x[-1], dict) and "content" in x[-1]:
        return str(x[-1]["content"])
    raise RewardError(f"cannot read {type(x).__name__} {str(x)[:60]!r} as text: pass a string or a list of "
                      f"{{'role', 'content'}} messages")


def text_view(f: RewardFunc) -> RewardFunc:
    """A judge that reads text, also taking TRL's conversational format: message lists are read as
    their last message's content; strings pass through (``functools.wraps`` keeps its name). An async
    ``f`` gives an async judge."""
    def texts(prompts, completions) -> dict:
        return {"prompts": [_text(p) for p in prompts], "completions": [_text(c) for c in completions]}

    if is_async_callable(f):
        @functools.wraps(f)
        async def judge_text_async(prompts, completions, **kwargs):
            return await f(**texts(prompts, completions), **kwargs)

        return judge_text_async

    @functools.wraps(f)
    def judge_text(prompts, completions, **kwargs):
        return f(**texts(prompts, completions), **kwargs)

    return judge_text


def to_trl(judge: RewardFunc) -> RewardFunc:
    """A kit judge as a TRL reward function (``GRPOTrainer(reward_funcs=[to_trl(j)])``).

    The signatures already agree; this adds conversational input (message lists are read as
    their last message's text) and keeps the judge's name for TRL's logs. TRL's extra keyword
    arguments (``completion_ids``, ``trainer_state``, dataset columns) pass through.
    """
    trl_reward = text_view(judge)
    trl_reward.__name__ = func_name(judge)
    return trl_reward


def from_trl(func: RewardFunc, tokenizer=None, conversational: bool = False) -> RewardFunc:
    """A TRL reward function as a judge to call outside ``train()`` (which already passes TRL's
    keyword arguments, so it needs no adapter): on plain text and columns, this adds
    ``completion_ids`` (tokenised with ``tokenizer``, when given) and ``trainer_state=None``. With
    ``conversational=True`` completions are sent as ``[{"role": "assistant", "content": text}]``
    (what TRL's ``accuracy_reward`` reads). An async ``func`` gives an async judge.
    """
    def trl_args(completions) -> dict:
        extra = {"completions": completions, "trainer_state": None}
        if tokenizer is not None:
            extra["completion_ids"] = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        if conversational:
            extra["completions"] = [[{"role": "assistant", "content": c}] for c in completions]
        return extra

    if is_async_callable(func):
        async def kit_judge(prompts, completions, **columns):
            return await func(prompts=prompts, **trl_args(completions), **columns)
    else:
        def kit_judge(prompts, completions, **columns):
            return func(prompts=prompts, **trl_args(completions), **columns)

    kit_judge.__name__ = func_name(func)
    return kit_judge


# ---------------------------------------------------------------- ensembles of scalar judges

def ensemble_reward(judges: Sequence[RewardFunc], weights: Sequence[float] | None = None,
                    method: str = "mean") -> RewardFunc:
    """Several judges as one reward function (see :func:`ensemble_scores`); each judge runs
    through :func:`score`, so a failing member is named."""
    def ensemble(prompts, completions, **columns):
        per = score(list(judges), prompts, completions, columns, combined=False).per_func  # (B, K)
        out = ensemble_scores(per.T, weights, method)  # (B,)
        return [None if math.isnan(v) else v for v in out.tolist()]

    ensemble.__name__ = f"{method}_of_" + "_".join(func_name(j) for j in judges)
    return ensemble


def __getattr__(name: str):
    """``judges.resolve_reward_func`` and ``judges.get_reward_funcs`` moved to :mod:`grpo_kit.rewards.resolve`
    (they load saved and served judges, which build on this module); the old names still work, with a
    DeprecationWarning, for one release."""
    if name in ("resolve_reward_func", "get_reward_funcs"):
        import importlib
        import warnings

        warnings.warn(f"grpo_kit.rewards.judges.{name} moved to grpo_kit.rewards.resolve.{name}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("grpo_kit.rewards.resolve"), name)
    raise AttributeError(f"module 'grpo_kit.rewards.judges' has no attribute {name!r}")
