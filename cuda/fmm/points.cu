/* The caller's points, normals and weights given in device memory
   (MatFMMSetSources(), MatFMMSetTargets()): recognised, copied into the
   matrix's block on the GPU with the NaN/Inf check of the host copy, and
   brought to the host where a host path needs them. */
#include "fmmcuda.h"

/* cuCtxGetCurrent through the runtime's driver entry points (the library
   does not link libcuda, so that it loads where there is no driver):
   whether this thread has a CUDA context.  Without one no device pointer
   can be the caller's, and asking the runtime about a pointer
   (cudaPointerGetAttributes) would initialise its primary context (about
   0.25 s and GPU memory) for a user who never uses the GPU. */
typedef int (*FMMCtxGetCurrent)(void **);

static PetscBool HasContext(void)
{
  static FMMCtxGetCurrent get  = NULL;
  static PetscBool        init = PETSC_FALSE, nodev = PETSC_FALSE;
  void                   *ctx  = NULL;

  if (!init) {
    int n = 0;
    init = PETSC_TRUE;
    (void)FMMCUDADeviceCount(&n);
    nodev = n == 0 ? PETSC_TRUE : PETSC_FALSE;
#if CUDART_VERSION >= 12050
    {
      cudaDriverEntryPointQueryResult q;
      if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", (void **)&get, 12000, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess) get = NULL;
    }
#elif CUDART_VERSION >= 12000
    {
      cudaDriverEntryPointQueryResult q;
      if (cudaGetDriverEntryPoint("cuCtxGetCurrent", (void **)&get, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess) get = NULL;
    }
#endif
    (void)cudaGetLastError();
  }
  if (nodev) return PETSC_FALSE;
  if (!get) return PETSC_TRUE; /* cannot tell: ask about the pointer (a context then exists) */
  return (get(&ctx) == 0 && ctx) ? PETSC_TRUE : PETSC_FALSE;
}

/* *dev: whether p is device memory (cudaMemoryTypeDevice; managed and
   page-locked memory the host reads as its own) */
PetscErrorCode FMMCUDAIsDeviceMemory(const void *p, PetscBool *dev)
{
  cudaPointerAttributes at;

  PetscFunctionBegin;
  *dev = PETSC_FALSE;
  if (!p || !HasContext()) PetscFunctionReturn(0);
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    (void)cudaGetLastError();
    PetscFunctionReturn(0);
  }
  *dev = at.type == cudaMemoryTypeDevice ? PETSC_TRUE : PETSC_FALSE;
  PetscFunctionReturn(0);
}

/* the matrix's block of n reals on this rank's GPU: from petscfmm's pool
   where -mat_fmm_cuda_pool_reserve grew it (memory already mapped; on the
   side stream 0, waited for, so that any stream may use it), else by
   cudaMalloc (FMMCUDAMallocKept), which was faster than fresh pool memory
   for a first large copy */
PetscErrorCode FMMCUDAPointsAlloc(size_t n, PetscReal **d)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAInitializeContext()); /* this rank's device */
  if (FMMCUDAPoolReserved) {
    PetscCall(FMMCUDAMalloc(FMMCUDAStaging.side[0], (void **)d, sizeof(PetscReal) * n, "the copy of the points given in device memory"));
    FMMCallCUDA(cudaStreamSynchronize(FMMCUDAStaging.side[0]));
  } else PetscCall(FMMCUDAMallocKept((void **)d, sizeof(PetscReal) * n, "the copy of the points given in device memory"));
  PetscFunctionReturn(0);
}

/* once every stream is done with it, as cudaFree waits (the context may be gone at exit: errors ignored) */
PetscErrorCode FMMCUDAPointsFree(PetscReal *d)
{
  PetscFunctionBegin;
  if (d && FMMCUDAPoolReserved) {
    if (cudaDeviceSynchronize() != cudaSuccess || cudaFreeAsync(d, FMMCUDAStaging.side[0]) != cudaSuccess) (void)cudaGetLastError();
  } else if (d && cudaFree(d) != cudaSuccess) (void)cudaGetLastError();
  PetscFunctionReturn(0);
}

/* the smallest of each warp's values to *r, one atomic a warp */
__device__ static void WarpMinAtomic(unsigned long long v, unsigned long long *r)
{
  for (int o = 16; o > 0; o /= 2) {
    const unsigned long long w = __shfl_down_sync(0xffffffffu, v, o);
    v                          = w < v ? w : v;
  }
  if ((threadIdx.x & 31) == 0 && v != ~0ull) atomicMin(r, v);
}

/* the arrays of FMMCUDACopyChecked: s[k] to d[k], n[k] reals each */
typedef struct {
  const double *s[4];
  double       *d[4];
  PetscInt64    n[4];
  int           na, distinct, range;
} CopyArrays;

/* a finite double as an unsigned key of the same order (negative numbers
   reversed below the positive ones), and back: min and max by atomicMin */
__device__ static unsigned long long OrderKey(double v)
{
  const unsigned long long u = (unsigned long long)__double_as_longlong(v);
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

static double FromOrderKey(unsigned long long k)
{
  const unsigned long long u = (k >> 63) ? (k & 0x7fffffffffffffffull) : ~k;
  double                   v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

/* d[k] = s[k] for every array k < na, with r[k] the first index of a
   NaN/Inf in array k and, with distinct, r[4] the first point of array 0
   (interleaved x, y) not at the place of its point 0 (point p is at another
   place where s[0][2p] or s[0][2p+1] differs from that coordinate of point
   0); r[k] unchanged where there is none.  With range, r[5..8] the order
   keys of array 0's xmin, ymin and the complements of its xmax, ymax.  One
   launch for all the arrays and the checks (four launches before: on an idle
   GPU each cost its wake-up) */
__global__ static void CopyCheckKernel(CopyArrays a, unsigned long long *r)
{
  const PetscInt64 stride = (PetscInt64)gridDim.x * blockDim.x;
  const double     p0[2]  = {a.distinct ? a.s[0][0] : 0.0, a.distinct ? a.s[0][1] : 0.0};
  for (int k = 0; k < a.na; k++) {
    const double *__restrict__ s = a.s[k];
    double *__restrict__ d       = a.d[k];
    unsigned long long first = ~0ull, other = ~0ull, lo[2] = {~0ull, ~0ull}, hi[2] = {~0ull, ~0ull};
    for (PetscInt64 i = blockIdx.x * (PetscInt64)blockDim.x + threadIdx.x; i < a.n[k]; i += stride) {
      const double v = s[i];
      d[i]           = v;
      if (!(fabs(v) <= DBL_MAX)) {
        if ((unsigned long long)i < first) first = (unsigned long long)i;
      } else if (k == 0 && a.range) { /* stride is even: a thread sees only x or only y */
        const unsigned long long key = OrderKey(v);
        lo[i & 1]                    = key < lo[i & 1] ? key : lo[i & 1];
        hi[i & 1]                    = ~key < hi[i & 1] ? ~key : hi[i & 1];
      }
      if (k == 0 && a.distinct && v != p0[i & 1] && (unsigned long long)(i / 2) < other) other = (unsigned long long)(i / 2);
    }
    WarpMinAtomic(first, r + k);
    if (k == 0 && a.distinct) WarpMinAtomic(other, r + 4);
    if (k == 0 && a.range)
      for (int c = 0; c < 2; c++) {
        WarpMinAtomic(lo[c], r + 5 + c);
        WarpMinAtomic(hi[c], r + 7 + c);
      }
  }
}

/*
  FMMCUDACopyChecked - dst[k][0..n[k]) = src[k][0..n[k]) for k < na (device
  arrays, the caller's and the matrix's), with bad[k] the index of the first
  NaN/Inf of array k (-1: none) and badv[k] its value; with distinct not
  NULL, *distinct the first point of array 0 (interleaved x, y) at another
  place than its point 0 (-1: all at one place); with range not NULL, the
  xmin, xmax, ymin, ymax of array 0's finite points (n[0] = 0: +inf, -inf).
  Reads the caller's arrays after the work queued on the legacy default
  stream, and returns when they may be changed.
*/
PetscErrorCode FMMCUDACopyChecked(PetscInt na, PetscReal *const dst[], const PetscReal *const src[], const PetscInt n[], PetscInt bad[], PetscReal badv[], PetscInt *distinct, PetscReal range[4])
{
  unsigned long long *r, h[10];
  int                 sms = 1, dev = 0;
  cudaStream_t        s;

  PetscFunctionBegin;
  PetscCheck(na <= 4, PETSC_COMM_SELF, PETSC_ERR_PLIB, "at most 4 arrays");
  PetscCall(FMMCUDAInitializeContext());
  s = FMMCUDAStaging.copy; /* made once: a stream made and destroyed per call costs the host */
  FMMCallCUDA(cudaEventRecord(FMMCUDAStaging.evlegacy, 0)); /* after the legacy default stream's work */
  FMMCallCUDA(cudaStreamWaitEvent(s, FMMCUDAStaging.evlegacy, 0));
  FMMCallCUDA(cudaGetDevice(&dev));
  FMMCallCUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  PetscCall(FMMCUDAMalloc(s, (void **)&r, sizeof(h), "the check of the points"));
  FMMCallCUDA(cudaMemsetAsync(r, 0xff, sizeof(h), s));
  {
    CopyArrays a;
    PetscInt64 tot = 0;
    PetscCall(PetscMemzero(&a, sizeof(a)));
    a.na       = (int)na;
    a.distinct = (distinct && n[0] > 2) ? 1 : 0;
    a.range    = range ? 1 : 0;
    for (PetscInt k = 0; k < na; k++) {
      a.s[k] = src[k];
      a.d[k] = dst[k];
      a.n[k] = n[k];
      tot += n[k];
    }
    if (tot) CopyCheckKernel<<<(unsigned)PetscMax(1, PetscMin((PetscInt64)4 * sms, (tot + 255) / 256)), 256, 0, s>>>(a, r);
    FMMCheckLaunch();
  }
  PetscCall(FMMCUDAReadback(s, h, r, sizeof(h)));
  for (PetscInt k = 0; k < na; k++) {
    bad[k]  = h[k] == ~0ull ? -1 : (PetscInt)h[k];
    badv[k] = 0.0;
    if (bad[k] >= 0) FMMCallCUDA(cudaMemcpy(&badv[k], dst[k] + bad[k], sizeof(PetscReal), cudaMemcpyDeviceToHost));
  }
  if (distinct) *distinct = (n[0] > 2 && h[4] != ~0ull) ? (PetscInt)h[4] : -1;
  if (range)
    for (int c = 0; c < 2; c++) { /* no finite point: keys at their initial value */
      range[2 * c]     = h[5 + c] == ~0ull ? PETSC_INFINITY : FromOrderKey(h[5 + c]);
      range[2 * c + 1] = h[7 + c] == ~0ull ? PETSC_NINFINITY : FromOrderKey(~h[7 + c]);
    }
  PetscCall(FMMCUDAFree(s, r));
  PetscFunctionReturn(0);
}

/* loads the kernel of FMMCUDACopyChecked (CUDA loads a kernel at its first
   use, a launch or a query of its attributes), which the warm-up product
   (host points) does not run: a first MatFMMSetSources() with points in GPU
   memory would otherwise pay that load */
PetscErrorCode FMMCUDAPointsLoad(void)
{
  cudaFuncAttributes at;

  PetscFunctionBegin;
  FMMCallCUDA(cudaFuncGetAttributes(&at, CopyCheckKernel));
  PetscFunctionReturn(0);
}

/* h[0..n) = d[0..n) (device to host, waits) */
PetscErrorCode FMMCUDAPointsToHost(PetscReal *h, const PetscReal *d, size_t n)
{
  PetscFunctionBegin;
  if (n) FMMCallCUDA(cudaMemcpy(h, d, sizeof(PetscReal) * n, cudaMemcpyDeviceToHost));
  PetscFunctionReturn(0);
}

/* ---- the page-locked block's copy in GPU memory (FMMCUDAMat.pinned, one rank)

   A time-stepping code refills the sources before each assembly.  Once the
   matrix's block is page-locked (FMMCUDAPinSources, settings.cu), MatFMMSetSources()
   sends each array of it to this copy once the array is copied in, so the
   points go up while the host copies the normals and weights, and the
   assembly finds the points on the GPU (as points given in device memory):
   the upload no longer follows the copy.  The copy lives with the block
   (FMM_SOURCES_FREE, settings.cu).
   It is made at the 9th refill, after assemblies of the same sizes have
   grown petscfmm's pool to what they need (the pool keeps it), so it takes
   memory that no later assembly of this matrix asks for; where cudaMalloc
   finds none, the assemblies upload the block as before. */
struct _n_FMMCUDAMirror {
  double     *d;     /* the block's copy (NULL: refused, no GPU memory); its DMAs on the side stream 0 */
  cudaEvent_t ev[2]; /* after the points (0), after the whole block (1) */
  PetscBool   full;  /* d holds the block of the last MatFMMSetSources() */
};

/* before the block (n reals, the same at every call: new sizes free the
   copy with the block) is refilled: the copy made if needed, the last DMAs
   out of the block waited for; *ok: the arrays may be sent (false where
   there was no GPU memory for the copy: the assembly uploads the block) */
PetscErrorCode FMMCUDAMirrorBegin(FMMCUDAMirror *mp, size_t n, PetscBool *ok)
{
  FMMCUDAMirror m = *mp;

  PetscFunctionBegin;
  if (!m) {
    cudaError_t e;
    PetscCall(FMMCUDAInitializeContext());
    PetscCall(PetscNew(mp));
    m = *mp;
    for (int k = 0; k < 2; k++) FMMCallCUDA(cudaEventCreateWithFlags(&m->ev[k], cudaEventDisableTiming));
    e = cudaMalloc((void **)&m->d, sizeof(double) * n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      m->d = NULL;
      PetscCall(PetscInfo(NULL, "MATFMM CUDA: no GPU memory for a copy of the page-locked sources (%.1f MB: %s); each assembly uploads them\n", sizeof(double) * n / 1048576.0, cudaGetErrorString(e)));
    }
  }
  FMMCallCUDA(cudaEventSynchronize(m->ev[1])); /* the block is read by the last DMAs */
  m->full = PETSC_FALSE;
  *ok     = m->d ? PETSC_TRUE : PETSC_FALSE;
  PetscFunctionReturn(0);
}

/* block[off, off + cnt) to the copy (the block is page-locked: a DMA, the host goes on) */
PetscErrorCode FMMCUDAMirrorPut(FMMCUDAMirror m, const PetscReal *block, size_t off, size_t cnt)
{
  PetscFunctionBegin;
  if (cnt) FMMCallCUDA(cudaMemcpyAsync(m->d + off, block + off, sizeof(double) * cnt, cudaMemcpyHostToDevice, FMMCUDAStaging.side[0]));
  PetscFunctionReturn(0);
}

/* after the points (k = 0) or the whole block (k = 1, the copy is then complete) were sent */
PetscErrorCode FMMCUDAMirrorMark(FMMCUDAMirror m, int k)
{
  PetscFunctionBegin;
  FMMCallCUDA(cudaEventRecord(m->ev[k], FMMCUDAStaging.side[0]));
  if (k == 1) m->full = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* the copy, or NULL where it does not hold the block of the last MatFMMSetSources() */
const double *FMMCUDAMirrorData(FMMCUDAMirror m)
{
  return m && m->full ? m->d : NULL;
}

/* stream s waits for the copy's points (k = 0) or all of it (k = 1) to be sent */
PetscErrorCode FMMCUDAMirrorWait(FMMCUDAMirror m, cudaStream_t s, int k)
{
  PetscFunctionBegin;
  FMMCallCUDA(cudaStreamWaitEvent(s, m->ev[k], 0));
  PetscFunctionReturn(0);
}

/* after its DMAs, before the block is unlocked or freed (the context may be gone at exit: errors ignored) */
PetscErrorCode FMMCUDAMirrorDestroy(FMMCUDAMirror *mp)
{
  FMMCUDAMirror m = *mp;

  PetscFunctionBegin;
  if (!m) PetscFunctionReturn(0);
  (void)cudaEventSynchronize(m->ev[1]);
  if (m->d) (void)cudaFree(m->d);
  for (int k = 0; k < 2; k++) (void)cudaEventDestroy(m->ev[k]);
  (void)cudaGetLastError();
  PetscCall(PetscFree(*mp));
  PetscFunctionReturn(0);
}
