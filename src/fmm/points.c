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
#if defined(__linux__)
  #include <sys/mman.h>
#endif

/* n bytes of host memory at p, about to be filled for the first time: on
   Linux, ask for transparent huge pages where the system grants them on
   request (THP "madvise"), so that the first touch faults 2 MB at a time
   instead of 512 pages of 4 KB (the page faults, not the copy, set the time
   of copying into fresh memory).  Advice only: nothing changes where it is
   refused or THP is off. */
void FMMAdviseHugePages(void *p, size_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t H = (uintptr_t)1 << 21, a = ((uintptr_t)p + H - 1) & ~(H - 1), e = ((uintptr_t)p + n) & ~(H - 1);
  if (n >= 8 * H && e > a) (void)madvise((void *)a, (size_t)(e - a), MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

/* n bytes from s to d, in parallel for large n (pieces of 32 KB): copying
   into fresh memory is mostly the page faults of its first touch, which then
   run on all threads; the CUDA backend's staging copies use it too */
void FMMCopyBytes(void *d, const void *s, size_t n)
{
  const size_t   P = 32768;
  const PetscInt np = (PetscInt)((n + P - 1) / P);
#pragma omp parallel for schedule(static) if (n >= 2 * FMM_OMP_MIN_POINTS * sizeof(PetscReal))
  for (PetscInt k = 0; k < np; k++) memcpy((char *)d + k * P, (const char *)s + k * P, PetscMin(P, n - k * P));
}

/* d[0..n) = s[0..n) (FMMCopyBytes) */
void FMMCopyReals(PetscReal *d, const PetscReal *s, PetscInt n)
{
  FMMCopyBytes(d, s, sizeof(PetscReal) * (size_t)n);
}

/* FMMCopyReals, returning the index of the first NaN/Inf (-1: none): the
   check of MatAssemblyEnd() made in the same pass over the data; with range,
   the array holds points (x, y interleaved) and range gets their xmin, xmax,
   ymin, ymax (of the finite values; NaN/Inf are an error at assembly).
   Blocks are tested in parallel without branches (vectorised), the first bad
   block is then searched. */
static PetscInt CopyRealsFinite(PetscReal *d, const PetscReal *s, PetscInt n, PetscReal range[4])
{
  const PetscInt B = 4096, nb = (n + B - 1) / B; /* B even: a block starts at an x */
  PetscInt       first = nb;
  PetscReal      xlo = PETSC_INFINITY, xhi = PETSC_NINFINITY, ylo = PETSC_INFINITY, yhi = PETSC_NINFINITY;

#pragma omp parallel for schedule(static) reduction(min : first, xlo, ylo) reduction(max : xhi, yhi) if (n >= 2 * FMM_OMP_MIN_POINTS)
  for (PetscInt b = 0; b < nb; b++) {
    const PetscInt i0 = b * B, m = PetscMin(B, n - i0);
    int            bad = 0;
    memcpy(d + i0, s + i0, sizeof(PetscReal) * (size_t)m);
    for (PetscInt i = i0; i < i0 + m; i++) bad |= !(PetscAbsReal(d[i]) <= PETSC_MAX_REAL); /* false for NaN and Inf */
    if (bad && b < first) first = b;
    if (range)
      for (PetscInt i = i0; i + 1 < i0 + m; i += 2) {
        xlo = d[i] < xlo ? d[i] : xlo;
        xhi = d[i] > xhi ? d[i] : xhi;
        ylo = d[i + 1] < ylo ? d[i + 1] : ylo;
        yhi = d[i + 1] > yhi ? d[i + 1] : yhi;
      }
  }
  if (range) {
    range[0] = xlo;
    range[1] = xhi;
    range[2] = ylo;
    range[3] = yhi;
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
    FMMAdviseHugePages(h, sizeof(PetscReal) * sz);
    PetscCall((*DeviceMemory()->tohost)(h, S->block, sz));
    PetscCall((*DeviceMemory()->free)(S->block));
    S->block = h;
    S->dev   = PETSC_FALSE;
    SourceBlockViews(S);
  }
  if (T->dev) {
    PetscReal *h;
    PetscCall(PetscMalloc1(2 * T->m, &h));
    FMMAdviseHugePages(h, sizeof(PetscReal) * 2 * (size_t)T->m);
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
    bad[k] = CopyRealsFinite(d[k], a[k], len[k], k == 0 ? S->range : NULL);
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
    else {
      PetscCall(PetscMalloc1(sz, &S->block));
      FMMAdviseHugePages(S->block, sizeof(PetscReal) * sz);
    }
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
    PetscCall((*DeviceMemory()->copychecked)(3, d, a, len, bad, S->badv, &S->distinct, S->range));
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
    PetscCall((*DeviceMemory()->copychecked)(1, d, a, len, &T->bad, &T->badv, NULL, T->range));
  } else {
    PetscCall(PetscMalloc1(2 * m, &T->xy));
    FMMAdviseHugePages(T->xy, sizeof(PetscReal) * 2 * (size_t)m);
    T->bad  = CopyRealsFinite(T->xy, xy, 2 * m, T->range);
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

/*
  Scale-free coordinates.  The kernel's arithmetic squares distances: points
  whose extent is near the ends of the double range would give r^2 that
  overflows (NaN) or underflows (0).  Where the sources' extent is outside
  [2^-FMM_XEXP_MAX, 2^FMM_XEXP_MAX], the plan and the backends get every point
  times 2^-xexp, with 2^(xexp-1) <= half the extent < 2^xexp: a power of two,
  so the scaled points are exact and coincide where the given ones do (the
  tree, the lists and the near field are those of the points as given).  In
  those units the double layer's 1/r takes alpha 2^-xexp, and log r =
  log r' + xexp log 2 adds xexp log 2 times the charges of the pairs the
  kernel counts (every source but those at the target's place), which
  MatMult adds (FMMPointsScale, mat.c).  Inside the window nothing changes.
*/

/* xexp and parx from the ranges found while copying (before the points are
   gathered: a path that scales reads them on the host), with the check that
   every target's distance to the sources squares without overflow */
PetscErrorCode FMMPointsExtent(Mat A)
{
  Mat_FMM        *fmm  = (Mat_FMM *)A->data;
  MPI_Comm        comm = PetscObjectComm((PetscObject)A);
  const PetscReal *sr  = fmm->src.range, *tr = fmm->tgt.range;
  const PetscBool  tg  = fmm->tgt.m >= 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscReal        g[8] = {fmm->src.n > 0 ? -sr[0] : PETSC_NINFINITY, fmm->src.n > 0 ? sr[1] : PETSC_NINFINITY, fmm->src.n > 0 ? -sr[2] : PETSC_NINFINITY, fmm->src.n > 0 ? sr[3] : PETSC_NINFINITY, PETSC_NINFINITY, PETSC_NINFINITY, PETSC_NINFINITY, PETSC_NINFINITY};
  PetscReal        half = 0;
  int              q = 0;

  PetscFunctionBegin;
  if (tg && fmm->tgt.m > 0)
    for (int k = 0; k < 4; k++) g[4 + k] = (k % 2 ? tr[k] : -tr[k]);
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, g, 8, MPIU_REAL, MPIU_MAX, comm));
  fmm->xexp = 0;
  fmm->parx = fmm->par;
  if (!(g[0] > PETSC_NINFINITY)) PetscFunctionReturn(0); /* no source */
  half = PetscMax(g[1] / 2 + g[0] / 2, g[3] / 2 + g[2] / 2); /* half the extent, without overflow */
  if (half > 0) {
    (void)frexp(half, &q); /* half = f 2^q, 1/2 <= f < 1 */
    if (PetscAbsInt(q) > FMM_XEXP_MAX) fmm->xexp = q;
  }
  /* the farthest coordinates (sources, targets), in the units of the plan: |t - s| <= 2 far, squared below 2^1004 */
  for (int w = 0; w < 2; w++) {
    PetscReal far = 0;
    for (int k = 4 * w; k < 4 * w + 4; k++)
      if (g[k] > PETSC_NINFINITY) far = PetscMax(far, PetscAbsReal(g[k]));
    PetscCheck(ldexp(far, -(int)fmm->xexp) <= 0x1p500, comm, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: a %s at coordinate %g is too far from the sources, whose extent is %g: in units of that extent its squared distance to them overflows the double range; give the points relative to a place near the sources", w ? "target" : "source", (double)far, (double)(2 * half));
  }
  if (fmm->xexp) {
    fmm->parx.alpha = ldexp(fmm->par.alpha, -(int)fmm->xexp);
    PetscCheck(PetscIsNormalReal(fmm->parx.alpha) || fmm->par.alpha == 0.0, comm, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: the double layer's coefficient alpha = %g divided by the sources' extent %g is outside the double range (the operator's values would overflow or vanish); scale alpha or the coordinates", (double)fmm->par.alpha, (double)(2 * half));
    PetscCall(PetscInfo(A, "MATFMM: the sources' extent %g is outside [2^-%d, 2^%d]: the plan uses the points times 2^%d\n", (double)(2 * half), FMM_XEXP_MAX, FMM_XEXP_MAX, (int)-fmm->xexp));
  }
  PetscFunctionReturn(0);
}

typedef struct {
  PetscReal x, y;
  PetscInt  j;
} FMMPlace;

static int ComparePlaces(const void *a, const void *b, void *ctx)
{
  const FMMPlace *p = (const FMMPlace *)a, *q = (const FMMPlace *)b;
  (void)ctx;
  if (p->x != q->x) return p->x < q->x ? -1 : 1;
  if (p->y != q->y) return p->y < q->y ? -1 : 1;
  return p->j < q->j ? -1 : (p->j > q->j);
}

/* after FMMPointsGather() where xexp != 0: the points of the plan scaled (on
   one rank, copies of the matrix's block: the plan then reads no array of
   it), and, with a single layer, the sources at each of this rank's targets'
   places (coff, cidx) */
PetscErrorCode FMMPointsScale(Mat A)
{
  Mat_FMM        *fmm = (Mat_FMM *)A->data;
  FMMContext     *ctx = &fmm->ctx;
  const PetscInt  N = ctx->N, M = A->rmap->n, nt = ctx->same ? 0 : 2 * A->rmap->N;
  const int       e = -(int)fmm->xexp;
  PetscReal      *src, *tgt = NULL;
  const PetscReal *mt;

  PetscFunctionBegin;
  if (!fmm->xexp) PetscFunctionReturn(0);
  if (ctx->alias) { /* one rank: copies (the matrix's block keeps the caller's values) */
    PetscReal *nrm = NULL, *wts = NULL;
    PetscCall(PetscMalloc1(2 * N, &src));
    if (ctx->nrm) PetscCall(PetscMalloc1(2 * N, &nrm));
    if (ctx->wts) PetscCall(PetscMalloc1(N, &wts));
    if (nt) PetscCall(PetscMalloc1(nt, &tgt));
    if (nrm) PetscCall(PetscArraycpy(nrm, ctx->nrm, 2 * N));
    if (wts) PetscCall(PetscArraycpy(wts, ctx->wts, N));
    for (PetscInt i = 0; i < 2 * N; i++) src[i] = ldexp(ctx->src[i], e);
    for (PetscInt i = 0; i < nt; i++) tgt[i] = ldexp(ctx->tgt[i], e);
    ctx->src   = src;
    ctx->nrm   = nrm;
    ctx->wts   = wts;
    ctx->tgt   = tgt;
    ctx->alias = PETSC_FALSE;
  } else { /* the gathered copies */
    src = (PetscReal *)ctx->src;
    tgt = (PetscReal *)ctx->tgt;
    for (PetscInt i = 0; i < 2 * N; i++) src[i] = ldexp(src[i], e);
    for (PetscInt i = 0; i < nt; i++) tgt[i] = ldexp(tgt[i], e);
  }
  if (fmm->par.beta == 0.0) PetscFunctionReturn(0);
  /* the sources at the place of each target: sorted places, then a search per target */
  mt = ctx->same ? src + 2 * A->cmap->rstart : tgt + 2 * A->rmap->rstart;
  {
    FMMPlace *pl;
    PetscInt  nnz = 0;
    PetscCall(PetscMalloc1(N, &pl));
    for (PetscInt j = 0; j < N; j++) pl[j] = (FMMPlace){src[2 * j], src[2 * j + 1], j};
    PetscCall(PetscTimSort(N, pl, sizeof(FMMPlace), ComparePlaces, NULL));
    PetscCall(PetscMalloc1(M + 1, &fmm->coff));
    for (int pass = 0; pass < 2; pass++) {
      nnz = 0;
      for (PetscInt i = 0; i < M; i++) {
        const FMMPlace t  = {mt[2 * i], mt[2 * i + 1], -1};
        PetscInt       lo = 0, hi = N;
        while (lo < hi) { /* the first place not below t's */
          const PetscInt mid = lo + (hi - lo) / 2;
          if (ComparePlaces(&pl[mid], &t, NULL) < 0) lo = mid + 1;
          else hi = mid;
        }
        if (!pass) fmm->coff[i] = nnz;
        for (; lo < N && pl[lo].x == t.x && pl[lo].y == t.y; lo++, nnz++)
          if (pass) fmm->cidx[nnz] = pl[lo].j;
      }
      if (!pass) {
        fmm->coff[M] = nnz;
        PetscCall(PetscMalloc1(nnz, &fmm->cidx));
      }
    }
    PetscCall(PetscFree(pl));
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
  PetscCall(PetscFree(fmm->coff));
  PetscCall(PetscFree(fmm->cidx));
  fmm->xexp = 0;
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
