#!/usr/bin/env python3
"""ex1.py: tutorials/ex1.c in Python (petsc4py and petscfmm).

Solves Laplace Dirichlet problems on smooth curves by second-kind boundary
integral equations, with KSP and a MATFMM (or the same Nystrom matrix, dense):
the same problem, options and output as tutorials/ex1.c, whose header derives
the formulation.  In short: the interior problem u = D s, (-I/2 + D) s = f on a
star r(t) = 1 + a cos(k t) (or an ellipse), n Nystrom points of the periodic
trapezoid rule; the exterior problem around K bodies adds one logarithmic
source per body, u = D s + sum_k A_k log(|z - c_k|/R0), A_k = int_k s, with a
preconditioner for the body means.  error = max |u_h - u| / max |u| at
evaluation points away from the curves, u the harmonic function that gave the
data.

  -problem <interior,exterior>  (default interior)   -curve <star,ellipse>  (default star)
  -star_a <a> (0.25)  -star_k <k> (5)  -ellipse_a <a> (1)  -ellipse_b <b> (0.5)
  -bodies <K> (exterior, 1)  -spacing <s> (3 rmax)  -n <n> points per curve (400)
  -tol <tol>    fail unless error <= tol
  -renumber     number each rank's unknowns as its part of the FMM's tree holds them (fmm.getTreePartition()):
                products then move no density between ranks
  -mat_type <fmm,dense>, -mat_fmm_*, -log_mat_fmm_*, -eval_mat_fmm_*, -ksp_*, -pc_*, -log_view
  -plot <file.png>   draw the curve(s), the solution u_h (inside the curve, or around the bodies)
                     and its error on a log colour scale (matplotlib; -plot_grid <g>, default 160)

Run from the repository root after make:
    PYTHONPATH=python python3 tutorials/ex1.py [-problem exterior -bodies 4] [-plot ex1.png]
(python3: an interpreter with Debian's python3-petsc4py, /usr/bin/python3 on Debian.)
Output ends with the line of ex1.c:
    summary: N=<unknowns> type=<mat type> its=<KSP iterations> error=<e> setup_s=<t> solve_s=<t>
"""

import math
import os
import sys
import time

import petsc4py

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402
import numpy as np  # noqa: E402

try:
    from petscfmm import fmm  # noqa: E402 (after petsc4py.init: loads libpetscfmm.so, registers MATFMM)
except ModuleNotFoundError:  # a checkout without PYTHONPATH: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from petscfmm import fmm  # noqa: E402

COMM = PETSc.COMM_WORLD
PROBLEMS = ("interior", "exterior")
CURVES = ("star", "ellipse")


class Problem:
    """The options and the geometry (every rank builds all of it, O(N), so any rank count solves the same problem)."""

    def __init__(self):
        opt = PETSc.Options()
        self.problem = opt.getString("problem", "interior")
        self.curve = opt.getString("curve", "star")
        if self.problem not in PROBLEMS:
            raise ValueError("-problem %s: expected one of %s" % (self.problem, ", ".join(PROBLEMS)))
        if self.curve not in CURVES:
            raise ValueError("-curve %s: expected one of %s" % (self.curve, ", ".join(CURVES)))
        self.star_a = opt.getReal("star_a", 0.25)
        self.star_k = opt.getInt("star_k", 5)
        self.ell_a = opt.getReal("ellipse_a", 1.0)
        self.ell_b = opt.getReal("ellipse_b", 0.5)
        self.K = opt.getInt("bodies", 1)
        self.spacing = opt.getReal("spacing", -1.0)
        self.n = opt.getInt("n", 400)
        if self.n < 8:
            raise ValueError("-n %d must be >= 8" % self.n)
        if self.K < 1:
            raise ValueError("-bodies %d must be >= 1" % self.K)
        if self.problem != "exterior" and self.K != 1:
            raise ValueError("The interior problem is posed on one curve; -bodies %d needs -problem exterior" % self.K)
        if self.curve == "star":
            if abs(self.star_a) >= 1:
                raise ValueError("-star_a %g: need |a| < 1 for a simple curve" % self.star_a)
            if self.star_k < 0:
                raise ValueError("-star_k %d must be >= 0" % self.star_k)
            self.rmin, self.rmax = 1 - abs(self.star_a), 1 + abs(self.star_a)
        else:
            if not (self.ell_a > 0 and self.ell_b > 0):
                raise ValueError("Ellipse semi-axes %g, %g must be > 0" % (self.ell_a, self.ell_b))
            self.rmin, self.rmax = min(self.ell_a, self.ell_b), max(self.ell_a, self.ell_b)
        if self.spacing < 0:
            self.spacing = 3 * self.rmax
        if not self.spacing > 2 * self.rmax:
            raise ValueError("-spacing %g: bodies of radius up to %g would overlap; need spacing > %g"
                             % (self.spacing, self.rmax, 2 * self.rmax))
        self.N = self.K * self.n
        self.geometry()

    def curve_eval(self, t):
        """gamma(t) of one body about its centre, unrotated, and its first two derivatives: three (2, len(t)) arrays."""
        c, s = np.cos(t), np.sin(t)
        if self.curve == "star":
            k, a = float(self.star_k), self.star_a
            r, r1, r2 = 1 + a * np.cos(k * t), -a * k * np.sin(k * t), -a * k * k * np.cos(k * t)
            return (np.array([r * c, r * s]), np.array([r1 * c - r * s, r1 * s + r * c]),
                    np.array([r2 * c - 2 * r1 * s - r * c, r2 * s + 2 * r1 * c - r * s]))
        a, b = self.ell_a, self.ell_b
        return np.array([a * c, b * s]), np.array([-a * s, b * c]), np.array([-a * c, -b * s])

    @staticmethod
    def body_angle(k):
        return 2.399963229728653 * k  # the golden angle: distinct rotations

    def geometry(self):
        K, n = self.K, self.n
        nx = int(math.ceil(math.sqrt(K) - 1e-12))
        ny = (K + nx - 1) // nx
        k = np.arange(K)
        self.ctr = np.stack([((k % nx) - 0.5 * (nx - 1)) * self.spacing, ((k // nx) - 0.5 * (ny - 1)) * self.spacing], 1)
        g, d1, d2 = self.curve_eval(2 * np.pi * np.arange(n) / n)
        sp = np.sqrt(d1[0] ** 2 + d1[1] ** 2)
        xy, nrm = np.empty((self.N, 2)), np.empty((self.N, 2))
        for b in range(K):
            cr, sr = math.cos(self.body_angle(b)), math.sin(self.body_angle(b))
            i = slice(b * n, (b + 1) * n)
            xy[i, 0] = self.ctr[b, 0] + cr * g[0] - sr * g[1]
            xy[i, 1] = self.ctr[b, 1] + sr * g[0] + cr * g[1]
            tx, ty = (cr * d1[0] - sr * d1[1]) / sp, (sr * d1[0] + cr * d1[1]) / sp
            nrm[i, 0], nrm[i, 1] = ty, -tx  # outward for a counterclockwise curve
        self.xy, self.nrm = xy, nrm
        self.kappa = np.tile((d1[0] * d2[1] - d1[1] * d2[0]) / sp ** 3, K)
        self.w = np.tile(2 * np.pi * sp / n, K)
        self.body = np.repeat(np.arange(K), n)  # the body of each node
        # the grid is centred at 0, so all bodies lie in the disc of radius rho about 0
        self.logR0 = 1 + 0.5 * math.log(np.max(xy[:, 0] ** 2 + xy[:, 1] ** 2))
        if self.problem == "interior":
            m = 32
            ge = self.curve_eval(2 * np.pi * (np.arange(m) + 0.5) / m)[0]
            self.exy = np.concatenate([f * ge.T for f in (0.3, 0.6)])  # the curve scaled by 0.3 and 0.6
            phi = 0.4 + 2 * np.pi * np.arange(4) / 4 + 0.3 * np.arange(4) ** 2
            self.qxy = 1.5 * self.rmax * np.stack([np.cos(phi), np.sin(phi)], 1)  # charges outside
            self.q = np.array([1.0, -0.7, 0.45, 0.8])
        else:
            m = 16
            phi = 2 * np.pi * (np.arange(m) + 0.5) / m
            ring = 0.5 * self.spacing * np.stack([np.cos(phi), np.sin(phi)], 1)
            self.exy = np.concatenate([self.ctr[b] + ring for b in range(K)])  # a ring about each centre
            phi = 1.0 + 2.2 * k
            self.qxy = self.ctr + 0.4 * self.rmin * np.stack([np.cos(phi), np.sin(phi)], 1)  # a charge in each body
            self.q = 0.3 + np.cos(1.7 * k + 0.2)
        self.M = len(self.exy)

    def exact(self, z):
        """u(z) = sum_m q_m log(|z - p_m| / R0) at the points z, shape (m, 2)."""
        u = np.zeros(len(z))
        for p, q in zip(self.qxy, self.q):
            u += q * (0.5 * np.log((z[:, 0] - p[0]) ** 2 + (z[:, 1] - p[1]) ** 2) - self.logR0)
        return u

    def inside(self, z):
        """Points of z inside any body (the plot's mask)."""
        ins = np.zeros(len(z), dtype=bool)
        for b in range(self.K):
            cr, sr = math.cos(self.body_angle(b)), math.sin(self.body_angle(b))
            dx, dy = z[:, 0] - self.ctr[b, 0], z[:, 1] - self.ctr[b, 1]
            x, y = cr * dx + sr * dy, -sr * dx + cr * dy  # unrotated
            if self.curve == "star":
                ins |= np.hypot(x, y) < 1 + self.star_a * np.cos(self.star_k * np.arctan2(y, x))
            else:
                ins |= (x / self.ell_a) ** 2 + (y / self.ell_b) ** 2 < 1
        return ins


def split(n):
    """(first global index, local size) of PETSc's PETSC_DECIDE split of n items (PetscSplitOwnership)."""
    size, rank = COMM.getSize(), COMM.getRank()
    nloc = n // size + (1 if rank < n % size else 0)
    return sum(n // size + (1 if r < n % size else 0) for r in range(rank)), nloc


def log_matrix(P, txy, prefix, eps):
    """MATFMM N_t x K: sum_k a_k log|z - c_k| at the targets txy (this rank's): the single layer
    -(1/2pi) log|z - c| w a with weights w = -2 pi (tolerance eps unless <= 0, before the options)."""
    ks, kl = split(P.K)
    return fmm.create(P.ctr[ks:ks + kl].copy(), None, np.full(kl, -2 * np.pi), txy, kernel="single",
                      eps=eps if eps > 0 else None, prefix=prefix)


def body_integrals_matrix(P, rstart, nloc):
    """The K x N matrix of the body integrals a_k = sum over body k of w_j s_j (AIJ: rows split as K is)."""
    ks, kl = split(P.K)
    order = np.argsort(P.body, kind="stable")  # the nodes body by body, each body's in increasing number
    first = np.concatenate(([0], np.cumsum(np.bincount(P.body, minlength=P.K))))
    indptr = (first[ks:ks + kl + 1] - first[ks]).astype(PETSc.IntType)
    cols = order[first[ks]:first[ks + kl]].astype(PETSc.IntType)
    return PETSc.Mat().createAIJ(size=((kl, P.K), (nloc, P.N)), csr=(indptr, cols, P.w[cols].copy()), comm=COMM)


class Exterior:
    """The exterior operator as a Python shell matrix: s -> A s + sum_k log(|x_i - c_k|/R0) (sum_{j in body k} w_j s_j)."""

    def __init__(self, A, L, B, logR0):
        self.A, self.L, self.B, self.logR0 = A, L, B, logR0
        self.a = B.createVecs("left")

    def add_log_term(self, L, s, y):
        """y += sum_k a_k log(|z - c_k|/R0) at the rows of L, a = the body integrals of s."""
        self.B.mult(s, self.a)
        total = self.a.sum()
        L.multAdd(self.a, y, y)
        y.shift(-self.logR0 * total)

    def mult(self, mat, x, y):
        self.A.mult(x, y)
        self.add_log_term(self.L, x, y)


class BodyPC:
    """Right preconditioner of the exterior problem (ex1.c's header): on each body the mean of the density is
    replaced by the solution of a K x K system, P y = y - Pi y + sum_k 1_k g_k, (2 G |Gamma|) g = ybar,
    G_jk = log(|c_j - c_k|/R0), G_kk = the mean over body k of log(|x - c_k|/R0)."""

    def __init__(self, P, B, rstart, nloc):
        K = P.K
        self.B = B
        self.body = P.body[rstart:rstart + nloc]
        d = P.xy - P.ctr[P.body]
        lw = P.w * (0.5 * np.log(d[:, 0] ** 2 + d[:, 1] ** 2) - P.logR0)
        self.len = np.bincount(P.body, weights=P.w, minlength=K)
        dc = P.ctr[:, None, :] - P.ctr[None, :, :]
        with np.errstate(divide="ignore"):
            G = 0.5 * np.log(dc[..., 0] ** 2 + dc[..., 1] ** 2) - P.logR0
        H = 2 * G * self.len[None, :]
        H[np.diag_indices(K)] = 2 * np.bincount(P.body, weights=lw, minlength=K)
        self.H = H
        self.sums = B.createVecs("left")
        self.toall, self.all = PETSc.Scatter.toAll(self.sums)

    def apply(self, pc, x, y):
        self.B.mult(x, self.sums)
        self.toall.scatter(self.sums, self.all, PETSc.InsertMode.INSERT_VALUES, PETSc.ScatterMode.FORWARD)
        mean = self.all.getArray(readonly=True) / self.len
        g = np.linalg.solve(self.H, mean)
        y.setArray(x.getArray(readonly=True) - mean[self.body] + g[self.body])

    def view(self, pc, viewer):
        viewer.printfASCII("  body means: K x K logarithmic system\n")


def assemble_explicit(P, A):
    """The same Nystrom matrix, entry by entry, without its diagonal (added afterwards as for MATFMM)."""
    A.setUp()
    rstart, rend = A.getOwnershipRange()
    x = P.xy[rstart:rend]
    dx = x[:, None, 0] - P.xy[None, :, 0]
    dy = x[:, None, 1] - P.xy[None, :, 1]
    r2 = dx ** 2 + dy ** 2
    diag = (np.arange(rstart, rend)[:, None] == np.arange(P.N)[None, :])
    r2[diag] = 1.0
    vals = (P.nrm[None, :, 0] * dx + P.nrm[None, :, 1] * dy) / r2 * P.w[None, :] / (2 * np.pi)
    vals[diag] = 0.0
    if P.problem == "exterior":
        c = P.ctr[P.body]
        cx, cy = x[:, None, 0] - c[None, :, 0], x[:, None, 1] - c[None, :, 1]
        vals += (0.5 * np.log(cx ** 2 + cy ** 2) - P.logR0) * P.w[None, :]
    A.setValues(np.arange(rstart, rend, dtype=PETSc.IntType), np.arange(P.N, dtype=PETSc.IntType), vals)
    A.assemble()


def reason_name(reason):
    """KSPConvergedReasons[reason] of the C API (petsc4py's names, C's for DIVERGED_ITS)."""
    R = PETSc.KSP.ConvergedReason
    names = {getattr(R, k): k for k in dir(R) if k.startswith(("CONVERGED_", "DIVERGED_"))}
    names[R.DIVERGED_MAX_IT] = "DIVERGED_ITS"
    return names.get(reason, str(reason))


def plot(P, s, ext, file, title):
    """The curve(s), u_h on a grid (inside the curve, or around the bodies) and its error on a log scale."""
    g = PETSc.Options().getInt("plot_grid", 160)
    if P.problem == "interior":
        lo, hi = -P.rmax * np.ones(2), P.rmax * np.ones(2)
    else:
        lo, hi = P.ctr.min(axis=0) - 0.6 * P.spacing, P.ctr.max(axis=0) + 0.6 * P.spacing
    X, Y = np.meshgrid(np.linspace(lo[0], hi[0], g), np.linspace(lo[1], hi[1], g))
    Z = np.stack([X.ravel(), Y.ravel()], 1)
    keep = P.inside(Z) if P.problem == "interior" else ~P.inside(Z)
    Zk = Z[keep]
    zs, zl = split(len(Zk))
    rstart, nloc = P.rstart, P.nloc
    E = fmm.create(P.xy[rstart:rstart + nloc], P.nrm[rstart:rstart + nloc], P.w[rstart:rstart + nloc],
                   Zk[zs:zs + zl].copy(), kernel="double", eps=1e-13, prefix="plot_")
    u = E.createVecs("left")
    E.mult(s, u)
    if P.problem == "exterior":
        Lp = log_matrix(P, Zk[zs:zs + zl].copy(), "plot_", 1e-13)
        ext.add_log_term(Lp, s, u)
        Lp.destroy()
    E.destroy()
    sc, u0 = PETSc.Scatter.toZero(u)
    sc.scatter(u, u0, PETSc.InsertMode.INSERT_VALUES, PETSc.ScatterMode.FORWARD)
    if COMM.getRank() == 0:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm
        uh = np.full(len(Z), np.nan)
        uh[keep] = u0.getArray(readonly=True)
        ue = P.exact(Z)
        err = np.full(len(Z), np.nan)
        err[keep] = np.maximum(np.abs(uh[keep] - ue[keep]) / np.max(np.abs(ue[keep])), 1e-17)
        fig, ax = plt.subplots(1, 2, figsize=(10, 4.3), constrained_layout=True)
        # the colours span the exact solution's values: next to the curve the trapezoid rule fails
        # (nearly singular integrands), which the error panel shows
        im = ax[0].pcolormesh(X, Y, uh.reshape(X.shape), shading="auto", cmap="viridis", rasterized=True,
                              vmin=ue[keep].min(), vmax=ue[keep].max())
        fig.colorbar(im, ax=ax[0], shrink=0.9, label="u_h")
        im = ax[1].pcolormesh(X, Y, err.reshape(X.shape), shading="auto", cmap="magma",
                              norm=LogNorm(vmin=max(np.nanmin(err), 1e-16), vmax=np.nanmax(err)), rasterized=True)
        fig.colorbar(im, ax=ax[1], shrink=0.9, label="|u_h - u| / max |u|")
        for a, t in zip(ax, ("solution u_h = D s" + (" + log terms" if P.problem == "exterior" else ""),
                             "error (log scale)")):
            for b in range(P.K):
                c = P.xy[b * P.n:(b + 1) * P.n]
                a.plot(np.append(c[:, 0], c[0, 0]), np.append(c[:, 1], c[0, 1]), "w-" if a is ax[1] else "k-", lw=1)
            a.plot(P.exy[:, 0], P.exy[:, 1], "r.", ms=2)
            a.set_aspect("equal")
            a.set_title(t, fontsize=10)
        fig.suptitle(title, fontsize=9)
        fig.savefig(file, dpi=90)
        plt.close(fig)
    sc.destroy()
    u0.destroy()
    u.destroy()
    PETSc.Sys.Print("figure written to %s" % file)


def create_operator(P):
    """The operator -+1/2 I + D on this rank's nodes [P.rstart, P.rstart + P.nloc): a MATFMM, or the dense
    Nystrom matrix with -mat_type dense (MATFMM before the options, so that -mat_type can override it; the
    setters do nothing then).  Returns (A, its type)."""
    loc = slice(P.rstart, P.rstart + P.nloc)
    A = PETSc.Mat().create(comm=COMM)
    A.setSizes(((P.nloc, P.N), (P.nloc, P.N)))
    A.setType("fmm")
    fmm.setSources(A, P.xy[loc], P.nrm[loc], P.w[loc])
    fmm.setKernel(A, "double")
    A.setFromOptions()
    mtype = A.getType()
    if mtype == "fmm":
        A.assemble()  # builds the tree
    elif "dense" in mtype:
        assemble_explicit(P, A)
    else:
        raise ValueError("-mat_type %s: this tutorial makes fmm or dense matrices" % mtype)
    # the Nystrom diagonal: -+1/2 from the jump relation and the kernel's limit -kappa w/(4 pi)
    A.shift(-0.5 if P.problem == "interior" else 0.5)
    d = A.createVecs("right")
    d.setArray(-P.kappa[loc] * P.w[loc] / (4 * np.pi))
    A.setDiagonal(d, addv=PETSc.InsertMode.ADD_VALUES)
    d.destroy()
    return A, mtype


def renumber_nodes(P, A):
    """-renumber: the nodes numbered anew so that each rank's unknowns are those its part of A's tree holds
    (fmm.getTreePartition(), in the tree's order): every rank's set, gathered in rank order, gives the old
    number of each new one, and each rank's unknowns are again one range.  The same problem; a product then
    moves no density or potential between ranks.  (Every rank holds all nodes here; a program whose nodes
    are distributed would move them with a PetscSF.)"""
    src, tgt = fmm.getTreePartition(A)
    every = src.allGather()  # every rank's set, in rank order
    old = every.getIndices().copy()
    P.nloc = src.getLocalSize()
    v = PETSc.Vec().createMPI((P.nloc, P.N), comm=COMM)  # its ownership range: this rank's new numbers
    P.rstart = v.getOwnershipRange()[0]
    for name in ("xy", "nrm", "w", "kappa", "body"):
        setattr(P, name, getattr(P, name)[old].copy())
    for o in (v, every, src, tgt):
        o.destroy()


def main():
    opt = PETSc.Options()
    if opt.hasName("help"):
        PETSc.Sys.Print(__doc__)
    tol = opt.getReal("tol", -1.0)
    plotfile = opt.getString("plot", "")
    renumber = opt.getBool("renumber", False)
    stages = [PETSc.Log.Stage(s) for s in ("ex1 setup", "ex1 solve", "ex1 evaluate")]
    P = Problem()
    P.rstart, P.nloc = split(P.N)
    estart, mloc = split(P.M)

    stages[0].push()
    t0 = time.perf_counter()
    A, mtype = create_operator(P)
    if renumber and mtype == "fmm":  # the same operator, on the nodes numbered as the tree holds them
        renumber_nodes(P, A)
        A.destroy()
        A, mtype = create_operator(P)
    isfmm = mtype == "fmm"
    rstart, nloc = P.rstart, P.nloc
    loc = slice(rstart, rstart + nloc)

    # exterior: the body integrals and logarithms (a dense A holds them already; with MATFMM a shell adds them)
    Op, ext, B = A, None, None
    if P.problem == "exterior":
        B = body_integrals_matrix(P, rstart, nloc)
        eps = opt.getReal("mat_fmm_eps", -1.0)  # as accurate as the operator's MATFMM
        ext = Exterior(A, log_matrix(P, P.xy[loc], "log_", eps) if isfmm else None, B, P.logR0)
        if isfmm:
            Op = PETSc.Mat().createPython(((nloc, P.N), (nloc, P.N)), ext, comm=COMM)
            Op.setUp()

    # the right-hand side: the exact solution on the boundary
    s, f = A.createVecs()
    f.setArray(P.exact(P.xy[loc]))

    ksp = PETSc.KSP().create(comm=COMM)
    ksp.setOperators(Op, Op)
    ksp.setType("gmres")
    ksp.setGMRESRestart(100)
    pc = ksp.getPC()
    if P.problem == "exterior":
        pc.setType("python")
        pc.setPythonContext(BodyPC(P, B, rstart, nloc))
        ksp.setPCSide(PETSc.PC.Side.RIGHT)  # the residual stays the true one, and s = P y is the Nystrom solution
    else:
        pc.setType("none")
    ksp.setTolerances(rtol=1e-10, max_it=1000)
    ksp.setFromOptions()
    ksp.setUp()
    t1 = time.perf_counter()
    stages[0].pop()

    stages[1].push()
    ksp.solve(f, s)
    t2 = time.perf_counter()
    stages[1].pop()
    its, reason = ksp.getIterationNumber(), ksp.getConvergedReason()

    # u_h = D s (+ the logarithms) at the evaluation points, by MATFMMs with targets != sources
    stages[2].push()
    E = fmm.create(P.xy[loc], P.nrm[loc], P.w[loc], P.exy[estart:estart + mloc], kernel="double", eps=1e-13,
                   prefix="eval_")  # 1e-13: the evaluation does not limit the measured error
    ue = E.createVecs("left")
    E.mult(s, ue)
    if P.problem == "exterior":
        Le = log_matrix(P, P.exy[estart:estart + mloc].copy(), "eval_", 1e-13)
        ext.add_log_term(Le, s, ue)
        Le.destroy()
    u = P.exact(P.exy[estart:estart + mloc])
    dv = ue.duplicate()
    dv.setArray(ue.getArray(readonly=True) - u)
    uv = ue.duplicate()
    uv.setArray(u)
    err = dv.norm(PETSc.NormType.INFINITY) / uv.norm(PETSc.NormType.INFINITY)
    stages[2].pop()

    PETSc.Sys.Print("%s Dirichlet problem: %d %s curve%s, %d points each, %d evaluation points"
                    % (P.problem, P.K, P.curve, "s" if P.K > 1 else "", P.n, P.M))
    PETSc.Sys.Print("KSP %s: %s" % ("converged" if reason > 0 else "did not converge", reason_name(reason)))
    summary = "summary: N=%d type=%s its=%d error=%.3e setup_s=%.4f solve_s=%.4f" % (P.N, mtype, its, err, t1 - t0, t2 - t1)
    PETSc.Sys.Print(summary)
    if tol > 0:
        if not (reason > 0 and err <= tol):
            raise RuntimeError("error %g exceeds -tol %g (KSP %s)" % (err, tol, reason_name(reason)))
        PETSc.Sys.Print("check: error <= %g" % tol)
    if plotfile:
        plot(P, s, ext, plotfile, "ex1.py: %s problem, %s, N=%d, %d GMRES iterations, error %.2e at the red points"
             % (P.problem, P.curve, P.N, its, err))

    # destroy what holds Python contexts (the PC, the shell matrix) while Python runs: left to PetscFinalize()
    # (petsc4py defers the destruction of collected objects to it), their contexts would be called too late
    for o in (ksp, pc, f, s, ue, dv, uv, E, Op, A, B) + ((ext.L, ext.a) if ext else ()):
        if o is not None and o.handle:
            o.destroy()


if __name__ == "__main__":
    main()

"""
/*TEST
  test:
    suffix: interior
    args: -n 400 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_interior.out
  test:
    suffix: dense
    args: -n 400 -mat_type dense -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_dense.out
  test:
    suffix: mpi
    nsize: 2
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_mpi.out
  test:
    suffix: exterior
    nsize: 2
    args: -problem exterior -bodies 16 -n 128 -mat_fmm_eps 1e-12 -ksp_rtol 1.7e-9 -tol 1e-8
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_exterior.out
  test:
    suffix: mpi_renumber
    nsize: 3
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10 -renumber -mat_fmm_distribution tree
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_mpi_3.out
  test:
    suffix: exterior_renumber
    nsize: 2
    args: -problem exterior -bodies 16 -n 128 -mat_fmm_eps 1e-12 -ksp_rtol 1.7e-9 -tol 1e-8 -renumber -mat_fmm_distribution tree -mat_fmm_device cpu
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_exterior.out
  test:
    suffix: exterior_dense
    args: -problem exterior -bodies 4 -n 100 -mat_type dense -ksp_rtol 4.5e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_exterior_dense.out
  test:
    suffix: circle
    args: -problem exterior -curve ellipse -ellipse_a 1 -ellipse_b 1 -n 128 -ksp_rtol 1e-12 -tol 1e-12
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_circle.out
  test:
    suffix: plot
    requires: matplotlib
    args: -problem exterior -bodies 4 -n 200 -plot tests/results/ex1_py_plot.png -plot_grid 60
    filter: sed -e 's/ error=.*$//'
TEST*/
"""
