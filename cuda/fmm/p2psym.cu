/*
  The symmetric P2P of the tiled layout on the GPU (FMMCUDAP2PTiled, p2p.cu,
  runs it where the setup planned it: tree/symplan.cuh): each unordered pair
  of points once, for both of its sums.
*/
#include "fmmcuda.h"
#include <cuda_pipeline.h>

/*
  Symmetric (targets = sources, single layer, table log): log|z_i - z_j| is
  symmetric, so each unordered pair of points is evaluated once and serves
  both sums: q_j L to target i (row) and q_i L to target j (column).  That
  halves the FP64 work per pair interaction of the tiled kernel (13 FP64
  operations per unordered pair: r^2 4, log m 5, exponent 2, the two sums 2).

  Work items: up to FMMCUDA_SYM_E consecutive entries B >= A of a leaf A's
  near list (the lists ascend, so these follow A's lower entries), one warp per
  item, taken from a global counter in the order of symitem: most entries
  first, so the last items taken are short (a warp runs only a few items,
  so a long one last would leave the others idle).
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
  selects a slot, measured slower).  So the groups, which
  share a warp, take a/(2G) units each and do not diverge: R^2 a/(2G) slots
  a lane instead of R^2 a/G for the rows only (the scheme before; a walk of
  the pairs (i, i + d) with column sums read and written per pair measured
  slower than that).  The units' column
  sums are added to the rows at the end of the block.

  No global load waits on another: an item is described by one coalesced
  load of its descriptor (symitem, lane j holding word j), made an item
  ahead from a counter taken two items ahead; the points of the next block,
  and while the last block of an item runs the next item's rows and first
  block, are copied into shared memory asynchronously (cp.async).  The
  chain counter -> leaf -> near list -> leaf sizes -> points that each item
  waited on before was a large part of the warps' stalls.

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
  once, two passes fewer, and the sums are bitwise the same.  Adding the
  slots in this kernel instead (a counter per leaf after a __threadfence per
  item; the warp with a leaf's last write adds its slots) measured slower,
  the adds' loads stalling the warps.
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
   predicated sums cost less than selecting L = 0 here (two FSEL a pair).
   The table steps are LogTerm's (mantissa bin, exponent as a double),
   written out here: through a helper shared with LogTerm the compiler
   scheduled the symmetric kernel worse.

   log1p(t), |t| <= h = 2^-9, by a degree-4 polynomial, one FMA fewer than
   LogMantissa's: the Taylor polynomial of degree 5 with its t^5/5 term
   Chebyshev-economised on [-h, h] (t^5 -> (5/4) h^2 t^3 - (5/16) h^4 t), so
   c1 = 1 - h^4/16 = 1 - 2^-40, c3 = 1/3 + h^2/4 = 1/3 + 2^-20.  Error at most
   h^5/80 + h^6/6 = 3.6e-16 absolute (against 1e-17 for degree 5; measured
   3.65e-16 on 4001 points of [-h, h] in 40-digit arithmetic), below 1e-15 of
   log r^2 for any |log r^2| >= 0.4, and far below what -mat_fmm_eps can ask;
   one FMA fewer a pair in an FP64-bound kernel.

   The FP64 constants that are not short immediates (c3, c1, 2^52 + 1023, log 2)
   come from the constant bank (SymC): as literals the compiler rebuilt them at
   every column step of the symmetric kernel (eight uniform-register moves and
   two register moves), from SymC it loads them with three ULDC. */
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

/* two blocks per SM: with three (80 registers) the kernel spills and measured slower */
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

PetscErrorCode FMMCUDAP2PSymmetric(FMM_CUDA *c, const FMMPlan *P)
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
