/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): what the stages
  of the plan on the GPU share.  CUB's scratch and scans, the order of doubles
  as unsigned keys, and the state of one tree build (FMMTreeWork).
*/
#pragma once

/* the CUB scratch buffer, grown on demand (lent: part of a block it does not free) */
typedef struct {
  void     *tmp;
  size_t    bytes;
  PetscBool lent;
} Scratch;

static PetscErrorCode ScratchEnsure(FMM_CUDA *c, Scratch *s, size_t need)
{
  PetscFunctionBegin;
  if (need <= s->bytes) PetscFunctionReturn(0);
  if (s->tmp && !s->lent) PetscCall(FMMCUDAFree(c->stream, s->tmp));
  s->tmp   = NULL;
  s->bytes = 0;
  s->lent  = PETSC_FALSE;
  PetscCall(FMMCUDAMalloc(c->stream, &s->tmp, need, "the scratch space of the tree build"));
  s->bytes = need;
  PetscFunctionReturn(0);
}

/* out[0..n] = the exclusive scan of in[0..n] by op from init (any iterators) */
template <class In, class Out, class Op, class T>
static PetscErrorCode ExclusiveScanBy(FMM_CUDA *c, Scratch *s, In in, Out out, Op op, T init, PetscInt n)
{
  size_t need = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cub::DeviceScan::ExclusiveScan(NULL, need, in, out, op, init, (int)(n + 1), c->stream));
  PetscCall(ScratchEnsure(c, s, need));
  FMMCallCUDA(cub::DeviceScan::ExclusiveScan(s->tmp, need, in, out, op, init, (int)(n + 1), c->stream));
  PetscFunctionReturn(0);
}

/* out[0..n] = exclusive prefix sums of in[0..n] (in[n] is 0: out[n] is the total) */
template <class T>
static PetscErrorCode ExclusiveScan(FMM_CUDA *c, Scratch *s, const T *in, T *out, PetscInt n)
{
  PetscFunctionBegin;
  PetscCall(ExclusiveScanBy(c, s, in, out, ::cuda::std::plus<>(), T(0), n));
  PetscFunctionReturn(0);
}

/* ExclusiveScan for three arrays of one length in one scan of triples: one
   CUB scan instead of three, as the host's launches of each bound the P2P
   work of an assembly */
struct Sum3 {
  template <class T>
  __device__ __forceinline__ T operator()(const T &a, const T &b) const
  {
    return T(thrust::get<0>(a) + thrust::get<0>(b), thrust::get<1>(a) + thrust::get<1>(b), thrust::get<2>(a) + thrust::get<2>(b));
  }
};

static PetscErrorCode ExclusiveScan3(FMM_CUDA *c, Scratch *s, const PetscInt *a, const PetscInt *b, const PetscInt *d, PetscInt *oa, PetscInt *ob, PetscInt *od, PetscInt n)
{
  PetscFunctionBegin;
  PetscCall(ExclusiveScanBy(c, s, thrust::make_zip_iterator(a, b, d), thrust::make_zip_iterator(oa, ob, od), Sum3(), thrust::tuple<PetscInt, PetscInt, PetscInt>(0, 0, 0), n));
  PetscFunctionReturn(0);
}

/* the order of the doubles as unsigned integers (-0 taken as +0, as the CPU's
   comparison does), and back */
__device__ __forceinline__ unsigned long long OrderKey(double v)
{
  const unsigned long long u = (unsigned long long)__double_as_longlong(v + 0.0);
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

__device__ __forceinline__ double OrderValue(unsigned long long u)
{
  return __longlong_as_double((long long)((u >> 63) ? (u & 0x7fffffffffffffffull) : ~u));
}

#define LAUNCH_N(n) FMMCUDABlocks((PetscInt64)(n), BS), BS, 0, c->stream
#define SORT_PARTS_MIN (1 << 21) /* points from which they go up and are sorted in two parts (below it the parts' merge costs more than the overlap gains) */

/* the other coordinate over a run of ranks: y over the X list, x over the Y list */
typedef struct {
  double ylo, yhi, xlo, xhi;
} SplitExt;

/* the states of the tiles of SplitMoveKernel's look-back (below) */
typedef cub::ScanTileState<long long> SplitTiles;

/* the work arrays of the compact split, sized for the last round */
typedef struct {
  PetscInt            nslot; /* slots of the last round, the most of any round (the stride of cost) */
  PetscInt           *rank;
  unsigned long long *core, *best;
  SplitExt           *tile;
  double             *cost;
} SplitWork;

/* three sizes on the device, copied next to others for one readback */
typedef struct {
  const PetscInt *p[3];
} Totals3;

/* the state of one tree build (FMMCUDATreeBuild), which its stages share:
   the work block's arrays (see there), the sort's (TreeSort, sort.cuh), the
   splitting rounds' (TreeSplit) and the lists' (TreeLists, lists.cuh) */
typedef struct {
  FMM_CUDA               *c;
  FMMPlan                *P;
  const FMMCUDATreeInput *in;
  PetscInt                L, nleaves, nboxes, nroot; /* nroot boxes at the top: 1, or a rank's subtrees (FMMCUDASubtrees) */
  Scratch                 s;         /* CUB's scratch: in the work block (lent), or grown */
  PetscInt                K, h;      /* the points go up in K parts: [0, h) and [h, U) */
  PetscBool               shortkeys; /* sorted through short keys (SortShort) */
  size_t                  n2;        /* the scratch of one of SortShort's sorts */
  unsigned long long     *kx, *ky, *kt;
  PetscInt               *val, *X, *Y, *seg, *cseg, *off, *noff, *fs, *ss, *ft, *st, *dmax;
  char                   *dir, *tst; /* split directions; the tiles' states of SplitMoveKernel (tbytes) */
  size_t                  tbytes;
  PetscInt                ntiles;    /* of SplitMoveKernel */
  unsigned char          *sel, *nsel;
  double                 *bb, *XO, *YO;
  SplitWork               sp;
  PetscBool               lsplit;    /* SplitLocalKernel runs on this device */
  cudaEvent_t             lated;     /* the normals and weights are up */
} FMMTreeWork;
