/*
  The CUDA backend's per-Mat state (FMMCUDAMat), from MatCreate() to
  MatDestroy(): its options (-mat_fmm_cuda_*, parsed by MatSetFromOptions()
  whichever backend runs, so that -help lists them), and what it keeps of the
  matrix's source block: page-locked once a time-stepping code has refilled
  it often enough, and its copy in GPU memory that MatFMMSetSources() fills
  as it copies the arrays (points.cu).
*/
#include "fmmcuda.h"

PetscErrorCode FMMCUDAMatCreate(void **bmat)
{
  FMMCUDAMat *m;

  PetscFunctionBegin;
  PetscCall(PetscNew(&m));
  m->m2l_tc      = PETSC_TRUE;
  m->log_fast    = PETSC_TRUE;
  m->tree_gpu    = PETSC_TRUE;
  m->p2p_sym     = PETSC_TRUE;
  m->split_local = PETSC_TRUE;
  m->walks       = PETSC_TRUE;
  m->key_bits    = 32;
  m->list_room   = 16;
  *bmat          = m;
  PetscFunctionReturn(0);
}

/* after FMM_SOURCES_FREE (MatDestroy() frees the block first) */
PetscErrorCode FMMCUDAMatDestroy(void **bmat)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(*bmat));
  PetscFunctionReturn(0);
}

/* the options: read, checked, then applied (*changed: one differs from before) */
PetscErrorCode FMMCUDAMatSetFromOptions(void *bmat, FMMOptionItems PetscOptionsObject, PetscBool *changed)
{
  FMMCUDAMat *m   = (FMMCUDAMat *)bmat;
  const char *m2l[] = {"tc", "fma"}, *lg[] = {"fast", "libm"}, *tr[] = {"gpu", "cpu"};
  PetscInt    i, ival;
  PetscBool   bval, set;
  FMMCUDAMat  v = *m;

  PetscFunctionBegin;
  PetscCall(PetscOptionsEList("-mat_fmm_cuda_m2l", "CUDA M2L kernel: FP64 tensor cores or unrolled FMA", "MATFMM", m2l, 2, m2l[m->m2l_tc ? 0 : 1], &i, &set));
  if (set) v.m2l_tc = i == 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscOptionsEList("-mat_fmm_cuda_log", "CUDA near-field log: table-based or the CUDA math library", "MATFMM", lg, 2, lg[m->log_fast ? 0 : 1], &i, &set));
  if (set) v.log_fast = i == 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscOptionsEList("-mat_fmm_cuda_tree", "Where the CUDA backend builds the tree and interaction lists: on the GPU or on the CPU (then uploaded)", "MATFMM", tr, 2, tr[m->tree_gpu ? 0 : 1], &i, &set));
  if (set) v.tree_gpu = i == 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscOptionsBool("-mat_fmm_cuda_p2p_symmetric", "CUDA tiled P2P: evaluate each pair of points once for both sums when the targets are the sources (single layer, table log; with the distributed tree the halo's pairs are evaluated for this rank's sums only)", "MATFMM", m->p2p_sym, &bval, &set));
  if (set) v.p2p_sym = bval;
  PetscCall(PetscOptionsBool("-mat_fmm_cuda_split_local", "GPU tree: the last splitting rounds in shared memory, a block per box, where the device grants the block 220 KB (false: every round in global memory; the same tree)", "MATFMM", m->split_local, &bval, &set));
  if (set) v.split_local = bval;
  PetscCall(PetscOptionsRangeInt("-mat_fmm_cuda_tree_key_bits", "GPU tree: bits of the coordinates' sort keys, quantized over the bounding box (1 to 32, ties sorted after; 64: exact 64-bit keys; the same tree)", "MATFMM", m->key_bits, &ival, &set, 1, 64));
  PetscCheck(!set || ival <= 32 || ival == 64, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_cuda_tree_key_bits %" PetscInt_FMT ": expected 1 to 32 (quantized keys) or 64 (exact keys)", ival);
  if (set) v.key_bits = ival;
  PetscCall(PetscOptionsRangeInt("-mat_fmm_cuda_tree_list_room", "GPU tree: entries per box given to the strong lists (3 times as many to the far lists) of every level before their sizes are known (lists that do not fit are built again; the same lists)", "MATFMM", m->list_room, &ival, &set, 1, 64));
  if (set) v.list_room = ival;
  PetscCall(PetscOptionsBool("-mat_fmm_cuda_walks", "CUDA: walk the near field of spread leaves next to dense clusters point by point (W and X lists, as the CPU backend does)", "MATFMM", m->walks, &bval, &set));
  if (set) v.walks = bval;
  *changed = (v.m2l_tc != m->m2l_tc || v.log_fast != m->log_fast || v.tree_gpu != m->tree_gpu || v.p2p_sym != m->p2p_sym || v.split_local != m->split_local || v.key_bits != m->key_bits || v.list_room != m->list_room || v.walks != m->walks) ? PETSC_TRUE : PETSC_FALSE;
  *m       = v;
  PetscFunctionReturn(0);
}

/* plan() builds the plan on the GPU unless -mat_fmm_cuda_tree cpu */
PetscErrorCode FMMCUDAMatBuildsPlan(void *bmat, PetscBool *builds)
{
  PetscFunctionBegin;
  *builds = ((FMMCUDAMat *)bmat)->tree_gpu;
  PetscFunctionReturn(0);
}

/* A time-stepping code refills the sources (MatFMMSetSources() with new
   points, same sizes) before each assembly.  From the FMM_PIN_REFILLS-th
   refill on, the matrix's copy of them (one block: points, normals,
   weights; one rank, where the plan reads it in place) is page-locked, so
   that each later assembly copies it to the GPU by DMA instead of through
   the staging rings, whose host-side copies hold the host up while it
   should be queueing the tree's kernels.  Page-locking costs about as much
   as FMM_PIN_REFILLS assemblies gain, once for the life of the block;
   MatFMMSetSources() with new sizes and MatDestroy() release it
   (FMM_SOURCES_FREE).  A refusal (no more page-locked memory) keeps the
   staging rings.  Once it is page-locked, MatFMMSetSources() also sends the
   block to a copy in GPU memory while it fills it (FMMCUDAMirror*,
   points.cu), and the plan reads the points from there. */
#define FMM_PIN_REFILLS 8

PetscErrorCode FMMCUDAPinSources(FMMContext *ctx)
{
  FMMCUDAMat       *m     = (FMMCUDAMat *)ctx->bmat;
  const FMMSources *S     = ctx->sources;
  const size_t      bytes = sizeof(PetscReal) * FMMSourceBlock(S->n, S->hasnrm, S->haswts);
  PetscLogDouble    t0, t1;
  cudaError_t       e;

  PetscFunctionBegin;
  if (!ctx->alias || S->dev || m->pinned || m->pinno || S->nrefill < FMM_PIN_REFILLS || !bytes) PetscFunctionReturn(0);
  PetscCall(PetscTime(&t0));
  e = cudaHostRegister(S->block, bytes, cudaHostRegisterDefault);
  PetscCall(PetscTime(&t1));
  if (e == cudaSuccess) {
    m->pinned = PETSC_TRUE;
    PetscCall(PetscInfo(ctx->obj, "GPU plan: the sources refilled %" PetscInt_FMT " times, their copy (%.1f MB) page-locked in %.2f ms\n", S->nrefill, bytes / 1048576.0, 1e3 * (t1 - t0)));
  } else {
    (void)cudaGetLastError();
    m->pinno = PETSC_TRUE;
    PetscCall(PetscInfo(ctx->obj, "GPU plan: page-locking the sources (%.1f MB) refused (%s); they go through the staging rings\n", bytes / 1048576.0, cudaGetErrorString(e)));
  }
  PetscFunctionReturn(0);
}

/* the events of the matrix's source block (fmmimpl.h): the page-locked
   block's copy in GPU memory filled array by array as MatFMMSetSources()
   copies them, the points first (what the tree build waits for); both
   released before the block goes */
PetscErrorCode FMMCUDAMatSetSources(void *bmat, FMMSourcesEvent ev, const FMMSources *S, PetscInt k)
{
  FMMCUDAMat *m = (FMMCUDAMat *)bmat;

  PetscFunctionBegin;
  switch (ev) {
  case FMM_SOURCES_FREE:
    PetscCall(FMMCUDAMirrorDestroy(&m->mirror)); /* after its DMAs out of the block */
    if (m->pinned) PetscCall(FMMCUDAUnpin(S->block));
    m->pinned = m->pinno = PETSC_FALSE;
    break;
  case FMM_SOURCES_FILL:
    m->sending = PETSC_FALSE;
    if (m->pinned) PetscCall(FMMCUDAMirrorBegin(&m->mirror, FMMSourceBlock(S->n, S->hasnrm, S->haswts), &m->sending));
    break;
  case FMM_SOURCES_COPIED:
    if (m->sending) {
      const PetscReal *a   = k == 0 ? S->block : (k == 1 ? S->nrm : S->wts);
      const size_t     len = (size_t)S->n * (k == 2 ? 1 : 2);
      PetscCall(FMMCUDAMirrorPut(m->mirror, S->block, (size_t)(a - S->block), len));
      if (k == 0) PetscCall(FMMCUDAMirrorMark(m->mirror, 0)); /* the points: what the tree build waits for */
    }
    break;
  case FMM_SOURCES_FILLED:
    if (m->sending) PetscCall(FMMCUDAMirrorMark(m->mirror, 1));
    break;
  }
  PetscFunctionReturn(0);
}

/* releases what FMMCUDAPinSources() page-locked, before the block is freed */
PetscErrorCode FMMCUDAUnpin(void *p)
{
  PetscFunctionBegin;
  if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError(); /* the context may be gone at exit: nothing is then locked */
  PetscFunctionReturn(0);
}
