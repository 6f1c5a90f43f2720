"""What `zoo serve` measures of its requests: `GET /metrics` in
Prometheus' text format (the `prometheus_client` package), with the
series vLLM and TGI expose, and the time-to-first-token percentiles and
speculation figures of `GET /health`.

    zoo_time_to_first_token_seconds      histogram: a request's arrival at the
                                         model's queue to its first new token
    zoo_time_per_output_token_seconds    histogram: a request's first new token to its
                                         last, over the new tokens after the first
    zoo_e2e_request_latency_seconds      histogram: arrival to its last token
    zoo_request_success_total            counter, by finished_reason (stop,
                                         length, cancelled, error, scored)
    zoo_prompt_tokens_total              counter: prompt tokens of ended requests
    zoo_generation_tokens_total          counter: new tokens of ended requests
    zoo_num_requests_waiting             gauge: requests queued, not decoding yet
    zoo_num_requests_running             gauge: requests decoding
    zoo_slots, zoo_slots_in_use          gauges (continuous batching)
    zoo_prefix_cache_queries_total       counter: prompt blocks looked up
    zoo_prefix_cache_hits_total          counter: blocks found
    zoo_prefix_cache_tokens              gauge: prompt positions held now
    zoo_spec_decode_num_rounds_total     counter: verification steps
    zoo_spec_decode_num_draft_tokens_total     counter: tokens proposed
    zoo_spec_decode_num_accepted_tokens_total  counter: tokens accepted

Times count from a request's arrival at the model's queue (after its body
was read, checked and tokenized). Each server has its own registry, so
that several servers in one process do not share their figures.
"""

import collections
import threading
import time

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# vLLM's buckets for the times to the first token, per output token and of a request (seconds).
TIME_TO_FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                               7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TIME_PER_OUTPUT_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                                 7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
# The latest requests whose times to the first token `GET /health`'s percentiles read.
RECENT = 1000


class Measures:
    """A scheduler's record of its requests: `arrived(job)` when it is
    queued, `gained(job, new_tokens)` whenever its count of new tokens is
    known, `ended(job, prompt_tokens, new_tokens, reason)` once, and
    `speculated(rounds, proposed, accepted)` as verification steps run.
    `state()` is read at each scrape: a dict of the gauges and the prefix
    cache's counters (`waiting`, `running`, `slots`, `slots_in_use`,
    `prefix_cache_queries`, `prefix_cache_hits`, `prefix_cache_tokens`)."""

    def __init__(self, state):
        self.registry = CollectorRegistry()
        self.time_to_first_token = Histogram(
            "zoo_time_to_first_token_seconds", "A request's arrival at the model's queue to its first new token.",
            buckets=TIME_TO_FIRST_TOKEN_BUCKETS, registry=self.registry)
        self.time_per_output_token = Histogram(
            "zoo_time_per_output_token_seconds", "A request's mean time per new token after its first.",
            buckets=TIME_PER_OUTPUT_TOKEN_BUCKETS, registry=self.registry)
        self.latency = Histogram(
            "zoo_e2e_request_latency_seconds", "A request's arrival at the model's queue to its end.",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.success = Counter("zoo_request_success", "Requests ended, by their finish reason.", ["finished_reason"],
                               registry=self.registry)
        self.prompt_tokens = Counter("zoo_prompt_tokens", "Prompt tokens of the ended requests.",
                                     registry=self.registry)
        self.generation_tokens = Counter("zoo_generation_tokens", "New tokens of the ended requests.",
                                         registry=self.registry)
        self.lock = threading.Lock()
        self.recent = collections.deque(maxlen=RECENT)  # the latest times to the first token
        self.speculation = [0, 0, 0]  # rounds, proposed, accepted
        self.registry.register(_State(state, self.speculation_totals))

    def arrived(self, job):
        job.arrived, job.tokens_measured = time.monotonic(), 0

    def gained(self, job, new_tokens):
        """`job` has `new_tokens` new tokens now: the time to its first, and
        the time of its latest."""
        if new_tokens <= getattr(job, "tokens_measured", new_tokens):
            return
        now = time.monotonic()
        if not job.tokens_measured:
            job.first_token_at = now
            self.time_to_first_token.observe(now - job.arrived)
            with self.lock:
                self.recent.append(now - job.arrived)
        job.tokens_measured, job.last_token_at = new_tokens, now

    def ended(self, job, prompt_tokens, new_tokens, reason):
        """`job` ended with `new_tokens` for `reason`."""
        self.gained(job, new_tokens)
        if hasattr(job, "arrived"):
            self.latency.observe(time.monotonic() - job.arrived)
            if job.tokens_measured > 1:
                self.time_per_output_token.observe(
                    (job.last_token_at - job.first_token_at) / (job.tokens_measured - 1))
        self.success.labels(finished_reason=reason).inc()
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(new_tokens)

    def speculated(self, rounds, proposed, accepted):
        with self.lock:
            self.speculation = [a + b for a, b in zip(self.speculation, (rounds, proposed, accepted))]

    def percentiles(self):
        """The latest `RECENT` requests' times to the first token: their
        number and their 50th, 90th and 99th percentiles (None before any)."""
        with self.lock:
            seconds = np.array(self.recent)
        if not len(seconds):
            return dict(requests=0, p50=None, p90=None, p99=None)
        p50, p90, p99 = np.percentile(seconds, [50, 90, 99])
        return dict(requests=len(seconds), p50=float(p50), p90=float(p90), p99=float(p99))

    def speculation_totals(self):
        """Rounds, tokens proposed and accepted since the start, and the
        tokens accepted per round."""
        with self.lock:
            rounds, proposed, accepted = self.speculation
        return dict(rounds=rounds, proposed=proposed, accepted=accepted,
                    accepted_per_round=accepted / rounds if rounds else 0.0)

    def text(self):
        """The registry in Prometheus' text format (bytes)."""
        return generate_latest(self.registry)


class _State:
    """The gauges, the prefix cache's counters and the speculation's,
    read at each scrape."""

    def __init__(self, state, speculation):
        self.state, self.speculation = state, speculation

    def collect(self):
        state = self.state()
        for name, help in (("waiting", "Requests queued, not decoding yet."), ("running", "Requests decoding."),
                           ("slots", "Decoding slots."), ("slots_in_use", "Slots holding a request."),
                           ("prefix_cache_tokens", "Prompt positions the prefix cache holds.")):
            prefix = "zoo_num_requests_" if name in ("waiting", "running") else "zoo_"
            yield GaugeMetricFamily(prefix + name, help, value=state[name])
        for name, help in (("prefix_cache_queries", "Prompt blocks looked up in the prefix cache."),
                           ("prefix_cache_hits", "Prompt blocks found in the prefix cache.")):
            yield CounterMetricFamily("zoo_" + name, help, value=state[name])
        speculation = self.speculation()
        for name, key, help in (("rounds", "rounds", "Speculative verification steps."),
                                ("draft_tokens", "proposed", "Tokens proposed to the verification."),
                                ("accepted_tokens", "accepted", "Proposed tokens the verification accepted.")):
            yield CounterMetricFamily("zoo_spec_decode_num_" + name, help, value=speculation[key])
