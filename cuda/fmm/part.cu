/*
  The distributed tree's points on this rank's GPU (FMMCUDAPart, src/fmm/dist.c):
  kept from the top cuts (the caller's order), moved to the rank's slots
  (the points that stay from that copy, the others as the host received
  them), read by the subtrees, put in tree order with their coefficients,
  and taken by the plan's upload (backend.cu).  So a rank's own points go up
  once and never come back to the host.  Every output element is written by
  one thread.
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"

#define PART_BS 256

/* point from[k] of the arrays (xy, nrm, w; nrm, w may be NULL) to place to[k] of (rxy, rnrm, rw), k < n
   (to, from NULL: k; from[k] < 0: none) */
__global__ static void MoveKernel(PetscInt n, const PetscInt *to, const PetscInt *from, const double *xy, const double *nrm, const double *w, double *rxy, double *rnrm, double *rw)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const PetscInt r = to ? to[k] : k, j = from ? from[k] : k;
  if (j < 0) return;
  rxy[2 * r]     = xy[2 * j];
  rxy[2 * r + 1] = xy[2 * j + 1];
  if (rnrm) {
    rnrm[2 * r]     = nrm[2 * j];
    rnrm[2 * r + 1] = nrm[2 * j + 1];
  }
  if (rw) rw[r] = w[j];
}

/* place q holds point pj[q]: source slot pj[q] < nr, else target slot pj[q] - nr */
__global__ static void InterleaveKernel(PetscInt n, const PetscInt *pj, PetscInt nr, const double *rxy, const double *txy, double *xy)
{
  FMMWaitPrior();
  const PetscInt q = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= n) return;
  const PetscInt j = pj[q];
  const double  *z = j < nr ? rxy + 2 * j : txy + 2 * (j - nr);
  xy[2 * q]        = z[0];
  xy[2 * q + 1]    = z[1];
}

/* source i in tree order is slot perm[i]: its point and its coefficients (those of the host's FMMDistBuild()) */
__global__ static void OrderKernel(PetscInt n, const PetscInt *perm, const double *rxy, const double *rnrm, const double *rw, double alpha, double beta, double *sx, double *sy, double *cq, double *cdx, double *cdy)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const PetscInt j = perm[i];
  double         q, dx, dy, dn;
  sx[i] = rxy[2 * j];
  sy[i] = rxy[2 * j + 1];
  FMMSourceCoefficients(alpha, beta, rw ? rw[j] : 1.0, rnrm ? rnrm + 2 * j : NULL, &q, &dx, &dy, &dn);
  cq[i]  = q;
  cdx[i] = dx;
  cdy[i] = dy;
}

/* target t in tree order is target slot perm[t] */
__global__ static void TargetsKernel(PetscInt m, const PetscInt *perm, const double *txy, double *tx, double *ty)
{
  FMMWaitPrior();
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= m) return;
  const PetscInt j = perm[t];
  tx[t]            = txy[2 * j];
  ty[t]            = txy[2 * j + 1];
}

/* out[5c ..] = the point and coefficients of source idx[c] (tree order) */
__global__ static void GatherKernel(PetscInt n, const PetscInt *idx, const double *sx, const double *sy, const double *cq, const double *cdx, const double *cdy, double *out)
{
  FMMWaitPrior();
  const PetscInt c = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const PetscInt i = idx[c];
  out[5 * c]       = sx[i];
  out[5 * c + 1]   = sy[i];
  out[5 * c + 2]   = cq[i];
  out[5 * c + 3]   = cdx[i];
  out[5 * c + 4]   = cdy[i];
}

/* The launchers: device arrays, queued on s */
/* slot r (< n) takes the caller's point lmap[r] where that is on this rank (>= 0) */
PetscErrorCode FMMCUDAPartSlots(cudaStream_t s, PetscInt n, const PetscInt *lmap, const double *xy, const double *nrm, const double *w, double *rxy, double *rnrm, double *rw)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  FMMLaunch(MoveKernel, FMMCUDABlocks(n, PART_BS), PART_BS, 0, s, n, (const PetscInt *)NULL, lmap, xy, nrm, w, rxy, rnrm, rw);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* slot croot[c] takes the received point c (< n) */
PetscErrorCode FMMCUDAPartReceived(cudaStream_t s, PetscInt n, const PetscInt *croot, const double *vxy, const double *vn, const double *vw, double *rxy, double *rnrm, double *rw)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  FMMLaunch(MoveKernel, FMMCUDABlocks(n, PART_BS), PART_BS, 0, s, n, croot, (const PetscInt *)NULL, vxy, vn, vw, rxy, rnrm, rw);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

PetscErrorCode FMMCUDAPartInterleave(cudaStream_t s, const FMMCUDAPart *p, PetscInt n, const PetscInt *pj, double *xy)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  FMMLaunch(InterleaveKernel, FMMCUDABlocks(n, PART_BS), PART_BS, 0, s, n, pj, p->nr, (const double *)p->rxy, (const double *)p->txy, xy);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* p's n sources and m targets (set, arrays allocated) in tree order from its slots (sperm, tperm: device) */
PetscErrorCode FMMCUDAPartOrder(cudaStream_t s, FMMCUDAPart *p, const PetscInt *sperm, const PetscInt *tperm, double alpha, double beta)
{
  PetscFunctionBegin;
  if (p->n) {
    FMMLaunch(OrderKernel, FMMCUDABlocks(p->n, PART_BS), PART_BS, 0, s, p->n, sperm, (const double *)p->rxy, (const double *)p->rnrm, (const double *)p->rw, alpha, beta, p->sx, p->sy, p->cq, p->cdx, p->cdy);
    FMMCheckLaunch();
  }
  if (p->m) {
    FMMLaunch(TargetsKernel, FMMCUDABlocks(p->m, PART_BS), PART_BS, 0, s, p->m, tperm, (const double *)p->txy, p->tx, p->ty);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

PetscErrorCode FMMCUDAPartGather(cudaStream_t s, const FMMCUDAPart *p, PetscInt n, const PetscInt *idx, double *out)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  FMMLaunch(GatherKernel, FMMCUDABlocks(n, PART_BS), PART_BS, 0, s, n, idx, (const double *)p->sx, (const double *)p->sy, (const double *)p->cq, (const double *)p->cdx, (const double *)p->cdy, out);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* its arrays back to the pool after the work queued on s (NULL: after all the device's work; the
   context may be gone at exit: errors ignored) */
PetscErrorCode FMMCUDAPartDestroy(FMMCUDAPart **pp, cudaStream_t s)
{
  FMMCUDAPart *p = *pp;

  PetscFunctionBegin;
  if (!p) PetscFunctionReturn(0);
  double **a[] = {&p->xy, &p->rxy, &p->rnrm, &p->rw, &p->txy, &p->sx, &p->sy, &p->cq, &p->cdx, &p->cdy, &p->tx, &p->ty};
  if (!s) {
    (void)cudaDeviceSynchronize();
    s = FMMCUDAStaging.side[0];
  }
  for (size_t k = 0; k < sizeof(a) / sizeof(a[0]); k++) {
    if (*a[k]) (void)(FMMCUDAPool ? cudaFreeAsync(*a[k], s) : cudaFree(*a[k]));
    *a[k] = NULL;
  }
  (void)cudaGetLastError();
  PetscCall(PetscFree(*pp));
  PetscFunctionReturn(0);
}
