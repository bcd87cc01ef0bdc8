static char help[] = "MATFMM on points at the ends of the double range, against exact sums in long double.\n\
  -n <N>             number of sources (default 2000)\n\
  -targets           separate targets (N/2 random ones, N/4 at source places) instead of targets = sources\n\
  -cases <s,o,...>   pairs (scale, offset): points scale*(u + offset), u in the unit square\n\
                     (default the issue's set: 1,0 1e-300,0 1e-157,0 1e-150,1e8 1,1e8 1e150,0 1e154,1 1e300,0 1e300,1e7)\n\
  -mat_fmm_eps <eps> the tolerance, also the required relative 2-norm error (default 1e-10)\n\
  -device_points     give the points in GPU memory (needs a PETSc configured with CUDA)\n\
  -verbose           print the errors\n\n";

/*
  The kernel squares distances; MATFMM scales the points by a power of two
  where their extent is near the ends of the double range.  For each case,
  sources scale*(u + offset) with every 25th a duplicate of the one before,
  combined kernel 0.7 D - 1.3 S, weights scale (0.5 + c)/N, and two densities:
  random positive (the logarithm of the scale, times the charges, dominates
  the single layer) and with weighted sum 0 (the rest dominates).  The
  reference is the exact sum in long double, whose range holds every r^2
  here.  Relative 2-norm errors of the FMM <= eps; of -mat_fmm_method
  direct <= 1e-12.  Targets = sources, or separate targets on the same
  scale, a quarter of them at source places; on any number of ranks.
*/
#include <petscfmm.h>
#include "testutil.h"
#if defined(PETSC_HAVE_CUDA)
  #if PETSC_VERSION_LT(3, 19, 0)
    #include <petscdevice.h>
  #else
    #include <petscdevice_cuda.h>
  #endif
#endif

/* *d = a copy of h[0..n) in GPU memory with -device_points (the ranges are then found on the GPU), else h */
static PetscErrorCode Place(PetscBool dev, const PetscReal *h, PetscInt n, PetscReal **d)
{
  PetscFunctionBeginUser;
  *d = (PetscReal *)h;
  if (!dev) PetscFunctionReturn(0);
#if defined(PETSC_HAVE_CUDA)
  *d = NULL;
  PetscCallCUDA(cudaMalloc((void **)d, sizeof(PetscReal) * (n > 0 ? n : 1)));
  PetscCallCUDA(cudaMemcpy(*d, h, sizeof(PetscReal) * n, cudaMemcpyHostToDevice));
#else
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_SUP, "-device_points needs a PETSc configured with CUDA");
#endif
  PetscFunctionReturn(0);
}

static PetscErrorCode Unplace(PetscBool dev, PetscReal *d)
{
  PetscFunctionBeginUser;
#if defined(PETSC_HAVE_CUDA)
  if (dev) PetscCallCUDA(cudaFree(d));
#else
  (void)dev;
  (void)d;
#endif
  PetscFunctionReturn(0);
}

/* y = (alpha D + beta S) x for this rank's targets t[0..m), all N sources, summed in long double
   over the pairs at distinct places */
static PetscErrorCode ExactProduct(PetscInt N, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, const PetscScalar *xa, PetscInt m, const PetscReal *t, PetscReal alpha, PetscReal beta, PetscScalar *ya)
{
  PetscFunctionBeginUser;
#pragma omp parallel for schedule(static)
  for (PetscInt i = 0; i < m; i++) {
    long double sl = 0, dl = 0;
    for (PetscInt j = 0; j < N; j++) {
      const long double rx = (long double)t[2 * i] - xy[2 * j], ry = (long double)t[2 * i + 1] - xy[2 * j + 1], r2 = rx * rx + ry * ry, wx = (long double)w[j] * xa[j];
      if (r2 == 0) continue;
      sl += 0.5L * logl(r2) * wx;
      dl += (nrm[2 * j] * rx + nrm[2 * j + 1] * ry) / r2 * wx;
    }
    ya[i] = (PetscScalar)((alpha * dl - beta * sl) / (2 * 3.141592653589793238462643383279502884L));
  }
  PetscFunctionReturn(0);
}

/* TestRelDiff with both norms taken of the vectors divided by max|ref|: here |y| reaches 1e302,
   whose square a plain 2-norm would overflow */
static PetscErrorCode ScaledRelDiff(Vec a, Vec ref, PetscReal *d)
{
  PetscReal   amax, sum[2] = {0, 0}, tot[2];

  *d = 0; /* defined on an error return too */
  PetscInt    m;
  const PetscScalar *aa, *ra;

  PetscFunctionBeginUser;
  PetscCall(VecNorm(ref, NORM_INFINITY, &amax));
  if (amax == 0) amax = 1;
  PetscCall(VecGetLocalSize(a, &m));
  PetscCall(VecGetArrayRead(a, &aa));
  PetscCall(VecGetArrayRead(ref, &ra));
  for (PetscInt i = 0; i < m; i++) {
    const PetscReal e = PetscRealPart(aa[i]) / amax - PetscRealPart(ra[i]) / amax, r = PetscRealPart(ra[i]) / amax;
    sum[0] += e * e;
    sum[1] += r * r;
  }
  PetscCall(VecRestoreArrayRead(a, &aa));
  PetscCall(VecRestoreArrayRead(ref, &ra));
  PetscCall(MPIU_Allreduce(sum, tot, 2, MPIU_REAL, MPIU_SUM, PetscObjectComm((PetscObject)a)));
  *d = PetscSqrtReal(tot[0] / tot[1]);
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscInt    N = 2000, ncase = 32, nfail = 0, n0 = 0, n = 0, m = 0, mt0 = 0, NT;
  PetscReal   cases[32] = {1, 0, 1e-300, 0, 1e-157, 0, 1e-150, 1e8, 1, 1e8, 1e150, 0, 1e154, 1, 1e300, 0, 1e300, 1e7}, tol = 1e-10;
  PetscBool   verbose = PETSC_FALSE, targets = PETSC_FALSE, devpts = PETSC_FALSE, set;
  PetscMPIInt rank, size;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "scales test options", NULL);
  PetscCall(PetscOptionsInt("-n", "Number of sources", NULL, N, &N, NULL));
  PetscCall(PetscOptionsBool("-targets", "Separate targets", NULL, targets, &targets, NULL));
  PetscCall(PetscOptionsRealArray("-cases", "Pairs scale,offset", NULL, cases, &ncase, &set));
  if (!set) ncase = 18;
  PetscCall(PetscOptionsReal("-mat_fmm_eps", "Tolerance (read here: the required relative error)", NULL, tol, &tol, NULL));
  PetscCall(PetscOptionsBool("-device_points", "Points in GPU memory", NULL, devpts, &devpts, NULL));
  PetscCall(PetscOptionsBool("-verbose", "Print errors", NULL, verbose, &verbose, NULL));
  PetscOptionsEnd();
  PetscCheck(ncase % 2 == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_SIZ, "-cases takes pairs scale,offset");
  TestSplit(N, rank, size, PETSC_FALSE, &n0, &n); /* uneven: rank r has a share r + 1 */
  NT = targets ? N / 2 + N / 4 : N;
  if (targets) TestSplit(NT, rank, size, PETSC_TRUE, &mt0, &m);
  else m = n;

  for (PetscInt c = 0; c < ncase / 2; c++) {
    const PetscReal s = cases[2 * c], off = cases[2 * c + 1];
    PetscReal      *xy, *nrm, *w, *t, *dxy, *dnrm, *dw, *dt = NULL;
    PetscRandom     r;
    Mat             A;
    Vec             x, y, yref;
    PetscScalar    *ya;
    const PetscScalar *xa;
    char            what[160];

    /* every point, on every rank (the reference needs all sources) */
    PetscCall(PetscMalloc4(2 * N, &xy, 2 * N, &nrm, N, &w, 2 * NT, &t));
    PetscCall(TestRandomCreate(PETSC_COMM_SELF, 4321, &r));
    for (PetscInt j = 0; j < N; j++) {
      PetscReal a, b, d;
      PetscCall(PetscRandomGetValueReal(r, &a));
      PetscCall(PetscRandomGetValueReal(r, &b));
      PetscCall(PetscRandomGetValueReal(r, &d));
      xy[2 * j]      = s * (a + off);
      xy[2 * j + 1]  = s * (b + off);
      nrm[2 * j]     = PetscCosReal(2 * PETSC_PI * d);
      nrm[2 * j + 1] = PetscSinReal(2 * PETSC_PI * d);
      w[j]           = s * (0.5 + d) / N;
      if (j % 25 == 24) { /* a duplicate place */
        xy[2 * j]     = xy[2 * j - 2];
        xy[2 * j + 1] = xy[2 * j - 1];
      }
    }
    for (PetscInt i = 0; i < NT; i++) {
      PetscReal a, b;
      PetscCall(PetscRandomGetValueReal(r, &a));
      PetscCall(PetscRandomGetValueReal(r, &b));
      t[2 * i]     = i % 3 == 0 ? xy[2 * ((7 * i) % N)] : s * (a + off);
      t[2 * i + 1] = i % 3 == 0 ? xy[2 * ((7 * i) % N) + 1] : s * (b + off);
    }
    PetscCall(PetscRandomDestroy(&r));

    PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
    PetscCall(MatSetSizes(A, m, n, PETSC_DETERMINE, N));
    PetscCall(MatSetType(A, MATFMM));
    PetscCall(Place(devpts, xy + 2 * n0, 2 * n, &dxy));
    PetscCall(Place(devpts, nrm + 2 * n0, 2 * n, &dnrm));
    PetscCall(Place(devpts, w + n0, n, &dw));
    PetscCall(MatFMMSetSources(A, n, dxy, dnrm, dw));
    if (targets) {
      PetscCall(Place(devpts, t + 2 * mt0, 2 * m, &dt));
      PetscCall(MatFMMSetTargets(A, m, dt));
      PetscCall(Unplace(devpts, dt));
    }
    PetscCall(Unplace(devpts, dxy));
    PetscCall(Unplace(devpts, dnrm));
    PetscCall(Unplace(devpts, dw));
    PetscCall(MatFMMSetKernel(A, MATFMM_KERNEL_COMBINED, 0.7, -1.3));
    PetscCall(MatSetFromOptions(A));
    PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
    PetscCall(MatCreateVecs(A, &x, &y));
    PetscCall(VecDuplicate(y, &yref));
    for (int dens = 0; dens < 2; dens++) {
      /* densities 1 + (j mod 7)/7, in global order; the second with weighted sum 0 */
      PetscScalar *xw;
      PetscReal    sw = 0, sx = 0;
      PetscCall(PetscMalloc1(N, &xw));
      for (PetscInt j = 0; j < N; j++) xw[j] = 1 + (PetscReal)(j % 7) / 7;
      if (dens) {
        for (PetscInt j = 0; j < N; j++) {
          sx += w[j] * xw[j];
          sw += w[j];
        }
        for (PetscInt j = 0; j < N; j++) xw[j] -= sx / sw;
      }
      PetscCall(VecGetArrayWrite(x, (PetscScalar **)&xa));
      PetscCall(PetscArraycpy((PetscScalar *)xa, xw + n0, n));
      PetscCall(VecRestoreArrayWrite(x, (PetscScalar **)&xa));
      PetscCall(VecGetArrayWrite(yref, &ya));
      PetscCall(ExactProduct(N, xy, nrm, w, xw, m, targets ? t + 2 * mt0 : xy + 2 * n0, 0.7, -1.3, ya));
      PetscCall(VecRestoreArrayWrite(yref, &ya));
      PetscCall(PetscFree(xw));
      for (int method = 0; method < 2; method++) {
        PetscReal err;
        PetscCall(MatFMMSetMethod(A, method ? MATFMM_METHOD_DIRECT : MATFMM_METHOD_FMM));
        PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
        PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
        PetscCall(MatMult(A, x, y));
        PetscCall(ScaledRelDiff(y, yref, &err));
        PetscCall(PetscSNPrintf(what, sizeof(what), "points %g (u + %g), %s densities, %s: relative error", (double)s, (double)off, dens ? "zero-sum" : "positive", method ? "direct" : "FMM"));
        PetscCall(TestCheck(what, err, method ? 1e-12 : tol, verbose, &nfail));
      }
    }
    PetscCall(VecDestroy(&x));
    PetscCall(VecDestroy(&y));
    PetscCall(VecDestroy(&yref));
    PetscCall(MatDestroy(&A));
    PetscCall(PetscFree4(xy, nrm, w, t));
  }
  PetscCheck(!nfail, PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED, "%" PetscInt_FMT " checks failed", nfail);
  PetscCall(PetscFinalize());
  return 0;
}

/*TEST
  test:
    suffix: sources
    args: -malloc_dump
  test:
    suffix: targets
    nsize: 2
    args: -targets -malloc_dump
    output_file: output/scales_sources.out
  test:
    suffix: cuda
    requires: cuda
    args: -mat_fmm_device cuda -malloc_dump
    output_file: output/scales_sources.out
  test:
    suffix: cuda_targets
    requires: cuda
    nsize: 2
    args: -mat_fmm_device cuda -targets
    output_file: output/scales_sources.out
  test:
    suffix: cuda_device_points
    requires: cuda petsc_cuda
    args: -mat_fmm_device cuda -device_points -malloc_dump
    output_file: output/scales_sources.out
  test:
    suffix: cuda_device_points_targets
    requires: cuda petsc_cuda
    args: -mat_fmm_device cuda -device_points -targets
    output_file: output/scales_sources.out
TEST*/
