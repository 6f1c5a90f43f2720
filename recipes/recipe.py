"""The skeleton every recipe fills in, and `run`, which runs it.

A recipe is a module with these parts, which `run` calls in this order:

    parse(argv) -> args
        its flags (`make_parser()`), checked: a bad flag is one line,
        before anything starts.
    read_data(args) -> data
        everything the run reads (text, tokenizer, pipelines, a
        checkpoint), checked before the run folder is touched.
    open_folder(args, data) -> OutputFolder
        the run folder (`open_run_folder`), with the tokenizer's files.
    make_model(args, data) -> model
        built and compiled.
    fit(model, args, folder, data) -> dict or None
        trains; `model.keras` is then the best or last model; returns
        results for run.json beyond the figures, if any.
    evaluate(folder, data=None, split=VALIDATION_SPLIT, model=None) -> dict
        the figures of a run's model, `{name: value}`, the recipe's own
        last; `zoo eval RUN` calls it too, so the two agree.
    report(model, args, folder, data) -> dict
        the figures of the saved model (through `evaluate`) and what the
        recipe writes from it: samples, attention maps, translations.
        Optional: without it, the figures are `evaluate(folder, model=model)`.

and, where its validation split is not "val", `VALIDATION_SPLIT` (SST-2's
"dev"). A recipe's `main(argv)` is `run(module, argv)`; `python -m
recipes.NAME` and `zoo train NAME` both call it.
"""

import time

VALIDATION_SPLIT = "val"


def validation_split(recipe):
    """The split a recipe validates on, that its figures are named for."""
    return getattr(recipe, "VALIDATION_SPLIT", VALIDATION_SPLIT)


def report(recipe, model, args, folder, data):
    """The recipe's `report` of its saved `model`, or, for a recipe that
    writes nothing more, its `evaluate`."""
    if hasattr(recipe, "report"):
        return recipe.report(model, args, folder, data)
    return recipe.evaluate(folder.path, model=model)


def start(args):
    """A recipe's start, before TensorFlow runs anything: Keras with
    TensorFlow (the recipes' pipelines are tf.data), the distribution
    (--strategy), the seed (--seed: weights, dropout, shuffles) and the
    compute dtype (--mixed-precision; `args.mixed_precision` becomes what
    runs, so that run.json records it) and XLA's flags (--jit-compile
    fusible)."""
    from zoo.training import start_distribution

    from recipes.flags import jit_compile_flag, set_precision
    from recipes.startup import load_keras

    keras = load_keras(tensorflow=True)
    start_distribution(args.strategy, mesh=args.mesh, batch_size=args.batch_size)
    keras.utils.set_random_seed(args.seed)
    args.mixed_precision = set_precision(args.mixed_precision)
    jit_compile_flag(args)  # TensorFlow reads its XLA flags before its first function


def run(recipe, argv=None):
    """Runs `recipe` (a module with the parts above) with the command-line
    flags `argv`: starts Keras (`start`: the distribution,
    the seed, the precision, XLA's flags), reads the data, opens the run
    folder, builds and fits the model, then evaluates the saved model,
    records its figures in run.json, prints them (the recipe's own last,
    after `run folder: RUN`) and marks the run finished. Returns the
    recipe's own figure."""
    from recipes.run_folder import final_line, finish, load_model, record_figures

    args = recipe.parse(argv)
    start(args)
    started = time.time()
    data = recipe.read_data(args)
    folder = recipe.open_folder(args, data)
    model = recipe.make_model(args, data)
    results = recipe.fit(model, args, folder, data) or {}
    train_seconds = time.time() - started
    figures = report(recipe, load_model(folder), args, folder, data)
    total_seconds = time.time() - started
    print(f"training {train_seconds / 60:.1f} min, total {total_seconds / 60:.1f} min", flush=True)
    record_figures(folder.path, validation_split(recipe), figures)
    *others, (name, value) = figures.items()
    for other, figure in others:
        final_line(other, figure)
    finish(folder, name, value, **{"train_seconds": train_seconds, "total_seconds": total_seconds, **results})
    return value


def open_run_folder(name, args, preset, overrides=None, shown=None, **extra):
    """The run folder of recipe `name` (--output, --overwrite, --strategy),
    its run.json naming `preset`, the size `overrides` and `extra`, after
    printing the line that says what trains ("translate: preset
    transformer-small, overriding intermediate_dim=512"; `shown` in place
    of the preset's name)."""
    from recipes.flags import startup_line
    from recipes.run_folder import OutputFolder, run_config

    overrides = dict(overrides or {})
    print(startup_line(name, shown or preset, overrides), flush=True)
    config = run_config(name, args, preset, overrides, **extra)
    return OutputFolder(args.output, args.overwrite, config=config, strategy=args.strategy)


def fit_epochs(model, args, folder, data, callbacks, title, validation="val"):
    """What the recipes that train for --epochs fit: `data["train"]` (a
    pipeline that shuffles itself, repeated), `data["steps"]` steps an
    epoch, validated at each epoch's end on `data[validation]`
    (`data[validation + "_steps"]` batches), with `callbacks`; then the
    learning curves, curves.png, under `title`."""
    from recipes.plots import write_curves

    model.fit(
        data["train"].repeat(),
        steps_per_epoch=data["steps"],
        epochs=args.epochs,
        validation_data=data[validation],
        validation_steps=data[f"{validation}_steps"],
        callbacks=callbacks,
        shuffle=False,  # the pipeline shuffles
    )
    write_curves(folder, model, title=title)
