"""The lecture's complexity table (Vaswani et al. 2017, Table 1), measured.

One layer of each kind, at the same width d, batch B:

    layer            FLOPs per forward (1 MAC = 2 FLOPs)      sequential steps
    self-attention   B * (8*T*d^2 + 4*T^2*d)                  1
    LSTM             B * 16*T*d^2   (4 gates x (W x + U h))    T
    SimpleRNN        B * 4*T*d^2    (W x + U h)                T
    Conv1D (k=3)     B * 2*k*T*d^2                             1

Attention: 4*T*d^2 MACs for the Q, K, V and output projections plus 2*T^2*d
MACs for Q K^T and (weights) V. Table 1 of the paper keeps only the T^2*d
term; a forward+backward pass costs about 3x the forward FLOPs.

What is timed: one training-like step, forward + backward, of a single layer:
    with tf.GradientTape(): y = layer(x); loss = sum(y * fixed_cotangent)
    grads = tape.gradient(loss, [x] + layer.trainable_variables)
wrapped in `tf.function`, both as a plain TF graph and with XLA
(`jit_compile=True`). The machine is shared, so the configurations are timed
in 3 rounds (ascending, descending, ascending sizes; >= 2 repetitions and
>= 0.2 s per round and mode, after warm-up in the first round). Each
configuration reports the median over all repetitions for both modes and uses
the faster one. XLA is skipped at larger sizes of a sweep once it was >2x
slower than the graph at a smaller size of the same layer and sweep (on CPU,
XLA's while loop makes the RNN backward passes superlinear in T).

Memory: `tf.config.experimental.get_memory_info("CPU:0")` reports 0 with
TensorFlow's default CPU allocator (it keeps no statistics). Three numbers:
  * act_est_mb: an analytic count of the float32 tensors a layer keeps from
    forward for backward (x, projections, attention weights / per-step gate
    states); weights, the output and gradients are not counted.
  * alloc_peak_mb: measured. A separate process with
    TF_CPU_ALLOCATOR_USE_BFC=true (TF's BFC allocator, which keeps
    statistics, also on CPU) runs each configuration once to trace/compile,
    resets the statistics and runs one step: peak bytes in use during the step
    minus the bytes in use before it (x, cotangent, weights). It counts every
    tensor the step allocates through TensorFlow's allocator - activations,
    the transient T x T tensors of forward and backward, gradients, XLA temp
    buffers - but not memory that oneDNN/Eigen/XLA obtain with plain malloc.
    The timings run with the default allocator.
  * rss_fresh_mb (largest T of each layer only; `--no-rss` skips it): the
    growth of the resident set (VmHWM from /proc/self/status, reset through
    /proc/self/clear_refs) over the first two steps in a fresh process. It
    includes tracing/compilation and allocator caching, so it is an upper
    bound of what one configuration costs a process, not the step's peak.
    (Measuring RSS after warm-up shows ~0: freed memory stays in the
    process and is reused.)

Usage (from the repository root):
    KERAS_BACKEND=tensorflow python benchmarks/complexity.py            # full, ~3-7 min on 2 cores
    KERAS_BACKEND=tensorflow python benchmarks/complexity.py --quick    # smoke run, tiny sizes
    ... --out DIR      write complexity.{csv,png,txt} to DIR
    ... --replot       re-analyse/re-plot DIR/complexity.csv without measuring
"""

import argparse
import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

LAYERS = ["zoo_mha", "keras_mha", "lstm", "simple_rnn", "conv1d"]
SHORT = {
    "zoo_mha": "attn (zoo)",
    "keras_mha": "attn (keras)",
    "lstm": "LSTM",
    "simple_rnn": "SimpleRNN",
    "conv1d": "Conv1D k=3",
}
HEADS = 4
KERNEL = 3
ATTENTION = ("zoo_mha", "keras_mha")


# ---------------------------------------------------------------- theory


def forward_flops(layer, batch, t, d):
    """FLOPs (2 per multiply-add) of one forward pass over the batch."""
    if layer in ATTENTION:
        return batch * (8 * t * d * d + 4 * t * t * d)
    if layer == "lstm":
        return batch * 16 * t * d * d
    if layer == "simple_rnn":
        return batch * 4 * t * d * d
    if layer == "conv1d":
        return batch * 2 * KERNEL * t * d * d
    raise ValueError(layer)


def sequential_steps(layer, t):
    return t if layer in ("lstm", "simple_rnn") else 1


def activation_floats(layer, batch, t, d):
    """float32 values kept from forward for backward (a lower bound)."""
    if layer in ATTENTION:
        # x, Q K V, the (h, T, T) softmax weights, the merged heads.
        return batch * (5 * t * d + HEADS * t * t)
    if layer == "lstm":
        # x, and per step h_{t-1}, c_{t-1}, 4 gate activations, tanh(c_t).
        return batch * 8 * t * d
    if layer == "simple_rnn":
        # x and the per-step hidden states (tanh outputs).
        return batch * 2 * t * d
    if layer == "conv1d":
        return batch * t * d  # x, for the kernel gradient
    raise ValueError(layer)


# ---------------------------------------------------------------- memory


def _proc_status_kb(*keys):
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in keys:
                out[key] = int(line.split()[1])
    return out


def _reset_hwm():
    """Reset VmHWM (the peak resident set) to the current VmRSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


# ---------------------------------------------------------------- timing


def build_step(layer_name, batch, t, d, jit, seed=0):
    import keras
    import tensorflow as tf

    from zoo.layers import MultiHeadAttention

    keras.utils.set_random_seed(seed)
    if layer_name == "zoo_mha":
        layer = MultiHeadAttention(num_heads=HEADS)
        call = layer
    elif layer_name == "keras_mha":
        layer = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=d // HEADS)

        def call(z):
            return layer(z, z)

    elif layer_name == "lstm":
        layer = keras.layers.LSTM(d, return_sequences=True)
        call = layer
    elif layer_name == "simple_rnn":
        layer = keras.layers.SimpleRNN(d, return_sequences=True)
        call = layer
    elif layer_name == "conv1d":
        layer = keras.layers.Conv1D(d, kernel_size=KERNEL, padding="same")
        call = layer
    else:
        raise ValueError(layer_name)
    x = tf.random.normal((batch, t, d), seed=seed)
    cotangent = tf.random.normal((batch, t, d), seed=seed + 1)
    call(x[:, :4])  # build the weights eagerly, outside tf.function
    variables = list(layer.trainable_variables)

    @tf.function(jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = call(x)
            loss = tf.reduce_sum(tf.cast(y, "float32") * cotangent)
        grads = tape.gradient(loss, [x] + variables)
        return [loss] + grads

    params = int(sum(np.prod(v.shape) for v in variables))
    return step, x, params


def time_step(step, x, min_time, min_reps, max_reps, warmup=1, first_call=True):
    """(compile+first call seconds, list of per-call seconds after warm-up)."""
    first = None
    if first_call:
        t0 = time.perf_counter()
        step(x)[0].numpy()
        first = time.perf_counter() - t0
    for _ in range(warmup):
        step(x)[0].numpy()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        step(x)[0].numpy()
        times.append(time.perf_counter() - t0)
    return first, times


# ---------------------------------------------------------------- sweep


def configs_for(args):
    """{(layer, T, d): [sweep names]} in the order they are run."""
    out = {}
    for layer in args.layers:
        t_values = list(args.t_values)
        if layer in ("lstm", "simple_rnn"):
            t_values = [t for t in t_values if t <= args.rnn_max_t]
        for t in t_values:
            out.setdefault((layer, t, args.d_fixed), []).append("T")
        for d in args.d_values:
            out.setdefault((layer, args.t_fixed, d), []).append("d")
    return out


def run_benchmark(args, log):
    import tensorflow as tf

    mem_info = None
    try:
        mem_info = tf.config.experimental.get_memory_info("CPU:0")
    except Exception as e:  # noqa: BLE001
        mem_info = f"{type(e).__name__}: {e}"
    log(f"tf.config.experimental.get_memory_info('CPU:0') -> {mem_info}")

    configs = configs_for(args)
    results = {}
    live = {}  # (layer, T, d) -> {mode: [step, x, times]}
    # XLA pruning: once XLA was >2x slower than the graph for (layer, sweep)
    # at some size, it is not tried at larger sizes of that sweep.
    xla_off = {}  # (layer, sweep) -> smallest size where XLA lost by > 2x

    def size(t, d, sweep):
        return t if sweep == "T" else d

    def load1():
        try:
            return float(open("/proc/loadavg").read().split()[0])
        except OSError:
            return float("nan")

    # Round 1 (ascending sizes): trace/compile, warm up, time both modes.
    log(f"Round 1/{args.rounds}: compile, warm up, time")
    for (layer, t, d), sweeps in configs.items():
        row = {
            "layer": layer,
            "T": t,
            "d": d,
            "B": args.batch,
            "sweeps": sweeps,
            "fwd_gflop": forward_flops(layer, args.batch, t, d) / 1e9,
            "seq_steps": sequential_steps(layer, t),
            "act_est_mb": 4 * activation_floats(layer, args.batch, t, d) / 2**20,
            "load": [load1()],
        }
        per_mode = {}
        for mode in args.modes:
            if mode == "xla" and all(size(t, d, s) > xla_off.get((layer, s), math.inf) for s in sweeps):
                continue
            step, x, params = build_step(layer, args.batch, t, d, jit=(mode == "xla"))
            first, times = time_step(step, x, args.min_time, args.min_reps, args.max_reps)
            per_mode[mode] = [step, x, times]
            row["params"] = params
            row[f"{mode}_first_s"] = first
        if "graph" in per_mode and "xla" in per_mode:
            if statistics.median(per_mode["xla"][2]) > 2 * statistics.median(per_mode["graph"][2]):
                for s in sweeps:
                    xla_off[(layer, s)] = min(xla_off.get((layer, s), math.inf), size(t, d, s))
        results[(layer, t, d)] = row
        live[(layer, t, d)] = per_mode
        log(f"  {SHORT[layer]:13s} T={t:5d} d={d:4d}  "
            + "  ".join(f"{m}={1e3 * statistics.median(v[2]):9.2f} ms" for m, v in per_mode.items()))

    # Later rounds, in alternating order, so that a burst of load from other
    # jobs on the shared machine does not hit all repetitions of one config.
    keys = list(configs)
    for r in range(2, args.rounds + 1):
        log(f"Round {r}/{args.rounds}: more repetitions ({'descending' if r % 2 == 0 else 'ascending'})")
        for key in (keys[::-1] if r % 2 == 0 else keys):
            results[key]["load"].append(load1())
            for mode, (step, x, times) in live[key].items():
                warm = 1 if statistics.median(times) < 0.1 else 0
                times.extend(time_step(step, x, args.min_time, args.min_reps, args.max_reps,
                                       warmup=warm, first_call=False)[1])

    for key, row in results.items():
        per_mode = live.pop(key)
        for mode, (_, _, times) in per_mode.items():
            row[f"{mode}_ms"] = 1e3 * statistics.median(times)
        best = min(per_mode.items(), key=lambda item: statistics.median(item[1][2]))[0]
        times = per_mode[best][2]
        med = statistics.median(times)
        q = np.percentile(times, [25, 75])
        row.update(
            mode=best,
            median_ms=1e3 * med,
            q1_ms=1e3 * q[0],
            q3_ms=1e3 * q[1],
            min_ms=1e3 * min(times),
            reps=len(times),
            achieved_gflops=3 * row["fwd_gflop"] / med,
            load=max(row["load"]),
        )
        del per_mode
    return results, mem_info


def _worker_cmd(kind, payload):
    return [sys.executable, os.path.abspath(__file__), f"--_{kind}-worker", json.dumps(payload)]


def alloc_worker(configs):
    """Run with TF_CPU_ALLOCATOR_USE_BFC=true: per config, the allocator's peak."""
    import tensorflow as tf

    for layer, t, d, mode, batch in configs:
        step, x, _ = build_step(layer, batch, t, d, jit=(mode == "xla"))
        step(x)[0].numpy()  # trace / compile
        tf.config.experimental.reset_memory_stats("CPU:0")
        base = tf.config.experimental.get_memory_info("CPU:0")["current"]
        step(x)[0].numpy()
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        print(json.dumps({"key": [layer, t, d], "alloc_peak_mb": (peak - base) / 2**20,
                          "alloc_base_mb": base / 2**20}), flush=True)
        del step, x


def rss_worker(config):
    """Fresh process, default allocator: VmHWM growth over the first two steps."""
    layer, t, d, mode, batch = config
    step, x, _ = build_step(layer, batch, t, d, jit=(mode == "xla"))
    before = _proc_status_kb("VmRSS")["VmRSS"]
    _reset_hwm()
    step(x)[0].numpy()
    step(x)[0].numpy()
    peak = _proc_status_kb("VmHWM")["VmHWM"]
    print(json.dumps({"rss_fresh_mb": (peak - before) / 1024}))


def measure_memory(results, args, log):
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true")
    configs = [[k[0], k[1], k[2], r["mode"], args.batch] for k, r in results.items()]
    log("Allocator peak per step (separate process, TF_CPU_ALLOCATOR_USE_BFC=true) ...")
    out = subprocess.run(_worker_cmd("alloc", configs), capture_output=True, text=True, env=env,
                         timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            row = results[tuple(rec["key"])]
            row["alloc_peak_mb"] = rec["alloc_peak_mb"]
            row["alloc_base_mb"] = rec["alloc_base_mb"]
    missing = [k for k, r in results.items() if "alloc_peak_mb" not in r]
    if missing:
        log(f"  allocator peak missing for {missing}: {out.stderr[-800:]}")
    for r in results.values():
        r.setdefault("alloc_peak_mb", float("nan"))
    if not args.rss:
        return
    log("Peak RSS growth, fresh process per config (largest T of each layer) ...")
    for layer in args.layers:
        keys = [k for k in results if k[0] == layer and "T" in results[k]["sweeps"]]
        key = max(keys, key=lambda k: k[1])
        row = results[key]
        out = subprocess.run(_worker_cmd("rss", [*key, row["mode"], args.batch]),
                             capture_output=True, text=True, timeout=600)
        try:
            row["rss_fresh_mb"] = json.loads(out.stdout.strip().splitlines()[-1])["rss_fresh_mb"]
        except Exception:  # noqa: BLE001
            log(f"  RSS check failed for {key}: {out.stderr[-500:]}")
            continue
        log(f"  {SHORT[layer]:13s} T={key[1]} d={key[2]} ({row['mode']}): RSS +{row['rss_fresh_mb']:.1f} MB,"
            f" allocator peak {row['alloc_peak_mb']:.1f} MB, analytic kept {row['act_est_mb']:.1f} MB")


# ---------------------------------------------------------------- analysis


def fit_slope(xs, ys):
    if len(xs) < 2:
        return float("nan")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def sweep_rows(results, layer, sweep):
    rows = [r for r in results.values() if r["layer"] == layer and sweep in r["sweeps"]]
    return sorted(rows, key=lambda r: r["T"] if sweep == "T" else r["d"])


def crossover(rows_a, rows_b, axis="T", field="median_ms"):
    """Where time(a) becomes and stays >= time(b) along the sweep.

    Returns ("=", x) with x log-log interpolated after the last point where
    a was cheaper, ("<=", x0) if a is never cheaper, (">", x_max) if a is
    still cheaper at the end, plus the number of sign changes (noise shows
    as more than one).
    """
    tb = {r[axis]: r[field] for r in rows_b}
    pts = [(r[axis], math.log(r[field]) - math.log(tb[r[axis]])) for r in rows_a if r[axis] in tb]
    if not pts:
        return None
    changes = sum((d0 >= 0) != (d1 >= 0) for (_, d0), (_, d1) in zip(pts, pts[1:]))
    cheaper = [i for i, (_, diff) in enumerate(pts) if diff < 0]
    if not cheaper:
        return ("<=", pts[0][0], changes)
    i = cheaper[-1]
    if i == len(pts) - 1:
        return (">", pts[-1][0], changes)
    (x0, d0), (x1, d1) = pts[i], pts[i + 1]
    frac = d0 / (d0 - d1)
    return ("=", math.exp(math.log(x0) + frac * (math.log(x1) - math.log(x0))), changes)


def analyse(results, args):
    slopes = {}
    for layer in args.layers:
        t_rows = sweep_rows(results, layer, "T")
        d_rows = sweep_rows(results, layer, "d")
        big_t = [r for r in t_rows if r["T"] >= args.big_t]
        big_d = [r for r in d_rows if r["d"] >= args.big_d]
        slopes[layer] = {
            "T_all": fit_slope([r["T"] for r in t_rows], [r["median_ms"] for r in t_rows]),
            "T_large": fit_slope([r["T"] for r in big_t], [r["median_ms"] for r in big_t]),
            "T_large_min": fit_slope([r["T"] for r in big_t], [r["min_ms"] for r in big_t]),
            "d_large_min": fit_slope([r["d"] for r in big_d], [r["min_ms"] for r in big_d]),
            "d_all": fit_slope([r["d"] for r in d_rows], [r["median_ms"] for r in d_rows]),
            "d_large": fit_slope([r["d"] for r in big_d], [r["median_ms"] for r in big_d]),
            "T_flops": fit_slope([r["T"] for r in big_t], [r["fwd_gflop"] for r in big_t]),
            "d_flops": fit_slope([r["d"] for r in big_d], [r["fwd_gflop"] for r in big_d]),
            "T_rss": fit_slope(
                [r["T"] for r in big_t if r["alloc_peak_mb"] > 0],
                [r["alloc_peak_mb"] for r in big_t if r["alloc_peak_mb"] > 0],
            ),
        }
    crossings = {}
    for att in [a for a in ATTENTION if a in args.layers]:
        for other in [o for o in args.layers if o not in ATTENTION]:
            crossings[(att, other)] = [
                crossover(sweep_rows(results, att, "T"), sweep_rows(results, other, "T"), field=f)
                for f in ("median_ms", "min_ms")
            ]
    d = args.d_fixed
    theory = {
        # 8Td^2 + 4T^2 d >= 16 T d^2  <=>  T >= 2d
        "lstm": 2 * d,
        # attention's FLOPs exceed these at every T (8Td^2 alone is larger)
        "simple_rnn": None,
        "conv1d": None,
    }
    return slopes, crossings, theory


def fmt_cross(c):
    if c is None:
        return "n/a"
    kind, x, changes = c
    note = f" ({changes} sign changes)" if changes > 1 else ""
    if kind == "=":
        return f"T ~ {x:.0f}{note}"
    if kind == "<=":
        return f"at every T >= {x}{note}"
    return f"not up to T={x}{note}"


# ---------------------------------------------------------------- output

CSV_FIELDS = [
    "sweep", "layer", "B", "T", "d", "mode", "median_ms", "q1_ms", "q3_ms", "min_ms", "reps",
    "graph_ms", "xla_ms", "graph_first_s", "xla_first_s", "fwd_gflop", "achieved_gflops",
    "seq_steps", "params", "act_est_mb", "alloc_peak_mb", "rss_fresh_mb", "load",
]


def write_csv(results, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for sweep in ("T", "d"):
            for r in sorted(results.values(), key=lambda r: (LAYERS.index(r["layer"]), r["T"], r["d"])):
                if sweep not in r["sweeps"]:
                    continue
                row = {k: r.get(k, "") for k in CSV_FIELDS}
                row["sweep"] = sweep
                for k, v in row.items():
                    if isinstance(v, float):
                        row[k] = f"{v:.4g}"
                w.writerow(row)


def table_text(results):
    head = (
        f"{'sweep':5s} {'layer':13s} {'T':>5s} {'d':>4s} {'mode':>5s} {'median ms':>10s}"
        f" {'graph ms':>9s} {'xla ms':>9s} {'fwd GFLOP':>9s} {'GFLOP/s':>8s} {'seq':>5s}"
        f" {'act est MB':>10s} {'alloc pk MB':>9s}"
    )
    lines = [head, "-" * len(head)]
    for sweep in ("T", "d"):
        for layer in LAYERS:
            for r in sweep_rows(results, layer, sweep):
                lines.append(
                    f"{sweep:5s} {SHORT[layer]:13s} {r['T']:5d} {r['d']:4d} {r['mode']:>5s}"
                    f" {r['median_ms']:10.2f} {r.get('graph_ms', float('nan')):9.2f}"
                    f" {r.get('xla_ms', float('nan')):9.2f} {r['fwd_gflop']:9.3f}"
                    f" {r['achieved_gflops']:8.1f} {r['seq_steps']:5d} {r['act_est_mb']:10.1f}"
                    f" {r['alloc_peak_mb']:9.1f}"
                )
        lines.append("")
    return "\n".join(lines)


def plot(results, args, slopes, crossings, path, subtitle):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "zoo_mha": "tab:red",
        "keras_mha": "tab:orange",
        "lstm": "tab:blue",
        "simple_rnn": "tab:cyan",
        "conv1d": "tab:green",
    }
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.6))
    for ax, sweep, axis in ((axes[0], "T", "T"), (axes[1], "d", "d")):
        for layer in args.layers:
            rows = sweep_rows(results, layer, sweep)
            if not rows:
                continue
            xs = [r[axis] for r in rows]
            ys = [r["median_ms"] for r in rows]
            lo = [r["median_ms"] - r["q1_ms"] for r in rows]
            hi = [r["q3_ms"] - r["median_ms"] for r in rows]
            s = slopes[layer][f"{axis}_large"]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=4, capsize=2, color=colors[layer],
                        label=f"{SHORT[layer]} (slope {s:.2f})")
            for r in rows:
                if r["mode"] == "xla":
                    ax.plot(r[axis], r["median_ms"], "s", mfc="none", mec="k", ms=8)
        # Slope guides through the geometric middle of the plotted range.
        all_rows = [r for r in results.values() if sweep in r["sweeps"]]
        if all_rows:
            xs = sorted({r[axis] for r in all_rows})
            x0, x1 = xs[0], xs[-1]
            ymid = math.exp(np.mean([math.log(r["median_ms"]) for r in all_rows]))
            xm = math.sqrt(x0 * x1)
            for k, style in ((1, ":"), (2, "--"), (3, "-.")):
                if axis == "T" and k == 3:
                    continue
                gx = np.array([x0, x1], dtype=float)
                ax.plot(gx, ymid * (gx / xm) ** k, style, color="gray", lw=1)
                ax.annotate(f"slope {k}", (x1, ymid * (x1 / xm) ** k), fontsize=8, color="gray",
                            ha="right", va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("forward+backward time per step, ms (median, IQR bars)")
        if axis == "T":
            ax.axvline(args.d_fixed, color="k", lw=0.8, alpha=0.5)
            ax.text(args.d_fixed, ax.get_ylim()[0] * 1.3, " T = d", fontsize=8)
            ax.set_xlabel(f"sequence length T  (d={args.d_fixed}, B={args.batch})")
            ax.set_title("time vs T (slopes fitted for T >= %d)" % args.big_t)
            for (att, other), (c, _) in crossings.items():
                if c and c[0] == "=":
                    ax.axvline(c[1], color=colors[other], ls="--", lw=0.8, alpha=0.7)
                    ax.text(c[1], ax.get_ylim()[0] * 2, f"{SHORT[att]} > {SHORT[other]}", rotation=90,
                            fontsize=7, color=colors[other], ha="right", va="bottom")
        else:
            ax.axvline(args.t_fixed, color="k", lw=0.8, alpha=0.5)
            ax.text(args.t_fixed, ax.get_ylim()[0] * 1.3, " d = T", fontsize=8)
            ax.set_xlabel(f"width d  (T={args.t_fixed}, B={args.batch})")
            ax.set_title("time vs d (slopes fitted for d >= %d)" % args.big_d)
        ax.plot([], [], "s", mfc="none", mec="k", label="XLA faster (jit_compile=True)")
        ax.legend(fontsize=8, loc="upper left")

    ax = axes[2]
    for layer in args.layers:
        rows = sweep_rows(results, layer, "T")
        if not rows:
            continue
        xs = [r["T"] for r in rows]
        ax.plot(xs, [r["alloc_peak_mb"] for r in rows], "o-", color=colors[layer],
                label=f"{SHORT[layer]}: allocator peak of one step")
        for r in rows:
            if r.get("rss_fresh_mb") is not None:
                ax.plot(r["T"], r["rss_fresh_mb"], "^", color=colors[layer], mec="k", ms=8)
        ax.plot(xs, [r["act_est_mb"] for r in rows], "x:", color=colors[layer], alpha=0.7)
    ax.plot([], [], "kx:", label="analytic: kept for backward")
    ax.plot([], [], "^", color="w", mec="k", label="RSS growth, fresh process (first 2 steps)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel(f"sequence length T  (d={args.d_fixed}, B={args.batch})")
    ax.set_ylabel("MB")
    ax.set_title("memory of one step vs T")
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("One layer, forward+backward, float32 on CPU - " + subtitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine_text():
    import keras
    import tensorflow as tf

    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"]
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs (shared with other jobs; load avg at start "
        f"{' '.join(load)}), TF {tf.__version__}, Keras {keras.__version__}, "
        f"Python {platform.python_version()}"
    )


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sweep, graph mode only: a smoke run")
    p.add_argument("--out", default=None,
                   help="output folder (default benchmarks/results, benchmarks/results/quick with --quick)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--layers", default=",".join(LAYERS))
    p.add_argument("--modes", default=None, help="graph,xla (default) or one of them")
    p.add_argument("--rounds", type=int, default=None,
                   help="timing rounds over all configs (default 3; 1 with --quick)")
    p.add_argument("--rss", action=argparse.BooleanOptionalAction, default=None,
                   help="measure the RSS growth of the largest-T config of each layer in a fresh"
                   " process (default: on, off with --quick)")
    p.add_argument("--replot", action="store_true",
                   help="re-analyse and re-plot OUT/complexity.csv without measuring")
    p.add_argument("--_alloc-worker", dest="alloc_worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_rss-worker", dest="rss_worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.layers = [s.strip() for s in args.layers.split(",") if s.strip()]
    for layer in args.layers:
        if layer not in LAYERS:
            p.error(f"unknown layer {layer!r}; choose from {LAYERS}")
    if args.quick:
        args.t_values, args.d_fixed = [16, 32], 16
        args.d_values, args.t_fixed = [16, 32], 16
        args.rnn_max_t = 32
        args.min_time, args.min_reps, args.max_reps = 0.0, 2, 2
        args.rounds = args.rounds or 1
        args.big_t, args.big_d = 16, 16
        args.modes = args.modes or "graph"
        args.rss = bool(args.rss)
    else:
        args.t_values, args.d_fixed = [32, 64, 128, 256, 512, 1024, 2048], 128
        args.d_values, args.t_fixed = [32, 64, 128, 256, 512], 128
        args.rnn_max_t = 2048
        args.min_time, args.min_reps, args.max_reps = 0.2, 2, 10
        args.rounds = args.rounds or 3
        args.big_t, args.big_d = 256, 128
        args.modes = args.modes or "graph,xla"
        args.rss = args.rss is None or args.rss
    if args.out is None:
        args.out = os.path.join(HERE, "results", "quick") if args.quick else os.path.join(HERE, "results")
    args.modes = [m.strip() for m in args.modes.split(",")]
    for m in args.modes:
        if m not in ("graph", "xla"):
            p.error(f"unknown mode {m!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.alloc_worker:
        alloc_worker(json.loads(args.alloc_worker))
        return
    if args.rss_worker:
        rss_worker(json.loads(args.rss_worker))
        return
    os.makedirs(args.out, exist_ok=True)
    log_lines = []

    def log(msg=""):
        print(msg, flush=True)
        log_lines.append(msg)

    csv_path = os.path.join(args.out, "complexity.csv")
    png_path = os.path.join(args.out, "complexity.png")
    txt_path = os.path.join(args.out, "complexity.txt")
    if args.replot:
        # Re-analyse and re-plot a finished run without measuring again.
        results = read_csv(csv_path)
        args.layers = [layer for layer in LAYERS if any(k[0] == layer for k in results)]
        head = []
        if os.path.exists(txt_path):
            head = open(txt_path).read().split("\n\nsweep layer")[0].splitlines()
        log_lines.extend(head)
        machine = head[0].removeprefix("Machine: ") if head else "?"
        report(results, args, log, None, None)
        if os.path.exists(txt_path):
            # Keep the measured run's closing lines (allocator info, run time).
            for line in open(txt_path).read().splitlines():
                if line.startswith(("get_memory_info", "Total run time")):
                    log(line)
        log("(re-analysed with --replot from complexity.csv)")
    else:
        start = time.time()
        machine = machine_text()
        log(f"Machine: {machine}")
        log(f"B={args.batch}, T sweep {args.t_values} at d={args.d_fixed}, d sweep {args.d_values}"
            f" at T={args.t_fixed}, modes {args.modes}, heads={HEADS}, conv k={KERNEL}")
        results, mem_info = run_benchmark(args, log)
        measure_memory(results, args, log)
        report(results, args, log, mem_info, start)
        write_csv(results, csv_path)
    slopes, crossings, _ = analyse(results, args)
    plot(results, args, slopes, crossings, png_path, f"B={args.batch}; {machine}")
    with open(txt_path, "w") as f:
        f.write("\n".join(log_lines) + "\n")
    written = [png_path, txt_path] if args.replot else [csv_path, png_path, txt_path]
    print("Wrote " + ", ".join(written))


def report(results, args, log, mem_info, start):
    slopes, crossings, theory = analyse(results, args)
    log("")
    log(table_text(results))
    log("Fitted log-log slopes of time vs T and vs d: medians, [minima], <FLOP count>;"
        " last column: allocator peak vs T")
    log(f"  {'layer':13s} {'T all':>6s} {'T>=' + str(args.big_t):>8s} {'[min]':>6s} {'<FLOP>':>6s}"
        f" {'d all':>6s} {'d>=' + str(args.big_d):>7s} {'[min]':>6s} {'<FLOP>':>6s} {'mem~T':>6s}")
    for layer in args.layers:
        s = slopes[layer]
        log(f"  {SHORT[layer]:13s} {s['T_all']:6.2f} {s['T_large']:8.2f} {s['T_large_min']:6.2f}"
            f" {s['T_flops']:6.2f} {s['d_all']:6.2f} {s['d_large']:7.2f} {s['d_large_min']:6.2f}"
            f" {s['d_flops']:6.2f} {s['T_rss']:6.2f}")
    log(f"Crossover, T sweep at d={args.d_fixed}: attention becomes and stays slower than the other layer")
    for (att, other), (c_med, c_min) in crossings.items():
        th = theory[other]
        th_txt = f"T >= {th} (= 2d)" if th else "every T"
        log(f"  {SHORT[att]:12s} vs {SHORT[other]:10s}: medians {fmt_cross(c_med):30s}"
            f" minima {fmt_cross(c_min):30s} FLOP count: {th_txt}")
    log(f"  (Table 1 keeps only T^2 d vs T d^2: crossover at T = d = {args.d_fixed})")
    if mem_info is not None:
        log(f"get_memory_info('CPU:0') with the default allocator = {mem_info}")
    if start is not None:
        log(f"Total run time {time.time() - start:.0f} s; load average at the end "
            f"{' '.join(open('/proc/loadavg').read().split()[:3])} (machine shared with other jobs).")


def read_csv(path):
    results = {}
    with open(path) as f:
        for rec in csv.DictReader(f):
            key = (rec["layer"], int(rec["T"]), int(rec["d"]))
            if key in results:
                results[key]["sweeps"].append(rec["sweep"])
                continue
            row = {}
            for k, v in rec.items():
                if k in ("layer", "mode") or v == "":
                    row[k] = v if v != "" else None
                elif k in ("B", "T", "d", "reps", "seq_steps", "params"):
                    row[k] = int(v)
                elif k != "sweep":
                    row[k] = float(v)
            for k in ("graph_ms", "xla_ms"):
                if row.get(k) is None:
                    row.pop(k, None)
            row["sweeps"] = [rec["sweep"]]
            results[key] = row
    return results


if __name__ == "__main__":
    main()
