static char help[] = "Applies a MATFMM to random densities and compares with exact summation.\n\
Sources are N points uniform in the unit square, on a closed curve (with normals\n\
and trapezoid weights), or in tight clusters; targets are the sources.\n\
  -n <N>                             number of points (default 10000)\n\
  -geometry <square,curve,clusters>  point distribution (default curve)\n\
  -check <bool>                      compare with -mat_fmm_method direct (default true)\n\
  -tol <tol>                         fail unless relerr <= tol (default: no test)\n\
  -tree_file <file>                  write the tree's leaves (the points of each leaf box) for a picture:\n\
                                     tutorials/plot_tree.py <file> tree.png\n\
  -renumber <bool>                   number each rank's points as its part of the distributed tree holds them\n\
                                     (MatFMMGetTreePartition()) and create the operator again (default false)\n\
Every -mat_fmm_ option applies (see -help).\n\n";

/*
  The smallest complete MATFMM program: create, set the geometry, let the
  options database tune it, assemble (builds the tree), multiply.
  Output ends with one line
    summary: N=<N> M=<M> p=<p> ct=<CT> levels=<L> setup_s=<t> mult_s=<t> relerr=<e>

  -tree_file <file> writes the leaf boxes of the tree (MatFMMGetTreeLeaves()):
  a header line, then one line "leaf x y" per point in tree order, for
  tutorials/plot_tree.py, which draws each leaf's bounding box over its points.

  -renumber, on several ranks with -mat_fmm_distribution tree: a product moves
  each density from the rank that holds it to the rank whose part of the tree
  holds its point, and the potential back. A program free to number its
  unknowns asks the assembled operator which points each rank's part holds
  (MatFMMGetTreePartition()), gives each rank those points in that order, and
  creates the operator again: the same tree, and nothing moves (-mat_view
  prints the moves of each rank). Here every rank holds all N points, so the
  renumbering is a gather; a program whose data is distributed would move it
  once with a VecScatter from the IS.
*/
#include <petscfmm.h>

typedef enum { GEOM_SQUARE, GEOM_CURVE, GEOM_CLUSTERS } Geometry;
static const char *const Geometries[] = {"square", "curve", "clusters", "Geometry", "GEOM_", NULL};

/* all N points on every rank (same random stream), so any rank count sees the same problem */
static PetscErrorCode MakePoints(Geometry g, PetscInt N, PetscReal *xy, PetscReal *nrm, PetscReal *w)
{
  PetscRandom r;

  PetscFunctionBegin;
  PetscCall(PetscRandomCreate(PETSC_COMM_SELF, &r));
  PetscCall(PetscRandomSetSeed(r, 42));
  PetscCall(PetscRandomSeed(r));
  for (PetscInt i = 0; i < N; i++) {
    PetscReal a, b;
    PetscCall(PetscRandomGetValueReal(r, &a));
    PetscCall(PetscRandomGetValueReal(r, &b));
    nrm[2 * i] = 1.0;
    nrm[2 * i + 1] = 0.0;
    w[i]           = 1.0 / N;
    switch (g) {
    case GEOM_SQUARE:
      xy[2 * i]     = a;
      xy[2 * i + 1] = b;
      break;
    case GEOM_CURVE: { /* star r(t) = 1 + 0.3 cos 5t, trapezoid rule in t */
      PetscReal t = 2 * PETSC_PI * i / N, rr = 1 + 0.3 * PetscCosReal(5 * t), dr = -1.5 * PetscSinReal(5 * t);
      PetscReal dx = dr * PetscCosReal(t) - rr * PetscSinReal(t), dy = dr * PetscSinReal(t) + rr * PetscCosReal(t), sp = PetscSqrtReal(dx * dx + dy * dy);
      xy[2 * i]      = rr * PetscCosReal(t);
      xy[2 * i + 1]  = rr * PetscSinReal(t);
      nrm[2 * i]     = dy / sp;
      nrm[2 * i + 1] = -dx / sp;
      w[i]           = sp * 2 * PETSC_PI / N;
    } break;
    case GEOM_CLUSTERS: { /* 16 clusters of radius ~1e-3 at random centres */
      PetscInt  c  = i % 16;
      PetscReal cx = 0.5 + 0.45 * PetscCosReal(2.4 * c + 0.3 * c * c), cy = 0.5 + 0.45 * PetscSinReal(1.7 * c + 0.2 * c * c);
      PetscReal rad = 1e-3 * PetscSqrtReal(a), th = 2 * PETSC_PI * b;
      xy[2 * i]     = cx + rad * PetscCosReal(th);
      xy[2 * i + 1] = cy + rad * PetscSinReal(th);
    } break;
    }
  }
  PetscCall(PetscRandomDestroy(&r));
  PetscFunctionReturn(0);
}

static PetscErrorCode CreateOperator(MPI_Comm comm, PetscInt n, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, MatFMMMethod method, Mat *A)
{
  PetscFunctionBegin;
  PetscCall(MatCreate(comm, A));
  PetscCall(MatSetSizes(*A, n, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(*A, MATFMM));
  PetscCall(MatFMMSetSources(*A, n, xy, nrm, w));
  PetscCall(MatSetFromOptions(*A));
  PetscCall(MatFMMSetMethod(*A, method)); /* after the options: the reference is always exact */
  if (method == MATFMM_METHOD_DIRECT) PetscCall(MatFMMSetDistribution(*A, MATFMM_DISTRIBUTION_AUTO)); /* it sums over all sources */
  PetscCall(MatAssemblyBegin(*A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* the tree's leaves, for a picture: "leaf x y" per source in tree order (rank 0 writes: every rank holds all sources) */
static PetscErrorCode WriteTree(Mat A, const char *file, Geometry g, const PetscReal *xy)
{
  PetscInt        nleaves, L, p, ct;
  const PetscInt *off, *src;
  PetscViewer     v;

  PetscFunctionBegin;
  PetscCall(MatFMMGetTreeLeaves(A, &nleaves, &off, &src, NULL, NULL));
  PetscCall(MatFMMGetTreeInfo(A, &L, NULL, NULL, NULL));
  PetscCall(MatFMMGetExpansionOrder(A, &p));
  PetscCall(MatFMMGetClusteringThreshold(A, &ct));
  PetscCall(PetscViewerASCIIOpen(PETSC_COMM_WORLD, file, &v));
  PetscCall(PetscViewerASCIIPrintf(v, "# petscfmm tree: geometry=%s N=%" PetscInt_FMT " ct=%" PetscInt_FMT " p=%" PetscInt_FMT " levels=%" PetscInt_FMT " leaves=%" PetscInt_FMT "\n", Geometries[g], off[nleaves], ct, p, L, nleaves));
  for (PetscInt b = 0; b < nleaves; b++)
    for (PetscInt k = off[b]; k < off[b + 1]; k++) PetscCall(PetscViewerASCIIPrintf(v, "%" PetscInt_FMT " %.10g %.10g\n", b, (double)xy[2 * src[k]], (double)xy[2 * src[k] + 1]));
  PetscCall(PetscViewerDestroy(&v));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "tree: %" PetscInt_FMT " leaves on %" PetscInt_FMT " levels written to %s\n", nleaves, L, file));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscInt       N = 10000, n, rstart, p, L;
  Geometry       g     = GEOM_CURVE;
  PetscBool      check = PETSC_TRUE, renumber = PETSC_FALSE;
  char           treefile[PETSC_MAX_PATH_LEN] = "";
  PetscReal     *xy, *nrm, *w, *lxy = NULL, *lnrm = NULL, *lw = NULL, relerr = -1, nrm2, tol = -1;
  PetscLogDouble t0, t1, t2, tsetup;
  Mat            A, B;
  Vec            x, y, yref;
  PetscRandom    rnd;
  PetscMPIInt    rank;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "ex2 options", NULL);
  PetscCall(PetscOptionsInt("-n", "Number of points", NULL, N, &N, NULL));
  PetscCall(PetscOptionsEnum("-geometry", "Point distribution", NULL, Geometries, (PetscEnum)g, (PetscEnum *)&g, NULL));
  PetscCall(PetscOptionsBool("-check", "Compare with exact summation", NULL, check, &check, NULL));
  PetscCall(PetscOptionsReal("-tol", "Fail unless the relative error is at most this", NULL, tol, &tol, NULL));
  PetscCall(PetscOptionsString("-tree_file", "Write the tree's leaf boxes to this file (tutorials/plot_tree.py draws them)", NULL, treefile, treefile, sizeof(treefile), NULL));
  PetscCall(PetscOptionsBool("-renumber", "Number each rank's points as its part of the distributed tree holds them (MatFMMGetTreePartition())", NULL, renumber, &renumber, NULL));
  PetscOptionsEnd();
  PetscCheck(N >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-n %" PetscInt_FMT " must be >= 1", N);

  PetscCall(PetscMalloc3(2 * N, &xy, 2 * N, &nrm, N, &w));
  PetscCall(MakePoints(g, N, xy, nrm, w));
  n = PETSC_DECIDE;
  PetscCall(PetscSplitOwnership(PETSC_COMM_WORLD, &n, &N));
  PetscCallMPI(MPI_Scan(&n, &rstart, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  rstart -= n;

  lxy  = xy + 2 * rstart;
  lnrm = nrm + 2 * rstart;
  lw   = w + rstart;
  PetscCall(PetscTime(&t0));
  PetscCall(CreateOperator(PETSC_COMM_WORLD, n, lxy, lnrm, lw, MATFMM_METHOD_FMM, &A));
  if (renumber) { /* this rank's points: those its part of the tree holds, in the tree's order */
    IS              is;
    const PetscInt *ix;
    PetscCall(MatFMMGetTreePartition(A, &is, NULL));
    PetscCall(MatDestroy(&A));
    PetscCall(ISGetLocalSize(is, &n));
    PetscCall(ISGetIndices(is, &ix));
    PetscCall(PetscMalloc3(2 * n, &lxy, 2 * n, &lnrm, n, &lw));
    for (PetscInt i = 0; i < n; i++) {
      lxy[2 * i]      = xy[2 * ix[i]];
      lxy[2 * i + 1]  = xy[2 * ix[i] + 1];
      lnrm[2 * i]     = nrm[2 * ix[i]];
      lnrm[2 * i + 1] = nrm[2 * ix[i] + 1];
      lw[i]           = w[ix[i]];
    }
    PetscCall(ISRestoreIndices(is, &ix));
    PetscCall(ISDestroy(&is));
    PetscCall(PetscTime(&t0));
    PetscCall(CreateOperator(PETSC_COMM_WORLD, n, lxy, lnrm, lw, MATFMM_METHOD_FMM, &A));
  }
  PetscCall(PetscTime(&t1));
  tsetup = t1 - t0;
  if (treefile[0]) PetscCall(WriteTree(A, treefile, g, xy));

  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(PetscRandomCreate(PETSC_COMM_WORLD, &rnd));
  PetscCall(PetscRandomSetFromOptions(rnd));
  PetscCall(VecSetRandom(x, rnd));
  PetscCall(MatMult(A, x, y)); /* warm-up: first touch of the work arrays */
  PetscCall(PetscTime(&t1));
  PetscCall(MatMult(A, x, y));
  PetscCall(PetscTime(&t2));

  if (check) {
    PetscCall(CreateOperator(PETSC_COMM_WORLD, n, lxy, lnrm, lw, MATFMM_METHOD_DIRECT, &B));
    PetscCall(VecDuplicate(y, &yref));
    PetscCall(MatMult(B, x, yref));
    PetscCall(VecNorm(yref, NORM_2, &nrm2));
    PetscCall(VecAXPY(yref, -1.0, y));
    PetscCall(VecNorm(yref, NORM_2, &relerr));
    relerr /= nrm2;
    PetscCall(VecDestroy(&yref));
    PetscCall(MatDestroy(&B));
  }
  PetscCall(MatFMMGetExpansionOrder(A, &p));
  PetscCall(MatFMMGetTreeInfo(A, &L, NULL, NULL, NULL));
  {
    PetscInt ct;
    PetscCall(MatFMMGetClusteringThreshold(A, &ct));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "summary: N=%" PetscInt_FMT " M=%" PetscInt_FMT " p=%" PetscInt_FMT " ct=%" PetscInt_FMT " levels=%" PetscInt_FMT " setup_s=%.4f mult_s=%.4f relerr=%.3e\n", N, N, p, ct, L, (double)tsetup, (double)(t2 - t1), (double)relerr));
  }
  if (tol > 0) {
    PetscCheck(check && relerr <= tol, PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED, "relative error %g exceeds -tol %g", (double)relerr, (double)tol);
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "check: relerr <= %g\n", (double)tol));
  }
  PetscCall(PetscRandomDestroy(&rnd));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
  if (renumber) PetscCall(PetscFree3(lxy, lnrm, lw));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscCall(PetscFinalize());
  return 0;
}

/*TEST
  test:
    suffix: curve
    args: -n 4000 -geometry curve -mat_fmm_eps 1e-10 -tol 1e-10
    filter: grep -v summary
  test:
    suffix: tree
    nsize: 2
    args: -n 2000 -geometry curve -check 0 -mat_fmm_device cpu -mat_fmm_distribution replicated -tree_file tests/results/ex2_tree.txt
    filter: grep -v summary; head -n 1 tests/results/ex2_tree.txt; wc -l < tests/results/ex2_tree.txt
  test:
    suffix: view
    nsize: 2
    args: -n 3000 -geometry square -mat_fmm_ct 20 -mat_fmm_p 12 -mat_view ::ascii_info -check 0 -mat_fmm_device cpu
    filter: grep -v summary
  test:
    suffix: renumber
    nsize: 3
    args: -n 4000 -geometry curve -renumber -mat_fmm_device cpu -mat_fmm_distribution tree -mat_fmm_eps 1e-10 -tol 1e-9 -mat_view ::ascii_info
    filter: sed -n -e 's/.*; moves/moves/p' -e '/^check:/p'
TEST*/
