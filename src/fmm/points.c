/*
  MATFMM's copies of the caller's points: copied and checked for NaN/Inf in
  one pass (MatFMMSetSources(), MatFMMSetTargets()), in host memory or, where
  the caller gives device arrays, in the memory of the device backend
  (FMMDeviceMemory); brought to the host where a host path reads them; and
  gathered on every rank at assembly (the first MPI version replicates the
  sources).  The backends follow the source block through their setsources
  hook.
*/
#include "fmmimpl.h"
#if defined(PETSC_HAVE_CUDA)
  #include <petscdevice.h>
#endif

/* d[0..n) = s[0..n), in parallel for large n (pieces of 32 KB): copying into
   fresh memory is mostly the page faults of its first touch, which then run
   on all threads; the CUDA backend's staging copies use it too */
void FMMCopyReals(PetscReal *d, const PetscReal *s, PetscInt n)
{
#pragma omp parallel for schedule(static) if (n >= 2 * FMM_OMP_MIN_POINTS)
  for (PetscInt i0 = 0; i0 < n; i0 += 4096) memcpy(d + i0, s + i0, sizeof(PetscReal) * (size_t)PetscMin(4096, n - i0));
}

/* FMMCopyReals, returning the index of the first NaN/Inf (-1: none): the
   check of MatAssemblyEnd() made in the same pass over the data.  Blocks are
   tested in parallel without branches (vectorised), the first bad block is
   then searched. */
static PetscInt CopyRealsFinite(PetscReal *d, const PetscReal *s, PetscInt n)
{
  const PetscInt B = 4096, nb = (n + B - 1) / B;
  PetscInt       first = nb;

#pragma omp parallel for schedule(static) reduction(min : first) if (n >= 2 * FMM_OMP_MIN_POINTS)
  for (PetscInt b = 0; b < nb; b++) {
    const PetscInt i0 = b * B, m = PetscMin(B, n - i0);
    int            bad = 0;
    memcpy(d + i0, s + i0, sizeof(PetscReal) * (size_t)m);
    for (PetscInt i = i0; i < i0 + m; i++) bad |= !(PetscAbsReal(d[i]) <= PETSC_MAX_REAL); /* false for NaN and Inf */
    if (bad && b < first) first = b;
  }
  for (PetscInt i = first * B; i < n; i++)
    if (PetscIsInfOrNanReal(d[i])) return i;
  return -1;
}

/* the memory of the device backend of this build (NULL: host memory only) */
static const FMMDeviceMemory *DeviceMemory(void)
{
  for (PetscInt b = 0; b < FMM_NBACKENDS; b++)
    if (FMMBackends[b]->mem) return FMMBackends[b]->mem;
  return NULL;
}

/* The arrays of device vectors, or device arrays the caller gives, may be
   written by work queued on PETSc's stream (its current device context), not
   on the backend's: with dev, the host waits for PETSc's stream before the
   backend reads them or writes y.  The backend returns once y is written (its
   stream synchronised), so PETSc's later work sees it. */
PetscErrorCode FMMWaitForPETSc(PetscBool dev)
{
  PetscFunctionBegin;
#if defined(PETSC_HAVE_CUDA)
  if (dev) {
    PetscDeviceContext dctx;
    PetscCall(PetscDeviceContextGetCurrentContext(&dctx));
    PetscCall(PetscDeviceContextSynchronize(dctx));
  }
#else
  (void)dev;
#endif
  PetscFunctionReturn(0);
}

/* *dev: whether the caller's arrays a[0..k) (NULL ones aside) are in device
   memory; all or none of them must be.  Before anything is changed. */
PetscErrorCode FMMArraysOnDevice(PetscInt k, const PetscReal *const a[], const char *const name[], PetscBool *dev)
{
  const FMMDeviceMemory *mem = DeviceMemory();

  PetscFunctionBegin;
  *dev = PETSC_FALSE;
  if (!mem) PetscFunctionReturn(0);
  for (PetscInt i = 0, first = -1; i < k; i++) {
    PetscBool d;
    if (!a[i]) continue;
    PetscCall((*mem->isdevice)(a[i], &d));
    if (first < 0) {
      first = i;
      *dev  = d;
    } else PetscCheck(d == *dev, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "MATFMM: %s is in %s memory but %s is in %s memory; give them all in host memory or all in device memory", name[first], *dev ? "device" : "host", name[i], d ? "device" : "host");
  }
  PetscCall(FMMWaitForPETSc(*dev));
  PetscFunctionReturn(0);
}

/* the backends that follow the source block (setsources) */
static PetscErrorCode SourcesEvent(Mat_FMM *fmm, FMMSourcesEvent ev, PetscInt k)
{
  PetscFunctionBegin;
  for (PetscInt b = 0; b < FMM_NBACKENDS; b++)
    if (FMMBackends[b]->setsources) PetscCall((*FMMBackends[b]->setsources)(fmm->bmat[b], ev, &fmm->src, k));
  PetscFunctionReturn(0);
}

/* nrm and wts in the block (FMMSourceBlock) */
static void SourceBlockViews(FMMSources *S)
{
  S->nrm = S->hasnrm ? S->block + 2 * S->n : NULL;
  S->wts = S->haswts ? S->block + (S->hasnrm ? 4 : 2) * S->n : NULL;
}

/* the copy of the sources, in host or device memory */
PetscErrorCode FMMSourcesFree(Mat_FMM *fmm)
{
  FMMSources *S = &fmm->src;

  PetscFunctionBegin;
  PetscCall(SourcesEvent(fmm, FMM_SOURCES_FREE, 0)); /* the backends let go of it first */
  S->nrefill = 0;
  if (S->dev) PetscCall((*DeviceMemory()->free)(S->block));
  else PetscCall(PetscFree(S->block));
  S->block = S->nrm = S->wts = NULL;
  S->dev                     = PETSC_FALSE;
  PetscFunctionReturn(0);
}

PetscErrorCode FMMTargetsFree(Mat_FMM *fmm)
{
  FMMTargets *T = &fmm->tgt;

  PetscFunctionBegin;
  if (T->dev) PetscCall((*DeviceMemory()->free)(T->xy));
  else PetscCall(PetscFree(T->xy));
  T->xy  = NULL;
  T->dev = PETSC_FALSE;
  PetscFunctionReturn(0);
}

/* the copies made in device memory, to host memory: for the paths that read
   them on the host (more than one rank, the CPU backend, the plan built on
   the CPU) */
PetscErrorCode FMMPointsToHost(Mat_FMM *fmm)
{
  FMMSources *S = &fmm->src;
  FMMTargets *T = &fmm->tgt;

  PetscFunctionBegin;
  if (S->dev) {
    const size_t sz = FMMSourceBlock(S->n, S->hasnrm, S->haswts);
    PetscReal   *h;
    PetscCall(PetscMalloc1(sz, &h));
    PetscCall((*DeviceMemory()->tohost)(h, S->block, sz));
    PetscCall((*DeviceMemory()->free)(S->block));
    S->block = h;
    S->dev   = PETSC_FALSE;
    SourceBlockViews(S);
  }
  if (T->dev) {
    PetscReal *h;
    PetscCall(PetscMalloc1(2 * T->m, &h));
    PetscCall((*DeviceMemory()->tohost)(h, T->xy, 2 * (size_t)T->m));
    PetscCall((*DeviceMemory()->free)(T->xy));
    T->xy  = h;
    T->dev = PETSC_FALSE;
  }
  PetscFunctionReturn(0);
}

/* the caller's arrays into the host block, with the NaN/Inf check; the
   backends see each array once it is copied (FMM_SOURCES_COPIED: the CUDA
   backend sends it to the block's copy in GPU memory once it has page-locked
   the block, the points first, so their transfer runs while the host copies
   the normals and weights; one transfer an array, as smaller pieces slowed
   the copy more than they overlapped) */
static PetscErrorCode CopySources(Mat_FMM *fmm, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, PetscInt n)
{
  FMMSources            *S      = &fmm->src;
  const PetscReal *const a[3]   = {xy, nrm, w};
  PetscReal *const       d[3]   = {S->block, S->nrm, S->wts};
  const PetscInt         len[3] = {2 * n, nrm ? 2 * n : 0, w ? n : 0};
  PetscInt               bad[3] = {-1, -1, -1};

  PetscFunctionBegin;
  PetscCall(SourcesEvent(fmm, FMM_SOURCES_FILL, 0));
  for (int k = 0; k < 3; k++) {
    if (!len[k]) continue;
    bad[k] = CopyRealsFinite(d[k], a[k], len[k]);
    PetscCall(SourcesEvent(fmm, FMM_SOURCES_COPIED, k));
  }
  PetscCall(SourcesEvent(fmm, FMM_SOURCES_FILLED, 0));
  for (int k = 0; k < 3; k++) {
    S->badv[k] = bad[k] >= 0 ? d[k][bad[k]] : 0.0;
    S->bad[k]  = bad[k];
  }
  PetscFunctionReturn(0);
}

/* the block of n sources, new (new sizes, or the other memory) or refilled,
   from the caller's arrays (dev: in device memory, FMMArraysOnDevice) */
PetscErrorCode FMMSourcesSet(Mat_FMM *fmm, PetscInt n, const PetscReal xy[], const PetscReal nrm[], const PetscReal w[], PetscBool dev)
{
  FMMSources *S = &fmm->src;

  PetscFunctionBegin;
  if (!S->block || n != S->n || !nrm != !S->hasnrm || !w != !S->haswts || dev != S->dev) { /* new sizes: new arrays (else the old ones are refilled) */
    const size_t sz = FMMSourceBlock(n, nrm ? PETSC_TRUE : PETSC_FALSE, w ? PETSC_TRUE : PETSC_FALSE);
    PetscCall(FMMSourcesFree(fmm));
    if (dev) PetscCall((*DeviceMemory()->alloc)(sz, &S->block));
    else PetscCall(PetscMalloc1(sz, &S->block));
    S->dev    = dev;
    S->n      = n;
    S->hasnrm = nrm ? PETSC_TRUE : PETSC_FALSE;
    S->haswts = w ? PETSC_TRUE : PETSC_FALSE;
    SourceBlockViews(S);
  } else S->nrefill++;
  if (dev) {
    PetscReal *const       d[3]   = {S->block, S->nrm, S->wts};
    const PetscReal *const a[3]   = {xy, nrm, w};
    const PetscInt         len[3] = {2 * n, nrm ? 2 * n : 0, w ? n : 0};
    PetscInt               bad[3];
    PetscCall((*DeviceMemory()->copychecked)(3, d, a, len, bad, S->badv, &S->distinct));
    S->bad[0] = bad[0];
    S->bad[1] = nrm ? bad[1] : -1;
    S->bad[2] = w ? bad[2] : -1;
  } else PetscCall(CopySources(fmm, xy, nrm, w, n));
  PetscFunctionReturn(0);
}

/* this rank's m targets from the caller's array (PETSC_DETERMINE: the targets are the sources) */
PetscErrorCode FMMTargetsSet(Mat_FMM *fmm, PetscInt m, const PetscReal xy[], PetscBool dev)
{
  FMMTargets *T = &fmm->tgt;

  PetscFunctionBegin;
  PetscCall(FMMTargetsFree(fmm));
  if (m == PETSC_DETERMINE) {
    T->m = -1;
    PetscFunctionReturn(0);
  }
  if (dev) {
    PetscReal             *d[1];
    const PetscReal *const a[1]   = {xy};
    const PetscInt         len[1] = {2 * m};
    PetscCall((*DeviceMemory()->alloc)(2 * (size_t)m, &T->xy));
    d[0]   = T->xy;
    T->dev = PETSC_TRUE;
    PetscCall((*DeviceMemory()->copychecked)(1, d, a, len, &T->bad, &T->badv, NULL));
  } else {
    PetscCall(PetscMalloc1(2 * m, &T->xy));
    T->bad  = CopyRealsFinite(T->xy, xy, 2 * m);
    T->badv = T->bad >= 0 ? T->xy[T->bad] : 0.0;
  }
  T->m = m;
  PetscFunctionReturn(0);
}

static PetscErrorCode GatherReal(PetscSF sf, PetscInt bs, const PetscReal *local, PetscReal *global)
{
  MPI_Datatype t;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Type_contiguous((PetscMPIInt)bs, MPIU_REAL, &t));
  PetscCallMPI(MPI_Type_commit(&t));
  PetscCall(PetscSFBcastBegin(sf, t, local, global, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(sf, t, local, global, MPI_REPLACE));
  PetscCallMPI(MPI_Type_free(&t));
  PetscFunctionReturn(0);
}

/* the points of the plan in the context: all sources (and targets, when
   they are not the sources) on every rank, gathered through fmm->sf (made
   here); on one rank the matrix's own copies.  Then the check that the sources
   are not all at one point. */
PetscErrorCode FMMPointsGather(Mat A)
{
  Mat_FMM          *fmm  = (Mat_FMM *)A->data;
  FMMContext       *ctx  = &fmm->ctx;
  const FMMSources *S    = &fmm->src;
  MPI_Comm          comm = PetscObjectComm((PetscObject)A);
  PetscInt          N    = A->cmap->N;
  PetscBool         anynrm, anywts;
  PetscMPIInt       size;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(PetscSFCreate(comm, &fmm->sf));
  PetscCall(PetscSFSetGraphWithPattern(fmm->sf, A->cmap, PETSCSF_PATTERN_ALLGATHER));
  { /* as ints: PETSc's MPI type for PetscBool changed name in 3.24 */
    PetscMPIInt has[2] = {S->hasnrm ? 1 : 0, S->haswts ? 1 : 0};
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, has, 2, MPI_INT, MPI_LOR, comm));
    anynrm = has[0] ? PETSC_TRUE : PETSC_FALSE;
    anywts = has[1] ? PETSC_TRUE : PETSC_FALSE;
  }
  if (size == 1) { /* nothing to gather: the plan reads the arrays given (copies made by MatFMMSetSources/Targets) */
    ctx->alias = PETSC_TRUE;
    ctx->src   = S->block;
    ctx->nrm   = (anynrm && fmm->par.alpha != 0.0) ? S->nrm : NULL;
    ctx->wts   = anywts ? S->wts : NULL;
    ctx->tgt   = fmm->tgt.m < 0 ? NULL : fmm->tgt.xy;
  } else {
    PetscReal *g;
    PetscCall(PetscMalloc1(2 * N, &g));
    PetscCall(GatherReal(fmm->sf, 2, S->block, g));
    ctx->src = g;
    if (anynrm && fmm->par.alpha != 0.0) { /* normals are checked at assembly wherever there are sources */
      PetscCall(PetscMalloc1(2 * N, &g));
      PetscCall(GatherReal(fmm->sf, 2, S->nrm, g));
      ctx->nrm = g;
    }
    if (anywts) { /* weights given on some ranks only: 1 on the others */
      PetscReal *ones = NULL;
      if (!S->haswts) {
        PetscCall(PetscMalloc1(S->n, &ones));
        for (PetscInt i = 0; i < S->n; i++) ones[i] = 1.0;
      }
      PetscCall(PetscMalloc1(N, &g));
      PetscCall(GatherReal(fmm->sf, 1, S->haswts ? S->wts : ones, g));
      ctx->wts = g;
      PetscCall(PetscFree(ones));
    }
    if (fmm->tgt.m >= 0) { /* all targets: the tree depends on them */
      PetscSF tsf;
      PetscCall(PetscMalloc1(2 * A->rmap->N, &g));
      PetscCall(PetscSFCreate(comm, &tsf));
      PetscCall(PetscSFSetGraphWithPattern(tsf, A->rmap, PETSCSF_PATTERN_ALLGATHER));
      PetscCall(GatherReal(tsf, 2, fmm->tgt.xy, g));
      PetscCall(PetscSFDestroy(&tsf));
      ctx->tgt = g;
    }
  }
  /* degenerate geometry: every source at one point */
  if (N > 1) {
    PetscBool same = PETSC_TRUE;
    if (S->dev) same = S->distinct < 0 ? PETSC_TRUE : PETSC_FALSE; /* found on the GPU as they were copied */
    else
      for (PetscInt i = 1; i < N && same; i++) same = (ctx->src[2 * i] == ctx->src[0] && ctx->src[2 * i + 1] == ctx->src[1]) ? PETSC_TRUE : PETSC_FALSE;
    if (same && S->dev) { /* one rank: to the host for the message */
      PetscCall(FMMPointsToHost(fmm));
      ctx->src = S->block;
    }
    PetscCheck(!same, comm, PETSC_ERR_ARG_WRONG, "MATFMM: all %" PetscInt_FMT " sources are at the same point (%g, %g); the kernel vanishes between coincident points, so the operator is degenerate", N, (double)ctx->src[0], (double)ctx->src[1]);
  }
  PetscFunctionReturn(0);
}

/* the gathered points (kept: the targets; all: the sources too), unless they are the matrix's own */
static PetscErrorCode Release(FMMContext *ctx, PetscBool all)
{
  PetscFunctionBegin;
  if (!ctx->alias) {
    PetscCall(PetscFree(ctx->tgt));
    if (all) {
      PetscCall(PetscFree(ctx->src));
      PetscCall(PetscFree(ctx->nrm));
      PetscCall(PetscFree(ctx->wts));
    }
  }
  ctx->tgt = NULL;
  if (all) {
    ctx->src = ctx->nrm = ctx->wts = NULL;
    ctx->alias                     = PETSC_FALSE;
  }
  PetscFunctionReturn(0);
}

/* after the setup: the gathered targets (the plan holds those it needs) */
PetscErrorCode FMMPointsReleaseTargets(Mat_FMM *fmm)
{
  PetscFunctionBegin;
  PetscCall(Release(&fmm->ctx, PETSC_FALSE));
  PetscFunctionReturn(0);
}

/* at invalidation: all gathered points */
PetscErrorCode FMMPointsRelease(Mat_FMM *fmm)
{
  PetscFunctionBegin;
  PetscCall(Release(&fmm->ctx, PETSC_TRUE));
  PetscFunctionReturn(0);
}

/* the gathered sources (src, nrm, wts) and this rank's targets (tgt) in host
   memory, for a loop on the host after assembly: copies (*copy, one block
   to free) where they are in device memory (one rank, points given there) */
PetscErrorCode FMMPointsHost(Mat_FMM *fmm, const PetscReal **src, const PetscReal **nrm, const PetscReal **wts, const PetscReal **tgt, PetscReal **copy)
{
  const FMMContext *ctx = &fmm->ctx;
  const FMMSources *S   = &fmm->src;
  const FMMTargets *T   = &fmm->tgt;
  const size_t      sz  = S->dev ? FMMSourceBlock(S->n, S->hasnrm, S->haswts) : 0;
  const size_t      tz  = T->dev ? 2 * (size_t)T->m : 0;

  PetscFunctionBegin;
  *src  = ctx->src;
  *nrm  = ctx->nrm;
  *wts  = ctx->wts;
  *tgt  = T->xy;
  *copy = NULL;
  if (!sz && !tz) PetscFunctionReturn(0);
  PetscCall(PetscMalloc1(sz + tz, copy));
  if (sz) { /* one rank, points given in device memory: the block's host copy */
    PetscReal *hs = *copy;
    PetscCall((*DeviceMemory()->tohost)(hs, S->block, sz));
    *src = hs;
    *nrm = ctx->nrm ? hs + (ctx->nrm - S->block) : NULL;
    *wts = ctx->wts ? hs + (ctx->wts - S->block) : NULL;
  }
  if (tz) {
    PetscReal *ht = *copy + sz;
    PetscCall((*DeviceMemory()->tohost)(ht, T->xy, tz));
    *tgt = ht;
  }
  PetscFunctionReturn(0);
}
