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

/* cudaMalloc that reports what did not fit, and how much was free */
PetscErrorCode FMMCUDAMalloc(void **p, size_t bytes, const char *what)
{
  cudaError_t e;

  PetscFunctionBegin;
  *p = NULL;
  if (!bytes) PetscFunctionReturn(0);
  e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    size_t fr = 0, tot = 0;
    int    dev = -1;
    (void)cudaGetLastError();
    (void)cudaGetDevice(&dev);
    (void)cudaMemGetInfo(&fr, &tot);
    *p = NULL;
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_MEM, "MATFMM CUDA: out of GPU memory: %s needs %.1f MB, GPU %d has %.1f MB free of %.1f MB; use more GPUs (MPI ranks), a smaller -mat_fmm_repetition_mb or -mat_fmm_layout tiled, or -mat_fmm_device cpu", what, bytes / 1048576.0, dev, fr / 1048576.0, tot / 1048576.0);
  }
  FMMCallCUDA(e);
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
  (void)cudaGetLastError();
  PetscCall(PetscMemzero(&FMMCUDAStaging, sizeof(FMMCUDAStaging)));
  PetscFunctionReturn(0);
}

/* once per process: this rank's device, its context (cudaFree(0) creates it)
   and the pinned staging rings (pinning memory takes milliseconds per MB,
   so it is done once, not at every assembly) */
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
