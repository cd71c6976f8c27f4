"""Judges over HTTP: the server's protocol, the remote:URL client's errors, and a run against a real server process."""
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.errors import ConfigError, RewardError
from grpo_kit.loop.train import setup, train
from grpo_kit.rewards.judges import exact_answer, format_reward, judge
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
        per_remote, _, _ = judge([f], ["12+34="] * 3, ["64", "46", "x"], cols)  # (3, 1)
        per_local, _, _ = judge([resolve_reward_func("exact_answer")], ["12+34="] * 3, ["64", "46", "x"], cols)
        assert per_remote.flatten().tolist() == per_local.flatten().tolist() == [1.0, 0.0, 0.0]
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
