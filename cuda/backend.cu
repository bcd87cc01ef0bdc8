/*
  The CUDA backend: FMMBackendCUDA, the same pass as the CPU backend
  (src/cpu/fmmcpu.c) with every phase on the GPU.  setup() uploads the plan
  that src/plan.c built and allocates all work arrays once; a product then
  copies the N densities in and the M potentials out, and nothing else
  crosses the bus.  One GPU per MPI rank (rank modulo the device count).

  Backend options (read at assembly, with the Mat's prefix):
    -mat_fmm_cuda_m2l <tc,fma>   M2L on the FP64 tensor cores (default) or unrolled DFMA
    -mat_fmm_cuda_log <fast,libm> near-field log by table (default) or the libm log
*/
#include "fmmcuda.h"
#include "fmmexpansions.h"

/* device array of n elements of type T, uploaded from h when h is not NULL */
template <class T>
static PetscErrorCode Upload(FMM_CUDA *c, T **d, const T *h, PetscInt64 n, const char *what)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc((void **)d, (size_t)n * sizeof(T), what));
  if (h && n) FMMCallCUDA(cudaMemcpyAsync(*d, h, (size_t)n * sizeof(T), cudaMemcpyHostToDevice, c->stream));
  PetscFunctionReturn(0);
}

template <class T>
static void Free(T **d)
{
  if (*d) (void)cudaFree(*d);
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
  Free(&c->sperm), Free(&c->sleaf), Free(&c->tperm), Free(&c->tleaf), Free(&c->faroff), Free(&c->far), Free(&c->nearoff), Free(&c->near), Free(&c->tleafof);
  Free(&c->sx), Free(&c->sy), Free(&c->cq), Free(&c->cdx), Free(&c->cdy), Free(&c->tx), Free(&c->ty), Free(&c->cx), Free(&c->cy), Free(&c->scale), Free(&c->binom), Free(&c->m2l), Free(&c->m2lpad);
  Free(&c->pairtgt), Free(&c->chunkpart), Free(&c->tpart), Free(&c->part);
  Free(&c->sigma), Free(&c->q), Free(&c->dx), Free(&c->dy), Free(&c->mpole), Free(&c->local), Free(&c->pot), Free(&c->y), Free(&c->dpart);
  Free(&c->logtab), Free(&c->items), Free(&c->leafnsc), Free(&c->leafpart), Free(&c->p2ppart);
  Free(&c->nbroff), Free(&c->nbr), Free(&c->nbrt), Free(&c->gxy), Free(&c->gq), Free(&c->gdx), Free(&c->gdy), Free(&c->recoff), Free(&c->rec);
  if (c->stagein) (void)cudaFreeHost(c->stagein);
  if (c->stageout) (void)cudaFreeHost(c->stageout);
  for (int k = 0; k < FMM_STAGE_CHUNKS; k++)
    if (c->ev[k]) (void)cudaEventDestroy(c->ev[k]);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  PetscCall(PetscFree(c->repleaf));
  PetscCall(PetscFree(c->itemstart));
  PetscCall(PetscFree(fmm->backend));
  PetscFunctionReturn(0);
}

/* n doubles between the caller's array and the GPU.  Device memory and
   page-locked host memory are copied directly (cudaMemcpyDefault); pageable
   host memory goes through a pinned staging buffer in chunks, the host-side
   copies (all OpenMP threads) overlapping the DMA of the previous chunk. */
static void ParallelCopy(double *d, const double *s, PetscInt n)
{
  /* pieces of 32 KB: a staging chunk (>= 64K doubles) keeps every thread busy */
#pragma omp parallel for schedule(static) if (n > 16384)
  for (PetscInt i0 = 0; i0 < n; i0 += 4096) memcpy(d + i0, s + i0, sizeof(double) * (size_t)PetscMin(4096, n - i0));
}

static PetscBool Pageable(const void *a)
{
  cudaPointerAttributes at;
  if (cudaPointerGetAttributes(&at, a) != cudaSuccess) {
    (void)cudaGetLastError();
    return PETSC_TRUE;
  }
  return at.type == cudaMemoryTypeUnregistered ? PETSC_TRUE : PETSC_FALSE;
}

static inline PetscInt StageChunk(PetscInt n)
{
  return PetscMax((n + FMM_STAGE_CHUNKS - 1) / FMM_STAGE_CHUNKS, 65536);
}

static PetscErrorCode CopyIn(FMM_CUDA *c, double *d, const double *h, PetscInt n)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  if (!c->stagein || !Pageable(h)) {
    FMMCallCUDA(cudaMemcpyAsync(d, h, sizeof(double) * n, cudaMemcpyDefault, c->stream));
    PetscFunctionReturn(0);
  }
  for (PetscInt off = 0, ch = StageChunk(n); off < n; off += ch) {
    PetscInt m = PetscMin(ch, n - off);
    ParallelCopy(c->stagein + off, h + off, m);
    FMMCallCUDA(cudaMemcpyAsync(d + off, c->stagein + off, sizeof(double) * m, cudaMemcpyHostToDevice, c->stream));
  }
  PetscFunctionReturn(0);
}

/* returns when h holds the data */
static PetscErrorCode CopyOut(FMM_CUDA *c, double *h, const double *d, PetscInt n)
{
  PetscFunctionBegin;
  if (n && c->stageout && Pageable(h)) {
    PetscInt ch = StageChunk(n), k = 0;
    for (PetscInt off = 0; off < n; off += ch, k++) {
      FMMCallCUDA(cudaMemcpyAsync(c->stageout + off, d + off, sizeof(double) * PetscMin(ch, n - off), cudaMemcpyDeviceToHost, c->stream));
      FMMCallCUDA(cudaEventRecord(c->ev[k], c->stream));
    }
    k = 0;
    for (PetscInt off = 0; off < n; off += ch, k++) {
      FMMCallCUDA(cudaEventSynchronize(c->ev[k]));
      ParallelCopy(h + off, c->stageout + off, PetscMin(ch, n - off));
    }
  } else if (n) FMMCallCUDA(cudaMemcpyAsync(h, d, sizeof(double) * n, cudaMemcpyDefault, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* M2L chunks of 32 pairs and the partial sums of each target box (see fmmcuda.h) */
static PetscErrorCode SetupM2L(FMM_CUDA *c, const FMMPlan *P)
{
  PetscInt *pairtgt, *chunkpart, *tpart, part = 0;

  PetscFunctionBegin;
  c->npairs  = P->faroff[P->nboxes];
  c->nchunks = (c->npairs + 31) / 32;
  PetscCall(PetscMalloc3(c->npairs, &pairtgt, c->nchunks, &chunkpart, P->nboxes + 1, &tpart));
  for (PetscInt t = 0; t < P->nboxes; t++)
    for (PetscInt g = P->faroff[t]; g < P->faroff[t + 1]; g++) pairtgt[g] = t;
  for (PetscInt ch = 0; ch < c->nchunks; ch++) {
    chunkpart[ch] = part;
    for (PetscInt g = 32 * ch; g < PetscMin(32 * ch + 32, c->npairs); g++)
      if (g == 32 * ch || pairtgt[g] != pairtgt[g - 1]) part++;
  }
  c->nparts = part;
  tpart[0]  = 0;
  for (PetscInt t = 0; t < P->nboxes; t++) { /* one partial per chunk that box t's pairs touch */
    PetscInt g0 = P->faroff[t], g1 = P->faroff[t + 1];
    tpart[t + 1] = tpart[t] + (g1 > g0 ? (g1 - 1) / 32 - g0 / 32 + 1 : 0);
  }
  PetscCheck(tpart[P->nboxes] == part, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: M2L partial count mismatch %" PetscInt_FMT " != %" PetscInt_FMT, tpart[P->nboxes], part);
  PetscCall(Upload(c, &c->far, P->far, c->npairs, "the M2L list"));
  PetscCall(Upload(c, &c->pairtgt, pairtgt, c->npairs, "the M2L targets"));
  PetscCall(Upload(c, &c->chunkpart, chunkpart, c->nchunks, "the M2L chunks"));
  PetscCall(Upload(c, &c->tpart, tpart, P->nboxes + 1, "the M2L partial offsets"));
  PetscCall(Upload(c, &c->part, (PetscReal *)NULL, (PetscInt64)c->nparts * c->ne, "the M2L partial sums"));
  FMMCallCUDA(cudaStreamSynchronize(c->stream)); /* before the host arrays go */
  PetscCall(PetscFree3(pairtgt, chunkpart, tpart));
  PetscCall(FMMCUDAM2LSetup(c));
  PetscFunctionReturn(0);
}

/* P2P items (see FMMP2PItem): each leaf's targets in blocks of FMMCUDA_P2P_T,
   its near list in chunks of FMMCUDA_P2P_S */
static PetscErrorCode SetupP2PItems(FMM_CUDA *c, const FMMPlan *P)
{
  const PetscInt T = FMMCUDA_P2P_T, S = FMMCUDA_P2P_S;
  PetscInt      *nsc, *lpart, nit = 0, npart = 0;
  FMMP2PItem    *it;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(P->nleaves, &nsc, P->nleaves, &lpart));
  PetscCall(PetscMalloc1(P->nleaves + 1, &c->itemstart));
  for (PetscInt b = 0; b < P->nleaves; b++) {
    PetscInt nt = P->tleaf[b + 1] - P->tleaf[b], ns = 0;
    for (PetscInt j = P->nearoff[b]; j < P->nearoff[b + 1]; j++) ns += P->sleaf[P->near[j] + 1] - P->sleaf[P->near[j]];
    c->itemstart[b] = nit;
    nsc[b]          = (nt && ns) ? (ns + S - 1) / S : 0;
    lpart[b]        = nsc[b] > 1 ? npart : -1;
    if (nsc[b] > 1) npart += nsc[b] * nt;
    nit += nsc[b] * ((nt + T - 1) / T);
  }
  c->itemstart[P->nleaves] = nit;
  PetscCall(PetscMalloc1(nit, &it));
  for (PetscInt b = 0, n = 0; b < P->nleaves; b++) {
    PetscInt nt = P->tleaf[b + 1] - P->tleaf[b], ns = 0, j = P->nearoff[b], pos, e = 0;
    if (!nsc[b]) continue;
    for (PetscInt jj = P->nearoff[b]; jj < P->nearoff[b + 1]; jj++) ns += P->sleaf[P->near[jj] + 1] - P->sleaf[P->near[jj]];
    pos = P->sleaf[P->near[j]];
    for (PetscInt k = 0; k < nsc[b]; k++) {
      PetscInt e0 = k * S;
      while (e < e0) { /* walk the near list to source e0 */
        PetscInt end = P->sleaf[P->near[j] + 1], step = PetscMin(end - pos, e0 - e);
        pos += step;
        e += step;
        if (pos == end && j + 1 < P->nearoff[b + 1]) pos = P->sleaf[P->near[++j]];
      }
      for (PetscInt t = 0; t < nt; t += T, n++) {
        it[n].leaf = b;
        it[n].t0   = P->tleaf[b] + t;
        it[n].nt   = PetscMin(T, nt - t);
        it[n].e0   = e0;
        it[n].ne   = PetscMin(S, ns - e0);
        it[n].j    = j;
        it[n].pos  = pos;
        it[n].part = nsc[b] > 1 ? lpart[b] + k * nt + t : -1;
      }
    }
  }
  c->nitems   = nit;
  c->p2psplit = npart > 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(Upload(c, &c->items, it, nit, "the P2P work items"));
  PetscCall(Upload(c, &c->leafnsc, nsc, P->nleaves, "the P2P chunk counts"));
  PetscCall(Upload(c, &c->leafpart, lpart, P->nleaves, "the P2P partial offsets"));
  PetscCall(Upload(c, &c->p2ppart, (PetscReal *)NULL, npart, "the P2P partial sums"));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscFree(it));
  PetscCall(PetscFree2(nsc, lpart));
  PetscFunctionReturn(0);
}

/* neighbour-source lists of the indexing and repetition layouts, and the repetition chunks */
static PetscErrorCode SetupNearLists(Mat A, FMM_CUDA *c, const FMMPlan *P)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscInt *nbroff, *nbr, k = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(P->nleaves + 1, &nbroff, P->nearsrc, &nbr));
  for (PetscInt b = 0; b < P->nleaves; b++) {
    nbroff[b] = k;
    for (PetscInt j = P->nearoff[b]; j < P->nearoff[b + 1]; j++)
      for (PetscInt i = P->sleaf[P->near[j]]; i < P->sleaf[P->near[j] + 1]; i++) nbr[k++] = i; /* tree position */
  }
  nbroff[P->nleaves] = k;
  PetscCall(Upload(c, &c->nbroff, nbroff, P->nleaves + 1, "the neighbour-source offsets"));
  if (fmm->layout == MATFMM_LAYOUT_REPETITION) {
    const int   S      = c->kind == 2 ? 5 : (c->kind == 1 ? 4 : 3);
    PetscReal   budget = fmm->repetition_mb * 1048576.0 / sizeof(PetscReal), need = 0;
    PetscInt64 *recoff, used = 0, maxused = 0;
    PetscInt    nch    = 0;
    PetscCall(Upload(c, &c->nbrt, nbr, P->nearsrc, "the repetition source lists"));
    for (PetscInt b = 0; b < P->nleaves; b++) need = PetscMax(need, (PetscReal)(P->tleaf[b + 1] - P->tleaf[b]) * (2 + S * (PetscReal)(nbroff[b + 1] - nbroff[b])));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &need, 1, MPIU_REAL, MPIU_MAX, PetscObjectComm((PetscObject)A)));
    if (need > budget) PetscCall(PetscFree2(nbroff, nbr));
    PetscCheck(need <= budget, PetscObjectComm((PetscObject)A), PETSC_ERR_MEM, "-mat_fmm_layout repetition: one leaf box needs %.1f MB of records, more than -mat_fmm_repetition_mb %g; raise the budget, lower -mat_fmm_ct, or use -mat_fmm_layout tiled", (double)(need * sizeof(PetscReal) / 1048576.0), (double)fmm->repetition_mb);
    /* leaf-aligned chunks that fit the budget */
    PetscCall(PetscMalloc1(P->nleaves, &recoff));
    PetscCall(PetscMalloc1(P->nleaves + 1, &c->repleaf));
    c->repleaf[0] = 0;
    for (PetscInt b = 0; b < P->nleaves; b++) {
      PetscInt64 len = (PetscInt64)(P->tleaf[b + 1] - P->tleaf[b]) * (2 + (PetscInt64)S * (nbroff[b + 1] - nbroff[b]));
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
  } else { /* indexing: global source indices, sources in global order */
    for (PetscInt e = 0; e < P->nearsrc; e++) nbr[e] = P->sperm[nbr[e]];
    PetscCall(Upload(c, &c->nbr, nbr, P->nearsrc, "the indexing source lists"));
    PetscCall(Upload(c, &c->gxy, fmm->gsrc, 2 * (PetscInt64)P->N, "the sources in global order"));
    PetscCall(Upload(c, &c->gq, (PetscReal *)NULL, P->N, "the charges in global order"));
    PetscCall(Upload(c, &c->gdx, (PetscReal *)NULL, P->N, "the dipoles in global order"));
    PetscCall(Upload(c, &c->gdy, (PetscReal *)NULL, P->N, "the dipoles in global order"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
  }
  PetscCall(PetscFree2(nbroff, nbr));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDASetup(Mat A)
{
  Mat_FMM        *fmm = (Mat_FMM *)A->data;
  const FMMPlan  *P   = &fmm->plan;
  FMM_CUDA       *c;
  const PetscInt  p = fmm->p, nb = 2 * p + 1;
  PetscBool       hasq, hasd;

  PetscFunctionBegin;
  PetscCall(FMMCUDADestroy(A));
  PetscCall(PetscNew(&c));
  fmm->backend = c;
  PetscCall(FMMCUDASelectDevice(PetscObjectComm((PetscObject)A), &c->dev));
  FMMCallCUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  c->p    = p;
  c->ne   = 2 * (p + 1);
  c->pp   = p <= FMMCUDA_PFAST ? 2 * ((p + 1) / 2) : 0;
  /* M2L on the FP64 tensor cores unless -mat_fmm_cuda_m2l fma */
  c->kp = (fmm->cuda_m2l_tc && c->pp) ? 8 * ((p + 7) / 8) : 0;
  /* the near field's log by table unless -mat_fmm_cuda_log libm */
  if (fmm->cuda_log_fast) PetscCall(FMMCUDALogTable(c));
  hasq    = fmm->beta != 0.0 ? PETSC_TRUE : PETSC_FALSE;
  hasd    = (fmm->alpha != 0.0 && fmm->gnrm) ? PETSC_TRUE : PETSC_FALSE;
  c->kind = hasd ? (hasq ? 2 : 1) : 0;
  c->fmm  = fmm->method == MATFMM_METHOD_FMM ? PETSC_TRUE : PETSC_FALSE;

  /* points and strengths per unit density, in tree order */
  PetscCall(Upload(c, &c->sperm, P->sperm, P->N, "the source permutation"));
  PetscCall(Upload(c, &c->sx, P->sx, P->N, "the source coordinates"));
  PetscCall(Upload(c, &c->sy, P->sy, P->N, "the source coordinates"));
  PetscCall(Upload(c, &c->cq, P->cq, P->N, "the charges per unit density"));
  PetscCall(Upload(c, &c->cdx, P->cdx, P->N, "the dipoles per unit density"));
  PetscCall(Upload(c, &c->cdy, P->cdy, P->N, "the dipoles per unit density"));
  PetscCall(Upload(c, &c->tperm, P->tperm, P->M, "the target permutation"));
  PetscCall(Upload(c, &c->tx, P->tx, P->M, "the target coordinates"));
  PetscCall(Upload(c, &c->ty, P->ty, P->M, "the target coordinates"));
  PetscCall(Upload(c, &c->sigma, (PetscReal *)NULL, P->N, "the densities"));
  PetscCall(Upload(c, &c->q, (PetscReal *)NULL, P->N, "the charges"));
  PetscCall(Upload(c, &c->dx, (PetscReal *)NULL, P->N, "the dipoles"));
  PetscCall(Upload(c, &c->dy, (PetscReal *)NULL, P->N, "the dipoles"));
  PetscCall(Upload(c, &c->pot, (PetscReal *)NULL, P->M, "the potentials"));
  PetscCall(Upload(c, &c->y, (PetscReal *)NULL, P->M, "the potentials"));

  if (c->fmm) {
    PetscInt *tleafof;
    double   *binom, *m2l;
    PetscCall(PetscMalloc1(P->M, &tleafof));
    for (PetscInt b = 0; b < P->nleaves; b++)
      for (PetscInt i = P->tleaf[b]; i < P->tleaf[b + 1]; i++) tleafof[i] = b;
    PetscCall(PetscCalloc2(nb * nb, &binom, p * p, &m2l)); /* the tables of the CPU backend */
    FMMTables((int)p, binom, m2l);
    PetscCall(Upload(c, &c->tleafof, tleafof, P->M, "the target leaves"));
    PetscCall(Upload(c, &c->binom, binom, nb * nb, "the binomial table"));
    PetscCall(Upload(c, &c->m2l, m2l, p * p, "the M2L matrix"));
    PetscCall(Upload(c, &c->sleaf, P->sleaf, P->nleaves + 1, "the leaf source ranges"));
    PetscCall(Upload(c, &c->tleaf, P->tleaf, P->nleaves + 1, "the leaf target ranges"));
    PetscCall(Upload(c, &c->cx, P->cx, P->nboxes, "the box centres"));
    PetscCall(Upload(c, &c->cy, P->cy, P->nboxes, "the box centres"));
    PetscCall(Upload(c, &c->scale, P->scale, P->nboxes, "the box scales"));
    PetscCall(Upload(c, &c->faroff, P->faroff, P->nboxes + 1, "the M2L offsets"));
    PetscCall(Upload(c, &c->nearoff, P->nearoff, P->nleaves + 1, "the P2P offsets"));
    PetscCall(Upload(c, &c->near, P->near, P->nearoff[P->nleaves], "the P2P lists"));
    PetscCall(Upload(c, &c->mpole, (PetscReal *)NULL, (PetscInt64)P->nboxes * c->ne, "the multipole expansions"));
    PetscCall(Upload(c, &c->local, (PetscReal *)NULL, (PetscInt64)P->nboxes * c->ne, "the local expansions"));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(tleafof));
    PetscCall(PetscFree2(binom, m2l));
    PetscCall(SetupM2L(c, P));
    PetscCall(SetupP2PItems(c, P));
    if (fmm->layout != MATFMM_LAYOUT_TILED) PetscCall(SetupNearLists(A, c, P));
  }
  { /* direct: slice the sources when the targets alone do not fill the GPU */
    int      sms = 1;
    PetscInt bx  = (P->M + 255) / 256;
    FMMCallCUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->dev));
    c->dslices = PetscMax(1, PetscMin((4 * sms + bx - 1) / PetscMax(bx, 1), P->N / 4096));
    c->dslices = PetscMin(c->dslices, 65535);
    if (c->dslices > 1) PetscCall(Upload(c, &c->dpart, (PetscReal *)NULL, (PetscInt64)c->dslices * P->M, "the direct partial sums"));
  }
  /* pinned staging buffers; without them (allocation refused) copies go direct */
  if (cudaMallocHost((void **)&c->stagein, sizeof(double) * PetscMax(P->N, 1)) != cudaSuccess) c->stagein = NULL;
  if (cudaMallocHost((void **)&c->stageout, sizeof(double) * PetscMax(P->M, 1)) != cudaSuccess) c->stageout = NULL;
  (void)cudaGetLastError();
  for (int k = 0; k < FMM_STAGE_CHUNKS; k++) FMMCallCUDA(cudaEventCreateWithFlags(&c->ev[k], cudaEventDisableTiming));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
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

/* densities in (global order, host or device memory: cudaMemcpyDefault), strengths in tree order */
static PetscErrorCode Begin(Mat A, FMM_CUDA *c, const PetscScalar *sigma)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  FMMCallCUDA(cudaSetDevice(c->dev));
  PetscCall(PetscLogIsActive(&c->sync));
  PetscCall(CopyIn(c, c->sigma, sigma, fmm->plan.N));
  PetscCall(FMMCUDAStrengths(c, &fmm->plan));
  PetscFunctionReturn(0);
}

/* potentials out (local target order) */
static PetscErrorCode End(Mat A, FMM_CUDA *c, PetscScalar *y)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCall(FMMCUDAScatter(c, &fmm->plan));
  PetscCall(CopyOut(c, y, c->y, fmm->plan.M));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDAMult(Mat A, const PetscScalar *sigma, PetscScalar *y)
{
  Mat_FMM       *fmm = (Mat_FMM *)A->data;
  const FMMPlan *P   = &fmm->plan;
  FMM_CUDA      *c   = (FMM_CUDA *)fmm->backend;
  const double   p   = (double)c->p;

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
  PetscCall(PhaseEnd(c, MATFMM_M2L, 8.0 * p * p * c->npairs));
  PetscCall(PhaseBegin(c, MATFMM_L2L));
  PetscCall(FMMCUDAL2L(c, P));
  PetscCall(PhaseEnd(c, MATFMM_L2L, 8.0 * p * p * (P->nboxes - 1)));
  PetscCall(PhaseBegin(c, MATFMM_L2P));
  PetscCall(FMMCUDAL2P(c, P));
  PetscCall(PhaseEnd(c, MATFMM_L2P, 8.0 * p * P->M));
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
  PetscCall(End(A, c, y));
  PetscFunctionReturn(0);
}

static PetscErrorCode FMMCUDADirectMult(Mat A, const PetscScalar *sigma, PetscScalar *y)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  FMM_CUDA *c   = (FMM_CUDA *)fmm->backend;

  PetscFunctionBegin;
  PetscCall(Begin(A, c, sigma));
  PetscCall(PhaseBegin(c, MATFMM_Direct));
  PetscCall(FMMCUDADirect(c, &fmm->plan));
  PetscCall(PhaseEnd(c, MATFMM_Direct, 12.0 * (PetscLogDouble)fmm->plan.N * fmm->plan.M));
  PetscCall(End(A, c, y));
  PetscFunctionReturn(0);
}

struct _FMMBackendOps FMMBackendCUDA = {"cuda", FMMCUDASetup, FMMCUDAMult, FMMCUDADirectMult, FMMCUDADestroy};
