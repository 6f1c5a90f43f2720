"""LoraDense against a float64 NumPy reference of Hu et al.'s
h = W0 x + (alpha / r) B A x, and its training step against Keras' Dense
(which merges the kernel first): the same update of the adapters.

Shape letters: N rows, d_in and d_out the widths, r the rank.
"""

import keras
import numpy as np
import pytest
from keras import ops

from zoo.layers import LoraDense

N, D_IN, D_OUT, RANK = 6, 5, 4, 2
RNG = np.random.default_rng(3)


def lora_layer(cls, use_bias=True, activation=None):
    """A built layer with LoRA of rank r, every weight random (B too, which
    LoRA starts at zero), the same for both classes."""
    keras.utils.set_random_seed(0)
    layer = cls(D_OUT, use_bias=use_bias, activation=activation)
    layer.build((None, D_IN))
    layer.enable_lora(RANK, lora_alpha=3)
    rng = np.random.default_rng(7)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    layer._kernel.trainable = False  # as `enable_lora` leaves it in a frozen model: only A and B train
    return layer


@pytest.mark.parametrize("use_bias, activation", [(True, None), (False, "relu")])
def test_the_lora_output_is_the_frozen_kernel_plus_the_scaled_low_rank_update(use_bias, activation):
    layer = lora_layer(LoraDense, use_bias, activation)
    x = RNG.normal(size=(N, D_IN)).astype("float32")
    w0, a, b = (np.asarray(ops.convert_to_numpy(v), np.float64) for v in (layer._kernel, layer.lora_kernel_a,
                                                                          layer.lora_kernel_b))
    expected = x @ w0 + 3 / RANK * (x @ a) @ b  # (N, d_out)
    if use_bias:
        expected = expected + np.asarray(ops.convert_to_numpy(layer.bias), np.float64)
    if activation == "relu":
        expected = np.maximum(expected, 0.0)
    np.testing.assert_allclose(np.asarray(layer(x), np.float64), expected, rtol=1e-5, atol=1e-5)


def test_lora_disabled_is_keras_dense():
    layer, reference = LoraDense(D_OUT), keras.layers.Dense(D_OUT)
    layer.build((None, D_IN))
    reference.build((None, D_IN))
    reference.set_weights(layer.get_weights())
    x = RNG.normal(size=(N, D_IN)).astype("float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(reference(x)))


def test_a_training_step_updates_the_adapters_as_keras_merged_kernel_does():
    x = RNG.normal(size=(N, D_IN)).astype("float32")
    y = RNG.normal(size=(N, D_OUT)).astype("float32")
    updated = []
    for cls in (LoraDense, keras.layers.Dense):
        layer = lora_layer(cls)
        model = keras.Sequential([keras.Input((D_IN,)), layer])
        model.compile(keras.optimizers.SGD(0.1), "mse")
        model.train_on_batch(x, y)
        assert [w.path.split("/")[-1] for w in model.trainable_weights] == ["bias", "lora_kernel_a", "lora_kernel_b"]
        updated.append([np.asarray(ops.convert_to_numpy(w)) for w in layer.weights])
    for ours, keras_dense in zip(*updated):
        np.testing.assert_allclose(ours, keras_dense, rtol=1e-5, atol=1e-6)
    assert not np.allclose(updated[0][-1], lora_layer(LoraDense).get_weights()[-1])  # B moved


def test_a_quantized_lora_dense_is_keras_quantized_dense():
    x = RNG.normal(size=(N, D_IN)).astype("float32")
    outputs = []
    for cls in (LoraDense, keras.layers.Dense):
        keras.utils.set_random_seed(0)
        layer = cls(D_OUT)
        layer.build((None, D_IN))
        layer.quantize("int8")  # QLoRA's order: the base quantized, then the adapters added
        layer.enable_lora(RANK)
        layer.lora_kernel_b.assign(np.random.default_rng(7).normal(size=layer.lora_kernel_b.shape))
        outputs.append(np.asarray(layer(x)))
    np.testing.assert_array_equal(*outputs)
