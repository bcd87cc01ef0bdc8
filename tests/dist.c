static char help[] = "MATFMM with the tree shared out among the ranks (-mat_fmm_distribution tree).\n\
  -n <N>, -m <M>   sources and separate targets (default 12000, 5000)\n\
  -device <d>      cpu (default) or cuda: the backend of every product\n\
  -median_tol <t>  tolerance of tree against replicated with median splits (default 1e-13)\n\
  -verbose         print the measured differences (not for reference outputs)\n\n";

/*
  Each case builds the same operator with the distributed tree and checks it
  against exact sums (-mat_fmm_method direct, which replicates the sources)
  on the same ranks: relative 2-norm difference <= 1e-9 (eps is 1e-10; most
  products measure 1e-13 to 1e-12, the double layer on the closed curve,
  whose product is small against its terms, 1e-10 on one rank too).  With
  -mat_fmm_tree_split median the distributed tree is the one-rank tree (the
  top cuts are the medians one rank makes), so the product also equals the
  replicated one to rounding: <= 1e-13; so do the diagonal terms (MatShift,
  MatDiagonalSet, MatScale, MatMultAdd), and MatGetDiagonal to 1e-15.
  MatFMMGetTreePartition() names each point once; renumbered by it, the
  points stay on their ranks and the product is the same (1e-9).  With
  -device cuda on 2 ranks or more, the tree whose top cuts and subtrees the
  GPUs make holds each rank's points as the host's tree
  (-mat_fmm_cuda_tree cpu) does, and its product agrees to rounding, 1e-13
  (the same boxes; only the order of the points within a leaf differs:
  measured 8e-15 and 9e-16).  Caller layouts are uneven on purpose: rank 0 holds 90% of the
  points, the last rank none (from 3 ranks), and the targets (when separate)
  are split the other way.  Geometries: a closed curve, 16 clusters with 2%
  uniform outliers, uniform points in the square; kernels: single layer,
  double layer, and the combined kernel with weights.  Run on 1 to 4 ranks:
  the outputs are identical.
*/
#include <petscfmm.h>
#include "testutil.h"

static PetscBool    verbose = PETSC_FALSE;
static const char  *prefix  = NULL; /* CreateOn(): the options prefix of the matrix (NULL: none; median: med_) */
static MatFMMDevice device  = MATFMM_DEVICE_CPU;
static PetscReal    medtol  = 1e-13;
static PetscInt     nfail   = 0;
static PetscMPIInt  rank, size;

/* point g of n of a geometry (normal and weight for the layers) */
static void Point(const char *geom, PetscInt g, PetscInt n, PetscReal xy[2], PetscReal nrm[2], PetscReal *w)
{
  if (geom[0] == 'c' && geom[1] == 'u') TestStarCurvePoint(g, n, xy, nrm, w);
  else {
    PetscReal a = PetscSinReal(12.9898 * g) * 0.5 + 0.5, b = PetscSinReal(78.233 * g) * 0.5 + 0.5;
    if (geom[0] == 's' || g % 50 == 0) { /* uniform (and the clusters' outliers) */
      xy[0] = a;
      xy[1] = b;
    } else TestClusterPoint(g % 16, 1e-3, a, b, xy);
    nrm[0] = PetscCosReal(0.7 * g);
    nrm[1] = PetscSinReal(0.7 * g);
    *w     = (1.0 + 0.5 * PetscSinReal(0.3 * g)) / n;
  }
}

/* this rank's share of n: 90% on rank 0, none on the last rank from 3 ranks, the rest evenly (reverse: the other way round) */
static void Share(PetscInt n, PetscBool reverse, PetscInt *start, PetscInt *len)
{
  PetscInt s = 0;
  for (PetscMPIInt q = 0; q < size; q++) {
    PetscMPIInt r = reverse ? size - 1 - q : q;
    PetscInt    l;
    if (size == 1) l = n;
    else if (r == 0) l = (9 * n) / 10;
    else if (size > 2 && r == size - 1) l = 0;
    else l = (n - (9 * n) / 10) / (size > 2 ? size - 2 : 1);
    if (q == size - 1) l = n - s;
    if (q == rank) {
      *start = s;
      *len   = l;
    }
    s += l;
  }
}

/* the operator on PETSC_COMM_WORLD, assembled */
/* the points of this rank: by Share(), or those of global numbers sidx, tidx (not NULL) */
static PetscErrorCode CreateOn(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M, MatFMMMethod method, MatFMMDistribution dist, PetscBool median, IS sidx, IS tidx, Mat *Ap)
{
  Mat             A;
  PetscInt        s0 = 0, n = 0, t0 = 0, m = 0;
  const PetscInt *si = NULL, *ti = NULL;
  PetscReal      *xy, *nrm, *w, *txy = NULL;

  PetscFunctionBeginUser;
  Share(N, PETSC_FALSE, &s0, &n);
  if (M) Share(M, PETSC_TRUE, &t0, &m);
  if (sidx) {
    PetscCall(ISGetLocalSize(sidx, &n));
    PetscCall(ISGetIndices(sidx, &si));
  }
  if (tidx) {
    PetscCall(ISGetLocalSize(tidx, &m));
    PetscCall(ISGetIndices(tidx, &ti));
  }
  PetscCall(PetscMalloc3(2 * n, &xy, 2 * n, &nrm, n, &w));
  for (PetscInt i = 0; i < n; i++) Point(geom, si ? si[i] : s0 + i, N, &xy[2 * i], &nrm[2 * i], &w[i]);
  if (M) {
    PetscCall(PetscMalloc1(2 * m, &txy));
    for (PetscInt i = 0; i < m; i++) { /* targets among and around the sources */
      PetscReal      d[2], v;
      const PetscInt g = ti ? ti[i] : t0 + i;
      Point(geom, 7 * g + 3, 7 * M, &txy[2 * i], d, &v);
      txy[2 * i] += 0.01 * PetscSinReal(1.3 * g);
    }
  }
  if (si) PetscCall(ISRestoreIndices(sidx, &si));
  if (ti) PetscCall(ISRestoreIndices(tidx, &ti));
  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, M ? m : n, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(A, MATFMM));
  PetscCall(MatFMMSetSources(A, n, xy, kernel == MATFMM_KERNEL_SINGLE ? NULL : nrm, kernel == MATFMM_KERNEL_COMBINED ? w : NULL));
  if (M) PetscCall(MatFMMSetTargets(A, m, txy));
  PetscCall(MatFMMSetKernel(A, kernel, 0.7, -1.3));
  PetscCall(MatSetFromOptions(A));
  PetscCall(MatFMMSetMethod(A, method));
  PetscCall(MatFMMSetDevice(A, device)); /* the CPU unless -device cuda (auto would take a GPU where there is one) */
  PetscCall(MatFMMSetDistribution(A, dist));
  if (median || prefix) PetscCall(PetscObjectSetOptionsPrefix((PetscObject)A, median ? "med_" : prefix)); /* -med_mat_fmm_tree_split median */
  if (median || prefix) PetscCall(MatSetFromOptions(A));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscCall(PetscFree(txy));
  *Ap = A;
  PetscFunctionReturn(0);
}

static PetscErrorCode Create(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M, MatFMMMethod method, MatFMMDistribution dist, PetscBool median, Mat *Ap)
{
  PetscFunctionBeginUser;
  PetscCall(CreateOn(geom, kernel, N, M, method, dist, median, NULL, NULL, Ap));
  PetscFunctionReturn(0);
}

/* x_j = cos(0.37 j) */
static PetscErrorCode FillX(Vec x)
{
  PetscInt     lo, hi;
  PetscScalar *xa;

  PetscFunctionBeginUser;
  PetscCall(VecGetOwnershipRange(x, &lo, &hi));
  PetscCall(VecGetArrayWrite(x, &xa));
  for (PetscInt j = lo; j < hi; j++) xa[j - lo] = PetscCosReal(0.37 * j);
  PetscCall(VecRestoreArrayWrite(x, &xa));
  PetscFunctionReturn(0);
}

/* y = K x */
/* y = A x, x by FillX() */
static PetscErrorCode MultOf(Mat A, Vec *y)
{
  Vec x;

  PetscFunctionBeginUser;
  PetscCall(MatCreateVecs(A, &x, y));
  PetscCall(FillX(x));
  PetscCall(MatMult(A, x, *y));
  PetscCall(VecDestroy(&x));
  PetscFunctionReturn(0);
}

static PetscErrorCode Product(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M, MatFMMMethod method, MatFMMDistribution dist, PetscBool median, Vec *y)
{
  Mat A;

  PetscFunctionBeginUser;
  PetscCall(Create(geom, kernel, N, M, method, dist, median, &A));
  PetscCall(MultOf(A, y));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
}

/* the diagonal terms on the tree: 2 (K - 1/2 I + diag(d)) x + v, and the diagonal, against the
   same on the replicated sources (median splits: the same tree) */
static PetscErrorCode OperatorCase(const char *geom, MatFMMKernel kernel, PetscInt N)
{
  Mat       A[2];
  Vec       x, v, d, y[2], g[2];
  PetscReal e;
  char      what[160];

  PetscFunctionBeginUser;
  for (int k = 0; k < 2; k++) {
    PetscCall(Create(geom, kernel, N, 0, MATFMM_METHOD_FMM, k ? MATFMM_DISTRIBUTION_REPLICATED : MATFMM_DISTRIBUTION_TREE, PETSC_TRUE, &A[k]));
    if (!k) {
      PetscCall(MatCreateVecs(A[0], &x, &v));
      PetscCall(VecDuplicate(x, &d));
      PetscCall(FillX(x));
      PetscCall(VecSet(v, 0.25));
      PetscCall(VecCopy(x, d));
      PetscCall(VecScale(d, 0.1));
    }
    PetscCall(MatShift(A[k], -0.5));
    PetscCall(MatDiagonalSet(A[k], d, ADD_VALUES));
    PetscCall(MatScale(A[k], 2.0));
    PetscCall(VecDuplicate(v, &y[k]));
    PetscCall(VecDuplicate(v, &g[k]));
    PetscCall(MatMultAdd(A[k], x, v, y[k]));
    PetscCall(MatGetDiagonal(A[k], g[k]));
  }
  PetscCall(TestRelDiff(y[0], y[1], y[1], &e));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer: MatShift, MatDiagonalSet, MatScale, MatMultAdd, tree vs replicated", geom, MatFMMKernels[kernel]));
  PetscCall(TestCheck(what, e, medtol, verbose, &nfail));
  PetscCall(TestRelDiff(g[0], g[1], g[1], &e));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer: MatGetDiagonal, tree vs replicated", geom, MatFMMKernels[kernel]));
  PetscCall(TestCheck(what, e, 1e-15, verbose, &nfail));
  for (int k = 0; k < 2; k++) {
    PetscCall(MatDestroy(&A[k]));
    PetscCall(VecDestroy(&y[k]));
    PetscCall(VecDestroy(&g[k]));
  }
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&v));
  PetscCall(VecDestroy(&d));
  PetscFunctionReturn(0);
}

/* each of the n global numbers once over the ranks */
static PetscErrorCode CheckPermutation(IS is, PetscInt n, const char *what)
{
  Vec             c;
  const PetscInt *ix;
  PetscInt        k;
  PetscReal       lo, hi;

  PetscFunctionBeginUser;
  PetscCall(VecCreateMPI(PETSC_COMM_WORLD, PETSC_DECIDE, n, &c));
  PetscCall(ISGetLocalSize(is, &k));
  PetscCall(ISGetIndices(is, &ix));
  for (PetscInt i = 0; i < k; i++) PetscCall(VecSetValue(c, ix[i], 1.0, ADD_VALUES));
  PetscCall(ISRestoreIndices(is, &ix));
  PetscCall(VecAssemblyBegin(c));
  PetscCall(VecAssemblyEnd(c));
  PetscCall(VecMin(c, NULL, &lo));
  PetscCall(VecMax(c, NULL, &hi));
  if (lo != 1.0 || hi != 1.0) {
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "FAILED: %s: a point held %g to %g times, expected once\n", what, (double)lo, (double)hi));
    nfail++;
  }
  PetscCall(VecDestroy(&c));
  PetscFunctionReturn(0);
}

/* all of is in [lo, hi) on every rank */
static PetscErrorCode InRange(IS is, PetscInt lo, PetscInt hi, PetscBool *in)
{
  const PetscInt *ix;
  PetscInt        k;
  PetscMPIInt     ok = 1;

  PetscFunctionBeginUser;
  PetscCall(ISGetLocalSize(is, &k));
  PetscCall(ISGetIndices(is, &ix));
  for (PetscInt i = 0; i < k; i++) ok = ok && ix[i] >= lo && ix[i] < hi;
  PetscCall(ISRestoreIndices(is, &ix));
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, PETSC_COMM_WORLD));
  *in = ok ? PETSC_TRUE : PETSC_FALSE;
  PetscFunctionReturn(0);
}

/* rank q's indices of is to rank q - 1 (cyclically): a layout that holds every part of the tree, but each on
   another rank than the tree's */
static PetscErrorCode Rotated(IS is, IS *rot)
{
  PetscMPIInt     rank, size;
  PetscInt        n, *cnt, off = 0, q;
  IS              all;
  const PetscInt *ix;

  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCall(ISGetLocalSize(is, &n));
  PetscCall(PetscMalloc1(size, &cnt));
  PetscCallMPI(MPI_Allgather(&n, 1, MPIU_INT, cnt, 1, MPIU_INT, PETSC_COMM_WORLD));
  PetscCall(ISAllGather(is, &all));
  q = (rank + 1) % size;
  for (PetscMPIInt r = 0; r < q; r++) off += cnt[r];
  PetscCall(ISGetIndices(all, &ix));
  PetscCall(ISCreateGeneral(PETSC_COMM_WORLD, cnt[q], ix + off, PETSC_COPY_VALUES, rot));
  PetscCall(ISRestoreIndices(all, &ix));
  PetscCall(ISDestroy(&all));
  PetscCall(PetscFree(cnt));
  PetscFunctionReturn(0);
}

/* the operator on the points renumbered by s (sources) and t (targets, where M > 0) moves no point between
   ranks: its tree's parts are its own layout (how: the check's name); *Bp: the operator (NULL: destroyed) */
static PetscErrorCode NoMoves(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M, IS s, IS t, const char *how, Mat *Bp)
{
  Mat       B;
  IS        s2, t2;
  PetscInt  lo, hi;
  PetscBool in[2];
  char      what[160];

  PetscFunctionBeginUser;
  PetscCall(CreateOn(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_TREE, PETSC_FALSE, s, M ? t : NULL, &B));
  PetscCall(MatFMMGetTreePartition(B, &s2, &t2));
  PetscCall(MatGetOwnershipRangeColumn(B, &lo, &hi));
  PetscCall(InRange(s2, lo, hi, &in[0]));
  PetscCall(MatGetOwnershipRange(B, &lo, &hi));
  PetscCall(InRange(t2, lo, hi, &in[1]));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: %s, no point moves", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources", how));
  PetscCall(TestCheck(what, in[0] && in[1] ? 0.0 : 1.0, 0.0, verbose, &nfail));
  PetscCall(ISDestroy(&s2));
  PetscCall(ISDestroy(&t2));
  if (Bp) *Bp = B;
  else PetscCall(MatDestroy(&B));
  PetscFunctionReturn(0);
}

/* MatFMMGetTreePartition(): each point once; the operator on the points renumbered by it holds its tree's
   parts in its own layout (its partition is its ownership), and gives the same products (the densities
   renumbered likewise) to the FMM's accuracy; renumbered with the parts on other ranks (Rotated()), the
   operator gives each part to the rank that holds its points: none moves either */
static PetscErrorCode PartitionCase(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M)
{
  Mat             A, B;
  IS              si, ti;
  Vec             y, x2, y2, yp;
  VecScatter      sc;
  PetscInt        n;
  const PetscInt *ix;
  PetscScalar    *xa;
  PetscReal       d;
  char            what[160];

  PetscFunctionBeginUser;
  PetscCall(Create(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_TREE, PETSC_FALSE, &A));
  PetscCall(MatFMMGetTreePartition(A, &si, &ti));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: MatFMMGetTreePartition sources", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(CheckPermutation(si, N, what));
  PetscCall(CheckPermutation(ti, M ? M : N, what));
  PetscCall(NoMoves(geom, kernel, N, M, si, ti, "renumbered by the partition", &B));
  {
    IS sr, tr;
    PetscCall(Rotated(si, &sr));
    PetscCall(Rotated(ti, &tr));
    PetscCall(NoMoves(geom, kernel, N, M, sr, tr, "the parts renumbered onto other ranks", NULL));
    PetscCall(ISDestroy(&sr));
    PetscCall(ISDestroy(&tr));
  }
  /* the same product: x2 = x renumbered, y2 against y renumbered */
  PetscCall(MultOf(A, &y));
  PetscCall(MatCreateVecs(B, &x2, &y2));
  PetscCall(ISGetLocalSize(si, &n));
  PetscCall(ISGetIndices(si, &ix));
  PetscCall(VecGetArrayWrite(x2, &xa));
  for (PetscInt i = 0; i < n; i++) xa[i] = PetscCosReal(0.37 * ix[i]);
  PetscCall(VecRestoreArrayWrite(x2, &xa));
  PetscCall(ISRestoreIndices(si, &ix));
  PetscCall(MatMult(B, x2, y2));
  PetscCall(VecDuplicate(y2, &yp));
  PetscCall(VecScatterCreate(y, ti, yp, NULL, &sc));
  PetscCall(VecScatterBegin(sc, y, yp, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecScatterEnd(sc, y, yp, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(TestRelDiff(y2, yp, yp, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: renumbered by the partition, same product", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, d, 1e-9, verbose, &nfail));
  PetscCall(VecScatterDestroy(&sc));
  PetscCall(VecDestroy(&y));
  PetscCall(VecDestroy(&x2));
  PetscCall(VecDestroy(&y2));
  PetscCall(VecDestroy(&yp));
  PetscCall(ISDestroy(&si));
  PetscCall(ISDestroy(&ti));
  PetscCall(MatDestroy(&A));
  PetscCall(MatDestroy(&B));
  PetscFunctionReturn(0);
}

/* the points of is (global numbers) in [lo, hi) on this rank, summed over the ranks */
static PetscErrorCode CountInRange(IS is, PetscInt lo, PetscInt hi, PetscInt64 *c)
{
  const PetscInt *ix;
  PetscInt        k;
  PetscInt64      m = 0;

  PetscFunctionBeginUser;
  PetscCall(ISGetLocalSize(is, &k));
  PetscCall(ISGetIndices(is, &ix));
  for (PetscInt i = 0; i < k; i++) m += ix[i] >= lo && ix[i] < hi;
  PetscCall(ISRestoreIndices(is, &ix));
  PetscCallMPI(MPI_Allreduce(&m, c, 1, MPIU_INT64, MPI_SUM, PETSC_COMM_WORLD));
  PetscFunctionReturn(0);
}

/* MATFMM_DISTRIBUTION_AUTO (MatFMMGetDistribution()): replicated on one rank; on several the tree on the CPU, and
   with CUDA where at least half the points stay on the rank that holds them in the caller's layout, counted here
   from the tree's partition (MatFMMGetTreePartition() of the operator with the tree); and its product against
   exact summation */
static PetscErrorCode AutoCase(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M)
{
  Mat                A, T;
  IS                 si, ti;
  PetscInt64         ss, st;
  PetscInt           lo, hi;
  MatFMMDistribution got, want;
  Vec                ya, yd;
  PetscReal          d;
  char               what[160];

  PetscFunctionBeginUser;
  PetscCall(Create(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_TREE, PETSC_FALSE, &T));
  PetscCall(MatFMMGetTreePartition(T, &si, &ti));
  PetscCall(MatGetOwnershipRangeColumn(T, &lo, &hi));
  PetscCall(CountInRange(si, lo, hi, &ss));
  PetscCall(MatGetOwnershipRange(T, &lo, &hi));
  PetscCall(CountInRange(ti, lo, hi, &st));
  if (!M) st = 0; /* (the targets are the sources) */
  if (size == 1) want = MATFMM_DISTRIBUTION_REPLICATED;
  else if (device == MATFMM_DEVICE_CPU) want = MATFMM_DISTRIBUTION_TREE;
  else want = 2 * (ss + st) >= (PetscInt64)(N + M) ? MATFMM_DISTRIBUTION_TREE : MATFMM_DISTRIBUTION_REPLICATED;
  PetscCall(Create(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_AUTO, PETSC_FALSE, &A));
  PetscCall(MatFMMGetDistribution(A, &got));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: auto's distribution as the rule makes it", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, got == want ? 0.0 : 1.0, 0.0, verbose, &nfail));
  if (verbose) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  (%" PetscInt64_FMT " of %" PetscInt_FMT " points stay: %s)\n", ss + st, N + M, MatFMMDistributions[got]));
  PetscCall(MultOf(A, &ya));
  PetscCall(Product(geom, kernel, N, M, MATFMM_METHOD_DIRECT, MATFMM_DISTRIBUTION_AUTO, PETSC_FALSE, &yd));
  PetscCall(TestRelDiff(ya, yd, yd, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: auto vs exact", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, d, 1e-9, verbose, &nfail));
  PetscCall(VecDestroy(&ya));
  PetscCall(VecDestroy(&yd));
  PetscCall(ISDestroy(&si));
  PetscCall(ISDestroy(&ti));
  PetscCall(MatDestroy(&A));
  PetscCall(MatDestroy(&T));
  PetscFunctionReturn(0);
}

/* -device cuda, 2 ranks or more: the tree's top cuts and subtrees made on the GPUs (the CUDA backend's topcuts and
   subtrees) are the host's (-mat_fmm_cuda_tree cpu): each rank holds the same points, and the products
   agree to rounding (the same boxes and lists; only the order within a leaf differs) */
static PetscErrorCode GPUTreeCase(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M)
{
  Mat       A[2];
  IS        si[2], ti[2];
  Vec       x, y[2];
  PetscBool same[2];
  PetscReal d;
  char      what[160];

  PetscFunctionBeginUser;
  for (int k = 0; k < 2; k++) {
    prefix = k ? "host_" : NULL; /* -host_mat_fmm_cuda_tree cpu */
    PetscCall(Create(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_TREE, PETSC_FALSE, &A[k]));
    PetscCall(MatFMMGetTreePartition(A[k], &si[k], &ti[k]));
    if (!k) {
      PetscCall(MatCreateVecs(A[0], &x, NULL));
      PetscCall(FillX(x));
    }
    PetscCall(MatCreateVecs(A[k], NULL, &y[k]));
    PetscCall(MatMult(A[k], x, y[k]));
  }
  prefix = NULL;
  PetscCall(ISEqual(si[0], si[1], &same[0])); /* (the same indices on each rank, in any order) */
  PetscCall(ISEqual(ti[0], ti[1], &same[1]));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: the tree made on the GPUs, each rank's points as the host's", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, same[0] && same[1] ? 0.0 : 1.0, 0.0, verbose, &nfail));
  PetscCall(TestRelDiff(y[0], y[1], y[1], &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: the tree made on the GPUs, the product as the host's tree", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, d, 1e-13, verbose, &nfail));
  for (int k = 0; k < 2; k++) {
    PetscCall(MatDestroy(&A[k]));
    PetscCall(ISDestroy(&si[k]));
    PetscCall(ISDestroy(&ti[k]));
    PetscCall(VecDestroy(&y[k]));
  }
  PetscCall(VecDestroy(&x));
  PetscFunctionReturn(0);
}

static PetscErrorCode RunCase(const char *geom, MatFMMKernel kernel, PetscInt N, PetscInt M)
{
  Vec       yt, yd, ym, yr;
  PetscReal d;
  char      what[160];

  PetscFunctionBeginUser;
  PetscCall(Product(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_TREE, PETSC_FALSE, &yt));
  PetscCall(Product(geom, kernel, N, M, MATFMM_METHOD_DIRECT, MATFMM_DISTRIBUTION_AUTO, PETSC_FALSE, &yd));
  PetscCall(TestRelDiff(yt, yd, yd, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: tree vs exact", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, d, 1e-9, verbose, &nfail));
  PetscCall(Product(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_TREE, PETSC_TRUE, &ym));
  PetscCall(Product(geom, kernel, N, M, MATFMM_METHOD_FMM, MATFMM_DISTRIBUTION_REPLICATED, PETSC_TRUE, &yr));
  PetscCall(TestRelDiff(ym, yr, yr, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s layer, %s: tree vs replicated, median splits", geom, MatFMMKernels[kernel], M ? "separate targets" : "targets = sources"));
  PetscCall(TestCheck(what, d, medtol, verbose, &nfail));
  PetscCall(VecDestroy(&yt));
  PetscCall(VecDestroy(&yd));
  PetscCall(VecDestroy(&ym));
  PetscCall(VecDestroy(&yr));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscInt    N = 12000, M = 5000;
  const char *geoms[] = {"curve", "clusters", "square"};

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &N, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-m", &M, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-verbose", &verbose, NULL));
  PetscCall(PetscOptionsGetEnum(NULL, NULL, "-device", MatFMMDevices, (PetscEnum *)&device, NULL));
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-median_tol", &medtol, NULL));
  PetscCall(PetscOptionsSetValue(NULL, "-med_mat_fmm_tree_split", "median"));
  for (int g = 0; g < 3; g++) {
    PetscCall(RunCase(geoms[g], MATFMM_KERNEL_SINGLE, N, 0));
    PetscCall(RunCase(geoms[g], MATFMM_KERNEL_DOUBLE, N, 0));
    PetscCall(RunCase(geoms[g], MATFMM_KERNEL_COMBINED, N, M));
  }
  PetscCall(RunCase("curve", MATFMM_KERNEL_SINGLE, N, M));
  PetscCall(OperatorCase("curve", MATFMM_KERNEL_DOUBLE, N));
  PetscCall(OperatorCase("clusters", MATFMM_KERNEL_COMBINED, N));
  PetscCall(PartitionCase("curve", MATFMM_KERNEL_DOUBLE, N, 0));
  PetscCall(PartitionCase("clusters", MATFMM_KERNEL_COMBINED, N, M));
  PetscCall(AutoCase("curve", MATFMM_KERNEL_SINGLE, N, 0));
  PetscCall(AutoCase("square", MATFMM_KERNEL_COMBINED, N, M));
  if (device == MATFMM_DEVICE_CUDA && size > 1) { /* (one rank: tests/gpu.c compares the one-GPU tree with the host's) */
    PetscCall(PetscOptionsSetValue(NULL, "-host_mat_fmm_cuda_tree", "cpu"));
    PetscCall(GPUTreeCase("curve", MATFMM_KERNEL_SINGLE, N, 0));
    PetscCall(GPUTreeCase("clusters", MATFMM_KERNEL_COMBINED, N, M));
  }
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s\n", nfail ? "SOME CHECKS FAILED" : "all distributed-tree checks passed"));
  PetscCall(PetscFinalize());
  return nfail ? 1 : 0;
}

/*TEST
  test:
    args: -malloc_dump
  test:
    suffix: 2
    nsize: 2
    args: -malloc_dump
  test:
    suffix: 3
    nsize: 3
    args: -malloc_dump
  test:
    suffix: 4
    nsize: 4
    args: -malloc_dump
  test:
    suffix: global_plan_2
    nsize: 2
    args: -mat_fmm_distribution_global_plan -malloc_dump
  test:
    suffix: global_plan_3
    nsize: 3
    args: -mat_fmm_distribution_global_plan -malloc_dump
  test:
    suffix: cuda
    requires: cuda
    args: -device cuda -median_tol 1e-11 -malloc_dump
  test:
    suffix: cuda_2
    requires: cuda
    nsize: 2
    args: -device cuda -median_tol 1e-11 -malloc_dump
  test:
    suffix: cuda_3
    requires: cuda
    nsize: 3
    args: -device cuda -median_tol 1e-11 -malloc_dump
  test:
    suffix: cuda_vec_2
    requires: cuda petsc_cuda
    nsize: 2
    args: -device cuda -median_tol 1e-11 -malloc_dump
    output_file: output/dist_cuda_2.out
  test:
    suffix: cuda_vec_3
    requires: cuda petsc_cuda
    nsize: 3
    args: -device cuda -median_tol 1e-11 -malloc_dump
    output_file: output/dist_cuda_3.out
TEST*/
