"""What every recipe shares: flags, the output folder, callbacks, the
distribution strategy, and the last line of output.

Backend-specific pieces (tf.distribute) load only where they are used.
"""

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import keras

from zoo.files import remove_stale_temporaries, write_text
from zoo.training.checkpoints import Backup
from zoo.training.distribution import (  # noqa: F401 (recipes import them from here)
    STRATEGIES,
    distribution_scope,
    start_distribution,
    worker_output,
)

JIT_COMPILE = ("auto", "true", "false", "fusible")
FUSIBLE_XLA_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_ops_to_cluster=FUSIBLE"


def recipe_parser(description, defaults):
    """The flags every recipe has, with the recipe's defaults.

    `defaults` holds at least data, preset, batch_size, learning_rate,
    output and one of steps / epochs.
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", default=defaults["data"], help="a local path or a tfds:NAME")
    parser.add_argument("--preset", default=defaults["preset"])
    if "steps" in defaults:
        parser.add_argument("--steps", type=int, default=defaults["steps"])
    if "epochs" in defaults:
        parser.add_argument("--epochs", type=int, default=defaults["epochs"])
    parser.add_argument("--batch-size", type=int, default=defaults["batch_size"])
    parser.add_argument("--learning-rate", type=float, default=defaults["learning_rate"])
    parser.add_argument("--num-layers", type=int, default=None, help="override the preset")
    parser.add_argument("--hidden-dim", type=int, default=None, help="override the preset")
    parser.add_argument("--num-heads", type=int, default=None, help="override the preset")
    parser.add_argument("--dropout", type=float, default=None, help="override the preset")
    parser.add_argument("--output", default=defaults["output"], help="folder for checkpoints, logs, plots, model")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --output")
    parser.add_argument(
        "--mixed-precision", action=argparse.BooleanOptionalAction, default=defaults.get("mixed_precision", False),
        help="mixed_bfloat16 compute",
    )
    parser.add_argument(
        "--jit-compile", default=defaults.get("jit_compile", "auto"), choices=JIT_COMPILE,
        help="XLA compilation of the train step; 'fusible': XLA for the element-wise ops only "
        "(TensorFlow), the matrix products by oneDNN",
    )
    parser.add_argument("--strategy", default="default", choices=STRATEGIES)
    parser.add_argument("--seed", type=int, default=defaults.get("seed", 1337))
    return parser


def size_overrides(args):
    """The --num-layers/--hidden-dim/--num-heads/--dropout flags that were set."""
    names = ("num_layers", "hidden_dim", "num_heads", "dropout")
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def jit_compile_flag(args):
    """Keras' `jit_compile` for --jit-compile; call it before the first
    TensorFlow function runs.

    "fusible" (TensorFlow only) turns on XLA auto-clustering of the
    element-wise ops (`--tf_xla_ops_to_cluster=FUSIBLE`) and leaves the
    matrix products to TensorFlow's oneDNN kernels, which use a CPU's bf16
    (AVX512-BF16 / AMX) units where XLA's CPU dots do not: on such CPUs it
    is the fastest setting measured for small models (benchmarks/results).
    """
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


class OutputFolder:
    """The run's folder. An existing finished run is never overwritten or
    mixed with a new one unless `overwrite` (which starts afresh); an
    interrupted run (a backup left by `callbacks`) resumes. `strategy`
    (a --strategy name) sends a multi-worker run's non-chief workers to a
    private folder."""

    MARKER = "run.json"

    def __init__(self, path, overwrite=False, config=None, strategy=None):
        # Under multi-worker only the chief writes `path`; the others write
        # to a private folder (tf.distribute's rule).
        self.path = Path(worker_output(path, strategy) if strategy else path)
        finished = (self.path / self.MARKER).exists() and json.loads((self.path / self.MARKER).read_text()).get("finished")
        if finished and not overwrite:
            raise FileExistsError(
                f"{self.path} already holds a finished run; pass --overwrite to replace it, "
                "or choose another --output."
            )
        if overwrite and (self.path / self.MARKER).exists():  # only a folder that holds a run
            import shutil

            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        self.config = dict(config or {})
        self._write(finished=False)

    def _write(self, **extra):
        write_text(self.path / self.MARKER, json.dumps({**self.config, **extra}, indent=2, default=str))

    def finish(self, **results):
        self._write(finished=True, **results)

    @property
    def resumed_epoch(self):
        """The number of epochs the backup holds (0 on a fresh run): a
        recipe whose input stream is a function of the step skips that many
        epochs' batches, so the resumed run sees the data the killed one
        would have seen."""
        metadata = Backup.read_metadata(self.path / "backup")
        return int(metadata["epoch"]) if metadata else 0

    def __truediv__(self, name):
        return self.path / name


def callbacks(folder, monitor="val_loss", mode="min", save_best=True):
    """Resume after a kill, keep the best model, stop on a NaN loss, log to
    TensorBoard (when the `tensorboard` package is installed) and CSV.

    Every file is written atomically, and the backup last, so a kill at any
    moment leaves a run that resumes (`zoo.training.checkpoints`)."""
    from zoo.training.checkpoints import BestModel, ResumableCSVLogger, TerminateOnNonFinite

    backup = folder / "backup"
    out = [TerminateOnNonFinite(keep=backup), ResumableCSVLogger(folder / "history.csv", backup)]
    if importlib.util.find_spec("tensorboard") is not None:
        out.append(keras.callbacks.TensorBoard(str(folder / "logs"), write_graph=False, profile_batch=0))
    else:
        print("TensorBoard logs skipped: `pip install tensorboard` to write them.", file=sys.stderr)
    if save_best:
        out.append(BestModel(folder / "best.keras", monitor=monitor, mode=mode))
    out.append(Backup(backup, delete_checkpoint=True))
    return out


def set_precision(mixed):
    keras.config.set_dtype_policy("mixed_bfloat16" if mixed else "float32")


def plot_history(history, path, title=""):
    """The learning curves as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [k for k in history if not k.startswith("val_") and k != "learning_rate"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.5), squeeze=False)
    for ax, key in zip(axes[0], metrics):
        ax.plot(range(1, len(history[key]) + 1), history[key], label=key)
        if f"val_{key}" in history:
            ax.plot(range(1, len(history[f"val_{key}"]) + 1), history[f"val_{key}"], label=f"val_{key}")
        ax.set_xlabel("epoch")
        ax.set_title(key)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    from zoo.training.checkpoints import NonFiniteLossError

    return (DataError, FileExistsError, ModelFileError, NonFiniteLossError)


def run_recipe(main):
    """Runs a recipe's `main()` as a script: a recipe error exits with
    status 1 and its message, not a traceback."""
    try:
        main()
    except recipe_errors() as error:
        sys.exit(f"error: {error}")


def final_line(name, value):
    """The last line of a recipe: its validation figure, for scripts."""
    print(f"{name}={value:.4f}" if isinstance(value, float) else f"{name}={value}", flush=True)
    sys.stdout.flush()
