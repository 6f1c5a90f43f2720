"""zoo.kernels.integer_matmul: int8 x int8 -> int32 products equal to
NumPy's, exactly, on every backend; on JAX with a CPU through the compiled
kernel (a custom call in the program), which is compiled once, rebuilt
when its file is corrupt, and replaced by XLA's dot where it cannot be
compiled. zoo.kernels.quantized_matmul: Keras' int8 product (the rows
quantized, multiplied, de-scaled) in one call, the same numbers as Keras'
operations. zoo.kernels.int4_matmul: float x int4 in groups (a Dense kernel,
a tied head) equal to float64 NumPy's product of the dequantized weights.
"""

import keras
import numpy as np
import pytest
from keras import ops

from zoo import kernels
from zoo.layers import LoraDense
from tests.layers.test_quantized_projection import int8_in_groups
from zoo.layers.token_embedding import TokenEmbedding

ON_JAX = keras.config.backend() == "jax"
jax_only = pytest.mark.skipif(not ON_JAX, reason="the kernel is called from JAX's programs")


def compiled(fn):
    if ON_JAX:
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    return tf.function(fn, jit_compile=True)


# (M, K, N): one decoding row, up to 4 (multiplied as the weights are read), more (a packed panel, in
# tiles of 6 rows and fewer); K not a multiple of 4, N not a multiple of 64 or of 4.
SHAPES = [(1, 576, 576), (2, 7, 3), (3, 130, 65), (4, 64, 128), (5, 9, 70), (7, 33, 64), (13, 100, 129), (1, 1, 1),
          (6, 64, 64), (32, 512, 200), (41, 130, 67)]


def operands(m, k, n, transposed):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)  # the whole int8 range, -128 included
    x[0, : min(k, 3)] = [-128, 127, -1][: min(k, 3)]
    w = rng.integers(-128, 128, (n, k) if transposed else (k, n)).astype(np.int8)
    return x, w, x.astype(np.int64) @ (w.T if transposed else w).astype(np.int64)


@pytest.mark.parametrize("transposed", [False, True], ids=["kn", "nk"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_integer_products_are_numpys_exactly(m, k, n, transposed):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)  # the whole int8 range, -128 included
    x[0, : min(k, 3)] = [-128, 127, -1][: min(k, 3)]
    w = rng.integers(-128, 128, (n, k) if transposed else (k, n)).astype(np.int8)
    expected = x.astype(np.int64) @ (w.T if transposed else w).astype(np.int64)
    def product(x, w):
        return kernels.integer_matmul(x, w, transposed=transposed)

    for call in (product, compiled(product)):
        got = ops.convert_to_numpy(call(ops.convert_to_tensor(x), ops.convert_to_tensor(w)))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected)


def test_leading_axes_are_kept():
    rng = np.random.default_rng(0)
    x = rng.integers(-127, 128, (2, 3, 40)).astype(np.int8)  # (B, T, K)
    w = rng.integers(-127, 128, (40, 5)).astype(np.int8)
    got = ops.convert_to_numpy(compiled(kernels.integer_matmul)(x, w))
    np.testing.assert_array_equal(got, np.einsum("btk,kn->btn", x.astype(np.int64), w.astype(np.int64)))


@jax_only
@pytest.mark.parametrize("transposed", [False, True], ids=["kn", "nk"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_the_kernel_itself_at_any_rows_is_numpys_exactly(m, k, n, transposed):
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    x, w, expected = operands(m, k, n, transposed)
    got = np.asarray(kernels._kernel_product(x, w, transposed))
    np.testing.assert_array_equal(got, expected)


@jax_only
def test_the_kernel_takes_any_number_of_rows():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    w = np.ones((8, 3), np.int8)
    for m in (1, 4, 5, 300):
        assert kernels.TARGET in _program(lambda x: kernels.integer_matmul(x, w), np.ones((m, 8), np.int8)), m


def _program(fn, *args):
    import jax

    return jax.jit(fn).lower(*args).as_text()


@jax_only
def test_on_a_cpu_the_quantized_layers_call_the_kernel_and_agree_with_xlas_dot():
    if kernels.library() is None:
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    assert kernels.native()
    keras.utils.set_random_seed(0)
    dense = LoraDense(96, use_bias=True, bias_initializer="random_normal")
    dense.build((None, 72))
    dense.quantize("int8")
    table = TokenEmbedding(130, 72)
    table.build((None, None))
    table.quantize("int8")
    x = np.random.default_rng(1).standard_normal((2, 1, 72)).astype("float32")  # a decoding step of 2 rows

    def step():  # a new function each time: JAX keeps the trace of a function it has seen
        return lambda x: (dense(x), table(x, reverse=True))

    program = _program(step(), x)
    assert program.count(kernels.QUANTIZED_TARGET) == 2 and kernels.TARGET not in program  # both, quantizer included
    with_kernel = [np.asarray(y) for y in compiled(step())(x)]
    with kernels.off():
        assert kernels.TARGET not in _program(step(), x) and kernels.QUANTIZED_TARGET not in _program(step(), x)
        with_dot = [np.asarray(y) for y in compiled(step())(x)]
    for got, expected in zip(with_kernel, with_dot):
        np.testing.assert_array_equal(got, expected)  # the same integers, de-scaled by the same operations


@jax_only
@pytest.mark.parametrize("transposed", [False, True], ids=["kn", "nk"])
@pytest.mark.parametrize("m,k,n", [(1, 576, 576), (2, 7, 3), (3, 130, 65), (4, 64, 129), (9, 130, 65), (32, 512, 129)])
def test_quantized_matmul_is_keras_quantizer_product_and_descaling_to_the_bit(m, k, n, transposed):
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype("float32") * np.float32(3.0)
    x[0, : min(k, 3)] = [2.5, -0.5, 1e-3][: min(k, 3)]  # halves: rounding to even, as XLA's round
    if m > 1:
        x[1] = 0.0  # a row of zeros: its scale is 127 / epsilon
    w = rng.integers(-127, 128, (n, k) if transposed else (k, n)).astype(np.int8)
    scale = rng.uniform(5.0, 50.0, n).astype("float32")
    quantizer = keras.quantizers.AbsMaxQuantizer(axis=-1)

    def fused(x):
        return kernels.quantized_matmul(x, w, scale, quantizer, transposed=transposed)

    def keras_ops(x):
        x_q, x_scale = quantizer(x, axis=-1)
        product = ops.matmul(ops.cast(x_q, "int32"), ops.cast(w.T if transposed else w, "int32"))
        return ops.divide(ops.cast(product, "float32"), ops.multiply(scale, x_scale))

    got = np.asarray(compiled(fused)(x))
    np.testing.assert_array_equal(got, np.asarray(compiled(keras_ops)(x)))
    x_q = np.clip(np.round(x * (127 / (np.abs(x).max(-1, keepdims=True) + 1e-7))), -127, 127)
    expected = (x_q @ (w.T if transposed else w).astype(np.float64)) / (scale * 127 / (np.abs(x).max(-1, keepdims=True)
                                                                                        + 1e-7))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())


@jax_only
def test_quantized_matmul_declines_what_it_does_not_take():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    w, scale = np.ones((8, 4), np.int8), np.ones(4, np.float32)
    quantizer = keras.quantizers.AbsMaxQuantizer(axis=-1)
    assert kernels.quantized_matmul(np.ones((1, 8), "bfloat16"), w, scale, quantizer) is None
    narrower = keras.quantizers.AbsMaxQuantizer(axis=-1, value_range=(-15, 15))
    assert kernels.quantized_matmul(np.ones((1, 8), np.float32), w, scale, narrower) is None
    assert kernels.quantized_matmul(np.ones((1, 8), np.float32), w, scale, quantizer) is not None
    with kernels.off():
        assert kernels.quantized_matmul(np.ones((1, 8), np.float32), w, scale, quantizer) is None


@jax_only
def test_a_corrupt_kernel_file_is_compiled_again(tmp_path, monkeypatch):
    if kernels._compiler() is None:
        pytest.skip("no C++ compiler here")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path))
    path = kernels._library_path()
    assert str(path).startswith(str(tmp_path))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x7fELF not a library")
    lib = kernels._open(path)
    assert lib.ZooIntegerMatmulVnni() in (0, 1)
    assert path.read_bytes()[:4] == b"\x7fELF" and path.stat().st_size > 1000
    assert list(path.parent.iterdir()) == [path]  # no temporary left beside it


@jax_only
def test_without_a_compiler_the_products_are_xlas_and_one_line_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZOO_HOME", str(tmp_path))
    monkeypatch.setattr(kernels, "_compiler", lambda: None)
    kernels.library.cache_clear()
    try:
        assert kernels.library() is None and not kernels.native()
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no C++ compiler" in err and "XLA's dot" in err
        x = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
        w = np.arange(8, dtype=np.int8).reshape(4, 2)
        assert kernels.TARGET not in _program(kernels.integer_matmul, x, w)
        np.testing.assert_array_equal(np.asarray(kernels.integer_matmul(x, w)), x.astype(np.int32) @ w)
    finally:
        kernels.library.cache_clear()  # the next call loads the machine's kernel again


def test_zoo_kernels_0_switches_them_off(monkeypatch):
    monkeypatch.setenv("ZOO_KERNELS", "0")
    assert not kernels.enabled() and not kernels.native()


@jax_only
def test_an_int8_llama_generates_the_same_tokens_with_the_kernel_as_with_xlas_product():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    import zoo

    def int8_llama():  # a model of its own each time: its compiled loops are its own
        keras.utils.set_random_seed(0)
        lm = zoo.build("llama-nano")
        lm.quantize("int8")
        return lm

    prompts = [[5, 17, 3, 99, 42], [7, 7, 1]]
    sampling = dict(max_new_tokens=12, sampler="temperature", temperature=2.0, seed=3, logprobs=1)
    for batch in (prompts[:1], prompts):  # a step of 1 row and of 2, both the kernel's
        with_kernel = zoo.generate(int8_llama(), batch, **sampling)
        with kernels.off():
            with_dot = zoo.generate(int8_llama(), batch, **sampling)
        assert with_kernel.sequences == with_dot.sequences
        assert len(set(with_kernel.sequences[0])) > 3  # sampled: the tokens vary
        # The same integers; the attention kernel, off with the others, adds the float sums in another order.
        np.testing.assert_allclose(with_kernel.token_logprobs, with_dot.token_logprobs, atol=1e-5)


# --- int4 in groups: float x 4-bit -> float ------------------------------------------------------


# (shape, block): a last group shorter than the block, a group of zeros, a group with NaN, one with an
# input at the rounding's halfway point.
@pytest.mark.parametrize("block", [4, 7, 32, 128])
def test_int8_in_groups_is_numpys_rounding_and_passes_the_gradient_straight(block):
    x = np.random.default_rng(block).standard_normal((3, 2, 150)).astype("float32")
    x[0, 0, :block] = 0.0
    x[1, 1, block + 1] = np.nan
    x[2, 0, :2] = [127.0, 0.5]  # 0.5 * 127 / 127 = 0.5: rounds to 0, as half to even does
    got = ops.convert_to_numpy(kernels.int8_in_groups(ops.convert_to_tensor(x), block)).astype(np.float64)
    expected = int8_in_groups(x.reshape(-1, 150), block).reshape(x.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(expected), rtol=2e-7, atol=0)  # a d in float32
    assert np.isnan(got[1, 1, block:2 * block]).all() and not np.isnan(got[1, 1, :block]).any()
    assert (got[0, 0, :block] == 0).all() and got[2, 0, 1] == 0.0
    levels = got[2, 1, :block] / (np.abs(x[2, 1, :block]).max() / 127)
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-4)  # integers times the group's d
    assert np.abs(got[2, 1] - x[2, 1]).max() > 0  # rounded, not passed through
    again = ops.convert_to_numpy(kernels.int8_in_groups(ops.convert_to_tensor(got.astype("float32")), block))
    np.testing.assert_allclose(again, got, rtol=2e-7, atol=0)  # rounding again keeps the integers (d within an ulp)
    if ON_JAX:
        import jax

        gradient = jax.grad(lambda v: (kernels.int8_in_groups(v, block) * 3.0).sum())(np.nan_to_num(x))
        np.testing.assert_array_equal(np.asarray(gradient), np.full(x.shape, 3.0, np.float32))


def _int4_dense(k, n, block, seed=0):
    """A LoraDense (K, N) quantized to int4 in groups of `block`, and its kernel W (K, N) in float64
    from its own 4-bit integers, zero points and scales (Keras' dequantization)."""
    keras.utils.set_random_seed(seed)
    dense = LoraDense(n)
    dense.build((None, k))
    dense.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=block))
    q = ops.convert_to_numpy(keras.quantizers.unpack_int4(dense._kernel, n, axis=-1)).astype(np.float64)
    group = np.arange(k) // block
    zero = ops.convert_to_numpy(dense.kernel_zero).astype(np.float64)[group]
    scale = ops.convert_to_numpy(dense.kernel_scale).astype(np.float64)[group]
    return dense, (q - zero) * scale


# (M, K, N, block): K not a multiple of the block, a block not a multiple of 4 (groups apart), N odd (a
# half-filled last byte), N past one tile of 64 and one unit of 128 columns, by a whole half-tile or a few columns.
INT4_SHAPES = [(1, 576, 1536, 128), (2, 300, 77, 64), (3, 130, 65, 32), (4, 64, 128, 64), (1, 256, 6, 128),
               (1, 100, 259, 32), (2, 64, 200, 64), (3, 96, 197, 32), (2, 90, 70, 30), (1, 50, 33, 7)]


@jax_only
@pytest.mark.parametrize("m,k,n,block", INT4_SHAPES)
def test_the_int4_kernel_is_the_float64_product_of_the_rounded_activations_and_the_dequantized_kernel(m, k, n, block):
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    dense, w = _int4_dense(k, n, block)
    x = np.random.default_rng(k + n).standard_normal((m, k)).astype("float32")
    expected = int8_in_groups(x, block) @ w

    def product(x):
        return kernels.int4_matmul(x, dense._kernel, dense.kernel_scale, dense.kernel_zero, block, n)

    for call in (product, compiled(product)):
        got = np.asarray(call(x))
        assert got.dtype == np.float32 and got.shape == (m, n)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@jax_only
def test_an_int4_dense_in_groups_calls_the_kernel_up_to_int4_kernel_rows_and_agrees_with_xlas_product():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    dense, w = _int4_dense(200, 70, 64)
    for rows in (1, kernels.INT4_KERNEL_ROWS, kernels.INT4_KERNEL_ROWS + 1):
        x = np.random.default_rng(rows).standard_normal((rows, 1, 200)).astype("float32")
        layer = lambda: (lambda x: dense(x))  # noqa: E731  a new function each time: JAX keeps its trace
        assert _program(layer(), x).count(kernels.INT4_TARGET) == (rows <= kernels.INT4_KERNEL_ROWS)
        with_kernel = np.asarray(compiled(layer())(x))
        with kernels.off():
            assert kernels.INT4_TARGET not in _program(layer(), x)
            with_dot = np.asarray(compiled(layer())(x))
        expected = int8_in_groups(x[:, 0], 64)[:, None] @ w + ops.convert_to_numpy(dense.bias)
        for got in (with_kernel, with_dot):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_the_int4_kernel_declines_what_it_does_not_take():
    dense, _ = _int4_dense(64, 8, 32)
    weights = (dense._kernel, dense.kernel_scale, dense.kernel_zero, 32, 8)
    assert kernels.int4_matmul(np.zeros((kernels.INT4_KERNEL_ROWS + 1, 64), "float32"), *weights) is None  # XLA's rows
    assert kernels.int4_matmul(np.zeros((1, 64), "float16"), *weights) is None  # not float32
    with kernels.off():
        assert kernels.int4_matmul(np.zeros((1, 64), "float32"), *weights) is None


def _int4_table(v, d, block, seed=0):
    """A TokenEmbedding (V, d) quantized to int4 in groups of `block` along d, and its table (V, d) in
    float64 from its own 4-bit integers, zero points and scales."""
    keras.utils.set_random_seed(seed)
    table = TokenEmbedding(v, d)
    table.build((None, None))
    table.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=block))
    q = ops.convert_to_numpy(keras.quantizers.unpack_int4(table._embeddings, d, axis=-1)).astype(np.float64)
    group = np.arange(d) // block
    zero = ops.convert_to_numpy(table.embeddings_zero).astype(np.float64)[:, group]
    scale = ops.convert_to_numpy(table.embeddings_scale).astype(np.float64)[:, group]
    return table, (q - zero) * scale


# (rows, V, d, block): d odd (a half-filled last byte), d past one group, a group of 15 bytes, V past one
# unit of 64.
@pytest.mark.parametrize("rows,v,d,block", [(1, 1000, 576, 128), (3, 301, 77, 64), (4, 64, 130, 128), (2, 130, 72, 32),
                                             (1, 70, 90, 30)])
def test_an_int4_tied_head_in_groups_is_the_float64_product_and_its_gradient(rows, v, d, block):
    table, w = _int4_table(v, d, block)
    x = np.random.default_rng(v + d).standard_normal((rows, 1, d)).astype("float32")
    head = lambda: (lambda x: table(x, reverse=True))  # noqa: E731  a new function each time: JAX keeps its trace
    uses_kernel = kernels.native() and rows <= kernels.INT4_KERNEL_ROWS
    if ON_JAX:
        assert _program(head(), x).count(kernels.INT4_TARGET) == uses_kernel
    expected = int8_in_groups(x[:, 0], block)[:, None] @ w.T
    got = ops.convert_to_numpy(compiled(head())(x))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    upstream = np.random.default_rng(1).standard_normal(expected.shape).astype("float32")
    if ON_JAX:
        import jax

        gradient = jax.grad(lambda x: (table(x, reverse=True) * upstream).sum())(x)
    else:
        import tensorflow as tf

        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(table(x, reverse=True) * upstream)
        gradient = tape.gradient(loss, x)
    np.testing.assert_allclose(ops.convert_to_numpy(gradient), upstream.astype(np.float64) @ w, rtol=1e-5,
                               atol=1e-5 * np.abs(upstream @ w).max())


@jax_only
def test_an_int4_llama_in_groups_generates_as_with_the_dequantized_kernels():
    if not kernels.native():
        pytest.skip("no C++ compiler here: the kernel could not be compiled")
    import zoo

    def int4_llama():  # a model of its own each time: its compiled loops are its own
        keras.utils.set_random_seed(0)
        lm = zoo.build("llama-nano")
        lm.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=32))
        return lm

    lm = int4_llama()
    step = lambda: (lambda ids: lm.call_with_cache(ids, lm.empty_cache(1, 8), 0)[0])  # noqa: E731  a decoding step
    assert _program(step(), np.array([[5]], "int32")).count(kernels.INT4_TARGET) > 2  # the blocks' and the head's
    sampling = dict(max_new_tokens=12, sampler="temperature", temperature=2.0, seed=3, logprobs=1)
    with_kernel = zoo.generate(int4_llama(), [[5, 17, 3, 99, 42]], **sampling)
    with kernels.off():
        dequantized = zoo.generate(int4_llama(), [[5, 17, 3, 99, 42]], **sampling)
    assert with_kernel.sequences == dequantized.sequences
    assert len(set(with_kernel.sequences[0])) > 3  # sampled: the tokens vary
    np.testing.assert_allclose(with_kernel.token_logprobs, dequantized.token_logprobs, atol=1e-4)
