static char help[] = "MATFMM on any number of ranks gives the product of one rank.\n\
  -n <N>, -m <M>   sources and separate targets (default 6000, 4000)\n\
  -verbose         print the measured differences (not for reference outputs)\n\n";

/*
  The same operator is applied on PETSC_COMM_WORLD (rows and columns split
  unevenly over the ranks) and, on rank 0, on PETSC_COMM_SELF with all the
  data; the distributed product is gathered to rank 0 and compared.  The plan
  is built from all sources and the targets of all ranks, so it does not depend
  on the rank count and the products agree to rounding (in fact bitwise).
  Cases: targets = sources (with an empty rank when size > 2), and separate
  targets with no target on rank 1 (on rank 0 when size = 1 there is none to
  empty), combined kernel with normals and weights (every gathered array), for
  -mat_fmm_method fmm and direct; the FMM also matches direct to 1e-10, and
  on one rank 1 and 3 OpenMP threads give bitwise the same product.
  Run with -n 1, 2, 3: the outputs are identical.
*/
#include <petscfmm.h>
#include "testutil.h"
#if defined(_OPENMP)
  #include <omp.h>
#endif

static PetscBool   verbose = PETSC_FALSE;
static PetscInt    nfail   = 0;
static PetscMPIInt rank, size;

typedef struct {
  PetscInt   N, M;
  PetscReal *src, *nrm, *w, *tgt;
} Problem;

/* two bodies: a star-shaped curve and a cluster of points inside it; targets around both */
static PetscErrorCode ProblemCreate(PetscInt N, PetscInt M, Problem *P)
{
  PetscFunctionBeginUser;
  P->N = N;
  P->M = M;
  PetscCall(PetscMalloc4(2 * N, &P->src, 2 * N, &P->nrm, N, &P->w, 2 * M, &P->tgt));
  for (PetscInt j = 0; j < N; j++) {
    if (j % 3) {
      PetscReal t = 2 * PETSC_PI * j / N, r = 1 + 0.25 * PetscCosReal(5 * t);
      P->src[2 * j]     = r * PetscCosReal(t);
      P->src[2 * j + 1] = r * PetscSinReal(t);
    } else {
      PetscReal a = PetscSinReal(12.9898 * j) * 0.5 + 0.5, b = PetscSinReal(78.233 * j);
      P->src[2 * j]     = 0.3 + 0.05 * a * PetscCosReal(3.0 * b);
      P->src[2 * j + 1] = -0.2 + 0.05 * a * PetscSinReal(3.0 * b);
    }
    P->nrm[2 * j]     = PetscCosReal(0.7 * j);
    P->nrm[2 * j + 1] = PetscSinReal(0.7 * j);
    P->w[j]           = (1.0 + 0.5 * PetscSinReal(0.3 * j)) / N;
  }
  for (PetscInt i = 0; i < M; i++) {
    PetscReal t = 2 * PETSC_PI * PetscSinReal(3.3 * i), r = 1.6 * (0.5 + 0.5 * PetscSinReal(7.7 * i));
    P->tgt[2 * i]     = r * PetscCosReal(t);
    P->tgt[2 * i + 1] = r * PetscSinReal(t);
  }
  PetscFunctionReturn(0);
}

static PetscErrorCode ProblemDestroy(Problem *P)
{
  PetscFunctionBeginUser;
  PetscCall(PetscFree4(P->src, P->nrm, P->w, P->tgt));
  PetscFunctionReturn(0);
}

/* local sizes by weights per rank (a weight 0 empties a rank) */
static void SplitW(PetscInt n, const PetscInt *wts, PetscMPIInt r0, PetscMPIInt nr, PetscInt *start, PetscInt *len)
{
  PetscInt tot = 0, s = 0;
  for (PetscMPIInt r = 0; r < nr; r++) tot += wts[r];
  for (PetscMPIInt r = 0; r < nr; r++) {
    PetscInt l = (r == nr - 1) ? n - s : (n * wts[r]) / tot;
    if (r == r0) {
      *start = s;
      *len   = l;
    }
    s += l;
  }
}

/* the operator on comm with this rank's slices; same == targets are the sources */
static PetscErrorCode Create(MPI_Comm comm, const Problem *P, PetscInt s0, PetscInt n, PetscInt t0, PetscInt m, PetscBool same, MatFMMMethod method, Mat *A)
{
  PetscFunctionBeginUser;
  PetscCall(MatCreate(comm, A));
  PetscCall(MatSetSizes(*A, same ? n : m, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(*A, MATFMM));
  PetscCall(MatFMMSetSources(*A, n, P->src + 2 * s0, P->nrm + 2 * s0, P->w + s0));
  if (!same) PetscCall(MatFMMSetTargets(*A, m, P->tgt + 2 * t0));
  PetscCall(MatFMMSetKernel(*A, MATFMM_KERNEL_COMBINED, 0.8, 1.2));
  PetscCall(MatSetFromOptions(*A));
  PetscCall(MatFMMSetMethod(*A, method));
  PetscCall(MatAssemblyBegin(*A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* "<what> <= <tol> ok/FAILED" for the value of rank 0 (the others' is 0), failures counted in nfail on every rank */
static PetscErrorCode Check(const char *what, PetscReal val, PetscReal tol)
{
  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Bcast(&val, 1, MPIU_REAL, 0, PETSC_COMM_WORLD));
  PetscCall(TestCheck(what, val, tol, verbose, &nfail));
  PetscFunctionReturn(0);
}

/* x_j = cos(0.37 j) + 0.5 sin(0.011 j^2), a function of the global index */
static PetscErrorCode FillX(Vec x)
{
  PetscInt     lo, hi;
  PetscScalar *a;

  PetscFunctionBeginUser;
  PetscCall(VecGetOwnershipRange(x, &lo, &hi));
  PetscCall(VecGetArrayWrite(x, &a));
  for (PetscInt j = lo; j < hi; j++) a[j - lo] = PetscCosReal(0.37 * j) + 0.5 * PetscSinReal(0.011 * j * j);
  PetscCall(VecRestoreArrayWrite(x, &a));
  PetscFunctionReturn(0);
}

/* product on WORLD gathered to rank 0 (y0, valid on rank 0) */
static PetscErrorCode ProductWorld(const Problem *P, PetscBool same, MatFMMMethod method, const PetscInt *sw, const PetscInt *tw, Vec *y0)
{
  Mat        A;
  Vec        x, y;
  VecScatter sc;
  PetscInt   s0 = 0, n = 0, t0 = 0, m = 0;

  PetscFunctionBeginUser;
  SplitW(P->N, sw, rank, size, &s0, &n);
  SplitW(P->M, tw, rank, size, &t0, &m);
  PetscCall(Create(PETSC_COMM_WORLD, P, s0, n, t0, m, same, method, &A));
  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(FillX(x));
  PetscCall(MatMult(A, x, y));
  PetscCall(VecScatterCreateToZero(y, &sc, y0));
  PetscCall(VecScatterBegin(sc, y, *y0, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecScatterEnd(sc, y, *y0, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecScatterDestroy(&sc));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
}

/* the same product on PETSC_COMM_SELF on rank 0 */
static PetscErrorCode ProductSelf(const Problem *P, PetscBool same, MatFMMMethod method, Vec *y)
{
  Mat A;
  Vec x;

  PetscFunctionBeginUser;
  *y = NULL;
  if (rank) PetscFunctionReturn(0);
  PetscCall(Create(PETSC_COMM_SELF, P, 0, P->N, 0, P->M, same, method, &A));
  PetscCall(MatCreateVecs(A, &x, y));
  PetscCall(FillX(x));
  PetscCall(MatMult(A, x, *y));
  PetscCall(VecDestroy(&x));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
}

/* |a - b| / |b| on rank 0 (0 elsewhere: only rank 0 holds the gathered products) */
static PetscErrorCode RelDiff(Vec a, Vec b, PetscReal *d)
{
  PetscFunctionBeginUser;
  *d = 0;
  if (rank) PetscFunctionReturn(0);
  PetscCall(TestRelDiff(a, b, b, d));
  PetscFunctionReturn(0);
}

static PetscErrorCode RunCase(const Problem *P, PetscBool same, const PetscInt *sw, const PetscInt *tw, const char *tag)
{
  Vec       yw[2], ys[2];
  PetscReal d;
  char      what[200];

  PetscFunctionBeginUser;
  for (PetscInt k = 0; k < 2; k++) {
    MatFMMMethod method = k ? MATFMM_METHOD_DIRECT : MATFMM_METHOD_FMM;
    PetscCall(ProductWorld(P, same, method, sw, tw, &yw[k]));
    PetscCall(ProductSelf(P, same, method, &ys[k]));
    PetscCall(RelDiff(yw[k], ys[k], &d));
    PetscCall(PetscSNPrintf(what, sizeof(what), "%s, %s: all ranks vs one rank", tag, MatFMMMethods[method]));
    PetscCall(Check(what, d, 1e-14));
  }
  /* the CPU backend sums in a fixed order whatever the thread count: 1 vs 3 threads, bitwise */
#if defined(_OPENMP)
  {
    Vec       y1, y3;
    PetscBool eq = PETSC_TRUE;
    int       nt = omp_get_max_threads();
    omp_set_num_threads(1);
    PetscCall(ProductSelf(P, same, MATFMM_METHOD_FMM, &y1));
    omp_set_num_threads(3);
    PetscCall(ProductSelf(P, same, MATFMM_METHOD_FMM, &y3));
    omp_set_num_threads(nt);
    if (!rank) PetscCall(VecEqual(y1, y3, &eq));
    {
      PetscMPIInt e = eq ? 1 : 0;
      PetscCallMPI(MPI_Bcast(&e, 1, MPI_INT, 0, PETSC_COMM_WORLD));
      eq = e ? PETSC_TRUE : PETSC_FALSE;
    }
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s, fmm: one rank, 1 thread vs 3 threads: bitwise identical %s\n", tag, eq ? "ok" : "FAILED"));
    if (!eq) nfail++;
    PetscCall(VecDestroy(&y1));
    PetscCall(VecDestroy(&y3));
  }
#endif
  PetscCall(RelDiff(yw[0], yw[1], &d));
  PetscCall(PetscSNPrintf(what, sizeof(what), "%s: fmm vs direct, all ranks", tag));
  PetscCall(Check(what, d, 1e-10));
  for (PetscInt k = 0; k < 2; k++) {
    PetscCall(VecDestroy(&yw[k]));
    PetscCall(VecDestroy(&ys[k]));
  }
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  PetscInt N = 6000, M = 4000, *sw, *tw;
  Problem  P;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &N, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-m", &M, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-verbose", &verbose, NULL));
  PetscCall(ProblemCreate(N, M, &P));
  PetscCall(PetscMalloc2(size, &sw, size, &tw));

  /* targets = sources; uneven, and the middle rank empty when there are 3 or more */
  for (PetscMPIInt r = 0; r < size; r++) sw[r] = (size > 2 && r == size / 2) ? 0 : 1 + 2 * r;
  PetscCall(RunCase(&P, PETSC_TRUE, sw, sw, "targets = sources, uneven rows"));

  /* separate targets: none on rank 1, sources weighted the other way */
  for (PetscMPIInt r = 0; r < size; r++) {
    sw[r] = size - r;
    tw[r] = (size > 1 && r == 1) ? 0 : 1 + r;
  }
  PetscCall(RunCase(&P, PETSC_FALSE, sw, tw, "separate targets, none on rank 1"));

  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s\n", nfail ? "SOME CHECKS FAILED" : "all MPI checks passed"));
  PetscCall(PetscFree2(sw, tw));
  PetscCall(ProblemDestroy(&P));
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
    suffix: 3_indexing
    nsize: 3
    args: -mat_fmm_layout indexing -mat_fmm_ct 20 -malloc_dump
TEST*/
