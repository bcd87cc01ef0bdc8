"""petscfmm for petsc4py: the MATFMM and MATSWEEP matrix types from Python.

Usage (the library is found next to this package in a built checkout, where
``make install`` put it, or at ``$PETSCFMM_LIB``)::

    import sys, petsc4py
    petsc4py.init(sys.argv)             # PETSc sees the command line (-mat_fmm_eps, -ksp_type, ...)
    from petsc4py import PETSc
    import petscfmm

    A = petscfmm.createFMM(xy, normals=nrm, weights=w, kernel="double")  # a PETSc.Mat of type "fmm", assembled
    A.shift(-0.5)                        # e.g. the -1/2 of an interior Dirichlet problem
    ksp = PETSc.KSP().create(); ksp.setOperators(A); ksp.solve(b, x)

Importing petscfmm after ``petsc4py.PETSc`` loads the library and registers the
types (``Mat.setType('fmm')``, ``-mat_type sweep`` then work); imported before,
it waits for its first call (or ``petscfmm.load()``), so that ``petsc4py.init(sys.argv)``
can still give PETSc the command line.

The submodules ``petscfmm.fmm`` and ``petscfmm.sweep`` hold the setters and
getters of each type (``petscfmm.fmm.setSources(A, ...)`` is
``MatFMMSetSources()``); ``createFMM`` and ``createSweep`` are their
``create`` functions.  Loading the library registers the types, so
``Mat.setType('fmm')`` and ``-mat_type sweep`` work too.

Errors: ``TypeError``/``ValueError`` for arrays of the wrong type, shape or
with NaN/Inf, found before PETSc is called; ``petsc4py.PETSc.Error`` (with
PETSc's message, as petsc4py's own calls raise) for what PETSc refuses.
See docs/python.md.
"""

import sys as _sys

from . import fmm, sweep
from ._lib import load, path

createFMM = fmm.create
createSweep = sweep.create

if "petsc4py.PETSc" in _sys.modules:  # PETSc is initialised: register the types now
    load()

__all__ = ["load", "path", "fmm", "sweep", "createFMM", "createSweep"]
