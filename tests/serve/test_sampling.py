"""`zoo serve` decodes requests with different seeds, samplers,
temperatures and `top_p` in one batch, each row by its own, and each
answer is `zoo.generate`'s for that request alone; `n` and `best_of`
samples of a request with seed s draw with seeds s, s + 1, ... (prompts in
order, each prompt's samples together)."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import zoo
from tests.serve.conftest import Server

pytest.importorskip("openai")
pytest.importorskip("starlette")

PROMPT = "ROMEO: "


def complete(server, **fields):
    body = {"model": "lm", "prompt": PROMPT, "max_tokens": 12, **fields}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["choices"]


def alone(lm, prompt=PROMPT, temperature=1.0, top_p=1.0, seed=None):
    """What zoo.generate gives for one request: the new text only."""
    sampler = "greedy" if temperature == 0 else "top_p" if top_p < 1 else "temperature"
    text = zoo.generate(lm, prompt, max_new_tokens=12, sampler=sampler, temperature=temperature or 1.0, top_p=top_p,
                        seed=seed)
    return text[len(prompt):]


REQUESTS = [dict(temperature=0.8, seed=4), dict(temperature=1.3, top_p=0.7, seed=9), dict(temperature=0),
            dict(temperature=1.0, seed=4, prompt="JULIET: "), dict(temperature=1.9, top_p=0.95, seed=123456789012)]


def test_requests_with_different_seeds_and_samplers_share_a_batch_each_as_alone(lm):
    server = Server(lm, gather_seconds=0.5)
    try:
        with ThreadPoolExecutor(max_workers=len(REQUESTS)) as pool:
            texts = list(pool.map(lambda fields: complete(server, **fields)[0]["text"], REQUESTS))
        assert max(server.service.scheduler.batch_sizes) > 1  # decoded together
    finally:
        server.stop()
    assert texts == [alone(lm, **fields) for fields in REQUESTS]


def test_n_samples_with_a_seed_are_seeds_s_upwards_one_at_a_time(served, lm):
    choices = complete(served, prompt=[PROMPT, "JULIET: "], n=2, temperature=1.5, top_p=0.9, seed=30)
    expected = [alone(lm, prompt, temperature=1.5, top_p=0.9, seed=30 + k)
                for k, prompt in enumerate([PROMPT, PROMPT, "JULIET: ", "JULIET: "])]
    assert [c["text"] for c in sorted(choices, key=lambda c: c["index"])] == expected
    assert expected[0] != expected[1]


def test_best_of_with_a_seed_returns_one_of_its_seeded_samples(served, lm):
    choices = complete(served, best_of=3, temperature=1.5, seed=7)
    assert len(choices) == 1 and choices[0]["text"] in {alone(lm, temperature=1.5, seed=7 + k) for k in range(3)}
