"""Train the encoder-decoder Transformer on Multi30k, German -> English.

    python -m recipes.translate --data ../shared/data/multi30k --output runs/translate

Vaswani et al. (2017) at CPU size: one WordPiece vocabulary trained on both
sides of the train split (so the source and target embeddings and the output
projection share one table, section 3.4), the paper's learning-rate schedule
(eq. 3) and Adam(0.9, 0.98, 1e-9), label smoothing 0.1, and beam search for
the validation translations. Batches are grouped by length so that short
sentences are not padded to the longest.

Writes to --output: best.keras, vocabulary.txt, history.csv, TensorBoard logs,
learning_curves.png, attention.png (cross-attention of one validation
sentence, one panel per head), translations.txt. The last line printed is
`val_bleu=...`: sacrebleu's corpus BLEU on the lowercased, detokenized
validation split. Training stops at --epochs or before an epoch that would
pass --time-budget minutes. A killed run resumes from its backup (with its
saved vocabulary); `--epochs 0` on an unfinished folder only evaluates its
best.keras.
"""

import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.data import (  # noqa: E402
    DataError,
    load_word_piece,
    read_parallel,
    save_vocabulary,
    seq2seq_dataset,
    train_word_piece,
    token_id_lists,
)
from zoo.saving import load_weights  # noqa: E402
from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy, TransformerSchedule  # noqa: E402
from zoo.data.buckets import interleave, length_buckets  # noqa: E402
from zoo.training.bleu import corpus_bleu  # noqa: E402
from zoo.training.run import (  # noqa: E402
    OutputFolder,
    callbacks,
    distribution_scope,
    start_distribution,
    final_line,
    jit_compile_flag,
    plot_attention,
    plot_history,
    recipe_parser,
    set_precision,
    size_overrides,
)

# --- Defaults ------------------------------------------------------------------
DEFAULTS = dict(
    data="../shared/data/multi30k",
    source_lang="de",
    target_lang="en",
    preset="transformer-small",  # 3+3 layers, d=256, h=8, dropout 0.1
    intermediate_dim=512,  # d_ff: 512 rather than the preset's 1024, ~20% faster a step on a CPU
    epochs=20,
    time_budget=30.0,  # minutes of training; stops at the first epoch end past it
    batch_size=128,  # sentence pairs per step
    learning_rate=1e-3,  # the schedule's peak, reached at the end of warm-up
    warmup_steps=400,
    label_smoothing=0.1,
    vocabulary_size=10000,  # one WordPiece vocabulary for German and English
    max_length=48,  # longest source or target in tokens (longer ones are cut)
    buckets=(16, 24, 32, 48),  # batch lengths: each batch is padded to one of these
    beam_size=4,
    length_penalty=0.6,  # beam score: log_prob / length ** 0.6
    num_samples=5,  # sample translations to print
    output="runs/translate",
)
START, END = "[START]", "[END]"


def parse(argv):
    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS)
    parser.add_argument("--intermediate-dim", type=int, default=DEFAULTS["intermediate_dim"])
    parser.add_argument("--time-budget", type=float, default=DEFAULTS["time_budget"], help="minutes of training")
    parser.add_argument("--warmup-steps", type=int, default=DEFAULTS["warmup_steps"])
    parser.add_argument("--label-smoothing", type=float, default=DEFAULTS["label_smoothing"])
    parser.add_argument("--vocabulary-size", type=int, default=DEFAULTS["vocabulary_size"])
    parser.add_argument("--max-length", type=int, default=DEFAULTS["max_length"])
    parser.add_argument("--beam-size", type=int, default=DEFAULTS["beam_size"])
    parser.add_argument("--length-penalty", type=float, default=DEFAULTS["length_penalty"])
    parser.add_argument("--num-samples", type=int, default=DEFAULTS["num_samples"])
    parser.add_argument("--max-val-sentences", type=int, default=None, help="translate only the first N for BLEU")
    parser.add_argument("--source-lang", default=DEFAULTS["source_lang"])
    parser.add_argument("--target-lang", default=DEFAULTS["target_lang"])
    return parser.parse_args(argv)


def bucketed(sources, targets, batch_size, buckets, ids, shuffle, seed):
    """Batches padded to the shortest bucket bound that holds them.
    Returns (dataset, steps per pass)."""
    lengths = [max(len(s), len(t) + 1) for s, t in zip(sources, targets)]
    groups = length_buckets(lengths, buckets, batch_size)
    datasets = [
        seq2seq_dataset(
            [sources[r] for r in rows],
            [targets[r] for r in rows],
            batch_size,
            bound,
            bound,
            ids[START],
            ids[END],
            shuffle=shuffle,
            seed=seed,
        )
        for bound, rows in groups
    ]
    return interleave(datasets, [len(rows) // batch_size for _, rows in groups], seed, shuffle)


def translate(model, tokenizer, sources, ids, args, batch_size=128):
    """Beam-search translations of tokenized sources, as text. Sources are
    decoded in order of length, so a batch's shape (and its compiled
    search) is shared by sentences of similar length."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs = [None] * len(sources)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        chunk = [sources[i][: args.max_length] for i in rows]
        result = zoo.generate(
            model,
            [[ids[START]]] * len(chunk),
            max_new_tokens=min(max(map(len, chunk)) + 10, args.max_length - 1),
            sampler="beam" if args.beam_size > 1 else "greedy",
            stop_token_ids=[ids[END]],
            source=chunk,
            num_beams=args.beam_size,
            length_penalty=args.length_penalty,
        )
        for i, tokens in zip(rows, result.sequences):
            tokens = [int(t) for t in tokens]
            outputs[i] = detokenize_ids(tokenizer, tokens[: tokens.index(ids[END])] if ids[END] in tokens else tokens)
    return outputs


def detokenize_ids(tokenizer, tokens):
    if not tokens:
        return ""
    text = keras.ops.convert_to_numpy(tokenizer.detokenize([tokens]))[0]
    return text.decode("utf-8") if isinstance(text, bytes) else str(text)


def cross_attention(model, source, target):
    """The last decoder block's cross-attention (h, T, S) for one pair."""
    ops = keras.ops
    source_ids = ops.convert_to_tensor(np.array([source], "int32"))
    target_ids = ops.convert_to_tensor(np.array([target], "int32"))
    source_mask = ops.ones_like(source_ids)
    target_mask = ops.ones_like(target_ids)
    encoded = model.encode(source_ids, source_mask, training=False)
    x = model.decoder_embedding(target_ids)
    for block in model.decoder_blocks[:-1]:
        x = block(x, encoded, padding_mask=target_mask, encoder_padding_mask=source_mask, training=False)
    scores = model.decoder_blocks[-1].attention_scores(
        x, encoded, padding_mask=target_mask, encoder_padding_mask=source_mask
    )
    return ops.convert_to_numpy(scores["cross"])[0]


class TimeBudget(keras.callbacks.Callback):
    """Stops training before an epoch that would end past `minutes`
    (judged by the longest epoch so far)."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60

    def on_train_begin(self, logs=None):
        self.started = self.epoch_started = time.time()
        self.longest = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_started = time.time()

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        self.longest = max(self.longest, now - self.epoch_started)
        if now - self.started + self.longest > self.seconds:
            print(f"\ntime budget of {self.seconds / 60:.0f} min: stopping after epoch {epoch + 1}", flush=True)
            self.model.stop_training = True


def main(argv=None):
    args = parse(argv)
    start_distribution(args.strategy)  # multi-worker: before TensorFlow runs anything
    started = time.time()
    keras.utils.set_random_seed(args.seed)
    set_precision(args.mixed_precision)

    # --- Data: read everything before the output folder is touched ---------
    train_src, train_tgt = read_parallel(args.data, "train", args.source_lang, args.target_lang)
    val_src, val_tgt = read_parallel(args.data, "val", args.source_lang, args.target_lang)
    saved = Path(args.output) / "vocabulary.txt"
    if saved.is_file() and not args.overwrite:  # resuming: the checkpoint's own vocabulary
        tokenizer = load_word_piece(saved)
    else:
        tokenizer = train_word_piece(train_src + train_tgt, args.vocabulary_size)
    vocabulary = tokenizer.get_vocabulary()
    ids = {token: i for i, token in enumerate(vocabulary)}
    train_src_ids, train_tgt_ids = token_id_lists(tokenizer, train_src), token_id_lists(tokenizer, train_tgt)
    val_src_ids, val_tgt_ids = token_id_lists(tokenizer, val_src), token_id_lists(tokenizer, val_tgt)
    for where, rows in (("train source", train_src_ids), ("val source", val_src_ids)):
        for line, row in enumerate(rows, start=1):
            if not row:
                raise DataError(f"{args.data} {where}, line {line}: the sentence has no tokens")
    buckets = tuple(b for b in DEFAULTS["buckets"] if b < args.max_length) + (args.max_length,)
    train, steps = bucketed(train_src_ids, train_tgt_ids, args.batch_size, buckets, ids, True, args.seed)
    val_batch = min(args.batch_size, len(val_src_ids))
    val, val_steps = bucketed(val_src_ids, val_tgt_ids, val_batch, buckets, ids, False, None)
    print(
        f"{len(train_src):,} training pairs, {len(val_src):,} validation pairs, "
        f"vocabulary {len(vocabulary):,} WordPieces, {steps} steps an epoch",
        flush=True,
    )

    folder = OutputFolder(args.output, args.overwrite, config=vars(args), strategy=args.strategy)
    save_vocabulary(tokenizer, folder / "vocabulary.txt")

    # --- Model -------------------------------------------------------------------
    with distribution_scope(args.strategy):
        model = zoo.build(
            args.preset,
            vocabulary_size=len(vocabulary),
            max_sequence_length=args.max_length,
            intermediate_dim=args.intermediate_dim,
            **size_overrides(args),
        )
        hidden_dim = model.hidden_dim
        # --learning-rate is the peak, reached at step `warmup`:
        # scale * d^-0.5 * warmup^-0.5 = peak.
        scale = args.learning_rate * (hidden_dim * args.warmup_steps) ** 0.5
        schedule = TransformerSchedule(hidden_dim, args.warmup_steps, scale)
        model.compile(
            optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
            loss=MaskedSparseCrossentropy(pad_id=0, label_smoothing=args.label_smoothing),
            metrics=[MaskedAccuracy(pad_id=0)],
            jit_compile=jit_compile_flag(args),
        )
    print(f"{args.preset}: {model.count_params():,} parameters", flush=True)

    # --- Train -------------------------------------------------------------------
    # --epochs 0 on an interrupted run's folder evaluates its best.keras.
    if args.epochs > 0:
        history = model.fit(
            train.repeat(),
            steps_per_epoch=steps,
            epochs=args.epochs,
            validation_data=val,
            validation_steps=val_steps,
            callbacks=callbacks(folder) + [TimeBudget(args.time_budget)],
        )
        plot_history(history.history, folder / "learning_curves.png", title=f"{args.preset} on Multi30k")
    train_seconds = time.time() - started
    if (folder / "best.keras").exists():
        load_weights(model, folder / "best.keras")

    # --- Evaluate: beam search on the validation split ------------------------
    count = args.max_val_sentences or len(val_src_ids)
    hypotheses = translate(model, tokenizer, val_src_ids[:count], ids, args)
    bleu = corpus_bleu(hypotheses, val_tgt[:count])
    with open(folder / "translations.txt", "w", encoding="utf-8") as f:
        for source, reference, output in zip(val_src, val_tgt, hypotheses):
            f.write(f"{source}\t{reference}\t{output}\n")
    for source, reference, output in list(zip(val_src, val_tgt, hypotheses))[: args.num_samples]:
        print(f"source:    {source}\nreference: {reference}\noutput:    {output}\n")

    example = 0
    target = [ids[START]] + token_id_lists(tokenizer, [hypotheses[example]])[0]
    scores = cross_attention(model, val_src_ids[example], target)
    plot_attention(
        scores,
        [vocabulary[i] for i in target],
        [vocabulary[i] for i in val_src_ids[example]],
        folder / "attention.png",
        title="cross-attention, last decoder block",
    )
    total = time.time() - started
    print(f"training {train_seconds / 60:.1f} min, total {total / 60:.1f} min", flush=True)
    folder.finish(val_bleu=bleu, train_seconds=train_seconds, total_seconds=total)
    final_line("val_bleu", round(bleu, 2))
    return bleu


if __name__ == "__main__":
    from zoo.training.run import run_recipe

    run_recipe(main)
