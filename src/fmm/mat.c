/*
  MATFMM: the Mat type.  Its ops (assembly, products, the diagonal terms,
  view, destroy), its options, and the choice of the backend: the public
  setters are in src/fmm/api.c, the copies of the points in points.c, the
  plan in plan.c, and the backends (src/fmm/cpu, cuda/fmm) do the work,
  reached only through their ops tables (fmmimpl.h).
*/
#if !defined(_GNU_SOURCE)
  #define _GNU_SOURCE /* sched_getaffinity() */
#endif
#include "fmmimpl.h"
#include "expansions.h"
#include <unistd.h>
#if defined(__linux__)
  #include <sched.h>
#endif
#if defined(_OPENMP)
  #include <omp.h>
#endif

/* this build's backends, the CPU first: the order of Mat_FMM's bmat[] */
const FMMBackend FMMBackends[FMM_NBACKENDS] = {&FMMBackendCPU,
#if defined(PETSCFMM_HAVE_CUDA)
                                               &FMMBackendCUDA
#endif
};

/* the device an assembly of A would use now (bc: the CUDA backend's index, -1 where this build has none;
   ndev: the GPUs it finds, asked only where the request is not the CPU) */
static PetscErrorCode DeviceChoice(const Mat_FMM *fmm, PetscInt *bc, PetscInt *ndev, MatFMMDevice *used)
{
  PetscFunctionBegin;
  *bc   = FMMBackendIndex(MATFMM_DEVICE_CUDA);
  *ndev = 0;
  if (*bc >= 0 && fmm->device != MATFMM_DEVICE_CPU) PetscCall((*FMMBackends[*bc]->devicecount)(ndev));
  *used = (fmm->device != MATFMM_DEVICE_CPU && *ndev > 0) ? MATFMM_DEVICE_CUDA : MATFMM_DEVICE_CPU;
  PetscFunctionReturn(0);
}

/*
  FMMSetupTeamBegin - the OpenMP team of the host's work in a setup of A
  (the copy of MatFMMSetSources(), the assembly), made the calling thread's
  team until FMMSetupTeamEnd() (*saved: OpenMP's team before).  With the
  CUDA backend it is OpenMP's team, unless that leaves no room on this
  rank's share of the CPUs (those it may run on; unbound ranks of one node
  share the node's) for the backend's late copy (FMM_LATE_THREADS host
  threads that upload while the host builds the tree) and for MPI's and
  CUDA's own threads: then a quarter of the share, at most 4 CPUs, stays
  free.  Ranks that fill a node with full teams wait in every short
  parallel loop for a thread that the scheduler put behind another one
  (docs/scaling.md, session 59).  On the CPU it is OpenMP's team.
  -mat_fmm_setup_threads sets it.
*/
PetscErrorCode FMMSetupTeamBegin(Mat A, int *saved)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  *saved = 0;
#if defined(_OPENMP)
  {
    const int    omp  = omp_get_max_threads();
    int          cpus = omp, online = omp, team = omp;
    PetscInt     bc, ndev;
    MatFMMDevice d = MATFMM_DEVICE_CPU;
    PetscCall(DeviceChoice(fmm, &bc, &ndev, &d));
  #if defined(_SC_NPROCESSORS_ONLN)
    online = PetscMax((int)sysconf(_SC_NPROCESSORS_ONLN), 1);
  #endif
    cpus = online;
  #if defined(__linux__)
    {
      cpu_set_t set;
      if (!sched_getaffinity(0, sizeof(set), &set)) cpus = PetscMax(CPU_COUNT(&set), 1);
    }
  #endif
    if (cpus >= online && fmm->noderanks > 1) cpus = PetscMax(online / fmm->noderanks, 1); /* unbound: the node's CPUs are shared */
    if (fmm->setup_threads > 0) team = (int)fmm->setup_threads;
    else if (d == MATFMM_DEVICE_CUDA) {
      const int spare = PetscMin(4, PetscMax(1, cpus / 4));
      if (team > cpus - spare) team = PetscMax(cpus - spare, 1);
    }
    fmm->team = team;
    fmm->omp  = omp;
    fmm->cpus = cpus;
    *saved    = omp;
    if (team != omp) {
      PetscCall(PetscInfo(A, "setup on %d OpenMP threads, not OpenMP's %d (%s; this rank's share of the CPUs: %d, %d rank(s) of this matrix on the node)\n", team, omp, fmm->setup_threads > 0 ? "-mat_fmm_setup_threads" : "room for the GPU setup's copy threads", cpus, (int)fmm->noderanks));
      omp_set_num_threads(team);
    }
  }
#endif
  PetscFunctionReturn(0);
}

/* OpenMP's team back (FMMSetupTeamBegin()) */
void FMMSetupTeamEnd(int saved)
{
#if defined(_OPENMP)
  if (saved > 0 && saved != omp_get_max_threads()) omp_set_num_threads(saved);
#else
  (void)saved;
#endif
}

/* the plan and everything built from it go: the next assembly builds them
   again.  A matrix assembled before stays marked so for PETSc, so that its
   products reach MATFMM's own message (assemble after setting the sources)
   instead of PETSc's generic one */
PetscErrorCode MatFMMInvalidate(Mat A)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  if (fmm->ops && fmm->ops->reset) PetscCall((*fmm->ops->reset)(&fmm->ctx));
  fmm->ops = NULL;
  PetscCall(FMMHostPlanDestroy(&fmm->ctx.host));
  PetscCall(FMMDistDestroy(&fmm->dist));
  fmm->whynotdist   = NULL;
  fmm->ctx.exchange = NULL;
  fmm->ctx.xctx     = NULL;
  fmm->ctx.nxexp = fmm->ctx.nximp = 0;
  fmm->ctx.nslot = fmm->ctx.nsown = 0;
  fmm->ctx.split = PETSC_FALSE;
  fmm->ctx.nin = fmm->ctx.nin2 = fmm->ctx.nout = fmm->ctx.nout2 = 0;
  fmm->ctx.xin  = NULL;
  fmm->ctx.yout = NULL;
  PetscCall(PetscMemzero(&fmm->ctx.plan, sizeof(fmm->ctx.plan)));
  PetscCall(PetscSFDestroy(&fmm->sf));
  PetscCall(FMMPointsRelease(fmm));
  PetscCall(PetscFree2(fmm->sigma, fmm->pot));
  fmm->setup = PETSC_FALSE;
  PetscFunctionReturn(0);
}

static PetscErrorCode MatSetFromOptions_FMM(Mat A, FMMOptionItems PetscOptionsObject)
{
  Mat_FMM     *fmm = (Mat_FMM *)A->data;
  PetscInt     ival;
  PetscReal    rval, alpha = fmm->par.alpha, beta = fmm->par.beta;
  PetscBool    set, seta, setb;
  MatFMMKernel kernel = fmm->par.kernel;
  PetscEnum    e;

  PetscFunctionBegin;
  PetscOptionsHeadBegin(PetscOptionsObject, "MATFMM options (2D Laplace fast multipole method)");
  PetscCall(PetscOptionsInt("-mat_fmm_ct", "Clustering threshold: points per leaf box (default: 32 on the CPU, 96 with CUDA)", "MatFMMSetClusteringThreshold", fmm->par.ct, &ival, &set));
  if (set) PetscCall(MatFMMSetClusteringThreshold(A, ival));
  PetscCall(PetscOptionsInt("-mat_fmm_p", "Expansion order (overrides -mat_fmm_eps)", "MatFMMSetExpansionOrder", fmm->p_user > 0 ? fmm->p_user : 0, &ival, &set));
  if (set) PetscCall(MatFMMSetExpansionOrder(A, ival));
  PetscCall(PetscOptionsReal("-mat_fmm_eps", "Requested relative accuracy; chooses p", "MatFMMSetTolerance", fmm->par.eps, &rval, &set));
  if (set) PetscCall(MatFMMSetTolerance(A, rval));
  PetscCall(PetscOptionsReal("-mat_fmm_theta", "Theta of the separation criterion R + theta r <= theta d", "MatFMMSetTheta", fmm->par.theta, &rval, &set));
  if (set) PetscCall(MatFMMSetTheta(A, rval));
  {
    const char *split[] = {"compact", "median"};
    PetscInt    i;
    PetscCall(PetscOptionsEList("-mat_fmm_tree_split", "Tree split rule: the most compact cut near the median (x or y), or the median along the longer side (Goude & Engblom)", "MATFMM", split, 2, split[fmm->par.split_median ? 1 : 0], &i, &set));
    if (set && fmm->par.split_median != (i == 1)) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->par.split_median = i == 1 ? PETSC_TRUE : PETSC_FALSE;
  }
  PetscCall(PetscOptionsEnum("-mat_fmm_layout", "Near-field (P2P) data layout", "MatFMMSetLayout", MatFMMLayouts, (PetscEnum)fmm->par.layout, &e, &set));
  if (set) PetscCall(MatFMMSetLayout(A, (MatFMMLayout)e));
  PetscCall(PetscOptionsReal("-mat_fmm_repetition_mb", "Memory budget of the repetition layout records (MB)", "MatFMMSetLayout", fmm->par.repetition_mb, &rval, &set));
  if (set) {
    PetscCheck(rval > 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_repetition_mb %g must be > 0", (double)rval);
    if (rval != fmm->par.repetition_mb) PetscCall(MatFMMInvalidate(A));
    fmm->par.repetition_mb = rval;
  }
  PetscCall(PetscOptionsEnum("-mat_fmm_method", "Evaluation method", "MatFMMSetMethod", MatFMMMethods, (PetscEnum)fmm->par.method, &e, &set));
  if (set) PetscCall(MatFMMSetMethod(A, (MatFMMMethod)e));
  PetscCall(PetscOptionsEnum("-mat_fmm_device", "Where to compute", "MatFMMSetDevice", MatFMMDevices, (PetscEnum)fmm->device, &e, &set));
  if (set) PetscCall(MatFMMSetDevice(A, (MatFMMDevice)e));
  PetscCall(PetscOptionsInt("-mat_fmm_setup_threads", "OpenMP threads of the setup's host work (0: OpenMP's, but with a GPU a few CPUs of this rank's share left free where the team would fill it)", "MATFMM", fmm->setup_threads, &ival, &set));
  if (set) {
    PetscCheck(ival >= 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: -mat_fmm_setup_threads %" PetscInt_FMT " must be >= 0 (0: the default rule)", ival);
    fmm->setup_threads = ival;
  }
  PetscCall(PetscOptionsEnum("-mat_fmm_distribution", "Across MPI ranks: the tree shared out among them, or all sources on each", "MatFMMSetDistribution", MatFMMDistributions, (PetscEnum)fmm->distribution, &e, &set));
  if (set) PetscCall(MatFMMSetDistribution(A, (MatFMMDistribution)e));
  {
    PetscBool b = fmm->distplan;
    PetscCall(PetscOptionsBool("-mat_fmm_distribution_global_plan", "Distributed tree on the CPU: evaluate each rank's part as a plan in the one-rank numbering, as the CUDA backend does (a check of that path)", "MatFMMSetDistribution", b, &b, &set));
    if (set && b != fmm->distplan) PetscCall(MatFMMInvalidate(A));
    fmm->distplan = b;
  }
  for (PetscInt b = 0; b < FMM_NBACKENDS; b++) { /* every backend's options (-mat_fmm_cuda_*), whichever runs */
    PetscBool changed = PETSC_FALSE;
    if (!FMMBackends[b]->setfromoptions) continue;
    PetscCall((*FMMBackends[b]->setfromoptions)(fmm->bmat[b], PetscOptionsObject, &changed));
    if (changed) PetscCall(MatFMMInvalidate(A));
  }
  PetscCall(PetscOptionsEnum("-mat_fmm_kernel", "Laplace layer potential", "MatFMMSetKernel", MatFMMKernels, (PetscEnum)kernel, &e, &set));
  if (set) kernel = (MatFMMKernel)e;
  PetscCall(PetscOptionsReal("-mat_fmm_alpha", "Weight of the double layer in the combined kernel", "MatFMMSetKernel", alpha, &alpha, &seta));
  PetscCall(PetscOptionsReal("-mat_fmm_beta", "Weight of the single layer in the combined kernel", "MatFMMSetKernel", beta, &beta, &setb));
  if (set || seta || setb) PetscCall(MatFMMSetKernel(A, (seta || setb) && !set ? MATFMM_KERNEL_COMBINED : kernel, alpha, beta));
  PetscOptionsHeadEnd();
  PetscFunctionReturn(0);
}

static PetscErrorCode MatSetUp_FMM(Mat A)
{
  PetscFunctionBegin;
  PetscCall(PetscLayoutSetUp(A->rmap));
  PetscCall(PetscLayoutSetUp(A->cmap));
  A->preallocated = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* collective check of a condition that may fail on some ranks only */
#define FMMCheckCollective(comm, bad, ...) \
  do { \
    PetscMPIInt _any, _mine = (bad) ? 1 : 0; \
    PetscCallMPI(MPI_Allreduce(&_mine, &_any, 1, MPI_INT, MPI_MAX, comm)); \
    if (_mine) SETERRQ(PETSC_COMM_SELF, __VA_ARGS__); \
    PetscCheck(!_any, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "MATFMM: invalid input on another rank (see its message)"); \
  } while (0)

/* MatCreateVecs() of a matrix on the GPU gives device vectors (VECCUDA) when
   PETSc has them, as PETSc's GPU matrices do, so that MatMult() moves no
   vector between host and device; a type the caller set (MatSetVecType())
   stays.  Back on the CPU, the type this set is undone. */
static PetscErrorCode SetVecType(Mat A)
{
#if defined(PETSC_HAVE_CUDA)
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool std, cuda;

  PetscFunctionBegin;
  PetscCall(PetscStrcmp(A->defaultvectype, VECSTANDARD, &std));
  PetscCall(PetscStrcmp(A->defaultvectype, VECCUDA, &cuda));
  if (fmm->device_used == MATFMM_DEVICE_CUDA && std) {
    PetscCall(PetscFree(A->defaultvectype));
    PetscCall(PetscStrallocpy(VECCUDA, &A->defaultvectype));
    fmm->setvectype = PETSC_TRUE;
  } else if (fmm->device_used != MATFMM_DEVICE_CUDA && cuda && fmm->setvectype) {
    PetscCall(PetscFree(A->defaultvectype));
    PetscCall(PetscStrallocpy(VECSTANDARD, &A->defaultvectype));
    fmm->setvectype = PETSC_FALSE;
  }
#else
  PetscFunctionBegin;
  (void)A;
#endif
  PetscFunctionReturn(0);
}

/* the distributed tree where it applies (MatFMMSetDistribution()); else why
   not, kept for -mat_view, or the error where it was asked for */
static PetscErrorCode ChooseDistribution(Mat A, PetscBool *dist)
{
  Mat_FMM    *fmm  = (Mat_FMM *)A->data;
  MPI_Comm    comm = PetscObjectComm((PetscObject)A);
  const char *why  = NULL;
  PetscInt    L, l0, U = A->cmap->N + (fmm->tgt.m < 0 ? 0 : A->rmap->N);
  PetscMPIInt size, mixed = (A->rmap->N == A->cmap->N && A->rmap->n != A->cmap->n) ? 1 : 0;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &mixed, 1, MPI_INT, MPI_LOR, comm));
  PetscCall(FMMDistLevels(U, fmm->par.ct, size, &L, &l0));
  if (fmm->par.method != MATFMM_METHOD_FMM) why = "-mat_fmm_method direct sums over all sources";
  else if (fmm->par.layout != MATFMM_LAYOUT_TILED) why = "the distributed tree has the tiled near-field layout only";
  else if (fmm->xexp) why = "the coordinates are scaled (their extent is outside [2^-400, 2^400])";
  else if (l0 > L) why = "too few points: fewer leaves than boxes to share out among the ranks";
  else if (mixed) why = "the matrix is square but its rows and columns have different layouts";
  PetscCheck(!why || fmm->distribution != MATFMM_DISTRIBUTION_TREE, comm, PETSC_ERR_SUP, "MATFMM: -mat_fmm_distribution tree does not apply here: %s; use auto or replicated", why);
  fmm->whynotdist = why;
  *dist           = why ? PETSC_FALSE : PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* assembly with the distributed tree: the CPU backend's pass on this rank's part (src/fmm/dist.c, cpu/dist.c);
   *done false: auto found the caller's layout too far from the tree's parts (FMMDistBuild() made no tree), and
   the assembly goes on with the replicated sources */
static PetscErrorCode SetupDistributed(Mat A, PetscBool *done)
{
  Mat_FMM    *fmm  = (Mat_FMM *)A->data;
  MPI_Comm    comm = PetscObjectComm((PetscObject)A);
  FMMPlan    *P    = &fmm->ctx.plan;
  FMMDist    *D;
  PetscReal   g[4] = {-fmm->src.range[0], fmm->src.range[1], -fmm->src.range[2], fmm->src.range[3]};
  PetscInt64  mx[2];
  PetscLogDouble tm[5], rm[5]; /* the stages' start times and resident memory, for -info */

  PetscFunctionBegin;
  PetscCall(FMMStageMark(&tm[0], &rm[0]));
  PetscCall(FMMPointsToHost(fmm));
  if (fmm->src.n == 0) g[0] = g[1] = g[2] = g[3] = PETSC_NINFINITY;
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, g, 4, MPIU_REAL, MPIU_MAX, comm));
  PetscCheck(A->cmap->N < 2 || -g[0] != g[1] || -g[2] != g[3], comm, PETSC_ERR_ARG_WRONG, "MATFMM: all %" PetscInt_FMT " sources are at the same point (%g, %g); the kernel vanishes between coincident points, so the operator is degenerate", A->cmap->N, (double)g[1], (double)g[3]);
  PetscCall(PetscLogEventBegin(MATFMM_Tree, A, 0, 0, 0));
  PetscCall(FMMStageMark(&tm[1], &rm[1]));
  PetscCall(FMMDistBuild(A, &fmm->dist));
  PetscCall(PetscLogEventEnd(MATFMM_Tree, A, 0, 0, 0));
  *done = fmm->dist ? PETSC_TRUE : PETSC_FALSE;
  if (!*done) { /* the backend as at the assembly's start (the top cuts' part freed) */
    if (fmm->ops->reset) PetscCall((*fmm->ops->reset)(&fmm->ctx));
    PetscFunctionReturn(0);
  }
  PetscCall(FMMStageMark(&tm[2], &rm[2]));
  D = fmm->dist;
  PetscCall(PetscMalloc2(0, &fmm->sigma, A->rmap->n, &fmm->pot));
  if (fmm->device_used != MATFMM_DEVICE_CPU || fmm->distplan) { /* the backend evaluates this rank's part as a plan of its own (FMMDistHostPlan()) */
    FMMContext *ctx = &fmm->ctx;
    const PetscBool anynrm = D->dipoles;
    PetscCall(PetscLogEventBegin(MATFMM_Tree, A, 0, 0, 0));
    /* single layer: the halo's sources as targets, for the symmetric P2P; the geometry and far lists
       in the one-rank numbering for the CPU backend, the CUDA backend takes the rank's (ctx->nslot ...) */
    PetscCall(FMMDistHostPlan(D, D->same && !anynrm ? PETSC_TRUE : PETSC_FALSE, fmm->device_used == MATFMM_DEVICE_CPU ? PETSC_TRUE : PETSC_FALSE, P, &ctx->host));
    PetscCall(FMMDistExchangeSetup(D, fmm->par.p));
#if defined(PETSC_HAVE_CUDA) /* PetscSF moves device memory: the product's moves stay on the GPUs */
    if (fmm->device_used == MATFMM_DEVICE_CUDA) PetscCall(FMMDistDeviceIO(D, fmm->ops->mem));
#endif
    PetscCall(PetscLogEventEnd(MATFMM_Tree, A, 0, 0, 0));
    PetscCall(FMMStageMark(&tm[3], &rm[3]));
    ctx->N        = P->N;
    ctx->Mg       = 0;
    ctx->t0       = 0;
    ctx->same     = PETSC_FALSE; /* its targets are not the caller's sources (the halo's are sources too) */
    ctx->halotgt  = D->same && !anynrm ? PETSC_TRUE : PETSC_FALSE;
    ctx->alias    = PETSC_TRUE;  /* nothing to free: the plan holds the points */
    ctx->src      = NULL;
    ctx->tgt      = NULL;
    ctx->wts      = NULL;
    ctx->nrm      = anynrm ? ctx->host->cdx : NULL; /* not read: says that the plan's coefficients have dipoles */
    ctx->nxexp    = D->nxexp;
    ctx->nximp    = D->nximp;
    ctx->xexp     = D->xexp;
    ctx->ximp     = D->ximp;
    ctx->nslot    = D->nslot;
    ctx->nsown    = D->nown;
    ctx->slcx     = D->ngeo == D->nslot ? D->cx : NULL; /* (NULL: the backend keeps them) */
    ctx->slcy     = D->ngeo == D->nslot ? D->cy : NULL;
    ctx->slscale  = D->ngeo == D->nslot ? D->scale : NULL;
    ctx->slfaroff = D->faroff;
    ctx->slfar    = D->far;
    ctx->slbox    = D->halbox;
    ctx->exchange = FMMDistExchange;
    ctx->xctx     = D;
    ctx->split    = PETSC_TRUE;
    ctx->nin      = D->nxc;
    ctx->nin2     = D->nrr + D->nh;
    ctx->xin      = D->din;
    ctx->nout     = D->myc;
    ctx->nout2    = D->nrt;
    ctx->yout     = D->dout;
    PetscCall((*fmm->ops->setup)(ctx));
    PetscCall(FMMStageMark(&tm[4], &rm[4]));
    PetscCall(PetscInfo(A, "distributed setup on this rank: points %.3f s, tree and lists %.3f s, the backend's plan and exchange %.3f s, backend setup %.3f s; resident memory before %.0f MB, after each %.0f %.0f %.0f %.0f MB\n", tm[1] - tm[0], tm[2] - tm[1], tm[3] - tm[2], tm[4] - tm[3], rm[0] / 1048576, rm[1] / 1048576, rm[2] / 1048576, rm[3] / 1048576, rm[4] / 1048576));
    fmm->setup   = PETSC_TRUE;
    A->assembled = PETSC_TRUE;
    PetscFunctionReturn(0);
  }
  PetscCall(FMMDistSetupCPU(D, &fmm->par));
  /* what -mat_view reports */
  P->L       = D->L;
  P->nleaves = (PetscInt)1 << (2 * D->L);
  P->nboxes  = FMMLevelStart(D->L + 1);
  P->N       = A->cmap->N;
  P->M       = A->rmap->n;
  P->nfar    = (PetscInt)D->nfar;
  P->p2ppairs = (PetscCount)D->p2ppairs;
  mx[0]      = D->maxleafsrc;
  mx[1]      = D->maxleaftgt;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPIU_INT64, MPI_MAX, comm));
  P->maxleafsrc = (PetscInt)mx[0];
  P->maxleaftgt = (PetscInt)mx[1];
  fmm->setup    = PETSC_TRUE;
  A->assembled  = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* the assembly: the checks, the device and backend, the tree and plan (on the setup's team: MatAssemblyEnd_FMM()) */
static PetscErrorCode Assemble(Mat A)
{
  Mat_FMM    *fmm  = (Mat_FMM *)A->data;
  FMMContext *ctx  = &fmm->ctx;
  MPI_Comm    comm = PetscObjectComm((PetscObject)A);
  PetscInt    N, M, bad, b;
  PetscBool   bplan = PETSC_FALSE;
  PetscMPIInt size;

  PetscFunctionBegin;
  PetscCall(MatFMMInvalidate(A)); /* what an assembly that failed may have left */
  PetscCall(MatSetUp_FMM(A));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  { /* an optimized PETSc does not check that the local sizes add up to the global ones */
    PetscCheck(A->rmap->range[size] == A->rmap->N && A->cmap->range[size] == A->cmap->N, comm, PETSC_ERR_ARG_SIZ, "MATFMM: the local sizes add up to %" PetscInt_FMT " x %" PetscInt_FMT ", but the global size is %" PetscInt_FMT " x %" PetscInt_FMT, A->rmap->range[size], A->cmap->range[size], A->rmap->N, A->cmap->N);
  }
  M = fmm->tgt.m < 0 ? fmm->src.n : fmm->tgt.m;
  FMMCheckCollective(comm, fmm->src.n != A->cmap->n, PETSC_ERR_ARG_SIZ, "MATFMM: %" PetscInt_FMT " local sources but local column size %" PetscInt_FMT, fmm->src.n, A->cmap->n);
  FMMCheckCollective(comm, M != A->rmap->n, PETSC_ERR_ARG_SIZ, "MATFMM: %" PetscInt_FMT " local targets%s but local row size %" PetscInt_FMT, M, fmm->tgt.m < 0 ? " (the sources)" : "", A->rmap->n);
  /* bad numbers */
  bad = fmm->src.bad[0];
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: source %" PetscInt_FMT " (local) has a non-finite coordinate %g", bad / 2, (double)fmm->src.badv[0]);
  bad = fmm->src.bad[1];
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: normal of source %" PetscInt_FMT " (local) has a non-finite component %g", bad / 2, (double)fmm->src.badv[1]);
  bad = fmm->src.bad[2];
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: weight of source %" PetscInt_FMT " (local) is not finite: %g", bad, (double)fmm->src.badv[2]);
  bad = fmm->tgt.m > 0 ? fmm->tgt.bad : -1;
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: target %" PetscInt_FMT " (local) has a non-finite coordinate %g", bad / 2, (double)fmm->tgt.badv);
  FMMCheckCollective(comm, fmm->par.alpha != 0.0 && !fmm->src.hasnrm && fmm->src.n > 0, PETSC_ERR_ARG_WRONGSTATE, "MATFMM: the %s kernel has a double layer (alpha = %g) but no normals were given to MatFMMSetSources()", MatFMMKernels[fmm->par.kernel], (double)fmm->par.alpha);

  PetscCall(PetscLogEventBegin(MATFMM_Setup, A, 0, 0, 0));
  /* order, device, backend */
  PetscCall(MatFMMGetExpansionOrder(A, &fmm->par.p));
  {
    PetscInt bc, ndev;
    PetscCall(DeviceChoice(fmm, &bc, &ndev, &fmm->device_used));
    PetscCheck(fmm->device != MATFMM_DEVICE_CUDA || ndev > 0, comm, PETSC_ERR_SUP, "MATFMM: -mat_fmm_device cuda, but %s; use -mat_fmm_device cpu or auto", bc >= 0 ? "no CUDA GPU was found on this machine" : "petscfmm was built without CUDA (make CUDA=1 with nvcc on the PATH)");
  }
  b        = FMMBackendIndex(fmm->device_used);
  fmm->ops = FMMBackends[b];
  if (!fmm->ct_set) fmm->par.ct = fmm->ops->ct;
  PetscCall(SetVecType(A));
  /* what the backend gets */
  N            = A->cmap->N;
  ctx->comm    = comm;
  ctx->obj     = (PetscObject)A;
  ctx->par     = &fmm->par;
  ctx->N       = N;
  ctx->same    = fmm->tgt.m < 0 ? PETSC_TRUE : PETSC_FALSE;
  ctx->Mg      = ctx->same ? 0 : A->rmap->N;
  ctx->t0      = ctx->same ? A->cmap->rstart : A->rmap->rstart;
  ctx->sources = &fmm->src;
  ctx->bmat    = fmm->bmat[b];
  ctx->plan.N  = N;
  ctx->plan.M  = M;
  /* points given in device memory stay there for a plan the backend builds itself on one rank; the other paths read them on the host */
  if (fmm->ops->buildsplan) PetscCall((*fmm->ops->buildsplan)(ctx->bmat, &bplan));
  PetscCall(FMMPointsExtent(A));
  if (size > 1 && fmm->distribution != MATFMM_DISTRIBUTION_REPLICATED) {
    PetscBool dist = PETSC_FALSE;
    PetscCall(ChooseDistribution(A, &dist));
    if (dist) {
      PetscBool done = PETSC_FALSE;
      PetscCall(SetupDistributed(A, &done));
      if (done) {
        PetscCall(PetscLogEventEnd(MATFMM_Setup, A, 0, 0, 0));
        PetscFunctionReturn(0);
      }
    }
  }
  if (!(size == 1 && bplan) || fmm->xexp) PetscCall(FMMPointsToHost(fmm)); /* scaled points are made on the host */
  PetscCall(FMMPointsGather(A));
  PetscCall(FMMPointsScale(A));
  if (fmm->xexp) ctx->par = &fmm->parx;
  PetscCall(PetscMalloc2(N, &fmm->sigma, M, &fmm->pot));

  /* the plan: by the backend where it builds it itself (CUDA, on the GPU), else on the host */
  PetscCall(PetscLogEventBegin(MATFMM_Tree, A, 0, 0, 0));
  if (bplan) PetscCall((*fmm->ops->plan)(ctx));
  else PetscCall(FMMPlanBuild(ctx));
  PetscCall(PetscLogEventEnd(MATFMM_Tree, A, 0, 0, 0));
  PetscCall((*fmm->ops->setup)(ctx));
  PetscCall(FMMPointsReleaseTargets(fmm)); /* the plan holds the targets it needs */
  fmm->setup   = PETSC_TRUE;
  A->assembled = PETSC_TRUE;
  PetscCall(PetscLogEventEnd(MATFMM_Setup, A, 0, 0, 0));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatAssemblyEnd_FMM(Mat A, MatAssemblyType type)
{
  Mat_FMM       *fmm = (Mat_FMM *)A->data;
  PetscErrorCode ierr;
  int            saved;

  PetscFunctionBegin;
  if (type == MAT_FLUSH_ASSEMBLY) PetscFunctionReturn(0);
  {
    PetscMPIInt mine = fmm->src.n >= 0 ? 1 : 0, all; /* n = 0 is a valid call: src may be NULL then */
    PetscCallMPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, PetscObjectComm((PetscObject)A)));
    PetscCheck(all, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATFMM: call MatFMMSetSources() on every rank (n = 0 where a rank has no source) before assembly");
  }
  if (fmm->setup) { /* geometry and parameters unchanged: keep the plan */
    A->assembled = PETSC_TRUE;
    PetscFunctionReturn(0);
  }
  PetscCall(FMMSetupTeamBegin(A, &saved));
  ierr = Assemble(A);
  FMMSetupTeamEnd(saved);
  PetscCall(ierr);
  PetscFunctionReturn(0);
}

/* Points scaled by 2^-xexp (FMMPointsScale): the potentials get xexp log 2
   times the charges of the pairs that the kernel counts, all N sources but
   those at the target's place (coff, cidx), sum_j cq_j sigma_j with
   cq_j = -beta w_j/(2 pi) (FMMSourceCoefficients); then the check that
   the product is finite where the densities are */
static PetscErrorCode ScaledPotentials(Mat A, const PetscScalar *sigma)
{
  Mat_FMM         *fmm = (Mat_FMM *)A->data;
  const PetscReal *w   = fmm->ctx.wts;
  const PetscInt   N = fmm->ctx.N, M = A->rmap->n;
  PetscBool        finite = PETSC_TRUE;

  PetscFunctionBegin;
  if (fmm->par.beta != 0.0) {
    const PetscReal c   = fmm->xexp * FMM_LN2 * (-fmm->par.beta / (2 * PETSC_PI));
    PetscScalar     all = 0;
    for (PetscInt j = 0; j < N; j++) all += (w ? w[j] : 1.0) * sigma[j];
    for (PetscInt i = 0; i < M; i++) {
      PetscScalar here = 0;
      for (PetscInt k = fmm->coff[i]; k < fmm->coff[i + 1]; k++) here += (w ? w[fmm->cidx[k]] : 1.0) * sigma[fmm->cidx[k]];
      fmm->pot[i] += c * (all - here);
    }
  }
  for (PetscInt j = 0; j < N && finite; j++) finite = PetscIsInfOrNanScalar(sigma[j]) ? PETSC_FALSE : PETSC_TRUE;
  for (PetscInt i = 0; i < M && finite; i++)
    PetscCheck(!PetscIsInfOrNanScalar(fmm->pot[i]), PETSC_COMM_SELF, PETSC_ERR_FP, "MATFMM: the product at target %" PetscInt_FMT " (local) is not finite (%g) for finite densities: its true value overflows the double range (the sources' extent is 2^%" PetscInt_FMT " units, and the double layer grows as 1/distance)", i, (double)PetscRealPart(fmm->pot[i]), fmm->xexp);
  PetscFunctionReturn(0);
}

/* y = K x with the distributed tree: on the CPU (cpu/dist.c), or by the backend on this rank's plan; x and y
   in the device memory mem (NULL: host memory) */
static PetscErrorCode DistMult(Mat A, const PetscScalar *x, PetscScalar *y, const FMMDeviceMemory *mem)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;
  FMMDist *D   = fmm->dist;

  PetscFunctionBegin;
  if (D->mpole) PetscCall(FMMDistMultCPU(D, x, y));
  else {
    PetscCall(FMMDistDensities(D, x, mem));
    PetscCall((*fmm->ops->mult)(&fmm->ctx, x, y)); /* the caller's arrays and D's din, dout (ctx split) */
    PetscCall(FMMDistPotentials(D, y, mem));
  }
  PetscFunctionReturn(0);
}

/* y = [y +] scale K x + (shift + diag) .* x
   On one rank the densities are x itself (no gather).  With the CUDA backend
   the arrays are taken where they live (host or device memory,
   VecGet...ArrayAndMemType), so a CUDA-enabled PETSc copies nothing: a plain
   product (no add, scale 1, no diagonal terms) writes y directly, and the
   others add the diagonal terms on the device (the backend's combine) when
   x, y and the diagonal are all in device memory; else on the host. */
static PetscErrorCode MatApply_FMM(Mat A, Vec x, Vec y, PetscBool add)
{
  Mat_FMM           *fmm = (Mat_FMM *)A->data;
  const PetscScalar *xa, *da = NULL, *sigma;
  PetscScalar       *ya, *out;
  PetscInt           m = A->rmap->n, r0 = A->rmap->rstart;
  PetscMPIInt        size;
  PetscBool          plain, memtype, ondev = PETSC_FALSE;
  PetscMemType       mx = PETSC_MEMTYPE_HOST, my = PETSC_MEMTYPE_HOST, md = PETSC_MEMTYPE_HOST;

  PetscFunctionBegin;
  PetscCheck(fmm->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATFMM: assemble the matrix (MatAssemblyBegin/End) after setting its sources");
  PetscCallMPI(MPI_Comm_size(PetscObjectComm((PetscObject)A), &size));
  if (fmm->dist) { /* the distributed tree: densities and potentials in the caller's layout */
    plain = (!add && fmm->scale == 1.0 && fmm->shift == 0.0 && !fmm->diag) ? PETSC_TRUE : PETSC_FALSE;
    if (fmm->ops->mem && !fmm->dist->mpole) { /* device vectors (a PETSc with CUDA): K x read and written in place, into y
                                                 (plain) or kx, then the diagonal terms by PETSc's vector operations there */
      Vec w = y;
      PetscCall(VecGetArrayReadAndMemType(x, &xa, &mx));
      ondev = PetscMemTypeDevice(mx);
      if (ondev && !plain) { /* y and the diagonal in device memory too */
        PetscCall(VecGetArrayReadAndMemType(y, (const PetscScalar **)&ya, &my));
        PetscCall(VecRestoreArrayReadAndMemType(y, (const PetscScalar **)&ya));
        if (fmm->diag) PetscCall(VecGetArrayReadAndMemType(fmm->diag, &da, &md));
        if (fmm->diag) PetscCall(VecRestoreArrayReadAndMemType(fmm->diag, &da));
        ondev = PetscMemTypeDevice(my) && (!fmm->diag || PetscMemTypeDevice(md)) ? PETSC_TRUE : PETSC_FALSE;
        if (ondev && !fmm->kx) PetscCall(VecDuplicate(y, &fmm->kx));
        w = fmm->kx;
      }
      if (ondev) {
        PetscCall(VecGetArrayWriteAndMemType(w, &ya, &my));
        ondev = PetscMemTypeDevice(my);
        if (ondev) {
          PetscCall(FMMWaitForPETSc(PETSC_TRUE));
          PetscCall(DistMult(A, xa, ya, fmm->ops->mem));
        }
        PetscCall(VecRestoreArrayWriteAndMemType(w, &ya));
      }
      PetscCall(VecRestoreArrayReadAndMemType(x, &xa));
      if (ondev && !plain) { /* y = [y +] scale K x + shift x + diag .* x */
        if (add) PetscCall(VecAXPY(y, fmm->scale, w));
        else {
          PetscCall(VecCopy(w, y));
          if (fmm->scale != 1.0) PetscCall(VecScale(y, fmm->scale));
        }
        if (fmm->shift != 0.0) PetscCall(VecAXPY(y, fmm->shift, x));
        if (fmm->diag) {
          PetscCall(VecPointwiseMult(w, fmm->diag, x));
          PetscCall(VecAXPY(y, 1.0, w));
        }
      }
      if (ondev) PetscFunctionReturn(0);
    }
    PetscCall(VecGetArrayRead(x, &xa));
    if (plain) {
      PetscCall(VecGetArrayWrite(y, &ya));
      PetscCall(DistMult(A, xa, ya, NULL));
      PetscCall(VecRestoreArrayWrite(y, &ya));
    } else {
      PetscCall(DistMult(A, xa, fmm->pot, NULL));
      if (add) PetscCall(VecGetArray(y, &ya));
      else PetscCall(VecGetArrayWrite(y, &ya));
      if (fmm->diag) PetscCall(VecGetArrayRead(fmm->diag, &da));
      for (PetscInt i = 0; i < m; i++) { /* square: row i is column i of this rank (ChooseDistribution) */
        PetscScalar v = fmm->scale * fmm->pot[i];
        if (fmm->shift != 0.0 || da) v += (fmm->shift + (da ? da[i] : 0.0)) * xa[i];
        ya[i] = add ? ya[i] + v : v;
      }
      if (fmm->diag) PetscCall(VecRestoreArrayRead(fmm->diag, &da));
      if (add) PetscCall(VecRestoreArray(y, &ya));
      else PetscCall(VecRestoreArrayWrite(y, &ya));
    }
    PetscCall(VecRestoreArrayRead(x, &xa));
    PetscFunctionReturn(0);
  }
  plain   = (!add && fmm->scale == 1.0 && fmm->shift == 0.0 && !fmm->diag && !fmm->xexp) ? PETSC_TRUE : PETSC_FALSE; /* scaled points: the terms of ScaledPotentials on the host */
  memtype = (size == 1 && fmm->ops->mem) ? PETSC_TRUE : PETSC_FALSE; /* a backend with device memory reads the arrays where they live */
  if (memtype) PetscCall(VecGetArrayReadAndMemType(x, &xa, &mx));
  else PetscCall(VecGetArrayRead(x, &xa));
  if (!plain && PetscMemTypeDevice(mx) && fmm->ops->combine) {
    if (add) PetscCall(VecGetArrayAndMemType(y, &ya, &my));
    else PetscCall(VecGetArrayWriteAndMemType(y, &ya, &my));
    if (fmm->diag) PetscCall(VecGetArrayReadAndMemType(fmm->diag, &da, &md));
    ondev = (PetscMemTypeDevice(my) && (!fmm->diag || PetscMemTypeDevice(md)) && !fmm->xexp) ? PETSC_TRUE : PETSC_FALSE;
    if (!ondev) { /* some on the host: all on the host */
      if (fmm->diag) PetscCall(VecRestoreArrayReadAndMemType(fmm->diag, &da));
      if (add) PetscCall(VecRestoreArrayAndMemType(y, &ya));
      else PetscCall(VecRestoreArrayWriteAndMemType(y, &ya));
      PetscCall(VecRestoreArrayReadAndMemType(x, &xa));
      PetscCall(VecGetArrayRead(x, &xa));
      memtype = PETSC_FALSE;
      da      = NULL;
      mx = my = md = PETSC_MEMTYPE_HOST;
    }
  }
  if (size > 1) {
    PetscCall(PetscSFBcastBegin(fmm->sf, MPIU_SCALAR, xa, fmm->sigma, MPI_REPLACE));
    PetscCall(PetscSFBcastEnd(fmm->sf, MPIU_SCALAR, xa, fmm->sigma, MPI_REPLACE));
    sigma = fmm->sigma;
  } else sigma = xa;
  if (plain) {
    if (memtype) PetscCall(VecGetArrayWriteAndMemType(y, &ya, &my));
    else PetscCall(VecGetArrayWrite(y, &ya));
    out = ya;
  } else out = ondev ? NULL : fmm->pot; /* NULL: the backend keeps K x for combine */
  PetscCall(FMMWaitForPETSc(PetscMemTypeDevice(mx) || PetscMemTypeDevice(my) || PetscMemTypeDevice(md) ? PETSC_TRUE : PETSC_FALSE));
  if (fmm->par.method == MATFMM_METHOD_DIRECT) PetscCall((*fmm->ops->direct)(&fmm->ctx, sigma, out));
  else PetscCall((*fmm->ops->mult)(&fmm->ctx, sigma, out));
  if (ondev) {
    PetscCall((*fmm->ops->combine)(&fmm->ctx, fmm->scale, fmm->shift, sigma + r0, da, ya, add));
    if (fmm->diag) PetscCall(VecRestoreArrayReadAndMemType(fmm->diag, &da));
    if (add) PetscCall(VecRestoreArrayAndMemType(y, &ya));
    else PetscCall(VecRestoreArrayWriteAndMemType(y, &ya));
  } else if (!plain) {
    if (fmm->xexp) PetscCall(ScaledPotentials(A, sigma));
    if (add) PetscCall(VecGetArray(y, &ya));
    else PetscCall(VecGetArrayWrite(y, &ya));
    if (fmm->diag) PetscCall(VecGetArrayRead(fmm->diag, &da));
    for (PetscInt i = 0; i < m; i++) {
      PetscScalar v = fmm->scale * fmm->pot[i];
      if (fmm->shift != 0.0 || da) v += (fmm->shift + (da ? da[i] : 0.0)) * sigma[r0 + i];
      ya[i] = add ? ya[i] + v : v;
    }
    if (fmm->diag) PetscCall(VecRestoreArrayRead(fmm->diag, &da));
    if (add) PetscCall(VecRestoreArray(y, &ya));
    else PetscCall(VecRestoreArrayWrite(y, &ya));
  } else if (memtype) PetscCall(VecRestoreArrayWriteAndMemType(y, &ya));
  else PetscCall(VecRestoreArrayWrite(y, &ya));
  if (memtype) PetscCall(VecRestoreArrayReadAndMemType(x, &xa));
  else PetscCall(VecRestoreArrayRead(x, &xa));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatMult_FMM(Mat A, Vec x, Vec y)
{
  PetscFunctionBegin;
  PetscCall(MatApply_FMM(A, x, y, PETSC_FALSE));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatMultAdd_FMM(Mat A, Vec x, Vec v, Vec y)
{
  PetscFunctionBegin;
  if (v != y) PetscCall(VecCopy(v, y));
  PetscCall(MatApply_FMM(A, x, y, PETSC_TRUE));
  PetscFunctionReturn(0);
}

static PetscErrorCode CheckSquare(Mat A, const char *op)
{
  PetscFunctionBegin;
  PetscCheck(A->rmap->N == A->cmap->N, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_SIZ, "MATFMM: %s needs a square matrix, this one is %" PetscInt_FMT " x %" PetscInt_FMT, op, A->rmap->N, A->cmap->N);
  PetscFunctionReturn(0);
}

static PetscErrorCode MatScale_FMM(Mat A, PetscScalar a)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  fmm->scale *= a;
  fmm->shift *= a;
  if (fmm->diag) PetscCall(VecScale(fmm->diag, a));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatShift_FMM(Mat A, PetscScalar a)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCall(CheckSquare(A, "MatShift"));
  fmm->shift += a;
  PetscFunctionReturn(0);
}

/* scale * K_ii for the local rows: 0 where the target is its own source */
static PetscErrorCode KernelDiagonal(Mat A, PetscScalar *kd)
{
  Mat_FMM         *fmm = (Mat_FMM *)A->data;
  PetscInt         r0  = A->rmap->rstart;
  const PetscReal *src, *nrm, *wts, *tgt;
  PetscReal       *copy;

  PetscFunctionBegin;
  PetscCheck(fmm->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATFMM: assemble the matrix before asking for its diagonal");
  if (fmm->dist) { /* the matrix's own sources (host memory): row i is its source i (ChooseDistribution) */
    src  = fmm->src.block;
    nrm  = (fmm->par.alpha != 0.0 && fmm->src.hasnrm) ? fmm->src.nrm : NULL;
    wts  = fmm->src.haswts ? fmm->src.wts : NULL;
    tgt  = fmm->tgt.xy;
    copy = NULL;
    r0   = 0;
  } else PetscCall(FMMPointsHost(fmm, &src, &nrm, &wts, &tgt, &copy)); /* src in the plan's units, tgt as given */
  for (PetscInt i = 0; i < A->rmap->n; i++) {
    PetscInt         j  = r0 + i;
    const int        e  = -(int)fmm->xexp;
    const PetscReal  zx = fmm->tgt.m < 0 ? src[2 * j] : ldexp(tgt[2 * i], e), zy = fmm->tgt.m < 0 ? src[2 * j + 1] : ldexp(tgt[2 * i + 1], e);
    PetscReal        rx = zx - src[2 * j], ry = zy - src[2 * j + 1], r2 = rx * rx + ry * ry;
    PetscReal        w = wts ? wts[j] : 1.0, k = 0.0;
    if (r2 > 0.0) {
      PetscReal cq, cdx, cdy, cdn;
      FMMSourceCoefficients(fmm->ctx.par->alpha, fmm->ctx.par->beta, w, NULL, &cq, &cdx, &cdy, &cdn);
      k = fmm->xexp ? cq * (0.5 * PetscLogReal(r2) + fmm->xexp * FMM_LN2) : cq * 0.5 * PetscLogReal(r2);
      if (nrm) k += cdn * (nrm[2 * j] * rx + nrm[2 * j + 1] * ry) / r2;
    }
    kd[i] = fmm->scale * k;
  }
  PetscCall(PetscFree(copy));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatGetDiagonal_FMM(Mat A, Vec v)
{
  Mat_FMM           *fmm = (Mat_FMM *)A->data;
  PetscScalar       *va;
  const PetscScalar *da = NULL;

  PetscFunctionBegin;
  PetscCall(CheckSquare(A, "MatGetDiagonal"));
  PetscCall(VecGetArrayWrite(v, &va));
  PetscCall(KernelDiagonal(A, va));
  if (fmm->diag) PetscCall(VecGetArrayRead(fmm->diag, &da));
  for (PetscInt i = 0; i < A->rmap->n; i++) va[i] += fmm->shift + (da ? da[i] : 0.0);
  if (fmm->diag) PetscCall(VecRestoreArrayRead(fmm->diag, &da));
  PetscCall(VecRestoreArrayWrite(v, &va));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatDiagonalSet_FMM(Mat A, Vec D, InsertMode is)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCall(CheckSquare(A, "MatDiagonalSet"));
  PetscCheck(is == INSERT_VALUES || is == ADD_VALUES, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: MatDiagonalSet supports INSERT_VALUES and ADD_VALUES");
  if (!fmm->diag) {
    PetscCall(MatCreateVecs(A, NULL, &fmm->diag));
    PetscCall(VecSet(fmm->diag, 0.0));
  }
  if (is == ADD_VALUES) PetscCall(VecAXPY(fmm->diag, 1.0, D));
  else { /* the whole diagonal becomes D: diag = D - scale K_ii - shift */
    PetscScalar *da;
    PetscCall(VecCopy(D, fmm->diag));
    PetscCall(VecGetArray(fmm->diag, &da));
    {
      PetscScalar *kd;
      PetscCall(PetscMalloc1(A->rmap->n, &kd));
      PetscCall(KernelDiagonal(A, kd));
      for (PetscInt i = 0; i < A->rmap->n; i++) da[i] -= kd[i] + fmm->shift;
      PetscCall(PetscFree(kd));
    }
    PetscCall(VecRestoreArray(fmm->diag, &da));
  }
  PetscFunctionReturn(0);
}

/* -mat_view of the distributed tree: one line a rank */
static PetscErrorCode ViewDistributed(Mat A, PetscViewer viewer)
{
  Mat_FMM    *fmm = (Mat_FMM *)A->data;
  FMMDist    *D   = fmm->dist;
  PetscMPIInt rank, size;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(PetscObjectComm((PetscObject)A), &rank));
  PetscCallMPI(MPI_Comm_size(PetscObjectComm((PetscObject)A), &size));
  PetscCall(PetscViewerASCIIPrintf(viewer, "  MPI: distributed tree on %d ranks: the top %" PetscInt_FMT " levels cut by all ranks (median cuts), each rank owns boxes of level %" PetscInt_FMT " and the levels below; %" PetscInt64_FMT " M2L of the top levels on every rank\n", (int)size, D->l0, D->l0, D->nfartop));
  PetscCall(PetscViewerASCIIPushSynchronized(viewer));
  PetscCall(PetscViewerASCIISynchronizedPrintf(viewer, "    [%d] boxes %" PetscInt_FMT "..%" PetscInt_FMT " of level %" PetscInt_FMT ": %" PetscInt_FMT " sources, %" PetscInt_FMT " targets, %" PetscInt_FMT " leaves; halo: %" PetscInt_FMT " sources in %" PetscInt_FMT " leaves, %" PetscInt_FMT " remote multipoles; %" PetscInt64_FMT " M2L, %" PetscInt64_FMT " P2P pairs; moves %" PetscInt_FMT " densities in, %" PetscInt_FMT " potentials out\n", (int)rank, D->B0, D->B1 - 1, D->l0, D->n, D->m, D->nl, D->nh, D->nhl, D->nhb, D->nfar - (rank ? 0 : D->nfartop), D->p2ppairs, D->nrr, D->nrt));
  PetscCall(PetscViewerFlush(viewer));
  PetscCall(PetscViewerASCIIPopSynchronized(viewer));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatView_FMM(Mat A, PetscViewer viewer)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool ascii;

  PetscFunctionBegin;
  PetscCall(PetscObjectTypeCompare((PetscObject)viewer, PETSCVIEWERASCII, &ascii));
  if (!ascii) PetscFunctionReturn(0);
  {
    char comb[64] = "";
    if (fmm->par.kernel == MATFMM_KERNEL_COMBINED) PetscCall(PetscSNPrintf(comb, sizeof(comb), " %g D + %g S", (double)fmm->par.alpha, (double)fmm->par.beta));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  2D Laplace FMM: %s kernel%s, %s\n", MatFMMKernels[fmm->par.kernel], comb, fmm->tgt.m < 0 ? "targets = sources (self term excluded)" : "separate targets"));
  }
  PetscCall(PetscViewerASCIIPrintf(viewer, "  method %s, device %s, near-field layout %s\n", MatFMMMethods[fmm->par.method], fmm->setup ? MatFMMDevices[fmm->device_used] : MatFMMDevices[fmm->device], MatFMMLayouts[fmm->par.layout]));
  {
    PetscInt p;
    PetscCall(MatFMMGetExpansionOrder(A, &p));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  clustering threshold %" PetscInt_FMT ", expansion order %" PetscInt_FMT "%s, eps %g, theta %g\n", fmm->par.ct, p, fmm->p_user > 0 ? " (set)" : " (from eps)", (double)fmm->par.eps, (double)fmm->par.theta));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  relative error bound of the order rule 0.1 theta^p = %.2g\n", (double)(0.1 * PetscPowRealInt(fmm->par.theta, p))));
  }
  if (fmm->scale != 1.0 || fmm->shift != 0.0 || fmm->diag) PetscCall(PetscViewerASCIIPrintf(viewer, "  operator: %g K + %g I%s\n", (double)fmm->scale, (double)fmm->shift, fmm->diag ? " + diag(d)" : ""));
  if (fmm->setup) {
    FMMPlan    *P = &fmm->ctx.plan;
    PetscInt64  loc[4], sum[4], mx[4];
    PetscMPIInt size;
    loc[0] = P->M;
    loc[1] = P->nfar;
    loc[2] = (PetscInt64)P->p2ppairs;
    loc[3] = P->maxleaftgt;
    if (fmm->dist) { /* this rank's targets only (a backend's plan may hold the halo's too: FMMDistHostPlan()) */
      const FMMDist *D = fmm->dist;
      loc[0] = D->m;
      loc[2] = D->p2ppairs;
      loc[3] = D->maxleaftgt;
    }
    PetscCallMPI(MPI_Allreduce(loc, sum, 4, MPIU_INT64, MPI_SUM, PetscObjectComm((PetscObject)A)));
    PetscCallMPI(MPI_Allreduce(loc, mx, 4, MPIU_INT64, MPI_MAX, PetscObjectComm((PetscObject)A)));
    PetscCallMPI(MPI_Comm_size(PetscObjectComm((PetscObject)A), &size));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  tree: %" PetscInt_FMT " sources, %" PetscInt64_FMT " targets, %" PetscInt_FMT " levels below the root, %" PetscInt_FMT " leaves, %" PetscInt_FMT " boxes (%s splits)\n", A->cmap->N, sum[0], P->L, P->nleaves, P->nboxes, fmm->par.split_median ? "median" : "compact"));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  leaf boxes: at most %" PetscInt_FMT " sources, %" PetscInt64_FMT " targets (mean %.1f sources)\n", P->maxleafsrc, mx[3], (double)A->cmap->N / (double)P->nleaves));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  interactions per product: %" PetscInt64_FMT " M2L, %" PetscInt64_FMT " P2P pairs (%.1f per target)\n", sum[1], sum[2], sum[0] ? (double)sum[2] / (double)sum[0] : 0.0));
    if (P->wleaves) PetscCall(PetscViewerASCIIPrintf(viewer, "  near field: %" PetscInt_FMT " leaves of spread points next to dense ones walked point by point (W and X lists): %" PetscInt_FMT " targets take %" PetscInt_FMT " M2P, %" PetscInt_FMT " boxes P2L, %" PetscCount_FMT " of the pairs\n", P->wleaves, P->wtargets, P->wm2p, P->wp2l, P->wpairs));
    if (fmm->xexp) PetscCall(PetscViewerASCIIPrintf(viewer, "  coordinates: the sources' extent is outside [2^-%d, 2^%d]; the tree and the kernels use the points times 2^%d (exact), the product adds the logarithm's %" PetscInt_FMT " log 2 on the host\n", FMM_XEXP_MAX, FMM_XEXP_MAX, (int)-fmm->xexp, fmm->xexp));
    if (fmm->team != fmm->omp) PetscCall(PetscViewerASCIIPrintf(viewer, "  setup's host threads: %d (OpenMP's %d; this rank's share of the CPUs %d, %d rank(s) on its node)\n", fmm->team, fmm->omp, fmm->cpus, (int)fmm->noderanks));
    if (fmm->dist) PetscCall(ViewDistributed(A, viewer));
    else if (size > 1) PetscCall(PetscViewerASCIIPrintf(viewer, "  MPI: all %" PetscInt_FMT " sources replicated on each of %d ranks; each rank evaluates its own targets%s%s%s\n", P->N, (int)size, fmm->whynotdist ? " (not the distributed tree: " : "", fmm->whynotdist ? fmm->whynotdist : "", fmm->whynotdist ? ")" : ""));
    if (fmm->ops && fmm->ops->view) PetscCall((*fmm->ops->view)(&fmm->ctx, viewer));
  } else PetscCall(PetscViewerASCIIPrintf(viewer, "  (not assembled: no tree yet)\n"));
  PetscFunctionReturn(0);
}

/* MatBindToCPU(): what -mat_fmm_device cpu does, until unbound (the device requested before it back) */
static PetscErrorCode MatBindToCPU_FMM(Mat A, PetscBool flg)
{
  Mat_FMM     *fmm = (Mat_FMM *)A->data;
  MatFMMDevice d;

  PetscFunctionBegin;
  if (flg) fmm->device_unbound = fmm->device;
  d = flg ? MATFMM_DEVICE_CPU : fmm->device_unbound;
  if (d != fmm->device) PetscCall(MatFMMInvalidate(A));
  fmm->device = d;
  PetscFunctionReturn(0);
}

static PetscErrorCode MatDestroy_FMM(Mat A)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCall(MatFMMInvalidate(A));
  PetscCall(FMMSourcesFree(fmm));
  PetscCall(FMMTargetsFree(fmm));
  for (PetscInt b = 0; b < FMM_NBACKENDS; b++)
    if (FMMBackends[b]->destroy) PetscCall((*FMMBackends[b]->destroy)(&fmm->bmat[b]));
  PetscCall(VecDestroy(&fmm->diag));
  PetscCall(VecDestroy(&fmm->kx));
  PetscCall(PetscFree(A->data));
  PetscCall(PetscObjectChangeTypeName((PetscObject)A, NULL));
  PetscCall(MatFMMComposeSetters(A, PETSC_FALSE));
  PetscFunctionReturn(0);
}

/*MC
   MATFMM - "fmm" - A matrix whose product is a 2D fast multipole method for
   the Laplace single layer, double layer, or their combination, on the CPU
   (OpenMP) or a GPU (CUDA).

   An M x N `MATFMM` maps densities on N sources (columns) to potentials at M
   targets (rows); with no targets set the targets are the sources.  Rows and
   columns are distributed by PETSc's layouts.  On several ranks the tree is
   shared out among them (`MatFMMSetDistribution()`): each holds and
   computes its part and a halo, and the products move densities and
   potentials between the caller's layout and the tree's.

   Options Database Keys:
+  -mat_type fmm - select this type with `MatSetFromOptions()`
.  -mat_fmm_ct <ct> - clustering threshold, points per leaf box (default 32 on the CPU, 96 with CUDA)
.  -mat_fmm_p <p> - expansion order (default: from -mat_fmm_eps)
.  -mat_fmm_eps <eps> - requested relative accuracy (default 1e-10)
.  -mat_fmm_theta <theta> - separation parameter of the theta-criterion (default 0.5)
.  -mat_fmm_tree_split <compact,median> - how a box is cut in two: at the cut within n/32 points of the median, in x or y, whose children have the least sum of bounding-box half-perimeters (default), or at the median along the longer side (Goude & Engblom)
.  -mat_fmm_layout <tiled,indexing,repetition> - near-field layout (default tiled)
.  -mat_fmm_repetition_mb <mb> - memory budget of the repetition layout (default 256)
.  -mat_fmm_method <fmm,direct> - FMM or exact summation (default fmm)
.  -mat_fmm_device <auto,cpu,cuda> - where to compute (default auto)
.  -mat_fmm_setup_threads <n> - OpenMP threads of the host's work in `MatFMMSetSources()` and the assembly (default 0: OpenMP's team, but with CUDA, where that team leaves fewer than a quarter of this rank's share of the CPUs (at most 4) free, that many fewer: the GPU setup's copy threads and MPI's and CUDA's own threads need them; unbound ranks of one node share its CPUs). The products keep OpenMP's team
.  -mat_fmm_distribution <auto,replicated,tree> - on several ranks: the tree shared out among them (each holds its part and a halo), or all sources on each (default auto: tree where it applies, see `MatFMMSetDistribution()`)
.  -mat_fmm_distribution_global_plan <bool> - the distributed tree on the CPU evaluated as the CUDA backend evaluates it, a plan of each rank's part in the one-rank numbering (a check of that path; default false)
.  -mat_fmm_cuda_m2l <tc,fma> - CUDA M2L on the FP64 tensor cores (default) or by unrolled FMAs
.  -mat_fmm_cuda_log <fast,libm> - CUDA near-field log from a table (default; within 1e-16 absolute) or the math library
.  -mat_fmm_cuda_tree <gpu,cpu> - CUDA backend: tree and interaction lists built on the GPU (default) or on the CPU and uploaded
.  -mat_fmm_cuda_walks <bool> - CUDA: walk the near field of spread leaves next to dense clusters point by point, as the CPU backend does (default true)
.  -mat_fmm_cuda_p2p_symmetric <bool> - CUDA tiled P2P evaluates each unordered pair of points once, for both of its sums (default true; used when the targets are the sources (on one rank, or on several with the distributed tree), with the single layer, the table log and 8 to 256 points per leaf)
.  -mat_fmm_cuda_split_local <bool> - GPU tree build: once the boxes of a round fit in a thread block, the rounds left run in shared memory, a block per box (default true; used where the device grants a block 220 KB of shared memory, as sm_90 does; false, or a device with less: every round in global memory, the same tree)
.  -mat_fmm_cuda_tree_key_bits <b> - GPU tree build: the points are sorted by coordinate through keys of b bits (1 to 32, default 32), quantized over their bounding box, then runs of equal keys by coordinate (runs of more than 32 points, as where a curve crowds along one coordinate, by 64-bit keys); 64: 64-bit keys for all points (two sorts of 8 passes instead of 4). The same tree
.  -mat_fmm_cuda_tree_list_room <n> - GPU tree build: the strong lists of each level get room for n entries per box, the far lists for 3n, before their sizes are known, so that the host queues all levels without waiting for them (1 to 64, default 16; a curve uses 3 and 9, a square 13 and 40; lists that need more are built again with the sizes found, reported by -info; the same lists)
.  -mat_fmm_cuda_pool_reserve <MB> - GPU memory that petscfmm's memory pool maps when the process's CUDA context is made, so that first assemblies need not map it fresh (default 0; read once per process, see `PetscFMMCUDAInitialize()`)
-  -mat_fmm_kernel <single,double,combined>, -mat_fmm_alpha, -mat_fmm_beta - the operator

   Usage:
.vb
   MatCreate(comm, &A);
   MatSetSizes(A, m, n, PETSC_DETERMINE, PETSC_DETERMINE);
   MatSetType(A, MATFMM);
   MatFMMSetSources(A, n, xy, normals, weights);
   MatFMMSetKernel(A, MATFMM_KERNEL_DOUBLE, 0, 0);
   MatSetFromOptions(A);
   MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY); MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY);  // builds the tree
   MatShift(A, -0.5);                                                            // diagonal terms
.ve

   Notes:
   The tree is the adaptive median-split pyramid of Goude & Engblom (J.
   Supercomput. 63, 2013), with cuts moved off the median where that keeps the
   children compact (-mat_fmm_tree_split: on curves that turn back, median cuts
   leave leaves that straddle two arms), interaction lists follow the theta-criterion of
   Engblom (2011) and the translations are those of Greengard & Rokhlin
   (1987) in radius-scaled form.  Supported: `MatMult()`, `MatMultAdd()`,
   `MatScale()`, `MatShift()`, `MatDiagonalSet()`, `MatGetDiagonal()`,
   `MatView()`, `MatComputeOperator()`, and `MatBindToCPU()` (in a PETSc
   configured with a device), which has the effect of -mat_fmm_device cpu
   until the matrix is unbound.  A program that does not link
   petscfmm gets the type with -dll_append /path/to/libpetscfmm.so; one that
   links it calls `PetscFMMInitializePackage()`.

   Vectors: on the GPU with a PETSc configured with CUDA, `MatCreateVecs()`
   gives `VECCUDA` vectors (set at `MatAssemblyEnd()`; call `MatSetVecType()`
   after it for another type).  `MatMult()` and `MatMultAdd()` on one rank
   then read x and write y in device memory, adding the terms of `MatScale()`,
   `MatShift()` and `MatDiagonalSet()` there too, and move no vector between
   host and device.  Host vectors work too: each product copies x up and y
   down.  PETSc needs -use_gpu_aware_mpi 0 where MPI is not CUDA-aware.

   Level: beginner

.seealso: `MatCreateFMM()`, `MatFMMSetSources()`, `MatFMMSetTargets()`, `MatFMMSetKernel()`
M*/
PETSC_EXTERN PetscErrorCode MatCreate_FMM(Mat A)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(PetscFMMInitializePackage());
  PetscCall(PetscNew(&fmm));
  A->data                = (void *)fmm;
  fmm->tgt.m             = -1;
  fmm->src.bad[0]        = fmm->src.bad[1] = fmm->src.bad[2] = fmm->tgt.bad = -1;
  fmm->src.distinct      = -1;
  fmm->src.n             = -1; /* MatFMMSetSources() not called yet */
  fmm->par.kernel        = MATFMM_KERNEL_SINGLE;
  fmm->par.alpha         = 0.0;
  fmm->par.beta          = 1.0;
  fmm->par.ct            = FMMBackendCPU.ct; /* the CPU's default; the device's unless set (see MatFMMSetClusteringThreshold()) */
  fmm->p_user            = 0;
  fmm->par.eps           = 1e-10;
  fmm->par.theta         = 0.5;
  fmm->par.layout        = MATFMM_LAYOUT_TILED;
  fmm->par.method        = MATFMM_METHOD_FMM;
  fmm->device            = MATFMM_DEVICE_AUTO;
  fmm->par.repetition_mb = 256.0;
  fmm->distribution      = MATFMM_DISTRIBUTION_AUTO;
  fmm->scale             = 1.0;
  fmm->shift             = 0.0;
  fmm->noderanks         = 1;
#if defined(PETSC_HAVE_MPI_PROCESS_SHARED_MEMORY)
  { /* (collective, once per communicator: PETSc keeps it) */
    PetscShmComm shm;
    MPI_Comm     node;
    PetscCall(PetscShmCommGet(PetscObjectComm((PetscObject)A), &shm));
    PetscCall(PetscShmCommGetMpiShmComm(shm, &node));
    PetscCallMPI(MPI_Comm_size(node, &fmm->noderanks));
  }
#endif
  for (PetscInt b = 0; b < FMM_NBACKENDS; b++)
    if (FMMBackends[b]->create) PetscCall((*FMMBackends[b]->create)(&fmm->bmat[b]));

  A->ops->mult           = MatMult_FMM;
  A->ops->multadd        = MatMultAdd_FMM;
  A->ops->scale          = MatScale_FMM;
  A->ops->shift          = MatShift_FMM;
  A->ops->diagonalset    = MatDiagonalSet_FMM;
  A->ops->getdiagonal    = MatGetDiagonal_FMM;
  A->ops->view           = MatView_FMM;
  A->ops->destroy        = MatDestroy_FMM;
  A->ops->setfromoptions = MatSetFromOptions_FMM;
  A->ops->setup          = MatSetUp_FMM;
  A->ops->assemblyend    = MatAssemblyEnd_FMM;
  A->ops->bindtocpu      = MatBindToCPU_FMM;
#if defined(PETSC_HAVE_DEVICE)
  A->boundtocpu = PETSC_FALSE; /* MatCreate() binds every matrix; one that may compute on a device starts unbound, as PETSc's GPU types do */
#endif
  A->assembled           = PETSC_FALSE;

  PetscCall(MatFMMComposeSetters(A, PETSC_TRUE));
  PetscCall(PetscObjectChangeTypeName((PetscObject)A, MATFMM));
  PetscFunctionReturn(0);
}
