"""Two builds of the quantized product kernels (`zoo/kernels/integer_matmul.cc`)
timed in one process, in turn, on the products of one decoding step of
SmolLM2-135M's shape: the weights of all 151 products (30 layers' query/
key/value, output, gate, up and down projections and the tied head) come
from memory, as in a model, not from the caches.

    python benchmarks/deployment/kernel_ab.py OLD.cc zoo/kernels/integer_matmul.cc
    python benchmarks/deployment/kernel_ab.py A.cc B.cc C.cc --kind int8 --rows 2
    git show HEAD~1:zoo/kernels/integer_matmul.cc > /tmp/old.cc   # a committed build

This machine's speed drifts by the minute on a shared VM; calling the
builds in turn in one process, many times, is what makes two of them
comparable. Each build is compiled here as `zoo.kernels` compiles it
(`-O3 -march=native`) and registered with XLA under a name of its own;
each call is one compiled program that runs every product once, each
product's input depending on the last one's output. Printed per build:
the median and the fastest call's milliseconds, and the weights' bytes
read per second at the median.
"""

import argparse
import ctypes
import os
import subprocess
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

# (K inputs, N outputs, products a step, an embedding table (N, K) as the tied head) of SmolLM2-135M.
PRODUCTS = ((576, 960, 30, False), (576, 1536, 60, False), (576, 576, 30, False), (1536, 576, 30, False),
            (576, 49152, 1, True))


def build(source, name, folder):
    """Compiles `source` and registers its int8 and int4 products as `name`_int8 / `name`_int4."""
    import jax

    library = os.path.join(folder, f"{name}.so")
    subprocess.run(["g++", "-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w", "-I",
                    jax.ffi.include_dir(), source, "-o", library], check=True)
    lib = ctypes.CDLL(library)
    jax.ffi.register_ffi_target(f"{name}_int8", jax.ffi.pycapsule(lib.ZooIntegerMatmul), platform="cpu")
    jax.ffi.register_ffi_target(f"{name}_int4", jax.ffi.pycapsule(lib.ZooInt4Matmul), platform="cpu")


def weights(kind, block, rng):
    """Each product's weights, in Keras' layouts, and the bytes they hold."""
    import jax.numpy as jnp

    out, total = [], 0
    for k, n, count, transposed in PRODUCTS:
        for _ in range(count):
            if kind == "int8":
                w = (rng.integers(-127, 128, (n, k) if transposed else (k, n), dtype=np.int8),)
            else:
                groups = -(-k // block)
                packed = (n, (k + 1) // 2) if transposed else (k, (n + 1) // 2)
                by_group = (n, groups) if transposed else (groups, n)
                w = (rng.integers(-128, 128, packed, dtype=np.int8), rng.random(by_group, dtype=np.float32),
                     rng.integers(-8, 8, by_group, dtype=np.int8))
            total += sum(a.nbytes for a in w)
            out.append((k, n, transposed, tuple(jnp.asarray(a) for a in w)))
    return out, total


def step(name, kind, products, rows, block):
    """One compiled program running every product once, in turn."""
    import jax
    import jax.numpy as jnp

    def run(x):
        total = jnp.zeros((), jnp.float32)
        for k, n, transposed, w in products:
            inputs = jnp.tile(x, (1, -(-k // x.shape[1])))[:, :k] + 1e-9 * total  # depends on the last output
            if kind == "int8":
                quantized = jnp.clip(jnp.round(inputs * 30.0), -127, 127).astype(jnp.int8)
                y = jax.ffi.ffi_call(f"{name}_int8", jax.ShapeDtypeStruct((rows, n), jnp.int32))(
                    quantized, *w, transposed=transposed).astype(jnp.float32)
            else:
                y = jax.ffi.ffi_call(f"{name}_int4", jax.ShapeDtypeStruct((rows, n), jnp.float32))(
                    inputs, *w, block=block, transposed=transposed)
            total = total + 1e-6 * y[0, 0]
        return total

    return jax.jit(run)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help="integer_matmul.cc builds to compare")
    parser.add_argument("--kind", choices=("int8", "int4"), default="int4")
    parser.add_argument("--rows", type=int, default=1, help="rows of activations, 1-4 (default %(default)s)")
    parser.add_argument("--block", type=int, default=128, help="int4 group size (default %(default)s)")
    parser.add_argument("--calls", type=int, default=15, help="timed calls of each build (default %(default)s)")
    args = parser.parse_args()
    import jax.numpy as jnp

    folder = tempfile.mkdtemp(prefix="kernel_ab_")
    names = [f"build{i}" for i in range(len(args.sources))]
    for source, name in zip(args.sources, names):
        build(source, name, folder)
    rng = np.random.default_rng(0)
    products, nbytes = weights(args.kind, args.block, rng)
    x = jnp.asarray(rng.standard_normal((args.rows, 576), dtype=np.float32))
    steps = {name: step(name, args.kind, products, args.rows, args.block) for name in names}
    results = {name: float(steps[name](x)) for name in names}  # compiled, and each build's answer
    times = {name: [] for name in names}
    for _ in range(args.calls):
        for name in names:
            start = time.perf_counter()
            steps[name](x).block_until_ready()
            times[name].append(time.perf_counter() - start)
    print(f"{args.kind}, {args.rows} row(s), {len(products)} products a step, {nbytes / 1e6:.1f} MB of weights; "
          f"{args.calls} calls of each build in turn")
    print(f"{'build':<48}{'median ms':>10}{'fastest':>9}{'GB/s':>7}  result")
    for source, name in zip(args.sources, names):
        median = float(np.median(times[name]))
        print(f"{source[-48:]:<48}{1e3 * median:>10.2f}{1e3 * min(times[name]):>9.2f}{nbytes / median / 1e9:>7.1f}"
              f"  {results[name]:.6g}")


if __name__ == "__main__":
    main()
