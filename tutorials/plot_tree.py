#!/usr/bin/env python3
"""Draw the leaf boxes of a MATFMM tree over its points, from the file of
``tutorials/ex2 -tree_file <file>`` (MatFMMGetTreeLeaves()).

    tutorials/ex2 -n 4000 -tree_file tree.txt [-mat_fmm_ct 32] [-mat_fmm_tree_split median]
    python3 tutorials/plot_tree.py tree.txt -o tree.png
    python3 tutorials/plot_tree.py compact.txt median.txt -o tree.png --titles "compact split" "median split"

Each box is the bounding box of its points, which is what the tree's
expansions are centred on and the theta-criterion measures: the leaves in
blue, the boxes of the levels given by --levels (default 2) in colour.  The file: a
header line "# petscfmm tree: ...", then "leaf x y" per point in tree order.
Needs NumPy and matplotlib only (not petsc4py).
"""

import argparse
import sys

import numpy as np


def read_tree(path):
    """(header, leaf index per point, points (N, 2)) of a -tree_file file."""
    with open(path) as f:
        header = f.readline().strip()
        if not header.startswith("# petscfmm tree:"):
            raise ValueError("%s: not a tree file of tutorials/ex2 -tree_file (first line %r)" % (path, header))
        data = np.loadtxt(f, ndmin=2)
    if data.shape[1] != 3:
        raise ValueError("%s: expected lines 'leaf x y', got %d columns" % (path, data.shape[1]))
    leaf = data[:, 0].astype(np.int64)
    if np.any(np.diff(leaf) < 0):
        raise ValueError("%s: the points are not in tree order (leaf numbers decrease)" % path)
    return header, leaf, data[:, 1:]


def header_fields(header):
    """The key=value pairs of the header line."""
    return dict(kv.split("=", 1) for kv in header.split(":", 1)[1].split() if "=" in kv)


def leaf_boxes(leaf, xy):
    """(leaf numbers, boxes [xmin, ymin, xmax, ymax], point counts) of the non-empty leaves."""
    ids, starts, counts = np.unique(leaf, return_index=True, return_counts=True)
    box = np.stack([np.minimum.reduceat(xy[:, 0], starts), np.minimum.reduceat(xy[:, 1], starts),
                    np.maximum.reduceat(xy[:, 0], starts), np.maximum.reduceat(xy[:, 1], starts)], 1)
    return ids, box, counts


def draw(ax, leaf, xy, title, L, levels):
    """The points, the leaf boxes, and the boxes of the coarser levels asked for (box c of level l holds
    the leaves c 4^(L-l) .. (c+1) 4^(L-l) - 1: its bounding box is that of their points)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle
    ax.plot(xy[:, 0], xy[:, 1], ".", color="0.55", ms=1.0, zorder=1)
    colours = ["tab:red", "tab:orange", "tab:green", "tab:purple"]
    for i, lev in enumerate(sorted(set(levels) | {L}, reverse=True)):
        _, box, _ = leaf_boxes(leaf >> (2 * (L - lev)), xy)
        rects = [Rectangle((b[0], b[1]), b[2] - b[0], b[3] - b[1]) for b in box]
        ax.add_collection(PatchCollection(rects, facecolor="none", zorder=2 + i, linewidth=0.6 if lev == L else 1.2,
                                          edgecolor="tab:blue" if lev == L else colours[i % len(colours)]))
    ids, box, counts = leaf_boxes(leaf, xy)
    ax.set_aspect("equal")
    ax.autoscale_view()
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    return len(ids), counts.max()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="tree files of tutorials/ex2 -tree_file")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--titles", nargs="+", help="a title per file (default: from the file's header)")
    p.add_argument("--levels", type=int, nargs="*", default=[2],
                   help="coarser levels whose boxes are drawn too (default 2; the leaves always)")
    p.add_argument("--dpi", type=int, default=100)
    a = p.parse_args(argv)
    if a.titles and len(a.titles) != len(a.files):
        p.error("--titles: %d titles for %d files" % (len(a.titles), len(a.files)))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    k = len(a.files)
    fig, axes = plt.subplots(1, k, figsize=(4.6 * k, 4.6), squeeze=False, constrained_layout=True)
    for i, (f, ax) in enumerate(zip(a.files, axes[0])):
        header, leaf, xy = read_tree(f)
        h = header_fields(header)
        L = int(h["levels"])
        lev = [v for v in a.levels if 0 <= v < L]
        sub = "N=%s, ct=%s: %d levels, %s leaves (blue)%s" % (h.get("N", "?"), h.get("ct", "?"), L, h.get("leaves", "?"),
                                                              "; level %s" % ", ".join(map(str, lev)) if lev else "")
        title = (a.titles[i] + "\n" + sub) if a.titles else sub
        nonempty, most = draw(ax, leaf, xy, title, L, lev)
        print("%s: %d points, %d non-empty leaf boxes of at most %d points" % (f, len(leaf), nonempty, most))
    fig.savefig(a.output, dpi=a.dpi)
    print("figure written to %s" % a.output)


if __name__ == "__main__":
    sys.exit(main())
