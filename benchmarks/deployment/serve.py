"""`zoo serve` under load: the aggregate tokens per second of 8 streaming
clients against one, on the same model and server.

    KERAS_BACKEND=tensorflow python benchmarks/deployment/serve.py            # gpt2-small's shape
    python benchmarks/deployment/serve.py --preset gpt-nano --new-tokens 32   # a fast look

The model has gpt2-small's shape (12 layers, width 768, 12 heads, a
50,257-token vocabulary, context 1024) with random weights, and a byte-level
tokenizer of the same vocabulary size (every id decodes to text). The
server is `zoo serve`'s app (`zoo.serve`) on 127.0.0.1 in this process;
each client is a thread with its own open connection (httpx, the
transport of the `openai` client), streaming one completion of exactly `--new-tokens` tokens from a
`--prompt-tokens`-token prompt.

Rows, each the median of `--repeats` runs after one warm-up run (which
compiles the batch's shapes):
- 1 client, greedy;
- 8 clients, greedy: decoded together in one batch;
- 8 clients, sampled with 8 different seeds: one batch too (each row draws
  from its own seed); then each of the 8 asks alone, and the benchmark
  checks that every answer of the batch is the one its seed gives alone.
Aggregate tokens/s = clients x new tokens / wall seconds from the first
request to the last `[DONE]`.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402
import keras  # noqa: E402

import zoo  # noqa: E402
from zoo.tokenizers import HuggingFaceTokenizer  # noqa: E402


def byte_level_tokenizer(vocabulary_size):
    """A byte-level BPE tokenizer.json of `vocabulary_size` tokens (the 256
    bytes, then made-up words), so that any id decodes to text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocabulary = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(vocabulary) < vocabulary_size:
        word, n = "Ġ", i
        while True:
            word += letters[n % 26]
            n //= 26
            if n == 0:
                break
        vocabulary.setdefault(word, len(vocabulary))
        i += 1
    tokenizer = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return HuggingFaceTokenizer(tokenizer)


def start_server(model, max_batch):
    import uvicorn

    from zoo.serve import web as server
    from zoo.serve.app import create_app
    from zoo.serve.scheduler import Scheduler
    from zoo.serve.service import Service

    service = Service(model, "bench", Scheduler(model, max_batch=max_batch))
    start_server.scheduler = service.scheduler
    listener = server.listen("127.0.0.1", 0)
    uvicorn_server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [listener]}, daemon=True).start()
    while not uvicorn_server.started:
        time.sleep(0.05)
    return server.url("127.0.0.1", listener) + "/v1/completions"


def stream(client, url, prompt, new_tokens, seed):
    body = {"model": "bench", "prompt": prompt, "max_tokens": new_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update({"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed})
    tokens, text = 0, ""
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                usage = chunk.get("usage")
                tokens = usage["completion_tokens"] if usage else tokens
                text += "".join(choice["text"] for choice in chunk.get("choices") or ())
    return tokens, text


def run(url, prompts, new_tokens, seeds):
    """Aggregate tokens/s of one client per prompt, each with its connection
    open before the clock starts (as a client that keeps one would), and
    the clients' texts."""
    clients = [httpx.Client(timeout=3600) for _ in prompts]
    for client in clients:
        client.get(url.replace("/completions", "/models")).raise_for_status()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda i: stream(clients[i], url, prompts[i], new_tokens, seeds[i]),
                                range(len(prompts))))
    seconds = time.perf_counter() - start
    for client in clients:
        client.close()
    tokens = [count for count, _ in answers]
    assert tokens == [new_tokens] * len(prompts), tokens
    return sum(tokens) / seconds, [text for _, text in answers]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    info = zoo.preset_info(args.preset)
    vocabulary_size = max(info["config"].get("vocabulary_size", 50257), 512)  # every byte, and some words
    tokenizer = byte_level_tokenizer(vocabulary_size)
    model = zoo.build(args.preset, "causal_lm", vocabulary_size=vocabulary_size, tokenizer=tokenizer)
    url = start_server(model, max_batch=8)
    words = "to be or not to be that is the question whether tis nobler in the mind to suffer".split()
    prompts = [" ".join(words[i:] + words[:i]) for i in range(8)]
    prompts = [tokenizer.detokenize(tokenizer(p)[: args.prompt_tokens]) for p in prompts]
    rows = [("1 client, greedy", prompts[:1], [None]), ("8 clients, greedy (one batch)", prompts, [None] * 8),
            ("8 clients, 8 seeds (one batch)", prompts, list(range(8)))]
    print(f"{args.preset}: {model.count_params():,} parameters, backend {keras.config.backend()}, "
          f"{args.prompt_tokens}-token prompts, {args.new_tokens} new tokens per client")
    figures, texts = {}, {}
    batch_sizes = start_server.scheduler.batch_sizes
    for name, batch, seeds in rows:
        run(url, batch, args.new_tokens, seeds)  # compiles this batch's shapes
        batch_sizes.clear()
        runs = [run(url, batch, args.new_tokens, seeds) for _ in range(args.repeats)]
        figures[name], texts[name] = statistics.median(speed for speed, _ in runs), runs[0][1]
        print(f"{name}: {statistics.median(batch_sizes):g} requests a batch (median), batches {list(batch_sizes)}",
              flush=True)
    name, batch, seeds = rows[-1]
    alone = [run(url, [prompt], args.new_tokens, [seed])[1][0] for prompt, seed in zip(batch, seeds)]
    same = sum(a == b for a, b in zip(alone, texts[name]))
    print(f"{name}: {same} of {len(batch)} answers are the ones their seeds give alone", flush=True)
    base = figures[rows[0][0]]
    print("| clients | aggregate tokens/s | x one client |")
    print("|---|---|---|")
    for name, value in figures.items():
        print(f"| {name} | {value:.1f} | {value / base:.2f} |")


if __name__ == "__main__":
    main()
