"""LayerNormalization against a float64 NumPy reference and Keras' LayerNormalization:
its outputs, gradients, dtypes, offsets that would cancel a one-pass sum,
and its configuration and reloading.

Shape letters: B batch, T length, d width.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tests.harness import run_layer_test
from zoo.layers import LayerNormalization

B, T, D = 2, 5, 16
RNG = np.random.default_rng(5)


def np_layer_norm(x, gamma, beta, epsilon):
    x = np.asarray(x, np.float64)
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def built(x, epsilon=1e-5, **kwargs):
    norm = LayerNormalization(epsilon=epsilon, **kwargs)
    norm.build(x.shape)
    if norm.gamma is not None:
        norm.gamma.assign(RNG.normal(size=D).astype("float32"))
    if norm.beta is not None:
        norm.beta.assign(RNG.normal(size=D).astype("float32"))
    return norm


def weights_of(norm):
    gamma = 1.0 if norm.gamma is None else np.asarray(ops.convert_to_numpy(norm.gamma), np.float64)
    beta = 0.0 if norm.beta is None else np.asarray(ops.convert_to_numpy(norm.beta), np.float64)
    return gamma, beta


@pytest.mark.parametrize("center", [True, False])
def test_layer_normalization_matches_the_float64_reference(center):
    x = RNG.normal(size=(B, T, D)).astype("float32")
    norm = built(x, center=center)
    expected = np_layer_norm(x, *weights_of(norm), 1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(norm(x)), expected, atol=1e-5)


@pytest.mark.parametrize("offset", [1e3, -3e4, 1e6])
def test_a_large_offset_does_not_cancel_the_variance(offset):
    # Without the shift, E[x^2] - E[x]^2 of 1e3 + N(0, 1) in float32 keeps
    # no digit of the variance; the shifted sums keep it to float32's rounding.
    x = (offset + RNG.normal(size=(B, T, D))).astype("float32")
    norm = built(x)
    expected = np_layer_norm(x, *weights_of(norm), 1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(norm(x)), expected, atol=2e-3 if offset >= 1e6 else 2e-4)


def test_an_outlier_as_the_first_value_keeps_its_precision():
    # The shift is the row's first value; an outlier there is the worst
    # case of the bound (x_0 - mean)^2 <= d var.
    x = RNG.normal(size=(B, T, D)).astype("float32")
    x[..., 0] = 3000.0
    norm = built(x)
    np.testing.assert_allclose(ops.convert_to_numpy(norm(x)), np_layer_norm(x, *weights_of(norm), 1e-5), atol=1e-4)


def test_a_constant_row_normalises_to_beta():
    x = np.full((B, T, D), 7.25, "float32")
    norm = built(x)
    _, beta = weights_of(norm)
    np.testing.assert_allclose(ops.convert_to_numpy(norm(x)), np.broadcast_to(beta, x.shape), atol=1e-6)


def test_layer_normalization_equals_keras_layer_normalization():
    x = RNG.normal(size=(B, T, D)).astype("float32") * 3 + 0.5
    norm = built(x, epsilon=1e-12)
    keras_norm = keras.layers.LayerNormalization(epsilon=1e-12)
    keras_norm.build(x.shape)
    keras_norm.set_weights(norm.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(norm(x)), ops.convert_to_numpy(keras_norm(x)), atol=2e-6)
    assert [w.path.split("/")[-1] for w in norm.weights] == ["gamma", "beta"]


def test_gradients_match_keras_layer_normalization():
    x = RNG.normal(size=(B, T, D)).astype("float32") + 2.0
    upstream = RNG.normal(size=(B, T, D)).astype("float32")
    norm = built(x)
    keras_norm = keras.layers.LayerNormalization(epsilon=1e-5)
    keras_norm.build(x.shape)
    keras_norm.set_weights(norm.get_weights())
    ours, theirs = gradients(norm, x, upstream), gradients(keras_norm, x, upstream)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, atol=2e-5)


def gradients(layer, x, upstream):
    """d sum(layer(x) * upstream) / d (x, gamma, beta), as NumPy arrays."""
    backend = keras.backend.backend()
    trainable = [v.value for v in layer.trainable_variables]
    if backend == "jax":
        import jax

        def f(x, trainable):
            out, _ = layer.stateless_call(trainable, [], x)
            return (out * upstream).sum()

        dx, dw = jax.grad(f, argnums=(0, 1))(x, trainable)
        return [np.asarray(dx)] + [np.asarray(g) for g in dw]
    if backend == "tensorflow":
        import tensorflow as tf

        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            loss = tf.reduce_sum(layer(xt) * upstream)
        grads = tape.gradient(loss, [xt] + layer.trainable_variables)
        return [g.numpy() for g in grads]
    pytest.skip(f"gradients are checked on JAX and TensorFlow, not {backend}")


def test_bfloat16_inputs_are_normalised_in_float32():
    x = RNG.normal(size=(B, T, D)).astype("float32") + 4.0
    norm = LayerNormalization(epsilon=1e-5, dtype="mixed_bfloat16")
    out = norm(ops.cast(x, "bfloat16"))
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    x_rounded = ops.convert_to_numpy(ops.cast(ops.cast(x, "bfloat16"), "float32"))
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(out, "float32")),
                               np_layer_norm(x_rounded, 1.0, 0.0, 1e-5), atol=2e-2)


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
def test_other_axes_and_rms_scaling_are_keras_own():
    x = RNG.normal(size=(B, T, D)).astype("float32") + 1.0
    for kwargs in ({"axis": 1}, {"axis": [1, 2]}, {"rms_scaling": True}):
        ours, theirs = LayerNormalization(**kwargs), keras.layers.LayerNormalization(**kwargs)
        np.testing.assert_allclose(ops.convert_to_numpy(ours(x)), ops.convert_to_numpy(theirs(x)), atol=1e-6)


def test_layer_normalization_harness(tmp_path):
    run_layer_test(
        LayerNormalization,
        {"epsilon": 1e-5},
        RNG.normal(size=(B, T, D)).astype("float32"),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=2,
        tmp_path=tmp_path,
    )
