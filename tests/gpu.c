static char help[] = "Checks the CUDA backend of MATFMM against the CPU backend.\n\
For each kernel (single, double, combined) and near-field layout (tiled,\n\
indexing, repetition) it applies the same MATFMM (same p and CT) on both\n\
devices, requires |y_gpu - y_cpu| <= 1e-12 |y_cpu|, and requires a repeated\n\
GPU product to be bitwise identical; then the same for -mat_fmm_method direct.\n\
For the single layer in the tiled layout it prints the P2P kernel the GPU runs\n\
(-mat_view) and requires the default (symmetric where it applies) to agree with\n\
-mat_fmm_cuda_p2p_symmetric false to 1e-13.\n\
  -n <N>                             number of sources (default 3000)\n\
  -geometry <square,curve,clusters>  point distribution (default curve)\n\
  -targets <bool>                    separate targets (N/2, some on sources) instead of the sources\n\
  -oom <bool>                        only check that a GPU allocation failure is a PETSC_ERR_MEM error\n\
  -tree_only <bool>                  only check the tree and lists (large N)\n\
  -device_vectors <bool>             only check MatMult on device vectors (needs a PETSc configured with CUDA)\n\
  -device_points <bool>              only check points given in device memory (needs a PETSc configured with CUDA)\n\
  -refill <k>                        also refill the sources k times (rotated) and assemble again, as a time-stepping code\n\
  -reserve <MB>                      first check -mat_fmm_cuda_pool_reserve: bad values refused, then MB mapped up front\n\
First it checks the tree and lists built on the GPU against those built on the CPU (-mat_fmm_cuda_tree).\n\
Every -mat_fmm_ option applies to both devices; -mat_fmm_cuda_m2l <tc,fma> and -mat_fmm_cuda_log <fast,libm> pick GPU kernels.\n\n";

/*
  Output: one line per case, "ok" or the failure, so a GPU host compares it
  with tests/output/gpu_*.out.  Tests need a GPU: CI skips them.
  curve_median_chunks is a plan whose symmetric P2P sums long slot lists in
  chunks (P2PChunkSumKernel): with the median split, 10 of its leaves have
  more than FMMCUDA_SYM_GMAX = 64 lower near-list entries.  The *_global
  cases build the tree with every splitting round in global memory
  (-mat_fmm_cuda_split_local false), as on devices with less shared memory.
  The tree cases also build the GPU tree with 64-bit sort keys and require
  the same product bit for bit (the default sorts 32-bit keys and then their
  ties); tree_keys20 has many ties (short runs sorted by FixRunsKernel,
  long ones by 64-bit keys), tree_keys4 mostly long runs.
  The tree_parts cases have 2^21 points or more, which go up and are sorted
  in two parts (tree_parts_targets: the second part holds sources and
  targets).
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

typedef enum { GEOM_SQUARE, GEOM_CURVE, GEOM_CLUSTERS } Geometry;
static const char *const Geometries[] = {"square", "curve", "clusters", "Geometry", "GEOM_", NULL};

static PetscErrorCode MakePoints(Geometry g, PetscInt N, PetscReal *xy, PetscReal *nrm, PetscReal *w)
{
  PetscRandom r;

  PetscFunctionBegin;
  PetscCall(PetscRandomCreate(PETSC_COMM_SELF, &r));
  PetscCall(PetscRandomSetSeed(r, 7));
  PetscCall(PetscRandomSeed(r));
  for (PetscInt i = 0; i < N; i++) {
    PetscReal a, b;
    PetscCall(PetscRandomGetValueReal(r, &a));
    PetscCall(PetscRandomGetValueReal(r, &b));
    nrm[2 * i]     = PetscCosReal(2 * PETSC_PI * b);
    nrm[2 * i + 1] = PetscSinReal(2 * PETSC_PI * b);
    w[i]           = (0.5 + a) / N;
    switch (g) {
    case GEOM_SQUARE:
      xy[2 * i]     = a;
      xy[2 * i + 1] = b;
      break;
    case GEOM_CURVE: /* star r(t) = 1 + 0.3 cos 5t */
      TestStarCurvePoint(i, N, &xy[2 * i], &nrm[2 * i], &w[i]);
      break;
    case GEOM_CLUSTERS: /* 16 tight clusters */
      TestClusterPoint(i % 16, 1e-3, a, b, &xy[2 * i]);
      break;
    }
  }
  PetscCall(PetscRandomDestroy(&r));
  PetscFunctionReturn(0);
}

typedef struct {
  PetscInt   n, m;   /* local sources, local targets (m < 0: the sources) */
  PetscReal *xy, *nrm, *w, *txy;
} Problem;

static PetscErrorCode CreateFMM(MPI_Comm comm, const Problem *pb, MatFMMKernel k, MatFMMLayout layout, MatFMMMethod method, MatFMMDevice dev, Mat *A)
{
  PetscFunctionBegin;
  PetscCall(MatCreate(comm, A));
  PetscCall(MatSetSizes(*A, pb->m < 0 ? pb->n : pb->m, pb->n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(*A, MATFMM));
  PetscCall(MatFMMSetSources(*A, pb->n, pb->xy, pb->nrm, pb->w));
  if (pb->m >= 0) PetscCall(MatFMMSetTargets(*A, pb->m, pb->txy));
  PetscCall(MatSetFromOptions(*A)); /* -mat_fmm_ct, -mat_fmm_p, ... apply to both devices */
  PetscCall(MatFMMSetKernel(*A, k, 0.7, 1.3));
  PetscCall(MatFMMSetLayout(*A, layout));
  PetscCall(MatFMMSetMethod(*A, method));
  PetscCall(MatFMMSetDevice(*A, dev));
  PetscCall(MatAssemblyBegin(*A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* relative difference, and whether a and b are bitwise equal on every rank */
static PetscErrorCode Compare(Vec a, Vec b, PetscReal *rel, PetscBool *bitwise)
{
  const PetscScalar *x, *y;
  PetscInt           n;
  PetscMPIInt        same;

  PetscFunctionBegin;
  PetscCall(VecGetLocalSize(a, &n));
  PetscCall(VecGetArrayRead(a, &x));
  PetscCall(VecGetArrayRead(b, &y));
  same = (PetscMPIInt)(n == 0 || memcmp(x, y, n * sizeof(PetscScalar)) == 0);
  PetscCall(VecRestoreArrayRead(a, &x));
  PetscCall(VecRestoreArrayRead(b, &y));
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, PetscObjectComm((PetscObject)a)));
  *bitwise = same ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(TestRelDiff(a, b, b, rel));
  PetscFunctionReturn(0);
}

/* the line of A's -mat_view that starts with key (empty: none), up to len - 1 characters */
static PetscErrorCode ViewLine(Mat A, const char *key, char *out, size_t len)
{
  char       *buf = NULL;
  size_t      blen = 0, n = 0;
  FILE       *fp   = open_memstream(&buf, &blen);
  PetscViewer v;
  const char *line;

  PetscFunctionBegin;
  PetscCheck(fp, PETSC_COMM_SELF, PETSC_ERR_SYS, "open_memstream failed");
  PetscCall(PetscViewerASCIIOpenWithFILE(PetscObjectComm((PetscObject)A), fp, &v));
  PetscCall(MatView(A, v));
  PetscCall(PetscViewerDestroy(&v));
  (void)fclose(fp);
  line = buf ? strstr(buf, key) : NULL;
  while (line && line[n] && line[n] != '\n' && n + 1 < len) n++;
  if (line) memcpy(out, line, n);
  out[n] = 0;
  free(buf);
  PetscFunctionReturn(0);
}

/* the "CUDA P2P:" line of -mat_view (which near-field kernel A runs), printed from rank 0 */
static PetscErrorCode PrintP2PKernel(Mat A)
{
  char line[256];

  PetscFunctionBegin;
  PetscCall(ViewLine(A, "CUDA P2P:", line, sizeof(line)));
  PetscCall(PetscPrintf(PetscObjectComm((PetscObject)A), "single   tiled      %s\n", line));
  PetscFunctionReturn(0);
}

/* single layer, tiled: the symmetric P2P (default, where it applies) against every ordered pair */
static PetscErrorCode CheckSymmetric(MPI_Comm comm, const Problem *pb, Vec x, Vec ys, PetscInt *nfail)
{
  Mat       A;
  Vec       y;
  PetscReal rel;
  PetscBool bit;

  PetscFunctionBegin;
  PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_cuda_p2p_symmetric", "false"));
  PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_SINGLE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &A));
  PetscCall(PetscOptionsClearValue(NULL, "-mat_fmm_cuda_p2p_symmetric"));
  PetscCall(MatCreateVecs(A, NULL, &y));
  PetscCall(MatMult(A, x, y));
  PetscCall(Compare(ys, y, &rel, &bit));
  if (rel <= 1e-13) PetscCall(PetscPrintf(comm, "single   tiled      default vs -mat_fmm_cuda_p2p_symmetric false <= 1e-13: ok\n"));
  else {
    PetscCall(PetscPrintf(comm, "single   tiled      default vs -mat_fmm_cuda_p2p_symmetric false: FAILED %.3e > 1e-13\n", (double)rel));
    (*nfail)++;
  }
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
}

/* GPU vs CPU for one kernel/layout/method; returns the GPU product in yg (for the FMM-vs-direct check) */
static PetscErrorCode CheckCase(MPI_Comm comm, const Problem *pb, MatFMMKernel k, MatFMMLayout layout, MatFMMMethod method, Vec x, Vec yg, PetscInt *nfail)
{
  Mat          Ac, Ag;
  Vec          yc, yg2;
  PetscReal    rel, rel2;
  PetscBool    bit, bit2;
  MatFMMDevice dev;
  const char  *what = method == MATFMM_METHOD_DIRECT ? "direct" : MatFMMLayouts[layout];

  PetscFunctionBegin;
  PetscCall(CreateFMM(comm, pb, k, layout, method, MATFMM_DEVICE_CPU, &Ac));
  PetscCall(CreateFMM(comm, pb, k, layout, method, MATFMM_DEVICE_CUDA, &Ag));
  PetscCall(MatFMMGetDevice(Ag, &dev));
  PetscCheck(dev == MATFMM_DEVICE_CUDA, comm, PETSC_ERR_PLIB, "the GPU matrix runs on %s", MatFMMDevices[dev]);
  PetscCall(MatCreateVecs(Ac, NULL, &yc));
  PetscCall(VecDuplicate(yc, &yg2));
  PetscCall(MatMult(Ac, x, yc));
  PetscCall(MatMult(Ag, x, yg));
  PetscCall(MatMult(Ag, x, yg2));
  PetscCall(Compare(yg, yc, &rel, &bit));
  PetscCall(Compare(yg2, yg, &rel2, &bit2));
  if (rel <= 1e-12 && bit2) PetscCall(PetscPrintf(comm, "%-8s %-10s gpu vs cpu <= 1e-12: ok, repeated product bitwise identical: ok\n", MatFMMKernels[k], what));
  else {
    PetscCall(PetscPrintf(comm, "%-8s %-10s FAILED: gpu vs cpu %.3e (need <= 1e-12), repeated product %s\n", MatFMMKernels[k], what, (double)rel, bit2 ? "identical" : "DIFFERS"));
    (*nfail)++;
  }
  if (k == MATFMM_KERNEL_SINGLE && layout == MATFMM_LAYOUT_TILED && method == MATFMM_METHOD_FMM) {
    PetscCall(PrintP2PKernel(Ag));
    PetscCall(CheckSymmetric(comm, pb, x, yg, nfail));
  }
  PetscCall(VecDestroy(&yc));
  PetscCall(VecDestroy(&yg2));
  PetscCall(MatDestroy(&Ac));
  PetscCall(MatDestroy(&Ag));
  PetscFunctionReturn(0);
}

/* y = A x on a fresh y, required to equal yref bitwise (prints the case; a failure counts in *nfail) */
static PetscErrorCode MultSame(MPI_Comm comm, const char *what, Mat A, Vec x, Vec yref, PetscInt *nfail)
{
  Vec       y;
  PetscReal rel;
  PetscBool bit;

  PetscFunctionBegin;
  PetscCall(VecDuplicate(yref, &y));
  PetscCall(MatMult(A, x, y));
  PetscCall(Compare(y, yref, &rel, &bit));
  if (bit) PetscCall(PetscPrintf(comm, "%s: equal bitwise: ok\n", what));
  else {
    PetscCall(PetscPrintf(comm, "%s: FAILED, differs by %.3e\n", what, (double)rel));
    (*nfail)++;
  }
  PetscCall(VecDestroy(&y));
  PetscFunctionReturn(0);
}

/* prints whether got is the error code want (a failure counts in *nfail) */
static PetscErrorCode ExpectCode(MPI_Comm comm, const char *what, PetscErrorCode got, PetscErrorCode want, PetscInt *nfail)
{
  PetscFunctionBegin;
  if (got == want) PetscCall(PetscPrintf(comm, "%s: error %d: ok\n", what, (int)got));
  else {
    PetscCall(PetscPrintf(comm, "%s: FAILED, error %d, expected %d\n", what, (int)got, (int)want));
    (*nfail)++;
  }
  PetscFunctionReturn(0);
}

/* assembles A with errors returned, not raised, and expects the code want */
static PetscErrorCode AssembleExpect(MPI_Comm comm, const char *what, Mat A, PetscErrorCode want, PetscInt *nfail)
{
  PetscErrorCode e;

  PetscFunctionBegin;
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  e = MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY);
  PetscCall(PetscPopErrorHandler());
  PetscCall(ExpectCode(comm, what, e, want, nfail));
  PetscFunctionReturn(0);
}

/* the tree and lists built on the GPU (default) against those built on the CPU
   and uploaded (-mat_fmm_cuda_tree cpu): same levels, leaves, M2L and P2P
   counts; the products differ only by the order of sums within leaves */
static PetscErrorCode CheckTree(MPI_Comm comm, const Problem *pb, Vec x, PetscInt *nfail)
{
  Mat        A[2];
  Vec        y[2];
  PetscInt   L[2], nl[2], m2l[2];
  PetscCount p2p[2];
  PetscReal  rel;
  PetscBool  bit;

  PetscFunctionBegin;
  for (int t = 0; t < 2; t++) {
    PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_cuda_tree", t ? "cpu" : "gpu"));
    PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &A[t]));
    PetscCall(MatFMMGetTreeInfo(A[t], &L[t], &nl[t], &m2l[t], &p2p[t]));
    PetscCall(MatCreateVecs(A[t], NULL, &y[t]));
    PetscCall(MatMult(A[t], x, y[t]));
  }
  PetscCall(PetscOptionsClearValue(NULL, "-mat_fmm_cuda_tree"));
  PetscCall(Compare(y[0], y[1], &rel, &bit));
  if (L[0] == L[1] && nl[0] == nl[1] && m2l[0] == m2l[1] && p2p[0] == p2p[1] && rel <= 1e-13) PetscCall(PetscPrintf(comm, "tree built on the GPU vs on the CPU: same levels, leaves, M2L and P2P counts, products within 1e-13: ok\n"));
  else {
    PetscCall(PetscPrintf(comm, "tree built on the GPU vs on the CPU: FAILED: levels %d/%d leaves %d/%d M2L %d/%d P2P pairs %lld/%lld, products differ by %.3e\n", (int)L[0], (int)L[1], (int)nl[0], (int)nl[1], (int)m2l[0], (int)m2l[1], (long long)p2p[0], (long long)p2p[1], (double)rel));
    (*nfail)++;
  }
  { /* the GPU tree again through the exact 64-bit sort keys: the points in the same order, so the same product bit for bit */
    char      kb[16];
    PetscBool kbset;
    Mat       B;
    PetscCall(PetscOptionsGetString(NULL, NULL, "-mat_fmm_cuda_tree_key_bits", kb, sizeof(kb), &kbset));
    PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_cuda_tree_key_bits", "64"));
    PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &B));
    if (kbset) PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_cuda_tree_key_bits", kb));
    else PetscCall(PetscOptionsClearValue(NULL, "-mat_fmm_cuda_tree_key_bits"));
    PetscCall(MultSame(comm, "GPU tree by 64-bit sort keys vs by short keys", B, x, y[0], nfail));
    PetscCall(MatDestroy(&B));
  }
  for (int t = 0; t < 2; t++) {
    PetscCall(VecDestroy(&y[t]));
    PetscCall(MatDestroy(&A[t]));
  }
  PetscFunctionReturn(0);
}

/* a time-stepping code: the sources refilled (rotated by 0.01 j, same sizes)
   and both matrices assembled again, j = 1..k.  From the 8th refill on the
   GPU matrix reads its copy of them from page-locked memory (PinSources in
   cuda/backend.cu; -info says when), and from the 9th MatFMMSetSources()
   sends that copy to the GPU as it fills it (cuda/fmm/points.cu).  GPU vs CPU
   <= 1e-12 after each.  With k >= 9, a refill whose last normal is NaN must
   fail at assembly naming that source (its copy sent to the GPU as well),
   and the refill after it must give the product of the last good points */
static PetscErrorCode CheckRefill(MPI_Comm comm, const Problem *pb, Vec x, PetscInt k, PetscInt *nfail)
{
  Mat        A[2];
  Vec        y[2];
  PetscReal *xy, *nrm, rel, worst = 0;
  PetscBool  bit;
  PetscInt   n = pb->n;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(2 * n, &xy, 2 * n, &nrm));
  for (int t = 0; t < 2; t++) {
    PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, t ? MATFMM_DEVICE_CUDA : MATFMM_DEVICE_CPU, &A[t]));
    PetscCall(MatCreateVecs(A[t], NULL, &y[t]));
  }
  for (PetscInt j = 1; j <= k; j++) {
    const PetscReal cs = PetscCosReal(0.01 * j), sn = PetscSinReal(0.01 * j);
    for (PetscInt i = 0; i < n; i++) {
      xy[2 * i]      = cs * pb->xy[2 * i] - sn * pb->xy[2 * i + 1];
      xy[2 * i + 1]  = sn * pb->xy[2 * i] + cs * pb->xy[2 * i + 1];
      nrm[2 * i]     = cs * pb->nrm[2 * i] - sn * pb->nrm[2 * i + 1];
      nrm[2 * i + 1] = sn * pb->nrm[2 * i] + cs * pb->nrm[2 * i + 1];
    }
    for (int t = 0; t < 2; t++) {
      PetscCall(MatFMMSetSources(A[t], n, xy, nrm, pb->w));
      PetscCall(MatAssemblyBegin(A[t], MAT_FINAL_ASSEMBLY));
      PetscCall(MatAssemblyEnd(A[t], MAT_FINAL_ASSEMBLY));
      PetscCall(MatMult(A[t], x, y[t]));
    }
    PetscCall(Compare(y[1], y[0], &rel, &bit));
    worst = PetscMax(worst, rel);
  }
  if (worst <= 1e-12) PetscCall(PetscPrintf(comm, "sources refilled %d times, assembled again: gpu vs cpu <= 1e-12 after each: ok\n", (int)k));
  else {
    PetscCall(PetscPrintf(comm, "sources refilled %d times: FAILED: gpu vs cpu up to %.3e (need <= 1e-12)\n", (int)k, (double)worst));
    (*nfail)++;
  }
  if (k >= 9 && n > 0) {
    const PetscReal keep = nrm[2 * n - 1];
    const char     *text;
    char           *msg = NULL;
    nrm[2 * n - 1]      = NAN;
    PetscCall(MatFMMSetSources(A[1], n, xy, nrm, pb->w));
    nrm[2 * n - 1] = keep;
    PetscCall(AssembleExpect(comm, "a refill with a NaN normal, at assembly", A[1], PETSC_ERR_ARG_OUTOFRANGE, nfail));
    PetscCall(PetscErrorMessage(PETSC_ERR_ARG_OUTOFRANGE, &text, &msg)); /* the message of that error */
    PetscCall(PetscPrintf(comm, "  %s\n", msg ? msg : ""));
    PetscCall(MatFMMSetSources(A[1], n, xy, nrm, pb->w));
    PetscCall(MatAssemblyBegin(A[1], MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(A[1], MAT_FINAL_ASSEMBLY));
    PetscCall(MatMult(A[1], x, y[1]));
    PetscCall(Compare(y[1], y[0], &rel, &bit));
    if (rel <= 1e-12) PetscCall(PetscPrintf(comm, "refilled again with the last good points: gpu vs cpu <= 1e-12: ok\n"));
    else {
      PetscCall(PetscPrintf(comm, "refilled again with the last good points: FAILED: gpu vs cpu %.3e (need <= 1e-12)\n", (double)rel));
      (*nfail)++;
    }
  }
  for (int t = 0; t < 2; t++) {
    PetscCall(VecDestroy(&y[t]));
    PetscCall(MatDestroy(&A[t]));
  }
  PetscCall(PetscFree2(xy, nrm));
  PetscFunctionReturn(0);
}

/* -mat_fmm_cuda_pool_reserve, read when the process's CUDA context is made
   (here, before any GPU matrix): a negative, NaN, infinite or larger than
   the GPU value is refused (PETSC_ERR_ARG_OUTOFRANGE) and leaves the context
   to a later call; then mb MB are mapped up front, which -mat_view shows */
static PetscErrorCode CheckReserve(MPI_Comm comm, const Problem *pb, PetscReal mb, PetscInt *nfail)
{
  const char    *bad[] = {"-5", "nan", "inf", "1e12"};
  char           what[128], val[64], line[256];
  double         mapped = -1, used = -1;
  PetscErrorCode e;
  Mat            A;

  PetscFunctionBegin;
  for (int i = 0; i < 4; i++) {
    PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_cuda_pool_reserve", bad[i]));
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    e = PetscFMMCUDAInitialize();
    PetscCall(PetscPopErrorHandler());
    PetscCall(PetscSNPrintf(what, sizeof(what), "-mat_fmm_cuda_pool_reserve %s refused", bad[i]));
    PetscCall(ExpectCode(comm, what, e, PETSC_ERR_ARG_OUTOFRANGE, nfail));
  }
  (void)snprintf(val, sizeof(val), "%g", (double)mb); /* PetscSNPrintf() would write "256." */
  PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_cuda_pool_reserve", val));
  PetscCall(PetscFMMCUDAInitialize());
  PetscCall(PetscOptionsClearValue(NULL, "-mat_fmm_cuda_pool_reserve"));
  PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_SINGLE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &A));
  PetscCall(ViewLine(A, "CUDA memory pool", line, sizeof(line)));
  PetscCall(MatDestroy(&A));
  if (sscanf(line, "CUDA memory pool (first rank's GPU): %lf MB mapped, at most %lf", &mapped, &used) == 2 && mapped >= mb && used <= mapped) PetscCall(PetscPrintf(comm, "-mat_fmm_cuda_pool_reserve %s: at least that much mapped after an assembly, no more in use than mapped: ok\n", val));
  else {
    PetscCall(PetscPrintf(comm, "-mat_fmm_cuda_pool_reserve %s: FAILED, -mat_view says \"%s\"\n", val, line));
    (*nfail)++;
  }
  PetscFunctionReturn(0);
}

/* a GPU allocation failure must come back as PETSC_ERR_MEM: repetition records far beyond any GPU */
static PetscErrorCode CheckOOM(MPI_Comm comm)
{
  PetscInt       N = 600000, n = PETSC_DECIDE, rstart;
  PetscReal     *xy, *nrm, *w;
  Mat            A;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscSplitOwnership(comm, &n, &N));
  PetscCallMPI(MPI_Scan(&n, &rstart, 1, MPIU_INT, MPI_SUM, comm));
  rstart -= n;
  PetscCall(PetscMalloc3(2 * N, &xy, 2 * N, &nrm, N, &w));
  PetscCall(MakePoints(GEOM_SQUARE, N, xy, nrm, w));
  PetscCall(MatCreate(comm, &A));
  PetscCall(MatSetSizes(A, n, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(A, MATFMM));
  PetscCall(MatFMMSetSources(A, n, xy + 2 * rstart, NULL, NULL));
  PetscCall(MatFMMSetClusteringThreshold(A, 4096));
  PetscCall(MatFMMSetLayout(A, MATFMM_LAYOUT_REPETITION));
  PetscCall(MatFMMSetDevice(A, MATFMM_DEVICE_CUDA));
  PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_repetition_mb", "1e8")); /* the budget allows it, the GPU cannot */
  PetscCall(MatSetFromOptions(A));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY);
  PetscCall(PetscPopErrorHandler());
  if (ierr == PETSC_ERR_MEM) {
    const char *text;
    char       *msg = NULL;
    PetscCall(PetscErrorMessage(ierr, &text, &msg));
    PetscCall(PetscPrintf(comm, "GPU out of memory at assembly: PETSC_ERR_MEM: ok\n  %s\n", msg ? msg : ""));
  } else PetscCall(PetscPrintf(comm, "GPU out of memory at assembly: FAILED, error code %d instead of PETSC_ERR_MEM\n", (int)ierr));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscFunctionReturn(0);
}

/* MatCreateVecs() of a GPU matrix gives VECCUDA, and MatMult() on vectors
   whose data is on the device only leaves it there (no copy to the host: x
   and y stay PETSC_OFFLOAD_GPU) and equals the product on host vectors
   bitwise (the same kernels; only where x and y live differs) */
static PetscErrorCode CheckDeviceVectors(MPI_Comm comm, const Problem *pb, Vec xs, PetscInt *nfail)
{
#if defined(PETSC_HAVE_CUDA)
  Mat                A;
  Vec                xd, yd, xh, yh;
  PetscBool          cuda, bit;
  PetscOffloadMask   mx, my;
  PetscReal          rel;
  const PetscScalar *a;
  PetscScalar       *d;
  PetscInt           n;

  PetscFunctionBegin;
  PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_SINGLE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &A));
  PetscCall(MatCreateVecs(A, &xd, &yd));
  PetscCall(PetscObjectTypeCompareAny((PetscObject)xd, &cuda, VECSEQCUDA, VECMPICUDA, ""));
  PetscCall(PetscPrintf(comm, "MatCreateVecs of the GPU matrix: %s\n", cuda ? "VECCUDA: ok" : "FAILED: not VECCUDA"));
  if (!cuda) (*nfail)++;
  PetscCall(VecCreate(comm, &xh));
  PetscCall(VecSetSizes(xh, pb->n, PETSC_DETERMINE));
  PetscCall(VecSetType(xh, VECSTANDARD));
  PetscCall(VecCreate(comm, &yh));
  PetscCall(VecSetSizes(yh, pb->m < 0 ? pb->n : pb->m, PETSC_DETERMINE));
  PetscCall(VecSetType(yh, VECSTANDARD));
  PetscCall(VecGetLocalSize(xh, &n));
  PetscCall(VecGetArrayRead(xs, &a)); /* the densities: on the host in xh, on the device only in xd */
  PetscCall(VecGetArrayWrite(xh, &d));
  PetscCall(PetscArraycpy(d, a, n));
  PetscCall(VecRestoreArrayWrite(xh, &d));
  PetscCall(VecCUDAGetArrayWrite(xd, &d));
  PetscCallCUDA(cudaMemcpy(d, a, sizeof(PetscScalar) * n, cudaMemcpyHostToDevice));
  PetscCall(VecCUDARestoreArrayWrite(xd, &d));
  PetscCall(VecRestoreArrayRead(xs, &a));
  PetscCall(MatMult(A, xh, yh));
  PetscCall(MatMult(A, xd, yd));
  PetscCall(VecGetOffloadMask(xd, &mx));
  PetscCall(VecGetOffloadMask(yd, &my));
  if (mx == PETSC_OFFLOAD_GPU && my == PETSC_OFFLOAD_GPU) PetscCall(PetscPrintf(comm, "MatMult on device vectors: x and y stay on the device: ok\n"));
  else {
    PetscCall(PetscPrintf(comm, "MatMult on device vectors: FAILED, offload masks x %d, y %d (need %d, %d: data on the GPU only)\n", (int)mx, (int)my, (int)PETSC_OFFLOAD_GPU, (int)PETSC_OFFLOAD_GPU));
    (*nfail)++;
  }
  PetscCall(Compare(yd, yh, &rel, &bit));
  if (bit) PetscCall(PetscPrintf(comm, "MatMult on device vectors equals MatMult on host vectors bitwise: ok\n"));
  else {
    PetscCall(PetscPrintf(comm, "MatMult on device vectors: FAILED, differs from host vectors by %.3e\n", (double)rel));
    (*nfail)++;
  }
  /* the terms of a second-kind equation, added on the device: y = 2 K x (- x/2 + d .* x), then y += the same
     (the host adds them in its own loop: the two agree to rounding, 1e-14) */
  PetscCall(MatScale(A, 2.0));
  if (pb->m < 0) {
    Vec dd;
    PetscCall(MatShift(A, -0.5));
    PetscCall(MatCreateVecs(A, NULL, &dd));
    PetscCall(VecCopy(xd, dd));
    PetscCall(MatDiagonalSet(A, dd, ADD_VALUES));
    PetscCall(VecDestroy(&dd));
  }
  PetscCall(MatMult(A, xh, yh));
  PetscCall(MatMultAdd(A, xh, yh, yh));
  PetscCall(MatMult(A, xd, yd));
  PetscCall(MatMultAdd(A, xd, yd, yd));
  PetscCall(VecGetOffloadMask(xd, &mx));
  PetscCall(VecGetOffloadMask(yd, &my));
  PetscCall(Compare(yd, yh, &rel, &bit));
  if (mx == PETSC_OFFLOAD_GPU && my == PETSC_OFFLOAD_GPU && rel <= 1e-14) PetscCall(PetscPrintf(comm, "MatMult and MatMultAdd with %s on device vectors: on the device, equal to host vectors within 1e-14: ok\n", pb->m < 0 ? "scale, shift and diagonal" : "scale"));
  else {
    PetscCall(PetscPrintf(comm, "MatMult and MatMultAdd with diagonal terms on device vectors: FAILED, offload masks x %d, y %d (need %d), differs from host vectors by %.3e\n", (int)mx, (int)my, (int)PETSC_OFFLOAD_GPU, (double)rel));
    (*nfail)++;
  }
  PetscCall(VecDestroy(&xd));
  PetscCall(VecDestroy(&yd));
  PetscCall(VecDestroy(&xh));
  PetscCall(VecDestroy(&yh));
  PetscCall(MatDestroy(&A));
  PetscFunctionReturn(0);
#else
  PetscFunctionBegin;
  (void)pb;
  (void)xs;
  (void)nfail;
  SETERRQ(comm, PETSC_ERR_SUP, "-device_vectors needs a PETSc configured with CUDA");
#endif
}

#if defined(PETSC_HAVE_CUDA)
/* d = a device copy of h (n reals) */
static PetscErrorCode ToDevice(const PetscReal *h, PetscInt n, PetscReal **d)
{
  PetscFunctionBegin;
  *d = NULL;
  if (!h || n <= 0) PetscFunctionReturn(0);
  PetscCallCUDA(cudaMalloc((void **)d, sizeof(PetscReal) * n));
  PetscCallCUDA(cudaMemcpy(*d, h, sizeof(PetscReal) * n, cudaMemcpyHostToDevice));
  PetscFunctionReturn(0);
}
#endif

/* sources (and targets) given in device memory (MatFMMSetSources() with
   device arrays, as from a device vector): the same products, bitwise, as
   from host arrays, on the GPU and, copied back, on the CPU; refills; the
   diagonal; and the bad inputs (NaN/Inf, coincident points, host and device
   arrays mixed) with the matrix left as it was */
static PetscErrorCode CheckDevicePoints(MPI_Comm comm, const Problem *pb, Vec x, PetscInt *nfail)
{
#if defined(PETSC_HAVE_CUDA)
  Problem        pd = *pb;
  Mat            Ah, Ad, Ch, Cd;
  Vec            yh, dh, dd;
  PetscReal     *mv, *dmv = NULL, rel;
  PetscBool      bit;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(ToDevice(pb->xy, 2 * pb->n, &pd.xy));
  PetscCall(ToDevice(pb->nrm, 2 * pb->n, &pd.nrm));
  PetscCall(ToDevice(pb->w, pb->n, &pd.w));
  if (pb->m >= 0) PetscCall(ToDevice(pb->txy, 2 * pb->m, &pd.txy));
  PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &Ah));
  PetscCall(CreateFMM(comm, &pd, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &Ad));
  PetscCall(MatCreateVecs(Ah, NULL, &yh));
  PetscCall(MatMult(Ah, x, yh));
  PetscCall(MultSame(comm, "GPU, points in device memory vs host memory", Ad, x, yh, nfail));
  { /* the indexing layout keeps a copy of the sources in global order (the tiled one reads the matrix's copy in place) */
    Mat Ai, Aid;
    Vec yi;
    PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_INDEXING, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &Ai));
    PetscCall(CreateFMM(comm, &pd, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_INDEXING, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &Aid));
    PetscCall(VecDuplicate(yh, &yi));
    PetscCall(MatMult(Ai, x, yi));
    PetscCall(MultSame(comm, "GPU indexing layout, points in device memory vs host memory", Aid, x, yi, nfail));
    PetscCall(VecDestroy(&yi));
    PetscCall(MatDestroy(&Ai));
    PetscCall(MatDestroy(&Aid));
  }
  if (pb->m < 0) { /* the diagonal (Jacobi) reads the points on the host */
    PetscCall(MatCreateVecs(Ah, NULL, &dh));
    PetscCall(VecDuplicate(dh, &dd));
    PetscCall(MatGetDiagonal(Ah, dh));
    PetscCall(MatGetDiagonal(Ad, dd));
    PetscCall(Compare(dd, dh, &rel, &bit));
    if (bit) PetscCall(PetscPrintf(comm, "MatGetDiagonal, points in device memory vs host memory: equal bitwise: ok\n"));
    else {
      PetscCall(PetscPrintf(comm, "MatGetDiagonal, points in device memory: FAILED, differs by %.3e\n", (double)rel));
      (*nfail)++;
    }
    PetscCall(VecDestroy(&dh));
    PetscCall(VecDestroy(&dd));
  }
  if (pb->n <= 100000) { /* the CPU backend from device arrays (copied back at assembly) */
    PetscCall(CreateFMM(comm, pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CPU, &Ch));
    PetscCall(CreateFMM(comm, &pd, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CPU, &Cd));
    PetscCall(MatMult(Ch, x, yh));
    PetscCall(MultSame(comm, "CPU, points in device memory vs host memory", Cd, x, yh, nfail));
    PetscCall(MatDestroy(&Ch));
    PetscCall(MatDestroy(&Cd));
  }

  /* moved points, refilled three times: in place on the GPU */
  PetscCall(PetscMalloc1(2 * pb->n + 1, &mv));
  for (PetscInt r = 1; r <= 3; r++) {
    for (PetscInt i = 0; i < 2 * pb->n; i++) mv[i] = pb->xy[i] * (1.0 + 0.01 * r) + 0.001 * r;
    if (!dmv) PetscCall(ToDevice(mv, 2 * pb->n, &dmv));
    else PetscCallCUDA(cudaMemcpy(dmv, mv, sizeof(PetscReal) * 2 * pb->n, cudaMemcpyHostToDevice));
    PetscCall(MatFMMSetSources(Ah, pb->n, mv, pb->nrm, pb->w));
    PetscCall(MatFMMSetSources(Ad, pb->n, dmv, pd.nrm, pd.w));
    PetscCall(MatAssemblyBegin(Ah, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(Ah, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyBegin(Ad, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(Ad, MAT_FINAL_ASSEMBLY));
    PetscCall(MatMult(Ah, x, yh));
  }
  PetscCall(MultSame(comm, "GPU, points in device memory refilled 3 times", Ad, x, yh, nfail));

  /* bad input: mixed memory is refused before anything changes */
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = MatFMMSetSources(Ad, pb->n, dmv, pb->nrm, pd.w);
  PetscCall(PetscPopErrorHandler());
  PetscCall(ExpectCode(comm, "points in device memory, normals in host memory", ierr, pb->n ? PETSC_ERR_ARG_WRONG : 0, nfail));
  PetscCall(MultSame(comm, "after the refused call, the matrix as it was", Ad, x, yh, nfail));
  /* NaN and coincident points, found on the GPU, raised at assembly */
  {
    const PetscReal nan = PETSC_MAX_REAL * 10 - PETSC_MAX_REAL * 10;
    PetscInt        k   = pb->n / 2;
    /* a NaN on every rank: each raises its own error (the others' would be "invalid input on another rank") */
    if (pb->n > 0) PetscCallCUDA(cudaMemcpy(dmv + 2 * k + 1, &nan, sizeof(PetscReal), cudaMemcpyHostToDevice));
    PetscCall(MatFMMSetSources(Ad, pb->n, dmv, pd.nrm, pd.w));
    PetscCall(AssembleExpect(comm, "NaN in a point in device memory, at assembly", Ad, PETSC_ERR_ARG_OUTOFRANGE, nfail));
    for (PetscInt i = 0; i < pb->n; i++) mv[2 * i] = 0.25, mv[2 * i + 1] = -0.5;
    PetscCallCUDA(cudaMemcpy(dmv, mv, sizeof(PetscReal) * 2 * pb->n, cudaMemcpyHostToDevice));
    PetscCall(MatFMMSetSources(Ad, pb->n, dmv, pd.nrm, pd.w));
    PetscCall(AssembleExpect(comm, "all points in device memory at one place, at assembly", Ad, PETSC_ERR_ARG_WRONG, nfail));
    if (pb->m >= 0) { /* a NaN target */
      if (pb->m > 0) PetscCallCUDA(cudaMemcpy(pd.txy, &nan, sizeof(PetscReal), cudaMemcpyHostToDevice));
      PetscCall(MatFMMSetSources(Ad, pb->n, pd.xy, pd.nrm, pd.w));
      PetscCall(MatFMMSetTargets(Ad, pb->m, pd.txy));
      PetscCall(AssembleExpect(comm, "NaN in a target in device memory, at assembly", Ad, PETSC_ERR_ARG_OUTOFRANGE, nfail));
    }
  }
  PetscCall(PetscFree(mv));
  PetscCallCUDA(cudaFree(dmv));
  PetscCallCUDA(cudaFree(pd.xy));
  PetscCallCUDA(cudaFree(pd.nrm));
  PetscCallCUDA(cudaFree(pd.w));
  PetscCallCUDA(cudaFree(pd.txy));
  PetscCall(VecDestroy(&yh));
  PetscCall(MatDestroy(&Ah));
  PetscCall(MatDestroy(&Ad));
  PetscFunctionReturn(0);
#else
  PetscFunctionBegin;
  (void)pb;
  (void)x;
  (void)nfail;
  SETERRQ(comm, PETSC_ERR_SUP, "-device_points needs a PETSc configured with CUDA");
#endif
}

int main(int argc, char **argv)
{
  PetscInt    N = 3000, n, rstart, nfail = 0, ndev, refill = 0;
  PetscReal   reserve = 0;
  Geometry    g       = GEOM_CURVE;
  PetscBool   targets = PETSC_FALSE, oom = PETSC_FALSE, treeonly = PETSC_FALSE, devvecs = PETSC_FALSE, devpts = PETSC_FALSE;
  PetscReal  *xy, *nrm, *w, *txy = NULL;
  Problem     pb;
  Vec         x, yg, yd;
  PetscRandom rnd;
  MPI_Comm    comm;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  comm = PETSC_COMM_WORLD;
  PetscOptionsBegin(comm, NULL, "gpu test options", NULL);
  PetscCall(PetscOptionsInt("-n", "Number of sources", NULL, N, &N, NULL));
  PetscCall(PetscOptionsEnum("-geometry", "Point distribution", NULL, Geometries, (PetscEnum)g, (PetscEnum *)&g, NULL));
  PetscCall(PetscOptionsBool("-targets", "Separate targets", NULL, targets, &targets, NULL));
  PetscCall(PetscOptionsBool("-oom", "Check the out-of-memory error only", NULL, oom, &oom, NULL));
  PetscCall(PetscOptionsBool("-tree_only", "Check the tree and lists only", NULL, treeonly, &treeonly, NULL));
  PetscCall(PetscOptionsBool("-device_vectors", "Check MatMult on device vectors only", NULL, devvecs, &devvecs, NULL));
  PetscCall(PetscOptionsBool("-device_points", "Check points given in device memory only", NULL, devpts, &devpts, NULL));
  PetscCall(PetscOptionsInt("-refill", "Also refill the sources this many times and assemble again", NULL, refill, &refill, NULL));
  PetscCall(PetscOptionsReal("-reserve", "First check -mat_fmm_cuda_pool_reserve with this many MB", NULL, reserve, &reserve, NULL));
  PetscOptionsEnd();
  PetscCall(PetscFMMCUDAGetDeviceCount(&ndev));
  PetscCheck(ndev > 0, comm, PETSC_ERR_SUP, "this test needs a CUDA GPU and petscfmm built with CUDA");
  if (oom) {
    PetscCall(CheckOOM(comm));
    PetscCall(PetscFinalize());
    return 0;
  }

  PetscCall(PetscMalloc3(2 * N, &xy, 2 * N, &nrm, N, &w));
  PetscCall(MakePoints(g, N, xy, nrm, w));
  n = PETSC_DECIDE;
  PetscCall(PetscSplitOwnership(comm, &n, &N));
  PetscCallMPI(MPI_Scan(&n, &rstart, 1, MPIU_INT, MPI_SUM, comm));
  rstart -= n;
  pb.n   = n;
  pb.m   = -1;
  pb.xy  = xy + 2 * rstart;
  pb.nrm = nrm + 2 * rstart;
  pb.w   = w + rstart;
  if (targets) { /* n/2 local targets: every 4th on a source (zero-distance pairs), the rest random */
    PetscRandom r;
    pb.m = n / 2;
    PetscCall(PetscMalloc1(2 * pb.m + 2, &txy));
    PetscCall(PetscRandomCreate(PETSC_COMM_SELF, &r));
    PetscCall(PetscRandomSetSeed(r, 11 + rstart));
    PetscCall(PetscRandomSeed(r));
    for (PetscInt i = 0; i < pb.m; i++) {
      PetscReal a, b;
      PetscCall(PetscRandomGetValueReal(r, &a));
      PetscCall(PetscRandomGetValueReal(r, &b));
      txy[2 * i]     = i % 4 == 0 ? pb.xy[4 * i] : 2.6 * a - 1.3;
      txy[2 * i + 1] = i % 4 == 0 ? pb.xy[4 * i + 1] : 2.6 * b - 1.3;
    }
    PetscCall(PetscRandomDestroy(&r));
    pb.txy = txy;
  }

  if (reserve > 0) PetscCall(CheckReserve(comm, &pb, reserve, &nfail));
  {
    Mat A;
    PetscCall(CreateFMM(comm, &pb, MATFMM_KERNEL_SINGLE, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &A));
    PetscCall(MatCreateVecs(A, &x, &yg));
    PetscCall(MatDestroy(&A));
  }
  PetscCall(VecDuplicate(yg, &yd));
  PetscCall(PetscRandomCreate(comm, &rnd));
  PetscCall(PetscRandomSetSeed(rnd, 3));
  PetscCall(PetscRandomSeed(rnd));
  PetscCall(VecSetRandom(x, rnd));
  if (devvecs) PetscCall(CheckDeviceVectors(comm, &pb, x, &nfail));
  else if (devpts) PetscCall(CheckDevicePoints(comm, &pb, x, &nfail));
  else PetscCall(CheckTree(comm, &pb, x, &nfail));
  if (refill > 0 && pb.m < 0 && !devvecs && !devpts) PetscCall(CheckRefill(comm, &pb, x, refill, &nfail));
  if (!treeonly && !devvecs && !devpts) {
    for (int k = MATFMM_KERNEL_SINGLE; k <= MATFMM_KERNEL_COMBINED; k++) {
      for (int l = MATFMM_LAYOUT_TILED; l <= MATFMM_LAYOUT_REPETITION; l++) PetscCall(CheckCase(comm, &pb, (MatFMMKernel)k, (MatFMMLayout)l, MATFMM_METHOD_FMM, x, yg, &nfail));
      PetscCall(CheckCase(comm, &pb, (MatFMMKernel)k, MATFMM_LAYOUT_TILED, MATFMM_METHOD_DIRECT, x, yd, &nfail));
    }
    { /* the GPU FMM approximates the GPU direct sum (last kernel: combined) within theta^p,
         ten times the error model behind -mat_fmm_eps (0.1 theta^p) */
      PetscReal rel, theta = 0.5, tol;
      PetscBool bit;
      PetscInt  p;
      Mat       A;
      PetscCall(CreateFMM(comm, &pb, MATFMM_KERNEL_COMBINED, MATFMM_LAYOUT_TILED, MATFMM_METHOD_FMM, MATFMM_DEVICE_CUDA, &A));
      PetscCall(MatFMMGetExpansionOrder(A, &p));
      PetscCall(MatDestroy(&A));
      PetscCall(PetscOptionsGetReal(NULL, NULL, "-mat_fmm_theta", &theta, NULL));
      tol = PetscMax(PetscPowReal(theta, (PetscReal)p), 1e-12);
      PetscCall(Compare(yg, yd, &rel, &bit));
      if (rel <= tol) PetscCall(PetscPrintf(comm, "combined fmm vs direct on the GPU within theta^p: ok\n"));
      else {
        PetscCall(PetscPrintf(comm, "combined fmm vs direct on the GPU: FAILED %.3e > %.3e\n", (double)rel, (double)tol));
        nfail++;
      }
    }
  }
  PetscCall(PetscPrintf(comm, "%s\n", nfail ? "FAILED" : "all cases agree"));
  PetscCall(PetscRandomDestroy(&rnd));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&yg));
  PetscCall(VecDestroy(&yd));
  PetscCall(PetscFree(txy));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscCall(PetscFinalize());
  return nfail ? 1 : 0;
}

/*TEST

  test:
    suffix: curve
    requires: cuda
    args: -n 3000 -geometry curve -mat_fmm_ct 16

  test:
    suffix: curve_median
    requires: cuda
    args: -n 3000 -geometry curve -mat_fmm_ct 16 -mat_fmm_tree_split median

  test:
    suffix: curve_median_chunks
    requires: cuda
    args: -n 40000 -geometry curve -mat_fmm_ct 32 -mat_fmm_tree_split median

  test:
    suffix: refill
    requires: cuda
    args: -n 20000 -geometry curve -tree_only -refill 10 -malloc_dump

  test:
    suffix: tree_curve
    requires: cuda
    args: -n 200000 -geometry curve -mat_fmm_ct 64 -tree_only

  test:
    suffix: tree_clusters
    requires: cuda
    args: -n 200000 -geometry clusters -mat_fmm_ct 64 -tree_only

  test:
    suffix: tree_deep
    requires: cuda
    args: -n 200000 -geometry clusters -mat_fmm_ct 4 -tree_only

  test:
    suffix: tree_parts
    requires: cuda
    args: -n 2200000 -geometry curve -mat_fmm_ct 64 -tree_only

  test:
    suffix: tree_parts_targets
    requires: cuda
    args: -n 1500000 -geometry clusters -mat_fmm_ct 16 -targets -tree_only

  test:
    suffix: tree_keys20
    requires: cuda
    args: -n 200000 -geometry curve -mat_fmm_ct 64 -tree_only -mat_fmm_cuda_tree_key_bits 20

  test:
    suffix: tree_keys4
    requires: cuda
    args: -n 50000 -geometry clusters -mat_fmm_ct 16 -targets -tree_only -mat_fmm_cuda_tree_key_bits 4

  test:
    suffix: tree_global
    requires: cuda
    args: -n 200000 -geometry curve -mat_fmm_ct 64 -tree_only -mat_fmm_cuda_split_local false

  test:
    suffix: tree_global_median
    requires: cuda
    args: -n 50000 -geometry clusters -mat_fmm_ct 8 -targets -tree_only -mat_fmm_tree_split median -mat_fmm_cuda_split_local false

  test:
    suffix: tree_room1
    requires: cuda
    args: -n 200000 -geometry clusters -mat_fmm_ct 16 -targets -tree_only -mat_fmm_cuda_tree_list_room 1 -info
    filter: awk '/strong lists of level .* built again/ {s = 1} /far lists of levels .* built again/ {f = 1} /^\[/ {next} {print} END {print "strong lists built again: " (s ? "yes" : "no") ", far lists built again: " (f ? "yes" : "no")}'

  test:
    suffix: tree_room4
    requires: cuda
    args: -n 200000 -geometry curve -mat_fmm_ct 16 -tree_only -mat_fmm_cuda_tree_list_room 4 -info
    filter: awk '/strong lists of level .* built again/ {s = 1} /far lists of levels .* built again/ {f = 1} /^\[/ {next} {print} END {print "strong lists built again: " (s ? "yes" : "no") ", far lists built again: " (f ? "yes" : "no")}'

  test:
    suffix: tree_square
    requires: cuda
    args: -n 200000 -geometry square -mat_fmm_ct 16 -tree_only -info
    filter: awk '/strong lists of level .* built again/ {s = 1} /far lists of levels .* built again/ {f = 1} /^\[/ {next} {print} END {print "strong lists built again: " (s ? "yes" : "no") ", far lists built again: " (f ? "yes" : "no")}'

  test:
    suffix: curve_global
    requires: cuda
    args: -n 3000 -geometry curve -mat_fmm_ct 16 -mat_fmm_cuda_split_local false

  test:
    suffix: curve_fma
    requires: cuda
    args: -n 3000 -geometry curve -mat_fmm_ct 16 -mat_fmm_cuda_m2l fma -mat_fmm_cuda_log libm

  test:
    suffix: square_p40
    requires: cuda
    args: -n 3000 -geometry square -mat_fmm_p 40 -mat_fmm_ct 12

  test:
    suffix: square_bigleaf
    requires: cuda
    args: -n 8000 -geometry square -mat_fmm_ct 700 -mat_fmm_p 12 -mat_fmm_repetition_mb 200

  test:
    suffix: square_ct128
    requires: cuda
    args: -n 6000 -geometry square -mat_fmm_ct 128 -mat_fmm_p 12

  test:
    suffix: curve_ct256
    requires: cuda
    args: -n 3000 -geometry curve -mat_fmm_ct 256 -mat_fmm_p 16

  test:
    suffix: square_p5
    requires: cuda
    args: -n 4000 -geometry square -mat_fmm_p 5 -mat_fmm_ct 8

  test:
    suffix: clusters_p48
    requires: cuda
    args: -n 3000 -geometry clusters -mat_fmm_p 48 -mat_fmm_ct 24 -mat_fmm_repetition_mb 2

  test:
    suffix: targets
    requires: cuda
    args: -n 3000 -geometry square -targets -mat_fmm_ct 20 -mat_fmm_eps 1e-6

  test:
    suffix: mpi
    requires: cuda
    nsize: 2
    args: -n 3000 -geometry curve -mat_fmm_ct 12 -targets

  test:
    suffix: tiny
    requires: cuda
    args: -n 7 -geometry square

  test:
    suffix: device_vectors
    requires: cuda petsc_cuda
    args: -n 20000 -geometry curve -device_vectors -malloc_dump

  test:
    suffix: device_vectors_targets
    requires: cuda petsc_cuda
    args: -n 6000 -geometry square -targets -mat_fmm_ct 20 -device_vectors -malloc_dump

  test:
    suffix: device_points
    requires: cuda petsc_cuda
    args: -n 20000 -geometry curve -device_points -malloc_dump

  test:
    suffix: device_points_targets
    requires: cuda petsc_cuda
    args: -n 6000 -geometry square -targets -mat_fmm_ct 20 -device_points -malloc_dump

  test:
    suffix: device_points_parts
    requires: cuda petsc_cuda
    args: -n 2200000 -geometry curve -mat_fmm_p 8 -device_points

  test:
    suffix: device_points_mpi
    requires: cuda petsc_cuda
    nsize: 2
    args: -n 6000 -geometry curve -targets -mat_fmm_ct 20 -device_points

  test:
    suffix: reserve
    requires: cuda
    args: -n 20000 -geometry curve -tree_only -reserve 256

  test:
    suffix: oom
    requires: cuda
    args: -oom
    filter: sed -E 's/[0-9]+\.[0-9] MB/X MB/g; s/GPU [0-9]+ has/GPU X has/'

TEST*/
