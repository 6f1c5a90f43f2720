"""The tests multiply float32 matrices at full float32 precision on every
device (tests/conftest.py), so float64-reference comparisons hold on GPUs,
whose default is TF32."""

import keras
import numpy as np


def test_full_float32_matmul_setting_is_in_force():
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        assert jax.config.jax_default_matmul_precision == "highest"
    elif backend == "tensorflow":
        import tensorflow as tf

        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    elif backend == "torch":
        import torch

        assert not torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"


def test_float32_matmul_matches_float64_reference():
    # TF32 keeps 10 mantissa bits: the products below would be ~1e-3 off
    # relative per product, ~1e-4 of the largest entry after 256 terms;
    # float32 stays within ~1e-7 of it.
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(64, 256)), rng.normal(size=(256, 64))
    got = keras.ops.convert_to_numpy(keras.ops.matmul(keras.ops.array(a, "float32"), keras.ops.array(b, "float32")))
    reference = a @ b
    np.testing.assert_allclose(got, reference, atol=1e-5 * np.abs(reference).max())
