"""Judges over HTTP: the server's protocol, the remote:URL client's errors, and a run against a real server process."""
import asyncio
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.loop.train import setup, train
from grpo_kit.rewards.judges import exact_answer, format_reward, score
from grpo_kit.rewards.resolve import resolve_reward_func
from grpo_kit.rewards.serve import (
    BadRequest,
    completions_from_queries,
    make_server,
    parse_request,
    remote_reward,
    request_payload,
    score_request,
)

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py); every test of the module

# ---------------------------------------------------------------- the protocol, by hand

def test_parse_request_splits_queries_and_reads_labels_as_answers():
    body = json.dumps({"query": ["12+34=64", "1+1=2"], "prompts": ["12+34=", "1+1="], "labels": ["46", "2"]})
    prompts, completions, columns = parse_request(body.encode())
    assert prompts == ["12+34=", "1+1="] and completions == ["64", "2"] and columns == {"answer": ["46", "2"]}
    cols = {"answer": ["46"], "reverse_digits": [True]}  # the kit's extension wins over labels
    assert parse_request(json.dumps({"query": ["a=1"], "prompts": ["a="], "labels": ["x"], "columns": cols}).encode())[2] \
        == cols


@pytest.mark.parametrize("body,message", [
    (b"{not json", "the body is not JSON"),
    (b"[1, 2]", "the body is a JSON list"),
    (json.dumps({"prompts": ["a"]}).encode(), "'query' must be a list of strings"),
    (json.dumps({"query": ["ab"], "prompts": ["a", "b"]}).encode(), "1 queries but {'prompts': 2}"),
    (json.dumps({"query": ["ab"], "prompts": ["a"], "labels": ["1", "2"]}).encode(), "1 queries but {'answer': 2}"),
    (json.dumps({"query": ["xb"], "prompts": ["a"]}).encode(), "query 0 does not start with its prompt"),
])
def test_bad_requests_are_named(body, message):
    with pytest.raises(BadRequest, match=message.replace("[", r"\[").replace("{", r"\{")):
        parse_request(body)


def test_score_request_sums_judges_and_keeps_each():
    # exact_answer: "46" is right (1), "47" wrong (0); format: both well-formed (1, 1) -> rewards 2, 1
    got = score_request([exact_answer, format_reward], ["q", "q"], ["46", "47"], {"answer": ["46", "46"]})
    assert got["rewards"] == [2.0, 1.0] and got["scores"] == got["rewards"]
    assert got["extra_logs"] == {"exact_answer": [1.0, 0.0], "format_reward": [1.0, 1.0]}

    def unsure(prompts, completions, **_):  # scores nothing: the sample's reward is null, the kit's None
        return [None] * len(completions)

    assert score_request([unsure], ["q"], ["1"], {})["rewards"] == [None]
    assert completions_from_queries(["p: x"], ["p: "]) == ["x"]


# ---------------------------------------------------------------- the client against a scripted server

class Scripted:
    """A tiny in-test server that answers every POST with ``status`` and ``body`` after ``delay`` s."""

    def __init__(self, status=200, body=b"{}", delay=0.0):
        self.status, self.body, self.delay, self.posts = status, body, delay, 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                outer.posts += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(outer.delay)
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/get_reward"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status,body,message,posts", [
    (200, b"<html>oops</html>", "answered something that is not JSON", 1),
    (200, b'{"score": [1, 2]}', "answered JSON without a 'rewards' list", 1),
    (200, b'{"rewards": [1.0]}', "returned 1 rewards for 2 completions", 1),
    (200, b'{"rewards": [1.0, NaN]}', "returned nan for sample 1; rewards must be finite", 1),
    (200, b'{"rewards": [Infinity, 1]}', "returned inf for sample 0", 1),
    (200, b'{"rewards": ["1", 1]}', "returned '1' for sample 0", 1),
    (200, b'{"rewards": [true, 1]}', "returned True for sample 0", 1),
    (400, b'{"error": "bad labels"}', "answered HTTP 400: bad labels; the request was refused", 1),
    (500, b'{"error": "judge broke"}', "answered HTTP 500: judge broke \\(tried 3 times\\)", 3),  # retried
])
def test_malformed_answers_are_reward_errors(status, body, message, posts):
    s = Scripted(status, body)
    try:
        f = remote_reward(s.url, timeout_s=5, retries=2, backoff_s=0.01)
        with pytest.raises(RewardError, match=message) as e:
            f(prompts=["q", "q"], completions=["1", "2"], answer=["1", "2"])
        assert s.url in str(e.value) and s.posts == posts
    finally:
        s.close()


def test_null_is_none_and_numbers_pass():
    s = Scripted(200, b'{"rewards": [0.5, null], "scores": [0.5, null]}')
    try:
        assert remote_reward(s.url)(prompts=["q", "q"], completions=["1", "2"]) == [0.5, None]
    finally:
        s.close()


def test_a_slow_server_times_out_after_bounded_retries():
    s = Scripted(200, b'{"rewards": [1]}', delay=1.0)
    try:
        t0 = time.time()
        with pytest.raises(RewardError, match=r"did not answer within timeout_s=0.2 s \(tried 2 times\); .*raise "
                                              r"timeout_s"):
            remote_reward(s.url, timeout_s=0.2, retries=1, backoff_s=0.05)(prompts=["q"], completions=["1"])
        assert time.time() - t0 < 2.0 and s.posts == 2  # 2 x 0.2 s + 0.05 s, not the server's 1 s per answer
    finally:
        s.close()


def test_a_server_that_is_down_is_named_with_the_fix():
    s = Scripted()
    url = s.url
    s.close()  # nothing listens on that port any more
    with pytest.raises(RewardError, match=r"cannot be reached .*\(tried 3 times\); is the judge server running\? "
                                          r"start one with 'grpo-kit serve-judge"):
        remote_reward(url, timeout_s=2, retries=2, backoff_s=0.01)(prompts=["q"], completions=["1"])


def test_remote_spec_and_factory_are_checked_up_front():
    assert resolve_reward_func("remote:http://127.0.0.1:9/get_reward").__name__ == "remote_127.0.0.1_9"
    for bad in ("remote:", "remote:ftp://x/get_reward", "remote:localhost:5000"):
        with pytest.raises(ConfigError, match="reward function|remote judge URL"):
            resolve_reward_func(bad)
    with pytest.raises(ConfigError, match="timeout_s=0"):
        resolve_reward_func({"function": "grpo_kit.rewards.serve:remote_reward", "args": {"url": "http://h/x", "timeout_s": 0}})
    with pytest.raises(ConfigError, match="retries=-1"):
        remote_reward("http://h/x", retries=-1)


def test_request_leaves_out_trl_arguments():
    body = json.loads(request_payload(["1+1="], ["2"], {"answer": ["2"], "trainer_state": [object()],
                                                         "log_metric": print, "reverse_digits": [False]}))
    assert body == {"query": ["1+1=2"], "prompts": ["1+1="], "labels": ["2"],
                    "columns": {"answer": ["2"], "reverse_digits": [False]}}


def test_in_process_server_round_trip():
    server = make_server(["exact_answer"], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/get_reward"
        f = resolve_reward_func(f"remote:{url}")
        cols = {"answer": ["46", "46", "46"], "reverse_digits": [True, True, True]}
        per_remote = score([f], ["12+34="] * 3, ["64", "46", "x"], cols, combined=False).per_func  # (3, 1)
        per_local = score([resolve_reward_func("exact_answer")], ["12+34="] * 3, ["64", "46", "x"], cols,
                          combined=False).per_func
        assert per_remote.flatten().tolist() == per_local.flatten().tolist() == [1.0, 0.0, 0.0]
    finally:
        server.shutdown()
        server.server_close()



def test_an_async_judge_is_served():
    async def async_exact(prompts, completions, answer, **kw):
        await asyncio.sleep(0)
        return exact_answer(prompts, completions, answer, **kw)
    server = make_server([async_exact], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        f = resolve_reward_func(f"remote:http://127.0.0.1:{server.server_address[1]}/get_reward")
        got = score([f], ["12+34="] * 3, ["64", "46", "x"], {"answer": ["46"] * 3, "reverse_digits": [True] * 3})
        assert got.rewards.tolist() == [1.0, 0.0, 0.0]
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- a real server process and a training run

def _start_server(*judges):
    cmd = [sys.executable, "-m", "grpo_kit.cli", "serve-judge", "--port", "0"]
    for j in judges:
        cmd += ["--judge", j]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # "grpo-kit serve-judge: listening on http://127.0.0.1:PORT/get_reward ..."
    assert "listening on" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split("listening on ")[1].split()[0]


def _stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()
    proc.stderr.close()


def test_train_against_a_served_judge_then_the_server_dies(small_cfg, tmp_path, capsys):
    proc, url = _start_server("exact_answer")
    try:
        # grpo-kit train with the remote judge: its rewards equal the local judge's on the same completions
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"steps: 2\nnum_prompts: 4\nnum_generations: 4\neval_size: 4\nthreads: 1\ndevice: cpu\n"
                       f"reward_funcs: ['remote:{url}']\ngold_reward_funcs: [exact_answer]\n")
        assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")]) == 0
        hist = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
        name = "rewards/" + resolve_reward_func(f"remote:{url}").__name__ + "/mean"
        assert len(hist) == 2 and all(h[name] == h["gold_reward"] == h["reward"] for h in hist)
        # kill the server after step 1: the next step raises a RewardError naming the URL, fast
        remote = small_cfg.replace(steps=3, eval_size=4, reward_funcs=[f"remote:{url}"])
        run = setup(remote)
        steps = train(remote, run)
        next(steps)
        _stop(proc)
        t0 = time.time()
        with pytest.raises(RewardError, match=f"remote judge {url} cannot be reached .*is the judge server running"):
            next(steps)
        assert time.time() - t0 < 30 and run.step == 1

        # with reward_error_policy 'skip' the step leaves every sample out and skips the update instead
        skip = remote.replace(steps=2, reward_error_policy="skip", max_consecutive_skips=0)
        run = setup(skip)
        before = [p.detach().clone() for p in run.policy.parameters()]
        m = next(train(skip, run))
        assert m["rewards/bad_samples"] == skip.batch_size and m["skipped"] == 1.0
        assert all(torch.equal(a, b) for a, b in zip(before, run.policy.parameters()))  # no silently wrong update

        # and grpo-kit train says so in one line, exit 2, with nothing listening
        t0 = time.time()
        assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run2")]) == 2
        err = capsys.readouterr().err
        assert f"remote judge {url} cannot be reached" in err and time.time() - t0 < 30
    finally:
        _stop(proc)


# ---------------------------------------------------------------- serve-judge under hostile or careless clients and hung judges (issue 23: D4, D9, D10, D16, D17, D18, D20).


GOOD = {"query": ["12+34=46"], "prompts": ["12+34="], "labels": ["46"]}


@contextmanager
def serving(*specs, host="127.0.0.1", **limits):
    server = make_server(list(specs), host=host, port=0, **limits)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def raw(server, data: bytes, close_write: bool = False, timeout: float = 5.0) -> tuple[int, dict]:
    """Send bytes as they are; the status and JSON body of the answer (the server closes after one)."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as s:
        s.sendall(data)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def request(server, method: str = "POST", path: str = "/get_reward", payload=None, timeout: float = 10.0):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=timeout)
    try:
        body = None if payload is None else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


# ---------------------------------------------------------------- D4: lengths, idle clients, threads

def test_a_negative_content_length_is_refused_not_read_to_the_end_of_the_stream():
    body = json.dumps(GOOD).encode()
    with serving("exact_answer") as server:
        # the connection stays open: reading "to the end" would wait for ever (the old server did)
        status, answer = raw(server, b"POST /get_reward HTTP/1.1\r\nContent-Length: -1\r\n\r\n" + body)
        assert status == 400 and "Content-Length '-1'" in answer["error"]
        status, answer = raw(server, b"POST /get_reward HTTP/1.1\r\nContent-Length: -5\r\n\r\n" + body, close_write=True)
        assert status == 400  # not scored, even when the stream ends
        status, answer = raw(server, b"POST /get_reward HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (64 * 2**20 + 1))
        assert status == 413
        assert request(server, payload=GOOD) == (200, {"rewards": [1.0], "scores": [1.0],
                                                       "extra_logs": {"exact_answer": [1.0]}})


def test_idle_and_trickling_clients_are_cut_off_after_the_request_timeout():
    with serving("exact_answer", request_timeout_s=0.5) as server:
        with socket.create_connection(server.server_address[:2], timeout=5) as idle:
            t0 = time.monotonic()
            assert idle.recv(100) == b""  # closed by the server, having sent nothing
            assert 0.4 < time.monotonic() - t0 < 3
        with socket.create_connection(server.server_address[:2], timeout=5) as slow:  # slow-loris: a byte at a time
            t0, sent = time.monotonic(), 0
            line = b"POST /get_reward HTTP/1.1\r\nX-Padding: " + b"a" * 100
            try:
                for byte in line:  # 100 bytes at 0.05 s would take 5 s; the deadline cuts it at 0.5 s
                    slow.sendall(bytes([byte]))
                    sent += 1
                    time.sleep(0.05)
            except OSError:  # reset by the server
                pass
            try:
                rest = slow.recv(100)
            except OSError:
                rest = b""
            assert sent < len(line) and rest in (b"",) and time.monotonic() - t0 < 3
        assert request(server, payload=GOOD)[0] == 200


def test_handler_threads_are_bounded_and_excess_connections_wait_not_refused():
    with serving("exact_answer", request_timeout_s=1.0, max_connections=2) as server:
        idle = [socket.create_connection(server.server_address[:2], timeout=5) for _ in range(5)]
        try:
            time.sleep(0.3)
            handlers = [t for t in threading.enumerate() if "process_request_thread" in t.name]
            assert len(handlers) <= 2
            t0 = time.monotonic()  # a real client waits in the backlog until the idle ones are cut off
            assert request(server, payload=GOOD)[0] == 200
            assert time.monotonic() - t0 < 8
        finally:
            for s in idle:
                s.close()
    with pytest.raises(ConfigError, match="max_connections=0"):
        make_server(["exact_answer"], port=0, max_connections=0)


# ---------------------------------------------------------------- D9: bursts

def test_a_burst_of_100_concurrent_requests_is_all_answered():
    with serving("exact_answer") as server:
        assert server.request_queue_size >= 128
        start, results = threading.Barrier(100), []

        def client():
            start.wait(10)
            try:
                results.append(request(server, payload=GOOD, timeout=30)[0])
            except OSError as e:  # the old backlog of 5 reset some of them
                results.append(type(e).__name__)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [200] * 100


# ---------------------------------------------------------------- D10: a hung judge

def test_a_hung_judge_answers_503_by_name_and_health_says_it_is_stuck():
    release = threading.Event()

    def hangs(prompts, completions, **_):
        release.wait(30)  # "hung" until the test lets it go (never longer than 30 s)
        return [1.0] * len(completions)

    try:
        with serving(hangs, "format", judge_timeout_s=1.0) as server:
            assert request(server, "GET", "/health") == (200, {"judges": ["hangs", "format_reward"],
                                                               "endpoint": "POST /get_reward", "stuck": {}})
            t0 = time.monotonic()
            status, answer = request(server, payload=GOOD)
            assert status == 503 and "judge 'hangs' did not return within --judge-timeout 1.0 s" in answer["error"]
            assert time.monotonic() - t0 < 3
            status, health = request(server, "GET", "/health")
            assert status == 503 and list(health["stuck"]) == ["hangs"] and "hangs" in health["error"]
            t0 = time.monotonic()  # later requests are not blocked: refused at once while the call is stuck
            status, answer = request(server, payload=GOOD)
            assert status == 503 and "judge 'hangs' is stuck" in answer["error"] and time.monotonic() - t0 < 0.8
            release.set()  # the stuck call returns: the judge serves again
            for _ in range(100):
                if request(server, "GET", "/health")[0] == 200:
                    break
                time.sleep(0.02)
            assert request(server, payload=GOOD)[0] == 200
    finally:
        release.set()
    with pytest.raises(ConfigError, match="judge_timeout_s"):
        make_server(["exact_answer"], port=0, judge_timeout_s=0)


# ---------------------------------------------------------------- D16, D20: ports, IPv6 and addresses

@pytest.mark.parametrize("argv,message", [
    (["serve-judge", "--judge", "exact_answer", "--port", "70000"], "from 0 to 65535"),
    (["serve-judge", "--judge", "exact_answer", "--port", "0", "--judge-timeout", "0"], "seconds > 0"),
    (["serve-judge", "--judge", "remote:http://127.0.0.1:99999/get_reward", "--port", "0"], "Port out of range"),
    (["serve-judge", "--judge", "remote:http://[::1/get_reward", "--port", "0"], "Invalid IPv6 URL"),
    (["serve-judge", "--judge", "exact_answer", "--host", "192.0.2.1", "--port", "0"],
     "cannot listen on --host 192.0.2.1"),  # TEST-NET: no interface of this machine, so bind fails
])
def test_bad_ports_urls_and_hosts_are_one_line_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_remote_urls_with_a_bad_port_or_ipv6_host_are_config_errors():
    for url in ("http://127.0.0.1:99999/get_reward", "http://[::1/get_reward", "http://[::1]:x/get_reward"):
        with pytest.raises(ConfigError, match="remote judge URL"):
            resolve_reward_func(f"remote:{url}")


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_host_ipv6_loopback_is_served():
    with serving("exact_answer", host="::1") as server:
        assert server.server_address[0] == "::1"
        url = f"http://[::1]:{server.server_address[1]}/get_reward"
        assert remote_reward(url)(prompts=["12+34="], completions=["46"], answer=["46"]) == [1.0]


# ---------------------------------------------------------------- D17, D18: client errors are 4xx, named

def test_deeply_nested_json_is_a_400():
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(BadRequest, match="nested too deeply"):
        parse_request(b'{"query": ' + deep + b"}")
    with serving("exact_answer") as server:
        status, answer = request(server, payload=deep)
        assert status == 400 and "nested too deeply" in answer["error"]
        assert request(server, payload=b'{"query": ["1"], "prompts": [""], "labels": [' + b"1" * 5000 + b"]}")[0] == 400


@pytest.mark.parametrize("change,field", [
    ({"labels": None}, "'labels'"),
    ({"labels": "46"}, "'labels' is a JSON str"),
    ({"labels": [None]}, "it is null or empty for queries [0]"),
    ({"columns": {"prompts": ["12+34="]}}, "'columns' holds ['prompts']"),
])
def test_client_data_errors_are_400_naming_the_field(change, field):
    with serving("exact_answer") as server:
        status, answer = request(server, payload={**GOOD, **change})
        assert status == 400 and field in answer["error"], answer
        missing = {k: v for k, v in GOOD.items() if k != "labels"}
        status, answer = request(server, payload=missing)
        assert status == 400 and "judge 'exact_answer' needs 'answer'" in answer["error"] and "'labels'" in answer["error"]


def test_the_kit_client_does_not_retry_a_400_and_shows_the_servers_message():
    with serving("exact_answer") as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/get_reward"
        f = remote_reward(url, timeout_s=5, retries=2, backoff_s=2.0)  # a retry would take >= 2 s
        t0 = time.monotonic()
        with pytest.raises(RewardError, match=r"HTTP 400: judge 'exact_answer' needs 'answer' .*retrying cannot help"):
            f(prompts=["12+34="], completions=["46"])  # no answer column: the client sends labels [""]
        assert time.monotonic() - t0 < 1.5


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), ZeroDivisionError("boom")])
def test_a_judge_raising_anything_gets_a_500_naming_it(exc):
    def quits(prompts, completions, **_):
        raise exc

    with serving(quits) as server:
        status, answer = request(server, payload=GOOD)
        assert status == 500 and f"'quits' raised {type(exc).__name__}" in answer["error"]  # ZeroDivisionError: a control
        assert request(server, "GET", "/health")[0] == 200  # and the server goes on
