"""`fit` makes the optimizer's variables before it traces its step: the
step is traced once (on TensorFlow without a distribution strategy Keras
leaves them to the first step, which is then traced twice), and the
weights it trains are bit for bit those of Keras' own order."""

import keras
import numpy as np
import pytest
import zoo


def _data():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 20, (32, 9)).astype("int32")
    return {"token_ids": tokens[:, :-1], "padding_mask": np.ones_like(tokens[:, :-1])}, tokens[:, 1:]


def _compiled_model(metrics=None):
    keras.utils.set_random_seed(0)
    model = zoo.build("gpt-nano", task="causal_lm", vocabulary_size=20, dropout=0.1)
    model.compile("adamw", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=metrics)
    return model


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="counts the traces of a tf.function")
def test_fit_traces_its_training_step_once():
    x, y = _data()
    model = _compiled_model()
    traces = []
    train_step = model.train_step
    model.train_step = lambda *args: traces.append(1) or train_step(*args)  # runs once per trace
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert len(traces) == 1
    assert model.optimizer.iterations.numpy() == 4


@pytest.mark.parametrize("metrics", [None, ["accuracy"]])
def test_fit_trains_the_weights_and_history_of_keras_own_order(metrics):
    x, y = _data()
    model = _compiled_model(metrics)
    history = model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history
    twin = _compiled_model(metrics)
    twin_history = keras.Model.fit(twin, x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history
    assert history == twin_history
    for ours, keras_own in zip(model.get_weights(), twin.get_weights()):
        np.testing.assert_array_equal(ours, keras_own)


def _frozen_classifier():
    keras.utils.set_random_seed(0)
    model = zoo.build("bert-tiny", task="classifier", num_classes=2, vocabulary_size=20)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.backbone.trainable = False  # after compile, before the first fit: that fit's trainable variables count
    return model


def test_a_backbone_frozen_after_compile_stays_as_it_was_and_the_head_trains_as_under_keras():
    rng = np.random.default_rng(1)
    tokens = rng.integers(1, 20, (16, 8)).astype("int32")
    x = {"token_ids": tokens, "segment_ids": np.zeros_like(tokens), "padding_mask": np.ones_like(tokens)}
    y = rng.integers(0, 2, (16,))
    model, twin = _frozen_classifier(), _frozen_classifier()
    backbone = [keras.ops.convert_to_numpy(w) for w in model.backbone.weights]
    head = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    keras.Model.fit(twin, x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert len(model.optimizer.variables) == len(twin.optimizer.variables)
    for before, weight in zip(backbone, model.backbone.weights):
        np.testing.assert_array_equal(before, keras.ops.convert_to_numpy(weight))
    assert all(not np.array_equal(before, keras.ops.convert_to_numpy(w)) for before, w in zip(head, model.trainable_weights))
    for ours, keras_own in zip(model.get_weights(), twin.get_weights()):
        np.testing.assert_array_equal(ours, keras_own)
