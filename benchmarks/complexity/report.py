"""What benchmarks/complexity/complexity.py writes: log-log slopes,
crossovers of attention with the other layers, the results table, the
report printed at the end of a run, the CSV written and re-read
(`--replot`), and the figure (time and memory against T and d)."""

import csv
import math
import time

import numpy as np
from measure import ATTENTION, LAYERS, SHORT

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


# ---------------------------------------------------------------- figure


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
