"""MATFMM from Python: the 2D Laplace single and double layer potentials as a
petsc4py ``Mat`` whose ``mult()`` is a fast multipole method.

With sources y_j (unit normals n_j, weights w_j) and targets z_i (the sources
themselves unless targets are given; pairs at zero distance are left out)::

    single layer  (S s)_i = -(1/2pi) sum_j log|z_i - y_j| w_j s_j
    double layer  (D s)_i =  (1/2pi) sum_j n_j.(z_i - y_j)/|z_i - y_j|^2 w_j s_j
    combined      alpha D + beta S

Each function takes the ``Mat`` first and mirrors the C function of the same
name with the ``MatFMM`` prefix dropped (``setSources`` is
``MatFMMSetSources()``; its manual page is in ``src/fmm/api.c``).  Arrays are
NumPy ``float64`` (a strided view is copied first), finite, in the units of your geometry; the
library copies them.  Errors: ``TypeError`` (not an ndarray, wrong dtype) and
``ValueError`` (shape, NaN/Inf, values out of range) before any C call;
``petsc4py.PETSc.Error`` with PETSc's message for what PETSc refuses
(sizes that disagree with the matrix's, assembly problems, ...).

A setter on a matrix whose type is not ``fmm`` does nothing, as in C (so that
``-mat_type dense`` can replace the type); getters raise ``PETSc.Error``.
"""

import collections
import ctypes

import numpy as np

from . import _arrays as _a
from . import _lib

__all__ = ["create", "setSources", "setTargets", "setKernel", "setClusteringThreshold", "setExpansionOrder",
           "setTolerance", "setTheta", "setLayout", "setMethod", "setDevice", "setDistribution", "getExpansionOrder",
           "getClusteringThreshold", "getDevice", "getDistribution", "getTreeInfo", "getTreeLeaves", "getTreePartition", "leafBoxes",
           "cudaDeviceCount", "cudaInitialize", "KERNELS", "LAYOUTS", "METHODS", "DEVICES", "DISTRIBUTIONS"]

#: names of the kernels, layouts, methods and devices, as the C enums number them
KERNELS = ("single", "double", "combined")
LAYOUTS = ("tiled", "indexing", "repetition")
METHODS = ("fmm", "direct")
DEVICES = ("auto", "cpu", "cuda")
DISTRIBUTIONS = ("auto", "replicated", "tree")

TreeInfo = collections.namedtuple("TreeInfo", "levels leaves m2l p2p")
TreeInfo.__doc__ = """Statistics of an assembled MATFMM's tree (MatFMMGetTreeInfo): levels L below the
root, leaves (4^L leaf boxes), m2l (M2L translations of one product on this rank), p2p (near-field
target-source pairs on this rank)."""
TreeLeaves = collections.namedtuple("TreeLeaves", "source_offsets sources target_offsets targets")
TreeLeaves.__doc__ = """The leaves of a MATFMM's tree (MatFMMGetTreeLeaves): leaf b holds the sources
sources[source_offsets[b]:source_offsets[b+1]] (global source indices, the columns) and this rank's
targets targets[target_offsets[b]:target_offsets[b+1]] (local target indices, this rank's rows).
Offsets have 4^L + 1 entries; leaves may be empty."""


def _mat(A):
    _lib.lib()
    PETSc = _lib._petsc()
    if not isinstance(A, PETSc.Mat):
        raise TypeError("expected a petsc4py PETSc.Mat, got %s" % type(A).__name__)
    return _lib.handle(A)


def _call(name, *args):
    _lib.check(getattr(_lib.lib(), name)(*args))


def setSources(A, points, normals=None, weights=None):
    """Set this rank's sources (the columns of A): MatFMMSetSources().

    Parameters
    ----------
    A : PETSc.Mat
        of type ``fmm`` (``A.setType('fmm')``); its local column size, if set, must be n.
    points : ndarray, float64, shape (n, 2)
        this rank's source coordinates (x, y); n may be 0.
    normals : ndarray, float64, shape (n, 2), optional
        unit normals (outward for a closed curve); required by the double layer.
    weights : ndarray, float64, shape (n,), optional
        quadrature weights w_j (arc length of the trapezoid rule, ...); default 1 (particles).

    Raises
    ------
    TypeError, ValueError
        not float64 arrays, shapes that disagree, NaN or Inf.
    PETSc.Error
        n differs from the local column size already set (PETSC_ERR_ARG_SIZ).

    Notes
    -----
    The arrays are copied.  Source j of the matrix (global column j) is the
    j-th source in rank order.  Calling it again replaces the geometry: assemble
    again (``A.assemble()``) before the next product.
    """
    h = _mat(A)
    points = _a.reals("points", points, (None, 2))
    n = points.shape[0]
    normals = _a.reals("normals", normals, (n, 2), optional=True)
    weights = _a.reals("weights", weights, (n,), optional=True)
    _call("MatFMMSetSources", h, n, _a.ptr(points), _a.ptr(normals), _a.ptr(weights))


def setTargets(A, targets):
    """Set this rank's targets (the rows of A), where the potential is evaluated: MatFMMSetTargets().

    Parameters
    ----------
    targets : ndarray, float64, shape (m, 2), or None
        the coordinates; None makes the targets the sources (the default: the
        square operator of an integral equation, self term excluded).

    Raises
    ------
    TypeError, ValueError
        not a float64 (m, 2) array, NaN or Inf.
    PETSc.Error
        m differs from the local row size already set.
    """
    h = _mat(A)
    if targets is None:
        _call("MatFMMSetTargets", h, -1, None)  # PETSC_DETERMINE: the sources
        return
    targets = _a.reals("targets", targets, (None, 2))
    _call("MatFMMSetTargets", h, targets.shape[0], _a.ptr(targets))


def setKernel(A, kernel, alpha=0.0, beta=0.0):
    """Choose the layer potential: MatFMMSetKernel().

    Parameters
    ----------
    kernel : str or int
        ``'single'`` (S), ``'double'`` (D) or ``'combined'`` (alpha D + beta S).
    alpha, beta : float
        the weights of the combined kernel (ignored by the others).

    Raises
    ------
    ValueError
        an unknown kernel, alpha or beta not finite.
    """
    h = _mat(A)
    k = _a.enum("kernel", kernel, KERNELS)
    _call("MatFMMSetKernel", h, k, _a.real("alpha", alpha), _a.real("beta", beta))


def setClusteringThreshold(A, ct):
    """Points per leaf box, 1 <= ct <= 2^20 (MatFMMSetClusteringThreshold(); default 32 on the CPU, 96 on the GPU).

    Raises ``PETSc.Error`` (PETSC_ERR_ARG_OUTOFRANGE) outside that range."""
    _call("MatFMMSetClusteringThreshold", _mat(A), _a.integer("ct", ct, _lib.IntType))


def setExpansionOrder(A, p):
    """The expansion order p, 1 <= p <= 64, overriding the one chosen from the tolerance (MatFMMSetExpansionOrder()).

    Raises ``PETSc.Error`` outside that range."""
    _call("MatFMMSetExpansionOrder", _mat(A), _a.integer("p", p, _lib.IntType))


def setTolerance(A, eps):
    """The requested relative accuracy, 0 < eps < 1 (default 1e-10), which chooses
    p = ceil(log(eps/0.1)/log(theta)) (MatFMMSetTolerance()).

    Raises ``ValueError`` if not finite, ``PETSc.Error`` outside (0, 1)."""
    _call("MatFMMSetTolerance", _mat(A), _a.real("eps", eps))


def setTheta(A, theta):
    """The separation parameter of the theta-criterion, 0 < theta < 1 (default 0.5): MatFMMSetTheta()."""
    _call("MatFMMSetTheta", _mat(A), _a.real("theta", theta))


def setLayout(A, layout):
    """The near-field data layout: ``'tiled'`` (default), ``'indexing'`` or ``'repetition'`` (MatFMMSetLayout())."""
    _call("MatFMMSetLayout", _mat(A), _a.enum("layout", layout, LAYOUTS))


def setMethod(A, method):
    """``'fmm'`` (default) or ``'direct'``: exact O(NM) summation of the same operator (MatFMMSetMethod())."""
    _call("MatFMMSetMethod", _mat(A), _a.enum("method", method, METHODS))


def setDevice(A, device):
    """Where to compute: ``'auto'`` (CUDA where built with it and a GPU is present), ``'cpu'`` or ``'cuda'``
    (MatFMMSetDevice(); ``'cuda'`` without a GPU fails at assembly with ``PETSc.Error``)."""
    _call("MatFMMSetDevice", _mat(A), _a.enum("device", device, DEVICES))


def setDistribution(A, dist):
    """On several ranks: ``'auto'`` (default: the tree where it applies), ``'replicated'`` (every rank
    holds all sources) or ``'tree'`` (each rank holds its part of the tree and a halo):
    MatFMMSetDistribution().  getTreeLeaves() and leafBoxes() need the whole tree: ``'replicated'``."""
    _call("MatFMMSetDistribution", _mat(A), _a.enum("distribution", dist, DISTRIBUTIONS))


def getExpansionOrder(A):
    """The expansion order p in use (after assembly, the one chosen from the tolerance): int."""
    v = _lib.PetscInt()
    _call("MatFMMGetExpansionOrder", _mat(A), ctypes.byref(v))
    return v.value


def getClusteringThreshold(A):
    """The clustering threshold (the one set, else the default of the device; after assembly the device in use): int."""
    v = _lib.PetscInt()
    _call("MatFMMGetClusteringThreshold", _mat(A), ctypes.byref(v))
    return v.value


def getDevice(A):
    """The device: after assembly the one in use (``'cpu'`` or ``'cuda'``), before it the one requested: str."""
    v = _lib.Enum()
    _call("MatFMMGetDevice", _mat(A), ctypes.byref(v))
    return DEVICES[v.value]


def getDistribution(A):
    """Across ranks: after assembly the way in use (``'tree'`` or ``'replicated'``, also on one rank), before it the
    one requested: str (MatFMMGetDistribution())."""
    v = _lib.Enum()
    _call("MatFMMGetDistribution", _mat(A), ctypes.byref(v))
    return DISTRIBUTIONS[v.value]


def getTreeInfo(A):
    """Statistics of the tree of the assembled A (MatFMMGetTreeInfo()).

    Returns
    -------
    TreeInfo
        (levels, leaves, m2l, p2p): levels below the root, 4^levels leaf boxes,
        M2L translations and near-field pairs of one product on this rank.

    Raises ``PETSc.Error`` (PETSC_ERR_ARG_WRONGSTATE) if A is not assembled."""
    L, nl, m2l = _lib.PetscInt(), _lib.PetscInt(), _lib.PetscInt()
    p2p = _lib.PetscCount()
    _call("MatFMMGetTreeInfo", _mat(A), ctypes.byref(L), ctypes.byref(nl), ctypes.byref(m2l), ctypes.byref(p2p))
    return TreeInfo(L.value, nl.value, m2l.value, p2p.value)


def getTreeLeaves(A):
    """The sources and this rank's targets of each leaf box of the assembled A (MatFMMGetTreeLeaves()).

    Returns
    -------
    TreeLeaves
        (source_offsets, sources, target_offsets, targets), NumPy copies of
        PETSc's integer type: leaf b holds the global sources
        ``sources[source_offsets[b]:source_offsets[b+1]]`` and this rank's
        local targets ``targets[target_offsets[b]:target_offsets[b+1]]``.

    Raises
    ------
    PETSc.Error
        A is not assembled (PETSC_ERR_ARG_WRONGSTATE), or its tree was built
        on the GPU (PETSC_ERR_SUP: assemble with ``-mat_fmm_cuda_tree cpu``,
        the same tree, or ``-mat_fmm_device cpu``).
    """
    from petsc4py import PETSc
    h = _mat(A)
    nl = _lib.PetscInt()
    pI = ctypes.POINTER(_lib.PetscInt)
    so, s, to, t = pI(), pI(), pI(), pI()
    _call("MatFMMGetTreeLeaves", h, ctypes.byref(nl), ctypes.byref(so), ctypes.byref(s), ctypes.byref(to), ctypes.byref(t))
    n = nl.value
    soff = _a.as_array(so, n + 1, PETSc.IntType)
    toff = _a.as_array(to, n + 1, PETSc.IntType)
    return TreeLeaves(soff, _a.as_array(s, int(soff[-1]), PETSc.IntType), toff, _a.as_array(t, int(toff[-1]), PETSc.IntType))


def getTreePartition(A):
    """The sources and targets this rank's part of the distributed tree holds (MatFMMGetTreePartition()).

    Returns
    -------
    (sources, targets) : two PETSc.IS on A's communicator
        the global indices (in the numbering of the caller's layout) of the
        sources (columns) and targets (rows) this rank's part holds, in the
        tree's order; renumbered by them (each rank then holding its sets'
        points), a new matrix moves no density between ranks. With the
        replicated sources, this rank's ownership ranges. The caller
        destroys them.

    Raises
    ------
    PETSc.Error
        A is not assembled (PETSC_ERR_ARG_WRONGSTATE).
    """
    from petsc4py import PETSc
    h = _mat(A)
    sets = [_lib.Ptr(), _lib.Ptr()]
    _call("MatFMMGetTreePartition", h, ctypes.byref(sets[0]), ctypes.byref(sets[1]))
    out = []
    try:
        for s in sets:
            n, idx = _lib.PetscInt(), ctypes.POINTER(_lib.PetscInt)()
            _call("ISGetLocalSize", s, ctypes.byref(n))
            _call("ISGetIndices", s, ctypes.byref(idx))
            arr = _a.as_array(idx, n.value, PETSc.IntType)
            _call("ISRestoreIndices", s, ctypes.byref(idx))
            out.append(PETSc.IS().createGeneral(arr, comm=A.getComm()))
    finally:
        for s in sets:
            _call("ISDestroy", ctypes.byref(s))
    return tuple(out)


def _boxes(off, xy):
    """[xmin, ymin, xmax, ymax] of the points xy (in leaf order) of each leaf; NaN for empty leaves."""
    nl = len(off) - 1
    out = np.full((nl, 4), np.nan)
    cnt = np.diff(off)
    full = cnt > 0
    if full.any():
        starts = off[:-1][full]
        out[full, 0] = np.minimum.reduceat(xy[:, 0], starts)
        out[full, 1] = np.minimum.reduceat(xy[:, 1], starts)
        out[full, 2] = np.maximum.reduceat(xy[:, 0], starts)
        out[full, 3] = np.maximum.reduceat(xy[:, 1], starts)
    return out


def leafBoxes(A, points, targets=None):
    """The leaf boxes of the assembled A: the bounding box of each leaf's points.

    Parameters
    ----------
    points : ndarray, float64, shape (N, 2)
        all N sources (of every rank, in global order): the tree holds them all.
    targets : ndarray, float64, shape (m, 2), optional
        this rank's targets, where A has targets of its own.

    Returns
    -------
    ndarray, float64, shape (4^L, 4)
        [xmin, ymin, xmax, ymax] of each leaf (NaN for an empty leaf).  With
        separate targets on several ranks, the other ranks' targets are not
        included (the tree's own boxes include them).

    Raises as ``getTreeLeaves()``; ``ValueError`` if points is not the N sources.
    """
    T = getTreeLeaves(A)
    N = len(T.sources)
    points = _a.reals("points", points, (N, 2))
    box = _boxes(T.source_offsets, points[T.sources])
    if targets is not None:
        targets = _a.reals("targets", targets, (len(T.targets), 2))
        tb = _boxes(T.target_offsets, targets[T.targets])
        box = np.concatenate([np.fmin(box[:, :2], tb[:, :2]), np.fmax(box[:, 2:], tb[:, 2:])], axis=1)
    return box


def create(points, normals=None, weights=None, targets=None, *, kernel=None, alpha=0.0, beta=0.0, eps=None, p=None,
           ct=None, theta=None, layout=None, method=None, device=None, comm=None, prefix=None, setfromoptions=True,
           assemble=True):
    """Create a MATFMM on this rank's sources (and targets): MatCreateFMM() and the setters.

    Parameters
    ----------
    points, normals, weights : see ``setSources()``
        this rank's n sources: (n, 2), (n, 2) or None, (n,) or None; n gives the local column size.
    targets : ndarray, float64, shape (m, 2), optional
        this rank's m targets (local row size m); default: the sources (a square matrix).
    kernel, alpha, beta : see ``setKernel()`` (default: the single layer).
    eps, p, ct, theta, layout, method, device : optional
        as ``setTolerance()``, ``setExpansionOrder()``, ... (default: the library's).
    comm : petsc4py Comm, optional
        default PETSc.COMM_WORLD.
    prefix : str, optional
        options prefix (``'eval_'`` reads ``-eval_mat_fmm_eps`` ...).
    setfromoptions : bool
        apply the options database after the arguments (so that ``-mat_fmm_*``
        overrides them, as the C tutorials do); default True.
    assemble : bool
        assemble (build the tree) before returning; default True.

    Returns
    -------
    PETSc.Mat
        an m x n (locally) MATFMM, ready for ``mult()`` and KSP when assembled.

    Raises
    ------
    TypeError, ValueError
        bad arrays or arguments; the options database changed the type (``-mat_type``).
    PETSc.Error
        what PETSc refuses (e.g. no normals for the double layer, at assembly).
    """
    from petsc4py import PETSc
    _lib.lib()  # loads the library: registers the type
    points = _a.reals("points", points, (None, 2))
    n = points.shape[0]
    m = n if targets is None else _a.reals("targets", targets, (None, 2)).shape[0]
    A = PETSc.Mat().create(comm=comm if comm is not None else PETSc.COMM_WORLD)
    try:
        A.setSizes(((m, PETSc.DETERMINE), (n, PETSc.DETERMINE)))
        if prefix:
            A.setOptionsPrefix(prefix)
        A.setType("fmm")
        setSources(A, points, normals, weights)
        if targets is not None:
            setTargets(A, targets)
        if kernel is not None:
            setKernel(A, kernel, alpha, beta)
        for val, fn in ((eps, setTolerance), (p, setExpansionOrder), (ct, setClusteringThreshold), (theta, setTheta),
                        (layout, setLayout), (method, setMethod), (device, setDevice)):
            if val is not None:
                fn(A, val)
        if setfromoptions:
            A.setFromOptions()
            if A.getType() != "fmm":
                raise TypeError("petscfmm.fmm.create(): the options database made the matrix of type %r (-%smat_type); "
                                "create() makes MATFMMs (pass prefix= or setfromoptions=False)" % (A.getType(), prefix or ""))
        if assemble:
            A.assemble()
    except BaseException:
        A.destroy()
        raise
    return A


def cudaDeviceCount():
    """The number of CUDA GPUs this process can use (0 without a CUDA build or GPU): PetscFMMCUDAGetDeviceCount()."""
    v = _lib.PetscInt()
    _call("PetscFMMCUDAGetDeviceCount", ctypes.byref(v))
    return v.value


def cudaInitialize():
    """Pay the GPU's once-per-process costs now (context, kernel loading): PetscFMMCUDAInitialize(). Does nothing without a GPU."""
    _call("PetscFMMCUDAInitialize")
