/*
  The upward pass on the GPU: strengths of this product, P2M at the leaves,
  M2M level by level.

  P2M: for p <= FMMCUDA_PFAST four threads per leaf call FMMP2MAdd
  (expansions.h) at a compile-time order PP >= p (p rounded up to even), so
  the expansion stays in registers (coefficients k <= p are those of order p),
  and add their four expansions in a fixed order.  Higher orders: a warp per leaf, a lane
  per source expanding into its own shared-memory row, rows then summed
  column by column in source order.  The 1/k of the terms come from the
  constant bank (cP2MInv, fixed at compile time) and the leaf's 1/s is
  taken once: a division per source and term made P2M cost more than the
  near field.  Without
  dipoles (single layer) their terms are compiled out.
  M2M: a thread per (parent box, coefficient l), so a level has (p+1) times
  more threads than boxes and the upper levels do not serialise.  The sum
  over k of FMMM2M is evaluated by Horner's rule in u; children in order 0..3.
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"

#define P2M_WARPS 2

__constant__ FMMCUDAInvTable cP2MInv = FMMCUDAInvMake(); /* 1/k */

/* q, d in tree order (and in global order for the indexing layout) */
__global__ void StrengthsKernel(PetscInt N, const PetscInt *sperm, const double *cq, const double *cdx, const double *cdy, const double *sigma, double *q, double *dx, double *dy, double *gq, double *gdx, double *gdy)
{
  FMMWaitPrior();
  PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  PetscInt g = sperm[i];
  double   s = sigma[g], a = cq[i] * s, b = cdx[i] * s, c = cdy[i] * s;
  q[i]  = a;
  dx[i] = b;
  dy[i] = c;
  if (gq) {
    gq[g]  = a;
    gdx[g] = b;
    gdy[g] = c;
  }
}

/* sigma: the densities in device memory (c->sigma or the caller's device array) */
PetscErrorCode FMMCUDAStrengths(FMM_CUDA *c, const FMMPlan *P, const double *sigma)
{
  PetscFunctionBegin;
  if (!P->N) PetscFunctionReturn(0);
  FMMLaunch(StrengthsKernel, FMMCUDABlocks(P->N, 256), 256, 0, c->stream, P->N, c->sperm, c->cq, c->cdx, c->cdy, sigma, c->q, c->dx, c->dy, c->gq, c->gdx, c->gdy);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* ne <= 2(FMMCUDA_PMAX+1) = 130 columns: at most 5 per lane */
#define P2M_COLS 5

__global__ void __launch_bounds__(32 * P2M_WARPS) P2MKernel(PetscInt nleaves, int p, int ne, int stride, bool dip, const PetscInt *sleaf, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, const double *cx, const double *cy, const double *scale, double *mpole)
{
  FMMWaitPrior();
  extern __shared__ double sh[];
  const int      lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const PetscInt b    = (PetscInt)blockIdx.x * P2M_WARPS + w;
  if (b >= nleaves) return; /* whole warp */
  double        *rows = sh + (size_t)w * 32 * stride, *row = rows + lane * stride;
  const double   ccx = cx[b], ccy = cy[b], is = 1.0 / scale[b];
  const PetscInt i0 = sleaf[b], i1 = sleaf[b + 1];
  double         acc[P2M_COLS];
#pragma unroll
  for (int m = 0; m < P2M_COLS; m++) acc[m] = 0.0;
  for (PetscInt base = i0; base < i1; base += 32) {
    const int nr = i1 - base < 32 ? (int)(i1 - base) : 32;
    if (lane < nr) {
      const PetscInt i = base + lane;
      for (int k = 0; k < ne; k++) row[k] = 0.0;
      FMMP2MAdd(p, is, (sx[i] - ccx) * is, (sy[i] - ccy) * is, q[i], dx[i], dy[i], dip, cP2MInv.v, row);
    }
    __syncwarp();
#pragma unroll
    for (int m = 0; m < P2M_COLS; m++) {
      const int col = lane + 32 * m;
      if (col < ne)
        for (int r = 0; r < nr; r++) acc[m] += rows[r * stride + col];
    }
    __syncwarp();
  }
#pragma unroll
  for (int m = 0; m < P2M_COLS; m++) {
    const int col = lane + 32 * m;
    if (col < ne) mpole[b * ne + col] = acc[m];
  }
}

/* 4 consecutive threads per leaf take every 4th source; their expansions are
   added (0+2, 1+3, then both) by shuffles in a fixed order */
#define P2M_GROUP 4
template <int PP, bool DIP>
__global__ void __launch_bounds__(128) P2MFastKernel(PetscInt nleaves, int p, int ne, const PetscInt *sleaf, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, const double *cx, const double *cy, const double *scale, double *mpole)
{
  FMMWaitPrior();
  const PetscInt tid = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x, b = tid / P2M_GROUP;
  const int      g   = (int)(tid % P2M_GROUP);
  const bool     ok  = b < nleaves;
  double         A[2 * (PP + 1)];
#pragma unroll
  for (int k = 0; k < 2 * (PP + 1); k++) A[k] = 0.0;
  if (ok) {
    const double ccx = cx[b], ccy = cy[b], is = 1.0 / scale[b];
    for (PetscInt i = sleaf[b] + g; i < sleaf[b + 1]; i += P2M_GROUP) FMMP2MAdd(PP, is, (sx[i] - ccx) * is, (sy[i] - ccy) * is, q[i], dx[i], dy[i], DIP, cP2MInv.v, A);
  }
#pragma unroll
  for (int k = 0; k < 2 * (PP + 1); k++) {
    A[k] += __shfl_down_sync(0xffffffffu, A[k], 2);
    A[k] += __shfl_down_sync(0xffffffffu, A[k], 1);
  }
  if (ok && g == 0) {
#pragma unroll
    for (int k = 0; k <= PP; k++)
      if (k <= p) {
        mpole[b * ne + k]         = A[k];
        mpole[b * ne + p + 1 + k] = A[PP + 1 + k];
      }
  }
}

typedef void (*P2MFastFn)(PetscInt, int, int, const PetscInt *, const double *, const double *, const double *, const double *, const double *, const double *, const double *, const double *, double *);
#define P2M_FAST(PP) P2MFastKernel<PP, false>, P2MFastKernel<PP, true>
static const P2MFastFn P2MFastKernels[][2] = {{NULL, NULL}, {P2M_FAST(2)}, {P2M_FAST(4)}, {P2M_FAST(6)}, {P2M_FAST(8)}, {P2M_FAST(10)}, {P2M_FAST(12)}, {P2M_FAST(14)}, {P2M_FAST(16)}, {P2M_FAST(18)}, {P2M_FAST(20)},
                                             {P2M_FAST(22)}, {P2M_FAST(24)}, {P2M_FAST(26)}, {P2M_FAST(28)}, {P2M_FAST(30)}, {P2M_FAST(32)}, {P2M_FAST(34)}, {P2M_FAST(36)}, {P2M_FAST(38)}, {P2M_FAST(40)}};
#undef P2M_FAST

PetscErrorCode FMMCUDAP2M(FMM_CUDA *c, const FMMPlan *P)
{
  const int    stride = (int)c->ne + 1;
  const size_t shmem  = (size_t)P2M_WARPS * 32 * stride * sizeof(double);
  PetscInt     first, nl, l0; /* the leaves this plan evaluates (all but on a rank of the distributed tree) */

  PetscFunctionBegin;
  FMMPlanLevelBoxes(P, P->L, &first, &nl);
  l0 = FMMCUDABoxBase(c, P->L) + first;
  if (c->pp) {
    FMMLaunch(P2MFastKernels[c->pp / 2][c->kind != 0], FMMCUDABlocks((PetscInt64)P2M_GROUP * nl, 128), 128, 0, c->stream, nl, (int)c->p, (int)c->ne, c->sleaf + first, c->sx, c->sy, c->q, c->dx, c->dy, c->cx + l0, c->cy + l0, c->scale + l0, c->mpole + l0 * c->ne);
    FMMCheckLaunch();
    PetscFunctionReturn(0);
  }
  if (shmem > 49152) FMMCallCUDA(cudaFuncSetAttribute((const void *)P2MKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
  FMMLaunch(P2MKernel, FMMCUDABlocks(nl, P2M_WARPS), 32 * P2M_WARPS, shmem, c->stream, nl, (int)c->p, (int)c->ne, stride, c->kind != 0, c->sleaf + first, c->sx, c->sy, c->q, c->dx, c->dy, c->cx + l0, c->cy + l0, c->scale + l0, c->mpole + l0 * c->ne);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* M2M for one coefficient l of one parent (FMMM2MCoefficient, expansions.h):
   B_0 = sum A_0,  B_l = sum over children of -A_0 u^l/l + sum_{k=1..l} C(l-1,k-1) A_k rho^k u^(l-k) */
__global__ void M2MKernel(PetscInt first, PetscInt nb, int p, int ne, PetscInt pl, PetscInt cl, PetscInt span, const PetscInt *sleaf, const double *cx, const double *cy, const double *scale, const double *binom, double *mpole)
{
  FMMWaitPrior();
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nb * (p + 1)) return;
  const PetscInt b = first + t / (p + 1);
  const int      l = (int)(t % (p + 1));
  const double   pcx = cx[pl + b], pcy = cy[pl + b], ps = scale[pl + b];
  double         sr = 0.0, si = 0.0;
  for (PetscInt ch = 4 * b; ch < 4 * b + 4; ch++) {
    if (sleaf[(ch + 1) * span] == sleaf[ch * span]) continue; /* no sources */
    const double *A = mpole + (cl + ch) * ne;
    if (l == 0) {
      sr += A[0];
      continue;
    }
    const double ux = (cx[cl + ch] - pcx) / ps, uy = (cy[cl + ch] - pcy) / ps, rho = scale[cl + ch] / ps;
    FMMM2MCoefficient(p, binom, l, ux, uy, rho, A, &sr, &si);
  }
  mpole[(pl + b) * ne + l]         = sr;
  mpole[(pl + b) * ne + p + 1 + l] = si;
}

PetscErrorCode FMMCUDAM2M(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  for (PetscInt l = P->L - 1; l >= 0; l--) {
    PetscInt first, nb, span = (PetscInt)1 << (2 * (P->L - l - 1));
    FMMPlanLevelBoxes(P, l, &first, &nb);
    FMMLaunch(M2MKernel, FMMCUDABlocks(nb * (c->p + 1), 128), 128, 0, c->stream, first, nb, (int)c->p, (int)c->ne, FMMCUDABoxBase(c, l), FMMCUDABoxBase(c, l + 1), span, c->sleaf, c->cx, c->cy, c->scale, c->binom, c->mpole);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}
