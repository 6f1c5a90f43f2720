"""LoraDense against a float64 NumPy reference of Hu et al.'s
h = W0 x + (alpha / r) B A x, and its training step against Keras' Dense
(which merges the kernel first): the same update of the adapters.

Shape letters: N rows, d_in and d_out the widths, r the rank.
"""

import keras
import numpy as np
import pytest
from keras import ops

from zoo.kernels import int8_in_groups
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


QUANTIZED = {  # name: (mode, config, d_in)
    "int8": ("int8", None, D_IN),
    "int4, one scale per column": ("int4", keras.quantizers.Int4QuantizationConfig(block_size=-1), D_IN),
    "int4 in groups with zero points": ("int4", keras.quantizers.Int4QuantizationConfig(block_size=4), 10),
}


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_quantized_lora_dense_trains_as_keras_quantized_dense(name):
    """QLoRA's order, the base quantized and then the adapters added, below
    a float Dense: the outputs and one SGD update of the float layer (through
    the quantized layer's input gradient) and of the adapters equal Keras'
    Dense, whose dequantized kernels are computed in another order (in
    groups, of inputs rounded in the groups already, the rounding passing
    the gradient straight through)."""
    mode, config, d_in = QUANTIZED[name]
    x = RNG.normal(size=(N, 3)).astype("float32")
    y = RNG.normal(size=(N, D_OUT)).astype("float32")
    outputs, updated, initial = [], [], None
    for cls in (LoraDense, keras.layers.Dense):
        keras.utils.set_random_seed(0)
        below, layer = keras.layers.Dense(d_in), cls(D_OUT)
        # int4 in groups multiplies its inputs rounded to int8 in the same groups (as llama.cpp's q4_0), its LoRA
        # the inputs as they are: both layers are given inputs rounded already (rounding again keeps them, to an
        # ulp).
        rounded = []
        if config is not None and config.block_size not in (None, -1):
            rounded = [keras.layers.Lambda(lambda h: int8_in_groups(h, config.block_size))]
        model = keras.Sequential([keras.Input((3,)), below, *rounded, layer])
        layer.quantize(mode, config=config)
        layer.enable_lora(RANK)
        layer.lora_kernel_b.assign(np.random.default_rng(7).normal(size=layer.lora_kernel_b.shape))
        outputs.append(np.asarray(model(x)))
        initial = np.asarray(ops.convert_to_numpy(below.kernel))
        model.compile(keras.optimizers.SGD(0.1), "mse")
        model.train_on_batch(x, y)
        updated.append([np.asarray(ops.convert_to_numpy(w)) for w in model.trainable_weights])
    np.testing.assert_allclose(*outputs, rtol=1e-6, atol=1e-6)
    for ours, keras_dense in zip(*updated):
        np.testing.assert_allclose(ours, keras_dense, rtol=1e-5, atol=1e-6)
    assert not np.allclose(updated[1][0], initial)  # the gradient reached the float layer below


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="reads XLA's buffer assignment of a JAX program")
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_a_quantized_stack_does_not_hold_its_float_kernels_through_the_training_step(mode):
    """The compiled training step of a stack of quantized LoRA layers holds
    about one layer's float kernel at a time, not every layer's from the
    forward pass to the backward pass: its temporaries exceed the float
    stack's, whose kernels are arguments, by less than two kernels."""
    import jax

    layers, width = 8, 128
    x = RNG.normal(size=(16, width)).astype("float32")
    temporaries = {}
    for quantized in (False, True):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((width,)), *[LoraDense(width) for _ in range(layers)]])
        if quantized:
            model.quantize(mode, config=keras.quantizers.Int4QuantizationConfig(block_size=32) if mode == "int4" else None)
        for layer in model.layers:
            layer.enable_lora(2)
        model.compile(keras.optimizers.SGD(0.1), "mse")
        model.optimizer.build(model.trainable_variables)
        state = [[v.value for v in variables] for variables in (
            model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
            model.metrics_variables)]
        compiled = jax.jit(model.train_step, donate_argnums=0).lower(state, (x, x, None)).compile()
        temporaries[quantized] = compiled.memory_analysis().temp_size_in_bytes
    kernel = width * width * 4
    assert temporaries[True] - temporaries[False] < 2 * kernel, (temporaries, kernel)
