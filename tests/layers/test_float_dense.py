"""zoo.kernels.float_dense: a float32 Dense product of 1-4 rows (a
decoding step) in one kernel call on JAX with a CPU, the kernel's rows
split between the threads: equal to float64 NumPy's product within
float32 rounding, with XLA's gradients; LoraDense uses it at those rows
outside training, XLA's product elsewhere, with the same outputs to
rounding; a model decodes the same tokens with and without it.
"""

import keras
import numpy as np
import pytest

from zoo import kernels
from zoo.layers.lora_dense import LoraDense

pytestmark = pytest.mark.skipif(keras.config.backend() != "jax", reason="the kernel is called from JAX's programs")


def _native():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")


# (rows, K, N): K under 64 (one part), not a multiple of 4, and of several parts; N not a multiple of 16.
@pytest.mark.parametrize("rows,k,n", [(1, 576, 1536), (1, 1536, 576), (2, 5, 17), (3, 67, 33), (4, 301, 130),
                                      (1, 1, 3), (4, 256, 16)])
def test_the_product_is_the_float64_product(rows, k, n):
    _native()
    import jax

    rng = np.random.default_rng(rows + k + n)
    x = rng.standard_normal((rows, k)).astype("float32")
    kernel = rng.standard_normal((k, n)).astype("float32")
    expected = x.astype(np.float64) @ kernel.astype(np.float64)
    assert kernels.FLOAT_DENSE_TARGET in jax.jit(kernels.float_dense).lower(x, kernel).as_text()
    got = np.asarray(jax.jit(kernels.float_dense)(x, kernel))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_array_equal(np.asarray(jax.jit(kernels.float_dense)(x, kernel)), got)  # the same parts each call
    upstream = rng.standard_normal(expected.shape).astype("float32")
    grads = jax.grad(lambda x, w: (kernels.float_dense(x, w) * upstream).sum(), argnums=(0, 1))(x, kernel)
    np.testing.assert_allclose(grads[0], upstream.astype(np.float64) @ kernel.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grads[1], x.T.astype(np.float64) @ upstream, rtol=1e-5, atol=1e-4)


def test_the_product_keeps_the_leading_axes():
    _native()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 1, 2, 40)).astype("float32")  # 4 rows
    kernel = rng.standard_normal((40, 24)).astype("float32")
    got = np.asarray(kernels.float_dense(x, kernel))
    assert got.shape == (2, 1, 2, 24)
    np.testing.assert_allclose(got, x.astype(np.float64) @ kernel, rtol=1e-5, atol=1e-5)


def test_the_product_declines_what_it_does_not_take():
    _native()
    kernel = np.ones((8, 10), "float32")
    assert kernels.float_dense(np.ones((5, 8), "float32"), kernel) is None  # a prompt, a batch: XLA's product
    assert kernels.float_dense(np.ones((1, 8), "float16"), kernel.astype("float16")) is None
    assert kernels.float_dense(np.ones((1, 8), "float32"), kernel.astype("float16")) is None
    with kernels.off():
        assert kernels.float_dense(np.ones((1, 8), "float32"), kernel) is None
    assert kernels.float_dense(np.ones((1, 8), "float32"), kernel) is not None


@pytest.mark.parametrize("rows", [1, 4, 5])
@pytest.mark.parametrize("use_bias,activation", [(True, "gelu"), (False, None)])
def test_lora_dense_gives_kerass_output_with_and_without_the_kernel(rows, use_bias, activation):
    _native()
    import jax

    keras.utils.set_random_seed(rows)
    dense = LoraDense(70, use_bias=use_bias, activation=activation)
    x = np.random.default_rng(rows).standard_normal((rows, 1, 36)).astype("float32")  # a decoding step of `rows` rows
    dense.build(x.shape)
    if use_bias:
        dense.bias.assign(np.random.default_rng(1).standard_normal(70).astype("float32"))
    call = lambda: (lambda x: dense(x))  # noqa: E731  a new function each time: JAX keeps its trace
    program = jax.jit(call()).lower(x).as_text()
    assert (kernels.FLOAT_DENSE_TARGET in program) == (rows <= kernels.FLOAT_DENSE_ROWS)
    assert kernels.FLOAT_DENSE_TARGET not in jax.jit(lambda x: dense(x, training=True)).lower(x).as_text()
    with_kernel = np.asarray(jax.jit(call())(x))
    with kernels.off():
        without = np.asarray(jax.jit(call())(x))
    reference = keras.layers.Dense(70, use_bias=use_bias, activation=activation)
    reference.build(x.shape)
    reference.set_weights(dense.get_weights())
    expected = np.asarray(reference(x))
    for got in (with_kernel, without):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_an_adapted_lora_dense_keeps_xlas_product():
    _native()
    import jax

    dense = LoraDense(12)
    dense.build((None, 8))
    dense.enable_lora(2)
    assert kernels.FLOAT_DENSE_TARGET not in jax.jit(lambda x: dense(x)).lower(np.ones((1, 8), "float32")).as_text()


@pytest.mark.parametrize("prompts", [[[5, 17, 3, 99, 42]], [[5, 17, 3, 99, 42], [7, 7, 1]]])
def test_a_llama_decodes_the_same_tokens_and_logprobs_with_the_kernel(prompts, monkeypatch):
    _native()
    import zoo
    from zoo.layers import lora_dense

    taken = []

    def counted(x, kernel):
        y = kernels.float_dense(x, kernel)
        taken.append(y is not None)
        return y

    monkeypatch.setattr(lora_dense, "float_dense", counted)

    def llama():  # a model of its own each time: its compiled loops are its own
        keras.utils.set_random_seed(0)
        return zoo.build("llama-nano")

    for sampling in (dict(), dict(sampler="temperature", temperature=1.5, seed=3)):
        taken.clear()
        with_kernel = zoo.generate(llama(), prompts, max_new_tokens=12, logprobs=1, **sampling)
        assert any(taken) and not all(taken)  # the steps' products in the kernel, the prompt's in XLA's
        with kernels.off():
            without = zoo.generate(llama(), prompts, max_new_tokens=12, logprobs=1, **sampling)
        assert with_kernel.sequences == without.sequences
        np.testing.assert_allclose(with_kernel.token_logprobs, without.token_logprobs, rtol=1e-4, atol=1e-5)
