/*
  The CUDA backend: FMMBackendCUDA, the same pass as the CPU backend
  (src/fmm/cpu/backend.c) with every phase on the GPU.  At assembly plan() uploads
  the points and builds the tree and lists on the GPU (tree.cu); with
  -mat_fmm_cuda_tree cpu, src/fmm/plan.c builds them and setup() uploads them.
  setup() then derives the work of a product from the lists (on the GPU) and
  allocates all work arrays once; a product copies the N densities in and the
  M potentials out, and nothing else crosses the bus; device vectors (a PETSc
  configured with CUDA) it reads and writes in place.  One GPU per MPI rank
  (rank modulo the device count).

  Backend options (read at assembly, with the Mat's prefix):
    -mat_fmm_cuda_m2l <tc,fma>   M2L on the FP64 tensor cores (default) or unrolled DFMA
    -mat_fmm_cuda_log <fast,libm> near-field log by table (default) or the libm log
    -mat_fmm_cuda_tree <gpu,cpu> tree and lists built on the GPU (default) or on the CPU
    -mat_fmm_cuda_p2p_symmetric <bool> tiled P2P: each unordered pair once, for both sums (default true)
    -mat_fmm_cuda_split_local <bool> the tree's last splitting rounds in shared memory (default true)
    -mat_fmm_cuda_tree_key_bits <b> the tree's sort keys: b quantized bits (1 to 32, default 32) or 64
    -mat_fmm_cuda_tree_list_room <n> the strong lists' room per box (far lists: 3n) before their sizes are known (default 16)
  and, read once per process without a prefix (device.cu):
    -mat_fmm_cuda_pool_reserve <MB> GPU memory the pool maps up front
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"

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

static PetscErrorCode FMMCUDADestroy(Mat A)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  FMM_CUDA *c   = (FMM_CUDA *)fmm->backend;

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
  Free(c, &c->symleaf), Free(c, &c->symitem), Free(c, &c->colpart), Free(c, &c->chsum), Free(c, &c->symnext), Free(c, &c->symchleaf), Free(c, &c->symchdone);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  PetscCall(PetscFree(c->repleaf));
  PetscCall(PetscFree(c->itemstart));
  PetscCall(PetscFree(fmm->backend));
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

/* CopyIn, CopyOut: n doubles between the caller's array (in memory m,
   MemOf) and the GPU.  Memory other than pageable is copied directly
   (cudaMemcpyDefault); pageable host memory goes through the process's
   pinned staging rings in slots of FMM_STAGE_SLOT doubles, the host-side
   copies (all OpenMP threads) overlapping the DMA of the other slots
   (FMMCopyReals).  CopyIn: h to device d, in stream s; returns when h may
   be changed */
static PetscErrorCode CopyIn(cudaStream_t s, double *d, const double *h, PetscInt n, FMMMem m)
{
  FMMCUDAStage *st = &FMMCUDAStaging;

  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  if (!st->in || m != FMM_MEM_PAGEABLE) {
    FMMCallCUDA(cudaMemcpyAsync(d, h, sizeof(double) * n, cudaMemcpyDefault, s));
    PetscFunctionReturn(0);
  }
  for (PetscInt off = 0, k = 0; off < n; off += FMM_STAGE_SLOT, k++) { /* slot k % CHUNKS, free once its last copy is done */
    const PetscInt m = PetscMin(FMM_STAGE_SLOT, n - off), j = k % FMM_STAGE_CHUNKS;
    FMMCallCUDA(cudaEventSynchronize(st->evin[j]));
    FMMCopyReals(st->in + j * FMM_STAGE_SLOT, h + off, m);
    FMMCallCUDA(cudaMemcpyAsync(d + off, st->in + j * FMM_STAGE_SLOT, sizeof(double) * m, cudaMemcpyHostToDevice, s));
    FMMCallCUDA(cudaEventRecord(st->evin[j], s));
  }
  PetscFunctionReturn(0);
}

/* device d (n doubles) to h; returns when h holds the data */
static PetscErrorCode CopyOut(FMM_CUDA *c, double *h, const double *d, PetscInt n, FMMMem m)
{
  FMMCUDAStage *st = &FMMCUDAStaging;

  PetscFunctionBegin;
  if (n && st->out && m == FMM_MEM_PAGEABLE) {
    const PetscInt nch = (n + FMM_STAGE_SLOT - 1) / FMM_STAGE_SLOT;
    for (PetscInt k = 0; k < PetscMin(nch, FMM_STAGE_CHUNKS); k++) { /* fill the ring */
      FMMCallCUDA(cudaMemcpyAsync(st->out + k * FMM_STAGE_SLOT, d + k * FMM_STAGE_SLOT, sizeof(double) * PetscMin(FMM_STAGE_SLOT, n - k * FMM_STAGE_SLOT), cudaMemcpyDeviceToHost, c->stream));
      FMMCallCUDA(cudaEventRecord(st->evout[k], c->stream));
    }
    for (PetscInt k = 0; k < nch; k++) { /* empty slot k % CHUNKS, then refill it with chunk k + CHUNKS */
      const PetscInt j = k % FMM_STAGE_CHUNKS, kn = k + FMM_STAGE_CHUNKS;
      FMMCallCUDA(cudaEventSynchronize(st->evout[j]));
      FMMCopyReals(h + k * FMM_STAGE_SLOT, st->out + j * FMM_STAGE_SLOT, PetscMin(FMM_STAGE_SLOT, n - k * FMM_STAGE_SLOT));
      if (kn < nch) {
        FMMCallCUDA(cudaMemcpyAsync(st->out + j * FMM_STAGE_SLOT, d + kn * FMM_STAGE_SLOT, sizeof(double) * PetscMin(FMM_STAGE_SLOT, n - kn * FMM_STAGE_SLOT), cudaMemcpyDeviceToHost, c->stream));
        FMMCallCUDA(cudaEventRecord(st->evout[j], c->stream));
      }
    }
  } else if (n) FMMCallCUDA(cudaMemcpyAsync(h, d, sizeof(double) * n, cudaMemcpyDefault, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* neighbour-source lists of the indexing and repetition layouts (from the
   device lists), and the repetition chunks (on the host, from the leaf sizes) */
static PetscErrorCode SetupNearLists(Mat A, FMM_CUDA *c, const FMMPlan *P)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  if (fmm->layout == MATFMM_LAYOUT_REPETITION) {
    const int   S      = c->kind == 2 ? 5 : (c->kind == 1 ? 4 : 3);
    PetscReal   budget = fmm->repetition_mb * 1048576.0 / sizeof(PetscReal), need = 0;
    PetscInt64 *recoff, used = 0, maxused = 0;
    PetscInt    nch    = 0, *nbroff, *tleaf;
    PetscCall(PetscMalloc2(P->nleaves + 1, &nbroff, P->nleaves + 1, &tleaf));
    PetscCall(FMMCUDANearSources(c, P, PETSC_FALSE, &c->nbrt, nbroff));
    FMMCallCUDA(cudaMemcpyAsync(tleaf, c->tleaf, sizeof(PetscInt) * (P->nleaves + 1), cudaMemcpyDeviceToHost, c->stream));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    for (PetscInt b = 0; b < P->nleaves; b++) need = PetscMax(need, (PetscReal)(tleaf[b + 1] - tleaf[b]) * (2 + S * (PetscReal)(nbroff[b + 1] - nbroff[b])));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &need, 1, MPIU_REAL, MPIU_MAX, PetscObjectComm((PetscObject)A)));
    if (need > budget) PetscCall(PetscFree2(nbroff, tleaf));
    PetscCheck(need <= budget, PetscObjectComm((PetscObject)A), PETSC_ERR_MEM, "-mat_fmm_layout repetition: one leaf box needs %.1f MB of records, more than -mat_fmm_repetition_mb %g; raise the budget, lower -mat_fmm_ct, or use -mat_fmm_layout tiled", (double)(need * sizeof(PetscReal) / 1048576.0), (double)fmm->repetition_mb);
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
      PetscCall(CopyIn(c->stream, c->gxy, fmm->gsrc, 2 * P->N, MemOf(c, fmm->gsrc)));
    }
    PetscCall(Upload(c, &c->gq, (PetscReal *)NULL, P->N, "the charges in global order"));
    PetscCall(Upload(c, &c->gdx, (PetscReal *)NULL, P->N, "the dipoles in global order"));
    PetscCall(Upload(c, &c->gdy, (PetscReal *)NULL, P->N, "the dipoles in global order"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
  }
  PetscFunctionReturn(0);
}

/* the backend's context: device, stream, kernel choices */
static PetscErrorCode Create(Mat A)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  FMM_CUDA *c;
  PetscInt  p = fmm->p;

  PetscFunctionBegin;
  PetscCall(FMMCUDADestroy(A));
  PetscCall(PetscNew(&c));
  fmm->backend = c;
  PetscCall(FMMCUDAInitializeContext()); /* selects this rank's device; once per process also the context and the staging rings */
  FMMCallCUDA(cudaGetDevice(&c->dev));
  FMMCallCUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  c->p  = p;
  c->ne = 2 * (p + 1);
  c->pp = p <= FMMCUDA_PFAST ? 2 * ((p + 1) / 2) : 0;
  /* M2L on the FP64 tensor cores unless -mat_fmm_cuda_m2l fma */
  c->kp = (fmm->cuda_m2l_tc && c->pp) ? 8 * ((p + 7) / 8) : 0;
  {
    PetscBool hasq = fmm->beta != 0.0 ? PETSC_TRUE : PETSC_FALSE, hasd = (fmm->alpha != 0.0 && fmm->gnrm) ? PETSC_TRUE : PETSC_FALSE;
    c->kind        = hasd ? (hasq ? 2 : 1) : 0;
  }
  c->fmm      = fmm->method == MATFMM_METHOD_FMM ? PETSC_TRUE : PETSC_FALSE;
  c->listroom = fmm->cuda_list_room;
  PetscFunctionReturn(0);
}

/* the normals and weights go up on a second stream while the GPU sorts and
   splits the points: FMMCUDATreeBuild calls UploadLate once the sort is
   queued, and its scatter, their first use, waits for done (ready: after
   their allocation); from the block's GPU copy (mirror) where
   MatFMMSetSources() sent one */
typedef struct {
  const Mat_FMM *fmm;
  double        *nrm, *wts;
  cudaEvent_t    ready;
  FMMCUDAMirror  mirror;
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
    const Mat_FMM *fmm = u->fmm;
    const double  *mir = FMMCUDAMirrorData(u->mirror);
    if (mir) PetscCall(FMMCUDAMirrorWait(u->mirror, s, 1)); /* all of it sent */
    if (u->nrm) PetscCall(CopyIn(s, u->nrm, mir ? mir + (fmm->nrm - fmm->src) : fmm->gnrm, 2 * fmm->plan.N, mir ? FMM_MEM_HERE : MemOf(c, fmm->gnrm)));
    if (u->wts) PetscCall(CopyIn(s, u->wts, mir ? mir + (fmm->wts - fmm->src) : fmm->gwts, fmm->plan.N, mir ? FMM_MEM_HERE : MemOf(c, fmm->gwts)));
  }
  FMMCallCUDA(cudaEventRecord(*done, s));
  PetscFunctionReturn(0);
}

/* the points [a, b) of the U = N + Mg of the plan (the sources, then the
   targets of all ranks) to xy on stream s: FMMCUDATreeBuild uploads them in
   two parts from 2^21 points on, each sorted while the next goes up */
typedef struct {
  const Mat_FMM *fmm;
  double        *xy;
  PetscInt       N;
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
    PetscCall(CopyIn(s, u->xy + 2 * t, u->fmm->gtgt + 2 * (t - u->N), 2 * (b - t), u->mtgt));
  }
  PetscFunctionReturn(0);
}

/* A time-stepping code refills the sources (MatFMMSetSources() with new
   points, same sizes) before each assembly.  From the FMM_PIN_REFILLS-th
   refill on, the matrix's copy of them (one block: points, normals,
   weights; one rank, where the plan reads it in place) is page-locked, so
   that each later assembly copies it to the GPU by DMA instead of through
   the staging rings, whose host-side copies hold the host up while it
   should be queueing the tree's kernels.  Page-locking costs about as much
   as FMM_PIN_REFILLS assemblies gain (H100 host: 2.4-3.2 ms for 10^6
   points against 0.65 ms gained per assembly, 20-29 ms for 10^7 against 2
   ms; up to 47 ms in a first process on a fresh machine), once for the
   life of the block; MatFMMSetSources() with new sizes and MatDestroy()
   release it (FMMCUDAUnpin).  A refusal (no more page-locked memory) keeps
   the staging rings.  Once it is page-locked, MatFMMSetSources() also sends
   the block to a copy in GPU memory while it fills it (FMMCUDAMirror*,
   points.cu), and FMMCUDAPlan reads the points from there. */
#define FMM_PIN_REFILLS 8

static PetscErrorCode PinSources(Mat A)
{
  Mat_FMM       *fmm = (Mat_FMM *)A->data;
  const size_t   bytes = sizeof(PetscReal) * FMMSourceBlock(fmm->nsrc, fmm->hasnrm, fmm->haswts);
  PetscLogDouble t0, t1;
  cudaError_t    e;

  PetscFunctionBegin;
  if (!fmm->galias || fmm->srcdev || fmm->srcpinned || fmm->srcpinno || fmm->nrefill < FMM_PIN_REFILLS || !bytes) PetscFunctionReturn(0);
  PetscCall(PetscTime(&t0));
  e = cudaHostRegister(fmm->src, bytes, cudaHostRegisterDefault);
  PetscCall(PetscTime(&t1));
  if (e == cudaSuccess) {
    fmm->srcpinned = PETSC_TRUE;
    PetscCall(PetscInfo(A, "GPU plan: the sources refilled %" PetscInt_FMT " times, their copy (%.1f MB) page-locked in %.2f ms\n", fmm->nrefill, bytes / 1048576.0, 1e3 * (t1 - t0)));
  } else {
    (void)cudaGetLastError();
    fmm->srcpinno = PETSC_TRUE;
    PetscCall(PetscInfo(A, "GPU plan: page-locking the sources (%.1f MB) refused (%s); they go through the staging rings\n", bytes / 1048576.0, cudaGetErrorString(e)));
  }
  PetscFunctionReturn(0);
}

/* releases what PinSources() page-locked, before the block is freed */
PetscErrorCode FMMCUDAUnpin(void *p)
{
  PetscFunctionBegin;
  if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError(); /* the context may be gone at exit: nothing is then locked */
  PetscFunctionReturn(0);
}

/* plan(): the points to the GPU, the tree and lists built there (tree.cu) */
static PetscErrorCode FMMCUDAPlan(Mat A)
{
  Mat_FMM       *fmm  = (Mat_FMM *)A->data;
  FMMPlan       *P    = &fmm->plan;
  PetscBool      same = fmm->ntgt < 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscInt       N = A->cmap->N, Mg = same ? 0 : A->rmap->N, U = N + Mg;
  FMM_CUDA      *c;
  double        *xy;
  LateUpload     late = {fmm, NULL, NULL, NULL, NULL};
  PointUpload    up;
  const double  *mir = FMMCUDAMirrorData(fmm->galias ? fmm->mirror : NULL); /* the sources' GPU copy sent by MatFMMSetSources() (one rank, page-locked block) */
  PetscBool      fromhost, inplace;
  PetscLogDouble t0, t0b, t1;

  PetscFunctionBegin;
  PetscCall(PetscTime(&t0));
  PetscCall(FMMPlanDestroy(P));
  P->N = N;
  P->M = same ? fmm->nsrc : fmm->ntgt;
  PetscCall(Create(A));
  c = (FMM_CUDA *)fmm->backend;
  PetscCall(PinSources(A));
  PetscCall(PetscTime(&t0b));
  late.mirror = mir ? fmm->mirror : NULL;
  up          = PointUpload{fmm, NULL, N, mir ? mir : fmm->gsrc, late.mirror, mir ? FMM_MEM_HERE : MemOf(c, fmm->gsrc), same ? FMM_MEM_PAGEABLE : MemOf(c, fmm->gtgt)};
  /* the sources given in this GPU's memory (one rank: the matrix's copy of
     them, made by MatFMMSetSources(), whose block also holds the normals
     and weights) and no other targets: the tree reads them where they are,
     instead of copies (at 10^6 points three allocations and three copies
     fewer, 40 MB) */
  inplace = (!mir && same && up.msrc == FMM_MEM_HERE) ? PETSC_TRUE : PETSC_FALSE;
  if (inplace) {
    xy       = (double *)fmm->gsrc;
    late.nrm = (double *)fmm->gnrm;
    late.wts = (double *)fmm->gwts;
  } else {
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&xy, sizeof(double) * 2 * PetscMax(U, 1), "the points"));
    if (fmm->gnrm) PetscCall(FMMCUDAMalloc(c->stream, (void **)&late.nrm, sizeof(double) * 2 * N, "the normals"));
    if (fmm->gwts) PetscCall(FMMCUDAMalloc(c->stream, (void **)&late.wts, sizeof(double) * N, "the weights"));
    FMMCallCUDA(cudaEventCreateWithFlags(&late.ready, cudaEventDisableTiming));
    FMMCallCUDA(cudaEventRecord(late.ready, c->stream));
  }
  up.xy    = xy;
  fromhost = (up.msrc != FMM_MEM_HERE || (!same && up.mtgt != FMM_MEM_HERE)) ? PETSC_TRUE : PETSC_FALSE; /* else no upload to overlap */
  PetscCall(FMMCUDATreeBuild(c, P, fmm->ct, fmm->theta, fmm->split_median, fmm->cuda_split_local, same, same ? A->cmap->rstart : A->rmap->rstart, fmm->alpha, fmm->beta, xy, inplace ? NULL : UploadPoints, &up, late.nrm, late.wts, (!inplace && (late.nrm || late.wts)) ? UploadLate : NULL, &late, fromhost, U, fmm->cuda_key_bits));
  PetscCall(PetscTime(&t1));
  PetscCall(PetscInfo(A, "GPU plan: context and staging %.2f ms, %" PetscInt_FMT " points %s, tree and lists (with the normals and weights up) %.2f ms\n", 1e3 * (t0b - t0), U, inplace ? "read in place (the matrix's copy of the points given in GPU memory)" : (mir ? "up (the sources from their GPU copy sent by MatFMMSetSources())" : "up"), 1e3 * (t1 - t0b)));
  if (inplace) PetscFunctionReturn(0); /* (indexing: SetupNearLists copies the sources) */
  FMMCallCUDA(cudaEventDestroy(late.ready));
  if (late.nrm) PetscCall(FMMCUDAFree(c->stream, late.nrm));
  if (late.wts) PetscCall(FMMCUDAFree(c->stream, late.wts));
  if (fmm->layout == MATFMM_LAYOUT_INDEXING && c->fmm) c->gxy = xy; /* the sources in global order, first 2N */
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

/* the plan built by src/fmm/plan.c, uploaded */
static PetscErrorCode UploadPlan(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  PetscCall(Upload(c, &c->sperm, P->sperm, P->N, "the source permutation"));
  PetscCall(Upload(c, &c->sx, P->sx, P->N, "the source coordinates"));
  PetscCall(Upload(c, &c->sy, P->sy, P->N, "the source coordinates"));
  PetscCall(Upload(c, &c->cq, P->cq, P->N, "the charges per unit density"));
  PetscCall(Upload(c, &c->cdx, P->cdx, P->N, "the dipoles per unit density"));
  PetscCall(Upload(c, &c->cdy, P->cdy, P->N, "the dipoles per unit density"));
  PetscCall(Upload(c, &c->tperm, P->tperm, P->M, "the target permutation"));
  PetscCall(Upload(c, &c->tx, P->tx, P->M, "the target coordinates"));
  PetscCall(Upload(c, &c->ty, P->ty, P->M, "the target coordinates"));
  {
    PetscInt *tleafof;
    PetscCall(PetscMalloc1(P->M, &tleafof));
    for (PetscInt b = 0; b < P->nleaves; b++)
      for (PetscInt i = P->tleaf[b]; i < P->tleaf[b + 1]; i++) tleafof[i] = b;
    PetscCall(Upload(c, &c->tleafof, tleafof, P->M, "the target leaves"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(tleafof));
  }
  PetscCall(Upload(c, &c->sleaf, P->sleaf, P->nleaves + 1, "the leaf source ranges"));
  PetscCall(Upload(c, &c->tleaf, P->tleaf, P->nleaves + 1, "the leaf target ranges"));
  PetscCall(Upload(c, &c->cx, P->cx, P->nboxes, "the box centres"));
  PetscCall(Upload(c, &c->cy, P->cy, P->nboxes, "the box centres"));
  PetscCall(Upload(c, &c->scale, P->scale, P->nboxes, "the box scales"));
  PetscCall(Upload(c, &c->faroff, P->faroff, P->nboxes + 1, "the M2L offsets"));
  PetscCall(Upload(c, &c->far, P->far, P->nfar, "the M2L list"));
  PetscCall(Upload(c, &c->nearoff, P->nearoff, P->nleaves + 1, "the P2P offsets"));
  PetscCall(Upload(c, &c->near, P->near, P->nearoff[P->nleaves], "the P2P lists"));
  c->nnear = P->nearoff[P->nleaves];
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDASetup(Mat A)
{
  Mat_FMM       *fmm = (Mat_FMM *)A->data;
  FMMPlan       *P   = &fmm->plan;
  FMM_CUDA      *c   = (FMM_CUDA *)fmm->backend;
  PetscLogDouble t0, t1, t2;
  PetscBool      info;

  PetscFunctionBegin;
  PetscCall(PetscTime(&t0));
  if (!c || !c->treebuilt) {
    PetscCall(Create(A));
    c = (FMM_CUDA *)fmm->backend;
    PetscCall(UploadPlan(c, P));
  }
  /* the near field's log by table unless -mat_fmm_cuda_log libm */
  if (fmm->cuda_log_fast) PetscCall(FMMCUDALogTable(c));
  /* the P2P counts and the statistics of the plan first (and the symmetric
     P2P's counts where it may run: this rank's targets are all the sources,
     single layer, table log), so that the GPU runs them while the host
     allocates the work arrays and queues the M2L plan; their sizes are read
     in FMMCUDAP2PPlanEnd below */
  PetscCall(FMMCUDAP2PPlanBegin(c, P, c->fmm && fmm->layout == MATFMM_LAYOUT_TILED && fmm->cuda_p2p_sym && c->kind == 0 && c->logtab && fmm->ntgt < 0 && P->M == P->N ? PETSC_TRUE : PETSC_FALSE));
  PetscCall(Upload(c, &c->sigma, (PetscReal *)NULL, P->N, "the densities"));
  PetscCall(Upload(c, &c->q, (PetscReal *)NULL, P->N, "the charges"));
  PetscCall(Upload(c, &c->dx, (PetscReal *)NULL, P->N, "the dipoles"));
  PetscCall(Upload(c, &c->dy, (PetscReal *)NULL, P->N, "the dipoles"));
  PetscCall(Upload(c, &c->pot, (PetscReal *)NULL, P->M, "the potentials"));
  PetscCall(Upload(c, &c->y, (PetscReal *)NULL, P->M, "the potentials"));
  if (c->fmm) {
    PetscCall(FMMCUDAM2LSetup(c)); /* the tables of the expansions */
    PetscCall(Upload(c, &c->mpole, (PetscReal *)NULL, (PetscInt64)P->nboxes * c->ne, "the multipole expansions"));
    PetscCall(Upload(c, &c->local, (PetscReal *)NULL, (PetscInt64)P->nboxes * c->ne, "the local expansions"));
    PetscCall(FMMCUDAM2LPlan(c, P));
  }
  PetscCall(PetscInfoEnabled(MAT_CLASSID, &info));
  if (info) FMMCallCUDA(cudaStreamSynchronize(c->stream)); /* for the -info times only */
  PetscCall(PetscTime(&t1));
  PetscCall(FMMCUDAP2PPlanEnd(c, P, fmm->layout == MATFMM_LAYOUT_REPETITION && c->fmm ? PETSC_TRUE : PETSC_FALSE));
  if (c->fmm && fmm->layout != MATFMM_LAYOUT_TILED) PetscCall(SetupNearLists(A, c, P));
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
  PetscCall(PetscInfo(A, "GPU setup: P2P counts, work arrays and M2L work %.2f ms, P2P work and near lists %.2f ms\n", 1e3 * (t1 - t0), 1e3 * (t2 - t1)));
  if (info) {
    char pool[160];
    PetscCall(PoolText(pool, sizeof(pool)));
    PetscCall(PetscInfo(A, "GPU memory pool: %s\n", pool));
  }
  PetscFunctionReturn(0);
}

/* log-event brackets: with logging on, wait for the GPU so the event times are real */
static PetscErrorCode PhaseBegin(FMM_CUDA *c, PetscLogEvent e)
{
  PetscFunctionBegin;
  if (c->sync) FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscLogEventBegin(e, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

static PetscErrorCode PhaseEnd(FMM_CUDA *c, PetscLogEvent e, PetscLogDouble flops)
{
  PetscFunctionBegin;
  if (c->sync) FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscLogFlops(flops));
  PetscCall(PetscLogEventEnd(e, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* densities in (global order): device memory of this GPU (a device vector) is
   read in place, anything else copied to c->sigma first; strengths in tree order */
static PetscErrorCode Begin(Mat A, FMM_CUDA *c, const PetscScalar *sigma)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  FMMCallCUDA(cudaSetDevice(c->dev));
  PetscCall(PetscLogIsActive(&c->sync));
  const FMMMem m = MemOf(c, sigma);
  if (m == FMM_MEM_HERE) PetscCall(FMMCUDAStrengths(c, &fmm->plan, sigma));
  else {
    PetscCall(CopyIn(c->stream, c->sigma, sigma, fmm->plan.N, m));
    PetscCall(FMMCUDAStrengths(c, &fmm->plan, c->sigma));
  }
  PetscFunctionReturn(0);
}

/* where a product writes its potentials (local target order): y itself when it
   is device memory of this GPU, else c->y (y NULL: kept there for
   FMMCUDACombineOp); *ym: where y lives */
static double *Out(FMM_CUDA *c, PetscScalar *y, FMMMem *ym)
{
  *ym = y ? MemOf(c, y) : FMM_MEM_DIRECT;
  return *ym == FMM_MEM_HERE ? y : c->y;
}

/* potentials out from out = Out(c, y, &ym) (scattered: L2P wrote them there already) */
static PetscErrorCode End(Mat A, FMM_CUDA *c, PetscScalar *y, FMMMem ym, double *out, PetscBool scattered)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  if (!scattered) PetscCall(FMMCUDAScatter(c, &fmm->plan, out));
  if (y && out != y) PetscCall(CopyOut(c, y, out, fmm->plan.M, ym));
  else if (y) FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* the L2P phase, in its log event (out: see FMMCUDAL2P) */
static PetscErrorCode L2P(FMM_CUDA *c, const FMMPlan *P, double *out)
{
  PetscFunctionBegin;
  PetscCall(PhaseBegin(c, MATFMM_L2P));
  PetscCall(FMMCUDAL2P(c, P, out));
  PetscCall(PhaseEnd(c, MATFMM_L2P, 8.0 * (double)c->p * P->M));
  PetscFunctionReturn(0);
}

/* y = [y +] scale K x + (shift + d) .* x with K x from the last product (c->y);
   x (the densities, this rank's first), d (or NULL) and y in device memory */
static PetscErrorCode FMMCUDACombineOp(Mat A, const PetscScalar *x, const PetscScalar *d, PetscScalar *y, PetscBool add)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  FMM_CUDA *c   = (FMM_CUDA *)fmm->backend;

  PetscFunctionBegin;
  PetscCall(FMMCUDACombine(c, A->rmap->n, fmm->scale, fmm->shift, x + A->rmap->rstart, d, y, add));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDAMult(Mat A, const PetscScalar *sigma, PetscScalar *y)
{
  Mat_FMM       *fmm = (Mat_FMM *)A->data;
  const FMMPlan *P   = &fmm->plan;
  FMM_CUDA      *c   = (FMM_CUDA *)fmm->backend;
  const double   p   = (double)c->p;
  FMMMem         ym;
  double        *out = Out(c, y, &ym);

  PetscFunctionBegin;
  PetscCheck(c->fmm, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: set up for the direct method only");
  PetscCall(Begin(A, c, sigma));
  PetscCall(PhaseBegin(c, MATFMM_P2M));
  PetscCall(FMMCUDAP2M(c, P));
  PetscCall(PhaseEnd(c, MATFMM_P2M, 20.0 * p * P->N));
  PetscCall(PhaseBegin(c, MATFMM_M2M));
  PetscCall(FMMCUDAM2M(c, P));
  PetscCall(PhaseEnd(c, MATFMM_M2M, 8.0 * p * p * (P->nboxes - 1)));
  PetscCall(PhaseBegin(c, MATFMM_M2L));
  PetscCall(FMMCUDAM2L(c, P));
  PetscCall(PhaseEnd(c, MATFMM_M2L, (4.0 * p * p + 20.0 * p) * c->npairs)); /* as the CPU backend and bench/bench.c count */
  PetscCall(PhaseBegin(c, MATFMM_L2L));
  PetscCall(FMMCUDAL2L(c, P));
  PetscCall(PhaseEnd(c, MATFMM_L2L, 8.0 * p * p * (P->nboxes - 1)));
  if (!c->syma) PetscCall(L2P(c, P, out)); /* writes pot, P2P adds to it; with the symmetric P2P, L2P comes last and writes y (p2p.cu) */
  PetscCall(PhaseBegin(c, MATFMM_P2P));
  switch (fmm->layout) {
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
  PetscCall(PhaseEnd(c, MATFMM_P2P, 12.0 * (PetscLogDouble)P->p2ppairs));
  if (c->syma) PetscCall(L2P(c, P, out));
  PetscCall(End(A, c, y, ym, out, c->syma ? PETSC_TRUE : PETSC_FALSE));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDADirectMult(Mat A, const PetscScalar *sigma, PetscScalar *y)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  FMM_CUDA *c   = (FMM_CUDA *)fmm->backend;
  FMMMem    ym;
  double   *out = Out(c, y, &ym);

  PetscFunctionBegin;
  PetscCall(Begin(A, c, sigma));
  PetscCall(PhaseBegin(c, MATFMM_Direct));
  PetscCall(FMMCUDADirect(c, &fmm->plan));
  PetscCall(PhaseEnd(c, MATFMM_Direct, 12.0 * (PetscLogDouble)fmm->plan.N * fmm->plan.M));
  PetscCall(End(A, c, y, ym, out, PETSC_FALSE));
  PetscFunctionReturn(0);
}

/* -mat_view: what petscfmm's memory pool holds (to size -mat_fmm_cuda_pool_reserve) and which near-field kernel the product runs */
static PetscErrorCode FMMCUDAView(Mat A, PetscViewer viewer)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  FMM_CUDA *c   = (FMM_CUDA *)fmm->backend;
  char      pool[160];

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  PetscCall(PoolText(pool, sizeof(pool)));
  PetscCall(PetscViewerASCIIPrintf(viewer, "  CUDA memory pool (first rank's GPU): %s\n", pool));
  if (!c->fmm || fmm->layout != MATFMM_LAYOUT_TILED) PetscFunctionReturn(0);
  if (c->syma) PetscCall(PetscViewerASCIIPrintf(viewer, "  CUDA P2P: symmetric, each pair of points once for both sums (%" PetscInt_FMT " lanes x %" PetscInt_FMT " rows per leaf)\n", c->syma, c->symr));
  else PetscCall(PetscViewerASCIIPrintf(viewer, "  CUDA P2P: tiled, every ordered pair\n"));
  PetscFunctionReturn(0);
}

struct _FMMBackendOps FMMBackendCUDA = {"cuda", FMMCUDAPlan, FMMCUDASetup, FMMCUDAMult, FMMCUDADirectMult, FMMCUDACombineOp, FMMCUDADestroy, FMMCUDAView};
