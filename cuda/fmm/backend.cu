/*
  The CUDA backend: FMMBackendCUDA, the same pass as the CPU backend
  (src/fmm/cpu/backend.c) with every phase on the GPU.  At assembly plan() uploads
  the points and builds the tree and lists on the GPU (tree.cu); with
  -mat_fmm_cuda_tree cpu, src/fmm/plan.c builds them and setup() uploads them.
  setup() then derives the work of a product from the lists (on the GPU) and
  allocates all work arrays once; a product copies the N densities in and the
  M potentials out, and nothing else crosses the bus; device vectors (a PETSc
  configured with CUDA) it reads and writes in place.  One GPU per MPI rank
  (rank modulo the device count).  The backend's per-Mat state (its options,
  the matrix's sources page-locked and their GPU copy) is in settings.cu.

  Backend options (settings.cu, read by MatSetFromOptions() with the Mat's prefix):
    -mat_fmm_cuda_m2l <tc,fma>   M2L on the FP64 tensor cores (default) or unrolled DFMA
    -mat_fmm_cuda_log <fast,libm> near-field log by table (default) or the libm log
    -mat_fmm_cuda_tree <gpu,cpu> tree and lists built on the GPU (default) or on the CPU
    -mat_fmm_cuda_p2p_symmetric <bool> tiled P2P: each unordered pair once, for both sums (default true)
    -mat_fmm_cuda_split_local <bool> the tree's last splitting rounds in shared memory (default true)
    -mat_fmm_cuda_tree_key_bits <b> the tree's sort keys: b quantized bits (1 to 32, default 32) or 64
    -mat_fmm_cuda_tree_list_room <n> the strong lists' room per box (far lists: 3n) before their sizes are known (default 16)
    -mat_fmm_cuda_walks <bool> the walks of spread leaves next to dense ones (tree/walks.cuh, walk.cu; default true)
  and, read once per process without a prefix (device.cu):
    -mat_fmm_cuda_pool_reserve <MB> GPU memory the pool maps up front
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"
#include <chrono>
#include <cstring>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <thread>

/* device array of n elements of type T, uploaded from h when h is not NULL */
template <class T>
static PetscErrorCode Upload(FMM_CUDA *c, T **d, const T *h, PetscInt64 n, const char *what)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)d, (size_t)n * sizeof(T), what));
  if (h && n) FMMCallCUDA(cudaMemcpyAsync(*d, h, (size_t)n * sizeof(T), cudaMemcpyHostToDevice, c->stream));
  PetscFunctionReturn(0);
}

/* back to the pool, in stream order (Destroy ignores errors: nothing left to do with them) */
template <class T>
static void Free(FMM_CUDA *c, T **d)
{
  if (*d) (void)(FMMCUDAPool ? cudaFreeAsync(*d, c->stream) : cudaFree(*d));
  *d = NULL;
}

/* the assembly's state (ctx->data) freed; the distributed tree's part (ctx->part) stays */
static PetscErrorCode ResetData(FMMContext *ctx)
{
  FMM_CUDA *c = (FMM_CUDA *)ctx->data;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  (void)cudaSetDevice(c->dev);
  if (c->stream) (void)cudaStreamSynchronize(c->stream);
  PetscCall(FMMCUDAP2PWorkDestroy(c)); /* after an error in the setup */
  if (c->treebuilt) c->nearoff = NULL; /* in near's block (tree.cu) */
  if (c->treeblk) { /* in one block (tree.cu) */
    c->sperm = c->tperm = c->tleafof = c->sleaf = c->tleaf = c->faroff = NULL;
    c->sx = c->sy = c->cq = c->cdx = c->cdy = c->tx = c->ty = c->cx = c->cy = c->scale = NULL;
    Free(c, &c->treeblk);
  }
  Free(c, &c->sperm), Free(c, &c->sleaf), Free(c, &c->tperm), Free(c, &c->tleaf), Free(c, &c->faroff), Free(c, &c->far), Free(c, &c->nearoff), Free(c, &c->near), Free(c, &c->tleafof);
  Free(c, &c->sx), Free(c, &c->sy), Free(c, &c->cq), Free(c, &c->cdx), Free(c, &c->cdy), Free(c, &c->tx), Free(c, &c->ty), Free(c, &c->cx), Free(c, &c->cy), Free(c, &c->scale);
  Free(c, &c->pairtgt), Free(c, &c->chunkpart), Free(c, &c->tpart), Free(c, &c->part);
  Free(c, &c->sigma), Free(c, &c->q), Free(c, &c->dx), Free(c, &c->dy), Free(c, &c->mpole), Free(c, &c->local), Free(c, &c->pot), Free(c, &c->y), Free(c, &c->dpart);
  Free(c, &c->items), Free(c, &c->leafnsc), Free(c, &c->leafpart), Free(c, &c->p2ppart);
  Free(c, &c->nbroff), Free(c, &c->nearscan), Free(c, &c->entrysrc), Free(c, &c->nbr), Free(c, &c->nbrt), Free(c, &c->gxy), Free(c, &c->gq), Free(c, &c->gdx), Free(c, &c->gdy), Free(c, &c->recoff), Free(c, &c->rec);
  Free(c, &c->xidx), Free(c, &c->xrows), Free(c, &c->walk);
  if (c->hrows) (void)cudaFreeHost(c->hrows);
  c->hrows = NULL;
  Free(c, &c->symleaf), Free(c, &c->symitem), Free(c, &c->colpart), Free(c, &c->chsum), Free(c, &c->symnext), Free(c, &c->symchleaf), Free(c, &c->symchdone);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  PetscCall(PetscFree(c->repleaf));
  PetscCall(PetscFree(c->itemstart));
  PetscCall(PetscFree(c->rbox));
  PetscCall(PetscFree(ctx->data));
  PetscFunctionReturn(0);
}

/* reset(): the assembly's state and the distributed tree's part */
static PetscErrorCode FMMCUDAReset(FMMContext *ctx)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAPartDestroy((FMMCUDAPart **)&ctx->part, NULL));
  PetscCall(ResetData(ctx));
  PetscFunctionReturn(0);
}

/* where the caller's array a lives: pageable host memory; memory that CUDA
   copies directly (page-locked host memory, managed memory, another GPU's);
   or device memory of this backend's GPU (a device vector's array), which
   the kernels read and write in place.  One query per array and product. */
typedef enum {
  FMM_MEM_PAGEABLE,
  FMM_MEM_DIRECT,
  FMM_MEM_HERE
} FMMMem;

static FMMMem MemOf(const FMM_CUDA *c, const void *a)
{
  cudaPointerAttributes at;
  if (cudaPointerGetAttributes(&at, a) != cudaSuccess) {
    (void)cudaGetLastError();
    return FMM_MEM_PAGEABLE;
  }
  if (at.type == cudaMemoryTypeUnregistered) return FMM_MEM_PAGEABLE;
  return at.type == cudaMemoryTypeDevice && at.device == c->dev ? FMM_MEM_HERE : FMM_MEM_DIRECT;
}

/* The late copy: the caller's normals and weights of a rank's part of the
   distributed tree go up on host threads of their own (FMM_LATE_THREADS,
   each through its share of the staging ring's slots, on the side stream)
   while the host goes on with the tree and its lists, as the one-GPU build
   sends them while the GPU sorts (UploadLate).  Their first use (the
   coefficients, PartCoefficients()), any other copy through the ring
   (CopyIn()) and the part's end wait for them (FMMCUDALateWait()).  The
   threads call CUDA and memcpy only, never PETSc.  They sleep while their
   slot's DMA runs, rather than spin, since the OpenMP team may need every
   core the rank has (ranks that fill a node).  Where OpenMP binds its
   threads (OMP_PROC_BIND), a thread the master makes inherits the master's
   place alone, so the late threads take all the team's places instead of
   sharing the master's core. */
#define FMM_LATE_THREADS 4
typedef struct {
  int           dev;
  cudaStream_t  s;
  const double *h[2];
  double       *d[2];
  size_t        n[2];
  bool          spread; /* cpus: the CPUs of all the OpenMP places (LatePlaces) */
  cpu_set_t     cpus;
} LateJob;

static struct {
  std::thread th[FMM_LATE_THREADS];
  cudaError_t err[FMM_LATE_THREADS];
  PetscBool   on;
} Late;

/* the CPUs of all the places of a bound OpenMP team to j->cpus (j->spread false where OpenMP does not bind) */
static void LatePlaces(LateJob *j)
{
  const int np = omp_get_proc_bind() == omp_proc_bind_false ? 0 : omp_get_num_places();

  CPU_ZERO(&j->cpus);
  for (int p = 0; p < np; p++) {
    int       ids[CPU_SETSIZE];
    const int n = omp_get_place_num_procs(p);
    if (n > CPU_SETSIZE) continue; /* (no such place on a CPU_SETSIZE machine) */
    omp_get_place_proc_ids(p, ids);
    for (int i = 0; i < n; i++)
      if (ids[i] >= 0 && ids[i] < CPU_SETSIZE) CPU_SET(ids[i], &j->cpus);
  }
  j->spread = CPU_COUNT(&j->cpus) > 0;
}

/* thread t's chunks of the job: every FMM_LATE_THREADS-th slot of the two arrays, through its slots of the ring */
static void LateCopy(int t, LateJob j)
{
  FMMCUDAStage *st = &FMMCUDAStaging;
  cudaError_t   e  = cudaSetDevice(j.dev); /* (the current device is the thread's own) */
  size_t        k  = 0;

  if (j.spread) (void)pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &j.cpus); /* (else where it was made) */

  for (int a = 0; a < 2 && e == cudaSuccess; a++)
    for (size_t off = 0; off < j.n[a] && e == cudaSuccess; off += FMM_STAGE_SLOT, k++) {
      if (k % FMM_LATE_THREADS != (size_t)t) continue; /* (another thread's) */
      const size_t m    = PetscMin((size_t)FMM_STAGE_SLOT, j.n[a] - off);
      const int    slot = t + FMM_LATE_THREADS * (int)((k / FMM_LATE_THREADS) % (FMM_STAGE_CHUNKS / FMM_LATE_THREADS));
      while ((e = cudaEventQuery(st->evin[slot])) == cudaErrorNotReady) std::this_thread::sleep_for(std::chrono::microseconds(20)); /* (the ring's other slots keep the DMA busy) */
      if (e != cudaSuccess) break;
      memcpy(st->in + (size_t)slot * FMM_STAGE_SLOT, j.h[a] + off, sizeof(double) * m);
      if ((e = cudaMemcpyAsync(j.d[a] + off, st->in + (size_t)slot * FMM_STAGE_SLOT, sizeof(double) * m, cudaMemcpyHostToDevice, j.s)) != cudaSuccess) break;
      e = cudaEventRecord(st->evin[slot], j.s);
    }
  Late.err[t] = e;
}

/* the late copy's threads joined and their copies landed; the first error */
cudaError_t FMMCUDALateWait(void)
{
  cudaError_t e = cudaSuccess;

  if (!Late.on) return e;
  for (int t = 0; t < FMM_LATE_THREADS; t++) {
    if (Late.th[t].joinable()) Late.th[t].join();
    if (e == cudaSuccess) e = Late.err[t];
  }
  Late.on = PETSC_FALSE;
  if (e == cudaSuccess) e = cudaStreamSynchronize(FMMCUDAStaging.side[0]);
  return e;
}

static PetscErrorCode PartCoefficients(FMMContext *, FMM_CUDA *, FMMCUDAPart *);

/* CopyIn, CopyOut: n doubles between the caller's array (in memory m,
   MemOf) and the GPU.  Memory other than pageable is copied directly
   (cudaMemcpyDefault); pageable host memory goes through the process's
   pinned staging rings in slots of FMM_STAGE_SLOT doubles, the host-side
   copies (all OpenMP threads) overlapping the DMA of the other slots
   (FMMCopyReals; CopyOut's by FMMCUDAReadbackStaged).  CopyIn: h to device
   d, in stream s; returns when h may be changed */
static PetscErrorCode CopyIn(cudaStream_t s, double *d, const double *h, PetscInt n, FMMMem m)
{
  FMMCUDAStage *st = &FMMCUDAStaging;

  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  if (!st->in || m != FMM_MEM_PAGEABLE) {
    FMMCallCUDA(cudaMemcpyAsync(d, h, sizeof(double) * n, cudaMemcpyDefault, s));
    PetscFunctionReturn(0);
  }
  FMMCallCUDA(FMMCUDALateWait()); /* (the ring is the late copy's until then) */
  for (PetscInt off = 0, k = 0; off < n; off += FMM_STAGE_SLOT, k++) { /* slot k % CHUNKS, free once its last copy is done */
    const PetscInt m = PetscMin(FMM_STAGE_SLOT, n - off), j = k % FMM_STAGE_CHUNKS;
    FMMCallCUDA(cudaEventSynchronize(st->evin[j]));
    FMMCopyReals(st->in + j * FMM_STAGE_SLOT, h + off, m);
    FMMCallCUDA(cudaMemcpyAsync(d + off, st->in + j * FMM_STAGE_SLOT, sizeof(double) * m, cudaMemcpyHostToDevice, s));
    FMMCallCUDA(cudaEventRecord(st->evin[j], s));
  }
  PetscFunctionReturn(0);
}

/* the caller's n0 doubles h0 to d0 and n1 doubles h1 to d1 (pageable host memory; device arrays
   allocated on c's stream), by the late copy's threads (without a staging ring: now) */
static PetscErrorCode LateStart(FMM_CUDA *c, const double *h0, double *d0, size_t n0, const double *h1, double *d1, size_t n1)
{
  FMMCUDAStage *st = &FMMCUDAStaging;
  LateJob       j  = {c->dev, st->side[0], {h0, h1}, {d0, d1}, {h0 ? n0 : 0, h1 ? n1 : 0}, false, {}};
  cudaEvent_t   ev;

  PetscFunctionBegin;
  FMMCallCUDA(FMMCUDALateWait());
  if (!j.n[0] && !j.n[1]) PetscFunctionReturn(0);
  if (!st->in) {
    for (int a = 0; a < 2; a++) PetscCall(CopyIn(c->stream, j.d[a], j.h[a], (PetscInt)j.n[a], FMM_MEM_PAGEABLE));
    PetscFunctionReturn(0);
  }
  FMMCallCUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)); /* the side stream after the arrays' allocation */
  FMMCallCUDA(cudaEventRecord(ev, c->stream));
  FMMCallCUDA(cudaStreamWaitEvent(j.s, ev, 0));
  FMMCallCUDA(cudaEventDestroy(ev));
  LatePlaces(&j);
  PetscCall(PetscInfo(NULL, "MATFMM CUDA: the late copy of %.1f MB on %d threads, %s\n", sizeof(double) * (j.n[0] + j.n[1]) / 1048576.0, FMM_LATE_THREADS, j.spread ? "over the CPUs of the OpenMP places" : "where the process runs"));
  Late.on = PETSC_TRUE;
  for (int t = 0; t < FMM_LATE_THREADS; t++) {
    Late.err[t] = cudaSuccess;
    try {
      Late.th[t] = std::thread(LateCopy, t, j);
    } catch (...) { /* no thread: this one's share now */
      LateCopy(t, j);
    }
  }
  PetscFunctionReturn(0);
}

/* device d (n doubles) to h; returns when h holds the data */
static PetscErrorCode CopyOut(FMM_CUDA *c, double *h, const double *d, PetscInt n, FMMMem m)
{
  PetscFunctionBegin;
  if (n && FMMCUDAStaging.out && m == FMM_MEM_PAGEABLE) PetscCall(FMMCUDAReadbackStaged(c->stream, h, d, sizeof(double) * n));
  else if (n) FMMCallCUDA(cudaMemcpyAsync(h, d, sizeof(double) * n, cudaMemcpyDefault, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* neighbour-source lists of the indexing and repetition layouts (from the
   device lists), and the repetition chunks (on the host, from the leaf sizes) */
static PetscErrorCode SetupNearLists(FMMContext *ctx, FMM_CUDA *c, const FMMPlan *P)
{
  const FMMParams *par = ctx->par;

  PetscFunctionBegin;
  if (par->layout == MATFMM_LAYOUT_REPETITION) {
    const int   S      = c->kind == 2 ? 5 : (c->kind == 1 ? 4 : 3);
    PetscReal   budget = par->repetition_mb * 1048576.0 / sizeof(PetscReal), need = 0;
    PetscInt64 *recoff, used = 0, maxused = 0;
    PetscInt    nch    = 0, *nbroff, *tleaf;
    PetscCall(PetscMalloc2(P->nleaves + 1, &nbroff, P->nleaves + 1, &tleaf));
    PetscCall(FMMCUDANearSources(c, P, PETSC_FALSE, &c->nbrt, nbroff));
    FMMCallCUDA(cudaMemcpyAsync(tleaf, c->tleaf, sizeof(PetscInt) * (P->nleaves + 1), cudaMemcpyDeviceToHost, c->stream));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    for (PetscInt b = 0; b < P->nleaves; b++) need = PetscMax(need, (PetscReal)(tleaf[b + 1] - tleaf[b]) * (2 + S * (PetscReal)(nbroff[b + 1] - nbroff[b])));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &need, 1, MPIU_REAL, MPIU_MAX, ctx->comm));
    if (need > budget) PetscCall(PetscFree2(nbroff, tleaf));
    PetscCall(FMMRepetitionBudget(ctx, need));
    /* leaf-aligned chunks that fit the budget */
    PetscCall(PetscMalloc1(P->nleaves, &recoff));
    PetscCall(PetscMalloc1(P->nleaves + 1, &c->repleaf));
    c->repleaf[0] = 0;
    for (PetscInt b = 0; b < P->nleaves; b++) {
      PetscInt64 len = (PetscInt64)(tleaf[b + 1] - tleaf[b]) * (2 + (PetscInt64)S * (nbroff[b + 1] - nbroff[b]));
      if (used + len > (PetscInt64)budget) {
        c->repleaf[++nch] = b;
        used              = 0;
      }
      recoff[b] = used;
      used += len;
      maxused = PetscMax(maxused, used);
    }
    c->repleaf[++nch] = P->nleaves;
    c->nrepchunks     = nch;
    PetscCall(Upload(c, &c->recoff, recoff, P->nleaves, "the repetition record offsets"));
    PetscCall(Upload(c, &c->rec, (PetscReal *)NULL, maxused, "the repetition records (-mat_fmm_repetition_mb)"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(recoff));
    PetscCall(PetscFree2(nbroff, tleaf));
  } else { /* indexing: global source indices, sources in global order */
    PetscCall(FMMCUDANearSources(c, P, PETSC_TRUE, &c->nbr, NULL));
    if (!c->gxy) { /* the tree built on the GPU keeps the uploaded points: sources first */
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->gxy, sizeof(double) * 2 * P->N, "the sources in global order"));
      PetscCall(CopyIn(c->stream, c->gxy, ctx->src, 2 * P->N, MemOf(c, ctx->src)));
    }
    PetscCall(Upload(c, &c->gq, (PetscReal *)NULL, P->N, "the charges in global order"));
    PetscCall(Upload(c, &c->gdx, (PetscReal *)NULL, P->N, "the dipoles in global order"));
    PetscCall(Upload(c, &c->gdy, (PetscReal *)NULL, P->N, "the dipoles in global order"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
  }
  PetscFunctionReturn(0);
}

/* the backend's context: device, stream, kernel choices */
static PetscErrorCode Create(FMMContext *ctx)
{
  const FMMParams  *par = ctx->par;
  const FMMCUDAMat *m   = (const FMMCUDAMat *)ctx->bmat;
  FMM_CUDA         *c;
  PetscInt          p = par->p;

  PetscFunctionBegin;
  PetscCall(ResetData(ctx));
  PetscCall(PetscNew(&c));
  ctx->data = c;
  PetscCall(FMMCUDAInitializeContext()); /* selects this rank's device; once per process also the context and the staging rings */
  FMMCallCUDA(cudaGetDevice(&c->dev));
  FMMCallCUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  c->p  = p;
  c->ne = 2 * (p + 1);
  c->pp = p <= FMMCUDA_PFAST ? 2 * ((p + 1) / 2) : 0;
  /* M2L on the FP64 tensor cores unless -mat_fmm_cuda_m2l fma */
  c->kp = (m->m2l_tc && c->pp) ? 8 * ((p + 7) / 8) : 0;
  {
    PetscBool hasq = par->beta != 0.0 ? PETSC_TRUE : PETSC_FALSE, hasd = (par->alpha != 0.0 && ctx->nrm) ? PETSC_TRUE : PETSC_FALSE;
    c->kind        = hasd ? (hasq ? 2 : 1) : 0;
  }
  c->fmm      = par->method == MATFMM_METHOD_FMM ? PETSC_TRUE : PETSC_FALSE;
  c->listroom = m->list_room;
  PetscFunctionReturn(0);
}

/* the normals and weights go up on a second stream while the GPU sorts and
   splits the points: FMMCUDATreeBuild calls UploadLate once the sort is
   queued, and its scatter, their first use, waits for done (ready: after
   their allocation); from the block's GPU copy (mirror) where
   MatFMMSetSources() sent one */
typedef struct {
  const FMMContext *ctx;
  double           *nrm, *wts;
  cudaEvent_t       ready;
  FMMCUDAMirror     mirror;
} LateUpload;

static PetscErrorCode UploadLate(FMM_CUDA *c, void *ctx, cudaEvent_t after, cudaEvent_t *done)
{
  LateUpload        *u = (LateUpload *)ctx;
  const cudaStream_t s = FMMCUDAStaging.side[0];

  PetscFunctionBegin;
  FMMCallCUDA(cudaEventCreateWithFlags(done, cudaEventDisableTiming));
  FMMCallCUDA(cudaStreamWaitEvent(s, u->ready, 0));
  if (after) FMMCallCUDA(cudaStreamWaitEvent(s, after, 0)); /* the points first */
  {
    const FMMContext *x   = u->ctx;
    const FMMSources *S   = x->sources;
    const double     *mir = FMMCUDAMirrorData(u->mirror);
    if (mir) PetscCall(FMMCUDAMirrorWait(u->mirror, s, 1)); /* all of it sent */
    if (u->nrm) PetscCall(CopyIn(s, u->nrm, mir ? mir + (S->nrm - S->block) : x->nrm, 2 * x->plan.N, mir ? FMM_MEM_HERE : MemOf(c, x->nrm)));
    if (u->wts) PetscCall(CopyIn(s, u->wts, mir ? mir + (S->wts - S->block) : x->wts, x->plan.N, mir ? FMM_MEM_HERE : MemOf(c, x->wts)));
  }
  FMMCallCUDA(cudaEventRecord(*done, s));
  PetscFunctionReturn(0);
}

/* the points [a, b) of the U = N + Mg of the plan (the sources, then the
   targets of all ranks) to xy on stream s: FMMCUDATreeBuild uploads them in
   two parts from 2^21 points on, each sorted while the next goes up; so do
   the distributed tree's top cuts (a rank's sources, then its targets) */
typedef struct {
  const double     *tgt; /* the targets (after the N sources) */
  double           *xy;
  PetscInt          N;
  const double  *src;    /* the sources: the caller's (one rank), the gathered ones, or the block's GPU copy */
  FMMCUDAMirror  mirror; /* that copy (src), or NULL */
  FMMMem         msrc, mtgt;
} PointUpload;

static PetscErrorCode UploadPoints(FMM_CUDA *c, void *ctx, PetscInt a, PetscInt b, cudaStream_t s)
{
  PointUpload *u = (PointUpload *)ctx;

  PetscFunctionBegin;
  if (a < u->N) {
    if (u->mirror) PetscCall(FMMCUDAMirrorWait(u->mirror, s, 0)); /* its points sent */
    PetscCall(CopyIn(s, u->xy + 2 * a, u->src + 2 * a, 2 * (PetscMin(b, u->N) - a), u->msrc));
  }
  if (b > u->N) {
    const PetscInt t = PetscMax(a, u->N);
    PetscCall(CopyIn(s, u->xy + 2 * t, u->tgt + 2 * (t - u->N), 2 * (b - t), u->mtgt));
  }
  PetscFunctionReturn(0);
}

/* plan(): the points to the GPU, the tree and lists built there (tree.cu) */
static PetscErrorCode FMMCUDAPlan(FMMContext *ctx)
{
  const FMMParams  *par  = ctx->par;
  FMMCUDAMat       *m    = (FMMCUDAMat *)ctx->bmat;
  FMMPlan          *P    = &ctx->plan;
  PetscBool         same = ctx->same;
  PetscInt          N = ctx->N, Mg = ctx->Mg, U = N + Mg;
  FMM_CUDA         *c;
  double           *xy;
  LateUpload        late = {ctx, NULL, NULL, NULL, NULL};
  PointUpload       up;
  FMMCUDATreeInput  in;
  const double     *mir = FMMCUDAMirrorData(ctx->alias ? m->mirror : NULL); /* the sources' GPU copy sent by MatFMMSetSources() (one rank, page-locked block) */
  PetscBool         fromhost, inplace;
  PetscLogDouble    t0, t0b, t1;

  PetscFunctionBegin;
  PetscCall(PetscTime(&t0));
  PetscCall(Create(ctx));
  c = (FMM_CUDA *)ctx->data;
  PetscCall(FMMCUDAPinSources(ctx));
  PetscCall(PetscTime(&t0b));
  late.mirror = mir ? m->mirror : NULL;
  up          = PointUpload{ctx->tgt, NULL, N, mir ? mir : ctx->src, late.mirror, mir ? FMM_MEM_HERE : MemOf(c, ctx->src), same ? FMM_MEM_PAGEABLE : MemOf(c, ctx->tgt)};
  /* the sources given in this GPU's memory (one rank: the matrix's copy of
     them, made by MatFMMSetSources(), whose block also holds the normals
     and weights) and no other targets: the tree reads them where they are,
     instead of copies (three allocations and three copies fewer) */
  inplace = (!mir && same && up.msrc == FMM_MEM_HERE) ? PETSC_TRUE : PETSC_FALSE;
  if (inplace) {
    xy       = (double *)ctx->src;
    late.nrm = (double *)ctx->nrm;
    late.wts = (double *)ctx->wts;
  } else {
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&xy, sizeof(double) * 2 * PetscMax(U, 1), "the points"));
    if (ctx->nrm) PetscCall(FMMCUDAMalloc(c->stream, (void **)&late.nrm, sizeof(double) * 2 * N, "the normals"));
    if (ctx->wts) PetscCall(FMMCUDAMalloc(c->stream, (void **)&late.wts, sizeof(double) * N, "the weights"));
    FMMCallCUDA(cudaEventCreateWithFlags(&late.ready, cudaEventDisableTiming));
    FMMCallCUDA(cudaEventRecord(late.ready, c->stream));
  }
  up.xy    = xy;
  fromhost = (up.msrc != FMM_MEM_HERE || (!same && up.mtgt != FMM_MEM_HERE)) ? PETSC_TRUE : PETSC_FALSE; /* else no upload to overlap */
  in       = FMMCUDATreeInput{par->ct, par->theta, par->split_median, m->split_local, m->key_bits, U, same, ctx->t0, par->alpha, par->beta, xy, late.nrm, late.wts, fromhost, {inplace ? NULL : UploadPoints, &up, (!inplace && (late.nrm || late.wts)) ? UploadLate : NULL, &late}};
  PetscCall(FMMCUDATreeBuild(c, P, &in));
  PetscCall(PetscTime(&t1));
  PetscCall(PetscInfo(ctx->obj, "GPU plan: context and staging %.2f ms, %" PetscInt_FMT " points %s, tree and lists (with the normals and weights up) %.2f ms\n", 1e3 * (t0b - t0), U, inplace ? "read in place (the matrix's copy of the points given in GPU memory)" : (mir ? "up (the sources from their GPU copy sent by MatFMMSetSources())" : "up"), 1e3 * (t1 - t0b)));
  if (inplace) PetscFunctionReturn(0); /* (indexing: SetupNearLists copies the sources) */
  FMMCallCUDA(cudaEventDestroy(late.ready));
  if (late.nrm) PetscCall(FMMCUDAFree(c->stream, late.nrm));
  if (late.wts) PetscCall(FMMCUDAFree(c->stream, late.wts));
  if (par->layout == MATFMM_LAYOUT_INDEXING && c->fmm) c->gxy = xy; /* the sources in global order, first 2N */
  else PetscCall(FMMCUDAFree(c->stream, xy));
  PetscFunctionReturn(0);
}

/* what petscfmm's memory pool holds, for -info and -mat_view (the size to give -mat_fmm_cuda_pool_reserve) */
static PetscErrorCode PoolText(char *buf, size_t len)
{
  size_t mapped, used;

  PetscFunctionBegin;
  FMMCUDAPoolUsage(&mapped, &used);
  PetscCall(PetscSNPrintf(buf, len, "%.1f MB mapped, at most %.1f MB in use at once so far (-mat_fmm_cuda_pool_reserve)", mapped / 1048576.0, used / 1048576.0));
  PetscFunctionReturn(0);
}

/* box g (global number) in the GPU's box arrays (FMM_CUDA's nbc), -1: not there */
static PetscInt BoxSlot(const FMM_CUDA *c, const FMMPlan *P, PetscInt g)
{
  PetscInt l = 0, first, n, k;

  if (!c->nbc) return g;
  while (l < P->L && g >= FMMLevelStart(l + 1)) l++;
  FMMPlanLevelBoxes(P, l, &first, &n);
  if (l <= P->l0 || (g - FMMLevelStart(l) >= first && g - FMMLevelStart(l) < first + n)) return c->lbase[l] + (g - FMMLevelStart(l));
  if (PetscFindInt(g, c->nrb, c->rbox, &k) || k < 0) return -1;
  return c->nbc - c->nrb + k;
}

/* A rank's part of the distributed tree (P->b1 > 0) keeps on the GPU only the
   boxes it reads: levels 0..l0 (the top, on every rank), its own below, and
   the remote boxes its far lists and the exchange name (FMM_CUDA's nbc):
   the geometry, far lists (in the same order), expansions and M2L partials
   then scale with the rank's part, not with the pyramid.  That numbering is
   the distributed tree's own (FMMContext nslot ...: its slots are levels
   0..l0, the rank's own below level by level, then the remote ones
   ascending), whose arrays the upload takes as they are: here the
   numbering is set (lbase, rbox: BoxSlot()), and *faroff (to free) made,
   the far lists' offsets over all nslot boxes */
static PetscErrorCode SlotBoxes(FMMContext *ctx, FMM_CUDA *c, const FMMPlan *P, PetscInt **faroff)
{
  PetscInt next = FMMLevelStart(P->l0 + 1), nfar = ctx->slfaroff[ctx->nsown];

  PetscFunctionBegin;
  PetscCheck(P->L <= FMM_MAX_LEVELS && P->l0 <= P->L, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: levels %" PetscInt_FMT ", part level %" PetscInt_FMT, P->L, P->l0);
  for (PetscInt l = 0; l <= P->L; l++) {
    PetscInt first, n;
    if (l <= P->l0) {
      c->lbase[l] = FMMLevelStart(l);
      continue;
    }
    FMMPlanLevelBoxes(P, l, &first, &n);
    c->lbase[l] = next - first;
    next += n;
  }
  PetscCheck(next == ctx->nsown && nfar == P->nfar, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the rank's %" PetscInt_FMT " own boxes and %" PetscInt_FMT " M2L pairs are not the plan's %" PetscInt_FMT " and %" PetscInt_FMT, ctx->nsown, nfar, next, P->nfar);
  c->nrb = ctx->nslot - ctx->nsown;
  c->nbc = ctx->nslot;
  PetscCall(PetscMalloc1(PetscMax(c->nrb, 1), &c->rbox));
  PetscCall(PetscArraycpy(c->rbox, ctx->slbox, c->nrb));
  PetscCall(PetscMalloc1(c->nbc + 1, faroff));
  PetscCall(PetscArraycpy(*faroff, ctx->slfaroff, ctx->nsown + 1));
  for (PetscInt b = ctx->nsown; b < c->nbc; b++) (*faroff)[b + 1] = nfar; /* a remote box takes no M2L here */
  PetscFunctionReturn(0);
}

/* Upload of a plan's arrays of points: through the staging rings where h is
   pageable (CopyIn; a plain copy of pageable memory runs at a fraction of
   the bus) */
template <class T>
static PetscErrorCode UploadStaged(FMM_CUDA *c, T **d, const T *h, PetscInt64 n, const char *what)
{
  const size_t bytes = (size_t)n * sizeof(T), nd = bytes / sizeof(double), tail = bytes - nd * sizeof(double);

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)d, bytes, what));
  if (!n) PetscFunctionReturn(0);
  PetscCall(CopyIn(c->stream, (double *)*d, (const double *)h, (PetscInt)nd, MemOf(c, h)));
  if (tail) FMMCallCUDA(cudaMemcpyAsync((char *)*d + nd * sizeof(double), (const char *)h + nd * sizeof(double), tail, cudaMemcpyHostToDevice, c->stream));
  PetscFunctionReturn(0);
}

/* The sources and targets of a rank's part of the distributed tree whose own points are on this GPU
   (ctx->part; FMMDistHostPlan(), H->devb, devn): the own sources [devb, devb + devn) and the own
   targets copied from the part with their numbers, the halo's sources (H's arrays: those before, then
   those after) uploaded around them; the part is freed after */
static PetscErrorCode PlanFromPart(FMMContext *ctx, FMM_CUDA *c, const FMMPlan *P, const FMMHostPlan *H)
{
  FMMCUDAPart     *p    = (FMMCUDAPart *)ctx->part;
  const PetscInt   b    = H->devb, n = H->devn, N = P->N, M = P->M;
  double         **d[5] = {&c->sx, &c->sy, &c->cq, &c->cdx, &c->cdy};
  const double    *own[5], *halo[5] = {H->sx, H->sy, H->cq, H->cdx, H->cdy};
  const char      *what[5] = {"the source coordinates", "the source coordinates", "the charges per unit density", "the dipoles per unit density", "the dipoles per unit density"};

  PetscFunctionBegin;
  PetscCheck(p && p->n == n && b + n <= N && (H->talias ? (M == N || M == n) : p->m == M) && p->cin && (H->talias || p->cout), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the rank's part on the GPU does not match its plan");
  PetscCall(PartCoefficients(ctx, c, p));
  own[0] = p->sx, own[1] = p->sy, own[2] = p->cq, own[3] = p->cdx, own[4] = p->cdy;
  /* the numbers: the halo's from H (those before, then those after), the own from the part; the targets
     the own ones' (the halo's sources as targets, M = N: dropped, -1) */
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->sperm, sizeof(PetscInt) * PetscMax(N, 1), "the source permutation"));
  if (b) FMMCallCUDA(cudaMemcpyAsync(c->sperm, H->sperm, sizeof(PetscInt) * b, cudaMemcpyHostToDevice, c->stream));
  if (n) FMMCallCUDA(cudaMemcpyAsync(c->sperm + b, p->cin, sizeof(PetscInt) * n, cudaMemcpyDeviceToDevice, c->stream));
  if (N - b - n) FMMCallCUDA(cudaMemcpyAsync(c->sperm + b + n, H->sperm + b, sizeof(PetscInt) * (N - b - n), cudaMemcpyHostToDevice, c->stream));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->tperm, sizeof(PetscInt) * PetscMax(M, 1), "the target permutation"));
  {
    const PetscInt *cout = p->cout ? p->cout : p->cin, a = H->talias && M == N ? b : 0, m = H->talias ? n : M;
    if (a || m < M) FMMCallCUDA(cudaMemsetAsync(c->tperm, 0xff, sizeof(PetscInt) * M, c->stream)); /* -1 */
    if (m) FMMCallCUDA(cudaMemcpyAsync(c->tperm + a, cout, sizeof(PetscInt) * m, cudaMemcpyDeviceToDevice, c->stream));
  }
  for (int k = 0; k < 5; k++) {
    PetscCall(FMMCUDAMalloc(c->stream, (void **)d[k], sizeof(double) * PetscMax(N, 1), what[k]));
    if (b) PetscCall(CopyIn(c->stream, *d[k], halo[k], b, MemOf(c, halo[k])));
    if (n) FMMCallCUDA(cudaMemcpyAsync(*d[k] + b, own[k], sizeof(double) * n, cudaMemcpyDeviceToDevice, c->stream));
    if (N - b - n) PetscCall(CopyIn(c->stream, *d[k] + b + n, halo[k] + b, N - b - n, MemOf(c, halo[k])));
  }
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->tx, sizeof(double) * PetscMax(M, 1), "the target coordinates"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->ty, sizeof(double) * PetscMax(M, 1), "the target coordinates"));
  if (M) { /* the sources (all, or the own ones), or the own targets */
    const double *tx = H->talias ? c->sx + (M == N ? 0 : b) : p->tx, *ty = H->talias ? c->sy + (M == N ? 0 : b) : p->ty;
    FMMCallCUDA(cudaMemcpyAsync(c->tx, tx, sizeof(double) * M, cudaMemcpyDeviceToDevice, c->stream));
    FMMCallCUDA(cudaMemcpyAsync(c->ty, ty, sizeof(double) * M, cudaMemcpyDeviceToDevice, c->stream));
  }
  PetscCall(FMMCUDAPartDestroy((FMMCUDAPart **)&ctx->part, c->stream));
  PetscFunctionReturn(0);
}

/* the plan built by src/fmm/plan.c or src/fmm/dist.c (FMMDistHostPlan(): ctx's exchange), uploaded */
static PetscErrorCode UploadPlan(FMMContext *ctx, FMM_CUDA *c, const FMMPlan *P, const FMMHostPlan *H)
{
  const PetscReal *cx = H->cx, *cy = H->cy, *scale = H->scale;
  const PetscInt  *far = H->far, *faroff = H->faroff;
  PetscInt        *made = NULL; /* SlotBoxes()' offsets */

  PetscFunctionBegin;
  if (P->b1) { /* the rank's numbering as it comes */
    PetscCheck(ctx->nslot, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: a rank's part without its boxes");
    PetscCall(SlotBoxes(ctx, c, P, &made));
    cx = ctx->slcx, cy = ctx->slcy, scale = ctx->slscale, faroff = made, far = ctx->slfar;
  }
  if (ctx->part && ((FMMCUDAPart *)ctx->part)->far) { /* the far lists and the slots' circles made on the GPU (lists()) */
    FMMCUDAPart *p = (FMMCUDAPart *)ctx->part;
    PetscCheck(P->b1 && p->nfar == P->nfar && p->nslot == FMMCUDABoxCount(c, P) && p->slot[0], PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part's %" PetscInt_FMT " M2L pairs and %" PetscInt_FMT " slots are not the plan's %" PetscInt_FMT " and %" PetscInt_FMT, p->nfar, p->nslot, P->nfar, FMMCUDABoxCount(c, P));
    c->far   = p->far;
    c->cx    = p->slot[0];
    c->cy    = p->slot[1];
    c->scale = p->slot[2];
    p->far     = NULL;
    p->slot[0] = p->slot[1] = p->slot[2] = NULL;
  }
  PetscCheck(c->cx || cx, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: no geometry of the plan's boxes");
  if (ctx->part) PetscCall(PlanFromPart(ctx, c, P, H));
  else {
    PetscCall(UploadStaged(c, &c->sperm, H->sperm, P->N, "the source permutation"));
    PetscCall(UploadStaged(c, &c->tperm, H->tperm, P->M, "the target permutation"));
    PetscCall(UploadStaged(c, &c->sx, H->sx, P->N, "the source coordinates"));
    PetscCall(UploadStaged(c, &c->sy, H->sy, P->N, "the source coordinates"));
    PetscCall(UploadStaged(c, &c->cq, H->cq, P->N, "the charges per unit density"));
    PetscCall(UploadStaged(c, &c->cdx, H->cdx, P->N, "the dipoles per unit density"));
    PetscCall(UploadStaged(c, &c->cdy, H->cdy, P->N, "the dipoles per unit density"));
    PetscCall(UploadStaged(c, &c->tx, H->tx, P->M, "the target coordinates"));
    PetscCall(UploadStaged(c, &c->ty, H->ty, P->M, "the target coordinates"));
  }
  PetscCall(Upload(c, &c->sleaf, H->sleaf, P->nleaves + 1, "the leaf source ranges"));
  PetscCall(Upload(c, &c->tleaf, H->tleaf, P->nleaves + 1, "the leaf target ranges"));
  PetscCall(Upload(c, &c->tleafof, (PetscInt *)NULL, P->M, "the target leaves"));
  PetscCall(FMMCUDALeafOf(c->stream, P->M, P->nleaves, c->tleaf, c->tleafof));
  if (!c->cx) {
    PetscCall(Upload(c, &c->cx, cx, FMMCUDABoxCount(c, P), "the box centres"));
    PetscCall(Upload(c, &c->cy, cy, FMMCUDABoxCount(c, P), "the box centres"));
    PetscCall(Upload(c, &c->scale, scale, FMMCUDABoxCount(c, P), "the box scales"));
  }
  PetscCall(Upload(c, &c->faroff, faroff, FMMCUDABoxCount(c, P) + 1, "the M2L offsets"));
  if (!c->far) PetscCall(Upload(c, &c->far, far, P->nfar, "the M2L list"));
  PetscCall(Upload(c, &c->nearoff, H->nearoff, P->nleaves + 1, "the P2P offsets"));
  PetscCall(Upload(c, &c->near, H->near, H->nearoff[P->nleaves], "the P2P lists"));
  c->nnear = H->nearoff[P->nleaves];
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscFree(made));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDASetup(FMMContext *ctx)
{
  const FMMParams  *par = ctx->par;
  const FMMCUDAMat *m   = (const FMMCUDAMat *)ctx->bmat;
  FMMPlan          *P   = &ctx->plan;
  FMM_CUDA         *c   = (FMM_CUDA *)ctx->data;
  PetscLogDouble    t0, t1, t2;
  PetscBool         info;

  PetscFunctionBegin;
  PetscCall(PetscTime(&t0));
  if (!c || !c->treebuilt) {
    PetscCheck(ctx->host, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: no plan, on the GPU or the host");
    PetscCall(Create(ctx));
    c = (FMM_CUDA *)ctx->data;
    PetscCall(UploadPlan(ctx, c, P, ctx->host));
    PetscCall(PetscInfoEnabled(MAT_CLASSID, &info));
    if (info) { /* (the wait for the -info time only) */
      PetscLogDouble tu;
      FMMCallCUDA(cudaStreamSynchronize(c->stream));
      PetscCall(PetscTime(&tu));
      PetscCall(PetscInfo(ctx->obj, "GPU setup: the plan up in %.2f ms\n", 1e3 * (tu - t0)));
    }
  }
  /* the near field's log by table unless -mat_fmm_cuda_log libm */
  if (m->log_fast) PetscCall(FMMCUDALogTable(c));
  if (c->fmm && !c->walkdone) { /* the walks of spread leaves next to dense ones (tree/walks.cuh), once per tree */
    P->wleaves = P->wtargets = P->wm2p = P->wp2l = 0;
    P->wpairs                                    = 0;
    if (m->walks && FMMWalksApply(ctx)) PetscCall(FMMCUDAWalks(ctx, c));
    c->walkdone = PETSC_TRUE;
  }
  /* the P2P counts and the statistics of the plan first (and the symmetric
     P2P's counts where it may run: this rank's targets are all the sources,
     single layer, table log), so that the GPU runs them while the host
     allocates the work arrays and queues the M2L plan; their sizes are read
     in FMMCUDAP2PPlanEnd below */
  PetscCall(FMMCUDAP2PPlanBegin(c, P, c->fmm && par->layout == MATFMM_LAYOUT_TILED && m->p2p_sym && c->kind == 0 && c->logtab && (ctx->same || ctx->halotgt) && P->M == P->N ? PETSC_TRUE : PETSC_FALSE));
  PetscCall(Upload(c, &c->sigma, (PetscReal *)NULL, ctx->split ? ctx->nin + ctx->nin2 : P->N, "the densities"));
  PetscCall(Upload(c, &c->q, (PetscReal *)NULL, P->N, "the charges"));
  PetscCall(Upload(c, &c->dx, (PetscReal *)NULL, P->N, "the dipoles"));
  PetscCall(Upload(c, &c->dy, (PetscReal *)NULL, P->N, "the dipoles"));
  PetscCall(Upload(c, &c->pot, (PetscReal *)NULL, P->M, "the potentials"));
  PetscCall(Upload(c, &c->y, (PetscReal *)NULL, ctx->split ? ctx->nout + ctx->nout2 : P->M, "the potentials"));
  if (ctx->split) FMMCallCUDA(cudaMemsetAsync(c->y, 0, sizeof(double) * (ctx->nout + ctx->nout2), c->stream)); /* rows other ranks compute: defined */
  if (c->fmm) {
    PetscCall(FMMCUDAM2LSetup(c)); /* the tables of the expansions */
    const PetscInt64 nb = FMMCUDABoxCount(c, P);
    PetscCall(Upload(c, &c->mpole, (PetscReal *)NULL, nb * c->ne, "the multipole expansions"));
    if (P->b1) FMMCallCUDA(cudaMemsetAsync(c->mpole, 0, sizeof(double) * nb * c->ne, c->stream)); /* boxes a rank's part never computes: defined */
    PetscCall(Upload(c, &c->local, (PetscReal *)NULL, nb * c->ne, "the local expansions"));
    PetscCall(FMMCUDAM2LPlan(c, P));
  }
  if (ctx->exchange) { /* the distributed tree's multipole rows: indices, device rows, page-locked host rows */
    const PetscInt nx = ctx->nxexp + ctx->nximp;
    PetscInt      *slot;
    PetscCall(PetscMalloc1(PetscMax(nx, 1), &slot));
    for (PetscInt j = 0; j < nx; j++) {
      slot[j] = BoxSlot(c, P, j < ctx->nxexp ? ctx->xexp[j] : ctx->ximp[j - ctx->nxexp]);
      PetscCheck(slot[j] >= 0, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: exchanged box %" PetscInt_FMT " is not on this rank's GPU", j < ctx->nxexp ? ctx->xexp[j] : ctx->ximp[j - ctx->nxexp]);
    }
    PetscCall(Upload(c, &c->xidx, slot, PetscMax(nx, 1), "the exchanged rows' boxes"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(slot));
    PetscCall(Upload(c, &c->xrows, (PetscReal *)NULL, (PetscInt64)PetscMax(nx, 1) * c->ne, "the exchanged rows"));
    FMMCallCUDA(cudaMallocHost((void **)&c->hrows, sizeof(double) * (size_t)PetscMax(nx, 1) * c->ne));
  }
  PetscCall(PetscInfoEnabled(MAT_CLASSID, &info));
  if (info) FMMCallCUDA(cudaStreamSynchronize(c->stream)); /* for the -info times only */
  PetscCall(PetscTime(&t1));
  PetscCall(FMMCUDAP2PPlanEnd(c, P, par->layout == MATFMM_LAYOUT_REPETITION && c->fmm ? PETSC_TRUE : PETSC_FALSE));
  P->p2ppairs += P->wpairs;
  if (c->fmm && par->layout != MATFMM_LAYOUT_TILED) PetscCall(SetupNearLists(ctx, c, P));
  { /* direct: slice the sources when the targets alone do not fill the GPU */
    int      sms = 1;
    PetscInt bx  = (P->M + 255) / 256;
    FMMCallCUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->dev));
    c->dslices = PetscMax(1, PetscMin((4 * sms + bx - 1) / PetscMax(bx, 1), P->N / 4096));
    c->dslices = PetscMin(c->dslices, 65535);
    if (c->dslices > 1) PetscCall(Upload(c, &c->dpart, (PetscReal *)NULL, (PetscInt64)c->dslices * P->M, "the direct partial sums"));
  }
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscTime(&t2));
  PetscCall(PetscInfo(ctx->obj, "GPU setup: P2P counts, work arrays and M2L work %.2f ms, P2P work and near lists %.2f ms\n", 1e3 * (t1 - t0), 1e3 * (t2 - t1)));
  if (info) {
    char pool[160];
    PetscCall(PoolText(pool, sizeof(pool)));
    PetscCall(PetscInfo(ctx->obj, "GPU memory pool: %s\n", pool));
  }
  PetscFunctionReturn(0);
}

/* log-event brackets of the phases.  With logging on, the host waits for
   the backend's stream at both ends, so that the event times are the
   phase's; where PETSc is configured with CUDA the phase's time is also
   PETSc's GPU time (PetscLogGpuTimeBegin/End, on PETSc's current device
   context, whose timer the waits order around the phase's kernels on the
   backend's own stream) and its flops are GPU flops (PetscLogGpuFlops), as
   PETSc's own GPU operations log theirs.  Without logging: no wait, and
   PETSc's GPU timer does nothing. */
static PetscErrorCode PhaseBegin(FMM_CUDA *c, PetscLogEvent e)
{
  PetscFunctionBegin;
  if (c->sync) FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscLogEventBegin(e, 0, 0, 0, 0));
#if defined(PETSC_HAVE_CUDA)
  PetscCall(PetscLogGpuTimeBegin());
#endif
  PetscFunctionReturn(0);
}

static PetscErrorCode PhaseEnd(FMM_CUDA *c, PetscLogEvent e, PetscLogDouble flops)
{
  PetscFunctionBegin;
  if (c->sync) FMMCallCUDA(cudaStreamSynchronize(c->stream));
#if defined(PETSC_HAVE_CUDA)
  PetscCall(PetscLogGpuTimeEnd());
  PetscCall(PetscLogGpuFlops(flops));
#else
  PetscCall(PetscLogFlops(flops));
#endif
  PetscCall(PetscLogEventEnd(e, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* densities in (global order): device memory of this GPU (a device vector) is
   read in place, anything else copied to c->sigma first; strengths in tree order */
static PetscErrorCode Begin(FMMContext *ctx, FMM_CUDA *c, const PetscScalar *sigma)
{
  PetscFunctionBegin;
  FMMCallCUDA(cudaSetDevice(c->dev));
  PetscCall(PetscLogIsActive(&c->sync));
  const FMMMem m = MemOf(c, sigma);
  if (ctx->split) { /* the caller's densities as they are, then those from the other ranks (FMMContext) */
    PetscCall(PhaseBegin(c, MATFMM_Copy));
    PetscCall(CopyIn(c->stream, c->sigma, sigma, ctx->nin, m));
    PetscCall(CopyIn(c->stream, c->sigma + ctx->nin, ctx->xin, ctx->nin2, MemOf(c, ctx->xin)));
    PetscCall(PhaseEnd(c, MATFMM_Copy, 0));
    PetscCall(FMMCUDAStrengths(c, &ctx->plan, c->sigma));
  } else if (m == FMM_MEM_HERE) PetscCall(FMMCUDAStrengths(c, &ctx->plan, sigma));
  else {
    PetscCall(PhaseBegin(c, MATFMM_Copy));
    PetscCall(CopyIn(c->stream, c->sigma, sigma, ctx->plan.N, m));
    PetscCall(PhaseEnd(c, MATFMM_Copy, 0));
    PetscCall(FMMCUDAStrengths(c, &ctx->plan, c->sigma));
  }
  PetscFunctionReturn(0);
}

/* where a product writes its potentials (local target order): y itself when it
   is device memory of this GPU, else c->y (y NULL: kept there for
   FMMCUDACombineOp); *ym: where y lives */
static double *Out(FMMContext *ctx, FMM_CUDA *c, PetscScalar *y, FMMMem *ym)
{
  *ym = y ? MemOf(c, y) : FMM_MEM_DIRECT;
  return *ym == FMM_MEM_HERE && !ctx->split ? y : c->y;
}

/* potentials out from out = Out(ctx, c, y, &ym) (scattered: L2P wrote them there already) */
static PetscErrorCode End(FMMContext *ctx, FMM_CUDA *c, PetscScalar *y, FMMMem ym, double *out, PetscBool scattered)
{
  PetscFunctionBegin;
  if (!scattered) PetscCall(FMMCUDAScatter(c, &ctx->plan, out));
  if (ctx->split) { /* the caller's rows, then those for the other ranks (FMMContext) */
    PetscCall(PhaseBegin(c, MATFMM_Copy));
    PetscCall(CopyOut(c, y, out, ctx->nout, ym));
    PetscCall(CopyOut(c, ctx->yout, out + ctx->nout, ctx->nout2, MemOf(c, ctx->yout)));
    PetscCall(PhaseEnd(c, MATFMM_Copy, 0));
  } else if (y && out != y) {
    PetscCall(PhaseBegin(c, MATFMM_Copy));
    PetscCall(CopyOut(c, y, out, ctx->plan.M, ym));
    PetscCall(PhaseEnd(c, MATFMM_Copy, 0));
  }
  else if (y) FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* the L2P phase, in its log event (out: see FMMCUDAL2P) */
static PetscErrorCode L2P(FMM_CUDA *c, const FMMPlan *P, double *out)
{
  PetscFunctionBegin;
  PetscCall(PhaseBegin(c, MATFMM_L2P));
  PetscCall(FMMCUDAL2P(c, P, out));
  PetscCall(PhaseEnd(c, MATFMM_L2P, FMMFlops(FMM_PHASE_L2P, c->p, P)));
  PetscFunctionReturn(0);
}

/* y = [y +] scale K x + (shift + d) .* x with K x from the last product (c->y);
   x (this rank's densities), d (or NULL) and y in device memory */
static PetscErrorCode FMMCUDACombineOp(FMMContext *ctx, PetscScalar scale, PetscScalar shift, const PetscScalar *x, const PetscScalar *d, PetscScalar *y, PetscBool add)
{
  FMM_CUDA *c = (FMM_CUDA *)ctx->data;

  PetscFunctionBegin;
  PetscCall(FMMCUDACombine(c, ctx->plan.M, scale, shift, x, d, y, add));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* rows r of the multipoles: to rows (gather) or from them (scatter), a thread per coefficient */
__global__ void RowsKernel(PetscInt n, int ne, int scatter, const PetscInt *box, double *mpole, double *rows)
{
  const PetscInt64 k = (PetscInt64)blockIdx.x * blockDim.x + threadIdx.x;
  FMMWaitPrior();
  if (k >= (PetscInt64)n * ne) return;
  {
    const PetscInt r = (PetscInt)(k / ne), j = (PetscInt)(k % ne);
    if (scatter) mpole[(PetscInt64)box[r] * ne + j] = rows[k];
    else rows[k] = mpole[(PetscInt64)box[r] * ne + j];
  }
}

/* the distributed tree: the rows this rank sends down to the host, the
   exchange (MPI), the rows it receives up, in place of the partial
   multipoles its own M2M left there */
static PetscErrorCode Exchange(FMMContext *ctx, FMM_CUDA *c)
{
  const PetscInt ne = c->ne, ns = ctx->nxexp, nr = ctx->nximp;

  PetscFunctionBegin;
  if (ns) {
    FMMLaunch(RowsKernel, FMMCUDABlocks((PetscInt64)ns * ne, 256), 256, 0, c->stream, ns, (int)ne, 0, (const PetscInt *)c->xidx, c->mpole, c->xrows);
    FMMCheckLaunch();
    FMMCallCUDA(cudaMemcpyAsync(c->hrows, c->xrows, sizeof(double) * ns * ne, cudaMemcpyDeviceToHost, c->stream));
  }
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall((*ctx->exchange)(ctx->xctx, c->hrows, c->hrows + (size_t)ns * ne));
  if (nr) {
    FMMCallCUDA(cudaMemcpyAsync(c->xrows + (size_t)ns * ne, c->hrows + (size_t)ns * ne, sizeof(double) * nr * ne, cudaMemcpyHostToDevice, c->stream));
    FMMLaunch(RowsKernel, FMMCUDABlocks((PetscInt64)nr * ne, 256), 256, 0, c->stream, nr, (int)ne, 1, (const PetscInt *)c->xidx + ns, c->mpole, c->xrows + (size_t)ns * ne);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDAMult(FMMContext *ctx, const PetscScalar *sigma, PetscScalar *y)
{
  const FMMPlan *P = &ctx->plan;
  FMM_CUDA      *c = (FMM_CUDA *)ctx->data;
  FMMMem         ym;
  double        *out = Out(ctx, c, y, &ym);

  PetscFunctionBegin;
  PetscCheck(c->fmm, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: set up for the direct method only");
  PetscCall(Begin(ctx, c, sigma));
  PetscCall(PhaseBegin(c, MATFMM_P2M));
  PetscCall(FMMCUDAP2M(c, P));
  PetscCall(PhaseEnd(c, MATFMM_P2M, FMMFlops(FMM_PHASE_P2M, c->p, P)));
  PetscCall(PhaseBegin(c, MATFMM_M2M));
  PetscCall(FMMCUDAM2M(c, P));
  PetscCall(PhaseEnd(c, MATFMM_M2M, FMMFlops(FMM_PHASE_M2M, c->p, P)));
  if (ctx->exchange) PetscCall(Exchange(ctx, c));
  PetscCall(PhaseBegin(c, MATFMM_M2L));
  PetscCall(FMMCUDAM2L(c, P));
  if (c->nlb) PetscCall(FMMCUDAWalkP2L(c)); /* the walked sources' P2L, before L2L */
  PetscCall(PhaseEnd(c, MATFMM_M2L, FMMFlops(FMM_PHASE_M2L, c->p, P)));
  PetscCall(PhaseBegin(c, MATFMM_L2L));
  PetscCall(FMMCUDAL2L(c, P));
  PetscCall(PhaseEnd(c, MATFMM_L2L, FMMFlops(FMM_PHASE_L2L, c->p, P)));
  if (!c->syma) PetscCall(L2P(c, P, out)); /* writes pot, P2P adds to it; with the symmetric P2P, L2P comes last and writes y (p2p.cu) */
  PetscCall(PhaseBegin(c, MATFMM_P2P));
  switch (ctx->par->layout) {
  case MATFMM_LAYOUT_TILED:
    PetscCall(FMMCUDAP2PTiled(c, P));
    break;
  case MATFMM_LAYOUT_INDEXING:
    PetscCall(FMMCUDAP2PIndexing(c, P));
    break;
  case MATFMM_LAYOUT_REPETITION:
    PetscCall(FMMCUDAP2PRepetition(c, P));
    break;
  }
  PetscCall(PhaseEnd(c, MATFMM_P2P, FMMFlops(FMM_PHASE_P2P, c->p, P)));
  if (c->syma) PetscCall(L2P(c, P, out));
  if (c->walk) PetscCall(FMMCUDAWalkNear(c, c->syma ? c->tperm : NULL, c->syma ? out : c->pot)); /* the walks' near field, added to what L2P and P2P wrote */
  PetscCall(End(ctx, c, y, ym, out, c->syma ? PETSC_TRUE : PETSC_FALSE));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDADirectMult(FMMContext *ctx, const PetscScalar *sigma, PetscScalar *y)
{
  FMM_CUDA *c = (FMM_CUDA *)ctx->data;
  FMMMem    ym;
  double   *out = Out(ctx, c, y, &ym);

  PetscFunctionBegin;
  PetscCall(Begin(ctx, c, sigma));
  PetscCall(PhaseBegin(c, MATFMM_Direct));
  PetscCall(FMMCUDADirect(c, &ctx->plan));
  PetscCall(PhaseEnd(c, MATFMM_Direct, FMMFlops(FMM_PHASE_DIRECT, c->p, &ctx->plan)));
  PetscCall(End(ctx, c, y, ym, out, PETSC_FALSE));
  PetscFunctionReturn(0);
}

/* -mat_view: what petscfmm's memory pool holds (to size -mat_fmm_cuda_pool_reserve) and which near-field kernel the product runs */
static PetscErrorCode FMMCUDAView(FMMContext *ctx, PetscViewer viewer)
{
  FMM_CUDA *c = (FMM_CUDA *)ctx->data;
  char      pool[160];

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  PetscCall(PoolText(pool, sizeof(pool)));
  PetscCall(PetscViewerASCIIPrintf(viewer, "  CUDA memory pool (first rank's GPU): %s\n", pool));
  if (!c->fmm || ctx->par->layout != MATFMM_LAYOUT_TILED) PetscFunctionReturn(0);
  if (c->syma) PetscCall(PetscViewerASCIIPrintf(viewer, "  CUDA P2P: symmetric, each pair of points once for both sums (%" PetscInt_FMT " lanes x %" PetscInt_FMT " rows per leaf)\n", c->syma, c->symr));
  else PetscCall(PetscViewerASCIIPrintf(viewer, "  CUDA P2P: tiled, every ordered pair\n"));
  PetscFunctionReturn(0);
}

/* the device count, the device memory of points given there, and once per process the context */
static PetscErrorCode DeviceCount(PetscInt *n)
{
  int c = 0;

  PetscFunctionBegin;
  PetscCall(FMMCUDADeviceCount(&c));
  *n = c;
  PetscFunctionReturn(0);
}

static const FMMDeviceMemory Memory = {FMMCUDAIsDeviceMemory, FMMCUDAPointsAlloc, FMMCUDAPointsFree, FMMCUDAPointsToHost, FMMCUDACopyChecked};

/* what the warm-up product of PetscFMMCUDAInitialize() does not load: CUB's
   sorts of larger sizes (FMMCUDAWarmUpSorts), the copy of points given in GPU memory */
static PetscErrorCode WarmUp(void)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAWarmUpSorts());
  PetscCall(FMMCUDAPointsLoad());
  PetscFunctionReturn(0);
}

/* in the order of struct _FMMBackendOps (fmmimpl.h) */
/* subtrees(): a rank's subtrees of the distributed tree split on its GPU
   (FMMCUDASubtrees, tree.cu), from the host's points or the part's slots;
   with -mat_fmm_cuda_tree cpu the host splits them */
static PetscErrorCode FMMCUDASubtreesOp(FMMContext *ctx, PetscInt n, const PetscReal *xy, const PetscInt *pj, PetscInt nroot, const PetscInt *off, PetscInt levels, PetscInt *order, PetscInt *loff, PetscReal *bb, PetscBool *done)
{
  const FMMCUDAMat *m = (const FMMCUDAMat *)ctx->bmat;
  FMMCUDAPart      *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA         *c;
  double           *dxy;
  PetscInt         *sorted;
  PetscLogDouble    t0, t1;
  char              how[96] = "sorted";

  PetscFunctionBegin;
  *done = PETSC_FALSE;
  if (!m->tree_gpu) PetscFunctionReturn(0);
  PetscCheck(xy || p, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: subtrees of no points");
  PetscCall(PetscTime(&t0));
  PetscCall(Create(ctx)); /* (the plan's setup makes its own) */
  c = (FMM_CUDA *)ctx->data;
  PetscCheck(order || (p && !xy), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: only the part's subtrees keep their order");
  if (!xy && !pj) dxy = p->rxy; /* the targets are the sources: the slots in box order */
  else {
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&dxy, sizeof(double) * 2 * PetscMax(n, 1), "the points of the subtrees"));
    if (xy) PetscCall(CopyIn(c->stream, dxy, xy, 2 * n, MemOf(c, xy)));
    else {
      PetscCall(UploadStaged(c, &p->pj, pj, n, "the points of the subtrees"));
      PetscCall(FMMCUDAPartInterleave(c->stream, p, n, p->pj, dxy));
    }
  }
  if (!order) PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->ord, sizeof(PetscInt) * PetscMax(n, 1), "the part's order"));
  sorted = NULL;
  if (p && p->keep && !xy && !pj && n == p->nr) { /* the top cuts' lists, in slots, are the sorted input */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&sorted, sizeof(PetscInt) * 2 * PetscMax(n, 1), "the subtrees' sorted lists"));
    PetscCall(FMMCUDASubtreesLists(c, n, dxy, nroot, off, p->ns, p->keep, p->lsrc, p->nleft, sorted));
    PetscCall(PetscSNPrintf(how, sizeof(how), "the top cuts' lists (%" PetscInt_FMT " received points merged in)", n - (p->ns - p->nleft)));
  }
  PetscCall(FMMCUDASubtrees(c, n, dxy, sorted, nroot, off, levels, ctx->par->split_median, m->split_local, order ? order : p->ord, order ? PETSC_FALSE : PETSC_TRUE, loff, bb));
  PetscCall(FMMCUDAFree(c->stream, sorted));
  if (p) {
    PetscCall(FMMCUDAFree(c->stream, p->keep));
    p->keep = NULL;
  }
  if (!order) {
    p->nord = n;
    if (p->pj) PetscCall(FMMCUDAGatherInts(c->stream, n, p->ord, p->pj, p->ord)); /* places -> points (in place: each element reads its own) */
  }
  if (p && p->pj) {
    PetscCall(FMMCUDAFree(c->stream, p->pj));
    p->pj = NULL;
  }
  if (!p || dxy != p->rxy) PetscCall(FMMCUDAFree(c->stream, dxy));
  PetscCall(ResetData(ctx));
  PetscCall(PetscTime(&t1));
  PetscCall(PetscInfo(ctx->obj, "GPU subtrees: %" PetscInt_FMT " points in %" PetscInt_FMT " boxes split %" PetscInt_FMT " levels deep, %.2f ms with the %s, %s and the order %s\n", n, nroot, levels, 1e3 * (t1 - t0), xy ? "points up" : "points on the GPU", how, order ? "back" : "kept there"));
  *done = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* topcuts(): the distributed tree's top cuts on the ranks' GPUs (FMMCUDATopCuts,
   tree.cu), where every rank builds its trees there (-mat_fmm_cuda_tree gpu);
   the points stay on the GPU (ctx->part) for the rest of the build */
static PetscErrorCode FMMCUDATopCutsOp(FMMContext *ctx, MPI_Comm comm, PetscInt ns, const PetscReal *sxy, PetscInt mt, const PetscReal *txy, PetscInt s0, PetscInt tg0, PetscInt U, PetscInt l0, PetscInt *cnt, PetscBool *done)
{
  const FMMCUDAMat *m = (const FMMCUDAMat *)ctx->bmat;
  PetscMPIInt       all = m->tree_gpu ? 1 : 0;
  FMM_CUDA         *c;
  FMMCUDAPart      *p;
  PetscInt         *box;
  PetscLogDouble    t0, t1;

  PetscFunctionBegin;
  *done = PETSC_FALSE;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_LAND, comm));
  if (!all) PetscFunctionReturn(0);
  PetscCall(PetscTime(&t0));
  PetscCall(FMMCUDAReset(ctx)); /* (a part an assembly that failed left) */
  PetscCall(Create(ctx));       /* (the plan's setup makes its own) */
  c = (FMM_CUDA *)ctx->data;
  PetscCall(PetscNew(&p));
  ctx->part = p;
  p->ns     = ns;
  p->mt     = mt;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->xy, sizeof(double) * 2 * PetscMax(ns + mt, 1), "the points of the rank's part"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&box, sizeof(PetscInt) * PetscMax(ns + mt, 1), "the part's boxes"));
  if (ns && !mt) PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->keep, sizeof(PetscInt) * 2 * ns, "the top cuts' lists")); /* (the subtrees' sorted input, FMMCUDASubtreesLists()) */
  {
    PointUpload    up  = {txy, p->xy, ns, sxy, NULL, MemOf(c, sxy), mt ? MemOf(c, txy) : FMM_MEM_PAGEABLE};
    FMMCUDAUploads ups = {UploadPoints, &up, NULL, NULL};
    PetscCall(FMMCUDATopCuts(c, comm, ns + mt, U, p->xy, ns, s0, tg0, l0, box, p->keep, &ups)); /* (the points go up in its sort) */
  }
  PetscCall(FMMCUDAPartBoxes(c->stream, p, (PetscInt)1 << (2 * l0), box, cnt));
  PetscCall(FMMCUDAFree(c->stream, box));
  PetscCall(ResetData(ctx));
  PetscCall(PetscTime(&t1));
  PetscCall(PetscInfo(ctx->obj, "GPU top cuts: %" PetscInt_FMT " points, %" PetscInt_FMT " levels, %.2f ms with the points up and the points sorted by box\n", ns + mt, l0, 1e3 * (t1 - t0)));
  *done = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* partowners(): the slots of the part's sources or targets (src/fmm/dist.c OwnerMoves()): the slot map
   made on the GPU from the top cuts' sort by box, the points that leave the rank back to the host */
static PetscErrorCode FMMCUDAPartOwnersOp(FMMContext *ctx, PetscBool tgt, PetscInt n0, const PetscInt *cnt, const PetscInt *first, PetscInt nslot, PetscInt nrem, PetscInt *il)
{
  FMMCUDAPart *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA    *c;
  PetscInt    *h, *d, *rem = NULL, **lmap = tgt ? &p->ltgt : &p->lsrc, a = tgt ? p->ns : 0, nr = 0;

  PetscFunctionBegin;
  PetscCheck(p && p->bsort && p->n0 == n0 && !*lmap, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part's points are not sorted by box");
  PetscCall(Create(ctx));
  c = (FMM_CUDA *)ctx->data;
  PetscCall(PetscMalloc1(3 * n0 + 1, &h)); /* the kind's offsets by box, first, the remote points' starts */
  h[0] = a;
  for (PetscInt B = 0; B < n0; B++) {
    const PetscInt k = cnt[B];
    h[B + 1]          = h[B] + k;
    h[n0 + 1 + B]     = first[B];
    h[2 * n0 + 1 + B] = nr;
    if (first[B] < 0) nr += k;
    else PetscCheck(first[B] + k <= nslot, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: box %" PetscInt_FMT "'s slots pass the rank's %" PetscInt_FMT, B, nslot);
  }
  PetscCheck(nr == nrem, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: %" PetscInt_FMT " points leave the rank, not %" PetscInt_FMT, nr, nrem);
  PetscCall(Upload(c, &d, h, 3 * n0 + 1, "the part's boxes"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)lmap, sizeof(PetscInt) * PetscMax(nslot, 1), "the rank's slots"));
  FMMCallCUDA(cudaMemsetAsync(*lmap, 0xff, sizeof(PetscInt) * nslot, c->stream)); /* -1: received */
  if (nrem) PetscCall(FMMCUDAMalloc(c->stream, (void **)&rem, sizeof(PetscInt) * nrem, "the points that leave the rank"));
  PetscCall(FMMCUDAPartOwners(c->stream, p, h[0], h[n0], n0, d, d + n0 + 1, d + 2 * n0 + 1, *lmap, rem));
  if (nrem) FMMCallCUDA(cudaMemcpyAsync(il, rem, sizeof(PetscInt) * nrem, cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(FMMCUDAFree(c->stream, d));
  PetscCall(FMMCUDAFree(c->stream, rem));
  PetscCall(PetscFree(h));
  if (tgt) p->mr = nslot;
  else {
    p->nr    = nslot;
    p->nleft = nrem;
  }
  PetscCall(ResetData(ctx));
  PetscFunctionReturn(0);
}

/* partslots(): the part's points to this rank's slots (the slot map of partowners()): those that stay
   from the top cuts' copy, the received ones (with their normals and weights) up from the host; the
   caller's normals and weights go up by the late copy, read at the coefficients (PartCoefficients()) */
static PetscErrorCode FMMCUDAPartSlotsOp(FMMContext *ctx, PetscBool tgt, PetscInt nc, PetscBool hasnrm, const PetscReal *nrm, PetscBool haswts, const PetscReal *wts, PetscInt nslot, PetscInt ncr, const PetscInt *croot, const PetscReal *rxy, const PetscReal *rnrm, const PetscReal *rw)
{
  FMMCUDAPart *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA    *c;
  PetscInt    *dc = NULL;
  double      *v[3] = {NULL, NULL, NULL}, **oxy = tgt ? &p->txy : &p->rxy;

  PetscFunctionBegin;
  PetscCheck(p && p->xy && nc == (tgt ? p->mt : p->ns) && (tgt ? p->ltgt : p->lsrc) && nslot == (tgt ? p->mr : p->nr) && (!tgt || (!hasnrm && !haswts)), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: no part of %" PetscInt_FMT " points with %" PetscInt_FMT " slots on the GPU", nc, nslot);
  PetscCall(Create(ctx));
  c = (FMM_CUDA *)ctx->data;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)oxy, sizeof(double) * 2 * PetscMax(nslot, 1), "the rank's slots"));
  PetscCall(FMMCUDAPartSlots(c->stream, nslot, tgt ? p->ltgt : p->lsrc, p->xy + (tgt ? 2 * p->ns : 0), NULL, NULL, *oxy, NULL, NULL));
  if (ncr) {
    if (hasnrm) PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->rnrm, sizeof(double) * 2 * nslot, "the rank's slots"));
    if (haswts) PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->rw, sizeof(double) * nslot, "the rank's slots"));
    PetscCall(UploadStaged(c, &dc, croot, ncr, "the received points' slots"));
    PetscCall(UploadStaged(c, &v[0], rxy, 2 * ncr, "the received points"));
    if (hasnrm) PetscCall(UploadStaged(c, &v[1], rnrm, 2 * ncr, "the received normals"));
    if (haswts) PetscCall(UploadStaged(c, &v[2], rw, ncr, "the received weights"));
    PetscCall(FMMCUDAPartReceived(c->stream, ncr, dc, v[0], v[1], v[2], *oxy, hasnrm ? p->rnrm : NULL, haswts ? p->rw : NULL));
  }
  PetscCall(FMMCUDAFree(c->stream, dc));
  for (int k = 0; k < 3; k++) PetscCall(FMMCUDAFree(c->stream, v[k]));
  /* the caller's normals and weights: up late, read where their points stay (PartCoefficients()) */
  if (hasnrm && nrm && nc) PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->cnrm, sizeof(double) * 2 * nc, "the normals"));
  if (haswts && wts && nc) PetscCall(FMMCUDAMalloc(c->stream, (void **)&p->cwts, sizeof(double) * nc, "the weights"));
  PetscCall(LateStart(c, p->cnrm ? nrm : NULL, p->cnrm, 2 * (size_t)nc, p->cwts ? wts : NULL, p->cwts, (size_t)nc));
  PetscCall(ResetData(ctx)); /* (waits for the stream) */
  PetscFunctionReturn(0);
}

/* the coefficients of the part's sources in tree order, once (partorder() done): the late copy of the
   caller's normals and weights waited for, and those and the received ones freed after */
static PetscErrorCode PartCoefficients(FMMContext *ctx, FMM_CUDA *c, FMMCUDAPart *p)
{
  double       **a[3] = {&p->cq, &p->cdx, &p->cdy}, **f[4] = {&p->cnrm, &p->cwts, &p->rnrm, &p->rw};
  PetscLogDouble t0, t1;

  PetscFunctionBegin;
  if (p->cq) PetscFunctionReturn(0);
  PetscCheck(p->sx && p->sperm && p->lsrc, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part is not in tree order");
  PetscCall(PetscTime(&t0));
  FMMCallCUDA(FMMCUDALateWait());
  PetscCall(PetscTime(&t1));
  if (p->cnrm || p->cwts) PetscCall(PetscInfo(ctx->obj, "GPU part: waited %.2f ms for the late copy of the normals and weights\n", 1e3 * (t1 - t0)));
  for (int k = 0; k < 3; k++) PetscCall(FMMCUDAMalloc(c->stream, (void **)a[k], sizeof(double) * PetscMax(p->n, 1), "the rank's part in tree order"));
  PetscCall(FMMCUDAPartCoefficients(c->stream, p, ctx->par->alpha, ctx->par->beta));
  for (int k = 0; k < 4; k++) {
    PetscCall(FMMCUDAFree(c->stream, *f[k]));
    *f[k] = NULL;
  }
  PetscFunctionReturn(0);
}

/* partorder(): the part's sources (and targets) in tree order from the subtrees' order kept (their
   coefficients later: PartCoefficients()); its slots and the caller's copy of the points freed */
static PetscErrorCode FMMCUDAPartOrderOp(FMMContext *ctx, PetscInt nl, const PetscInt *loff, PetscInt *scnt, PetscInt *tcnt)
{
  FMMCUDAPart *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA    *c;
  double     **a[4] = {&p->sx, &p->sy, &p->tx, &p->ty};

  PetscFunctionBegin;
  PetscCheck(p && p->rxy && p->ord && p->nord == p->nr + (p->txy ? p->mr : 0) && loff[nl] == p->nord, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part's slots do not match its order");
  PetscCall(Create(ctx));
  c = (FMM_CUDA *)ctx->data;
  if (!p->txy) { /* the order is the sources' */
    p->sperm = p->ord;
    p->ord   = NULL;
    PetscCall(PetscArraycpy(scnt, loff, nl + 1));
    PetscCall(PetscArraycpy(tcnt, loff, nl + 1));
  } else {
    PetscCall(FMMCUDAPartSplitOrder(c->stream, p, nl, loff, scnt));
    for (PetscInt b = 0; b <= nl; b++) tcnt[b] = loff[b] - scnt[b];
    PetscCall(FMMCUDAFree(c->stream, p->ord));
    p->ord = NULL;
  }
  PetscCheck(scnt[nl] == p->nr && (!p->txy || tcnt[nl] == p->mr), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part's order holds %" PetscInt_FMT " sources, not %" PetscInt_FMT, scnt[nl], p->nr);
  p->n = p->nr;
  p->m = p->txy ? p->mr : 0;
  for (int k = 0; k < 4; k++) PetscCall(FMMCUDAMalloc(c->stream, (void **)a[k], sizeof(double) * PetscMax(k < 2 ? p->n : p->m, 1), "the rank's part in tree order"));
  PetscCall(FMMCUDAPartOrder(c->stream, p, p->sperm, p->tperm));
  {
    double **f[3] = {&p->xy, &p->rxy, &p->txy};
    for (int k = 0; k < 3; k++) {
      PetscCall(FMMCUDAFree(c->stream, *f[k]));
      *f[k] = NULL;
    }
  }
  PetscCall(ResetData(ctx));
  PetscFunctionReturn(0);
}

/* partnumbers(): the product's numbers of the part's points in tree order, kept for the plan's upload */
static PetscErrorCode FMMCUDAPartNumbersOp(FMMContext *ctx, PetscBool tgt, PetscInt nc, PetscInt ncr, const PetscInt *croot, PetscInt nq, const PetscInt *q, PetscInt *out)
{
  FMMCUDAPart *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA    *c;
  PetscInt    *dc = NULL, *dq = NULL, *dout = NULL, **num, n, bad;

  PetscFunctionBegin;
  PetscCheck(p && p->sx && (tgt ? p->tperm && p->ltgt : p->sperm && p->lsrc), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part is not in tree order");
  PetscCall(Create(ctx));
  c   = (FMM_CUDA *)ctx->data;
  num = tgt ? &p->cout : &p->cin;
  n   = tgt ? p->m : p->n;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)num, sizeof(PetscInt) * PetscMax(n, 1), "the product's numbering"));
  if (ncr) PetscCall(Upload(c, &dc, croot, ncr, "the received points' slots"));
  PetscCall(FMMCUDAPartNumbers(c->stream, n, tgt ? p->tperm : p->sperm, tgt ? p->ltgt : p->lsrc, nc, ncr, dc, *num, &bad));
  PetscCheck(!bad, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: a slot of this rank's %s is fed by no caller's point", tgt ? "targets" : "sources");
  if (nq) {
    PetscCall(Upload(c, &dq, q, nq, "the numbers asked for"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&dout, sizeof(PetscInt) * nq, "the numbers asked for"));
    PetscCall(FMMCUDAGatherInts(c->stream, nq, dq, *num, dout));
    FMMCallCUDA(cudaMemcpyAsync(out, dout, sizeof(PetscInt) * nq, cudaMemcpyDeviceToHost, c->stream));
  }
  PetscCall(FMMCUDAFree(c->stream, dc));
  PetscCall(FMMCUDAFree(c->stream, dq));
  PetscCall(FMMCUDAFree(c->stream, dout));
  PetscCall(ResetData(ctx)); /* (waits for the stream) */
  PetscFunctionReturn(0);
}

/* partgather(): the part's sources that other ranks' halos name, to the host */
static PetscErrorCode FMMCUDAPartGatherOp(FMMContext *ctx, PetscInt nc, const PetscInt *idx, PetscReal *out)
{
  FMMCUDAPart *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA    *c;
  PetscInt    *di;
  double      *dout;

  PetscFunctionBegin;
  PetscCheck(p && p->sx, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the part is not in tree order");
  if (!nc) PetscFunctionReturn(0);
  PetscCall(Create(ctx));
  c = (FMM_CUDA *)ctx->data;
  PetscCall(PartCoefficients(ctx, c, p));
  PetscCall(UploadStaged(c, &di, idx, nc, "the halo's sources"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dout, sizeof(double) * 5 * nc, "the halo's sources"));
  PetscCall(FMMCUDAPartGather(c->stream, p, nc, di, dout));
  FMMCallCUDA(cudaMemcpyAsync(out, dout, sizeof(double) * 5 * nc, cudaMemcpyDeviceToHost, c->stream));
  PetscCall(FMMCUDAFree(c->stream, di));
  PetscCall(FMMCUDAFree(c->stream, dout));
  PetscCall(ResetData(ctx));
  PetscFunctionReturn(0);
}

/* plannumbers(): the product's numbers of this rank's own sources or targets, from the plan made from the
   part (PlanFromPart()) */
static PetscErrorCode FMMCUDAPlanNumbersOp(FMMContext *ctx, PetscBool tgt, PetscInt n, PetscInt *out)
{
  FMM_CUDA          *c = (FMM_CUDA *)ctx->data;
  const FMMHostPlan *H = ctx->host;
  const PetscInt    *a;

  PetscFunctionBegin;
  PetscCheck(c && H && !H->tperm && c->sperm && c->tperm, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the plan was not made from the part");
  if (!tgt) {
    PetscCheck(n == H->devn, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: %" PetscInt_FMT " own sources, not %" PetscInt_FMT, H->devn, n);
    a = c->sperm + H->devb;
  } else {
    PetscCheck(n <= ctx->plan.M, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: %" PetscInt_FMT " own targets of %" PetscInt_FMT, n, ctx->plan.M);
    a = c->tperm + (ctx->plan.M == ctx->plan.N && H->talias ? H->devb : 0); /* (the halo's sources as targets: PlanFromPart()) */
  }
  if (n) FMMCallCUDA(cudaMemcpyAsync(out, a, sizeof(PetscInt) * n, cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* lists(): the distributed tree's lists below level l0 on the GPU (FMMCUDADistLists, tree.cu), where the
   top cuts kept the part there */
static PetscErrorCode FMMCUDADistListsOp(FMMContext *ctx, FMMDistLists *dl)
{
  FMMCUDAPart   *p = (FMMCUDAPart *)ctx->part;
  FMM_CUDA      *c;
  PetscLogDouble t0, t1;

  PetscFunctionBegin;
  PetscCheck(p, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: the distributed lists without the part");
  PetscCall(PetscTime(&t0));
  PetscCall(Create(ctx)); /* (the plan's setup makes its own) */
  c = (FMM_CUDA *)ctx->data;
  PetscCall(FMMCUDAFree(c->stream, p->far)); /* (an assembly that failed before the setup left) */
  p->far = NULL;
  { /* the slots' circles up through the staging ring (the late copy's, done by now: CopyIn waits for it) */
    double *d;
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&d, sizeof(double) * 3 * PetscMax(dl->nown, 1), "the slots' circles"));
    PetscCall(CopyIn(c->stream, d, dl->cx, dl->nown, FMM_MEM_PAGEABLE));
    PetscCall(CopyIn(c->stream, d + dl->nown, dl->cy, dl->nown, FMM_MEM_PAGEABLE));
    PetscCall(CopyIn(c->stream, d + 2 * dl->nown, dl->scale, dl->nown, FMM_MEM_PAGEABLE));
    for (int a = 0; a < 3; a++) PetscCall(FMMCUDAFree(c->stream, p->slot[a]));
    PetscCall(FMMCUDADistLists(c, dl, d, &p->far, p->slot, &p->nslot));
    PetscCall(FMMCUDAFree(c->stream, d));
  }
  p->nfar = dl->ntopfar + dl->nfarl;
  PetscCall(ResetData(ctx));
  PetscCall(PetscTime(&t1));
  PetscCall(PetscInfo(ctx->obj, "GPU lists: levels %" PetscInt_FMT " to %" PetscInt_FMT ", %" PetscInt_FMT " far entries (kept on the GPU), %" PetscInt_FMT " near entries, %.2f ms\n", dl->l0 + 1, dl->L, p->nfar, dl->nstrL, 1e3 * (t1 - t0)));
  PetscFunctionReturn(0);
}

struct _FMMBackendOps FMMBackendCUDA = {"cuda", MATFMM_DEVICE_CUDA, 96, DeviceCount, &Memory, FMMCUDAInitializeContext, WarmUp, FMMCUDAMatCreate, FMMCUDAMatDestroy, FMMCUDAMatSetFromOptions, FMMCUDAMatSetSources, FMMCUDAMatBuildsPlan, FMMCUDAPlan, FMMCUDASetup, FMMCUDAMult, FMMCUDADirectMult, FMMCUDACombineOp, FMMCUDAReset, FMMCUDAView, FMMCUDASubtreesOp, FMMCUDATopCutsOp, FMMCUDAPartOwnersOp, FMMCUDAPartSlotsOp, FMMCUDAPartOrderOp, FMMCUDAPartNumbersOp, FMMCUDAPartGatherOp, FMMCUDAPlanNumbersOp, FMMCUDADistListsOp};
