"""Train the encoder-decoder Transformer on Multi30k, German -> English.

    python -m recipes.translate          # or: zoo train translate
    zoo train translate --data pairs.tsv --validation pairs-dev.tsv --source-lang fr --target-lang en
    zoo train translate --data corpus.fr,corpus.en --source-lang fr --target-lang en
    zoo train translate --pretrained hf://Helsinki-NLP/opus-mt-de-en --epochs 1

--data is Multi30k by default; or your own pairs: a CSV, TSV or JSONL file
whose columns (keys) are --source-lang and --target-lang (JSONL as
Hugging Face's translation sets, {"translation": {"fr": ..., "en": ...}},
too), or two aligned files of one sentence a line, "SOURCE,TARGET". The
validation pairs are --validation (the same forms), or
--validation-fraction of --data, held out by --seed.

Vaswani et al. (2017) at CPU size: one cased subword vocabulary trained on
both sides of the train split (SentencePiece's scheme, a unigram model by
default; so the source and target embeddings and the output projection
share one table, section 3.4; trained once per data and settings and kept
in `~/.cache/zoo/vocabularies`, `$ZOO_HOME`), a linear warm-up then a cosine
decay of the learning rate to zero at the last step (`--schedule inverse_sqrt`
is the paper's eq. 3)
and Adam(0.9, 0.98, 1e-9), label smoothing 0.1, an average of the recent
weights (Polyak averaging, the paper's checkpoint averaging done as an
exponential moving average), and beam search for the validation
translations. Batches are grouped by length so that short sentences are not
padded to the longest. Translations come out cased and detokenized: "A man
is riding a bicycle."

--pretrained fine-tunes a checkpoint instead (Marian's opus-mt, BART, T5 /
Flan-T5: a Hugging Face folder, an `hf://` handle, a keras-hub preset or a
translate run folder) with its own tokenizers: the source is cut by the
source tokenizer, the decoder starts from the checkpoint's
`decoder_start_token_id` and learns the target's ids up to its end token,
and the loss skips its pad id. Its defaults are a fine-tuning's
(--learning-rate 5e-5, --epochs 3, --ema-momentum 0), and the translations
are decoded as its generation_config.json says unless --beam-size or
--length-penalty is given. --preset, the sizes, --vocabulary-size and
--subword are the checkpoint's, and refused.

The run folder (--output, `runs/translate`): `model.keras` (the averaged
weights of the best epoch by validation loss), `tokenizer.json`,
`history.csv`, `curves.png`, `logs/`, `run.json`, `attention.png`
(cross-attention of one validation sentence, one panel per head),
`translations.txt`. The last lines printed are `val_bleu_lowercase=...`,
`val_chrf=...`, `run folder: RUN` and `val_bleu=...`: sacrebleu's default
corpus BLEU (cased, 13a) of the validation split. Training stops at
--epochs or before an epoch that would pass --time-budget minutes. A killed
run resumes from its backup (with its saved tokenizer); `--epochs 0` on an
unfinished folder only evaluates its model.keras. The run prints which one
stopped it. After training:

    zoo translate runs/translate "Ein Mann fährt Fahrrad."
    zoo eval runs/translate --split test   # test_bleu=... on another split
"""

import argparse
import sys
import time
from pathlib import Path

from recipes.errors import run_recipe
from recipes.recipe import run

# --- Defaults ------------------------------------------------------------------
DEFAULTS = dict(
    data="multi30k",  # a registered data set (fetched and cached), a folder of {split}.{lang} files, tfds:NAME,
    # a CSV/TSV/JSONL file of pairs, or two aligned files "SOURCE,TARGET"
    validation_fraction=0.05,  # of your own --data without --validation
    source_lang="de",
    target_lang="en",
    pretrained=None,  # a checkpoint to fine-tune (FINE_TUNING's defaults); None: --preset from scratch
    preset="transformer-small",  # 3+3 layers, d=256, h=8, dropout 0.1
    intermediate_dim=512,  # d_ff: 512 rather than the preset's 1024, ~20% faster a step on a CPU
    epochs=16,  # 3,600 steps
    time_budget=None,  # minutes of training: stop before an epoch that would pass it (None: --epochs alone)
    batch_size=128,  # sentence pairs per step
    learning_rate=1e-3,  # the schedule's peak, reached at the end of warm-up
    warmup_steps=400,
    schedule="cosine",  # after warm-up: a cosine to zero at the last step (+0.27 BLEU), or "inverse_sqrt", eq. 3
    label_smoothing=0.1,
    vocabulary_size=16000,  # one cased subword vocabulary for German and English (docs/results.md)
    subword="unigram",  # the vocabulary's pieces: "unigram" or "bpe"
    ema_momentum=0.998,  # the average of the weights: (the most) momentum a step, time constant 500 steps; 0: none
    ema_warmup=0.0,  # p > 0: the momentum warms up as min(ema_momentum, 1 - (t + 1) ** -p) (timm); 0: constant
    mixed_precision="auto",  # bfloat16 where the CPU computes it natively (AVX512-BF16, AMX); 14% faster a step here
    max_length=48,  # longest source or target in tokens (longer ones are cut)
    buckets=(16, 24, 32, 48),  # batch lengths: each batch is padded to one of these
    beam_size=8,  # chosen on the validation split (docs/results.md): +0.1 BLEU over 6 on two models
    length_penalty=1.2,  # beam score: log_prob / length ** 1.2, chosen on the validation split
    num_samples=5,  # sample translations to print
    output="runs/translate",
)
# What --pretrained changes: a fine-tuning's rate and length (Hugging Face's
# run_translation: 5e-5, 3 epochs, no average of the weights, which would
# lag behind so short a run), decoding by the checkpoint's
# generation_config.json (None), and no preset or vocabulary of the zoo's.
FINE_TUNING = dict(learning_rate=5e-5, epochs=3, ema_momentum=0.0, beam_size=None, length_penalty=None, preset=None,
                   intermediate_dim=None, vocabulary_size=None, subword=None)
CHECKPOINT_FIXES = ("preset", "num_layers", "hidden_dim", "num_heads", "dropout", "intermediate_dim",
                    "vocabulary_size", "subword")
START, END = "[START]", "[END]"
TOKENIZER = "tokenizer.json"


def make_parser():
    """The recipe's flags (`zoo train translate -h`)."""
    from recipes.flags import COUNT, NON_NEGATIVE, POSITIVE, POSITIVE_INT, RATE, Number, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train translate")
    parser.add_argument("--pretrained", default=DEFAULTS["pretrained"], metavar="CHECKPOINT",
                        help="fine-tune this encoder-decoder (Marian, BART, T5: a folder, hf://ORG/NAME, a keras-hub "
                             "preset or a translate run folder) with its tokenizers, instead of --preset from scratch")
    parser.add_argument("--time-budget", type=POSITIVE, default=DEFAULTS["time_budget"],
                        help="also stop before an epoch that would end past this many minutes of training")
    parser.add_argument("--warmup-steps", type=COUNT, default=DEFAULTS["warmup_steps"],
                        help="steps of the schedule's linear warm-up")
    parser.add_argument("--schedule", choices=("inverse_sqrt", "cosine"), default=DEFAULTS["schedule"],
                        help="after the warm-up: the paper's decay as step^-0.5 (eq. 3), or a cosine decay "
                             "that reaches zero at the last step of --epochs")
    parser.add_argument("--label-smoothing", type=RATE, default=DEFAULTS["label_smoothing"],
                        help="label smoothing of the loss")
    parser.add_argument("--vocabulary-size", type=POSITIVE_INT, default=DEFAULTS["vocabulary_size"],
                        help="subword pieces of the shared vocabulary")
    parser.add_argument("--subword", choices=("unigram", "bpe"), default=DEFAULTS["subword"],
                        help="the vocabulary's pieces: a unigram model's or byte-pair merges")
    parser.add_argument("--ema-momentum", type=RATE, default=DEFAULTS["ema_momentum"],
                        help="keep and save a moving average of the weights with this momentum per step (0: none)")
    parser.add_argument("--ema-warmup", type=NON_NEGATIVE, default=DEFAULTS["ema_warmup"],
                        help="the average's momentum warms up as min(ema_momentum, 1 - (t + 1) ** -P) (0: constant)")
    parser.add_argument("--max-length", type=POSITIVE_INT, default=DEFAULTS["max_length"],
                        help="longest source or target in tokens (longer ones are cut)")
    parser.add_argument("--beam-size", type=POSITIVE_INT, default=DEFAULTS["beam_size"], help="beams (1: greedy)")
    parser.add_argument("--length-penalty", type=Number(float), default=DEFAULTS["length_penalty"],
                        help="beam score: log_prob / length ** length_penalty")
    parser.add_argument("--num-samples", type=COUNT, default=DEFAULTS["num_samples"], help="translations printed")
    parser.add_argument("--max-val-sentences", type=POSITIVE_INT, default=None,
                        help="translate only the first N for BLEU")
    parser.add_argument("--source-lang", default=DEFAULTS["source_lang"],
                        help="the source language: its file suffix, or its column of a CSV, TSV or JSONL --data")
    parser.add_argument("--target-lang", default=DEFAULTS["target_lang"],
                        help="the target language: its file suffix, or its column of a CSV, TSV or JSONL --data")
    parser.add_argument("--validation", default=None,
                        help="your own validation pairs, in --data's forms (a file of pairs, or SOURCE,TARGET)")
    parser.add_argument("--validation-fraction", type=Number(float, above=0, below=1),
                        default=DEFAULTS["validation_fraction"],
                        help="the share of your own --data held out for validation without --validation")
    return parser


def parse(argv):
    """The flags, checked; the BLEU score's package there, before any
    training."""
    from recipes.flags import check_preset, given_flags, require, size_overrides

    from zoo.data import is_pair_source

    parser = make_parser()
    args = parser.parse_args(argv)
    if args.pretrained is not None:
        given = given_flags(make_parser, argv, {*FINE_TUNING, *CHECKPOINT_FIXES})
        fixed = [name for name in CHECKPOINT_FIXES if name in given]
        if fixed:
            flags = ", ".join("--" + name.replace("_", "-") for name in fixed)
            parser.error(f"{flags}: with --pretrained the model and its vocabulary are the checkpoint's; leave "
                         f"{'it' if len(fixed) == 1 else 'them'} out")
        for name, value in FINE_TUNING.items():
            if name not in given:
                setattr(args, name, value)
    if args.validation is not None and not is_pair_source(args.data):
        parser.error(f"--validation {args.validation}: with --data {args.data}; expected --data to be your own "
                     "pairs (a data set's folder or name brings its own val split)")
    for flag in ("data", "validation"):
        value = getattr(args, flag)
        if value is not None and is_pair_source(value):
            for name in (value.split(",") if "," in value else [value]):
                if not Path(name).is_file():
                    parser.error(f"--{flag} {value}: {name} is no file; expected a CSV, TSV or JSONL file of pairs, "
                                 "or two aligned files SOURCE,TARGET")
    if args.pretrained is None:
        check_preset(parser, args.preset, "transformer", sizes=size_overrides(args))
    require("sacrebleu", "the translate recipe's BLEU score")
    return args


def pairs(args, split, data=None):
    """(sources, targets) of `split` ("train", "val", ...) of the run's data
    (`args`: the flags, a dict) or of `data`: a data set's split, or your
    own pairs (--data, --validation, or held out of --data by
    --validation-fraction and --seed)."""
    from zoo.data import hold_out, is_pair_source, read_pairs, read_parallel

    source = data or args["data"]
    langs = args["source_lang"], args["target_lang"]
    if not is_pair_source(source):
        return read_parallel(source, split, *langs)
    if data is not None or split not in ("train", "val"):
        return read_pairs(source, *langs)
    if args.get("validation"):
        return read_pairs(args["data"] if split == "train" else args["validation"], *langs)
    sources, targets = read_pairs(args["data"], *langs)
    kept = hold_out(len(sources), args.get("validation_fraction", DEFAULTS["validation_fraction"]),
                    args["seed"])[0 if split == "train" else 1]
    return [sources[i] for i in kept], [targets[i] for i in kept]


def bucketed(sources, targets, batch_size, buckets, special, shuffle, seed):
    """Batches padded to the shortest bucket bound that holds them;
    `special` holds the decoder's `start`, `end` and `pad` ids. Returns
    (dataset, steps per pass)."""
    from zoo.data import bucketed_batches, seq2seq_dataset

    def pipeline(rows, bound):
        return seq2seq_dataset(
            [sources[r] for r in rows],
            [targets[r] for r in rows],
            batch_size,
            bound,
            bound,
            special["start"],
            special["end"],
            pad_id=special["pad"],
            shuffle=shuffle,
            seed=seed,
        )

    lengths = [max(len(s), len(t) + 1) for s, t in zip(sources, targets)]
    return bucketed_batches(pipeline, lengths, buckets, batch_size, shuffle=shuffle, seed=seed)


def cross_attention(model, source, target):
    """The last decoder block's cross-attention (h, T, S) for one pair."""
    import keras
    import numpy as np

    source_ids, target_ids = np.array([source], "int32"), np.array([target], "int32")
    scores = model.attention_scores(
        {
            "encoder_token_ids": source_ids,
            "encoder_padding_mask": np.ones_like(source_ids),
            "decoder_token_ids": target_ids,
            "decoder_padding_mask": np.ones_like(target_ids),
        }
    )
    return keras.ops.convert_to_numpy(scores["cross"][-1])[0]


def translate_text(model, sentences, args):
    """Translations of a list of sentences (str) with the run's beam search
    (`zoo.translate`; the model carries its tokenizer)."""
    import zoo

    if isinstance(args, argparse.Namespace):
        args = vars(args)
    return zoo.translate(model, list(sentences), num_beams=args["beam_size"], length_penalty=args["length_penalty"])


def evaluate(folder, data=None, split="val", model=None, outputs=None):
    """The saved model's beam-search translations of `split` (the run's
    --max-val-sentences first sentences), scored: the recipe's last step
    and `zoo eval` both call this.

    Args:
        folder: the run folder.
        data: a folder of `{split}.{lang}` files, tfds:NAME, or a file of
            your own pairs (all of them count); None is the run's own --data.
        split: "val", "test", "train", ...
        model: the loaded model, or None to load `folder/model.keras`.
        outputs: None, or a list that receives (source, reference,
            translation) of each sentence.

    Returns:
        A dict of figures, each named after its split and rounded to two
        decimals: `val_bleu_lowercase`, `val_chrf` and, last, `val_bleu`
        (sacrebleu's default, cased BLEU) on the validation split;
        `test_...` on the test split.
    """
    from zoo.tokenizers import WordTokenizer
    from zoo.training.bleu import detokenize, translation_scores

    from recipes.flags import require
    from recipes.run_folder import figure_name, load_model, read_run

    require("sacrebleu", "the BLEU score")
    args = read_run(folder)["args"]
    sources, references = pairs(args, split, data)
    count = args["max_val_sentences"] or len(sources)
    model = model or load_model(folder)
    hypotheses = translate_text(model, sources[:count], args)
    if isinstance(model.tokenizer, WordTokenizer):  # its text: words apart, punctuation spaced
        hypotheses = [detokenize(h) for h in hypotheses]
    if outputs is not None:
        outputs.extend(zip(sources, references, hypotheses))
    scores = translation_scores(hypotheses, references[:count])
    return {figure_name(name, split): scores[name] for name in ("bleu_lowercase", "chrf", "bleu")}


def time_budget(minutes):
    """A callback that stops training before an epoch that would end past
    `minutes` (judged by the longest epoch so far; None: never), and says
    at the end of training what stopped it."""
    import keras

    class TimeBudget(keras.callbacks.Callback):
        def __init__(self, minutes):
            super().__init__()
            self.seconds = float("inf") if minutes is None else minutes * 60
            self.stopped = None

        def on_train_begin(self, logs=None):
            self.started = self.epoch_started = time.time()
            self.longest, self.epochs = 0.0, 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_started = time.time()

        def on_epoch_end(self, epoch, logs=None):
            now = time.time()
            self.longest = max(self.longest, now - self.epoch_started)
            self.epochs = epoch + 1
            if now - self.started + self.longest > self.seconds:
                self.stopped = f"--time-budget {self.seconds / 60:g} min"
                self.model.stop_training = True

        def on_train_end(self, logs=None):
            if self.stopped:
                print(f"\nstopped by {self.stopped} after epoch {self.epochs}", flush=True)
            elif self.epochs == self.params["epochs"]:
                print(f"\nstopped by --epochs {self.epochs}", flush=True)

    return TimeBudget(minutes)


def read_data(args):
    """The tokenizers (and --pretrained's model) and the bucketed train and
    validation pipelines, read before the output folder is touched: a dict
    of tokenizer, source_tokenizer, special (the decoder's start, end and
    pad ids), val_src_ids, train, steps, val, val_steps, and model with
    --pretrained."""
    from zoo.data import DataError
    from zoo.tokenizers import token_id_lists

    train_src, train_tgt = pairs(vars(args), "train")
    val_src, val_tgt = pairs(vars(args), "val")
    data = checkpoint_tokenizers(args) if args.pretrained else trained_tokenizer(args, train_src + train_tgt)
    source_tokenizer, tokenizer, end = data["source_tokenizer"], data["tokenizer"], data["special"]["end"]

    def target_ids(texts):  # without the end token that the tokenizer may add: the labels get it
        return [row[:-1] if row and row[-1] == end else row for row in token_id_lists(tokenizer, texts)]

    train_src_ids, train_tgt_ids = token_id_lists(source_tokenizer, train_src), target_ids(train_tgt)
    val_src_ids, val_tgt_ids = token_id_lists(source_tokenizer, val_src), target_ids(val_tgt)
    for where, rows in (("train source", train_src_ids), ("val source", val_src_ids)):
        for line, row in enumerate(rows, start=1):
            if not row:
                raise DataError(f"{args.data} {where}, line {line}: the sentence has no tokens")
    buckets = tuple(b for b in DEFAULTS["buckets"] if b < args.max_length) + (args.max_length,)
    train, steps = bucketed(train_src_ids, train_tgt_ids, args.batch_size, buckets, data["special"], True, args.seed)
    val_batch = min(args.batch_size, len(val_src_ids))
    val, val_steps = bucketed(val_src_ids, val_tgt_ids, val_batch, buckets, data["special"], False, None)
    vocabulary = (f"{args.pretrained}'s vocabulary of {tokenizer.vocabulary_size():,}" if args.pretrained else
                  f"vocabulary {tokenizer.vocabulary_size():,} {args.subword} pieces")
    print(f"{len(train_src):,} training pairs, {len(val_src):,} validation pairs, {vocabulary}, {steps} steps an epoch",
          flush=True)
    return dict(data, val_src_ids=val_src_ids, train=train, steps=steps, val=val, val_steps=val_steps)


def trained_tokenizer(args, texts):
    """From scratch: one subword vocabulary of both sides, trained once per
    data and settings and then read from the cache (the same command, the
    same vocabulary), or a resumed run's own tokenizer.json."""
    from zoo.tokenizers import HuggingFaceTokenizer, train_sentence_piece
    from zoo.data.registry import zoo_home

    saved = Path(args.output) / TOKENIZER
    if saved.is_file() and not args.overwrite:
        tokenizer = HuggingFaceTokenizer.from_file(saved, bos_token=START, eos_token=END, pad_token="[PAD]",
                                                   add_bos=False)
    else:
        tokenizer = train_sentence_piece(texts, args.vocabulary_size, args.subword, cache=zoo_home() / "vocabularies")
    ids = {token: i for i, token in enumerate(tokenizer.get_vocabulary())}
    return dict(tokenizer=tokenizer, source_tokenizer=tokenizer, special=dict(start=ids[START], end=ids[END], pad=0))


def checkpoint_tokenizers(args):
    """--pretrained's model and its tokenizers: the decoder starts from the
    checkpoint's `decoder_start_token_id` and ends at its end token; its pad
    id pads, and the loss skips it (Marian's is its last id, BART's 1)."""
    from zoo.data import DataError
    from zoo.models import EncoderDecoder
    from zoo.text.tokens import decoder_prompt, special_id, tokenizer_of

    from recipes.run_folder import open_target

    model = open_target(args.pretrained)
    if not isinstance(model, EncoderDecoder):
        raise DataError(f"--pretrained {args.pretrained}: a {type(model).__name__}; expected an encoder-decoder "
                        "(Marian, BART, T5, or a translate run)")
    tokenizer = tokenizer_of(model, f"--pretrained {args.pretrained}")
    if args.max_length > model.max_sequence_length:
        raise DataError(f"--max-length {args.max_length}: {args.pretrained}'s context is "
                        f"{model.max_sequence_length} tokens; expected at most that")
    pad = getattr(tokenizer, "pad_token_id", None)
    special = dict(start=decoder_prompt(tokenizer)[0], end=special_id(tokenizer, "end"), pad=0 if pad is None else pad)
    return dict(model=model, tokenizer=tokenizer, source_tokenizer=model.source_tokenizer or tokenizer,
                special=special)


def open_folder(args, data):
    """The run folder, with the tokenizer in it (--pretrained's model
    carries its own inside model.keras)."""
    from recipes.flags import size_overrides
    from recipes.recipe import open_run_folder
    from recipes.run_folder import OutputFolder, run_config

    if args.pretrained:
        print(f"translate: fine-tuning {args.pretrained}", flush=True)
        return OutputFolder(args.output, args.overwrite, config=run_config("translate", args, args.pretrained),
                            strategy=args.strategy)
    folder = open_run_folder("translate", args, args.preset, size_overrides(args))
    data["tokenizer"].save_assets(folder.path)  # tokenizer.json
    return folder


def learning_rate_schedule(args, hidden_dim, steps_per_epoch):
    """--schedule with its peak --learning-rate at the end of
    --warmup-steps: the paper's eq. 3 (scale * d^-0.5 * warmup^-0.5 = peak),
    or a cosine decay to zero at the last step of --epochs."""
    from zoo.training import TransformerSchedule, WarmupCosineDecay

    if args.schedule == "cosine":
        return WarmupCosineDecay(args.learning_rate, args.warmup_steps, steps_per_epoch * args.epochs, 0.0)
    scale = args.learning_rate * (hidden_dim * args.warmup_steps) ** 0.5
    return TransformerSchedule(hidden_dim, args.warmup_steps, scale)


def make_model(args, data):
    """The compiled encoder-decoder: --schedule with its peak at
    --learning-rate, Adam(0.9, 0.98, 1e-9) keeping a moving average of the
    weights (--ema-momentum, warmed up by --ema-warmup), label-smoothed
    masked loss."""
    import zoo
    from zoo.models.sharding import get_layout_map
    from zoo.training import AdamEMAWarmup, MaskedAccuracy, MaskedSparseCrossentropy, distribution_scope

    from recipes.flags import jit_compile_flag, size_overrides

    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = data.get("model") or zoo.build(
            args.preset,
            vocabulary_size=data["tokenizer"].vocabulary_size(),
            max_sequence_length=args.max_length,
            tokenizer=data["tokenizer"],
            **size_overrides(args),
        )
        pad = data["special"]["pad"]
        model.compile(
            optimizer=AdamEMAWarmup(
                learning_rate_schedule(args, model.hidden_dim, data["steps"]),
                beta_1=0.9, beta_2=0.98, epsilon=1e-9,
                use_ema=args.ema_momentum > 0, ema_momentum=args.ema_momentum, ema_warmup=args.ema_warmup,
            ),
            loss=MaskedSparseCrossentropy(pad_id=pad, label_smoothing=args.label_smoothing),
            metrics=[MaskedAccuracy(pad_id=pad)],
            jit_compile=jit_compile_flag(args),
        )
    print(f"{args.pretrained or args.preset}: {model.count_params():,} parameters", flush=True)
    return model


def fit(model, args, folder, data):
    """--epochs epochs, or fewer within --time-budget; model.keras is the best
    epoch by validation loss, both of the averaged weights when
    --ema-momentum is set; curves.png. --epochs 0 on an interrupted run's
    folder only evaluates its model.keras. Returns the epochs trained."""
    import keras

    from recipes.recipe import fit_epochs
    from recipes.run_folder import HISTORY, callbacks, read_history

    # Validation swaps the averaged weights in (BestModel saves them too).
    average = [keras.callbacks.SwapEMAWeights()] if args.ema_momentum > 0 else []
    if args.epochs > 0:
        every = average + callbacks(folder) + [time_budget(args.time_budget)]
        fit_epochs(model, args, folder, data, every, f"{args.pretrained or args.preset} on {Path(args.data).name}")
    epochs = len(read_history(folder / HISTORY).get("loss", []))
    print(f"{epochs} epochs", flush=True)
    return {"epochs": epochs}


def report(model, args, folder, data):
    """The saved model's figures (`evaluate`: beam search on the
    validation split), translations.txt, --num-samples of them printed,
    and attention.png."""
    translations = []
    figures = evaluate(folder.path, model=model, outputs=translations)
    with open(folder / "translations.txt", "w", encoding="utf-8") as f:
        for source, reference, output in translations:
            f.write(f"{source}\t{reference}\t{output}\n")
    for source, reference, output in translations[: args.num_samples]:
        print(f"source:    {source}\nreference: {reference}\noutput:    {output}\n")
    draw_attention(model, args, folder, data, translations[0][2])
    return figures


def draw_attention(model, args, folder, data, translation):
    """attention.png: the last decoder block's cross-attention over the
    first validation sentence and its translation."""
    from zoo.tokenizers import token_id_lists

    from recipes.plots import plot_attention

    tokenizer, source_tokenizer = data["tokenizer"], data["source_tokenizer"]
    # A translation re-tokenized can be longer than the model's context: plot its first part.
    target = ([data["special"]["start"]] + token_id_lists(tokenizer, [translation])[0])[: args.max_length]
    source = data["val_src_ids"][0][: args.max_length]
    plot_attention(
        cross_attention(model, source, target),
        [tokenizer.id_to_token(i) for i in target],
        [source_tokenizer.id_to_token(i) for i in source],
        folder / "attention.png",
        title="cross-attention, last decoder block",
    )


def main(argv=None):
    """Trains as the module's docstring says; returns the validation BLEU
    printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
