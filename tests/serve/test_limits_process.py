"""`zoo serve` and `zoo explore` as processes of their own, as a user starts
them, against requests made to take a server down: 300 MB bodies (with
`Content-Length`, and chunked without it), a prompt of ten million
characters, a flood past the queue. Each is refused within seconds, the
server's resident memory grows by less than 200 MB, and the next ordinary
request is answered correctly."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import zoo
from tests.serve.process import Process, saved_char_lm
from tests.serve.raw_http import post

pytestmark = pytest.mark.integration  # servers started as processes of their own

MB = 10**6
PROMPT = "ROMEO: But soft"


def huge(size, piece=MB):
    """`size` bytes of a JSON body whose prompt is that long, piece by piece (never held whole)."""
    head = b'{"model": "lm", "max_tokens": 2, "prompt": "'
    yield head
    for _ in range((size - len(head) - 2) // piece):
        yield b"a" * piece
    yield b'"}'


def refused_fast(url, path, chunked):
    started = time.monotonic()
    answer = post(url, path, huge(300 * MB), content_length=None if chunked else 300 * MB, timeout=60)
    assert answer is not None and answer.status == 413, answer and answer.body
    assert time.monotonic() - started < 20
    assert answer.sent < 300 * MB
    return answer


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return saved_char_lm(tmp_path_factory.mktemp("served") / "lm.keras")


def expected(model_file, max_tokens):
    lm = zoo.load(model_file, compile=False)
    return zoo.generate(lm, PROMPT, max_new_tokens=max_tokens, sampler="greedy")[len(PROMPT):]


def test_zoo_serve_survives_huge_bodies_a_huge_prompt_and_a_flood(model_file):
    answer = expected(model_file, 6)
    server = Process("serve", str(model_file), "--max-request-bytes", str(16 * 2**20), "--max-batch", "1",
                     "--max-queue", "2")

    def ordinary():
        response = httpx.post(server.url + "/v1/completions", timeout=60,
                              json={"model": str(model_file), "prompt": PROMPT, "max_tokens": 6, "temperature": 0})
        assert response.status_code == 200 and response.json()["choices"][0]["text"] == answer

    try:
        assert any("limits: bodies of at most 16777216 bytes" in line for line in server.lines)
        ordinary()
        before = server.resident
        for chunked in (False, True):
            error = refused_fast(server.url, "/v1/completions", chunked).json()["error"]
            assert error["code"] == "request_too_large"
            ordinary()
        assert server.resident - before < 200 * MB

        prompt = json.dumps({"model": str(model_file), "prompt": "a" * 10_000_000}).encode()
        started = time.monotonic()
        response = httpx.post(server.url + "/v1/completions", content=prompt, timeout=60)
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
        assert time.monotonic() - started < 20
        ordinary()

        def ask(_):
            return httpx.post(server.url + "/v1/completions", timeout=120, json={
                "model": str(model_file), "prompt": PROMPT, "max_tokens": 16, "temperature": 0})

        with ThreadPoolExecutor(16) as pool:
            statuses = [r.status_code for r in pool.map(ask, range(16))]
        assert 429 in statuses and set(statuses) <= {200, 429}
        ordinary()
        assert server.process.poll() is None
    finally:
        server.stop()


def test_zoo_explore_survives_huge_bodies(model_file):
    server = Process("explore", str(model_file))
    try:
        before = server.resident
        for chunked in (False, True):
            assert "at most 1048576 bytes" in refused_fast(server.url, "/api/generate", chunked).json()["error"]["message"]
            response = httpx.post(server.url + "/api/inspect", json={"ids": [1, 2, 3], "position": 2}, timeout=60)
            assert response.status_code == 200 and len(response.json()["top"]) == 10
        assert server.resident - before < 200 * MB
    finally:
        server.stop()
