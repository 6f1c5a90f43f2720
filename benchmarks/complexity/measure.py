"""Measurement for benchmarks/complexity/complexity.py: the analytic counts (FLOPs,
sequential steps, activations kept for backward), the timed training-like
step of one layer, and the allocator / resident-set memory figures (each
measured in a worker process, `complexity.py --_alloc-worker/--_rss-worker`).
"""

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(HERE, "complexity.py")  # the workers run through the command line

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
    return [sys.executable, ENTRY, f"--_{kind}-worker", json.dumps(payload)]


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
