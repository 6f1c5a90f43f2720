"""Character-level GPT on Tiny Shakespeare: nanoGPT's CPU "baby GPT".

    python -m recipes.gpt_char          # or: zoo train gpt_char

Trains the `gpt-baby` preset (4 layers, 4 heads, width 128, block 64, no
biases, exact GELU: nanoGPT's `bias=False` model) for 2000 steps of 12 random
windows from the first 90% of the text, with AdamW (lr 1e-3, 100 warm-up
steps, cosine decay to 1e-4, beta2 0.99, weight decay 0.1 on the weight
matrices, global gradient clipping 1.0), then estimates the validation loss
on 200 random batches of the last 10% (nanoGPT's estimate takes 20), prints
a sample and, as its last lines, `run folder: RUN` and `val_loss=...`
(docs/results.md has the figures, against nanoGPT's 1.88).

By default the train step is XLA-compiled in float32 (`--jit-compile
true`), the fastest setting on an idle CPU (docs/results.md).
`--jit-compile fusible --mixed-precision` compiles only the element-wise
ops with XLA and leaves the matrix products to oneDNN's bf16 kernels
(AMX).

The run folder (--output, `runs/gpt_char`): `model.keras` (the final model;
its validation loss is the one printed), `chars.json` (the vocabulary),
`history.csv`, `curves.png`, `logs/`, `run.json`, `attention.png` and
`samples.txt`. An interrupted run resumes from `backup/`; a finished run is
replaced only with --overwrite. After training:

    zoo sample runs/gpt_char "ROMEO:" --max-length 300
    zoo eval runs/gpt_char             # the val_loss printed, again
"""

import sys
from pathlib import Path

from recipes.errors import run_recipe
from recipes.lm_data import (  # noqa: F401 (train_dataset: also benchmarks/training/train_throughput.py)
    add_language_model_flags,
    eval_inputs,
    fit_steps,
    save_sample,
    split_ids,
    train_dataset,
)
from recipes.recipe import run


# --- Defaults: nanoGPT's config/train_shakespeare_char.py with its README's
# CPU overrides (block 64, batch 12, 4 x 4 x 128, 2000 iters, dropout 0).
DEFAULTS = dict(
    data="tinyshakespeare",  # a registered data set (fetched and cached), a text file, or tfds:tiny_shakespeare
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
    jit_compile="true",  # XLA in float32: the fastest setting on an idle CPU
    mixed_precision=False,
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
    from zoo.data import DataError
    from zoo.tokenizers import CharVocabulary

    vocabulary = vocabulary or CharVocabulary.from_text(text)
    try:
        ids = vocabulary.encode(text)
    except DataError as error:
        raise DataError(f"{source}: {error}") from None
    train, val = split_ids(ids, source, train_fraction, sequence_length, unit="characters")
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

    prompt = prompt or "\n"
    sampler = zoo.generation.sampler_options(top_p, top_k)
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
        `{"val_loss": float}` on the validation split, `{"<split>_loss": float}` on another.
    """
    from recipes.lm_data import split_loss

    def train_and_val(model, text, data, args):
        block = model.backbone.max_sequence_length
        _, train, val = split_text(text, data, DEFAULTS["train_fraction"], block, model.tokenizer.vocabulary)
        return train, val, block

    return split_loss("gpt_char", folder, data, split, model, train_and_val)


def make_parser():
    """The recipe's flags (`zoo train gpt_char -h`)."""
    from recipes.flags import POSITIVE_INT, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train gpt_char")
    parser.add_argument("--steps-per-execution", type=POSITIVE_INT, default=DEFAULTS["steps_per_execution"],
                        help="train steps per compiled call")
    add_language_model_flags(parser, DEFAULTS, "characters")
    return parser


def parse(argv):
    """The flags, the preset checked by its full name."""
    from recipes.flags import check_preset, size_overrides

    parser = make_parser()
    args = parser.parse_args(argv)
    check_preset(parser, preset_name(args.preset), ("gpt", "llama"), given=args.preset, sizes=size_overrides(args))
    return args


def read_data(args):
    """The preset's full name, the vocabulary, the train and validation ids
    and the block (window length), checked before anything is written: a
    dict of preset, vocabulary, train_ids, val_ids, block."""
    import zoo
    from zoo.data import read_text

    preset = preset_name(args.preset)
    block = zoo.preset_info(preset)["config"]["max_sequence_length"]
    vocabulary, train_ids, val_ids = split_text(read_text(args.data), args.data, DEFAULTS["train_fraction"], block)
    return dict(preset=preset, vocabulary=vocabulary, train_ids=train_ids, val_ids=val_ids, block=block)


def open_folder(args, data):
    """The run folder, with the vocabulary in it."""
    from recipes.flags import size_overrides
    from recipes.recipe import open_run_folder

    folder = open_run_folder("gpt_char", args, data["preset"], size_overrides(args))
    data["vocabulary"].save(folder / VOCABULARY)
    return folder


def steps_per_call(args):
    """--steps-per-execution, at most a validation period, and 1 under a
    strategy with replicas: Keras 3 cannot loop several steps in one call
    across replicas (keras-team/keras#19246)."""
    steps = min(args.steps_per_execution, args.steps_per_epoch)
    if args.strategy in ("mirrored", "data-parallel", "multi-worker") and steps > 1:
        print(f"--strategy {args.strategy}: --steps-per-execution {steps} -> 1 (keras#19246)")
        steps = 1
    return steps


def make_model(args, data):
    """The compiled causal LM, carrying its `CharTokenizer`."""
    from zoo.tokenizers import CharTokenizer
    from zoo.models.sharding import get_layout_map
    from zoo.training import distribution_scope

    from recipes.flags import jit_compile_flag, size_overrides

    vocabulary = data["vocabulary"]
    with distribution_scope(args.strategy, mesh=args.mesh, layout_map=get_layout_map):
        model = build_model(
            data["preset"], vocabulary.vocabulary_size, tokenizer=CharTokenizer(vocabulary), **size_overrides(args)
        )
        compile_model(
            model, args.steps, args.learning_rate, jit_compile=jit_compile_flag(args),
            steps_per_execution=steps_per_call(args),
        )
    return model


def fit(model, args, folder, data):
    """--steps steps, then model.keras is the final model; curves.png."""
    from recipes.plots import write_curves

    fit_steps(model, args, folder, data["train_ids"], data["val_ids"], data["block"], DEFAULTS["epoch_eval_batches"])
    write_curves(folder, model, title=f"{data['preset']} on {Path(args.data).name}")


def report(model, args, folder, data):
    """The saved model's validation loss (`evaluate`, as `zoo eval`
    computes it), attention.png and samples.txt."""
    figures = evaluate(folder.path, model=model)
    draw_attention(model, folder, data)
    write_sample(model, args, folder)
    return figures


def draw_attention(model, folder, data):
    """attention.png: the last block's self-attention over 32 validation
    characters."""
    import keras

    from recipes.plots import plot_attention

    x_val, _ = eval_inputs(data["val_ids"], 1, data["block"], 1, seed=0)
    example = x_val["token_ids"][:1, :32]
    scores = model.attention_scores({"token_ids": example})["self"]  # (N, 1, h, T, T)
    chars = [_printable(c) for c in data["vocabulary"].decode(example[0])]
    plot_attention(
        keras.ops.convert_to_numpy(scores[-1])[0], chars, chars, folder / "attention.png",
        title=f"last block's self-attention, {len(scores)} blocks",
    )


def write_sample(model, args, folder):
    """samples.txt: --sample-length characters after a newline, printed."""
    if args.sample_length > 0:
        save_sample(sample(model, "\n", args.sample_length, seed=args.seed), folder)


def main(argv=None):
    """Trains as the module's docstring says; returns the validation loss
    printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
