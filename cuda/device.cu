/* CUDA device detection and selection, and device allocation with a clear out-of-memory error.
   A machine without a GPU or driver reports 0 devices. */
#include "fmmcuda.h"

extern "C" PetscErrorCode FMMCUDADeviceCount(int *n)
{
  *n = 0;
  if (cudaGetDeviceCount(n) != cudaSuccess) {
    *n = 0;
    (void)cudaGetLastError(); /* clear the sticky "no device"/"no driver" error */
  }
  return 0;
}

/* one GPU per MPI rank: rank (in PETSC_COMM_WORLD) modulo the number of visible devices */
PetscErrorCode FMMCUDASelectDevice(MPI_Comm comm, int *dev)
{
  int         n = 0;
  PetscMPIInt rank;

  PetscFunctionBegin;
  (void)comm;
  PetscCall(FMMCUDADeviceCount(&n));
  PetscCheck(n > 0, PETSC_COMM_SELF, PETSC_ERR_SUP, "MATFMM CUDA: no CUDA GPU found");
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  *dev = (int)(rank % n);
  FMMCallCUDA(cudaSetDevice(*dev));
  PetscFunctionReturn(0);
}

PetscBool FMMCUDAPool = PETSC_FALSE;

/* out of memory: what did not fit, and how much the GPU has free */
static PetscErrorCode OutOfMemory(size_t bytes, const char *what)
{
  size_t fr = 0, tot = 0;
  int    dev = -1;

  PetscFunctionBegin;
  (void)cudaGetLastError();
  (void)cudaGetDevice(&dev);
  (void)cudaMemGetInfo(&fr, &tot);
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_MEM, "MATFMM CUDA: out of GPU memory: %s needs %.1f MB, GPU %d has %.1f MB free of %.1f MB; use more GPUs (MPI ranks), a smaller -mat_fmm_repetition_mb or -mat_fmm_layout tiled, or -mat_fmm_device cpu", what, bytes / 1048576.0, dev, fr / 1048576.0, tot / 1048576.0);
}

/*
  Device memory in stream order (cudaMallocAsync) from the device's default
  pool, which keeps what is freed (FMMCUDAInitializeContext sets no release
  threshold): a cudaMalloc maps fresh pages and a cudaFree waits for the whole
  device, which made most of an assembly's time; from the pool the
  temporaries of the tree build, and a later assembly, reuse mapped memory.
  Out of memory, the pool's unused memory is released and the allocation tried
  once more.  Without pool support, plain cudaMalloc/cudaFree.
*/
PetscErrorCode FMMCUDAMalloc(cudaStream_t s, void **p, size_t bytes, const char *what)
{
  cudaError_t e;

  PetscFunctionBegin;
  *p = NULL;
  if (!bytes) PetscFunctionReturn(0);
  e = FMMCUDAPool ? cudaMallocAsync(p, bytes, s) : cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation && FMMCUDAPool) {
    int          dev = 0;
    cudaMemPool_t pool;
    (void)cudaGetLastError();
    FMMCallCUDA(cudaDeviceSynchronize()); /* frees still in flight reach the pool */
    FMMCallCUDA(cudaGetDevice(&dev));
    FMMCallCUDA(cudaDeviceGetDefaultMemPool(&pool, dev));
    FMMCallCUDA(cudaMemPoolTrimTo(pool, 0));
    e = cudaMallocAsync(p, bytes, s);
  }
  if (e == cudaErrorMemoryAllocation) {
    *p = NULL;
    PetscCall(OutOfMemory(bytes, what));
  }
  FMMCallCUDA(e);
  PetscFunctionReturn(0);
}

/* back to the pool after the work queued on s before it */
PetscErrorCode FMMCUDAFree(cudaStream_t s, void *p)
{
  PetscFunctionBegin;
  if (p) FMMCallCUDA(FMMCUDAPool ? cudaFreeAsync(p, s) : cudaFree(p));
  PetscFunctionReturn(0);
}

FMMCUDAStage FMMCUDAStaging;

static PetscErrorCode FMMCUDAFinalizeContext(void)
{
  PetscFunctionBegin;
  if (FMMCUDAStaging.in) (void)cudaFreeHost(FMMCUDAStaging.in);
  if (FMMCUDAStaging.out) (void)cudaFreeHost(FMMCUDAStaging.out);
  for (int k = 0; k < FMM_STAGE_CHUNKS; k++) {
    if (FMMCUDAStaging.evin[k]) (void)cudaEventDestroy(FMMCUDAStaging.evin[k]);
    if (FMMCUDAStaging.evout[k]) (void)cudaEventDestroy(FMMCUDAStaging.evout[k]);
  }
  if (FMMCUDAPool) { /* give the pool's unused memory back */
    int           dev = 0;
    cudaMemPool_t pool;
    if (cudaDeviceSynchronize() == cudaSuccess && cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) (void)cudaMemPoolTrimTo(pool, 0);
  }
  (void)cudaGetLastError();
  PetscCall(PetscMemzero(&FMMCUDAStaging, sizeof(FMMCUDAStaging)));
  PetscFunctionReturn(0);
}

/* at every call: selects this rank's device; once per process: its context
   (cudaFree(0) creates it), the memory pool's policy and the pinned staging
   rings (pinning memory takes milliseconds per MB, so it is done once, not at
   every assembly) */
PetscErrorCode FMMCUDAInitializeContext(void)
{
  static PetscBool done = PETSC_FALSE;
  int              dev;
  const size_t     bytes = sizeof(double) * FMM_STAGE_CHUNKS * FMM_STAGE_SLOT;

  PetscFunctionBegin;
  if (done) {
    PetscCall(FMMCUDASelectDevice(PETSC_COMM_WORLD, &dev));
    PetscFunctionReturn(0);
  }
  PetscCall(FMMCUDASelectDevice(PETSC_COMM_WORLD, &dev));
  FMMCallCUDA(cudaFree(0));
  { /* stream-ordered allocation from the default pool, keeping what is freed (see FMMCUDAMalloc) */
    int           pools = 0;
    cudaMemPool_t pool;
    uint64_t      keep = UINT64_MAX;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) == cudaSuccess && pools && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess && cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess) FMMCUDAPool = PETSC_TRUE;
    (void)cudaGetLastError();
  }
  if (cudaMallocHost((void **)&FMMCUDAStaging.in, bytes) != cudaSuccess || cudaMallocHost((void **)&FMMCUDAStaging.out, bytes) != cudaSuccess) { /* copies then go direct */
    if (FMMCUDAStaging.in) (void)cudaFreeHost(FMMCUDAStaging.in);
    FMMCUDAStaging.in = FMMCUDAStaging.out = NULL;
  }
  (void)cudaGetLastError();
  for (int k = 0; k < FMM_STAGE_CHUNKS; k++) {
    FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evin[k], cudaEventDisableTiming));
    FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evout[k], cudaEventDisableTiming));
  }
  PetscCall(PetscRegisterFinalize(FMMCUDAFinalizeContext));
  done = PETSC_TRUE;
  PetscFunctionReturn(0);
}
