"""`GET /metrics` (Prometheus' text format) and `GET /health` count what
the server did: the requests by finish reason, their prompt and new
tokens as the answers' `usage` gives them, one time to the first token
each (never longer than the client waited), the prefix cache's lookups
as `/health` reports them, and under speculation the rounds and tokens
the decoding itself counted."""

import time
import types

import httpx
import numpy as np
import pytest

import zoo
from tests.serve.conftest import Server, char_lm

pytest.importorskip("starlette")
pytest.importorskip("prometheus_client")

def idle():
    return dict(waiting=0, running=0, slots=0, slots_in_use=0, prefix_cache_queries=0, prefix_cache_hits=0,
                prefix_cache_tokens=0)


PROMPTS = ["ROMEO: But soft, what", "ROMEO: But soft, whe", "JULIET: "]


def scrape(server):
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(server.url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def test_metrics_count_the_requests_their_tokens_and_first_tokens(lm):
    server = Server(lm, max_batch=2, prefix_cache_tokens=64)
    try:
        answers, waited = [], []
        for i, prompt in enumerate(PROMPTS):
            start = time.monotonic()
            body = {"model": "lm", "prompt": prompt, "max_tokens": 4 + i, "temperature": 0}
            answers.append(httpx.post(server.url + "/v1/completions", json=body, timeout=120).json())
            waited.append(time.monotonic() - start)
        metrics, health = scrape(server), httpx.get(server.url + "/health").json()
    finally:
        server.stop()
    reasons = [answer["choices"][0]["finish_reason"] for answer in answers]
    for reason in set(reasons):
        assert metrics[("zoo_request_success_total", (("finished_reason", reason),))] == reasons.count(reason)
    assert metrics[("zoo_prompt_tokens_total", ())] == sum(a["usage"]["prompt_tokens"] for a in answers)
    assert metrics[("zoo_generation_tokens_total", ())] == sum(a["usage"]["completion_tokens"] for a in answers)
    assert metrics[("zoo_time_to_first_token_seconds_count", ())] == 3
    assert metrics[("zoo_e2e_request_latency_seconds_count", ())] == 3
    assert metrics[("zoo_time_per_output_token_seconds_count", ())] == sum(
        a["usage"]["completion_tokens"] > 1 for a in answers)
    assert 0 < metrics[("zoo_time_to_first_token_seconds_sum", ())] <= metrics[("zoo_e2e_request_latency_seconds_sum", ())]
    assert metrics[("zoo_e2e_request_latency_seconds_sum", ())] <= sum(waited)
    first = health["time_to_first_token"]
    assert first["requests"] == 3 and 0 < first["p50"] <= first["p90"] <= first["p99"] <= max(waited)
    # the second prompt begins with the first's 16-token block: one hit of the blocks looked up
    assert metrics[("zoo_prefix_cache_hits_total", ())] == 1
    looked_up = metrics[("zoo_prefix_cache_queries_total", ())]
    assert health["slots"]["prefix_cache_hit_rate"] == pytest.approx(1 / looked_up)
    assert metrics[("zoo_prefix_cache_tokens", ())] == health["slots"]["prefix_cache_held"]
    assert metrics[("zoo_slots", ())] == 2 and metrics[("zoo_slots_in_use", ())] == 0
    assert metrics[("zoo_num_requests_waiting", ())] == metrics[("zoo_num_requests_running", ())] == 0
    assert health["speculation"] is None


def test_a_cancelled_stream_is_counted_as_cancelled(lm):
    server = Server(lm, max_batch=2)
    try:
        body = {"model": "lm", "prompt": "R", "max_tokens": 30, "temperature": 0, "stream": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as response:
            next(response.iter_lines())  # the first piece, then the client leaves
        deadline = time.time() + 60
        while not server.service.scheduler.ended and time.time() < deadline:
            time.sleep(0.05)
        metrics = scrape(server)
    finally:
        server.stop()
    assert metrics[("zoo_request_success_total", (("finished_reason", "cancelled"),))] == 1
    assert metrics[("zoo_time_to_first_token_seconds_count", ())] == 1


def test_a_streams_first_token_is_measured_when_it_comes_not_at_the_end(lm):
    server = Server(lm, max_batch=2)
    try:
        body = {"model": "lm", "prompt": "R", "max_tokens": 30, "temperature": 0, "stream": True}
        start = time.monotonic()
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as response:
            lines = response.iter_lines()
            next(line for line in lines if line.startswith("data: {"))
            first_piece = time.monotonic() - start
            for _ in lines:
                pass
        whole = time.monotonic() - start
        metrics = scrape(server)
    finally:
        server.stop()
    assert 0 < metrics[("zoo_time_to_first_token_seconds_sum", ())] <= first_piece < whole
    assert metrics[("zoo_time_per_output_token_seconds_count", ())] == 1
    assert 0 < 29 * metrics[("zoo_time_per_output_token_seconds_sum", ())] <= whole - metrics[
        ("zoo_time_to_first_token_seconds_sum", ())]
    assert metrics[("zoo_e2e_request_latency_seconds_sum", ())] <= whole


def test_speculation_is_counted_as_the_decoding_counted_it():
    lm = char_lm()
    draft = zoo.build("gpt-nano", "causal_lm", vocabulary_size=lm.vocabulary_size, max_sequence_length=32,
                      num_layers=1, tokenizer=lm.tokenizer)
    speculation = dict(assistant_model=draft, num_assistant_tokens=3)
    server = Server(lm, speculation=speculation)
    try:
        body = {"model": "lm", "prompt": "ROMEO: ", "max_tokens": 12, "temperature": 0}
        assert httpx.post(server.url + "/v1/completions", json=body, timeout=300).status_code == 200
        metrics, health = scrape(server), httpx.get(server.url + "/health").json()["speculation"]
    finally:
        server.stop()
    ids = [int(t) for t in np.asarray(lm.tokenizer.tokenize("ROMEO: "))]
    alone = zoo.text.TextGeneration(lm, [ids], [12], speculation=speculation,
                                    bucket=True)
    for _ in alone.steps(every_token=True):
        pass
    counted = alone.decoding.speculation
    assert counted.rounds > 0
    assert (health["rounds"], health["proposed"], health["accepted"]) == (
        counted.rounds, counted.drafted, counted.accepted)
    assert health["accepted_per_round"] == pytest.approx(counted.accepted / counted.rounds)
    assert metrics[("zoo_spec_decode_num_rounds_total", ())] == counted.rounds
    assert metrics[("zoo_spec_decode_num_draft_tokens_total", ())] == counted.drafted
    assert metrics[("zoo_spec_decode_num_accepted_tokens_total", ())] == counted.accepted


def test_the_percentiles_are_numpys_of_the_latest_requests():
    from zoo.serve.metrics import RECENT, Measures

    measures = Measures(idle)
    seconds = np.random.default_rng(0).uniform(0, 3, RECENT + 50)
    now = time.monotonic()
    for s in seconds:
        job = types.SimpleNamespace(arrived=now - s, tokens_measured=0)
        measures.gained(job, 1)
        measures.gained(job, 1)  # no new token: measured once
    got = measures.percentiles()
    want = np.percentile(seconds[-RECENT:], [50, 90, 99])
    assert got["requests"] == RECENT
    np.testing.assert_allclose([got["p50"], got["p90"], got["p99"]], want, atol=0.05)  # the time between the calls
    assert measures.time_to_first_token._sum.get() == pytest.approx(seconds.sum(), abs=0.05 * len(seconds))


def test_two_servers_in_one_process_keep_their_own_figures():
    from zoo.serve.metrics import Measures

    first, second = Measures(idle), Measures(idle)
    first.ended(types.SimpleNamespace(arrived=time.monotonic(), tokens_measured=0), 2, 3, "length")
    assert b"zoo_generation_tokens_total 3.0" in first.text() and b"zoo_slots 0.0" in first.text()
    assert b"zoo_generation_tokens_total 0.0" in second.text()
