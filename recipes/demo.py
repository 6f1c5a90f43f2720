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

import sys

from recipes.errors import run_recipe
from recipes.recipe import run

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
    from recipes.flags import COUNT, POSITIVE_INT, Number, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train demo")
    parser.add_argument("--num-pairs", type=POSITIVE_INT, default=DEFAULTS["num_pairs"],
                        help="sentence pairs generated")
    parser.add_argument("--held-out-fraction", type=Number(float, above=0, below=1),
                        default=DEFAULTS["held_out_fraction"],
                        help="share of the sentences kept out of training")
    parser.add_argument("--sequence-length", type=POSITIVE_INT, default=DEFAULTS["sequence_length"],
                        help="longest sentence in words, with [START] / [END]")
    parser.add_argument("--num-samples", type=COUNT, default=DEFAULTS["num_samples"],
                        help="held-out translations printed")
    return parser


def parse(argv):
    """The flags, the preset checked."""
    from recipes.flags import check_preset, size_overrides

    parser = make_parser()
    args = parser.parse_args(argv)
    check_preset(parser, args.preset, "transformer", sizes=size_overrides(args))
    return args


def pairs(args, split):
    """The (english, german) sentences of `split` ("train" or "val", the
    held-out ones) of the grammar the run's arguments generate."""
    from zoo.data import DataError, held_out_split, toy_translation

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
        `{"val_accuracy": float}` on the validation split, `{"<split>_accuracy": float}` on another.
    """
    import numpy as np

    from recipes.run_folder import figure_name, load_model, read_run

    args = dict(read_run(folder)["args"])
    args["data"] = data or args["data"]
    english, german = pairs(args, split)
    model = model or load_model(folder)
    outputs = translate(model, english, args["sequence_length"] - 1)
    return {figure_name("accuracy", split): float(np.mean([o == r for o, r in zip(outputs, german)]))}


def translate(model, sentences, length):
    """Greedy translations of a list of sentences (`zoo.translate`), at
    most `length` words each."""
    import zoo

    return zoo.translate(model, list(sentences), max_length=length, num_beams=1)


def read_data(args):
    """The grammar's vocabulary and pipelines: a dict of vocabulary, train,
    val (the held-out pipeline), val_en and val_de (the held-out sentences)."""
    from zoo.data import int32_masks, seq2seq_dataset
    from zoo.tokenizers import WordVocabulary

    (train_en, train_de), (val_en, val_de) = pairs(vars(args), "train"), pairs(vars(args), "val")
    vocabulary = v = WordVocabulary.from_texts(train_en + train_de)

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

    print(f"{len(train_en):,} training pairs, {len(val_en):,} held-out pairs, {v.vocabulary_size} words", flush=True)
    return dict(vocabulary=vocabulary, train=batches(train_en, train_de, True), val=batches(val_en, val_de, False),
                val_en=val_en, val_de=val_de)


def open_folder(args, data):
    """The run folder, with the vocabulary in it."""
    from recipes.flags import size_overrides
    from recipes.recipe import open_run_folder

    folder = open_run_folder("demo", args, args.preset, size_overrides(args))
    data["vocabulary"].save(folder / VOCABULARY)
    return folder


def make_model(args, data):
    """The compiled encoder-decoder, carrying its `WordTokenizer`."""
    import keras

    import zoo
    from zoo.tokenizers import WordTokenizer
    from zoo.models.sharding import get_layout_map
    from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy, distribution_scope

    from recipes.flags import jit_compile_flag, size_overrides

    vocabulary = data["vocabulary"]
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = zoo.build(
            args.preset,
            vocabulary_size=vocabulary.vocabulary_size,
            max_sequence_length=args.sequence_length,
            tokenizer=WordTokenizer(vocabulary),
            **size_overrides(args),
        )
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate),
            loss=MaskedSparseCrossentropy(pad_id=vocabulary.pad_id),
            metrics=[MaskedAccuracy(pad_id=vocabulary.pad_id)],
            jit_compile=jit_compile_flag(args),
        )
    return model


def fit(model, args, folder, data):
    """--epochs epochs; model.keras is the best epoch by held-out loss;
    curves.png."""
    from recipes.plots import write_curves
    from recipes.run_folder import callbacks

    model.fit(data["train"], epochs=args.epochs, validation_data=data["val"], callbacks=callbacks(folder), verbose=2,
              shuffle=False)  # the pipeline shuffles
    write_curves(folder, model, title="toy English -> German")


def report(model, args, folder, data):
    """The saved model's share of held-out sentences translated exactly
    (`evaluate`), and --num-samples of its translations printed."""
    figures = evaluate(folder.path, model=model)
    show_translations(model, args, data["val_en"], data["val_de"])
    print(f"{figures['val_accuracy']:.1%} of {len(data['val_en'])} held-out sentences exactly right", flush=True)
    return figures


def show_translations(model, args, val_en, val_de):
    """--num-samples held-out sentences, translated by the saved model."""
    count = args.num_samples
    outputs = translate(model, val_en[:count], args.sequence_length - 1) if count > 0 else []
    for source, reference, output in list(zip(val_en, val_de, outputs))[:count]:
        mark = "ok" if output == reference else "WRONG"
        print(f"{source:32s} -> {output:32s} (reference: {reference}; {mark})")


def main(argv=None):
    """Trains as the module's docstring says; returns the held-out accuracy
    printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
