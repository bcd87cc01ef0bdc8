#!/usr/bin/env python3
"""The Python package petscfmm (python/petscfmm): its products against sums and
solutions computed here with NumPy, its read-back, and its error paths.

Each check prints "ok <what>"; each bad call prints
    case <name>: <exception type>: <message>
(TypeError/ValueError raised by the package before PETSc is called, or
PETSc.Error with PETSc's code and the last line of its message), and a bad
call that raises nothing, or something else, prints FAILED.  The program
exits with status 1 if anything failed.  MATFMM runs on every rank of
PETSC_COMM_WORLD (sources and targets split between ranks); MATSWEEP on
PETSC_COMM_SELF of each rank, and on two ranks its refusal of a grid split
along x (the sweep across ranks splits y and z only) is a case.
"""

import sys

import petsc4py

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402
import numpy as np  # noqa: E402

import petscfmm  # noqa: E402
from petscfmm import fmm, sweep  # noqa: E402

COMM = PETSc.COMM_WORLD
RANK, SIZE = COMM.getRank(), COMM.getSize()
failed = []


def out(msg):
    PETSc.Sys.Print(msg)


def check(what, cond):
    """cond is this rank's; each rank prints its failures, rank 0 the successes"""
    if not cond:
        failed.append(what)
        PETSc.Sys.syncPrint("FAILED [%d] %s" % (RANK, what))
        PETSc.Sys.syncFlush()
    else:
        out("ok   %s" % what)


def message(e):
    if isinstance(e, PETSc.Error):
        lines = [ln.split("] ", 1)[-1] for ln in str(e).splitlines()[1:]]
        return "error %d: %s" % (e.ierr, lines[-1] if lines else "")
    return str(e)


def case(name, fn, expect):
    try:
        fn()
    except expect as e:
        out("case %s: %s: %s" % (name, type(e).__name__, message(e)))
        return
    except Exception as e:  # noqa: BLE001
        failed.append(name)
        out("case %s: FAILED: unexpected %s: %s" % (name, type(e).__name__, message(e)))
        return
    failed.append(name)
    out("case %s: FAILED: no error" % name)


def split(n, comm=COMM):
    size, rank = comm.getSize(), comm.getRank()
    nl = n // size + (1 if rank < n % size else 0)
    return sum(n // size + (1 if r < n % size else 0) for r in range(rank)), nl


# ---------------------------------------------------------------- MATFMM
N, M = 700, 300
t = 2 * np.pi * np.arange(N) / N
r = 1 + 0.3 * np.cos(5 * t)
xy = np.stack([r * np.cos(t), r * np.sin(t)], 1)
d = np.stack([-1.5 * np.sin(5 * t) * np.cos(t) - r * np.sin(t), -1.5 * np.sin(5 * t) * np.sin(t) + r * np.cos(t)], 1)
sp = np.hypot(d[:, 0], d[:, 1])
nrm = np.stack([d[:, 1], -d[:, 0]], 1) / sp[:, None]
w = 2 * np.pi * sp / N
rng = np.random.default_rng(7)
tgt = rng.uniform(-1.5, 1.5, (M, 2))
dens = rng.uniform(-1, 1, N)
s0, nl = split(N)
t0, ml = split(M)
mine = slice(s0, s0 + nl)


def direct(z, alpha, beta, w=w):
    """(alpha D + beta S) dens at the points z, zero-distance pairs left out."""
    dx, dy = z[:, None, 0] - xy[None, :, 0], z[:, None, 1] - xy[None, :, 1]
    r2 = dx ** 2 + dy ** 2
    zero = r2 == 0
    r2[zero] = 1
    k = beta * (-0.5 * np.log(r2)) + alpha * (nrm[None, :, 0] * dx + nrm[None, :, 1] * dy) / r2
    k[zero] = 0
    return (k * w[None, :] / (2 * np.pi)) @ dens


def relerr(A, ref):
    x, y = A.createVecs()
    x.setArray(dens[mine])
    A.mult(x, y)
    e = y.duplicate()
    e.setArray(y.getArray(readonly=True) - ref)
    rv = y.duplicate()
    rv.setArray(ref)
    return e.norm() / rv.norm()


for kernel, (a, b) in (("single", (0, 1)), ("double", (1, 0)), ("combined", (0.7, -1.3))):
    A = petscfmm.createFMM(xy[mine], nrm[mine], w[mine], kernel=kernel, alpha=a, beta=b, eps=1e-12, device="cpu")
    check("fmm %s layer: relerr <= 1e-10 against the sum" % kernel, relerr(A, direct(xy[mine], a, b)) <= 1e-10)
    A.destroy()
A = petscfmm.createFMM(xy[mine], nrm[mine], w[mine], tgt[t0:t0 + ml], kernel="double", ct=16, layout="indexing",
                       device="cpu")
check("fmm separate targets (%d x %d, ct 16, indexing): relerr <= 1e-9" % (M, N), relerr(A, direct(tgt[t0:t0 + ml], 1, 0)) <= 1e-9)
check("fmm getDevice, getClusteringThreshold, getExpansionOrder: cpu, 16, 30",
      (fmm.getDevice(A), fmm.getClusteringThreshold(A), fmm.getExpansionOrder(A)) == ("cpu", 16, 30))
check("fmm getDistribution: replicated (the indexing layout)", fmm.getDistribution(A) == "replicated")
info = fmm.getTreeInfo(A)
check("fmm getTreeInfo: %d levels, %d = 4^%d leaves" % (info.levels, info.leaves, info.levels), info.leaves == 4 ** info.levels and info.levels == 3)
T = fmm.getTreeLeaves(A)
check("fmm getTreeLeaves: the leaves' sources are all N sources once, their targets this rank's once",
      len(T.source_offsets) == info.leaves + 1 and np.all(np.diff(T.source_offsets) >= 0)
      and np.array_equal(np.sort(T.sources), np.arange(N)) and np.array_equal(np.sort(T.targets), np.arange(ml))
      and T.sources.dtype == PETSc.IntType)
box = fmm.leafBoxes(A, xy, tgt[t0:t0 + ml])
leaf_of = np.repeat(np.arange(info.leaves), np.diff(T.source_offsets))
inside = np.all((xy[T.sources] >= box[leaf_of, :2]) & (xy[T.sources] <= box[leaf_of, 2:]))
check("fmm leafBoxes: each source inside its leaf's box", bool(inside))
A.destroy()

# the tree's parts: each source and target once over the ranks, and renumbered by them the same product
A = petscfmm.createFMM(xy[mine], nrm[mine], w[mine], tgt[t0:t0 + ml], kernel="double", device="cpu", assemble=False)
fmm.setDistribution(A, "tree")
A.assemble()
S, T = fmm.getTreePartition(A)
SA, TA = S.allGather(), T.allGather()
check("fmm getTreePartition: each of the N sources and M targets once",
      np.array_equal(np.sort(SA.getIndices()), np.arange(N)) and np.array_equal(np.sort(TA.getIndices()), np.arange(M)))
SA.destroy()
TA.destroy()
A.destroy()
B = petscfmm.createFMM(xy[S.getIndices()], nrm[S.getIndices()], w[S.getIndices()], tgt[T.getIndices()], kernel="double",
                       device="cpu", assemble=False)
fmm.setDistribution(B, "tree")
B.assemble()
x, y = B.createVecs()
x.setArray(dens[S.getIndices()])
B.mult(x, y)
e, r = y.duplicate(), y.duplicate()
r.setArray(direct(tgt[T.getIndices()], 1, 0))
e.setArray(y.getArray(readonly=True) - r.getArray(readonly=True))
check("fmm renumbered by getTreePartition: relerr <= 1e-9 against the sum", e.norm() <= 1e-9 * r.norm())
for o in (S, T, x, y, e, r, B):
    o.destroy()

# setType('fmm') works once the package is imported, and -mat_type through the options
B = PETSc.Mat().create(comm=COMM)
B.setSizes(((nl, None), (nl, None)))
B.setType("fmm")
fmm.setSources(B, xy[mine][:, ::-1][:, ::-1])  # a strided view: copied
fmm.setKernel(B, 0)
fmm.setTolerance(B, 1e-12)
B.assemble()
check("fmm Mat.setType('fmm'), a strided view of the points, no weights: relerr <= 1e-10",
      relerr(B, direct(xy[mine], 0, 1, np.ones(N))) <= 1e-10)
B.destroy()

A = PETSc.Mat().create(comm=COMM)
A.setSizes(((nl, None), (nl, None)))
A.setType("fmm")
V = PETSc.Vec().createMPI((nl, None), comm=COMM)
case("points_list", lambda: fmm.setSources(A, xy[mine].tolist()), TypeError)
case("points_int", lambda: fmm.setSources(A, np.ones((nl, 2), dtype=np.int64)), TypeError)
case("points_float32", lambda: fmm.setSources(A, xy[mine].astype(np.float32)), TypeError)
case("points_3columns", lambda: fmm.setSources(A, np.ones((nl, 3))), ValueError)
case("points_1d", lambda: fmm.setSources(A, np.ones(2 * nl)), ValueError)
case("normals_shape", lambda: fmm.setSources(A, xy[mine], nrm[mine][:-1]), ValueError)
case("weights_length", lambda: fmm.setSources(A, xy[mine], nrm[mine], np.ones(nl + 1)), ValueError)
bad = xy[mine].copy()
bad[5, 1] = np.nan
case("points_nan", lambda: fmm.setSources(A, bad), ValueError)
case("weights_inf", lambda: fmm.setSources(A, xy[mine], None, np.where(np.arange(nl) == 3, np.inf, 1.0)), ValueError)
case("targets_shape", lambda: fmm.setTargets(A, np.ones(4)), ValueError)
case("kernel_name", lambda: fmm.setKernel(A, "triple"), ValueError)
case("kernel_number", lambda: fmm.setKernel(A, 5), ValueError)
case("kernel_alpha_nan", lambda: fmm.setKernel(A, "combined", np.nan, 1.0), ValueError)
case("layout_name", lambda: fmm.setLayout(A, "tiles"), ValueError)
case("device_name", lambda: fmm.setDevice(A, "gpu"), ValueError)
case("ct_negative", lambda: fmm.setClusteringThreshold(A, -3), PETSc.Error)
case("ct_float", lambda: fmm.setClusteringThreshold(A, 2.5), TypeError)
case("ct_huge", lambda: fmm.setClusteringThreshold(A, 2 ** 70), ValueError)  # beyond 32- and 64-bit PetscInt
case("p_large", lambda: fmm.setExpansionOrder(A, 65), PETSc.Error)
case("eps_above_1", lambda: fmm.setTolerance(A, 2.0), PETSc.Error)
case("not_a_mat", lambda: fmm.setSources(V, xy[mine]), TypeError)
case("sources_size", lambda: fmm.setSources(A, xy[mine][:nl - 1]), PETSc.Error)
case("tree_before_assembly", lambda: fmm.getTreeInfo(A), PETSc.Error)
fmm.setSources(A, xy[mine])
fmm.setKernel(A, "double")
case("double_without_normals", lambda: A.assemble(), PETSc.Error)
fmm.setSources(A, xy[mine], nrm[mine], w[mine])
fmm.setDevice(A, "cpu")
case("distribution_name", lambda: fmm.setDistribution(A, "scattered"), ValueError)
fmm.setDistribution(A, "replicated")  # the whole tree on every rank, for leafBoxes()
A.assemble()
case("leafboxes_points", lambda: fmm.leafBoxes(A, xy[:-1]), ValueError)
x, y = A.createVecs()
x.set(1.0)
A.mult(x, y)  # the circle-like sum of the double layer: about -1/2
check("fmm after the errors: assembled, D 1 = -1/2 + O(w) inside 1e-2",
      abs(y.max()[1] + 0.5) < 1e-2 and abs(y.min()[1] + 0.5) < 1e-2)
aij = PETSc.Mat().createAIJ(((nl, None), (nl, None)), nnz=1, comm=COMM)
aij.assemble()
case("leaves_of_aij", lambda: fmm.getTreeLeaves(aij), PETSc.Error)
case("treeinfo_of_aij", lambda: fmm.getTreeInfo(aij), PETSc.Error)
case("order_of_aij", lambda: fmm.getExpansionOrder(aij), PETSc.Error)
PETSc.Options().setValue("bad_mat_type", "aij")
case("create_type_changed", lambda: petscfmm.createFMM(xy[mine], prefix="bad_"), TypeError)
PETSc.Options().delValue("bad_mat_type")
for o in (x, y, A, aij, V):
    o.destroy()

# ---------------------------------------------------------------- MATSWEEP (one rank each)
SELF = PETSc.COMM_SELF


def grid(n=(4, 5, 3)):
    return PETSc.DMDA().create(list(n), dof=1, stencil_width=1, comm=SELF)


def solve(S, rtol=1e-13):
    b = sweep.computeRHS(S)
    phi = b.duplicate()
    ksp = PETSc.KSP().create(comm=SELF)
    ksp.setOperators(S)
    ksp.setType("gmres")
    ksp.setTolerances(rtol=rtol, max_it=500)
    ksp.solve(b, phi)
    ksp.destroy()
    return b, phi


# the infinite medium (all faces reflective), 2 groups, down- and upscatter: (diag sigma_t - Sigma_s) phi = q
sigt = np.array([[1.0, 1.5]])
sigs = np.array([[[[0.5, 0.2], [0.3, 0.9]]]])  # sigs[0, 0, g, gp] = sigma_s(gp -> g)
q = np.array([1.0, 2.0])
exact = np.linalg.solve(np.diag(sigt[0]) - sigs[0, 0], q)
da = grid()
S = petscfmm.createSweep(da, groups=2, quadrature=("levelsym", 4), materials=(sigt, sigs), boundary="reflective",
                         source=np.tile(q, (60, 1)), device="cpu", setfromoptions=False)
b, phi = solve(S)
F = sweep.getScalarFlux(S, phi)
check("sweep infinite medium, 2 groups: phi = (%.6f, %.6f), to 1e-10 of the 2 x 2 solution" % tuple(exact),
      F.shape == (2, 3, 5, 4) and np.max(np.abs(F - exact[:, None, None, None])) < 1e-10)
z = sweep.getSizes(S)
check("sweep getSizes: 60 cells, 24 directions, 1 moment, nb = %d (x, y, z reflective on both sides)" % z.nb,
      (z.ncells, z.ndir, z.cmom) == (60, 24, 1) and z.nb > 0)
Q = sweep.getQuadrature(S)
check("sweep getQuadrature: S4, 3 directions per octant, unit vectors, 8 sum(w) = 1",
      len(Q.w) == 3 and np.allclose(Q.mu ** 2 + Q.eta ** 2 + Q.xi ** 2, 1, atol=1e-14) and abs(8 * Q.w.sum() - 1) < 1e-14)
check("sweep getGroups, getQuadratureType, getScatteringOrder, getDevice: 2, ('levelsym', 4, 24), (0, 'harmonics'), cpu",
      (sweep.getGroups(S), sweep.getQuadratureType(S), sweep.getScatteringOrder(S), sweep.getDevice(S))
      == (2, ("levelsym", 4, 24), (0, "harmonics"), "cpu"))
st = sweep.getStatistics(S)
check("sweep getStatistics: sweeps counted, grind time > 0", st.nsweeps > 1 and st.grind_ns > 0)
y = sweep.sourceIteration(S, phi)
Ax = phi.duplicate()
S.mult(phi, Ax)
ref = b.copy()
ref.axpy(1.0, phi)
ref.axpy(-1.0, Ax)
ref.axpy(-1.0, y)
check("sweep sourceIteration: y = b + x - A x", ref.norm() <= 1e-12 * y.norm())
with sweep.fluxVector(S, phi) as f:
    fl = f.getArray(readonly=True).copy()
    fsize = f.getSize()
check("sweep fluxVector: the moments alone (%d of the vector's %d entries)" % (fsize, phi.getSize()),
      fsize == 120 and np.allclose(fl.reshape(3, 5, 4, 2)[..., 0], F[0], rtol=0, atol=0))
for o in (b, phi, y, Ax, ref, S):
    o.destroy()

# the same problem with vacuum faces, the source given per cell on the grid, by angle, and sigma_t per cell
da2 = grid((6, 4, 5))
rq = np.random.default_rng(3).uniform(0, 1, (5, 4, 6, 2))
base = dict(groups=2, quadrature=("snap", 3), materials=(sigt, sigs), device="cpu", setfromoptions=False)
S1 = petscfmm.createSweep(da2, source=rq, **base)
S2 = petscfmm.createSweep(da2, source=rq.reshape(120, 2), chunk=2, **base)
S3 = petscfmm.createSweep(da2, angular_source=np.repeat(rq.reshape(120, 1, 2), 24, axis=1), **base)
S4 = petscfmm.createSweep(da2, source=rq, total_cross_section=np.tile(sigt[0], (120, 1)), material_map=np.zeros((5, 4, 6), np.int64), **base)
bs = [sweep.computeRHS(Sk) for Sk in (S1, S2, S3, S4)]
check("sweep sources: grid-shaped = flat (and KBA chunks of 2 x cells = whole lines), bitwise", np.array_equal(bs[0].getArray(), bs[1].getArray()))
check("sweep angular source equal in every direction = the isotropic source (to 1e-14)",
      np.allclose(bs[0].getArray(), bs[2].getArray(), rtol=1e-14, atol=0))
check("sweep per-cell sigma_t and an integer (int64) material map = the table's, bitwise",
      np.array_equal(bs[0].getArray(), bs[3].getArray()))
for o in bs + [S2, S3, S4]:
    o.destroy()

A = PETSc.Mat().create(comm=SELF)
A.setType("sweep")
case("source_before_grid", lambda: sweep.setSource(A, np.ones((120, 1))), RuntimeError)
case("grid_not_dm", lambda: sweep.setDM(A, np.ones(3)), TypeError)
sweep.setDM(A, da2)
sweep.setGroups(A, 2)
case("sigt_shape", lambda: sweep.setMaterials(A, np.ones((1, 3))), ValueError)
case("sigt_list", lambda: sweep.setMaterials(A, [[1.0, 1.0]]), TypeError)
case("sigs_order", lambda: sweep.setMaterials(A, np.ones((1, 2)), np.zeros((1, 2, 2, 2))), ValueError)
case("sigt_negative", lambda: sweep.setMaterials(A, np.array([[1.0, -1.0]])), PETSc.Error)
case("source_nan", lambda: sweep.setSource(A, np.where(np.arange(240).reshape(120, 2) == 7, np.nan, 1.0)), ValueError)
case("source_cells", lambda: sweep.setSource(A, np.ones((119, 2))), ValueError)
case("map_float", lambda: sweep.setMaterialMap(A, np.zeros(120)), TypeError)
case("map_shape", lambda: sweep.setMaterialMap(A, np.zeros((6, 4, 5), np.int32)), ValueError)
case("angular_directions", lambda: sweep.setAngularSource(A, np.ones((120, 8, 2))), ValueError)
case("quadrature_name", lambda: sweep.setQuadrature(A, "gauss", 4), ValueError)
case("levelsym_odd", lambda: sweep.setQuadrature(A, "levelsym", 5), PETSc.Error)
case("boundary_faces", lambda: sweep.setBoundary(A, ["vacuum"] * 5), ValueError)
case("boundary_name", lambda: sweep.setBoundary(A, "mirror"), ValueError)
case("order_too_high", lambda: sweep.setScatteringOrder(A, 8), PETSc.Error)
case("chunk_negative", lambda: sweep.setChunk(A, -1), ValueError)
case("chunk_float", lambda: sweep.setChunk(A, 2.5), TypeError)
sweep.setMaterials(A, np.array([[1.0, 1.0]]), np.array([[[[0.9, 0.3], [0.3, 0.9]]]]))  # scattering ratio 1.2
case("scattering_ratio", lambda: A.assemble(), PETSc.Error)
PETSc.Options().setValue("sw_mat_sweep_groups", "3")
case("options_change_groups", lambda: petscfmm.createSweep(da2, prefix="sw_", **dict(base, setfromoptions=True)), ValueError)
PETSc.Options().delValue("sw_mat_sweep_groups")
A.destroy()
if SIZE > 1:
    dw = PETSc.DMDA().create([4 * SIZE, 4, 4], dof=1, stencil_width=1, proc_sizes=(SIZE, 1, 1), comm=COMM)
    case("grid_split_in_x_on_%d_ranks" % SIZE, lambda: petscfmm.createSweep(dw), PETSc.Error)
    dw.destroy()
b1, phi1 = solve(S1, 1e-10)
check("sweep after the errors: a solve", phi1.norm() > 0)
for o in (b1, phi1, S1, da, da2):
    o.destroy()

out("%s: %d failed" % ("petscfmm module", len(failed)))
if failed:
    sys.exit(1)

"""
/*TEST
  test:
  test:
    suffix: 2
    nsize: 2
TEST*/
"""
