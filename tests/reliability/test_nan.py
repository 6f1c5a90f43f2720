"""A NaN or infinite loss stops training with a message that names the
step, and no checkpoint is written over the last good one."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from recipes import gpt_char
from recipes.run_folder import OutputFolder, callbacks
from zoo.saving import load, load_weights
from zoo.training.callbacks import NonFiniteLossError

TEXT = "Tester:\nA small text the test writes for itself, with enough characters.\n\nAll:\nAgain, again.\n\n" * 30


def small_model():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def test_an_infinite_target_stops_at_its_step_and_keeps_the_good_backup(tmp_path):
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(40, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    y[27] = np.inf  # with batch size 1 and 10 steps an epoch: step 28, the third epoch's 8th
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(1)
    folder = OutputFolder(tmp_path / "run")
    model = small_model()
    with pytest.raises(NonFiniteLossError, match=r"training loss became (inf|nan) at step 28 \(epoch 3, batch 8\)"):
        model.fit(train, steps_per_epoch=10, epochs=4, validation_data=(x[:5], y[:5]),
                  callbacks=callbacks(folder), verbose=0)
    # The backup holds the two good epochs, and their weights are finite.
    metadata = json.loads((folder / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] == 2 and metadata["step"] == 20
    restored = load_weights(small_model(), folder / "backup" / metadata["weights"])
    assert all(np.isfinite(w).all() for w in restored.get_weights())
    assert all(np.isfinite(w).all() for w in load(folder / "model.keras").get_weights())
    assert len((folder / "history.csv").read_text().strip().splitlines()) == 1 + 2  # header + good epochs


def test_a_recipe_with_an_exploding_learning_rate_stops_with_a_clear_error(tmp_path):
    data = tmp_path / "input.txt"
    data.write_text(TEXT, encoding="utf-8")
    output = tmp_path / "run"
    args = ["--data", str(data), "--output", str(output), "--preset", "nano", "--steps", "8",
            "--steps-per-epoch", "4", "--steps-per-execution", "1", "--batch-size", "4", "--eval-batches", "2",
            "--sample-length", "0", "--jit-compile", "false", "--learning-rate", "1e30"]
    with pytest.raises(NonFiniteLossError, match=r"at step \d+ .*lower the learning rate"):
        gpt_char.main(args)
    assert not (output / "model.keras").exists()
    assert not json.loads((output / "run.json").read_text())["finished"]
