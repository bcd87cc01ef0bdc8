/*
  Helpers shared by the test programs (the programs in tests/) and the benchmark (bench/bench.c):
  point generators, a seeded random generator, an uneven split of the points over
  the ranks, the relative difference of two vectors and the printing of a check.  Only PETSc is called
  here (nothing from petscfmm), so any test may include it.
*/
#pragma once
#include <petscvec.h>

/* Point s of N on the star-shaped closed curve r(t) = 1 + 0.3 cos 5t, at t = 2 pi s / N
   (s need not be an integer): its coordinates xy[0..1], outward unit normal nrm[0..1] and
   trapezoid-rule weight |x'(t)| 2 pi / N in *w */
static inline void TestStarCurvePoint(PetscReal s, PetscInt N, PetscReal xy[2], PetscReal nrm[2], PetscReal *w)
{
  PetscReal t = 2 * PETSC_PI * s / N, rr = 1 + 0.3 * PetscCosReal(5 * t), dr = -1.5 * PetscSinReal(5 * t);
  PetscReal dx = dr * PetscCosReal(t) - rr * PetscSinReal(t), dy = dr * PetscSinReal(t) + rr * PetscCosReal(t), sp = PetscSqrtReal(dx * dx + dy * dy);

  xy[0]  = rr * PetscCosReal(t);
  xy[1]  = rr * PetscSinReal(t);
  nrm[0] = dy / sp;
  nrm[1] = -dx / sp;
  *w     = sp * 2 * PETSC_PI / N;
}

/* A point of cluster k (one of 16 centres spread around (0.5, 0.5)) at radius crad sqrt(a)
   and angle 2 pi b from its centre: uniform in the disk of radius crad for a, b uniform in [0,1) */
static inline void TestClusterPoint(PetscInt k, PetscReal crad, PetscReal a, PetscReal b, PetscReal xy[2])
{
  PetscReal cx = 0.5 + 0.45 * PetscCosReal(2.4 * k + 0.3 * k * k), cy = 0.5 + 0.45 * PetscSinReal(1.7 * k + 0.2 * k * k);
  PetscReal rad = crad * PetscSqrtReal(a), th = 2 * PETSC_PI * b;

  xy[0] = cx + rad * PetscCosReal(th);
  xy[1] = cy + rad * PetscSinReal(th);
}

/* Creates on comm a PETSCRAND48 random generator seeded with seed (the same stream on every run) */
static inline PetscErrorCode TestRandomCreate(MPI_Comm comm, unsigned long seed, PetscRandom *r)
{
  PetscFunctionBeginUser;
  PetscCall(PetscRandomCreate(comm, r));
  PetscCall(PetscRandomSetType(*r, PETSCRAND48));
  PetscCall(PetscRandomSetSeed(*r, seed));
  PetscCall(PetscRandomSeed(*r));
  PetscFunctionReturn(0);
}

/* This rank's part [*start, *start + *len) of n items split unevenly in rank order: rank r gets a
   share proportional to r + 1 (reverse: to size - r), the last rank the remainder */
static inline void TestSplit(PetscInt n, PetscMPIInt rank, PetscMPIInt size, PetscBool reverse, PetscInt *start, PetscInt *len)
{
  PetscInt tot = size * (size + 1) / 2, s = 0;

  for (PetscMPIInt r = 0; r <= rank; r++) {
    PetscInt l = (r == size - 1) ? n - s : (n * (reverse ? size - r : r + 1)) / tot;
    if (r == rank) {
      *start = s;
      *len   = l;
    }
    s += l;
  }
}

/* *d = |a - b| / |ref| in the 2-norm, or |a - b| where ref = 0 */
static inline PetscErrorCode TestRelDiff(Vec a, Vec b, Vec ref, PetscReal *d)
{
  Vec       t;
  PetscReal n0, n1;

  PetscFunctionBeginUser;
  *d = 0; /* defined even on an error return: keeps -Wmaybe-uninitialized quiet in the callers */
  PetscCall(VecDuplicate(a, &t));
  PetscCall(VecWAXPY(t, -1.0, b, a));
  PetscCall(VecNorm(t, NORM_2, &n1));
  PetscCall(VecNorm(ref, NORM_2, &n0));
  *d = n0 > 0 ? n1 / n0 : n1;
  PetscCall(VecDestroy(&t));
  PetscFunctionReturn(0);
}

/* Prints "<what> <= <tol> ok" or "... FAILED" (then counted in *nfail) on PETSC_COMM_WORLD,
   followed by the measured val when verbose or failed (a NaN fails) */
static inline PetscErrorCode TestCheck(const char *what, PetscReal val, PetscReal tol, PetscBool verbose, PetscInt *nfail)
{
  PetscBool ok = (val <= tol) ? PETSC_TRUE : PETSC_FALSE;

  PetscFunctionBeginUser;
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s <= %g %s\n", what, (double)tol, ok ? "ok" : "FAILED"));
  if (verbose || !ok) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "    measured %.3e\n", (double)val));
  if (!ok) (*nfail)++;
  PetscFunctionReturn(0);
}
