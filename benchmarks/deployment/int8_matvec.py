"""How a batch-1 product with a quantized kernel runs on XLA's CPU backend,
each way of writing it beside the float32 product and the machine's
memory bandwidth.

    KERAS_BACKEND=tensorflow python benchmarks/deployment/int8_matvec.py
    KERAS_BACKEND=jax python benchmarks/deployment/int8_matvec.py --batch 8
    python benchmarks/deployment/int8_matvec.py --dump /tmp/hlo   # and the optimized HLO of each variant
    python benchmarks/deployment/int8_matvec.py --copies 64       # weights read from memory, not the caches

Each variant runs `--steps` products inside one compiled loop (each step's
input depends on the last step's output), as a decoding loop runs them, so
that what XLA hoists out of a loop (a kernel converted to float once per
call) is hoisted here too. One kernel of SmolLM2's shapes fits the CPU's
caches; `--copies N` multiplies by N copies of it in turn (each in its
own buffer), so that, as in a model's decoding step, the weights come
from memory once the N copies outgrow the last-level cache. The kernel is Keras' layout: (d_in, d_out) int8
with a scale per output unit; int4 two a byte along d_out, with a scale
(and zero point) per group of `--block` inputs.

- float32: x W, the float kernel.
- int8 convert+dot: x (float(Wq) / s), Keras' int8 Dense with no
  activation quantizer. XLA's CPU backend converts the kernel into a
  float32 buffer and calls its dot on that.
- int8 x int8 -> int32 dot: the activation quantized per row, an integer
  dot, de-scaled (Keras' int8 Dense, llama.cpp's q8_0 and CTranslate2's
  int8 idea). XLA's CPU backend converts both operands to int32 first.
- int8 fused: sum_i x_i float(Wq_ij), de-scaled: a multiply and a reduction,
  which XLA fuses into one loop that reads the int8 kernel itself.
- int8 fused rows, int8 x int8 fused rows: the same with the kernel
  stored transposed, (d_out, d_in), so that each sum runs along a
  contiguous row (the second in integers, the activation quantized).
- int4 convert+dot: the nibbles unpacked and converted, a dot per group.
- int4 fused: the nibbles unpacked (shifts) inside the same fused loop;
  per group the partial sums times the group's scale, minus its zero
  point times the group's input sum.
- int8 x int8 -> int32 zoo.kernels, int4 zoo.kernels: the products of
  `zoo.kernels` (XLA FFI calls), which read the int8 or packed int4
  kernel as stored.
- float32 zoo.kernels: `zoo.kernels.float_dense`, the float32 product of
  up to 4 rows that splits the kernel's rows between the threads (XLA's
  dot where it does not take the product: TensorFlow, more rows).

The weight-read limit is the kernel's bytes over the bandwidth of a large
NumPy copy (read plus write, one thread per `--threads`) and of a float32
matvec in NumPy; each variant's fraction is that time over its own.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from zoo.kernels import float_dense, int4_matmul, integer_matmul  # noqa: E402

# SmolLM2-135M's projections: q/o, k/v, gate/up, down, the tied head.
SHAPES = ((576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152))


def bandwidth(megabytes=512, repeats=5):
    """Bytes per second of a large NumPy copy (read and write) and of a float32 matvec (read)."""
    src = np.ones(megabytes * 2**20 // 4, np.float32)
    dst = np.empty_like(src)
    copy = min(_time(lambda: np.copyto(dst, src)) for _ in range(repeats))
    matrix = src.reshape(-1, 4096)
    vector = np.ones(4096, np.float32)
    matvec = min(_time(lambda: matrix @ vector) for _ in range(repeats))
    return 2 * src.nbytes / copy, src.nbytes / matvec


def _time(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def quantized(w, block):
    """Keras' int8 (per output unit) and grouped int4 storage of w (d_in, d_out)."""
    scale8 = 127.0 / np.maximum(np.abs(w).max(axis=0), 1e-12)  # Keras divides by its scales
    q8 = np.clip(np.round(w * scale8), -127, 127).astype(np.int8)
    d_in, d_out = w.shape
    groups = w.reshape(d_in // block, block, d_out)
    low, high = groups.min(axis=1), groups.max(axis=1)
    scale4 = np.maximum(high - low, 1e-12) / 15.0  # (G, d_out), asymmetric, [-8, 7]
    zero = np.round(-8 - low / scale4)
    q4 = np.clip(np.round(groups / scale4[:, None] + zero[:, None]), -8, 7).astype(np.int8).reshape(d_in, d_out)
    packed = (q4[:, 0::2] & 0x0F) | (q4[:, 1::2] << 4)  # low nibble the even unit, Keras' order along d_out
    return q8, scale8.astype(np.float32), packed.astype(np.int8), scale4.astype(np.float32), zero.astype(np.float32)


def quantize_rows(x):
    """x (B, d) -> int8 rows, (B, 1) scales (abs-max, as Keras' AbsMaxQuantizer)."""
    scale = ops.divide(127.0, ops.maximum(ops.max(ops.abs(x), axis=-1, keepdims=True), 1e-7))
    return ops.cast(ops.clip(ops.round(ops.multiply(x, scale)), -127, 127), "int8"), scale


def unpack(packed):
    """(d_in, d_out / 2) int8 nibbles -> (d_in, d_out) int8 in [-8, 7], by shifts (sign kept)."""
    low = ops.right_shift(ops.left_shift(packed, 4), 4)
    high = ops.right_shift(packed, 4)
    return ops.reshape(ops.stack([low, high], axis=-1), (packed.shape[0], 2 * packed.shape[1]))


VARIANTS = {
    "float32 dot": lambda x, w: ops.matmul(x, w["float"]),
    "float32 zoo.kernels": lambda x, w: _float_kernel(x, w),
    "int8 convert+dot": lambda x, w: ops.divide(ops.matmul(x, ops.cast(w["q8"], "float32")), w["s8"]),
    "int8 x int8 -> int32 dot": lambda x, w: _integer_dot(x, w),
    "int8 x int8 -> int32 dot of 2 rows": lambda x, w: _integer_dot(x, w, rows=2),
    "int8 x int8 -> int32 zoo.kernels": lambda x, w: _integer_dot(x, w, product=integer_matmul),
    "int8 fused": lambda x, w: ops.divide(
        ops.sum(ops.multiply(x[:, :, None], ops.cast(w["q8"], "float32")), axis=1), w["s8"]),
    "int8 fused rows": lambda x, w: ops.divide(
        ops.sum(ops.multiply(x[:, None, :], ops.cast(w["q8t"], "float32")), axis=2), w["s8"]),
    "int8 x int8 fused rows": lambda x, w: _integer_rows(x, w),
    "int4 convert+dot": lambda x, w: _int4(x, w, fused=False),
    "int4 fused": lambda x, w: _int4(x, w, fused=True),
    "int4 zoo.kernels": lambda x, w: int4_matmul(x, w["q4"], w["s4"], ops.cast(w["z4"], "int8"),
                                                 w["q4"].shape[0] // w["s4"].shape[0], w["s4"].shape[1]),
}
BYTES_PER_WEIGHT = {"float32 dot": 4, "float32 zoo.kernels": 4, "int4 convert+dot": 0.5, "int4 fused": 0.5, "int4 zoo.kernels": 0.5}


def _float_kernel(x, w):
    y = float_dense(x, w["float"])  # None where the kernel does not take it: XLA's dot then
    return ops.matmul(x, w["float"]) if y is None else y


def _integer_dot(x, w, rows=None, product=ops.matmul):
    xq, x_scale = quantize_rows(x)
    batch = xq.shape[0]
    if rows is not None and batch < rows:  # zero rows below, dropped after the product
        xq = ops.concatenate([xq, ops.zeros((rows - batch, xq.shape[1]), "int8")], axis=0)
    y = product(xq, w["q8"])[:batch]  # int32 (Keras' backends multiply int8 operands into int32)
    return ops.divide(ops.cast(y, "float32"), ops.multiply(x_scale, w["s8"]))


def _integer_rows(x, w):
    xq, x_scale = quantize_rows(x)
    y = ops.sum(ops.multiply(ops.cast(xq, "int32")[:, None, :], ops.cast(w["q8t"], "int32")), axis=2)
    return ops.divide(ops.cast(y, "float32"), ops.multiply(x_scale, w["s8"]))


def _int4(x, w, fused):
    q = ops.cast(unpack(w["q4"]), "float32")  # (d_in, d_out)
    d_in, d_out = q.shape
    groups = w["s4"].shape[0]
    xg = ops.reshape(x, (x.shape[0], groups, d_in // groups))  # (B, G, block)
    if fused:
        partial = ops.sum(ops.multiply(xg[:, :, :, None], ops.reshape(q, (groups, d_in // groups, d_out))), axis=2)
    else:
        partial = ops.einsum("bgi,gio->bgo", xg, ops.reshape(q, (groups, d_in // groups, d_out)))  # (B, G, d_out)
    sums = ops.sum(xg, axis=-1)[:, :, None]  # (B, G, 1)
    return ops.sum(ops.multiply(ops.subtract(partial, ops.multiply(w["z4"], sums)), w["s4"]), axis=1)


def compiled_loop(product, steps):
    def run(x, copies):
        def body(i, x):
            for weights in copies:
                y = product(x, weights)
                x = ops.add(x, ops.multiply(1e-6, ops.mean(y)))  # the next input depends on this output
            return x

        return ops.fori_loop(0, steps, body, x)

    if keras.config.backend() == "jax":
        import jax

        return jax.jit(run)
    import tensorflow as tf

    return tf.function(run, jit_compile=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=32, help="products per compiled call (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls, best kept (default %(default)s)")
    parser.add_argument("--block", type=int, default=64, help="int4 group size along d_in (default %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="(default: all)")
    parser.add_argument("--shapes", default=",".join(f"{a}x{b}" for a, b in SHAPES), help="(default %(default)s)")
    parser.add_argument("--copies", type=int, default=1,
                        help="copies of each kernel multiplied in turn, each in its own buffer (default %(default)s)")
    parser.add_argument("--dump", metavar="DIR", help="also write each variant's optimized HLO under DIR")
    args = parser.parse_args()
    if args.copies < 1:
        parser.error(f"--copies: expected 1 or more, got {args.copies}")
    names = args.variants.split(",")
    for name in names:
        if name not in VARIANTS:
            parser.error(f"--variants: {name!r} is not a variant; expected some of {', '.join(VARIANTS)}")
    copy_bw, matvec_bw = bandwidth()
    print(f"backend {keras.config.backend()}, {os.cpu_count()} CPUs; batch {args.batch}, "
          f"{args.steps} x {args.copies} products a call ({args.copies} copies of each kernel); "
          f"bandwidth: NumPy copy {copy_bw / 1e9:.1f} GB/s, NumPy float32 matvec {matvec_bw / 1e9:.1f} GB/s")
    limit_bw = max(copy_bw, matvec_bw)
    print(f"{'shape':<12}{'variant':<27}{'us/product':>11}{'GB/s read':>11}{'of limit':>10}{'max err':>10}")
    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        d_in, d_out = map(int, shape.split("x"))
        w = rng.standard_normal((d_in, d_out)).astype(np.float32) * 0.05
        q8, s8, q4, s4, z4 = quantized(w, args.block)
        weights = {k: ops.convert_to_tensor(v) for k, v in
                   dict(float=w, q8=q8, q8t=np.ascontiguousarray(q8.T), s8=s8, q4=q4, s4=s4, z4=z4).items()}
        x = rng.standard_normal((args.batch, d_in)).astype(np.float32)
        reference = {"float32 dot": x.astype(np.float64) @ w,
                     "int8": x.astype(np.float64) @ (q8 / s8.astype(np.float64))}
        q4_full = np.stack([(q4 << 4) >> 4, q4 >> 4], axis=-1).reshape(d_in, d_out).astype(np.float64)
        reference["int4"] = x.astype(np.float64) @ ((q4_full.reshape(-1, args.block, d_out) - z4[:, None])
                                                    * s4[:, None]).reshape(d_in, d_out)
        for name in names:
            got = np.asarray(_single(name)(ops.convert_to_tensor(x), weights))
            ref = reference["float32 dot" if name.startswith("float") else name[:4]]
            err = np.abs(got - ref).max() / np.abs(ref).max()
            err_note = f"{err:.1e}" + ("*" if name.startswith("int8 x int8") else "")
            loop = compiled_loop(VARIANTS[name], args.steps)
            xt = ops.convert_to_tensor(x)
            copies = [weights] + [{k: ops.copy(v) for k, v in weights.items()} for _ in range(args.copies - 1)]
            np.asarray(loop(xt, copies))  # compile
            best = min(_time(lambda: np.asarray(loop(xt, copies))) for _ in range(args.repeats))
            best /= args.steps * args.copies
            read = d_in * d_out * BYTES_PER_WEIGHT.get(name, 1)
            print(f"{shape:<12}{name:<27}{1e6 * best:>11.1f}{read / best / 1e9:>11.2f}"
                  f"{read / limit_bw / best:>10.0%}{err_note:>10}")
            if args.dump:
                dump(name, loop, xt, copies, os.path.join(args.dump, shape, name.replace(" ", "_").replace(",", "")))
    print("max err: largest |error| over largest |reference|, against float64 NumPy of the same quantized weights "
          "(* includes the activation's int8 rounding)")


def _single(name):
    if keras.config.backend() == "jax":
        import jax

        return jax.jit(VARIANTS[name])
    import tensorflow as tf

    return tf.function(VARIANTS[name], jit_compile=True)


def dump(name, loop, x, weights, folder):
    os.makedirs(folder, exist_ok=True)
    if keras.config.backend() == "jax":
        text = loop.lower(x, weights).compile().as_text()
    else:
        text = loop.experimental_get_compiler_ir(x, weights)(stage="optimized_hlo")
    with open(os.path.join(folder, "optimized_hlo.txt"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
