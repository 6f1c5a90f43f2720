"""zoo.kernels.top_k: on JAX with a CPU one kernel call that gives exactly
what XLA's top_k gives, values, indices and order (ties to the lower index,
-0 below +0, NaN above +inf), and a beam search's tokens and scores are the
same with it and without it; elsewhere it is ops.top_k.
"""

import keras
import numpy as np
import pytest
from keras import ops

from zoo import kernels

pytestmark = pytest.mark.skipif(keras.config.backend() != "jax",
                                reason="the kernel is called from JAX's programs; elsewhere top_k is ops.top_k")


def _reference(x, k):
    """NumPy's top k by XLA's order: the float's bits as a signed integer,
    the negative values' order reversed, ties to the lower index."""
    bits = x.view(np.uint32).astype(np.int64)
    keys = np.where(bits >= 2**31, 0x7FFFFFFF - bits, bits)  # in int64: no wrap, the same order
    order = np.lexsort((np.broadcast_to(np.arange(x.shape[-1]), x.shape), -keys), axis=-1)[..., :k]
    return np.take_along_axis(x, order, -1), order


def _hard_rows(v, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, v)).astype("float32")
    x[1] = np.round(x[1] * 2) / 2  # many ties
    x[2] = -1e9  # all equal: the k lowest indices
    x[3, ::3] = np.float32(-0.0)
    x[3, 1::3] = np.float32(0.0)
    x[4, rng.integers(0, v, 5)] = np.nan
    x[4, rng.integers(0, v, 3)] = np.inf
    x[5] = -np.abs(x[5])  # all negative
    x[5, rng.integers(0, v, 4)] = -np.inf
    return x


@pytest.mark.parametrize("v,k", [(1, 1), (17, 17), (100, 8), (1000, 1), (58101 * 4, 8), (300, 64), (33, 5)])
def test_top_k_is_xlas_exactly(v, k):
    x = _hard_rows(v, v + k)
    expected_values, expected_indices = _reference(x, k)
    values, indices = kernels.top_k(ops.convert_to_tensor(x), k)
    np.testing.assert_array_equal(ops.convert_to_numpy(indices), expected_indices)
    got = ops.convert_to_numpy(values)
    np.testing.assert_array_equal(got.view(np.uint32), expected_values.view(np.uint32))  # -0 and NaN bits too
    with kernels.off():  # XLA's own top_k: the reference is its order
        np.testing.assert_array_equal(ops.convert_to_numpy(kernels.top_k(ops.convert_to_tensor(x), k)[1]),
                                      expected_indices)


def test_the_kernel_is_called_inside_programs_and_only_where_it_takes_the_input():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    import jax

    x = np.random.default_rng(0).standard_normal((2, 3, 500)).astype("float32")  # leading axes kept
    program = jax.jit(lambda x: kernels.top_k(x, 4)).lower(x).as_text()
    assert kernels.TOP_K_TARGET in program
    values, indices = jax.jit(lambda x: kernels.top_k(x, 4))(x)
    expected_values, expected_indices = _reference(x, 4)
    np.testing.assert_array_equal(np.asarray(indices), expected_indices)
    np.testing.assert_array_equal(np.asarray(values), expected_values)
    for other, k in ((x, kernels.TOP_K_LARGEST + 1), (x.astype("float16"), 4)):  # XLA's top_k
        assert kernels.TOP_K_TARGET not in jax.jit(lambda x: kernels.top_k(x, k)).lower(other).as_text()
    with kernels.off():
        assert kernels.TOP_K_TARGET not in jax.jit(lambda x: kernels.top_k(x, 4)).lower(x).as_text()
