"""Pretrain a small BERT with the masked language model objective.

    python -m recipes.bert_pretrain      # or: zoo train bert_pretrain

Devlin et al. (2019) at CPU size: a WordPiece vocabulary trained on the
text, 15% of the tokens selected (80% [MASK], 10% random, 10% kept, keras-hub's
`MaskedLMMaskGenerator`'s rule drawn from --seed, fresh masks every epoch), the loss on the selected
positions only, through a head tied to the token embedding. The text is the
sentences of a labelled TSV folder (`--data`, labels ignored; SST-2's train
split by default) plus any `--text` files (one sentence a line, e.g. the
English side of Multi30k).

The run folder (--output, `runs/bert_pretrain`): `model.keras` (the masked
LM, best epoch by held-out loss; `bert_classify --pretrained RUN` starts
from its backbone), `vocabulary.txt`, `history.csv`, `curves.png`, `logs/`,
`run.json`. The last lines printed are `run folder: RUN` and `val_loss=...`,
the masked-LM loss on the held-out sentences, with masks drawn once from
--seed (so `zoo eval RUN` prints it again).
"""

import sys

from recipes.errors import run_recipe
from recipes.recipe import run

# --- Defaults ------------------------------------------------------------------
DEFAULTS = dict(
    data="sst2",  # a registered data set (fetched and cached), a folder with train.tsv, or tfds:glue/sst2
    split="train",
    preset="bert-small",  # 4 layers, h=4
    hidden_dim=128,  # CPU size: d=128, d_ff=512 (the preset has 256 / 1024)
    intermediate_dim=512,
    epochs=20,
    batch_size=128,
    learning_rate=1e-3,  # peak, after a linear warm-up, then cosine decay
    warmup_fraction=0.06,
    weight_decay=0.01,
    vocabulary_size=8000,
    sequence_length=64,  # longest [CLS] ... [SEP] (longer sentences are cut)
    buckets=(16, 32, 64),
    held_out=1000,  # sentences kept aside for the validation loss
    output="runs/bert_pretrain",
    jit_compile="true",  # XLA; Keras' "auto" turns it off on a CPU
)


VOCABULARY = "vocabulary.txt"
MASK_RATE = 0.15  # BERT: 15% of the tokens selected; of those 80% [MASK], 10% random, 10% kept


def make_parser():
    """The recipe's flags (`zoo train bert_pretrain -h`)."""
    from recipes.flags import POSITIVE_INT, add_bert_flags, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train bert_pretrain")
    parser.add_argument("--text", nargs="*", default=[], help="more UTF-8 text files, one sentence a line")
    parser.add_argument("--split", default=DEFAULTS["split"], help="the TSV split whose sentences are read")
    parser.add_argument("--vocabulary-size", type=POSITIVE_INT, default=DEFAULTS["vocabulary_size"],
                        help="WordPieces of the vocabulary trained on the text")
    add_bert_flags(parser, DEFAULTS)
    parser.add_argument("--held-out", type=POSITIVE_INT, default=DEFAULTS["held_out"],
                        help="sentences kept aside for the validation loss (at most a tenth)")
    return parser


def parse(argv):
    """The flags, the preset checked."""
    from recipes.flags import check_preset, size_overrides

    parser = make_parser()
    args = parser.parse_args(argv)
    check_preset(parser, args.preset, "bert", sizes=size_overrides(args))
    return args


def read_sentences(args):
    """The --data TSV's sentences, then each --text file's lines, without
    repeats (SST-2 lists some phrases more than once)."""
    from zoo.data import read_labelled, read_text

    sentences, _ = read_labelled(args["data"], args["split"])
    for path in args["text"]:
        sentences = sentences + [line.strip() for line in read_text(path).split("\n") if line.strip()]
    return list(dict.fromkeys(sentences))


def split_sentences(sentences, held_out, seed):
    """(training sentences, held-out sentences): a random `held_out`
    (at most a tenth) are kept aside."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(sentences))
    count = min(held_out, len(sentences) // 10)
    return [sentences[i] for i in order[count:]], [sentences[i] for i in order[:count]]


def batches(token_ids, batch_size, args, ids, vocabulary_size, shuffle, seed):
    """Masked-LM batches padded to the shortest bucket bound that holds
    them. Returns (dataset, steps per pass)."""
    from zoo.data import bucketed_batches, masked_lm_dataset

    def pipeline(rows, bound):
        return masked_lm_dataset(
            [token_ids[r] for r in rows],
            batch_size,
            bound,
            vocabulary_size,
            ids["[MASK]"],
            ids["[CLS]"],
            ids["[SEP]"],
            shuffle=shuffle,
            seed=seed,
        )

    lengths = [len(row) + 2 for row in token_ids]  # [CLS] ... [SEP]
    return bucketed_batches(
        pipeline, lengths, DEFAULTS["buckets"], batch_size, max_length=args.sequence_length, shuffle=shuffle, seed=seed
    )


def fixed_masks(token_ids, sequence_length, vocabulary, seed=0):
    """Masked-LM examples whose masks are drawn once, by NumPy from `seed`,
    with BERT's rule (each token selected with probability 0.15, at least
    one a sentence; 80% -> [MASK], 10% -> a random token, 10% kept), so
    that an evaluation gives the same figure every time.

    Returns:
        (inputs, mask_ids, mask_weights) as `masked_lm_dataset` gives them,
        as NumPy arrays of N rows.
    """
    import numpy as np

    ids = {token: i for i, token in enumerate(vocabulary)}
    rng = np.random.default_rng(seed)
    n, t = len(token_ids), sequence_length
    p = max(1, min(int(np.ceil(2 * MASK_RATE * t)), t))
    packed = np.zeros((n, t), "int32")
    padding = np.zeros((n, t), "int32")
    positions, mask_ids = np.zeros((n, p), "int32"), np.zeros((n, p), "int32")
    weights = np.zeros((n, p), "float32")
    for i, row in enumerate(token_ids):
        row = [ids["[CLS]"], *row[: t - 2], ids["[SEP]"]]
        packed[i, : len(row)], padding[i, : len(row)] = row, 1
        candidates = np.arange(1, len(row) - 1)
        chosen = candidates[rng.random(len(candidates)) < MASK_RATE]
        if not len(chosen):
            chosen = rng.choice(candidates, 1)
        chosen = chosen[:p]
        positions[i, : len(chosen)], mask_ids[i, : len(chosen)] = chosen, packed[i, chosen]
        weights[i, : len(chosen)] = 1.0
    masked = packed.copy()
    draw = rng.random(positions.shape)
    random_ids = rng.integers(0, len(vocabulary), positions.shape)
    rows = np.arange(n)[:, None].repeat(p, axis=1)
    selected = weights > 0
    replace = selected & (draw < 0.8)
    masked[rows[replace], positions[replace]] = ids["[MASK]"]
    randomize = selected & (draw >= 0.8) & (draw < 0.9)
    masked[rows[randomize], positions[randomize]] = random_ids[randomize]
    inputs = {"token_ids": masked, "segment_ids": np.zeros_like(packed), "padding_mask": padding,
              "mask_positions": positions}
    return inputs, mask_ids, weights


def evaluate(folder, data=None, split="val", model=None):
    """The masked-LM loss (nats per selected token) of the saved model,
    masks drawn once from the run's seed: the recipe's last step and
    `zoo eval` both call this.

    Args:
        folder: the run folder.
        data: a labelled TSV folder or tfds:NAME (labels ignored); None is
            the run's own --data.
        split: with the run's own data, "val" is its held-out sentences;
            any other split is all the sentences of `{split}.tsv`.
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        `{"val_loss": float}` on the validation split, `{"<split>_loss": float}` on another.
    """
    from zoo.data import DataError, read_labelled
    from zoo.tokenizers import token_id_lists

    from recipes.lm_data import mean_cross_entropy
    from recipes.run_folder import figure_name, load_model, read_run

    args = read_run(folder)["args"]
    if data is None and split == "val":
        _, sentences = split_sentences(read_sentences(args), args["held_out"], args["seed"])
    else:
        sentences, _ = read_labelled(data or args["data"], split)
    model = model or load_model(folder)
    tokenizer = model.tokenizer
    rows = [row for row in token_id_lists(tokenizer, sentences) if row]
    if not rows:
        raise DataError(f"{data or args['data']} {split}: no sentence with a token; expected some text")
    inputs, mask_ids, weights = fixed_masks(rows, args["sequence_length"], tokenizer.get_vocabulary(), args["seed"])
    return {figure_name("loss", split): mean_cross_entropy(model, inputs, mask_ids, args["batch_size"], weights)}


def read_data(args):
    """The tokenizer and the train and held-out pipelines, read before the
    output folder is touched: a dict of tokenizer, train, steps, val,
    val_steps."""
    from zoo.tokenizers import token_id_lists, train_word_piece

    train_text, val_text = split_sentences(read_sentences(vars(args)), args.held_out, args.seed)
    tokenizer = train_word_piece(train_text, args.vocabulary_size)
    vocabulary = tokenizer.get_vocabulary()
    ids = {token: i for i, token in enumerate(vocabulary)}
    train_ids = [row for row in token_id_lists(tokenizer, train_text) if row]
    val_ids = [row for row in token_id_lists(tokenizer, val_text) if row]
    train, steps = batches(train_ids, args.batch_size, args, ids, len(vocabulary), True, args.seed)
    val_batch = min(args.batch_size, len(val_ids))
    val, val_steps = batches(val_ids, val_batch, args, ids, len(vocabulary), False, args.seed)
    print(
        f"{len(train_ids):,} training sentences, {len(val_ids):,} held out, "
        f"vocabulary {len(vocabulary):,} WordPieces, {steps} steps an epoch",
        flush=True,
    )
    return dict(tokenizer=tokenizer, train=train, steps=steps, val=val, val_steps=val_steps)


def open_folder(args, data):
    """The run folder, with the vocabulary in it."""
    from zoo.tokenizers import save_vocabulary

    from recipes.flags import size_overrides
    from recipes.recipe import open_run_folder

    folder = open_run_folder("bert_pretrain", args, args.preset, size_overrides(args))
    save_vocabulary(data["tokenizer"], folder / VOCABULARY)
    return folder


def make_model(args, data):
    """The compiled masked LM: AdamW, a linear warm-up then cosine decay
    to a tenth of the peak, the loss on the selected positions only."""
    import keras

    import zoo
    from zoo.models.sharding import get_layout_map
    from zoo.training import WarmupCosineDecay, adamw, distribution_scope

    from recipes.flags import jit_compile_flag, size_overrides

    tokenizer = data["tokenizer"]
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = zoo.build(
            args.preset,
            task="masked_lm",
            vocabulary_size=len(tokenizer.get_vocabulary()),
            max_sequence_length=args.sequence_length,
            tokenizer=tokenizer,
            **size_overrides(args),
        )
        # The masked-LM loss never reaches the [CLS] pooler: it is bert_classify's to train.
        model.backbone.pooler.trainable = False
        total = data["steps"] * args.epochs
        schedule = WarmupCosineDecay(
            args.learning_rate, int(args.warmup_fraction * total), total, args.learning_rate / 10
        )
        model.compile(
            optimizer=adamw(schedule, weight_decay=args.weight_decay, beta_2=0.98, model=model),
            # The mean over the selected positions (mask_weights), not over all P slots.
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
            weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            jit_compile=jit_compile_flag(args),
        )
    print(f"{args.preset} masked LM: {model.count_params():,} parameters", flush=True)
    return model


def fit(model, args, folder, data):
    """--epochs epochs; model.keras is the best epoch by held-out loss;
    curves.png."""
    from recipes.recipe import fit_epochs
    from recipes.run_folder import callbacks

    fit_epochs(model, args, folder, data, callbacks(folder), f"{args.preset} masked LM")



def main(argv=None):
    """Pretrains as the module's docstring says; returns the held-out loss
    printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
