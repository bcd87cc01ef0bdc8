/*
  The downward pass on the GPU: L2L level by level (one thread per child box
  and coefficient: the upper levels do not serialise), L2P (one thread per
  target, FMML2P of fmmexpansions.h), and the scatter of the potentials from
  tree order to the local target order.
*/
#include "fmmcuda.h"
#include "fmmexpansions.h"

/* L2L of FMML2L for one coefficient l of one child box:
   C_l += rho^l sum_{k=l..p} B_k C(k,l) u^(k-l), in the CPU's order and rounding */
__global__ void L2LKernel(PetscInt nb, int p, int ne, PetscInt pl, PetscInt cl, PetscInt span, const PetscInt *tleaf, const double *cx, const double *cy, const double *scale, const double *binom, double *local)
{
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nb * (p + 1)) return;
  const PetscInt b = t / (p + 1);
  const int      l = (int)(t % (p + 1)), nbin = 2 * p + 1;
  if (tleaf[(b + 1) * span] == tleaf[b * span]) return; /* no targets: local unused */
  const PetscInt par = b / 4;
  const double   ps = scale[pl + par], ux = (cx[cl + b] - cx[pl + par]) / ps, uy = (cy[cl + b] - cy[pl + par]) / ps, rho = scale[cl + b] / ps;
  const double  *Br = local + (pl + par) * ne, *Bi = Br + p + 1;
  double         sr = 0.0, si = 0.0, pr = 1.0, pi = 0.0, rl = 1.0;
  for (int k = l; k <= p; k++) { /* u^(k-l) as the sequential product, like the CPU's table */
    const double c = binom[k * nbin + l];
    sr += c * (Br[k] * pr - Bi[k] * pi);
    si += c * (Br[k] * pi + Bi[k] * pr);
    const double v = pr * ux - pi * uy;
    pi             = pr * uy + pi * ux;
    pr             = v;
  }
  for (int k = 0; k < l; k++) rl *= rho;
  local[(cl + b) * ne + l] += sr * rl;
  local[(cl + b) * ne + p + 1 + l] += si * rl;
}

PetscErrorCode FMMCUDAL2L(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  for (PetscInt l = 1; l <= P->L; l++) {
    PetscInt nb = (PetscInt)1 << (2 * l), span = (PetscInt)1 << (2 * (P->L - l));
    L2LKernel<<<FMMCUDABlocks(nb * (c->p + 1), 128), 128, 0, c->stream>>>(nb, (int)c->p, (int)c->ne, FMMLevelStart(l - 1), FMMLevelStart(l), span, c->tleaf, c->cx, c->cy, c->scale, c->binom, c->local);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

/* pot = far field at each target (tree order); P2P adds the near field */
__global__ void L2PKernel(PetscInt M, int p, int ne, const PetscInt *tleafof, const double *tx, const double *ty, const double *cx, const double *cy, const double *scale, const double *local, double *pot)
{
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M) return;
  const PetscInt b = tleafof[i];
  const double   s = scale[b];
  pot[i]           = FMML2P(p, local + b * ne, (tx[i] - cx[b]) / s, (ty[i] - cy[b]) / s);
}

PetscErrorCode FMMCUDAL2P(FMM_CUDA *c, const FMMPlan *P)
{
  const PetscInt l0 = FMMLevelStart(P->L);

  PetscFunctionBegin;
  if (!P->M) PetscFunctionReturn(0);
  L2PKernel<<<FMMCUDABlocks(P->M, 128), 128, 0, c->stream>>>(P->M, (int)c->p, (int)c->ne, c->tleafof, c->tx, c->ty, c->cx + l0, c->cy + l0, c->scale + l0, c->local + l0 * c->ne, c->pot);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

__global__ void ScatterKernel(PetscInt M, const PetscInt *tperm, const double *pot, double *y)
{
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < M) y[tperm[i]] = pot[i];
}

PetscErrorCode FMMCUDAScatter(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  if (!P->M) PetscFunctionReturn(0);
  ScatterKernel<<<FMMCUDABlocks(P->M, 256), 256, 0, c->stream>>>(P->M, c->tperm, c->pot, c->y);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* y = [y +] scale r + (shift + d) .* x (d NULL: 0; diag: whether the diagonal
   terms apply), the host loop of MatApply_FMM (src/mat/matfmm.c) on device arrays */
__global__ void CombineKernel(PetscInt m, double scale, double shift, int diag, int add, const double *r, const double *x, const double *d, double *y)
{
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
  CombineKernel<<<FMMCUDABlocks(m, 256), 256, 0, c->stream>>>(m, scale, shift, (shift != 0.0 || d) ? 1 : 0, add ? 1 : 0, c->y, x, d, y);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}
