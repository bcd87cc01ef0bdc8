/*
  Private to the CUDA backend: its per-Mat state, the device copy of the plan,
  the work arrays of one product, the error-check macros and the kernel
  launchers (one .cu file per group of phases).  Every launcher enqueues on
  c->stream and returns at once; every output element is written by exactly
  one thread in a fixed order, so repeated products are bitwise identical.
*/
#pragma once
#include <cuda_runtime.h>
#include "fmm/fmmimpl.h"

/* orders up to this have compile-time-order kernels: M2L on the tensor cores or
   unrolled with the binomial matrix as constant-bank operands, P2M in registers;
   higher orders (up to FMMCUDA_PMAX) call FMMM2L and FMMP2MAdd at run-time order */
#define FMMCUDA_PFAST 40
#define FMMCUDA_PMAX  FMM_P_MAX

typedef struct _n_FMMCUDAMirror *FMMCUDAMirror; /* a GPU copy of the page-locked sources (points.cu) */

/* the backend's per-Mat state (settings.cu): its options, and the matrix's
   source block as it keeps it */
typedef struct {
  PetscBool     m2l_tc;      /* M2L on the FP64 tensor cores (-mat_fmm_cuda_m2l tc) */
  PetscBool     log_fast;    /* near-field log by table (-mat_fmm_cuda_log fast) */
  PetscBool     tree_gpu;    /* the plan built on the GPU (-mat_fmm_cuda_tree gpu) */
  PetscBool     p2p_sym;     /* tiled P2P: each unordered pair once when it can (-mat_fmm_cuda_p2p_symmetric) */
  PetscBool     split_local; /* the tree's last splitting rounds in shared memory where the device allows (-mat_fmm_cuda_split_local) */
  PetscInt      key_bits;    /* the tree's sort keys: 1 to 32 quantized bits, 64 exact (-mat_fmm_cuda_tree_key_bits) */
  PetscInt      list_room;   /* the lists' entries per box before their sizes are known (-mat_fmm_cuda_tree_list_room) */
  PetscBool     walks;       /* walk spread leaves next to dense ones, as the CPU backend (-mat_fmm_cuda_walks) */
  PetscBool     pinned, pinno; /* the source block is page-locked (FMMCUDAPinSources); it was tried and refused */
  FMMCUDAMirror mirror;        /* pinned: the block's copy in GPU memory, filled by MatFMMSetSources() */
  PetscBool     sending;       /* the block being filled goes to the mirror */
} FMMCUDAMat;
/* 1/k for k <= FMMCUDA_PMAX (k = 0: 0), the values of FMMInverses (1.0/k correctly
   rounded), for the __constant__ tables of P2M and M2L: fixed at compile time,
   so no assembly uploads them */
struct FMMCUDAInvTable {
  double v[FMMCUDA_PMAX + 1];
};
static constexpr FMMCUDAInvTable FMMCUDAInvMake()
{
  FMMCUDAInvTable t{};
  for (int k = 1; k <= FMMCUDA_PMAX; k++) t.v[k] = 1.0 / k;
  return t;
}
#define FMM_STAGE_CHUNKS 16     /* slots of the staging rings */
#define FMM_STAGE_SLOT   131072 /* doubles per slot (1 MB) */
#define FMM_STAGE_SCAL   64     /* bytes of the pinned readback buffer, in long longs */

/* the process's pinned staging rings for copies from and to pageable host
   memory (device.cu): FMM_STAGE_CHUNKS slots each way, an event per slot
   marking when its last copy is done; and a small buffer for the sizes an
   assembly reads back (FMMCUDAReadback); NULL members when pinning was
   refused.  Also the two side streams of the uploads beside an assembly's
   stream (the normals and weights, UploadLate, and the DMAs of the sources'
   GPU copy, FMMCUDAMirror*; the second part of the points, the tree
   build): made once, as a stream made and destroyed per assembly costs the
   host time at every assembly */
typedef struct {
  double      *in, *out;
  long long   *scal;
  PetscBool    scalmap; /* kernels may write scal (FMMCUDAReadbackTarget) */
  cudaEvent_t  evin[FMM_STAGE_CHUNKS], evout[FMM_STAGE_CHUNKS];
  cudaStream_t side[2]; /* non-blocking: the late uploads and the sources' copy (0), the points' second part and the y sort (1) */
  cudaStream_t copy;     /* non-blocking: the check and copy of points given in GPU memory (FMMCUDACopyChecked) */
  cudaEvent_t  evlegacy; /* where copy waits for the legacy default stream's work */
  cudaEvent_t  evfork, evjoin; /* the tree build's y sort on side[1], beside the x sort */
} FMMCUDAStage;
PETSC_INTERN FMMCUDAStage FMMCUDAStaging;
PETSC_INTERN cudaMemPool_t FMMCUDAPool; /* petscfmm's stream-ordered memory pool, NULL: plain cudaMalloc (device.cu) */
PETSC_INTERN PetscBool     FMMCUDAPoolReserved; /* the pool was grown by -mat_fmm_cuda_pool_reserve */

/* a CUDA runtime error as a PETSc error: out of memory is PETSC_ERR_MEM, the rest PETSC_ERR_GPU */
#define FMMCallCUDA(...) \
  do { \
    cudaError_t _fmm_e = (__VA_ARGS__); \
    if (PetscUnlikely(_fmm_e != cudaSuccess)) { \
      (void)cudaGetLastError(); \
      SETERRQ(PETSC_COMM_SELF, _fmm_e == cudaErrorMemoryAllocation ? PETSC_ERR_MEM : PETSC_ERR_GPU, "MATFMM CUDA: %s (%s)", cudaGetErrorString(_fmm_e), cudaGetErrorName(_fmm_e)); \
    } \
  } while (0)

/* after every launch: configuration errors now, faults of earlier kernels too */
#define FMMCheckLaunch() FMMCallCUDA(cudaGetLastError())

/* k<<<grid, block, smem, s>>>(a...) as a programmatic dependent launch
   (sm_90): its blocks are scheduled while the kernel before it on s drains,
   and wait in FMMWaitPrior(), which every kernel so launched calls before
   anything else, for that kernel's end and its writes.  Every kernel of the
   assembly and of the product goes this way: the launch latency between
   back-to-back kernels is hidden, which the chains of small kernels of an
   assembly and a product feel most.  No early trigger in the kernel before:
   waiting blocks would hold SMs that its own blocks need.  Devices before
   sm_90 ignore the attribute (ordinary stream order).  The attribute is set
   only when every architecture compiled for (CUDA_ARCH of the makefile) has
   the wait: a build for sm_80 run on an sm_90 GPU (its PTX compiled there)
   has none, so its launches keep plain stream order. */
#if defined(__CUDA_ARCH_LIST__)
static constexpr int FMMArchList[] = {__CUDA_ARCH_LIST__};
static constexpr bool FMMArchAllHaveWait()
{
  for (int a : FMMArchList)
    if (a < 900) return false;
  return true;
}
#else
static constexpr bool FMMArchAllHaveWait()
{
  return false;
}
#endif
template <class T>
struct FMMSame {
  typedef T type;
};
template <class... P>
static inline void FMMLaunch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, typename FMMSame<P>::type... a) /* (a converted to k's types, as <<<>>> does; errors: FMMCheckLaunch() after it, as after <<<>>>) */
{
  cudaLaunchAttribute at[1];
  cudaLaunchConfig_t  cfg = {};
  at[0].id                                         = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim                                      = grid;
  cfg.blockDim                                     = block;
  cfg.dynamicSmemBytes                             = smem;
  cfg.stream                                       = s;
  cfg.attrs                                        = at;
  cfg.numAttrs                                     = FMMArchAllHaveWait() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, k, a...); /* (its error stays for cudaGetLastError) */
}

/* the first statement of a kernel launched by FMMLaunch (see there) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  #define FMMWaitPrior() cudaGridDependencySynchronize()
#else
  #define FMMWaitPrior() ((void)0)
#endif

/* P2P work item: up to FMMCUDA_P2P_T targets of one leaf against up to
   FMMCUDA_P2P_S consecutive sources of its near list (long lists are split so
   that no block or thread walks one alone).  part < 0: the item adds its sums
   to pot; else it writes them to part[part + t], summed in item order later. */
#define FMMCUDA_P2P_T 128
#define FMMCUDA_P2P_S 2048
/* the near field's log table (p2p.cu): FMM_LOGTAB bins of the mantissa, replicated
   FMM_LOGCOPY times in shared memory */
#define FMM_LOGBITS 8
#define FMM_LOGTAB  (1 << FMM_LOGBITS)
#define FMM_LN2_HI  6.93147180369123816490e-01 /* log 2 split so that e log2_hi is exact (fdlibm) */
#define FMM_LN2_LO  1.90821492927058770002e-10
#define FMM_LOGCOPY 8
#define FMMCUDA_SYM_E      8   /* symmetric P2P: upper near-list entries per item */
#define FMMCUDA_SYM_D      32  /* symmetric P2P: PetscInt per item descriptor (4 + 3 FMMCUDA_SYM_E used) */
#define FMMCUDA_SYM_GMAX   64  /* slots a target sums itself */
#define FMMCUDA_SYM_GCHUNK 256 /* slots per chunk beyond that */
typedef struct {
  PetscInt leaf, t0, nt; /* targets t0..t0+nt-1 (tree order) of leaf */
  PetscInt e0, ne;       /* positions e0..e0+ne-1 of the leaf's near-source list */
  PetscInt j, pos;       /* the first of them: index into near[], tree position */
  PetscInt part;
} FMMP2PItem;

typedef struct {
  int          dev;
  cudaStream_t stream;
  PetscBool    sync;       /* logging is on: synchronize before each PetscLogEventEnd */
  PetscInt     p, ne, pp;  /* order, reals per expansion 2(p+1), padded order of the unrolled M2L (0: generic) */
  PetscInt     kp;         /* tensor-core M2L: p rounded up to 8 (0: not used) */
  int          kind;       /* pair kernel: 0 single layer only, 1 double layer only, 2 both */
  PetscBool    fmm;        /* the FMM structures exist (method fmm) */
  PetscInt     listroom;   /* the GPU lists' room per box before their sizes are known (-mat_fmm_cuda_tree_list_room) */
  struct FMMP2PWork_ *p2pw; /* the P2P plan's work between FMMCUDAP2PPlanBegin and End (tree.cu) */
  /* the plan (see FMMPlan) */
  PetscInt  *sperm, *sleaf, *tperm, *tleaf, *faroff, *far, *nearoff, *near;
  PetscInt  *tleafof; /* [M] leaf of each target (tree order) */
  /* the boxes on the GPU (geometry, far lists, expansions, M2L partials): nbc = 0, every box of the pyramid
     by its global number; else (a rank's part of the distributed tree, SlotBoxes() in backend.cu) nbc of them,
     box b of level l at lbase[l] + b (levels 0..l0: all of them, below: the rank's own), then the nrb
     remote boxes of the far lists and the exchange, rbox[] (host, ascending) */
  PetscInt   nbc, lbase[FMM_MAX_LEVELS + 1], nrb, *rbox;
  PetscInt   nnear;    /* entries of the near lists, nearoff[nleaves] */
  PetscReal *sx, *sy, *cq, *cdx, *cdy, *tx, *ty, *cx, *cy, *scale;
  /* the constant tables, kept per process (FMMCUDATableKeep): not the backend's to free */
  PetscReal *binom; /* (2p+1)^2 binomial table of expansions.h */
  PetscReal *m2l;    /* p x p M2L matrix, for the generic M2L */
  PetscReal *m2lpad; /* the M2L matrix of the tensor cores, padded (FMMCUDAM2LSetup) */
  /* M2L: pairs in chunks of 32 (one warp each); a chunk's run of pairs with one target box is a
     partial sum; box t owns partials tpart[t]..tpart[t+1]-1 (part has room for nparts =
     nchunks + nboxes, a bound) */
  PetscInt   npairs, nchunks, nparts;
  PetscInt   m2lblocks; /* grid of the persistent tensor-core M2L kernels (0: not yet chosen for this plan) */
  PetscInt  *pairtgt, *chunkpart, *tpart;
  PetscReal *part;
  /* P2P items (all layouts); leaves whose list is split own partials */
  PetscInt    nitems, *itemstart; /* host: first item of each leaf, [nleaves+1] (repetition layout only) */
  PetscInt    tlblocks;           /* grid of the tiled P2P kernel (0: not yet chosen for this plan) */
  FMMP2PItem *items;
  PetscInt   *leafnsc, *leafpart; /* [nleaves] source chunks, first partial */
  PetscReal  *p2ppart;
  PetscBool   p2psplit; /* some list is split */
  /* symmetric P2P (targets = sources, single layer, table log; p2p.cu): items of up to
     FMMCUDA_SYM_E upper entries (leaf B >= A) of a leaf A's near list, each pair of points
     once; rows in groups of syma lanes, symr rows per lane (syma = 0: not used).  Leaf B's
     slots (colpart at symleaf[2][B], nB doubles each): one per lower entry A (the column
     sums of block A x B) and, when B has several items, one per item (row partials).
     symleaf: [5][nleaves+1] first upper entry, first item, first slot value, slot count,
     first chunk (slot lists longer than FMMCUDA_SYM_GMAX are summed in chunks of
     FMMCUDA_SYM_GCHUNK into chsum first).  symitem: [nsymitems][FMMCUDA_SYM_D], items with
     more entries first (leaf order within a count); per item its leaf's first point and
     point count, its entry count and row slot (colpart offset; -1 - first target when the
     item, the leaf's only one, adds its rows to pot), then per entry B: first point, point
     count, column slot (-1 for B = A, evaluated by rows only) */
  PetscInt            syma, symr, minleafsrc, nsymitems, nsymch;
  PetscInt            symblocks; /* blocks of the symmetric kernel (0: not yet chosen) */
  PetscInt           *symleaf, *symitem;
  PetscReal          *colpart, *chsum;
  PetscInt           *symchleaf; /* [nsymch] the leaf of each chunk */
  unsigned           *symchdone; /* [nsymch] chunks of a leaf done, at its first chunk (reset to 0 by its last) */
  unsigned long long *symnext;   /* the next item to take (0 between products) */
  double2    *logtab;   /* table of the near-field log (NULL: libm log, -mat_fmm_cuda_log libm), kept per process as binom */
  /* one product */
  PetscReal *sigma, *q, *dx, *dy, *mpole, *local, *pot, *y;
  PetscInt  *xidx;  /* the distributed tree's exchange: rows sent, then rows received (device; FMMContext.xexp, ximp) */
  PetscReal *xrows; /* their rows (device), and on the host */
  PetscReal *hrows;
  /* direct: source slices when targets are few */
  PetscReal *dpart;
  PetscInt   dslices;
  /* sources before each near-list entry [nnear+1], its first source [nnear], sources before each leaf's neighbour sources [nleaves+1] */
  PetscInt *nearscan, *entrysrc, *nbroff;
  /* indexing / repetition: neighbour sources of each leaf, global index (nbr) and tree position (nbrt) */
  PetscInt  *nbr, *nbrt;
  PetscReal *gxy, *gq, *gdx, *gdy; /* sources in global order (indexing) */
  /* repetition: leaf-aligned chunks [repleaf[k], repleaf[k+1]) of records */
  PetscInt    nrepchunks, *repleaf; /* host */
  PetscInt64 *recoff;               /* [nleaves] record offset of each leaf within its chunk */
  PetscReal  *rec;
  /* the walks (FMMWalks; built by tree/walks.cuh, run by walk.cu): their index arrays in one block (walk) */
  PetscBool walkdone; /* looked for, for this tree */
  PetscInt  nwt, nlb, nxl, *walk, *wt, *wmoff, *wm, *wpoff, *wp, *lb, *lsoff, *ls, *xl, *xsoff, *xs;
  PetscBool   treebuilt; /* the device plan was built by FMMCUDATreeBuild (tree.cu), not uploaded; set with its lists, nearoff then lies in near's block */
  void       *treeblk;   /* FMMCUDATreeBuild's block of sperm .. tleafof, sleaf, tleaf, cx, cy, scale, faroff (NULL: each its own) */
} FMM_CUDA;

/* box b of level l in the GPU's box arrays is at FMMCUDABoxBase(c, l) + b; FMMCUDABoxCount() boxes (see nbc) */
static inline PetscInt FMMCUDABoxBase(const FMM_CUDA *c, PetscInt l)
{
  return c->nbc ? c->lbase[l] : FMMLevelStart(l);
}
static inline PetscInt FMMCUDABoxCount(const FMM_CUDA *c, const FMMPlan *P)
{
  return c->nbc ? c->nbc : P->nboxes;
}

/* a block of device memory carved into arrays, each at a 256-byte boundary:
   laid out once with base NULL (off is then the block's size), allocated,
   and laid out again on it.  One allocation instead of one per array: in an
   assembly each pool allocation costs the host far more than in a loop of
   them, while the GPU waits for the tree's first arrays */
typedef struct {
  char  *base;
  size_t off;
} FMMCarve;

template <class T>
static inline T *FMMCarveArray(FMMCarve *k, size_t n)
{
  T *p = k->base ? (T *)(k->base + k->off) : NULL;
  k->off += (n * sizeof(T) + 255) & ~(size_t)255;
  return p;
}

/* the rows of symleaf that the products read: first item, first slot value,
   slot count, first chunk (first upper entry, row 0, is the plan's) */
struct FMMSymLeaf {
  const PetscInt *item, *slot, *nsl, *ch;
  __host__ __device__ FMMSymLeaf(const PetscInt *s, PetscInt nl) : item(s + (nl + 1)), slot(s + 2 * (nl + 1)), nsl(s + 3 * (nl + 1)), ch(s + 4 * (nl + 1)) { }
};

/* device.cu */
PETSC_INTERN PetscErrorCode FMMCUDADeviceCount(int *);
PETSC_INTERN PetscErrorCode FMMCUDAInitializeContext(void);
PETSC_INTERN PetscErrorCode FMMCUDAMalloc(cudaStream_t, void **, size_t, const char *);
PETSC_INTERN PetscErrorCode FMMCUDAFree(cudaStream_t, void *);
PETSC_INTERN PetscErrorCode FMMCUDASelectDevice(MPI_Comm, int *);
PETSC_INTERN PetscErrorCode FMMCUDAMallocKept(void **, size_t, const char *);
PETSC_INTERN void           FMMCUDAPoolUsage(size_t *, size_t *);
PETSC_INTERN const double  *FMMCUDAMirrorData(FMMCUDAMirror);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorWait(FMMCUDAMirror, cudaStream_t, int);
PETSC_INTERN PetscErrorCode FMMCUDAReadback(cudaStream_t, void *, const void *, size_t);
PETSC_INTERN PetscErrorCode FMMCUDAReadbackStaged(cudaStream_t, void *, const void *, size_t);
PETSC_INTERN void          *FMMCUDAReadbackTarget(size_t);
PETSC_INTERN void          *FMMCUDATableFind(int, const char *, PetscInt);
PETSC_INTERN PetscErrorCode FMMCUDATableKeep(int, const char *, PetscInt, const void *, size_t, void **);
/* points.cu */
PETSC_INTERN PetscErrorCode FMMCUDAIsDeviceMemory(const void *, PetscBool *);
PETSC_INTERN PetscErrorCode FMMCUDAPointsAlloc(size_t, PetscReal **);
PETSC_INTERN PetscErrorCode FMMCUDAPointsFree(PetscReal *);
PETSC_INTERN PetscErrorCode FMMCUDACopyChecked(PetscInt, PetscReal *const[], const PetscReal *const[], const PetscInt[], PetscInt[], PetscReal[], PetscInt *, PetscReal[4]);
PETSC_INTERN PetscErrorCode FMMCUDAPointsToHost(PetscReal *, const PetscReal *, size_t);
PETSC_INTERN PetscErrorCode FMMCUDAPointsLoad(void);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorBegin(FMMCUDAMirror *, size_t, PetscBool *);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorPut(FMMCUDAMirror, const PetscReal *, size_t, size_t);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorMark(FMMCUDAMirror, int);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorDestroy(FMMCUDAMirror *);
/* settings.cu */
PETSC_INTERN PetscErrorCode FMMCUDAMatCreate(void **);
PETSC_INTERN PetscErrorCode FMMCUDAMatDestroy(void **);
PETSC_INTERN PetscErrorCode FMMCUDAMatSetFromOptions(void *, FMMOptionItems, PetscBool *);
PETSC_INTERN PetscErrorCode FMMCUDAMatBuildsPlan(void *, PetscBool *);
PETSC_INTERN PetscErrorCode FMMCUDAMatSetSources(void *, FMMSourcesEvent, const FMMSources *, PetscInt);
PETSC_INTERN PetscErrorCode FMMCUDAPinSources(FMMContext *);
PETSC_INTERN PetscErrorCode FMMCUDAUnpin(void *);

/* The distributed tree's points on this rank's GPU from the top cuts to the plan
   (FMMContext part, src/fmm/dist.c; part.cu): the caller's points as the top
   cuts took them, then this rank's slots of them (OwnerMoves()), then its
   sources and targets in tree order, which the plan's upload takes */
typedef struct {
  PetscInt  ns, mt;          /* the caller's sources and targets on this rank */
  double   *xy;              /* [2 (ns + mt)]: their points (sources, then targets), until partorder() */
  PetscInt  n0;              /* the boxes of level l0 */
  PetscInt *keep;            /* [2 ns] or NULL: the top cuts' x and y lists of the caller's sources (targets = sources),
                                box after box, each sorted by (coordinate, index) in its box, until the subtrees */
  PetscInt  nleft;           /* the caller's sources that left the rank (partowners()) */
  PetscInt *bsort;           /* [ns + mt]: the caller's sources by box, then its targets by box, each box's in
                                the caller's order (the top cuts' boxes, FMMCUDAPartBoxes()) */
  PetscInt  nr, mr;          /* this rank's source and target slots */
  PetscInt *lsrc, *ltgt;     /* [nr], [mr]: slot -> the caller's point on this rank there (-1: received) */
  double   *rxy, *rnrm, *rw; /* [2 nr], [2 nr] or NULL, [nr] or NULL: the sources' slots (rnrm, rw: the
                                received sources' only, until the coefficients) */
  double   *cnrm, *cwts;     /* [2 ns], [ns] or NULL: the caller's normals and weights, copied up late (the
                                late copy, backend.cu) and read for the coefficients of the slots that stay */
  double   *txy;             /* [2 mr]: the targets' slots (NULL: the targets are the sources) */
  PetscInt  nord, *ord, *pj; /* the subtrees' order of the nord points (place -> slot, nr + target slot), pj:
                                the points of their input (NULL: the source slots) */
  PetscInt  n, m;            /* the sources and targets in tree order (m = 0: the sources) */
  PetscInt *sperm, *tperm;   /* [n], [m]: tree order -> slot */
  PetscInt *cin, *cout;      /* [n], [m]: tree order -> the product's numbering (FMMDistIOSetup(); cout NULL: cin) */
  double   *sx, *sy, *cq, *cdx, *cdy, *tx, *ty;
  PetscInt  nfar, *far;      /* the rank's far lists (FMMCUDADistLists), in slot order, the halo's boxes numbered
                                from the own slots' count on; the plan's upload takes them */
  PetscInt  nslot;           /* and its slots' circles, the own ones then the halo's: cx, cy, scale [nslot] */
  double   *slot[3];
} FMMCUDAPart;

/* what FMMCUDATreeBuild (tree.cu) builds the plan from */
typedef struct {
  /* points [a, b) to the device's room for them (xy) on stream s (NULL: xy holds them) */
  PetscErrorCode (*points)(FMM_CUDA *, void *, PetscInt a, PetscInt b, cudaStream_t s);
  void *pctx;
  /* called once the sort is queued: starts the upload of the normals and weights after the event after (the
     points up) and returns the event done of its end, which the scatter of the points waits for (NULL: none) */
  PetscErrorCode (*late)(FMM_CUDA *, void *, cudaEvent_t after, cudaEvent_t *done);
  void *lctx;
} FMMCUDAUploads;

typedef struct {
  PetscInt       ct;          /* clustering threshold */
  PetscReal      theta;       /* separation parameter */
  PetscBool      median;      /* the median split rule (-mat_fmm_tree_split median) */
  PetscBool      splitlocal;  /* the last rounds in shared memory where the device allows */
  PetscInt       keybits;     /* sort keys: 1 to 32 quantized bits, 64 exact */
  PetscInt       U;           /* points: the N sources, then the targets of all ranks unless same */
  PetscBool      same;        /* the targets are the sources */
  PetscInt       t0;          /* global index of this rank's first target */
  PetscReal      alpha, beta; /* the operator (FMMSourceCoefficients) */
  const double  *xy;          /* device: the U points (sources in global order, then the targets in global order), or room for them */
  const double  *nrm, *wts;   /* device: 2N normals and N weights (or NULL) */
  PetscBool      parts;       /* the points come from host memory (from SORT_PARTS_MIN on, they go up in two parts) */
  FMMCUDAUploads up;
} FMMCUDATreeInput;

/* tree.cu */
PETSC_INTERN PetscErrorCode FMMCUDATreeBuild(FMM_CUDA *, FMMPlan *, const FMMCUDATreeInput *);
PETSC_INTERN PetscErrorCode FMMCUDATopCuts(FMM_CUDA *, MPI_Comm, PetscInt, PetscInt, const double *, PetscInt, PetscInt64, PetscInt64, PetscInt, PetscInt *, PetscInt *, const FMMCUDAUploads *);
PETSC_INTERN PetscErrorCode FMMCUDASubtrees(FMM_CUDA *, PetscInt, const double *, const PetscInt *, PetscInt, const PetscInt *, PetscInt, PetscBool, PetscBool, PetscInt *, PetscBool, PetscInt *, double *);
PETSC_INTERN PetscErrorCode FMMCUDASubtreesLists(FMM_CUDA *, PetscInt, const double *, PetscInt, const PetscInt *, PetscInt, const PetscInt *, const PetscInt *, PetscInt, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDADistLists(FMM_CUDA *, FMMDistLists *, const double *, PetscInt **, double *[3], PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAM2LPlan(FMM_CUDA *, const FMMPlan *);
PETSC_INTERN PetscErrorCode FMMCUDAP2PPlanBegin(FMM_CUDA *, const FMMPlan *, PetscBool);
PETSC_INTERN PetscErrorCode FMMCUDAP2PPlanEnd(FMM_CUDA *, FMMPlan *, PetscBool);
PETSC_INTERN PetscErrorCode FMMCUDAP2PWorkDestroy(FMM_CUDA *);
PETSC_INTERN PetscErrorCode FMMCUDANearSources(FMM_CUDA *, const FMMPlan *, PetscBool, PetscInt **, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAWarmUpSorts(void);
PETSC_INTERN PetscErrorCode FMMCUDAWalks(FMMContext *, FMM_CUDA *); /* tree/walks.cuh */
/* part.cu */
PETSC_INTERN PetscErrorCode FMMCUDAPartDestroy(FMMCUDAPart **, cudaStream_t);
PETSC_INTERN PetscErrorCode FMMCUDAPartBoxes(cudaStream_t, FMMCUDAPart *, PetscInt, const PetscInt *, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAPartOwners(cudaStream_t, const FMMCUDAPart *, PetscInt, PetscInt, PetscInt, const PetscInt *, const PetscInt *, const PetscInt *, PetscInt *, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAPartSlots(cudaStream_t, PetscInt, const PetscInt *, const double *, const double *, const double *, double *, double *, double *);
PETSC_INTERN PetscErrorCode FMMCUDAPartReceived(cudaStream_t, PetscInt, const PetscInt *, const double *, const double *, const double *, double *, double *, double *);
PETSC_INTERN PetscErrorCode FMMCUDAPartInterleave(cudaStream_t, const FMMCUDAPart *, PetscInt, const PetscInt *, double *);
PETSC_INTERN PetscErrorCode FMMCUDAPartSplitOrder(cudaStream_t, FMMCUDAPart *, PetscInt, const PetscInt *, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAPartOrder(cudaStream_t, FMMCUDAPart *, const PetscInt *, const PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAPartCoefficients(cudaStream_t, FMMCUDAPart *, double, double);
PETSC_INTERN cudaError_t    FMMCUDALateWait(void);
PETSC_INTERN PetscErrorCode FMMCUDAPartNumbers(cudaStream_t, PetscInt, const PetscInt *, const PetscInt *, PetscInt, PetscInt, const PetscInt *, PetscInt *, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAPartGather(cudaStream_t, const FMMCUDAPart *, PetscInt, const PetscInt *, double *);
PETSC_INTERN PetscErrorCode FMMCUDAGatherInts(cudaStream_t, PetscInt, const PetscInt *, const PetscInt *, PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDALeafOf(cudaStream_t, PetscInt, PetscInt, const PetscInt *, PetscInt *);
/* upward.cu */
PETSC_INTERN PetscErrorCode FMMCUDAStrengths(FMM_CUDA *, const FMMPlan *, const double *);
PETSC_INTERN PetscErrorCode FMMCUDAP2M(FMM_CUDA *, const FMMPlan *);
PETSC_INTERN PetscErrorCode FMMCUDAM2M(FMM_CUDA *, const FMMPlan *);
/* m2l.cu */
PETSC_INTERN PetscErrorCode FMMCUDAM2LSetup(FMM_CUDA *);
PETSC_INTERN PetscErrorCode FMMCUDAM2L(FMM_CUDA *, const FMMPlan *);
/* downward.cu */
PETSC_INTERN PetscErrorCode FMMCUDAL2L(FMM_CUDA *, const FMMPlan *);
PETSC_INTERN PetscErrorCode FMMCUDAL2P(FMM_CUDA *, const FMMPlan *, double *);
PETSC_INTERN PetscErrorCode FMMCUDAScatter(FMM_CUDA *, const FMMPlan *, double *);
PETSC_INTERN PetscErrorCode FMMCUDACombine(FMM_CUDA *, PetscInt, double, double, const double *, const double *, double *, PetscBool);
/* p2p.cu */
PETSC_INTERN PetscErrorCode FMMCUDALogTable(FMM_CUDA *);
PETSC_INTERN PetscErrorCode FMMCUDAP2PTiled(FMM_CUDA *, const FMMPlan *);
PETSC_INTERN PetscErrorCode FMMCUDAP2PSymmetric(FMM_CUDA *, const FMMPlan *); /* p2psym.cu */
PETSC_INTERN PetscErrorCode FMMCUDAP2PIndexing(FMM_CUDA *, const FMMPlan *);
PETSC_INTERN PetscErrorCode FMMCUDAP2PRepetition(FMM_CUDA *, const FMMPlan *);
PETSC_INTERN PetscErrorCode FMMCUDADirect(FMM_CUDA *, const FMMPlan *);
/* walk.cu */
PETSC_INTERN PetscErrorCode FMMCUDAWalkP2L(FMM_CUDA *);
PETSC_INTERN PetscErrorCode FMMCUDAWalkNear(FMM_CUDA *, const PetscInt *, double *);

/* the largest k in [lo, hi) with a(k) <= v, for a nondecreasing and a(lo) <= v */
template <class A>
__device__ __forceinline__ PetscInt FMMLastLEBy(A a, PetscInt lo, PetscInt hi, PetscInt v)
{
  while (hi - lo > 1) {
    const PetscInt mid = lo + (hi - lo) / 2;
    if (a(mid) <= v) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* the same for an array a[] */
__device__ __forceinline__ PetscInt FMMLastLE(const PetscInt *a, PetscInt lo, PetscInt hi, PetscInt v)
{
  return FMMLastLEBy([a](PetscInt k) { return a[k]; }, lo, hi, v);
}

/* grid size for n threads in blocks of bs */
static inline unsigned FMMCUDABlocks(PetscInt64 n, int bs)
{
  return (unsigned)((n + bs - 1) / bs);
}

/* *blocks: the blocks of kern (threads each, shmem bytes of dynamic shared
   memory, granted to it here) that c's GPU holds at once, at least one an SM:
   the grid of a persistent kernel, chosen once per plan by its caller, not
   at every product */
static inline PetscErrorCode FMMCUDAResidentBlocks(const FMM_CUDA *c, const void *kern, int threads, size_t shmem, PetscInt *blocks)
{
  int perSM = 0, sms = 0;

  PetscFunctionBegin;
  if (shmem > 49152) FMMCallCUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
  FMMCallCUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, kern, threads, shmem));
  FMMCallCUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->dev));
  *blocks = (PetscInt)PetscMax(perSM, 1) * sms;
  PetscFunctionReturn(0);
}
