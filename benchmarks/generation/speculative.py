"""Speculative decoding's acceptance rate and speed-up at batch 1, greedy.

    python benchmarks/generation/speculative.py                   # a SmolLM2-135M-shaped model
    python benchmarks/generation/speculative.py --preset llama-nano --new-tokens 64

The model: `zoo.build(PRESET, task="causal_lm")` with random weights
(default SmolLM2-135M's shape: 30 layers, width 576), a vocabulary of
`--vocabulary` tokens. Each row decodes the same prompt greedily with
`zoo.generate` on token ids, first without speculation, then with it, and
checks that the tokens are the same; it reports tokens per second (the
compilation excluded: each configuration runs once to compile, then
`--repeats` times timed, the best kept), the speed-up, the tokens
proposed and the share accepted.

- prompt lookup (`prompt_lookup_num_tokens`): an input-grounded prompt,
  a text of `--text-tokens` tokens, then its first half again: what a
  rewrite with small edits looks like to the model, which may copy the
  rest from the context.
- a draft model (`assistant_model`): the target's first quarter of layers
  with its embeddings and head (a layer-skip draft, as Draft & Verify and
  LayerSkip build one), so that the draft's distribution is related to
  the target's without any training.

A random model's greedy path is not a trained model's: it repeats
itself more, which prompt lookup finds. The figures show what the
machinery costs and saves for the acceptance reached; a trained model on
a real rewrite task gives its own acceptance.
"""

import argparse
import time

import numpy as np

import zoo


def build(preset, vocabulary, window, layers=None, seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    options = dict(vocabulary_size=vocabulary, max_sequence_length=window)
    if layers is not None:
        options["num_layers"] = layers
    return zoo.build(preset, task="causal_lm", **options)


def layer_skip_draft(target, preset, vocabulary, window):
    """A model of the target's first quarter of blocks, its weights the target's."""
    layers = max(len(target.backbone.blocks) // 4, 1)
    draft = build(preset, vocabulary, window, layers)
    theirs = {v.path: v for v in target.weights}
    copied = 0
    for variable in draft.weights:
        if variable.path in theirs and tuple(theirs[variable.path].shape) == tuple(variable.shape):
            variable.assign(theirs[variable.path])
            copied += 1
    return draft, layers, copied


def timed(lm, prompt, new_tokens, repeats, **options):
    """(new tokens, best seconds, the `Decoding` of the last run)."""
    best, decoding = np.inf, None
    for run in range(repeats + 1):  # the first run compiles
        start = time.perf_counter()
        speculation = {name: options[name] for name in options}
        decoding = zoo.generation.Decoding(lm, [prompt], new_tokens, speculation=speculation or None).run()
        seconds = time.perf_counter() - start
        if run:
            best = min(best, seconds)
    return decoding.new_tokens[0], best, decoding


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--vocabulary", type=int, default=4096)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--text-tokens", type=int, default=300)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lookup-tokens", type=int, default=10)
    parser.add_argument("--draft-tokens", type=int, default=5)
    args = parser.parse_args(argv)

    target = build(args.preset, args.vocabulary, args.window)
    generator = np.random.default_rng(0)
    text = generator.integers(1, args.vocabulary, args.text_tokens).tolist()
    grounded = text + text[: args.text_tokens // 2]  # the text, then its rewrite begun
    short = text[:32]
    draft, layers, copied = layer_skip_draft(target, args.preset, args.vocabulary, args.window)
    rows = []
    for name, prompt, options in (
        ("prompt lookup", grounded, dict(prompt_lookup_num_tokens=args.lookup_tokens)),
        (f"draft model ({layers} of {len(target.backbone.blocks)} layers)", short,
         dict(assistant_model=draft, num_assistant_tokens=args.draft_tokens)),
    ):
        plain, plain_seconds, _ = timed(target, prompt, args.new_tokens, args.repeats)
        speculated, seconds, decoding = timed(target, prompt, args.new_tokens, args.repeats, **options)
        speculation = decoding.speculation
        rows.append(dict(
            proposer=name, prompt_tokens=len(prompt), new_tokens=len(plain),
            plain_tokens_per_second=len(plain) / plain_seconds, tokens_per_second=len(speculated) / seconds,
            speed_up=plain_seconds / seconds, rounds=speculation.rounds, proposed=speculation.drafted,
            acceptance_rate=speculation.acceptance_rate, same_tokens=speculated == plain,
        ))
    print(f"{args.preset}, vocabulary {args.vocabulary}, {args.new_tokens} new tokens, greedy, batch 1 "
          f"(the draft: {copied} weights copied from the target)")
    print(f"{'proposer':34} {'prompt':>6} {'plain tok/s':>11} {'spec tok/s':>10} {'speed-up':>8} {'rounds':>6} "
          f"{'proposed':>8} {'accepted':>8} {'same':>5}")
    for row in rows:
        print(f"{row['proposer']:34} {row['prompt_tokens']:6d} {row['plain_tokens_per_second']:11.1f} "
              f"{row['tokens_per_second']:10.1f} {row['speed_up']:7.2f}x {row['rounds']:6d} {row['proposed']:8d} "
              f"{row['acceptance_rate']:8.0%} {str(row['same_tokens']):>5}")
    return rows


if __name__ == "__main__":
    main()
