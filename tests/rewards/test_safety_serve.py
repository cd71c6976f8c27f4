"""serve-judge under hostile or careless clients and hung judges (issue 23: D4, D9, D10, D16, D17, D18, D20).

Every server here listens on a loopback address with port 0 and is shut down by ``serving``;
every client socket has a time limit, so nothing waits for ever.
"""
import http.client
import json
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from grpo_kit.cli import main
from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.rewards.resolve import resolve_reward_func
from grpo_kit.rewards.serve import BadRequest, make_server, parse_request, remote_reward

pytestmark = pytest.mark.usefixtures("signals_delivered")  # stop requests must arrive (conftest.py)

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
