"""A recipe killed with SIGKILL in the middle of training resumes from its
last backup when started again with the same command, and ends exactly as a
run that was never killed: the same number of steps, the same loss curve
(each epoch logged once) and the same weights.

Training is deterministic (dropout 0), so a second run that ignored the
backup and trained again from step 0 would end with the same curve and
weights: what only a resume does is checked directly. The resumed process
starts at the backup's step and trains exactly the remaining batches
(counted by a callback added to its `fit`), and the rows of history.csv
written before the kill are kept byte for byte.
"""

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from recipes import gpt_char
from zoo.saving import load

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Tester:\nA small text the test writes for itself, with enough characters.\n\nAll:\nAgain, again.\n\n" * 60
STEPS, PER_EPOCH = 120, 20


def command(data, output):
    return ["--data", str(data), "--output", str(output), "--preset", "nano", "--dropout", "0",
            "--steps", str(STEPS), "--steps-per-epoch", str(PER_EPOCH), "--steps-per-execution", "1",
            "--batch-size", "4", "--eval-batches", "2", "--sample-length", "0", "--jit-compile", "false"]


def history(folder):
    with open(folder / "history.csv", newline="") as f:
        return list(csv.DictReader(f))


def backup_epoch(folder):
    path = folder / "backup" / "training_metadata.json"
    try:
        return json.loads(path.read_text())["epoch"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def kill_mid_run(args, folder, after_epochs=2, timeout=240):
    """Starts the recipe, waits for its backup of `after_epochs` epochs, lets
    it run about half an epoch more, and kills it with SIGKILL."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CI="1")
    process = subprocess.Popen([sys.executable, "-m", "recipes.gpt_char", *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    seen = {}
    try:
        while backup_epoch(folder) < after_epochs:
            assert process.poll() is None, f"the run ended before it could be killed:\n{process.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no backup in time"
            epoch = backup_epoch(folder)
            seen.setdefault(epoch, time.monotonic())
            time.sleep(0.01)
        seen[after_epochs] = time.monotonic()
        epoch_seconds = seen[after_epochs] - seen.get(after_epochs - 1, seen[after_epochs] - 0.5)
        time.sleep(epoch_seconds / 2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    return backup_epoch(folder)


class BatchCounter(keras.callbacks.Callback):
    """The optimizer step when training starts (after the backup's weights
    and step are restored) and when it ends, and the batches in between."""

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        self.first_step, self.batches = self._step(), 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1  # one call per batch: --steps-per-execution 1

    def on_train_end(self, logs=None):
        self.last_step = self._step()


@contextlib.contextmanager
def counting_batches():
    """Adds a `BatchCounter` after the recipe's own callbacks (so after its
    backup is restored) to every `fit` the recipe calls."""
    counter = BatchCounter()
    fit = keras.Model.fit

    def counted_fit(self, *args, callbacks=None, **kwargs):
        return fit(self, *args, callbacks=[*(callbacks or []), counter], **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keras.Model, "fit", counted_fit)
        yield counter


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    data = root / "input.txt"
    data.write_text(TEXT, encoding="utf-8")
    keras.utils.clear_session()
    with counting_batches() as reference_count:
        reference_loss = gpt_char.main(command(data, root / "reference"))
    killed_at = kill_mid_run(command(data, root / "killed"), root / "killed")
    history_at_kill = (root / "killed" / "history.csv").read_bytes()
    keras.utils.clear_session()
    with counting_batches() as resumed_count:
        resumed_loss = gpt_char.main(command(data, root / "killed"))  # the same command again
    return dict(root=root, killed_at=killed_at, history_at_kill=history_at_kill, reference_count=reference_count,
                resumed_count=resumed_count, reference_loss=reference_loss, resumed_loss=resumed_loss)


@pytest.mark.integration
def test_the_kill_came_before_the_end(runs):
    assert 2 <= runs["killed_at"] < STEPS // PER_EPOCH


@pytest.mark.integration
def test_the_resumed_process_trains_exactly_the_remaining_batches(runs):
    reference, resumed = runs["reference_count"], runs["resumed_count"]
    assert (reference.first_step, reference.batches, reference.last_step) == (0, STEPS, STEPS)
    done = runs["killed_at"] * PER_EPOCH  # the steps of the backup's epochs
    assert resumed.first_step == done, "the resumed run did not start at the backup's step"
    assert resumed.batches == STEPS - done, "the resumed run did not train exactly the remaining batches"
    assert resumed.last_step == STEPS


@pytest.mark.integration
def test_resumed_run_ends_with_the_same_step_count(runs):
    for name in ("reference", "killed"):
        model = load(runs["root"] / name / "model.keras")
        assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == STEPS, name


@pytest.mark.integration
def test_rows_written_before_the_kill_are_kept_byte_for_byte(runs):
    lines = runs["history_at_kill"].splitlines(keepends=True)
    # The header and the rows of the epochs the backup holds; a row of the
    # epoch after it (logged just before the kill, then trained again) may go.
    kept = b"".join(lines[: 1 + runs["killed_at"]])
    assert len(lines) >= 1 + runs["killed_at"]
    assert (runs["root"] / "killed" / "history.csv").read_bytes().startswith(kept)


@pytest.mark.integration
def test_loss_curve_continues_where_it_stopped(runs):
    reference, resumed = history(runs["root"] / "reference"), history(runs["root"] / "killed")
    assert [r["epoch"] for r in resumed] == [str(e) for e in range(STEPS // PER_EPOCH)]  # each epoch once
    if "step" in resumed[0]:
        assert [int(r["step"]) for r in resumed] == list(range(PER_EPOCH, STEPS + 1, PER_EPOCH))
    # The whole curve is the uninterrupted run's.
    for a, b in zip(reference, resumed):
        for key in ("loss", "val_loss"):
            np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-5, err_msg=f"epoch {a['epoch']} {key}")
    assert runs["resumed_loss"] == pytest.approx(runs["reference_loss"], rel=1e-5)


@pytest.mark.integration
def test_resumed_weights_equal_the_uninterrupted_weights(runs):
    a = load(runs["root"] / "reference" / "model.keras").get_weights()
    b = load(runs["root"] / "killed" / "model.keras").get_weights()
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-6)
    assert not (runs["root"] / "killed" / "backup").exists()  # removed once the run finished


def test_the_log_keeps_its_rows_byte_for_byte_when_a_resume_drops_an_epoch(tmp_path):
    """Whatever the kill's timing: rows the backup holds stay as the csv module wrote them ("\\r\\n")."""
    import json

    from zoo.training import Backup, ResumableCSVLogger

    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / Backup.METADATA).write_text(json.dumps({"epoch": 2, "step": 40}), encoding="utf-8")
    rows = [b"epoch,loss\r\n", b"0,3.1\r\n", b"1,2.9\r\n", b"2,2.7\r\n"]  # epoch 2 was logged, not backed up
    log = tmp_path / "history.csv"
    log.write_bytes(b"".join(rows))
    logger = ResumableCSVLogger(log, backup)
    logger.set_model(keras.Sequential([keras.layers.Dense(1)]))
    logger.on_train_begin()
    logger.on_train_end()
    assert log.read_bytes() == b"".join(rows[:3])
