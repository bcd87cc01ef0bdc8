static char help[] = "Bad input to MATFMM gets a clear PETSc error (no crash, no hang, no leak); edge cases that must work do.\n\
  -works_only   run only the cases that must work (empty ranks, N = 0, N = 1, ...)\n\
  -errors_only  run only the cases that must fail\n\
  -option_errors  run only the bad values given through the options database\n\n";

/*
  Every bad call runs between PetscPushErrorHandler(PetscReturnErrorHandler)
  and PetscPopErrorHandler(), so its error code comes back instead of
  aborting; the test prints
      case <name>: error <code> (expected <code>)
  with the code of rank 0, and checks every rank got the same code (a
  collective error must fail everywhere, not hang the ranks that passed).
  After each case the matrix is destroyed (-malloc_dump: nothing may leak) and
  the user's arrays must still hold what they held before (NaNs compared
  bitwise).  Then the cases that must work, on any number of ranks: N = 0
  globally, ranks with no source or no target, N = 1, duplicate points, weights
  on some ranks only, the combined kernel with alpha = 0 and no normals; each is
  compared with a direct sum computed here.
*/
#include <petscfmm.h>
#include "testutil.h"

static PetscInt    nfail = 0, nunchanged = 0;
static PetscMPIInt rank, size;

/* a small valid geometry: n points in a square (all ranks hold all points) */
#define NPT 400
static PetscReal gxy[2 * NPT], gnrm[2 * NPT], gw[NPT], gtgt[2 * NPT];
static PetscReal cxy[2 * NPT], cnrm[2 * NPT], cw[NPT], ctgt[2 * NPT]; /* copies to detect writes */

static void MakeGeometry(void)
{
  for (PetscInt i = 0; i < NPT; i++) {
    PetscReal a = PetscSinReal(12.9898 * i + 78.233), b = PetscCosReal(4.1414 * i + 1.618);
    gxy[2 * i]      = 0.5 + 0.5 * a;
    gxy[2 * i + 1]  = 0.5 + 0.5 * b * PetscSinReal(3.0 * i);
    gnrm[2 * i]     = PetscCosReal(0.37 * i);
    gnrm[2 * i + 1] = PetscSinReal(0.37 * i);
    gw[i]           = 1.0 + 0.5 * PetscSinReal(1.1 * i);
    gtgt[2 * i]     = 0.5 + 0.7 * PetscCosReal(0.91 * i);
    gtgt[2 * i + 1] = 0.5 + 0.7 * PetscSinReal(1.37 * i);
  }
}

static void Snapshot(void)
{
  memcpy(cxy, gxy, sizeof(gxy));
  memcpy(cnrm, gnrm, sizeof(gnrm));
  memcpy(cw, gw, sizeof(gw));
  memcpy(ctgt, gtgt, sizeof(gtgt));
}

/* the library must not write to the user's arrays: bitwise comparison (NaN included) */
static PetscErrorCode CheckUnchanged(const char *name)
{
  PetscBool ok = (!memcmp(cxy, gxy, sizeof(gxy)) && !memcmp(cnrm, gnrm, sizeof(gnrm)) && !memcmp(cw, gw, sizeof(gw)) && !memcmp(ctgt, gtgt, sizeof(gtgt))) ? PETSC_TRUE : PETSC_FALSE;

  PetscFunctionBeginUser;
  if (ok) nunchanged++;
  else {
    nfail++;
    PetscCall(PetscSynchronizedPrintf(PETSC_COMM_WORLD, "[%d] case %s: the library modified the user's input arrays\n", rank, name));
  }
  PetscCall(PetscSynchronizedFlush(PETSC_COMM_WORLD, PETSC_STDOUT));
  PetscFunctionReturn(0);
}

/* report the code of rank 0 and check all ranks agree */
static PetscErrorCode Expect(const char *name, PetscErrorCode code, PetscErrorCode expected)
{
  int c = (int)code, cmin, cmax, c0 = c;

  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Allreduce(&c, &cmin, 1, MPI_INT, MPI_MIN, PETSC_COMM_WORLD));
  PetscCallMPI(MPI_Allreduce(&c, &cmax, 1, MPI_INT, MPI_MAX, PETSC_COMM_WORLD));
  PetscCallMPI(MPI_Bcast(&c0, 1, MPI_INT, 0, PETSC_COMM_WORLD));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "case %s: error %d (expected %d)%s\n", name, c0, (int)expected, c0 == (int)expected && cmin == cmax ? "" : "  FAILED"));
  if (cmin != cmax) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  ranks disagree: codes from %d to %d\n", cmin, cmax));
  if (c0 != (int)expected || cmin != cmax) nfail++;
  PetscCall(CheckUnchanged(name));
  PetscFunctionReturn(0);
}

/* run a call with errors returned, not raised */
#define TRY(code, call) \
  do { \
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL)); \
    code = (call); \
    PetscCall(PetscPopErrorHandler()); \
  } while (0)

/* this rank's share of n points: an uneven split, rank 0 the smallest */
static void Split(PetscInt n, PetscInt *start, PetscInt *len)
{
  TestSplit(n, rank, size, PETSC_FALSE, start, len);
}

static PetscErrorCode NewFMM(PetscInt m, PetscInt n, Mat *A)
{
  PetscFunctionBeginUser;
  PetscCall(MatCreate(PETSC_COMM_WORLD, A));
  PetscCall(MatSetSizes(*A, m, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(*A, MATFMM));
  PetscFunctionReturn(0);
}

static PetscErrorCode Assemble(Mat A)
{
  PetscFunctionBeginUser;
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* sources (this rank's slice of the first N points, optionally normals/weights), kernel, options, assembly */
static PetscErrorCode SetupAssemble(Mat A, PetscInt N, PetscBool nrm, PetscBool w, MatFMMKernel k, PetscReal alpha, PetscReal beta)
{
  PetscInt s0 = 0, n = 0;

  PetscFunctionBeginUser;
  Split(N, &s0, &n);
  PetscCall(MatFMMSetSources(A, n, gxy + 2 * s0, nrm ? gnrm + 2 * s0 : NULL, w ? gw + s0 : NULL));
  PetscCall(MatFMMSetKernel(A, k, alpha, beta));
  PetscCall(MatSetFromOptions(A));
  PetscCall(Assemble(A));
  PetscFunctionReturn(0);
}

/* a full product; returns the error of MatMult() after freeing the vectors */
static PetscErrorCode Multiply(Mat A)
{
  Vec            x, y;
  PetscErrorCode ierr;

  PetscFunctionBeginUser;
  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(VecSet(x, 1.0));
  ierr = MatMult(A, x, y);
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscFunctionReturn(ierr);
}

/* an error raised through the options database of a Mat with prefix bad_ */
static PetscErrorCode OptionCase(const char *name, const char *opt, const char *val, PetscErrorCode expected)
{
  Mat            A;
  PetscInt       s0 = 0, n = 0;
  PetscErrorCode ierr;
  char           full[64];

  PetscFunctionBeginUser;
  Split(NPT, &s0, &n);
  PetscCall(NewFMM(n, n, &A));
  PetscCall(MatSetOptionsPrefix(A, "bad_"));
  PetscCall(MatFMMSetSources(A, n, gxy + 2 * s0, NULL, NULL));
  PetscCall(PetscSNPrintf(full, sizeof(full), "-bad_%s", opt));
  PetscCall(PetscOptionsSetValue(NULL, full, val));
  TRY(ierr, MatSetFromOptions(A));
  PetscCall(PetscOptionsClearValue(NULL, full));
  PetscCall(Expect(name, ierr, expected));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
}

/* a setter with an out-of-range value on a fresh matrix */
typedef enum {
  SET_P,
  SET_CT,
  SET_EPS,
  SET_THETA,
  SET_LAYOUT,
  SET_METHOD,
  SET_DEVICE,
  SET_KERNEL,
  SET_ALPHA
} Setter;

static PetscErrorCode SetterCase(const char *name, Setter s, PetscReal v, PetscErrorCode expected)
{
  Mat            A;
  PetscErrorCode ierr = 0;

  PetscFunctionBeginUser;
  PetscCall(NewFMM(PETSC_DECIDE, PETSC_DECIDE, &A));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  switch (s) {
  case SET_P:
    ierr = MatFMMSetExpansionOrder(A, (PetscInt)v);
    break;
  case SET_CT:
    ierr = MatFMMSetClusteringThreshold(A, (PetscInt)v);
    break;
  case SET_EPS:
    ierr = MatFMMSetTolerance(A, v);
    break;
  case SET_THETA:
    ierr = MatFMMSetTheta(A, v);
    break;
  case SET_LAYOUT:
    ierr = MatFMMSetLayout(A, (MatFMMLayout)(int)v);
    break;
  case SET_METHOD:
    ierr = MatFMMSetMethod(A, (MatFMMMethod)(int)v);
    break;
  case SET_DEVICE:
    ierr = MatFMMSetDevice(A, (MatFMMDevice)(int)v);
    break;
  case SET_KERNEL:
    ierr = MatFMMSetKernel(A, (MatFMMKernel)(int)v, 1.0, 1.0);
    break;
  case SET_ALPHA:
    ierr = MatFMMSetKernel(A, MATFMM_KERNEL_COMBINED, v, 1.0);
    break;
  }
  PetscCall(PetscPopErrorHandler());
  PetscCall(Expect(name, ierr, expected));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
}

/* a non-finite value in one of the arrays, on every rank's slice (or on the last rank only) */
typedef enum {
  BAD_SRC,
  BAD_TGT,
  BAD_NRM,
  BAD_W
} BadArray;

static PetscErrorCode NonFiniteCase(const char *name, BadArray which, PetscReal val, MatFMMKernel k, PetscBool lastrankonly)
{
  Mat            A;
  PetscInt       s0 = 0, n = 0, t0 = 0, m = 0;
  PetscErrorCode ierr;
  PetscReal     *arr = which == BAD_SRC ? gxy : which == BAD_TGT ? gtgt : which == BAD_NRM ? gnrm : gw;
  PetscInt       idx, stride = which == BAD_W ? 1 : 2;

  PetscFunctionBeginUser;
  Split(NPT, &s0, &n);
  Split(NPT / 2, &t0, &m);
  /* poison one entry in the slice of the last rank (its slice is the largest, never empty) */
  {
    PetscInt ls0 = 0, ln = 0, lt0 = 0, lm = 0;
    TestSplit(NPT, size - 1, size, PETSC_FALSE, &ls0, &ln);
    TestSplit(NPT / 2, size - 1, size, PETSC_FALSE, &lt0, &lm);
    idx = (which == BAD_TGT ? lt0 + lm / 2 : ls0 + ln / 2) * stride + (stride - 1);
  }
  arr[idx] = val;
  if (!lastrankonly) arr[(which == BAD_TGT ? t0 + m / 3 : s0 + n / 3) * stride] = val; /* every rank poisons its own slice too */
  Snapshot();
  PetscCall(NewFMM(which == BAD_TGT ? m : n, n, &A));
  if (which == BAD_TGT) PetscCall(MatFMMSetTargets(A, m, gtgt + 2 * t0));
  TRY(ierr, SetupAssemble(A, NPT, which == BAD_NRM, which == BAD_W, k, 1.0, 1.0));
  if (lastrankonly) {
    /* each rank reports: the bad one its own error, the others that another rank failed */
    PetscErrorCode expected = rank == size - 1 ? PETSC_ERR_ARG_OUTOFRANGE : PETSC_ERR_ARG_WRONG;
    PetscCall(PetscSynchronizedPrintf(PETSC_COMM_WORLD, "case %s, rank %d: error %d (expected %d)%s\n", name, rank, (int)ierr, (int)expected, ierr == expected ? "" : "  FAILED"));
    PetscCall(PetscSynchronizedFlush(PETSC_COMM_WORLD, PETSC_STDOUT));
    if (ierr != expected) nfail++;
    PetscCall(CheckUnchanged(name));
  } else PetscCall(Expect(name, ierr, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(MatDestroy(&A));
  MakeGeometry(); /* restore the arrays */
  Snapshot();
  PetscFunctionReturn(0);
}

/* direct sum of the operator for this rank's targets, as documented */
static void DirectSum(PetscInt N, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, PetscReal alpha, PetscReal beta, PetscInt m, const PetscReal *z, const PetscReal *x, PetscReal *y)
{
  for (PetscInt i = 0; i < m; i++) {
    PetscReal s = 0;
    for (PetscInt j = 0; j < N; j++) {
      PetscReal rx = z[2 * i] - xy[2 * j], ry = z[2 * i + 1] - xy[2 * j + 1], r2 = rx * rx + ry * ry, wj = w ? w[j] : 1.0;
      if (r2 == 0.0) continue;
      s += -beta / (2 * PETSC_PI) * 0.5 * PetscLogReal(r2) * wj * x[j];
      if (nrm) s += alpha / (2 * PETSC_PI) * (nrm[2 * j] * rx + nrm[2 * j + 1] * ry) / r2 * wj * x[j];
    }
    y[i] = s;
  }
}

/* a case that must work: N sources split as given (nloc on this rank), targets = sources (mloc < 0) or
   mloc separate targets; MatMult with x_j = 1 + j/N against the direct sum */
static PetscErrorCode WorksCase(const char *name, PetscInt nloc, PetscInt mloc, const PetscReal *allsrc, const PetscReal *allnrm, const PetscReal *allw, PetscBool wlocal, const PetscReal *alltgt, MatFMMKernel k, PetscReal alpha, PetscReal beta)
{
  Mat                A;
  Vec                x, y;
  PetscInt           N, M, s0, t0, m, ct = 2;
  PetscErrorCode     ierr;
  PetscReal         *xa, *yref, err = 0, nrm = 0, ea, beff = k == MATFMM_KERNEL_DOUBLE ? 0.0 : (k == MATFMM_KERNEL_SINGLE ? 1.0 : beta), aeff = k == MATFMM_KERNEL_SINGLE ? 0.0 : (k == MATFMM_KERNEL_DOUBLE ? 1.0 : alpha);
  const PetscScalar *ya;
  PetscReal         *wfull = NULL;

  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Allreduce(&nloc, &N, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  PetscCallMPI(MPI_Scan(&nloc, &s0, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  s0 -= nloc;
  m = mloc < 0 ? nloc : mloc;
  PetscCallMPI(MPI_Allreduce(&m, &M, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  PetscCallMPI(MPI_Scan(&m, &t0, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  t0 -= m;
  /* weights given by some ranks only (wlocal): the others mean 1 */
  if (allw) {
    PetscInt *cnt, *off;
    PetscCall(PetscMalloc1(N, &wfull));
    PetscCall(PetscMalloc2(size, &cnt, size, &off));
    for (PetscInt j = 0; j < N; j++) wfull[j] = allw[j];
    if (wlocal) { /* rank r passes weights iff r is even */
      PetscCallMPI(MPI_Allgather(&nloc, 1, MPIU_INT, cnt, 1, MPIU_INT, PETSC_COMM_WORLD));
      off[0] = 0;
      for (PetscMPIInt r = 1; r < size; r++) off[r] = off[r - 1] + cnt[r - 1];
      for (PetscMPIInt r = 1; r < size; r += 2)
        for (PetscInt j = off[r]; j < off[r] + cnt[r]; j++) wfull[j] = 1.0;
    }
    PetscCall(PetscFree2(cnt, off));
  }

  PetscCall(NewFMM(m, nloc, &A));
  PetscCall(MatFMMSetSources(A, nloc, nloc ? allsrc + 2 * s0 : NULL, allnrm && nloc ? allnrm + 2 * s0 : NULL, allw && nloc && (!wlocal || rank % 2 == 0) ? allw + s0 : NULL));
  if (mloc >= 0) PetscCall(MatFMMSetTargets(A, m, m ? alltgt + 2 * t0 : gtgt /* any non-NULL pointer */));
  PetscCall(MatFMMSetKernel(A, k, alpha, beta));
  PetscCall(MatFMMSetClusteringThreshold(A, ct)); /* a tree even for few points */
  PetscCall(MatSetFromOptions(A));
  TRY(ierr, Assemble(A));
  if (!ierr) {
    PetscCall(MatCreateVecs(A, &x, &y));
    {
      PetscScalar *a;
      PetscCall(VecGetArrayWrite(x, &a));
      for (PetscInt j = 0; j < nloc; j++) a[j] = 1.0 + (PetscReal)(s0 + j) / PetscMax(N, 1);
      PetscCall(VecRestoreArrayWrite(x, &a));
    }
    TRY(ierr, MatMult(A, x, y));
    if (!ierr) {
      PetscCall(PetscMalloc2(PetscMax(N, 1), &xa, PetscMax(m, 1), &yref));
      for (PetscInt j = 0; j < N; j++) xa[j] = 1.0 + (PetscReal)j / PetscMax(N, 1);
      DirectSum(N, allsrc, aeff != 0.0 ? allnrm : NULL, wfull, aeff, beff, m, mloc < 0 ? allsrc + 2 * s0 : alltgt + 2 * t0, xa, yref);
      PetscCall(VecGetArrayRead(y, &ya));
      for (PetscInt i = 0; i < m; i++) {
        err = PetscMax(err, PetscAbsReal(ya[i] - yref[i]));
        nrm = PetscMax(nrm, PetscAbsReal(yref[i]));
      }
      PetscCall(VecRestoreArrayRead(y, &ya));
      PetscCall(PetscFree2(xa, yref));
    }
    PetscCall(VecDestroy(&x));
    PetscCall(VecDestroy(&y));
  }
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFree(wfull));
  {
    int c = (int)ierr, cmax;
    PetscCallMPI(MPI_Allreduce(&c, &cmax, 1, MPI_INT, MPI_MAX, PETSC_COMM_WORLD));
    PetscCallMPI(MPI_Allreduce(&err, &ea, 1, MPIU_REAL, MPI_MAX, PETSC_COMM_WORLD));
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &nrm, 1, MPIU_REAL, MPI_MAX, PETSC_COMM_WORLD));
    if (cmax) {
      nfail++;
      PetscCall(PetscPrintf(PETSC_COMM_WORLD, "case %s (N=%" PetscInt_FMT ", M=%" PetscInt_FMT "): FAILED with error %d\n", name, N, M, cmax));
    } else {
      PetscBool ok = (ea <= 1e-9 * PetscMax(nrm, 1.0)) ? PETSC_TRUE : PETSC_FALSE;
      if (!ok) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  max error %.3e, max value %.3e\n", (double)ea, (double)nrm));
      if (!ok) nfail++;
      PetscCall(PetscPrintf(PETSC_COMM_WORLD, "case %s (N=%" PetscInt_FMT ", M=%" PetscInt_FMT "): works, matches the direct sum %s\n", name, N, M, ok ? "ok" : "FAILED"));
    }
  }
  PetscCall(CheckUnchanged(name));
  PetscFunctionReturn(0);
}

static PetscErrorCode ErrorCases(void)
{
  Mat            A;
  PetscErrorCode ierr;
  PetscInt       s0 = 0, n = 0;

  PetscFunctionBeginUser;
  Split(NPT, &s0, &n);
  /* non-finite numbers: found at assembly, on every rank */
  PetscCall(NonFiniteCase("NaN source coordinate", BAD_SRC, NAN, MATFMM_KERNEL_SINGLE, PETSC_FALSE));
  PetscCall(NonFiniteCase("Inf source coordinate", BAD_SRC, INFINITY, MATFMM_KERNEL_SINGLE, PETSC_FALSE));
  PetscCall(NonFiniteCase("NaN target coordinate", BAD_TGT, NAN, MATFMM_KERNEL_SINGLE, PETSC_FALSE));
  PetscCall(NonFiniteCase("-Inf target coordinate", BAD_TGT, -INFINITY, MATFMM_KERNEL_SINGLE, PETSC_FALSE));
  PetscCall(NonFiniteCase("NaN normal (double layer)", BAD_NRM, NAN, MATFMM_KERNEL_DOUBLE, PETSC_FALSE));
  PetscCall(NonFiniteCase("Inf normal (combined)", BAD_NRM, INFINITY, MATFMM_KERNEL_COMBINED, PETSC_FALSE));
  PetscCall(NonFiniteCase("NaN weight", BAD_W, NAN, MATFMM_KERNEL_SINGLE, PETSC_FALSE));
  PetscCall(NonFiniteCase("Inf weight", BAD_W, INFINITY, MATFMM_KERNEL_SINGLE, PETSC_FALSE));
  if (size > 1) { /* a collective error found on one rank only must not hang the others */
    PetscCall(NonFiniteCase("NaN source on the last rank only", BAD_SRC, NAN, MATFMM_KERNEL_SINGLE, PETSC_TRUE));
    PetscCall(NonFiniteCase("Inf target on the last rank only", BAD_TGT, INFINITY, MATFMM_KERNEL_SINGLE, PETSC_TRUE));
  }

  /* double layer without normals */
  PetscCall(NewFMM(n, n, &A));
  TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_DOUBLE, 0, 0));
  PetscCall(Expect("double layer without normals", ierr, PETSC_ERR_ARG_WRONGSTATE));
  PetscCall(MatDestroy(&A));
  PetscCall(NewFMM(n, n, &A));
  TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_TRUE, MATFMM_KERNEL_COMBINED, 0.5, 1.0));
  PetscCall(Expect("combined kernel (alpha 0.5) without normals", ierr, PETSC_ERR_ARG_WRONGSTATE));
  PetscCall(MatDestroy(&A));
  if (size > 1) { /* normals missing on rank 0 only: every rank must fail */
    PetscCall(NewFMM(n, n, &A));
    TRY(ierr, MatFMMSetSources(A, n, gxy + 2 * s0, rank ? gnrm + 2 * s0 : NULL, NULL));
    if (!ierr) PetscCall(MatFMMSetKernel(A, MATFMM_KERNEL_DOUBLE, 0, 0));
    if (!ierr) TRY(ierr, Assemble(A));
    PetscCall(PetscSynchronizedPrintf(PETSC_COMM_WORLD, "case normals missing on rank 0 only, rank %d: error %d (expected %d)%s\n", rank, (int)ierr, rank ? PETSC_ERR_ARG_WRONG : PETSC_ERR_ARG_WRONGSTATE, (int)ierr == (rank ? PETSC_ERR_ARG_WRONG : PETSC_ERR_ARG_WRONGSTATE) ? "" : "  FAILED"));
    PetscCall(PetscSynchronizedFlush(PETSC_COMM_WORLD, PETSC_STDOUT));
    if ((int)ierr != (rank ? PETSC_ERR_ARG_WRONG : PETSC_ERR_ARG_WRONGSTATE)) nfail++;
    PetscCall(MatDestroy(&A));
  }

  /* sizes */
  PetscCall(NewFMM(n, n, &A));
  TRY(ierr, MatFMMSetSources(A, n - 1, gxy + 2 * s0, NULL, NULL));
  PetscCall(Expect("MatFMMSetSources with n != local column size", ierr, PETSC_ERR_ARG_SIZ));
  PetscCall(MatDestroy(&A));
  PetscCall(NewFMM(n, n, &A));
  PetscCall(MatFMMSetSources(A, n, gxy + 2 * s0, NULL, NULL));
  TRY(ierr, MatFMMSetTargets(A, n + 1, gtgt));
  PetscCall(Expect("MatFMMSetTargets with m != local row size", ierr, PETSC_ERR_ARG_SIZ));
  PetscCall(MatDestroy(&A));
  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, PETSC_DECIDE, PETSC_DECIDE, NPT + 1, NPT + 1));
  PetscCall(MatSetType(A, MATFMM));
  TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(Expect("global size != number of sources", ierr, PETSC_ERR_ARG_SIZ));
  PetscCall(MatDestroy(&A));
  PetscCall(NewFMM(PETSC_DECIDE, PETSC_DECIDE, &A));
  TRY(ierr, MatFMMSetSources(A, -1, gxy, NULL, NULL));
  PetscCall(Expect("negative number of sources", ierr, PETSC_ERR_ARG_OUTOFRANGE));
  TRY(ierr, MatFMMSetSources(A, 3, NULL, NULL, NULL));
  PetscCall(Expect("NULL source coordinates", ierr, PETSC_ERR_ARG_NULL));
  TRY(ierr, MatFMMSetTargets(A, -2, gtgt));
  PetscCall(Expect("negative number of targets", ierr, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(MatDestroy(&A));
  {
    Vec x, y;
    PetscCall(NewFMM(n, n, &A));
    PetscCall(SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
    PetscCall(VecCreateMPI(PETSC_COMM_WORLD, n + 1, PETSC_DETERMINE, &x));
    PetscCall(VecCreateMPI(PETSC_COMM_WORLD, n, PETSC_DETERMINE, &y));
    TRY(ierr, MatMult(A, x, y));
    PetscCall(Expect("MatMult with a vector of the wrong size", ierr, PETSC_ERR_ARG_SIZ));
    PetscCall(VecDestroy(&x));
    PetscCall(VecDestroy(&y));
    PetscCall(MatDestroy(&A));
  }

  /* an eps that theta cannot reach with the largest order: refused at assembly, naming the theta that can */
  PetscCall(NewFMM(n, n, &A));
  PetscCall(MatFMMSetTheta(A, 0.9));
  TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(Expect("eps 1e-10 with theta 0.9 (order 211 needed)", ierr, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(MatDestroy(&A));
  PetscCall(NewFMM(n, n, &A));
  PetscCall(MatFMMSetTheta(A, 0.95));
  PetscCall(MatFMMSetTolerance(A, 1e-6));
  TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(Expect("eps 1e-6 with theta 0.95 (order 225 needed)", ierr, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(MatDestroy(&A));

  /* parameters out of range: setters */
  PetscCall(SetterCase("MatFMMSetExpansionOrder(0)", SET_P, 0, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetExpansionOrder(65)", SET_P, 65, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetClusteringThreshold(0)", SET_CT, 0, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetClusteringThreshold(-5)", SET_CT, -5, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetClusteringThreshold(2^20+1)", SET_CT, 1048577, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetTolerance(0)", SET_EPS, 0, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetTolerance(1)", SET_EPS, 1, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetTolerance(NaN)", SET_EPS, NAN, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetTheta(1)", SET_THETA, 1, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetTheta(-0.5)", SET_THETA, -0.5, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetLayout(7)", SET_LAYOUT, 7, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetLayout(-1)", SET_LAYOUT, -1, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetMethod(2)", SET_METHOD, 2, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetDevice(3)", SET_DEVICE, 3, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetKernel(3)", SET_KERNEL, 3, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetKernel(combined, alpha NaN)", SET_ALPHA, NAN, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(SetterCase("MatFMMSetKernel(combined, alpha Inf)", SET_ALPHA, INFINITY, PETSC_ERR_ARG_OUTOFRANGE));

  /* wrong order of calls */
  PetscCall(NewFMM(n, n, &A));
  PetscCall(MatFMMSetSources(A, n, gxy + 2 * s0, NULL, NULL));
  TRY(ierr, Multiply(A));
  PetscCall(Expect("MatMult before assembly", ierr, PETSC_ERR_ARG_WRONGSTATE));
  PetscCall(Assemble(A));
  PetscCall(Multiply(A));
  PetscCall(MatFMMSetSources(A, n, gxy + 2 * s0, NULL, NULL)); /* new geometry: assemble again */
  TRY(ierr, Multiply(A));
  PetscCall(Expect("MatMult after MatFMMSetSources without assembly", ierr, PETSC_ERR_ARG_WRONGSTATE));
  PetscCall(MatDestroy(&A));
  PetscCall(NewFMM(n, n, &A));
  TRY(ierr, Assemble(A));
  PetscCall(Expect("assembly without MatFMMSetSources", ierr, PETSC_ERR_ARG_WRONGSTATE));
  TRY(ierr, MatFMMGetTreeInfo(A, NULL, NULL, NULL, NULL));
  PetscCall(Expect("MatFMMGetTreeInfo before assembly", ierr, PETSC_ERR_ARG_WRONGSTATE));
  PetscCall(MatDestroy(&A));

  /* degenerate geometry: all sources at one point */
  {
    PetscReal *same;
    PetscCall(PetscMalloc1(2 * NPT, &same));
    for (PetscInt i = 0; i < NPT; i++) {
      same[2 * i]     = 0.25;
      same[2 * i + 1] = -3.0;
    }
    PetscCall(NewFMM(n, n, &A));
    PetscCall(MatFMMSetSources(A, n, same + 2 * s0, NULL, NULL));
    TRY(ierr, Assemble(A));
    PetscCall(Expect("all sources identical", ierr, PETSC_ERR_ARG_WRONG));
    PetscCall(MatDestroy(&A));
    PetscCall(NewFMM(n, n, &A));
    PetscCall(MatFMMSetSources(A, n, same + 2 * s0, NULL, NULL));
    PetscCall(MatFMMSetTargets(A, n, gtgt + 2 * s0));
    TRY(ierr, Assemble(A));
    PetscCall(Expect("all sources identical, separate targets", ierr, PETSC_ERR_ARG_WRONG));
    PetscCall(MatDestroy(&A));
    PetscCall(PetscFree(same));
  }

  /* coordinates at the ends of the double range: what cannot be represented is refused */
  {
    PetscReal *big, *bw, far[2 * NPT];
    PetscCall(PetscMalloc2(2 * NPT, &big, NPT, &bw));
    for (PetscInt i = 0; i < 2 * NPT; i++) far[i] = gtgt[i];
    far[2 * NPT - 1] = 1e200; /* the last target: 1e200 from sources in the unit square */
    PetscCall(NewFMM(n, n, &A));
    PetscCall(MatFMMSetTargets(A, n, far + 2 * s0)); /* the far one on the last rank: refused on all */
    TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
    PetscCall(Expect("a target 1e200 from sources of extent 1", ierr, PETSC_ERR_ARG_OUTOFRANGE));
    PetscCall(MatDestroy(&A));
    for (PetscInt i = 0; i < 2 * NPT; i++) big[i] = 1e-300 * gxy[i];
    PetscCall(NewFMM(n, n, &A));
    PetscCall(MatFMMSetSources(A, n, big + 2 * s0, gnrm + 2 * s0, NULL));
    PetscCall(MatFMMSetKernel(A, MATFMM_KERNEL_COMBINED, 1e10, 1.0));
    TRY(ierr, Assemble(A));
    PetscCall(Expect("double layer alpha 1e10 on sources of extent 1e-300 (values overflow)", ierr, PETSC_ERR_ARG_OUTOFRANGE));
    PetscCall(MatDestroy(&A));
    for (PetscInt i = 0; i < 2 * NPT; i++) big[i] = 1e300 * gxy[i];
    for (PetscInt i = 0; i < NPT; i++) bw[i] = 1e306 * gw[i];
    PetscCall(NewFMM(n, n, &A));
    PetscCall(MatFMMSetSources(A, n, big + 2 * s0, NULL, bw + s0));
    PetscCall(Assemble(A));
    TRY(ierr, Multiply(A));
    PetscCall(Expect("single layer with weights 1e306 on sources of extent 1e300 (the product overflows)", ierr, PETSC_ERR_FP));
    PetscCall(MatDestroy(&A));
    PetscCall(PetscFree2(big, bw));
  }

  /* repetition layout with a budget smaller than one leaf's records */
  PetscCall(NewFMM(n, n, &A));
  PetscCall(MatSetOptionsPrefix(A, "rep_"));
  PetscCall(PetscOptionsSetValue(NULL, "-rep_mat_fmm_layout", "repetition"));
  PetscCall(PetscOptionsSetValue(NULL, "-rep_mat_fmm_repetition_mb", "0.001"));
  TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(Expect("repetition budget smaller than one leaf", ierr, PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscOptionsClearValue(NULL, "-rep_mat_fmm_layout"));
  PetscCall(PetscOptionsClearValue(NULL, "-rep_mat_fmm_repetition_mb"));

  /* diagonal operations need a square matrix */
  {
    PetscInt t0 = 0, m = 0;
    Vec      d;
    Split(NPT / 2, &t0, &m);
    PetscCall(NewFMM(m, n, &A));
    PetscCall(MatFMMSetTargets(A, m, gtgt + 2 * t0));
    PetscCall(SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
    TRY(ierr, MatShift(A, 1.0));
    PetscCall(Expect("MatShift on a non-square MATFMM", ierr, PETSC_ERR_ARG_SIZ));
    PetscCall(MatCreateVecs(A, NULL, &d));
    TRY(ierr, MatGetDiagonal(A, d));
    PetscCall(Expect("MatGetDiagonal on a non-square MATFMM", ierr, PETSC_ERR_ARG_SIZ));
    TRY(ierr, MatDiagonalSet(A, d, INSERT_VALUES));
    PetscCall(Expect("MatDiagonalSet on a non-square MATFMM", ierr, PETSC_ERR_ARG_SIZ));
    PetscCall(VecDestroy(&d));
    PetscCall(MatDestroy(&A));
  }

  /* recovery: after a failed assembly the same matrix takes good sources and works */
  {
    PetscReal saved = gxy[2 * s0 + 1];
    gxy[2 * s0 + 1] = NAN;
    PetscCall(NewFMM(n, n, &A));
    TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
    gxy[2 * s0 + 1] = saved;
    Snapshot();
    PetscCall(Expect("NaN source, before recovery", ierr, PETSC_ERR_ARG_OUTOFRANGE));
    TRY(ierr, SetupAssemble(A, NPT, PETSC_FALSE, PETSC_FALSE, MATFMM_KERNEL_SINGLE, 0, 0));
    if (!ierr) TRY(ierr, Multiply(A));
    PetscCall(Expect("same matrix with good sources after the error", ierr, 0));
    PetscCall(MatDestroy(&A));
  }
  PetscFunctionReturn(0);
}

/* errors raised inside MatSetFromOptions().  PETSc 3.18 itself leaks when an error
   leaves PetscOptionsBegin/End (the prefix and title strings, and the copies
   PetscOptionsGetEList() makes of an unknown enum value), so these cases run in
   their own test case, without -malloc_dump */
static PetscErrorCode OptionErrorCases(void)
{
  PetscFunctionBeginUser;
  PetscCall(OptionCase("-mat_fmm_p 0", "mat_fmm_p", "0", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_p 100", "mat_fmm_p", "100", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_ct 0", "mat_fmm_ct", "0", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_ct -3", "mat_fmm_ct", "-3", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_eps 2", "mat_fmm_eps", "2", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_theta 0", "mat_fmm_theta", "0", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_repetition_mb -1", "mat_fmm_repetition_mb", "-1", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_setup_threads -2", "mat_fmm_setup_threads", "-2", PETSC_ERR_ARG_OUTOFRANGE));
  PetscCall(OptionCase("-mat_fmm_layout bogus", "mat_fmm_layout", "bogus", PETSC_ERR_USER));
  PetscCall(OptionCase("-mat_fmm_method bogus", "mat_fmm_method", "bogus", PETSC_ERR_USER));
  PetscCall(OptionCase("-mat_fmm_device bogus", "mat_fmm_device", "bogus", PETSC_ERR_USER));
  PetscCall(OptionCase("-mat_fmm_kernel bogus", "mat_fmm_kernel", "bogus", PETSC_ERR_USER));
  PetscCall(OptionCase("-mat_fmm_tree_split bogus", "mat_fmm_tree_split", "bogus", PETSC_ERR_USER));
  PetscCall(OptionCase("-mat_fmm_p abc", "mat_fmm_p", "abc", PETSC_ERR_ARG_OUTOFRANGE));

  PetscFunctionReturn(0);
}

static PetscErrorCode WorkingCases(void)
{
  PetscInt  s0 = 0, n = 0, one;
  PetscReal dup[2 * 40], far1[2] = {3.0, -1.0};

  PetscFunctionBeginUser;
  Split(NPT, &s0, &n);
  /* N = 0 everywhere */
  PetscCall(WorksCase("N = 0 globally, targets = sources", 0, -1, gxy, NULL, NULL, PETSC_FALSE, NULL, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(WorksCase("N = 0 globally, 5 separate targets per rank", 0, 5, gxy, NULL, NULL, PETSC_FALSE, gtgt, MATFMM_KERNEL_SINGLE, 0, 0));
  /* N = 1: on the last rank */
  one = rank == size - 1 ? 1 : 0;
  PetscCall(WorksCase("N = 1 (last rank), targets = sources", one, -1, gxy, gnrm, gw, PETSC_FALSE, NULL, MATFMM_KERNEL_COMBINED, 0.5, 1.0));
  PetscCall(WorksCase("N = 1 (last rank), 7 targets per rank", one, 7, gxy, gnrm, gw, PETSC_FALSE, gtgt, MATFMM_KERNEL_COMBINED, 0.5, 1.0));
  PetscCall(WorksCase("N = 1 (rank 0), target on the source and far away", rank == 0 ? 1 : 0, rank == 0 ? 2 : 0, gxy, NULL, NULL, PETSC_FALSE, (PetscReal[]){gxy[0], gxy[1], far1[0], far1[1]}, MATFMM_KERNEL_SINGLE, 0, 0));
  /* empty ranks: rank 0 holds nothing, or only rank 0 holds anything */
  PetscCall(WorksCase("no sources on rank 0", rank == 0 ? 0 : 60, -1, gxy, gnrm, NULL, PETSC_FALSE, NULL, MATFMM_KERNEL_DOUBLE, 0, 0));
  PetscCall(WorksCase("all sources on rank 0", rank == 0 ? 300 : 0, -1, gxy, gnrm, gw, PETSC_FALSE, NULL, MATFMM_KERNEL_COMBINED, 0.7, -1.3));
  PetscCall(WorksCase("1 source per rank, no targets on rank 0", 1, rank == 0 ? 0 : 9, gxy, NULL, NULL, PETSC_FALSE, gtgt, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(WorksCase("no targets anywhere (M = 0)", n, 0, gxy, NULL, NULL, PETSC_FALSE, gtgt, MATFMM_KERNEL_SINGLE, 0, 0));
  /* duplicate points: coincident pairs are excluded, not an error */
  for (PetscInt i = 0; i < 40; i++) {
    dup[2 * i]     = gxy[2 * (i / 2)];
    dup[2 * i + 1] = gxy[2 * (i / 2) + 1];
  }
  PetscCall(WorksCase("pairs of coincident sources", rank == size - 1 ? 40 : 0, -1, dup, gnrm, NULL, PETSC_FALSE, NULL, MATFMM_KERNEL_COMBINED, 1.0, 1.0));
  PetscCall(WorksCase("all targets at one source", n, rank == 0 ? 6 : 3, gxy, NULL, NULL, PETSC_FALSE, (PetscReal[]){gxy[0], gxy[1], gxy[0], gxy[1], gxy[0], gxy[1], gxy[0], gxy[1], gxy[0], gxy[1], gxy[0], gxy[1]}, MATFMM_KERNEL_SINGLE, 0, 0));
  /* weights passed by even ranks only (the others mean 1), normals not needed with alpha = 0 */
  PetscCall(WorksCase("weights on even ranks only", n, -1, gxy, NULL, gw, PETSC_TRUE, NULL, MATFMM_KERNEL_SINGLE, 0, 0));
  PetscCall(WorksCase("combined kernel with alpha = 0 and no normals", n, -1, gxy, NULL, gw, PETSC_FALSE, NULL, MATFMM_KERNEL_COMBINED, 0.0, 2.0));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscBool works_only = PETSC_FALSE, errors_only = PETSC_FALSE, option_errors = PETSC_FALSE;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-works_only", &works_only, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-errors_only", &errors_only, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-option_errors", &option_errors, NULL));
  MakeGeometry();
  Snapshot();
  if (option_errors) PetscCall(OptionErrorCases());
  else {
    if (!works_only) PetscCall(ErrorCases());
    if (!errors_only) PetscCall(WorkingCases());
  }
  {
    PetscInt mn;
    PetscCallMPI(MPI_Allreduce(&nunchanged, &mn, 1, MPIU_INT, MPI_MIN, PETSC_COMM_WORLD));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "the user's arrays were unchanged after all %" PetscInt_FMT " checked cases\n", mn));
  }
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s\n", nfail ? "SOME CASES FAILED" : "all cases behaved as expected"));
  PetscCall(PetscFinalize());
  return nfail ? 1 : 0;
}

/*TEST
  test:
    args: -malloc_dump
  test:
    suffix: options
    args: -option_errors
  test:
    suffix: 2
    nsize: 2
    args: -malloc_dump
  test:
    suffix: 3
    nsize: 3
    args: -malloc_dump
TEST*/
