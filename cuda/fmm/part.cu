/*
  The distributed tree's points on this rank's GPU (FMMCUDAPart, src/fmm/dist.c):
  kept from the top cuts (the caller's order), moved to the rank's slots
  (the points that stay from that copy, the others as the host received
  them), read by the subtrees, put in tree order with their coefficients,
  and taken by the plan's upload (backend.cu).  So a rank's own points go up
  once and never come back to the host, and neither do the per-point
  numbers made from them (their boxes, slots, tree order and the product's
  numbering): the host sees counts, and the points that change rank.  Every
  output element is written by one thread.
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"
#include <cub/cub.cuh>
#include <thrust/iterator/transform_iterator.h>

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

/* source i in tree order is slot perm[i]: its point */
__global__ static void OrderKernel(PetscInt n, const PetscInt *perm, const double *rxy, double *sx, double *sy)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const PetscInt j = perm[i];
  sx[i] = rxy[2 * j];
  sy[i] = rxy[2 * j + 1];
}

/* source i in tree order is slot j = perm[i]: its coefficients (those of the host's FMMDistBuild()) from
   the caller's normal and weight lmap[j] where the point stayed on the rank, else from the slot's
   received ones (NULL: zero normals, unit weights) */
__global__ static void CoefficientsKernel(PetscInt n, const PetscInt *perm, const PetscInt *lmap, const double *cnrm, const double *cwts, const double *rnrm, const double *rw, double alpha, double beta, double *cq, double *cdx, double *cdy)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const PetscInt j = perm[i], l = lmap[j];
  const double  *nv = l >= 0 ? (cnrm ? cnrm + 2 * l : NULL) : (rnrm ? rnrm + 2 * j : NULL);
  const double   w  = l >= 0 ? (cwts ? cwts[l] : 1.0) : (rw ? rw[j] : 1.0);
  double         q, dx, dy, dn;
  FMMSourceCoefficients(alpha, beta, w, nv, &q, &dx, &dy, &dn);
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

/* key[k]: point k's box, the targets' (k >= ns) n0 keys after the sources'; val[k] = k */
__global__ static void BoxKeysKernel(PetscInt u, PetscInt ns, PetscInt n0, const PetscInt *box, unsigned int *key, PetscInt *val)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= u) return;
  key[k] = (unsigned int)(box[k] + (k >= ns ? n0 : 0));
  val[k] = k;
}

/* the points at sorted places [a, e) (one kind), box B's from boff[B] (n0 + 1): those of a box kept here
   (first[B] >= 0) to slots first[B] on (lmap), the others to rem from rstart[B] on */
__global__ static void OwnersKernel(PetscInt a, PetscInt e, PetscInt n0, const PetscInt *boff, const PetscInt *first, const PetscInt *rstart, const PetscInt *sk, PetscInt *lmap, PetscInt *rem)
{
  FMMWaitPrior();
  const PetscInt i = a + (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= e) return;
  const PetscInt B = FMMLastLE(boff, 0, n0, i), j = i - boff[B];
  if (first[B] >= 0) lmap[first[B] + j] = sk[i] - a;
  else rem[rstart[B] + j] = sk[i] - a;
}

/* out[k] = a[idx[k]] */
__global__ static void GatherIntsKernel(PetscInt n, const PetscInt *idx, const PetscInt *a, PetscInt *out)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) out[k] = a[idx[k]];
}

struct IsSource {
  PetscInt                     nr;
  __host__ __device__ PetscInt operator()(PetscInt j) const { return j < nr ? 1 : 0; }
};

/* place k of the order (ord[k]: source slot < nr, else nr + target slot), pos[k] the sources before it: the
   sources' and targets' orders */
__global__ static void SplitOrderKernel(PetscInt np, PetscInt nr, const PetscInt *ord, const PetscInt *pos, PetscInt *sperm, PetscInt *tperm)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= np) return;
  const PetscInt j = ord[k];
  if (j < nr) sperm[pos[k]] = j;
  else tperm[k - pos[k]] = j - nr;
}

/* num[i]: the product's number of the point at tree place i (slot perm[i]): the caller's index where it
   stays on the rank (lmap), else nc + its place among the received slots croot (ascending); -1 and *bad
   where neither (SplitMoves()) */
__global__ static void NumbersKernel(PetscInt n, const PetscInt *perm, const PetscInt *lmap, PetscInt nc, PetscInt ncr, const PetscInt *croot, PetscInt *num, int *bad)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const PetscInt r = perm[i];
  PetscInt       v = lmap[r];
  if (v < 0) {
    const PetscInt c = ncr ? FMMLastLE(croot, 0, ncr, r) : 0;
    v                = ncr && croot[c] == r ? nc + c : -1;
  }
  num[i] = v;
  if (v < 0) *bad = 1;
}

/* leafof[t]: the leaf of target t (tleaf: the leaves' offsets, ascending) */
__global__ static void LeafOfKernel(PetscInt m, PetscInt nleaves, const PetscInt *tleaf, PetscInt *leafof)
{
  FMMWaitPrior();
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < m) leafof[t] = FMMLastLE(tleaf, 0, nleaves, t);
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

/* p's boxes of level l0 (box: each of the caller's ns + mt points', device): p->bsort (the sources by box,
   then the targets by box, each box's in the caller's order: a stable sort) and cnt (host, 2 n0: the
   sources in each box, then the targets) */
PetscErrorCode FMMCUDAPartBoxes(cudaStream_t s, FMMCUDAPart *p, PetscInt n0, const PetscInt *box, PetscInt *cnt)
{
  const PetscInt u = p->ns + p->mt;
  unsigned int  *key;
  PetscInt      *val;
  int           *dcnt, *hc;
  void          *tmp = NULL;
  size_t         bs = 0, bh = 0;
  int            bits = 1;

  PetscFunctionBegin;
  p->n0 = n0;
  PetscCall(PetscMalloc1(2 * n0, &hc));
  while (((PetscInt)1 << bits) < 2 * n0) bits++;
  PetscCall(FMMCUDAMalloc(s, (void **)&p->bsort, sizeof(PetscInt) * PetscMax(u, 1), "the part's points by box"));
  PetscCall(FMMCUDAMalloc(s, (void **)&dcnt, sizeof(int) * 2 * n0, "the part's counts by box"));
  if (u) {
    PetscCall(FMMCUDAMalloc(s, (void **)&key, sizeof(unsigned int) * 2 * u, "the part's box keys"));
    PetscCall(FMMCUDAMalloc(s, (void **)&val, sizeof(PetscInt) * u, "the part's box keys"));
    FMMLaunch(BoxKeysKernel, FMMCUDABlocks(u, PART_BS), PART_BS, 0, s, u, p->ns, n0, box, key, val);
    FMMCheckLaunch();
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, bs, key, key + u, val, p->bsort, (int)u, 0, bits, s));
    FMMCallCUDA(cub::DeviceHistogram::HistogramEven(NULL, bh, key, dcnt, (int)(2 * n0 + 1), 0u, (unsigned int)(2 * n0), (int)u, s));
    PetscCall(FMMCUDAMalloc(s, &tmp, PetscMax(bs, bh), "the part's box sort"));
    FMMCallCUDA(cub::DeviceHistogram::HistogramEven(tmp, bh, key, dcnt, (int)(2 * n0 + 1), 0u, (unsigned int)(2 * n0), (int)u, s));
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(tmp, bs, key, key + u, val, p->bsort, (int)u, 0, bits, s));
    PetscCall(FMMCUDAFree(s, tmp));
    PetscCall(FMMCUDAFree(s, key));
    PetscCall(FMMCUDAFree(s, val));
  } else FMMCallCUDA(cudaMemsetAsync(dcnt, 0, sizeof(int) * 2 * n0, s));
  FMMCallCUDA(cudaMemcpyAsync(hc, dcnt, sizeof(int) * 2 * n0, cudaMemcpyDeviceToHost, s));
  FMMCallCUDA(cudaStreamSynchronize(s));
  PetscCall(FMMCUDAFree(s, dcnt));
  for (PetscInt B = 0; B < 2 * n0; B++) cnt[B] = hc[B];
  PetscCall(PetscFree(hc));
  PetscFunctionReturn(0);
}

/* the slots of one kind of p's points (tgt: the targets), sorted places [a, e) of p->bsort, box B's from
   boff[B] (device, n0 + 1): first[B] >= 0 (device): the box is kept here from slot first[B] on (lmap,
   device, set beforehand to -1); else its points go to rem (device) from rstart[B] (device) on, as
   caller's indices of the kind */
PetscErrorCode FMMCUDAPartOwners(cudaStream_t s, const FMMCUDAPart *p, PetscInt a, PetscInt e, PetscInt n0, const PetscInt *boff, const PetscInt *first, const PetscInt *rstart, PetscInt *lmap, PetscInt *rem)
{
  PetscFunctionBegin;
  if (e <= a) PetscFunctionReturn(0);
  FMMLaunch(OwnersKernel, FMMCUDABlocks(e - a, PART_BS), PART_BS, 0, s, a, e, n0, boff, first, rstart, (const PetscInt *)p->bsort, lmap, rem);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

PetscErrorCode FMMCUDAGatherInts(cudaStream_t s, PetscInt n, const PetscInt *idx, const PetscInt *a, PetscInt *out)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  FMMLaunch(GatherIntsKernel, FMMCUDABlocks(n, PART_BS), PART_BS, 0, s, n, idx, a, out);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* p's subtrees' order (p->ord, p->nord places; its nl leaves from loff[b], host) split into the sources'
   (p->sperm, p->nr of them) and the targets' (p->tperm); scnt (host, nl + 1): the sources before each leaf */
PetscErrorCode FMMCUDAPartSplitOrder(cudaStream_t s, FMMCUDAPart *p, PetscInt nl, const PetscInt *loff, PetscInt *scnt)
{
  const PetscInt np = p->nord;
  PetscInt      *pos, *dl, *dc;
  void          *tmp = NULL;
  size_t         bytes = 0;
  auto           flags = thrust::make_transform_iterator((const PetscInt *)p->ord, IsSource{p->nr});

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(s, (void **)&p->sperm, sizeof(PetscInt) * PetscMax(p->nr, 1), "the part's order"));
  PetscCall(FMMCUDAMalloc(s, (void **)&p->tperm, sizeof(PetscInt) * PetscMax(np - p->nr, 1), "the part's order"));
  PetscCall(FMMCUDAMalloc(s, (void **)&pos, sizeof(PetscInt) * (np + 1), "the part's order"));
  PetscCall(FMMCUDAMalloc(s, (void **)&dl, sizeof(PetscInt) * (nl + 1), "the part's leaves"));
  PetscCall(FMMCUDAMalloc(s, (void **)&dc, sizeof(PetscInt) * (nl + 1), "the part's leaves"));
  FMMCallCUDA(cudaMemsetAsync(pos, 0, sizeof(PetscInt), s));
  if (np) {
    FMMCallCUDA(cub::DeviceScan::InclusiveSum(NULL, bytes, flags, pos + 1, (int)np, s));
    PetscCall(FMMCUDAMalloc(s, &tmp, bytes, "the part's order"));
    FMMCallCUDA(cub::DeviceScan::InclusiveSum(tmp, bytes, flags, pos + 1, (int)np, s));
    PetscCall(FMMCUDAFree(s, tmp));
    FMMLaunch(SplitOrderKernel, FMMCUDABlocks(np, PART_BS), PART_BS, 0, s, np, p->nr, (const PetscInt *)p->ord, (const PetscInt *)pos, p->sperm, p->tperm);
    FMMCheckLaunch();
  }
  FMMCallCUDA(cudaMemcpyAsync(dl, loff, sizeof(PetscInt) * (nl + 1), cudaMemcpyHostToDevice, s));
  FMMLaunch(GatherIntsKernel, FMMCUDABlocks(nl + 1, PART_BS), PART_BS, 0, s, nl + 1, (const PetscInt *)dl, (const PetscInt *)pos, dc);
  FMMCheckLaunch();
  FMMCallCUDA(cudaMemcpyAsync(scnt, dc, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToHost, s));
  FMMCallCUDA(cudaStreamSynchronize(s));
  PetscCall(FMMCUDAFree(s, pos));
  PetscCall(FMMCUDAFree(s, dl));
  PetscCall(FMMCUDAFree(s, dc));
  PetscFunctionReturn(0);
}

/* p's n sources' points and m targets (set, arrays allocated) in tree order from its slots (sperm, tperm: device) */
PetscErrorCode FMMCUDAPartOrder(cudaStream_t s, FMMCUDAPart *p, const PetscInt *sperm, const PetscInt *tperm)
{
  PetscFunctionBegin;
  if (p->n) {
    FMMLaunch(OrderKernel, FMMCUDABlocks(p->n, PART_BS), PART_BS, 0, s, p->n, sperm, (const double *)p->rxy, p->sx, p->sy);
    FMMCheckLaunch();
  }
  if (p->m) {
    FMMLaunch(TargetsKernel, FMMCUDABlocks(p->m, PART_BS), PART_BS, 0, s, p->m, tperm, (const double *)p->txy, p->tx, p->ty);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

/* p's n sources' coefficients in tree order (cq, cdx, cdy allocated; the late copy of cnrm, cwts landed) */
PetscErrorCode FMMCUDAPartCoefficients(cudaStream_t s, FMMCUDAPart *p, double alpha, double beta)
{
  PetscFunctionBegin;
  if (!p->n) PetscFunctionReturn(0);
  FMMLaunch(CoefficientsKernel, FMMCUDABlocks(p->n, PART_BS), PART_BS, 0, s, p->n, (const PetscInt *)p->sperm, (const PetscInt *)p->lsrc, (const double *)p->cnrm, (const double *)p->cwts, (const double *)p->rnrm, (const double *)p->rw, alpha, beta, p->cq, p->cdx, p->cdy);
  FMMCheckLaunch();
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

/* num (device, n): the product's numbers of the points at the n tree places (perm: their slots; lmap,
   croot: NumbersKernel); *bad (host): some slot is fed by no point */
PetscErrorCode FMMCUDAPartNumbers(cudaStream_t s, PetscInt n, const PetscInt *perm, const PetscInt *lmap, PetscInt nc, PetscInt ncr, const PetscInt *croot, PetscInt *num, PetscInt *bad)
{
  int *dbad, hbad = 0;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(s, (void **)&dbad, sizeof(int), "a flag"));
  FMMCallCUDA(cudaMemsetAsync(dbad, 0, sizeof(int), s));
  if (n) FMMLaunch(NumbersKernel, FMMCUDABlocks(n, PART_BS), PART_BS, 0, s, n, perm, lmap, nc, ncr, croot, num, dbad);
  FMMCheckLaunch();
  FMMCallCUDA(cudaMemcpyAsync(&hbad, dbad, sizeof(int), cudaMemcpyDeviceToHost, s));
  FMMCallCUDA(cudaStreamSynchronize(s));
  PetscCall(FMMCUDAFree(s, dbad));
  *bad = hbad;
  PetscFunctionReturn(0);
}

/* leafof (device, m): each target's leaf of the nleaves (tleaf: device, nleaves + 1) */
PetscErrorCode FMMCUDALeafOf(cudaStream_t s, PetscInt m, PetscInt nleaves, const PetscInt *tleaf, PetscInt *leafof)
{
  PetscFunctionBegin;
  if (!m) PetscFunctionReturn(0);
  FMMLaunch(LeafOfKernel, FMMCUDABlocks(m, PART_BS), PART_BS, 0, s, m, nleaves, tleaf, leafof);
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
  (void)FMMCUDALateWait(); /* (the late copy writes cnrm, cwts) */
  void **a[] = {(void **)&p->xy, (void **)&p->keep, (void **)&p->rxy, (void **)&p->rnrm, (void **)&p->rw, (void **)&p->cnrm, (void **)&p->cwts, (void **)&p->txy, (void **)&p->sx, (void **)&p->sy, (void **)&p->cq, (void **)&p->cdx, (void **)&p->cdy, (void **)&p->tx, (void **)&p->ty, (void **)&p->bsort, (void **)&p->lsrc, (void **)&p->ltgt, (void **)&p->ord, (void **)&p->pj, (void **)&p->sperm, (void **)&p->tperm, (void **)&p->cin, (void **)&p->cout, (void **)&p->far, (void **)&p->slot[0], (void **)&p->slot[1], (void **)&p->slot[2]};
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
