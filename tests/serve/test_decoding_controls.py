"""`zoo serve` passes the decoding controls through: OpenAI's
`presence_penalty`, `frequency_penalty` and `logit_bias`, vLLM's
`repetition_penalty` and `min_p`; an answer is `zoo.generate`'s with the
same controls, alone or batched with requests of other controls; bad
values are refused in one line."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import zoo
from tests.serve.conftest import Server

pytest.importorskip("openai")
pytest.importorskip("starlette")

PROMPT = "ROMEO: "


def ask(server, **fields):
    body = {"model": "lm", "prompt": PROMPT, "max_tokens": 16, **fields}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def expected(lm, **options):
    bias = options.pop("logit_bias", None)
    if bias is not None:
        options["logit_bias"] = {int(token): value for token, value in bias.items()}
    return zoo.generate(lm, PROMPT, max_new_tokens=16, **options)[len(PROMPT):]


CONTROLS = [
    dict(repetition_penalty=1.8),
    dict(presence_penalty=1.5, frequency_penalty=0.8),
    dict(min_p=0.3),
    dict(logit_bias={"3": 8.0, "5": -100}),
]


@pytest.mark.parametrize("controls", CONTROLS)
def test_a_greedy_answer_with_controls_is_zoo_generates(served, lm, controls):
    assert ask(served, temperature=0, **controls) == expected(lm, **controls)


def test_a_seeded_sampled_answer_with_controls_is_zoo_generates(served, lm):
    controls = dict(repetition_penalty=1.4, min_p=0.1, presence_penalty=0.5)
    text = ask(served, temperature=0.9, top_p=0.8, seed=3, **controls)
    assert text == expected(lm, sampler="top_p", top_p=0.8, temperature=0.9, seed=3, **controls)


def test_requests_with_different_controls_batch_together_each_as_alone(lm):
    server = Server(lm, gather_seconds=0.5)
    try:
        with ThreadPoolExecutor(max_workers=len(CONTROLS) + 1) as pool:
            texts = list(pool.map(lambda c: ask(server, temperature=0, **c), CONTROLS + [{}]))
        assert max(server.service.scheduler.batch_sizes) > 1  # decoded together
    finally:
        server.stop()
    assert texts == [expected(lm, **c) for c in CONTROLS] + [expected(lm)]


@pytest.mark.parametrize("body, param", [
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": "high"}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"min_p": 1.5}, "min_p"),
    ({"logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias"),
    ({"logit_bias": {"100000": 1}}, "logit_bias"),
    ({"logit_bias": {"3": 101}}, "logit_bias"),
    ({"logit_bias": {"-1": 1}}, "logit_bias"),
    ({"logit_bias": [3]}, "logit_bias"),
])
def test_bad_controls_are_refused_in_one_line(served, body, param):
    response = httpx.post(served.url + "/v1/completions", json={"model": "lm", "prompt": PROMPT, **body}, timeout=60)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == param and "\n" not in error["message"]
