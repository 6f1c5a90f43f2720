"""What every recipe shares: its flags, its run folder, its callbacks, its
plots and its last lines of output.

Every recipe writes one run folder (`--output`) with the same layout:

    model.keras    the trained task, carrying its tokenizer (the best
                   checkpoint by the recipe's validation figure);
                   `zoo.load(RUN / "model.keras")` after `import zoo`
    history.csv    one row per epoch: step, learning_rate, loss, val_...
    curves.png     the learning curves by step, and the learning rate
    logs/          TensorBoard (`tensorboard --logdir RUN/logs`)
    run.json       recipe, args, preset, size overrides, final figures
                   (results), the folder and its files, and whether
                   the run finished
    backup/        while training only: what an interrupted run resumes from

plus the recipe's extras (attention.png, samples.txt, translations.txt,
the tokenizer's vocabulary file). The recipe's last two lines are
`run folder: RUN` and its figure (`val_loss=...`, `val_bleu=...`,
`val_accuracy=...`).

A recipe module has `make_parser()` (its flags), `main(argv)` (the run;
returns its figure) and `evaluate(folder, data=None, split=..., model=None)`
-> `(name, value)`, the function that computes the figure the recipe
prints last and that `zoo eval RUN` calls, so the two agree.

Only the public `zoo` API here, as in a user's own script.
"""

import argparse
import csv
import difflib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

MODEL = "model.keras"
HISTORY = "history.csv"
CURVES = "curves.png"
LOGS = "logs"
RUN = "run.json"
BACKUP = "backup"

JIT_COMPILE = ("auto", "true", "false", "fusible")
FUSIBLE_XLA_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_ops_to_cluster=FUSIBLE"
SIZE_FLAGS = ("num_layers", "hidden_dim", "num_heads", "dropout", "intermediate_dim")


def recipe_parser(description, defaults, prog=None):
    """The flags every recipe has, with the recipe's defaults.

    Args:
        description: str, the recipe's one-line summary.
        defaults: dict with at least data, preset, batch_size,
            learning_rate, output and one of steps / epochs; a size
            (`hidden_dim`, `intermediate_dim`, ...) in it is the recipe's
            documented override of the preset, echoed at start and kept in
            run.json.
        prog: str, the program name in usage lines.

    Returns:
        An `argparse.ArgumentParser`.

    Example:
    ```python
    parser = recipe_parser("My recipe", dict(data="toy", preset="gpt-nano", steps=10,
                                             batch_size=4, learning_rate=1e-3, output="runs/mine"))
    args = parser.parse_args(["--steps", "2"])
    ```
    """
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--data", default=defaults["data"], type=data_source, help="a local path, or tfds:NAME (TensorFlow Datasets)"
    )
    parser.add_argument("--preset", default=defaults["preset"], help="the zoo preset (`zoo presets` lists them)")
    if "steps" in defaults:
        parser.add_argument("--steps", type=int, default=defaults["steps"], help="training steps")
    if "epochs" in defaults:
        parser.add_argument("--epochs", type=int, default=defaults["epochs"], help="passes over the training data")
    parser.add_argument("--batch-size", type=int, default=defaults["batch_size"], help="examples per step")
    parser.add_argument("--learning-rate", type=float, default=defaults["learning_rate"], help="peak learning rate")
    override = "overrides the preset's %s (echoed at start, kept in run.json)"
    parser.add_argument("--num-layers", type=int, default=defaults.get("num_layers"), help=override % "num_layers")
    parser.add_argument("--hidden-dim", type=int, default=defaults.get("hidden_dim"), help=override % "hidden_dim")
    parser.add_argument("--num-heads", type=int, default=defaults.get("num_heads"), help=override % "num_heads")
    parser.add_argument("--dropout", type=float, default=defaults.get("dropout"), help=override % "dropout")
    if "intermediate_dim" in defaults:
        parser.add_argument(
            "--intermediate-dim", type=int, default=defaults["intermediate_dim"], help=override % "intermediate_dim"
        )
    parser.add_argument("--output", default=defaults["output"], help="the run folder (model, logs, plots, run.json)")
    parser.add_argument("--overwrite", action="store_true", help="replace a finished run in --output")
    parser.add_argument(
        "--mixed-precision", action=argparse.BooleanOptionalAction, default=defaults.get("mixed_precision", False),
        help="mixed_bfloat16 compute",
    )
    parser.add_argument(
        "--jit-compile", default=defaults.get("jit_compile", "auto"), choices=JIT_COMPILE,
        help="XLA compilation of the train step; 'fusible': XLA for the element-wise ops only "
        "(TensorFlow), the matrix products by oneDNN",
    )
    from zoo.training import STRATEGIES

    parser.add_argument("--strategy", default="default", choices=STRATEGIES, help="distribution strategy")
    parser.add_argument("--mesh", default=None, metavar="BATCHxMODEL",
                        help="--strategy model-parallel (JAX): devices along the batch and model axes, e.g. 2x4")
    parser.add_argument("--seed", type=int, default=defaults.get("seed", 1337), help="random seed")
    return parser


def data_source(value):
    """--data's check at parse time: a tfds: source needs the
    tensorflow-datasets package, named before any work starts."""
    if value.startswith("tfds:") and importlib.util.find_spec("tensorflow_datasets") is None:
        raise argparse.ArgumentTypeError(
            f"{value} needs the `tensorflow_datasets` package, which is not installed; "
            "expected `pip install tensorflow-datasets`"
        )
    return value


def check_preset(parser, name, family, given=None):
    """The preset `name` of `family` (a family name or a tuple of them), or
    a parser error (exit 2) with the closest names, before any work starts;
    `given` is what the user typed when the recipe completed it (gpt_char:
    "nano" -> "gpt-nano")."""
    import zoo

    families = (family,) if isinstance(family, str) else tuple(family)
    names = [preset for each in families for preset in zoo.list_presets(each)]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        parser.error(
            f"--preset {given or name}: unknown {' or '.join(families)} preset; {hint}expected one of {', '.join(names)}"
        )
    return name


def size_overrides(args):
    """The preset sizes the flags override: {name: value} of the size
    flags that are set (by the user or as the recipe's documented
    default)."""
    return {n: getattr(args, n) for n in SIZE_FLAGS if getattr(args, n, None) is not None}


def startup_line(what, preset, overrides):
    """'gpt-nano' or 'gpt-nano, overriding hidden_dim=32 num_layers=1'."""
    if not overrides:
        return f"{what}: preset {preset}"
    return f"{what}: preset {preset}, overriding " + " ".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def require(module, why):
    """Raises a one-line `DataError` at start, before any training, when
    the optional package `module` is not installed (`why` says who needs
    it, e.g. "--data tfds:..." or "the BLEU score")."""
    if importlib.util.find_spec(module) is None:
        from zoo.data import DataError

        raise DataError(f"{why} needs the `{module}` package, which is not installed; expected `pip install {module}`")


def jit_compile_flag(args):
    """Keras' `jit_compile` for --jit-compile; call it before the first
    TensorFlow function runs.

    "fusible" (TensorFlow only) turns on XLA auto-clustering of the
    element-wise ops (`--tf_xla_ops_to_cluster=FUSIBLE`) and leaves the
    matrix products to TensorFlow's oneDNN kernels, which use a CPU's bf16
    (AVX512-BF16 / AMX) units where XLA's CPU dots do not.
    """
    import keras

    if args.jit_compile == "fusible":
        if keras.backend.backend() != "tensorflow":
            return True
        enable_fusible_autoclustering()
        return False
    return {"auto": "auto", "true": True, "false": False}[args.jit_compile]


def enable_fusible_autoclustering():
    """XLA auto-clustering of TensorFlow's element-wise ops on the CPU.

    TensorFlow reads TF_XLA_FLAGS once, when it first optimizes a graph, so
    this must run before any `tf.function` has; flags already set by the
    user are kept.
    """
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_auto_jit" not in flags:
        os.environ["TF_XLA_FLAGS"] = f"{flags} {FUSIBLE_XLA_FLAGS}".strip()


def set_precision(mixed):
    """float32, or mixed_bfloat16 compute."""
    import keras

    keras.config.set_dtype_policy("mixed_bfloat16" if mixed else "float32")


class OutputFolder:
    """The run folder. An existing finished run is never overwritten or
    mixed with a new one unless `overwrite` (which starts afresh); an
    interrupted run (a backup left by `callbacks`) resumes. `strategy`
    (a --strategy name) sends a multi-worker run's non-chief workers to a
    private folder.

    Args:
        path: str or `pathlib.Path`.
        overwrite: bool, replace a finished run.
        config: dict for run.json: recipe, args, preset, overrides.
        strategy: str or None, the --strategy name.

    Example:
    ```python
    folder = OutputFolder("runs/mine", config={"recipe": "mine", "args": {}})
    folder.finish(val_loss=1.5)
    ```
    """

    MARKER = RUN

    def __init__(self, path, overwrite=False, config=None, strategy=None):
        from zoo.files import remove_stale_temporaries
        from zoo.training import worker_output

        # Under multi-worker only the chief writes `path`; the others write
        # to a private folder (tf.distribute's rule).
        self.path = Path(worker_output(path, strategy) if strategy else path)
        marker = self.path / self.MARKER
        finished = marker.exists() and json.loads(marker.read_text()).get("finished")
        if finished and not overwrite:
            raise FileExistsError(
                f"{self.path} already holds a finished run; pass --overwrite to replace it, "
                "or choose another --output."
            )
        if overwrite and marker.exists():  # only a folder that holds a run
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        self.config = dict(config or {})
        self._write(finished=False)

    def _write(self, **extra):
        from zoo.files import write_text

        record = {**self.config, **extra}
        write_text(self.path / self.MARKER, json.dumps(record, indent=2, default=str))

    def finish(self, **results):
        """Marks the run finished, with its final figures and its files."""
        files = sorted(p.name for p in self.path.iterdir() if not p.name.startswith("."))
        self._write(finished=True, results=results, folder=str(self.path.resolve()), files=files)

    @property
    def resumed_epoch(self):
        """The number of epochs the backup holds (0 on a fresh run): a
        recipe whose input stream is a function of the step skips that many
        epochs' batches, so the resumed run sees the data the killed one
        would have seen."""
        from zoo.training import Backup

        metadata = Backup.read_metadata(self.path / BACKUP)
        return int(metadata["epoch"]) if metadata else 0

    def __truediv__(self, name):
        return self.path / name


def run_config(recipe, args, preset, overrides=None, **extra):
    """The run.json record of a recipe's run."""
    return {"recipe": recipe, "preset": preset, "overrides": dict(overrides or {}), "args": vars(args), **extra}


def _step_logger():
    import keras
    import numpy as np

    class StepAndLearningRate(keras.callbacks.Callback):
        """Adds the optimizer step and the learning rate to each epoch's logs
        (so history.csv, TensorBoard and the curves have them)."""

        def on_epoch_end(self, epoch, logs=None):
            if logs is None:
                return
            optimizer = self.model.optimizer
            step = int(keras.ops.convert_to_numpy(optimizer.iterations))
            logs["step"] = step
            rate = optimizer.learning_rate
            logs["learning_rate"] = float(np.asarray(keras.ops.convert_to_numpy(rate)))

    return StepAndLearningRate()


def callbacks(folder, monitor="val_loss", mode="min", save_best=True):
    """Resume after a kill, keep the best model as `model.keras`, stop on a
    NaN loss, log the step and learning rate, to TensorBoard (when the
    `tensorboard` package is installed) and to CSV.

    Every file is written atomically, and the backup last, so a kill at any
    moment leaves a run that resumes (`zoo.training.checkpoints`).

    Args:
        folder: an `OutputFolder` (or a path).
        monitor: str, the figure that picks the best model.
        mode: "min" or "max".
        save_best: bool; False leaves `model.keras` to the recipe.

    Returns:
        A list of `keras.callbacks.Callback`.
    """
    import keras

    from zoo.training import Backup, BestModel, ResumableCSVLogger, TerminateOnNonFinite

    folder = Path(getattr(folder, "path", folder))
    backup = folder / BACKUP
    out = [_step_logger(), TerminateOnNonFinite(keep=backup), ResumableCSVLogger(folder / HISTORY, backup)]
    if importlib.util.find_spec("tensorboard") is not None:
        out.append(keras.callbacks.TensorBoard(str(folder / LOGS), write_graph=False, profile_batch=0))
    else:
        print("TensorBoard logs skipped: `pip install tensorboard` to write them.", file=sys.stderr)
    if save_best:
        out.append(BestModel(folder / MODEL, monitor=monitor, mode=mode))
    out.append(Backup(backup, delete_checkpoint=True))
    return out


def read_history(path):
    """history.csv as {column: [floats]}, or {} when it is missing or empty."""
    path = Path(path)
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0]) if rows else []
    return {k: [float(r[k]) if r[k] not in ("", None) else float("nan") for r in rows] for k in columns}


def plot_curves(history, path, title="", learning_rate=None):
    """The learning curves by step (train and validation of each figure),
    and a panel of the learning rate.

    Args:
        history: dict of lists, as `read_history` gives (columns `step`,
            `learning_rate`, `loss`, `val_loss`, ...); without `step`, the
            epoch number stands in.
        path: where to write the PNG.
        title: str.
        learning_rate: None, or a callable step -> rate (the optimizer's
            schedule), drawn at every step rather than at epoch ends.

    Returns:
        `path`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = history.get("step") or list(range(1, len(next(iter(history.values()), [])) + 1))
    skip = {"step", "epoch", "learning_rate"}
    metrics = [k for k in history if not k.startswith("val_") and k not in skip]
    panels = len(metrics) + 1
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.4), squeeze=False)
    for ax, key in zip(axes[0], metrics):
        ax.plot(steps, history[key], marker=".", label=key)
        if f"val_{key}" in history:
            ax.plot(steps, history[f"val_{key}"], marker=".", label=f"val_{key}")
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.legend()
    ax = axes[0][-1]
    last = int(max(steps)) if len(steps) else 0
    if learning_rate is not None and last > 0:
        grid = np.unique(np.linspace(0, last, num=min(last + 1, 300)).astype("int64"))
        ax.plot(grid, [float(np.asarray(learning_rate(int(s)))) for s in grid])
    elif "learning_rate" in history:
        ax.plot(steps, history["learning_rate"], marker=".")
    ax.set_xlabel("step")
    ax.set_title("learning rate")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def schedule_of(model):
    """The optimizer's learning-rate schedule as a callable step -> float,
    or None when the rate is a constant."""
    import keras

    rate = getattr(getattr(model, "optimizer", None), "_learning_rate", None)
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        return lambda step: keras.ops.convert_to_numpy(rate(step))
    return None


def write_curves(folder, model, title):
    """curves.png of the run's history.csv."""
    return plot_curves(read_history(Path(folder / HISTORY)), folder / CURVES, title, schedule_of(model))


def plot_attention(scores, query_tokens, key_tokens, path, title=""):
    """An attention heat map per head: scores (h, T, S), tokens on the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scores = np.asarray(scores)
    heads = scores.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(3.2 * heads + 1, 3.6), squeeze=False)
    for h, ax in enumerate(axes[0]):
        ax.imshow(scores[h], cmap="viridis", vmin=0.0)
        ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=7)
        ax.set_title(f"head {h}")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def recipe_errors():
    """The errors a recipe reports as one line (what was wrong and what was
    expected) rather than as a traceback."""
    from zoo.data import DataError
    from zoo.saving import ModelFileError
    from zoo.training import NonFiniteLossError

    return (DataError, FileExistsError, ModelFileError, NonFiniteLossError)


def error_line(error):
    """The one line a recipe prints for `error`, or None for an error that
    is a bug (its traceback is the useful output). Recipe errors give
    their message; an error of TensorFlow Datasets (`--data tfds:...`:
    an unknown name, a failed download) its first line."""
    if isinstance(error, recipe_errors()):
        return str(error)
    if type(error).__module__.split(".")[0] == "tensorflow_datasets":
        first = (str(error).strip().splitlines() or [""])[0]
        return f"tfds: {type(error).__name__}: {first}"
    return None


def run_recipe(main):
    """Runs a recipe's `main()` as a script: a recipe error exits with
    status 1 and its message, not a traceback."""
    try:
        main()
    except Exception as error:
        line = error_line(error)
        if line is None:
            raise
        sys.exit(f"error: {line}")


def final_line(name, value):
    """The last line of a recipe: its validation figure, for scripts."""
    print(f"{name}={value:.4f}" if isinstance(value, float) else f"{name}={value}", flush=True)
    sys.stdout.flush()


def finish(folder, name, value, **results):
    """Marks the run finished in run.json, then prints `run folder: RUN`
    and, last, `name=value`."""
    folder.finish(**{name: value}, **results)
    print(f"run folder: {folder.path}", flush=True)
    final_line(name, value)


def is_run_folder(path):
    """Whether `path` is a finished zoo run folder (run.json and model.keras)."""
    path = Path(path)
    return (path / RUN).is_file() and (path / MODEL).is_file()


def load_model(folder):
    """The run's model.keras, for use and evaluation (no optimizer state)."""
    import zoo

    return zoo.load(Path(getattr(folder, "path", folder)) / MODEL, compile=False)


def read_run(path):
    """A run folder's run.json, or a `DataError` saying what is missing."""
    from zoo.data import DataError

    path = Path(path)
    if not (path / RUN).is_file():
        raise DataError(f"{path}: no {RUN}; expected a run folder written by a recipe (`zoo train NAME --output DIR`)")
    record = json.loads((path / RUN).read_text(encoding="utf-8"))
    if not (path / MODEL).is_file():
        state = "finished" if record.get("finished") else "unfinished"
        raise DataError(f"{path}: the {state} run has no {MODEL}; expected a run that trained at least one epoch")
    return record


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


# --- Language-model windows (gpt_char, gpt_finetune) ---


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
