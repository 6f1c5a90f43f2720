"""Callbacks that let a run die and resume without losing or poisoning
anything: an atomic `BackupAndRestore`, an atomic best-model checkpoint,
a CSV log that continues where the run stopped, and a stop on a NaN or
infinite loss.

Keras' own `BackupAndRestore` and `ModelCheckpoint` write their files in
place, so a kill during a save leaves a truncated file where the last good
one was; and `TerminateOnNaN` only sets `stop_training`, after which the
epoch's end still runs and the checkpoints save the NaN weights. These
subclasses keep Keras' behaviour and fix those two things.

The order they are given to `fit` in matters: the NaN
check first; the CSV row and the best model before the backup, so that the
backup (the commit point of an epoch) is written last.
"""

import json
import math
from pathlib import Path

import keras
import numpy as np

from zoo.files import atomic_path, write_text
from zoo.saving import load_weights


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; training stopped before
    any checkpoint was written."""


def _finite(value):
    try:
        return math.isfinite(float(np.asarray(value)))
    except (TypeError, ValueError):
        return True  # not a number (a string, a list): nothing to check


class TerminateOnNonFinite(keras.callbacks.Callback):
    """Stops training with `NonFiniteLossError`, naming the step, as soon as
    the loss (or, at an epoch's end, any monitored figure) is NaN or
    infinite.

    Raising (rather than `TerminateOnNaN`'s `stop_training = True`) ends
    `fit` before `on_epoch_end` and `on_train_end` run, so no checkpoint
    is written over the last good one and the backup is kept for a resume
    with a lower learning rate.

    Args:
        keep: str, where the last good checkpoint is, for the message.
    """

    def __init__(self, keep=None):
        super().__init__()
        self.keep = keep
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def _fail(self, what, value, where):
        keep = f" The last good checkpoint is kept in {self.keep}." if self.keep else ""
        raise NonFiniteLossError(
            f"The {what} became {float(np.asarray(value))} at step {self._step()} ({where}); "
            f"training stopped before writing any checkpoint.{keep} Expected a finite loss: "
            "lower the learning rate, or check the data for NaN or infinite values."
        )

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not _finite(loss):
            self._fail("training loss", loss, f"epoch {self._epoch + 1}, batch {batch + 1}")

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            if key.endswith("loss") and not _finite(value):
                self._fail(key, value, f"end of epoch {epoch + 1}")


class Backup(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` with atomic writes.

    Each backup writes the weights (with the optimizer's state) to a new
    file, renames it into place, and only then replaces
    `training_metadata.json`, which names that file: the metadata is the
    commit point, so a kill at any moment leaves a complete earlier backup
    to resume from. Older weight files are removed after the commit.

    Args:
        backup_dir: str or `pathlib.Path`.
        save_freq: `"epoch"` or an int, as in Keras (an int saves every that
            many batches, but a resume restarts the interrupted epoch).
        delete_checkpoint: bool. Remove the backup when training finishes.
    """

    METADATA = "training_metadata.json"

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        super().__init__(str(backup_dir), save_freq=save_freq, delete_checkpoint=delete_checkpoint)

    @classmethod
    def read_metadata(cls, backup_dir):
        """The committed backup's metadata (`epoch`, `step`, `weights`), or
        None if the folder holds no backup."""
        path = Path(backup_dir) / cls.METADATA
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(
                f"{path}: not a readable backup record ({error}); expected the JSON written by "
                "zoo.training.callbacks.Backup. Delete the backup folder to start over."
            ) from None

    def _load_model(self):
        metadata = self.read_metadata(self.backup_dir)
        if metadata is None:
            return
        weights = Path(self.backup_dir) / metadata.get("weights", "latest.weights.h5")
        if not self.model.built:
            raise ValueError("To resume from a backup, the model must be built before `fit()`.")
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        load_weights(self.model, weights)
        self.model._initial_epoch = int(metadata["epoch"])

    def on_train_begin(self, logs=None):
        self._load_model()

    def _save_model(self):
        folder = Path(self.backup_dir)
        folder.mkdir(parents=True, exist_ok=True)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) if self.model.optimizer else 0
        name = f"step-{step}.weights.h5"
        with atomic_path(folder / name) as tmp:
            self.model.save_weights(tmp)
        metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen, "step": step, "weights": name}
        write_text(folder / self.METADATA, json.dumps(metadata))
        for old in folder.glob("step-*.weights.h5"):
            if old.name != name:
                old.unlink()


class BestModel(keras.callbacks.Callback):
    """Saves the whole model (`.keras`) when the monitored figure improves,
    atomically. The best figure so far is kept in a JSON file beside the
    model, so a resumed run compares against the best of the killed one.

    When the optimizer keeps a moving average of the weights (`use_ema=True`,
    Polyak averaging), the file holds that average, and training goes on
    from the weights it had; validate on the average with
    `keras.callbacks.SwapEMAWeights()` so the figure is the average's too.

    Args:
        path: str or `pathlib.Path`, ending in `.keras`.
        monitor: str, e.g. `"val_loss"`.
        mode: `"min"` or `"max"`.
    """

    def __init__(self, path, monitor="val_loss", mode="min"):
        super().__init__()
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max'; got {mode!r}.")
        self.path = Path(path)
        self.record = self.path.with_suffix(".json")
        self.monitor = monitor
        self.mode = mode
        self.best = None

    def on_train_begin(self, logs=None):
        if self.record.is_file() and self.path.is_file():
            self.best = json.loads(self.record.read_text(encoding="utf-8")).get(self.monitor)

    def _improved(self, value):
        if self.best is None:
            return True
        return value < self.best if self.mode == "min" else value > self.best

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        value = float(np.asarray(value))
        if not math.isfinite(value) or not self._improved(value):
            return
        with atomic_path(self.path) as tmp:
            self._save(tmp)
        self.best = value
        write_text(self.record, json.dumps({self.monitor: value, "epoch": epoch + 1}))


    def _save(self, path):
        optimizer = getattr(self.model, "optimizer", None)
        optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # under a LossScaleOptimizer
        if not getattr(optimizer, "use_ema", False) or not getattr(optimizer, "built", False):
            self.model.save(path)
            return
        variables = self.model.trainable_variables
        trained = [keras.ops.convert_to_numpy(v) for v in variables]
        optimizer.finalize_variable_values(variables)  # the moving averages into the variables
        try:
            self.model.save(path)
        finally:
            for variable, value in zip(variables, trained):
                variable.assign(value)


class ResumableCSVLogger(keras.callbacks.CSVLogger):
    """`keras.callbacks.CSVLogger` that appends, and on a resume first
    drops the rows of epochs the backup does not hold (an epoch logged just
    before the kill is trained again), so the log continues where the
    weights do, with no epoch twice.

    Args:
        path: str or `pathlib.Path`.
        backup_dir: the `Backup` folder to read the resumed epoch from.
    """

    def __init__(self, path, backup_dir):
        super().__init__(str(path), append=True)
        self.backup_dir = backup_dir

    def on_train_begin(self, logs=None):
        metadata = Backup.read_metadata(self.backup_dir)
        resumed = int(metadata["epoch"]) if metadata else 0
        path = Path(self.filename)
        if path.is_file():
            # As bytes: the csv module ends rows with "\r\n", which reading as text would turn into "\n".
            lines = path.read_bytes().decode("utf-8").splitlines(keepends=True)
            kept = lines[:1] + [line for line in lines[1:] if int(line.split(self.sep, 1)[0]) < resumed]
            if kept != lines:
                write_text(path, "".join(kept) if len(kept) > 1 else "")
        super().on_train_begin(logs)

