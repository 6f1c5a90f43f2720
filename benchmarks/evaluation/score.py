"""Scoring speed: lm-evaluation-harness `loglikelihood` requests per second,
the zoo's `ZooLM` (`zoo evaluate`) against the harness's own `hf` model.

    KERAS_BACKEND=tensorflow python benchmarks/evaluation/score.py          # gpt2-small's shape
    python benchmarks/evaluation/score.py --questions 4 --repeats 1         # a fast look
    python benchmarks/evaluation/score.py --layers 2 --width 128 --heads 2  # a small model

One GPT-2 checkpoint folder for both, written to a temporary folder:
transformers' `GPT2LMHeadModel` randomly initialised from a `GPT2Config` of
gpt2-small's shape (12 layers, width 768, 12 heads, a 50,257-token
vocabulary, context 1024), saved with `save_pretrained`, beside a
byte-level `vocab.json` (the 256 bytes, then made-up words, then
`<|endoftext|>`) and a `merges.txt` of one merge the text never holds, so
every character of the requests' text is one token. The zoo reads it with `zoo.from_pretrained`
(the same weights); the harness's `hf` model (`HFLM`, PyTorch) with
`pretrained=FOLDER`. Without torch or transformers the `hf` row is skipped
with a note, and the zoo scores a model of the same shape built with random
weights.

The requests are a multiple-choice task's: `--questions` contexts of
96-192 characters (tokens) of made-up words, each with 4 continuations
of 12-40; both answer `loglikelihood` of the same `Instance`s, tokenizing
the text themselves, at the same `--batch-size`. Each figure is requests
per second: requests / seconds, the median of `--repeats` calls after a
first call (the zoo compiles its shapes there), shown apart; the runners
alternate, so that the load of a shared machine falls on both alike. With
both rows, the largest difference of a request's log-likelihood between
them is printed: the two did the same work.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402

# --- The configuration ---------------------------------------------------------
VOCABULARY, CONTEXT = 50257, 1024
LAYERS, WIDTH, HEADS = 12, 768, 12  # gpt2-small; d_ff is 4 x width
QUESTIONS, CHOICES = 16, 4
CONTEXT_CHARACTERS, CONTINUATION_CHARACTERS = (96, 192), (12, 40)
BATCH_SIZE, REPEATS = 8, 3
END_TOKEN = "<|endoftext|>"
MERGE = "Ċ Ċ"  # two newlines: keras-hub's tokenizer needs a merge, and the requests hold no newline


def byte_level_vocabulary():
    """GPT-2's byte-to-symbol alphabet, the one merge's token, then made-up
    words up to the vocabulary's size, `<|endoftext|>` last (as GPT-2's)."""
    from tokenizers import pre_tokenizers

    vocabulary = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocabulary["".join(MERGE.split())] = len(vocabulary)
    i = 0
    while len(vocabulary) < VOCABULARY - 1:
        vocabulary.setdefault(f"Ġw{i}", len(vocabulary))
        i += 1
    vocabulary[END_TOKEN] = len(vocabulary)
    return vocabulary


def write_tokenizer(folder):
    (folder / "vocab.json").write_text(json.dumps(byte_level_vocabulary(), ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text(f"#version: 0.2\n{MERGE}\n", encoding="utf-8")


def hf_checkpoint(folder):
    """transformers' randomly initialised GPT2LMHeadModel saved to `folder`;
    None (with a note) when torch or transformers is missing."""
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as error:
        print(f"note: the harness's hf row is skipped: {error.name} is not installed (pip install torch transformers)")
        return None
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCABULARY, n_positions=CONTEXT, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def zoo_model(folder, checkpoint):
    if checkpoint is not None:
        return zoo.from_pretrained(checkpoint)
    import keras_hub

    keras.utils.set_random_seed(0)
    tokenizer = keras_hub.tokenizers.GPT2Tokenizer(vocabulary=str(folder / "vocab.json"),
                                                   merges=str(folder / "merges.txt"))
    return zoo.build("gpt2-small", "causal_lm", vocabulary_size=VOCABULARY, max_sequence_length=CONTEXT,
                     num_layers=LAYERS, hidden_dim=WIDTH, num_heads=HEADS, intermediate_dim=4 * WIDTH, dropout=0.0,
                     tokenizer=tokenizer)


def requests(questions, seed=0):
    """The harness's `loglikelihood` Instances of a multiple-choice task."""
    from lm_eval.api.instance import Instance

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))

    def words(low, high):
        length, text = int(rng.integers(low, high + 1)), ""
        while len(text) < length:
            text += " " + "".join(rng.choice(letters, int(rng.integers(2, 9))))
        return text[:length]

    made = []
    for question in range(questions):
        context = words(*CONTEXT_CHARACTERS).strip()
        for choice in range(CHOICES):
            made.append(Instance("loglikelihood", {}, (context, words(*CONTINUATION_CHARACTERS)), choice,
                                 doc_id=question))
    return made


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main():
    global LAYERS, WIDTH, HEADS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=QUESTIONS, help=f"contexts, {CHOICES} requests each")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--heads", type=int, default=HEADS)
    args = parser.parse_args()
    LAYERS, WIDTH, HEADS = args.layers, args.width, args.heads

    from recipes.evaluate import ZooLM

    folder = Path(tempfile.mkdtemp(prefix="score_bench_"))
    write_tokenizer(folder)
    checkpoint = hf_checkpoint(folder)
    runners = {"zoo": ZooLM(zoo_model(folder, checkpoint), batch_size=args.batch_size).loglikelihood}
    if checkpoint is not None:
        try:
            from lm_eval.models.huggingface import HFLM

            hf = HFLM(pretrained=str(checkpoint), batch_size=args.batch_size, device="cpu", dtype="float32")
            runners["hf"] = lambda instances: hf.loglikelihood(instances, disable_tqdm=True)
        except Exception as error:  # the harness's hf model needs accelerate, and a transformers it knows
            print(f"note: the harness's hf row is skipped: {type(error).__name__}: {error}")
    instances = requests(args.questions)
    tokens = sum(len(c) + len(x) for c, x in (i.args for i in instances))
    print(f"backend {keras.config.backend()}; {LAYERS} layers, width {WIDTH}, {HEADS} heads, vocabulary {VOCABULARY}; "
          f"{len(instances)} requests, {tokens} tokens; batch {args.batch_size}; median of {args.repeats}")
    if "hf" in runners:
        import torch

        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    first, answers = {}, {}
    for name, run in runners.items():
        first[name], answers[name] = timed(lambda: run(instances))
    times = {name: [] for name in runners}
    for _ in range(args.repeats):
        for name, run in runners.items():
            times[name].append(timed(lambda: run(instances))[0])
    print(f"{'model':<6} {'requests/s':>11} {'tokens/s':>9} {'first call, s':>14}")
    for name in runners:
        seconds = statistics.median(times[name])
        print(f"{name:<6} {len(instances) / seconds:>11.2f} {tokens / seconds:>9.0f} {first[name]:>14.1f}")
    if "hf" in runners:
        zoo_rate = statistics.median(times["hf"]) / statistics.median(times["zoo"])
        difference = max(abs(a[0] - b[0]) for a, b in zip(answers["zoo"], answers["hf"]))
        agree = sum(a[1] == b[1] for a, b in zip(answers["zoo"], answers["hf"]))
        print(f"zoo / hf: {zoo_rate:.2f}x; largest difference of a log-likelihood: {difference:.2e} "
              f"(of {max(abs(a[0]) for a in answers['hf']):.1f}); is_greedy agrees on {agree} of {len(instances)}")


if __name__ == "__main__":
    main()
