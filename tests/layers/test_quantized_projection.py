"""The quantized projections against a float64 NumPy reference of the same
quantized weights: int8 per output unit (the activation quantized per row,
abs-max), int4 per output unit (two a byte), int4 in groups with zero
points, and the tied head's int8 table; eagerly and compiled, as a
decoding loop calls them.
"""

import keras
import numpy as np
import pytest
from keras import ops

from zoo.layers import LoraDense
from zoo.layers.token_embedding import TokenEmbedding

D_IN, D_OUT, BATCH = 64, 24, 3


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def compiled(fn):
    if keras.config.backend() == "jax":
        import jax

        return jax.jit(fn)
    if keras.config.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    return fn


def quantize_rows(x):
    """Keras' AbsMaxQuantizer along the last axis: int8 values and their (rows, 1) scales, in float64."""
    scale = 127.0 / np.maximum(np.abs(x).max(axis=-1, keepdims=True), keras.backend.epsilon())
    return np.clip(np.round(x * scale), -127, 127), scale


def int8_in_groups(x, block):
    """x (M, K) float32 rounded to int8 in groups of `block` inputs and de-scaled, in float64: NumPy's
    float32 operations in the kernel's order (127 / max, the product, rounding half to even)."""
    x = np.asarray(x, np.float32)
    out = np.zeros(x.shape, np.float64)
    for k0 in range(0, x.shape[-1], block):
        group = x[..., k0:k0 + block]
        largest = np.abs(group).max(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse = np.where(largest > 0, np.float32(127) / largest, np.float32(0)).astype(np.float32)
            a = np.clip(np.rint(group * inverse), -127, 127)
        out[..., k0:k0 + block] = a.astype(np.float64) * (largest / np.float32(127)).astype(np.float64)
    return out


def unpack_nibbles(packed, length):
    """(rows, ceil(length / 2)) bytes -> (rows, length) signed int4 values: the low nibble first."""
    packed = np.asarray(ops.convert_to_numpy(packed)).astype(np.int8)
    low = (packed << 4).astype(np.int8) >> 4
    high = packed >> 4
    return np.stack([low, high], axis=-1).reshape(packed.shape[0], -1)[:, :length].astype(np.float64)


def quantized_dense(mode, config=None):
    keras.utils.set_random_seed(0)
    layer = LoraDense(D_OUT, use_bias=True, bias_initializer="random_normal")
    layer.build((None, D_IN))
    layer.quantize(mode, config=config)
    return layer


def inputs():
    return np.random.default_rng(1).standard_normal((BATCH, 1, D_IN)).astype("float32")  # one decoding step


def assert_both_calls_match(layer, x, expected):
    for call in (layer, compiled(lambda x: layer(x))):
        np.testing.assert_allclose(numpy(call(ops.convert_to_tensor(x))), expected, rtol=1e-5, atol=1e-5)


def test_int8_is_the_integer_product_of_the_row_quantized_input_descaled():
    layer = quantized_dense("int8")
    x = inputs()
    xq, x_scale = quantize_rows(x.astype(np.float64))
    kernel = numpy(layer._kernel)  # (d_in, d_out) integers
    assert np.array_equal(kernel, np.round(kernel)) and np.abs(kernel).max() <= 127
    expected = xq @ kernel / (x_scale * numpy(layer.kernel_scale)) + numpy(layer.bias)
    assert_both_calls_match(layer, x, expected)


def test_int4_per_unit_is_the_unpacked_integer_product_descaled():
    layer = quantized_dense("int4", keras.quantizers.Int4QuantizationConfig(block_size=-1))
    x = inputs()
    kernel = unpack_nibbles(layer._kernel, D_OUT)  # (d_in, d_out) in [-8, 7]
    assert kernel.min() >= -8 and kernel.max() <= 7
    assert layer.inputs_quantizer is None  # Keras' int4 keeps the activations in float
    expected = x.astype(np.float64) @ kernel / numpy(layer.kernel_scale) + numpy(layer.bias)
    assert_both_calls_match(layer, x, expected)


@pytest.mark.parametrize("block_size", [16, None])  # None: quantize("int4"), Keras' default groups of 128
def test_int4_in_groups_is_x_rounded_in_its_groups_times_the_groups_dequantized_kernel(block_size):
    config = None if block_size is None else keras.quantizers.Int4QuantizationConfig(block_size=block_size)
    layer = quantized_dense("int4", config)
    x = inputs()
    kernel = unpack_nibbles(layer._kernel, D_OUT)  # (d_in, d_out)
    groups = np.asarray(ops.convert_to_numpy(layer.g_idx)).astype(int)  # (d_in,)
    assert len(set(groups.tolist())) == -(-D_IN // (block_size or 128))
    scale, zero = numpy(layer.kernel_scale)[groups], numpy(layer.kernel_zero)[groups]  # (d_in, d_out)
    rounded = int8_in_groups(x.reshape(-1, D_IN), block_size or 128).reshape(x.shape)  # as llama.cpp's q4_0
    expected = rounded @ ((kernel - zero) * scale) + numpy(layer.bias)
    assert_both_calls_match(layer, x, expected)


def tied_head(mode):
    keras.utils.set_random_seed(0)
    table = TokenEmbedding(40, D_IN)
    table.build((None, None))
    table.quantize(mode)
    return table


def assert_head_matches(table, hidden, expected):
    for call in (lambda h: table(h, reverse=True), compiled(lambda h: table(h, reverse=True))):
        np.testing.assert_allclose(numpy(call(ops.convert_to_tensor(hidden))), expected, rtol=1e-5, atol=1e-5)


def test_the_int8_tied_head_is_the_integer_product_with_the_quantized_table():
    table, hidden = tied_head("int8"), inputs()
    hq, h_scale = quantize_rows(hidden.astype(np.float64))
    expected = hq @ numpy(table._embeddings).T / (h_scale * numpy(table.embeddings_scale))  # (V, d) int8 rows
    assert_head_matches(table, hidden, expected)


def test_the_int4_tied_head_is_the_rounded_hidden_states_times_the_groups_dequantized_table():
    table, hidden = tied_head("int4"), inputs()
    rows = unpack_nibbles(table._embeddings, D_IN)  # (V, d) in [-8, 7]
    groups = np.asarray(ops.convert_to_numpy(table.g_idx)).astype(int)  # (d,)
    dequantized = (rows - numpy(table.embeddings_zero)[:, groups]) * numpy(table.embeddings_scale)[:, groups]
    rounded = int8_in_groups(hidden.reshape(-1, D_IN), 128).reshape(hidden.shape)  # Keras' default groups
    assert_head_matches(table, hidden, rounded @ dequantized.T)


def test_the_int8_tied_heads_input_gradient_is_through_the_dequantized_table():
    table, hidden = tied_head("int8"), inputs()
    upstream = np.random.default_rng(2).standard_normal((BATCH, 1, 40)).astype("float32")  # (B, T, V)
    dequantized = numpy(table._embeddings) / numpy(table.embeddings_scale)[:, None]  # (V, d)
    expected = upstream.astype(np.float64) @ dequantized  # (B, T, d)
    if keras.config.backend() == "jax":
        import jax

        got = jax.grad(lambda h: ops.sum(table(h, reverse=True) * upstream))(ops.convert_to_tensor(hidden))
    else:
        import tensorflow as tf

        h = tf.constant(hidden)
        with tf.GradientTape() as tape:
            tape.watch(h)
            loss = tf.reduce_sum(table(h, reverse=True) * upstream)
        got = tape.gradient(loss, h)
    np.testing.assert_allclose(numpy(got), expected, rtol=1e-5, atol=1e-5)
