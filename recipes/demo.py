"""The synthetic demo: a tiny encoder-decoder learns a toy English -> German
grammar in a minute or two on a CPU, then translates sentences it never saw.

    python -m recipes.demo

The grammar (`zoo.data.toy_translation`) has gender agreement ("the small
dog" -> "der kleine Hund", "a small child" -> "ein kleines Kind"); the
held-out sentences (`zoo.data.held_out_split`) never occur in training. The
last lines printed are `run folder: RUN` and `val_accuracy=...`: the share
of held-out sentences the model translates exactly, with greedy decoding
(`zoo.generate`).

The run folder (--output, `runs/demo`): `model.keras` (the best epoch by
held-out loss), `vocabulary.json`, `history.csv`, `curves.png`,
`logs/`, `run.json`. After training:

    zoo translate runs/demo "a tired child waited"
    zoo eval runs/demo                 # the val_accuracy printed, again
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.data import (  # noqa: E402
    DataError,
    WordTokenizer,
    WordVocabulary,
    held_out_split,
    int32_masks,
    seq2seq_dataset,
    toy_translation,
)
from zoo.models.layout import get_layout_map  # noqa: E402
from zoo.training import (  # noqa: E402
    MaskedAccuracy,
    MaskedSparseCrossentropy,
    distribution_scope,
    start_distribution,
)

from recipes.common import (  # noqa: E402
    load_model,
    OutputFolder,
    callbacks,
    check_preset,
    finish,
    jit_compile_flag,
    read_run,
    recipe_parser,
    run_config,
    set_precision,
    size_overrides,
    startup_line,
    write_curves,
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
VOCABULARY = "vocabulary.json"


def make_parser():
    """The recipe's flags (`zoo train demo -h`)."""
    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train demo")
    parser.add_argument("--num-pairs", type=int, default=DEFAULTS["num_pairs"], help="sentence pairs generated")
    parser.add_argument("--held-out-fraction", type=float, default=DEFAULTS["held_out_fraction"],
                        help="share of the sentences kept out of training")
    parser.add_argument("--sequence-length", type=int, default=DEFAULTS["sequence_length"],
                        help="longest sentence in words, with [START] / [END]")
    parser.add_argument("--num-samples", type=int, default=DEFAULTS["num_samples"],
                        help="held-out translations printed")
    return parser


def parse(argv):
    parser = make_parser()
    args = parser.parse_args(argv)
    check_preset(parser, args.preset, "transformer")
    return args


def pairs(args, split):
    """The (english, german) sentences of `split` ("train" or "val", the
    held-out ones) of the grammar the run's arguments generate."""
    if args["data"] != "toy":
        raise DataError(f"--data {args['data']}: the demo trains on the synthetic grammar only; expected 'toy'")
    if split not in ("train", "val"):
        raise DataError(f"--split {split}: the demo's grammar has 'train' and 'val' (held-out) sentences")
    english, german = toy_translation(args["num_pairs"], seed=args["seed"])
    train, val = held_out_split(english, german, args["held_out_fraction"], args["seed"])
    return train if split == "train" else val


def evaluate(folder, data=None, split="val", model=None):
    """The share of `split`'s sentences the saved model translates exactly
    (greedy): the recipe's last step and `zoo eval` both call this.

    Args:
        folder: the run folder.
        data: "toy" (the only data of the demo) or None.
        split: "val" (the held-out sentences) or "train".
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        `("val_accuracy", float)`.
    """
    args = dict(read_run(folder)["args"])
    args["data"] = data or args["data"]
    english, german = pairs(args, split)
    model = model or load_model(folder)
    outputs = translate(model, english, args["sequence_length"] - 1)
    return "val_accuracy", float(np.mean([o == r for o, r in zip(outputs, german)]))


def translate(model, sentences, length):
    """Greedy translations of a list of sentences (`zoo.translate`), at
    most `length` words each."""
    return zoo.translate(model, list(sentences), max_length=length, num_beams=1)


def main(argv=None):
    args = parse(argv)
    overrides = size_overrides(args)
    # multi-worker: before TensorFlow runs anything
    start_distribution(args.strategy, mesh=args.mesh, batch_size=args.batch_size)
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
    print(startup_line("demo", args.preset, overrides), flush=True)
    config = run_config("demo", args, args.preset, overrides)
    folder = OutputFolder(args.output, args.overwrite, config=config, strategy=args.strategy)
    vocabulary.save(folder / VOCABULARY)

    # --- Model ---------------------------------------------------------------------
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = zoo.build(
            args.preset,
            vocabulary_size=v.vocabulary_size,
            max_sequence_length=args.sequence_length,
            tokenizer=WordTokenizer(vocabulary),
            **overrides,
        )
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate),
            loss=MaskedSparseCrossentropy(pad_id=v.pad_id),
            metrics=[MaskedAccuracy(pad_id=v.pad_id)],
            jit_compile=jit_compile_flag(args),
        )

    # --- Train: model.keras is the best epoch by held-out loss ----------------------
    model.fit(train, epochs=args.epochs, validation_data=val, callbacks=callbacks(folder), verbose=2)
    write_curves(folder, model, title="toy English -> German")

    # --- Translate sentences never seen in training, with the saved model ----------
    best = load_model(folder)
    _, exact = evaluate(folder.path, model=best)
    outputs = translate(best, val_en[: args.num_samples], args.sequence_length - 1) if args.num_samples > 0 else []
    for source, reference, output in list(zip(val_en, val_de, outputs))[: args.num_samples]:
        mark = "ok" if output == reference else "WRONG"
        print(f"{source:32s} -> {output:32s} (reference: {reference}; {mark})")
    seconds = time.time() - started
    print(f"{exact:.1%} of {len(val_en)} held-out sentences exactly right, in {seconds:.0f} s", flush=True)
    finish(folder, "val_accuracy", exact, total_seconds=seconds)
    return exact


if __name__ == "__main__":
    from recipes.common import run_recipe

    run_recipe(main)
