/*
  The walks of spread leaves next to dense ones on the GPU (FMMWalks,
  src/fmm/walk.c builds them).  At setup the near-field counts come back to
  the host; where some leaf qualifies, the plan's arrays the walks read come
  back too, the host builds the walks and filters the near lists, and both
  go up.  A product then adds P2L after M2L and, after the near field, the
  walked targets' M2P and P2P and the walked sources' P2P, each output
  summed by one thread in the order of the lists (repeated products are
  bitwise equal).
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"

/* one thread per leaf: the sources of its near field */
__global__ void NearCountKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, PetscInt *ns)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nl) return;
  PetscInt n = 0;
  for (PetscInt j = nearoff[b]; j < nearoff[b + 1]; j++) n += sleaf[near[j] + 1] - sleaf[near[j]];
  ns[b] = n;
}

template <class T>
static PetscErrorCode Down(FMM_CUDA *c, T **h, const T *d, PetscInt n)
{
  PetscFunctionBegin;
  PetscCall(PetscMalloc1(PetscMax(n, 1), h));
  if (n) FMMCallCUDA(cudaMemcpyAsync(*h, d, sizeof(T) * n, cudaMemcpyDeviceToHost, c->stream));
  PetscFunctionReturn(0);
}

/* h[a..b) = d[a..b) */
static PetscErrorCode Range(FMM_CUDA *c, double *h, const double *d, PetscInt a, PetscInt b)
{
  PetscFunctionBegin;
  if (b > a) FMMCallCUDA(cudaMemcpyAsync(h + a, d + a, sizeof(double) * (b - a), cudaMemcpyDeviceToHost, c->stream));
  PetscFunctionReturn(0);
}

/* the walks of the plan on the GPU (FMMWalksApply() holds; once per tree) */
PetscErrorCode FMMCUDAWalks(FMMContext *ctx, FMM_CUDA *c)
{
  FMMPlan    *P  = &ctx->plan;
  const PetscInt nl = P->nleaves;
  PetscInt   *dns, *ns, *tleaf, thr, nbig;
  FMMHostPlan H;
  PetscLogDouble t[6];

  PetscFunctionBegin;
  PetscCall(PetscTime(&t[0]));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dns, sizeof(PetscInt) * PetscMax(nl, 1), "the near-field counts"));
  FMMLaunch(NearCountKernel, FMMCUDABlocks(nl, 256), 256, 0, c->stream, nl, c->nearoff, c->near, c->sleaf, dns);
  FMMCheckLaunch();
  PetscCall(Down(c, &ns, dns, nl));
  PetscCall(Down(c, &tleaf, c->tleaf, nl + 1));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscTime(&t[1]));
  PetscCall(FMMCUDAFree(c->stream, dns));
  nbig = FMMWalksCount(nl, tleaf, ns, &thr);
  if (!nbig) {
    PetscCall(PetscFree(ns));
    PetscCall(PetscFree(tleaf));
    PetscFunctionReturn(0);
  }
  /* the arrays the walks read, to the host */
  PetscCall(PetscMemzero(&H, sizeof(H)));
  H.tleaf = tleaf;
  PetscCall(Down(c, &H.nearoff, c->nearoff, nl + 1));
  PetscCall(Down(c, &H.near, c->near, c->nnear));
  PetscCall(Down(c, &H.sleaf, c->sleaf, nl + 1));
  PetscCall(Down(c, &H.cx, c->cx, P->nboxes));
  PetscCall(Down(c, &H.cy, c->cy, P->nboxes));
  PetscCall(Down(c, &H.scale, c->scale, P->nboxes));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscTime(&t[2]));
  /* the points of the walked leaves only (the walks read no others) */
  PetscCall(PetscMalloc4(P->N, &H.sx, P->N, &H.sy, P->M, &H.tx, P->M, &H.ty));
  for (PetscInt b = 0; b < nl; b++) {
    if (ns[b] <= thr) continue;
    PetscCall(Range(c, H.sx, c->sx, H.sleaf[b], H.sleaf[b + 1]));
    PetscCall(Range(c, H.sy, c->sy, H.sleaf[b], H.sleaf[b + 1]));
    PetscCall(Range(c, H.tx, c->tx, H.tleaf[b], H.tleaf[b + 1]));
    PetscCall(Range(c, H.ty, c->ty, H.tleaf[b], H.tleaf[b + 1]));
  }
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscTime(&t[3]));
  PetscCall(FMMWalksBuild(P, &H, ns, ctx->par->theta, ctx->obj));
  PetscCall(PetscTime(&t[4]));
  if (H.walk) { /* the filtered near lists (shorter: in place) and the walks, in one block, up */
    const FMMWalks *W = H.walk;
    const PetscInt  len[11] = {W->nwt, W->nwt + 1, W->wmoff[W->nwt], W->nwt + 1, W->wpoff[W->nwt], W->nlb, W->nlb + 1, W->lsoff[W->nlb], W->nxl, W->nxl + 1, W->xsoff[W->nxl]};
    const PetscInt *src[11] = {W->wt, W->wmoff, W->wm, W->wpoff, W->wp, W->lb, W->lsoff, W->ls, W->xl, W->xsoff, W->xs};
    PetscInt      **dst[11] = {&c->wt, &c->wmoff, &c->wm, &c->wpoff, &c->wp, &c->lb, &c->lsoff, &c->ls, &c->xl, &c->xsoff, &c->xs};
    PetscInt        tot = 0, *h;
    c->nnear = H.nearoff[nl];
    FMMCallCUDA(cudaMemcpyAsync(c->nearoff, H.nearoff, sizeof(PetscInt) * (nl + 1), cudaMemcpyHostToDevice, c->stream));
    if (c->nnear) FMMCallCUDA(cudaMemcpyAsync(c->near, H.near, sizeof(PetscInt) * c->nnear, cudaMemcpyHostToDevice, c->stream));
    for (int k = 0; k < 11; k++) tot += len[k];
    PetscCall(PetscMalloc1(tot, &h));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->walk, sizeof(PetscInt) * tot, "the walks"));
    tot = 0;
    for (int k = 0; k < 11; k++) {
      PetscCall(PetscArraycpy(h + tot, src[k], len[k]));
      *dst[k] = c->walk + tot;
      tot += len[k];
    }
    FMMCallCUDA(cudaMemcpyAsync(c->walk, h, sizeof(PetscInt) * tot, cudaMemcpyHostToDevice, c->stream));
    c->nwt = W->nwt;
    c->nlb = W->nlb;
    c->nxl = W->nxl;
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(h));
  }
  PetscCall(PetscTime(&t[5]));
  PetscCall(PetscInfo(ctx->obj, "GPU walks: near counts %.2f ms, plan down %.2f ms, points down %.2f ms, walks built on the host %.2f ms, up %.2f ms\n", 1e3 * (t[1] - t[0]), 1e3 * (t[2] - t[1]), 1e3 * (t[3] - t[2]), 1e3 * (t[4] - t[3]), 1e3 * (t[5] - t[4])));
  PetscCall(FMMWalksDestroy(&H.walk));
  PetscCall(PetscFree(ns));
  PetscCall(PetscFree(H.tleaf));
  PetscCall(PetscFree(H.nearoff));
  PetscCall(PetscFree(H.near));
  PetscCall(PetscFree(H.sleaf));
  PetscCall(PetscFree(H.cx));
  PetscCall(PetscFree(H.cy));
  PetscCall(PetscFree(H.scale));
  PetscCall(PetscFree4(H.sx, H.sy, H.tx, H.ty));
  PetscFunctionReturn(0);
}

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
