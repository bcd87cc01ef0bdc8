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

cudaMemPool_t FMMCUDAPool = NULL;
PetscBool     FMMCUDAPoolReserved = PETSC_FALSE;

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
  FMMCUDAMalloc: device memory in stream order (cudaMallocFromPoolAsync) from petscfmm's own
  memory pool on this rank's device, which keeps what is freed (no release
  threshold; FMMCUDAInitializeContext creates it): a cudaFree waits for the
  whole device and a cudaMalloc maps fresh pages, while from the pool the
  temporaries of the tree build, and a later assembly, reuse mapped memory.
  The pool is our own so that the device's default pool, which other
  libraries may use, keeps its settings.  Out of memory, the pool's unused
  memory is released and the allocation tried once more.  Without pool
  support, plain cudaMalloc/cudaFree.
*/
static PetscErrorCode Malloc(cudaStream_t s, PetscBool pool, void **p, size_t bytes, const char *what)
{
  cudaError_t e;

  PetscFunctionBegin;
  *p = NULL;
  if (!bytes) PetscFunctionReturn(0);
  e = pool ? cudaMallocFromPoolAsync(p, bytes, FMMCUDAPool, s) : cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation && FMMCUDAPool) {
    (void)cudaGetLastError();
    FMMCallCUDA(cudaDeviceSynchronize()); /* frees still in flight reach the pool */
    FMMCallCUDA(cudaMemPoolTrimTo(FMMCUDAPool, 0));
    e = pool ? cudaMallocFromPoolAsync(p, bytes, FMMCUDAPool, s) : cudaMalloc(p, bytes);
  }
  if (e == cudaErrorMemoryAllocation) {
    *p = NULL;
    PetscCall(OutOfMemory(bytes, what));
  }
  FMMCallCUDA(e);
  PetscFunctionReturn(0);
}

PetscErrorCode FMMCUDAMalloc(cudaStream_t s, void **p, size_t bytes, const char *what)
{
  PetscFunctionBegin;
  PetscCall(Malloc(s, FMMCUDAPool ? PETSC_TRUE : PETSC_FALSE, p, bytes, what));
  PetscFunctionReturn(0);
}

/* memory that lives with a matrix rather than an assembly (cudaMalloc):
   taken from the pool (on the legacy stream), it left the pool short for
   another matrix's assembly, whose allocations then waited; a second pool of
   its own was slower than cudaMalloc for a first large copy */
PetscErrorCode FMMCUDAMallocKept(void **p, size_t bytes, const char *what)
{
  PetscFunctionBegin;
  PetscCall(Malloc(0, PETSC_FALSE, p, bytes, what));
  PetscFunctionReturn(0);
}

/* back to the pool after the work queued on s before it */
PetscErrorCode FMMCUDAFree(cudaStream_t s, void *p)
{
  PetscFunctionBegin;
  if (p) FMMCallCUDA(FMMCUDAPool ? cudaFreeAsync(p, s) : cudaFree(p));
  PetscFunctionReturn(0);
}

/*
  The constant tables of the products (the near field's log table, the
  expansions' binomial table and M2L matrices) are the same for every matrix
  of one expansion order, so each is built once per process, device and key
  (its first assembly) and kept, in cudaMalloc memory, until PetscFinalize().
  An assembly again only looks them up: uploading them each time cost three
  waits for the GPU and host time at every assembly.  FMMCUDATableFind: the table what/key of this device, or NULL;
  FMMCUDATableKeep: h (bytes) copied to a new table what/key of this device.
*/
typedef struct FMMCUDATable_ {
  int                    dev;
  const char            *what; /* a string literal of the caller: compared as text */
  PetscInt               key;
  void                  *d;
  struct FMMCUDATable_ *next;
} FMMCUDATable;
static FMMCUDATable *FMMCUDATables = NULL;

void *FMMCUDATableFind(int dev, const char *what, PetscInt key)
{
  for (FMMCUDATable *t = FMMCUDATables; t; t = t->next)
    if (t->dev == dev && t->key == key && !strcmp(t->what, what)) return t->d;
  return NULL;
}

PetscErrorCode FMMCUDATableKeep(int dev, const char *what, PetscInt key, const void *h, size_t bytes, void **d)
{
  FMMCUDATable *t;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMallocKept(d, bytes, what));
  FMMCallCUDA(cudaMemcpy(*d, h, bytes, cudaMemcpyHostToDevice));
  FMMCallCUDA(cudaDeviceSynchronize()); /* a copy from pageable memory may return before it lands, and the kernels run on other streams */
  PetscCall(PetscNew(&t));
  *t            = FMMCUDATable{dev, what, key, *d, FMMCUDATables};
  FMMCUDATables = t;
  PetscFunctionReturn(0);
}

FMMCUDAStage FMMCUDAStaging;

/* h = d (bytes) once the work queued on s is done: the sizes an assembly
   reads back, through the pinned buffer (a copy into pageable memory costs
   a few microseconds more, and an assembly makes a dozen).  d may be the
   pinned buffer itself (FMMCUDAReadbackTarget), written by the kernels:
   then no copy follows them */
PetscErrorCode FMMCUDAReadback(cudaStream_t s, void *h, const void *d, size_t bytes)
{
  void *buf = (FMMCUDAStaging.scal && bytes <= sizeof(long long) * FMM_STAGE_SCAL) ? (void *)FMMCUDAStaging.scal : h;

  PetscFunctionBegin;
  if (d != buf) FMMCallCUDA(cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, s));
  FMMCallCUDA(cudaStreamSynchronize(s));
  if (buf != h) PetscCall(PetscMemcpy(h, buf, bytes));
  PetscFunctionReturn(0);
}

/* h = d (bytes, to pageable host memory) once the work queued on s is done,
   through the pinned output ring where there is one (a copy into pageable
   memory runs at a fraction of the bus), each slot's host-side copy on all
   OpenMP threads (FMMCopyBytes: the first touch of fresh memory, its page
   faults, is most of that copy) while the DMA of the next slots runs */
PetscErrorCode FMMCUDAReadbackStaged(cudaStream_t s, void *h, const void *d, size_t bytes)
{
  FMMCUDAStage *st   = &FMMCUDAStaging;
  const size_t  slot = sizeof(double) * FMM_STAGE_SLOT, nch = (bytes + slot - 1) / slot;
  char         *o    = (char *)st->out;

  PetscFunctionBegin;
  if (!bytes) PetscFunctionReturn(0);
  if (!o) {
    FMMCallCUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    FMMCallCUDA(cudaStreamSynchronize(s));
    PetscFunctionReturn(0);
  }
  for (size_t k = 0; k < PetscMin(nch, (size_t)FMM_STAGE_CHUNKS); k++) { /* fill the ring */
    FMMCallCUDA(cudaMemcpyAsync(o + k * slot, (const char *)d + k * slot, PetscMin(slot, bytes - k * slot), cudaMemcpyDeviceToHost, s));
    FMMCallCUDA(cudaEventRecord(st->evout[k], s));
  }
  for (size_t k = 0; k < nch; k++) { /* empty slot k % CHUNKS, then refill it with chunk k + CHUNKS */
    const size_t j = k % FMM_STAGE_CHUNKS, kn = k + FMM_STAGE_CHUNKS;
    FMMCallCUDA(cudaEventSynchronize(st->evout[j]));
    FMMCopyBytes((char *)h + k * slot, o + j * slot, PetscMin(slot, bytes - k * slot));
    if (kn < nch) {
      FMMCallCUDA(cudaMemcpyAsync(o + j * slot, (const char *)d + kn * slot, PetscMin(slot, bytes - kn * slot), cudaMemcpyDeviceToHost, s));
      FMMCallCUDA(cudaEventRecord(st->evout[j], s));
    }
  }
  PetscFunctionReturn(0);
}

/* where kernels may write the bytes of sizes the host reads back next
   (FMMCUDAReadback): the pinned buffer, which they write directly (memory
   of cudaMallocHost is mapped into the GPU's address space under unified
   addressing), so that the host waits for the kernels only and not for a
   copy after them; NULL without it, or without unified addressing */
void *FMMCUDAReadbackTarget(size_t bytes)
{
  return (FMMCUDAStaging.scalmap && bytes <= sizeof(long long) * FMM_STAGE_SCAL) ? (void *)FMMCUDAStaging.scal : NULL;
}

static PetscErrorCode FMMCUDAFinalizeContext(void)
{
  PetscFunctionBegin;
  while (FMMCUDATables) {
    FMMCUDATable *t = FMMCUDATables;
    FMMCUDATables   = t->next;
    (void)cudaFree(t->d);
    PetscCall(PetscFree(t));
  }
  if (FMMCUDAStaging.in) (void)cudaFreeHost(FMMCUDAStaging.in);
  if (FMMCUDAStaging.out) (void)cudaFreeHost(FMMCUDAStaging.out);
  if (FMMCUDAStaging.scal) (void)cudaFreeHost(FMMCUDAStaging.scal);
  for (int k = 0; k < FMM_STAGE_CHUNKS; k++) {
    if (FMMCUDAStaging.evin[k]) (void)cudaEventDestroy(FMMCUDAStaging.evin[k]);
    if (FMMCUDAStaging.evout[k]) (void)cudaEventDestroy(FMMCUDAStaging.evout[k]);
  }
  for (int k = 0; k < 2; k++)
    if (FMMCUDAStaging.side[k]) (void)cudaStreamDestroy(FMMCUDAStaging.side[k]);
  if (FMMCUDAStaging.copy) (void)cudaStreamDestroy(FMMCUDAStaging.copy);
  if (FMMCUDAStaging.evlegacy) (void)cudaEventDestroy(FMMCUDAStaging.evlegacy);
  if (FMMCUDAStaging.evfork) (void)cudaEventDestroy(FMMCUDAStaging.evfork);
  if (FMMCUDAStaging.evjoin) (void)cudaEventDestroy(FMMCUDAStaging.evjoin);
  if (FMMCUDAPool) { /* the pool goes once its last allocation is freed */
    (void)cudaDeviceSynchronize();
    (void)cudaMemPoolTrimTo(FMMCUDAPool, 0);
    (void)cudaMemPoolDestroy(FMMCUDAPool);
    FMMCUDAPool         = NULL;
    FMMCUDAPoolReserved = PETSC_FALSE;
  }
  (void)cudaGetLastError();
  PetscCall(PetscMemzero(&FMMCUDAStaging, sizeof(FMMCUDAStaging)));
  PetscFunctionReturn(0);
}

/*
  -mat_fmm_cuda_pool_reserve <MB>: petscfmm's pool maps that much memory
  when it is made, so that the first assemblies reuse it as later ones do:
  a first assembly otherwise maps its memory fresh, a noticeable part of it
  for large problems.  One allocation of the size, freed at
  once (the pool keeps it).  *mb: the option's value (0: none); checked
  before anything is made.
*/
static PetscErrorCode PoolReserveOption(PetscReal *mb)
{
  PetscFunctionBegin;
  *mb = 0;
  PetscOptionsBegin(PETSC_COMM_SELF, NULL, "petscfmm's GPU memory (read once per process, when its CUDA context is made)", "PetscFMMCUDAInitialize");
  PetscCall(PetscOptionsReal("-mat_fmm_cuda_pool_reserve", "GPU memory (MB) that petscfmm's memory pool maps when it is made, so that first assemblies need not map it (MatView() shows what the pool holds)", "PetscFMMCUDAInitialize", *mb, mb, NULL));
  PetscOptionsEnd();
  PetscCheck((PetscIsNormalReal(*mb) && *mb > 0) || *mb == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_cuda_pool_reserve %g: expected a size in MB, finite and >= 0", (double)*mb);
  PetscFunctionReturn(0);
}

/* the reserve mb (MB) against the GPU's memory, once the context exists and before the pool is made */
static PetscErrorCode PoolReserveCheck(int dev, PetscReal mb)
{
  size_t fr = 0, tot = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cudaMemGetInfo(&fr, &tot));
  PetscCheck(mb <= tot / 1048576.0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_cuda_pool_reserve %g: more than the %.1f MB of GPU %d", (double)mb, tot / 1048576.0, dev);
  PetscFunctionReturn(0);
}

/* one allocation of mb MB from the pool, freed at once (the pool keeps it);
   more than the GPU has free is PETSC_ERR_MEM with the free memory before
   the attempt (after a failed one the pool may hold what it had mapped) */
static PetscErrorCode PoolReserve(int dev, PetscReal mb)
{
  size_t      fr = 0, tot = 0, bytes = (size_t)(mb * 1048576.0);
  cudaError_t e;
  void       *p = NULL;

  PetscFunctionBegin;
  if (!bytes || !FMMCUDAPool) PetscFunctionReturn(0);
  FMMCallCUDA(cudaMemGetInfo(&fr, &tot));
  if (bytes > fr) e = cudaErrorMemoryAllocation;
  else {
    e = cudaMallocFromPoolAsync(&p, bytes, FMMCUDAPool, FMMCUDAStaging.side[0]);
    if (e == cudaSuccess) e = cudaFreeAsync(p, FMMCUDAStaging.side[0]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(FMMCUDAStaging.side[0]);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    (void)cudaMemPoolTrimTo(FMMCUDAPool, 0);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_MEM, "MATFMM CUDA: -mat_fmm_cuda_pool_reserve %g MB: GPU %d has %.1f MB free of %.1f MB; give less", (double)mb, dev, fr / 1048576.0, tot / 1048576.0);
  }
  FMMCallCUDA(e);
  FMMCUDAPoolReserved = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* the bytes that petscfmm's pool holds (mapped) and the most of
   them in use at once so far (0, 0 without a pool) */
void FMMCUDAPoolUsage(size_t *mapped, size_t *usedmax)
{
  uint64_t a = 0, b = 0;

  if (FMMCUDAPool && (cudaMemPoolGetAttribute(FMMCUDAPool, cudaMemPoolAttrReservedMemCurrent, &a) != cudaSuccess || cudaMemPoolGetAttribute(FMMCUDAPool, cudaMemPoolAttrUsedMemHigh, &b) != cudaSuccess)) a = b = 0;
  (void)cudaGetLastError();
  *mapped  = (size_t)a;
  *usedmax = (size_t)b;
}

/* at every call: selects this rank's device; once per process: its context
   (cudaFree(0) creates it), petscfmm's memory pool (grown by
   -mat_fmm_cuda_pool_reserve), the pinned staging rings (pinning memory
   takes milliseconds per MB, so it is done once, not at every assembly)
   and the side streams.  A -mat_fmm_cuda_pool_reserve that is negative, not
   finite or more than the GPU's memory is raised before anything but the
   context is made (a later call tries again); one the GPU cannot map,
   after the rest is made (the context is then usable, and the reserve is
   not tried again) */
PetscErrorCode FMMCUDAInitializeContext(void)
{
  static PetscBool done = PETSC_FALSE;
  int              dev;
  PetscReal        mb;
  const size_t     bytes = sizeof(double) * FMM_STAGE_CHUNKS * FMM_STAGE_SLOT;

  PetscFunctionBegin;
  if (done) {
    PetscCall(FMMCUDASelectDevice(PETSC_COMM_WORLD, &dev));
    PetscFunctionReturn(0);
  }
  PetscCall(PoolReserveOption(&mb));
  PetscCall(FMMCUDASelectDevice(PETSC_COMM_WORLD, &dev));
  FMMCallCUDA(cudaFree(0));
  PetscCall(PoolReserveCheck(dev, mb));
  { /* petscfmm's memory pool on this device, keeping what is freed (see FMMCUDAMalloc) */
    int              pools = 0;
    uint64_t         keep  = UINT64_MAX;
    cudaMemPoolProps props;
    PetscCall(PetscMemzero(&props, sizeof(props)));
    props.allocType     = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id   = dev;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) == cudaSuccess && pools && cudaMemPoolCreate(&FMMCUDAPool, &props) == cudaSuccess) {
      if (cudaMemPoolSetAttribute(FMMCUDAPool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
        (void)cudaMemPoolDestroy(FMMCUDAPool);
        FMMCUDAPool = NULL;
      }
    } else FMMCUDAPool = NULL;
    (void)cudaGetLastError();
  }
  if (cudaMallocHost((void **)&FMMCUDAStaging.in, bytes) != cudaSuccess || cudaMallocHost((void **)&FMMCUDAStaging.out, bytes) != cudaSuccess) { /* copies then go direct */
    if (FMMCUDAStaging.in) (void)cudaFreeHost(FMMCUDAStaging.in);
    FMMCUDAStaging.in = FMMCUDAStaging.out = NULL;
  }
  if (cudaMallocHost((void **)&FMMCUDAStaging.scal, sizeof(long long) * FMM_STAGE_SCAL) != cudaSuccess) FMMCUDAStaging.scal = NULL;
  {
    int ua = 0;
    FMMCUDAStaging.scalmap = (FMMCUDAStaging.scal && cudaDeviceGetAttribute(&ua, cudaDevAttrUnifiedAddressing, dev) == cudaSuccess && ua) ? PETSC_TRUE : PETSC_FALSE;
  }
  (void)cudaGetLastError();
  for (int k = 0; k < FMM_STAGE_CHUNKS; k++) {
    FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evin[k], cudaEventDisableTiming));
    FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evout[k], cudaEventDisableTiming));
  }
  for (int k = 0; k < 2; k++) FMMCallCUDA(cudaStreamCreateWithFlags(&FMMCUDAStaging.side[k], cudaStreamNonBlocking));
  FMMCallCUDA(cudaStreamCreateWithFlags(&FMMCUDAStaging.copy, cudaStreamNonBlocking));
  FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evlegacy, cudaEventDisableTiming));
  FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evfork, cudaEventDisableTiming));
  FMMCallCUDA(cudaEventCreateWithFlags(&FMMCUDAStaging.evjoin, cudaEventDisableTiming));
  PetscCall(PetscRegisterFinalize(FMMCUDAFinalizeContext));
  done = PETSC_TRUE;
  PetscCall(PoolReserve(dev, mb));
  PetscFunctionReturn(0);
}
