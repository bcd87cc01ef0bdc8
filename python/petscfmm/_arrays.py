"""Checks of the NumPy arrays given to the C API: the C functions read as many
entries as the matrix's sizes say, so every length is checked here first."""

import ctypes

import numpy as np


def _shape(shape):
    return "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def reals(name, a, shape, optional=False):
    """a as a float64 C-contiguous array of the given shape (None: any length
    along that axis), its entries finite; TypeError/ValueError otherwise.
    A float64 array that is not C-contiguous (a strided view) is copied."""
    if a is None:
        if optional:
            return None
        raise TypeError("%s is required: a numpy.ndarray of float64 with shape %s" % (name, _shape(shape)))
    if not isinstance(a, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray of float64 with shape %s, got %s" % (name, _shape(shape), type(a).__name__))
    if a.dtype != np.float64:
        raise TypeError("%s must have dtype float64, got %s (convert with numpy.asarray(%s, dtype=numpy.float64))" % (name, a.dtype, name))
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise ValueError("%s must have shape %s, got %s" % (name, _shape(shape), a.shape))
    if not a.flags.c_contiguous:  # a view (a slice, a transpose): the library copies anyway
        a = np.ascontiguousarray(a)
    bad = ~np.isfinite(a)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError("%s%s is %r: every entry must be finite" % (name, list(idx), float(a[idx])))
    return a


def ints(name, a, shape, inttype):
    """a as a C-contiguous array of PETSc's integer type (from any integer dtype, values in range)."""
    if not isinstance(a, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray of integers with shape %s, got %s" % (name, _shape(shape), type(a).__name__))
    if a.dtype.kind not in "iu":
        raise TypeError("%s must have an integer dtype, got %s" % (name, a.dtype))
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise ValueError("%s must have shape %s, got %s" % (name, _shape(shape), a.shape))
    info = np.iinfo(inttype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError("%s has entries outside the range of PETSc's integers (%s)" % (name, np.dtype(inttype)))
    return np.ascontiguousarray(a, dtype=inttype)


def ptr(a):
    """The address of a's data for a C pointer argument (None: NULL)."""
    return None if a is None else ctypes.c_void_p(a.ctypes.data)


def enum(name, value, names):
    """The index of an enum value given by name (case-insensitive) or number."""
    if isinstance(value, str):
        low = [n.lower() for n in names]
        if value.lower() in low:
            return low.index(value.lower())
        raise ValueError("%s %r is not one of %s" % (name, value, ", ".join(names)))
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < len(names):
        return int(value)
    raise ValueError("%s %r is not one of %s (or 0 to %d)" % (name, value, ", ".join(names), len(names) - 1))


def integer(name, v, inttype, lo=None):
    """v as a Python int that fits PETSc's integers (and is >= lo, if given)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError("%s must be an integer, got %r" % (name, v))
    info = np.iinfo(inttype)
    if v < info.min or v > info.max:
        raise ValueError("%s = %d does not fit PETSc's integers (PetscInt)" % (name, v))
    if lo is not None and v < lo:
        raise ValueError("%s must be >= %d, got %d" % (name, lo, v))
    return int(v)


def real(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError("%s must be a real number, got %r" % (name, v))
    v = float(v)
    if not np.isfinite(v):
        raise ValueError("%s must be finite, got %r" % (name, v))
    return v


def as_array(p, n, dtype):
    """A copy of n entries at the C pointer p."""
    if n == 0:
        return np.zeros(0, dtype=dtype)
    return np.ctypeslib.as_array(p, shape=(n,)).astype(dtype, copy=True)
