/*
  MATFMM: the Mat type.  Options, setters, the ops table, the MPI layout and
  the diagonal terms; the plan (src/fmm/plan.c) and the backends (src/fmm/cpu, cuda/fmm)
  do the work.
*/
#include "fmmimpl.h"
#if defined(PETSC_HAVE_CUDA)
  #include <petscdevice.h>
#endif

const char *const MatFMMKernels[] = {"single", "double", "combined", "MatFMMKernel", "MATFMM_KERNEL_", NULL};
const char *const MatFMMLayouts[] = {"tiled", "indexing", "repetition", "MatFMMLayout", "MATFMM_LAYOUT_", NULL};
const char *const MatFMMMethods[] = {"fmm", "direct", "MatFMMMethod", "MATFMM_METHOD_", NULL};
const char *const MatFMMDevices[] = {"auto", "cpu", "cuda", "MatFMMDevice", "MATFMM_DEVICE_", NULL};

#define FMM_P_MAX 64

static PetscErrorCode MatFMMInvalidate(Mat A)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  if (fmm->ops && fmm->ops->destroy) PetscCall((*fmm->ops->destroy)(A));
  fmm->ops = NULL;
  PetscCall(FMMPlanDestroy(&fmm->plan));
  PetscCall(PetscSFDestroy(&fmm->sf));
  if (!fmm->galias) {
    PetscCall(PetscFree(fmm->gsrc));
    PetscCall(PetscFree(fmm->gnrm));
    PetscCall(PetscFree(fmm->gwts));
    PetscCall(PetscFree(fmm->gtgt));
  }
  fmm->gsrc = fmm->gnrm = fmm->gwts = fmm->gtgt = NULL;
  fmm->galias                              = PETSC_FALSE;
  PetscCall(PetscFree2(fmm->sigma, fmm->pot));
  fmm->setup  = PETSC_FALSE;
  A->assembled = PETSC_FALSE;
  PetscFunctionReturn(0);
}

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

/* the copy of the sources, page-locked or not */
static PetscErrorCode FreeSources(Mat_FMM *fmm)
{
  PetscFunctionBegin;
#if defined(PETSCFMM_HAVE_CUDA)
  PetscCall(FMMCUDAMirrorDestroy(&fmm->mirror)); /* after its DMAs out of the block */
  if (fmm->srcpinned) PetscCall(FMMCUDAUnpin(fmm->src));
#endif
  fmm->srcpinned = fmm->srcpinno = PETSC_FALSE;
  fmm->nrefill                   = 0;
#if defined(PETSCFMM_HAVE_CUDA)
  if (fmm->srcdev) PetscCall(FMMCUDAPointsFree(fmm->src));
  else
#endif
    PetscCall(PetscFree(fmm->src));
  fmm->src = fmm->nrm = fmm->wts = NULL;
  fmm->srcdev                    = PETSC_FALSE;
  PetscFunctionReturn(0);
}

static PetscErrorCode FreeTargets(Mat_FMM *fmm)
{
  PetscFunctionBegin;
#if defined(PETSCFMM_HAVE_CUDA)
  if (fmm->tgtdev) PetscCall(FMMCUDAPointsFree(fmm->tgt));
  else
#endif
    PetscCall(PetscFree(fmm->tgt));
  fmm->tgt    = NULL;
  fmm->tgtdev = PETSC_FALSE;
  PetscFunctionReturn(0);
}

/* The arrays of device vectors, or device arrays the caller gives, may be
   written by work queued on PETSc's stream (its current device context), not
   on the backend's: with dev, the host waits for PETSc's stream before the
   backend reads them or writes y.  The backend returns once y is written (its
   stream synchronised), so PETSc's later work sees it. */
static PetscErrorCode WaitForPETSc(PetscBool dev)
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
static PetscErrorCode ArraysOnDevice(PetscInt k, const PetscReal *const a[], const char *const name[], PetscBool *dev)
{
  PetscFunctionBegin;
  *dev = PETSC_FALSE;
#if defined(PETSCFMM_HAVE_CUDA)
  for (PetscInt i = 0, first = -1; i < k; i++) {
    PetscBool d;
    if (!a[i]) continue;
    PetscCall(FMMCUDAIsDeviceMemory(a[i], &d));
    if (first < 0) {
      first = i;
      *dev  = d;
    } else PetscCheck(d == *dev, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "MATFMM: %s is in %s memory but %s is in %s memory; give them all in host memory or all in device memory", name[first], *dev ? "device" : "host", name[i], d ? "device" : "host");
  }
  PetscCall(WaitForPETSc(*dev));
#else
  (void)k;
  (void)a;
  (void)name;
#endif
  PetscFunctionReturn(0);
}

/* nrm and wts in the block at src (FMMSourceBlock) */
static void SourceBlockViews(Mat_FMM *fmm)
{
  fmm->nrm = fmm->hasnrm ? fmm->src + 2 * fmm->nsrc : NULL;
  fmm->wts = fmm->haswts ? fmm->src + (fmm->hasnrm ? 4 : 2) * fmm->nsrc : NULL;
}

/* the copies made in device memory, to host memory: for the paths that read
   them on the host (more than one rank, the CPU backend, the plan built on
   the CPU) */
static PetscErrorCode PointsToHost(Mat_FMM *fmm)
{
  PetscFunctionBegin;
#if defined(PETSCFMM_HAVE_CUDA)
  if (fmm->srcdev) {
    const size_t sz = FMMSourceBlock(fmm->nsrc, fmm->hasnrm, fmm->haswts);
    PetscReal   *h;
    PetscCall(PetscMalloc1(sz, &h));
    PetscCall(FMMCUDAPointsToHost(h, fmm->src, sz));
    PetscCall(FMMCUDAPointsFree(fmm->src));
    fmm->src    = h;
    fmm->srcdev = PETSC_FALSE;
    SourceBlockViews(fmm);
  }
  if (fmm->tgtdev) {
    PetscReal *h;
    PetscCall(PetscMalloc1(2 * fmm->ntgt, &h));
    PetscCall(FMMCUDAPointsToHost(h, fmm->tgt, 2 * (size_t)fmm->ntgt));
    PetscCall(FMMCUDAPointsFree(fmm->tgt));
    fmm->tgt    = h;
    fmm->tgtdev = PETSC_FALSE;
  }
#else
  (void)fmm;
#endif
  PetscFunctionReturn(0);
}

/* the caller's arrays into the block, with the NaN/Inf check.  Once the
   CUDA backend has page-locked the block (a time-stepping code, one rank),
   each array also goes to the block's copy in GPU memory once it is copied
   (cuda/fmm/points.cu), the points first: their DMA runs while the host copies
   the normals and weights, theirs while the assembly sorts the points, and
   the assembly finds the points on the GPU.  Sending quarters of arrays
   instead overlapped more of the DMAs with the copy but slowed it more
   (both read host memory): at 10^6 sources with normals and weights
   (H100) this call took 0.87-0.88 ms with one DMA an array, 1.10-1.20 with
   four, 1.35-1.51 with sixteen, for about the same assembly again (1.86-1.91,
   1.83-1.94 and 1.80-1.89 ms) */
static PetscErrorCode CopySources(Mat_FMM *fmm, const PetscReal *xy, const PetscReal *nrm, const PetscReal *w, PetscInt n)
{
  const PetscReal *const a[3]   = {xy, nrm, w};
  PetscReal *const       d[3]   = {fmm->src, fmm->nrm, fmm->wts};
  const PetscInt         len[3] = {2 * n, nrm ? 2 * n : 0, w ? n : 0};
  PetscInt               bad[3] = {-1, -1, -1};
#if defined(PETSCFMM_HAVE_CUDA)
  PetscBool up = PETSC_FALSE;
#endif

  PetscFunctionBegin;
#if defined(PETSCFMM_HAVE_CUDA)
  if (fmm->srcpinned) PetscCall(FMMCUDAMirrorBegin(&fmm->mirror, FMMSourceBlock(n, fmm->hasnrm, fmm->haswts), &up));
#endif
  for (int k = 0; k < 3; k++) {
    if (!len[k]) continue;
    bad[k] = CopyRealsFinite(d[k], a[k], len[k]);
#if defined(PETSCFMM_HAVE_CUDA)
    if (up) {
      PetscCall(FMMCUDAMirrorPut(fmm->mirror, fmm->src, (size_t)(d[k] - fmm->src), len[k]));
      if (k == 0) PetscCall(FMMCUDAMirrorMark(fmm->mirror, 0)); /* the points: what the tree build waits for */
    }
#endif
  }
#if defined(PETSCFMM_HAVE_CUDA)
  if (up) PetscCall(FMMCUDAMirrorMark(fmm->mirror, 1));
#endif
  for (int k = 0; k < 3; k++) fmm->badv[k] = bad[k] >= 0 ? d[k][bad[k]] : 0.0;
  fmm->badsrc = bad[0];
  fmm->badnrm = bad[1];
  fmm->badwts = bad[2];
  PetscFunctionReturn(0);
}

static PetscErrorCode MatFMMSetSources_FMM(Mat A, PetscInt n, const PetscReal xy[], const PetscReal nrm[], const PetscReal w[])
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool dev = PETSC_FALSE;

  PetscFunctionBegin;
  PetscCheck(n >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "Number of local sources %" PetscInt_FMT " must be >= 0", n);
  PetscCheck(A->cmap->n < 0 || A->cmap->n == n, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "Number of local sources %" PetscInt_FMT " differs from the local column size %" PetscInt_FMT " of the matrix", n, A->cmap->n);
  PetscCheck(n == 0 || xy, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "Source coordinates are required (array of 2*%" PetscInt_FMT " reals)", n);
  {
    const PetscReal  *a[3]    = {xy, nrm, w};
    const char *const name[3] = {"xy", "normals", "weights"};
    PetscCall(ArraysOnDevice(n ? 3 : 0, a, name, &dev));
  }
  PetscCall(MatFMMInvalidate(A));
  if (!fmm->src || n != fmm->nsrc || !nrm != !fmm->hasnrm || !w != !fmm->haswts || dev != fmm->srcdev) { /* new sizes: new arrays (else the old ones are refilled) */
    const size_t sz = FMMSourceBlock(n, nrm ? PETSC_TRUE : PETSC_FALSE, w ? PETSC_TRUE : PETSC_FALSE);
    PetscCall(FreeSources(fmm));
#if defined(PETSCFMM_HAVE_CUDA)
    if (dev) PetscCall(FMMCUDAPointsAlloc(sz, &fmm->src));
    else
#endif
      PetscCall(PetscMalloc1(sz, &fmm->src));
    fmm->srcdev = dev;
    fmm->nsrc   = n;
    fmm->hasnrm = nrm ? PETSC_TRUE : PETSC_FALSE;
    fmm->haswts = w ? PETSC_TRUE : PETSC_FALSE;
    SourceBlockViews(fmm);
  } else fmm->nrefill++;
  if (dev) {
#if defined(PETSCFMM_HAVE_CUDA)
    PetscReal *const       d[3]   = {fmm->src, fmm->nrm, fmm->wts};
    const PetscReal *const a[3]   = {xy, nrm, w};
    const PetscInt         len[3] = {2 * n, nrm ? 2 * n : 0, w ? n : 0};
    PetscInt               bad[3];
    PetscCall(FMMCUDACopyChecked(3, d, a, len, bad, fmm->badv, &fmm->srcdistinct));
    fmm->badsrc = bad[0];
    fmm->badnrm = nrm ? bad[1] : -1;
    fmm->badwts = w ? bad[2] : -1;
#endif
  } else PetscCall(CopySources(fmm, xy, nrm, w, n));
  if (A->cmap->n < 0) A->cmap->n = n;
  if (fmm->ntgt < 0 && A->rmap->n < 0) A->rmap->n = n;
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetSources - Sets the sources (columns) of a `MATFMM`: their
   coordinates and, optionally, unit normals and quadrature weights.

   Collective on A (every rank calls it, with n = 0 where it owns no source)

   Input Parameters:
+  A       - the `MATFMM`
.  n       - number of sources on this rank: the local column size of A
.  xy      - coordinates, interleaved (x_0, y_0, x_1, y_1, ...), 2n reals
.  normals - unit normals (nx_0, ny_0, ...), 2n reals, or NULL; required by the double layer
-  weights - quadrature weights w_j, n reals, or NULL for w_j = 1 (particles)

   Notes:
   The arrays are copied.  Source j of the matrix (global column j) is the
   j-th source in rank order.  The operator (see `MatFMMSetKernel()`) uses the
   1/(2 pi) normalisation of the Laplace Green's function, and the kernel is
   taken as 0 for a target at zero distance from a source (the self term of an
   integral equation, or coincident points).  On the GPU, in the tiled layout
   with the table log (the defaults), a pair whose squared distance underflows
   to a subnormal number (distance below 1.5e-154) counts as coincident too.
   Calling this again replaces the geometry; assemble the matrix again before
   using it (arrays of the same sizes are refilled in place).  A time-stepping
   code that refills them before every assembly gets faster assemblies on the
   GPU: on one rank, from the 8th refill on, the CUDA backend page-locks the
   matrix's copy (5n reals with normals and weights; about 3 ms for 10^6
   sources, 25 ms for 10^7, once) and copies it to the GPU without staging
   (10^6 points go up in 0.33 ms instead of 0.8 ms on an H100, and the host
   is free to queue the tree's work).  From the next refill on, this
   function also sends each array, once it has copied it, to a copy of the
   block in GPU memory (5n more reals there): the points go up while it
   copies the normals and weights, and the assembly finds them on the GPU.
   With 10^6 sources and normals and weights an assembly again took 1.80
   instead of 2.01 ms, and this call 0.65 ms as before; with 10^7 11.3
   instead of 14.2 ms, this call 9.7 ms (H100, medians of 7 and 2 runs).
   Without GPU memory for that copy the assembly uploads the
   block as before.  New sizes or `MatDestroy()` release both.  `-info`
   reports them.

   Device memory: in a build with CUDA the arrays may instead all be in GPU
   memory (a code whose points live on the GPU, e.g. the array of a device
   vector from `VecGetArrayReadAndMemType()`).  They are then copied, and
   checked for NaN/Inf, on the GPU (0.2 ms for 10^6 sources with normals and
   weights, 0.5 ms for 10^7, against 0.6-0.8 and 9-11 ms from host memory,
   H100), after PETSc's current device stream and the legacy default stream;
   the call returns when they may be changed.  With the CUDA backend on one
   rank the points never cross the bus: an assembly again at 10^6 and 10^7
   sources takes 2.1 and 12 ms instead of 2.3-2.6 and 14.2-14.5 ms (H100).
   Other paths (more than one rank, `-mat_fmm_device cpu`, `-mat_fmm_cuda_tree
   cpu`) copy them to the host at assembly, and `MatGetDiagonal()` reads a
   temporary host copy.

   Errors:
+  `PETSC_ERR_ARG_SIZ` - n differs from the local column size already set
.  `PETSC_ERR_ARG_NULL` - xy is NULL with n > 0
.  `PETSC_ERR_ARG_WRONG` - some arrays in device memory and others in host memory (nothing is changed)
.  `PETSC_ERR_MEM` - no GPU memory for the copy of arrays given in device memory
-  at `MatAssemblyEnd()` - NaN/Inf in any array, all sources coincident, or no normals for a double layer

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetTargets()`, `MatFMMSetKernel()`
@*/
PetscErrorCode MatFMMSetSources(Mat A, PetscInt n, const PetscReal xy[], const PetscReal normals[], const PetscReal weights[])
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscTryMethod(A, "MatFMMSetSources_C", (Mat, PetscInt, const PetscReal[], const PetscReal[], const PetscReal[]), (A, n, xy, normals, weights));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatFMMSetTargets_FMM(Mat A, PetscInt m, const PetscReal xy[])
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool dev = PETSC_FALSE;

  PetscFunctionBegin;
  PetscCheck(m >= 0 || m == PETSC_DETERMINE, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "Number of local targets %" PetscInt_FMT " must be >= 0, or PETSC_DETERMINE for targets = sources", m);
  PetscCheck(m != PETSC_DETERMINE || !xy, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "m = PETSC_DETERMINE (targets = sources) takes xy = NULL");
  PetscCheck(m <= 0 || xy, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "Target coordinates are required (array of 2*%" PetscInt_FMT " reals)", m);
  PetscCheck(m == PETSC_DETERMINE || A->rmap->n < 0 || A->rmap->n == m, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "Number of local targets %" PetscInt_FMT " differs from the local row size %" PetscInt_FMT " of the matrix", m, A->rmap->n);
  {
    const PetscReal  *a[1]    = {xy};
    const char *const name[1] = {"xy"};
    PetscCall(ArraysOnDevice(m > 0 ? 1 : 0, a, name, &dev));
  }
  PetscCall(MatFMMInvalidate(A));
  PetscCall(FreeTargets(fmm));
  if (m == PETSC_DETERMINE) {
    fmm->ntgt = -1;
    PetscFunctionReturn(0);
  }
  if (dev) {
#if defined(PETSCFMM_HAVE_CUDA)
    PetscReal             *d[1];
    const PetscReal *const a[1]   = {xy};
    const PetscInt         len[1] = {2 * m};
    PetscCall(FMMCUDAPointsAlloc(2 * (size_t)m, &fmm->tgt));
    d[0]        = fmm->tgt;
    fmm->tgtdev = PETSC_TRUE;
    PetscCall(FMMCUDACopyChecked(1, d, a, len, &fmm->badtgt, &fmm->badv[3], NULL));
#endif
  } else {
    PetscCall(PetscMalloc1(2 * m, &fmm->tgt));
    fmm->badtgt  = CopyRealsFinite(fmm->tgt, xy, 2 * m);
    fmm->badv[3] = fmm->badtgt >= 0 ? fmm->tgt[fmm->badtgt] : 0.0;
  }
  fmm->ntgt = m;
  if (A->rmap->n < 0) A->rmap->n = m;
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetTargets - Sets the targets (rows) of a `MATFMM`, the points where
   the potential is evaluated.

   Collective on A

   Input Parameters:
+  A  - the `MATFMM`
.  m  - number of targets on this rank (the local row size of A, may be 0), or `PETSC_DETERMINE`
        to make the targets the sources (the default: the square operator of an integral
        equation, self term excluded)
-  xy - coordinates, interleaved (x_0, y_0, ...), 2m reals (NULL when m is 0 or `PETSC_DETERMINE`)

   Notes:
   The array is copied.  A target at zero distance from a source gets no
   contribution from it.  In a build with CUDA, xy may be in GPU memory; it
   is then copied and checked there (see `MatFMMSetSources()`).

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - m < 0 and not `PETSC_DETERMINE`
.  `PETSC_ERR_ARG_NULL` - xy NULL with m > 0
.  `PETSC_ERR_ARG_SIZ` - m differs from the local row size already set
.  `PETSC_ERR_MEM` - no GPU memory for the copy of an array given in device memory
-  at `MatAssemblyEnd()` - NaN/Inf coordinates

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetSources()`
@*/
PetscErrorCode MatFMMSetTargets(Mat A, PetscInt m, const PetscReal xy[])
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscTryMethod(A, "MatFMMSetTargets_C", (Mat, PetscInt, const PetscReal[]), (A, m, xy));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatFMMSetKernel_FMM(Mat A, MatFMMKernel k, PetscReal alpha, PetscReal beta)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCheck(k >= MATFMM_KERNEL_SINGLE && k <= MATFMM_KERNEL_COMBINED, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "Unknown kernel %d", (int)k);
  PetscCheck(PetscIsNormalReal(alpha) || alpha == 0.0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "alpha %g must be finite", (double)alpha);
  PetscCheck(PetscIsNormalReal(beta) || beta == 0.0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "beta %g must be finite", (double)beta);
  PetscCall(MatFMMInvalidate(A));
  fmm->kernel = k;
  fmm->alpha  = k == MATFMM_KERNEL_SINGLE ? 0.0 : (k == MATFMM_KERNEL_DOUBLE ? 1.0 : alpha);
  fmm->beta   = k == MATFMM_KERNEL_DOUBLE ? 0.0 : (k == MATFMM_KERNEL_SINGLE ? 1.0 : beta);
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetKernel - Chooses the Laplace layer potential of a `MATFMM`.

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
.  kernel - `MATFMM_KERNEL_SINGLE` (S), `MATFMM_KERNEL_DOUBLE` (D) or `MATFMM_KERNEL_COMBINED` (alpha D + beta S)
.  alpha  - weight of D, used by `MATFMM_KERNEL_COMBINED` only
-  beta   - weight of S, used by `MATFMM_KERNEL_COMBINED` only

   Options Database Keys:
+  -mat_fmm_kernel <single,double,combined> - the kernel
.  -mat_fmm_alpha <a> - alpha of the combined kernel
-  -mat_fmm_beta <b>  - beta of the combined kernel

   Notes:
   With sources y_j, normals n_j, weights w_j and targets z_i (points as complex numbers),
.vb
   (S s)_i = -(1/2pi) sum_j log|z_i - y_j| w_j s_j
   (D s)_i =  (1/2pi) sum_j n_j.(z_i - y_j) / |z_i - y_j|^2 w_j s_j
.ve
   summing over j with y_j != z_i.  Both are real parts of one analytic
   potential, sum_j q_j log(z - y_j) + d_j/(z - y_j), which the FMM expands
   (Greengard & Rokhlin 1987).  The default is the single layer.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - unknown kernel, or alpha or beta not finite

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetSources()`
@*/
PetscErrorCode MatFMMSetKernel(Mat A, MatFMMKernel kernel, PetscReal alpha, PetscReal beta)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, kernel, 2);
  PetscValidLogicalCollectiveReal(A, alpha, 3);
  PetscValidLogicalCollectiveReal(A, beta, 4);
  PetscTryMethod(A, "MatFMMSetKernel_C", (Mat, MatFMMKernel, PetscReal, PetscReal), (A, kernel, alpha, beta));
  PetscFunctionReturn(0);
}

/* parameter setters: validated here, take effect at the next assembly */
#define FMM_PARAM_SETTER(Name, T, field, check, ...) \
  static PetscErrorCode MatFMMSet##Name##_FMM(Mat A, T v) \
  { \
    Mat_FMM *fmm = (Mat_FMM *)A->data; \
    PetscFunctionBegin; \
    PetscCheck(check, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, __VA_ARGS__); \
    if (fmm->field != v) PetscCall(MatFMMInvalidate(A)); \
    fmm->field = v; \
    PetscFunctionReturn(0); \
  }

static PetscErrorCode MatFMMSetClusteringThreshold_FMM(Mat A, PetscInt v)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCheck(v >= 1 && v <= 1048576, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "Clustering threshold %" PetscInt_FMT " out of range: expected 1 <= ct <= 1048576 points per leaf box", v);
  if (fmm->ct != v || !fmm->ct_set) PetscCall(MatFMMInvalidate(A));
  fmm->ct     = v;
  fmm->ct_set = PETSC_TRUE;
  PetscFunctionReturn(0);
}
FMM_PARAM_SETTER(ExpansionOrder, PetscInt, p_user, v >= 1 && v <= FMM_P_MAX, "Expansion order %" PetscInt_FMT " out of range: expected 1 <= p <= %d", v, FMM_P_MAX)
FMM_PARAM_SETTER(Tolerance, PetscReal, eps, v > 0.0 && v < 1.0, "Tolerance %g out of range: expected 0 < eps < 1", (double)v)
FMM_PARAM_SETTER(Theta, PetscReal, theta, v > 0.0 && v < 1.0, "Theta %g out of range: expected 0 < theta < 1", (double)v)
FMM_PARAM_SETTER(Layout, MatFMMLayout, layout, v >= MATFMM_LAYOUT_TILED && v <= MATFMM_LAYOUT_REPETITION, "Unknown near-field layout %d", (int)v)
FMM_PARAM_SETTER(Method, MatFMMMethod, method, v == MATFMM_METHOD_FMM || v == MATFMM_METHOD_DIRECT, "Unknown method %d", (int)v)
FMM_PARAM_SETTER(Device, MatFMMDevice, device, v >= MATFMM_DEVICE_AUTO && v <= MATFMM_DEVICE_CUDA, "Unknown device %d", (int)v)

/*@
   MatFMMSetClusteringThreshold - Sets the clustering threshold CT: the tree
   is refined until a leaf box holds about CT sources, so it has
   L = ceil(log4(N/CT)) levels below the root.

   Logically collective on A

   Input Parameters:
+  A  - the `MATFMM`
-  ct - points per leaf box, 1 <= ct <= 2^20

   Options Database Key:
.  -mat_fmm_ct <ct> - the clustering threshold

   Notes:
   Larger CT moves work from the far field (M2L) to the near field (P2P).
   The default is the measured best of the device in use: 32 on the CPU, 64
   with CUDA (bench/bench, N = 1e5..1e7 on a curve, eps 1e-10 and 1e-6).
   Takes effect at the next `MatAssemblyEnd()`.  Source: Goude & Engblom 2013, Sec. 2.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - ct outside its range

   Level: intermediate

.seealso: `MATFMM`, `MatFMMSetExpansionOrder()`
@*/
PetscErrorCode MatFMMSetClusteringThreshold(Mat A, PetscInt ct)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveInt(A, ct, 2);
  PetscTryMethod(A, "MatFMMSetClusteringThreshold_C", (Mat, PetscInt), (A, ct));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetExpansionOrder - Sets the expansion order p (terms of the
   multipole and local expansions), overriding the choice from the tolerance.

   Logically collective on A

   Input Parameters:
+  A - the `MATFMM`
-  p - expansion order, 1 <= p <= 64

   Options Database Key:
.  -mat_fmm_p <p> - the expansion order

   Notes:
   The error falls like theta^p (Engblom 2011).  Takes effect at the next assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - p outside its range

   Level: intermediate

.seealso: `MATFMM`, `MatFMMSetTolerance()`, `MatFMMGetExpansionOrder()`
@*/
PetscErrorCode MatFMMSetExpansionOrder(Mat A, PetscInt p)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveInt(A, p, 2);
  PetscTryMethod(A, "MatFMMSetExpansionOrder_C", (Mat, PetscInt), (A, p));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetTolerance - Sets the requested relative accuracy eps, from which
   the expansion order is chosen, p = ceil(log(eps/0.1)/log(theta)), unless it
   was set with `MatFMMSetExpansionOrder()`.

   Logically collective on A

   Input Parameters:
+  A   - the `MATFMM`
-  eps - relative accuracy, 0 < eps < 1 (default 1e-10)

   Options Database Key:
.  -mat_fmm_eps <eps> - the tolerance

   Notes:
   Source of the rule: the theta^p error bound of Engblom (2011), with the
   constant measured on whole products (tests/accuracy.c; see FMMChooseOrder() in src/fmm/plan.c), a margin of 2 to 10.  Takes effect at the next assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - eps outside (0,1)

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetExpansionOrder()`, `MatFMMSetTheta()`
@*/
PetscErrorCode MatFMMSetTolerance(Mat A, PetscReal eps)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveReal(A, eps, 2);
  PetscTryMethod(A, "MatFMMSetTolerance_C", (Mat, PetscReal), (A, eps));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetTheta - Sets theta of the theta-criterion: boxes with radii
   r1, r2 and centre distance d are well separated (M2L) when
   R + theta r <= theta d, R = max(r1, r2), r = min(r1, r2).

   Logically collective on A

   Input Parameters:
+  A     - the `MATFMM`
-  theta - 0 < theta < 1 (default 0.5)

   Options Database Key:
.  -mat_fmm_theta <theta> - the separation parameter

   Notes:
   Source: Engblom, Appl. Numer. Math. 61 (2011).  Smaller theta means fewer
   M2L pairs per box but more P2P; the order from the tolerance grows as
   theta shrinks less.  Takes effect at the next assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - theta outside (0,1)

   Level: advanced

.seealso: `MATFMM`, `MatFMMSetTolerance()`
@*/
PetscErrorCode MatFMMSetTheta(Mat A, PetscReal theta)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveReal(A, theta, 2);
  PetscTryMethod(A, "MatFMMSetTheta_C", (Mat, PetscReal), (A, theta));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetLayout - Sets the data layout of the near field (P2P).

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
-  layout - `MATFMM_LAYOUT_TILED` (default), `MATFMM_LAYOUT_INDEXING` or `MATFMM_LAYOUT_REPETITION`

   Options Database Keys:
+  -mat_fmm_layout <tiled,indexing,repetition> - the layout
-  -mat_fmm_repetition_mb <mb> - memory budget of the repetition records (default 256 MB)

   Notes:
   All layouts compute the same sums (to rounding).  indexing and repetition
   are the two methods of the P2P data-replication study (seed
   p2p-data-replication-mlfma); repetition stores, per target, 2 + 5 n reals
   for n neighbour sources and is built in chunks within the budget; a leaf
   whose records alone exceed it is refused at assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - unknown layout

   Level: intermediate

.seealso: `MATFMM`, `MatFMMLayout`
@*/
PetscErrorCode MatFMMSetLayout(Mat A, MatFMMLayout layout)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, layout, 2);
  PetscTryMethod(A, "MatFMMSetLayout_C", (Mat, MatFMMLayout), (A, layout));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetMethod - Chooses between the FMM and exact O(N M) summation of
   the same operator.

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
-  method - `MATFMM_METHOD_FMM` (default) or `MATFMM_METHOD_DIRECT`

   Options Database Key:
.  -mat_fmm_method <fmm,direct> - the method

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - unknown method

   Level: intermediate

.seealso: `MATFMM`
@*/
PetscErrorCode MatFMMSetMethod(Mat A, MatFMMMethod method)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, method, 2);
  PetscTryMethod(A, "MatFMMSetMethod_C", (Mat, MatFMMMethod), (A, method));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetDevice - Chooses where a `MATFMM` computes.

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
-  device - `MATFMM_DEVICE_AUTO` (default: CUDA when built with it and a GPU is present), `MATFMM_DEVICE_CPU` or `MATFMM_DEVICE_CUDA`

   Options Database Key:
.  -mat_fmm_device <auto,cpu,cuda> - the device

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - unknown device
-  `PETSC_ERR_SUP` (at assembly) - cuda requested in a build or on a machine without it

   Level: intermediate

.seealso: `MATFMM`, `MatFMMGetDevice()`
@*/
PetscErrorCode MatFMMSetDevice(Mat A, MatFMMDevice device)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, device, 2);
  PetscTryMethod(A, "MatFMMSetDevice_C", (Mat, MatFMMDevice), (A, device));
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetExpansionOrder - Gets the expansion order p in use (after assembly,
   the one chosen from the tolerance when p was not set).

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  p - the expansion order

   Level: intermediate

.seealso: `MatFMMSetExpansionOrder()`, `MatFMMSetTolerance()`
@*/
PetscErrorCode MatFMMGetExpansionOrder(Mat A, PetscInt *p)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscAssertPointer(p, 2);
  PetscCheckTypeName(A, MATFMM);
  fmm = (Mat_FMM *)A->data;
  if (fmm->p_user > 0) *p = fmm->p_user;
  else PetscCall(FMMChooseOrder(fmm->eps, fmm->theta, p));
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetClusteringThreshold - Gets the clustering threshold CT: the one set,
   else the default of the device (after assembly, the device in use).

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  ct - points per leaf box

   Level: intermediate

.seealso: `MatFMMSetClusteringThreshold()`
@*/
PetscErrorCode MatFMMGetClusteringThreshold(Mat A, PetscInt *ct)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscAssertPointer(ct, 2);
  PetscCheckTypeName(A, MATFMM);
  *ct = ((Mat_FMM *)A->data)->ct;
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetTreeInfo - Gets statistics of the tree of an assembled `MATFMM`.

   Not collective (values of this rank's plan)

   Input Parameter:
.  A - the assembled `MATFMM`

   Output Parameters (each may be NULL):
+  levels - L, the level of the leaves (the root is level 0)
.  leaves - number of leaf boxes, 4^L
.  m2l    - number of M2L translations in one product on this rank
-  p2p    - number of near-field target-source pairs on this rank

   Errors:
.  `PETSC_ERR_ARG_WRONGSTATE` - A not assembled

   Level: intermediate

.seealso: `MATFMM`, `MatView()`
@*/
PetscErrorCode MatFMMGetTreeInfo(Mat A, PetscInt *levels, PetscInt *leaves, PetscInt *m2l, PetscCount *p2p)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscCheckTypeName(A, MATFMM);
  fmm = (Mat_FMM *)A->data;
  PetscCheck(fmm->setup, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONGSTATE, "Assemble the MATFMM first (MatAssemblyBegin/End)");
  if (levels) *levels = fmm->plan.L;
  if (leaves) *leaves = fmm->plan.nleaves;
  if (m2l) *m2l = fmm->plan.nfar;
  if (p2p) *p2p = fmm->plan.p2ppairs;
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetDevice - Gets the device a `MATFMM` computes on: after assembly
   the one in use (`MATFMM_DEVICE_CPU` or `MATFMM_DEVICE_CUDA`), before it the one requested.

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  device - the device

   Level: intermediate

.seealso: `MatFMMSetDevice()`
@*/
PetscErrorCode MatFMMGetDevice(Mat A, MatFMMDevice *device)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscCheckTypeName(A, MATFMM);
  fmm     = (Mat_FMM *)A->data;
  *device = fmm->setup ? fmm->device_used : fmm->device;
  PetscFunctionReturn(0);
}

#if PETSC_VERSION_LT(3, 23, 0)
static PetscErrorCode MatSetFromOptions_FMM(Mat A, PetscOptionItems *PetscOptionsObject)
#else /* PetscOptionItems is a pointer type since PETSc 3.23 */
static PetscErrorCode MatSetFromOptions_FMM(Mat A, PetscOptionItems PetscOptionsObject)
#endif
{
  Mat_FMM     *fmm = (Mat_FMM *)A->data;
  PetscInt     ival;
  PetscReal    rval, alpha = fmm->alpha, beta = fmm->beta;
  PetscBool    set, seta, setb;
  MatFMMKernel kernel = fmm->kernel;
  PetscEnum    e;

  PetscFunctionBegin;
  PetscOptionsHeadBegin(PetscOptionsObject, "MATFMM options (2D Laplace fast multipole method)");
  PetscCall(PetscOptionsInt("-mat_fmm_ct", "Clustering threshold: points per leaf box (default: 32 on the CPU, 64 with CUDA)", "MatFMMSetClusteringThreshold", fmm->ct, &ival, &set));
  if (set) PetscCall(MatFMMSetClusteringThreshold(A, ival));
  PetscCall(PetscOptionsInt("-mat_fmm_p", "Expansion order (overrides -mat_fmm_eps)", "MatFMMSetExpansionOrder", fmm->p_user > 0 ? fmm->p_user : 0, &ival, &set));
  if (set) PetscCall(MatFMMSetExpansionOrder(A, ival));
  PetscCall(PetscOptionsReal("-mat_fmm_eps", "Requested relative accuracy; chooses p", "MatFMMSetTolerance", fmm->eps, &rval, &set));
  if (set) PetscCall(MatFMMSetTolerance(A, rval));
  PetscCall(PetscOptionsReal("-mat_fmm_theta", "Theta of the separation criterion R + theta r <= theta d", "MatFMMSetTheta", fmm->theta, &rval, &set));
  if (set) PetscCall(MatFMMSetTheta(A, rval));
  {
    const char *split[] = {"compact", "median"};
    PetscInt    i;
    PetscCall(PetscOptionsEList("-mat_fmm_tree_split", "Tree split rule: the most compact cut near the median (x or y), or the seed's median along the longer side", "MATFMM", split, 2, split[fmm->split_median ? 1 : 0], &i, &set));
    if (set && fmm->split_median != (i == 1)) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->split_median = i == 1 ? PETSC_TRUE : PETSC_FALSE;
  }
  PetscCall(PetscOptionsEnum("-mat_fmm_layout", "Near-field (P2P) data layout", "MatFMMSetLayout", MatFMMLayouts, (PetscEnum)fmm->layout, &e, &set));
  if (set) PetscCall(MatFMMSetLayout(A, (MatFMMLayout)e));
  PetscCall(PetscOptionsReal("-mat_fmm_repetition_mb", "Memory budget of the repetition layout records (MB)", "MatFMMSetLayout", fmm->repetition_mb, &rval, &set));
  if (set) {
    PetscCheck(rval > 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_repetition_mb %g must be > 0", (double)rval);
    if (rval != fmm->repetition_mb) PetscCall(MatFMMInvalidate(A));
    fmm->repetition_mb = rval;
  }
  PetscCall(PetscOptionsEnum("-mat_fmm_method", "Evaluation method", "MatFMMSetMethod", MatFMMMethods, (PetscEnum)fmm->method, &e, &set));
  if (set) PetscCall(MatFMMSetMethod(A, (MatFMMMethod)e));
  PetscCall(PetscOptionsEnum("-mat_fmm_device", "Where to compute", "MatFMMSetDevice", MatFMMDevices, (PetscEnum)fmm->device, &e, &set));
  if (set) PetscCall(MatFMMSetDevice(A, (MatFMMDevice)e));
#if defined(PETSCFMM_HAVE_CUDA)
  {
    const char *m2l[] = {"tc", "fma"}, *lg[] = {"fast", "libm"}, *tr[] = {"gpu", "cpu"};
    PetscInt    i;
    PetscBool   bval;
    PetscCall(PetscOptionsEList("-mat_fmm_cuda_m2l", "CUDA M2L kernel: FP64 tensor cores or unrolled FMA", "MATFMM", m2l, 2, m2l[fmm->cuda_m2l_tc ? 0 : 1], &i, &set));
    if (set && fmm->cuda_m2l_tc != (i == 0)) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_m2l_tc = i == 0 ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(PetscOptionsEList("-mat_fmm_cuda_log", "CUDA near-field log: table-based or the CUDA math library", "MATFMM", lg, 2, lg[fmm->cuda_log_fast ? 0 : 1], &i, &set));
    if (set && fmm->cuda_log_fast != (i == 0)) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_log_fast = i == 0 ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(PetscOptionsEList("-mat_fmm_cuda_tree", "Where the CUDA backend builds the tree and interaction lists: on the GPU or on the CPU (then uploaded)", "MATFMM", tr, 2, tr[fmm->cuda_tree_gpu ? 0 : 1], &i, &set));
    if (set && fmm->cuda_tree_gpu != (i == 0)) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_tree_gpu = i == 0 ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(PetscOptionsBool("-mat_fmm_cuda_p2p_symmetric", "CUDA tiled P2P: evaluate each pair of points once for both sums when the targets are the sources (single layer, table log, one rank)", "MATFMM", fmm->cuda_p2p_sym, &bval, &set));
    if (set && fmm->cuda_p2p_sym != bval) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_p2p_sym = bval;
    PetscCall(PetscOptionsBool("-mat_fmm_cuda_split_local", "GPU tree: the last splitting rounds in shared memory, a block per box, where the device grants the block 220 KB (false: every round in global memory; the same tree)", "MATFMM", fmm->cuda_split_local, &bval, &set));
    if (set && fmm->cuda_split_local != bval) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_split_local = bval;
    PetscCall(PetscOptionsRangeInt("-mat_fmm_cuda_tree_key_bits", "GPU tree: bits of the coordinates' sort keys, quantized over the bounding box (1 to 32, ties sorted after; 64: exact 64-bit keys; the same tree)", "MATFMM", fmm->cuda_key_bits, &ival, &set, 1, 64));
    PetscCheck(!set || ival <= 32 || ival == 64, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_cuda_tree_key_bits %" PetscInt_FMT ": expected 1 to 32 (quantized keys) or 64 (exact keys)", ival);
    if (set && fmm->cuda_key_bits != ival) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_key_bits = ival;
    PetscCall(PetscOptionsRangeInt("-mat_fmm_cuda_tree_list_room", "GPU tree: entries per box given to the strong lists (3 times as many to the far lists) of every level before their sizes are known (lists that do not fit are built again; the same lists)", "MATFMM", fmm->cuda_list_room, &ival, &set, 1, 64));
    if (set && fmm->cuda_list_room != ival) PetscCall(MatFMMInvalidate(A));
    if (set) fmm->cuda_list_room = ival;
  }
#endif
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

static PetscErrorCode MatAssemblyEnd_FMM(Mat A, MatAssemblyType type)
{
  Mat_FMM  *fmm  = (Mat_FMM *)A->data;
  MPI_Comm  comm = PetscObjectComm((PetscObject)A);
  PetscInt    N, M, i, bad;
  PetscBool   anynrm, anywts;
  PetscMPIInt size;

  PetscFunctionBegin;
  if (type == MAT_FLUSH_ASSEMBLY) PetscFunctionReturn(0);
  {
    PetscMPIInt mine = fmm->nsrc >= 0 ? 1 : 0, all; /* n = 0 is a valid call: src may be NULL then */
    PetscCallMPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm));
    PetscCheck(all, comm, PETSC_ERR_ARG_WRONGSTATE, "MATFMM: call MatFMMSetSources() on every rank (n = 0 where a rank has no source) before assembly");
  }
  if (fmm->setup) { /* geometry and parameters unchanged: keep the plan */
    A->assembled = PETSC_TRUE;
    PetscFunctionReturn(0);
  }
  PetscCall(MatSetUp_FMM(A));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  { /* an optimized PETSc does not check that the local sizes add up to the global ones */
    PetscCheck(A->rmap->range[size] == A->rmap->N && A->cmap->range[size] == A->cmap->N, comm, PETSC_ERR_ARG_SIZ, "MATFMM: the local sizes add up to %" PetscInt_FMT " x %" PetscInt_FMT ", but the global size is %" PetscInt_FMT " x %" PetscInt_FMT, A->rmap->range[size], A->cmap->range[size], A->rmap->N, A->cmap->N);
  }
  M = fmm->ntgt < 0 ? fmm->nsrc : fmm->ntgt;
  FMMCheckCollective(comm, fmm->nsrc != A->cmap->n, PETSC_ERR_ARG_SIZ, "MATFMM: %" PetscInt_FMT " local sources but local column size %" PetscInt_FMT, fmm->nsrc, A->cmap->n);
  FMMCheckCollective(comm, M != A->rmap->n, PETSC_ERR_ARG_SIZ, "MATFMM: %" PetscInt_FMT " local targets%s but local row size %" PetscInt_FMT, M, fmm->ntgt < 0 ? " (the sources)" : "", A->rmap->n);
  /* bad numbers */
  bad = fmm->badsrc;
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: source %" PetscInt_FMT " (local) has a non-finite coordinate %g", bad / 2, (double)fmm->badv[0]);
  bad = fmm->badnrm;
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: normal of source %" PetscInt_FMT " (local) has a non-finite component %g", bad / 2, (double)fmm->badv[1]);
  bad = fmm->badwts;
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: weight of source %" PetscInt_FMT " (local) is not finite: %g", bad, (double)fmm->badv[2]);
  bad = fmm->ntgt > 0 ? fmm->badtgt : -1;
  FMMCheckCollective(comm, bad >= 0, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: target %" PetscInt_FMT " (local) has a non-finite coordinate %g", bad / 2, (double)fmm->badv[3]);
  FMMCheckCollective(comm, fmm->alpha != 0.0 && !fmm->hasnrm && fmm->nsrc > 0, PETSC_ERR_ARG_WRONGSTATE, "MATFMM: the %s kernel has a double layer (alpha = %g) but no normals were given to MatFMMSetSources()", MatFMMKernels[fmm->kernel], (double)fmm->alpha);

  PetscCall(PetscLogEventBegin(MATFMM_Setup, A, 0, 0, 0));
  /* order, device, backend */
  PetscCall(MatFMMGetExpansionOrder(A, &fmm->p));
  {
    PetscInt ndev = 0;
    PetscCall(PetscFMMCUDAGetDeviceCount(&ndev));
    if (fmm->device == MATFMM_DEVICE_CUDA) {
      PetscCheck(ndev > 0, comm, PETSC_ERR_SUP, "MATFMM: -mat_fmm_device cuda, but %s; use -mat_fmm_device cpu or auto",
#if defined(PETSCFMM_HAVE_CUDA)
                 "no CUDA GPU was found on this machine"
#else
                 "petscfmm was built without CUDA (make CUDA=1 with nvcc on the PATH)"
#endif
      );
    }
    fmm->device_used = (fmm->device != MATFMM_DEVICE_CPU && ndev > 0) ? MATFMM_DEVICE_CUDA : MATFMM_DEVICE_CPU;
  }
  if (!fmm->ct_set) fmm->ct = fmm->device_used == MATFMM_DEVICE_CUDA ? 64 : 32;
  PetscCall(SetVecType(A));
#if defined(PETSCFMM_HAVE_CUDA)
  fmm->ops = fmm->device_used == MATFMM_DEVICE_CUDA ? &FMMBackendCUDA : &FMMBackendCPU;
#else
  PetscCheck(fmm->device_used != MATFMM_DEVICE_CUDA || fmm->device == MATFMM_DEVICE_AUTO, comm, PETSC_ERR_SUP, "MATFMM: the CUDA backend is not part of this build");
  fmm->device_used = MATFMM_DEVICE_CPU;
  fmm->ops = &FMMBackendCPU;
#endif
  /* points given in device memory stay there for the plan built on the GPU of one rank; the other paths read them on the host */
  if (!(size == 1 && fmm->device_used == MATFMM_DEVICE_CUDA && fmm->cuda_tree_gpu)) PetscCall(PointsToHost(fmm));

  /* gather all sources on every rank (the first MPI version replicates them) */
  N = A->cmap->N;
  PetscCall(PetscSFCreate(comm, &fmm->sf));
  PetscCall(PetscSFSetGraphWithPattern(fmm->sf, A->cmap, PETSCSF_PATTERN_ALLGATHER));
  { /* as ints: PETSc's MPI type for PetscBool changed name in 3.24 */
    PetscMPIInt has[2] = {fmm->hasnrm ? 1 : 0, fmm->haswts ? 1 : 0};
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, has, 2, MPI_INT, MPI_LOR, comm));
    anynrm = has[0] ? PETSC_TRUE : PETSC_FALSE;
    anywts = has[1] ? PETSC_TRUE : PETSC_FALSE;
  }
  if (size == 1) { /* nothing to gather: the plan reads the arrays given (copies made by MatFMMSetSources/Targets) */
    fmm->galias = PETSC_TRUE;
    fmm->gsrc   = fmm->src;
    fmm->gnrm   = (anynrm && fmm->alpha != 0.0) ? fmm->nrm : NULL;
    fmm->gwts   = anywts ? fmm->wts : NULL;
    fmm->gtgt   = fmm->ntgt < 0 ? NULL : fmm->tgt;
  } else {
    PetscCall(PetscMalloc1(2 * N, &fmm->gsrc));
    PetscCall(GatherReal(fmm->sf, 2, fmm->src, fmm->gsrc));
    if (anynrm && fmm->alpha != 0.0) { /* normals are checked above wherever there are sources */
      PetscCall(PetscMalloc1(2 * N, &fmm->gnrm));
      PetscCall(GatherReal(fmm->sf, 2, fmm->nrm, fmm->gnrm));
    }
    if (anywts) { /* weights given on some ranks only: 1 on the others */
      PetscReal *ones = NULL;
      if (!fmm->haswts) {
        PetscCall(PetscMalloc1(fmm->nsrc, &ones));
        for (i = 0; i < fmm->nsrc; i++) ones[i] = 1.0;
      }
      PetscCall(PetscMalloc1(N, &fmm->gwts));
      PetscCall(GatherReal(fmm->sf, 1, fmm->haswts ? fmm->wts : ones, fmm->gwts));
      PetscCall(PetscFree(ones));
    }
    if (fmm->ntgt >= 0) { /* all targets: the tree depends on them */
      PetscSF tsf;
      PetscCall(PetscMalloc1(2 * A->rmap->N, &fmm->gtgt));
      PetscCall(PetscSFCreate(comm, &tsf));
      PetscCall(PetscSFSetGraphWithPattern(tsf, A->rmap, PETSCSF_PATTERN_ALLGATHER));
      PetscCall(GatherReal(tsf, 2, fmm->tgt, fmm->gtgt));
      PetscCall(PetscSFDestroy(&tsf));
    }
  }
  /* degenerate geometry: every source at one point */
  if (N > 1) {
    PetscBool same = PETSC_TRUE;
    if (fmm->srcdev) same = fmm->srcdistinct < 0 ? PETSC_TRUE : PETSC_FALSE; /* found on the GPU as they were copied */
    else
      for (i = 1; i < N && same; i++) same = (fmm->gsrc[2 * i] == fmm->gsrc[0] && fmm->gsrc[2 * i + 1] == fmm->gsrc[1]) ? PETSC_TRUE : PETSC_FALSE;
    if (same && fmm->srcdev) { /* one rank: to the host for the message */
      PetscCall(PointsToHost(fmm));
      fmm->gsrc = fmm->src;
    }
    PetscCheck(!same, comm, PETSC_ERR_ARG_WRONG, "MATFMM: all %" PetscInt_FMT " sources are at the same point (%g, %g); the kernel vanishes between coincident points, so the operator is degenerate", N, (double)fmm->gsrc[0], (double)fmm->gsrc[1]);
  }
  PetscCall(PetscMalloc2(N, &fmm->sigma, M, &fmm->pot));

  /* the plan: on the device when the backend builds it there (CUDA, -mat_fmm_cuda_tree gpu) */
  PetscCall(PetscLogEventBegin(MATFMM_Tree, A, 0, 0, 0));
  if (fmm->ops->plan && fmm->cuda_tree_gpu) PetscCall((*fmm->ops->plan)(A));
  else PetscCall(FMMPlanBuild(A));
  PetscCall(PetscLogEventEnd(MATFMM_Tree, A, 0, 0, 0));
  PetscCall((*fmm->ops->setup)(A));
  if (!fmm->galias) PetscCall(PetscFree(fmm->gtgt)); /* the plan holds the targets it needs */
  fmm->gtgt = NULL;
  fmm->setup   = PETSC_TRUE;
  A->assembled = PETSC_TRUE;
  PetscCall(PetscLogEventEnd(MATFMM_Setup, A, 0, 0, 0));
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
  plain   = (!add && fmm->scale == 1.0 && fmm->shift == 0.0 && !fmm->diag) ? PETSC_TRUE : PETSC_FALSE;
  memtype = (size == 1 && fmm->device_used == MATFMM_DEVICE_CUDA) ? PETSC_TRUE : PETSC_FALSE;
  if (memtype) PetscCall(VecGetArrayReadAndMemType(x, &xa, &mx));
  else PetscCall(VecGetArrayRead(x, &xa));
  if (!plain && PetscMemTypeDevice(mx) && fmm->ops->combine) {
    if (add) PetscCall(VecGetArrayAndMemType(y, &ya, &my));
    else PetscCall(VecGetArrayWriteAndMemType(y, &ya, &my));
    if (fmm->diag) PetscCall(VecGetArrayReadAndMemType(fmm->diag, &da, &md));
    ondev = (PetscMemTypeDevice(my) && (!fmm->diag || PetscMemTypeDevice(md))) ? PETSC_TRUE : PETSC_FALSE;
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
  PetscCall(WaitForPETSc(PetscMemTypeDevice(mx) || PetscMemTypeDevice(my) || PetscMemTypeDevice(md) ? PETSC_TRUE : PETSC_FALSE));
  if (fmm->method == MATFMM_METHOD_DIRECT) PetscCall((*fmm->ops->direct)(A, sigma, out));
  else PetscCall((*fmm->ops->mult)(A, sigma, out));
  if (ondev) {
    PetscCall((*fmm->ops->combine)(A, sigma, da, ya, add));
    if (fmm->diag) PetscCall(VecRestoreArrayReadAndMemType(fmm->diag, &da));
    if (add) PetscCall(VecRestoreArrayAndMemType(y, &ya));
    else PetscCall(VecRestoreArrayWriteAndMemType(y, &ya));
  } else if (!plain) {
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
  const PetscReal *src = fmm->gsrc, *nrm = fmm->gnrm, *wts = fmm->gwts, *tgt = fmm->tgt;
  PetscReal       *hs = NULL, *ht = NULL;

  PetscFunctionBegin;
  PetscCheck(fmm->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATFMM: assemble the matrix before asking for its diagonal");
#if defined(PETSCFMM_HAVE_CUDA)
  if (fmm->srcdev) { /* one rank, points given in device memory: a host copy for this loop */
    const size_t sz = FMMSourceBlock(fmm->nsrc, fmm->hasnrm, fmm->haswts);
    PetscCall(PetscMalloc1(sz, &hs));
    PetscCall(FMMCUDAPointsToHost(hs, fmm->src, sz));
    src = hs;
    nrm = fmm->gnrm ? hs + (fmm->gnrm - fmm->src) : NULL;
    wts = fmm->gwts ? hs + (fmm->gwts - fmm->src) : NULL;
  }
  if (fmm->tgtdev) {
    PetscCall(PetscMalloc1(2 * fmm->ntgt, &ht));
    PetscCall(FMMCUDAPointsToHost(ht, fmm->tgt, 2 * (size_t)fmm->ntgt));
    tgt = ht;
  }
#endif
  for (PetscInt i = 0; i < A->rmap->n; i++) {
    PetscInt        j = r0 + i;
    const PetscReal *z = fmm->ntgt < 0 ? &src[2 * j] : &tgt[2 * i];
    PetscReal        rx = z[0] - src[2 * j], ry = z[1] - src[2 * j + 1], r2 = rx * rx + ry * ry;
    PetscReal        w = wts ? wts[j] : 1.0, k = 0.0;
    if (r2 > 0.0) {
      k = -fmm->beta * w / (2 * PETSC_PI) * 0.5 * PetscLogReal(r2);
      if (nrm) k += fmm->alpha * w / (2 * PETSC_PI) * (nrm[2 * j] * rx + nrm[2 * j + 1] * ry) / r2;
    }
    kd[i] = fmm->scale * k;
  }
  PetscCall(PetscFree(hs));
  PetscCall(PetscFree(ht));
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

static PetscErrorCode MatView_FMM(Mat A, PetscViewer viewer)
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool ascii;

  PetscFunctionBegin;
  PetscCall(PetscObjectTypeCompare((PetscObject)viewer, PETSCVIEWERASCII, &ascii));
  if (!ascii) PetscFunctionReturn(0);
  {
    char comb[64] = "";
    if (fmm->kernel == MATFMM_KERNEL_COMBINED) PetscCall(PetscSNPrintf(comb, sizeof(comb), " %g D + %g S", (double)fmm->alpha, (double)fmm->beta));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  2D Laplace FMM: %s kernel%s, %s\n", MatFMMKernels[fmm->kernel], comb, fmm->ntgt < 0 ? "targets = sources (self term excluded)" : "separate targets"));
  }
  PetscCall(PetscViewerASCIIPrintf(viewer, "  method %s, device %s, near-field layout %s\n", MatFMMMethods[fmm->method], fmm->setup ? MatFMMDevices[fmm->device_used] : MatFMMDevices[fmm->device], MatFMMLayouts[fmm->layout]));
  {
    PetscInt p;
    PetscCall(MatFMMGetExpansionOrder(A, &p));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  clustering threshold %" PetscInt_FMT ", expansion order %" PetscInt_FMT "%s, eps %g, theta %g\n", fmm->ct, p, fmm->p_user > 0 ? " (set)" : " (from eps)", (double)fmm->eps, (double)fmm->theta));
  }
  if (fmm->scale != 1.0 || fmm->shift != 0.0 || fmm->diag) PetscCall(PetscViewerASCIIPrintf(viewer, "  operator: %g K + %g I%s\n", (double)fmm->scale, (double)fmm->shift, fmm->diag ? " + diag(d)" : ""));
  if (fmm->setup) {
    FMMPlan    *P = &fmm->plan;
    PetscInt64  loc[4], sum[4], mx[4];
    PetscMPIInt size;
    loc[0] = P->M;
    loc[1] = P->nfar;
    loc[2] = (PetscInt64)P->p2ppairs;
    loc[3] = P->maxleaftgt;
    PetscCallMPI(MPI_Allreduce(loc, sum, 4, MPIU_INT64, MPI_SUM, PetscObjectComm((PetscObject)A)));
    PetscCallMPI(MPI_Allreduce(loc, mx, 4, MPIU_INT64, MPI_MAX, PetscObjectComm((PetscObject)A)));
    PetscCallMPI(MPI_Comm_size(PetscObjectComm((PetscObject)A), &size));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  tree: %" PetscInt_FMT " sources, %" PetscInt64_FMT " targets, %" PetscInt_FMT " levels below the root, %" PetscInt_FMT " leaves, %" PetscInt_FMT " boxes (%s splits)\n", P->N, sum[0], P->L, P->nleaves, P->nboxes, fmm->split_median ? "median" : "compact"));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  leaf boxes: at most %" PetscInt_FMT " sources, %" PetscInt64_FMT " targets (mean %.1f sources)\n", P->maxleafsrc, mx[3], (double)P->N / (double)P->nleaves));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  interactions per product: %" PetscInt64_FMT " M2L, %" PetscInt64_FMT " P2P pairs (%.1f per target)\n", sum[1], sum[2], sum[0] ? (double)sum[2] / (double)sum[0] : 0.0));
    if (size > 1) PetscCall(PetscViewerASCIIPrintf(viewer, "  MPI: all %" PetscInt_FMT " sources replicated on each of %d ranks; each rank evaluates its own targets\n", P->N, (int)size));
    if (fmm->ops && fmm->ops->view) PetscCall((*fmm->ops->view)(A, viewer));
  } else PetscCall(PetscViewerASCIIPrintf(viewer, "  (not assembled: no tree yet)\n"));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatDestroy_FMM(Mat A)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCall(MatFMMInvalidate(A));
  PetscCall(FreeSources(fmm));
  PetscCall(FreeTargets(fmm));
  PetscCall(VecDestroy(&fmm->diag));
  PetscCall(PetscFree(A->data));
  PetscCall(PetscObjectChangeTypeName((PetscObject)A, NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetSources_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTargets_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetKernel_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetClusteringThreshold_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetExpansionOrder_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTolerance_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTheta_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetLayout_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetMethod_C", NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetDevice_C", NULL));
  PetscFunctionReturn(0);
}

/*MC
   MATFMM - "fmm" - A matrix whose product is a 2D fast multipole method for
   the Laplace single layer, double layer, or their combination, on the CPU
   (OpenMP) or a GPU (CUDA).

   An M x N `MATFMM` maps densities on N sources (columns) to potentials at M
   targets (rows); with no targets set the targets are the sources.  Rows and
   columns are distributed by PETSc's layouts; in this version every rank holds
   all sources and evaluates its own targets.

   Options Database Keys:
+  -mat_type fmm - select this type with `MatSetFromOptions()`
.  -mat_fmm_ct <ct> - clustering threshold, points per leaf box (default 32 on the CPU, 64 with CUDA)
.  -mat_fmm_p <p> - expansion order (default: from -mat_fmm_eps)
.  -mat_fmm_eps <eps> - requested relative accuracy (default 1e-10)
.  -mat_fmm_theta <theta> - separation parameter of the theta-criterion (default 0.5)
.  -mat_fmm_tree_split <compact,median> - how a box is cut in two: at the cut within n/32 points of the median, in x or y, whose children have the least sum of bounding-box half-perimeters (default), or at the median along the longer side (the seed's rule)
.  -mat_fmm_layout <tiled,indexing,repetition> - near-field layout (default tiled)
.  -mat_fmm_repetition_mb <mb> - memory budget of the repetition layout (default 256)
.  -mat_fmm_method <fmm,direct> - FMM or exact summation (default fmm)
.  -mat_fmm_device <auto,cpu,cuda> - where to compute (default auto)
.  -mat_fmm_cuda_m2l <tc,fma> - CUDA M2L on the FP64 tensor cores (default) or by unrolled FMAs
.  -mat_fmm_cuda_log <fast,libm> - CUDA near-field log from a table (default; within 1e-16 absolute) or the math library
.  -mat_fmm_cuda_tree <gpu,cpu> - CUDA backend: tree and interaction lists built on the GPU (default) or on the CPU and uploaded
.  -mat_fmm_cuda_p2p_symmetric <bool> - CUDA tiled P2P evaluates each unordered pair of points once, for both of its sums (default true; used when the targets are the sources on one rank, with the single layer, the table log and 8 to 256 points per leaf)
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
   `MatView()`, `MatComputeOperator()`.  A program that does not link
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
  A->data               = (void *)fmm;
  fmm->ntgt             = -1;
  fmm->badsrc           = fmm->badnrm = fmm->badwts = fmm->badtgt = -1;
  fmm->srcdistinct      = -1;
  fmm->nsrc             = -1; /* MatFMMSetSources() not called yet */
  fmm->kernel           = MATFMM_KERNEL_SINGLE;
  fmm->alpha            = 0.0;
  fmm->beta             = 1.0;
  fmm->ct               = 32; /* CPU default; 64 with CUDA unless set (see MatFMMSetClusteringThreshold()) */
  fmm->cuda_m2l_tc      = PETSC_TRUE;
  fmm->cuda_log_fast    = PETSC_TRUE;
  fmm->cuda_p2p_sym     = PETSC_TRUE;
  fmm->cuda_split_local = PETSC_TRUE;
  fmm->cuda_key_bits    = 32;
  fmm->cuda_list_room   = 16;
  fmm->cuda_tree_gpu    = PETSC_TRUE;
  fmm->p_user           = 0;
  fmm->eps              = 1e-10;
  fmm->theta            = 0.5;
  fmm->layout           = MATFMM_LAYOUT_TILED;
  fmm->method           = MATFMM_METHOD_FMM;
  fmm->device           = MATFMM_DEVICE_AUTO;
  fmm->repetition_mb    = 256.0;
  fmm->scale            = 1.0;
  fmm->shift            = 0.0;

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
  A->assembled           = PETSC_FALSE;

  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetSources_C", MatFMMSetSources_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTargets_C", MatFMMSetTargets_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetKernel_C", MatFMMSetKernel_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetClusteringThreshold_C", MatFMMSetClusteringThreshold_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetExpansionOrder_C", MatFMMSetExpansionOrder_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTolerance_C", MatFMMSetTolerance_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTheta_C", MatFMMSetTheta_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetLayout_C", MatFMMSetLayout_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetMethod_C", MatFMMSetMethod_FMM));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetDevice_C", MatFMMSetDevice_FMM));
  PetscCall(PetscObjectChangeTypeName((PetscObject)A, MATFMM));
  PetscFunctionReturn(0);
}

/*@
   MatCreateFMM - Creates a `MATFMM` with given sizes (sources and targets are set afterwards).

   Collective

   Input Parameters:
+  comm - MPI communicator
.  m    - local number of targets (rows), or `PETSC_DECIDE`
.  n    - local number of sources (columns), or `PETSC_DECIDE`
.  M    - global number of targets, or `PETSC_DETERMINE`
-  N    - global number of sources, or `PETSC_DETERMINE`

   Output Parameter:
.  A - the matrix

   Notes:
   Equivalent to `MatCreate()`, `MatSetSizes()`, `MatSetType`(A, `MATFMM`).
   Then call `MatFMMSetSources()`, optionally `MatFMMSetTargets()`,
   `MatFMMSetKernel()` and `MatSetFromOptions()`, and assemble.

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetSources()`
@*/
PetscErrorCode MatCreateFMM(MPI_Comm comm, PetscInt m, PetscInt n, PetscInt M, PetscInt N, Mat *A)
{
  PetscFunctionBegin;
  PetscCall(PetscFMMInitializePackage());
  PetscCall(MatCreate(comm, A));
  PetscCall(MatSetSizes(*A, m, n, M, N));
  PetscCall(MatSetType(*A, MATFMM));
  PetscFunctionReturn(0);
}
