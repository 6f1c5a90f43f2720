"""Train the encoder-decoder Transformer on Multi30k, German -> English.

    python -m recipes.translate --data ../shared/data/multi30k   # or: zoo train translate

Vaswani et al. (2017) at CPU size: one WordPiece vocabulary trained on both
sides of the train split (so the source and target embeddings and the output
projection share one table, section 3.4), the paper's learning-rate schedule
(eq. 3) and Adam(0.9, 0.98, 1e-9), label smoothing 0.1, and beam search for
the validation translations. Batches are grouped by length so that short
sentences are not padded to the longest.

The run folder (--output, `runs/translate`): `model.keras` (the best epoch
by validation loss), `vocabulary.txt`, `history.csv`, `curves.png`, `logs/`,
`run.json`, `attention.png` (cross-attention of one validation sentence,
one panel per head), `translations.txt`. The last lines printed are
`run folder: RUN` and `val_bleu=...`: sacrebleu's corpus BLEU on the
lowercased, detokenized validation split. Training stops at --epochs or
before an epoch that would pass --time-budget minutes. A killed run resumes
from its backup (with its saved vocabulary); `--epochs 0` on an unfinished
folder only evaluates its model.keras. After training:

    zoo translate runs/translate "Ein Mann fährt Fahrrad."
    zoo eval runs/translate --split test   # BLEU on another split
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.data import (  # noqa: E402
    DataError,
    bucketed_batches,
    load_word_piece,
    read_parallel,
    save_vocabulary,
    seq2seq_dataset,
    train_word_piece,
    token_id_lists,
)
from zoo.models.layout import get_layout_map  # noqa: E402
from zoo.training import (  # noqa: E402
    MaskedAccuracy,
    MaskedSparseCrossentropy,
    TransformerSchedule,
    corpus_bleu,
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
    plot_attention,
    read_run,
    recipe_parser,
    require,
    run_config,
    set_precision,
    size_overrides,
    startup_line,
    write_curves,
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
VOCABULARY = "vocabulary.txt"


def make_parser():
    """The recipe's flags (`zoo train translate -h`)."""
    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train translate")
    parser.add_argument("--time-budget", type=float, default=DEFAULTS["time_budget"], help="minutes of training")
    parser.add_argument("--warmup-steps", type=int, default=DEFAULTS["warmup_steps"],
                        help="steps of the schedule's linear warm-up")
    parser.add_argument("--label-smoothing", type=float, default=DEFAULTS["label_smoothing"],
                        help="label smoothing of the loss")
    parser.add_argument("--vocabulary-size", type=int, default=DEFAULTS["vocabulary_size"],
                        help="WordPieces of the shared vocabulary")
    parser.add_argument("--max-length", type=int, default=DEFAULTS["max_length"],
                        help="longest source or target in tokens (longer ones are cut)")
    parser.add_argument("--beam-size", type=int, default=DEFAULTS["beam_size"], help="beams (1: greedy)")
    parser.add_argument("--length-penalty", type=float, default=DEFAULTS["length_penalty"],
                        help="beam score: log_prob / length ** length_penalty")
    parser.add_argument("--num-samples", type=int, default=DEFAULTS["num_samples"], help="translations printed")
    parser.add_argument("--max-val-sentences", type=int, default=None, help="translate only the first N for BLEU")
    parser.add_argument("--source-lang", default=DEFAULTS["source_lang"], help="source file suffix")
    parser.add_argument("--target-lang", default=DEFAULTS["target_lang"], help="target file suffix")
    return parser


def parse(argv):
    parser = make_parser()
    args = parser.parse_args(argv)
    check_preset(parser, args.preset, "transformer")
    return args


def bucketed(sources, targets, batch_size, buckets, ids, shuffle, seed):
    """Batches padded to the shortest bucket bound that holds them.
    Returns (dataset, steps per pass)."""

    def pipeline(rows, bound):
        return seq2seq_dataset(
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

    lengths = [max(len(s), len(t) + 1) for s, t in zip(sources, targets)]
    return bucketed_batches(pipeline, lengths, buckets, batch_size, shuffle=shuffle, seed=seed)


def cross_attention(model, source, target):
    """The last decoder block's cross-attention (h, T, S) for one pair."""
    ops = keras.ops
    source_ids, target_ids = np.array([source], "int32"), np.array([target], "int32")
    scores = model.attention_scores(
        {
            "encoder_token_ids": source_ids,
            "encoder_padding_mask": np.ones_like(source_ids),
            "decoder_token_ids": target_ids,
            "decoder_padding_mask": np.ones_like(target_ids),
        }
    )
    return ops.convert_to_numpy(scores["cross"][-1])[0]


def translate_text(model, sentences, args):
    """Translations of a list of sentences (str) with the run's beam search
    (`zoo.translate`; the model carries its tokenizer)."""
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    return zoo.translate(model, list(sentences), num_beams=args["beam_size"], length_penalty=args["length_penalty"])


def evaluate(folder, data=None, split="val", model=None, outputs=None):
    """Corpus BLEU of the saved model's beam-search translations of `split`
    (the run's --max-val-sentences first sentences): the recipe's last
    step and `zoo eval` both call this.

    Args:
        folder: the run folder.
        data: a folder of `{split}.{lang}` files or tfds:NAME; None is the
            run's own --data.
        split: "val", "test", "train", ...
        model: the loaded model, or None to load `folder/model.keras`.
        outputs: None, or a list that receives (source, reference,
            translation) of each sentence.

    Returns:
        `("val_bleu", float)`, BLEU rounded to two decimals as printed.
    """
    require("sacrebleu", "the BLEU score")
    args = read_run(folder)["args"]
    sources, references = read_parallel(data or args["data"], split, args["source_lang"], args["target_lang"])
    count = args["max_val_sentences"] or len(sources)
    model = model or load_model(folder)
    hypotheses = translate_text(model, sources[:count], args)
    if outputs is not None:
        outputs.extend(zip(sources, references, hypotheses))
    return "val_bleu", round(corpus_bleu(hypotheses, references[:count]), 2)


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
    require("sacrebleu", "the translate recipe's BLEU score")  # at start, not after training
    overrides = size_overrides(args)
    # multi-worker: before TensorFlow runs anything
    start_distribution(args.strategy, mesh=args.mesh, batch_size=args.batch_size)
    started = time.time()
    keras.utils.set_random_seed(args.seed)
    set_precision(args.mixed_precision)

    # --- Data: read everything before the output folder is touched ---------
    train_src, train_tgt = read_parallel(args.data, "train", args.source_lang, args.target_lang)
    val_src, val_tgt = read_parallel(args.data, "val", args.source_lang, args.target_lang)
    saved = Path(args.output) / VOCABULARY
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

    print(startup_line("translate", args.preset, overrides), flush=True)
    config = run_config("translate", args, args.preset, overrides)
    folder = OutputFolder(args.output, args.overwrite, config=config, strategy=args.strategy)
    save_vocabulary(tokenizer, folder / VOCABULARY)

    # --- Model -------------------------------------------------------------------
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = zoo.build(
            args.preset,
            vocabulary_size=len(vocabulary),
            max_sequence_length=args.max_length,
            tokenizer=tokenizer,
            **overrides,
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

    # --- Train: model.keras is the best epoch by validation loss ---------------
    # --epochs 0 on an interrupted run's folder evaluates its model.keras.
    if args.epochs > 0:
        model.fit(
            train.repeat(),
            steps_per_epoch=steps,
            epochs=args.epochs,
            validation_data=val,
            validation_steps=val_steps,
            callbacks=callbacks(folder) + [TimeBudget(args.time_budget)],
        )
        write_curves(folder, model, title=f"{args.preset} on Multi30k")
    train_seconds = time.time() - started

    # --- Evaluate the saved model: beam search on the validation split --------
    best = load_model(folder)
    translations = []
    _, bleu = evaluate(folder.path, model=best, outputs=translations)
    with open(folder / "translations.txt", "w", encoding="utf-8") as f:
        for source, reference, output in translations:
            f.write(f"{source}\t{reference}\t{output}\n")
    for source, reference, output in translations[: args.num_samples]:
        print(f"source:    {source}\nreference: {reference}\noutput:    {output}\n")

    example = 0
    model = best
    # A translation re-tokenized can be longer than the model's context: plot its first part.
    target = ([ids[START]] + token_id_lists(tokenizer, [translations[example][2]])[0])[: args.max_length]
    source = val_src_ids[example][: args.max_length]
    scores = cross_attention(model, source, target)
    plot_attention(
        scores,
        [vocabulary[i] for i in target],
        [vocabulary[i] for i in source],
        folder / "attention.png",
        title="cross-attention, last decoder block",
    )
    total = time.time() - started
    print(f"training {train_seconds / 60:.1f} min, total {total / 60:.1f} min", flush=True)
    finish(folder, "val_bleu", bleu, train_seconds=train_seconds, total_seconds=total)
    return bleu


if __name__ == "__main__":
    from recipes.common import run_recipe

    run_recipe(main)
