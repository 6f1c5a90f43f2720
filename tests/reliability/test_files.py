"""Hostile and malformed files: a `.keras` file that would run code is
refused, a truncated or corrupted model or weights file gives an error that
names it, a vocabulary of the wrong size is refused, and a save that dies
half-way leaves the previous file whole."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import zoo
from zoo.tokenizers import CharVocabulary
from zoo.saving import ModelFileError, load, load_weights, save, save_weights

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("files")
    model = zoo.build("gpt-nano", vocabulary_size=20)
    save(model, folder / "model.keras")
    save_weights(model, folder / "model.weights.h5")
    return model, folder


def test_a_lambda_layer_is_refused_by_default(tmp_path):
    inputs = keras.Input((3,))
    outputs = keras.layers.Lambda(lambda x: x * 2)(inputs)  # arbitrary code, run on load
    path = tmp_path / "lambda.keras"
    keras.Model(inputs, outputs).save(path)
    with pytest.raises(ModelFileError, match=r"lambda\.keras.*refused.*Lambda.*safe_mode=False"):
        load(path)
    # The user who trusts the file can still opt out, explicitly.
    model = load(path, safe_mode=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(np.ones((1, 3)))), 2.0)


def test_round_trip_through_zoo_save_and_load(saved):
    model, folder = saved
    x = np.arange(8, dtype="int32").reshape(1, 8) % 20
    inputs = {"token_ids": x, "padding_mask": np.ones_like(x)}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(load(folder / "model.keras")(inputs)),
        keras.ops.convert_to_numpy(model(inputs)), atol=1e-6,
    )


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "empty"])
def test_a_damaged_keras_file_names_the_file(saved, tmp_path, damage):
    _, folder = saved
    data = (folder / "model.keras").read_bytes()
    path = tmp_path / f"{damage}.keras"
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "corrupted":
        broken = bytearray(data)
        middle = len(broken) // 2
        broken[middle : middle + 4096] = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(broken))
    else:
        path.write_bytes(b"")
    with pytest.raises(ModelFileError, match=rf"{damage}\.keras.*(truncated|empty)"):
        load(path)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_weights_file_names_the_file(saved, tmp_path, damage):
    model, folder = saved
    data = (folder / "model.weights.h5").read_bytes()
    path = tmp_path / f"{damage}.weights.h5"
    path.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"not an HDF5 file" * 100)
    with pytest.raises(ModelFileError, match=rf"{damage}\.weights\.h5.*truncated or corrupted"):
        load_weights(model, path)


def test_weights_of_another_model_are_refused(saved, tmp_path):
    _, folder = saved
    other = zoo.build("gpt-nano", vocabulary_size=20, num_layers=1)
    with pytest.raises(ModelFileError, match=r"model\.weights\.h5.*do not fit"):
        load_weights(other, folder / "model.weights.h5")


def test_a_vocabulary_of_another_size_is_refused(saved, tmp_path):
    model, _ = saved
    save(model, tmp_path / "model.keras")
    CharVocabulary("abcdefghij").save(tmp_path / "chars.json")  # 10 characters, the model embeds 20
    with pytest.raises(ModelFileError, match=r"chars\.json.*10 tokens.*embeds 20"):
        load(tmp_path / "model.keras")
    CharVocabulary("abcdefghijklmnopqrst").save(tmp_path / "chars.json")
    assert load(tmp_path / "model.keras") is not None
    with pytest.raises(ModelFileError, match="CharVocabulary.*5 tokens"):
        load(tmp_path / "model.keras", vocabulary=CharVocabulary("abcde"))


def test_a_save_that_fails_half_way_keeps_the_previous_file(saved, tmp_path, monkeypatch):
    model, folder = saved
    path = tmp_path / "model.keras"
    save(model, path)
    before = path.read_bytes()

    def dies_half_way(self, filepath, *args, **kwargs):
        Path(filepath).write_bytes(before[: len(before) // 2])
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(keras.Model, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        save(model, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras"]  # no temporary left


SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import zoo
    from zoo.saving import save

    model = zoo.build("gpt-nano", vocabulary_size=20, num_layers=4, hidden_dim=128, intermediate_dim=512)
    kernel = model.blocks[0].weights[0]
    for i in range(1, 10_000):
        kernel.assign(np.full(kernel.shape, float(i), "float32"))
        save(model, sys.argv[1])
        print(i, flush=True)
    """
)


def test_sigkill_during_a_save_leaves_the_last_good_file(tmp_path):
    """A real process saving in a loop is killed while a temporary file is
    being written; the model file is whole and holds the last finished save."""
    path = tmp_path / "model.keras"
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    try:
        while True:
            assert process.poll() is None, process.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "no save in time"
            if path.exists() and any(p.name.startswith(".model.tmp-") for p in tmp_path.iterdir()):
                break  # a save is under way and an earlier one is in place
            time.sleep(0.002)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finished = [int(line) for line in process.stdout.read().split()]
    assert zipfile.is_zipfile(path)
    model = load(path)
    value = float(keras.ops.convert_to_numpy(model.blocks[0].weights[0])[0, 0])
    # The file holds the last save that finished (or the one finishing at the kill).
    assert value in (finished[-1] if finished else 1, (finished[-1] if finished else 0) + 1)
