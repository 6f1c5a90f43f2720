"""`adamw`: which variables it decays, and by how much, checked through
what an update does to them (zero gradients: Adam moves nothing, so every
change is the decoupled weight decay, w <- w (1 - lr * wd))."""

import keras
import numpy as np
import pytest

from zoo.training import AdamEMAWarmup, adamw

LR, WD = 0.1, 0.5


class Scaled(keras.layers.Layer):
    """A custom layer with a vector that is neither a bias nor a norm's."""

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")
        self.matrix = self.add_weight(name="matrix", shape=(input_shape[-1], 3), initializer="glorot_uniform")

    def call(self, x):
        return (x * self.scale) @ self.matrix


def _model():
    inputs = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(20, 8, name="embedding")(inputs)
    x = keras.layers.Dense(8, name="dense")(x)
    x = keras.layers.LayerNormalization(name="norm")(x)
    x = Scaled(name="custom")(x)
    model = keras.Model(inputs, x)
    rng = np.random.default_rng(0)
    for w in model.trainable_variables:  # no zeros, so that a decay shows everywhere
        w.assign(rng.uniform(0.5, 1.5, w.shape).astype("float32"))
    return model


def _decayed_after_one_step(optimizer, model):
    before = {w.path: keras.ops.convert_to_numpy(w).copy() for w in model.trainable_variables}
    optimizer.apply_gradients([(keras.ops.zeros(w.shape), w) for w in model.trainable_variables])
    out = {}
    for w in model.trainable_variables:
        after = keras.ops.convert_to_numpy(w)
        if np.array_equal(after, before[w.path]):
            out[w.path] = False
        else:
            np.testing.assert_allclose(after, before[w.path] * (1 - LR * WD), rtol=1e-6, err_msg=w.path)
            out[w.path] = True
    return out


def test_adamw_decays_matrices_and_embeddings_not_biases_or_norms():
    model = _model()
    decayed = _decayed_after_one_step(adamw(LR, weight_decay=WD), model)
    assert decayed == {
        "embedding/embeddings": True,  # nanoGPT decays every tensor of rank >= 2
        "dense/kernel": True,
        "dense/bias": False,
        "norm/gamma": False,
        "norm/beta": False,
        "custom/scale": True,  # only the model-wide rule below catches this one
        "custom/matrix": True,
    }


def test_adamw_with_the_model_exempts_every_vector():
    model = _model()
    decayed = _decayed_after_one_step(adamw(LR, weight_decay=WD, model=model), model)
    assert {path for path, d in decayed.items() if d} == {"embedding/embeddings", "dense/kernel", "custom/matrix"}


def test_adamw_decays_a_zoo_model_as_nanogpt_does():
    import zoo

    model = zoo.build("gpt-nano", task="causal_lm", use_bias=True)
    decayed = _decayed_after_one_step(adamw(LR, weight_decay=WD, model=model), model)
    for w in model.trainable_variables:
        assert decayed[w.path] == (len(w.shape) >= 2), (w.path, w.shape)


@pytest.mark.parametrize("clip", [1.0, 0.25, 100.0])
def test_adamw_clips_the_global_gradient_norm(clip):
    # beta_1 = beta_2 = 0 make Adam's step lr * g / (|g| + eps); a large eps
    # keeps it proportional to the (clipped) gradient, so the clipping shows.
    eps = 1e4
    gradients = [np.array([3.0, 0.0, 4.0]), np.full((2, 2), 6.0)]  # global norm 13
    variables = [keras.Variable(np.zeros(g.shape, "float32")) for g in gradients]
    optimizer = adamw(1.0, weight_decay=0.0, beta_1=0.0, beta_2=0.0, epsilon=eps, global_clipnorm=clip)
    optimizer.apply_gradients([(keras.ops.convert_to_tensor(g.astype("float32")), v) for g, v in zip(gradients, variables)])
    factor = min(1.0, clip / 13.0)
    for g, v in zip(gradients, variables):
        clipped = g * factor
        np.testing.assert_allclose(keras.ops.convert_to_numpy(v), -clipped / (np.abs(clipped) + eps), rtol=1e-5)


# --- AdamEMAWarmup: the average of the weights with a warmed-up momentum ------


def _average_after(optimizer, steps, seed=0):
    """Runs `steps` updates of random gradients on one variable; returns
    (the optimizer's average, a float64 NumPy average of the same weights
    with momentum min(m, 1 - (t+1)^-p) at update t)."""
    rng = np.random.default_rng(seed)
    variable = keras.Variable(rng.normal(size=(4, 3)).astype("float32"))
    optimizer.build([variable])
    expected = None
    for t in range(steps):
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(rng.normal(size=(4, 3)).astype("float32")), variable)])
        weights = keras.ops.convert_to_numpy(variable).astype("float64")
        if getattr(optimizer, "ema_warmup", 0):
            momentum = min(optimizer.ema_momentum, 1.0 - (t + 1.0) ** -optimizer.ema_warmup)
        else:
            momentum = optimizer.ema_momentum if t else 0.0
        expected = weights if expected is None else momentum * expected + (1 - momentum) * weights
    average = keras.ops.convert_to_numpy(optimizer._model_variables_moving_average[0])
    return average, expected, keras.ops.convert_to_numpy(variable)


@pytest.mark.parametrize("warmup", [2 / 3, 0.75])
def test_the_warmed_up_average_equals_a_float64_reference(warmup):
    optimizer = AdamEMAWarmup(0.05, use_ema=True, ema_momentum=0.9, ema_warmup=warmup)
    average, expected, weights = _average_after(optimizer, 40)
    np.testing.assert_allclose(average, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(average - weights).max() > 1e-3  # an average, not the weights


def test_no_warmup_is_keras_own_average():
    ours = AdamEMAWarmup(0.05, use_ema=True, ema_momentum=0.9, ema_warmup=0)
    average, expected, _ = _average_after(ours, 12)
    np.testing.assert_allclose(average, expected, rtol=1e-5, atol=1e-6)
    theirs = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9)
    keras_average, _, _ = _average_after(theirs, 12)
    np.testing.assert_allclose(average, keras_average, rtol=1e-6, atol=1e-7)


def test_the_warmup_lags_less_than_a_constant_momentum_early_on():
    constant = AdamEMAWarmup(0.05, use_ema=True, ema_momentum=0.998, ema_warmup=0)
    warmed = AdamEMAWarmup(0.05, use_ema=True, ema_momentum=0.998, ema_warmup=2 / 3)
    constant_average, _, weights = _average_after(constant, 30)
    warmed_average, _, _ = _average_after(warmed, 30)
    assert np.abs(warmed_average - weights).max() < np.abs(constant_average - weights).max()


def test_the_warmup_survives_get_config_and_serialization():
    optimizer = AdamEMAWarmup(0.01, beta_2=0.98, use_ema=True, ema_momentum=0.99, ema_warmup=0.75)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is AdamEMAWarmup
    assert (restored.ema_warmup, restored.ema_momentum, restored.beta_2) == (0.75, 0.99, 0.98)


def test_a_negative_warmup_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"ema_warmup=-1.0: expected a power >= 0"):
        AdamEMAWarmup(0.01, ema_warmup=-1.0)
