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
    KERAS_BACKEND=tensorflow python benchmarks/complexity/complexity.py            # full, ~3-7 min on 2 cores
    KERAS_BACKEND=tensorflow python benchmarks/complexity/complexity.py --quick    # smoke run, tiny sizes
    ... --out DIR      write complexity.{csv,png,txt} to DIR
    ... --replot       re-analyse/re-plot DIR/complexity.csv without measuring

This file is the command line; beside it, measure.py counts and times
(and runs the memory workers), and report.py fits the slopes and writes
the table, the report, the CSV and the figure. README.md beside them
reads the results.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCHMARKS)
for path in (ROOT, HERE):  # zoo, and the modules beside this file
    if path not in sys.path:
        sys.path.insert(0, path)

from measure import (  # noqa: E402
    HEADS,
    KERNEL,
    LAYERS,
    alloc_worker,
    machine_text,
    measure_memory,
    rss_worker,
    run_benchmark,
)
from report import analyse, plot, read_csv, report, write_csv  # noqa: E402


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
        args.out = os.path.join(BENCHMARKS, "results", "quick") if args.quick else os.path.join(BENCHMARKS, "results")
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


if __name__ == "__main__":
    main()
