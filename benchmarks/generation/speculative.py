"""Speculative decoding's acceptance rate and speed-up at batch 1, greedy.

    python benchmarks/generation/speculative.py                   # a SmolLM2-135M-shaped model
    python benchmarks/generation/speculative.py --preset llama-nano --weights random --new-tokens 64

The model: `zoo.build(PRESET, task="causal_lm")` (default SmolLM2-135M's
shape: 30 layers, width 576, a vocabulary of `--vocabulary` tokens), its
weights set as below. Each row decodes the same prompt greedily with
`zoo.generate` on token ids, first without speculation, then with it, and
checks that the tokens are the same. It reports tokens per second of
the whole call and of the decoding after the first token (the call less
a call of one new token), each speed-up, the tokens proposed, the share
accepted, and the share of the new tokens that are the rewrite's. The
calls with and without speculation, and each with one new token, take
turns: once to compile, then `--repeats` times timed, the best kept.

- prompt lookup (`prompt_lookup_num_tokens`): an input-grounded prompt,
  a text of `--text-tokens` distinct tokens, then the first `--begun`
  tokens of its rewrite: the text with a few tokens replaced (`--edits`
  of them); the model writes the rest of the rewrite (by default all of
  it, `--new-tokens`), most of which is in its context.
- a draft model (`assistant_model`): the target's first quarter of layers
  with its embeddings and head (a layer-skip draft, as Draft & Verify and
  LayerSkip build one), prompted with the same text.

Random weights do not copy their context, and a model that has learnt
to cannot be trained on a CPU in minutes, so by default
(`--weights copying`) the model's first two blocks are set by hand to
the two-layer induction circuit of Olsson et al. (2022, "In-context
learning and induction heads"), the mechanism by which trained models
copy from their context:

- block 0's attention heads attend to the previous position (their
  queries and keys read one constant dimension of the embeddings and
  are turned so that the rotary score peaks at a distance of one) and
  write that token's code into a second subspace;
- block 1's attention heads match the current token's code against the
  previous token's code of every position, through the head
  dimensions whose rotary frequencies barely turn within the context,
  and write the code of the token found into the residual, which the
  tied head reads as the next token;
- the edits: a few tokens share their code with a partner token and
  carry a flag that block 1 copies too; the flag tips the tied head to
  the partner, so the rewrite replaces those tokens wherever they come.

The other blocks keep their random weights, their outputs scaled by
`--noise` (0.05): they cost what they cost in any model of this shape
and change the logits a little. `--weights random` keeps every weight
random: its greedy path repeats itself, which prompt lookup finds,
and its first quarter of layers is a poor guess of the whole.
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


def induction_copier(lm, edit_share, noise, window, seed=0):
    """Sets `lm` (a Llama-family causal LM with a tied head) to copy its
    context with edits, as the module's docstring describes.

    Returns:
        (V,) int array: each token's replacement in a rewrite (itself for
        most; the partner, in the upper half of the vocabulary, for the
        edited tokens of the lower half).
    """
    from zoo.checkpoints import assign_huggingface_tensors, huggingface_names, huggingface_tensors
    from zoo.layers.rotary_embedding import inverse_frequencies

    config = lm.backbone.config
    tensors = huggingface_tensors(lm)
    vocabulary, width = tensors["model.embed_tokens.weight"].shape
    heads, groups = config.num_heads, config.num_key_value_heads
    head_dim = tensors["model.layers.0.self_attn.q_proj.weight"].shape[0] // heads
    part = head_dim - 4  # each key/value head carries this many dimensions of a code
    code_dims = groups * part
    if not config.tie_word_embeddings or 2 * code_dims + 3 > width:
        raise SystemExit(f"--weights copying needs a tied head and width >= {2 * code_dims + 3}; got {width}.")
    generator = np.random.default_rng(seed)
    code = np.arange(code_dims)  # the token's own code
    previous = code_dims + np.arange(code_dims)  # the previous token's code, written by block 0
    constant, flag, edit = 2 * code_dims, 2 * code_dims + 1, 2 * code_dims + 2
    flagged = 0.3  # an edited token's flag
    for name in tensors:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            tensors[name] = tensors[name] * noise

    half = vocabulary // 2
    codes = generator.choice([-1.0, 1.0], size=(vocabulary, code_dims)) / np.sqrt(code_dims)
    edited = np.flatnonzero(generator.random(half) < edit_share)
    edited = edited[edited > 0]
    partners = edited + half
    replacement = np.arange(vocabulary)
    replacement[edited] = partners
    codes[partners] = codes[edited]
    embeddings = np.zeros((vocabulary, width))
    embeddings[:, code] = codes
    embeddings[:, constant] = 1.0
    embeddings[edited, flag] = flagged
    embeddings[partners, edit] = 0.5
    tensors["model.embed_tokens.weight"] = embeddings

    theta = inverse_frequencies(head_dim, config.rope_theta, config.rope_scaling)
    pairs = head_dim // 2
    still = np.flatnonzero(theta * window < 1.0)  # the pairs that turn less than a radian within the window
    if len(still) < 8:
        raise SystemExit(f"--weights copying needs 8 rotary pairs that barely turn within {window} positions; "
                         f"rope_theta={config.rope_theta} leaves {len(still)}.")
    match_rows = np.concatenate([still, still + pairs])
    step = np.arange(pairs)

    def attention(block, fill):
        q, k = np.zeros((heads * head_dim, width)), np.zeros((groups * head_dim, width))
        v, o = np.zeros((groups * head_dim, width)), np.zeros((width, heads * head_dim))
        for group in range(groups):
            fill(q, k, v, o, group, group * (heads // groups), code[group * part:(group + 1) * part])
        for name, weight in zip("qkvo", (q, k, v, o)):
            tensors[f"model.layers.{block}.self_attn.{name}_proj.weight"] = weight
        return v, o

    norm0, norm1 = np.sqrt(width / 2.0), np.sqrt(width / 3.0)  # the RMSNorms' gains on each block's input

    def previous_token(q, k, v, o, group, head, dims):
        # the score sum_i cos((t - s - 1) theta_i) * 300 / sqrt(k): peaked at s = t - 1
        k[group * head_dim + step, constant] = 1.0 / norm0
        q[head * head_dim + step, constant] = 300.0 * np.cos(theta) / norm0
        q[head * head_dim + pairs + step, constant] = -300.0 * np.sin(theta) / norm0
        v[group * head_dim + np.arange(part), dims] = 1.0
        o[previous[dims], head * head_dim + np.arange(part)] = 1.0 / norm0

    def induction(q, k, v, o, group, head, dims):
        basis = np.linalg.qr(generator.normal(size=(code_dims, len(match_rows))))[0].T
        q[np.ix_(head * head_dim + match_rows, code)] = 50.0 * basis / norm1
        k[np.ix_(group * head_dim + match_rows, previous)] = 50.0 * basis / norm1
        v[group * head_dim + np.arange(part), dims] = 1.0
        o[dims, head * head_dim + np.arange(part)] = 4.0 / norm1

    attention(0, previous_token)
    v, o = attention(1, induction)
    v[part, flag] = 1.0  # the copied token's flag ...
    o[edit, part] = 2.0 / (norm1 * flagged)  # ... raises its partner's logit
    assign_huggingface_tensors(huggingface_names(lm)[1], {n: t.astype(np.float32) for n, t in tensors.items()})
    return replacement


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


def timed(lm, prompt, calls, repeats):
    """Each call of `calls` [(new tokens, speculation settings or None)],
    made in turn, A, B, C, ..., A, B, C, ..., `repeats` times after a first
    round that compiles (the machine's speed drifts from minute to minute):
    [(new tokens, best seconds, the `Decoding` of the last run)] in order."""
    best, decodings = [np.inf] * len(calls), [None] * len(calls)
    for run in range(repeats + 1):
        for i, (new_tokens, speculation) in enumerate(calls):
            start = time.perf_counter()
            decodings[i] = zoo.generation.Decoding(lm, [prompt], new_tokens, speculation=speculation).run()
            if run:
                best[i] = min(best[i], time.perf_counter() - start)
    return [(decoding.new_tokens[0], seconds, decoding) for decoding, seconds in zip(decodings, best)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--vocabulary", type=int, default=49152)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--text-tokens", type=int, default=300)
    parser.add_argument("--begun", type=int, default=2, help="the rewrite's first tokens, given in the prompt")
    parser.add_argument("--new-tokens", type=int, help="default: the rest of the rewrite")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lookup-tokens", type=int, default=10)
    parser.add_argument("--draft-tokens", type=int, default=5)
    parser.add_argument("--weights", choices=("copying", "random"), default="copying")
    parser.add_argument("--edits", type=float, default=0.04, help="the share of the vocabulary a rewrite replaces")
    parser.add_argument("--noise", type=float, default=0.05, help="the scale of the random blocks' outputs")
    parser.add_argument("--quantize", choices=("int8", "int4"), help="both models' weights, once set")
    args = parser.parse_args(argv)

    target = build(args.preset, args.vocabulary, args.window)
    generator = np.random.default_rng(0)
    if args.weights == "copying":
        replacement = induction_copier(target, args.edits, args.noise, args.window)
        text = generator.choice(np.arange(1, args.vocabulary // 2), args.text_tokens, replace=False)
        rewrite = replacement[text].tolist()
        text = text.tolist()
    else:
        text = generator.integers(1, args.vocabulary, args.text_tokens).tolist()
        rewrite = text
    begun = args.begun
    if args.new_tokens is None:
        args.new_tokens = args.text_tokens - begun
    grounded = text + rewrite[:begun]  # the text, then its rewrite begun
    expected = rewrite[begun:begun + args.new_tokens]
    draft, layers, copied = layer_skip_draft(target, args.preset, args.vocabulary, args.window)
    if args.quantize:
        target.quantize(args.quantize)
        draft.quantize(args.quantize)
    rows = []
    for name, prompt, options in (
        ("prompt lookup", grounded, dict(prompt_lookup_num_tokens=args.lookup_tokens)),
        (f"draft model ({layers} of {len(target.backbone.blocks)} layers)", grounded,
         dict(assistant_model=draft, num_assistant_tokens=args.draft_tokens)),
    ):
        runs = timed(target, prompt, [(args.new_tokens, None), (1, None), (args.new_tokens, options), (1, options)],
                     args.repeats)
        (plain, plain_seconds, _), (_, plain_first, _), (speculated, seconds, decoding), (_, first, _) = runs
        speculation = decoding.speculation
        rows.append(dict(
            proposer=name, prompt_tokens=len(prompt), new_tokens=len(plain),
            plain_tokens_per_second=len(plain) / plain_seconds, tokens_per_second=len(speculated) / seconds,
            speed_up=plain_seconds / seconds,
            plain_decoding=(len(plain) - 1) / (plain_seconds - plain_first),
            decoding=(len(speculated) - 1) / (seconds - first),
            rounds=speculation.rounds, proposed=speculation.drafted,
            acceptance_rate=speculation.acceptance_rate, same_tokens=speculated == plain,
            rewritten=float(np.mean(np.equal(plain[:len(expected)], expected[:len(plain)]))),
        ))
    print(f"{args.preset}, {args.weights} weights, {args.quantize or 'float32'}, vocabulary {args.vocabulary}, "
          f"{args.new_tokens} new tokens, greedy, batch 1 (the draft: {copied} weights copied from the target)")
    print("tokens/s of the whole call, then of the decoding after the first token (the call less one of 1 new token)")
    print(f"{'proposer':30} {'prompt':>6} {'plain':>6} {'spec':>6} {'speed-up':>8} {'plain':>6} {'spec':>6} "
          f"{'speed-up':>8} {'rounds':>6} {'proposed':>8} {'accepted':>8} {'same':>5} {'rewrite':>7}")
    for row in rows:
        print(f"{row['proposer']:30} {row['prompt_tokens']:6d} {row['plain_tokens_per_second']:6.1f} "
              f"{row['tokens_per_second']:6.1f} {row['speed_up']:7.2f}x {row['plain_decoding']:6.1f} "
              f"{row['decoding']:6.1f} {row['decoding'] / row['plain_decoding']:7.2f}x {row['rounds']:6d} "
              f"{row['proposed']:8d} {row['acceptance_rate']:8.0%} {str(row['same_tokens']):>5} {row['rewritten']:7.0%}")
    return rows


if __name__ == "__main__":
    main()
