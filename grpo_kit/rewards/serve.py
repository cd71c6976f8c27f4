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
a judge that fails 500, each with ``{"error": message}``: a request the judges cannot score
(labels null or missing where a judge needs them, a column named like a reward function's own
argument, labels that are not a list, JSON nested too deeply) is the client's error, 400 naming
the field; only a judge that raises (anything, even ``SystemExit``) or returns bad values is 500.

Limits, so that one client or one judge cannot stop the server: a body over
:data:`MAX_REQUEST_BYTES` is refused (413), a negative or non-numeric ``Content-Length`` too
(400); a client has ``request_timeout_s`` (30 s) from connecting to send its whole request, so an
idle or trickling ("slow-loris") connection is closed then; at most ``max_connections`` (128) are
served at once, one thread each, and more wait in a listen backlog of :data:`LISTEN_BACKLOG`
(not refused). Each judge call runs in a worker thread with a time limit (``--judge-timeout``,
20 s, below the client's default ``timeout_s`` of 30 s so a client hears why): a call past it
answers 503 naming the judge. Python cannot stop a thread, so the call keeps running as that
judge's *stuck* call; until it returns the judge is refused at once (503) and ``GET /health``
answers 503 with ``{"stuck": {judge: seconds}, "error": ...}`` instead of 200 (``"stuck": {}``).

``remote_reward(url, timeout_s, retries, backoff_s)`` is the client, a reward function: each
call posts the batch with a time limit, retries a refused connection, a timeout or a 5xx answer
``retries`` times (waiting ``backoff_s``, then twice that, ...), and raises :class:`RewardError`
naming the URL, the cause and the fix when the server stays down or answers badly: not JSON,
no ``rewards`` list, the wrong number of rewards, or a value that is not a finite number. The
loop's ``reward_error_policy`` then raises or skips the batch like any failing reward function.

Only the standard library is used (``http.server``, ``urllib``); the server binds 127.0.0.1
unless told otherwise (an IPv6 literal such as ``::1`` serves IPv6), and judges only read text.
"""
from __future__ import annotations

import inspect
import io
import ipaddress
import json
import math
import socket
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.rewards.judges import RewardFunc, call_reward, func_name, score
from grpo_kit.rewards.remote import (  # noqa: F401 (their old home)
    SERVER_HINT,
    post_with_retries,
    read_rewards,
    remote_reward,
    request_payload,
)
from grpo_kit.rewards.resolve import resolve_reward_func

MAX_REQUEST_BYTES = 64 * 2**20
"""A request body larger than this is refused (413) before it is read."""
REQUEST_TIMEOUT_S = 30.0
"""A client must send its whole request within this many seconds of connecting, or is cut off."""
JUDGE_TIMEOUT_S = 20.0
"""Default time limit of one judge call (``serve-judge --judge-timeout``); past it the answer is 503."""
MAX_CONNECTIONS = 128
"""Connections served at once (a thread each); more wait, unrefused, in the listen backlog."""
LISTEN_BACKLOG = 1024
"""Connections the kernel holds for the server before it accepts them (bursts of rollout workers)."""


class BadRequest(ValueError):
    """A request the server cannot score; its message goes back with HTTP 400."""


class JudgeUnavailable(RuntimeError):
    """A judge call past its time limit, or a judge still stuck in one; the message goes back with HTTP 503."""


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
    from grpo_kit.data.tasks import RESERVED_COLUMNS

    try:
        data = json.loads(body)
    except RecursionError:
        raise BadRequest("the body's JSON is nested too deeply; send flat lists of strings") from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError, or an integer of thousands of digits
        raise BadRequest(f"the body is not JSON ({str(e)[:200]}); send {{'query': [...], 'prompts': [...], "
                         f"'labels': [...]}}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the body is a JSON {type(data).__name__}; send an object with 'query', 'prompts', 'labels'")
    queries, prompts = data.get("query"), data.get("prompts")
    for key, value in (("query", queries), ("prompts", prompts)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadRequest(f"'{key}' must be a list of strings")
    B = len(queries)
    labels = data.get("labels")
    if labels is not None and not isinstance(labels, list):
        raise BadRequest(f"'labels' is a JSON {type(labels).__name__}; send a list, one reference answer per query")
    columns = data.get("columns")
    if columns is None:
        columns = {}
    if not isinstance(columns, dict) or not all(isinstance(v, list) for v in columns.values()):
        raise BadRequest("'columns' must be an object of lists, one value per query")
    reserved = sorted(set(columns) & set(RESERVED_COLUMNS))
    if reserved:
        raise BadRequest(f"'columns' holds {reserved}: these names are the judges' own arguments, not dataset "
                         f"columns; send prompts in 'prompts' and rename the column")
    if labels is not None and "answer" not in columns:  # the kit's extension wins over labels
        columns = {**columns, "answer": labels}
    wrong = {k: len(v) for k, v in {"prompts": prompts, **columns}.items() if len(v) != B}
    if wrong:
        raise BadRequest(f"{B} queries but {wrong}; send one prompt, label and column value per query")
    return prompts, completions_from_queries(queries, prompts), columns


def required_columns(f: RewardFunc) -> list[str]:
    """The keyword arguments ``f`` cannot do without besides prompts and completions (its columns)."""
    try:
        params = inspect.signature(f).parameters.values()  # follows functools.wraps to the judge itself
    except (TypeError, ValueError):  # a builtin or a C callable: nothing to learn
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds and p.default is p.empty and p.name not in ("prompts", "completions")]


def check_columns(funcs: Sequence[RewardFunc], columns: dict[str, list]) -> None:
    """:class:`BadRequest` naming the field when a judge needs a column the request lacks or leaves
    null or empty (the kit's own client sends ``labels`` of "" for a dataset without answers)."""
    for f in funcs:
        for c in required_columns(f):
            field = "'labels' (the reference answers)" if c == "answer" else f"'columns': {{'{c}': [...]}}"
            if c not in columns:
                raise BadRequest(f"judge {func_name(f)!r} needs '{c}' for every query and the request has none: "
                                 f"send {field}, one value per query")
            nulls = [i for i, v in enumerate(columns[c]) if v is None or v == ""]
            if nulls:
                raise BadRequest(f"judge {func_name(f)!r} needs '{c}' for every query and it is null or empty for queries "
                                 f"{nulls[:10]}: send {field} with a value for each")


def score_request(funcs: Sequence[RewardFunc], prompts: list[str], completions: list[str],
                  columns: dict[str, list]) -> dict:
    """The response to one request: per-judge values (B, K) from :func:`judges.score`; rewards are
    their sum over the judges that scored a sample, None where none did."""
    per_func = score(list(funcs), prompts, completions, columns, combined=False).per_func  # (B, K) NaN = no score
    rows = per_func.tolist()
    rewards = [None if all(math.isnan(v) for v in row) else sum(v for v in row if not math.isnan(v)) for row in rows]
    logs = {func_name(f): [None if math.isnan(row[k]) else row[k] for row in rows] for k, f in enumerate(funcs)}
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs}


def _returning(name: str, values) -> RewardFunc:
    """A reward function named ``name`` that returns ``values``: :func:`judges.score` then checks them."""
    def f(prompts, completions, **_):
        return values

    f.__name__ = name
    return f


class Judges:
    """The served judges: each call gets its own copies of the lists and runs in a worker thread
    with a time limit; one batch at a time (a learned judge is one model).

    A call past ``timeout_s`` raises :class:`JudgeUnavailable` and, as Python cannot stop a thread,
    goes on in the background as that judge's stuck call; until it returns, the judge is refused
    at once, so each judge leaves at most one stuck thread. :meth:`stuck` says which are stuck."""

    def __init__(self, funcs: Sequence[RewardFunc], timeout_s: float):
        self.funcs, self.timeout_s = list(funcs), timeout_s
        self.names = [func_name(f) for f in self.funcs]
        self._batch = threading.Lock()
        self._guard = threading.Lock()  # guards _stuck
        self._stuck: dict[int, float] = {}  # judge index -> time.monotonic() its stuck call started

    def stuck(self) -> dict[str, float]:
        """Judge name -> seconds its stuck call has been running (empty when none is stuck)."""
        now = time.monotonic()
        with self._guard:
            return {self.names[k]: round(now - t, 1) for k, t in self._stuck.items()}

    def _call(self, k: int, prompts: list[str], completions: list[str], columns: dict[str, list]):
        name = self.names[k]
        with self._guard:
            if k in self._stuck:
                raise JudgeUnavailable(f"judge {name!r} is stuck: a call started {time.monotonic() - self._stuck[k]:.0f} s "
                                       f"ago has not returned (limit {self.timeout_s} s), and it is "
                                       f"refused until that call returns: fix the judge, or restart serve-judge")
        box: dict = {}
        done = threading.Event()  # set under _guard, so "not done" and "stuck" are decided together
        start = time.monotonic()

        def work():
            try:
                box["out"] = call_reward(self.funcs[k], prompts=list(prompts), completions=list(completions),
                                         **{c: list(v) for c, v in columns.items()})
            except BaseException as e:  # noqa: BLE001 - even SystemExit: handed to the request, naming the judge
                box["err"] = e
            finally:
                with self._guard:
                    done.set()
                    if self._stuck.get(k) == start:  # a stuck call returned: the judge is free again
                        del self._stuck[k]

        threading.Thread(target=work, name=f"judge-{name}", daemon=True).start()
        if not done.wait(self.timeout_s):
            with self._guard:
                if not done.is_set():
                    self._stuck[k] = start
                    raise JudgeUnavailable(f"judge {name!r} did not return within --judge-timeout {self.timeout_s} s "
                                           f"on a batch of {len(completions)}; make it faster or raise --judge-timeout")
        if "err" in box:
            e = box["err"]
            raise RewardError(f"judge {name!r} raised {type(e).__name__}: {str(e)[:300]}")
        return box["out"]

    def score(self, prompts: list[str], completions: list[str], columns: dict[str, list]) -> dict:
        """The response to one request (see :func:`score_request`); :class:`JudgeUnavailable` (503)
        or :class:`RewardError` (500) naming the judge otherwise."""
        with self._batch:
            values = [self._call(k, prompts, completions, columns) for k in range(len(self.funcs))]
        return score_request([_returning(n, v) for n, v in zip(self.names, values)], prompts, completions, columns)


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes that must all arrive by ``deadline`` (time.monotonic()): each read waits at
    most the time left and then raises TimeoutError, so a client trickling bytes cannot hold on."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(b)


def _handler(judges: Judges, request_timeout_s: float):
    class Handler(BaseHTTPRequestHandler):
        timeout = request_timeout_s  # the socket's, for writes; reads have the deadline below

        def setup(self):
            super().setup()
            self.rfile.close()  # the socket's own reader, replaced by one with a deadline
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + request_timeout_s))

        def log_message(self, *args):  # quiet: a training run posts every step
            pass

        def _reply(self, status: int, payload: dict) -> None:
            body = json.dumps(payload, allow_nan=False).encode()
            self.connection.settimeout(request_timeout_s)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # http.server's name
            if self.path.rstrip("/") not in ("", "/health"):
                return self._reply(404, {"error": f"no such endpoint {self.path!r}; POST to /get_reward"})
            stuck = judges.stuck()
            payload = {"judges": judges.names, "endpoint": "POST /get_reward", "stuck": stuck}
            if stuck:
                payload["error"] = (f"judges {sorted(stuck)} are stuck in a call past --judge-timeout "
                                    f"{judges.timeout_s} s (seconds so far: {stuck}); they answer 503 until it returns")
            self._reply(503 if stuck else 200, payload)

        def do_POST(self):
            if self.path.rstrip("/") != "/get_reward":
                return self._reply(404, {"error": f"no such endpoint {self.path!r}; POST to /get_reward"})
            length = self.headers.get("Content-Length")
            if length is None:
                return self._reply(411, {"error": "send a Content-Length header"})
            try:
                size = int(length)
            except ValueError:
                size = -1
            if size < 0:
                return self._reply(400, {"error": f"Content-Length {length[:40]!r} is not a number of bytes >= 0"})
            if size > MAX_REQUEST_BYTES:
                return self._reply(413, {"error": f"body of {size} bytes is over {MAX_REQUEST_BYTES}; send smaller batches"})
            try:
                body = self.rfile.read(size)
            except TimeoutError:
                return self._reply(408, {"error": f"the request did not arrive within {request_timeout_s} s of "
                                                  f"connecting; send it at once"})
            try:
                if len(body) < size:
                    raise BadRequest(f"the body ended after {len(body)} of its Content-Length {size} bytes")
                prompts, completions, columns = parse_request(body)
                check_columns(judges.funcs, columns)
            except BadRequest as e:
                return self._reply(400, {"error": str(e)})
            try:
                answer = judges.score(prompts, completions, columns)
            except JudgeUnavailable as e:
                return self._reply(503, {"error": str(e)})
            except BaseException as e:  # noqa: BLE001 - a failing judge is the server's error, not the client's
                return self._reply(500, {"error": f"{type(e).__name__}: {str(e)[:1000]}"})
            self._reply(200, answer)

    return Handler


class JudgeServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with a large listen backlog, at most ``max_connections`` handler
    threads (the accept loop waits for a free one, so more connections wait in the backlog), IPv6
    for an IPv6 literal host, and a client's broken connection left out of the log."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler, max_connections: int = MAX_CONNECTIONS):
        self.address_family = socket.AF_INET6 if _is_ipv6(address[0]) else socket.AF_INET
        self._slots = threading.BoundedSemaphore(max_connections)
        self._closing = False
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        while not self._slots.acquire(timeout=0.5):  # every thread busy: the backlog holds the rest
            if self._closing:
                return self.shutdown_request(request)
        try:
            super().process_request(request, client_address)
        except BaseException:  # the thread did not start
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown(self):
        self._closing = True
        super().shutdown()

    def handle_error(self, request, client_address):
        e = sys.exc_info()[1]
        if isinstance(e, OSError):  # the client hung up, reset or timed out: routine
            return
        print(f"grpo-kit serve-judge: warning: a request from {client_address[0]} failed: "
              f"{type(e).__name__}: {str(e)[:300]}", file=sys.stderr)


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:  # a host name: bound as IPv4, as before
        return False


def _positive_seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ConfigError(f"serve-judge {name}={value!r}: must be a finite number of seconds > 0")
    return float(value)


def make_server(specs: Sequence, host: str = "127.0.0.1", port: int = 5000, judge_timeout_s: float = JUDGE_TIMEOUT_S,
                request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> JudgeServer:
    """A server for the judges ``specs`` (anything ``reward_funcs`` takes), bound but not yet
    serving: call ``serve_forever()``. Port 0 picks a free port (``server.server_address[1]``);
    ``host`` may be an IPv6 literal (``::1``, with or without brackets). The limits are in the
    module's docstring."""
    if not specs:
        raise ConfigError("serve-judge needs at least one judge: pass --judge SPEC (a name of judges.REWARD_FUNCS, "
                          "'package.module:function', 'learned:PATH' or 'remote:URL')")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"serve-judge --port {port!r}: a port is a whole number from 0 to 65535 (0 picks a free one)")
    judge_timeout_s = _positive_seconds("judge_timeout_s (--judge-timeout)", judge_timeout_s)
    request_timeout_s = _positive_seconds("request_timeout_s", request_timeout_s)
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ConfigError(f"serve-judge max_connections={max_connections!r}: must be a whole number >= 1")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    funcs = [resolve_reward_func(s) for s in specs]
    try:
        return JudgeServer((host, port), _handler(Judges(funcs, judge_timeout_s), request_timeout_s), max_connections)
    except OSError as e:  # in use, not an address of this machine, no IPv6, an unknown name
        raise ConfigError(f"serve-judge cannot listen on --host {host} --port {port} ({e.strerror or e}): pass a free "
                          f"--port (0 picks one) and an address of this machine (127.0.0.1, ::1, 0.0.0.0)") from None
