static char help[] = "MATFMM benchmark: setup, MatMult (median of -reps), time per phase, rates, sampled error.\n\
  -n <N>                        points (default 1000000)\n\
  -geometry <square,curve,blob> uniform in the unit square, on a star-shaped closed curve, or 99%% in a\n\
                                Gaussian blob about (0.3, 0.7) and 1%% uniform in the unit square (default curve)\n\
  -blob_std <s>                 the blob's standard deviation (default 1e-9)\n\
  -layout <index,x,tree>        curve: the ranks hold the points in index order, in order of x, or as the\n\
                                distributed tree's parts do (MatFMMGetTreePartition() of a first assembly\n\
                                on the index order: no point moves between ranks; default index)\n\
  -reps <r>                     timed MatMults (default 10)\n\
  -sample <s>                   targets checked against exact summation (default 200; 0: none)\n\
  -reassemble <k>               then k more assemblies with the points set again (default 0)\n\
  -setups <k>                   then k more matrices made and assembled on the same points, each destroyed\n\
                                after (default 0)\n\
  -idle <ms>                    with -setups: the host busy and the GPU idle this long before each of those\n\
                                matrices, and -reps more products timed after as long (default 0)\n\
  -host_vectors <bool>          MatMult on host vectors (VECSTANDARD) where MatCreateVecs gives device\n\
                                ones (a PETSc configured with CUDA); default false\n\
  -device_points <bool>         give MatFMMSetSources() the points, normals and weights in device memory\n\
                                (a PETSc configured with CUDA), as a code whose points live on the GPU; default false\n\
  -kernel <single,double>       via -mat_fmm_kernel; every -mat_fmm_ option applies\n\n";

/*
  Prints, for the options given:
    bench: device=.. vec=.. points=.. N=.. geometry=.. eps=.. p=.. ct=.. layout=.. levels=.. setup_s=.. create_s=.. setsources_s=.. assembly_s=.. cuda_init_s=.. mult_med_s=.. mult_min_s=.. mult_max_s=.. mult_logged_med_s=.. points_per_s=..
  vec is the type of x and y (seqcuda: the product moves no vector between
  host and device); setup_s is MatCreate to MatAssemblyEnd (the sources copied in, the tree, the
  lists, the device arrays), create_s its MatCreate, MatSetSizes and
  MatSetType (with PETSc's first use of the communicator in the process, a
  cost any first PETSc object on it pays), setsources_s its
  MatFMMSetSources() and assembly_s its MatAssemblyBegin/End;
  cuda_init_s is PetscFMMCUDAInitialize(), the CUDA context, once per process;
  rss_max_mb is the largest peak resident memory of a rank over the whole run
  (rss_sum_mb their sum), rss_assembly_mb that peak at the end of the first
  assembly; with -layout tree, rss_layout_mb that peak at the end of the
  assembly that found the tree's parts, and (Linux) rss_after_layout_mb the
  largest peak of a rank after it: the peak is reset there to the memory
  then resident, so this is the run in the tree's layout alone, and
  rss_assembly_mb is counted from there too;
  with -reassemble k, reassembly_med_s is the median of k assemblies after
  MatFMMSetSources() with the same points (what a time-stepping code pays when
  its points move: the tree is rebuilt), and setsources_med_s the median of
  those MatFMMSetSources() calls (the copy and check of the points; points=
  says whether they are given in host or device memory); with -setups k,
  setup_med_s (and _min_, _max_) is MatCreate to MatAssemblyEnd of k more
  matrices on the same points, made one at a time after the timed products
  and destroyed after their assembly: the setup of a new operator in a
  process that has used the GPU (setup_s is the process's first, the GPU
  idle since the points were made); with -idle t as well, each of them
  comes after t ms of the host busy and the GPU given nothing (as a program
  between two calls), and mult_idle_med_s is the median of -reps more
  products each after as long: the GPU lowers its clocks
  when it has nothing to do, and the first work it is given runs slower.  These and
  mult_*_s are timed with PETSc's logging off (unless -log_view), as a code
  runs without -log_view; then the products run again with it on, each
  phase's event waiting for the GPU: mult_logged_med_s is their median, and
  phases_ms their time per phase.
    phases_ms: P2M=.. M2M=.. M2L=.. L2L=.. L2P=.. P2P=..   (per MatMult)
    rates: p2p_pairs_per_s=.. m2l_gflops=.. m2l_count=.. p2p_pairs=.. relerr_sample=..
    check: y_sum=..   (the sum of the last product, to 17 digits)
  m2l_gflops divides the flops that the FMMM2L event logged (the library's
  flop model, FMMFlops in src/fmm/fmmimpl.h: 4p^2 + 20p per translation, the
  two real (p x p) matrix-vector products of FMMM2L and the powers and
  scalings around them) by its time.  Rates are printed for -mat_fmm_method
  fmm only.
*/
#include <petscfmm.h>
#include <sys/resource.h>
#include "../tests/testutil.h"
#if defined(PETSC_HAVE_CUDA)
  #if PETSC_VERSION_LT(3, 19, 0)
    #include <petscdevice.h>
  #else
    #include <petscdevice_cuda.h>
  #endif
#endif

static int CmpReal(const void *a, const void *b)
{
  PetscReal x = *(const PetscReal *)a, y = *(const PetscReal *)b;
  return (x > y) - (x < y);
}

/* the host busy for idle seconds, the GPU given nothing: a program's own work between two calls */
static PetscErrorCode Idle(PetscReal idle)
{
  PetscLogDouble a, b;

  PetscFunctionBeginUser;
  if (idle <= 0) PetscFunctionReturn(0);
  PetscCall(PetscTime(&a));
  do PetscCall(PetscTime(&b));
  while (b - a < idle);
  PetscFunctionReturn(0);
}

/* t[0..reps) = the times of reps products y = A x, sorted; each after idle seconds (Idle) */
static PetscErrorCode TimeMults(Mat A, Vec x, Vec y, PetscInt reps, PetscReal idle, PetscReal *t)
{
  PetscFunctionBeginUser;
  for (PetscInt r = 0; r < reps; r++) {
    PetscLogDouble a, b;
    PetscCall(Idle(idle));
    PetscCall(PetscBarrier((PetscObject)A));
    PetscCall(PetscTime(&a));
    PetscCall(MatMult(A, x, y));
    PetscCall(PetscBarrier((PetscObject)A));
    PetscCall(PetscTime(&b));
    t[r] = b - a;
  }
  qsort(t, reps, sizeof(PetscReal), CmpReal);
  PetscFunctionReturn(0);
}

typedef struct {
  PetscReal x;
  PetscInt  g;
} XKey;

/* this process's peak resident memory so far, in MB */
static PetscReal PeakMB(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (PetscReal)ru.ru_maxrss / 1024;
}

/* Linux: the process's peak resident memory reset to what is resident now (clear_refs 5), so that
   HighWaterMB() gives the peak of what follows; false where the system cannot */
static PetscBool ResetPeak(void)
{
  FILE *f = fopen("/proc/self/clear_refs", "w");
  int   ok;

  if (!f) return PETSC_FALSE;
  ok = fputs("5", f) >= 0;
  ok = fclose(f) == 0 && ok;
  return ok ? PETSC_TRUE : PETSC_FALSE;
}

/* VmHWM of /proc/self/status in MB: the peak resident memory since ResetPeak(); -1 where there is none */
static PetscReal HighWaterMB(void)
{
  FILE     *f = fopen("/proc/self/status", "r");
  char      line[256];
  long      kb;
  PetscReal mb = -1;

  if (!f) return -1;
  while (mb < 0 && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) mb = (PetscReal)kb / 1024;
  fclose(f);
  return mb;
}

/* -layout tree: the curve's points (global numbers) this rank's part of the distributed tree holds, from a
   first assembly on the index order (the options of the run apply) */
static PetscErrorCode TreeLayout(PetscInt N, PetscInt *n, PetscInt **gidx)
{
  Mat             A;
  IS              is;
  PetscInt        m = PETSC_DECIDE, r0 = 0;
  const PetscInt *ix;
  PetscReal      *xy, *nrm, *w;

  PetscFunctionBeginUser;
  PetscCall(PetscSplitOwnership(PETSC_COMM_WORLD, &m, &N));
  PetscCallMPI(MPI_Exscan(&m, &r0, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  PetscCall(PetscMalloc3(2 * m, &xy, 2 * m, &nrm, m, &w));
  for (PetscInt i = 0; i < m; i++) TestStarCurvePoint(r0 + i, N, &xy[2 * i], &nrm[2 * i], &w[i]);
  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, m, m, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(A, MATFMM));
  PetscCall(MatFMMSetSources(A, m, xy, nrm, w));
  PetscCall(MatSetFromOptions(A));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatFMMGetTreePartition(A, &is, NULL));
  PetscCall(ISGetLocalSize(is, n));
  PetscCall(PetscMalloc1(*n, gidx));
  PetscCall(ISGetIndices(is, &ix));
  PetscCall(PetscArraycpy(*gidx, ix, *n));
  PetscCall(ISRestoreIndices(is, &ix));
  PetscCall(ISDestroy(&is));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscFunctionReturn(0);
}

static int CompareX(const void *a, const void *b)
{
  const XKey *p = (const XKey *)a, *q = (const XKey *)b;
  if (p->x != q->x) return p->x < q->x ? -1 : 1;
  return p->g < q->g ? -1 : (p->g > q->g);
}

int main(int argc, char **argv)
{
  PetscInt           N = 1000000, reps = 10, nsample = 200, nre = 0, nsu = 0, n, rstart, p, L, m2l, ct;
  PetscBool          curve = PETSC_TRUE, blob = PETSC_FALSE, hostvecs = PETSC_FALSE, devpts = PETSC_FALSE, reset = PETSC_FALSE;
  VecType            vtype;
  char               geom[16] = "curve", lay[16] = "index";
  PetscInt          *order = NULL, *tidx = NULL;
  PetscReal         *xy, *nrm, *w, *times, *ltimes, rssl = 0, rssa = 0, eps = 1e-10, bstd = 1e-9, reas = 0, sets = 0, su[3] = {0, 0, 0}, idle = 0, midle = 0;
  PetscReal         *sxy, *snrm, *sw; /* what MatFMMSetSources() is given: xy, nrm, w or their device copies */
  PetscLogDouble     t0, t1, ta, ts0, ts1, ti0, ti1;
  Mat                A;
  Vec                x, y;
  PetscRandom        rnd;
  MatFMMDevice       dev;
  PetscLogEvent      ev[6];
  PetscEventPerfInfo before[6], after[6];
  const char        *evname[6] = {"FMMP2M", "FMMM2M", "FMMM2L", "FMML2L", "FMML2P", "FMMP2P"};

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "bench options", NULL);
  PetscCall(PetscOptionsInt("-n", "Number of points", NULL, N, &N, NULL));
  PetscCall(PetscOptionsString("-geometry", "square, curve or blob", NULL, geom, geom, sizeof(geom), NULL));
  PetscCall(PetscOptionsReal("-blob_std", "Standard deviation of the blob", NULL, bstd, &bstd, NULL));
  PetscCall(PetscOptionsString("-layout", "index or x: the points of each rank (curve)", NULL, lay, lay, sizeof(lay), NULL));
  PetscCall(PetscOptionsInt("-reps", "Timed MatMults", NULL, reps, &reps, NULL));
  PetscCall(PetscOptionsInt("-sample", "Targets checked against exact summation", NULL, nsample, &nsample, NULL));
  PetscCall(PetscOptionsInt("-reassemble", "Assemblies after setting the points again", NULL, nre, &nre, NULL));
  PetscCall(PetscOptionsInt("-setups", "Matrices made and assembled again on the same points", NULL, nsu, &nsu, NULL));
  PetscCall(PetscOptionsReal("-idle", "With -setups: ms the GPU idles before each of them and before each of -reps more products", NULL, idle, &idle, NULL));
  PetscCall(PetscOptionsBool("-host_vectors", "MatMult on host vectors", NULL, hostvecs, &hostvecs, NULL));
  PetscCall(PetscOptionsBool("-device_points", "Points, normals and weights given in device memory", NULL, devpts, &devpts, NULL));
  PetscOptionsEnd();
  PetscCheck(reps >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-reps %" PetscInt_FMT ": at least one timed MatMult is needed", reps);
  PetscCheck(nre >= 0 && nsample >= 0 && nsu >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-reassemble %" PetscInt_FMT ", -setups %" PetscInt_FMT " and -sample %" PetscInt_FMT " must be >= 0", nre, nsu, nsample);
  PetscCheck(idle >= 0 && idle <= 1e4, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-idle %.3g ms: expected 0 to 10^4", (double)idle);
  PetscCheck(idle == 0 || nsu > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-idle %.3g ms needs -setups k > 0", (double)idle);
  idle *= 1e-3;
  blob  = (PetscBool)(strcmp(geom, "blob") == 0);
  curve = (PetscBool)(!blob && strcmp(geom, "square") != 0);
  PetscCheck(curve || blob || !strcmp(geom, "square"), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-geometry %s: expected square, curve or blob", geom);
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-mat_fmm_eps", &eps, NULL));

  n = PETSC_DECIDE;
  PetscCall(PetscSplitOwnership(PETSC_COMM_WORLD, &n, &N));
  PetscCallMPI(MPI_Scan(&n, &rstart, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  rstart -= n;
  PetscCheck(!strcmp(lay, "index") || (curve && (!strcmp(lay, "x") || !strcmp(lay, "tree"))), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-layout %s: expected index, or x or tree with the curve", lay);
  if (!strcmp(lay, "tree")) {
    PetscCall(TreeLayout(N, &n, &tidx));
    rssl  = PeakMB();
    reset = ResetPeak();
  }
  PetscCall(PetscMalloc5(2 * n, &xy, 2 * n, &nrm, n, &w, reps, &times, reps, &ltimes));
  PetscCall(PetscRandomCreate(PETSC_COMM_SELF, &rnd));
  if (!strcmp(lay, "x")) { /* every rank sorts all points by x (libc's qsort: PETSc's quicksort crawls on the curve's runs) and takes its run */
    XKey     *ax;
    PetscReal d[2], v;
    PetscCall(PetscMalloc1(N, &ax));
    PetscCall(PetscMalloc1(N, &order));
    for (PetscInt g = 0; g < N; g++) {
      PetscReal z[2];
      TestStarCurvePoint(g, N, z, d, &v);
      ax[g] = (XKey){z[0], g};
    }
    qsort(ax, (size_t)N, sizeof(XKey), CompareX);
    for (PetscInt g = 0; g < N; g++) order[g] = ax[g].g;
    PetscCall(PetscFree(ax));
  }
  for (PetscInt i = 0; i < n; i++) {
    PetscInt g = tidx ? tidx[i] : (order ? order[rstart + i] : rstart + i);
    if (curve) TestStarCurvePoint(g, N, &xy[2 * i], &nrm[2 * i], &w[i]); /* star r(t) = 1 + 0.3 cos 5t, trapezoid rule */
    else {
      PetscCall(PetscRandomGetValueReal(rnd, &xy[2 * i]));
      PetscCall(PetscRandomGetValueReal(rnd, &xy[2 * i + 1]));
      if (blob && g % 100) { /* Box-Muller: a Gaussian pair from the two uniforms */
        PetscReal u = PetscMax(xy[2 * i], PETSC_MIN_REAL), v = xy[2 * i + 1], r = bstd * PetscSqrtReal(-2 * PetscLogReal(u));
        xy[2 * i]     = 0.3 + r * PetscCosReal(2 * PETSC_PI * v);
        xy[2 * i + 1] = 0.7 + r * PetscSinReal(2 * PETSC_PI * v);
      }
      nrm[2 * i]     = 1.0;
      nrm[2 * i + 1] = 0.0;
      w[i]           = 1.0 / N;
    }
  }

  PetscCall(PetscFree(order));
  PetscCall(PetscFree(tidx));
  /* the CUDA context: once per process, timed apart (cuda_init_s) */
  PetscCall(PetscTime(&ti0));
  PetscCall(PetscFMMCUDAInitialize());
  PetscCall(PetscTime(&ti1));
  sxy = xy, snrm = nrm, sw = w;
  if (devpts) {
#if defined(PETSC_HAVE_CUDA)
    PetscCallCUDA(cudaMalloc((void **)&sxy, sizeof(PetscReal) * 5 * PetscMax(n, 1)));
    snrm = sxy + 2 * n;
    sw   = sxy + 4 * n;
    PetscCallCUDA(cudaMemcpy(sxy, xy, sizeof(PetscReal) * 2 * n, cudaMemcpyHostToDevice));
    PetscCallCUDA(cudaMemcpy(snrm, nrm, sizeof(PetscReal) * 2 * n, cudaMemcpyHostToDevice));
    PetscCallCUDA(cudaMemcpy(sw, w, sizeof(PetscReal) * n, cudaMemcpyHostToDevice));
#else
    SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_SUP, "-device_points needs a PETSc configured with CUDA");
#endif
  }
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD)); /* the ranks' point generation is not the setup */
  PetscCall(PetscTime(&t0));
  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, n, n, PETSC_DETERMINE, PETSC_DETERMINE));
  PetscCall(MatSetType(A, MATFMM));
  PetscCall(PetscTime(&ts0));
  PetscCall(MatFMMSetSources(A, n, sxy, snrm, sw));
  PetscCall(PetscTime(&ts1));
  PetscCall(MatSetFromOptions(A));
  PetscCall(PetscTime(&ta));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(PetscTime(&t1));
  rssa = PeakMB();
  if (hostvecs) PetscCall(MatSetVecType(A, VECSTANDARD));
  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(VecGetType(x, &vtype));
  PetscCall(VecSetRandom(x, rnd));
  PetscCall(MatMult(A, x, y)); /* warm-up */
  PetscCall(TimeMults(A, x, y, reps, 0, times));

  if (nre > 0) { /* the tree rebuilt: the points set again */
    PetscReal *rt, *st;
    PetscCall(PetscMalloc2(nre, &rt, nre, &st));
    for (PetscInt r = 0; r < nre; r++) {
      PetscLogDouble a, b;
      PetscCall(PetscBarrier((PetscObject)A));
      PetscCall(PetscTime(&a));
      PetscCall(MatFMMSetSources(A, n, sxy, snrm, sw));
      PetscCall(PetscTime(&b));
      st[r] = b - a;
      PetscCall(PetscBarrier((PetscObject)A));
      PetscCall(PetscTime(&a));
      PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
      PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
      PetscCall(PetscBarrier((PetscObject)A));
      PetscCall(PetscTime(&b));
      rt[r] = b - a;
    }
    qsort(rt, nre, sizeof(PetscReal), CmpReal);
    qsort(st, nre, sizeof(PetscReal), CmpReal);
    reas = rt[nre / 2];
    sets = st[nre / 2];
    PetscCall(PetscFree2(rt, st));
    PetscCall(MatMult(A, x, y)); /* warm-up */
  }
  if (nsu > 0) { /* new matrices on the same points, MatCreate to assembled as the first */
    PetscReal *st;
    PetscCall(PetscMalloc1(nsu, &st));
    for (PetscInt r = 0; r < nsu; r++) {
      PetscLogDouble a, b;
      Mat            B;
      PetscCall(Idle(idle));
      PetscCall(PetscBarrier((PetscObject)A));
      PetscCall(PetscTime(&a));
      PetscCall(MatCreate(PETSC_COMM_WORLD, &B));
      PetscCall(MatSetSizes(B, n, n, PETSC_DETERMINE, PETSC_DETERMINE));
      PetscCall(MatSetType(B, MATFMM));
      PetscCall(MatFMMSetSources(B, n, sxy, snrm, sw));
      PetscCall(MatSetFromOptions(B));
      PetscCall(MatAssemblyBegin(B, MAT_FINAL_ASSEMBLY));
      PetscCall(MatAssemblyEnd(B, MAT_FINAL_ASSEMBLY));
      PetscCall(PetscTime(&b));
      st[r] = b - a;
      PetscCall(MatDestroy(&B));
    }
    qsort(st, nsu, sizeof(PetscReal), CmpReal);
    su[0] = st[nsu / 2];
    su[1] = st[0];
    su[2] = st[nsu - 1];
    PetscCall(PetscFree(st));
    PetscCall(MatMult(A, x, y)); /* warm-up */
    if (idle > 0) {
      PetscReal *it;
      PetscCall(PetscMalloc1(reps, &it));
      PetscCall(TimeMults(A, x, y, reps, idle, it));
      midle = it[reps / 2];
      PetscCall(PetscFree(it));
    }
  }
  /* the phases: the products again with PETSc's logging on (unless -log_view
     had it on from the start), whose events wait for the GPU at the end of
     each phase */
  PetscCall(PetscLogDefaultBegin());
  for (int e = 0; e < 6; e++) {
    PetscCall(PetscLogEventGetId(evname[e], &ev[e]));
    PetscCall(PetscLogEventGetPerfInfo(PETSC_DETERMINE, ev[e], &before[e]));
  }
  PetscCall(TimeMults(A, x, y, reps, 0, ltimes));
  for (int e = 0; e < 6; e++) PetscCall(PetscLogEventGetPerfInfo(PETSC_DETERMINE, ev[e], &after[e]));
  PetscCall(MatFMMGetExpansionOrder(A, &p));
  PetscCall(MatFMMGetClusteringThreshold(A, &ct));
  PetscCall(MatFMMGetTreeInfo(A, &L, NULL, &m2l, NULL));
  PetscCall(MatFMMGetDevice(A, &dev));
  {
    PetscReal   med = times[reps / 2], ph[6], pairs = 0, mloc = m2l, msum, mflops = (after[2].flops - before[2].flops) / reps;
    PetscCount  p2p;
    const char *layout = "tiled";
    char        lay[32];
    PetscBool   set;
    PetscCall(PetscOptionsGetString(NULL, NULL, "-mat_fmm_layout", lay, sizeof(lay), &set));
    if (set) layout = lay;
    for (int e = 0; e < 6; e++) ph[e] = (after[e].time - before[e].time) / reps;
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, ph, 6, MPIU_REAL, MPIU_MAX, PETSC_COMM_WORLD));
    PetscCall(MatFMMGetTreeInfo(A, NULL, NULL, NULL, &p2p));
    pairs = (PetscReal)p2p;
    PetscCall(MPIU_Allreduce(&mloc, &msum, 1, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &mflops, 1, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &pairs, 1, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "bench: device=%s vec=%s points=%s N=%" PetscInt_FMT " geometry=%s eps=%g p=%" PetscInt_FMT " ct=%" PetscInt_FMT " layout=%s levels=%" PetscInt_FMT " setup_s=%.6f create_s=%.6f setsources_s=%.6f assembly_s=%.6f cuda_init_s=%.3f mult_med_s=%.6f mult_min_s=%.6f mult_max_s=%.6f mult_logged_med_s=%.6f points_per_s=%.3e", MatFMMDevices[dev], vtype, devpts ? "device" : "host", N,
                           geom, (double)eps, p, ct, layout, L, (double)(t1 - t0), (double)(ts0 - t0), (double)(ts1 - ts0), (double)(t1 - ta), (double)(ti1 - ti0), (double)med, (double)times[0], (double)times[reps - 1], (double)ltimes[reps / 2], (double)(N / med)));
    if (nre) PetscCall(PetscPrintf(PETSC_COMM_WORLD, " reassembly_med_s=%.6f setsources_med_s=%.6f", (double)reas, (double)sets));
    if (nsu) PetscCall(PetscPrintf(PETSC_COMM_WORLD, " setup_med_s=%.6f setup_min_s=%.6f setup_max_s=%.6f", (double)su[0], (double)su[1], (double)su[2]));
    if (nsu && idle > 0) PetscCall(PetscPrintf(PETSC_COMM_WORLD, " idle_ms=%.1f mult_idle_med_s=%.6f", (double)(1e3 * idle), (double)midle));
    { /* peak resident memory of the processes (host memory) */
      PetscReal mb[4] = {PetscMax(PeakMB(), rssl), rssa, rssl, 0}; /* (the whole run's, where the peak was reset after rssl) */
      mb[3] = mb[0];
      PetscCall(MPIU_Allreduce(MPI_IN_PLACE, mb, 3, MPIU_REAL, MPIU_MAX, PETSC_COMM_WORLD));
      PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &mb[3], 1, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
      PetscCall(PetscPrintf(PETSC_COMM_WORLD, " rss_max_mb=%.1f rss_sum_mb=%.1f rss_assembly_mb=%.1f", (double)mb[0], (double)mb[3], (double)mb[1]));
      if (rssl > 0) PetscCall(PetscPrintf(PETSC_COMM_WORLD, " rss_layout_mb=%.1f", (double)mb[2]));
      if (rssl > 0) { /* (every rank's peak reset, or none printed) */
        PetscReal hw[2] = {reset ? HighWaterMB() : -1, 0};
        hw[1] = -hw[0];
        PetscCall(MPIU_Allreduce(MPI_IN_PLACE, hw, 2, MPIU_REAL, MPIU_MAX, PETSC_COMM_WORLD));
        if (hw[1] <= 0) PetscCall(PetscPrintf(PETSC_COMM_WORLD, " rss_after_layout_mb=%.1f", (double)hw[0]));
      }
    }
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "\n"));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "phases_ms: P2M=%.3f M2M=%.3f M2L=%.3f L2L=%.3f L2P=%.3f P2P=%.3f\n", 1e3 * ph[0], 1e3 * ph[1], 1e3 * ph[2], 1e3 * ph[3], 1e3 * ph[4], 1e3 * ph[5]));
    if (ph[5] > 0 && ph[2] > 0) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "rates: p2p_pairs_per_s=%.3e m2l_gflops=%.2f m2l_count=%.0f p2p_pairs=%.0f", (double)(pairs / ph[5]), (double)(mflops / ph[2] * 1e-9), (double)msum, (double)pairs));
    else PetscCall(PetscPrintf(PETSC_COMM_WORLD, "rates: (no FMM phases: direct method)"));
  }

  /* error on a sample of targets: exact sums with a second MATFMM (targets = the sample, method direct) */
  if (nsample > 0) {
    PetscInt           ns = PetscMin(nsample, n), *idx;
    PetscReal         *txy, err2 = 0, ref2 = 0, loc[2];
    const PetscScalar *ya;
    Mat                D;
    Vec                yd;
    PetscCall(PetscMalloc2(ns, &idx, 2 * ns, &txy));
    for (PetscInt k = 0; k < ns; k++) {
      idx[k]          = (PetscInt)(((PetscInt64)k * n) / ns);
      txy[2 * k]      = xy[2 * idx[k]];
      txy[2 * k + 1]  = xy[2 * idx[k] + 1];
    }
    PetscCall(MatCreate(PETSC_COMM_WORLD, &D));
    PetscCall(MatSetSizes(D, ns, n, PETSC_DETERMINE, PETSC_DETERMINE));
    PetscCall(MatSetType(D, MATFMM));
    PetscCall(MatFMMSetSources(D, n, xy, nrm, w));
    PetscCall(MatFMMSetTargets(D, ns, txy));
    PetscCall(MatSetFromOptions(D));
    PetscCall(MatFMMSetMethod(D, MATFMM_METHOD_DIRECT));
    PetscCall(MatFMMSetDistribution(D, MATFMM_DISTRIBUTION_AUTO)); /* the exact sum holds all sources (-mat_fmm_distribution tree is the product's) */
    PetscCall(MatAssemblyBegin(D, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(D, MAT_FINAL_ASSEMBLY));
    PetscCall(MatCreateVecs(D, NULL, &yd));
    PetscCall(MatMult(D, x, yd));
    PetscCall(VecGetArrayRead(yd, &ya));
    {
      const PetscScalar *yf;
      PetscCall(VecGetArrayRead(y, &yf));
      for (PetscInt k = 0; k < ns; k++) {
        err2 += PetscSqr(yf[idx[k]] - ya[k]);
        ref2 += PetscSqr(ya[k]);
      }
      PetscCall(VecRestoreArrayRead(y, &yf));
    }
    PetscCall(VecRestoreArrayRead(yd, &ya));
    loc[0] = err2;
    loc[1] = ref2;
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, loc, 2, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, " relerr_sample=%.3e\n", (double)PetscSqrtReal(loc[0] / loc[1])));
    PetscCall(VecDestroy(&yd));
    PetscCall(MatDestroy(&D));
    PetscCall(PetscFree2(idx, txy));
  } else PetscCall(PetscPrintf(PETSC_COMM_WORLD, "\n"));
  { /* a fingerprint of the last product: equal builds print equal sums */
    PetscScalar ysum;
    PetscCall(VecSum(y, &ysum));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "check: y_sum=%.17e\n", (double)PetscRealPart(ysum)));
  }

  PetscCall(PetscRandomDestroy(&rnd));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
#if defined(PETSC_HAVE_CUDA)
  if (devpts) PetscCallCUDA(cudaFree(sxy));
#endif
  PetscCall(PetscFree5(xy, nrm, w, times, ltimes));
  PetscCall(PetscFinalize());
  return 0;
}
