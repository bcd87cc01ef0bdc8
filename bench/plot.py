#!/usr/bin/env python3
"""The README's benchmark figure from the published figures and from benchmark output.

    python3 bench/plot.py -o docs/figures/bench.png
    python3 bench/plot.py -o mine.png --bench run1.txt run2.txt --sweep sweep.txt

Three panels:
  MatMult time against N (log-log) with the O(N) line through the largest GPU point,
  MATSWEEP grind time against angles per octant (with the 0.02 ns target),
  sweeps to converge against the scattering ratio c: source iteration and GMRES.
The published figures come from bench/figures.dat (each row quotes README.md or docs/);
--bench adds the "bench:" lines of bench/bench output (mult_med_s against N, one series per
file, device and vector type), --sweep the "sweep:" lines of bench/sweep (kernel_grind_med_ns
on the GPU, grind_med_ns on the CPU, against nang).  Needs NumPy and matplotlib only.
"""

import argparse
import collections
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def read_figures(path):
    """{panel: {series: [(x, value, low, high, source)]}} of a figures.dat file (None for '-')."""
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = [v.strip() for v in line.split(" | ", 6)]  # the source may quote a table row
            if len(fields) != 7:
                raise ValueError("%s:%d: expected 7 fields separated by ' | ', got %d" % (path, lineno, len(fields)))
            panel, series, x, value, low, high, source = fields
            num = [None if v == "-" else float(v) for v in (value, low, high)]
            if num[0] is None and (num[1] is None or num[2] is None):
                raise ValueError("%s:%d: a value or a range is needed" % (path, lineno))
            out[panel][series].append((float(x), *num, source))
    return out


def read_keyvalues(path, tag):
    """The key=value fields of each line of path that starts with tag (e.g. "bench:")."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith(tag):
                rows.append(dict(kv.split("=", 1) for kv in line[len(tag):].split() if "=" in kv))
    return rows


def centre(value, low, high):
    return value if value is not None else 0.5 * (low + high)


def draw_series(ax, pts, label, style, scale=1.0):
    """Points with their published ranges as error bars (a range alone: the bar, marked at its middle)."""
    pts = sorted(pts)
    x = np.array([p[0] for p in pts])
    y = np.array([centre(*p[1:4]) for p in pts]) * scale
    lo = np.array([(p[2] if p[2] is not None else centre(*p[1:4])) for p in pts]) * scale
    hi = np.array([(p[3] if p[3] is not None else centre(*p[1:4])) for p in pts]) * scale
    ax.errorbar(x, y, yerr=[y - lo, hi - y], label=label, capsize=3, **style)


def panel_matmult(ax, figs, benches):
    styles = iter([dict(fmt="o-", color="tab:green"), dict(fmt="s--", color="tab:olive"), dict(fmt="^", color="tab:cyan"),
                   dict(fmt="v", color="tab:gray"), dict(fmt="D", color="tab:red"), dict(fmt="P", color="tab:purple")])
    refs = []  # (largest point, range of N) of the O(N) lines
    for series, pts in figs.items():
        if series == "target":
            for x, v, *_ in pts:
                ax.plot([x / 2, x * 2], [v, v], ":", color="k", lw=1)
                ax.annotate("target", (x * 2, v), fontsize=7, va="center")
            continue
        draw_series(ax, pts, series, next(styles))
        if series.startswith("GPU, device"):
            refs.append((max(pts), (1e5, 2e7)))
        if series.startswith("CPU"):
            refs.append((max(pts), (1e4, 2e6)))
    for label, rows in benches:  # the median over the lines of each N (several runs of one file)
        by = collections.defaultdict(lambda: collections.defaultdict(list))
        for r in rows:
            by["%s, %s" % (r.get("device"), r.get("vec"))][int(r["N"])].append(1e3 * float(r["mult_med_s"]))
        for kind, d in by.items():
            N = sorted(d)
            ax.plot(N, [np.median(d[n]) for n in N], "x-", label="%s (%s; median of %d runs)" % (label, kind, max(len(v) for v in d.values())))
    for i, (ref, (n0, n1)) in enumerate(refs):
        N = np.array([n0, n1])
        ax.plot(N, centre(*ref[1:4]) * N / ref[0], "-", color="0.6", lw=1, zorder=0, label="O(N)" if i == 0 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N (points; targets = sources, star curve, eps 1e-10)")
    ax.set_ylabel("MatMult time (ms)")
    ax.set_title("MATFMM: MatMult against N", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 300)  # room for the legend above the data
    ax.legend(fontsize=6, loc="upper left")


def panel_grind(ax, figs, sweeps):
    styles = iter([dict(fmt="o-", color="tab:green"), dict(fmt="s--", color="tab:olive"), dict(fmt="D", color="tab:gray"),
                   dict(fmt="^-", color="tab:blue"), dict(fmt="v-", color="tab:red")])
    for series, pts in figs.items():
        if series == "target":
            for _, v, *_ in pts:
                ax.axhline(v, ls=":", color="k", lw=1)
                ax.annotate("target %g ns" % v, (64, v), fontsize=7, va="bottom", ha="right")
            continue
        draw_series(ax, pts, series, next(styles))
    for label, rows in sweeps:
        pts = sorted((int(r["nang"]), float(r["kernel_grind_med_ns"]) if r.get("device") == "cuda" else float(r["grind_med_ns"]))
                     for r in rows)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "x-", label="%s (%s)" % (label, rows[0].get("device")))
    ax.set_yscale("log")
    ax.set_xticks([36, 48, 64])
    ax.set_xlabel("angles per octant (64^3 cells, 16 groups, DD)")
    ax.set_ylabel("grind time (ns per cell, angle, group)")
    ax.set_title("MATSWEEP: grind time", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6, loc="center right")


def panel_iterations(ax, figs):
    styles = iter([dict(fmt="o-", color="tab:red"), dict(fmt="s-", color="tab:blue")])
    for series, pts in figs.items():
        draw_series(ax, [(1 - p[0], *p[1:]) for p in pts], series, next(styles))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.invert_xaxis()
    ax.set_xticks([0.5, 0.1, 0.01, 0.001])
    ax.set_xticklabels(["0.5", "0.9", "0.99", "0.999"])
    ax.set_xlabel("scattering ratio c")
    ax.set_ylabel("sweeps to a residual of 1e-8")
    ax.set_title("MATSWEEP: Krylov against source iteration\n(tutorials/ex3, 16^3 cells, 20 mean free paths)", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--data", default=os.path.join(HERE, "figures.dat"), help="the published figures (default bench/figures.dat)")
    p.add_argument("--bench", nargs="*", default=[], help="files of bench/bench output")
    p.add_argument("--sweep", nargs="*", default=[], help="files of bench/sweep output")
    p.add_argument("--dpi", type=int, default=90)
    a = p.parse_args(argv)
    figs = read_figures(a.data)
    benches, sweeps = [], []
    for f in a.bench:
        rows = read_keyvalues(f, "bench:")
        if not rows:
            p.error("%s: no 'bench:' line (output of bench/bench)" % f)
        benches.append((os.path.splitext(os.path.basename(f))[0], rows))
    for f in a.sweep:
        rows = read_keyvalues(f, "sweep:")
        if not rows:
            p.error("%s: no 'sweep:' line (output of bench/sweep)" % f)
        sweeps.append((os.path.splitext(os.path.basename(f))[0], rows))
    print("%s: %d published figures in %d series; %d bench lines, %d sweep lines"
          % (a.data, sum(len(v) for s in figs.values() for v in s.values()), sum(len(s) for s in figs.values()),
             sum(len(r) for _, r in benches), sum(len(r) for _, r in sweeps)))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.6), constrained_layout=True)
    panel_matmult(ax[0], figs["matmult"], benches)
    panel_grind(ax[1], figs["grind"], sweeps)
    panel_iterations(ax[2], figs["iterations"])
    fig.savefig(a.output, dpi=a.dpi)
    print("figure written to %s" % a.output)


if __name__ == "__main__":
    sys.exit(main())
