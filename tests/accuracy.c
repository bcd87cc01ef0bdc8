static char help[] = "Accuracy of the whole MATFMM product against the exact sum, computed here.\n\
  -n <N>                               number of points, targets = sources (default 20000)\n\
  -geometry <square,curve,clusters,blob,pair,graded,line> uniform in the unit square, a closed star-shaped\n\
                                       curve, 16 tight clusters, 99%% in a Gaussian blob and 1%% uniform, two\n\
                                       unit squares 1e6 apart, graded toward a corner (scales 2^-k, k <= 40),\n\
                                       or on a line segment\n\
  -cluster_radius <r>                  radius of the clusters, the blob's standard deviation (default 1e-6)\n\
  -kernel <single,double,combined>     the operator (combined: 0.7 D - 1.3 S)\n\
  -mat_fmm_eps <eps>                   the tolerance, also the required relative 2-norm error (default 1e-10)\n\
  -ps <p1,p2,...>                      expansion orders of the convergence study (default 4,8,16,24)\n\
  -factor <f>                          each order must cut the error by at least this factor (default 10)\n\
  -verbose                             print the errors (not for reference outputs)\n\n";

/*
  One exact product, summed here from the operator's definition (not by the
  library, whose -mat_fmm_method direct shares the FMM's charges and dipoles:
  a wrong coefficient would pass a comparison with it), then
   1. the FMM with the order chosen from the tolerance (-mat_fmm_eps, then
      MatFMMSetTolerance() 1e-4, 1e-6, 1e-8): relative 2-norm error <= eps;
   2. the FMM with p = 4, 8, 16, 24: the error falls strictly, by at least -factor per step.
  Errors are measured against the exact product of the operator, so only
  the multipole truncation is measured: the tree, the interaction lists, the
  near field and the operator's coefficients must be exact.
*/
#include <petscfmm.h>
#include "testutil.h"

typedef enum { GEOM_SQUARE, GEOM_CURVE, GEOM_CLUSTERS, GEOM_BLOB, GEOM_PAIR, GEOM_GRADED, GEOM_LINE } Geometry;
static const char *const Geometries[] = {"square", "curve", "clusters", "blob", "pair", "graded", "line", "Geometry", "GEOM_", NULL};

static PetscErrorCode MakePoints(Geometry g, PetscInt N, PetscReal crad, PetscReal *xy, PetscReal *nrm, PetscReal *w)
{
  PetscRandom r;

  PetscFunctionBeginUser;
  PetscCall(TestRandomCreate(PETSC_COMM_SELF, 1234, &r));
  for (PetscInt i = 0; i < N; i++) {
    PetscReal a, b, c;
    PetscCall(PetscRandomGetValueReal(r, &a));
    PetscCall(PetscRandomGetValueReal(r, &b));
    PetscCall(PetscRandomGetValueReal(r, &c));
    /* random unit normals and weights unless the curve defines them */
    nrm[2 * i]     = PetscCosReal(2 * PETSC_PI * c);
    nrm[2 * i + 1] = PetscSinReal(2 * PETSC_PI * c);
    w[i]           = (0.5 + c) / N;
    switch (g) {
    case GEOM_SQUARE:
      xy[2 * i]     = a;
      xy[2 * i + 1] = b;
      break;
    case GEOM_CURVE: /* star r(t) = 1 + 0.3 cos 5t, trapezoid rule in t */
      TestStarCurvePoint(i, N, &xy[2 * i], &nrm[2 * i], &w[i]);
      break;
    case GEOM_CLUSTERS: { /* 16 clusters of radius crad, 1/16 of the points in one of them and 1/4 spread uniformly */
      if (i % 4 == 3) {
        xy[2 * i]     = a;
        xy[2 * i + 1] = b;
      } else TestClusterPoint((i % 5 == 0) ? 0 : i % 16, crad, a, b, &xy[2 * i]);
    } break;
    case GEOM_BLOB: { /* 99% in a Gaussian blob of standard deviation crad about (0.3, 0.7) (Box-Muller), 1% uniform: the
                         spread leaves next to the blob are walked point by point (src/fmm/walk.c) */
      const PetscReal rr = crad * PetscSqrtReal(-2 * PetscLogReal(PetscMax(a, PETSC_MIN_REAL)));
      xy[2 * i]          = i % 100 ? 0.3 + rr * PetscCosReal(2 * PETSC_PI * b) : a;
      xy[2 * i + 1]      = i % 100 ? 0.7 + rr * PetscSinReal(2 * PETSC_PI * b) : b;
    } break;
    case GEOM_PAIR: /* two unit squares 1e6 apart: the tree must cut the gap */
      xy[2 * i]     = (i % 2) * 1e6 + a;
      xy[2 * i + 1] = b;
      break;
    case GEOM_GRADED: { /* as a mesh graded toward a corner: point i uniform in [0, 2^-k]^2, k = i mod 41 */
      const PetscReal h = PetscPowRealInt(0.5, i % 41);
      xy[2 * i]         = h * a;
      xy[2 * i + 1]     = h * b;
    } break;
    case GEOM_LINE: /* on the segment from (0, 0.25) to (1, 0.75): every box is flat */
      xy[2 * i]     = a;
      xy[2 * i + 1] = 0.25 + 0.5 * a;
      break;
    }
  }
  PetscCall(PetscRandomDestroy(&r));
  PetscFunctionReturn(0);
}

/* y = (alpha D + beta S) x with targets = sources, from the definitions of
   MatFMMSetKernel():
     (S x)_i = -(1/2pi) sum_j log|z_i - z_j| w_j x_j
     (D x)_i =  (1/2pi) sum_j n_j.(z_i - z_j)/|z_i - z_j|^2 w_j x_j
   summed over j with z_j != z_i */
static PetscErrorCode ExactProduct(PetscInt N, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, PetscReal alpha, PetscReal beta, Vec x, Vec y)
{
  const PetscScalar *xa;
  PetscScalar       *ya;

  PetscFunctionBeginUser;
  PetscCall(VecGetArrayRead(x, &xa));
  PetscCall(VecGetArrayWrite(y, &ya));
#pragma omp parallel for schedule(static)
  for (PetscInt i = 0; i < N; i++) {
    PetscReal sl = 0, dl = 0; /* sum_j log|r| w_j x_j, sum_j n_j.r/|r|^2 w_j x_j */
    for (PetscInt j = 0; j < N; j++) {
      const PetscReal rx = xy[2 * i] - xy[2 * j], ry = xy[2 * i + 1] - xy[2 * j + 1], r2 = rx * rx + ry * ry, wx = w[j] * xa[j];
      if (r2 == 0) continue;
      sl += PetscLogReal(PetscSqrtReal(r2)) * wx;
      dl += (nrm[2 * j] * rx + nrm[2 * j + 1] * ry) / r2 * wx;
    }
    ya[i] = (alpha * dl - beta * sl) / (2 * PETSC_PI);
  }
  PetscCall(VecRestoreArrayWrite(y, &ya));
  PetscCall(VecRestoreArrayRead(x, &xa));
  PetscFunctionReturn(0);
}

static PetscErrorCode Create(PetscInt N, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, MatFMMKernel k, Mat *A)
{
  PetscFunctionBeginUser;
  PetscCall(MatCreate(PETSC_COMM_WORLD, A));
  PetscCall(MatSetSizes(*A, N, N, N, N));
  PetscCall(MatSetType(*A, MATFMM));
  PetscCall(MatFMMSetSources(*A, N, xy, nrm, w));
  PetscCall(MatFMMSetKernel(*A, k, 0.7, -1.3));
  PetscCall(MatSetFromOptions(*A));
  PetscCall(MatAssemblyBegin(*A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* *err = |A x - yref| / |yref| */
static PetscErrorCode RelErr(Mat A, Vec x, Vec yref, PetscReal *err)
{
  Vec y;

  PetscFunctionBeginUser;
  PetscCall(VecDuplicate(yref, &y));
  PetscCall(MatMult(A, x, y));
  PetscCall(TestRelDiff(y, yref, yref, err));
  PetscCall(VecDestroy(&y));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscInt     N = 20000, ps[16] = {4, 8, 16, 24}, np = 16, nfail = 0, p;
  Geometry     g      = GEOM_SQUARE;
  MatFMMKernel kernel = MATFMM_KERNEL_SINGLE;
  PetscReal    crad = 1e-6, tol = 1e-10, factor = 10, theta = 0.5, *xy, *nrm, *w, err, errs[16], epss[3] = {1e-4, 1e-6, 1e-8};
  PetscBool    verbose = PETSC_FALSE, set;
  Mat          A;
  Vec          x, yref;
  PetscRandom  rnd;
  char         desc[128];

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "accuracy test options", NULL);
  PetscCall(PetscOptionsInt("-n", "Number of points", NULL, N, &N, NULL));
  PetscCall(PetscOptionsEnum("-geometry", "Point distribution", NULL, Geometries, (PetscEnum)g, (PetscEnum *)&g, NULL));
  PetscCall(PetscOptionsReal("-cluster_radius", "Radius of the clusters", NULL, crad, &crad, NULL));
  PetscCall(PetscOptionsEnum("-kernel", "Kernel", NULL, MatFMMKernels, (PetscEnum)kernel, (PetscEnum *)&kernel, NULL));
  PetscCall(PetscOptionsReal("-mat_fmm_eps", "Tolerance (read here: the required relative error)", NULL, tol, &tol, NULL));
  PetscCall(PetscOptionsIntArray("-ps", "Expansion orders", NULL, ps, &np, &set));
  if (!set) np = 4;
  PetscCall(PetscOptionsReal("-factor", "Error reduction per order step", NULL, factor, &factor, NULL));
  PetscCall(PetscOptionsReal("-mat_fmm_theta", "theta (read here for the error model)", NULL, theta, &theta, NULL));
  PetscCall(PetscOptionsBool("-verbose", "Print errors", NULL, verbose, &verbose, NULL));
  PetscOptionsEnd();
  PetscCall(PetscSNPrintf(desc, sizeof(desc), "N=%" PetscInt_FMT " %s%s %s", N, Geometries[g], g == GEOM_CLUSTERS ? " (tight)" : (g == GEOM_BLOB ? " (and outliers)" : ""), MatFMMKernels[kernel]));

  PetscCall(PetscMalloc3(2 * N, &xy, 2 * N, &nrm, N, &w));
  PetscCall(MakePoints(g, N, crad, xy, nrm, w));

  /* 1. the order chosen from the tolerance: the options' -mat_fmm_eps, then coarser ones */
  PetscCall(Create(N, xy, nrm, w, kernel, &A));
  /* the reference: the exact sum of the operator A has, alpha D + beta S */
  PetscCall(MatCreateVecs(A, &x, &yref));
  PetscCall(TestRandomCreate(PETSC_COMM_WORLD, 99, &rnd));
  PetscCall(VecSetRandom(x, rnd));
  PetscCall(VecShift(x, -0.5));
  {
    const PetscReal alpha = kernel == MATFMM_KERNEL_SINGLE ? 0.0 : (kernel == MATFMM_KERNEL_DOUBLE ? 1.0 : 0.7);
    const PetscReal beta  = kernel == MATFMM_KERNEL_DOUBLE ? 0.0 : (kernel == MATFMM_KERNEL_SINGLE ? 1.0 : -1.3);
    PetscCall(ExactProduct(N, xy, nrm, w, alpha, beta, x, yref));
  }
  for (PetscInt k = 0; k < 4; k++) {
    PetscReal eps = k ? epss[k - 1] : tol;
    if (k && eps < tol) continue; /* coarser ones only (a large theta cannot reach a finer one: refused) */
    if (k) {
      PetscCall(MatFMMSetTolerance(A, eps));
      PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
      PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
    }
    PetscCall(MatFMMGetExpansionOrder(A, &p));
    PetscCall(RelErr(A, x, yref, &err));
    if (k) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s: MatFMMSetTolerance(%g): relative error <= %g %s\n", desc, (double)eps, (double)eps, err <= eps ? "ok" : "FAILED"));
    else PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s: -mat_fmm_eps: relative error <= %g %s\n", desc, (double)eps, err <= eps ? "ok" : "FAILED"));
    if (verbose || !(err <= eps)) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "    p = %" PetscInt_FMT ": relative error %.3e\n", p, (double)err));
    if (!(err <= eps)) nfail++;
  }

  /* 2. convergence in p */
  for (PetscInt k = 0; k < np; k++) {
    PetscCall(MatFMMSetExpansionOrder(A, ps[k]));
    PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
    PetscCall(RelErr(A, x, yref, &errs[k]));
    if (verbose) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "    p = %2" PetscInt_FMT ": relative error %.3e (error / theta^p = %.3g)\n", ps[k], (double)errs[k], (double)(errs[k] / PetscPowRealInt(theta, ps[k]))));
    if (k) {
      PetscBool ok = (errs[k] * factor <= errs[k - 1]) ? PETSC_TRUE : PETSC_FALSE;
      PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s: p=%2" PetscInt_FMT " -> %2" PetscInt_FMT ": error falls by a factor >= %g %s\n", desc, ps[k - 1], ps[k], (double)factor, ok ? "ok" : "FAILED"));
      if (!ok) {
        nfail++;
        PetscCall(PetscPrintf(PETSC_COMM_WORLD, "    errors %.3e -> %.3e\n", (double)errs[k - 1], (double)errs[k]));
      }
    }
  }
  PetscCheck(!nfail, PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED, "%" PetscInt_FMT " accuracy checks failed", nfail);

  PetscCall(PetscRandomDestroy(&rnd));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&yref));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscCall(PetscFinalize());
  return 0;
}

/*TEST
  test:
    suffix: square
    args: -geometry square -kernel single -mat_fmm_eps 1e-10 -malloc_dump
  test:
    suffix: curve
    args: -geometry curve -kernel double -mat_fmm_eps 1e-10 -malloc_dump
  test:
    suffix: clusters
    args: -geometry clusters -kernel combined -mat_fmm_eps 1e-10 -malloc_dump
  test:
    suffix: blob
    args: -geometry blob -kernel combined -mat_fmm_eps 1e-10 -malloc_dump
  test:
    suffix: blob_single
    args: -geometry blob -cluster_radius 1e-9 -kernel single -mat_fmm_eps 1e-10 -ps 8,16
  test:
    suffix: blob_walked
    args: -geometry blob -kernel double -mat_fmm_eps 1e-6 -ps 8,16 -mat_view -mat_fmm_device cpu -mat_fmm_ct 32
    filter: grep walked
  test:
    suffix: blob_walked_cuda
    args: -geometry blob -kernel double -mat_fmm_eps 1e-6 -ps 8,16 -mat_view -mat_fmm_device cuda -mat_fmm_cuda_walks -mat_fmm_ct 32
    filter: grep walked
    output_file: output/accuracy_blob_walked.out
    requires: cuda
  test:
    suffix: blob_wide
    args: -geometry blob -cluster_radius 1e-3 -kernel combined -mat_fmm_eps 1e-10 -ps 8,16
  test:
    suffix: blob_tight
    args: -geometry blob -cluster_radius 1e-12 -kernel single -mat_fmm_eps 1e-10 -ps 8,16
  test:
    suffix: pair
    args: -geometry pair -kernel combined -mat_fmm_eps 1e-10 -ps 8,16
  test:
    suffix: graded
    args: -geometry graded -kernel double -mat_fmm_eps 1e-10 -ps 8,16
  test:
    suffix: line
    args: -geometry line -kernel combined -mat_fmm_eps 1e-10 -ps 8,16
  test:
    suffix: theta_small
    args: -geometry square -kernel single -mat_fmm_theta 0.3 -mat_fmm_eps 1e-10 -ps 4,8,16
  test:
    suffix: theta_large
    args: -geometry curve -kernel double -mat_fmm_theta 0.8 -mat_fmm_eps 1e-6 -ps 16,32 -factor 4
  test:
    suffix: blob_wide_cuda
    args: -geometry blob -cluster_radius 1e-3 -kernel combined -mat_fmm_eps 1e-10 -ps 8,16 -mat_fmm_device cuda
    output_file: output/accuracy_blob_wide.out
    requires: cuda
  test:
    suffix: blob_tight_cuda
    args: -geometry blob -cluster_radius 1e-12 -kernel single -mat_fmm_eps 1e-10 -ps 8,16 -mat_fmm_device cuda
    output_file: output/accuracy_blob_tight.out
    requires: cuda
  test:
    suffix: line_cuda
    args: -geometry line -kernel combined -mat_fmm_eps 1e-10 -ps 8,16 -mat_fmm_device cuda
    output_file: output/accuracy_line.out
    requires: cuda
  test:
    suffix: theta_large_cuda
    args: -geometry curve -kernel double -mat_fmm_theta 0.8 -mat_fmm_eps 1e-6 -ps 16,32 -factor 4 -mat_fmm_device cuda
    output_file: output/accuracy_theta_large.out
    requires: cuda
  test:
    suffix: graded_cuda
    args: -geometry graded -kernel double -mat_fmm_eps 1e-10 -ps 8,16 -mat_fmm_device cuda
    output_file: output/accuracy_graded.out
    requires: cuda
  test:
    suffix: pair_cuda
    args: -geometry pair -kernel combined -mat_fmm_eps 1e-10 -ps 8,16 -mat_fmm_device cuda
    output_file: output/accuracy_pair.out
    requires: cuda
  test:
    suffix: curve_median
    args: -geometry curve -kernel double -mat_fmm_eps 1e-10 -mat_fmm_tree_split median -malloc_dump
TEST*/
