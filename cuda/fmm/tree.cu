/*
  The plan on the GPU: the topological phase of Goude & Engblom (2013, Sec. 3)
  with CUB, producing the tree and lists of src/fmm/plan.c where they are used, so
  that an assembly moves only the points across the bus.

  Splits without sorting each box.  The points (sources, then the
  targets of all ranks) are sorted once by the key (x, index) and once by
  (y, index) with CUB's radix sort, which is stable, so equal coordinates go
  by index as in src/fmm/plan.c (through 32-bit keys and then their ties:
  SortShort).  Two lists of point indices, X and Y, then hold the points of
  every box contiguously, each sorted in its own direction.  A box's
  bounding box is read off the ends of its two ranges.  Its split direction d
  and cut (the longer side and the median with -mat_fmm_tree_split median,
  else the compact split below) take the first points of its d-list as they
  are, and the d-list stays where it is; the other list is split by a stable
  partition into its second buffer (one pass over all boxes at once,
  SplitMoveKernel: each point's key compared with the cut's, a segmented
  scan of these flags, the point moved), so each box records which buffer holds each of its lists.
  Each list carries the other coordinate of its points, so a round
  reads its lists in order.  Both lists stay sorted within every
  box, so a level costs O(N), and the boxes are those of src/fmm/plan.c: the same
  keys and the same cost sums give the same cuts.  Points in a leaf are in x order (the CPU
  leaves them in selection order; only rounding of sums depends on it).  Once
  the segments fit in shared memory, the rounds left run in one launch, a
  block per segment (SplitLocalKernel).

  The theta-criterion lists are built level by level as in src/fmm/plan.c, one
  thread per candidate pair (the children of a strong pair of the level
  above): one exclusive scan counts and places them (the criterion is
  evaluated as the scan reads its input), one kernel writes them and the
  boxes' offsets, in the CPU's order (the first levels, of few candidates,
  all in one block and one launch).  The sizes stay on the GPU: each level's
  lists get room for a number of entries per box, and the host reads the
  sizes once, after the last level (lists that did not fit are built again
  with the sizes found).  Then the work
  arrays of the product that depend on the lists: the M2L chunks and partial
  sums and the P2P items (see fmmcuda.h), and the statistics of the host plan.  Only the box-level
  statistics come back to the host; the host FMMPlan keeps no arrays.
*/
#include "fmmcuda.h"
#include <cub/cub.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/zip_iterator.h>

#define BS 256

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
   CUB scan instead of three (each costs the host about 9 us of launches, and
   the P2P work of an assembly at 10^6 points is bound by them, H100) */
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

/* ---------------------------------------------------------------- the tree */

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

/* radix keys of (coordinate, index); values are indices */
__global__ void KeysKernel(PetscInt a, PetscInt b, const double *xy, unsigned long long *kx, unsigned long long *ky, PetscInt *val)
{
  FMMWaitPrior();
  const PetscInt i = a + (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= b) return;
  kx[i]  = OrderKey(xy[2 * i]);
  ky[i]  = OrderKey(xy[2 * i + 1]);
  val[i] = i;
}

/* ---- short keys: the same order from a sort of fewer bits

   A radix sort of the 64-bit keys above makes 8 passes.  Quantized to b bits
   (-mat_fmm_cuda_tree_key_bits, default 32) over the points' bounding box,
   q(x) = floor(2^b (x - xmin) / (xmax - xmin)) never decreases with x (each
   rounded operation is monotone), so a stable sort by q is the order by
   (x, index) except within runs of equal q whose points differ in x by less
   than a 2^-b-th of the box: FixRunsKernel sorts each such run of up to
   FIX_RUN points by (x, index) (one thread; two or three points in practice).
   Longer runs come where points crowd along one coordinate, as a curve's do
   where its tangent is perpendicular to it (about 50 points a run at 10^7
   points on the star curve), or when the box's width is 0 or overflows (all
   keys 0): if one of them is out of order, the points of all runs longer
   than FIX_RUN are selected (in order, so equal coordinates stay in index
   order) and sorted by their 64-bit keys, which orders them across runs as
   the short keys do.  Two sorts of 4 passes instead of 8: the sort stage of
   an assembly again 0.47 -> 0.29 ms at 10^6 points, 2.56 -> 1.76 ms at 10^7
   (H100, the star curve; 24 or 28 bits measured no faster than 32). */
#define FIX_RUN 32

typedef struct {
  unsigned long long lo[2], hi[2]; /* OrderKey of the least and greatest x and y */
} KeyBox;

struct KeyBoxOf {
  const double *xy;
  __device__ __forceinline__ KeyBox operator()(PetscInt i) const
  {
    const unsigned long long x = OrderKey(xy[2 * i]), y = OrderKey(xy[2 * i + 1]);
    return KeyBox{{x, y}, {x, y}};
  }
};

struct KeyBoxJoin {
  __device__ __forceinline__ KeyBox operator()(const KeyBox &a, const KeyBox &b) const
  {
    KeyBox r;
    for (int d = 0; d < 2; d++) {
      r.lo[d] = a.lo[d] < b.lo[d] ? a.lo[d] : b.lo[d];
      r.hi[d] = a.hi[d] > b.hi[d] ? a.hi[d] : b.hi[d];
    }
    return r;
  }
};

/* the b-bit key of coordinate v in [lo, hi]; 0 when the width is 0 or not finite (one run) */
__device__ __forceinline__ unsigned int ShortKey(double v, double lo, double hi, int bits)
{
  const double w = __dsub_rn(hi, lo), top = ldexp(1.0, bits);
  if (!(w > 0) || !isfinite(w)) return 0;
  const double t = __dmul_rn(__ddiv_rn(__dsub_rn(v, lo), w), top); /* t * 2^b is exact: no rounding after the division */
  return t >= top ? (unsigned int)(top - 1) : (unsigned int)t;
}

/* short radix keys of both coordinates, values are indices; clears the flags of FixRunsKernel */
__global__ void ShortKeysKernel(PetscInt U, int bits, const double *xy, const KeyBox *box, unsigned int *qx, unsigned int *qy, PetscInt *val, int *flag)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) flag[0] = flag[1] = 0;
  if (i >= U) return;
  qx[i]  = ShortKey(xy[2 * i], OrderValue(box->lo[0]), OrderValue(box->hi[0]), bits);
  qy[i]  = ShortKey(xy[2 * i + 1], OrderValue(box->lo[1]), OrderValue(box->hi[1]), bits);
  val[i] = i;
}

/* (coordinate d of point a, a) < (that of b, b); -0 equals +0 */
__device__ __forceinline__ bool CoordIndexLess(const double *xy, int d, PetscInt a, PetscInt b)
{
  const double u = xy[2 * a + d], v = xy[2 * b + d];
  return u < v || (u == v && a < b);
}

/* the first and last positions s, e of the run of equal keys q around pair
   (i, i + 1), looked for up to FIX_RUN positions either way; whether the run
   is longer than FIX_RUN (when not, [s, e] is all of it) */
__device__ __forceinline__ bool RunOf(PetscInt U, const unsigned int *q, PetscInt i, PetscInt *s, PetscInt *e)
{
  *s = i;
  *e = i + 1;
  while (*s > 0 && i - *s < FIX_RUN && q[*s - 1] == q[i]) (*s)--;
  while (*e + 1 < U && *e + 1 - *s < FIX_RUN && q[*e + 1] == q[i]) (*e)++;
  return *e - *s + 1 > FIX_RUN || (*s > 0 && q[*s - 1] == q[i]) || (*e + 1 < U && q[*e + 1] == q[i]); /* (the walk back can reach past FIX_RUN) */
}

/* list d (blockIdx.y) sorted by its short keys q: each run of equal keys of
   up to FIX_RUN points sorted by (coordinate, index) by the thread of its
   first pair; an unsorted pair in a longer run sets flag[d].  Only a run's
   first thread writes it, and no thread reads the indices of a short run */
__global__ void FixRunsKernel(PetscInt U, const unsigned int *qx, const unsigned int *qy, PetscInt *X, PetscInt *Y, const double *xy, int *flag)
{
  FMMWaitPrior();
  const PetscInt      i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  const int           d = blockIdx.y;
  const unsigned int *q = d ? qy : qx;
  PetscInt           *id = d ? Y : X, s, e;
  if (i + 1 >= U || q[i] != q[i + 1]) return;
  if (RunOf(U, q, i, &s, &e)) {
    if (CoordIndexLess(xy, d, id[i + 1], id[i])) flag[d] = 1;
    return;
  }
  if (s != i) return;
  {
    PetscInt r[FIX_RUN], n = e - s + 1;
    for (PetscInt k = 0; k < n; k++) {
      const PetscInt a = id[s + k];
      PetscInt       j = k;
      for (; j > 0 && CoordIndexLess(xy, d, a, r[j - 1]); j--) r[j] = r[j - 1];
      r[j] = a;
    }
    for (PetscInt k = 0; k < n; k++) id[s + k] = r[k];
  }
}

/* mark[i]: position i is in a run of more than FIX_RUN equal keys */
__global__ void LongRunsKernel(PetscInt U, const unsigned int *q, unsigned char *mark)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  PetscInt       s, e;
  if (i >= U) return;
  mark[i] = (i + 1 < U && q[i] == q[i + 1] && RunOf(U, q, i, &s, &e)) || (i > 0 && q[i - 1] == q[i] && RunOf(U, q, i - 1, &s, &e));
}

/* the 64-bit keys (coordinate d) and indices of the n selected positions pos of list id */
__global__ void RunKeysKernel(PetscInt n, const PetscInt *pos, const PetscInt *id, const double *xy, int d, unsigned long long *key, PetscInt *val)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  val[k] = id[pos[k]];
  key[k] = OrderKey(xy[2 * val[k] + d]);
}

/* the sorted indices back to the selected positions */
__global__ void RunScatterKernel(PetscInt n, const PetscInt *pos, const PetscInt *val, PetscInt *id)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) id[pos[k]] = val[k];
}

/* the order of (key, index) pairs: the merge of two sorted parts gives what
   one stable sort of the keys gives (cub::DeviceMerge is not stable) */
struct KeyIndexLess {
  template <class T>
  __device__ __forceinline__ bool operator()(const T &p, const T &q) const
  {
    return thrust::get<0>(p) < thrust::get<0>(q) || (thrust::get<0>(p) == thrust::get<0>(q) && thrust::get<1>(p) < thrust::get<1>(q));
  }
};

/* the other coordinate along each sorted list: XO[k] = y of point X[k], YO[k] =
   x of point Y[k]; the splits carry them with the lists, so that the kernels
   of a round read them in order instead of gathering from xy */
__global__ void OtherKernel(PetscInt U, const PetscInt *X, const PetscInt *Y, const double *xy, double *XO, double *YO)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  XO[k] = xy[2 * X[k] + 1];
  YO[k] = xy[2 * Y[k]];
}

/* the two sorted lists of a round, each in two buffers: a split moves only
   the list other than its direction d, into its other buffer, and leaves the
   d-list in place (copying it as well, into a second pair of arrays, was a
   third of the traffic of a round), so each segment records where its two
   lists are */
typedef struct {
  PetscInt      *id;       /* list l (0: the x list X, 1: the y list Y) in buffer b at id + (l + 2b) nid: point indices */
  double        *ot;       /* at ot + (l + 2b) nco: the coordinate across list l that it carries (XO: y, YO: x) */
  PetscInt64     nid, nco; /* (arithmetic: a kernel that indexes an array of pointers by a variable copies it to its stack) */
  unsigned char *sel;      /* per segment of the round: bit l is the buffer of list l */
} SplitLists;

/* the buffer of list l of segment s */
__device__ __forceinline__ int ListBuf(const SplitLists &L, int l, PetscInt s)
{
  return (L.sel[s] >> l) & 1;
}

__device__ __forceinline__ PetscInt *ListId(const SplitLists &L, int l, int b)
{
  return L.id + (l + 2 * b) * L.nid;
}

__device__ __forceinline__ double *ListOt(const SplitLists &L, int l, int b)
{
  return L.ot + (l + 2 * b) * L.nco;
}

/* the other coordinate over a run of ranks: y over the X list, x over the Y list */
typedef struct {
  double ylo, yhi, xlo, xhi;
} SplitExt;

__device__ __forceinline__ SplitExt SplitExtJoin(const SplitExt &a, const SplitExt &b)
{
  return SplitExt{fmin(a.ylo, b.ylo), fmax(a.yhi, b.yhi), fmin(a.xlo, b.xlo), fmax(a.xhi, b.xhi)};
}

struct SplitExtOp {
  __device__ __forceinline__ SplitExt operator()(const SplitExt &a, const SplitExt &b) const { return SplitExtJoin(a, b); }
};

#define SPLIT_EXT_NONE SplitExt{PETSC_MAX_REAL, -PETSC_MAX_REAL, PETSC_MAX_REAL, -PETSC_MAX_REAL}

/* the first of segment s's slots for candidates, from its offset: the ranges
   floor(o / 16) + s are disjoint and hold the 2 floor(n/32) + 1 candidates
   (floor(a/16) - floor(b/16) >= floor((a - b)/16) >= 2 floor((a - b)/32)),
   and all segments of a round take floor(U/16) + nseg slots */
__device__ __forceinline__ PetscInt SplitStart(const PetscInt *off, PetscInt s)
{
  return off[s] / (FMM_SPLIT_WINDOW / 2) + s;
}

/* a box's bounding box as GeometryKernel reads it: (xmin, ymin, -xmax, -ymax), PETSC_MAX_REAL when empty (n = 0) */
__device__ __forceinline__ void BoxSet(double *q, PetscInt n, double xmin, double ymin, double xmax, double ymax)
{
  q[0] = n > 0 ? xmin : PETSC_MAX_REAL;
  q[1] = n > 0 ? ymin : PETSC_MAX_REAL;
  q[2] = n > 0 ? -xmax : PETSC_MAX_REAL;
  q[3] = n > 0 ? -ymax : PETSC_MAX_REAL;
}

/* the states of the tiles of SplitMoveKernel's look-back (below) */
typedef cub::ScanTileState<long long> SplitTiles;

/* one thread per segment (box or half box) of a round: its bounding box from
   the ends of its X and Y ranges, the split direction (the longer side, as in
   src/fmm/plan.c) and the offsets of its two halves; bb (when not NULL) receives
   (xmin, ymin, -xmax, -ymax), or PETSC_MAX_REAL for an empty box.  With the
   compact split (core not NULL) also the starting values of the segment's
   reductions (core: ylo, yhi, xlo, xhi of the ranks below the window, then of
   those above it, as order keys).  With cseg (not NULL), thread i also finds
   the segment of position i SEG_CHUNK (i < nc; cseg[nc] = nseg - 1), for
   SegmentOf, and with ntiles > 0 thread i < ntiles sets the state of tile i
   of the round's SplitMoveKernel (threads: at least ntiles). */
#define SEG_CHUNK 256
__global__ void SegmentKernel(PetscInt nseg, const PetscInt *off, SplitLists L, const double *xy, PetscInt *noff, char *dir, double *bb, unsigned long long *core, unsigned long long *best, PetscInt *rank, PetscInt nc, PetscInt *cseg, SplitTiles tiles, int ntiles)
{
  FMMWaitPrior();
  const PetscInt s = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (ntiles) tiles.InitializeStatus(ntiles);
  if (cseg && s <= nc) cseg[s] = s < nc ? FMMLastLE(off, 0, nseg, s * SEG_CHUNK) : nseg - 1;
  if (s >= nseg) return;
  const PetscInt o = off[s], n = off[s + 1] - o;
  double         xmin = 0, xmax = 0, ymin = 0, ymax = 0;
  if (n > 0) {
    const PetscInt *X = ListId(L, 0, ListBuf(L, 0, s)), *Y = ListId(L, 1, ListBuf(L, 1, s));
    xmin = xy[2 * X[o]];
    xmax = xy[2 * X[o + n - 1]];
    ymin = xy[2 * Y[o] + 1];
    ymax = xy[2 * Y[o + n - 1] + 1];
  }
  if (noff) {
    noff[2 * s]     = o;
    noff[2 * s + 1] = o + n / 2;
    if (s == nseg - 1) noff[2 * nseg] = o + n;
    dir[s] = (n >= 2 && ymax - ymin > xmax - xmin) ? 1 : 0;
  }
  if (bb) BoxSet(bb + 4 * s, n, xmin, ymin, xmax, ymax);
  if (core) {
    for (int j = 0; j < 8; j++) core[8 * s + j] = (j % 2) ? 0ull : ~0ull;
    best[s] = ~0ull;
    rank[s] = PETSC_MAX_INT;
  }
}

/* the segment of position k < U: the last s with off[s] <= k, searched
   between the segments of the chunk's ends (one or two steps, where a search
   of all segments, a step a round deeper, took a tenth of a round's time) */
__device__ __forceinline__ PetscInt SegmentOf(PetscInt k, const PetscInt *off, const PetscInt *cseg)
{
  const PetscInt c = k / SEG_CHUNK;
  return FMMLastLE(off, cseg[c], cseg[c + 1] + 1, k);
}

/* the direction d and the cut of segment s: the compact split's pick (rank
   given, two points or more), else SegmentKernel's median */
__device__ __forceinline__ void SplitOf(PetscInt s, const PetscInt *off, const PetscInt *noff, const char *dir, const PetscInt *rank, int *d, PetscInt *cut)
{
  const PetscInt o = off[s], n = off[s + 1] - o;
  if (rank && n >= 2) {
    const PetscInt w = n / FMM_SPLIT_WINDOW, r = rank[s];
    *d   = (int)(r / (2 * w + 1));
    *cut = o + n / 2 - w + r % (2 * w + 1);
  } else {
    *d   = dir[s];
    *cut = noff[2 * s + 1];
  }
}

/* the split of a round: one pass over all positions (SplitMoveKernel), a
   tile of MTILE consecutive positions a block, MIT a thread.  Position k of
   the list other than its segment's d goes to the first child when its point
   comes before the cut's point in the sort order (coordinate d, then index)
   of the d-list; the first child takes these flagged points in order, then
   the second the rest (a stable partition).  A point's place is the count of
   flagged positions before it in its segment: CUB's single-pass scan (a
   BlockScan of the tile, and the look-back over the tiles before it,
   TilePrefixCallbackOp) of values that hold the count since the segment's
   start (SPLIT_CNT bits), whether a segment starts there (SPLIT_HEAD) and
   the position's own flag (SPLIT_FLAG).  It replaces cub::DeviceScan over
   iterators that found each position's segment and split twice, once for
   the flag and once for the move (a flag kernel, a scan and a partition
   kernel before that measured 0.36 ms a round at 10^7 points, H100). */
#define SPLIT_CNT  0xffffffffll
#define SPLIT_HEAD (1ll << 32)
#define SPLIT_FLAG (1ll << 33)
#define MNT        256 /* threads of a move block */
#define MIT        8   /* consecutive positions a thread */
#define MTILE      (MNT * MIT)

/* the segmented sum: a head restarts the count; the result keeps b's flag */
struct SplitCountOp {
  __device__ __forceinline__ long long operator()(long long a, long long b) const { return (b & SPLIT_HEAD) ? b : (a & (SPLIT_CNT | SPLIT_HEAD)) + b; }
};

/* segment s of a round as its moves need it: its positions [o, e), the cut,
   the list l other than the split's direction d in buffer b, the cut's point
   q with its coordinate cv along d */
typedef struct {
  PetscInt s, o, e, cut, q;
  int      l, b;
  double   cv;
} SplitSeg;

__device__ __forceinline__ void SplitSegAt(SplitSeg *g, PetscInt s, const PetscInt *off, const PetscInt *noff, const char *dir, const PetscInt *rank, const SplitLists &L, const double *xy)
{
  int d;
  g->s = s;
  g->o = off[s];
  g->e = off[s + 1];
  SplitOf(s, off, noff, dir, rank, &d, &g->cut);
  g->l  = 1 - d;
  g->b  = ListBuf(L, g->l, s);
  g->q  = ListId(L, d, ListBuf(L, d, s))[g->cut];
  g->cv = xy[2 * g->q + d];
}

/* g: the segment of position k (g holds one at or before it) */
__device__ __forceinline__ void SplitSegFor(SplitSeg *g, PetscInt k, const PetscInt *off, const PetscInt *noff, const char *dir, const PetscInt *rank, const SplitLists &L, const double *xy)
{
  PetscInt s;
  if (k < g->e) return;
  s = g->s;
  while (off[s + 1] <= k) s++;
  SplitSegAt(g, s, off, noff, dir, rank, L, xy);
}

/* the split of a round (tile t = block t; tiles: initialized by SegmentKernel):
   every position of the list other than d to its place in the other buffer;
   at a segment's start, the children's buffers (nsel) and the compact
   split's cut (noff, for the next round).  Each warp takes 32 MIT
   consecutive positions, lane i those i + 32 j (warp-striped: the loads and
   the moves of a warp are consecutive), exchanged through shared memory to
   MIT consecutive ones a thread for the scan and back (with MIT consecutive
   positions a thread throughout, a warp's accesses spread over 32 lines:
   the split stage at 10^6 points 15% slower than CUB's scan, H100).  Four
   blocks an SM (64 registers) rather than three (80): 25 -> 20 us a round
   at 10^6 points, against 25 us and 2.5 us of initialisation for CUB's scan
   (ncu, H100); MIT 4 took 22 us */
__global__ void __launch_bounds__(MNT, 4) SplitMoveKernel(PetscInt U, const PetscInt *off, const PetscInt *cseg, PetscInt *noff, const char *dir, const PetscInt *rank, SplitLists L, unsigned char *nsel, const double *xy, SplitTiles tiles)
{
  FMMWaitPrior();
  typedef cub::BlockExchange<long long, MNT, MIT>                       Exchange;
  typedef cub::BlockScan<long long, MNT, cub::BLOCK_SCAN_WARP_SCANS>      Scan;
  typedef cub::TilePrefixCallbackOp<long long, SplitCountOp, SplitTiles> Prefix;
  __shared__ union {
    typename Exchange::TempStorage exchange;
    struct {
      typename Scan::TempStorage   scan;
      typename Prefix::TempStorage prefix;
    } s;
  } tmp;
  const int      t  = blockIdx.x;
  const PetscInt k0 = (PetscInt)t * MTILE + (threadIdx.x / 32) * (32 * MIT) + threadIdx.x % 32; /* this lane's first position */
  PetscInt       p[MIT];
  double         v[MIT];
  long long      x[MIT];
  SplitSeg       g0, g;

  if (k0 < U) SplitSegAt(&g0, SegmentOf(k0, off, cseg), off, noff, dir, rank, L, xy);
  g = g0;
#pragma unroll
  for (int j = 0; j < MIT; j++) { /* the flags */
    const PetscInt k = k0 + 32 * j;
    x[j]             = 0;
    if (k >= U) continue;
    SplitSegFor(&g, k, off, noff, dir, rank, L, xy);
    p[j]        = ListId(L, g.l, g.b)[k];
    v[j]        = ListOt(L, g.l, g.b)[k];
    const int f = (v[j] < g.cv || (v[j] == g.cv && p[j] < g.q)) ? 1 : 0;
    x[j]        = f * (1 + SPLIT_FLAG) + (k == g.o ? SPLIT_HEAD : 0);
  }
  Exchange(tmp.exchange).WarpStripedToBlocked(x);
  __syncthreads();
  if (t == 0) {
    long long all;
    Scan(tmp.s.scan).InclusiveScan(x, x, SplitCountOp(), all);
    if (threadIdx.x == 0) tiles.SetInclusive(0, all);
  } else {
    Prefix pre(tiles, tmp.s.prefix, SplitCountOp(), t);
    Scan(tmp.s.scan).InclusiveScan(x, x, SplitCountOp(), pre);
  }
  __syncthreads();
  Exchange(tmp.exchange).BlockedToWarpStriped(x);
  g = g0;
#pragma unroll
  for (int j = 0; j < MIT; j++) { /* the moves */
    const PetscInt k = k0 + 32 * j;
    if (k >= U) break;
    SplitSegFor(&g, k, off, noff, dir, rank, L, xy);
    const int      f  = (x[j] & SPLIT_FLAG) ? 1 : 0;
    const PetscInt lb = (PetscInt)(x[j] & SPLIT_CNT) - f; /* flagged before k in the segment */
    const PetscInt np = f ? g.o + lb : g.cut + (k - g.o - lb);
    ListId(L, g.l, 1 - g.b)[np] = p[j];
    ListOt(L, g.l, 1 - g.b)[np] = v[j];
    if (k == g.o) {
      nsel[2 * g.s] = nsel[2 * g.s + 1] = (unsigned char)(L.sel[g.s] ^ (1 << g.l));
      if (rank && g.e - g.o >= 2) noff[2 * g.s + 1] = g.cut;
    }
  }
}

/* ------------------------------------------------ the compact split

   Split() of src/fmm/plan.c on all segments of a round at once.  A segment of n
   points at offset o has candidate cuts after ranks h - w + j, j = 0..2w
   (h = n/2, w = n/FMM_SPLIT_WINDOW), in its X list (d = 0) and its Y list
   (d = 1).  Along the list the children's extents are read off its sorted
   ends; across it they come from the extents of ranks below h - w and from
   h + w up (the cores: one pass, atomics on order keys) and from prefix and
   suffix scans of the 2w ranks between (the window).  Segment s's candidates
   take slots SplitStart(off, s) + j.  Candidate j's scans hold window ranks
   below j and from j up.
   Every candidate computes its cost as the CPU does; the least cost wins,
   ties to x, then to the smaller j (the CPU's order). */

/* extents of the candidates of one segment (key; -1: none): the segmented
   scan's operator (keys ascend or descend in runs) */
typedef struct {
  long long key;
  SplitExt  e;
} SplitRun;

struct SplitRunOp {
  __device__ __forceinline__ SplitRun operator()(const SplitRun &a, const SplitRun &b) const { return b.key == a.key ? SplitRun{b.key, SplitExtJoin(a.e, b.e)} : b; }
};

/* the segment whose range holds slot c, the last s with SplitStart(off, s)
   <= c: from g, the owner of slot c - 1 or c + 1 (every range holds a slot,
   so it is g or g +- 1), or by bisection (g < 0) */
__device__ __forceinline__ PetscInt SplitOwner(PetscInt c, PetscInt nseg, const PetscInt *off, PetscInt g)
{
  if (g >= 0) return (g + 1 < nseg && SplitStart(off, g + 1) <= c) ? g + 1 : (SplitStart(off, g) > c ? g - 1 : g);
  return FMMLastLEBy([off](PetscInt s) { return SplitStart(off, s); }, 0, nseg, c);
}

/* slot c of segment s (its owner) holds candidate j, or none (false) past the segment's candidates */
__device__ __forceinline__ bool SplitSlotCandidate(PetscInt c, PetscInt s, const PetscInt *off, PetscInt *j)
{
  const PetscInt n = off[s + 1] - off[s];
  *j               = c - SplitStart(off, s);
  return n >= 2 && *j <= 2 * (n / FMM_SPLIT_WINDOW);
}

/* slot c of segment s (its owner): the candidate j, and the key s with the
   other coordinates of window rank j (none for j = 2w), or key -1 */
__device__ __forceinline__ SplitRun SplitSlot(PetscInt c, PetscInt s, const PetscInt *off, const SplitLists &L, PetscInt *j)
{
  if (!SplitSlotCandidate(c, s, off, j)) return SplitRun{-1, SPLIT_EXT_NONE};
  const PetscInt o = off[s], n = off[s + 1] - o, w = n / FMM_SPLIT_WINDOW, k = o + n / 2 - w + *j;
  if (*j == 2 * w) return SplitRun{s, SPLIT_EXT_NONE};
  const double yv = ListOt(L, 0, ListBuf(L, 0, s))[k], xv = ListOt(L, 1, ListBuf(L, 1, s))[k];
  return SplitRun{s, SplitExt{yv, yv, xv, xv}};
}

/* the cost of candidate j of a segment with window w from its children's
   half-perimeters, as Split() of src/fmm/plan.c (the same additions, no FMA); -0
   (extents of signed zeros) becomes +0, so costs (>= 0) compare as bits */
__device__ __forceinline__ double SplitCost(double hl, double hr, PetscInt j, PetscInt w)
{
  double c = __dadd_rn(hl, hr);
  if (j != w) c = __dmul_rn(c, FMM_SPLIT_GAIN);
  return __dadd_rn(c, 0.0);
}

/* the carry of a block's scan, from the tiles before (or after) it */
struct SplitCarry {
  SplitRun run;
  __device__ __forceinline__ SplitRun operator()(const SplitRun &) const { return run; }
};

__device__ __forceinline__ unsigned long long MinU(unsigned long long a, unsigned long long b)
{
  return a < b ? a : b;
}

__device__ __forceinline__ unsigned long long MaxU(unsigned long long a, unsigned long long b)
{
  return a > b ? a : b;
}

/* lanes of a warp whose equal keys form contiguous runs: on return the last
   lane of each run holds the run's min (even j) and max (odd j) of v[0..nv);
   returns whether this lane is the last of its run */
template <int nv>
__device__ __forceinline__ bool RunMinMax(long long key, unsigned long long *v)
{
  const int lane = threadIdx.x % 32;
  for (int sh = 1; sh < 32; sh <<= 1) {
    const long long kk = __shfl_up_sync(0xffffffffu, key, sh);
    for (int j = 0; j < nv; j++) {
      const unsigned long long u = __shfl_up_sync(0xffffffffu, v[j], sh);
      if (lane >= sh && kk == key) v[j] = (j % 2) ? MaxU(v[j], u) : MinU(v[j], u);
    }
  }
  const long long next = __shfl_down_sync(0xffffffffu, key, 1);
  return lane == 31 || next != key;
}

/* a[j] = min (even j) / max (odd j) of a[j] and v[j], j < nv, by atomics */
template <int nv>
__device__ __forceinline__ void MinMaxAtomics(unsigned long long *a, const unsigned long long *v)
{
  for (int j = 0; j < nv; j++) (j % 2) ? atomicMax(&a[j], v[j]) : atomicMin(&a[j], v[j]);
}

/* a thread's runs of positions of one core (tag: 2s + 0 below the window,
   + 1 above it; -1: none), in order: where tg starts a new run the run
   before goes to dst(tag) by atomics; then (y, x), the other coordinates of
   a position of tg, join the run (v: ylo, yhi, xlo, xhi as order keys) */
template <class Dst>
__device__ __forceinline__ void CoreRunAdd(long long tg, double y, double x, long long *tag, unsigned long long *v, Dst dst)
{
  if (tg != *tag) {
    if (*tag >= 0) MinMaxAtomics<4>(dst(*tag), v);
    *tag = tg;
    v[0] = v[2] = ~0ull;
    v[1] = v[3] = 0;
  }
  if (tg < 0) return;
  const unsigned long long ky = OrderKey(y), kx = OrderKey(x);
  v[0]                        = MinU(v[0], ky);
  v[1]                        = MaxU(v[1], ky);
  v[2]                        = MinU(v[2], kx);
  v[3]                        = MaxU(v[3], kx);
}

/* min (even j) / max (odd j) of v[0..nv) over the nt threads of the block with
   one key >= 0 (equal keys are contiguous; -1: nothing), applied to dst(key)
   by atomics: one set per run of lanes, and one per run of warps that hold a
   single key.  Atomics on one address queue (about a nanosecond each) and the
   first rounds have a few segments of millions of points. */
template <int nv, int nt, class Dst>
__device__ __forceinline__ void BlockRunAtomics(long long key, unsigned long long *v, Dst dst)
{
  __shared__ long long          bkey[nt / 32];
  __shared__ unsigned long long bv[nt / 32][nv];
  const int                     lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  const bool                    uniform = __match_any_sync(0xffffffffu, key) == 0xffffffffu;
  const bool                    last    = RunMinMax<nv>(key, v);

  if (lane == 31) bkey[wid] = uniform ? key : -1;
  if (uniform && lane == 31)
    for (int j = 0; j < nv; j++) bv[wid][j] = v[j];
  if (!uniform && last && key >= 0) {
    MinMaxAtomics<nv>(dst(key), v);
  }
  __syncthreads();
  if (threadIdx.x) return;
  for (int w0 = 0, w1; w0 < nt / 32; w0 = w1) {
    for (w1 = w0 + 1; w1 < nt / 32 && bkey[w1] == bkey[w0]; w1++)
      for (int j = 0; j < nv; j++) bv[w0][j] = (j % 2) ? MaxU(bv[w0][j], bv[w1][j]) : MinU(bv[w0][j], bv[w1][j]);
    if (bkey[w0] < 0) continue;
    MinMaxAtomics<nv>(dst(bkey[w0]), bv[w0]);
  }
}

/* two slots a thread (128 registers: two blocks an SM) rather than four (176:
   one): SplitWindowKernel over all rounds of a 10^7-point assembly (and of
   the warm-up's) 1.46 -> 1.16 ms, at 10^6 0.34 -> 0.22 ms, SplitCoreKernel
   +0.09 ms (twice the tiles); 128 threads of four slots: 1.12 and 0.26 ms
   (ncu, H100).  128 threads of two slots rather than 256: at 10^6 points a
   round has about 62500 slots, 122 tiles of 512 (fewer than the SMs) against
   245 of 256; the split stage (-info) 0.735 -> 0.720 ms at 10^6, an assembly
   again 9.69 -> 9.57 ms at 10^7 (H100, alternating processes) */
#define WNT   128 /* threads of a window block */
#define WIT   2   /* consecutive slots per thread */
#define WTILE (WNT * WIT)

/* blocks t < nt (first: their chains of loads are the longest): the window
   extents of slot tile t, for the carries of SplitWindowKernel: tile[2t] of
   its last segment (read for full tiles only) and tile[2t + 1] of its first.
   The others: CIT consecutive list positions k a thread, both lists: the
   other coordinate of rank k - o goes to the segment's lower or upper core
   unless it is in the window (min and max do not depend on the order of the
   atomics).  A thread joins its positions' runs itself; runs that end within
   it go to the atomics at once, its last run to the block's atomics.  With a
   position a thread (the shuffles of BlockRunAtomics for each, and a load of
   its segment before that of its values) a round took 0.20 ms at 10^7
   points, now 0.12 ms (ncu, H100). */
#define CIT 4
__global__ void __launch_bounds__(BS) SplitCoreKernel(PetscInt U, PetscInt nt, PetscInt nseg, PetscInt nslot, const PetscInt *off, const PetscInt *cseg, SplitLists L, unsigned long long *core, SplitExt *tile)
{
  FMMWaitPrior();
  long long          tag  = -1;           /* 2s (lower core) or 2s + 1 (upper core); -1: none */
  unsigned long long v[4] = {0, 0, 0, 0}; /* ylo, yhi, xlo, xhi as order keys */
  const auto         dst  = [core](long long t) { return core + 8 * (t / 2) + 4 * (t % 2); };

  if (blockIdx.x < nt) {
    typedef cub::BlockReduce<SplitRun, BS> Reduce;
    __shared__ typename Reduce::TempStorage tmp;
    const PetscInt                          t = blockIdx.x;
    SplitRun                                fwd = {-1, SPLIT_EXT_NONE}, bwd = {-1, SPLIT_EXT_NONE}; /* this thread's slots, in order */
    PetscInt                                j, ga = -1, gb = -1; /* owners of the last slots */
    for (int i = 0; i < WTILE / BS; i++) {
      const PetscInt a = t * WTILE + threadIdx.x * (WTILE / BS) + i, b = (2 * t + 1) * WTILE - 1 - a; /* forward, backward */
      if (a < nslot) fwd = SplitRunOp()(fwd, SplitSlot(a, ga = SplitOwner(a, nseg, off, ga), off, L, &j));
      if (b < nslot) bwd = SplitRunOp()(bwd, SplitSlot(b, gb = SplitOwner(b, nseg, off, gb), off, L, &j));
    }
    const SplitRun last = Reduce(tmp).Reduce(fwd, SplitRunOp());
    __syncthreads();
    const SplitRun first = Reduce(tmp).Reduce(bwd, SplitRunOp());
    if (!threadIdx.x) {
      tile[2 * t]     = last.e;
      tile[2 * t + 1] = first.e;
    }
    return;
  }
  {
    const PetscInt k0 = ((PetscInt)blockIdx.x - nt) * (BS * CIT) + threadIdx.x * CIT;
    long long      tg[CIT];
    double         yv[CIT], xv[CIT];
    PetscInt       s = k0 < U ? SegmentOf(k0, off, cseg) : 0;
#pragma unroll
    for (int q = 0; q < CIT; q++) { /* the loads first, all of them independent */
      const PetscInt k = k0 + q;
      tg[q]            = -1;
      yv[q] = xv[q] = 0;
      if (k >= U) continue;
      while (off[s + 1] <= k) s++;
      const PetscInt o = off[s], n = off[s + 1] - o, h = n / 2, w = n / FMM_SPLIT_WINDOW, r = k - o;
      if (r >= h - w && r < h + w) continue;
      tg[q] = 2 * (long long)s + (r < h - w ? 0 : 1);
      yv[q] = ListOt(L, 0, ListBuf(L, 0, s))[k];
      xv[q] = ListOt(L, 1, ListBuf(L, 1, s))[k];
    }
#pragma unroll
    for (int q = 0; q < CIT; q++) CoreRunAdd(tg[q], yv[q], xv[q], &tag, v, dst);
  }
  BlockRunAtomics<4, BS>(tag, v, dst);
}

/* the window scans and the costs, a tile of WTILE slots per block (WIT
   consecutive ones per thread, so the block-wide steps run once per WIT):
   each tile is scanned forward (exclusive: window ranks below j) and backward
   (inclusive: ranks from j up), starting from the extents of the same
   segment's tiles before and after it (SplitCoreKernel), then every candidate
   computes its costs as Split() of src/fmm/plan.c (x, then y), and each segment
   its least cost (atomicMin on the bits: costs are >= 0). */
__global__ void __launch_bounds__(WNT) SplitWindowKernel(PetscInt nslot, PetscInt nseg, PetscInt stride, const PetscInt *off, SplitLists L, const double *xy, const unsigned long long *core, const SplitExt *tile, double *cost, unsigned long long *best)
{
  FMMWaitPrior();
  typedef cub::BlockScan<SplitRun, WNT, cub::BLOCK_SCAN_WARP_SCANS> Scan; /* raking: bank conflicts on 40-byte items */
  typedef cub::BlockReduce<SplitExt, WNT>                           Reduce;
  __shared__ union {
    typename Scan::TempStorage   scan;
    typename Reduce::TempStorage reduce;
  } tmp;
  __shared__ SplitExt suffix[WTILE]; /* the backward scan, in slot order */
  __shared__ SplitRun carry[2];
  const PetscInt      t = blockIdx.x, c0 = t * WTILE;
  __shared__ PetscInt ends[4]; /* key and candidate of the tile's first and last slots */
  SplitRun            fwd[WIT], bwd[WIT], pre[WIT], suf[WIT];
  PetscInt            jf[WIT], jb, ga = -1, gb = -1; /* ga, gb: owners of the last slots */
  double              cc[WIT][2];

  if (c0 >= nslot) return;
  const PetscInt nin = PetscMin((PetscInt)WTILE, nslot - c0);
  for (int i = 0; i < WIT; i++) { /* slot a forward, b backward */
    const PetscInt a = threadIdx.x * WIT + i, b = WTILE - 1 - a;
    fwd[i]           = a < nin ? SplitSlot(c0 + a, ga = SplitOwner(c0 + a, nseg, off, ga), off, L, &jf[i]) : SplitRun{-1, SPLIT_EXT_NONE};
    bwd[i]           = b < nin ? SplitSlot(c0 + b, gb = SplitOwner(c0 + b, nseg, off, gb), off, L, &jb) : SplitRun{-1, SPLIT_EXT_NONE};
    if (a == 0) ends[0] = (PetscInt)fwd[i].key, ends[1] = jf[i];
    if (a == nin - 1) ends[2] = (PetscInt)fwd[i].key, ends[3] = jf[i];
  }
  __syncthreads();
  { /* the carries: the same segment's tiles before this one, and after it (up to its candidate 2w) */
    const PetscInt s0 = ends[0], j0 = ends[1], s1 = ends[2], j1 = ends[3];
    const PetscInt u0 = s0 < 0 ? t : (c0 - j0) / WTILE, u1 = s1 < 0 ? t : (c0 + nin - 1 - j1 + 2 * ((off[s1 + 1] - off[s1]) / FMM_SPLIT_WINDOW)) / WTILE;
    SplitExt       e  = SPLIT_EXT_NONE;
    for (PetscInt u = u0 + threadIdx.x; u < t; u += WNT) e = SplitExtJoin(e, tile[2 * u]);
    if (u0 < t) e = Reduce(tmp.reduce).Reduce(e, SplitExtOp());
    if (!threadIdx.x) carry[0] = SplitRun{u0 < t ? s0 : -1, e};
    __syncthreads();
    e = SPLIT_EXT_NONE;
    for (PetscInt u = t + 1 + threadIdx.x; u <= u1; u += WNT) e = SplitExtJoin(e, tile[2 * u + 1]);
    if (u1 > t) e = Reduce(tmp.reduce).Reduce(e, SplitExtOp());
    if (!threadIdx.x) carry[1] = SplitRun{u1 > t ? s1 : -1, e};
    __syncthreads();
  }
  SplitCarry before = {carry[0]}, after = {carry[1]};
  Scan(tmp.scan).ExclusiveScan(fwd, pre, SplitRunOp(), before);
  __syncthreads();
  Scan(tmp.scan).InclusiveScan(bwd, suf, SplitRunOp(), after);
  for (int i = 0; i < WIT; i++) {
    const PetscInt b = WTILE - 1 - (threadIdx.x * WIT + i);
    if (b < nin) suffix[b] = suf[i].e;
  }
  __syncthreads();

  for (int i = 0; i < WIT; i++) { /* the costs (independent: their loads overlap) */
    const PetscInt a = threadIdx.x * WIT + i, s = fwd[i].key, j = jf[i];
    if (s < 0) continue; /* past the slots, or past its segment's candidates */
    const PetscInt            o = off[s], n = off[s + 1] - o, w = n / FMM_SPLIT_WINDOW, k = o + n / 2 - w + j;
    const unsigned long long *cs = core + 8 * s;
    for (int d = 0; d < 2; d++) {
      const PetscInt *D = ListId(L, d, ListBuf(L, d, s));
      /* along the list: the ends of the two children */
      const double al0 = xy[2 * D[o] + d], al1 = xy[2 * D[k - 1] + d], ar0 = xy[2 * D[k] + d], ar1 = xy[2 * D[o + n - 1] + d];
      /* across it: the cores and the window's prefix / suffix */
      double ol0 = OrderValue(cs[2 * d]), ol1 = OrderValue(cs[2 * d + 1]), or0 = OrderValue(cs[4 + 2 * d]), or1 = OrderValue(cs[5 + 2 * d]);
      if (j > 0) {
        ol0 = fmin(ol0, d ? pre[i].e.xlo : pre[i].e.ylo);
        ol1 = fmax(ol1, d ? pre[i].e.xhi : pre[i].e.yhi);
      }
      if (j < 2 * w) {
        or0 = fmin(or0, d ? suffix[a].xlo : suffix[a].ylo);
        or1 = fmax(or1, d ? suffix[a].xhi : suffix[a].yhi);
      }
      const double hl = d ? FMMHalfPerimeter(ol0, al0, ol1, al1) : FMMHalfPerimeter(al0, ol0, al1, ol1);
      const double hr = d ? FMMHalfPerimeter(or0, ar0, or1, ar1) : FMMHalfPerimeter(ar0, or0, ar1, or1);
      cc[i][d]        = SplitCost(hl, hr, j, w);
      cost[d * stride + c0 + a] = cc[i][d];
    }
  }
  long long          key  = -1; /* the segment of this thread's last candidates, -1: none */
  unsigned long long v[1] = {~0ull};
  for (int i = 0; i < WIT; i++) {
    const long long s = fwd[i].key;
    if (s < 0) continue;
    if (s != key) { /* a segment ends within this thread's candidates */
      if (key >= 0) atomicMin(&best[key], v[0]);
      key  = s;
      v[0] = ~0ull;
    }
    v[0] = MinU(v[0], MinU((unsigned long long)__double_as_longlong(cc[i][0]), (unsigned long long)__double_as_longlong(cc[i][1])));
  }
  BlockRunAtomics<1, WNT>(key, v, [best](long long q) { return best + q; });
}

/* the first candidate of least cost in the CPU's order: x before y, then j */
__global__ void SplitPickKernel(PetscInt nslot, PetscInt nseg, PetscInt stride, const PetscInt *off, const double *cost, const unsigned long long *best, PetscInt *rank)
{
  FMMWaitPrior();
  const PetscInt c = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  const int      d = blockIdx.y;
  PetscInt       j, s;
  if (c >= nslot || !SplitSlotCandidate(c, s = SplitOwner(c, nseg, off, -1), off, &j)) return;
  if ((unsigned long long)__double_as_longlong(cost[d * stride + c]) == best[s]) atomicMin(&rank[s], d * (2 * ((off[s + 1] - off[s]) / FMM_SPLIT_WINDOW) + 1) + j);
}

/* ------------------------------------------------ the last rounds in shared memory

   Once every segment of a round fits in one block (SCAP points) the rounds
   left run in one launch, a block per segment, on its lists in shared memory:
   the same cuts as the rounds above (the same costs, the same ties), without
   the passes over all U points that each round makes in global memory.  The
   block's sub-segments are contiguous runs of positions in both lists, as in
   the rounds above; sg holds the sub-segment of each position.  Thread t owns
   positions t IPT .. t IPT + IPT - 1 (the sequential part of the scans),
   stored SNT apart (SplitSlotOf) so that a warp's accesses hit distinct banks;
   IPT, 5 to SIPT = 8, is the fewest that hold the largest segment
   (SplitLocalIPT): at 10^7 points, blocks of up to 2550 points with 5 a
   thread instead of 8 took the split stage from 7.56-7.60 to 6.53-6.59 ms
   (H100, -info).
   The compact split's costs come as in global memory: each sub-segment's
   cores (ranks below and above its window) by a pass over the positions, and
   scans of its window's slots only.  Before, every round scanned the extents
   of all positions forward and backward and tested each for a candidate:
   SplitLocalKernel at 10^6 points 287 -> 239 us, at 10^7 2.92 -> 2.63 ms
   (ncu, H100), of which the partitions and loads alone (the median split)
   take 101 us and 0.84 ms.  1024 threads of 4 positions (64 registers)
   measured 232 us and 2.99 ms.
   The block writes the bounding boxes of its boxes of the even rounds and of
   the leaves, and back to global memory what the leaves need: the x list X,
   seg and the leaf offsets. */
/* one block an SM (its shared memory); blocks of 256 x 8 or 512 x 4 points,
   two an SM, the local rounds starting a round later, measured slower: the
   split stage at 10^7 points 11.6 -> 13.1 and 12.1 ms (H100) */
#define SNT   512                 /* threads of a local-split block */
#define SIPT  8                   /* the most consecutive positions per thread (IPT below) */
#define SCAP  (SNT * SIPT)        /* the most points of a local-split block */
#define SRMAX 10                  /* rounds of one local split: up to 2^SRMAX leaves a block */
#define SLEAF (1 << SRMAX)        /* sub-segments of the last round */
#define SHALF (1 << (SRMAX - 1)) /* sub-segments of a round that splits */

/* shared memory of SplitLocalKernel: per position its coordinates along and
   across both lists; per splitting sub-segment its two cores (8 order keys)
   and its least cost; per position its point in both lists; the
   sub-segment offsets (two rounds); per splitting sub-segment its cut and
   direction, its pick and the flag scan at its start; per position sg */
static size_t SplitLocalBytes(int ipt)
{
  const size_t cap = (size_t)SNT * ipt;
  return 4 * cap * sizeof(double) + 9 * SHALF * sizeof(unsigned long long) + (2 * cap + 2 * (SLEAF + 1) + 3 * SHALF) * sizeof(PetscInt) + cap * sizeof(unsigned short);
}
/* the window's slots of a round a thread: at most SCAP/16 + SHALF in all */
#define SLOTS ((SCAP / (FMM_SPLIT_WINDOW / 2) + SHALF + SNT - 1) / SNT)

/* the slot of position k */
template <int IPT>
__device__ __forceinline__ int SplitSlotOf(int k)
{
  return (k % IPT) * SNT + k / IPT;
}

/* v of lane - sh, of lane + sh */
__device__ __forceinline__ SplitRun SplitRunShflUp(const SplitRun &v, int sh)
{
  return SplitRun{__shfl_up_sync(0xffffffffu, v.key, sh), SplitExt{__shfl_up_sync(0xffffffffu, v.e.ylo, sh), __shfl_up_sync(0xffffffffu, v.e.yhi, sh), __shfl_up_sync(0xffffffffu, v.e.xlo, sh), __shfl_up_sync(0xffffffffu, v.e.xhi, sh)}};
}

__device__ __forceinline__ SplitRun SplitRunShflDown(const SplitRun &v, int sh)
{
  return SplitRun{__shfl_down_sync(0xffffffffu, v.key, sh), SplitExt{__shfl_down_sync(0xffffffffu, v.e.ylo, sh), __shfl_down_sync(0xffffffffu, v.e.yhi, sh), __shfl_down_sync(0xffffffffu, v.e.xlo, sh), __shfl_down_sync(0xffffffffu, v.e.xhi, sh)}};
}

/* the warp's inclusive scans of v with SplitRunOp: in lane order, and from
   the last lane down (equal keys >= 0 are contiguous) */
__device__ __forceinline__ SplitRun SplitWarpScan(SplitRun v)
{
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int sh = 1; sh < 32; sh <<= 1) {
    const SplitRun u = SplitRunShflUp(v, sh);
    if (lane >= sh && u.key == v.key) v.e = SplitExtJoin(u.e, v.e);
  }
  return v;
}

__device__ __forceinline__ SplitRun SplitWarpScanBack(SplitRun v)
{
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int sh = 1; sh < 32; sh <<= 1) {
    const SplitRun u = SplitRunShflDown(v, sh);
    if (lane + sh < 32 && u.key == v.key) v.e = SplitExtJoin(v.e, u.e);
  }
  return v;
}

/* the block's two exclusive scans with SplitRunOp, in one pair of barriers:
   *f of the v of the threads before this one, *b of the u of the threads
   after it (thread 0, SNT - 1: no run).  Warps scan their lanes, warps 0
   and 1 the warps' totals (ws: 2 SNT/32 runs of shared memory) */
__device__ __forceinline__ void SplitBlockScans(const SplitRun &v, const SplitRun &u, SplitRun *ws, SplitRun *f, SplitRun *b)
{
  constexpr int  NW   = SNT / 32;
  const int      lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const SplitRun none = {-1, SPLIT_EXT_NONE};
  const SplitRun fi = SplitWarpScan(v), bi = SplitWarpScanBack(u);
  if (lane == 31) ws[w] = fi;
  if (lane == 0) ws[NW + w] = bi;
  __syncthreads();
  if (w < 2) {
    const SplitRun x = lane < NW ? ws[w * NW + lane] : none;
    const SplitRun s = w ? SplitWarpScanBack(x) : SplitWarpScan(x);
    __syncwarp();
    if (lane < NW) ws[w * NW + lane] = s;
  }
  __syncthreads();
  const SplitRun fe = SplitRunShflUp(fi, 1), be = SplitRunShflDown(bi, 1);
  *f = lane == 0 ? (w ? ws[w - 1] : none) : (w ? SplitRunOp()(ws[w - 1], fe) : fe);
  *b = lane == 31 ? (w < NW - 1 ? ws[NW + w + 1] : none) : (w < NW - 1 ? SplitRunOp()(ws[NW + w + 1], be) : be);
}

/* rounds r0 .. r0 + R - 1 of the segments of round r0 (block s0: segment s0,
   off and lists L of round r0): the x list in the first buffer,
   ListId(L, 0, 0) (the other lists are not needed after), seg, the leaf
   offsets loff, and bb as SegmentKernel's */
template <int IPT>
__global__ void __launch_bounds__(SNT) SplitLocalKernel(int R, PetscInt r0, int median, const PetscInt *off, SplitLists L, const double *xy, PetscInt *seg, PetscInt *loff, double *bb)
{
  FMMWaitPrior();
  typedef cub::BlockScan<int, SNT, cub::BLOCK_SCAN_WARP_SCANS> IntScan;
  __shared__ typename IntScan::TempStorage tmp;
  __shared__ SplitRun                      ws[2 * SNT / 32];
  extern __shared__ double lsm[];
  constexpr int       CAP = SNT * IPT; /* points of this block size */
  double             *xx = lsm, *xo = xx + CAP, *yy = xo + CAP, *yo = yy + CAP; /* x list: x, y; y list: y, x */
  unsigned long long *core = (unsigned long long *)(yo + CAP);          /* 8 order keys a sub-segment, as SplitCoreKernel's */
  unsigned long long *best = core + 8 * SHALF;
  PetscInt           *xi = (PetscInt *)(best + SHALF), *yi = xi + CAP, *so = yi + CAP, *cutd = so + 2 * (SLEAF + 1), *pick = cutd + SHALF, *base = pick + SHALF;
  unsigned short     *sg = (unsigned short *)(base + SHALF);
  const PetscInt      s0 = blockIdx.x, g0 = off[s0];
  const int           n = (int)(off[s0 + 1] - g0), t = threadIdx.x, c0 = t * IPT;
  const PetscInt     *X = ListId(L, 0, ListBuf(L, 0, s0)), *Y = ListId(L, 1, ListBuf(L, 1, s0));
  const double       *XO = ListOt(L, 0, ListBuf(L, 0, s0)), *YO = ListOt(L, 1, ListBuf(L, 1, s0));

  for (int k = t; k < n; k += SNT) {
    const int      j = SplitSlotOf<IPT>(k);
    const PetscInt a = X[g0 + k], b = Y[g0 + k];
    xi[j]            = a;
    yi[j]            = b;
    xx[j]            = xy[2 * a];
    xo[j]            = XO[g0 + k];
    yy[j]            = xy[2 * b + 1];
    yo[j]            = YO[g0 + k];
    sg[j]            = 0;
  }
  if (!t) so[0] = 0, so[1] = n;
  __syncthreads();
  for (int i = 0;; i++) {
    const PetscInt r = r0 + i;
    const int      nsub = 1 << i;
    PetscInt      *o1 = so + (i % 2) * (SLEAF + 1), *o2 = so + (1 - i % 2) * (SLEAF + 1);

    /* per sub-segment: the bounding box (boxes of a level: even rounds), the median cut */
    for (int m = t; m < nsub; m += SNT) {
      const int o = o1[m], nm = o1[m + 1] - o;
      double    xmin = 0, xmax = 0, ymin = 0, ymax = 0;
      if (nm > 0) {
        xmin = xx[SplitSlotOf<IPT>(o)];
        xmax = xx[SplitSlotOf<IPT>(o + nm - 1)];
        ymin = yy[SplitSlotOf<IPT>(o)];
        ymax = yy[SplitSlotOf<IPT>(o + nm - 1)];
      }
      if (r % 2 == 0) BoxSet(bb + 4 * (((((PetscInt)1) << r) - 1) / 3 + (s0 << i) + m), nm, xmin, ymin, xmax, ymax);
      if (i < R) {
        cutd[m] = 2 * (o + nm / 2) + ((median && nm >= 2 && ymax - ymin > xmax - xmin) ? 1 : 0);
        best[m] = ~0ull;
        pick[m] = PETSC_MAX_INT;
        for (int e = 0; e < 8; e++) core[8 * m + e] = (e % 2) ? 0ull : ~0ull;
      }
    }
    if (i == R) break;
    __syncthreads();

    if (!median) { /* the compact split as the rounds in global memory: SplitCoreKernel, SplitWindowKernel, SplitPickKernel */
      { /* the cores: the other coordinates of the ranks below and above each
           sub-segment's window, over the runs of this thread's positions, then
           of the warp's lanes, to atomics on order keys */
        long long          tag  = -1;
        unsigned long long v[4] = {~0ull, 0, ~0ull, 0};
        int                m = -1, lo = 0, hi = 0;
        const auto         dst = [core](long long g) { return core + 4 * g; };
#pragma unroll
        for (int q = 0; q < IPT; q++) {
          const int k = c0 + q, j = SplitSlotOf<IPT>(k);
          long long tg = -1;
          if (k < n) {
            if (sg[j] != m) {
              m = sg[j];
              const int o = o1[m], nm = o1[m + 1] - o;
              lo = o + nm / 2 - nm / FMM_SPLIT_WINDOW;
              hi = o + nm / 2 + nm / FMM_SPLIT_WINDOW;
            }
            if (k < lo || k >= hi) tg = 2 * (long long)m + (k < lo ? 0 : 1);
          }
          CoreRunAdd(tg, xo[j], yo[j], &tag, v, dst);
        }
        if (RunMinMax<4>(tag, v) && tag >= 0) MinMaxAtomics<4>(dst(tag), v);
      }
      __syncthreads();

      /* the window: sub-segment m's candidate j in slot o/16 + m + j (o its
         offset, as SplitStart), SLOTS consecutive slots a thread, scanned
         forward (window ranks below j) and backward (from j up) */
      SplitRun f[SLOTS], pre[SLOTS], suf[SLOTS], a, b;
      int      sj[SLOTS];
      double   cc[SLOTS][2];
#pragma unroll
      for (int i = 0; i < SLOTS; i++) {
        const int c = SLOTS * t + i;
        const int m = (int)FMMLastLEBy([o1](PetscInt s) { return o1[s] / (FMM_SPLIT_WINDOW / 2) + s; }, 0, nsub, c);
        const int o = o1[m], nm = o1[m + 1] - o, w = nm / FMM_SPLIT_WINDOW;
        sj[i] = c - (o / (FMM_SPLIT_WINDOW / 2) + m);
        f[i]  = SplitRun{-1, SPLIT_EXT_NONE};
        if (nm < 2 || sj[i] > 2 * w) continue;
        f[i].key = m;
        if (sj[i] < 2 * w) {
          const int q = SplitSlotOf<IPT>(o + nm / 2 - w + sj[i]);
          f[i].e      = SplitExt{xo[q], xo[q], yo[q], yo[q]};
        }
      }
      a = f[0];
      b = f[SLOTS - 1];
#pragma unroll
      for (int i = 1; i < SLOTS; i++) {
        a = SplitRunOp()(a, f[i]);
        b = SplitRunOp()(b, f[SLOTS - 1 - i]);
      }
      SplitBlockScans(a, b, ws, &a, &b);
      pre[0]         = a;
      suf[SLOTS - 1] = SplitRunOp()(b, f[SLOTS - 1]);
#pragma unroll
      for (int i = 1; i < SLOTS; i++) {
        pre[i]             = SplitRunOp()(pre[i - 1], f[i - 1]);
        suf[SLOTS - 1 - i] = SplitRunOp()(suf[SLOTS - i], f[SLOTS - 1 - i]);
      }

      { /* each candidate's costs as Split() of src/fmm/plan.c (x, then y), each sub-segment's least */
        long long          key   = -1;
        unsigned long long bv[1] = {~0ull};
#pragma unroll
        for (int i = 0; i < SLOTS; i++) {
          const long long m = f[i].key;
          if (m < 0) continue;
          const int                 o = o1[m], nm = o1[m + 1] - o, w = nm / FMM_SPLIT_WINDOW, j = sj[i], k = o + nm / 2 - w + j;
          const int                 e0 = SplitSlotOf<IPT>(o), e1 = SplitSlotOf<IPT>(k - 1), e2 = SplitSlotOf<IPT>(k), e3 = SplitSlotOf<IPT>(o + nm - 1);
          const unsigned long long *cs = core + 8 * m;
#pragma unroll
          for (int d = 0; d < 2; d++) {
            const double *al = d ? yy : xx; /* along the list: the ends of the two children */
            double        ol0 = OrderValue(cs[2 * d]), ol1 = OrderValue(cs[2 * d + 1]), or0 = OrderValue(cs[4 + 2 * d]), or1 = OrderValue(cs[5 + 2 * d]);
            if (j > 0) {
              ol0 = fmin(ol0, d ? pre[i].e.xlo : pre[i].e.ylo);
              ol1 = fmax(ol1, d ? pre[i].e.xhi : pre[i].e.yhi);
            }
            if (j < 2 * w) {
              or0 = fmin(or0, d ? suf[i].e.xlo : suf[i].e.ylo);
              or1 = fmax(or1, d ? suf[i].e.xhi : suf[i].e.yhi);
            }
            const double hl = d ? FMMHalfPerimeter(ol0, al[e0], ol1, al[e1]) : FMMHalfPerimeter(al[e0], ol0, al[e1], ol1);
            const double hr = d ? FMMHalfPerimeter(or0, al[e2], or1, al[e3]) : FMMHalfPerimeter(al[e2], or0, al[e3], or1);
            cc[i][d]        = SplitCost(hl, hr, j, w);
          }
          if (m != key) { /* a sub-segment ends within this thread's slots */
            if (key >= 0) atomicMin(&best[key], bv[0]);
            key   = m;
            bv[0] = ~0ull;
          }
          bv[0] = MinU(bv[0], MinU((unsigned long long)__double_as_longlong(cc[i][0]), (unsigned long long)__double_as_longlong(cc[i][1])));
        }
        if (RunMinMax<1>(key, bv) && key >= 0) atomicMin(&best[key], bv[0]);
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < SLOTS; i++) { /* the first of least cost: x before y, then j */
        const long long m = f[i].key;
        if (m < 0) continue;
        const int w = (o1[m + 1] - o1[m]) / FMM_SPLIT_WINDOW;
#pragma unroll
        for (int d = 0; d < 2; d++)
          if ((unsigned long long)__double_as_longlong(cc[i][d]) == best[m]) atomicMin(&pick[m], d * (2 * w + 1) + sj[i]);
      }
      __syncthreads();
      for (int m = t; m < nsub; m += SNT) {
        const int o = o1[m], nm = o1[m + 1] - o, w = nm / FMM_SPLIT_WINDOW;
        if (nm >= 2) cutd[m] = 2 * (o + nm / 2 - w + pick[m] % (2 * w + 1)) + pick[m] / (2 * w + 1);
      }
      __syncthreads();
    }

    { /* the split: the list other than d partitioned stably, as SplitMoveKernel */
      int      fl[IPT], cnt = 0, sc;
      PetscInt p[IPT];
      double   u[IPT], v[IPT]; /* the moving point's coordinates across and along its list */
#pragma unroll
      for (int q = 0; q < IPT; q++) {
        const int k = c0 + q, j = SplitSlotOf<IPT>(k);
        fl[q]       = 0;
        if (k >= n) continue;
        const int      d = cutd[sg[j]] % 2, cj = SplitSlotOf<IPT>(cutd[sg[j]] / 2);
        const PetscInt c = d ? yi[cj] : xi[cj];
        const double   cv = d ? yy[cj] : xx[cj];
        p[q]              = d ? xi[j] : yi[j];
        u[q]              = d ? xo[j] : yo[j];
        v[q]              = d ? xx[j] : yy[j];
        fl[q]             = (u[q] < cv || (u[q] == cv && p[q] < c)) ? 1 : 0;
        cnt += fl[q];
      }
      IntScan(tmp).ExclusiveSum(cnt, sc);
#pragma unroll
      for (int q = 0, s = sc; q < IPT; q++) { /* the flag scan at each sub-segment's start */
        const int k = c0 + q, j = SplitSlotOf<IPT>(k);
        if (k < n && k == o1[sg[j]]) base[sg[j]] = s;
        s += fl[q];
      }
      __syncthreads();
#pragma unroll
      for (int q = 0; q < IPT; q++) {
        const int k = c0 + q, j = SplitSlotOf<IPT>(k);
        if (k >= n) break;
        const int m = sg[j], o = o1[m], d = cutd[m] % 2, cut = cutd[m] / 2, lb = sc - base[m];
        const int np = SplitSlotOf<IPT>(fl[q] ? o + lb : cut + (k - o - lb));
        if (d) xi[np] = p[q], xo[np] = u[q], xx[np] = v[q];
        else yi[np] = p[q], yo[np] = u[q], yy[np] = v[q];
        sg[j] = 2 * m + (k >= cut ? 1 : 0);
        sc += fl[q];
      }
      for (int m = t; m < nsub; m += SNT) {
        o2[2 * m]     = o1[m];
        o2[2 * m + 1] = cutd[m] / 2;
      }
      if (!t) o2[2 * nsub] = n;
      __syncthreads();
    }
  }
  { /* the leaves */
    const PetscInt *o1 = so + (R % 2) * (SLEAF + 1), l0 = s0 << R;
    for (int k = t; k < n; k += SNT) {
      const int j = SplitSlotOf<IPT>(k);
      ListId(L, 0, 0)[g0 + k] = xi[j]; /* read into shared memory above, before the block's first barrier */
      seg[g0 + k]             = l0 + sg[j];
    }
    for (int m = t; m < (1 << R); m += SNT) loff[l0 + m] = g0 + o1[m];
    if (!t && s0 == (PetscInt)gridDim.x - 1) loff[l0 + (1 << R)] = g0 + n;
  }
}

/* one block: *nmax = the most points of a child of the nseg segments of a
   round, once their cuts are picked (SplitOf): the size of the next round's
   largest segment, which the host reads (nmax in the pinned readback buffer)
   while this round's moves run */
__global__ void ChildMaxKernel(PetscInt nseg, const PetscInt *off, const PetscInt *noff, const char *dir, const PetscInt *rank, PetscInt *nmax)
{
  __shared__ PetscInt bm;
  PetscInt            m = 0;
  FMMWaitPrior();
  if (!threadIdx.x) bm = 0;
  __syncthreads();
  for (PetscInt s = threadIdx.x; s < nseg; s += blockDim.x) {
    PetscInt cut;
    int      d;
    SplitOf(s, off, noff, dir, rank, &d, &cut);
    m = PetscMax(m, PetscMax(cut - off[s], off[s + 1] - cut));
  }
  atomicMax(&bm, m);
  __syncthreads();
  if (!threadIdx.x) *nmax = bm;
}

/* ------------------------------------------------ points in tree order */

/* fs[k], ft[k]: the point at position k of the leaf order is a source / one of this rank's targets */
__global__ void ClassifyKernel(PetscInt U, PetscInt N, int same, PetscInt t0, PetscInt t1, const PetscInt *X, PetscInt *fs, PetscInt *ft)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k > U) return;
  if (k == U) {
    fs[k] = ft[k] = 0;
    return;
  }
  const PetscInt i = X[k], g = same ? i : i - N;
  fs[k] = i < N ? 1 : 0;
  ft[k] = ((same || i >= N) && g >= t0 && g < t1) ? 1 : 0;
}

/* leaf ranges from the leaf offsets of the point order */
__global__ void LeafRangeKernel(PetscInt nleaves, const PetscInt *off, const PetscInt *ss, const PetscInt *st, PetscInt *sleaf, PetscInt *tleaf)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  sleaf[b] = ss[off[b]];
  tleaf[b] = st[off[b]];
}

/* sources and this rank's targets in tree order, with the strengths per unit
   density of src/fmm/plan.c (same expressions, so the same rounding) */
__global__ void ScatterPointsKernel(PetscInt U, PetscInt N, int same, PetscInt t0, const PetscInt *X, const PetscInt *seg, const PetscInt *fs, const PetscInt *ss, const PetscInt *ft, const PetscInt *st, const double *xy, const double *nrm, const double *wts, double alpha, double beta, PetscInt *sperm, double *sx, double *sy, double *cq, double *cdx, double *cdy, PetscInt *tperm, double *tx, double *ty, PetscInt *tleafof)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt i = X[k];
  const double   twopi = 2.0 * PETSC_PI;
  if (fs[k]) {
    const PetscInt s = ss[k];
    const double   w = wts ? wts[i] : 1.0;
    sperm[s]         = i;
    sx[s]            = xy[2 * i];
    sy[s]            = xy[2 * i + 1];
    cq[s]            = -beta * w / twopi;
    cdx[s]           = nrm ? alpha * w * nrm[2 * i] / twopi : 0.0;
    cdy[s]           = nrm ? alpha * w * nrm[2 * i + 1] / twopi : 0.0;
  }
  if (ft[k]) {
    const PetscInt t = st[k];
    tperm[t]         = (same ? i : i - N) - t0;
    tx[t]            = xy[2 * i];
    ty[t]            = xy[2 * i + 1];
    tleafof[t]       = seg[k];
  }
}

/* centre and radius of every box from its bounding box; the scale floor of src/fmm/plan.c */
__global__ void GeometryKernel(PetscInt nboxes, const double *bb, double *cx, double *cy, double *scale)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nboxes) return;
  double floor_s = 0.0;
  if (bb[0] < PETSC_MAX_REAL) floor_s = 0.5 * sqrt((bb[0] + bb[2]) * (bb[0] + bb[2]) + (bb[1] + bb[3]) * (bb[1] + bb[3])) * 1e-9;
  if (floor_s == 0.0) floor_s = 1.0;
  const double *q = bb + 4 * b;
  double        r = 0.0;
  if (q[0] == PETSC_MAX_REAL) cx[b] = cy[b] = 0.0;
  else {
    cx[b] = 0.5 * (q[0] - q[2]);
    cy[b] = 0.5 * (q[1] - q[3]);
    r     = 0.5 * sqrt((q[0] + q[2]) * (q[0] + q[2]) + (q[1] + q[3]) * (q[1] + q[3]));
  }
  scale[b] = fmax(r, floor_s);
}

/* ------------------------------------------------ interaction lists */

/*
  The lists of level l+1 (boxes t = 0..nb-1, global numbers c0 + t) from the
  strong lists of level l: the candidates of t are the 4 children of every box
  of its parent's strong list, and the 4 children of a parent share them.  So
  the candidates of all boxes are enumerated flat, one thread each, in the
  order of src/fmm/plan.c (target box, then strong-list entry, then child):
  parent tp with entries j0..j0+m-1 (j0 = stroff[tp]) owns the 16 m positions
  16 j0 .. 16 (j0 + m) - 1, position 16 j0 + 4 m ct + 4 (j - j0) + cs being
  child cs of entry j for target child ct.  owner[e] is the box of entry e.
  One thread per candidate keeps the work even when a few boxes have very long
  lists (boxes straddling two arcs of a curve have thousands of neighbours),
  which a thread per box walked alone.
*/
__device__ __forceinline__ void Candidate(PetscInt i, const PetscInt *stroff, const PetscInt *str, const PetscInt *owner, PetscInt *t, PetscInt *s)
{
  const PetscInt tp = owner[i / 16], j0 = stroff[tp], m = stroff[tp + 1] - j0, o = i - 16 * j0, r = o % (4 * m);
  *t = 4 * tp + o / (4 * m);
  *s = 4 * str[j0 + r / 4] + r % 4;
}

/* the strong and far entries among the candidates before one (the scan of a level) */
typedef struct {
  PetscInt s, f;
} ListCount;

/* what the lists of level l hold, on the device (the host reads them once,
   after the last level): n.s strong and n.f far entries, the far entries of
   the levels above (farbase), and whether the strong lists of level l and
   above fit the room given them (ok; else level l has no candidates and
   writes nothing) */
typedef struct {
  ListCount n;
  PetscInt  farbase, ok;
} ListTotal;

/* the candidates of the level after lev: 16 per strong entry */
__device__ __forceinline__ PetscInt LevelCandidates(const ListTotal *lev)
{
  return lev->ok ? 16 * lev->n.s : 0;
}

/* the far entries of the levels down to lev: where the next level's start */
__device__ __forceinline__ PetscInt NextFarBase(const ListTotal *lev)
{
  return lev->farbase + lev->n.f;
}

struct ListCountSum {
  __device__ __forceinline__ ListCount operator()(const ListCount &a, const ListCount &b) const { return ListCount{a.s + b.s, a.f + b.f}; }
};

/* candidate i: strong (1, 0), far (0, 1) or neither (0, 0), neither when
   the target box has none of this rank's targets or the source box no
   source, and from i = nc on (the scan's entries past the level's
   candidates: their number is on the device) */
struct CandidateKind {
  const ListTotal *lev;
  PetscInt         c0, span;
  double           theta;
  const PetscInt  *sleaf, *tleaf, *stroff, *str, *owner;
  const double    *cx, *cy, *scale;
  __device__ ListCount operator()(PetscInt i) const
  {
    PetscInt t, s;
    if (i >= LevelCandidates(lev)) return ListCount{0, 0};
    Candidate(i, stroff, str, owner, &t, &s);
    if (tleaf[(t + 1) * span] == tleaf[t * span] || sleaf[(s + 1) * span] == sleaf[s * span]) return ListCount{0, 0};
    const double dx = cx[c0 + t] - cx[c0 + s], dy = cy[c0 + t] - cy[c0 + s], d = sqrt(dx * dx + dy * dy);
    const double rt = scale[c0 + t], rs = scale[c0 + s], R = fmax(rt, rs), r = fmin(rt, rs);
    if (R + theta * r <= theta * d) return ListCount{0, 1}; /* the theta-criterion on the expansion scales (src/fmm/plan.c) */
    return ListCount{1, 0};
  }
};

/* the scan of the nc candidates of level lev to sc[0..nc]; at nc (the
   totals) the next level's ListTotal, ok while its strong entries fit its
   room (cap) */
struct ListScanOut {
  const ListTotal *lev;
  ListTotal       *next;
  ListCount       *sc;
  PetscInt         cap;
  __device__ __forceinline__ void operator()(ptrdiff_t i, ListCount v) const
  {
    const PetscInt nc = LevelCandidates(lev);
    if (i > nc) return;
    sc[i] = v;
    if (i == nc) *next = ListTotal{v, NextFarBase(lev), (lev->ok && v.s <= cap) ? 1 : 0};
  }
};

/* one level's step: from the lists of level l (kind: its strong lists and
   ListTotal) and the scan of its candidates (out: sc, and the next level's
   ListTotal), the strong lists of level l+1 (nstr, with their owners, and
   their offsets nstroff; room for out.cap entries), its far lists (in far,
   room for farcap entries in all) and far offsets */
typedef struct {
  CandidateKind kind;
  ListScanOut   out;
  PetscInt      nb, farcap;
  PetscInt     *nstr, *nowner, *nstroff, *far, *faroff;
} ListStep;

/* position i of a step after its scan sc (the kind of candidate i is the
   step from sc[i] to sc[i + 1]): i < nc, candidate i to its place, the
   strong list of level l+1 or the far list; i <= nb, the strong-list offsets
   of level l+1 and the far offsets of box i, from the scan at its first
   candidate (nc for i = nb) */
__device__ __forceinline__ void ListWriteAt(const ListStep &st, PetscInt i, PetscInt nc, PetscInt farbase)
{
  const CandidateKind &k = st.kind;
  const ListCount     *sc = st.out.sc;
  if (i < nc) {
    const ListCount a = sc[i], b = sc[i + 1];
    if (b.s != a.s || b.f != a.f) {
      PetscInt t, s;
      Candidate(i, k.stroff, k.str, k.owner, &t, &s);
      if (b.s != a.s) {
        if (a.s < st.out.cap) {
          st.nstr[a.s]   = s;
          st.nowner[a.s] = t;
        }
      } else if (farbase + a.f < st.farcap) st.far[farbase + a.f] = k.c0 + s;
    }
  }
  if (i <= st.nb) {
    const PetscInt tp = i / 4, first = i == st.nb ? nc : 16 * k.stroff[tp] + 4 * (i % 4) * (k.stroff[tp + 1] - k.stroff[tp]);
    st.nstroff[i]         = sc[first].s;
    st.faroff[k.c0 + i] = farbase + sc[first].f;
  }
}

/* a step after its scan (CUB's), a grid-stride loop over the level's nc
   candidates (on the device); nothing where the lists above lacked room */
__global__ void ListWriteKernel(ListStep st)
{
  FMMWaitPrior();
  const ListTotal *lev = st.kind.lev;
  if (!lev->ok) return;
  const PetscInt nc = LevelCandidates(lev), farbase = NextFarBase(lev);
  for (PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x; i < nc || i <= st.nb; i += (PetscInt)gridDim.x * blockDim.x) ListWriteAt(st, i, nc, farbase);
}

/* the first levels, whose candidates are few (at most LTOP_CAND), in one
   block and one launch, a level after another: each level's scan in chunks
   of LTB candidates (a block-wide scan each, the carry between them), then
   its writes.  Three launches a level took about 19 us a level on the GPU,
   however few its candidates (10^6 points, H100) */
#define LTB       1024
#define LTOP_MAX  5
#define LTOP_CAND 4096
typedef struct {
  ListStep st[LTOP_MAX];
  int      n;
} ListTop;

__global__ void __launch_bounds__(LTB) ListTopKernel(ListTop top)
{
  FMMWaitPrior();
  typedef cub::BlockScan<ListCount, LTB> Scan;
  __shared__ typename Scan::TempStorage tmp;

  for (int l = 0; l < top.n; l++) {
    const ListStep  &st  = top.st[l];
    const ListTotal *lev = st.kind.lev; /* written by the level before, before the barrier */
    const PetscInt   nc  = LevelCandidates(lev), farbase = NextFarBase(lev);
    ListCount        carry = {0, 0};
    for (PetscInt base = 0; base <= nc; base += LTB) {
      const PetscInt i = base + threadIdx.x;
      ListCount      v = st.kind(i), ex, agg; /* (0, 0) from nc on */
      Scan(tmp).ExclusiveScan(v, ex, ListCount{0, 0}, ListCountSum(), agg);
      st.out(i, ListCountSum()(carry, ex)); /* (nothing past nc) */
      carry = ListCountSum()(carry, agg);
      __syncthreads();
    }
    if (lev->ok)
      for (PetscInt i = threadIdx.x; i < nc || i <= st.nb; i += LTB) ListWriteAt(st, i, nc, farbase);
    __syncthreads();
  }
}

/* ------------------------------------------------ the work of the product */

/* ec[j] = the sources of near-list entry j (ec[nnear] = 0), for the scan
   nearscan, and entrysrc[j] = its first source (tree position) */
__global__ void EntryCountKernel(PetscInt nnear, const PetscInt *sleaf, const PetscInt *near, PetscInt *ec, PetscInt *entrysrc)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j > nnear) return;
  ec[j] = j < nnear ? sleaf[near[j] + 1] - sleaf[near[j]] : 0;
  if (j < nnear) entrysrc[j] = sleaf[near[j]];
}

/* nbroff[b] = the neighbour sources of the leaves before b (nearscan at the leaf's first entry) */
__global__ void NbrOffKernel(PetscInt nleaves, const PetscInt *nearoff, const PetscInt *nearscan, PetscInt *nbroff)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b <= nleaves) nbroff[b] = nearscan[nearoff[b]];
}

/* per leaf: neighbour sources, source chunks of FMMCUDA_P2P_S, items and
   partials (see fmmcuda.h); entry nleaves is 0 for the scans */
__global__ void LeafWorkKernel(PetscInt nleaves, const PetscInt *tleaf, const PetscInt *nbroff, PetscInt *ns, PetscInt *nsc, PetscInt *nit, PetscInt *npart)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  if (b == nleaves) {
    ns[b] = nsc[b] = nit[b] = npart[b] = 0;
    return;
  }
  const PetscInt nt = tleaf[b + 1] - tleaf[b], n = nbroff[b + 1] - nbroff[b];
  const PetscInt k = (nt && n) ? (n + FMMCUDA_P2P_S - 1) / FMMCUDA_P2P_S : 0;
  ns[b]            = n;
  nsc[b]           = k;
  nit[b]           = k * ((nt + FMMCUDA_P2P_T - 1) / FMMCUDA_P2P_T);
  npart[b]         = k > 1 ? k * nt : 0;
}

struct MaxOp {
  __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};
struct MinOp {
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};

/* three sizes on the device, copied next to others for one readback */
typedef struct {
  const PetscInt *p[3];
} Totals3;

/* statistics of the host plan, one block: max sources and targets per leaf,
   sum of neighbour sources, P2P pairs, min sources per leaf (out[0..4]);
   then out[5..7] = *n.p[0..2] */
__global__ void __launch_bounds__(1024) StatsKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *ns, Totals3 n, long long *out)
{
  FMMWaitPrior();
  typedef cub::BlockReduce<long long, 1024> R;
  __shared__ typename R::TempStorage        tmp;
  long long                                 v[5] = {0, 0, 0, 0, LLONG_MAX};
  for (PetscInt b = threadIdx.x; b < nleaves; b += 1024) {
    const long long s = sleaf[b + 1] - sleaf[b], t = tleaf[b + 1] - tleaf[b];
    v[0]              = max(v[0], s);
    v[1]              = max(v[1], t);
    v[2] += ns[b];
    v[3] += (long long)ns[b] * t;
    v[4] = min(v[4], s);
  }
  for (int q = 0; q < 5; q++) {
    const long long r = q < 2 ? R(tmp).Reduce(v[q], MaxOp()) : (q < 4 ? R(tmp).Sum(v[q]) : R(tmp).Reduce(v[q], MinOp()));
    if (threadIdx.x == 0) out[q] = r;
    __syncthreads();
  }
  if (threadIdx.x < 3) out[5 + threadIdx.x] = *n.p[threadIdx.x];
}

/* the first partial of each leaf whose list is split (-1: none) */
__global__ void LeafPartKernel(PetscInt nleaves, const PetscInt *nsc, const PetscInt *partoff, PetscInt *leafpart)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < nleaves) leafpart[b] = nsc[b] > 1 ? partoff[b] : -1;
}

/* one thread per source chunk q of a leaf's near list (choff: the scan of the
   chunk counts): the chunk's leaf and first source by binary search, then its
   items, the targets in blocks of FMMCUDA_P2P_T */
__global__ void ChunkItemsKernel(PetscInt nchunks, PetscInt nleaves, const PetscInt *choff, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *nearoff, const PetscInt *near, const PetscInt *nearscan, const PetscInt *nbroff, const PetscInt *nsc, const PetscInt *itoff, const PetscInt *partoff, FMMP2PItem *it)
{
  FMMWaitPrior();
  const PetscInt q = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= nchunks) return;
  const PetscInt b = FMMLastLE(choff, 0, nleaves, q), k = q - choff[b], K = nsc[b], nt = tleaf[b + 1] - tleaf[b];
  const PetscInt e0 = k * FMMCUDA_P2P_S, e = nbroff[b] + e0, ns = nbroff[b + 1] - nbroff[b];
  const PetscInt j = FMMLastLE(nearscan, nearoff[b], nearoff[b + 1], e); /* the entry holding source e0 */
  const PetscInt pos = sleaf[near[j]] + (e - nearscan[j]);
  PetscInt       n   = itoff[b] + k * ((nt + FMMCUDA_P2P_T - 1) / FMMCUDA_P2P_T);
  for (PetscInt t = 0; t < nt; t += FMMCUDA_P2P_T, n++) {
    FMMP2PItem I;
    I.leaf = b;
    I.t0   = tleaf[b] + t;
    I.nt   = min((PetscInt)FMMCUDA_P2P_T, nt - t);
    I.e0   = e0;
    I.ne   = min((PetscInt)FMMCUDA_P2P_S, ns - e0);
    I.j    = j;
    I.pos  = pos;
    I.part = K > 1 ? partoff[b] + k * nt + t : -1;
    it[n]  = I;
  }
}

/* M2L: the target box of each pair, by binary search in faroff */
__global__ void PairTargetKernel(PetscInt npairs, PetscInt nboxes, const PetscInt *faroff, PetscInt *pairtgt)
{
  FMMWaitPrior();
  const PetscInt g = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (g < npairs) pairtgt[g] = FMMLastLE(faroff, 0, nboxes, g);
}

/* M2L: per box the number of 32-pair chunks its run touches (tcnt[nboxes] = 0) */
__global__ void BoxChunksKernel(PetscInt nboxes, const PetscInt *faroff, PetscInt *tcnt)
{
  FMMWaitPrior();
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t > nboxes) return;
  const PetscInt g0 = t < nboxes ? faroff[t] : 0, g1 = t < nboxes ? faroff[t + 1] : 0;
  tcnt[t] = g1 > g0 ? (g1 - 1) / 32 - g0 / 32 + 1 : 0;
}

/* M2L: the partial sums of each chunk (runs of one target box within it) */
__global__ void ChunkKernel(PetscInt nchunks, PetscInt npairs, const PetscInt *pairtgt, PetscInt *ccnt)
{
  FMMWaitPrior();
  const PetscInt ch = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (ch > nchunks) return;
  PetscInt n = 0;
  if (ch < nchunks)
    for (PetscInt g = 32 * ch; g < min(32 * ch + 32, npairs); g++)
      if (g == 32 * ch || pairtgt[g] != pairtgt[g - 1]) n++;
  ccnt[ch] = n;
}

#define LAUNCH_N(n) FMMCUDABlocks((PetscInt64)(n), BS), BS, 0, c->stream
#define SORT_PARTS_MIN (1 << 21) /* points from which they go up and are sorted in two parts (from 2^18 on, 10^6 points measured 0.1 ms slower) */

/* the work arrays of the compact split, sized for the last round */
typedef struct {
  PetscInt            nslot; /* slots of the last round, the most of any round (the stride of cost) */
  PetscInt           *rank;
  unsigned long long *core, *best;
  SplitExt           *tile;
  double             *cost;
} SplitWork;

/* the candidate slots of a round of nseg segments (SplitStart of segment nseg) */
static PetscInt SplitSlots(PetscInt U, PetscInt nseg)
{
  return U / (FMM_SPLIT_WINDOW / 2) + nseg;
}

/* the split picks, extents, windows and costs, from the tree build's block */
static void SplitWorkCarve(FMMCarve *k, PetscInt U, PetscInt nsegmax, SplitWork *w)
{
  w->nslot = SplitSlots(U, nsegmax);
  w->rank  = FMMCarveArray<PetscInt>(k, (size_t)nsegmax);
  w->core  = FMMCarveArray<unsigned long long>(k, 9 * (size_t)nsegmax);
  w->best  = w->core ? w->core + 8 * nsegmax : NULL;
  w->tile  = FMMCarveArray<SplitExt>(k, 2 * (size_t)FMMCUDABlocks(w->nslot, WTILE));
  w->cost  = FMMCarveArray<double>(k, 2 * (size_t)w->nslot);
}

/* the kernel of the local split for blocks of up to SNT ipt points */
static void (*SplitLocalOf(int ipt))(int, PetscInt, int, const PetscInt *, SplitLists, const double *, PetscInt *, PetscInt *, double *)
{
  return ipt == 5 ? SplitLocalKernel<5> : ipt == 6 ? SplitLocalKernel<6> : ipt == 7 ? SplitLocalKernel<7> : SplitLocalKernel<SIPT>;
}

/* the positions per thread of the local split of segments of up to nmax
   points: fewer where the segments are smaller, as each round's sequential
   part is that long in every thread (at 10^7 points the blocks hold up to
   2550 points: 5 a thread).  The first round that fits holds more than
   SCAP/2 points a segment on average, so fewer than 5 never serve */
static int SplitLocalIPT(PetscInt nmax)
{
  return nmax <= 5 * SNT ? 5 : nmax <= 6 * SNT ? 6 : nmax <= 7 * SNT ? 7 : SIPT;
}

/* the shared memory of SplitLocalKernel, granted (for every block size);
   *ok false where the device grants less than the largest block needs.
   Once per process and device (bits dev of asked, granted) */
static PetscErrorCode SplitLocalSetup(FMM_CUDA *c, PetscBool *ok)
{
  static unsigned long long asked = 0, granted = 0;
  const unsigned long long  bit   = c->dev < 64 ? 1ull << c->dev : 0;
  int                       optin = 0;
  cudaFuncAttributes        fa;

  PetscFunctionBegin;
  *ok = (granted & bit) ? PETSC_TRUE : PETSC_FALSE;
  if (asked & bit) PetscFunctionReturn(0);
  FMMCallCUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->dev));
  FMMCallCUDA(cudaFuncGetAttributes(&fa, SplitLocalOf(SIPT)));
  asked |= bit;
  if (SplitLocalBytes(SIPT) + fa.sharedSizeBytes > (size_t)optin) PetscFunctionReturn(0);
  for (int ipt : {5, 6, 7, SIPT}) FMMCallCUDA(cudaFuncSetAttribute(SplitLocalOf(ipt), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SplitLocalBytes(ipt)));
  granted |= bit;
  *ok = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* after rounds in global memory only: the leaf of each position, and the x
   list in its first buffer where a leaf's is in the second */
__global__ void LeafOfKernel(PetscInt U, PetscInt nleaves, const PetscInt *off, SplitLists L, PetscInt *seg)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt b = FMMLastLE(off, 0, nleaves, k);
  seg[k]           = b;
  if (ListBuf(L, 0, b)) ListId(L, 0, 0)[k] = ListId(L, 0, 1)[k];
}

/* the compact split of every segment of a round: rank[s], the candidate
   picked (SegmentKernel has set the starting values); the window's carries
   between tiles only where a round has several */
static PetscErrorCode CompactSplit(FMM_CUDA *c, SplitWork *w, PetscInt nseg, PetscInt U, const PetscInt *off, const PetscInt *cseg, const SplitLists &L, const double *xy)
{
  const PetscInt nc = SplitSlots(U, nseg);
  const unsigned nt = FMMCUDABlocks(nc, WTILE), ntc = nt > 1 ? nt : 0;

  PetscFunctionBegin;
  FMMLaunch(SplitCoreKernel, ntc + FMMCUDABlocks(U, BS * CIT), BS, 0, c->stream, U, ntc, nseg, nc, off, cseg, L, w->core, w->tile);
  FMMCheckLaunch();
  FMMLaunch(SplitWindowKernel, nt, WNT, 0, c->stream, nc, nseg, w->nslot, off, L, xy, w->core, w->tile, w->cost, w->best);
  FMMCheckLaunch();
  FMMLaunch(SplitPickKernel, dim3(FMMCUDABlocks(nc, BS), 2), BS, 0, c->stream, nc, nseg, w->nslot, off, w->cost, w->best, w->rank);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* with -info: the GPU time (events) and the host time of the stages of the tree build */
#define NSTAGE 6
typedef struct {
  PetscBool      on;
  int            n;
  cudaEvent_t    ev[NSTAGE];
  PetscLogDouble t[NSTAGE];
} Stages;

static PetscErrorCode StageMark(FMM_CUDA *c, Stages *st)
{
  PetscFunctionBegin;
  if (!st->on || st->n >= NSTAGE) PetscFunctionReturn(0);
  FMMCallCUDA(cudaEventCreate(&st->ev[st->n]));
  FMMCallCUDA(cudaEventRecord(st->ev[st->n], c->stream));
  PetscCall(PetscTime(&st->t[st->n]));
  st->n++;
  PetscFunctionReturn(0);
}

/* after the stream is synchronized */
static PetscErrorCode StageReport(Stages *st, const char *names[])
{
  float ms[NSTAGE] = {0};

  PetscFunctionBegin;
  if (!st->on) PetscFunctionReturn(0);
  for (int k = 1; k < st->n; k++) FMMCallCUDA(cudaEventElapsedTime(&ms[k], st->ev[k - 1], st->ev[k]));
  for (int k = 1; k < st->n; k++) PetscCall(PetscInfo(NULL, "GPU tree build, %s: GPU %.3f ms, host %.3f ms\n", names[k - 1], (double)ms[k], 1e3 * (st->t[k] - st->t[k - 1])));
  for (int k = 0; k < st->n; k++) FMMCallCUDA(cudaEventDestroy(st->ev[k]));
  PetscFunctionReturn(0);
}

/* the M2L chunks and partial sums from faroff (device) */
PetscErrorCode FMMCUDAM2LPlan(FMM_CUDA *c, const FMMPlan *P)
{
  Scratch   own = {NULL, 0}, *s = &own;
  PetscInt *tcnt, *ccnt;

  PetscFunctionBegin;
  c->npairs    = P->nfar;
  c->nchunks   = (c->npairs + 31) / 32;
  c->m2lblocks = 0; /* chosen at the first product (FMMCUDAM2L) */
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->pairtgt, sizeof(PetscInt) * PetscMax(c->npairs, 1), "the M2L targets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->chunkpart, sizeof(PetscInt) * (c->nchunks + 1), "the M2L chunks"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->tpart, sizeof(PetscInt) * (P->nboxes + 1), "the M2L partial offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&tcnt, sizeof(PetscInt) * (PetscMax(P->nboxes, c->nchunks) + 1), "the M2L counts"));
  ccnt = tcnt;
  if (c->npairs) FMMLaunch(PairTargetKernel, LAUNCH_N(c->npairs), c->npairs, P->nboxes, c->faroff, c->pairtgt);
  FMMCheckLaunch();
  FMMLaunch(BoxChunksKernel, LAUNCH_N(P->nboxes + 1), P->nboxes, c->faroff, tcnt);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, tcnt, c->tpart, P->nboxes));
  FMMLaunch(ChunkKernel, LAUNCH_N(c->nchunks + 1), c->nchunks, c->npairs, c->pairtgt, ccnt);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, ccnt, c->chunkpart, c->nchunks));
  PetscCall(FMMCUDAFree(c->stream, tcnt));
  if (own.tmp) PetscCall(FMMCUDAFree(c->stream, own.tmp));
  /* the partials, without reading their number back: a chunk has one per
     target box it meets, one plus the box ends inside it */
  c->nparts = c->nchunks + P->nboxes;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->part, sizeof(PetscReal) * (size_t)c->nparts * c->ne, "the M2L partial sums"));
  PetscFunctionReturn(0);
}

/* the symmetric P2P's work between its counts and its items (SymCount, SymItems) */
typedef struct {
  PetscInt *w, *wslot; /* per leaf: item count, slot values, chunks; per near-list entry: the column slot */
} SymWork;
static PetscErrorCode SymCount(FMM_CUDA *, const FMMPlan *, Scratch *, SymWork *, long long *);
static PetscErrorCode SymItems(FMM_CUDA *, const FMMPlan *, Scratch *, SymWork *, const long long *);

/* the P2P work between FMMCUDAP2PPlanBegin and FMMCUDAP2PPlanEnd (c->p2pw):
   its scratch, the entry counts ec, the leaf counts and their scans (ns ..
   choff), the statistics (dstat) and the symmetric P2P's work */
struct FMMP2PWork_ {
  Scratch    own;
  PetscInt  *ec, *ns, *nit, *npart, *itoff, *partoff, *choff;
  long long *dstat; /* 8 statistics, then the symmetric P2P's 4 (SymCount) */
  PetscBool  sym;
  SymWork    sw;
};
typedef struct FMMP2PWork_ *FMMP2PWork;
#define P2P_NSTAT 12

/* its device memory and itself (also after an error between Begin and End) */
PetscErrorCode FMMCUDAP2PWorkDestroy(FMM_CUDA *c)
{
  FMMP2PWork w = c->p2pw;

  PetscFunctionBegin;
  if (!w) PetscFunctionReturn(0);
  PetscCall(FMMCUDAFree(c->stream, w->ec));
  PetscCall(FMMCUDAFree(c->stream, w->ns));
  if (w->dstat != FMMCUDAReadbackTarget(sizeof(long long) * P2P_NSTAT)) PetscCall(FMMCUDAFree(c->stream, w->dstat));
  PetscCall(FMMCUDAFree(c->stream, w->own.tmp));
  PetscCall(FMMCUDAFree(c->stream, w->sw.w));
  PetscCall(FMMCUDAFree(c->stream, w->sw.wslot));
  PetscCall(PetscFree(c->p2pw));
  PetscFunctionReturn(0);
}

/* the P2P items and partials from the leaf ranges and near lists (device), with
   c->nearscan (the sources before each near-list entry), c->entrysrc (its
   first source) and c->nbroff (the sources before each leaf's neighbour
   sources); the host statistics of P too.  sym: also the work of the
   symmetric P2P (the caller has checked that the targets are the sources),
   its sizes read back with the statistics (one wait for the GPU, not two).
   In two calls: Begin queues the counts and statistics, End waits for them
   and queues the items, so that the host may do other work between (the
   setup's allocations and the M2L plan: the counts then run on the GPU
   while the host works, instead of after it) */
PetscErrorCode FMMCUDAP2PPlanBegin(FMM_CUDA *c, const FMMPlan *P, PetscBool sym)
{
  FMMP2PWork w;
  Scratch   *s;
  PetscInt   nl = P->nleaves;

  PetscFunctionBegin;
  PetscCall(FMMCUDAP2PWorkDestroy(c));
  PetscCall(PetscNew(&c->p2pw));
  w      = c->p2pw;
  w->sym = sym;
  s      = &w->own;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w->ec, sizeof(PetscInt) * (c->nnear + 1), "the P2P entry counts"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->nearscan, sizeof(PetscInt) * (c->nnear + 1), "the P2P entry offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w->ns, sizeof(PetscInt) * (6 * (size_t)(nl + 1)), "the P2P leaf counts"));
  w->nit     = w->ns + (nl + 1);
  w->npart   = w->nit + (nl + 1);
  w->itoff   = w->npart + (nl + 1);
  w->partoff = w->itoff + (nl + 1);
  w->choff   = w->partoff + (nl + 1);
  w->dstat   = (long long *)FMMCUDAReadbackTarget(sizeof(long long) * P2P_NSTAT);
  if (!w->dstat) PetscCall(FMMCUDAMalloc(c->stream, (void **)&w->dstat, sizeof(long long) * P2P_NSTAT, "the plan statistics"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->leafnsc, sizeof(PetscInt) * (nl + 1), "the P2P chunk counts"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->leafpart, sizeof(PetscInt) * nl, "the P2P partial offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->nbroff, sizeof(PetscInt) * (nl + 1), "the neighbour-source offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->entrysrc, sizeof(PetscInt) * (c->nnear + 1), "the P2P entry sources"));
  FMMLaunch(EntryCountKernel, LAUNCH_N(c->nnear + 1), c->nnear, c->sleaf, c->near, w->ec, c->entrysrc);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, w->ec, c->nearscan, c->nnear));
  FMMLaunch(NbrOffKernel, LAUNCH_N(nl + 1), nl, c->nearoff, c->nearscan, c->nbroff);
  FMMCheckLaunch();
  FMMLaunch(LeafWorkKernel, LAUNCH_N(nl + 1), nl, c->tleaf, c->nbroff, w->ns, c->leafnsc, w->nit, w->npart);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, s, w->nit, w->npart, c->leafnsc, w->itoff, w->partoff, w->choff, nl));
  FMMLaunch(StatsKernel, 1, 1024, 0, c->stream, nl, c->sleaf, c->tleaf, w->ns, Totals3{{w->itoff + nl, w->partoff + nl, w->choff + nl}}, w->dstat);
  FMMCheckLaunch();
  if (sym) PetscCall(SymCount(c, P, s, &w->sw, w->dstat + 8));
  PetscFunctionReturn(0);
}

/* nothing may read back through the pinned buffer between Begin and End
   (the statistics may be written there) */
PetscErrorCode FMMCUDAP2PPlanEnd(FMM_CUDA *c, FMMPlan *P, PetscBool hostitems)
{
  FMMP2PWork w = c->p2pw;
  PetscInt   tot[3], nl = P->nleaves;
  long long  stat[P2P_NSTAT];

  PetscFunctionBegin;
  PetscCall(FMMCUDAReadback(c->stream, stat, w->dstat, sizeof(long long) * (w->sym ? 12 : 8)));
  for (int k = 0; k < 3; k++) tot[k] = (PetscInt)stat[5 + k];
  P->maxleafsrc = (PetscInt)stat[0];
  P->maxleaftgt = (PetscInt)stat[1];
  P->nearsrc    = (PetscInt)stat[2];
  P->p2ppairs   = (PetscCount)stat[3];
  c->minleafsrc = nl ? (PetscInt)stat[4] : 0;
  c->nitems     = tot[0];
  c->tlblocks   = 0; /* chosen at the first product (LaunchTiled) */
  c->p2psplit   = tot[1] > 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->items, sizeof(FMMP2PItem) * c->nitems, "the P2P work items"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->p2ppart, sizeof(PetscReal) * tot[1], "the P2P partial sums"));
  if (nl) FMMLaunch(LeafPartKernel, LAUNCH_N(nl), nl, c->leafnsc, w->partoff, c->leafpart);
  FMMCheckLaunch();
  if (tot[2]) FMMLaunch(ChunkItemsKernel, LAUNCH_N(tot[2]), tot[2], nl, w->choff, c->sleaf, c->tleaf, c->nearoff, c->near, c->nearscan, c->nbroff, c->leafnsc, w->itoff, w->partoff, c->items);
  FMMCheckLaunch();
  if (hostitems) { /* the host keeps the first item of each leaf (the repetition layout launches by leaf ranges) */
    PetscCall(PetscMalloc1(nl + 1, &c->itemstart));
    FMMCallCUDA(cudaMemcpyAsync(c->itemstart, w->itoff, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToHost, c->stream));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
  }
  if (w->sym) PetscCall(SymItems(c, P, &w->own, &w->sw, stat + 8));
  PetscCall(FMMCUDAP2PWorkDestroy(c));
  PetscFunctionReturn(0);
}

/* ------------------------------------------------ symmetric P2P (p2p.cu) */

/* one thread per leaf A: its first near-list entry >= A (the lists ascend: the
   lower entries are a prefix), its items of FMMCUDA_SYM_E upper entries, and
   its slots: one per lower entry (a column partial) plus one per item when
   there are several (row partials); long slot lists are summed in chunks */
__global__ void SymLeafKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, PetscInt *dg, PetscInt *nk, PetscInt *nsl, PetscInt *nslv, PetscInt *nch, long long *bad)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A > nl) return;
  if (A == nl) { /* for the scans; and the flag of SymEntryKernel, cleared */
    nk[A] = nslv[A] = nch[A] = 0;
    *bad                     = 0;
    return;
  }
  PetscInt lo = nearoff[A], hi = nearoff[A + 1];
  while (lo < hi) { /* lower bound of A */
    const PetscInt mid = lo + (hi - lo) / 2;
    if (near[mid] < A) lo = mid + 1;
    else hi = mid;
  }
  const PetscInt up = nearoff[A + 1] - lo, k = (up + FMMCUDA_SYM_E - 1) / FMMCUDA_SYM_E, ns = lo - nearoff[A] + (k > 1 ? k : 0);
  dg[A]   = lo;
  nk[A]   = k;
  nsl[A]  = ns;
  nslv[A] = ns * (sleaf[A + 1] - sleaf[A]);
  nch[A]  = ns > FMMCUDA_SYM_GMAX ? (ns + FMMCUDA_SYM_GCHUNK - 1) / FMMCUDA_SYM_GCHUNK : 0;
}

/* entries of item k of leaf A: its share of A's upper entries dg[A] .. nearoff[A+1]-1 */
__device__ __forceinline__ PetscInt SymItemEntries(const PetscInt *nearoff, const PetscInt *dg, PetscInt A, PetscInt k)
{
  return PetscMin(FMMCUDA_SYM_E, nearoff[A + 1] - dg[A] - k * FMMCUDA_SYM_E);
}

/* one thread per leaf A: per item the sort key FMMCUDA_SYM_E - entries (see SymItemKernel) */
__global__ void SymItemKeyKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *symleaf, unsigned *key, PetscInt *idx)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A >= nl) return;
  const PetscInt *dg = symleaf, *item = symleaf + (nl + 1);
  for (PetscInt it = item[A]; it < item[A + 1]; it++) {
    key[it] = (unsigned)(FMMCUDA_SYM_E - SymItemEntries(nearoff, dg, A, it - item[A]));
    idx[it] = it;
  }
}

/* pos[order[j]] = j */
__global__ void InversePermKernel(PetscInt n, const PetscInt *order, PetscInt *pos)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) pos[order[j]] = j;
}

/* one thread per leaf A: the descriptors of its items (FMM_CUDA symitem), item it
   at place pos[it]: items with more entries first, in leaf order within a count,
   so that the kernel's last items are short ones */
__global__ void SymItemKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *symleaf, const PetscInt *wslot, const PetscInt *pos, PetscInt *desc)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A >= nl) return;
  const PetscInt *dg = symleaf, *item = symleaf + (nl + 1), *slot = symleaf + 2 * (nl + 1), a0 = sleaf[A], nA = sleaf[A + 1] - a0;
  for (PetscInt it = item[A]; it < item[A + 1]; it++) {
    const PetscInt k = it - item[A], e0 = dg[A] + k * FMMCUDA_SYM_E, ne = SymItemEntries(nearoff, dg, A, k);
    PetscInt      *d = desc + pos[it] * FMMCUDA_SYM_D;
    d[0]             = a0;
    d[1]             = nA;
    d[2]             = ne;
    d[3]             = item[A + 1] - item[A] > 1 ? slot[A] + (dg[A] - nearoff[A] + k) * nA : -1 - tleaf[A];
    for (PetscInt j = 0; j < FMMCUDA_SYM_E; j++) {
      const PetscInt B = j < ne ? near[e0 + j] : 0;
      d[4 + 3 * j]     = j < ne ? sleaf[B] : 0;
      d[5 + 3 * j]     = j < ne ? sleaf[B + 1] - sleaf[B] : 0;
      d[6 + 3 * j]     = j < ne ? wslot[e0 + j] : -1;
    }
    for (PetscInt j = 4 + 3 * FMMCUDA_SYM_E; j < FMMCUDA_SYM_D; j++) d[j] = 0;
  }
}

/* the leaf of each chunk of a long slot list (one thread per leaf) */
__global__ void SymChunkLeafKernel(PetscInt nl, const PetscInt *ch, PetscInt *chleaf)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A < nl)
    for (PetscInt h = ch[A]; h < ch[A + 1]; h++) chleaf[h] = A;
}

/* one thread per near-list entry e, leaf A -> leaf B: lists must ascend, and
   hold A in B's list (found by binary search) whenever they hold B in A's;
   for B > A, wslot[e] is where A's warp writes B's column sums: B's slot of
   its lower entry A.  out[3] = 1 when they do not (cleared by SymLeafKernel), and
   out[0..2] = *n.p[0..2] (the plan's sizes, one readback) */
__global__ void SymEntryKernel(PetscInt nnear, PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, const PetscInt *slot, PetscInt *wslot, Totals3 n, long long *out)
{
  FMMWaitPrior();
  const PetscInt e   = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  long long     *bad = out + 3;
  if (e < 3) out[e] = *n.p[e];
  if (e >= nnear) return;
  const PetscInt A = FMMLastLE(nearoff, 0, nl, e), B = near[e];
  if (e > nearoff[A] && near[e - 1] >= B) *bad = 1;
  wslot[e] = -1;
  if (B == A) return;
  const PetscInt f = FMMLastLE(near, nearoff[B], nearoff[B + 1], A);
  if (nearoff[B] == nearoff[B + 1] || near[f] != A) *bad = 1;
  else if (B > A) wslot[e] = slot[B] + (f - nearoff[B]) * (sleaf[B + 1] - sleaf[B]);
}

/*
  The work of the symmetric P2P (FMMCUDAP2PPlanBegin and End with sym).  Rows of a leaf go
  to groups of syma lanes with symr rows per lane: the smallest syma of 8, 16,
  32 with at least syma points in every leaf (a group's lanes take distinct
  columns) and at most 7 syma in each, else at most 8 syma: with 8 rows a lane
  the kernel takes all 128 registers and waits on its own dependences (P2P
  0.55 ms with 8 lanes x 8 rows against 0.50 with 16 x 4 at 10^6 points,
  leaves of 61-62; 7 rows with 8 lanes beat 4 with 16 by 8%, 6 rows beat 3 by
  6%, measured with a variant of the kernel that passed column sums by
  shuffles; H100).  Leaves outside that, or near lists that are not
  symmetric, leave syma = 0 (the tiled kernel then evaluates every ordered
  pair).

  SymCount, before the plan's readback: per leaf its items, slots and chunks
  and their scans (c->symleaf), per entry its column slot, and in dout[0..3]
  the three totals and whether the lists are not symmetric.  SymItems, after
  it (out: dout read back): the lanes, rows and items, or syma = 0.
*/
static PetscErrorCode SymCount(FMM_CUDA *c, const FMMPlan *P, Scratch *s, SymWork *sw, long long *dout)
{
  PetscInt *nk, *nslv, *nch, nl = P->nleaves;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&sw->w, sizeof(PetscInt) * 3 * ((size_t)nl + 1), "the symmetric P2P work"));
  nk   = sw->w;
  nslv = nk + (nl + 1);
  nch  = nslv + (nl + 1);
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symleaf, sizeof(PetscInt) * 5 * ((size_t)nl + 1), "the symmetric P2P leaf work"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&sw->wslot, sizeof(PetscInt) * c->nnear, "the symmetric P2P work"));
  /* symleaf: dg [nl+1], items [nl+1], slots (doubles) [nl+1], slot count [nl+1], chunks [nl+1] */
  FMMLaunch(SymLeafKernel, LAUNCH_N(nl + 1), nl, c->nearoff, c->near, c->sleaf, c->symleaf, nk, c->symleaf + 3 * (nl + 1), nslv, nch, dout + 3);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, s, nk, nslv, nch, c->symleaf + (nl + 1), c->symleaf + 2 * (nl + 1), c->symleaf + 4 * (nl + 1), nl));
  FMMLaunch(SymEntryKernel, LAUNCH_N(PetscMax(c->nnear, 3)), c->nnear, nl, c->nearoff, c->near, c->sleaf, c->symleaf + 2 * (nl + 1), sw->wslot, Totals3{{c->symleaf + (nl + 1) + nl, c->symleaf + 2 * (nl + 1) + nl, c->symleaf + 4 * (nl + 1) + nl}}, dout);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

static PetscErrorCode SymItems(FMM_CUDA *c, const FMMPlan *P, Scratch *s, SymWork *sw, const long long *out)
{
  PetscInt tot[3], nl = P->nleaves;

  PetscFunctionBegin;
  c->syma = c->symr = c->symblocks = 0;
  for (PetscInt rmax = 7; rmax <= 8 && !c->syma; rmax++)
    for (PetscInt a = 8; a <= 32 && !c->syma; a *= 2)
      if (c->minleafsrc >= a && P->maxleafsrc <= rmax * a) c->syma = a;
  for (int k = 0; k < 3; k++) tot[k] = (PetscInt)out[k];
  if (!c->syma || !c->nnear) {
    c->syma = 0;
    PetscCall(PetscInfo(NULL, "GPU P2P: every ordered pair (leaves of %" PetscInt_FMT " to %" PetscInt_FMT " points, symmetric evaluation needs 8 to 256)\n", c->minleafsrc, P->maxleafsrc));
  } else if (out[3]) {
    c->syma = 0;
    PetscCall(PetscInfo(NULL, "GPU P2P: every ordered pair (the near lists are not ascending and symmetric)\n"));
  } else {
    c->symr      = (P->maxleafsrc + c->syma - 1) / c->syma;
    c->nsymitems = tot[0];
    c->nsymch    = tot[2];
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->colpart, sizeof(PetscReal) * PetscMax(tot[1], 1), "the symmetric P2P partial sums"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->chsum, sizeof(PetscReal) * PetscMax(tot[2] * P->maxleafsrc, 1), "the symmetric P2P chunk sums"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symnext, sizeof(unsigned long long), "the symmetric P2P item counter"));
    FMMCallCUDA(cudaMemsetAsync(c->symnext, 0, sizeof(unsigned long long), c->stream)); /* then reset by each product's L2P */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symchleaf, sizeof(PetscInt) * PetscMax(tot[2], 1), "the symmetric P2P chunk leaves"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symchdone, sizeof(unsigned) * PetscMax(tot[2], 1), "the symmetric P2P chunk counters"));
    FMMCallCUDA(cudaMemsetAsync(c->symchdone, 0, sizeof(unsigned) * PetscMax(tot[2], 1), c->stream));
    FMMLaunch(SymChunkLeafKernel, LAUNCH_N(nl), nl, c->symleaf + 4 * (nl + 1), c->symchleaf);
    FMMCheckLaunch();
    {
      const PetscInt ni = PetscMax(tot[0], 1);
      unsigned      *key;
      PetscInt      *idx;
      size_t         need = 0;
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&key, sizeof(unsigned) * 2 * ni, "the symmetric P2P work"));
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&idx, sizeof(PetscInt) * 3 * ni, "the symmetric P2P work"));
      FMMLaunch(SymItemKeyKernel, LAUNCH_N(nl), nl, c->nearoff, c->symleaf, key, idx);
      FMMCheckLaunch();
      FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, key, key + ni, idx, idx + ni, (int)tot[0], 0, 4, c->stream));
      PetscCall(ScratchEnsure(c, s, need));
      FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, need, key, key + ni, idx, idx + ni, (int)tot[0], 0, 4, c->stream));
      FMMLaunch(InversePermKernel, LAUNCH_N(tot[0]), tot[0], idx + ni, idx + 2 * ni);
      FMMCheckLaunch();
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symitem, sizeof(PetscInt) * FMMCUDA_SYM_D * ni, "the symmetric P2P items"));
      FMMLaunch(SymItemKernel, LAUNCH_N(nl), nl, c->nearoff, c->near, c->sleaf, c->tleaf, c->symleaf, sw->wslot, idx + 2 * ni, c->symitem);
      FMMCheckLaunch();
      PetscCall(FMMCUDAFree(c->stream, key));
      PetscCall(FMMCUDAFree(c->stream, idx));
    }
    PetscCall(PetscInfo(NULL, "GPU P2P: symmetric, %" PetscInt_FMT " lanes per row group, %" PetscInt_FMT " rows per lane, %" PetscInt_FMT " items, %" PetscInt_FMT " partial sums, %" PetscInt_FMT " chunks of long slot lists\n", c->syma, c->symr, tot[0], tot[1], tot[2]));
  }
  if (!c->syma) {
    PetscCall(FMMCUDAFree(c->stream, c->symleaf));
    c->symleaf = NULL;
  }
  PetscCall(FMMCUDAFree(c->stream, sw->w));
  PetscCall(FMMCUDAFree(c->stream, sw->wslot));
  sw->w = sw->wslot = NULL;
  PetscFunctionReturn(0);
}

/* CUB picks a radix sort's kernels by its size: the symmetric P2P's sort of
   its items (SymItems) runs as one tile up to a few thousand
   leaves, as in the small warm-up product of PetscFMMCUDAInitialize(), and
   in passes of three other kernels beyond.  A dummy sort of that type and
   size loads them (CUDA loads a kernel at its first launch), which a first
   assembly at 10^6 points otherwise pays: its P2P work took 1.0-2.2 ms
   instead of 0.26-0.31 ms, the whole first assembly 8.6 ms instead of 4.2
   (medians of 6 processes, H100).  (Growing petscfmm's pool in one
   allocation before a first assembly, instead of by its allocations one
   at a time, measured no gain: 9.0 ms.) */
PetscErrorCode FMMCUDAWarmUpSorts(void)
{
  const PetscInt n = 1 << 16;
  cudaStream_t   s;
  unsigned      *key;
  PetscInt      *idx;
  void          *tmp  = NULL;
  size_t         need = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  PetscCall(FMMCUDAMalloc(s, (void **)&key, sizeof(unsigned) * 2 * n, "the warm-up sort"));
  PetscCall(FMMCUDAMalloc(s, (void **)&idx, sizeof(PetscInt) * 2 * n, "the warm-up sort"));
  FMMCallCUDA(cudaMemsetAsync(key, 0, sizeof(unsigned) * n, s));
  FMMCallCUDA(cudaMemsetAsync(idx, 0, sizeof(PetscInt) * n, s));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, key, key + n, idx, idx + n, (int)n, 0, 4, s));
  PetscCall(FMMCUDAMalloc(s, &tmp, need, "the warm-up sort"));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(tmp, need, key, key + n, idx, idx + n, (int)n, 0, 4, s));
  PetscCall(FMMCUDAFree(s, tmp));
  PetscCall(FMMCUDAFree(s, key));
  PetscCall(FMMCUDAFree(s, idx));
  FMMCallCUDA(cudaStreamSynchronize(s));
  FMMCallCUDA(cudaStreamDestroy(s));
  PetscFunctionReturn(0);
}

/* one thread per near-list entry j: its sources (tree positions) at their place
   nearscan[j] of the concatenation over the leaves */
__global__ void NearSourcesKernel(PetscInt nnear, const PetscInt *sleaf, const PetscInt *near, const PetscInt *nearscan, PetscInt *nbr)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= nnear) return;
  PetscInt k = nearscan[j];
  for (PetscInt i = sleaf[near[j]]; i < sleaf[near[j] + 1]; i++) nbr[k++] = i;
}

__global__ void GlobalIndexKernel(PetscInt n, const PetscInt *sperm, PetscInt *nbr)
{
  FMMWaitPrior();
  const PetscInt e = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n) nbr[e] = sperm[nbr[e]];
}

/* the lists of the indexing and repetition layouts (after FMMCUDAP2PPlanEnd): per
   leaf b, its neighbour sources at c->nbroff[b] of *nbr as tree positions or,
   with global = true, as global source indices; the host gets the offsets when
   hnbroff is not NULL */
PetscErrorCode FMMCUDANearSources(FMM_CUDA *c, const FMMPlan *P, PetscBool global, PetscInt **nbr, PetscInt *hnbroff)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)nbr, sizeof(PetscInt) * P->nearsrc, "the neighbour-source lists"));
  if (c->nnear) FMMLaunch(NearSourcesKernel, LAUNCH_N(c->nnear), c->nnear, c->sleaf, c->near, c->nearscan, *nbr);
  FMMCheckLaunch();
  if (global && P->nearsrc) FMMLaunch(GlobalIndexKernel, LAUNCH_N(P->nearsrc), P->nearsrc, c->sperm, *nbr);
  FMMCheckLaunch();
  if (hnbroff) FMMCallCUDA(cudaMemcpyAsync(hnbroff, c->nbroff, sizeof(PetscInt) * (P->nleaves + 1), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* the lists of level l: its strong lists and their owners (cap[l] + 1
   each) and its strong-list offsets (4^l + 1), all levels in one allocation
   (one allocation and one free instead of one of each per level: the host's
   calls bound the lists at 10^6 points), then the scan of a level's 16
   cap[l] candidates (+ 1), one for all levels (a level's scan is read
   before the next level's is written, in stream order) */
typedef struct {
  PetscInt  *str, *owner, *stroff;
  ListCount *sc;
} ListLevel;

static PetscErrorCode ListLevelsAlloc(FMM_CUDA *c, PetscInt L, const PetscInt64 *cap, PetscInt **block, ListLevel *v)
{
  const auto lists = [cap](PetscInt l) { return 2 * ((size_t)cap[l] + 1) + ((size_t)1 << (2 * l)) + 1; }; /* the PetscInts of level l */
  size_t     n = 0, nsc = 1;

  PetscFunctionBegin;
  for (PetscInt l = 0; l <= L; l++) n += lists(l);
  for (PetscInt l = 0; l < L; l++) nsc = PetscMax(nsc, 16 * (size_t)cap[l] + 1);
  PetscCall(FMMCUDAMalloc(c->stream, (void **)block, sizeof(PetscInt) * (n + 2 * nsc), "the strong lists"));
  n = 0;
  for (PetscInt l = 0; l <= L; l++) {
    v[l].str    = *block + n;
    v[l].owner  = v[l].str + cap[l] + 1;
    v[l].stroff = v[l].owner + cap[l] + 1;
    n += lists(l);
  }
  for (PetscInt l = 0; l <= L; l++) v[l].sc = (ListCount *)(*block + n);
  PetscFunctionReturn(0);
}

/* the scratch of SortShort: its reduction's, or its two sorts' side by side */
static PetscErrorCode SortShortScratch(FMM_CUDA *c, PetscInt U, PetscInt bits, size_t *bytes, size_t *sortbytes)
{
  const KeyBox none = {{~0ull, ~0ull}, {0, 0}};
  const auto   in   = thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), KeyBoxOf{NULL});
  size_t       need = 0, n2 = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cub::DeviceReduce::Reduce(NULL, need, in, (KeyBox *)NULL, (int)U, KeyBoxJoin(), none, c->stream));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, n2, (unsigned int *)NULL, (unsigned int *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)U, 0, (int)bits, c->stream));
  n2         = (n2 + 255) & ~(size_t)255; /* the y sort's scratch after the x sort's */
  *sortbytes = n2;
  *bytes     = PetscMax(need, 2 * n2);
  PetscFunctionReturn(0);
}

/* the x and y lists X, Y of all U points sorted by (coordinate, index) through
   short keys (see ShortKey): the bounding box, the keys in kx's space, the
   two sorts into kt's (then the box, the flags and the marks), the runs
   fixed; the long runs, where one is out of order, sorted by 64-bit keys in
   the space of ky (keys), kx (sorted keys) and of the second list buffers
   (positions, indices) after Y (one more wait for the GPU, two where a
   long run is out of order); s holds SortShortScratch's bytes, n2 a sort's */
static PetscErrorCode SortShort(FMM_CUDA *c, Scratch *s, size_t n2, PetscInt U, PetscInt bits, const double *xy, unsigned long long *kx, unsigned long long *ky, unsigned long long *kt, PetscInt *val, PetscInt *X, PetscInt *Y)
{
  unsigned int  *qx = (unsigned int *)kx, *qy = qx + U, *qtx = (unsigned int *)kt, *qty = qtx + U;
  KeyBox        *box  = (KeyBox *)(kt + U);
  int           *flag = (int *)FMMCUDAReadbackTarget(2 * sizeof(int)), bad[2];
  unsigned char *mark = (unsigned char *)(box + 1) + 2 * sizeof(int);
  PetscInt      *pos = Y + (U + 1), *v0 = pos + (U + 1), *v1 = v0 + (U + 1);
  const KeyBox   none = {{~0ull, ~0ull}, {0, 0}};
  const auto     in   = thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), KeyBoxOf{xy});
  size_t         need;

  PetscFunctionBegin;
  if (!flag) flag = (int *)(box + 1);
  need = s->bytes;
  FMMCallCUDA(cub::DeviceReduce::Reduce(s->tmp, need, in, box, (int)U, KeyBoxJoin(), none, c->stream));
  FMMLaunch(ShortKeysKernel, LAUNCH_N(U), U, (int)bits, xy, box, qx, qy, val, flag);
  FMMCheckLaunch();
  /* the two sorts side by side, the y list's on the side stream 1: at 10^6
     points each is a chain of small passes that does not fill the GPU */
  FMMCallCUDA(cudaEventRecord(FMMCUDAStaging.evfork, c->stream));
  FMMCallCUDA(cudaStreamWaitEvent(FMMCUDAStaging.side[1], FMMCUDAStaging.evfork, 0));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, n2, qx, qtx, val, X, (int)U, 0, (int)bits, c->stream));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs((char *)s->tmp + n2, n2, qy, qty, val, Y, (int)U, 0, (int)bits, FMMCUDAStaging.side[1]));
  FMMCallCUDA(cudaEventRecord(FMMCUDAStaging.evjoin, FMMCUDAStaging.side[1]));
  FMMCallCUDA(cudaStreamWaitEvent(c->stream, FMMCUDAStaging.evjoin, 0));
  FMMLaunch(FixRunsKernel, dim3((unsigned)FMMCUDABlocks(U, BS), 2), BS, 0, c->stream, U, qtx, qty, X, Y, xy, flag);
  FMMCheckLaunch();
  PetscCall(FMMCUDAReadback(c->stream, bad, flag, sizeof(bad)));
  for (int d = 0; d < 2; d++) {
    PetscInt *id = d ? Y : X, *dn = (PetscInt *)flag, n = 0; /* the count read back where the flags were */
    if (!bad[d]) continue;
    FMMLaunch(LongRunsKernel, LAUNCH_N(U), U, d ? qty : qtx, mark);
    FMMCheckLaunch();
    FMMCallCUDA(cub::DeviceSelect::Flagged(NULL, need, thrust::counting_iterator<PetscInt>(0), mark, pos, dn, (int)U, c->stream));
    PetscCall(ScratchEnsure(c, s, need));
    FMMCallCUDA(cub::DeviceSelect::Flagged(s->tmp, need, thrust::counting_iterator<PetscInt>(0), mark, pos, dn, (int)U, c->stream));
    PetscCall(FMMCUDAReadback(c->stream, &n, dn, sizeof(n)));
    PetscCall(PetscInfo(NULL, "GPU tree build: %s list: %" PetscInt_FMT " of %" PetscInt_FMT " points in runs of more than %d equal %d-bit keys, one out of order: sorted by 64-bit keys\n", d ? "y" : "x", n, U, FIX_RUN, (int)bits));
    FMMLaunch(RunKeysKernel, LAUNCH_N(n), n, pos, id, xy, d, ky, v0);
    FMMCheckLaunch();
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, ky, kx, v0, v1, (int)n, 0, 64, c->stream));
    PetscCall(ScratchEnsure(c, s, need));
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, need, ky, kx, v0, v1, (int)n, 0, 64, c->stream));
    FMMLaunch(RunScatterKernel, LAUNCH_N(n), n, pos, v1, id);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

/*
  FMMCUDATreeBuild - the plan of src/fmm/plan.c, built on the GPU (see the top of this file).

  Input (FMMCUDATreeInput, fmmcuda.h): xy, room on the device for the U =
  N + Mg points of all ranks (sources in global order, then, when the
  targets are not the sources, the targets in global order), which
  in->up.points copies there, points a to b - 1, on stream s (NULL: xy holds
  them already); nrm (2N, or NULL) and wts (N, or NULL) on the device, whose
  upload in->up.late (when not NULL) starts once the sort is queued.  parts:
  the points come from host memory (from SORT_PARTS_MIN on, they go up in two
  parts, each sorted while the next goes up).  Fills
  the device plan of c (sperm ... scale, faroff, far, nearoff, near, tleafof)
  and the counts and statistics of P (no host arrays).
*/
PetscErrorCode FMMCUDATreeBuild(FMM_CUDA *c, FMMPlan *P, const FMMCUDATreeInput *in)
{
  const PetscInt      ct = in->ct, t0 = in->t0, U = in->U, keybits = in->keybits;
  const PetscReal     theta = in->theta, alpha = in->alpha, beta = in->beta;
  const PetscBool     median = in->median, splitlocal = in->splitlocal, same = in->same, parts = in->parts;
  const double       *xy = in->xy, *nrm = in->nrm, *wts = in->wts;
  const auto          up   = in->up.points;
  const auto          late = in->up.late;
  void               *uctx = in->up.pctx, *lctx = in->up.lctx;
  const PetscInt      N = P->N, M = P->M;
  PetscInt            L = 0, nleaves, nboxes, nch;
  Scratch             s = {NULL, 0, PETSC_FALSE};
  FMMCarve            work = {NULL, 0}, out = {NULL, 0};
  unsigned long long *kx, *ky, *kt;
  PetscInt           *val, *X, *Y, *seg, *cseg, *offbase, *off, *noff, *fs, *ss, *ft, *st;
  char               *dir;
  unsigned char      *sel, *nsel;
  double             *bb, *XO, *YO;
  SplitLists          lists;
  SplitWork           sp  = {0, NULL, NULL, NULL, NULL, NULL};
  PetscBool           lsplit = PETSC_FALSE; /* SplitLocalKernel runs on this device */
  PetscBool           local  = PETSC_FALSE;
  cudaEvent_t         lated  = NULL; /* the normals and weights are up */
  cudaEvent_t         evmax  = NULL;                                              /* after ChildMaxKernel */
  PetscInt           *hmax   = (PetscInt *)FMMCUDAReadbackTarget(sizeof(PetscInt)); /* where it writes, else dmax */
  PetscInt           *dmax   = NULL;
  Stages              stg = {PETSC_FALSE, 0, {0}, {0}};
  const char         *stgname[] = {"allocation and sort", "splits", "leaves and scatter", "interaction lists", "frees"};

  PetscFunctionBegin;
  PetscCall(PetscInfoEnabled(MAT_CLASSID, &stg.on));
  PetscCall(StageMark(c, &stg));
  while (L < 14 && (PetscInt64)ct * ((PetscInt64)1 << (2 * L)) < U) L++;
  nleaves    = (PetscInt)1 << (2 * L);
  nboxes     = FMMLevelStart(L + 1);
  P->L       = L;
  P->nleaves = nleaves;
  P->nboxes  = nboxes;

  /* work arrays of the tree, one block freed at the end (the sort's scratch
     in it); the sort keys' space then holds the other coordinates: XO, YO,
     then their second buffers */
  const PetscInt  K         = parts && U >= SORT_PARTS_MIN ? 2 : 1, h = U / K; /* the points go up in parts [0, h) and [h, U) */
  const PetscBool shortkeys = keybits < 64 && K == 1 && U >= 64 ? PETSC_TRUE : PETSC_FALSE; /* (the parts' merge compares the keys of both) */
  size_t n2 = 0; /* the scratch of one of SortShort's sorts */
  const PetscInt ntiles = (PetscInt)FMMCUDABlocks(U, MTILE); /* of SplitMoveKernel */
  size_t         tbytes = 0;
  char          *tst;
  SplitTiles     tiles;
  {
    size_t     scr = 0;
    const auto carve = [&](FMMCarve *k) {
      kx      = FMMCarveArray<unsigned long long>(k, 4 * (size_t)PetscMax(U, 1));
      val     = FMMCarveArray<PetscInt>(k, 11 * (size_t)(U + 1));
      offbase = FMMCarveArray<PetscInt>(k, 2 * ((size_t)nleaves + 1));
      dir     = FMMCarveArray<char>(k, (size_t)nleaves);
      sel     = FMMCarveArray<unsigned char>(k, 2 * (size_t)nleaves);
      bb      = FMMCarveArray<double>(k, 4 * (size_t)nboxes);
      tst     = FMMCarveArray<char>(k, tbytes);
      dmax    = FMMCarveArray<PetscInt>(k, 1);
      if (!median && L > 0 && U) SplitWorkCarve(k, U, nleaves / 2, &sp);
      s.tmp = FMMCarveArray<char>(k, scr);
    };
    FMMCallCUDA(SplitTiles::AllocationSize((int)ntiles, tbytes));
    if (U && shortkeys) PetscCall(SortShortScratch(c, U, keybits, &scr, &n2));
    else if (U) FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, scr, (unsigned long long *)NULL, (unsigned long long *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)PetscMax(U - h, h), 0, 64, c->stream)); /* the larger part (h = U for one) */
    carve(&work);
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&work.base, work.off, "the work arrays of the tree build"));
    work.off = 0;
    carve(&work);
    s.bytes = scr;
    s.lent  = PETSC_TRUE;
  }
  ky  = kx + PetscMax(U, 1);
  kt  = ky + PetscMax(U, 1);
  XO  = (double *)kx;
  YO  = (double *)ky;
  X    = val + (U + 1);
  Y    = X + (U + 1);
  seg  = Y + 3 * (U + 1); /* after Y, the second buffers of X and Y */
  cseg = seg + (U + 1);   /* the chunks' segments (SegmentOf) */
  fs   = cseg + (U + 1);
  ss   = fs + (U + 1);
  ft   = ss + (U + 1);
  st   = ft + (U + 1);
  off  = offbase;
  noff = off + nleaves + 1;
  nsel = sel + nleaves;
  FMMCallCUDA(cudaMemsetAsync(sel, 0, 2 * (size_t)nleaves, c->stream));
  if (L > 0 && U && splitlocal) PetscCall(SplitLocalSetup(c, &lsplit));

  /* the points go up in parts on a second stream, each part's two lists
     sorted while the next goes up, then merged (at 10^7 points an assembly
     again 15.4-16.0 -> 15.0-15.3 ms, H100; sorting the x and y
     lists at the same time, the y list on a second stream with its own
     scratch, measured slower: the sort stage at 10^6 points 0.53-0.62 ->
     0.68-0.75 ms, H100) */
  if (U) {
    PetscInt      *X1 = K == 2 ? Y + (U + 1) : X, *Y1 = K == 2 ? Y + 2 * (U + 1) : Y; /* the parts' lists: the second buffers, when merged */
    cudaStream_t   us = K == 2 ? FMMCUDAStaging.side[1] : c->stream;              /* the upload's */
    cudaEvent_t    ev;
    size_t         need = 0;

    FMMCallCUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    if (K == 2) {
      FMMCallCUDA(cudaEventRecord(ev, c->stream)); /* xy is allocated */
      FMMCallCUDA(cudaStreamWaitEvent(us, ev, 0));
    }
    if (!shortkeys) need = s.bytes; /* the block's scratch, sized above for the larger part */
    for (PetscInt j = 0; j < K; j++) {
      const PetscInt a = j ? h : 0, b = j == K - 1 ? U : h;
      if (up) PetscCall(up(c, uctx, a, b, us));
      FMMCallCUDA(cudaEventRecord(ev, us));
      if (us != c->stream) FMMCallCUDA(cudaStreamWaitEvent(c->stream, ev, 0));
      if (shortkeys) PetscCall(SortShort(c, &s, n2, U, keybits, xy, kx, ky, kt, val, X, Y));
      else {
        FMMLaunch(KeysKernel, LAUNCH_N(b - a), a, b, xy, kx, ky, val);
        FMMCheckLaunch();
        FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s.tmp, need, kx + a, kt + a, val + a, X1 + a, (int)(b - a), 0, 64, c->stream));
        FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s.tmp, need, ky + a, kt + U + a, val + a, Y1 + a, (int)(b - a), 0, 64, c->stream));
      }
    }
    if (K == 2) { /* the merges write keys over the sorts' inputs (XO, YO below) */
      const auto xa = thrust::make_zip_iterator(kt, X1), xb = thrust::make_zip_iterator(kt + h, X1 + h), xo = thrust::make_zip_iterator(kx, X);
      const auto ya = thrust::make_zip_iterator(kt + U, Y1), yb = thrust::make_zip_iterator(kt + U + h, Y1 + h), yo = thrust::make_zip_iterator(ky, Y);
      FMMCallCUDA(cub::DeviceMerge::MergeKeys(NULL, need, xa, h, xb, U - h, xo, KeyIndexLess(), c->stream));
      PetscCall(ScratchEnsure(c, &s, need));
      FMMCallCUDA(cub::DeviceMerge::MergeKeys(s.tmp, need, xa, h, xb, U - h, xo, KeyIndexLess(), c->stream));
      FMMCallCUDA(cub::DeviceMerge::MergeKeys(s.tmp, need, ya, h, yb, U - h, yo, KeyIndexLess(), c->stream));
    }
    FMMLaunch(OtherKernel, LAUNCH_N(U), U, X, Y, xy, XO, YO);
    FMMCheckLaunch();
    if (late) PetscCall(late(c, lctx, ev, &lated)); /* after the points, while the GPU sorts and splits */
    FMMCallCUDA(cudaEventDestroy(ev));
  } else if (late) PetscCall(late(c, lctx, NULL, &lated));
  {
    PetscInt h[2] = {0, U};
    FMMCallCUDA(cudaMemcpyAsync(off, h, sizeof(h), cudaMemcpyHostToDevice, c->stream));
  }

  PetscCall(StageMark(c, &stg));
  lists = SplitLists{X, XO, U + 1, PetscMax(U, 1), sel}; /* X, Y, X2, Y2 and XO, YO, XO2, YO2 follow each other */
  FMMCallCUDA(tiles.Init((int)ntiles, tst, tbytes));
  nch   = (U + SEG_CHUNK - 1) / SEG_CHUNK; /* chunks of positions (SegmentOf) */
  /* 2L rounds of halving; the boxes of level l are the segments of round 2l.
     The last rounds run in shared memory (SplitLocalKernel) from the first
     round whose largest segment fits a block (one readback, when the
     average fits) */
  /* Rounds that may run in shared memory (fits): the round before each finds
     its children's largest size once its cuts are picked (ChildMaxKernel),
     and the host reads it from the pinned buffer (evmax) while that round's
     moves run, instead of waiting for them and a kernel after them: the
     split stage (-info, 28 assemblies each, alternating) 0.603 -> 0.587 ms at
     10^6 points, 6.193 -> 6.178 ms at 10^7 (H100).  Without the pinned
     buffer the size goes to dmax and is read back after the moves */
  const auto fits = [&](PetscInt r) { return lsplit && r < 2 * L && 2 * L - r <= SRMAX && U <= ((PetscInt64)SCAP << r); }; /* (true from some round on) */
  if (hmax && fits(2 * L - 1)) FMMCallCUDA(cudaEventCreateWithFlags(&evmax, cudaEventDisableTiming));
  for (PetscInt r = 0; r < 2 * L; r++) {
    const PetscInt nseg = (PetscInt)1 << r;
    double        *lbb  = (r % 2 == 0) ? bb + 4 * FMMLevelStart(r / 2) : NULL;
    if (fits(r)) {
      PetscInt nmax = U; /* round 0: one segment */
      if (r && hmax) {
        FMMCallCUDA(cudaEventSynchronize(evmax));
        nmax = *hmax;
      } else if (r) PetscCall(FMMCUDAReadback(c->stream, &nmax, dmax, sizeof(PetscInt)));
      if (nmax <= SCAP) {
        const int ipt = SplitLocalIPT(nmax);
        FMMLaunch(SplitLocalOf(ipt), (unsigned)nseg, SNT, SplitLocalBytes(ipt), c->stream, (int)(2 * L - r), r, median ? 1 : 0, off, lists, xy, seg, noff, bb);
        FMMCheckLaunch();
        PetscCall(PetscInfo(NULL, "GPU tree build: rounds %" PetscInt_FMT " to %" PetscInt_FMT " of %" PetscInt_FMT " in shared memory, %" PetscInt_FMT " blocks of up to %" PetscInt_FMT " points, %d a thread\n", r, 2 * L - 1, 2 * L, nseg, nmax, ipt));
        { PetscInt *t = off; off = noff; noff = t; }
        local = PETSC_TRUE;
        break;
      }
    }
    FMMLaunch(SegmentKernel, LAUNCH_N(PetscMax(nseg, nch + 1)), nseg, off, lists, xy, noff, dir, lbb, sp.core, sp.best, sp.rank, nch, cseg, tiles, (int)ntiles);
    FMMCheckLaunch();
    if (U && sp.core) PetscCall(CompactSplit(c, &sp, nseg, U, off, cseg, lists, xy));
    if (fits(r + 1)) {
      FMMLaunch(ChildMaxKernel, 1, BS, 0, c->stream, nseg, off, noff, dir, sp.rank, hmax ? hmax : dmax);
      FMMCheckLaunch();
      if (hmax) FMMCallCUDA(cudaEventRecord(evmax, c->stream));
    }
    if (U) FMMLaunch(SplitMoveKernel, (unsigned)ntiles, MNT, 0, c->stream, U, off, cseg, noff, dir, sp.rank, lists, nsel, xy, tiles);
    FMMCheckLaunch();
    { PetscInt *t = off; off = noff; noff = t; }
    { unsigned char *t = lists.sel; lists.sel = nsel; nsel = t; }
  }
  if (evmax) FMMCallCUDA(cudaEventDestroy(evmax));
  if (!local) { /* the leaves' bounding boxes, the leaf of each position, the x list in one buffer */
    FMMLaunch(SegmentKernel, LAUNCH_N(nleaves), nleaves, off, lists, xy, NULL, NULL, bb + 4 * FMMLevelStart(L), NULL, NULL, NULL, 0, NULL, tiles, 0);
    FMMCheckLaunch();
    if (U) FMMLaunch(LeafOfKernel, LAUNCH_N(U), U, nleaves, off, lists, seg);
    FMMCheckLaunch();
  }

  PetscCall(StageMark(c, &stg));
  if (lated) { /* the normals and weights are up */
    FMMCallCUDA(cudaStreamWaitEvent(c->stream, lated, 0));
    FMMCallCUDA(cudaEventDestroy(lated));
  }
  /* sources and this rank's targets in tree order */
  { /* the plan's arrays of points, leaves and boxes in one block (c->treeblk, freed by the backend's destroy) */
    const auto carve = [&](FMMCarve *k) {
      c->sperm   = FMMCarveArray<PetscInt>(k, (size_t)N);
      c->sx      = FMMCarveArray<double>(k, (size_t)N);
      c->sy      = FMMCarveArray<double>(k, (size_t)N);
      c->cq      = FMMCarveArray<double>(k, (size_t)N);
      c->cdx     = FMMCarveArray<double>(k, (size_t)N);
      c->cdy     = FMMCarveArray<double>(k, (size_t)N);
      c->tperm   = FMMCarveArray<PetscInt>(k, (size_t)M);
      c->tx      = FMMCarveArray<double>(k, (size_t)M);
      c->ty      = FMMCarveArray<double>(k, (size_t)M);
      c->tleafof = FMMCarveArray<PetscInt>(k, (size_t)M);
      c->sleaf   = FMMCarveArray<PetscInt>(k, (size_t)nleaves + 1);
      c->tleaf   = FMMCarveArray<PetscInt>(k, (size_t)nleaves + 1);
      c->cx      = FMMCarveArray<double>(k, (size_t)nboxes);
      c->cy      = FMMCarveArray<double>(k, (size_t)nboxes);
      c->scale   = FMMCarveArray<double>(k, (size_t)nboxes);
      c->faroff  = FMMCarveArray<PetscInt>(k, (size_t)nboxes + 1);
    };
    carve(&out);
    PetscCall(FMMCUDAMalloc(c->stream, &c->treeblk, out.off, "the plan's points, leaves and boxes"));
    out.base = (char *)c->treeblk;
    out.off  = 0;
    carve(&out);
  }
  FMMLaunch(ClassifyKernel, LAUNCH_N(U + 1), U, N, same ? 1 : 0, t0, t0 + M, X, fs, ft);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, &s, fs, ss, U));
  PetscCall(ExclusiveScan(c, &s, ft, st, U));
  FMMLaunch(LeafRangeKernel, LAUNCH_N(nleaves + 1), nleaves, off, ss, st, c->sleaf, c->tleaf);
  FMMCheckLaunch();
  if (U) FMMLaunch(ScatterPointsKernel, LAUNCH_N(U), U, N, same ? 1 : 0, t0, X, seg, fs, ss, ft, st, xy, nrm, wts, alpha, beta, c->sperm, c->sx, c->sy, c->cq, c->cdx, c->cdy, c->tperm, c->tx, c->ty, c->tleafof);
  FMMCheckLaunch();

  /* box geometry */
  FMMLaunch(GeometryKernel, LAUNCH_N(nboxes), nboxes, bb, c->cx, c->cy, c->scale);
  FMMCheckLaunch();

  PetscCall(StageMark(c, &stg));
  /* interaction lists, level by level: the strong lists of level l (stroff,
     str, and the box owning each entry) give the candidates of level l+1.
     Their sizes stay on the GPU (ListTotal), so the host queues all levels
     without waiting: the strong lists of each level get room for room
     entries a box and the far lists for 3 room (cap, farcap: 3-13 and 9-40
     are used on a curve and in a square), and the host reads the sizes once,
     at the end; where they did not fit, the lists are built again with the
     sizes found (exact down to the first level that did not fit, more below
     it).  With a readback of the sizes at every level the lists took 0.33 ms
     of a first assembly at 10^6 points, 45 us a level, mostly waiting (H100) */
  {
    const PetscInt nroot = (N > 0 && M > 0) ? 1 : 0;
    PetscInt64    *cap;
    PetscInt      *far = NULL, *block, farcap = (PetscInt)PetscMin((PetscInt64)3 * c->listroom * nboxes, PETSC_MAX_INT - 1), root[6] = {0, 0, 0, 0, 0, 0};
    ListTotal     *dtot, *tot, t0 = {{nroot, 0}, 0, 1};
    ListLevel     *lev;

    PetscCall(PetscMalloc3(L + 1, &cap, L + 1, &tot, L + 1, &lev));
    cap[0] = nroot;
    for (PetscInt l = 1; l <= L; l++) cap[l] = PetscMin(16 * cap[l - 1], (PetscInt64)c->listroom << (2 * l));
    root[2 * nroot + 3] = nroot; /* the root's lists: str and owner 0, stroff {0, nroot} */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&dtot, sizeof(ListTotal) * (L + 1), "the sizes of the lists"));
    FMMCallCUDA(cudaMemsetAsync(c->faroff, 0, 2 * sizeof(PetscInt), c->stream)); /* the root has no far field */
    for (int attempt = 0;; attempt++) {
      PetscInt64 nfar, ncand = 0;
      PetscInt   bad = L + 1; /* the first level whose strong lists did not fit */

      for (PetscInt l = 0; l <= L; l++) ncand = PetscMax(ncand, 16 * cap[l]);
      PetscCheck(ncand < PETSC_MAX_INT, PETSC_COMM_SELF, PETSC_ERR_SUP, "GPU interaction lists: %" PetscInt64_FMT " candidate pairs at one level exceed the %d that a 32-bit PetscInt counts", ncand, (int)PETSC_MAX_INT);
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&far, sizeof(PetscInt) * PetscMax(farcap, 1), "the M2L list"));
      PetscCall(ListLevelsAlloc(c, L, cap, &block, lev));
      FMMCallCUDA(cudaMemcpyAsync(lev[0].str, root, sizeof(PetscInt) * (2 * nroot + 4), cudaMemcpyHostToDevice, c->stream));
      FMMCallCUDA(cudaMemcpyAsync(dtot, &t0, sizeof(t0), cudaMemcpyHostToDevice, c->stream));
      {
        ListTop top;
        top.n = 0;
        for (PetscInt l = 0; l < L; l++) {
          const PetscInt  nb = (PetscInt)1 << (2 * (l + 1)), c0 = FMMLevelStart(l + 1), span = (PetscInt)1 << (2 * (L - l - 1)), nc = (PetscInt)(16 * cap[l]);
          const ListLevel u = lev[l], v = lev[l + 1];
          const ListStep  st = {{dtot + l, c0, span, theta, c->sleaf, c->tleaf, u.stroff, u.str, u.owner, c->cx, c->cy, c->scale}, {dtot + l, dtot + l + 1, u.sc, (PetscInt)cap[l + 1]}, nb, farcap, v.str, v.owner, v.stroff, far, c->faroff};
          if (top.n == l && l < LTOP_MAX && nc <= LTOP_CAND) { /* the first levels: one launch below */
            top.st[top.n++] = st;
            continue;
          }
          if (top.n) {
            FMMLaunch(ListTopKernel, 1, LTB, 0, c->stream, top);
            FMMCheckLaunch();
            top.n = 0;
          }
          PetscCall(ExclusiveScanBy(c, &s, thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), st.kind), thrust::make_tabulate_output_iterator(st.out), ListCountSum(), ListCount{0, 0}, nc));
          FMMLaunch(ListWriteKernel, PetscMin(FMMCUDABlocks(PetscMax(nc, nb + 1), BS), 4096u), BS, 0, c->stream, st);
          FMMCheckLaunch();
        }
        if (top.n) {
          FMMLaunch(ListTopKernel, 1, LTB, 0, c->stream, top);
          FMMCheckLaunch();
        }
      }
      PetscCall(FMMCUDAReadback(c->stream, tot, dtot, sizeof(ListTotal) * (L + 1)));
      for (PetscInt l = L; l >= 0; l--)
        if (!tot[l].ok) bad = l;
      nfar = tot[L].farbase + tot[L].n.f; /* all of them when the strong lists fit */
      if (bad > L && nfar <= farcap) { /* the near lists (the leaves' strong lists) in a block of their size, not of their room */
        c->nnear = tot[L].n.s;
        PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->near, sizeof(PetscInt) * ((size_t)c->nnear + nleaves + 1), "the P2P lists"));
        c->nearoff   = c->near + c->nnear; /* in near's block: not freed on its own */
        c->treebuilt = PETSC_TRUE;
        FMMCallCUDA(cudaMemcpyAsync(c->near, lev[L].str, sizeof(PetscInt) * c->nnear, cudaMemcpyDeviceToDevice, c->stream));
        FMMCallCUDA(cudaMemcpyAsync(c->nearoff, lev[L].stroff, sizeof(PetscInt) * (nleaves + 1), cudaMemcpyDeviceToDevice, c->stream));
        PetscCall(FMMCUDAFree(c->stream, block));
        c->far  = far;
        P->nfar = (PetscInt)nfar;
        break;
      }
      /* again, with the sizes found: exact down to level bad, below it the
         room scaled by what level bad needed (at most 16 times the entries
         of the level above) */
      PetscCheck(attempt <= L, PETSC_COMM_SELF, PETSC_ERR_PLIB, "GPU interaction lists: no fit after %d attempts", attempt + 1);
      PetscCall(PetscInfo(NULL, "GPU interaction lists: %s %" PetscInt_FMT " did not fit their room (-mat_fmm_cuda_tree_list_room %" PetscInt_FMT "): built again\n", bad <= L ? "the strong lists of level" : "the far lists of levels 1 to", bad <= L ? bad : L, c->listroom));
      {
        const PetscInt64 g = bad <= L ? (tot[bad].n.s + cap[bad] - 1) / PetscMax(cap[bad], 1) + 1 : 1;
        for (PetscInt l = 1; l <= L; l++) cap[l] = l <= bad ? tot[l].n.s : PetscMin(16 * cap[l - 1], g * cap[l]);
      }
      farcap = (PetscInt)PetscMin(bad > L ? nfar : PetscMax((PetscInt64)farcap, 2 * nfar), PETSC_MAX_INT - 1);
      PetscCall(FMMCUDAFree(c->stream, block));
      PetscCall(FMMCUDAFree(c->stream, far));
    }
    PetscCall(FMMCUDAFree(c->stream, dtot));
    PetscCall(PetscFree3(cap, tot, lev));
  }
  PetscCall(StageMark(c, &stg));
  PetscCall(FMMCUDAFree(c->stream, work.base));
  if (s.tmp && !s.lent) PetscCall(FMMCUDAFree(c->stream, s.tmp));
  PetscCall(StageMark(c, &stg));
  if (stg.on) FMMCallCUDA(cudaStreamSynchronize(c->stream)); /* (the readback of the lists' sizes waited for the rest) */
  PetscCall(StageReport(&stg, stgname));
  PetscFunctionReturn(0);
}
