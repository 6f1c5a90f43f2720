"""Language-model data of the recipes: random windows of a token
stream (gpt_char, gpt_finetune) and the mean cross-entropy of a model's
logits, the figure the language-model recipes print."""


def split_ids(ids, source, train_fraction, sequence_length, unit="tokens", hint=""):
    """The first and last parts of a stream of ids (`train_fraction` of it,
    then the rest), or one DataError naming `source` when either is too
    short for one window of `sequence_length + 1` ids (`unit`: what an id
    is; `hint`: what to try instead, for the message)."""
    from zoo.data import DataError

    n = int(train_fraction * len(ids))
    train, val = ids[:n], ids[n:]
    if min(len(train), len(val)) < sequence_length + 1:
        need = int((sequence_length + 1) / min(train_fraction, 1 - train_fraction)) + 1
        raise DataError(
            f"{source}: the text is {len(ids)} {unit}, too short for one window of {sequence_length + 1} "
            f"{unit} in both the training ({train_fraction:.0%}) and validation parts; expected at least "
            f"{need} {unit}{hint}"
        )
    return train, val


def add_language_model_flags(parser, defaults, sample_unit):
    """The language-model recipes' --steps-per-epoch, --eval-batches and
    --sample-length (in `sample_unit`s: characters, tokens)."""
    from recipes.flags import COUNT, POSITIVE_INT

    parser.add_argument("--steps-per-epoch", type=POSITIVE_INT, default=defaults["steps_per_epoch"],
                        help="steps between two validation points (one row of history.csv)")
    parser.add_argument("--eval-batches", type=POSITIVE_INT, default=defaults["eval_batches"],
                        help="fixed random validation batches of the final val_loss")
    parser.add_argument("--sample-length", type=COUNT, default=defaults["sample_length"],
                        help=f"{sample_unit} of the sample printed at the end (0: none)")


def mean_cross_entropy(model, inputs, targets, batch_size, weights=None):
    """The mean cross-entropy (nats) of `model`'s logits against `targets`,
    over every target (or weighted by `weights`), accumulated in float64
    batch by batch.

    Args:
        model: a model whose output is logits (..., V).
        inputs: a dict of arrays (N, ...), the model's named inputs.
        targets: int array (N, ...), the target ids.
        batch_size: int.
        weights: float array like `targets`, or None for all ones.

    Returns:
        float.
    """
    import numpy as np

    total, count = 0.0, 0.0
    for start in range(0, len(targets), batch_size):
        rows = slice(start, start + batch_size)
        logits = np.asarray(model.predict_on_batch({k: v[rows] for k, v in inputs.items()}), "float64")
        top = logits.max(axis=-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
        picked = np.take_along_axis(logits, np.asarray(targets[rows])[..., None], axis=-1)[..., 0]
        w = np.ones(picked.shape) if weights is None else np.asarray(weights[rows], "float64")
        total += float(((log_z - picked) * w).sum())
        count += float(w.sum())
    return total / max(count, 1.0)


def train_dataset(ids, batch_size, sequence_length, seed):
    """Endless random windows as the model's named inputs (no padding)."""
    import tensorflow as tf

    from zoo.data import language_model_windows

    def named(x, y):
        return {"token_ids": x, "padding_mask": tf.ones_like(x)}, y

    windows = language_model_windows(ids, batch_size, sequence_length, seed=seed)
    return windows.map(named, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def eval_inputs(ids, batch_size, sequence_length, num_batches, seed=0):
    """Fixed random windows of a language model: (named inputs, targets) arrays."""
    import numpy as np

    from zoo.data import language_model_eval_batches

    x, y = language_model_eval_batches(ids, batch_size, sequence_length, num_batches, seed=seed)
    return {"token_ids": x, "padding_mask": np.ones_like(x)}, y


def split_loss(recipe, folder, data, split, model, split_ids):
    """What the language-model recipes' `evaluate` computes: the mean
    cross-entropy of the run's model over fixed random windows of `split`
    ("train", the first 90% of the text, or "val", the rest).

    Args:
        recipe: the recipe's name, for the error of another split.
        folder, data, split, model: as the recipe's `evaluate`.
        split_ids: `(model, text, data, args) -> (train ids, val ids,
            window length)`, the recipe's own tokenization and split.

    Returns:
        `{"<split>_loss": float}`.
    """
    from zoo.data import DataError, read_text

    from recipes.run_folder import figure_name, load_model, read_run

    args = read_run(folder)["args"]
    if split not in ("train", "val"):
        raise DataError(f"--split {split}: {recipe} splits its text 90/10; expected 'train' or 'val'")
    model = model or load_model(folder)
    data = data or args["data"]
    train, val, length = split_ids(model, read_text(data), data, args)
    x, y = eval_inputs(train if split == "train" else val, args["batch_size"], length, args["eval_batches"], seed=0)
    return {figure_name("loss", split): mean_cross_entropy(model, x, y, args["batch_size"])}


# Every projection of the attention and feed-forward layers (PEFT's usual set for Llama-style models).
LORA_TARGETS = ("query_key_value", "output", "gate", "intermediate")
# --lora-targets' names: the zoo's projection layers ("output": the attention's and the feed-forward's).
LORA_PROJECTIONS = ("query", "key", "value", "output", "gate", "intermediate")
QUANTIZE_MODES = ("int8", "int4")
# Keras' RematScope selects layers by name; the decoder stacks name their blocks block_0, block_1, ...
DECODER_BLOCKS = tuple(f"block_{i}" for i in range(1024))


def lora_projections(text):
    """--lora-targets' argparse type: comma-separated names from
    LORA_PROJECTIONS, or one line naming the first unknown one."""
    import argparse

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in LORA_PROJECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text}: {'unknown projection ' + repr(unknown[0]) if unknown else 'no projection'}; "
            f"expected comma-separated names from {','.join(LORA_PROJECTIONS)}"
        )
    return tuple(dict.fromkeys(names))


def add_fine_tuning_flags(parser, defaults):
    """The fine-tuning recipes' shared flags: --lora, --warmup-steps and
    --weight-decay, then the memory levers --lora-targets, --quantize
    (QLoRA), --accumulate and --remat (with --mixed-precision,
    docs/fine-tuning.md's "Memory levers")."""
    from recipes.flags import COUNT, NON_NEGATIVE, POSITIVE_INT

    parser.add_argument("--lora", type=COUNT, default=defaults["lora"], metavar="RANK",
                        help="train LoRA adapters of this rank on every projection only (0: every weight)")
    parser.add_argument("--warmup-steps", type=COUNT, default=defaults["warmup_steps"], help="linear warm-up steps")
    parser.add_argument("--weight-decay", type=NON_NEGATIVE, default=defaults["weight_decay"],
                        help="AdamW, matrices only")
    parser.add_argument("--lora-targets", type=lora_projections, default=None, metavar="NAMES",
                        help=f"the projections that get LoRA adapters, comma-separated from {','.join(LORA_PROJECTIONS)} "
                        "(output: the attention's and the feed-forward's); default: all of them")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES, default=None,
                        help="QLoRA: the checkpoint's weights quantized and frozen, the --lora adapters in float")
    parser.add_argument("--accumulate", type=POSITIVE_INT, default=1, metavar="N",
                        help="update the weights every N steps with their averaged gradients (batches of "
                        "--batch-size x N); --steps and --warmup-steps count steps")
    parser.add_argument("--remat", action="store_true",
                        help="recompute each decoder block's activations in the backward pass instead of keeping them")


def check_pretrained_flags(parser, args, recipe):
    """What a recipe that fine-tunes a --pretrained checkpoint refuses, as
    `parser`'s error (exit 2) before any model is built: --preset, the
    model's sizes (the checkpoint fixes them), and the memory levers that
    need --lora."""
    from recipes.flags import size_overrides

    if args.preset is not None:
        parser.error(f"--preset: {recipe}'s model is the --pretrained checkpoint; leave --preset out")
    sizes = size_overrides(args)
    if sizes:
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in sorted(sizes))
        parser.error(f"{flags}: the sizes come from the --pretrained checkpoint; leave them out")
    check_memory_flags(parser, args)


def check_memory_flags(parser, args):
    """The memory levers that need --lora: `parser`'s error (exit 2), before any model is built."""
    if args.quantize and not args.lora:
        parser.error(f"--quantize {args.quantize}: QLoRA trains LoRA adapters on the frozen quantized "
                     "checkpoint; add --lora RANK")
    if args.lora_targets is not None and not args.lora:
        parser.error(f"--lora-targets {','.join(args.lora_targets)}: names the projections of LoRA; add --lora RANK")


def load_checkpoint(args, parser, special_tokens=(), default_sequence_length=None):
    """(model, the checkpoint's parameter count): --pretrained with its
    tokenizer (`special_tokens` appended to a tokenizer the zoo trained from
    scratch, `with_special_tokens`), built under Keras' RematScope with
    --remat, quantized with --quantize, LoRA adapters added with --lora on
    --lora-targets; a --sequence-length past the checkpoint's context is
    `parser`'s error, and one not given becomes `default_sequence_length`
    or the context, whichever is shorter."""
    import contextlib

    import keras

    import zoo
    from zoo.models.sharding import get_layout_map
    from zoo.training import distribution_scope

    remat = getattr(args, "remat", False)
    # The scope marks the blocks as they are built; Keras rematerializes them when they are called.
    blocks = keras.RematScope(mode="list_of_layers", layer_names=DECODER_BLOCKS) if remat else contextlib.nullcontext()
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map), blocks:
        model = pretrained_model(args.pretrained)
        parameters = model.count_params()  # the checkpoint's, before any adapters
        if special_tokens and hasattr(model.tokenizer, "with_special_tokens"):
            model = with_special_tokens(model, special_tokens)
        if getattr(args, "quantize", None):
            model.quantize(args.quantize)
        if args.lora:
            model.enable_lora(args.lora, target_names=getattr(args, "lora_targets", None) or LORA_TARGETS)
    window = model.backbone.max_sequence_length
    if args.sequence_length is None:
        args.sequence_length = min(default_sequence_length or window, window)
    if args.sequence_length > window:
        parser.error(f"--sequence-length {args.sequence_length}: the checkpoint's context is {window} tokens")
    return model, parameters


def pretrained_model(pretrained):
    """The causal LM of --pretrained: a run folder's or a `.keras` file's
    (`recipes.run_folder.open_target`), else a checkpoint's
    (`zoo.from_pretrained`)."""
    from pathlib import Path

    import zoo

    from recipes.run_folder import MODEL, open_target

    path = Path(pretrained)
    if not zoo.checkpoints.is_handle(pretrained) and ((path / MODEL).is_file() or path.suffix == ".keras"):
        return open_target(pretrained)
    return zoo.from_pretrained(pretrained, task="causal_lm")


def with_special_tokens(model, tokens, seed=0):
    """`model` with `tokens` appended to its tokenizer's vocabulary as
    special tokens (those it lacks; `CharTokenizer.with_special_tokens`)
    and a row for each appended to the token embedding, and to the head
    where it is not tied to it: a causal LM trained from scratch made ready
    for a chat template's markers. The other ids keep their rows, so the
    model's logits over them are unchanged; a new row is drawn around the
    mean of the others, with their spread in each dimension, as
    transformers' `resize_token_embeddings` starts new rows near the mean.

    Args:
        model: a causal LM carrying a tokenizer with `with_special_tokens`.
        tokens: a sequence of str, e.g. `zoo.tokenizers.CHATML_TOKENS`.
        seed: int, the new rows' draw.

    Returns:
        The causal LM: `model` itself when its tokenizer has every token
        already, else a model of the same class and config with the larger
        vocabulary.
    """
    import keras
    import numpy as np

    tokenizer = model.tokenizer.with_special_tokens(tokens)
    old_size, new_size = model.vocabulary_size, tokenizer.vocabulary_size()
    if new_size <= old_size:
        model.tokenizer = tokenizer
        return model
    config = model.get_config()
    config["backbone"]["config"]["vocabulary_size"] = new_size
    config["tokenizer"] = tokenizer
    grown = type(model).from_config(config)
    rng = np.random.default_rng(seed)
    for old, new in zip(model.weights, grown.weights, strict=True):
        value = keras.ops.convert_to_numpy(old)
        if value.shape != tuple(new.shape):
            axis = next(i for i, (a, b) in enumerate(zip(value.shape, new.shape)) if (a, b) == (old_size, new_size))
            rows = np.moveaxis(value, axis, 0)  # (V, ...)
            drawn = rows.mean(0) + rows.std(0) * rng.standard_normal((new_size - old_size,) + rows.shape[1:])
            value = np.moveaxis(np.concatenate([rows, drawn.astype(rows.dtype)]), 0, axis)
        new.assign(value)
    return grown


def compile_finetuning(model, args, loss, defaults):
    """What the fine-tuning recipes compile: AdamW (--weight-decay on the
    matrices, `defaults`' beta_2 and global clipnorm, the gradients of
    --accumulate steps averaged into each update) with a --warmup-steps
    linear warm-up, then cosine decay over --steps to `defaults`'
    min_learning_rate_fraction of --learning-rate; `loss`; under --strategy.
    Returns the model."""
    from zoo.models.sharding import get_layout_map
    from zoo.training import WarmupCosineDecay, adamw, distribution_scope

    from recipes.flags import jit_compile_flag

    accumulate = getattr(args, "accumulate", 1)
    # The schedule counts updates (Keras' `iterations` under accumulation): one every --accumulate steps.
    schedule = WarmupCosineDecay(
        args.learning_rate, args.warmup_steps // accumulate, max(args.steps // accumulate, 1),
        args.learning_rate * defaults["min_learning_rate_fraction"],
    )
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model.compile(
            optimizer=adamw(schedule, weight_decay=args.weight_decay, beta_2=defaults["beta_2"],
                            global_clipnorm=defaults["clipnorm"], model=model,
                            gradient_accumulation_steps=accumulate),
            loss=loss,
            jit_compile=jit_compile_flag(args),
        )
    return model


def save_sample(text, folder):
    """samples.txt: the sample a run ends with, also printed."""
    (folder / "samples.txt").write_text(text, encoding="utf-8")
    print(text)


def fit_steps(model, args, folder, train_ids, val_ids, sequence_length, epoch_eval_batches, done="trained"):
    """What the language-model recipes' `fit` does: --steps steps of
    random windows of `train_ids`, validated every --steps-per-epoch steps
    on `epoch_eval_batches` fixed windows of `val_ids`; then model.keras is
    the final model. Prints the steps, seconds and tokens a second
    ("trained 2000 steps in ...", `done` first) and returns the seconds.

    A resumed run skips the batches its backup has seen: the windows are a
    function of (seed, step), so it trains on what the killed run would have.
    """
    import os
    import time

    import zoo

    from recipes.run_folder import MODEL, callbacks

    steps_per_epoch = min(args.steps_per_epoch, args.steps)
    windows = train_dataset(train_ids, args.batch_size, sequence_length, args.seed)
    start = time.perf_counter()
    model.fit(
        windows.skip(folder.resumed_epoch * steps_per_epoch),
        steps_per_epoch=steps_per_epoch,
        epochs=-(-args.steps // steps_per_epoch),
        validation_data=eval_inputs(val_ids, args.batch_size, sequence_length, epoch_eval_batches, seed=1),
        validation_batch_size=args.batch_size,
        callbacks=callbacks(folder, save_best=False),
        shuffle=False,  # the windows are already random
        verbose=2 if os.environ.get("CI") else 1,
    )
    seconds = time.perf_counter() - start
    zoo.save(model, folder / MODEL)
    tokens = args.steps * args.batch_size * sequence_length
    print(f"{done} {args.steps} steps in {seconds:.1f} s ({tokens / seconds:,.0f} tokens/s)", flush=True)
    return seconds
