"""`zoo serve` decodes a decoder-only model in slots: a request joins the
running batch while another streams, and gets the answer it gets alone;
a prompt that begins as an earlier one did reads its first blocks from
the prefix cache (`usage.prompt_tokens_details.cached_tokens`) and gets
the same answer; `/health` reports the slots."""


import httpx
import pytest

import zoo
from tests.serve.conftest import Server, join_mid_stream

pytest.importorskip("starlette")

LONG = "ROMEO: But soft, what"  # 21 characters: one block of 16 tokens, and then some


def test_a_request_joins_a_running_stream_and_gets_its_answer_alone(lm):
    server = Server(lm, max_batch=4, prefill_chunk=4)
    try:
        long, answer = join_mid_stream(
            server, {"model": "lm", "prompt": "R", "max_tokens": 30, "temperature": 0},
            {"model": "lm", "prompt": "JULIET: ", "max_tokens": 6, "temperature": 0.9, "seed": 5})
        assert max(server.service.scheduler.batch_sizes) == 2  # decoded beside the stream
        assert answer["choices"][0]["text"] == zoo.generate(lm, "JULIET: ", max_new_tokens=6, sampler="temperature",
                                                            temperature=0.9, seed=5)[len("JULIET: "):]
        assert long == zoo.generate(lm, "R", max_new_tokens=30)[1:]
        health = httpx.get(server.url + "/health").json()
        assert health["slots"]["slots"] == 4 and health["slots"]["in_use"] == 0
    finally:
        server.stop()


def test_a_shared_prefix_is_read_from_the_prefix_cache(lm):
    server = Server(lm, prefix_cache_tokens=64)
    try:
        body = {"model": "lm", "prompt": LONG[:-1], "max_tokens": 3, "temperature": 0}
        first = httpx.post(server.url + "/v1/completions", json=body, timeout=120).json()
        again = httpx.post(server.url + "/v1/completions", json={**body, "prompt": LONG}, timeout=120).json()
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 16
        assert again["choices"][0]["text"] == zoo.generate(lm, LONG, max_new_tokens=3)[len(LONG):]
        health = httpx.get(server.url + "/health").json()["slots"]
        assert health["prefix_cache_held"] == 16 and health["prefix_cache_hit_rate"] > 0
    finally:
        server.stop()


def test_zoo_serve_passes_the_slots_flags_and_refuses_bad_ones(monkeypatch, capsys):
    import zoo.serve
    from recipes import cli

    given = {}
    monkeypatch.setattr(zoo.serve, "serve", lambda target, **kwargs: given.update(kwargs) or 0)
    cli.main(["serve", "runs/x", "--max-batch", "4", "--prefill-chunk", "64", "--prefix-cache-tokens", "4096"])
    assert (given["max_batch"], given["prefill_chunk"], given["prefix_cache_tokens"]) == (4, 64, 4096)
    with pytest.raises(SystemExit) as exit:
        cli.main(["serve", "runs/x", "--prefill-chunk", "0"])
    assert exit.value.code == 2 and "--prefill-chunk: 0" in capsys.readouterr().err
