"""`zoo serve` under a minute of mixed load, started as a process of its
own: 16 clients at once for 60 s, each sending in turn prompts to score
(`echo`, `logprobs`, `max_tokens: 0`), greedy completions, sampled ones
with the decoding controls, streams it leaves midway (closing the
connection), and malformed requests. Every valid request gets its right
answer (the scores `zoo.score`'s, the greedy answers `zoo.generate`'s, the
sampled ones `n` choices of as many tokens of the vocabulary as asked),
every malformed one a 4xx in OpenAI's error shape, none a 5xx; afterwards
the server is idle within seconds, and its resident memory is within 10%
of what it was after a warm-up under the same load."""

import json
import random
import threading
import time
import types

import httpx
import numpy as np
import pytest

import zoo
from tests.serve.conftest import CONTEXT, TEXT
from tests.serve.process import Process, saved_char_lm

pytestmark = pytest.mark.integration  # a server started as a process of its own, for a minute

CLIENTS, SECONDS, WARM_UP_SECONDS = 16, 60, 8
IDLE_SECONDS = 5  # for the queue to empty once the clients stop
GREEDY_PROMPTS = ["ROMEO: ", "JULIET: Ay", "But soft, what ", "R"]
GREEDY_TOKENS = (4, 9, 16)
# Prompts to score: a few characters, most of the context, the whole context.
SCORED = [TEXT[:5], TEXT[3:20], (TEXT * 2)[10:10 + CONTEXT - 1], (TEXT * 2)[:CONTEXT]]
CONTROLS = {"presence_penalty": 0.5, "frequency_penalty": 0.3, "repetition_penalty": 1.3, "min_p": 0.05}
MALFORMED = [
    ("/v1/completions", b'{"prompt": "ROMEO'),  # cut JSON
    ("/v1/completions", b"[1, 2]"),  # not an object
    ("/v1/completions", {"prompt": 5}),
    ("/v1/completions", {"prompt": "ROMEO", "max_tokens": "ten"}),
    ("/v1/completions", {"prompt": "ROMEO", "temperature": "hot"}),
    ("/v1/completions", {"prompt": "ROMEO", "stream": "yes"}),
    ("/v1/completions", {"prompt": "ROMEO", "logprobs": 9}),
    ("/v1/completions", {"prompt": "ROMEO", "n": 2.5}),
    ("/v1/completions", {"prompt": "ROMEO", "presence_penalty": 5}),
    ("/v1/completions", {"prompt": "ROMEO", "min_p": "low"}),
    ("/v1/completions", {"prompt": "ROMEO", "logit_bias": {"x": 1}}),
    ("/v1/completions", {"prompt": "R" * (CONTEXT + 1), "echo": True, "max_tokens": 0}),
    ("/v1/chat/completions", {"messages": "hi"}),
    ("/v1/embeddings", {"input": "hi"}),
]


class Expected:
    """The answers of the same model loaded here: `zoo.score`'s
    log-probabilities of each prompt to score, `zoo.generate`'s greedy
    answers, the vocabulary's characters."""

    def __init__(self, model_file):
        lm = zoo.load(model_file, compile=False)
        ids = [[int(t) for t in lm.tokenizer(text)] for text in SCORED]
        assert len(ids[-1]) == CONTEXT
        scores = zoo.score(lm, [row[:1] for row in ids], [row[1:] for row in ids])
        self.scores = {text: score.token_logprobs for text, score in zip(SCORED, scores)}
        self.greedy = {}
        for tokens in GREEDY_TOKENS:
            texts = zoo.generate(lm, GREEDY_PROMPTS, max_new_tokens=tokens, sampler="greedy")
            self.greedy.update({(prompt, tokens): text[len(prompt):] for prompt, text in zip(GREEDY_PROMPTS, texts)})
        self.characters = set(TEXT)


def problem_of(response, kind):
    """None for an answer of status 200; else what was wrong."""
    if response.status_code != 200:
        return f"{kind}: status {response.status_code}: {response.text[:200]}"
    return None


def score(http, rng, expected):
    prompt = rng.choice(SCORED)
    response = http.post("/v1/completions", json={"prompt": prompt, "echo": True, "logprobs": 2, "max_tokens": 0})
    if problem := problem_of(response, "score"):
        return problem
    choice = response.json()["choices"][0]
    logprobs = choice["logprobs"]["token_logprobs"]
    if choice["text"] != prompt or logprobs[0] is not None or not np.allclose(
        logprobs[1:], expected.scores[prompt], rtol=1e-5, atol=1e-6
    ):
        return f"score: {prompt!r} got {choice['text']!r}, {logprobs}"
    return None


def greedy(http, rng, expected):
    prompt, tokens = rng.choice(GREEDY_PROMPTS), rng.choice(GREEDY_TOKENS)
    response = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": tokens, "temperature": 0})
    if problem := problem_of(response, "greedy"):
        return problem
    text = response.json()["choices"][0]["text"]
    if text != expected.greedy[prompt, tokens]:
        return f"greedy: {prompt!r}, {tokens} tokens: {text!r}, expected {expected.greedy[prompt, tokens]!r}"
    return None


def sampled(http, rng, expected):
    prompt, tokens, n = rng.choice(GREEDY_PROMPTS), rng.choice(GREEDY_TOKENS), rng.choice((1, 2, 3))
    controls = {name: value for name, value in CONTROLS.items() if rng.random() < 0.6}
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 1.0, "n": n, **controls}
    response = http.post("/v1/completions", json=body)
    if problem := problem_of(response, "sampled"):
        return problem
    answer = response.json()
    texts = [choice["text"] for choice in answer["choices"]]
    # A character tokenizer without an end token: every answer is `tokens` characters of the vocabulary.
    if (len(texts) != n or any(len(text) != tokens or not set(text) <= expected.characters for text in texts)
            or any(choice["finish_reason"] != "length" for choice in answer["choices"])
            or answer["usage"]["completion_tokens"] != n * tokens):
        return f"sampled: {body}: {answer}"
    return None


def left_stream(http, rng, expected):
    """A stream read for two chunks, then its connection closed."""
    prompt = rng.choice(GREEDY_PROMPTS)
    body = {"prompt": prompt, "max_tokens": CONTEXT - len(prompt), "stream": True, "temperature": rng.choice((0, 1.0))}
    with httpx.Client(base_url=str(http.base_url), timeout=120) as own:
        with own.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                return f"stream: status {response.status_code}"
            chunks = 0
            for line in response.iter_lines():
                chunks += line.startswith("data: {")
                if chunks == 2:
                    break
    return None


def malformed(http, rng, expected):
    path, body = rng.choice(MALFORMED)
    if isinstance(body, bytes):
        response = http.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = http.post(path, json=body)
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"malformed {path} {body!r}: status {response.status_code}, not OpenAI's error shape: {response.text[:200]}"
    if not 400 <= response.status_code < 500 or set(error) != {"message", "type", "param", "code"} or not (
        isinstance(error["message"], str) and error["message"] and "\n" not in error["message"]
    ):
        return f"malformed {path} {body!r}: status {response.status_code}: {error}"
    return None


KINDS = {"score": score, "greedy": greedy, "sampled": sampled, "left_stream": left_stream, "malformed": malformed}


def load(url, seconds, expected, seed):
    """CLIENTS threads sending requests of every kind until `seconds` pass;
    the `(kind, problem or None)` of each request."""
    deadline, log = time.monotonic() + seconds, []

    def client(number):
        rng = random.Random(seed * 1000 + number)
        with httpx.Client(base_url=url, timeout=120) as http:
            while time.monotonic() < deadline:
                kind = rng.choice(list(KINDS))
                try:
                    log.append((kind, KINDS[kind](http, rng, expected)))
                except httpx.HTTPError as error:
                    log.append((kind, f"{kind}: {type(error).__name__}: {error}"))

    threads = [threading.Thread(target=client, args=(number,), daemon=True) for number in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 150)
    assert not any(thread.is_alive() for thread in threads), "a client is still waiting for an answer"
    return log


def idle(url):
    """Whether GET /health shows no request waiting or decoding within IDLE_SECONDS."""
    deadline = time.monotonic() + IDLE_SECONDS
    while True:
        health = httpx.get(url + "/health", timeout=10).json()
        if health["waiting"] == 0 and health["running"] == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The server started, warmed up under the load for WARM_UP_SECONDS,
    then loaded for SECONDS: what came back, and its memory between."""
    model_file = saved_char_lm(tmp_path_factory.mktemp("load") / "lm.keras")
    expected = Expected(model_file)
    server = Process("serve", str(model_file))
    try:
        warm_up = load(server.url, WARM_UP_SECONDS, expected, seed=1)
        idle_before = idle(server.url)
        before = server.resident
        log = load(server.url, SECONDS, expected, seed=2)
        idle_after = idle(server.url)
        after = server.resident
        alive = server.process.poll() is None
    finally:
        server.stop()
    return types.SimpleNamespace(warm_up=warm_up, log=log, idle=(idle_before, idle_after), resident=(before, after),
                                 alive=alive)


def test_a_minute_of_mixed_load_gets_every_answer_right_and_leaves_the_server_idle(run):
    assert [problem for _, problem in run.warm_up if problem] == []
    problems = [problem for _, problem in run.log if problem]
    assert problems == [], f"{len(problems)} of {len(run.log)} requests went wrong, e.g. {problems[:3]}"
    counts = {kind: sum(k == kind for k, _ in run.log) for kind in KINDS}
    assert min(counts.values()) >= 5, counts  # every kind, several times
    assert run.idle == (True, True), "requests still waiting or decoding after the clients left"
    assert run.alive
    print(json.dumps({"requests": counts, "resident_mb": [round(r / 1e6) for r in run.resident]}))


def test_the_servers_memory_after_the_load_is_within_10_percent_of_after_the_warm_up(run):
    before, after = run.resident
    assert after <= 1.10 * before, f"resident memory {before / 1e6:.0f} MB after the warm-up, {after / 1e6:.0f} MB after"
