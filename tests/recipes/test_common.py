"""The recipes' shared plumbing: the run folder's rules, the evaluation's
cross-entropy against a float64 reference, and the learning curves by
step with the schedule's learning rate."""

import json

import keras
import numpy as np
import pytest

from recipes import errors, lm_data, plots, run_folder, startup


def test_a_finished_run_is_kept_an_unfinished_one_resumes_and_overwrite_starts_afresh(tmp_path):
    path = tmp_path / "run"
    run_folder.OutputFolder(path, config={"recipe": "mine", "args": {"seed": 1}})
    (path / "model.keras").write_bytes(b"weights")
    again = run_folder.OutputFolder(path, config={"recipe": "mine", "args": {"seed": 1}})  # unfinished: resumes
    assert (path / "model.keras").read_bytes() == b"weights"
    again.finish(val_loss=1.25)
    record = json.loads((path / "run.json").read_text())
    assert record["finished"] and record["results"] == {"val_loss": 1.25} and record["recipe"] == "mine"
    assert record["files"] == ["model.keras", "run.json"] and record["folder"] == str(path.resolve())
    assert run_folder.is_run_folder(path) and run_folder.read_run(path)["args"] == {"seed": 1}
    with pytest.raises(FileExistsError, match="--overwrite"):
        run_folder.OutputFolder(path)
    assert (path / "model.keras").exists()
    run_folder.OutputFolder(path, overwrite=True)
    assert not (path / "model.keras").exists() and not json.loads((path / "run.json").read_text())["finished"]


def test_read_run_names_what_is_missing(tmp_path):
    from zoo.data import DataError

    with pytest.raises(DataError, match="no run.json; expected a run folder"):
        run_folder.read_run(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"finished": False}))
    with pytest.raises(DataError, match="the unfinished run has no model.keras"):
        run_folder.read_run(tmp_path)


def test_mean_cross_entropy_matches_a_float64_reference_with_and_without_weights():
    rng = np.random.default_rng(0)
    inputs = keras.Input((5, 3), name="x")
    model = keras.Model({"x": inputs}, keras.layers.Dense(7)(inputs))
    x = rng.normal(size=(11, 5, 3)).astype("float32")
    y = rng.integers(0, 7, size=(11, 5))
    w = (rng.random((11, 5)) < 0.6).astype("float32")
    logits = np.asarray(model.predict({"x": x}, verbose=0), "float64")
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    nll = -np.log(np.take_along_axis(probabilities, y[..., None], -1)[..., 0])
    # Batches of 4 do not divide 11: the last one is short, and every target counts once.
    assert lm_data.mean_cross_entropy(model, {"x": x}, y, 4) == pytest.approx(nll.mean(), rel=1e-6)
    assert lm_data.mean_cross_entropy(model, {"x": x}, y, 4, w) == pytest.approx((nll * w).sum() / w.sum(), rel=1e-6)


def test_curves_are_drawn_by_step_with_the_schedules_learning_rate(tmp_path, monkeypatch):
    import matplotlib.axes

    drawn = []
    original = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append((self, [np.asarray(a, "float64") for a in args[:2]]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    history = {"epoch": [0, 1, 2], "step": [10, 20, 30], "learning_rate": [1.0, 2.0, 3.0],
               "loss": [3.0, 2.0, 1.5], "val_loss": [3.1, 2.2, 1.9]}
    path = plots.plot_curves(history, tmp_path / "curves.png", "t", learning_rate=lambda step: 0.5 * step)
    assert path.is_file() and path.stat().st_size > 0
    titled = {}
    for ax, (xs, ys) in drawn:
        titled.setdefault(ax.get_title(), []).append((xs, ys))
    # The loss panel: train and validation against the step, not the epoch.
    assert [list(xs) for xs, _ in titled["loss"]] == [[10, 20, 30], [10, 20, 30]]
    # The learning-rate panel: the schedule at every step from 0 to the last.
    (steps, rates), = titled["learning rate"]
    assert list(steps) == list(range(31)) and np.allclose(rates, 0.5 * steps)


def test_the_schedule_drawn_is_the_optimizers_own():
    from zoo.training import WarmupCosineDecay

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    assert plots.schedule_of(model) is None  # not compiled: no optimizer
    schedule = WarmupCosineDecay(1e-3, 10, 100, 1e-4)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
    rate = plots.schedule_of(model)
    assert [float(rate(s)) for s in (0, 5, 50, 100)] == pytest.approx([float(schedule(s)) for s in (0, 5, 50, 100)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    assert plots.schedule_of(model) is None


def test_tensorflows_start_up_lines_follow_the_log_level():
    info = "I0000 00:00:1795725546.802619   30236 port.cc:153] oneDNN custom operations are on.\n"
    error = "E0000 00:00:1795725546.802619   30236 cuda_dnn.cc:8579] Unable to register cuDNN factory\n"
    dated = "2025-09-17 14:44:05.157831: W external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] Could not find\n"
    notice = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    python = "UserWarning: something Python says\n"
    assert [startup.shown(line, 0) for line in (info, error, dated, notice, python)] == [True] * 5
    assert [startup.shown(line, 1) for line in (info, error, dated, notice, python)] == [False, True, True, False, True]
    assert [startup.shown(line, 3) for line in (info, error, dated, notice, python)] == [False, False, False, False, True]


def test_a_refused_input_exits_with_argparses_status(capsys):
    from zoo.data import DataError

    def main():
        raise DataError("--data nowhere: no such file")

    with pytest.raises(SystemExit) as exit_info:
        errors.run_recipe(main)
    assert exit_info.value.code == errors.REFUSED == 2
    assert capsys.readouterr().err.strip() == "error: --data nowhere: no such file"
