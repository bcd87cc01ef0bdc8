#!/usr/bin/env python3
"""The multi-GPU scaling figure of docs/scaling.md from the figures it quotes (bench/scaling.dat).

    python3 bench/plot_scaling.py -o docs/figures/scaling.png

Two panels against the number of GPUs (one MPI rank a GPU): weak-scaling efficiency (the time on one GPU
over the time on P GPUs with P times the problem; ideal 1) and strong-scaling speedup (ideal P).  A row
with a range and no single value is drawn as a bar from low to high.  Needs matplotlib only.
"""

import argparse
import os

from plot import read_figures  # the same file format as bench/figures.dat

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--data", default=os.path.join(HERE, "scaling.dat"))
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = read_figures(args.data)  # x = GPUs
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for ax, panel, title, ylabel in ((axes[0], "weak", "Weak scaling", "efficiency (1 GPU time / P GPU time)"),
                                     (axes[1], "strong", "Strong scaling", "speedup over 1 GPU")):
        gp = sorted({int(p) for rows in data[panel].values() for p, *_ in rows})
        ax.plot(gp, [1.0] * len(gp) if panel == "weak" else gp, "k:", label="ideal")
        for k, (series, rows) in enumerate(sorted(data[panel].items())):
            rows.sort()
            mid = [v if v is not None else 0.5 * (lo + hi) for _, v, lo, hi, _ in rows]
            err = [[m - (lo if lo is not None else m) for (_, _, lo, _, _), m in zip(rows, mid)],
                   [(hi if hi is not None else m) - m for (_, _, _, hi, _), m in zip(rows, mid)]]
            style = "--" if "model" in series else "-"
            ax.errorbar([r[0] for r in rows], mid, yerr=err, fmt="o" + style, capsize=3, label=series)
        ax.set_xticks(gp)
        ax.set_xlabel("GPUs (H100, one MPI rank each)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left" if panel == "weak" else "upper left")
    fig.tight_layout()
    fig.savefig(args.output)


if __name__ == "__main__":
    main()
