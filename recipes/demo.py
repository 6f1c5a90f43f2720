"""The synthetic demo: a tiny encoder-decoder learns a toy English -> German
grammar in a minute or two on a CPU, then translates sentences it never saw.

    python -m recipes.demo

The grammar (`zoo.data.toy_translation`) has gender agreement ("the small
dog" -> "der kleine Hund", "a small child" -> "ein kleines Kind"); the
held-out sentences (`zoo.data.held_out_split`) never occur in training. The
last line printed is `val_accuracy=...`: the share of held-out sentences the
model translates exactly, with greedy decoding (`zoo.generate`).
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.data import DataError, WordVocabulary, held_out_split, seq2seq_dataset, toy_translation  # noqa: E402
from zoo.saving import load_weights  # noqa: E402
from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy  # noqa: E402
from zoo.data.buckets import int32_masks  # noqa: E402
from zoo.training.run import (  # noqa: E402
    OutputFolder,
    callbacks,
    distribution_scope,
    start_distribution,
    final_line,
    jit_compile_flag,
    plot_history,
    recipe_parser,
    set_precision,
    size_overrides,
)

# --- Defaults ------------------------------------------------------------------
DEFAULTS = dict(
    data="toy",  # the synthetic grammar; nothing to download
    num_pairs=6000,
    held_out_fraction=0.1,
    preset="transformer-tiny",  # 2+2 layers, d=64, h=4
    epochs=3,  # one already gets ~98% of held-out sentences exactly right
    batch_size=64,
    learning_rate=2e-3,
    sequence_length=8,  # the longest sentence is 5 words, plus [START] / [END]
    num_samples=6,
    output="runs/demo",
)


def parse(argv):
    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS)
    parser.add_argument("--num-pairs", type=int, default=DEFAULTS["num_pairs"])
    parser.add_argument("--held-out-fraction", type=float, default=DEFAULTS["held_out_fraction"])
    parser.add_argument("--sequence-length", type=int, default=DEFAULTS["sequence_length"])
    parser.add_argument("--num-samples", type=int, default=DEFAULTS["num_samples"])
    return parser.parse_args(argv)


def translate(model, vocabulary, sentences, length):
    """Greedy translations of a list of sentences."""
    v = vocabulary
    result = zoo.generate(
        model,
        [[v.start_id]] * len(sentences),
        max_new_tokens=length,
        stop_token_ids=[v.end_id],
        source=[v.encode(s) for s in sentences],
    )
    return [v.decode(tokens) for tokens in result.sequences]


def main(argv=None):
    args = parse(argv)
    start_distribution(args.strategy)  # multi-worker: before TensorFlow runs anything
    started = time.time()
    keras.utils.set_random_seed(args.seed)
    set_precision(args.mixed_precision)
    if args.data != "toy":
        raise DataError(f"--data {args.data}: the demo trains on the synthetic grammar only; expected 'toy'")

    # --- Data ----------------------------------------------------------------------
    english, german = toy_translation(args.num_pairs, seed=args.seed)
    (train_en, train_de), (val_en, val_de) = held_out_split(english, german, args.held_out_fraction, args.seed)
    vocabulary = WordVocabulary.from_texts(train_en + train_de)
    v = vocabulary

    def batches(sources, targets, shuffle):
        batch_size = min(args.batch_size, len(sources))
        dataset = seq2seq_dataset(
            [v.encode(s) for s in sources],
            [v.encode(t) for t in targets],
            batch_size,
            args.sequence_length,
            args.sequence_length,
            v.start_id,
            v.end_id,
            shuffle=shuffle,
            seed=args.seed,
        )
        return int32_masks(dataset)  # bool masks cannot be split over replicas

    train, val = batches(train_en, train_de, True), batches(val_en, val_de, False)
    print(f"{len(train_en):,} training pairs, {len(val_en):,} held-out pairs, {v.vocabulary_size} words", flush=True)
    folder = OutputFolder(args.output, args.overwrite, config=vars(args), strategy=args.strategy)
    vocabulary.save(folder / "vocabulary.json")

    # --- Model ---------------------------------------------------------------------
    with distribution_scope(args.strategy):
        model = zoo.build(
            args.preset,
            vocabulary_size=v.vocabulary_size,
            max_sequence_length=args.sequence_length,
            **size_overrides(args),
        )
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate),
            loss=MaskedSparseCrossentropy(pad_id=v.pad_id),
            metrics=[MaskedAccuracy(pad_id=v.pad_id)],
            jit_compile=jit_compile_flag(args),
        )

    # --- Train ---------------------------------------------------------------------
    history = model.fit(train, epochs=args.epochs, validation_data=val, callbacks=callbacks(folder), verbose=2)
    plot_history(history.history, folder / "learning_curves.png", title="toy English -> German")
    if (folder / "best.keras").exists():
        load_weights(model, folder / "best.keras")

    # --- Translate sentences never seen in training ----------------------------
    outputs = translate(model, vocabulary, val_en, args.sequence_length - 1)
    exact = float(np.mean([o == r for o, r in zip(outputs, val_de)]))
    for source, reference, output in list(zip(val_en, val_de, outputs))[: args.num_samples]:
        mark = "ok" if output == reference else "WRONG"
        print(f"{source:32s} -> {output:32s} (reference: {reference}; {mark})")
    seconds = time.time() - started
    print(f"{exact:.1%} of {len(val_en)} held-out sentences exactly right, in {seconds:.0f} s", flush=True)
    folder.finish(val_accuracy=exact, total_seconds=seconds)
    final_line("val_accuracy", exact)
    return exact


if __name__ == "__main__":
    from zoo.training.run import run_recipe

    run_recipe(main)
