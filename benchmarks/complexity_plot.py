"""The figure of benchmarks/complexity.py: time and memory against T and d
for each layer, with the fitted slopes and crossovers."""

import math

import numpy as np
from complexity_measure import SHORT
from complexity_table import sweep_rows

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
