"""Pretrain a small BERT with the masked language model objective.

    python -m recipes.bert_pretrain --data ../shared/data/sst2 --output runs/bert_pretrain

Devlin et al. (2019) at CPU size: a WordPiece vocabulary trained on the
text, 15% of the tokens selected (80% [MASK], 10% random, 10% kept, keras-hub's
`MaskedLMMaskGenerator`, fresh masks every epoch), the loss on the selected
positions only, through a head tied to the token embedding. The text is the
sentences of a labelled TSV folder (`--data`, labels ignored; SST-2's train
split by default) plus any `--text` files (one sentence a line, e.g. the
English side of Multi30k).

Writes to --output: backbone.weights.h5, backbone.json (its constructor
arguments) and vocabulary.txt (what
`recipes.bert_classify --pretrained` loads), best.keras (the whole masked LM),
history.csv, TensorBoard logs, learning_curves.png. The last line printed is
`val_loss=...`, the masked-LM loss on held-out sentences.
"""

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.data import (  # noqa: E402
    masked_lm_dataset,
    read_labelled,
    read_text,
    save_vocabulary,
    train_word_piece,
    token_id_lists,
)
from zoo.files import write_text  # noqa: E402
from zoo.saving import load_weights, save_weights  # noqa: E402
from zoo.training import WarmupCosineDecay, adamw  # noqa: E402
from zoo.data.buckets import interleave, length_buckets  # noqa: E402
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
    data="../shared/data/sst2",  # a folder with train.tsv, or tfds:glue/sst2
    split="train",
    preset="bert-small",  # 4 layers, h=4
    hidden_dim=128,  # CPU size: d=128, d_ff=512 (the preset has 256 / 1024)
    intermediate_dim=512,
    epochs=20,  # 34.5 min with XLA on the quiet 2-core CPU (masked-token accuracy 0.47; 0.40 after 14)
    batch_size=128,
    learning_rate=1e-3,  # peak, after a linear warm-up, then cosine decay
    warmup_fraction=0.06,
    weight_decay=0.01,
    vocabulary_size=8000,
    sequence_length=64,  # longest [CLS] ... [SEP] (longer sentences are cut)
    buckets=(16, 32, 64),
    held_out=1000,  # sentences kept aside for the validation loss
    output="runs/bert_pretrain",
    jit_compile="true",  # XLA: 1.65 min an epoch here against 2.9 without (Keras' "auto" turns it off on CPU)
)


def parse(argv):
    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS)
    parser.add_argument("--text", nargs="*", default=[], help="more UTF-8 text files, one sentence a line")
    parser.add_argument("--split", default=DEFAULTS["split"], help="the TSV split whose sentences are read")
    parser.add_argument("--intermediate-dim", type=int, default=DEFAULTS["intermediate_dim"])
    parser.add_argument("--vocabulary-size", type=int, default=DEFAULTS["vocabulary_size"])
    parser.add_argument("--sequence-length", type=int, default=DEFAULTS["sequence_length"])
    parser.add_argument("--warmup-fraction", type=float, default=DEFAULTS["warmup_fraction"])
    parser.add_argument("--weight-decay", type=float, default=DEFAULTS["weight_decay"])
    parser.add_argument("--held-out", type=int, default=DEFAULTS["held_out"])
    parser.set_defaults(hidden_dim=DEFAULTS["hidden_dim"])
    return parser.parse_args(argv)


def read_sentences(args):
    """The --data TSV's sentences, then each --text file's lines, without
    repeats (SST-2 lists some phrases more than once)."""
    sentences, _ = read_labelled(args.data, args.split)
    for path in args.text:
        sentences = sentences + [line.strip() for line in read_text(path).split("\n") if line.strip()]
    return list(dict.fromkeys(sentences))


def batches(token_ids, batch_size, args, ids, vocabulary_size, shuffle, seed):
    lengths = [len(row) + 2 for row in token_ids]  # [CLS] ... [SEP]
    buckets = tuple(b for b in DEFAULTS["buckets"] if b < args.sequence_length) + (args.sequence_length,)
    groups = length_buckets(lengths, buckets, batch_size)
    datasets = [
        masked_lm_dataset(
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
        for bound, rows in groups
    ]
    return interleave(datasets, [len(rows) // batch_size for _, rows in groups], seed, shuffle)


def main(argv=None):
    args = parse(argv)
    start_distribution(args.strategy)  # multi-worker: before TensorFlow runs anything
    started = time.time()
    keras.utils.set_random_seed(args.seed)
    set_precision(args.mixed_precision)

    # --- Data: read everything before the output folder is touched ---------
    sentences = read_sentences(args)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(sentences))
    held_out = min(args.held_out, len(sentences) // 10)
    train_text = [sentences[i] for i in order[held_out:]]
    val_text = [sentences[i] for i in order[:held_out]]
    tokenizer = train_word_piece(train_text, args.vocabulary_size)
    vocabulary = tokenizer.get_vocabulary()
    ids = {token: i for i, token in enumerate(vocabulary)}
    train_ids = [row for row in token_id_lists(tokenizer, train_text) if row]
    val_ids = [row for row in token_id_lists(tokenizer, val_text) if row]
    train, steps = batches(train_ids, args.batch_size, args, ids, len(vocabulary), True, args.seed)
    val_batch = min(args.batch_size, len(val_ids))
    val, val_steps = batches(val_ids, val_batch, args, ids, len(vocabulary), False, None)
    print(
        f"{len(train_ids):,} training sentences, {len(val_ids):,} held out, "
        f"vocabulary {len(vocabulary):,} WordPieces, {steps} steps an epoch",
        flush=True,
    )

    folder = OutputFolder(args.output, args.overwrite, config=vars(args), strategy=args.strategy)
    save_vocabulary(tokenizer, folder / "vocabulary.txt")

    # --- Model -------------------------------------------------------------------
    with distribution_scope(args.strategy):
        model = zoo.build(
            args.preset,
            task="masked_lm",
            vocabulary_size=len(vocabulary),
            max_sequence_length=args.sequence_length,
            intermediate_dim=args.intermediate_dim,
            **size_overrides(args),
        )
        total = steps * args.epochs
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

    # --- Train -------------------------------------------------------------------
    history = model.fit(
        train.repeat(),
        steps_per_epoch=steps,
        epochs=args.epochs,
        validation_data=val,
        validation_steps=val_steps,
        callbacks=callbacks(folder),
    )
    plot_history(history.history, folder / "learning_curves.png", title=f"{args.preset} masked LM")
    if (folder / "best.keras").exists():
        load_weights(model, folder / "best.keras")
    save_weights(model.backbone, folder / "backbone.weights.h5")
    backbone_config = {k: v for k, v in model.backbone.get_config().items() if k not in ("name", "trainable")}
    write_text(folder / "backbone.json", json.dumps(backbone_config, indent=2))
    val_loss = float(model.evaluate(val, steps=val_steps, verbose=0, return_dict=True)["loss"])
    seconds = time.time() - started
    print(f"total {seconds / 60:.1f} min", flush=True)
    folder.finish(val_loss=val_loss, total_seconds=seconds)
    final_line("val_loss", val_loss)
    return val_loss


if __name__ == "__main__":
    from zoo.training.run import run_recipe

    run_recipe(main)
