"""Analysis and text output for benchmarks/complexity.py: log-log slopes,
crossovers of attention with the other layers, the results table, the
report printed at the end of a run, and the CSV written and re-read
(`--replot`)."""

import csv
import math
import time

import numpy as np
from complexity_measure import ATTENTION, LAYERS, SHORT

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
