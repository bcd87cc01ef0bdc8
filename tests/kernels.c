static char help[] = "MATFMM kernels, targets, layouts and the diagonal operations.\n\
  -n <N>, -m <M>          sources and separate targets of the layout/kernel study (default 3000, 2000)\n\
  -nsmall <n>             size of the dense (MatComputeOperator) checks (default 120)\n\
  -verbose                print the measured differences (not for reference outputs)\n\n";

/*
  1. S, D and alpha D + beta S, with targets = sources and with separate targets
     (M != N, some targets exactly on sources, some 1e-3 off the curve): the
     tiled, indexing and repetition layouts agree to 1e-13 and match
     -mat_fmm_method direct to 1e-10 (relative 2-norms).  repetition runs with
     the budget of -mat_fmm_repetition_mb, which the test checks is several
     times smaller than the records of the whole near field, so it runs in chunks.
     Linearity: the combined FMM equals alpha D + beta S of the separate FMMs;
     weights: S with weights w times x equals S without weights times w.*x.
  2. MatMultAdd (v != y and v == y) equals MatMult + VecAXPY.
  3. New points of the same number set again (MatFMMSetSources refills its
     arrays) and assembled: the product equals that of a new matrix exactly.
  4. On a small problem, MatComputeOperator of the direct and of the FMM matrix
     against the kernel matrix built here by hand from its definition
       S_ij = -(1/2pi) log|z_i - y_j| w_j,  D_ij = (1/2pi) n_j.(z_i - y_j)/|z_i - y_j|^2 w_j,
     0 where z_i = y_j; then MatShift, MatScale, MatDiagonalSet (INSERT_VALUES,
     ADD_VALUES) applied to the MATFMM and to a dense copy: operators,
     MatGetDiagonal and MatMult agree.
  All points are generated on every rank and each rank takes a slice of uneven size.
*/
#include <petscfmm.h>
#include "testutil.h"

static PetscBool verbose = PETSC_FALSE;
static PetscInt  nfail   = 0;

typedef struct {
  PetscInt   N, M; /* sources, separate targets */
  PetscReal *src, *nrm, *w, *tgt;
} Problem;

/* sources on the star r(t) = 1 + 0.3 cos 5t with outward normals and trapezoid weights;
   targets: a quarter exactly on sources, a quarter inside, a quarter outside, a quarter 1e-3 off the curve */
static PetscErrorCode ProblemCreate(PetscInt N, PetscInt M, Problem *P)
{
  PetscRandom r;

  PetscFunctionBeginUser;
  P->N = N;
  P->M = M;
  PetscCall(PetscMalloc4(2 * N, &P->src, 2 * N, &P->nrm, N, &P->w, 2 * M, &P->tgt));
  PetscCall(TestRandomCreate(PETSC_COMM_SELF, 5, &r));
  for (PetscInt i = 0; i < N; i++) TestStarCurvePoint(i + 0.25, N, &P->src[2 * i], &P->nrm[2 * i], &P->w[i]);
  for (PetscInt i = 0; i < M; i++) {
    PetscReal a, b, t, rr;
    PetscCall(PetscRandomGetValueReal(r, &a));
    PetscCall(PetscRandomGetValueReal(r, &b));
    t  = 2 * PETSC_PI * a;
    rr = 1 + 0.3 * PetscCosReal(5 * t);
    switch (i % 4) {
    case 0: { /* exactly on a source */
      PetscInt j = (7 * i + 3) % N;
      P->tgt[2 * i]     = P->src[2 * j];
      P->tgt[2 * i + 1] = P->src[2 * j + 1];
    } break;
    case 1:
      P->tgt[2 * i]     = 0.7 * b * rr * PetscCosReal(t);
      P->tgt[2 * i + 1] = 0.7 * b * rr * PetscSinReal(t);
      break;
    case 2:
      P->tgt[2 * i]     = (1.1 + b) * rr * PetscCosReal(t);
      P->tgt[2 * i + 1] = (1.1 + b) * rr * PetscSinReal(t);
      break;
    case 3:
      P->tgt[2 * i]     = (rr + 1e-3) * PetscCosReal(t);
      P->tgt[2 * i + 1] = (rr + 1e-3) * PetscSinReal(t);
      break;
    }
  }
  PetscCall(PetscRandomDestroy(&r));
  PetscFunctionReturn(0);
}

static PetscErrorCode ProblemDestroy(Problem *P)
{
  PetscFunctionBeginUser;
  PetscCall(PetscFree4(P->src, P->nrm, P->w, P->tgt));
  PetscFunctionReturn(0);
}

typedef struct {
  MatFMMKernel kernel;
  PetscBool    same;    /* targets = sources */
  PetscBool    weights; /* pass the weights */
  MatFMMLayout layout;
  MatFMMMethod method;
  PetscInt     ct;      /* 0: default */
} Config;

static PetscErrorCode Create(const Problem *P, const Config *c, Mat *A)
{
  PetscMPIInt rank, size;
  PetscInt    s0 = 0, n = 0, t0 = 0, m = 0;

  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  TestSplit(P->N, rank, size, PETSC_FALSE, &s0, &n); /* rank 0 the smallest part */
  TestSplit(P->M, rank, size, PETSC_TRUE, &t0, &m);  /* targets: a different uneven split, rank 0 the largest */
  if (c->same) {
    t0 = s0;
    m  = n;
  }
  PetscCall(MatCreate(PETSC_COMM_WORLD, A));
  PetscCall(MatSetSizes(*A, m, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(*A, MATFMM));
  PetscCall(MatFMMSetSources(*A, n, P->src + 2 * s0, P->nrm + 2 * s0, c->weights ? P->w + s0 : NULL));
  if (!c->same) PetscCall(MatFMMSetTargets(*A, m, P->tgt + 2 * t0));
  PetscCall(MatFMMSetKernel(*A, c->kernel, 0.7, -1.3));
  PetscCall(MatSetFromOptions(*A));
  PetscCall(MatFMMSetLayout(*A, c->layout));
  PetscCall(MatFMMSetMethod(*A, c->method));
  if (c->ct) PetscCall(MatFMMSetClusteringThreshold(*A, c->ct));
  PetscCall(MatAssemblyBegin(*A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* "<what> <= <tol> ok/FAILED", failures counted in nfail */
static PetscErrorCode Check(const char *what, PetscReal val, PetscReal tol)
{
  PetscFunctionBeginUser;
  PetscCall(TestCheck(what, val, tol, verbose, &nfail));
  PetscFunctionReturn(0);
}

static PetscErrorCode RandomVec(Vec x, PetscInt seed)
{
  PetscRandom r;

  PetscFunctionBeginUser;
  PetscCall(TestRandomCreate(PetscObjectComm((PetscObject)x), (unsigned long)seed, &r));
  PetscCall(VecSetRandom(x, r));
  PetscCall(VecShift(x, -0.5));
  PetscCall(PetscRandomDestroy(&r));
  PetscFunctionReturn(0);
}

/* 1. layouts and direct, for one kernel and one target set */
static PetscErrorCode TestLayouts(const Problem *P, MatFMMKernel k, PetscBool same)
{
  Config    c = {k, same, PETSC_TRUE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, 0};
  Mat       A[3], R;
  Vec       x, y[3], yr;
  PetscReal d;
  char      what[160], tag[80];

  PetscFunctionBeginUser;
  PetscCall(PetscSNPrintf(tag, sizeof(tag), "%s kernel, %s", MatFMMKernels[k], same ? "targets = sources" : "separate targets"));
  c.method = MATFMM_METHOD_DIRECT;
  PetscCall(Create(P, &c, &R));
  c.method = MATFMM_METHOD_FMM;
  for (PetscInt l = 0; l < 3; l++) {
    c.layout = (MatFMMLayout)l;
    PetscCall(Create(P, &c, &A[l]));
  }
  PetscCall(MatCreateVecs(R, &x, &yr));
  PetscCall(RandomVec(x, 11));
  PetscCall(MatMult(R, x, yr));
  for (PetscInt l = 0; l < 3; l++) {
    PetscCall(VecDuplicate(yr, &y[l]));
    PetscCall(MatMult(A[l], x, y[l]));
    PetscCall(TestRelDiff(y[l], yr, yr, &d));
    PetscCall(PetscSNPrintf(what, sizeof(what), "%s: %-10s vs direct", tag, MatFMMLayouts[l]));
    PetscCall(Check(what, d, 1e-10));
  }
  for (PetscInt l = 1; l < 3; l++) {
    PetscCall(TestRelDiff(y[l], y[0], y[0], &d));
    PetscCall(PetscSNPrintf(what, sizeof(what), "%s: %-10s vs tiled ", tag, MatFMMLayouts[l]));
    PetscCall(Check(what, d, 1e-13));
  }
  /* repetition must have run in several chunks: its records exceed the budget */
  if (!same && k == MATFMM_KERNEL_COMBINED) {
    PetscCount p2p;
    PetscReal  mb = 256, need, tot, loc;
    PetscCall(PetscOptionsGetReal(NULL, NULL, "-mat_fmm_repetition_mb", &mb, NULL));
    PetscCall(MatFMMGetTreeInfo(A[2], NULL, NULL, NULL, &p2p));
    loc = (PetscReal)p2p;
    PetscCallMPI(MPI_Allreduce(&loc, &tot, 1, MPIU_REAL, MPI_MAX, PETSC_COMM_WORLD));
    need = 5.0 * tot * sizeof(PetscReal) / 1048576.0; /* x, y, q, dx, dy per near source of each target */
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s: repetition records > 3x -mat_fmm_repetition_mb (runs in chunks) %s\n", tag, need > 3 * mb ? "ok" : "FAILED"));
    if (verbose) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "    records %.2f MB, budget %.2f MB\n", (double)need, (double)mb));
    if (!(need > 3 * mb)) nfail++;
  }
  for (PetscInt l = 0; l < 3; l++) {
    PetscCall(VecDestroy(&y[l]));
    PetscCall(MatDestroy(&A[l]));
  }
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&yr));
  PetscCall(MatDestroy(&R));
  PetscFunctionReturn(0);
}

/* combined = alpha D + beta S (linearity of the FMM), and weights = diagonal scaling of the density */
static PetscErrorCode TestLinearity(const Problem *P, PetscBool same)
{
  Config    c = {MATFMM_KERNEL_SINGLE, same, PETSC_TRUE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, 0};
  Mat       S, D, C, S1, D1;
  Vec       x, xw, w, ys, yd, yc, y1, t;
  PetscReal d, ns, nd;
  char      what[160];

  PetscFunctionBeginUser;
  PetscCall(Create(P, &c, &S));
  c.kernel = MATFMM_KERNEL_DOUBLE;
  PetscCall(Create(P, &c, &D));
  c.kernel = MATFMM_KERNEL_COMBINED;
  PetscCall(Create(P, &c, &C));
  PetscCall(MatCreateVecs(C, &x, &yc));
  PetscCall(VecDuplicate(yc, &ys));
  PetscCall(VecDuplicate(yc, &yd));
  PetscCall(VecDuplicate(yc, &t));
  PetscCall(RandomVec(x, 12));
  PetscCall(MatMult(S, x, ys));
  PetscCall(MatMult(D, x, yd));
  PetscCall(MatMult(C, x, yc));
  PetscCall(VecNorm(ys, NORM_2, &ns));
  PetscCall(VecNorm(yd, NORM_2, &nd));
  PetscCall(VecAXPBYPCZ(t, 0.7, -1.3, 0.0, yd, ys)); /* t = 0.7 D x - 1.3 S x */
  PetscCall(VecAXPY(t, -1.0, yc));
  PetscCall(VecNorm(t, NORM_2, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: combined vs 0.7 D - 1.3 S, relative to |0.7 Dx| + |1.3 Sx|", same ? "targets = sources" : "separate targets"));
  PetscCall(Check(what, d / (0.7 * nd + 1.3 * ns), 1e-14));

  /* weights: K(w) x = K(1) (w .* x) */
  PetscCall(VecDuplicate(x, &w));
  PetscCall(VecDuplicate(x, &xw));
  PetscCall(VecDuplicate(yc, &y1));
  {
    PetscInt     lo, hi;
    PetscScalar *wa;
    PetscCall(VecGetOwnershipRange(w, &lo, &hi));
    PetscCall(VecGetArrayWrite(w, &wa));
    for (PetscInt i = lo; i < hi; i++) wa[i - lo] = P->w[i];
    PetscCall(VecRestoreArrayWrite(w, &wa));
  }
  PetscCall(VecPointwiseMult(xw, w, x));
  c.weights = PETSC_FALSE;
  c.kernel  = MATFMM_KERNEL_SINGLE;
  PetscCall(Create(P, &c, &S1));
  c.kernel = MATFMM_KERNEL_DOUBLE;
  PetscCall(Create(P, &c, &D1));
  PetscCall(MatMult(S1, xw, y1));
  PetscCall(TestRelDiff(y1, ys, ys, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: S with weights w vs S without weights on w.*x", same ? "targets = sources" : "separate targets"));
  PetscCall(Check(what, d, 1e-14));
  PetscCall(MatMult(D1, xw, y1));
  PetscCall(TestRelDiff(y1, yd, yd, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: D with weights w vs D without weights on w.*x", same ? "targets = sources" : "separate targets"));
  PetscCall(Check(what, d, 1e-14));

  /* 2. MatMultAdd, out of place and in place */
  {
    Vec v, z;
    PetscCall(VecDuplicate(yc, &v));
    PetscCall(VecDuplicate(yc, &z));
    PetscCall(RandomVec(v, 13));
    PetscCall(MatMultAdd(C, x, v, z)); /* z = C x + v */
    PetscCall(VecWAXPY(t, 1.0, yc, v));
    PetscCall(TestRelDiff(z, t, t, &d));
    PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatMultAdd(A, x, v, z) vs MatMult + VecAXPY", same ? "targets = sources" : "separate targets"));
    PetscCall(Check(what, d, 1e-15));
    PetscCall(VecCopy(v, z));
    PetscCall(MatMultAdd(C, x, z, z)); /* z = C x + z */
    PetscCall(TestRelDiff(z, t, t, &d));
    PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatMultAdd(A, x, y, y) vs MatMult + VecAXPY", same ? "targets = sources" : "separate targets"));
    PetscCall(Check(what, d, 1e-15));
    PetscCall(VecDestroy(&v));
    PetscCall(VecDestroy(&z));
  }
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&xw));
  PetscCall(VecDestroy(&w));
  PetscCall(VecDestroy(&ys));
  PetscCall(VecDestroy(&yd));
  PetscCall(VecDestroy(&yc));
  PetscCall(VecDestroy(&y1));
  PetscCall(VecDestroy(&t));
  PetscCall(MatDestroy(&S));
  PetscCall(MatDestroy(&D));
  PetscCall(MatDestroy(&C));
  PetscCall(MatDestroy(&S1));
  PetscCall(MatDestroy(&D1));
  PetscFunctionReturn(0);
}

/* the kernel matrix from its definition, as a dense Mat with the layout of A */
static PetscErrorCode HandBuilt(const Problem *P, const Config *c, Mat A, Mat *K)
{
  PetscInt   r0, r1, N = P->N;
  PetscReal  alpha = c->kernel == MATFMM_KERNEL_SINGLE ? 0.0 : (c->kernel == MATFMM_KERNEL_DOUBLE ? 1.0 : 0.7);
  PetscReal  beta  = c->kernel == MATFMM_KERNEL_DOUBLE ? 0.0 : (c->kernel == MATFMM_KERNEL_SINGLE ? 1.0 : -1.3);
  PetscInt  *cols;
  PetscReal *row;
  PetscInt   m, n;

  PetscFunctionBeginUser;
  PetscCall(MatGetLocalSize(A, &m, &n));
  PetscCall(MatCreateDense(PETSC_COMM_WORLD, m, n, PETSC_DETERMINE, PETSC_DETERMINE, NULL, K));
  PetscCall(MatGetOwnershipRange(A, &r0, &r1));
  PetscCall(PetscMalloc2(N, &cols, N, &row));
  for (PetscInt j = 0; j < N; j++) cols[j] = j;
  for (PetscInt i = r0; i < r1; i++) {
    const PetscReal *z = c->same ? &P->src[2 * i] : &P->tgt[2 * i];
    for (PetscInt j = 0; j < N; j++) {
      PetscReal rx = z[0] - P->src[2 * j], ry = z[1] - P->src[2 * j + 1], r2 = rx * rx + ry * ry, wj = c->weights ? P->w[j] : 1.0;
      row[j] = 0.0;
      if (r2 == 0.0) continue;
      row[j] = -beta / (2 * PETSC_PI) * PetscLogReal(PetscSqrtReal(r2)) * wj + alpha / (2 * PETSC_PI) * (P->nrm[2 * j] * rx + P->nrm[2 * j + 1] * ry) / r2 * wj;
    }
    PetscCall(MatSetValues(*K, 1, &i, N, cols, row, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(*K, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*K, MAT_FINAL_ASSEMBLY));
  PetscCall(PetscFree2(cols, row));
  PetscFunctionReturn(0);
}

/* |op(A) - R|_F / |R|_F */
static PetscErrorCode OperatorDiff(Mat A, Mat R, PetscReal *d)
{
  Mat       C;
  PetscReal n0, n1;

  PetscFunctionBeginUser;
  PetscCall(MatComputeOperator(A, MATDENSE, &C));
  PetscCall(MatAXPY(C, -1.0, R, SAME_NONZERO_PATTERN));
  PetscCall(MatNorm(C, NORM_FROBENIUS, &n1));
  PetscCall(MatNorm(R, NORM_FROBENIUS, &n0));
  *d = n1 / n0;
  PetscCall(MatDestroy(&C));
  PetscFunctionReturn(0);
}

/* MatGetDiagonal and MatMult of A and R agree */
static PetscErrorCode CompareDiagMult(Mat A, Mat R, const char *tag, PetscReal multtol)
{
  Vec       da, dr, x, ya, yr;
  PetscReal d;
  char      what[160];

  PetscFunctionBeginUser;
  PetscCall(MatCreateVecs(A, &x, &da));
  PetscCall(VecDuplicate(da, &dr));
  PetscCall(VecDuplicate(da, &ya));
  PetscCall(VecDuplicate(da, &yr));
  PetscCall(MatGetDiagonal(A, da));
  PetscCall(MatGetDiagonal(R, dr));
  PetscCall(TestRelDiff(da, dr, dr, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatGetDiagonal vs dense", tag));
  PetscCall(Check(what, d, 1e-14));
  PetscCall(RandomVec(x, 21));
  PetscCall(MatMult(A, x, ya));
  PetscCall(MatMult(R, x, yr));
  PetscCall(TestRelDiff(ya, yr, yr, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatMult vs dense", tag));
  PetscCall(Check(what, d, multtol));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&da));
  PetscCall(VecDestroy(&dr));
  PetscCall(VecDestroy(&ya));
  PetscCall(VecDestroy(&yr));
  PetscFunctionReturn(0);
}

/* 3. dense checks on a small problem */
static PetscErrorCode TestDense(const Problem *P, MatFMMKernel k, PetscBool same)
{
  Config    c = {k, same, PETSC_TRUE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_DIRECT, 8};
  Mat       Ad, Af, K;
  PetscReal d, fmmtol = 1e-10;
  char      what[160], tag[96];

  PetscFunctionBeginUser;
  PetscCall(PetscSNPrintf(tag, sizeof(tag), "N=%" PetscInt_FMT " %s kernel, %s", P->N, MatFMMKernels[k], same ? "targets = sources" : "separate targets"));
  PetscCall(Create(P, &c, &Ad));
  c.method = MATFMM_METHOD_FMM;
  PetscCall(Create(P, &c, &Af));
  PetscCall(HandBuilt(P, &c, Ad, &K));
  {
    PetscInt L;
    PetscCall(MatFMMGetTreeInfo(Af, &L, NULL, NULL, NULL));
    PetscCheck(L >= 2, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "the small problem should have a far field (levels %" PetscInt_FMT ")", L);
  }
  PetscCall(OperatorDiff(Ad, K, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatComputeOperator (direct) vs hand-built kernel matrix", tag));
  PetscCall(Check(what, d, 1e-14));
  PetscCall(OperatorDiff(Af, K, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatComputeOperator (fmm) vs hand-built kernel matrix", tag));
  PetscCall(Check(what, d, fmmtol));

  if (P->N == (same ? P->N : P->M)) { /* square: the diagonal operations */
    struct {
      const char *name;
      int         op; /* 0 shift, 1 scale, 2 diagonal set insert, 3 diagonal set add */
      PetscReal   a;
    } ops[] = {
      {"MatGetDiagonal (no diagonal terms)",   -1, 0   },
      {"MatShift(0.5)",                        0,  0.5 },
      {"MatScale(-2)",                         1,  -2.0},
      {"MatDiagonalSet(d, INSERT_VALUES)",     2,  0   },
      {"MatShift(0.25)",                       0,  0.25},
      {"MatDiagonalSet(d2, ADD_VALUES)",       3,  0   },
      {"MatScale(3)",                          1,  3.0 },
      {"MatDiagonalSet(d, INSERT_VALUES) again", 2, 0  },
    };
    Vec dv, dv2;
    PetscCall(MatCreateVecs(Af, NULL, &dv));
    PetscCall(VecDuplicate(dv, &dv2));
    PetscCall(RandomVec(dv, 31));
    PetscCall(RandomVec(dv2, 32));
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
      char t2[200];
      switch (ops[o].op) {
      case 0:
        PetscCall(MatShift(Af, ops[o].a));
        PetscCall(MatShift(K, ops[o].a));
        break;
      case 1:
        PetscCall(MatScale(Af, ops[o].a));
        PetscCall(MatScale(K, ops[o].a));
        break;
      case 2:
        PetscCall(MatDiagonalSet(Af, dv, INSERT_VALUES));
        PetscCall(MatDiagonalSet(K, dv, INSERT_VALUES));
        break;
      case 3:
        PetscCall(MatDiagonalSet(Af, dv2, ADD_VALUES));
        PetscCall(MatDiagonalSet(K, dv2, ADD_VALUES));
        break;
      default:
        break;
      }
      PetscCall(PetscSNPrintf(t2, sizeof(t2), "%s, after %s", tag, ops[o].name));
      PetscCall(OperatorDiff(Af, K, &d));
      PetscCall(PetscSNPrintf(what, sizeof(what), "%s: MatComputeOperator vs dense", t2));
      PetscCall(Check(what, d, fmmtol));
      PetscCall(CompareDiagMult(Af, K, t2, fmmtol));
    }
    PetscCall(VecDestroy(&dv));
    PetscCall(VecDestroy(&dv2));
  }
  PetscCall(MatDestroy(&Ad));
  PetscCall(MatDestroy(&Af));
  PetscCall(MatDestroy(&K));
  PetscFunctionReturn(0);
}

/* new points of the same number through MatFMMSetSources (its arrays are
   refilled in place) and assembly: the product equals, bit for bit, that of a
   matrix created afresh on the new points */
static PetscErrorCode TestNewPoints(const Problem *P, PetscBool same)
{
  Config      c = {MATFMM_KERNEL_COMBINED, same, PETSC_TRUE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, 0};
  Problem     Q = *P;
  Mat         A, B;
  Vec         x, ya, yb;
  PetscReal   d;
  PetscMPIInt rank, size;
  PetscInt    s0 = 0, n = 0;
  char        what[128];

  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  TestSplit(P->N, rank, size, PETSC_FALSE, &s0, &n);
  PetscCall(PetscMalloc3(2 * P->N, &Q.src, 2 * P->N, &Q.nrm, P->N, &Q.w));
  for (PetscInt i = 0; i < P->N; i++) { /* rotated by 0.3 and scaled by 1.2 about (0.1, 0) */
    const PetscReal cs = PetscCosReal(0.3), sn = PetscSinReal(0.3), x = P->src[2 * i] - 0.1, y = P->src[2 * i + 1];
    Q.src[2 * i]     = 0.1 + 1.2 * (cs * x - sn * y);
    Q.src[2 * i + 1] = 1.2 * (sn * x + cs * y);
    Q.nrm[2 * i]     = cs * P->nrm[2 * i] - sn * P->nrm[2 * i + 1];
    Q.nrm[2 * i + 1] = sn * P->nrm[2 * i] + cs * P->nrm[2 * i + 1];
    Q.w[i]           = 1.2 * P->w[i];
  }
  PetscCall(Create(P, &c, &A));
  PetscCall(MatCreateVecs(A, &x, &ya));
  PetscCall(VecDuplicate(ya, &yb));
  PetscCall(RandomVec(x, 11));
  PetscCall(MatMult(A, x, ya));
  PetscCall(MatFMMSetSources(A, n, Q.src + 2 * s0, Q.nrm + 2 * s0, Q.w + s0));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatMult(A, x, ya));
  PetscCall(Create(&Q, &c, &B));
  PetscCall(MatMult(B, x, yb));
  PetscCall(VecAXPY(yb, -1.0, ya));
  PetscCall(VecNorm(yb, NORM_INFINITY, &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: new points set again, then assembled, vs a new matrix (max difference)", same ? "targets = sources" : "separate targets"));
  PetscCall(Check(what, d, 0.0));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&ya));
  PetscCall(VecDestroy(&yb));
  PetscCall(MatDestroy(&A));
  PetscCall(MatDestroy(&B));
  PetscCall(PetscFree3(Q.src, Q.nrm, Q.w));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscInt N = 3000, M = 2000, ns = 120;
  Problem  big, small, smallrect;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &N, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-m", &M, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-nsmall", &ns, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-verbose", &verbose, NULL));
  PetscCall(ProblemCreate(N, M, &big));
  PetscCall(ProblemCreate(ns, ns, &small));         /* square with separate targets: K_ii != 0 */
  PetscCall(ProblemCreate(ns, 2 * ns / 3, &smallrect)); /* M != N */

  for (PetscInt k = 0; k < 3; k++) {
    PetscCall(TestLayouts(&big, (MatFMMKernel)k, PETSC_TRUE));
    PetscCall(TestLayouts(&big, (MatFMMKernel)k, PETSC_FALSE));
  }
  PetscCall(TestLinearity(&big, PETSC_TRUE));
  PetscCall(TestLinearity(&big, PETSC_FALSE));
  PetscCall(TestNewPoints(&big, PETSC_TRUE));
  PetscCall(TestNewPoints(&big, PETSC_FALSE));
  for (PetscInt k = 0; k < 3; k++) {
    PetscCall(TestDense(&small, (MatFMMKernel)k, PETSC_TRUE));
    PetscCall(TestDense(&small, (MatFMMKernel)k, PETSC_FALSE));
    PetscCall(TestDense(&smallrect, (MatFMMKernel)k, PETSC_FALSE));
  }
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s\n", nfail ? "SOME CHECKS FAILED" : "all kernel checks passed"));
  PetscCall(ProblemDestroy(&big));
  PetscCall(ProblemDestroy(&small));
  PetscCall(ProblemDestroy(&smallrect));
  PetscCall(PetscFinalize());
  return nfail ? 1 : 0;
}

/*TEST
  test:
    args: -mat_fmm_repetition_mb 4 -malloc_dump
  test:
    suffix: 2
    nsize: 2
    args: -n 2000 -m 1500 -mat_fmm_repetition_mb 1 -mat_fmm_ct 16 -mat_fmm_distribution replicated -malloc_dump
  test:
    suffix: tinyleaves
    args: -n 1000 -m 800 -mat_fmm_ct 2 -mat_fmm_repetition_mb 0.02 -malloc_dump
TEST*/
