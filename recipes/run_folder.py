"""The run folder every recipe writes (`--output`), and what reads it back.

    model.keras    the trained task, carrying its tokenizer (the best
                   checkpoint by the recipe's validation figure);
                   `zoo.load(RUN / "model.keras")` after `import zoo`
    history.csv    one row per epoch: step, learning_rate, loss, val_...
    curves.png     the learning curves by step, and the learning rate
    logs/          TensorBoard (`tensorboard --logdir RUN/logs`)
    run.json       recipe, args, preset, size overrides, final figures
                   (results), the figures of each split evaluated
                   (figures: {split: {name: value}}), the folder and its
                   files, and whether the run finished
    backup/        while training only: what an interrupted run resumes from

plus the recipe's extras (attention.png, samples.txt, translations.txt,
the tokenizer's vocabulary file). The recipe's last two lines are
`run folder: RUN` and its figure (`val_loss=...`, `val_bleu=...`,
`val_accuracy=...`).

A recipe module (the skeleton is recipes/recipe.py) has `make_parser()`
(its flags), `main(argv)` (the run; returns its figure) and
`evaluate(folder, data=None, split=..., model=None)` -> a dict of figures
`{name: value}` whose last is the recipe's own: the function that computes
the figures the recipe prints last and that `zoo eval RUN` calls, so the
two agree. Every name carries its split (`figure_name`: `val_bleu`,
`test_bleu`).

Only the public `zoo` API here, as in a user's own script.
"""

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

# The reading side of a run folder is the zoo's: the applications open runs too.
from zoo.targets import MODEL, RUN, is_run_folder, load_model, open_target, read_run  # noqa: F401

HISTORY = "history.csv"
CURVES = "curves.png"
LOGS = "logs"
BACKUP = "backup"


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
        marker = self.path / self.MARKER
        if marker.is_file():  # the figures of the splits evaluated so far stay
            figures = json.loads(marker.read_text(encoding="utf-8")).get("figures")
            if figures:
                record["figures"] = figures
        write_text(marker, json.dumps(record, indent=2, default=str))

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
    moment leaves a run that resumes (`zoo.training.callbacks`).

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
    """history.csv as {column: [floats]}, or {} when it is missing or empty;
    a value missing from an epoch (empty, or Keras CSVLogger's "NA") is NaN."""
    path = Path(path)
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0]) if rows else []
    return {k: [float(r[k]) if r[k] not in ("", None, "NA") else float("nan") for r in rows] for k in columns}


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


def figure_name(metric, split, validation="val"):
    """A figure's name carries its split: `val_<metric>` on the recipe's
    validation split (`val`, or `dev` for SST-2), `<split>_<metric>` on
    any other ("test_bleu")."""
    return f"{'val' if split == validation else split}_{metric}"


def record_figures(path, split, figures, data=None):
    """Adds a split's figures to run.json's `figures` ({split: {name:
    value}}), keeping every other split's and everything else the file
    holds; `data` names another dataset than the run's own."""
    from zoo.files import write_text

    record = json.loads((Path(path) / RUN).read_text(encoding="utf-8"))
    entry = dict(figures)
    if data is not None:
        entry["data"] = str(data)
    record.setdefault("figures", {})[split] = entry
    write_text(Path(path) / RUN, json.dumps(record, indent=2, default=str))
