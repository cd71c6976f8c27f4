"""The client of a served judge: ``"remote:URL"`` in ``reward_funcs`` (or :func:`remote_reward`'s
factory form) asks a reward server that speaks OpenRLHF's remote reward-model protocol
(``grpo-kit serve-judge`` runs one; ``serve.py`` is the server) for one reward per completion.
"""
from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.rewards.judges import RewardFunc

SERVER_HINT = "start one with 'grpo-kit serve-judge --judge SPEC --port PORT', or fix the URL"


def _post(url: str, payload: bytes, timeout_s: float) -> bytes:
    req = urllib.request.Request(url, data=payload, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # the scheme is checked up front
        return resp.read()


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        body = e.read()[:400].decode("utf-8", "replace")
        return str(json.loads(body).get("error", body))
    except Exception:  # noqa: BLE001 - any body, JSON or not, is only shown
        return e.reason or ""


def post_with_retries(url: str, payload: bytes, timeout_s: float, retries: int, backoff_s: float) -> bytes:
    """POST ``payload``; retry a refused connection, a timeout or a 5xx answer up to ``retries``
    times (waiting backoff_s * 2**k before retry k); :class:`RewardError` when every try failed."""
    tries = retries + 1
    for k in range(tries):
        try:
            return _post(url, payload, timeout_s)
        except urllib.error.HTTPError as e:
            cause = f"answered HTTP {e.code}: {_error_text(e)}"
            if e.code < 500:  # the client's error: the same batch would be refused again
                fix = ("check that the URL is a /get_reward endpoint of a reward server" if e.code in (404, 405) else
                       "fix what the server's message names (a dataset column, the labels, the batch size)")
                raise RewardError(f"remote judge {url} {cause}; the request was refused, so retrying cannot help: "
                                  f"{fix}") from None
        except (TimeoutError, urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError) or isinstance(e, TimeoutError):
                cause = f"did not answer within timeout_s={timeout_s} s"
            else:
                cause = f"cannot be reached ({type(reason).__name__}: {reason})"
        if k + 1 < tries:
            time.sleep(backoff_s * 2 ** k)
    fix = (f"the server is slow or stuck: check it, or raise timeout_s with {{'function': "
           f"'grpo_kit.rewards.remote:remote_reward', 'args': {{'url': '{url}', 'timeout_s': ...}}}}"
           if cause.startswith("did not answer") else
           f"is the judge server running? {SERVER_HINT}" if cause.startswith("cannot be reached") else
           "the server's judge failed: see the server's message and its log")
    raise RewardError(f"remote judge {url} {cause} (tried {tries} time{'s' if tries > 1 else ''}); {fix}")


def read_rewards(url: str, body: bytes, B: int) -> list[float | None]:
    """A response body -> B rewards (None where the server sent null); :class:`RewardError`
    naming the URL and what is wrong otherwise."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RewardError(f"remote judge {url} answered something that is not JSON ({body[:80]!r}); "
                          f"point remote: at a reward server's /get_reward endpoint") from None
    rewards = data.get("rewards") if isinstance(data, dict) else None
    if not isinstance(rewards, list):
        raise RewardError(f"remote judge {url} answered JSON without a 'rewards' list ({str(data)[:80]}); "
                          f"the server must answer {{'rewards': [one number per query]}}")
    if len(rewards) != B:
        raise RewardError(f"remote judge {url} returned {len(rewards)} rewards for {B} completions; "
                          f"the server must return one reward per query")
    for i, v in enumerate(rewards):
        ok = v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
        if not ok:
            raise RewardError(f"remote judge {url} returned {v!r} for sample {i}; rewards must be finite numbers "
                              f"(null for a sample it cannot score): fix the server's judge")
    return [None if v is None else float(v) for v in rewards]


def _check_url(url: str) -> urllib.parse.SplitResult:
    """The URL's parts; :class:`ConfigError` naming it when it is not http(s)://HOST[:PORT]/...
    (a port out of 0-65535, an IPv6 host without its closing bracket, ...)."""
    how = "write it as http://HOST:PORT/get_reward (an IPv6 host in brackets: http://[::1]:PORT/get_reward)"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parsed here, so that a bad port is named now, not at the first call
    except ValueError as e:
        raise ConfigError(f"remote judge URL {url!r}: {e}; {how}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"remote judge URL {url!r}: {how}")
    return parts


def request_payload(prompts: Sequence[str], completions: Sequence[str], columns: dict) -> bytes:
    """OpenRLHF's request for a batch, with the kit's dataset columns (TRL's extra keyword
    arguments, which are not data, are left out)."""
    from grpo_kit.data.tasks import RESERVED_COLUMNS

    cols = {k: list(v) for k, v in columns.items() if k not in RESERVED_COLUMNS}
    labels = [str(a) for a in cols["answer"]] if "answer" in cols else [""] * len(completions)
    data = {"query": [p + c for p, c in zip(prompts, completions)], "prompts": list(prompts), "labels": labels,
            "columns": cols}
    try:
        return json.dumps(data, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise RewardError(f"cannot send the batch as JSON ({e}); dataset columns must hold JSON values") from None


def remote_reward(url: str, timeout_s: float = 30.0, retries: int = 2, backoff_s: float = 0.5) -> RewardFunc:
    """A reward function that asks the server at ``url`` (``reward_funcs: ["remote:URL"]`` uses the
    defaults; the factory form ``{"function": "grpo_kit.rewards.remote:remote_reward", "args": {"url": ...,
    "timeout_s": 5, "retries": 1}}`` sets them). A try gives up when the server stays silent for
    ``timeout_s`` (while connecting or between bytes), so a server that is down or stuck costs at
    most about ``(retries + 1) * timeout_s + backoff_s * (2**retries - 1)`` seconds per call;
    ``reward_timeout_s`` bounds the whole call."""
    if not isinstance(url, str):
        raise ConfigError(f"remote judge URL {url!r}: write it as http://HOST:PORT/get_reward")
    host = _check_url(url)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"remote_reward timeout_s={timeout_s!r}: must be a finite number of seconds > 0")
    if not (isinstance(retries, int) and not isinstance(retries, bool) and 0 <= retries <= 10):
        raise ConfigError(f"remote_reward retries={retries!r}: must be a whole number from 0 to 10")
    if not (isinstance(backoff_s, (int, float)) and math.isfinite(backoff_s) and 0 <= backoff_s <= 60):
        raise ConfigError(f"remote_reward backoff_s={backoff_s!r}: must be a number of seconds from 0 to 60")

    def remote(prompts, completions, **columns):
        payload = request_payload(prompts, completions, columns)
        return read_rewards(url, post_with_retries(url, payload, timeout_s, retries, backoff_s), len(completions))

    remote.__name__ = f"remote_{host.hostname}_{host.port or ''}".rstrip("_")
    return remote
