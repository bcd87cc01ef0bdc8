#!/usr/bin/env python3
"""The figure scripts on the programs' real output (matplotlib, from the repository root, tutorials/ and bench/ built):

  tree   tutorials/ex2 -tree_file (MatFMMGetTreeLeaves) -> tutorials/plot_tree.py: the file holds the
         N points once each, in tree order, in at most 4^levels leaves; a PNG comes out
  flux   tutorials/ex3 -vtk -> tutorials/plot_flux.py, 3D with 2 groups and 2D: the script's reader gives
         the mean and peak scalar flux that ex3 prints (same digits), for each group; a PNG comes out
  bench  bench/bench and bench/sweep output, with bench/figures.dat and bench/cpu-2core.txt -> bench/plot.py

Each PNG is checked: a PNG signature, more than 200 x 200 pixels, under 150 KB.  The children run without the
variables of an MPI job this script may be part of.
"""

import os
import re
import struct
import subprocess
import sys

KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe")
ENV = {k: v for k, v in os.environ.items() if k in KEEP or not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
ENV["OMP_NUM_THREADS"] = "1"
RES = "tests/results"
failed = []


def run(*cmd):
    p = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=ENV)
    if p.returncode:
        raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:]))
    return p.stdout


def py(script, *args):
    return run(sys.executable, script, *args)


def check(what, cond):
    print(("ok   " if cond else "FAILED ") + what)
    if not cond:
        failed.append(what)


def png(path):
    """(width, height, bytes) of a PNG file."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("%s is not a PNG" % path)
    w, h = struct.unpack(">II", head[16:24])
    return w, h, os.path.getsize(path)


def check_png(path):
    w, h, n = png(path)
    check("%s: a PNG, under 150 KB" % path, n < 150 * 1024 and w > 200 and h > 200)


def tree():
    f = os.path.join(RES, "figures_tree.txt")
    o = run("./tutorials/ex2", "-n", "3000", "-check", "0", "-mat_fmm_device", "cpu", "-mat_fmm_ct", "16", "-tree_file", f)
    m = re.search(r"tree: (\d+) leaves on (\d+) levels written", o)
    check("ex2 -tree_file: %s" % (m.group(0) if m else "no 'tree:' line"), bool(m))
    sys.path.insert(0, "tutorials")
    import plot_tree
    header, leaf, xy = plot_tree.read_tree(f)
    h = plot_tree.header_fields(header)
    nleaves = int(m.group(1))
    check("tree file: %d points in tree order, leaves in [0, %d), %s levels" % (len(leaf), nleaves, h["levels"]),
          len(leaf) == 3000 == int(h["N"]) and leaf.min() >= 0 and leaf.max() < nleaves and int(h["leaves"]) == nleaves)
    _, box, counts = plot_tree.leaf_boxes(leaf, xy)
    # the compact split cuts a box of n points after n/2 - n/32 .. n/2 + n/32 of them (src/fmm/fmmimpl.h), twice a level
    bound = len(leaf)
    for _ in range(2 * int(h["levels"])):
        bound = bound - bound // 2 + bound // 32
    check("tree file: %d non-empty leaves, none larger than the split rule allows" % len(counts),
          counts.sum() == 3000 and counts.max() <= bound)
    out = os.path.join(RES, "figures_tree.png")
    print(py("tutorials/plot_tree.py", f, "-o", out, "--titles", "ex2 -n 3000").strip().splitlines()[-1])
    check_png(out)


def flux():
    for args, groups in ((["-nx", "10", "-ny", "8", "-nz", "6", "-mat_sweep_groups", "2"], 2), (["-twod", "-nx", "12", "-ny", "9"], 1)):
        f = os.path.join(RES, "figures_flux%s.vts" % ("2d" if "-twod" in args else ""))
        o = run("./tutorials/ex3", *args, "-vtk", f)
        ex3 = re.search(r"group 0 scalar flux: mean \S+, peak \S+", o).group(0)
        for g in range(groups):
            out = f.replace(".vts", "_g%d.png" % g)
            p = py("tutorials/plot_flux.py", f, "-o", out, "--group", str(g))
            line = re.search(r"group %d scalar flux: mean \S+, peak \S+" % g, p).group(0)
            if g == 0:
                check("ex3 %s -vtk, plot_flux.py: the reader gives ex3's '%s'" % (" ".join(args), ex3.split(":")[0]), line == ex3)
            else:
                check("plot_flux.py --group %d: %s" % (g, "a positive flux" if "peak -" not in line else line), "mean" in line)
            check_png(out)


def bench():
    b = os.path.join(RES, "figures_bench.txt")
    s = os.path.join(RES, "figures_sweep.txt")
    with open(b, "w") as fh:
        fh.write(run("./bench/bench", "-n", "20000", "-mat_fmm_device", "cpu", "-reps", "2", "-sample", "0"))
    with open(s, "w") as fh:
        fh.write(run("./bench/sweep", "-nx", "6", "-ny", "6", "-nz", "6", "-mat_sweep_nang", "4", "-mat_sweep_groups", "2",
                     "-reps", "2", "-mat_sweep_device", "cpu"))
    out = os.path.join(RES, "figures_bench.png")
    p = py("bench/plot.py", "-o", out, "--bench", "bench/cpu-2core.txt", b, "--sweep", s)
    line = p.splitlines()[0].split(": ", 1)[1]
    check("bench/plot.py: %s" % line, line == "28 published figures in 14 series; 11 bench lines, 1 sweep lines")
    check_png(out)


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    os.makedirs(RES, exist_ok=True)
    which = sys.argv[1:] or ["tree", "flux", "bench"]
    for w in which:
        {"tree": tree, "flux": flux, "bench": bench}[w]()
    print("figures: %d failed" % len(failed))
    sys.exit(1 if failed else 0)

"""
/*TEST
  test:
    suffix: tree
    requires: matplotlib
    args: tree
  test:
    suffix: flux
    requires: matplotlib
    args: flux
  test:
    suffix: bench
    requires: matplotlib
    args: bench
TEST*/
"""
