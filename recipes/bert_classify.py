"""Fine-tune a small BERT on SST-2 sentiment through its [CLS] token.

    python -m recipes.bert_classify --pretrained runs/bert_pretrain   # or: zoo train bert_classify

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
)


VOCABULARY = "vocabulary.txt"
VALIDATION_SPLIT = "dev"  # SST-2's labelled held-out split
# The default peak rate: a pretrained backbone is fine-tuned at half the rate
# that trains from scratch (at 2e-4 it passes its best dev accuracy within the
# first epoch; docs/results.md has both).
LEARNING_RATES = {"pretrained": 1e-4, "scratch": 2e-4}


def make_parser():
    """The recipe's flags (`zoo train bert_classify -h`)."""
    from recipes.flags import POSITIVE_INT, RATE, add_bert_flags, recipe_parser

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
    return parser


def parse(argv):
    """The flags, checked; --learning-rate defaults by where the backbone
    starts, and --pretrained fixes the sizes."""
    from recipes.flags import SIZE_FLAGS, check_preset, size_overrides

    parser = make_parser()
    args = parser.parse_args(argv)
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
    """The saved model's accuracy on every sentence of `split`: the
    recipe's last step and `zoo eval` both call this.

    Args:
        folder: the run folder.
        data: a labelled TSV folder or tfds:NAME; None is the run's own --data.
        split: "dev" (the run's validation split), "train", "test", ...
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        `{"val_accuracy": float}` on the validation split, `{"<split>_accuracy": float}` on another.
    """
    import numpy as np

    import zoo
    from zoo.data import read_labelled

    from recipes.run_folder import figure_name, load_model, read_run

    args = read_run(folder)["args"]
    split = VALIDATION_SPLIT if split == "val" else split
    sentences, labels = read_labelled(data or args["data"], split)
    model = model or load_model(folder)
    predicted = np.asarray(zoo.classify(model, sentences, batch_size=args["batch_size"]).labels)
    return {figure_name("accuracy", split, validation=VALIDATION_SPLIT): float(np.mean(predicted == np.asarray(labels)))}


def batches(token_ids, labels, batch_size, buckets, length, ids, shuffle, seed):
    """`[CLS] tokens [SEP]` batches padded to the shortest bucket bound
    that holds them. Returns (dataset, steps per pass)."""
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
        )

    lengths = [len(row) + 2 for row in token_ids]
    return bucketed_batches(pipeline, lengths, buckets, batch_size, max_length=length, shuffle=shuffle, seed=seed)


def read_data(args):
    """The backbone to start from (None: from scratch), the tokenizer and
    the pipelines, read before the output folder is touched: a dict of
    pretrained, source, tokenizer, length, num_classes, train, steps, dev,
    dev_steps."""
    from zoo.data import divisor_batch_size, read_labelled, token_id_lists, train_word_piece

    train_text, train_labels = read_labelled(args.data, "train")
    dev_text, dev_labels = read_labelled(args.data, "dev")
    num_classes = max(2, int(max(train_labels.max(), dev_labels.max())) + 1)
    if args.pretrained:
        pretrained, tokenizer, source = pretrained_parts(args.pretrained, num_classes)
        length = min(args.sequence_length, pretrained.max_sequence_length)
    else:
        pretrained, source = None, "from scratch"
        tokenizer = train_word_piece(train_text, args.vocabulary_size)
        length = args.sequence_length
    vocabulary = tokenizer.get_vocabulary()
    ids = {token: i for i, token in enumerate(vocabulary)}
    train_ids, dev_ids = token_id_lists(tokenizer, train_text), token_id_lists(tokenizer, dev_text)
    train, steps = batches(train_ids, train_labels, args.batch_size, DEFAULTS["buckets"], length, ids, True, args.seed)
    # Dev: one length, a batch size that divides it, so every sentence counts.
    dev_batch = divisor_batch_size(len(dev_ids), args.batch_size)
    dev, dev_steps = batches(dev_ids, dev_labels, dev_batch, (length,), length, ids, False, args.seed)
    print(
        f"{len(train_ids):,} training sentences, {len(dev_ids):,} dev sentences, "
        f"vocabulary {len(vocabulary):,}, {steps} steps an epoch, backbone: {source}",
        flush=True,
    )
    return dict(pretrained=pretrained, source=source, tokenizer=tokenizer, length=length, num_classes=num_classes,
                train=train, steps=steps, dev=dev, dev_steps=dev_steps)


def overrides_of(args):
    """The size overrides: with --pretrained only dropout (the sizes are
    the backbone's)."""
    from recipes.flags import size_overrides

    overrides = size_overrides(args)
    return {k: v for k, v in overrides.items() if k == "dropout"} if args.pretrained else overrides


def open_folder(args, data):
    """The run folder, with the vocabulary in it."""
    from zoo.data import save_vocabulary

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
            backbone, num_classes=data["num_classes"], dropout=args.classifier_dropout, tokenizer=tokenizer
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
    fit_epochs(model, args, folder, data, best, "SST-2 [CLS] fine-tuning", validation="dev")



def main(argv=None):
    """Fine-tunes as the module's docstring says; returns the dev accuracy
    printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
