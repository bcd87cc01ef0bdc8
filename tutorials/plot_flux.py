#!/usr/bin/env python3
"""Slices of the scalar flux that ``tutorials/ex3 -vtk flux.vts`` writes, as a PNG.

    tutorials/ex3 -vtk flux.vts [-nx 32 -ny 32 -nz 32 -mat_sweep_groups 2]
    python3 tutorials/plot_flux.py flux.vts -o flux.png [--group 0] [--z K] [--y J]

3D: the planes z = z_K (x-y) and y = y_J (x-z) through the middle of the grid
(default), 2D (ex3 -twod): the x-y plane; log colour scale.  Reads the
StructuredGrid file PETSc's VTK viewer writes (appended raw data, the points
at the cell centres, one array phi_g<g>_m<m> per group and moment), with NumPy
alone: no VTK library, no petsc4py.  Prints the group's mean and peak flux as
ex3 prints group 0's, so the two can be compared.
"""

import argparse
import re
import sys
import xml.etree.ElementTree as ET

import numpy as np

_TYPES = {"Float64": "f8", "Float32": "f4", "Int32": "i4", "Int64": "i8", "UInt32": "u4", "UInt64": "u8"}


def read_vts(path):
    """(shape (nz, ny, nx), points (nz, ny, nx, 3), {name: array (nz, ny, nx[, ncomp])}) of a VTK
    StructuredGrid file with raw appended data (PETSc's .vts)."""
    with open(path, "rb") as f:
        raw = f.read()
    mark = raw.find(b"<AppendedData")
    if mark < 0:
        raise ValueError("%s: no <AppendedData> section (expected PETSc's VTK StructuredGrid output)" % path)
    start = raw.index(b"_", raw.index(b">", mark)) + 1  # the data begin after the underscore
    head = raw[:mark].decode() + "</VTKFile>"
    head = re.sub(r"<AppendedData[^>]*>", "", head)
    root = ET.fromstring(head)
    if root.get("type") != "StructuredGrid":
        raise ValueError("%s: a VTK %s file, expected StructuredGrid" % (path, root.get("type")))
    endian = "<" if root.get("byte_order", "LittleEndian") == "LittleEndian" else ">"
    hdr = np.dtype(endian + _TYPES[root.get("header_type", "UInt32")])
    piece = root.find("StructuredGrid/Piece")
    e = [int(v) for v in piece.get("Extent").split()]
    shape = (e[5] - e[4] + 1, e[3] - e[2] + 1, e[1] - e[0] + 1)
    ncell = shape[0] * shape[1] * shape[2]

    def array(da):
        if da.get("format") != "appended":
            raise ValueError("%s: array %s is not in appended format" % (path, da.get("Name")))
        off = start + int(da.get("offset"))
        nbytes = int(np.frombuffer(raw, hdr, 1, off)[0])
        dt = np.dtype(endian + _TYPES[da.get("type")])
        nc = int(da.get("NumberOfComponents", "1"))
        if nbytes != ncell * nc * dt.itemsize:
            raise ValueError("%s: array %s holds %d bytes, expected %d" % (path, da.get("Name"), nbytes, ncell * nc * dt.itemsize))
        a = np.frombuffer(raw, dt, ncell * nc, off + hdr.itemsize).astype(np.float64)
        return a.reshape(shape + ((nc,) if nc > 1 else ()))

    points = array(piece.find("Points/DataArray"))
    fields = {}
    for da in piece.findall("PointData/DataArray"):
        name = da.get("Name").split(".")[-1]  # PETSc writes <vector name>.<field name>
        fields[name] = array(da)
    return shape, points, fields


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="the .vts of tutorials/ex3 -vtk")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--group", type=int, default=0, help="energy group (default 0)")
    p.add_argument("--z", type=int, help="cell index of the x-y plane (default: the middle)")
    p.add_argument("--y", type=int, help="cell index of the x-z plane (default: the middle)")
    p.add_argument("--dpi", type=int, default=100)
    a = p.parse_args(argv)
    shape, pts, fields = read_vts(a.file)
    name = "phi_g%d_m0" % a.group
    if name not in fields:
        p.error("%s has no field %s (fields: %s)" % (a.file, name, ", ".join(sorted(fields))))
    phi = fields[name]
    nz, ny, nx = shape
    print("%s: %d x %d x %d cells, %d fields" % (a.file, nx, ny, nz, len(fields)))
    print("group %d scalar flux: mean %.6e, peak %.6e" % (a.group, phi.mean(), phi.max()))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    pos = phi[phi > 0]
    if pos.size == 0:
        p.error("%s: the flux of group %d has no positive value to draw on a log scale" % (a.file, a.group))
    norm = LogNorm(vmin=max(pos.min(), phi.max() * 1e-6), vmax=phi.max())
    k = nz // 2 if a.z is None else a.z
    j = ny // 2 if a.y is None else a.y
    if not (0 <= k < nz and 0 <= j < ny):
        p.error("--z %d, --y %d: the grid has %d and %d cells along z and y" % (k, j, nz, ny))
    x, y, z = pts[..., 0], pts[..., 1], pts[..., 2]
    panels = [("x-y plane z = %.3g (cell %d)" % (z[k, 0, 0], k), x[k], y[k], phi[k], "x", "y")]
    if nz > 1:
        panels.append(("x-z plane y = %.3g (cell %d)" % (y[0, j, 0], j), x[:, j, :], z[:, j, :], phi[:, j, :], "x", "z"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels) + 0.8, 4.2), squeeze=False, constrained_layout=True)
    for ax, (title, X, Y, F, xl, yl) in zip(axes[0], panels):
        im = ax.pcolormesh(X, Y, np.where(F > 0, F, np.nan), shading="nearest", norm=norm, cmap="inferno")
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9, label="scalar flux, group %d" % a.group)
    fig.suptitle("%s: %d x %d x %d cells" % (a.file.split("/")[-1], nx, ny, nz), fontsize=9)
    fig.savefig(a.output, dpi=a.dpi)
    print("figure written to %s" % a.output)


if __name__ == "__main__":
    sys.exit(main())
