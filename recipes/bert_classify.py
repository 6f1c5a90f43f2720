"""Fine-tune a small BERT on SST-2 sentiment, or your own labelled file, through its [CLS] token.

    python -m recipes.bert_classify --pretrained runs/bert_pretrain   # or: zoo train bert_classify
    zoo train bert_classify --data tickets.csv --validation tickets-dev.csv --text-column body --label-column team
    zoo train bert_classify --data pairs.jsonl --text-column premise --text-pair-column hypothesis

--data is SST-2 by default; or a CSV, TSV or JSONL file of your own, whose
columns --text-column, --label-column and, for sentence pairs (packed as
`[CLS] text [SEP] pair [SEP]` with BERT's segment ids),
--text-pair-column name. Labels are any strings: the classes are the
training file's label set, and their names travel inside the saved model
(`zoo classify` prints them). The validation rows are --validation FILE,
or --validation-fraction of --data, held out by --seed.

With --pretrained, the backbone and its WordPiece vocabulary come from a
`recipes.bert_pretrain` run folder, or (through `zoo.from_pretrained`) from
a keras-hub preset or Hugging Face BERT folder; without it, the same recipe
trains from scratch with a vocabulary trained on the training sentences,
for the comparison. The classifier is BERT's: pooled [CLS] output ->
dropout -> Dense(num_classes), AdamW with a linear warm-up and cosine
decay to a peak rate of 1e-4 with --pretrained and 2e-4 from scratch
(--learning-rate sets another).

The run folder (--output, `runs/bert_classify`): `model.keras` (the best
epoch by dev accuracy), `vocabulary.txt`, `history.csv`, `curves.png`,
`logs/`, `run.json`. The last lines printed are `run folder: RUN` and
`val_accuracy=...`: the saved model's accuracy on every dev sentence.
After training:

    zoo classify runs/bert_classify "a gripping, funny film" "a dull mess"
    zoo eval runs/bert_classify --split dev
"""

import sys
from pathlib import Path

from recipes.errors import run_recipe
from recipes.recipe import run

# --- Defaults ------------------------------------------------------------------
DEFAULTS = dict(
    data="sst2",  # a registered data set (fetched and cached), a folder of train.tsv and dev.tsv, or tfds:glue/sst2
    preset="bert-small",  # from scratch: 4 layers, h=4, at the sizes below
    hidden_dim=128,
    intermediate_dim=512,
    epochs=3,
    batch_size=64,
    learning_rate=None,  # peak, after a linear warm-up, then cosine decay: LEARNING_RATES below
    warmup_fraction=0.1,
    weight_decay=0.01,
    classifier_dropout=0.1,
    vocabulary_size=8000,  # from scratch only
    sequence_length=64,
    buckets=(16, 32, 64),
    output="runs/bert_classify",
    jit_compile="true",  # XLA; Keras' "auto" turns it off on a CPU
    text_column="text",  # the columns of a CSV, TSV or JSONL --data
    label_column="label",
    validation_fraction=0.1,  # of a --data file without --validation
)


VOCABULARY = "vocabulary.txt"
VALIDATION_SPLIT = "dev"  # SST-2's labelled held-out split
# The default peak rate: a pretrained backbone is fine-tuned at half the rate
# that trains from scratch (at 2e-4 it passes its best dev accuracy within the
# first epoch; docs/results.md has both).
LEARNING_RATES = {"pretrained": 1e-4, "scratch": 2e-4}


def make_parser():
    """The recipe's flags (`zoo train bert_classify -h`)."""
    from recipes.flags import POSITIVE_INT, RATE, Number, add_bert_flags, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train bert_classify")
    parser.add_argument(
        "--pretrained", default=None,
        help="a bert_pretrain run folder, or a BERT checkpoint: a keras-hub preset / Hugging Face folder or a "
        "handle (hf://ORG/NAME[@REVISION]); none: from scratch",
    )
    parser.add_argument("--vocabulary-size", type=POSITIVE_INT, default=DEFAULTS["vocabulary_size"],
                        help="WordPieces of the vocabulary trained on the sentences (from scratch only)")
    add_bert_flags(parser, DEFAULTS)
    parser.add_argument("--classifier-dropout", type=RATE, default=DEFAULTS["classifier_dropout"],
                        help="dropout before the classifier's Dense layer")
    parser.add_argument("--text-column", default=DEFAULTS["text_column"],
                        help="the text's column of a CSV, TSV or JSONL --data")
    parser.add_argument("--text-pair-column", default=None,
                        help="a second text's column, for sentence pairs ([CLS] text [SEP] pair [SEP])")
    parser.add_argument("--label-column", default=DEFAULTS["label_column"],
                        help="the label's column of a CSV, TSV or JSONL --data (any strings)")
    parser.add_argument("--validation", default=None,
                        help="a CSV, TSV or JSONL file of validation rows, with --data's columns")
    parser.add_argument("--validation-fraction", type=Number(float, above=0, below=1),
                        default=DEFAULTS["validation_fraction"],
                        help="the share of a --data file held out for validation without --validation")
    return parser


def parse(argv):
    """The flags, checked; --learning-rate defaults by where the backbone
    starts, and --pretrained fixes the sizes."""
    from recipes.flags import SIZE_FLAGS, check_preset, size_overrides

    parser = make_parser()
    args = parser.parse_args(argv)
    from zoo.data import is_table

    if args.validation is not None and not is_table(args.data):
        parser.error(f"--validation {args.validation}: with --data {args.data}; expected --data to be a CSV, TSV or "
                     "JSONL file (a data set's folder or name brings its own dev split)")
    for flag in ("data", "validation"):
        value = getattr(args, flag)
        if value is not None and is_table(value) and not Path(value).is_file():
            parser.error(f"--{flag} {value}: no such file; expected a CSV, TSV or JSONL file")
    check_preset(parser, args.preset, "bert", sizes=size_overrides(args))
    if args.learning_rate is None:
        args.learning_rate = LEARNING_RATES["pretrained" if args.pretrained else "scratch"]
    if args.pretrained:
        changed = [n for n in SIZE_FLAGS if n != "dropout" and getattr(args, n, None) != DEFAULTS.get(n)]
        if changed:
            flags = ", ".join("--" + n.replace("_", "-") for n in changed)
            parser.error(f"{flags}: the sizes are the pretrained backbone's with --pretrained; drop {flags}")
    return args


def pretrained_parts(target, num_classes):
    """(backbone, tokenizer, where) of --pretrained: a bert_pretrain run
    folder, or a keras-hub / Hugging Face folder or a handle of one
    (fetched first, then checked as a folder) through
    `zoo.from_pretrained`; a `DataError` names what is missing."""
    import zoo
    from zoo.data import DataError

    from recipes.run_folder import is_run_folder, load_model, read_run

    folder = zoo.checkpoints.checkpoint_folder(target)
    if is_run_folder(folder):
        record = read_run(folder)
        if record.get("recipe") != "bert_pretrain":
            raise DataError(
                f"{folder}: a {record.get('recipe')} run; expected a bert_pretrain run folder for --pretrained"
            )
        model = load_model(folder)
        return model.backbone, model.tokenizer, f"the bert_pretrain run {folder}"
    if not folder.is_dir():
        raise DataError(
            f"{folder}: does not exist; expected a bert_pretrain run folder (run.json, model.keras), "
            "or a keras-hub preset or Hugging Face BERT folder, or a handle (hf://ORG/NAME)"
        )
    from_pretrained = getattr(zoo, "from_pretrained", None)
    if from_pretrained is None:
        raise DataError(
            f"{folder}: not a zoo run folder (no run.json and model.keras); loading keras-hub or Hugging Face "
            "folders needs `zoo.from_pretrained`, which this installation lacks"
        )
    model = from_pretrained(folder, task="classifier", num_classes=num_classes)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise DataError(f"{folder}: the checkpoint has no tokenizer files; expected its WordPiece vocabulary")
    return model.backbone, tokenizer, f"the checkpoint {target}"


def evaluate(folder, data=None, split=VALIDATION_SPLIT, model=None):
    """The saved model's figures on every sentence of `split`: the
    recipe's last step and `zoo eval` both call this.

    Args:
        folder: the run folder.
        data: a labelled TSV folder, tfds:NAME, or a CSV, TSV or JSONL file
            with the run's columns; None is the run's own data.
        split: "dev" (the run's validation split), "train", "test", ...
            (of a file given as `data`, every row counts).
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        Each class's precision, recall and F1 (`val_precision/NAME`, ...),
        their macro mean, then the accuracy (`val_accuracy`, or
        `<split>_accuracy` on another split), last.
    """
    import numpy as np

    import zoo

    from recipes.run_folder import figure_name, load_model, read_run

    args = read_run(folder)["args"]
    split = VALIDATION_SPLIT if split == "val" else split
    model = model or load_model(folder)
    names = getattr(model, "label_names", None)
    sentences, labels = labelled_rows(args, data, split, names)
    predicted = np.asarray(zoo.classify(model, sentences, batch_size=args["batch_size"]).labels)
    if names is not None:
        predicted = np.asarray([names.index(label) for label in predicted])
    figures = per_class_figures(labels, predicted, names or [str(c) for c in range(model.num_classes)], split)
    figures[figure_name("accuracy", split, validation=VALIDATION_SPLIT)] = float(np.mean(predicted == labels))
    return figures


def per_class_figures(labels, predicted, names, split):
    """{"<split>_precision/NAME", "_recall/NAME", "_f1/NAME" for each class,
    then "<split>_macro_f1"}: a class never predicted has precision 0."""
    import numpy as np

    from recipes.run_folder import figure_name

    figures, f1s = {}, []
    for c, name in enumerate(names):
        true_positive = float(np.sum((predicted == c) & (labels == c)))
        precision = true_positive / max(float(np.sum(predicted == c)), 1.0)
        recall = true_positive / max(float(np.sum(labels == c)), 1.0)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        for metric, value in (("precision", precision), ("recall", recall), ("f1", f1)):
            figures[f"{figure_name(metric, split, validation=VALIDATION_SPLIT)}/{name}"] = value
        f1s.append(f1)
    figures[figure_name("macro_f1", split, validation=VALIDATION_SPLIT)] = float(np.mean(f1s))
    return figures


def labelled_rows(args, data, split, names):
    """(sentences, int labels) of `split` of the run's data (`args`, its
    run.json flags) or of `data`: sentences are str, or (text, pair)
    tuples for sentence pairs."""
    import numpy as np

    from zoo.data import is_table, label_ids, read_labelled

    source = data or args["data"]
    if not is_table(source) and not (data is None and args.get("validation")):
        return read_labelled(source, split)
    if data is None and split == VALIDATION_SPLIT:
        rows = validation_rows(args)
    elif data is None and split == "train":
        rows = training_rows(args)
    else:
        rows = read_table(args, source)
    names = names or [str(c) for c in range(int(max(map(int, rows[args["label_column"]]))) + 1)]
    labels = np.asarray(label_ids(rows, args["label_column"], list(names), "the model's labels"), dtype=np.int32)
    return sentences_of(rows, args), labels


def read_table(args, path):
    """The rows of a CSV, TSV or JSONL file with the run's columns."""
    from zoo.data import read_columns

    pair = args.get("text_pair_column")
    columns = [args["text_column"], args["label_column"]] + ([pair] if pair else [])
    return read_columns(path, columns)


def sentences_of(rows, args):
    pair = args.get("text_pair_column")
    texts = rows[args["text_column"]]
    return list(zip(texts, rows[pair])) if pair else list(texts)


def training_rows(args):
    """The training rows of a --data file: all of them with --validation,
    else those not held out (--validation-fraction, by --seed)."""
    from zoo.data import hold_out

    rows = read_table(args, args["data"])
    return rows if args.get("validation") else _subset(rows, hold_out(len(rows), args["validation_fraction"],
                                                                      args["seed"])[0])


def validation_rows(args):
    """The validation rows: --validation's, or those held out of --data."""
    from zoo.data import hold_out

    if args.get("validation"):
        return read_table(args, args["validation"])
    rows = read_table(args, args["data"])
    return _subset(rows, hold_out(len(rows), args["validation_fraction"], args["seed"])[1])


def _subset(rows, indices):
    from zoo.data import Columns

    return Columns({name: [values[i] for i in indices] for name, values in rows.items()},
                   [rows.lines[i] for i in indices], rows.path)


def batches(token_ids, labels, batch_size, buckets, length, ids, shuffle, seed, pair_ids=None):
    """`[CLS] tokens [SEP]` (or `[CLS] tokens [SEP] pair [SEP]`) batches
    padded to the shortest bucket bound that holds them. Returns (dataset,
    steps per pass)."""
    from zoo.data import bucketed_batches, classification_dataset

    def pipeline(rows, bound):
        return classification_dataset(
            [token_ids[r] for r in rows],
            labels[rows],
            batch_size,
            bound,
            ids["[CLS]"],
            ids["[SEP]"],
            shuffle=shuffle,
            seed=seed,
            pair_ids=None if pair_ids is None else [pair_ids[r] for r in rows],
        )

    lengths = [len(row) + 2 + (0 if pair_ids is None else len(pair_ids[i]) + 1) for i, row in enumerate(token_ids)]
    return bucketed_batches(pipeline, lengths, buckets, batch_size, max_length=length, shuffle=shuffle, seed=seed)


def read_data(args):
    """The backbone to start from (None: from scratch), the tokenizer and
    the pipelines, read before the output folder is touched: a dict of
    pretrained, source, tokenizer, length, num_classes, label_names, train,
    steps, dev, dev_steps."""
    import numpy as np

    from zoo.data import DataError, divisor_batch_size, read_labelled
    from zoo.tokenizers import token_id_lists, train_word_piece

    names = None
    if args.text_pair_column is not None and not _own_file(args):
        raise DataError(f"--text-pair-column {args.text_pair_column}: with --data {args.data}; expected a CSV, TSV "
                        "or JSONL file with that column")
    if _own_file(args):
        train_text, train_labels, dev_text, dev_labels, names = own_labelled_rows(args)
    else:
        train_text, train_labels = read_labelled(args.data, "train")
        dev_text, dev_labels = read_labelled(args.data, "dev")
    num_classes = len(names) if names else max(2, int(max(train_labels.max(), dev_labels.max())) + 1)
    if args.pretrained:
        pretrained, tokenizer, source = pretrained_parts(args.pretrained, num_classes)
        length = min(args.sequence_length, pretrained.max_sequence_length)
    else:
        pretrained, source = None, "from scratch"
        texts = [t for row in train_text for t in (row if isinstance(row, tuple) else (row,))]
        tokenizer = train_word_piece(texts, args.vocabulary_size)
        length = args.sequence_length
    vocabulary = tokenizer.get_vocabulary()
    ids = {token: i for i, token in enumerate(vocabulary)}

    def tokenized(rows):
        if rows and isinstance(rows[0], tuple):
            return token_id_lists(tokenizer, [a for a, _ in rows]), token_id_lists(tokenizer, [b for _, b in rows])
        return token_id_lists(tokenizer, rows), None

    (train_ids, train_pairs), (dev_ids, dev_pairs) = tokenized(train_text), tokenized(dev_text)
    train, steps = batches(train_ids, np.asarray(train_labels), args.batch_size, DEFAULTS["buckets"], length, ids,
                           True, args.seed, train_pairs)
    # Dev: one length, a batch size that divides it, so every sentence counts.
    dev_batch = divisor_batch_size(len(dev_ids), args.batch_size)
    dev, dev_steps = batches(dev_ids, np.asarray(dev_labels), dev_batch, (length,), length, ids, False, args.seed,
                             dev_pairs)
    classes = f", {num_classes} classes ({', '.join(names)})" if names else ""
    print(
        f"{len(train_ids):,} training {'pairs' if train_pairs else 'sentences'}, {len(dev_ids):,} dev "
        f"{'pairs' if dev_pairs else 'sentences'}{classes}, vocabulary {len(vocabulary):,}, {steps} steps an epoch, "
        f"backbone: {source}",
        flush=True,
    )
    return dict(pretrained=pretrained, source=source, tokenizer=tokenizer, length=length, num_classes=num_classes,
                label_names=names, train=train, steps=steps, dev=dev, dev_steps=dev_steps)


def _own_file(args):
    from zoo.data import is_table

    return is_table(args.data)


def own_labelled_rows(args):
    """(train sentences, train labels, dev sentences, dev labels, label
    names) of a CSV, TSV or JSONL --data: the classes are the training
    rows' label set; a validation label outside it is refused, naming
    its file and line."""
    import numpy as np

    from zoo.data import DataError, label_ids, label_names

    flags = vars(args)
    train, dev = training_rows(flags), validation_rows(flags)
    names = label_names(train[args.label_column])
    if len(names) < 2:
        raise DataError(f"{args.data}: every training row has the label {names[0]!r}; expected at least 2 classes "
                        f"in --label-column {args.label_column}")
    train_labels = np.asarray(label_ids(train, args.label_column, names), dtype=np.int32)
    dev_labels = np.asarray(label_ids(dev, args.label_column, names), dtype=np.int32)
    return sentences_of(train, flags), train_labels, sentences_of(dev, flags), dev_labels, names


def overrides_of(args):
    """The size overrides: with --pretrained only dropout (the sizes are
    the backbone's)."""
    from recipes.flags import size_overrides

    overrides = size_overrides(args)
    return {k: v for k, v in overrides.items() if k == "dropout"} if args.pretrained else overrides


def open_folder(args, data):
    """The run folder, with the vocabulary in it."""
    from zoo.tokenizers import save_vocabulary

    from recipes.recipe import open_run_folder

    shown = None if data["pretrained"] is None else data["source"]
    folder = open_run_folder("bert_classify", args, args.preset, overrides_of(args), shown=shown,
                             pretrained=args.pretrained)
    save_vocabulary(data["tokenizer"], folder / VOCABULARY)
    return folder


def make_model(args, data):
    """The compiled classifier: BERT's [CLS] head on the pretrained
    backbone (a copy, with --dropout) or a new one; AdamW with a linear
    warm-up and cosine decay."""
    import keras

    import zoo
    from zoo.models import BertClassifier
    from zoo.models.sharding import get_layout_map
    from zoo.training import WarmupCosineDecay, adamw, distribution_scope

    from recipes.flags import jit_compile_flag

    overrides, pretrained, tokenizer = overrides_of(args), data["pretrained"], data["tokenizer"]
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        if pretrained is not None:
            skip = ("name", "trainable", "tokenizer")
            backbone_config = {k: v for k, v in pretrained.get_config().items() if k not in skip}
            backbone = type(pretrained).from_config({**backbone_config, **overrides})
            backbone.set_weights(pretrained.get_weights())
        else:
            backbone = zoo.build(
                args.preset, vocabulary_size=len(tokenizer.get_vocabulary()), max_sequence_length=data["length"],
                **overrides,
            )
        model = BertClassifier(
            backbone, num_classes=data["num_classes"], dropout=args.classifier_dropout, tokenizer=tokenizer,
            label_names=data["label_names"],
        )
        total = data["steps"] * args.epochs
        schedule = WarmupCosineDecay(args.learning_rate, int(args.warmup_fraction * total), total, 0.0)
        model.compile(
            optimizer=adamw(schedule, weight_decay=args.weight_decay, beta_2=0.999, model=model),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            jit_compile=jit_compile_flag(args),
        )
    print(f"BERT classifier: {model.count_params():,} parameters", flush=True)
    return model


def fit(model, args, folder, data):
    """--epochs epochs; model.keras is the best epoch by dev accuracy;
    curves.png."""
    from recipes.recipe import fit_epochs
    from recipes.run_folder import callbacks

    best = callbacks(folder, monitor="val_accuracy", mode="max")
    title = "SST-2 [CLS] fine-tuning" if not _own_file(args) else f"{Path(args.data).name} [CLS] fine-tuning"
    fit_epochs(model, args, folder, data, best, title, validation="dev")



def main(argv=None):
    """Fine-tunes as the module's docstring says; returns the dev accuracy
    printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
