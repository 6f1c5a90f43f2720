"""`BestModel` saves the moving average of the weights when the optimizer
keeps one (`use_ema=True`), and training goes on from the trained weights;
without one it saves the weights as they are."""

import keras
import numpy as np
import pytest

import zoo
from zoo.training import BestModel


class Weights(keras.callbacks.Callback):
    """Records the model's weights at each epoch end."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append([np.array(w) for w in self.model.get_weights()])


def fit(tmp_path, use_ema, epochs):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05, use_ema=use_ema, ema_momentum=0.8), loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 4)), rng.normal(size=(64, 1))
    before, after = Weights(), Weights()
    path = tmp_path / "best.keras"
    # A growing monitored value would save only epoch 1: "min" on -epoch saves every epoch.
    epochs_seen = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: logs.update(neg_epoch=-epoch))
    callbacks = [epochs_seen, before, BestModel(path, monitor="neg_epoch", mode="min"), after]
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, shuffle=False, callbacks=callbacks)
    return model, before.seen, after.seen, path


def test_with_an_average_the_file_holds_it_and_training_goes_on_from_the_trained_weights(tmp_path):
    model, before, after, path = fit(tmp_path, use_ema=True, epochs=2)
    for raw, kept in zip(before, after):  # saving put the trained weights back
        for a, b in zip(raw, kept):
            np.testing.assert_array_equal(a, b)
    saved = zoo.load(path, compile=False).get_weights()
    # fit ends by putting the average into the model: the last epoch's file holds that average ...
    for a, b in zip(saved, model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)
    # ... which is not the trained weights.
    assert max(float(np.abs(a - b).max()) for a, b in zip(saved, before[-1])) > 1e-3


def test_without_an_average_the_file_holds_the_trained_weights(tmp_path):
    model, before, _, path = fit(tmp_path, use_ema=False, epochs=1)
    for a, b in zip(zoo.load(path, compile=False).get_weights(), before[-1]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(model.get_weights(), before[-1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("use_ema", [True, False])
def test_an_average_of_the_weights_is_what_validation_sees_with_swap_ema_weights(tmp_path, use_ema):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, use_ema=use_ema, ema_momentum=0.5), loss="mse")
    x, y = np.ones((4, 2)), np.ones((4, 1))
    callbacks = [keras.callbacks.SwapEMAWeights()] if use_ema else []
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0, validation_data=(x, y), callbacks=callbacks)
    # After fit the model holds what validation evaluated: the average with an EMA, the weights without.
    assert history.history["val_loss"][-1] == pytest.approx(float(model.evaluate(x, y, verbose=0)), rel=1e-6)
