"""`zoo serve` bounds what one request may ask before the model sees it:
the body's size and time, the prompt's tokens, a conversation's messages,
the stop strings, and the queue. After each refusal the next ordinary
request is answered as `zoo.generate` answers it."""

import concurrent.futures
import json
import time

import httpx
import pytest

from tests.serve.conftest import Server
from tests.serve.raw_http import post

PROMPT = "ROMEO: But soft"
KIB = 1024


def expected(lm, prompt, max_tokens):
    import zoo

    return zoo.generate(lm, prompt, max_new_tokens=max_tokens, sampler="greedy")[len(prompt):]


def ordinary(server, lm, max_tokens=5):
    """The next ordinary request is answered correctly."""
    answer = server.client().completions.create(model="lm", prompt=PROMPT, max_tokens=max_tokens, temperature=0)
    assert answer.choices[0].text == expected(lm, PROMPT, max_tokens)


@pytest.fixture(scope="module")
def bounded(lm):
    from zoo.serve.web import Limits

    server = Server(lm, limits=Limits(max_request_bytes=64 * KIB, read_timeout=1.0))
    yield server
    server.stop()


def body(prompt):
    return json.dumps({"model": "lm", "prompt": prompt, "max_tokens": 2}).encode()


def test_a_declared_body_over_the_limit_gets_413_before_it_is_read(bounded, lm):
    data = body("a" * (4 * 2**20))
    answer = post(bounded.url, "/v1/completions", (data[i : i + 65536] for i in range(0, len(data), 65536)),
                  content_length=len(data), timeout=20)
    assert answer.status == 413, answer and answer.body
    error = answer.json()["error"]
    assert error["code"] == "request_too_large" and f"{len(data)} bytes" in error["message"]
    assert "at most 65536 bytes" in error["message"] and "\n" not in error["message"]
    assert answer.sent < len(data)
    ordinary(bounded, lm)


def test_a_chunked_body_over_the_limit_gets_413_once_it_passes_it(bounded, lm):
    pieces = (b"x" * 8192 for _ in range(4096))  # 32 MiB, never all sent
    answer = post(bounded.url, "/v1/completions", pieces, timeout=20)
    assert answer.status == 413, answer and answer.body
    assert "more than 65536 bytes" in answer.json()["error"]["message"]
    assert answer.sent < 8 * 2**20
    ordinary(bounded, lm)


def test_a_body_that_arrives_too_slowly_gets_408(bounded, lm):
    data = body("a" * 4000)
    started = time.monotonic()
    answer = post(bounded.url, "/v1/completions", (data[i : i + 100] for i in range(0, len(data), 100)),
                  content_length=len(data), pause=0.1, timeout=20)
    assert answer.status == 408, answer and answer.body
    assert "within 1 s" in answer.json()["error"]["message"]
    assert time.monotonic() - started < 5
    ordinary(bounded, lm)


def test_a_body_within_the_limit_is_answered_as_before(bounded, lm):
    data = json.dumps({"model": "lm", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}).encode()
    answer = post(bounded.url, "/v1/completions", [data[:10], data[10:]])
    assert answer.status == 200
    assert answer.json()["choices"][0]["text"] == expected(lm, PROMPT, 4)


class Recording:
    """A tokenizer that records the longest text it was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, text):
        self.longest = max(self.longest, len(text))
        return self.tokenizer(text)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_a_prompt_of_ten_million_characters_is_refused_without_being_tokenized_whole(lm):
    from zoo.serve.web import Limits

    server = Server(lm, limits=Limits(max_request_bytes=32 * 2**20))
    try:
        server.service.tokenizer = recording = Recording(server.service.tokenizer)
        started = time.monotonic()
        response = httpx.post(server.url + "/v1/completions", content=body("a" * 10_000_000), timeout=60)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "prompt" and error["code"] == "context_length_exceeded"
        assert "at most 31" in error["message"] and "of 10000000 characters" in error["message"]
        assert recording.longest <= 4096
        assert time.monotonic() - started < 30
        ordinary(server, lm)
    finally:
        server.stop()


def test_a_prompt_cut_into_pieces_counts_as_the_whole_and_one_that_fits_is_answered(served, lm, monkeypatch):
    from zoo.serve import service as app

    monkeypatch.setattr(app, "PIECE_CHARACTERS", 8)  # the 15 characters of PROMPT in two pieces
    assert served.service.prompt_ids(PROMPT, "prompt") == [int(t) for t in lm.tokenizer(PROMPT)]
    with pytest.raises(app.RequestError, match=r"^prompt: more than 31 tokens in its first \d+ of 80 characters"):
        served.service.prompt_ids("ROMEO " * 13 + "ab", "prompt")
    assert app._cut("ab cd ef gh", 8) == 5  # before the space in the piece's second half
    assert app._cut("abcdefghijkl", 8) == 8  # no space: at the end


@pytest.mark.parametrize("messages, expected", [
    ([{"role": "user", "content": "hi"}] * 1025, 'messages: expected a non-empty list of at most 1024 {"role": str, '
     '"content": str} objects; got 1025 items'),
    ([{"role": "user", "content": "a" * 3000}], "messages: 3004 characters in all; a context of 32 tokens holds at "
                                                "most 2048"),
])
def test_a_conversation_too_large_is_refused_before_its_template_runs(served, messages, expected):
    response = httpx.post(served.url + "/v1/chat/completions", json={"model": "lm", "messages": messages}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["message"] == expected


@pytest.mark.parametrize("stop, what", [(["a"] * 5, "5 strings"), ("a" * 257, "257 characters")])
def test_too_many_or_too_long_stop_strings_are_refused(served, stop, what):
    response = httpx.post(served.url + "/v1/completions", json={"model": "lm", "prompt": PROMPT, "stop": stop},
                          timeout=30)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "stop", what
    assert "at most 4 non-empty strings of at most 256 characters" in error["message"]


@pytest.mark.parametrize("field, value", [("n", 100_000), ("logit_bias", {str(i): 1 for i in range(100_000)})])
def test_n_and_logit_bias_are_refused_in_one_line(served, field, value):
    response = httpx.post(served.url + "/v1/completions", json={"model": "lm", "prompt": PROMPT, field: value},
                          timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == field


def test_a_flood_past_the_queue_gets_429_with_retry_after_and_the_rest_are_answered(lm):
    server = Server(lm, max_batch=1, max_queue=2, max_batches=1)
    try:
        def ask(_):
            return httpx.post(server.url + "/v1/completions", timeout=120,
                              json={"model": "lm", "prompt": PROMPT, "max_tokens": 16, "temperature": 0})

        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            responses = list(pool.map(ask, range(12)))
        busy = [r for r in responses if r.status_code == 429]
        answered = [r for r in responses if r.status_code == 200]
        assert len(busy) + len(answered) == 12 and busy and len(answered) >= 3
        assert busy[0].headers["retry-after"] == "1"
        assert busy[0].json()["error"]["code"] == "queue_full" and "--max-queue" in busy[0].json()["error"]["message"]
        assert {r.json()["choices"][0]["text"] for r in answered} == {expected(lm, PROMPT, 16)}
        health = httpx.get(server.url + "/health").json()
        assert health["waiting"] == 0 and health["limits"]["max_queue"] == 2
        ordinary(server, lm)
    finally:
        server.stop()


def test_health_states_the_limits_without_a_key(lm):
    server = Server(lm, api_key="secret")
    try:
        health = httpx.get(server.url + "/health").json()
        assert health["status"] == "ok" and health["waiting"] == 0 and health["running"] == 0
        assert health["limits"]["max_request_bytes"] == 2**20 and health["limits"]["max_prompt_tokens"] == 31
        models = server.client("secret").models.list()
        assert models.data[0].max_model_len == 32
    finally:
        server.stop()


def test_a_waiting_job_whose_client_leaves_frees_its_place(lm):
    from zoo.serve.scheduler import Job, QueueFull, Scheduler

    ids = lm.tokenizer(PROMPT).tolist()
    scheduler = Scheduler(lm, max_batch=1, max_queue=1, max_batches=1, gather_seconds=0)
    first = scheduler.submit(Job(ids, 16, (), "greedy", 1.0, 1.0, None))
    deadline = time.time() + 30
    while scheduler.running == 0 and time.time() < deadline:
        time.sleep(0.001)
    second = scheduler.submit(Job(ids, 16, (), "greedy", 1.0, 1.0, None))
    with pytest.raises(QueueFull):
        scheduler.submit(Job(ids, 16, (), "greedy", 1.0, 1.0, None))
    second.cancelled = True
    while scheduler.waiting and time.time() < deadline:
        time.sleep(0.001)
    third = scheduler.submit(Job(ids, 16, (), "greedy", 1.0, 1.0, None))
    for job in (first, third):
        assert list(job.pieces())[-1][0] == "end"
    assert (second.id, 0, "cancelled") in scheduler.ended


def test_a_non_streamed_client_that_leaves_stops_its_decoding(lm):
    import socket

    server = Server(lm)
    try:
        data = json.dumps({"model": "lm", "prompt": "R", "max_tokens": 31, "temperature": 0}).encode()
        host, port = server.url.removeprefix("http://").split(":")
        connection = socket.create_connection((host, int(port)))
        connection.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        scheduler, deadline = server.service.scheduler, time.time() + 30
        while scheduler.running == 0 and time.time() < deadline:
            time.sleep(0.001)
        connection.close()
        while not scheduler.ended and time.time() < deadline:
            time.sleep(0.01)
        (job_id, computed, reason), = scheduler.ended
        assert reason == "cancelled" and computed < 31
    finally:
        server.stop()


def test_zoo_serve_refuses_bad_limits_in_one_line_before_loading(tmp_path, capsys):
    from recipes import cli

    with pytest.raises(SystemExit) as exit:
        cli.main(["serve", str(tmp_path / "missing"), "--max-request-bytes", "10"])
    assert exit.value.code == 2
    assert "--max-request-bytes: 10: expected a whole number >= 1024" in capsys.readouterr().err


def test_the_explorer_bounds_its_bodies_too(clients_of_explorer):
    client = clients_of_explorer
    too_large = client.post("/api/generate", content=b" " * (2 * 2**20))
    assert too_large.status_code == 413 and "at most 1048576 bytes" in too_large.json()["error"]["message"]
    assert client.post("/api/generate", json={"prompt": "ROMEO"}).status_code == 200


@pytest.fixture(scope="module")
def clients_of_explorer(lm):
    from starlette.testclient import TestClient

    from zoo.explore.app import create_app
    from zoo.explore.explorer import Explorer

    return TestClient(create_app(Explorer(lm, "lm")))
