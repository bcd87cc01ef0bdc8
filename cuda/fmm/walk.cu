/*
  The walks of spread leaves next to dense ones on the GPU (FMMWalks; built
  at setup by tree/walks.cuh, as src/fmm/walk.c builds them on the host).
  A product adds P2L after M2L and, after the near field, the
  walked targets' M2P and P2P and the walked sources' P2P, each output
  summed by one thread in the order of the lists (repeated products are
  bitwise equal).
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"

/* P2L: one warp per box; lane t adds the sources t, t + 32, ... of the box's
   list to its own expansion in shared memory (expansions.h), then lane t
   sums the lanes' coefficients t, t + 32, ... in lane order into the box's
   local expansion: a fixed order, so repeated products are bitwise equal */
#define WALK_L 32
__global__ void __launch_bounds__(WALK_L) WalkP2LKernel(int p, int ne, const PetscInt *lb, const PetscInt *lsoff, const PetscInt *ls, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, const double *cx, const double *cy, const double *scale, double *local)
{
  extern __shared__ double part[]; /* WALK_L expansions of ne */
  FMMWaitPrior();
  const PetscInt j = blockIdx.x, b = lb[j];
  const int      t = threadIdx.x;
  double        *B = part + t * ne;
  for (int e = 0; e < ne; e++) B[e] = 0.0;
  for (PetscInt e = lsoff[j] + t; e < lsoff[j + 1]; e += WALK_L) {
    const PetscInt k = ls[e];
    FMMP2LAdd(p, sx[k] - cx[b], sy[k] - cy[b], scale[b], q[k], dx[k], dy[k], B);
  }
  __syncwarp();
  for (int e = t; e < ne; e += WALK_L) {
    double sum = 0.0;
    for (int s = 0; s < WALK_L; s++) sum += part[s * ne + e];
    local[b * ne + e] += sum;
  }
}

PetscErrorCode FMMCUDAWalkP2L(FMM_CUDA *c)
{
  PetscFunctionBegin;
  if (!c->nlb) PetscFunctionReturn(0);
  FMMLaunch(WalkP2LKernel, (unsigned)c->nlb, WALK_L, sizeof(double) * WALK_L * c->ne, c->stream, (int)c->p, (int)c->ne, (const PetscInt *)c->lb, (const PetscInt *)c->lsoff, (const PetscInt *)c->ls, c->sx, c->sy, c->q, c->dx, c->dy, c->cx, c->cy, c->scale, c->local);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* one block of WALK_T threads per walked target: thread t takes its M2P
   entries t, t + WALK_T, ... and then its sources likewise, and the block
   sums the threads' parts in a fixed tree; added to dst[perm[i]] (perm
   NULL: dst[i]) */
#define WALK_T 128
__global__ void __launch_bounds__(WALK_T) WalkTargetKernel(int p, int ne, const PetscInt *wt, const PetscInt *wmoff, const PetscInt *wm, const PetscInt *wpoff, const PetscInt *wp, const PetscInt *sleaf, const double *tx, const double *ty, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, const double *cx, const double *cy, const double *scale, const double *mpole, const PetscInt *perm, double *dst)
{
  __shared__ double part[WALK_T];
  FMMWaitPrior();
  const PetscInt w = blockIdx.x, i = wt[w];
  const int      t = threadIdx.x;
  const double   zx = tx[i], zy = ty[i];
  double         acc = 0.0;
  for (PetscInt j = wmoff[w] + t; j < wmoff[w + 1]; j += WALK_T) {
    const PetscInt b = wm[j];
    acc += FMMM2P(p, mpole + b * ne, zx - cx[b], zy - cy[b], scale[b]);
  }
  for (PetscInt j = wpoff[w]; j < wpoff[w + 1]; j++)
    for (PetscInt k = sleaf[wp[j]] + t; k < sleaf[wp[j] + 1]; k += WALK_T) acc += FMMPairKernel(zx - sx[k], zy - sy[k], q[k], dx[k], dy[k]);
  part[t] = acc;
  __syncthreads();
  for (int h = WALK_T / 2; h > 0; h /= 2) {
    if (t < h) part[t] += part[t + h];
    __syncthreads();
  }
  if (!t) dst[perm ? perm[i] : i] += part[0];
}

/* one block of WALK_T threads per leaf that walked sources reach directly:
   the threads form G groups of R (R targets at a time, G = WALK_T / R), group
   g takes the sources g, g + G, ... of the leaf's list, and thread t < R sums
   the groups' parts in group order */
__global__ void __launch_bounds__(WALK_T) WalkSourceKernel(const PetscInt *xl, const PetscInt *xsoff, const PetscInt *xs, const PetscInt *tleaf, const double *tx, const double *ty, const double *sx, const double *sy, const double *q, const double *dx, const double *dy, const PetscInt *perm, double *dst)
{
  __shared__ double part[WALK_T];
  FMMWaitPrior();
  const PetscInt j = blockIdx.x, b = xl[j], nt = tleaf[b + 1] - tleaf[b];
  if (!nt) return;
  const int      R = nt < WALK_T ? (int)nt : WALK_T, G = WALK_T / R, t = threadIdx.x, g = t / R;
  for (PetscInt i0 = tleaf[b]; i0 < tleaf[b + 1]; i0 += R) {
    const PetscInt i   = i0 + t % R;
    double         acc = 0.0;
    if (g < G && i < tleaf[b + 1])
      for (PetscInt e = xsoff[j] + g; e < xsoff[j + 1]; e += G) {
        const PetscInt k = xs[e];
        acc += FMMPairKernel(tx[i] - sx[k], ty[i] - sy[k], q[k], dx[k], dy[k]);
      }
    part[t] = acc;
    __syncthreads();
    if (t < R && i < tleaf[b + 1]) {
      double sum = 0.0;
      for (int h = 0; h < G; h++) sum += part[h * R + t];
      dst[perm ? perm[i] : i] += sum;
    }
    __syncthreads();
  }
}

/* the walks' near field, added to dst (tree order, perm NULL) or dst[perm[i]] */
PetscErrorCode FMMCUDAWalkNear(FMM_CUDA *c, const PetscInt *perm, double *dst)
{
  PetscFunctionBegin;
  if (c->nwt) FMMLaunch(WalkTargetKernel, (unsigned)c->nwt, WALK_T, 0, c->stream, (int)c->p, (int)c->ne, (const PetscInt *)c->wt, (const PetscInt *)c->wmoff, (const PetscInt *)c->wm, (const PetscInt *)c->wpoff, (const PetscInt *)c->wp, (const PetscInt *)c->sleaf, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, c->cx, c->cy, c->scale, c->mpole, perm, dst);
  FMMCheckLaunch();
  if (c->nxl) FMMLaunch(WalkSourceKernel, (unsigned)c->nxl, WALK_T, 0, c->stream, (const PetscInt *)c->xl, (const PetscInt *)c->xsoff, (const PetscInt *)c->xs, (const PetscInt *)c->tleaf, c->tx, c->ty, c->sx, c->sy, c->q, c->dx, c->dy, perm, dst);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}
