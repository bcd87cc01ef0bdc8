/*
  The downward pass on the GPU: L2L level by level (one thread per child box
  and coefficient: the upper levels do not serialise), L2P (one thread per
  target, FMML2P of expansions.h; after the symmetric P2P it also adds the
  near field and writes y), and the scatter of the potentials from tree order
  to the local target order.
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"

/* L2L for one coefficient l of one child box (FMML2LCoefficient, expansions.h):
   C_l += rho^l sum_{k=l..p} B_k C(k,l) u^(k-l), in the CPU's order and rounding */
__global__ void L2LKernel(PetscInt first, PetscInt nb, int p, int ne, PetscInt pl, PetscInt cl, PetscInt span, const PetscInt *tleaf, const double *cx, const double *cy, const double *scale, const double *binom, double *local)
{
  FMMWaitPrior();
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nb * (p + 1)) return;
  const PetscInt b = first + t / (p + 1);
  const int      l = (int)(t % (p + 1));
  if (tleaf[(b + 1) * span] == tleaf[b * span]) return; /* no targets: local unused */
  const PetscInt par = b / 4;
  const double   ps = scale[pl + par], ux = (cx[cl + b] - cx[pl + par]) / ps, uy = (cy[cl + b] - cy[pl + par]) / ps, rho = scale[cl + b] / ps;
  double         cr, ci;
  FMML2LCoefficient(p, binom, l, ux, uy, rho, local + (pl + par) * ne, &cr, &ci);
  local[(cl + b) * ne + l] += cr;
  local[(cl + b) * ne + p + 1 + l] += ci;
}

PetscErrorCode FMMCUDAL2L(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  for (PetscInt l = 1; l <= P->L; l++) {
    PetscInt first, nb, span = (PetscInt)1 << (2 * (P->L - l));
    FMMPlanLevelBoxes(P, l, &first, &nb);
    FMMLaunch(L2LKernel, FMMCUDABlocks(nb * (c->p + 1), 128), 128, 0, c->stream, first, nb, (int)c->p, (int)c->ne, FMMCUDABoxBase(c, l - 1), FMMCUDABoxBase(c, l), span, c->tleaf, c->cx, c->cy, c->scale, c->binom, c->local);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

/* The far field at each target (tree order).  Without the symmetric P2P: into
   pot, to which P2P then adds the near field.  With it (NEAR; it ran first):
   plus the target's near field, its rows in pot when its leaf has one item
   of the symmetric P2P, then its slots in slot order (or their chunk sums),
   written to y in the caller's order; thread 0 resets the P2P's item
   counter for the next product.  The same sums in the same order as L2P,
   then P2P adding to pot, a gather pass adding the slots and a scatter pass
   (the order before; see P2PSymmetricKernel in p2p.cu). */
template <bool NEAR>
__global__ void L2PKernel(PetscInt M, int p, int ne, const PetscInt *tleafof, const double *tx, const double *ty, const double *cx, const double *cy, const double *scale, const double *local, double *pot, PetscInt nl, PetscInt nmax, const PetscInt *tleaf, const PetscInt *symleaf, const double *colpart, const double *chsum, const PetscInt *tperm, double *y, unsigned long long *next)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (NEAR && i == 0) *next = 0;
  if (i >= M || (NEAR && tperm[i] < 0)) return; /* tperm -1: a halo target of a distributed plan, dropped */
  const PetscInt b = tleafof[i];
  const double   s = scale[b];
  double         v = FMML2P(p, local + b * ne, (tx[i] - cx[b]) / s, (ty[i] - cy[b]) / s);
  if constexpr (NEAR) {
    const FMMSymLeaf S(symleaf, nl);
    const PetscInt   o = i - tleaf[b], nb = tleaf[b + 1] - tleaf[b], ns = S.nsl[b];
    if (S.item[b + 1] - S.item[b] == 1) v += pot[i];
    if (ns) {
      double t = 0.0;
      if (ns <= FMMCUDA_SYM_GMAX) {
        const double *w = colpart + S.slot[b] + o;
#pragma unroll 4
        for (PetscInt k = 0; k < ns; k++) t += w[k * nb];
      } else t = chsum[S.ch[b] * nmax + o];
      v += t;
    }
    y[tperm[i]] = v;
  } else pot[i] = v;
}

/* y: where the potentials go with the symmetric P2P (c->y or the caller's device array) */
PetscErrorCode FMMCUDAL2P(FMM_CUDA *c, const FMMPlan *P, double *y)
{
  const PetscInt l0 = FMMCUDABoxBase(c, P->L);
  const unsigned nb = FMMCUDABlocks(P->M, 128);

  PetscFunctionBegin;
  if (!P->M) PetscFunctionReturn(0);
  if (c->syma) FMMLaunch(L2PKernel<true>, nb, 128, 0, c->stream, P->M, (int)c->p, (int)c->ne, c->tleafof, c->tx, c->ty, c->cx + l0, c->cy + l0, c->scale + l0, c->local + l0 * c->ne, c->pot, P->nleaves, P->maxleafsrc, c->tleaf, c->symleaf, c->colpart, c->chsum, c->tperm, y, c->symnext);
  else FMMLaunch(L2PKernel<false>, nb, 128, 0, c->stream, P->M, (int)c->p, (int)c->ne, c->tleafof, c->tx, c->ty, c->cx + l0, c->cy + l0, c->scale + l0, c->local + l0 * c->ne, c->pot, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

__global__ void ScatterKernel(PetscInt M, const PetscInt *tperm, const double *pot, double *y)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < M && tperm[i] >= 0) y[tperm[i]] = pot[i];
}

/* pot (tree order) to y (c->y or the caller's device array) */
PetscErrorCode FMMCUDAScatter(FMM_CUDA *c, const FMMPlan *P, double *y)
{
  PetscFunctionBegin;
  if (!P->M) PetscFunctionReturn(0);
  FMMLaunch(ScatterKernel, FMMCUDABlocks(P->M, 256), 256, 0, c->stream, P->M, c->tperm, c->pot, y);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* y = [y +] scale r + (shift + d) .* x (d NULL: 0; diag: whether the diagonal
   terms apply), the host loop of MatApply_FMM (src/fmm/mat.c) on device arrays */
__global__ void CombineKernel(PetscInt m, double scale, double shift, int diag, int add, const double *r, const double *x, const double *d, double *y)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  double v = scale * r[i];
  if (diag) v += (shift + (d ? d[i] : 0.0)) * x[i];
  y[i] = add ? y[i] + v : v;
}

PetscErrorCode FMMCUDACombine(FMM_CUDA *c, PetscInt m, double scale, double shift, const double *x, const double *d, double *y, PetscBool add)
{
  PetscFunctionBegin;
  if (!m) PetscFunctionReturn(0);
  FMMLaunch(CombineKernel, FMMCUDABlocks(m, 256), 256, 0, c->stream, m, scale, shift, (shift != 0.0 || d) ? 1 : 0, add ? 1 : 0, c->y, x, d, y);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}
