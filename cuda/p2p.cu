/*
  The near field (P2P) on the GPU in the three layouts of -mat_fmm_layout, and
  the exact direct sum.  The pair kernel is FMMPairKernel (fmmexpansions.h),
  specialised at compile time to the terms present (KIND 0: single layer,
  1: double layer, 2: both) and written without branches; the zero-distance
  pair is excluded.

  Each target's sum is formed by a fixed set of threads in a fixed order and
  written once, so results are reproducible bitwise.
*/
#include "fmmcuda.h"
#include "fmmexpansions.h"

/* log for the near field: x = 2^e m, m in [1,2); with c_i = 1 + i/128 <= m and
   r_i = 1/c_i, log x = e log 2 - log r_i + log1p(m r_i - 1), |m r_i - 1| < 1/128,
   log1p by its degree-9 Taylor polynomial (truncation < 2e-20).  About 12
   FP64 operations instead of about 30 for the libm log; within 2 ulp.
   lt[i] = (r_i, -log r_i), in shared memory.  x = 1 gives 0 exactly. */
#define FMM_LOGTAB 128
__device__ __forceinline__ double FastLog(double x, const double2 *lt)
{
  const long long bits = __double_as_longlong(x);
  const int       ex   = (int)(bits >> 52); /* x > 0 */
  if (ex == 0) return log(x);               /* subnormal: not met in practice */
  const double2 rl = lt[(bits >> 45) & (FMM_LOGTAB - 1)];
  const double  m  = __longlong_as_double((bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
  const double  t  = fma(m, rl.x, -1.0), e = (double)(ex - 1023);
  double        pl = 1.0 / 9;
  pl = fma(pl, t, -1.0 / 8);
  pl = fma(pl, t, 1.0 / 7);
  pl = fma(pl, t, -1.0 / 6);
  pl = fma(pl, t, 1.0 / 5);
  pl = fma(pl, t, -1.0 / 4);
  pl = fma(pl, t, 1.0 / 3);
  pl = fma(pl, t, -0.5);
  pl = fma(pl, t, 1.0);
  /* log 2 split so that e log2_hi is exact (fdlibm) */
  return fma(e, 6.93147180369123816490e-01, rl.y) + fma(e, 1.90821492927058770002e-10, t * pl);
}

PetscErrorCode FMMCUDALogTable(FMM_CUDA *c)
{
  double2 h[FMM_LOGTAB];

  PetscFunctionBegin;
  for (int i = 0; i < FMM_LOGTAB; i++) {
    h[i].x = 1.0 / (1.0 + i / (double)FMM_LOGTAB);
    h[i].y = -log(h[i].x);
  }
  h[0].x = 1.0;
  h[0].y = 0.0;
  PetscCall(FMMCUDAMalloc((void **)&c->logtab, sizeof(h), "the log table"));
  FMMCallCUDA(cudaMemcpy(c->logtab, h, sizeof(h), cudaMemcpyHostToDevice));
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

/* Branch-free: the zero-distance pair evaluates at r2 = 1, where log is 0 and the
   dipole numerator is 0.  A data-dependent branch here splits warps: every lane
   meets its own source at a different step. */
template <int KIND>
__device__ __forceinline__ double Pair(double rx, double ry, double q, double dx, double dy, const double2 *lt)
{
  const double r2 = rx * rx + ry * ry, rr = r2 > 0.0 ? r2 : 1.0;
  if constexpr (KIND == 1) return (dx * rx + dy * ry) * __drcp_rn(rr);
  else {
    const double lg = lt ? FastLog(rr, lt) : log(rr);
    if constexpr (KIND == 0) return 0.5 * q * lg;
    else return 0.5 * q * lg + (dx * rx + dy * ry) * __drcp_rn(rr);
  }
}

#define P2P_THREADS FMMCUDA_P2P_T
#define P2P_TILE    512

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

/* Tiled (Goude & Engblom, Alg. 3.7): one block per item; its sources, contiguous
   ranges of consecutive neighbour leaves in tree order, are staged in shared memory in tiles */
template <int KIND>
__global__ void __launch_bounds__(P2P_THREADS) P2PTiledKernel(const FMMP2PItem *items, const PetscInt *sleaf, const PetscInt *near, const double *tx, const double *ty, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, double *pot, double *part, const double2 *logtab)
{
  __shared__ double  xs[P2P_TILE], ys[P2P_TILE], qs[KIND == 1 ? 1 : P2P_TILE], dxs[KIND == 0 ? 1 : P2P_TILE], dys[KIND == 0 ? 1 : P2P_TILE], red[P2P_THREADS];
  __shared__ double2 lts[FMM_LOGTAB];
  const double2     *lt = LoadLogTable(KIND == 1 ? NULL : logtab, lts);
  const FMMP2PItem   I  = items[blockIdx.x];
  const Slices     S((int)I.nt);
  double           zx = 0.0, zy = 0.0, acc = 0.0;
  if (S.act) {
    zx = tx[I.t0 + S.it];
    zy = ty[I.t0 + S.it];
  }
  PetscInt j = I.j, pos = I.pos, left = I.ne;
  while (left > 0) {
    int nf = 0;
    while (left > 0 && nf < P2P_TILE) { /* fill the tile from consecutive neighbour leaves */
      const PetscInt end  = sleaf[near[j] + 1];
      const int      take = (int)PetscMin(PetscMin(end - pos, (PetscInt)(P2P_TILE - nf)), left);
      for (int k = threadIdx.x; k < take; k += P2P_THREADS) {
        xs[nf + k] = sx[pos + k];
        ys[nf + k] = sy[pos + k];
        if (KIND != 1) qs[nf + k] = q[pos + k];
        if (KIND != 0) {
          dxs[nf + k] = dx[pos + k];
          dys[nf + k] = dy[pos + k];
        }
      }
      nf += take;
      pos += take;
      left -= take;
      if (pos == end && left > 0) pos = sleaf[near[++j]];
    }
    __syncthreads();
    if (S.act)
      for (int k = S.sl; k < nf; k += S.nsl) acc += Pair<KIND>(zx - xs[k], zy - ys[k], KIND != 1 ? qs[k] : 0.0, KIND != 0 ? dxs[k] : 0.0, KIND != 0 ? dys[k] : 0.0, lt);
    __syncthreads();
  }
  P2PFinish(I, S, acc, red, pot, part);
}

/* the partials of split lists, in item order */
__global__ void P2PSumKernel(PetscInt M, const PetscInt *tleafof, const PetscInt *tleaf, const PetscInt *leafnsc, const PetscInt *leafpart, const double *part, double *pot)
{
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
  P2PSumKernel<<<FMMCUDABlocks(P->M, 256), 256, 0, c->stream>>>(P->M, c->tleafof, c->tleaf, c->leafnsc, c->leafpart, c->p2ppart, c->pot);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

PetscErrorCode FMMCUDAP2PTiled(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  if (!c->nitems) PetscFunctionReturn(0);
#define LAUNCH(K) P2PTiledKernel<K><<<(unsigned)c->nitems, P2P_THREADS, 0, c->stream>>>(c->items, c->sleaf, c->near, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, c->pot, c->p2ppart, c->logtab)
  if (c->kind == 0) LAUNCH(0);
  else if (c->kind == 1) LAUNCH(1);
  else LAUNCH(2);
#undef LAUNCH
  FMMCheckLaunch();
  PetscCall(P2PSum(c, P));
  PetscFunctionReturn(0);
}

/* Indexing (data-replication seed): per leaf the compact list of the global
   indices of its neighbour sources, read from the arrays in global order */
template <int KIND>
__global__ void __launch_bounds__(P2P_THREADS) P2PIndexingKernel(const FMMP2PItem *items, const PetscInt *nbroff, const PetscInt *nbr, const double *tx, const double *ty, const double *gxy, const double *gq, const double *gdx, const double *gdy, double *pot, double *part, const double2 *logtab)
{
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
#define LAUNCH(K) P2PIndexingKernel<K><<<(unsigned)c->nitems, P2P_THREADS, 0, c->stream>>>(c->items, c->nbroff, c->nbr, c->tx, c->ty, c->gxy, c->gq, c->gdx, c->gdy, c->pot, c->p2ppart, c->logtab)
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
    RepBuildKernel<K><<<(unsigned)(b1 - b0), 128, 0, c->stream>>>(b0, c->tleaf, c->nbroff, c->nbrt, c->recoff, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, c->rec); \
    FMMCheckLaunch(); \
    RepEvalKernel<K><<<(unsigned)(it1 - it0), P2P_THREADS, 0, c->stream>>>(it0, c->items, c->tleaf, c->nbroff, c->recoff, c->rec, c->pot, c->p2ppart, c->logtab); \
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
#define LAUNCH(K) DirectKernel<K><<<grid, DIRECT_THREADS, 0, c->stream>>>(P->M, P->N, slicelen, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, out, c->logtab)
  if (c->kind == 0) LAUNCH(0);
  else if (c->kind == 1) LAUNCH(1);
  else LAUNCH(2);
#undef LAUNCH
  FMMCheckLaunch();
  if (nsl > 1) {
    DirectSumKernel<<<FMMCUDABlocks(P->M, 256), 256, 0, c->stream>>>(P->M, nsl, c->dpart, c->pot);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}
