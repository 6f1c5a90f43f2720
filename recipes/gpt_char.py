"""Character-level GPT on Tiny Shakespeare: nanoGPT's CPU "baby GPT".

    python -m recipes.gpt_char          # or: zoo train gpt_char

Trains the `gpt-baby` preset (4 layers, 4 heads, width 128, block 64, no
biases, exact GELU: nanoGPT's `bias=False` model) for 2000 steps of 12 random
windows from the first 90% of the text, with AdamW (lr 1e-3, 100 warm-up
steps, cosine decay to 1e-4, beta2 0.99, weight decay 0.1 on the weight
matrices, global gradient clipping 1.0), then estimates the validation loss
on 200 random batches of the last 10% (1.91 here; nanoGPT reports 1.88 from
20 batches), prints a sample and, as its last lines, `run folder: RUN` and
`val_loss=1.9105`.

By default the train step is XLA-compiled in float32 (`--jit-compile true`),
the fastest setting measured on this project's idle 2-core CPU (73 s for
2000 steps). `--jit-compile fusible --mixed-precision` (XLA for the
element-wise ops only, oneDNN bf16 matmuls on AMX) was faster only while the
machine was heavily shared, and took 104 s when idle.

The run folder (--output, `runs/gpt_char`): `model.keras` (the final model;
its validation loss is the one printed), `chars.json` (the vocabulary),
`history.csv`, `curves.png`, `logs/`, `run.json`, `attention.png` and
`samples.txt`. An interrupted run resumes from `backup/`; a finished run is
replaced only with --overwrite. After training:

    zoo sample runs/gpt_char "ROMEO:" --max-length 300
    zoo eval runs/gpt_char             # the val_loss printed, again
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import time  # noqa: E402
from pathlib import Path  # noqa: E402

from recipes.common import eval_inputs, train_dataset  # noqa: E402,F401 (train_dataset: also benchmarks/train_throughput.py)


# --- Defaults: nanoGPT's config/train_shakespeare_char.py with its README's
# CPU overrides (block 64, batch 12, 4 x 4 x 128, 2000 iters, dropout 0).
DEFAULTS = dict(
    data=str(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare" / "input.txt"),
    preset="baby",  # the zoo preset gpt-baby
    steps=2000,  # max_iters = lr_decay_iters
    batch_size=12,
    learning_rate=1e-3,
    min_learning_rate=1e-4,
    warmup_steps=100,
    weight_decay=0.1,  # matrices (embeddings included) only
    beta_2=0.99,
    clipnorm=1.0,
    train_fraction=0.9,
    steps_per_epoch=250,  # one point of the learning curves
    epoch_eval_batches=20,  # validation batches per epoch, for the curves
    eval_batches=200,  # validation batches of the final estimate
    steps_per_execution=50,  # train steps per compiled call
    jit_compile="true",  # XLA: fastest measured on the idle machine (73 s vs 104 s fusible+bf16)
    mixed_precision=False,  # float32; `--jit-compile fusible --mixed-precision` won only under heavy load
    sample_length=300,
    output="runs/gpt_char",
    seed=1337,
)
VOCABULARY = "chars.json"
# nanoGPT's model: no biases in the projections and LayerNorms, exact GELU.
NANOGPT = dict(use_bias=False, activation="gelu")


def preset_name(preset):
    """'baby' -> 'gpt-baby'; a full zoo preset name ('gpt-baby',
    'llama-baby') is kept."""
    return preset if preset.startswith(("gpt", "llama")) else f"gpt-{preset}"


def build_model(preset, vocabulary_size, **overrides):
    """The causal LM of a preset: a GPT one with nanoGPT's choices, a Llama
    one as it is (it has no biases and its own activation already)."""
    import zoo

    name = preset_name(preset)
    choices = NANOGPT if zoo.preset_info(name)["family"] == "gpt" else {}
    return zoo.build(name, "causal_lm", vocabulary_size=vocabulary_size, **{**choices, **overrides})


def compile_model(model, steps, learning_rate, jit_compile=True, steps_per_execution=1, **settings):
    """AdamW with nanoGPT's schedule and clipping; the cross-entropy loss."""
    import keras

    from zoo.training import WarmupCosineDecay, adamw

    s = {k: settings.get(k, DEFAULTS[k]) for k in ("min_learning_rate", "warmup_steps", "weight_decay", "beta_2", "clipnorm")}
    schedule = WarmupCosineDecay(learning_rate, s["warmup_steps"], steps, s["min_learning_rate"])
    optimizer = adamw(
        schedule, weight_decay=s["weight_decay"], beta_2=s["beta_2"], global_clipnorm=s["clipnorm"], model=model
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    return model


def split_text(text, source, train_fraction, sequence_length, vocabulary=None):
    """Encode (with `vocabulary`, or a new one of the text's characters),
    split 90/10, and refuse a text too short for one block in each part.
    Returns (vocabulary, train ids, validation ids)."""
    from zoo.data import CharVocabulary, DataError

    vocabulary = vocabulary or CharVocabulary.from_text(text)
    try:
        ids = vocabulary.encode(text)
    except DataError as error:
        raise DataError(f"{source}: {error}") from None
    n = int(train_fraction * len(ids))
    train, val = ids[:n], ids[n:]
    if min(len(train), len(val)) < sequence_length + 1:
        need = int((sequence_length + 1) / min(train_fraction, 1 - train_fraction)) + 1
        raise DataError(
            f"{source}: the text has {len(ids)} characters, too short for one block of "
            f"{sequence_length + 1} characters in both the training ({train_fraction:.0%}) and "
            f"validation parts; expected at least {need} characters"
        )
    return vocabulary, train, val




def _printable(c):
    return {"\n": "\\n", " ": "\u2423", "\t": "\\t"}.get(c, c)


def sample(model, prompt="\n", length=300, temperature=0.8, top_p=None, top_k=None, seed=None):
    """`length` characters after `prompt`, from `zoo.generate` on text: past
    the context window, every character is predicted from the last block.

    Args:
        model: a `GPTCausalLM` carrying its `CharTokenizer` (the run's
            model.keras).
        prompt: str, the text to continue (its characters must be in the
            vocabulary).
        length: int, the number of new characters.
        temperature: float > 0; divides the logits.
        top_p: float or None, nucleus sampling.
        top_k: int or None, sampling from the k most likely.
        seed: int or None.

    Returns:
        str, the `length` new characters (without the prompt).

    Example:
    ```python
    model = zoo.load("runs/gpt_char/model.keras")
    print(sample(model, "ROMEO:", 200, seed=0))
    ```
    """
    import zoo

    sampler = {"sampler": "temperature"}
    if top_p is not None:
        sampler = {"sampler": "top_p", "p": top_p}
    elif top_k is not None:
        sampler = {"sampler": "top_k", "k": top_k}
    prompt = prompt or "\n"
    text = zoo.generate(model, prompt, max_length=len(prompt) + length, temperature=temperature, seed=seed, **sampler)
    return text[len(prompt):]


def evaluate(folder, data=None, split="val", model=None):
    """The run's validation loss (mean cross-entropy per character, nats)
    on `split` of `data`: the recipe's last step and `zoo eval` both call
    this, so on the run's own data and split they print the same figure.

    Args:
        folder: the run folder.
        data: a text file or tfds:NAME; None is the run's own --data.
        split: "val" (the last 10%), "train" (the first 90%).
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        `("val_loss", float)`.
    """
    from zoo.data import DataError, read_text

    from recipes.common import load_model, mean_cross_entropy, read_run

    args = read_run(folder)["args"]
    if split not in ("train", "val"):
        raise DataError(f"--split {split}: gpt_char splits its text 90/10; expected 'train' or 'val'")
    model = model or load_model(folder)
    block = model.backbone.max_sequence_length
    data = data or args["data"]
    _, train, val = split_text(read_text(data), data, DEFAULTS["train_fraction"], block, model.tokenizer.vocabulary)
    x, y = eval_inputs(train if split == "train" else val, args["batch_size"], block, args["eval_batches"], seed=0)
    return "val_loss", mean_cross_entropy(model, x, y, args["batch_size"])


def make_parser():
    """The recipe's flags (`zoo train gpt_char -h`)."""
    from recipes.common import recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train gpt_char")
    parser.add_argument("--steps-per-execution", type=int, default=DEFAULTS["steps_per_execution"],
                        help="train steps per compiled call")
    parser.add_argument("--steps-per-epoch", type=int, default=DEFAULTS["steps_per_epoch"],
                        help="steps between two validation points (one row of history.csv)")
    parser.add_argument("--eval-batches", type=int, default=DEFAULTS["eval_batches"],
                        help="random validation batches of the final val_loss")
    parser.add_argument("--sample-length", type=int, default=DEFAULTS["sample_length"],
                        help="characters of the sample printed at the end (0: none)")
    return parser


def main(argv=None):
    import keras

    from zoo.data import CharTokenizer, read_text
    from zoo.models.layout import get_layout_map
    from zoo.training import distribution_scope, start_distribution

    from recipes.common import (
        MODEL,
        OutputFolder,
        callbacks,
        check_preset,
        finish,
        jit_compile_flag,
        plot_attention,
        run_config,
        set_precision,
        size_overrides,
        startup_line,
        write_curves,
    )

    parser = make_parser()
    args = parser.parse_args(argv)
    preset = check_preset(parser, preset_name(args.preset), ("gpt", "llama"), given=args.preset)
    # multi-worker: before TensorFlow runs anything
    start_distribution(args.strategy, mesh=args.mesh, batch_size=args.batch_size)
    jit_compile = jit_compile_flag(args)  # before TensorFlow runs anything

    # 1. Data, checked before anything is written.
    import zoo

    block = zoo.preset_info(preset)["config"]["max_sequence_length"]
    text = read_text(args.data)
    vocabulary, train_ids, val_ids = split_text(text, args.data, DEFAULTS["train_fraction"], block)
    overrides = size_overrides(args)
    print(startup_line("gpt_char", preset, overrides), flush=True)
    config = run_config("gpt_char", args, preset, overrides)
    folder = OutputFolder(args.output, args.overwrite, config=config, strategy=args.strategy)
    vocabulary.save(folder / VOCABULARY)

    # 2. Model, optimizer, data pipelines.
    keras.utils.set_random_seed(args.seed)
    set_precision(args.mixed_precision)
    steps_per_execution = min(args.steps_per_execution, args.steps_per_epoch)
    if args.strategy in ("mirrored", "data-parallel", "multi-worker") and steps_per_execution > 1:
        # Keras 3 cannot loop several steps in one call across replicas
        # (keras-team/keras#19246): one step per call there.
        print(f"--strategy {args.strategy}: --steps-per-execution {steps_per_execution} -> 1 (keras#19246)")
        steps_per_execution = 1
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = build_model(preset, vocabulary.vocabulary_size, tokenizer=CharTokenizer(vocabulary), **overrides)
        compile_model(
            model,
            args.steps,
            args.learning_rate,
            jit_compile=jit_compile,
            steps_per_execution=steps_per_execution,
        )
    steps_per_epoch = min(args.steps_per_epoch, args.steps)
    epochs = -(-args.steps // steps_per_epoch)
    # A resumed run skips the batches the backup has seen: the windows are a
    # function of (seed, step), so it trains on what the killed run would have.
    train = train_dataset(train_ids, args.batch_size, block, args.seed).skip(folder.resumed_epoch * steps_per_epoch)
    epoch_val = eval_inputs(val_ids, args.batch_size, block, DEFAULTS["epoch_eval_batches"], seed=1)

    # 3. Train; model.keras is the final model.
    start = time.perf_counter()
    model.fit(
        train,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        validation_data=epoch_val,
        validation_batch_size=args.batch_size,
        callbacks=callbacks(folder, save_best=False),
        shuffle=False,  # the windows are already random
        verbose=2 if os.environ.get("CI") else 1,
    )
    train_seconds = time.perf_counter() - start
    zoo.save(model, folder / MODEL)

    # 4. Validation loss over random batches of the last 10%, of the saved model.
    _, val_loss = evaluate(folder.path)

    # 5. Plots and a sample.
    write_curves(folder, model, title=f"{preset} on {Path(args.data).name}")
    x_val, _ = eval_inputs(val_ids, 1, block, 1, seed=0)
    example = x_val["token_ids"][:1, :32]
    scores = model.attention_scores({"token_ids": example})["self"]  # (N, 1, h, T, T)
    chars = [_printable(c) for c in vocabulary.decode(example[0])]
    plot_attention(
        keras.ops.convert_to_numpy(scores[-1])[0], chars, chars, folder / "attention.png",
        title=f"last block's self-attention, {len(scores)} blocks",
    )
    if args.sample_length > 0:
        text = sample(model, "\n", args.sample_length, seed=args.seed)
        (folder / "samples.txt").write_text(text, encoding="utf-8")
        print(text)

    tokens = args.steps * args.batch_size * block
    print(f"trained {args.steps} steps in {train_seconds:.1f} s ({tokens / train_seconds:,.0f} tokens/s)")
    finish(folder, "val_loss", val_loss, train_seconds=train_seconds)
    return val_loss


if __name__ == "__main__":
    from recipes.common import run_recipe

    run_recipe(main)
