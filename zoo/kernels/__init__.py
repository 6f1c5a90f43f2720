"""Products XLA's CPU backend lacks or runs slowly, as kernels called from inside XLA programs.

XLA's CPU backend multiplies int8 matrices into int32 with oneDNN's
integer kernels, but a single row, a decoding step at batch 1, it
multiplies by a loop over the weights converted to a 4-byte copy (and in
a decoding loop it converts every int8 kernel once, outside the loop):
each token then reads 4 bytes a weight, and an int8 model decodes no
faster than a float32 one (benchmarks/deployment/int8_matvec.py).

Keras' int4 in groups (`quantize("int4")`, groups of 128) dequantizes
the kernel: in a decoding loop XLA makes that float copy once, outside
the loop, so every token reads 4 bytes a weight again. `int4_matmul`
reads the 4-bit weights as they are and multiplies them, as llama.cpp's
q4_0 product does, by the activations quantized to int8 in the same
groups (`int8_in_groups`), in integers with AVX512-VNNI: a Dense kernel,
and an embedding table as the tied output head. The zoo's int4 layers
quantize their activations so on every path (XLA's product included), so
the kernel changes no function, only its speed: 1.5 times faster than
widening the nibbles to float on the products of SmolLM2-135M's shape.

On JAX with a CPU, `integer_matmul` sends its products to the kernel in
`integer_matmul.cc`, called through XLA's FFI on XLA's own threads
(AVX512-VNNI where the CPU has it, plain loops elsewhere): it reads one
byte a weight, as llama.cpp's q8_0 and CTranslate2's int8 products do,
and gives the same int32 results as XLA's product. Up to 4 rows it
multiplies the weights as it reads them; more rows (a beam search, a
batch, a prompt) multiply a panel of 64 columns packed once into
vpdpbusd's layout, which took a third of XLA's time at 32 rows on the
products of opus-mt base's decoder and half at 128 to 2,048 rows on
SmolLM2-135M's. Every product elsewhere (TensorFlow, a GPU,
`ZOO_KERNELS=0`, no compiler) is XLA's. (Multiplying a single row as
two, a row of zeros below, reaches XLA's integer kernels in a loop of
products alone, but made a model's decoding step slower: 37 against 32 ms
a token on TensorFlow at SmolLM2-135M's shape.)

`float_head` is a float32 tied output head at 2-4 rows (a beam search
of 4 beams at batch 1, a small batch), where XLA's dot reads the table
at about two thirds of the speed it reads it at one row. `float_dense`
is a float32 Dense product of 1-4 rows (a decoding step), its kernel's
rows split between the threads and read whole, prefetched: XLA's dot
splits the columns, so each thread reads a few hundred bytes of every
row, and a kernel streamed from memory arrives about a quarter slower. `top_k` is
`ops.top_k` in one read of each row, XLA's order exactly: a beam
search's candidates, the sampled token.

`cached_attention` is a decoding step's attention over its cache,
softmax(Q K^T * scale) V for the few query rows of each key/value head
(up to 64: a step, a speculative verification of 16 positions by 3 heads
a group, a short chunk of a prompt), in one call: XLA runs it as two
small products (YNNPACK's, about 30 and 14 microseconds each over a
256-position cache at SmolLM2-135M's shape) and six kernels of softmax
between them, 70 microseconds a layer where the call takes about 20.
Each row reads only the keys from the first it may attend to through the
last (not the cache past the step's position), and with AVX-512 rows go
8 at a time, so that each key and value is read once for 8 rows; XLA's
form reads the whole cache, transposed. `MultiHeadAttention`'s cached
step calls it on JAX with a CPU, at every precision.

The kernels are compiled from their source the first time a process needs them,
with the machine's C++ compiler (`$CXX`, else g++ or c++) at
`-O3 -march=native`, into

    $ZOO_HOME/kernels/<key>/integer_matmul.so      (~/.cache/zoo/kernels/...)

where `<key>` hashes the source, the compiler's version, jaxlib's version
and this machine's CPU, so a second process loads it. Where it cannot be
compiled, one line on stderr says why.

Shape letters: M rows of activations (batch times positions), K inputs,
N outputs.
"""

import contextlib
import ctypes
import functools
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
from keras import ops

from zoo.compile_cache import OFF, machine
from zoo.files import atomic_path, zoo_home

SOURCE = Path(__file__).with_name("integer_matmul.cc")
TARGET = "zoo_integer_matmul"
INT4_TARGET = "zoo_int4_matmul"
QUANTIZED_TARGET = "zoo_quantized_matmul"
ATTENTION_TARGET = "zoo_cached_attention"
TOP_K_TARGET = "zoo_top_k"
FLOAT_TARGET = "zoo_float_matmul"
FLOAT_DENSE_TARGET = "zoo_float_dense"
FLOAT_DENSE_ROWS = 4  # up to this many rows a float32 Dense product runs in the kernel (a decoding step)
FLOAT_KERNEL_ROWS = (2, 4)  # the rows the float32 head kernel is faster at than XLA's dot (XLA's is at one row)
TOP_K_LARGEST = 64  # the largest k the top-k kernel takes
ATTENTION_ROWS = 64  # query rows a key/value head (its query heads x positions) the attention kernel takes
INT4_KERNEL_ROWS = 4  # up to this many rows the int4 kernel is faster than XLA's product, beyond it slower
_OFF = []  # depth of `off()` blocks


def enabled():
    """Whether the kernels may be used: `ZOO_KERNELS` is not 0 (or false,
    no, off) and no `off()` block is open."""
    return not _OFF and os.environ.get("ZOO_KERNELS", "1").strip().lower() not in OFF


@contextlib.contextmanager
def off():
    """Within this block `integer_matmul` is `ops.matmul`, XLA's own
    product, in the functions traced inside the block (JAX keeps a
    function's trace): to compare the two, or for a program traced to
    leave the process, where the kernel is not registered."""
    _OFF.append(True)
    try:
        yield
    finally:
        _OFF.pop()


def integer_matmul(x, w, transposed=False):
    """x (..., K) int8 times w (K, N) int8, or times w^T for w (N, K) with
    `transposed`: (..., N) int32, the exact integer products: the kernel
    where it is compiled (`native()`), else XLA's product.

    Args:
        x: int8 activations (..., K).
        w: int8 weights, (K, N) (a Dense kernel) or (N, K) (an embedding
            table used as the output head) with `transposed`.
        transposed: whether w is (N, K).
    """
    if _rows(x) is not None and native():
        return _kernel_product(x, w, transposed)
    return ops.matmul(x, ops.transpose(w) if transposed else w)


def quantized_matmul(x, w, scale, quantizer, transposed=False):
    """Keras' int8 product in one kernel call: x (..., K) float32 quantized
    per row by `quantizer`, times w (K, N) int8 (or w^T for w (N, K) with
    `transposed`), divided by `scale` times the row's scale: (..., N)
    float32, what

        x_q, x_scale = quantizer(x, axis=-1)
        ops.divide(ops.cast(integer_matmul(x_q, w), "float32"), ops.multiply(scale, x_scale))

    computes, with the same float32 operations (so the same numbers), but
    in one call instead of XLA's dozen small ones around it. None where the
    kernel does not take it: rows of unknown number, x not float32, a
    quantizer other than Keras' `AbsMaxQuantizer` to int8 in [-127, 127],
    or not `native()`.

    Args:
        x: float32 activations (..., K).
        w: int8 weights, (K, N) or (N, K) with `transposed`.
        scale: (N,) float32, the weights' scale per output (Keras divides
            the integers by it).
        quantizer: the layer's `inputs_quantizer`.
        transposed: whether w is (N, K).
    """
    rows = _rows(x)
    if (rows is None or keras.backend.standardize_dtype(x.dtype) != "float32"
            or not _takes(quantizer) or not native()):
        return None
    import jax
    import jax.numpy as jnp

    n = w.shape[0] if transposed else w.shape[1]
    flat = jnp.reshape(x, (-1, x.shape[-1]))  # (M, K)
    product = jax.ffi.ffi_call(QUANTIZED_TARGET, jax.ShapeDtypeStruct((flat.shape[0], n), jnp.float32))
    y = product(flat, jnp.asarray(w), jnp.reshape(jnp.asarray(scale, jnp.float32), (n,)),
                transposed=bool(transposed), epsilon=np.float32(quantizer.epsilon))  # (M, N)
    return jnp.reshape(y, tuple(x.shape[:-1]) + (n,))


def _takes(quantizer):
    """Whether the kernel quantizes as `quantizer` does: Keras'
    AbsMaxQuantizer to int8 in [-127, 127] along the last axis."""
    return (isinstance(quantizer, keras.quantizers.AbsMaxQuantizer)
            and tuple(quantizer.value_range) == (-127, 127)
            and keras.backend.standardize_dtype(quantizer.output_dtype) == "int8"
            and quantizer.axis in (None, -1, (-1,)))


def int4_matmul(x, kernel, scale, zero, block_size, units, transposed=False):
    """`int8_in_groups(x, block_size)` (..., K) times Keras' int4 Dense
    kernel quantized in groups of `block_size` inputs, or with `transposed`
    times the transpose of Keras' int4 Embedding table quantized in groups
    (a tied output head): (..., N) float32 with the 4-bit and 8-bit
    integers multiplied as they are, or None where the kernel does not take
    it (more than `INT4_KERNEL_ROWS` rows, x not float32, an odd `block_size`
    when transposed, or not `native()`).

    The kernel's W[k, n] = (q[k, n] - zero[g, n]) * scale[g, n] for the
    group g = k // block_size (Keras' `g_idx` of a layer quantized by
    `quantize("int4")`); the activations' group of the same inputs is
    a[k] * d, a in [-127, 127]. Per group and output the sum
    d scale (sum_k a[k] q[k, n] - zero sum_k a[k]) is exact in int32, then
    the groups are added in float32.

    Args:
        x: float32 activations (..., K).
        kernel: (K, ceil(N / 2)) int8, two 4-bit integers a byte
            (`keras.quantizers.pack_int4` along the last axis); transposed,
            the table (N, ceil(K / 2)).
        scale: (G, N) float32, G = ceil(K / block_size); transposed (N, G).
        zero: int8 zero points, as `scale`.
        block_size: the inputs of a group.
        units: N.
        transposed: whether `kernel` is an embedding table (N, ...).
    """
    rows = _rows(x)
    if (rows is None or rows > INT4_KERNEL_ROWS or keras.backend.standardize_dtype(x.dtype) != "float32"
            or (transposed and block_size % 2) or not native()):
        return None
    import jax
    import jax.numpy as jnp

    flat = jnp.reshape(x, (-1, x.shape[-1]))  # (M, K)
    product = jax.ffi.ffi_call(INT4_TARGET, jax.ShapeDtypeStruct((flat.shape[0], units), jnp.float32))
    y = product(flat, jnp.asarray(kernel), jnp.asarray(scale, jnp.float32), jnp.asarray(zero, jnp.int8),
                block=int(block_size), transposed=bool(transposed))  # (M, N)
    return jnp.reshape(y, tuple(x.shape[:-1]) + (units,))


def int8_in_groups(x, block_size):
    """x (..., K) as the int4 product multiplies it: each group of
    `block_size` inputs (the last one possibly shorter) rounded to int8 by
    its largest magnitude, as llama.cpp's q8_0 does, and de-scaled,
    a * d with

        d = max |x_group| / 127,   a = clip(round(x * (127 / max |x_group|)), -127, 127)

    (a group of zeros stays zero, one that is not finite gives NaN). The
    rounding has no gradient: the gradient passes it straight through.
    """

    @ops.custom_gradient
    def rounded(x):
        def gradient(*args, upstream=None):
            return args[0] if upstream is None else upstream  # TensorFlow passes it first, JAX by name

        k = x.shape[-1]
        groups = -(-k // block_size)
        padded = ops.pad(x, [(0, 0)] * (len(x.shape) - 1) + [(0, groups * block_size - k)])
        grouped = ops.reshape(padded, tuple(ops.shape(x)[:-1]) + (groups, block_size))
        largest = ops.max(ops.abs(grouped), axis=-1, keepdims=True)
        inverse = ops.where(largest > 0, ops.divide(127.0, ops.where(largest > 0, largest, 1.0)), 0.0)
        a = ops.clip(ops.round(ops.multiply(grouped, ops.cast(inverse, x.dtype))), -127.0, 127.0)
        y = ops.multiply(a, ops.cast(ops.divide(largest, 127.0), x.dtype))
        return ops.reshape(y, tuple(ops.shape(x)[:-1]) + (groups * block_size,))[..., :k], gradient

    return rounded(x)


def cached_attention(query, key, value, mask, scale):
    """softmax(Q K^T * scale) V over a cache, in one call: a decoding
    step's attention, or None where the kernel does not take it (more than
    `ATTENTION_ROWS` query rows a key/value head, an input not float32, an
    unknown shape, or not `native()`).

    The same function as `zoo.layers.attention.attention_weights` followed
    by the product with V (a masked key's logit -1e9, a query with no key
    to attend to 0), in float32 in another order: the query's logits one
    key at a time, the softmax's exponentials by a polynomial within 2 ulp.

    Args:
        query: (B, g, R, k) float32, the R = h/g T query rows that share
            each of the g key/value heads: the group's heads, then the T
            positions (row r is position r % T).
        key, value: (B, g, S, k) or (B g, S, k) float32, the cache as it is
            stored: a reshape of it before the call would keep XLA from
            writing the next step's keys into it in place.
        mask: (B, T, S) or (1, T, S) boolean, False where a query may not
            attend.
        scale: the logits' scale.

    Returns:
        (B, g, R, k) float32.
    """
    shapes = (query.shape, key.shape, value.shape, mask.shape)
    if (any(size is None for shape in shapes for size in shape) or len(query.shape) != 4 or len(key.shape) not in (3, 4)
            or query.shape[2] > ATTENTION_ROWS or len(mask.shape) != 3 or mask.shape[0] not in (1, query.shape[0])
            or any(keras.backend.standardize_dtype(x.dtype) != "float32" for x in (query, key, value))
            or not native()):
        return None
    import jax
    import jax.numpy as jnp

    attend = jax.ffi.ffi_call(ATTENTION_TARGET, jax.ShapeDtypeStruct(query.shape, jnp.float32))
    return attend(query, key, value, jnp.asarray(mask, jnp.bool_), scale=np.float32(scale))


def float_head(x, table):
    """x (..., d) float32 times the transpose of an embedding table (V, d)
    float32: (..., V) logits, a tied output head, or None where the kernel
    does not take it: other than `FLOAT_KERNEL_ROWS` rows (at one row XLA's
    dot reads the table as fast), not float32, or not `native()`. XLA's
    dot reads the table at about 15 GB/s at 2-4 rows (a beam search of 4
    beams, a small batch), the kernel at about 23 (58,101 x 512 on an AMD
    EPYC). Its sums run in another order, so the logits differ from XLA's
    in the last bits. The gradients are XLA's products.
    """
    rows = _rows(x)
    low, high = FLOAT_KERNEL_ROWS
    if (rows is None or not low <= rows <= high or len(table.shape) != 2
            or any(keras.backend.standardize_dtype(a.dtype) != "float32" for a in (x, table)) or not native()):
        return None
    import jax.numpy as jnp

    logits = _float_product(FLOAT_TARGET, True)(jnp.reshape(x, (-1, x.shape[-1])), jnp.asarray(table))  # (M, V)
    return jnp.reshape(logits, tuple(x.shape[:-1]) + (table.shape[0],))


@functools.cache
def _float_product(target, transposed):
    """x (M, K) times w (N, K)^T (`transposed`) or w (K, N), float32, in the
    kernel `target`; its gradients are XLA's products."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def product(x, w):
        n = w.shape[0] if transposed else w.shape[1]
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((x.shape[0], n), jnp.float32))(x, w)

    def forward(x, w):
        return product(x, w), (x, w)

    def backward(saved, upstream):
        x, w = saved
        if transposed:
            return upstream @ w, upstream.T @ x
        return upstream @ w.T, x.T @ upstream

    product.defvjp(forward, backward)
    return product


def float_dense(x, kernel):
    """x (..., K) float32 times a Dense kernel (K, N) float32 (an array or
    a variable): (..., N), or None where the kernel does not take it: more
    than `FLOAT_DENSE_ROWS` rows (a prompt, a batch: XLA's product), not
    float32, or not `native()`. A decoding step's product reads its weights from memory
    once a token: XLA's dot splits the columns between threads, so each
    reads a few hundred bytes of every row of the kernel, at 17-19 GB/s;
    the kernel splits the rows, each thread reads its rows whole, one
    contiguous run, prefetched, at about 26 (SmolLM2-135M's Dense kernels
    in turn, an AMD EPYC). Its sums run in another order, so the products
    differ from XLA's in the last bits. The gradients are XLA's products.
    """
    rows = _rows(x)
    if (rows is None or not 1 <= rows <= FLOAT_DENSE_ROWS or len(kernel.shape) != 2
            or any(keras.backend.standardize_dtype(a.dtype) != "float32" for a in (x, kernel)) or not native()):
        return None
    import jax.numpy as jnp

    flat = jnp.reshape(x, (-1, x.shape[-1]))  # (M, K)
    y = _float_product(FLOAT_DENSE_TARGET, False)(flat, ops.convert_to_tensor(kernel))  # (M, N)
    return jnp.reshape(y, tuple(x.shape[:-1]) + (kernel.shape[1],))


def top_k(x, k):
    """`ops.top_k(x, k)`: the k largest entries along x's last axis, in
    descending order, and their indices, the same values in the same order
    (ties to the lower index; -0 below +0, NaN above +inf). On JAX with a
    CPU, float32 x and k up to `TOP_K_LARGEST`, one kernel call: each row
    read once, 16 entries at a time, against the k-th best so far, where
    XLA sorts an array of indices partially for each row (2.5 ms of a beam
    step's 20 over 8 rows of 4 x 58,101 candidates).

    Args:
        x: (..., V).
        k: 1 <= k <= V.

    Returns:
        (values (..., k), indices (..., k) int32).
    """
    shape = tuple(x.shape)
    if (any(size is None for size in shape) or not shape or not 1 <= k <= min(shape[-1], TOP_K_LARGEST)
            or keras.backend.standardize_dtype(x.dtype) != "float32" or not native()):
        return ops.top_k(x, k)
    import jax
    import jax.numpy as jnp

    rows = jnp.reshape(x, (-1, shape[-1]))  # (R, V)
    call = jax.ffi.ffi_call(TOP_K_TARGET, (jax.ShapeDtypeStruct((rows.shape[0], k), jnp.float32),
                                           jax.ShapeDtypeStruct((rows.shape[0], k), jnp.int32)))
    values, indices = call(rows)
    return jnp.reshape(values, shape[:-1] + (k,)), jnp.reshape(indices, shape[:-1] + (k,))


def _rows(x):
    """M, the rows of x (its leading axes multiplied), or None where one is not known."""
    rows = 1
    for size in x.shape[:-1]:
        if size is None:
            return None
        rows *= size
    return rows


def _kernel_product(x, w, transposed):
    import jax
    import jax.numpy as jnp

    n = w.shape[0] if transposed else w.shape[1]
    rows = jnp.reshape(x, (-1, x.shape[-1]))  # (M, K)
    product = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((rows.shape[0], n), jnp.int32))
    y = product(rows, jnp.asarray(w), transposed=bool(transposed))  # (M, N)
    return jnp.reshape(y, tuple(x.shape[:-1]) + (n,))


def native():
    """Whether `integer_matmul` calls the kernel here: JAX on a CPU, the
    kernels on, and the kernel compiled and registered."""
    if not enabled() or _backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu" and library() is not None


@functools.cache
def library():
    """The compiled kernel, loaded and registered with XLA once per process
    (compiled first when this machine has no copy), or None where it
    cannot be compiled (said once on stderr)."""
    try:
        lib = _open(_library_path())
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        sys.stderr.write(f"zoo: quantized products use XLA's dot: the kernels did not compile ({_first_line(error)})\n")
        return None
    import jax

    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.ZooIntegerMatmul), platform="cpu")
    jax.ffi.register_ffi_target(INT4_TARGET, jax.ffi.pycapsule(lib.ZooInt4Matmul), platform="cpu")
    jax.ffi.register_ffi_target(QUANTIZED_TARGET, jax.ffi.pycapsule(lib.ZooQuantizedMatmul), platform="cpu")
    jax.ffi.register_ffi_target(ATTENTION_TARGET, jax.ffi.pycapsule(lib.ZooCachedAttention), platform="cpu")
    jax.ffi.register_ffi_target(TOP_K_TARGET, jax.ffi.pycapsule(lib.ZooTopK), platform="cpu")
    jax.ffi.register_ffi_target(FLOAT_TARGET, jax.ffi.pycapsule(lib.ZooFloatMatmul), platform="cpu")
    jax.ffi.register_ffi_target(FLOAT_DENSE_TARGET, jax.ffi.pycapsule(lib.ZooFloatDense), platform="cpu")
    return lib


def _open(path):
    """The library at `path`, compiled first where it is missing; a file
    there that does not load as the kernel (corrupt, truncated, foreign)
    is removed and compiled again."""
    if path.exists():
        try:
            return _symbols(ctypes.CDLL(str(path)))
        except (OSError, AttributeError):
            path.unlink(missing_ok=True)
    _compile(path)
    return _symbols(ctypes.CDLL(str(path)))


def _symbols(lib):
    for name in ("ZooIntegerMatmul", "ZooInt4Matmul", "ZooQuantizedMatmul", "ZooCachedAttention", "ZooTopK",
                 "ZooFloatMatmul", "ZooFloatDense", "ZooIntegerMatmulVnni"):
        getattr(lib, name)  # AttributeError where it is missing
    return lib


def _compile(path):
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C++ compiler: set CXX, or install g++")
    import jax.ffi

    start = time.perf_counter()
    with atomic_path(path) as tmp:
        command = [compiler, "-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w",
                   "-I", jax.ffi.include_dir(), str(SOURCE), "-o", str(tmp)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} exited with {done.returncode}: {done.stderr.strip()}")
    sys.stderr.write(f"zoo: compiled the quantized product kernels ({SOURCE.name}) in {time.perf_counter() - start:.1f} s\n")


def _library_path():
    compiler = _compiler()
    parts = [SOURCE.read_bytes().decode(), f"compiler={compiler} {_compiler_version(compiler)}",
             f"jaxlib={_version('jaxlib')}", machine()]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return zoo_home() / "kernels" / key / "integer_matmul.so"


def _compiler():
    for name in (os.environ.get("CXX"), "g++", "c++"):
        if name and shutil.which(name):
            return name
    return None


@functools.cache
def _compiler_version(compiler):
    if compiler is None:
        return ""
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _backend():
    import keras

    return keras.config.backend()


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
