/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the splitting
  rounds in global memory.  Each round halves every segment (box or half box)
  at its cut: its bounding box and median (SegmentKernel), and the stable
  partition of the list other than the cut's direction (SplitMoveKernel).
*/
#pragma once

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
   the flag and once for the move, and a flag kernel, a scan and a partition
   kernel before that: one pass instead of several over all positions. */
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
  if (g->cut < g->e) {
    g->q  = ListId(L, d, ListBuf(L, d, s))[g->cut];
    g->cv = xy[2 * g->q + d];
  } else { /* a cut at the end (a rank's part of a box of the top cuts, top.cuh): all to the first child */
    g->q  = PETSC_MAX_INT;
    g->cv = INFINITY;
  }
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
   positions a thread throughout, a warp's accesses spread over 32 lines,
   slower than CUB's scan).  Four blocks an SM (64 registers) rather than
   three (80), and MIT 8 rather than 4: the faster rounds */
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
