"""`zoo serve`'s scheduler under Poisson arrivals: continuous batching in
slots against static batching, beside one lone client and transformers'
continuous batching; then a shared system prompt with the prefix cache.

    python benchmarks/serving/arrivals.py                     # SmolLM2-135M's shape
    python benchmarks/serving/arrivals.py --preset llama-nano --clients 8 --most-new 32 --no-transformers

The model has SmolLM2-135M's shape (30 layers, width 576, 9 heads, 3
key/value heads, a 49,152-token vocabulary) with random weights and a word
tokenizer of that vocabulary ("w0" ...), so that every id is text. The
requests go to `zoo serve`'s own `Scheduler` (`zoo.serve.scheduler`: the
model's thread behind the HTTP layer) in this process, each read by a
thread of its own as a streaming client reads its chunks.

1. The workload: `--clients` requests with prompts of 16-`--longest-prompt`
   tokens and outputs of 8-`--most-new` tokens, drawn uniformly from a
   seeded generator, arriving as a Poisson process (exponential gaps of
   mean `--mean-gap` seconds), greedy. Rows:
   - static: `Scheduler(continuous=False)`, the batching `zoo serve` did
     before slots (llama.cpp server's `--no-cont-batching`): requests that
     arrive together form a batch of at most `--static-max-batch` (the
     server's default, 8), and batches take turns;
   - slots: `Scheduler()`, `--max-batch` slots (one a client), prompts prefilled in chunks
     of `--prefill-chunk` tokens, a request joining at the next step;
   - transformers: `init_continuous_batching` (transformers' continuous
     batching manager, PyTorch, float32) on a `LlamaForCausalLM` of the
     same shape, fed the same requests at the same times.
   Each zoo row runs the workload once unmeasured first (it compiles every
   shape the workload meets), then once measured. Tokens/s = all new tokens
   / seconds from the first arrival to the last token; time to first token
   (TTFT) = from a request's arrival to its first token.
2. One lone client: each request's prompt alone, one token, on the slots'
   scheduler: the TTFT a client gets when nobody else is there.
3. A `--system-tokens` system prompt shared by requests with a distinct
   16-token question: TTFT with the prefix cache holding it (a hit)
   against a system prompt not seen before (a miss); median of 3.
"""

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.serve.scheduler import END, ERROR, PIECE, Job, Scheduler  # noqa: E402
from zoo.tokenizers import WordTokenizer  # noqa: E402


def model(preset, vocabulary_size, context):
    keras.utils.set_random_seed(0)
    tokenizer = WordTokenizer.from_texts([" ".join(f"w{i}" for i in range(vocabulary_size - 4))])
    return zoo.build(preset, "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer,
                     max_sequence_length=context)


def workload(vocabulary_size, clients, longest_prompt, most_new, mean_gap, seed=0):
    """(arrival seconds, prompt ids, new tokens) of each request."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(mean_gap, clients)) - mean_gap
    arrivals[0] = 0.0
    prompts = [rng.integers(4, vocabulary_size, int(n)).tolist() for n in rng.integers(16, longest_prompt + 1, clients)]
    budgets = [int(n) for n in rng.integers(8, most_new + 1, clients)]
    return [float(a) for a in arrivals], prompts, budgets


def read(job, start, record):
    """A client: the request's first-token and end times (from `start`) and its new tokens."""
    first = None
    for kind, value in job.pieces():
        if kind == PIECE and first is None:
            first = time.perf_counter() - start
        elif kind == ERROR:
            raise RuntimeError(value)
        elif kind == END:
            record.update(first=first, end=time.perf_counter() - start, tokens=len(job.token_ids),
                          token_ids=list(job.token_ids))


def serve(scheduler, arrivals, prompts, budgets):
    """Submits each request at its arrival time; returns each one's record."""
    records = [{} for _ in prompts]
    readers = []
    start = time.perf_counter()
    for arrival, prompt, budget, record in zip(arrivals, prompts, budgets, records):
        delay = start + arrival - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        job = scheduler.submit(Job(prompt, budget, (), "greedy", 1.0, 1.0, None))
        reader = threading.Thread(target=read, args=(job, start + arrival, record))
        reader.start()
        readers.append(reader)
    for reader in readers:
        reader.join()
    return records


def summary(records, arrivals):
    tokens = sum(r["tokens"] for r in records)
    seconds = max(a + r["end"] for a, r in zip(arrivals, records))
    ttft = [r["first"] for r in records]
    return dict(tokens=tokens, seconds=seconds, speed=tokens / seconds, ttft_p50=float(np.percentile(ttft, 50)),
                ttft_p99=float(np.percentile(ttft, 99)), latency=statistics.mean(r["end"] for r in records))


def lone_ttft(scheduler, prompts):
    """Each prompt alone, one new token: its time to first token."""
    seconds = []
    for prompt in prompts:
        record = {}
        start = time.perf_counter()
        read(scheduler.submit(Job(prompt, 1, (), "greedy", 1.0, 1.0, None)), start, record)
        seconds.append(record["first"])
    return seconds


def shared_prefix(lm, system_tokens, max_batch, prefill_chunk, rng):
    """Median TTFT of a system prompt's hit and of a miss, with the prefix cache on."""
    scheduler = Scheduler(lm, max_batch=max_batch, prefill_chunk=prefill_chunk, prefix_cache_tokens=4 * system_tokens)
    system = lambda: rng.integers(4, lm.vocabulary_size, system_tokens).tolist()  # noqa: E731
    question = lambda: rng.integers(4, lm.vocabulary_size, 16).tolist()  # noqa: E731
    shared = system()
    lone_ttft(scheduler, [shared + question(), system() + question()])  # compiles; the cache holds `shared`
    hits = lone_ttft(scheduler, [shared + question() for _ in range(3)])
    misses = lone_ttft(scheduler, [system() + question() for _ in range(3)])
    return statistics.median(hits), statistics.median(misses)


def transformers_row(lm, arrivals, prompts, budgets, threads):
    """transformers' continuous batching manager on the same workload."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = lm.backbone.config
    config = LlamaConfig(vocab_size=lm.vocabulary_size, hidden_size=c.hidden_dim, intermediate_size=c.intermediate_dim,
                         num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                         num_key_value_heads=c.num_key_value_heads, max_position_embeddings=lm.max_sequence_length,
                         tie_word_embeddings=True)
    hf = LlamaForCausalLM(config).eval()
    generation = GenerationConfig(max_new_tokens=max(budgets), do_sample=False, eos_token_id=-1, pad_token_id=0)
    manager = hf.init_continuous_batching(generation_config=generation)
    manager.start()
    try:
        manager.add_request(prompts[0][:16], request_id="warm-up", max_new_tokens=2)
        while (result := manager.get_result(timeout=60)) is None or not result.is_finished():
            pass
        records = {str(i): {} for i in range(len(prompts))}
        start = time.perf_counter()
        for i, (arrival, prompt, budget) in enumerate(zip(arrivals, prompts, budgets)):
            delay = start + arrival - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            manager.add_request(prompt, request_id=str(i), max_new_tokens=budget, streaming=True)
            while (result := manager.get_result(timeout=0)) is not None:
                _note(records, result, start, arrivals)
        while not all("end" in r for r in records.values()):
            result = manager.get_result(timeout=1)
            if result is not None:
                _note(records, result, start, arrivals)
    finally:
        manager.stop(block=True)
    return [records[str(i)] for i in range(len(prompts))]


def _note(records, result, start, arrivals):
    record = records.get(result.request_id)
    if record is None:
        return
    if result.error:
        raise RuntimeError(f"transformers' request {result.request_id}: {result.error}")
    now = time.perf_counter() - start - arrivals[int(result.request_id)]
    if result.generated_tokens and "first" not in record:
        record["first"] = now
    if result.is_finished():
        record.update(end=now, tokens=len(result.generated_tokens))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--vocabulary-size", type=int, default=49152)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--longest-prompt", type=int, default=512)
    parser.add_argument("--most-new", type=int, default=256)
    parser.add_argument("--mean-gap", type=float, default=2.0, help="seconds between arrivals, on average")
    parser.add_argument("--max-batch", type=int, default=16, help="the slots")
    parser.add_argument("--static-max-batch", type=int, default=8)
    parser.add_argument("--prefill-chunk", type=int, default=256)
    parser.add_argument("--system-tokens", type=int, default=1024)
    parser.add_argument("--no-transformers", dest="transformers", action="store_false")
    args = parser.parse_args(argv)
    lm = model(args.preset, args.vocabulary_size, args.context)
    arrivals, prompts, budgets = workload(lm.vocabulary_size, args.clients, args.longest_prompt, args.most_new,
                                          args.mean_gap)
    print(f"{args.preset}'s shape, {lm.count_params():,} parameters, random weights; backend "
          f"{keras.backend.backend()}; {os.cpu_count()} CPUs")
    print(f"{args.clients} requests arriving over {arrivals[-1]:.1f} s (Poisson, mean gap {args.mean_gap} s), "
          f"prompts {min(map(len, prompts))}-{max(map(len, prompts))} tokens, outputs {min(budgets)}-{max(budgets)} "
          f"({sum(budgets)} in all), greedy; {args.max_batch} slots, static batches of at most "
          f"{args.static_max_batch}", flush=True)

    rows = {}
    slots = None
    for name, continuous in (("static", False), ("slots", True)):
        scheduler = Scheduler(lm, max_batch=args.max_batch if continuous else args.static_max_batch,
                              prefill_chunk=args.prefill_chunk if continuous else None, continuous=continuous)
        serve(scheduler, arrivals, prompts, budgets)  # compiles the workload's shapes
        rows[name] = serve(scheduler, arrivals, prompts, budgets)
        print(f"{name}: {summary(rows[name], arrivals)}", flush=True)
        slots = scheduler
    same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(rows["static"], rows["slots"]))
    lone = lone_ttft(slots, prompts)
    if args.transformers:
        rows["transformers (PyTorch)"] = transformers_row(lm, arrivals, prompts, budgets, os.cpu_count())

    print("\n| scheduler | tokens/s | x static | TTFT p50 s | TTFT p99 s | p99 / lone p99 | mean latency s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = summary(rows["static"], arrivals)["speed"]
    lone_p99 = float(np.percentile(lone, 99))
    for name, records in rows.items():
        s = summary(records, arrivals)
        print(f"| {name} | {s['speed']:.1f} | {s['speed'] / base:.2f} | {s['ttft_p50']:.2f} | {s['ttft_p99']:.2f} | "
              f"{s['ttft_p99'] / lone_p99:.1f} | {s['latency']:.1f} |")
    print(f"| one lone client, each prompt alone | | | {np.percentile(lone, 50):.2f} | {lone_p99:.2f} | 1.0 | |")
    print(f"\nstatic and slots gave the same tokens to {same} of {args.clients} requests (greedy; the rest: ties "
          "broken by the batch's rounding)")

    hit, miss = shared_prefix(lm, args.system_tokens, args.max_batch, args.prefill_chunk, np.random.default_rng(1))
    print(f"\na {args.system_tokens}-token system prompt and a 16-token question, time to first token: "
          f"miss {1000 * miss:.0f} ms, hit {1000 * hit:.0f} ms: {miss / hit:.1f}x faster")


if __name__ == "__main__":
    main()
