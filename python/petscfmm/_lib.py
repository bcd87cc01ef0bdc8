"""Loading libpetscfmm.so into a petsc4py process, and the C prototypes.

The library is loaded with RTLD_GLOBAL after petsc4py has initialised PETSc,
so that it binds to the libpetsc that petsc4py already loaded; load() checks
that it did (PetscInitializeCalled, seen through libpetscfmm's own
dependencies, is true only in the libpetsc that petsc4py initialised).
"""

import ctypes
import ctypes.util
import os

_state = {"lib": None, "path": None}

# the C types of PETSc's scalars in this process: set by load() from petsc4py
PetscInt = None  # ctypes
IntType = None  # numpy
PetscReal = ctypes.c_double
PetscCount = ctypes.c_ssize_t  # ptrdiff_t
PetscBool = ctypes.c_int  # an enum
Enum = ctypes.c_int
Ptr = ctypes.c_void_p


def _candidates(path):
    """Where libpetscfmm.so may be, in the order tried."""
    if path:
        return [path]
    found = []
    env = os.environ.get("PETSCFMM_LIB")
    if env:
        found.append(env)
    try:  # written by make install: the installed library
        from . import _config  # noqa: F401 (absent in a source tree)
        found.append(_config.LIBRARY)
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    found.append(os.path.normpath(os.path.join(here, "..", "..", "lib", "libpetscfmm.so")))  # a built checkout: python/petscfmm -> lib/
    name = ctypes.util.find_library("petscfmm")
    if name:
        found.append(name)
    return found


def _petsc():
    """petsc4py's PETSc module: importing it initialises PETSc (with petsc4py.init()'s arguments if called)."""
    try:
        from petsc4py import PETSc
    except ImportError as e:
        raise ImportError("petscfmm needs petsc4py (Debian: apt-get install python3-petsc4py; "
                          "pip: pip install petsc4py) built for the PETSc that libpetscfmm.so was built with") from e
    return PETSc


def load(path=None):
    """Load libpetscfmm.so into this process and register MATFMM and MATSWEEP.

    Called by every function of the package on first use; call it yourself
    to choose the library or to fail early.  Initialises PETSc through
    petsc4py if that has not happened yet (call ``petsc4py.init(sys.argv)``
    before, so that PETSc sees the command line).

    Parameters
    ----------
    path : str, optional
        the library; default: ``$PETSCFMM_LIB``, the library ``make install``
        installed with this package, ``lib/libpetscfmm.so`` of the checkout
        this package is in, then the system's library search path.

    Returns
    -------
    ctypes.CDLL
        the library (its functions are the C API of ``include/petscfmm.h``).

    Raises
    ------
    ImportError
        no petsc4py; no library found; or the library is bound to another
        libpetsc than petsc4py's (built against another PETSc), or PETSc
        was built with scalars or reals other than real double precision.
    """
    global PetscInt, IntType
    if _state["lib"] is not None:
        if path and os.path.realpath(path) != os.path.realpath(_state["path"]):
            raise ImportError("petscfmm: %s is already loaded; cannot load %s as well" % (_state["path"], path))
        return _state["lib"]
    PETSc = _petsc()
    import numpy as np
    if np.dtype(PETSc.ScalarType) != np.float64 or np.dtype(PETSc.RealType) != np.float64:
        raise ImportError("petscfmm needs a PETSc with real double-precision scalars; this petsc4py has ScalarType %s, RealType %s"
                          % (np.dtype(PETSc.ScalarType), np.dtype(PETSc.RealType)))
    isize = np.dtype(PETSc.IntType).itemsize
    PetscInt = {4: ctypes.c_int32, 8: ctypes.c_int64}[isize]
    IntType = np.dtype(PETSc.IntType)
    errors = []
    lib = None
    for cand in _candidates(path):
        if os.sep in cand and not os.path.exists(cand):
            errors.append("%s: no such file" % cand)
            continue
        try:
            lib = ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
            break
        except OSError as e:
            errors.append(str(e))
    if lib is None:
        raise ImportError("petscfmm: cannot load libpetscfmm.so (build it with make, or set PETSCFMM_LIB):\n  " + "\n  ".join(errors))
    # the same libpetsc as petsc4py's: the one whose PetscInitialize() ran
    if not ctypes.c_int.in_dll(lib, "PetscInitializeCalled").value:
        raise ImportError("petscfmm: %s is linked to a libpetsc other than petsc4py's (petsc4py %s, PETSc %s); "
                          "build petscfmm against the PETSc of this petsc4py (PETSC_DIR=%s)"
                          % (cand, _petsc4py_version(), "%d.%d.%d" % PETSc.Sys.getVersion(), _petsc4py_dir()))
    _prototypes(lib)
    _check_enums(lib, cand)
    _state["lib"], _state["path"] = lib, cand
    check(lib.PetscFMMInitializePackage())
    return lib


def _petsc4py_version():
    import petsc4py
    return getattr(petsc4py, "__version__", "?")


def _petsc4py_dir():
    import petsc4py
    try:
        return petsc4py.get_config()["PETSC_DIR"]
    except Exception:
        return "?"


def lib():
    """The loaded library (loads it on first use)."""
    return _state["lib"] if _state["lib"] is not None else load()


def path():
    """The path of the loaded library, or None."""
    return _state["path"]


def check(ierr):
    """Raise petsc4py's PETSc.Error for a nonzero PetscErrorCode.

    petsc4py's error handler has recorded PETSc's traceback and message, so
    the exception reads as those of petsc4py's own calls."""
    if ierr:
        raise _petsc().Error(ierr)


def handle(obj):
    """The C handle of a petsc4py object, as a void pointer."""
    h = getattr(obj, "handle", None)
    if not isinstance(h, int) or h == 0:
        raise TypeError("expected a created petsc4py object (Mat, DM, Vec), got %r" % (obj,))
    return ctypes.c_void_p(h)


def names(symbol, L=None):
    """An enum's names from the C array (e.g. MatFMMKernels): ["single", "double", ...]."""
    arr = ctypes.cast(ctypes.addressof(ctypes.c_char_p.in_dll(L or lib(), symbol)), ctypes.POINTER(ctypes.c_char_p))
    out = []
    while True:  # the names, then the enum's type name, its prefix, NULL
        s = arr[len(out)]
        if s is None:
            break
        out.append(s.decode())
    return out[:-2]


def _check_enums(L, where):
    """The enums' names of the modules against the library's (a package and a library of different versions)."""
    from . import fmm, sweep
    for mod, attr, symbol in ((fmm, "KERNELS", "MatFMMKernels"), (fmm, "LAYOUTS", "MatFMMLayouts"), (fmm, "METHODS", "MatFMMMethods"),
                              (fmm, "DEVICES", "MatFMMDevices"), (sweep, "QUADRATURES", "MatSweepQuadratures"),
                              (sweep, "SCHEMES", "MatSweepSchemes"), (sweep, "BOUNDARIES", "MatSweepBoundaries"),
                              (sweep, "EXPANSIONS", "MatSweepExpansions"), (sweep, "LAYOUTS", "MatSweepLayouts"),
                              (sweep, "DEVICES", "MatSweepDevices")):
        c = tuple(names(symbol, L))
        if c != getattr(mod, attr):
            raise ImportError("petscfmm: %s.%s = %s but %s has %s = %s: the package and the library are of different versions"
                              % (mod.__name__, attr, getattr(mod, attr), where, symbol, c))


def _prototypes(L):
    P, I, R, E, B = Ptr, PetscInt, PetscReal, Enum, PetscBool
    pI, pR, pE, pP = ctypes.POINTER(I), ctypes.POINTER(R), ctypes.POINTER(E), ctypes.POINTER(P)
    ppI, ppR = ctypes.POINTER(ctypes.POINTER(I)), ctypes.POINTER(ctypes.POINTER(R))
    protos = {
        "PetscFMMInitializePackage": [],
        "MatFMMSetSources": [P, I, P, P, P],
        "MatFMMSetTargets": [P, I, P],
        "MatFMMSetKernel": [P, E, R, R],
        "MatFMMSetClusteringThreshold": [P, I],
        "MatFMMSetExpansionOrder": [P, I],
        "MatFMMSetTolerance": [P, R],
        "MatFMMSetTheta": [P, R],
        "MatFMMSetLayout": [P, E],
        "MatFMMSetMethod": [P, E],
        "MatFMMSetDevice": [P, E],
        "MatFMMGetExpansionOrder": [P, pI],
        "MatFMMGetClusteringThreshold": [P, pI],
        "MatFMMGetTreeInfo": [P, pI, pI, pI, ctypes.POINTER(PetscCount)],
        "MatFMMGetTreeLeaves": [P, pI, ppI, ppI, ppI, ppI],
        "MatFMMGetTreePartition": [P, pP, pP],
        "ISGetLocalSize": [P, pI],
        "ISGetIndices": [P, ppI],
        "ISRestoreIndices": [P, ppI],
        "ISDestroy": [pP],
        "MatFMMGetDevice": [P, pE],
        "MatFMMGetDistribution": [P, pE],
        "PetscFMMCUDAGetDeviceCount": [pI],
        "PetscFMMCUDAInitialize": [],
        "MatSweepSetDM": [P, P],
        "MatSweepGetDM": [P, pP],
        "MatSweepSetDomain": [P, R, R, R],
        "MatSweepSetQuadrature": [P, E, I],
        "MatSweepGetQuadratureType": [P, pE, pI, pI],
        "MatSweepSetGroups": [P, I],
        "MatSweepGetGroups": [P, pI],
        "MatSweepSetScatteringOrder": [P, I, E],
        "MatSweepGetScatteringOrder": [P, pI, pE],
        "MatSweepSetMaterials": [P, I, P, P],
        "MatSweepSetMaterialMap": [P, P],
        "MatSweepSetTotalCrossSection": [P, P],
        "MatSweepSetSource": [P, P],
        "MatSweepSetAngularSource": [P, P],
        "MatSweepSetBoundary": [P, P],
        "MatSweepSetScheme": [P, E, B],
        "MatSweepSetLayout": [P, E],
        "MatSweepSetDevice": [P, E],
        "MatSweepGetDevice": [P, pE],
        "MatSweepGetQuadrature": [P, pI, ppR, ppR, ppR, ppR],
        "MatSweepGetSizes": [P, pI, pI, pI, pI],
        "MatSweepComputeRHS": [P, P],
        "MatSweepSourceIteration": [P, P, P],
        "MatSweepGetFluxVector": [P, P, pP],
        "MatSweepRestoreFluxVector": [P, P, pP],
        "MatSweepGetStatistics": [P, pI, pR, pR],
        "PetscObjectCompose": [P, ctypes.c_char_p, P],
    }
    for name, args in protos.items():
        f = getattr(L, name)
        f.argtypes = args
        f.restype = ctypes.c_int
