/*
  The near field (P2P) on the GPU in the three layouts of -mat_fmm_layout, and
  the exact direct sum; the tiled layout's symmetric kernel is in p2psym.cu.  The pair kernel is FMMPairKernel (expansions.h),
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
  clock on sm_90): a single-layer pair costs 13 FP64 operations (r: 4,
  log m: 6, the two accumulations and the exponent: 3), against about 22 in the
  per-item kernel this replaces, which puts the ceiling at 64/13 = 4.9 pairs
  per SM and clock.  Everything else
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
    leaves, one dependent load after the other, cost a noticeable part of the
    P2P time).
  Each thread sums its slice of the sources in order and the slices are added in
  slice order: the result does not depend on scheduling.
*/
#define TL_THREADS  256
#define TL_TILE     512
#define TL_R        2
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
  if (c->syma) PetscCall(FMMCUDAP2PSymmetric(c, P));
  else if (c->nitems) {
    if (c->kind == 0) PetscCall(fast ? LaunchTiled<0, true>(c) : LaunchTiled<0, false>(c));
    else if (c->kind == 1) PetscCall(LaunchTiled<1, false>(c));
    else PetscCall(fast ? LaunchTiled<2, true>(c) : LaunchTiled<2, false>(c));
    PetscCall(P2PSum(c, P));
  }
  PetscFunctionReturn(0);
}

/* Indexing (the data-replication study's compact lists): per leaf the compact list of the global
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

/* Repetition (the data-replication study's per-target copies): per target the record
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
