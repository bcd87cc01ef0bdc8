"""MATSWEEP from Python: steady multigroup discrete-ordinates transport on a
3D (or 2D x-y) DMDA grid, as a petsc4py ``Mat`` whose ``mult()`` is one
transport sweep (SNAP's), so that GMRES on it is Krylov-accelerated source
iteration::

    A phi = phi - D L^-1 M S phi,     b = D L^-1 q  (computeRHS)

Each function takes the ``Mat`` first and mirrors the C function of the same
name with the ``MatSweep`` prefix dropped (manual pages in ``src/sweep/api.c``
and ``src/sweep/mat.c``).

Units: cross sections per unit length, the domain's lengths in the same unit;
the quadrature weights sum to 1 over the sphere, so moment 0 is the scalar
flux, and q is the source per unit volume and unit quadrature weight (an
infinite medium of one group has phi = q/(sigma_t - sigma_s)).

Arrays are NumPy ``float64`` (integers for the material map; strided views are copied),
finite.  Per-cell arrays are given either flat, cells first (the grid's order,
x fastest: cell (k ny + j) nx + i), or shaped like the grid, (nz, ny, nx, ...)
in 3D and (ny, nx, ...) in 2D, with the per-cell axes last.  Set the grid,
groups, scattering order and quadrature before the tables, whose shapes depend
on them.  Errors: ``TypeError``/``ValueError`` before any C call (array types,
shapes, NaN/Inf), ``petsc4py.PETSc.Error`` with PETSc's message for what the
library refuses (negative cross sections, a scattering ratio above 1 at
assembly, a grid split along x over several ranks, ...).
"""

import collections
import contextlib
import ctypes

import numpy as np

from . import _arrays as _a
from . import _lib

__all__ = ["create", "setDM", "getDM", "setDomain", "setQuadrature", "getQuadratureType", "setGroups", "getGroups",
           "setScatteringOrder", "getScatteringOrder", "setMaterials", "setMaterialMap", "setTotalCrossSection",
           "setSource", "setAngularSource", "setBoundary", "setScheme", "setLayout", "setDevice", "setChunk", "getDevice",
           "getQuadrature", "getSizes", "getStatistics", "computeRHS", "sourceIteration", "fluxVector",
           "getFluxArray", "getScalarFlux", "QUADRATURES", "SCHEMES", "BOUNDARIES", "EXPANSIONS", "LAYOUTS",
           "DEVICES"]

#: names of the C enums, in their order
QUADRATURES = ("snap", "levelsym")
SCHEMES = ("dd", "step")
BOUNDARIES = ("vacuum", "reflective")
EXPANSIONS = ("harmonics", "snap")
LAYOUTS = ("DGZ", "DZG", "GDZ", "GZD", "ZDG", "ZGD")
DEVICES = ("auto", "cpu", "cuda")

Quadrature = collections.namedtuple("Quadrature", "mu eta xi w")
Quadrature.__doc__ = """Octant 0 of the quadrature (MatSweepGetQuadrature): nang positive direction cosines
mu, eta, xi and weights w (the 8 nang weights sum to 1); octant o has the signs (-1)^(o&1),
(-1)^((o>>1)&1), (-1)^((o>>2)&1).  Direction d = o nang + a."""
Sizes = collections.namedtuple("Sizes", "ncells ndir cmom nb")
Sizes.__doc__ = """Sizes of an assembled MATSWEEP (MatSweepGetSizes): local cells, directions (all octants),
flux moments per cell and group ((L+1)^2), carried boundary unknowns (0 unless both faces of an axis reflect)."""
Statistics = collections.namedtuple("Statistics", "nsweeps grind_ns device_ns")
Statistics.__doc__ = """Sweeps so far, and the last sweep's grind time (wall time over cells x directions x
groups, ns) and that of its GPU kernels alone (0 on the CPU): MatSweepGetStatistics."""

_GRID = "petscfmm_sweep_grid"  # the user's DMDA, composed with the matrix by setDM()
_WRAP = "petscfmm_sweep_wrap"


def _mat(A):
    _lib.lib()
    PETSc = _lib._petsc()
    if not isinstance(A, PETSc.Mat):
        raise TypeError("expected a petsc4py PETSc.Mat, got %s" % type(A).__name__)
    return _lib.handle(A)


def _vec(x, name="x"):
    PETSc = _lib._petsc()
    if not isinstance(x, PETSc.Vec):
        raise TypeError("%s must be a petsc4py PETSc.Vec, got %s" % (name, type(x).__name__))
    return _lib.handle(x)


def _call(name, *args):
    _lib.check(getattr(_lib.lib(), name)(*args))


def _wrap(A, h):
    """A petsc4py object for the C handle h (a reference of its own): composed with A and queried back."""
    _call("PetscObjectCompose", _lib.handle(A), _WRAP.encode(), h)
    try:
        return A.query(_WRAP)
    finally:
        _call("PetscObjectCompose", _lib.handle(A), _WRAP.encode(), None)


def _grid(A, fn):
    """The local grid shape, (zm, ym, xm) or (ym, xm), of the DMDA given to setDM()."""
    da = A.query(_GRID)
    if da is None:
        raise RuntimeError("petscfmm.sweep.%s(): set the grid first (petscfmm.sweep.create(da) or setDM(A, da)): "
                           "the array's length depends on it" % fn)
    return tuple(reversed(da.getCorners()[1]))


def _percell(name, a, grid, tail, fn):
    """a, flat (ncells,) + tail or grid + tail, as a flat C-contiguous float64 array."""
    nc = int(np.prod(grid))
    if isinstance(a, np.ndarray) and a.shape == tuple(grid) + tuple(tail):
        a = _a.reals(name, a, tuple(grid) + tuple(tail))
    else:
        try:
            a = _a.reals(name, a, (nc,) + tuple(tail))
        except ValueError as e:
            if "shape" not in str(e):
                raise
            raise ValueError("%s must have shape %s (cells first) or %s (the grid's, z y x), got %s"
                             % (name, (nc,) + tuple(tail), tuple(grid) + tuple(tail), a.shape)) from None
    return a


def setDM(A, da):
    """Set the grid: a DMDA with one point per cell, 3D (nx x ny x nz cells) or 2D (an x-y problem): MatSweepSetDM().

    Raises ``TypeError`` if da is not a PETSc.DM; ``PETSc.Error`` if it is not
    a DMDA of dimension 2 or 3 (and at assembly if it splits x over several
    ranks: the sweep across ranks splits y and z only)."""
    h = _mat(A)
    PETSc = _lib._petsc()
    if not isinstance(da, PETSc.DM):
        raise TypeError("da must be a petsc4py PETSc.DM (a DMDA), got %s" % type(da).__name__)
    _call("MatSweepSetDM", h, _lib.handle(da))
    A.compose(_GRID, da)


def getDM(A):
    """The DMDA of the flux moments of the assembled A (ng (L+1)^2 dof per cell, named phi_g<g>_m<m>): MatSweepGetDM()."""
    h = _mat(A)
    p = ctypes.c_void_p()
    _call("MatSweepGetDM", h, ctypes.byref(p))
    return _wrap(A, p)


def setDomain(A, lx, ly, lz=1.0):
    """The lengths of the box the grid covers (default 1 x 1 x 1; lz unused in 2D): MatSweepSetDomain().

    Raises ``ValueError`` if not finite, ``PETSc.Error`` if not positive."""
    _call("MatSweepSetDomain", _mat(A), _a.real("lx", lx), _a.real("ly", ly), _a.real("lz", lz))


def setQuadrature(A, kind, n):
    """The angular quadrature: MatSweepSetQuadrature().

    Parameters
    ----------
    kind : str
        ``'snap'`` (SNAP's: n = nang directions per octant, 1 to 512) or
        ``'levelsym'`` (level-symmetric S_N: n = N, even, 2 to 16; N(N+2)/8 directions per octant).
    n : int

    Raises ``PETSc.Error`` for n out of range."""
    h = _mat(A)
    _call("MatSweepSetQuadrature", h, _a.enum("quadrature", kind, QUADRATURES), _a.integer("n", n, _lib.IntType))


def getQuadratureType(A):
    """(kind, n, ndir) as set: ``'snap'`` or ``'levelsym'``, nang or N, and the directions of all octants."""
    h = _mat(A)
    q, n, nd = _lib.Enum(), _lib.PetscInt(), _lib.PetscInt()
    _call("MatSweepGetQuadratureType", h, ctypes.byref(q), ctypes.byref(n), ctypes.byref(nd))
    return QUADRATURES[q.value], n.value, nd.value


def setGroups(A, ng):
    """The number of energy groups, >= 1 (default 1): MatSweepSetGroups()."""
    _call("MatSweepSetGroups", _mat(A), _a.integer("ng", ng, _lib.IntType))


def getGroups(A):
    """The number of energy groups: int (MatSweepGetGroups())."""
    h = _mat(A)
    v = _lib.PetscInt()
    _call("MatSweepGetGroups", h, ctypes.byref(v))
    return v.value


def setScatteringOrder(A, L, expansion="harmonics"):
    """The Legendre order L of the scattering, 0 to 7 (SNAP's nmom = L + 1), and the
    angular functions of the moments, ``'harmonics'`` (default) or ``'snap'``: MatSweepSetScatteringOrder()."""
    h = _mat(A)
    _call("MatSweepSetScatteringOrder", h, _a.integer("L", L, _lib.IntType), _a.enum("expansion", expansion, EXPANSIONS))


def getScatteringOrder(A):
    """(L, expansion): the Legendre order and ``'harmonics'`` or ``'snap'`` (MatSweepGetScatteringOrder())."""
    h = _mat(A)
    L, e = _lib.PetscInt(), _lib.Enum()
    _call("MatSweepGetScatteringOrder", h, ctypes.byref(L), ctypes.byref(e))
    return L.value, EXPANSIONS[e.value]


def setMaterials(A, sigt, sigs=None):
    """The material table: MatSweepSetMaterials().

    Parameters
    ----------
    sigt : ndarray, float64, shape (nmat, ng)
        total cross section sigma_t of each material and group (per unit length, >= 0).
    sigs : ndarray, float64, shape (nmat, L+1, ng, ng), optional
        ``sigs[m, l, g, gp]`` = sigma_s,l(gp -> g), the Legendre moment l of
        scattering from group gp into group g (shape (nmat, ng, ng) also
        accepted when L = 0); default: no scattering.

    Set the groups and the scattering order first; cells take material 0
    unless ``setMaterialMap()`` says otherwise.

    Raises
    ------
    TypeError, ValueError
        array types, shapes that disagree with the matrix's groups and order, NaN/Inf.
    PETSc.Error
        a negative sigma_t or sigma_s,0; at assembly, a scattering ratio above 1.
    """
    h = _mat(A)
    ng = getGroups(A)
    L, _ = getScatteringOrder(A)
    if not isinstance(sigt, np.ndarray) or sigt.ndim != 2:
        _a.reals("sigt", sigt, (None, ng))  # the message for non-arrays and wrong dimensions
    nmat = sigt.shape[0]
    if nmat < 1:
        raise ValueError("sigt must have at least one material (row), got shape %s" % (sigt.shape,))
    sigt = _a.reals("sigt", sigt, (nmat, ng))
    if sigs is not None:
        if L == 0 and isinstance(sigs, np.ndarray) and sigs.ndim == 3:
            sigs = _a.reals("sigs", sigs, (nmat, ng, ng))
        else:
            sigs = _a.reals("sigs", sigs, (nmat, L + 1, ng, ng))
    _call("MatSweepSetMaterials", h, nmat, _a.ptr(sigt), _a.ptr(sigs))


def setMaterialMap(A, mat):
    """The material of each local cell, an integer array of shape (ncells,) or the grid's; None: all material 0 (MatSweepSetMaterialMap()).

    Raises ``PETSc.Error`` at assembly for a material outside the table."""
    h = _mat(A)
    if mat is None:
        _call("MatSweepSetMaterialMap", h, None)
        return
    grid = _grid(A, "setMaterialMap")
    nc = int(np.prod(grid))
    shape = tuple(grid) if isinstance(mat, np.ndarray) and mat.shape == tuple(grid) else (nc,)
    m = _a.ints("mat", mat, shape, _lib.IntType)
    _call("MatSweepSetMaterialMap", h, _a.ptr(m))


def setTotalCrossSection(A, sigt):
    """sigma_t per local cell and group, shape (ncells, ng) or grid + (ng,), instead of the
    material table's; None: from the materials (MatSweepSetTotalCrossSection()).  Raises
    ``PETSc.Error`` for a negative entry."""
    h = _mat(A)
    if sigt is None:
        _call("MatSweepSetTotalCrossSection", h, None)
        return
    sigt = _percell("sigt", sigt, _grid(A, "setTotalCrossSection"), (getGroups(A),), "setTotalCrossSection")
    _call("MatSweepSetTotalCrossSection", h, _a.ptr(sigt))


def setSource(A, q):
    """The isotropic fixed source q per local cell and group, shape (ncells, ng) or grid + (ng,);
    None: none (MatSweepSetSource()).  Only ``computeRHS()`` uses it."""
    h = _mat(A)
    if q is None:
        _call("MatSweepSetSource", h, None)
        return
    q = _percell("q", q, _grid(A, "setSource"), (getGroups(A),), "setSource")
    _call("MatSweepSetSource", h, _a.ptr(q))


def setAngularSource(A, q):
    """A fixed source per local cell, direction and group, shape (ncells, ndir, ng) or grid + (ndir, ng),
    direction d = octant nang + a (see ``getQuadrature()``); added to ``setSource()``'s in ``computeRHS()``.
    Set the quadrature first (MatSweepSetAngularSource())."""
    h = _mat(A)
    if q is None:
        _call("MatSweepSetAngularSource", h, None)
        return
    ndir = getQuadratureType(A)[2]
    q = _percell("q", q, _grid(A, "setAngularSource"), (ndir, getGroups(A)), "setAngularSource")
    _call("MatSweepSetAngularSource", h, _a.ptr(q))


def setBoundary(A, bc):
    """The boundary conditions of the faces x = 0, x = lx, y = 0, y = ly, z = 0, z = lz:
    one name for all (``'vacuum'`` or ``'reflective'``) or a sequence of six (MatSweepSetBoundary())."""
    h = _mat(A)
    if isinstance(bc, str):
        bc = [bc] * 6
    bc = list(bc)
    if len(bc) != 6:
        raise ValueError("bc must name 6 faces (x-, x+, y-, y+, z-, z+), got %d" % len(bc))
    arr = (_lib.Enum * 6)(*[_a.enum("boundary", b, BOUNDARIES) for b in bc])
    _call("MatSweepSetBoundary", h, ctypes.cast(arr, ctypes.c_void_p))


def setScheme(A, scheme, fixup=False):
    """The spatial scheme, ``'dd'`` (diamond difference) or ``'step'``, and SNAP's negative-flux fixup of DD (MatSweepSetScheme())."""
    h = _mat(A)
    _call("MatSweepSetScheme", h, _a.enum("scheme", scheme, SCHEMES), 1 if fixup else 0)


def setLayout(A, layout):
    """The memory layout of the sweep's angular arrays (Kripke's names, e.g. ``'GZD'``): MatSweepSetLayout()."""
    h = _mat(A)
    _call("MatSweepSetLayout", h, _a.enum("layout", layout, LAYOUTS))


def setDevice(A, device):
    """Where to sweep: ``'auto'``, ``'cpu'`` or ``'cuda'`` (MatSweepSetDevice())."""
    h = _mat(A)
    _call("MatSweepSetDevice", h, _a.enum("device", device, DEVICES))


def setChunk(A, chunk):
    """x cells the KBA sweep carries in one message between ranks, >= 1, or 0 for the default
    (4 on the CPU, a quarter of the line on the GPU): MatSweepSetChunk().  Raises ``TypeError``
    for a non-integer and ``ValueError`` below 0."""
    h = _mat(A)
    _call("MatSweepSetChunk", h, _a.integer("chunk", chunk, _lib.IntType, lo=0))


def getDevice(A):
    """After assembly the device in use (``'cpu'`` or ``'cuda'``), before it the one requested (MatSweepGetDevice())."""
    h = _mat(A)
    v = _lib.Enum()
    _call("MatSweepGetDevice", h, ctypes.byref(v))
    return DEVICES[v.value]


def getQuadrature(A):
    """The directions and weights of octant 0 of the assembled A: Quadrature(mu, eta, xi, w), arrays of nang (MatSweepGetQuadrature())."""
    h = _mat(A)
    n = _lib.PetscInt()
    pR = ctypes.POINTER(_lib.PetscReal)
    mu, eta, xi, w = pR(), pR(), pR(), pR()
    _call("MatSweepGetQuadrature", h, ctypes.byref(n), ctypes.byref(mu), ctypes.byref(eta), ctypes.byref(xi), ctypes.byref(w))
    return Quadrature(*[_a.as_array(p, n.value, np.float64) for p in (mu, eta, xi, w)])


def getSizes(A):
    """Sizes(ncells, ndir, cmom, nb) of the assembled A (MatSweepGetSizes())."""
    h = _mat(A)
    v = [_lib.PetscInt() for _ in range(4)]
    _call("MatSweepGetSizes", h, *[ctypes.byref(x) for x in v])
    return Sizes(*[x.value for x in v])


def getStatistics(A):
    """Statistics(nsweeps, grind_ns, device_ns) (MatSweepGetStatistics())."""
    h = _mat(A)
    n, g, d = _lib.PetscInt(), _lib.PetscReal(), _lib.PetscReal()
    _call("MatSweepGetStatistics", h, ctypes.byref(n), ctypes.byref(g), ctypes.byref(d))
    return Statistics(n.value, g.value, d.value)


def computeRHS(A, b=None):
    """b = D L^-1 q: one sweep of the fixed sources from zero flux (MatSweepComputeRHS()).

    Parameters
    ----------
    b : PETSc.Vec, optional
        a vector of A's layout; default: a new one (``A.createVecs('left')``).

    Returns
    -------
    PETSc.Vec
        b.
    """
    h = _mat(A)
    if b is None:
        b = A.createVecs("left")
    _call("MatSweepComputeRHS", h, _vec(b, "b"))
    return b


def sourceIteration(A, x, y=None):
    """One step of source iteration, y = D L^-1 (M S x + q) (MatSweepSourceIteration()); returns y (new if not given)."""
    h = _mat(A)
    if y is None:
        y = x.duplicate()
    _call("MatSweepSourceIteration", h, _vec(x), _vec(y, "y"))
    return y


@contextlib.contextmanager
def fluxVector(A, x):
    """The flux moments of x as a vector of the moments' DMDA (for VTK output), as a context manager::

        with petscfmm.sweep.fluxVector(A, phi) as f:
            viewer = PETSc.Viewer().createVTK("flux.vts", "w"); f.view(viewer); viewer.destroy()

    MatSweepGetFluxVector()/MatSweepRestoreFluxVector(): x itself where A
    carries no boundary unknowns, else a read-only copy of its moments."""
    h = _mat(A)
    xv = _vec(x)
    out = ctypes.c_void_p()
    _call("MatSweepGetFluxVector", h, xv, ctypes.byref(out))
    try:
        f = _wrap(A, out)
        try:
            yield f
        finally:
            f.destroy()
    finally:
        _call("MatSweepRestoreFluxVector", h, xv, ctypes.byref(out))


def getFluxArray(A, x):
    """The flux moments of x as a NumPy array (a copy) of shape (nz, ny, nx, ng, cmom) in 3D,
    (ny, nx, ng, cmom) in 2D: ``[..., g, 0]`` is the scalar flux of group g."""
    ng = getGroups(A)
    cmom = getSizes(A).cmom
    dm = getDM(A)
    try:
        grid = tuple(reversed(dm.getCorners()[1]))
    finally:
        dm.destroy()
    with fluxVector(A, x) as f:
        a = f.getArray(readonly=True).copy()
    return a.reshape(grid + (ng, cmom))


def getScalarFlux(A, x):
    """The scalar flux of x per group: a NumPy array of shape (ng, nz, ny, nx) in 3D, (ng, ny, nx) in 2D."""
    a = getFluxArray(A, x)
    return np.ascontiguousarray(np.moveaxis(a[..., 0], -1, 0))


def create(da, *, groups=None, scattering_order=None, expansion="harmonics", quadrature=None, domain=None,
           materials=None, material_map=None, total_cross_section=None, source=None, angular_source=None,
           boundary=None, scheme=None, fixup=False, layout=None, device=None, chunk=None, prefix=None,
           setfromoptions=True, assemble=True):
    """Create a MATSWEEP on the grid da and set its data: MatCreateSweep() and the setters.

    Parameters
    ----------
    da : PETSc.DMDA
        3D (or 2D) with one point per cell; on several ranks split in y and z only.
    groups : int, optional
        energy groups (default 1).
    scattering_order : int, optional
        Legendre order L (default 0), with ``expansion`` (``'harmonics'`` or ``'snap'``).
    quadrature : (str, int), optional
        ``('snap', nang)`` or ``('levelsym', N)`` (default SNAP's, nang 4).
    domain : (lx, ly, lz), optional
        the box (default 1 x 1 x 1).
    materials : (sigt, sigs), optional
        see ``setMaterials()``; default one material, sigma_t = 1, no scattering.
    material_map, total_cross_section, source, angular_source : arrays, optional
        see ``setMaterialMap()``, ``setTotalCrossSection()``, ``setSource()``, ``setAngularSource()``.
    boundary : str or six str, optional
        see ``setBoundary()`` (default vacuum).
    scheme, fixup, layout, device, chunk : optional
        see ``setScheme()``, ``setLayout()``, ``setDevice()``, ``setChunk()``.
    prefix : str, optional
        options prefix.
    setfromoptions : bool
        apply the options database (``-mat_sweep_*``) after the sizes and
        before the tables, as tutorials/ex3.c does (default True): options
        that change the groups or the order then make the tables' shapes
        disagree, a ``ValueError``.
    assemble : bool
        assemble (set up the quadrature, sizes, tables) before returning (default True).

    Returns
    -------
    PETSc.Mat
        the MATSWEEP.
    """
    PETSc = _lib._petsc()
    _lib.lib()
    if not isinstance(da, PETSc.DM):
        raise TypeError("da must be a petsc4py PETSc.DM (a DMDA), got %s" % type(da).__name__)
    A = PETSc.Mat().create(comm=da.getComm())
    try:
        if prefix:
            A.setOptionsPrefix(prefix)
        A.setType("sweep")
        setDM(A, da)
        if domain is not None:
            setDomain(A, *domain)
        if quadrature is not None:
            setQuadrature(A, *quadrature)
        if groups is not None:
            setGroups(A, groups)
        if scattering_order is not None:
            setScatteringOrder(A, scattering_order, expansion)
        if scheme is not None or fixup:
            setScheme(A, scheme or "dd", fixup)
        if boundary is not None:
            setBoundary(A, boundary)
        if layout is not None:
            setLayout(A, layout)
        if device is not None:
            setDevice(A, device)
        if chunk is not None:
            setChunk(A, chunk)
        if setfromoptions:
            A.setFromOptions()
        if materials is not None:
            setMaterials(A, *materials)
        if material_map is not None:
            setMaterialMap(A, material_map)
        if total_cross_section is not None:
            setTotalCrossSection(A, total_cross_section)
        if source is not None:
            setSource(A, source)
        if angular_source is not None:
            setAngularSource(A, angular_source)
        if assemble:
            A.assemble()
    except BaseException:
        A.destroy()
        raise
    return A
