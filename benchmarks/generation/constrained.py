"""What a constraint costs per token: decoding under a JSON schema against
the same decoding free, at batch 1 and batch 8.

    python benchmarks/generation/constrained.py
    python benchmarks/generation/constrained.py --preset gpt-baby --vocabulary 32000 --new-tokens 48

The model: `zoo.build(PRESET, task="causal_lm", max_sequence_length=256)`
with random weights and a
byte-level BPE `tokenizer.json` of VOCABULARY tokens (GPT-2's byte
alphabet, then the letter pairs and triples: the size of a real
vocabulary, which is what the mask's cost grows with). Each case decodes
NEW_TOKENS tokens per row, timed after a first, compiling run:

- `free, whole loop`: `zoo.generate`'s path (the compiled loop to the end);
- `free, token by token`: `zoo.stream`'s path (one compiled call a token);
- `json_schema`: token by token (the constrained path), the host filling
  each row's mask with llguidance and the packed mask entering each step.
  A schema of free strings keeps every row decoding for NEW_TOKENS tokens.

Printed: tokens/s of each case (the new tokens the rows gained: a
constrained row ends where its JSON closes), the host's time per token in the mask
(fill and consume), and the constrained rate against the free token-by-
token rate.
"""

import argparse
import itertools
import json
import string
import time

import numpy as np


def tokenizer_json(size):
    """A byte-level BPE tokenizer.json of `size` tokens (no merges: the
    vocabulary is what llguidance reads)."""
    from tokenizers import pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocabulary = sorted(alphabet)
    letters = string.ascii_lowercase + "Ġ"
    for n in (2, 3, 4):
        for piece in itertools.product(letters, repeat=n):
            if len(vocabulary) >= size - 1:
                break
            vocabulary.append("".join(piece))
    vocabulary.append("<|endoftext|>")
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None,
        "added_tokens": [{"id": len(vocabulary) - 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                            "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {token: i for i, token in enumerate(vocabulary)}, "merges": []},
    })


SCHEMA = {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}}},
          "required": ["notes"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gpt-baby")
    parser.add_argument("--vocabulary", type=int, default=32000)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import keras

    import zoo
    from zoo.generation import Decoding, constraints
    from zoo.tokenizers import HuggingFaceTokenizer

    tokenizer = HuggingFaceTokenizer(tokenizer_json(args.vocabulary))
    keras.utils.set_random_seed(0)
    lm = zoo.build(args.preset, task="causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer,
                   max_sequence_length=256)
    grammar = constraints.grammar(json_schema=SCHEMA)
    prompt = tokenizer("the cat").tolist()
    print(f"{args.preset}, vocabulary {tokenizer.vocabulary_size()}, {args.new_tokens} new tokens a row, "
          f"backend {keras.backend.backend()}")
    for batch in args.batches:
        sampling = dict(sampler="top_k", top_k=40, seed=list(range(batch)))
        cases = {
            "free, whole loop": lambda: Decoding(lm, [prompt] * batch, args.new_tokens, sampling).run(),
            "free, token by token": lambda: _stepped(Decoding(lm, [prompt] * batch, args.new_tokens, sampling)),
            "json_schema": lambda: Decoding(lm, [prompt] * batch, args.new_tokens, sampling,
                                            constraints=[grammar] * batch).run(),
        }
        rates = {}
        for name, run in cases.items():
            run()  # compiles
            rates[name] = max(_rate(run) for _ in range(args.repeats))
            print(f"batch {batch}: {name:22s} {rates[name]:8.1f} tokens/s")
        host = _host_time(lm, prompt, batch, args.new_tokens, grammar, sampling)
        print(f"batch {batch}: mask on the host {1e3 * host:.3f} ms a step (fill and consume, all rows); "
              f"json_schema at {100 * rates['json_schema'] / rates['free, token by token']:.0f}% of free token by "
              f"token, {100 * rates['json_schema'] / rates['free, whole loop']:.0f}% of the free whole loop")


def _stepped(decoding):
    for _ in decoding.steps(every_token=True):
        pass
    return decoding


def _rate(run):
    """New tokens a second of one run (a constrained row may end before its budget)."""
    start = time.perf_counter()
    decoding = run()
    seconds = time.perf_counter() - start
    return sum(len(row) for row in decoding.new_tokens) / seconds


def _host_time(lm, prompt, batch, new_tokens, grammar, sampling):
    """Seconds a step spends in the rows' matchers (`Constraints.consume`)."""
    from zoo.generation import Decoding

    decoding = Decoding(lm, [prompt] * batch, new_tokens, sampling, constraints=[grammar] * batch)
    spent, consume = [], decoding.constraints.consume

    def timed(row, token):
        start = time.perf_counter()
        ended = consume(row, token)
        spent.append(time.perf_counter() - start)
        return ended

    decoding.constraints.consume = timed
    decoding.run()
    return float(np.sum(spent)) / max(len(spent) / batch, 1)


if __name__ == "__main__":
    main()
