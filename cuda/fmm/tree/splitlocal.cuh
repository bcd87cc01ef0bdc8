/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the last
  splitting rounds in shared memory, a block per segment.
*/
#pragma once

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
   (SplitLocalIPT), as each round's sequential part is that long in every
   thread.
   The compact split's costs come as in global memory: each sub-segment's
   cores (ranks below and above its window) by a pass over the positions, and
   scans of its window's slots only, rather than scans of the extents of all
   positions forward and backward with a test of each for a candidate, which
   was slower.  1024 threads of 4 positions (64 registers) were no faster.
   The block writes the bounding boxes of its boxes of the even rounds and of
   the leaves, and back to global memory what the leaves need: the x list X,
   seg and the leaf offsets. */
/* one block an SM (its shared memory); blocks of 256 x 8 or 512 x 4 points,
   two an SM, the local rounds starting a round later, measured slower */
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
   offsets loff, and bb as SegmentKernel's (a pyramid of nroot boxes at its
   top: the nroot 4^k boxes of level k from nroot (4^k - 1) / 3 on) */
template <int IPT>
__global__ void __launch_bounds__(SNT) SplitLocalKernel(int R, PetscInt r0, PetscInt nroot, int median, const PetscInt *off, SplitLists L, const double *xy, PetscInt *seg, PetscInt *loff, double *bb)
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
      if (r % 2 == 0) BoxSet(bb + 4 * (nroot * (((((PetscInt)1) << r) - 1) / 3) + (s0 << i) + m), nm, xmin, ymin, xmax, ymax);
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

/* the kernel of the local split for blocks of up to SNT ipt points */
static void (*SplitLocalOf(int ipt))(int, PetscInt, PetscInt, int, const PetscInt *, SplitLists, const double *, PetscInt *, PetscInt *, double *)
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
