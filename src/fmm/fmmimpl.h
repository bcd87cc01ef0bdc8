/* Private data of MATFMM: the plan (tree + interaction lists) and the backends. */
#pragma once

#include <petscfmm.h>
#include <petscsf.h>
#include <petsc/private/matimpl.h>

#if PETSC_VERSION_LT(3, 20, 0) /* PetscAssertPointer() replaced PetscValid...Pointer() in 3.20 */
  #define PetscAssertPointer(h, arg) PetscValidPointer(h, arg)
#endif

PETSC_INTERN PetscLogEvent MATFMM_Setup, MATFMM_Tree, MATFMM_P2M, MATFMM_M2M, MATFMM_M2L, MATFMM_L2L, MATFMM_L2P, MATFMM_P2P, MATFMM_Direct;

/*
  The plan: built once per geometry at assembly, read by every backend.

  The tree is the asymmetric adaptive pyramid of Goude & Engblom: level l has
  4^l boxes, boxes are numbered level by level (box b of level l has global
  number FMMLevelStart(l) + b), and the four children of box b are 4b..4b+3 of
  the next level.  Sources (all N of them, on every rank) and this rank's
  targets are stored in tree order, so each box owns a contiguous range of
  each; only the leaf ranges are kept (box b of level l owns the leaves
  b*4^(L-l) .. (b+1)*4^(L-l) - 1).

  Interaction lists are directed (target box <- source box).  far[] holds, for
  every box, the source boxes whose multipole expansions are translated into
  its local expansion (M2L); near[] holds, for every leaf, the source leaves it
  sums directly (P2P).  Both are CSR arrays.  Pairs whose target box holds no
  target or whose source box holds no source are dropped.

  Expansions are radius-scaled: box b with centre c_b and scale s_b (the radius
  of the circle about c_b holding its points) stores
    multipole  Phi(z) = A_0 log(z - c) + sum_{k=1..p} A_k (s/(z - c))^k
    local      Phi(z) = sum_{l=0..p} B_l ((z - c)/s)^l
  as 2(p+1) reals: the p+1 real parts, then the p+1 imaginary parts.
*/
typedef struct {
  PetscInt   L;       /* leaves are level L; depth = L + 1 levels */
  PetscInt   nboxes;  /* (4^(L+1) - 1)/3 */
  PetscInt   nleaves; /* 4^L */
  PetscInt   N;       /* sources (global count, all replicated) */
  PetscInt   M;       /* targets on this rank */
  /* sources in tree order */
  PetscInt  *sperm;          /* [N] tree position -> global source index */
  PetscReal *sx, *sy;        /* [N] coordinates */
  PetscReal *cq, *cdx, *cdy; /* [N] charge and dipole per unit density (kernel, weight, normal, 1/2pi) */
  PetscInt  *sleaf;          /* [nleaves+1] source range of each leaf */
  /* this rank's targets in tree order */
  PetscInt  *tperm;  /* [M] tree position -> local target index */
  PetscReal *tx, *ty; /* [M] */
  PetscInt  *tleaf;  /* [nleaves+1] */
  /* boxes */
  PetscReal *cx, *cy, *scale; /* [nboxes] centre and radius (scale of the expansions) */
  PetscInt  *faroff, *far;    /* [nboxes+1], [faroff[nboxes]]: M2L sources of each box */
  PetscInt  *nearoff, *near;  /* [nleaves+1], [nearoff[nleaves]]: P2P source leaves of each leaf */
  PetscInt   maxleafsrc, maxleaftgt;
  PetscInt   nfar;    /* M2L pairs: faroff[nboxes] */
  PetscInt   nearsrc; /* sum over leaves of the neighbour sources (indexing layout length) */
  PetscCount p2ppairs; /* target-source pairs the near field sums */
} FMMPlan;

/* below this many points (sources + targets) the CPU work of one product is
   tens of microseconds: OpenMP threads would cost more than they give, and
   under CPU contention each parallel region can wait a scheduler slice */
#define FMM_OMP_MIN_POINTS 8192

/* The compact split rule of the tree (-mat_fmm_tree_split compact, src/fmm/plan.c
   and cuda/fmm/tree.cu): a box of n points may be cut after h - w .. h + w of its
   points in x or in y order, h = n/2, w = n/FMM_SPLIT_WINDOW; the cost of a cut
   is the sum of its two children's bounding-box half-perimeters (width +
   height), and a cut off the median costs FMM_SPLIT_GAIN times more, so the
   split moves only when that pays.  Both backends evaluate FMMSplitCost with
   the same additions in the same order (no products: nothing to contract into
   an FMA), so they pick bitwise the same cuts. */
#define FMM_SPLIT_WINDOW 32
#define FMM_SPLIT_GAIN   1.5
#define FMMHalfPerimeter(x0, y0, x1, y1) (((x1) - (x0)) + ((y1) - (y0)))

static inline PetscInt FMMLevelStart(PetscInt l)
{
  return ((((PetscInt)1) << (2 * l)) - 1) / 3;
}

/* A backend evaluates the plan.  mult() gets the N densities in global source
   order (host memory) and writes the M potentials in local target order
   (host memory), without the diagonal/shift/scale terms, which the Mat layer adds. */
typedef struct _FMMBackendOps *FMMBackend;
struct _FMMBackendOps {
  const char *name;
  PetscErrorCode (*plan)(Mat);                                   /* builds the plan itself (NULL: FMMPlanBuild on the host) */
  PetscErrorCode (*setup)(Mat);                                  /* after the plan is built */
  PetscErrorCode (*mult)(Mat, const PetscScalar *, PetscScalar *); /* FMM product (output NULL: kept for combine) */
  PetscErrorCode (*direct)(Mat, const PetscScalar *, PetscScalar *); /* exact O(NM) product (likewise) */
  /* y = [y +] scale (the product kept) + (shift + d) .* x, x, d (or NULL) and y in device memory (NULL: not supported) */
  PetscErrorCode (*combine)(Mat, const PetscScalar *, const PetscScalar *, PetscScalar *, PetscBool);
  PetscErrorCode (*destroy)(Mat);
  PetscErrorCode (*view)(Mat, PetscViewer); /* backend lines of -mat_view (ASCII, after assembly; NULL: none) */
};

typedef struct _n_FMMCUDAMirror *FMMCUDAMirror; /* a GPU copy of the page-locked sources (cuda/fmm/points.cu) */

typedef struct {
  /* user data, as given (local parts) */
  PetscInt     nsrc, ntgt; /* local counts; ntgt < 0: targets are the sources */
  PetscReal   *src, *nrm, *wts, *tgt; /* src, nrm and wts: one block, at src */
  PetscBool    hasnrm, haswts;
  PetscInt     nrefill;             /* MatFMMSetSources() calls that refilled that block (same sizes) */
  PetscBool    srcpinned, srcpinno; /* the CUDA backend page-locked the block; it tried and was refused */
  FMMCUDAMirror mirror;            /* srcpinned: the block's copy in GPU memory, sent by MatFMMSetSources() (cuda/fmm/points.cu) */
  PetscInt     badsrc, badnrm, badwts, badtgt; /* first NaN/Inf entry of each copy, -1: none (found while copying) */
  PetscReal    badv[4];                        /* their values (src, nrm, wts, tgt) */
  PetscBool    srcdev, tgtdev;                 /* the copies (src block, tgt) are in device memory: given there (CUDA backend) */
  PetscInt     srcdistinct;                    /* srcdev: the first local source not at source 0's place (-1: none) */
  MatFMMKernel kernel;
  PetscReal    alpha, beta; /* operator = alpha D + beta S */
  /* parameters */
  PetscInt     ct, p, p_user;
  PetscReal    eps, theta;
  MatFMMLayout layout;
  MatFMMMethod method;
  MatFMMDevice device, device_used;
  PetscBool    setvectype; /* MatCreateVecs() gives VECCUDA because the matrix is on the GPU (SetVecType) */
  PetscReal    repetition_mb;
  PetscBool    ct_set;                      /* CT given by the user; else the device's default */
  PetscBool    split_median;                /* the seed's split rule: median along the longer side (-mat_fmm_tree_split median) */
  PetscBool    cuda_m2l_tc, cuda_log_fast; /* CUDA kernel choices (-mat_fmm_cuda_m2l, -mat_fmm_cuda_log) */
  PetscBool    cuda_tree_gpu;              /* the CUDA backend builds the plan on the GPU (-mat_fmm_cuda_tree) */
  PetscBool    cuda_p2p_sym;               /* CUDA tiled P2P evaluates each unordered pair once when it can (-mat_fmm_cuda_p2p_symmetric) */
  PetscBool    cuda_split_local;           /* the GPU tree's last splitting rounds in shared memory where the device allows (-mat_fmm_cuda_split_local) */
  PetscInt     cuda_key_bits;              /* the GPU tree's sort keys: 1 to 32 quantized bits, 64 exact (-mat_fmm_cuda_tree_key_bits) */
  PetscInt     cuda_list_room;             /* the GPU lists' entries per box before their sizes are known (-mat_fmm_cuda_tree_list_room) */
  /* diagonal terms: y = scale*K x + diag .* x + shift*x */
  PetscScalar  scale, shift;
  Vec          diag; /* NULL when none (row layout) */
  /* setup */
  PetscBool    setup;
  PetscSF      sf;       /* allgather of the source data and densities */
  PetscScalar *sigma;    /* [N] gathered densities (global order) */
  PetscScalar *pot;      /* [M] potentials, local target order */
  PetscReal   *gsrc, *gnrm, *gwts; /* [2N],[2N],[N] gathered source data (global order) */
  PetscReal   *gtgt;               /* [2 Mglobal] gathered targets (NULL: the targets are the sources) */
  PetscBool    galias;             /* one rank: the g* arrays are the user's arrays (src, nrm, wts, tgt), not copies */
  FMMPlan      plan;
  FMMBackend   ops;
  void        *backend; /* backend private data */
} Mat_FMM;

/* reals in the block of n sources (MatFMMSetSources): points, then normals, then weights */
static inline size_t FMMSourceBlock(PetscInt n, PetscBool nrm, PetscBool w)
{
  return (size_t)n * (2 + (nrm ? 2 : 0) + (w ? 1 : 0));
}

PETSC_INTERN PetscErrorCode FMMPlanBuild(Mat);
PETSC_INTERN PetscErrorCode FMMPlanDestroy(FMMPlan *);
PETSC_INTERN PetscErrorCode FMMChooseOrder(PetscReal, PetscReal, PetscInt *);
PETSC_INTERN void           FMMCopyReals(PetscReal *, const PetscReal *, PetscInt);

PETSC_INTERN struct _FMMBackendOps FMMBackendCPU;
#if defined(PETSCFMM_HAVE_CUDA)
PETSC_INTERN struct _FMMBackendOps FMMBackendCUDA;
PETSC_INTERN PetscErrorCode FMMCUDADeviceCount(int *);
PETSC_INTERN PetscErrorCode FMMCUDAInitializeContext(void);
PETSC_INTERN PetscErrorCode FMMCUDAUnpin(void *);
PETSC_INTERN PetscErrorCode FMMCUDAWarmUpSorts(void);
PETSC_INTERN PetscErrorCode FMMCUDAIsDeviceMemory(const void *, PetscBool *);
PETSC_INTERN PetscErrorCode FMMCUDAPointsAlloc(size_t, PetscReal **);
PETSC_INTERN PetscErrorCode FMMCUDAPointsFree(PetscReal *);
PETSC_INTERN PetscErrorCode FMMCUDACopyChecked(PetscInt, PetscReal *const[], const PetscReal *const[], const PetscInt[], PetscInt[], PetscReal[], PetscInt *);
PETSC_INTERN PetscErrorCode FMMCUDAPointsToHost(PetscReal *, const PetscReal *, size_t);
PETSC_INTERN PetscErrorCode FMMCUDAPointsLoad(void);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorBegin(FMMCUDAMirror *, size_t, PetscBool *);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorPut(FMMCUDAMirror, const PetscReal *, size_t, size_t);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorMark(FMMCUDAMirror, int);
PETSC_INTERN PetscErrorCode FMMCUDAMirrorDestroy(FMMCUDAMirror *);
#endif
