"""zoo.kernels.cached_attention: a decoding step's attention over its cache
in one call on JAX with a CPU, equal to float64 NumPy's softmax(Q K^T *
scale) V with masked keys removed (a query with no key to attend to is 0);
MultiHeadAttention's cached step calls it and gives what XLA's explicit
form gives, and the tokens a Llama decodes are the same with it and
without it.
"""

import keras
import numpy as np
import pytest

from zoo import kernels
from zoo.layers import MultiHeadAttention

ON_JAX = keras.config.backend() == "jax"
pytestmark = pytest.mark.skipif(not ON_JAX, reason="the kernel is called from JAX's programs")


def _native():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")


def _reference(q, key, value, mask, scale):
    """float64 softmax(Q K^T * scale) V: q (B, g, R, k), key and value (B, g, S, k), mask (B, T, S)."""
    b, g, r, _ = q.shape
    t = mask.shape[1]
    out = np.zeros(q.shape)
    for i in range(b):
        for j in range(g):
            for row in range(r):
                allowed = mask[i, row % t]
                if not allowed.any():
                    continue
                logits = key[i, j].astype(np.float64) @ q[i, j, row].astype(np.float64) * scale
                logits = np.where(allowed, logits, -1e9)
                weights = np.exp(logits - logits.max())
                out[i, j, row] = (weights / weights.sum()) @ value[i, j].astype(np.float64)
    return out


# (B, g, R, T, S, k, mask's B): one query a head, a group of 3 heads, 2 positions, 16 rows, a cache of one key, a
# width that is not a multiple of 16, one mask for every row of the batch, rows in blocks of 8 and 5, the most rows
# the kernel takes (a verification of 16 positions by 3 heads a group, then 64 rows).
SHAPES = [(1, 3, 3, 1, 256, 64, 1), (2, 2, 6, 2, 40, 64, 2), (1, 1, 16, 4, 33, 32, 1), (2, 3, 1, 1, 1, 64, 2),
          (1, 2, 4, 2, 70, 20, 1), (3, 2, 3, 1, 50, 64, 1), (2, 2, 13, 13, 37, 64, 2), (1, 3, 48, 16, 300, 64, 1),
          (1, 1, 64, 8, 129, 128, 1)]


@pytest.mark.parametrize("b,g,r,t,s,k,mask_b", SHAPES)
def test_the_kernel_is_the_float64_attention_with_masked_keys_removed(b, g, r, t, s, k, mask_b):
    _native()
    import jax

    rng = np.random.default_rng(b * 100 + r * 10 + s)
    q, key, value = (rng.standard_normal(shape).astype("float32") * 2 for shape in
                     [(b, g, r, k), (b, g, s, k), (b, g, s, k)])
    mask = rng.random((mask_b, t, s)) < 0.6
    mask[..., 0] = True
    empty_row = b == mask_b and b * t > 1
    if empty_row:
        mask[-1, -1] = False  # a query with nothing to attend to
    scale = 0.3
    out = np.asarray(jax.jit(lambda *a: kernels.cached_attention(*a, scale))(q, key, value, mask))
    expected = _reference(q, key, value, np.broadcast_to(mask, (b, t, s)), scale)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-5)  # float32 logits of up to about 30
    if empty_row:
        assert not out[-1, :, t - 1::t].any()


def test_a_verification_reads_only_the_keys_before_each_position():
    """Causal rows over a cache longer than the positions written: each row
    attends to the keys up to its position, the rest of the cache (here
    NaN, never written) is not read, and a row can start past key 0 (a
    left-padded prompt)."""
    _native()
    import jax

    rng = np.random.default_rng(7)
    g, t, s, k, index = 3, 16, 512, 64, 200
    q = rng.standard_normal((1, g, 3 * t, k)).astype("float32")
    key, value = (rng.standard_normal((1, g, s, k)).astype("float32") for _ in range(2))
    key[:, :, index + t:] = np.nan
    value[:, :, index + t:] = np.nan
    mask = (np.arange(s)[None] <= index + np.arange(t)[:, None])[None]  # (1, T, S)
    mask[..., :5] = False  # padding before the prompt
    out = np.asarray(jax.jit(lambda *a: kernels.cached_attention(*a, 0.125))(q, key, value, mask))
    assert np.isfinite(out).all()
    written = np.nan_to_num(key), np.nan_to_num(value)
    np.testing.assert_allclose(out, _reference(q, *written, mask, 0.125), rtol=1e-4, atol=2e-5)


def test_the_kernel_declines_what_it_does_not_take():
    _native()
    import jax.numpy as jnp

    q = jnp.zeros((1, 2, kernels.ATTENTION_ROWS + 1, 8))
    key = jnp.zeros((1, 2, 5, 8))
    mask = jnp.ones((1, 1, 5), bool)
    assert kernels.cached_attention(q, key, key, mask, 1.0) is None  # more rows: XLA's products
    small = q[:, :, :2]
    assert kernels.cached_attention(small.astype("bfloat16"), key, key, mask, 1.0) is None
    assert kernels.cached_attention(small, key, key, jnp.ones((2, 1, 5), bool), 1.0) is None  # another batch
    assert kernels.cached_attention(small, key, key, jnp.ones((1, 5), bool), 1.0) is None
    with kernels.off():
        assert kernels.cached_attention(small, key, key, mask, 1.0) is None
    assert kernels.cached_attention(small, key, key, mask, 1.0) is not None


def test_a_cached_step_calls_the_kernel_and_agrees_with_xlas_explicit_form():
    _native()
    import jax

    keras.utils.set_random_seed(0)
    layer = MultiHeadAttention(num_heads=6, num_key_value_heads=2)  # heads of width 48 / 6 = 8
    x = np.random.default_rng(0).standard_normal((2, 9, 48)).astype("float32")
    layer(x, use_causal_mask=True)
    empty = (np.zeros((2, 2, 12, 8), "float32"),) * 2

    def decode(x):  # the prompt's 7 positions, then two steps of one
        out, cache = layer(x[:, :7], cache=empty, cache_index=0)
        outs = [out]
        for index in (7, 8):
            out, cache = layer(x[:, index:index + 1], cache=cache, cache_index=index)
            outs.append(out)
        return keras.ops.concatenate(outs, axis=1)

    program = jax.jit(decode).lower(x).as_text()
    assert program.count(kernels.ATTENTION_TARGET) == 3  # the prompt's 7 positions (21 rows a group), two steps
    with_kernel = np.asarray(jax.jit(decode)(x))
    with kernels.off():
        with_xla = np.asarray(jax.jit(lambda x: decode(x))(x))
    np.testing.assert_allclose(with_kernel, with_xla, rtol=1e-5, atol=1e-6)
    whole = np.asarray(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(with_kernel, whole, rtol=1e-4, atol=1e-5)


def test_a_llama_decodes_the_same_tokens_and_logprobs_with_the_kernel():
    _native()
    import zoo

    def llama():  # a model of its own each time: its compiled loops are its own
        keras.utils.set_random_seed(0)
        return zoo.build("llama-nano")

    prompts = [[5, 17, 3, 99, 42], [7, 7, 1]]
    for sampling in (dict(), dict(sampler="temperature", temperature=1.5, seed=3)):
        with_kernel = zoo.generate(llama(), prompts, max_new_tokens=12, logprobs=1, **sampling)
        with kernels.off():
            without = zoo.generate(llama(), prompts, max_new_tokens=12, logprobs=1, **sampling)
        assert with_kernel.sequences == without.sequences
        np.testing.assert_allclose(with_kernel.token_logprobs, without.token_logprobs, rtol=1e-4, atol=1e-5)
