/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the compact
  split rule of the rounds in global memory (-mat_fmm_tree_split compact, the
  default; fmmimpl.h), and the run and extent helpers that the rounds in
  shared memory (splitlocal.cuh) share.
*/
#pragma once

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
   one), which measured faster at 10^6 and 10^7 points although
   SplitCoreKernel then has twice the tiles; 128 threads rather than 256, so
   that a round of 10^6 points has more tiles than the GPU has SMs */
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
   it go to the atomics at once, its last run to the block's atomics: with a
   position a thread, the shuffles of BlockRunAtomics for each, and a load of
   its segment before that of its values, made a round slower. */
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
