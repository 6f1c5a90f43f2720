"""Continuous batching in slots against static batching, the prefix
cache's time to first token, and chunked prefill's longest stall.

    KERAS_BACKEND=tensorflow python benchmarks/serving/continuous.py
    python benchmarks/serving/continuous.py --requests 8 --most-new 32   # a fast look

The model is a small Llama with random weights (4 layers, width 256, 4
heads, 2 key/value heads, an 8,192-token vocabulary, context 1,024),
driven through the engine `zoo serve` runs, without HTTP:

1. Mixed output lengths. `--requests` requests, all there at the start,
   prompts of 16-128 tokens and outputs of 8-`--most-new` tokens drawn from
   a seeded uniform distribution, greedy with no stop token:
   - static: groups of `--max-batch` requests in arrival order, each one
     `zoo.generation.Decoding` (bucket `--max-batch`, one token a step, as
     `zoo serve` decoded before slots), a group's slots held until its
     longest request ends;
   - slots: `zoo.generation.slots.Slots` with `--max-batch` slots, a
     request taking the slot another frees.
   Both decode the same tokens (counted). Tokens/s = all new tokens / wall
   seconds; latency = seconds from the start to a request's last token.
2. Shared prefix: a `--system-tokens` system prompt and a distinct 16-token
   question, time to first token with the prefix cache holding the system
   prompt (a hit) and without a prefix cache (a miss); median of 3.
3. Chunked prefill: a stream decoding while a `--long-prompt`-token prompt
   arrives; the longest gap between two of the stream's tokens, the
   prompt prefilled whole or in chunks of `--chunk` tokens.

Each part runs once unmeasured first, so compilation is not counted.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.generation import Decoding  # noqa: E402
from zoo.generation.slots import Slots  # noqa: E402


def model():
    keras.utils.set_random_seed(0)
    return zoo.build("llama-nano", "causal_lm", vocabulary_size=8192, num_layers=4, hidden_dim=256, num_heads=4,
                     num_key_value_heads=2, intermediate_dim=768, max_sequence_length=1024)


def workload(lm, requests, most_new, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(1, lm.vocabulary_size, int(n)).tolist() for n in rng.integers(16, 129, requests)]
    return prompts, [int(n) for n in rng.integers(8, most_new + 1, requests)]


def static(lm, prompts, budgets, max_batch):
    start, tokens, done = time.perf_counter(), [], []
    for first in range(0, len(prompts), max_batch):
        decoding = Decoding(lm, prompts[first:first + max_batch], budgets[first:first + max_batch], bucket=max_batch)
        for _ in decoding.steps(every_token=True):
            pass
        done += [time.perf_counter() - start] * len(decoding.new_tokens[:len(prompts[first:first + max_batch])])
        tokens += decoding.new_tokens[: len(prompts[first:first + max_batch])]
    return time.perf_counter() - start, tokens, done


def slots_run(lm, prompts, budgets, max_batch):
    slots = Slots(lm, max_batch)
    start = time.perf_counter()
    requests = [slots.add(p, b) for p, b in zip(prompts, budgets)]
    ends = {}
    while slots.busy:
        for request, _ in slots.step():
            if request.finished:
                ends[id(request)] = time.perf_counter() - start
    return time.perf_counter() - start, [r.new_tokens for r in requests], [ends[id(r)] for r in requests]


def first_token(slots, prompt):
    start = time.perf_counter()
    request = slots.add(prompt, 2)
    while not request.new_tokens:
        slots.step()
    seconds = time.perf_counter() - start
    while slots.busy:
        slots.step()
    return seconds, request.cached_tokens


def longest_stall(lm, long_prompt, chunk):
    slots = Slots(lm, 2, prefill_chunk=chunk)
    stream = slots.add([5, 6, 7], 48)
    for _ in range(4):
        slots.step()
    slots.add(long_prompt, 4)
    last, gaps = time.perf_counter(), []
    while not stream.finished:
        for request, _ in slots.step():
            if request is stream:
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
    while slots.busy:
        slots.step()
    return max(gaps)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--most-new", type=int, default=128)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--system-tokens", type=int, default=512)
    parser.add_argument("--long-prompt", type=int, default=768)
    parser.add_argument("--chunk", type=int, default=64)
    args = parser.parse_args(argv)
    lm = model()
    print(f"backend {keras.backend.backend()}; a Llama of 4 layers, width 256, context 1024; "
          f"{os.cpu_count()} CPUs (shared)")

    prompts, budgets = workload(lm, args.requests, args.most_new)
    static(lm, prompts, budgets, args.max_batch), slots_run(lm, prompts, budgets, args.max_batch)  # compile
    rows = {}
    for name, run in (("static", static), ("slots", slots_run)):
        seconds, tokens, ends = run(lm, prompts, budgets, args.max_batch)
        rows[name] = (seconds, tokens, ends)
    same = sum(a == b for a, b in zip(rows["static"][1], rows["slots"][1]))
    total = sum(budgets)
    print(f"\n1. {args.requests} requests, outputs {min(budgets)}-{max(budgets)} tokens ({total} in all), "
          f"{args.max_batch} at once")
    print(f"{'':8}{'seconds':>9}{'tokens/s':>10}{'mean latency s':>16}{'p99 latency s':>15}")
    for name, (seconds, _, ends) in rows.items():
        print(f"{name:8}{seconds:9.2f}{total / seconds:10.1f}{statistics.mean(ends):16.2f}"
              f"{np.percentile(ends, 99):15.2f}")
    print(f"slots / static tokens/s: {rows['static'][0] / rows['slots'][0]:.2f}x; "
          f"the same tokens for {same} of {args.requests} requests (the rest: ties broken by the batch's rounding)")

    rng = np.random.default_rng(1)
    system = rng.integers(1, lm.vocabulary_size, args.system_tokens).tolist()
    questions = [rng.integers(1, lm.vocabulary_size, 16).tolist() for _ in range(8)]
    hit, miss = Slots(lm, 1, prefix_cache_tokens=4 * args.system_tokens), Slots(lm, 1)
    first_token(hit, system + questions[0]), first_token(miss, system + questions[0])  # compile; the cache filled
    hits = [first_token(hit, system + q) for q in questions[1:4]]
    misses = [first_token(miss, system + q)[0] for q in questions[4:7]]
    hit_s, miss_s = statistics.median(s for s, _ in hits), statistics.median(misses)
    print(f"\n2. a {args.system_tokens}-token system prompt and a 16-token question: time to first token")
    print(f"miss (no prefix cache) {1000 * miss_s:8.1f} ms")
    print(f"hit ({hits[0][1]} tokens cached) {1000 * hit_s:8.1f} ms   {miss_s / hit_s:.1f}x faster")

    long_prompt = rng.integers(1, lm.vocabulary_size, args.long_prompt).tolist()
    for chunk in (None, args.chunk):
        longest_stall(lm, long_prompt, chunk)  # compile
    whole, chunked = (longest_stall(lm, long_prompt, chunk) for chunk in (None, args.chunk))
    print(f"\n3. a stream while a {args.long_prompt}-token prompt arrives: its longest gap between two tokens")
    print(f"prefilled whole        {1000 * whole:8.1f} ms")
    print(f"in chunks of {args.chunk:<4}      {1000 * chunked:8.1f} ms")


if __name__ == "__main__":
    main()
