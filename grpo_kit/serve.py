"""Judges as a service: any kit reward function over HTTP, and ``remote:URL`` to call one.

The protocol is OpenRLHF's remote reward model (its ``serve_rm`` server and ``remote_rm_fn``
client), so a kit server answers OpenRLHF and a kit run can use a server written for OpenRLHF:

    POST /get_reward   {"query":   [B texts, prompt + completion],
                        "prompts": [B prompts],
                        "labels":  [B reference answers]}
    -> 200             {"rewards": [B numbers], "scores": [B numbers],
                        "extra_logs": {judge name: [B numbers]}}

OpenRLHF's client reads ``rewards``; ``scores`` repeats them (OpenRLHF's custom reward functions
return both, ``scores`` for its dynamic filtering) and ``extra_logs`` holds each judge's own
values when several are served. A kit extension, ignored by OpenRLHF servers: ``columns``, the
dataset columns the kit's judges read, as ``{name: [B values]}`` (``answer``, ``reverse_digits``,
...); without it, ``labels`` become the ``answer`` column. The completion is the query less its
prompt, so every query must start with its prompt.

Served rewards are the sum of the judges' values (``judges.combine`` with weight 1 each; None is
left out); a sample no judge scored is ``null``, the kit's "cannot score" (a client that needs a
number for every sample must not serve judges that return None). A malformed request gets 400,
a judge that fails 500, each with ``{"error": message}``.

``remote_reward(url, timeout_s, retries, backoff_s)`` is the client, a reward function: each
call posts the batch with a time limit, retries a refused connection, a timeout or a 5xx answer
``retries`` times (waiting ``backoff_s``, then twice that, ...), and raises :class:`RewardError`
naming the URL, the cause and the fix when the server stays down or answers badly: not JSON,
no ``rewards`` list, the wrong number of rewards, or a value that is not a finite number. The
loop's ``reward_error_policy`` then raises or skips the batch like any failing reward function.

Only the standard library is used (``http.server``, ``urllib``); the server binds 127.0.0.1
unless told otherwise, and judges only read text.
"""
from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .errors import ConfigError, RewardError
from .judges import RewardFunc, _name, judge, resolve_reward_func

MAX_REQUEST_BYTES = 64 * 2**20
"""A request body larger than this is refused (413) before it is read."""
SERVER_HINT = "start one with 'grpo-kit serve-judge --judge SPEC --port PORT', or fix the URL"


class BadRequest(ValueError):
    """A request the server cannot score; its message goes back with HTTP 400."""


# ---------------------------------------------------------------- server

def completions_from_queries(queries: Sequence[str], prompts: Sequence[str]) -> list[str]:
    """OpenRLHF's ``query`` is prompt + completion: each completion is its query less its prompt."""
    out = []
    for i, (q, p) in enumerate(zip(queries, prompts)):
        if not q.startswith(p):
            raise BadRequest(f"query {i} does not start with its prompt ({p[:60]!r}); send query = prompt + completion")
        out.append(q[len(p):])
    return out


def parse_request(body: bytes) -> tuple[list[str], list[str], dict[str, list]]:
    """A request body -> (prompts, completions, columns); :class:`BadRequest` naming the problem."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"the body is not JSON ({e}); send {{'query': [...], 'prompts': [...], 'labels': [...]}}") \
            from None
    if not isinstance(data, dict):
        raise BadRequest(f"the body is a JSON {type(data).__name__}; send an object with 'query', 'prompts', 'labels'")
    queries, prompts = data.get("query"), data.get("prompts")
    for key, value in (("query", queries), ("prompts", prompts)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadRequest(f"'{key}' must be a list of strings")
    B = len(queries)
    labels = data.get("labels")
    columns = data.get("columns")
    if columns is None:
        columns = {} if labels is None else {"answer": labels}
    if not isinstance(columns, dict) or not all(isinstance(v, list) for v in columns.values()):
        raise BadRequest("'columns' must be an object of lists, one value per query")
    wrong = {k: len(v) for k, v in {"prompts": prompts, **columns}.items() if len(v) != B}
    if wrong:
        raise BadRequest(f"{B} queries but {wrong}; send one prompt, label and column value per query")
    return prompts, completions_from_queries(queries, prompts), columns


def score_request(funcs: Sequence[RewardFunc], prompts: list[str], completions: list[str],
                  columns: dict[str, list]) -> dict:
    """The response to one request: per-judge values (B, K) from :func:`judges.judge`; rewards are
    their sum over the judges that scored a sample, None where none did."""
    per_func, _, _ = judge(list(funcs), prompts, completions, columns)  # (B, K) NaN = no score
    rows = per_func.tolist()
    rewards = [None if all(math.isnan(v) for v in row) else sum(v for v in row if not math.isnan(v)) for row in rows]
    logs = {_name(f): [None if math.isnan(row[k]) else row[k] for row in rows] for k, f in enumerate(funcs)}
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs}


def _handler(funcs: list[RewardFunc]):
    lock = threading.Lock()  # one batch at a time: a learned judge is one model

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: a training run posts every step
            pass

        def _reply(self, status: int, payload: dict) -> None:
            body = json.dumps(payload, allow_nan=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # http.server's name
            if self.path.rstrip("/") in ("", "/health"):
                return self._reply(200, {"judges": [_name(f) for f in funcs], "endpoint": "POST /get_reward"})
            self._reply(404, {"error": f"no such endpoint {self.path!r}; POST to /get_reward"})

        def do_POST(self):
            if self.path.rstrip("/") != "/get_reward":
                return self._reply(404, {"error": f"no such endpoint {self.path!r}; POST to /get_reward"})
            try:
                size = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._reply(411, {"error": "send a Content-Length header"})
            if size > MAX_REQUEST_BYTES:
                return self._reply(413, {"error": f"body of {size} bytes is over {MAX_REQUEST_BYTES}; send smaller batches"})
            try:
                prompts, completions, columns = parse_request(self.rfile.read(size))
            except BadRequest as e:
                return self._reply(400, {"error": str(e)})
            try:
                with lock:
                    answer = score_request(funcs, prompts, completions, columns)
            except Exception as e:  # noqa: BLE001 - a failing judge is the server's error, not the client's
                return self._reply(500, {"error": f"{type(e).__name__}: {e}"})
            self._reply(200, answer)

    return Handler


def make_server(specs: Sequence, host: str = "127.0.0.1", port: int = 5000) -> ThreadingHTTPServer:
    """A server for the judges ``specs`` (anything ``reward_funcs`` takes), bound but not yet
    serving: call ``serve_forever()``. Port 0 picks a free port (``server.server_address[1]``)."""
    if not specs:
        raise ConfigError("serve-judge needs at least one judge: pass --judge SPEC (a name of judges.REWARD_FUNCS, "
                          "'package.module:function', 'learned:PATH' or 'remote:URL')")
    funcs = [resolve_reward_func(s) for s in specs]
    server = ThreadingHTTPServer((host, port), _handler(funcs))
    server.daemon_threads = True
    return server


# ---------------------------------------------------------------- client

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
            if e.code < 500:
                raise RewardError(f"remote judge {url} {cause}; the request was refused, so retrying cannot help: "
                                  f"check that the URL is a /get_reward endpoint of a reward server") from None
        except (TimeoutError, urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError) or isinstance(e, TimeoutError):
                cause = f"did not answer within timeout_s={timeout_s} s"
            else:
                cause = f"cannot be reached ({type(reason).__name__}: {reason})"
        if k + 1 < tries:
            time.sleep(backoff_s * 2 ** k)
    fix = (f"the server is slow or stuck: check it, or raise timeout_s with {{'function': "
           f"'grpo_kit.serve:remote_reward', 'args': {{'url': '{url}', 'timeout_s': ...}}}}"
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


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"remote judge URL {url!r}: write it as http://HOST:PORT/get_reward")
    return url


def request_payload(prompts: Sequence[str], completions: Sequence[str], columns: dict) -> bytes:
    """OpenRLHF's request for a batch, with the kit's dataset columns (TRL's extra keyword
    arguments, which are not data, are left out)."""
    from .inference import RESERVED_COLUMNS

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
    defaults; the factory form ``{"function": "grpo_kit.serve:remote_reward", "args": {"url": ...,
    "timeout_s": 5, "retries": 1}}`` sets them). A try gives up when the server stays silent for
    ``timeout_s`` (while connecting or between bytes), so a server that is down or stuck costs at
    most about ``(retries + 1) * timeout_s + backoff_s * (2**retries - 1)`` seconds per call;
    ``reward_timeout_s`` bounds the whole call."""
    _check_url(url)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"remote_reward timeout_s={timeout_s!r}: must be a finite number of seconds > 0")
    if not (isinstance(retries, int) and not isinstance(retries, bool) and 0 <= retries <= 10):
        raise ConfigError(f"remote_reward retries={retries!r}: must be a whole number from 0 to 10")
    if not (isinstance(backoff_s, (int, float)) and math.isfinite(backoff_s) and 0 <= backoff_s <= 60):
        raise ConfigError(f"remote_reward backoff_s={backoff_s!r}: must be a number of seconds from 0 to 60")

    def remote(prompts, completions, **columns):
        payload = request_payload(prompts, completions, columns)
        return read_rewards(url, post_with_retries(url, payload, timeout_s, retries, backoff_s), len(completions))

    host = urllib.parse.urlsplit(url)
    remote.__name__ = f"remote_{host.hostname}_{host.port or ''}".rstrip("_")
    return remote
