/*
  The near field (P2P) on the GPU in the three layouts of -mat_fmm_layout, and
  the exact direct sum.  The pair kernel is FMMPairKernel (expansions.h),
  specialised at compile time to the terms present (KIND 0: single layer,
  1: double layer, 2: both) and written without branches; the zero-distance
  pair is excluded.

  Each target's sum is formed by a fixed set of threads in a fixed order and
  written once, so results are reproducible bitwise.
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"
#include <cuda_pipeline.h>

/* log for the near field: x = 2^e m, m in [1,2); bin i of m (its top FMM_LOGBITS
   mantissa bits) has midpoint c_i = 1 + (i + 1/2)/FMM_LOGTAB and r_i = 1/c_i
   (rounded); with t = m r_i - 1 (one fma, |t| <= 2^-9),
     log x = e log 2 - log r_i + log1p(t),
   log1p(t) = t P(t) by its degree-5 Taylor polynomial (truncation below
   |t|^6/6 <= 1e-17).  Six FP64 operations for log m instead of about 30 for the
   libm log; absolute error about 1e-16.  lt[i] = (r_i, -log r_i). */
#define FMM_LOGBITS 8
#define FMM_LOGTAB  (1 << FMM_LOGBITS)
#define FMM_LN2     0.69314718055994530942
#define FMM_LN2_HI  6.93147180369123816490e-01 /* log 2 split so that e log2_hi is exact (fdlibm) */
#define FMM_LN2_LO  1.90821492927058770002e-10

/* the part of log x that does not depend on the exponent: log m = -log r_i +
   log1p(m r_i - 1), for m the mantissa of x as a double in [1,2), rl = lt[bin of m] */
__device__ __forceinline__ double LogMantissa(double m, double2 rl)
{
  const double t  = fma(m, rl.x, -1.0);
  double       pl = fma(0.2, t, -0.25);
  pl              = fma(pl, t, 1.0 / 3);
  pl              = fma(pl, t, -0.5);
  pl              = fma(pl, t, 1.0);
  return fma(t, pl, rl.y);
}

/* the mantissa of x > 0 (normal) as a double in [1,2), and its table bin */
__device__ __forceinline__ double LogSplit(int hi, int lo, int *bin)
{
  *bin = (hi >> (20 - FMM_LOGBITS)) & (FMM_LOGTAB - 1);
  return __hiloint2double((hi & 0x000fffff) | 0x3ff00000, lo);
}

__device__ __forceinline__ double FastLog(double x, const double2 *lt)
{
  const int hi = __double2hiint(x), ex = hi >> 20; /* x > 0 */
  if (ex == 0) return log(x);                      /* subnormal: not met in practice */
  int          bin;
  const double m = LogSplit(hi, __double2loint(x), &bin), e = (double)(ex - 1023);
  return fma(e, FMM_LN2_HI, LogMantissa(m, lt[bin])) + e * FMM_LN2_LO;
}

/* the table, once per process and device (FMMCUDATableKeep) */
PetscErrorCode FMMCUDALogTable(FMM_CUDA *c)
{
  double2 h[FMM_LOGTAB];

  PetscFunctionBegin;
  c->logtab = (double2 *)FMMCUDATableFind(c->dev, "the log table", 0);
  if (c->logtab) PetscFunctionReturn(0);
  for (int i = 0; i < FMM_LOGTAB; i++) {
    h[i].x = 1.0 / (1.0 + (i + 0.5) / FMM_LOGTAB);
    h[i].y = -log(h[i].x);
  }
  PetscCall(FMMCUDATableKeep(c->dev, "the log table", 0, h, sizeof(h), (void **)&c->logtab));
  PetscFunctionReturn(0);
}

/* every thread of the block: the table into shared memory (lt == NULL: libm log) */
__device__ __forceinline__ const double2 *LoadLogTable(const double2 *g, double2 *sh)
{
  if (!g) return NULL;
  for (int k = threadIdx.x; k < FMM_LOGTAB; k += blockDim.x) sh[k] = g[k];
  __syncthreads();
  return sh;
}

/* Branch-free: the zero-distance pair evaluates at r2 = 1 and its terms are
   dropped (the dipole numerator is 0 there anyway).  A data-dependent branch here
   splits warps: every lane meets its own source at a different step. */
template <int KIND>
__device__ __forceinline__ double Pair(double rx, double ry, double q, double dx, double dy, const double2 *lt)
{
  const double r2 = rx * rx + ry * ry, rr = r2 > 0.0 ? r2 : 1.0;
  double       v  = 0.0;
  if constexpr (KIND != 1) {
    const double lg = lt ? FastLog(rr, lt) : log(rr);
    v               = 0.5 * q * (r2 > 0.0 ? lg : 0.0);
  }
  if constexpr (KIND != 0) v += (dx * rx + dy * ry) * __drcp_rn(rr);
  return v;
}

#define P2P_THREADS FMMCUDA_P2P_T

/* The threads of a P2P block for an item of nt targets: nt < P2P_THREADS gives
   each target nsl = P2P_THREADS/nt threads (slices) that take every nsl-th
   source; the slice sums are then added in slice order. */
struct Slices {
  int  nsl, sl, it;
  bool act;
  __device__ Slices(int nt) : nsl(P2P_THREADS / nt), sl(threadIdx.x / nt), it(threadIdx.x % nt), act(threadIdx.x / nt < P2P_THREADS / nt) { }
};

/* sum over slices, then the item's output: pot (whole list) or its partial */
__device__ __forceinline__ void P2PFinish(const FMMP2PItem &I, const Slices &S, double acc, double *red, double *pot, double *part)
{
  red[threadIdx.x] = acc;
  __syncthreads();
  if (S.act && S.sl == 0) {
    double s = red[S.it];
    for (int m = 1; m < S.nsl; m++) s += red[S.it + m * (int)I.nt];
    if (I.part < 0) pot[I.t0 + S.it] += s;
    else part[I.part + S.it] = s;
  }
}

/*
  Tiled (Goude & Engblom, Alg. 3.7): the sources of an item, contiguous ranges of
  consecutive neighbour leaves in tree order, are staged in shared memory in
  tiles of TL_TILE; every source is then read by all lanes of a warp at once
  (a broadcast).

  By instruction count the kernel is bound by the FP64 pipe (64 lanes per SM and
  clock on an H100/H200): a single-layer pair costs 13 FP64 operations (r: 4,
  log m: 6, the two accumulations and the exponent: 3), against about 22 in the
  per-item kernel this replaces, which puts the ceiling at 64/13 = 4.9 pairs
  per SM and clock (1.3e12 pairs/s on 132 SMs at 1.98 GHz).  Everything else
  is kept off the FP64 pipe and out of shared-memory bank conflicts:
  - each thread takes TL_R = 2 targets, so one broadcast source serves two pairs;
  - the exponent of r^2 is accumulated apart: acc += q/2 log m_i, acce += q/2 e_i,
    potential = acc + log 2 acce; the exponent becomes a double by integer
    operations and one subtraction (no int-to-double conversion, a quarter-rate
    instruction);
  - the zero-distance pair is dropped by zeroing its charge after an integer
    test of the exponent of r^2, no FP64 compare (so are pairs with 0 < |r| <
    1.5e-154, r^2 subnormal, which the CPU backend evaluates);
  - the log table is replicated FMM_LOGCOPY = 8 times, entry i of copy c at
    [8 i + c]: lane l reads copy l % 8, so the 8 lanes of each quarter-warp phase
    of the 16-byte loads hit distinct bank groups and a warp's lookup of 32
    unrelated bins costs the minimum of 4 shared-memory wavefronts (a single
    table: about 10, estimated for random bins);
  - blocks are persistent (as many as fit on the GPU at once) and walk the items
    with a grid stride, so the 32 KB table is staged once per block, not once
    per item;
  - the tile is filled by all threads at once, each finding the near-list
    entry of its source by binary search in nearscan (a walk of the neighbour
    leaves, one dependent load after the other, cost 12% of the P2P time at
    10^7 points on an H100).
  Each thread sums its slice of the sources in order and the slices are added in
  slice order: the result does not depend on scheduling.
*/
#define TL_THREADS  256
#define TL_TILE     512
#define TL_R        2
#define FMM_LOGCOPY 8
static_assert(FMMCUDA_P2P_T <= TL_R * TL_THREADS, "an item's targets fit the block");

/* shared memory of the tiled kernel: table copies, then the tile */
static size_t TiledShmem(int kind, bool fast)
{
  size_t s = (size_t)TL_TILE * sizeof(double2);               /* (x, y); also the slice sums at the end */
  if (kind != 1) s += (size_t)TL_TILE * sizeof(double);        /* q/2 */
  if (kind != 0) s += (size_t)TL_TILE * sizeof(double2);       /* (dx, dy) */
  if (fast && kind != 1) s += (size_t)FMM_LOGTAB * FMM_LOGCOPY * sizeof(double2);
  return s;
}

/* the single-layer term of one pair into (acc, acce); ltc = this lane's table copy,
   entry i at byte 128 i = ((hi >> 12) & 255) << 7 = (hi >> 5) & 0x7f80 */
__device__ __forceinline__ void LogTerm(double rx, double ry, double qh, const char *ltc, double &acc, double &acce)
{
  static_assert(FMM_LOGBITS == 8 && FMM_LOGCOPY * sizeof(double2) == 128, "the byte offset below");
  const double r2 = fma(rx, rx, ry * ry);
  const int    hi = __double2hiint(r2); /* r2 >= 0 */
  const double qq = (unsigned)hi < 0x00100000u ? 0.0 : qh;
  const double m  = __hiloint2double((hi & 0x000fffff) | 0x3ff00000, __double2loint(r2));
  acc             = fma(qq, LogMantissa(m, *(const double2 *)(ltc + ((hi >> 5) & 0x7f80))), acc);
  /* 2^52 + biased exponent, exactly; minus 2^52 + 1023 */
  acce = fma(qq, __hiloint2double(0x43300000, hi >> 20) - 4503599627371519.0, acce);
}

template <int KIND, bool FAST>
__device__ __forceinline__ void TiledPair(double zx, double zy, double2 xy, double qh, double2 d, const char *ltc, double &acc, double &acce)
{
  const double rx = zx - xy.x, ry = zy - xy.y;
  if constexpr (KIND != 1) {
    if constexpr (FAST) LogTerm(rx, ry, qh, ltc, acc, acce);
    else acc += Pair<0>(rx, ry, 2.0 * qh, 0.0, 0.0, NULL);
  }
  if constexpr (KIND != 0) acc += Pair<1>(rx, ry, 0.0, d.x, d.y, NULL);
}

template <int KIND, bool FAST>
__global__ void __launch_bounds__(TL_THREADS, 4) P2PTiledKernel(PetscInt nitems, const FMMP2PItem *items, const PetscInt *nearoff, const PetscInt *nearscan, const PetscInt *entrysrc, const PetscInt *nbroff, const double *tx, const double *ty, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, double *pot, double *part, const double2 *logtab)
{
  FMMWaitPrior();
  constexpr bool LOG = FAST && KIND != 1;
  extern __shared__ double2 tlsh[]; /* 16-byte aligned */
  double2 *lts = tlsh;
  double2 *xys = lts + (LOG ? FMM_LOGTAB * FMM_LOGCOPY : 0);
  double  *qs  = (double *)(xys + TL_TILE);
  double2 *ds  = (double2 *)(qs + (KIND != 1 ? TL_TILE : 0));
  double  *red = (double *)xys; /* after the last tile */

  if constexpr (LOG) {
    for (int k = threadIdx.x; k < FMM_LOGTAB * FMM_LOGCOPY; k += TL_THREADS) lts[k] = logtab[k / FMM_LOGCOPY];
  }
  const char *ltc = (const char *)(lts + (threadIdx.x & (FMM_LOGCOPY - 1)));

  for (PetscInt b = blockIdx.x; b < nitems; b += gridDim.x) {
    const FMMP2PItem I  = items[b];
    const int        nt = (int)I.nt, nr = (nt + TL_R - 1) / TL_R, nsl = TL_THREADS / nr;
    const int        row = threadIdx.x % nr, sl = threadIdx.x / nr, i1 = row + nr;
    const bool       act = sl < nsl, two = i1 < nt;
    double           z0x = 0.0, z0y = 0.0, z1x = 0.0, z1y = 0.0, a0 = 0.0, e0 = 0.0, a1 = 0.0, e1 = 0.0;
    if (act) {
      z0x = tx[I.t0 + row];
      z0y = ty[I.t0 + row];
      z1x = two ? tx[I.t0 + i1] : z0x; /* a second copy of the first target when nt is odd: its sums are not used */
      z1y = two ? ty[I.t0 + i1] : z0y;
    }
    /* the item's sources: positions gb .. gb + ne - 1 of the concatenated
       neighbour-source lists; each thread finds the near-list entry of its
       source by binary search, so the tile fills in parallel instead of
       walking the neighbour leaves one after the other */
    const PetscInt gb = nbroff[I.leaf] + I.e0, jhi = nearoff[I.leaf + 1];
    for (PetscInt f0 = 0; f0 < I.ne; f0 += TL_TILE) {
      const int nf = (int)PetscMin((PetscInt)TL_TILE, I.ne - f0);
      for (int k = threadIdx.x; k < nf; k += TL_THREADS) {
        const PetscInt g = gb + f0 + k, jj = FMMLastLE(nearscan, I.j, jhi, g), s = entrysrc[jj] + (g - nearscan[jj]);
        xys[k] = make_double2(sx[s], sy[s]);
        if (KIND != 1) qs[k] = 0.5 * q[s];
        if (KIND != 0) ds[k] = make_double2(dx[s], dy[s]);
      }
      __syncthreads(); /* the tile (and, the first time, the table) is in place */
      if (act) {
        int k = sl;
        for (; k + nsl < nf; k += 2 * nsl) { /* two sources x two targets: four independent pairs */
          const double2 s0 = xys[k], s1 = xys[k + nsl];
          const double  q0 = KIND != 1 ? qs[k] : 0.0, q1 = KIND != 1 ? qs[k + nsl] : 0.0;
          const double2 d0 = KIND != 0 ? ds[k] : make_double2(0.0, 0.0), d1 = KIND != 0 ? ds[k + nsl] : make_double2(0.0, 0.0);
          TiledPair<KIND, FAST>(z0x, z0y, s0, q0, d0, ltc, a0, e0);
          TiledPair<KIND, FAST>(z1x, z1y, s0, q0, d0, ltc, a1, e1);
          TiledPair<KIND, FAST>(z0x, z0y, s1, q1, d1, ltc, a0, e0);
          TiledPair<KIND, FAST>(z1x, z1y, s1, q1, d1, ltc, a1, e1);
        }
        if (k < nf) {
          const double2 s0 = xys[k];
          const double  q0 = KIND != 1 ? qs[k] : 0.0;
          const double2 d0 = KIND != 0 ? ds[k] : make_double2(0.0, 0.0);
          TiledPair<KIND, FAST>(z0x, z0y, s0, q0, d0, ltc, a0, e0);
          TiledPair<KIND, FAST>(z1x, z1y, s0, q0, d0, ltc, a1, e1);
        }
      }
      __syncthreads(); /* before the tile is refilled (or reused for the slice sums) */
    }
    /* slice sums, then the sum over slices in slice order */
    red[threadIdx.x]              = LOG ? fma(e0, FMM_LN2, a0) : a0;
    red[TL_THREADS + threadIdx.x] = LOG ? fma(e1, FMM_LN2, a1) : a1;
    __syncthreads();
    if (act && sl == 0) {
      for (int h = 0; h < (two ? 2 : 1); h++) {
        const double *r = red + h * TL_THREADS + row;
        double        s = r[0];
        for (int m = 1; m < nsl; m++) s += r[m * nr];
        const int it = row + h * nr;
        if (I.part < 0) pot[I.t0 + it] += s;
        else part[I.part + it] = s;
      }
    }
    __syncthreads(); /* red is the next item's tile */
  }
}

/*
  Symmetric (targets = sources, single layer, table log): log|z_i - z_j| is
  symmetric, so each unordered pair of points is evaluated once and serves
  both sums: q_j L to target i (row) and q_i L to target j (column).  That
  halves the FP64 work per pair interaction of the tiled kernel (13 FP64
  operations per unordered pair: r^2 4, log m 5, exponent 2, the two sums 2).

  Work items: up to FMMCUDA_SYM_E consecutive entries B >= A of a leaf A's
  near list (the lists ascend, so these follow A's lower entries), one warp per
  item, taken from a global counter in the order of symitem: most entries
  first, so the last items taken are short (at 10^6 points a warp runs only
  about 8 items, and this order cut P2P from 0.48 to 0.41 ms on an H100).
  For each entry the warp evaluates the
  block A x B.  Lane (g, l), group g of G = 32/a groups of a lanes, holds rows
  l, l + a, ... of A (R of them, the same in every group) in registers and at
  step t takes column (l + t) mod nB, for the t of its group's share of
  0 .. nB-1: every (row, column) pair once.  With nB >= a the lanes of a group
  hold distinct columns at each step, so the column sums live in shared
  memory, one copy per group, and pass from lane l to lane l - 1 between steps
  (__syncwarp).

  B = A (the diagonal block, a third of the pairs on a curve) also takes
  each pair once.  Lane l's rows l + m a (m < R) form a lane block; the
  pairs of two lane blocks l and l + s (mod a) are an R x R block that lane
  l evaluates with the partner's rows as columns (their sums in the group's
  shared copy, read and written once per column).  Unit s = 1 .. a/2 - 1
  takes the partner l + s; unit 0 takes the lane's own pairs m < m' (column
  m', its sum into the row's accumulator) and in the
  same R x R steps the partner l + a/2, whose pair of equal rows m = m' goes
  to the lower lane of the two.  Every unit has R^2 pair slots and the same
  instructions: unit 0 differs only in the index of the column that its
  rows m < m' read from the block's buffer, the lane's own row m' instead
  of the partner's (selecting the operands from registers instead, six
  selects a slot, measured P2P 1.235 against 1.205 ms at 10^7 points on an
  H100).  So the groups, which
  share a warp, take a/(2G) units each and do not diverge: R^2 a/(2G) slots
  a lane instead of R^2 a/G for the rows only (the scheme before; a walk of
  the pairs (i, i + d) with column sums read and written per pair measured
  slower than that, 0.62 against 0.55 ms at 10^6 points).  The units' column
  sums are added to the rows at the end of the block.

  No global load waits on another: an item is described by one coalesced
  load of its descriptor (symitem, lane j holding word j), made an item
  ahead from a counter taken two items ahead; the points of the next block,
  and while the last block of an item runs the next item's rows and first
  block, are copied into shared memory asynchronously (cp.async).  The
  chain counter -> leaf -> near list -> leaf sizes -> points that each item
  waited on before cost about 15% of the warps' stall samples (ncu, 10^7
  points on an H100).

  Deterministic without atomics on the sums: each lane runs its steps in
  order, the groups' row sums are added by a fixed butterfly and the column
  copies in group order.  B's column sums go to B's slot for its lower entry
  A, A's row sums to A's slot for the item; L2P then adds each target's
  slots in slot order (lower entries in list order, then items) to its far
  field (L2PKernel, downward.cu).  The counter only decides which warp
  computes an item, not how.  A leaf with one item writes its rows to pot;
  one with several writes a slot per item.

  So with this kernel the near field comes first and L2P last: L2P adds the
  rows and slots to the far field as it evaluates it and writes y, the
  potentials in the caller's order.  Before, L2P wrote pot, this kernel added
  the rows of one-item leaves to it (prefetching pot), a gather pass added
  the slots and a scatter pass wrote y; now pot is written once and read
  once, and the sums are bitwise the same.  At 10^7 points on the curve
  (H100) the P2P phase went from 1.21 to 1.05 ms and L2P from 0.28 to 0.42
  ms (ncu: this kernel 1.078 -> 1.046 ms, L2P + gather + scatter 0.455 ->
  0.400 ms); a product with device vectors from 4.36-4.42 to 4.28-4.32 ms.  Adding
  the slots in this kernel instead (a counter per leaf after a
  __threadfence per item; the warp with a leaf's last write adds its slots)
  measured P2P 1.21 -> 1.48 ms at 10^7 points: 1.17 ms with the counts but
  neither the adds nor the gather pass, the adds' loads stalling the warps.
*/
#define SY_WARPS   8
#define SY_THREADS (32 * SY_WARPS)

/* per warp: three buffers of points, (x, y) then q (24 R a bytes each): two
   of columns and the rows; then the G copies of B's column sums (G R a = 32 R
   doubles) */
static __host__ __device__ size_t SymWarpBytes(int a, int R)
{
  return 72 * (size_t)R * a + 256 * (size_t)R;
}

static size_t SymShmem(int a, int R)
{
  return (size_t)FMM_LOGTAB * FMM_LOGCOPY * sizeof(double2) + (size_t)SY_WARPS * SymWarpBytes(a, R);
}

/* log r^2 from r^2 > 0 (normal), and in *ok whether r^2 is one: for r^2 = 0 or
   subnormal (coincident points) the caller drops the pair.  The caller's
   predicated sums cost less than selecting L = 0 here (two FSEL a pair; P2P
   2.96 -> 2.87 ms at 10^7 points on an H100).  The table steps are LogTerm's
   (mantissa bin, exponent as a double), written out here: through a helper
   shared with LogTerm the compiler scheduled the symmetric kernel worse (P2P
   0.65 against 0.53 ms at 10^6 points).

   log1p(t), |t| <= h = 2^-9, by a degree-4 polynomial, one FMA fewer than
   LogMantissa's: the Taylor polynomial of degree 5 with its t^5/5 term
   Chebyshev-economised on [-h, h] (t^5 -> (5/4) h^2 t^3 - (5/16) h^4 t), so
   c1 = 1 - h^4/16 = 1 - 2^-40, c3 = 1/3 + h^2/4 = 1/3 + 2^-20.  Error at most
   h^5/80 + h^6/6 = 3.6e-16 absolute (against 1e-17 for degree 5; measured
   3.65e-16 on 4001 points of [-h, h] in 40-digit arithmetic), below 1e-15 of
   log r^2 for any |log r^2| >= 0.4, and far below what -mat_fmm_eps can ask.
   P2P 2.72 -> 2.64 ms at 10^7 points, 0.50 -> 0.48 ms at 10^6 (H100).

   The FP64 constants that are not short immediates (c3, c1, 2^52 + 1023, log 2)
   come from the constant bank (SymC): as literals the compiler rebuilt them at
   every column step of the symmetric kernel (eight uniform-register moves and
   two register moves), from SymC it loads them with three ULDC.  With the
   full-warp __syncwarp of the column steps, P2P 0.182 -> 0.178 ms at 10^6
   points (H100); unchanged at 10^7. */
__constant__ double SymC[4] = {1.0 / 3 + 0x1p-20, 1.0 - 0x1p-40, 4503599627371519.0, FMM_LN2};

__device__ __forceinline__ double SymLog(double r2, const char *ltc, bool *ok)
{
  const int     hi = __double2hiint(r2);
  const double  m  = __hiloint2double((hi & 0x000fffff) | 0x3ff00000, __double2loint(r2));
  const double2 rl = *(const double2 *)(ltc + ((hi >> 5) & 0x7f80));
  const double  t  = fma(m, rl.x, -1.0);
  double        pl = fma(-0.25, t, SymC[0]);
  pl               = fma(pl, t, -0.5);
  pl               = fma(pl, t, SymC[1]);
  *ok              = (unsigned)hi >= 0x00100000u;
  return fma(__hiloint2double(0x43300000, hi >> 20) - SymC[2], SymC[3], fma(t, pl, rl.y));
}

/* the warp's asynchronous copy of n points (x, y, q) from b0 into a buffer */
__device__ __forceinline__ void SymFetch(double2 *cxy, double *cq, const double *sx, const double *sy, const double *q, PetscInt b0, int n, int lane)
{
  for (int c = lane; c < n; c += 32) {
    __pipeline_memcpy_async(&cxy[c].x, sx + b0 + c, sizeof(double));
    __pipeline_memcpy_async(&cxy[c].y, sy + b0 + c, sizeof(double));
    __pipeline_memcpy_async(&cq[c], q + b0 + c, sizeof(double));
  }
}

/* word j of a descriptor held one word per lane */
__device__ __forceinline__ PetscInt SymWord(PetscInt d, int j)
{
  return __shfl_sync(0xffffffffu, d, j);
}

/* two blocks per SM: with three (80 registers) the kernel spills and measured slower on an H100 */
template <int R>
__global__ void __launch_bounds__(SY_THREADS, 2) P2PSymmetricKernel(PetscInt nitems, int a, unsigned long long *next, const PetscInt *symitem, const double *sx, const double *sy, const double *q, double *pot, double *colpart, const double2 *logtab)
{
  FMMWaitPrior();
  extern __shared__ double2 sysh[];
  const int      lane = threadIdx.x & 31, G = 32 / a, g = lane / a, l = lane % a, nmax = R * a;
  const int      gs = 6 - __ffs(a), nu = (a * a) >> 6; /* a is 8, 16 or 32: G = 2^gs; diagonal units a group, a/(2G) */
  for (int k = threadIdx.x; k < FMM_LOGTAB * FMM_LOGCOPY; k += SY_THREADS) sysh[k] = logtab[k / FMM_LOGCOPY];
  __syncthreads();
  const char *ltc = (const char *)(sysh + (lane & (FMM_LOGCOPY - 1)));
  char       *wb  = (char *)(sysh + FMM_LOGTAB * FMM_LOGCOPY) + (threadIdx.x / 32) * SymWarpBytes(a, R);
  double     *cacc = (double *)(wb + 72 * nmax), *gacc = cacc + g * nmax;
#define SYM_BXY(u) ((double2 *)(wb + (u) * 24 * nmax)) /* buffer u (2: rows): (x, y), then q */
#define SYM_BQ(u)  ((double *)(wb + (u) * 24 * nmax + 16 * nmax))
#define SYM_TAKE() (lane == 0 ? (PetscInt)atomicAdd(next, 1ULL) : 0)

  /* the first item, its rows and first block; the counter of the item after */
  PetscInt it = SymWord(SYM_TAKE(), 0), itn = SYM_TAKE(), d = it < nitems ? symitem[it * FMMCUDA_SYM_D + lane] : 0;
  if (it >= nitems) return;
  int u = 0; /* the buffer of the next block */
  SymFetch(SYM_BXY(2), SYM_BQ(2), sx, sy, q, SymWord(d, 0), (int)SymWord(d, 1), lane);
  SymFetch(SYM_BXY(0), SYM_BQ(0), sx, sy, q, SymWord(d, 4), (int)SymWord(d, 5), lane);
  __pipeline_commit();
  for (;;) {
    /* this item: d; the next: its descriptor now, the counter of the one after */
    itn                = SymWord(itn, 0);
    const bool     more = itn < nitems;
    const PetscInt dn   = more ? symitem[itn * FMMCUDA_SYM_D + lane] : 0, itnn = more ? SYM_TAKE() : 0;
    const int      nA   = (int)SymWord(d, 1), ne = (int)SymWord(d, 2);
    double         zx[R], zy[R], qr[R], acc[R];
    __pipeline_wait_prior(0);
    __syncwarp();
    {
      const double2 *rxy = SYM_BXY(2);
      const double  *rq  = SYM_BQ(2);
#pragma unroll
      for (int m = 0; m < R; m++) { /* rows past the leaf: its first point with no charge (finite logs, no column terms) */
        const int i = l + m * a, j = i < nA ? i : 0;
        zx[m]       = rxy[j].x;
        zy[m]       = rxy[j].y;
        qr[m]       = i < nA ? 0.5 * rq[j] : 0.0;
        acc[m]      = 0.0; /* sums of q L over the columns; halved at the end */
      }
    }
    __syncwarp(); /* the row buffer is free */
    for (int e = 0; e < ne; e++, u ^= 1) {
      const int      nB = (int)SymWord(d, 5 + 3 * e);
      const PetscInt ws = SymWord(d, 6 + 3 * e);
      if (e + 1 < ne) { /* the next block's columns load while this one runs */
        SymFetch(SYM_BXY(u ^ 1), SYM_BQ(u ^ 1), sx, sy, q, SymWord(d, 7 + 3 * e), (int)SymWord(d, 8 + 3 * e), lane);
        __pipeline_commit();
        __pipeline_wait_prior(1);
      } else if (more) { /* and at the last, the next item's rows and first block */
        SymFetch(SYM_BXY(2), SYM_BQ(2), sx, sy, q, SymWord(dn, 0), (int)SymWord(dn, 1), lane);
        SymFetch(SYM_BXY(u ^ 1), SYM_BQ(u ^ 1), sx, sy, q, SymWord(dn, 4), (int)SymWord(dn, 5), lane);
        __pipeline_commit();
        __pipeline_wait_prior(1);
      } else __pipeline_wait_prior(0);
      for (int c = lane; c < 32 * R; c += 32) cacc[c] = 0.0;
      __syncwarp();
      const double2 *cxy = SYM_BXY(u);
      const double  *cq  = SYM_BQ(u);
      if (ws < 0) { /* B = A: each pair once, by units of lane blocks (see above) */
        const int h = a >> 1;
        for (int k = g * nu; k < (g + 1) * nu; k++) {
          const bool u0 = k == 0;
          const int  p  = (l + (u0 ? h : k)) & (a - 1); /* the partner lane */
          const bool eq = !u0 || l < h;                 /* rows m = m' with the partner */
#pragma unroll
          for (int mp = 0; mp < R; mp++) { /* column: the partner's row mp (rows m < mp in unit 0: the lane's own) */
            const int     c = p + mp * a, cc = c < nA ? c : 0, o = (u0 ? l : p) + mp * a, oc = o < nA ? o : 0;
            const double2 pt = cxy[cc], po = cxy[oc]; /* po: the column of rows m < mp, in unit 0 the lane's own row mp */
            const double  qc = c < nA ? cq[cc] : 0.0, qo = o < nA ? cq[oc] : 0.0;
            double        cs = 0.0, cw = 0.0; /* column sums from rows m >= mp, m < mp */
#pragma unroll
            for (int m = 0; m < R; m++) {
              const double px = m < mp ? po.x : pt.x, py = m < mp ? po.y : pt.y, pq = m < mp ? qo : qc;
              bool         ok;
              const double rx = zx[m] - px, ry = zy[m] - py, L = SymLog(fma(rx, rx, ry * ry), ltc, &ok);
              if (ok && (m != mp || eq)) {
                acc[m] = fma(pq, L, acc[m]);
                if (m < mp) cw = fma(qr[m], L, cw);
                else cs = fma(qr[m], L, cs);
              }
            }
            acc[mp] = fma(u0 ? 2.0 : 0.0, cw, acc[mp]); /* own column: its sum is row mp's (q L, not q/2 L) */
            gacc[c] += cs + (u0 ? 0.0 : cw);
          }
          __syncwarp(); /* the next unit's partner is another lane; after the last, the sums are in place */
        }
#pragma unroll
        for (int m = 0; m < R; m++) acc[m] = fma(2.0, gacc[l + m * a], acc[m]);
      } else {
        /* every group takes nT steps, so the whole warp meets each __syncwarp
           (with a group mask the compiler checked for divergence at every
           step); a group with one column fewer adds nothing at its last step */
        const int k0 = (g * nB) >> gs, k1 = ((g + 1) * nB) >> gs, nT = (nB + G - 1) >> gs;
        int       c  = l + k0 - (l + k0 >= nB ? nB : 0);
        for (int t = 0; t < nT; t++) {
          const bool    live = k0 + t < k1;
          const double2 p    = cxy[c];
          const double  qc   = live ? cq[c] : 0.0;
          double        cs   = gacc[c];
#pragma unroll
          for (int m = 0; m < R; m++) {
            bool         ok;
            const double rx = zx[m] - p.x, ry = zy[m] - p.y, L = SymLog(fma(rx, rx, ry * ry), ltc, &ok);
            if (ok) {
              acc[m] = fma(qc, L, acc[m]);
              cs     = fma(qr[m], L, cs);
            }
          }
          if (live) gacc[c] = cs;
          __syncwarp(); /* lane l - 1 takes column c next */
          c = c + 1 == nB ? 0 : c + 1;
        }
        __syncwarp();
        double *out = colpart + ws;
        for (int c = lane; c < nB; c += 32) {
          double v = cacc[c];
          for (int h = 1; h < G; h++) v += cacc[h * nmax + c];
          out[c] = v;
        }
      }
      __syncwarp(); /* this buffer is refilled two blocks on, the column sums next block */
    }
    /* the groups' row sums by a fixed butterfly (every lane gets the same sum),
       to the item's slot or, for a leaf's only item, to pot */
    const PetscInt ro   = SymWord(d, 3);
    double        *rout = ro >= 0 ? colpart + ro : pot - ro - 1;
#pragma unroll
    for (int m = 0; m < R; m++) {
      const int i = l + m * a;
      double    s = acc[m];
      for (int o = a; o < 32; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (g == 0 && i < nA) rout[i] = 0.5 * s;
    }
    if (!more) break;
    d   = dn;
    itn = itnn;
  }
#undef SYM_BXY
#undef SYM_BQ
#undef SYM_TAKE
}

/* slot lists longer than FMMCUDA_SYM_GMAX: one block per chunk of FMMCUDA_SYM_GCHUNK
   slots; thread (slice, point) sums every ns-th slot of its slice, the slices are
   then added in order.  The last block of a leaf to finish (a counter per leaf)
   adds the leaf's chunk sums the same way, in chunk order, into its first chunk's
   row, so L2P reads one value for such a target instead of adding its
   chunk sums one after the other (240 at 10^7 points on the curve).  Which
   block is last does not change the result. */
__global__ void __launch_bounds__(256) P2PChunkSumKernel(PetscInt nl, PetscInt nmax, const PetscInt *sleaf, const PetscInt *symleaf, const PetscInt *chleaf, const double *colpart, double *chsum, unsigned *chdone)
{
  FMMWaitPrior();
  __shared__ double red[256];
  __shared__ bool   last;
  const FMMSymLeaf  S(symleaf, nl);
  const PetscInt    h = blockIdx.x, B = chleaf[h], h0 = S.ch[B], nch = S.ch[B + 1] - h0, k0 = (h - h0) * FMMCUDA_SYM_GCHUNK, k1 = PetscMin(k0 + FMMCUDA_SYM_GCHUNK, S.nsl[B]);
  const int         nB = (int)(sleaf[B + 1] - sleaf[B]), nsl = 256 / nB, o = threadIdx.x % nB, sl = threadIdx.x / nB;
  double            s = 0.0;
  if (sl < nsl) {
    const double *v = colpart + S.slot[B] + o;
#pragma unroll 8
    for (PetscInt k = k0 + sl; k < k1; k += nsl) s += v[k * nB];
  }
  red[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x < nB) {
    for (int j = 1; j < nsl; j++) s += red[j * nB + o];
    chsum[h * nmax + o] = s;
  }
  __threadfence(); /* the chunk sum is seen by every block before the count */
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&chdone[h0], 1u) == (unsigned)(nch - 1);
  __syncthreads();
  if (!last) return;
  s = 0.0; /* the leaf's sum; the other blocks' chunk sums read from L2 */
  if (sl < nsl)
    for (PetscInt j = sl; j < nch; j += nsl) s += __ldcg(&chsum[(h0 + j) * nmax + o]);
  red[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x < nB) {
    for (int j = 1; j < nsl; j++) s += red[j * nB + o];
    chsum[h0 * nmax + o] = s;
  }
  if (threadIdx.x == 0) chdone[h0] = 0; /* for the next product */
}

template <int R>
static PetscErrorCode LaunchSymmetric(FMM_CUDA *c, const FMMPlan *P)
{
  const void  *kern  = (const void *)P2PSymmetricKernel<R>;
  const size_t shmem = SymShmem((int)c->syma, R);

  PetscFunctionBegin;
  if (!c->symblocks) { /* once per plan: as many blocks as fit at once, at most one warp per item */
    PetscCall(FMMCUDAResidentBlocks(c, kern, SY_THREADS, shmem, &c->symblocks));
    c->symblocks = PetscMax(1, PetscMin((c->nsymitems + SY_WARPS - 1) / SY_WARPS, c->symblocks));
  }
  FMMLaunch(P2PSymmetricKernel<R>, (unsigned)c->symblocks, SY_THREADS, shmem, c->stream, c->nsymitems, (int)c->syma, c->symnext, c->symitem, c->sx, c->sy, c->q, c->pot, c->colpart, c->logtab);
  FMMCheckLaunch();
  if (c->nsymch) FMMLaunch(P2PChunkSumKernel, (unsigned)c->nsymch, 256, 0, c->stream, P->nleaves, P->maxleafsrc, c->sleaf, c->symleaf, c->symchleaf, c->colpart, c->chsum, c->symchdone);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

static PetscErrorCode P2PSymmetric(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  switch (c->symr) {
  case 1: PetscCall(LaunchSymmetric<1>(c, P)); break;
  case 2: PetscCall(LaunchSymmetric<2>(c, P)); break;
  case 3: PetscCall(LaunchSymmetric<3>(c, P)); break;
  case 4: PetscCall(LaunchSymmetric<4>(c, P)); break;
  case 5: PetscCall(LaunchSymmetric<5>(c, P)); break;
  case 6: PetscCall(LaunchSymmetric<6>(c, P)); break;
  case 7: PetscCall(LaunchSymmetric<7>(c, P)); break;
  case 8: PetscCall(LaunchSymmetric<8>(c, P)); break;
  default: SETERRQ(PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: %" PetscInt_FMT " rows per lane in the symmetric P2P, expected 1 to 8", c->symr);
  }
  PetscFunctionReturn(0);
}

/* the partials of split lists, in item order */
__global__ void P2PSumKernel(PetscInt M, const PetscInt *tleafof, const PetscInt *tleaf, const PetscInt *leafnsc, const PetscInt *leafpart, const double *part, double *pot)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M) return;
  const PetscInt b = tleafof[i], nsc = leafnsc[b];
  if (nsc < 2) return;
  const PetscInt nt = tleaf[b + 1] - tleaf[b], o = leafpart[b] + i - tleaf[b];
  double         s  = part[o];
  for (PetscInt k = 1; k < nsc; k++) s += part[o + k * nt];
  pot[i] += s;
}

static PetscErrorCode P2PSum(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  if (!c->p2psplit) PetscFunctionReturn(0);
  FMMLaunch(P2PSumKernel, FMMCUDABlocks(P->M, 256), 256, 0, c->stream, P->M, c->tleafof, c->tleaf, c->leafnsc, c->leafpart, c->p2ppart, c->pot);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

template <int KIND, bool FAST>
static PetscErrorCode LaunchTiled(FMM_CUDA *c)
{
  const void  *kern  = (const void *)P2PTiledKernel<KIND, FAST>;
  const size_t shmem = TiledShmem(KIND, FAST);

  PetscFunctionBegin;
  if (!c->tlblocks) { /* once per plan: as many blocks as fit at once, at most one per item */
    PetscCall(FMMCUDAResidentBlocks(c, kern, TL_THREADS, shmem, &c->tlblocks));
    c->tlblocks = PetscMin(c->nitems, c->tlblocks);
  }
  FMMLaunch(P2PTiledKernel<KIND, FAST>, (unsigned)c->tlblocks, TL_THREADS, shmem, c->stream, c->nitems, c->items, c->nearoff, c->nearscan, c->entrysrc, c->nbroff, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, c->pot, c->p2ppart, c->logtab);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

PetscErrorCode FMMCUDAP2PTiled(FMM_CUDA *c, const FMMPlan *P)
{
  const bool fast = c->logtab != NULL;

  PetscFunctionBegin;
  if (c->syma) PetscCall(P2PSymmetric(c, P));
  else if (c->nitems) {
    if (c->kind == 0) PetscCall(fast ? LaunchTiled<0, true>(c) : LaunchTiled<0, false>(c));
    else if (c->kind == 1) PetscCall(LaunchTiled<1, false>(c));
    else PetscCall(fast ? LaunchTiled<2, true>(c) : LaunchTiled<2, false>(c));
    PetscCall(P2PSum(c, P));
  }
  PetscFunctionReturn(0);
}

/* Indexing (data-replication seed): per leaf the compact list of the global
   indices of its neighbour sources, read from the arrays in global order */
template <int KIND>
__global__ void __launch_bounds__(P2P_THREADS) P2PIndexingKernel(const FMMP2PItem *items, const PetscInt *nbroff, const PetscInt *nbr, const double *tx, const double *ty, const double *gxy, const double *gq, const double *gdx, const double *gdy, double *pot, double *part, const double2 *logtab)
{
  FMMWaitPrior();
  __shared__ double  red[P2P_THREADS];
  __shared__ double2 lts[FMM_LOGTAB];
  const double2     *lt = LoadLogTable(KIND == 1 ? NULL : logtab, lts);
  const FMMP2PItem  I = items[blockIdx.x];
  const Slices      S((int)I.nt);
  double            acc = 0.0;
  if (S.act) {
    const double    zx = tx[I.t0 + S.it], zy = ty[I.t0 + S.it];
    const PetscInt *lst = nbr + nbroff[I.leaf] + I.e0;
    for (PetscInt e = S.sl; e < I.ne; e += S.nsl) {
      const PetscInt j = lst[e];
      acc += Pair<KIND>(zx - gxy[2 * j], zy - gxy[2 * j + 1], KIND != 1 ? gq[j] : 0.0, KIND != 0 ? gdx[j] : 0.0, KIND != 0 ? gdy[j] : 0.0, lt);
    }
  }
  P2PFinish(I, S, acc, red, pot, part);
}

PetscErrorCode FMMCUDAP2PIndexing(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  if (!c->nitems) PetscFunctionReturn(0);
#define LAUNCH(K) FMMLaunch(P2PIndexingKernel<K>, (unsigned)c->nitems, P2P_THREADS, 0, c->stream, c->items, c->nbroff, c->nbr, c->tx, c->ty, c->gxy, c->gq, c->gdx, c->gdy, c->pot, c->p2ppart, c->logtab)
  if (c->kind == 0) LAUNCH(0);
  else if (c->kind == 1) LAUNCH(1);
  else LAUNCH(2);
#undef LAUNCH
  FMMCheckLaunch();
  PetscCall(P2PSum(c, P));
  PetscFunctionReturn(0);
}

/* Repetition (data-replication seed): per target the record
   [x, y, then per neighbour source x, y, (q), (dx, dy)], S = 2 + (q) + 2 (d) reals per source */
template <int KIND>
__global__ void RepBuildKernel(PetscInt b0, const PetscInt *tleaf, const PetscInt *nbroff, const PetscInt *nbrt, const PetscInt64 *recoff, const double *tx, const double *ty, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, double *rec)
{
  FMMWaitPrior();
  constexpr int    S = KIND == 2 ? 5 : (KIND == 1 ? 4 : 3);
  const PetscInt   b = b0 + blockIdx.x, t0 = tleaf[b], nt = tleaf[b + 1] - t0, e0 = nbroff[b], ns = nbroff[b + 1] - e0;
  const PetscInt64 len = 2 + (PetscInt64)S * ns;
  double          *r   = rec + recoff[b];
  for (PetscInt i = 0; i < nt; i++, r += len) {
    if (threadIdx.x == 0) {
      r[0] = tx[t0 + i];
      r[1] = ty[t0 + i];
    }
    for (PetscInt e = threadIdx.x; e < ns; e += blockDim.x) {
      const PetscInt k = nbrt[e0 + e];
      double        *d = r + 2 + S * e;
      d[0]             = sx[k];
      d[1]             = sy[k];
      if (KIND != 1) d[2] = q[k];
      if (KIND != 0) {
        d[S - 2] = dx[k];
        d[S - 1] = dy[k];
      }
    }
  }
}

/* one block per item: each target's threads read a stretch of its contiguous record */
template <int KIND>
__global__ void __launch_bounds__(P2P_THREADS) RepEvalKernel(PetscInt i0, const FMMP2PItem *items, const PetscInt *tleaf, const PetscInt *nbroff, const PetscInt64 *recoff, const double *rec, double *pot, double *part, const double2 *logtab)
{
  FMMWaitPrior();
  constexpr int      S = KIND == 2 ? 5 : (KIND == 1 ? 4 : 3);
  __shared__ double  red[P2P_THREADS];
  __shared__ double2 lts[FMM_LOGTAB];
  const double2     *lt = LoadLogTable(KIND == 1 ? NULL : logtab, lts);
  const FMMP2PItem  I = items[i0 + blockIdx.x];
  const Slices      Sl((int)I.nt);
  double            acc = 0.0;
  if (Sl.act) {
    const PetscInt b = I.leaf, ns = nbroff[b + 1] - nbroff[b];
    const double  *r = rec + recoff[b] + (I.t0 + Sl.it - tleaf[b]) * (2 + (PetscInt64)S * ns);
    const double   zx = r[0], zy = r[1];
    for (PetscInt e = I.e0 + Sl.sl; e < I.e0 + I.ne; e += Sl.nsl) {
      const double *d = r + 2 + S * e;
      acc += Pair<KIND>(zx - d[0], zy - d[1], KIND != 1 ? d[2] : 0.0, KIND != 0 ? d[S - 2] : 0.0, KIND != 0 ? d[S - 1] : 0.0, lt);
    }
  }
  P2PFinish(I, Sl, acc, red, pot, part);
}

PetscErrorCode FMMCUDAP2PRepetition(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  if (!c->nitems) PetscFunctionReturn(0);
  for (PetscInt k = 0; k < c->nrepchunks; k++) {
    const PetscInt b0 = c->repleaf[k], b1 = c->repleaf[k + 1], it0 = c->itemstart[b0], it1 = c->itemstart[b1];
    if (it1 == it0) continue;
#define LAUNCH(K) \
  do { \
    FMMLaunch(RepBuildKernel<K>, (unsigned)(b1 - b0), 128, 0, c->stream, b0, c->tleaf, c->nbroff, c->nbrt, c->recoff, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, c->rec); \
    FMMCheckLaunch(); \
    FMMLaunch(RepEvalKernel<K>, (unsigned)(it1 - it0), P2P_THREADS, 0, c->stream, it0, c->items, c->tleaf, c->nbroff, c->recoff, c->rec, c->pot, c->p2ppart, c->logtab); \
    FMMCheckLaunch(); \
  } while (0)
    if (c->kind == 0) LAUNCH(0);
    else if (c->kind == 1) LAUNCH(1);
    else LAUNCH(2);
#undef LAUNCH
  }
  PetscCall(P2PSum(c, P));
  PetscFunctionReturn(0);
}

/*
  Direct: all pairs, sources staged through shared memory in tiles of the
  block size, every target summing the sources in tree order.  With few
  targets the sources are cut into dslices slices (blockIdx.y) whose partial
  sums are then added in slice order.
*/
#define DIRECT_THREADS 256

template <int KIND>
__global__ void __launch_bounds__(DIRECT_THREADS) DirectKernel(PetscInt M, PetscInt N, PetscInt slicelen, const double *tx, const double *ty, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, double *out, const double2 *logtab)
{
  FMMWaitPrior();
  __shared__ double  xs[DIRECT_THREADS], ys[DIRECT_THREADS], qs[DIRECT_THREADS], dxs[DIRECT_THREADS], dys[DIRECT_THREADS];
  __shared__ double2 lts[FMM_LOGTAB];
  const double2     *lt = LoadLogTable(KIND == 1 ? NULL : logtab, lts);
  const PetscInt i  = (PetscInt)blockIdx.x * DIRECT_THREADS + threadIdx.x;
  const PetscInt k0 = (PetscInt)blockIdx.y * slicelen, k1 = k0 + slicelen < N ? k0 + slicelen : N;
  const double   zx = i < M ? tx[i] : 0.0, zy = i < M ? ty[i] : 0.0;
  double         acc = 0.0;
  for (PetscInt kb = k0; kb < k1; kb += DIRECT_THREADS) {
    const int nk = k1 - kb < DIRECT_THREADS ? (int)(k1 - kb) : DIRECT_THREADS;
    if (threadIdx.x < nk) {
      xs[threadIdx.x] = sx[kb + threadIdx.x];
      ys[threadIdx.x] = sy[kb + threadIdx.x];
      if (KIND != 1) qs[threadIdx.x] = q[kb + threadIdx.x];
      if (KIND != 0) {
        dxs[threadIdx.x] = dx[kb + threadIdx.x];
        dys[threadIdx.x] = dy[kb + threadIdx.x];
      }
    }
    __syncthreads();
    for (int k = 0; k < nk; k++) acc += Pair<KIND>(zx - xs[k], zy - ys[k], KIND != 1 ? qs[k] : 0.0, KIND != 0 ? dxs[k] : 0.0, KIND != 0 ? dys[k] : 0.0, lt);
    __syncthreads();
  }
  if (i < M) out[(PetscInt64)blockIdx.y * M + i] = acc;
}

__global__ void DirectSumKernel(PetscInt M, PetscInt nsl, const double *part, double *pot)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M) return;
  double acc = part[i];
  for (PetscInt s = 1; s < nsl; s++) acc += part[(PetscInt64)s * M + i];
  pot[i] = acc;
}

PetscErrorCode FMMCUDADirect(FMM_CUDA *c, const FMMPlan *P)
{
  const PetscInt nsl = c->dslices, slicelen = nsl > 1 ? (P->N + nsl - 1) / nsl : PetscMax(P->N, 1);
  double        *out = nsl > 1 ? c->dpart : c->pot;
  dim3           grid(FMMCUDABlocks(P->M, DIRECT_THREADS), (unsigned)nsl);

  PetscFunctionBegin;
  if (!P->M) PetscFunctionReturn(0);
#define LAUNCH(K) FMMLaunch(DirectKernel<K>, grid, DIRECT_THREADS, 0, c->stream, P->M, P->N, slicelen, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, out, c->logtab)
  if (c->kind == 0) LAUNCH(0);
  else if (c->kind == 1) LAUNCH(1);
  else LAUNCH(2);
#undef LAUNCH
  FMMCheckLaunch();
  if (nsl > 1) {
    FMMLaunch(DirectSumKernel, FMMCUDABlocks(P->M, 256), 256, 0, c->stream, P->M, nsl, c->dpart, c->pot);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}
