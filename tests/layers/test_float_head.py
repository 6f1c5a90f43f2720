"""zoo.kernels.float_head: a float32 tied output head of 2-4 rows in one
kernel call on JAX with a CPU, equal to float64 NumPy's product within
float32 rounding, with XLA's gradients; TokenEmbedding's reverse call uses
it at those rows and XLA's dot elsewhere, with the same logits to rounding.
"""

import keras
import numpy as np
import pytest

from zoo import kernels
from zoo.layers.token_embedding import TokenEmbedding

pytestmark = pytest.mark.skipif(keras.config.backend() != "jax", reason="the kernel is called from JAX's programs")


def _native():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")


# (rows, V, d): d not a multiple of 16, V not a multiple of 4 or of 64.
@pytest.mark.parametrize("rows,v,d", [(2, 130, 72), (3, 1000, 576), (4, 67, 33), (4, 64, 16)])
def test_the_head_is_the_float64_product(rows, v, d):
    _native()
    import jax

    rng = np.random.default_rng(rows + v + d)
    x = rng.standard_normal((rows, d)).astype("float32")
    table = rng.standard_normal((v, d)).astype("float32")
    expected = x.astype(np.float64) @ table.astype(np.float64).T
    program = jax.jit(kernels.float_head).lower(x, table).as_text()
    assert kernels.FLOAT_TARGET in program
    got = np.asarray(jax.jit(kernels.float_head)(x, table))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    upstream = rng.standard_normal(expected.shape).astype("float32")
    grads = jax.grad(lambda x, t: (kernels.float_head(x, t) * upstream).sum(), argnums=(0, 1))(x, table)
    np.testing.assert_allclose(grads[0], upstream.astype(np.float64) @ table, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grads[1], upstream.astype(np.float64).T @ x, rtol=1e-5, atol=1e-4)


def test_the_head_declines_what_it_does_not_take():
    _native()
    table = np.ones((10, 8), "float32")
    for rows in (1, 5):  # XLA's dot is as fast at one row; the kernel's tiles are of up to 4
        assert kernels.float_head(np.ones((rows, 8), "float32"), table) is None
    assert kernels.float_head(np.ones((2, 8), "float16"), table.astype("float16")) is None
    with kernels.off():
        assert kernels.float_head(np.ones((2, 8), "float32"), table) is None


@pytest.mark.parametrize("rows", [1, 2, 4, 5])
def test_a_tied_head_gives_the_same_logits_with_and_without_the_kernel(rows):
    _native()
    import jax

    keras.utils.set_random_seed(rows)
    table = TokenEmbedding(300, 40)
    table.build((None, None))
    hidden = np.random.default_rng(rows).standard_normal((rows, 1, 40)).astype("float32")  # a decoding step
    head = lambda: (lambda h: table(h, reverse=True))  # noqa: E731  a new function each time: JAX keeps its trace
    uses_kernel = kernels.FLOAT_KERNEL_ROWS[0] <= rows <= kernels.FLOAT_KERNEL_ROWS[1]
    assert (kernels.FLOAT_TARGET in jax.jit(head()).lower(hidden).as_text()) == uses_kernel
    with_kernel = np.asarray(jax.jit(head())(hidden))
    with kernels.off():
        with_dot = np.asarray(jax.jit(head())(hidden))
    expected = hidden[:, 0].astype(np.float64) @ keras.ops.convert_to_numpy(table.embeddings).astype(np.float64).T
    for got in (with_kernel, with_dot):
        np.testing.assert_allclose(got[:, 0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
