/*
  The plan on the GPU: the topological phase of Goude & Engblom (2013, Sec. 3)
  with CUB, producing the tree and lists of src/plan.c where they are used, so
  that an assembly moves only the points across the bus.

  Median splits without sorting each box.  The points (sources, then the
  targets of all ranks) are sorted once by the key (x, index) and once by
  (y, index) with CUB's radix sort, which is stable, so equal coordinates go by
  index as in src/plan.c.  Two lists of point indices, X and Y, then hold the
  points of every box contiguously, each sorted in its own direction.  A box's
  bounding box is read off the ends of its two ranges, its split direction d
  is the longer side, and the median split takes the first half of its d-list
  as it is; the other list is split by a stable partition (a flag per point and
  one exclusive scan over all boxes at once).  Both lists stay sorted within
  every box, so a level costs O(N), and the boxes are those of src/plan.c: the
  same keys give the same medians.  Points in a leaf are in x order (the CPU
  leaves them in selection order; only rounding of sums depends on it).

  The theta-criterion lists are built level by level as in src/plan.c: one
  thread per target box counts, an exclusive scan places, the same thread
  fills (in the same order as the CPU).  Then the work arrays of the product
  that depend on the lists: the M2L chunks and partial sums and the P2P items
  (see fmmcuda.h), and the statistics of the host plan.  Only the box-level
  statistics come back to the host; the host FMMPlan keeps no arrays.
*/
#include "fmmcuda.h"
#include <cub/cub.cuh>

#define BS 256

/* the CUB scratch buffer, grown on demand */
typedef struct {
  void  *tmp;
  size_t bytes;
} Scratch;

static PetscErrorCode ScratchEnsure(Scratch *s, size_t need)
{
  PetscFunctionBegin;
  if (need <= s->bytes) PetscFunctionReturn(0);
  if (s->tmp) FMMCallCUDA(cudaFree(s->tmp));
  s->tmp   = NULL;
  s->bytes = 0;
  PetscCall(FMMCUDAMalloc(&s->tmp, need, "the scratch space of the tree build"));
  s->bytes = need;
  PetscFunctionReturn(0);
}

/* out[0..n] = exclusive prefix sums of in[0..n] (in[n] is 0: out[n] is the total) */
template <class T>
static PetscErrorCode ExclusiveScan(FMM_CUDA *c, Scratch *s, const T *in, T *out, PetscInt n)
{
  size_t need = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cub::DeviceScan::ExclusiveSum(NULL, need, in, out, (int)(n + 1), c->stream));
  PetscCall(ScratchEnsure(s, need));
  FMMCallCUDA(cub::DeviceScan::ExclusiveSum(s->tmp, need, in, out, (int)(n + 1), c->stream));
  PetscFunctionReturn(0);
}

/* ---------------------------------------------------------------- the tree */

/* radix keys of (coordinate, index): the order of the doubles as unsigned
   integers (-0 taken as +0, as the CPU's comparison does); values are indices */
__global__ void KeysKernel(PetscInt U, const double *xy, unsigned long long *kx, unsigned long long *ky, PetscInt *val)
{
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= U) return;
  for (int d = 0; d < 2; d++) {
    unsigned long long u = (unsigned long long)__double_as_longlong(xy[2 * i + d] + 0.0);
    u                    = (u >> 63) ? ~u : (u | 0x8000000000000000ull);
    (d ? ky : kx)[i]     = u;
  }
  val[i] = i;
}

/* one thread per segment (box or half box) of a round: its bounding box from
   the ends of its X and Y ranges, the split direction (the longer side, as in
   src/plan.c) and the offsets of its two halves; bb (when not NULL) receives
   (xmin, ymin, -xmax, -ymax), or PETSC_MAX_REAL for an empty box */
__global__ void SegmentKernel(PetscInt nseg, const PetscInt *off, const PetscInt *X, const PetscInt *Y, const double *xy, PetscInt *noff, char *dir, double *bb)
{
  const PetscInt s = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= nseg) return;
  const PetscInt o = off[s], n = off[s + 1] - o;
  double         xmin = 0, xmax = 0, ymin = 0, ymax = 0;
  if (n > 0) {
    xmin = xy[2 * X[o]];
    xmax = xy[2 * X[o + n - 1]];
    ymin = xy[2 * Y[o] + 1];
    ymax = xy[2 * Y[o + n - 1] + 1];
  }
  if (noff) {
    noff[2 * s]     = o;
    noff[2 * s + 1] = o + n / 2;
    if (s == nseg - 1) noff[2 * nseg] = o + n;
    dir[s] = (n >= 2 && ymax - ymin > xmax - xmin) ? 1 : 0;
  }
  if (bb) {
    double *q = bb + 4 * s;
    if (n > 0) {
      q[0] = xmin;
      q[1] = ymin;
      q[2] = -xmax;
      q[3] = -ymax;
    } else q[0] = q[1] = q[2] = q[3] = PETSC_MAX_REAL;
  }
}

/* one thread per list position: left[point] = 1 when the point is in the first
   half of its segment's list in the split direction */
__global__ void FlagKernel(PetscInt U, const PetscInt *seg, const PetscInt *off, const char *dir, const PetscInt *X, const PetscInt *Y, char *left)
{
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt s = seg[k], o = off[s], h = (off[s + 1] - o) / 2;
  left[(dir[s] ? Y : X)[k]] = (k - o < h) ? 1 : 0;
}

/* f[k] = the flag of the point at position k of the other list; f[U] = 0 */
__global__ void OtherFlagKernel(PetscInt U, const PetscInt *seg, const char *dir, const PetscInt *X, const PetscInt *Y, const char *left, PetscInt *f)
{
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k > U) return;
  f[k] = k < U ? (PetscInt)left[(dir[seg[k]] ? X : Y)[k]] : 0;
}

/* the split: the d-list stays, the other list is partitioned stably (first
   half: flagged points in order, then the rest in order); seg[k] becomes the
   half that position k falls in */
__global__ void PartitionKernel(PetscInt U, PetscInt *seg, const PetscInt *off, const char *dir, const PetscInt *X, const PetscInt *Y, const PetscInt *f, const PetscInt *sc, PetscInt *X2, PetscInt *Y2)
{
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt s = seg[k], o = off[s], h = (off[s + 1] - o) / 2, lb = sc[k] - sc[o];
  const int      d = dir[s];
  const PetscInt np = f[k] ? o + lb : o + h + (k - o - lb);
  (d ? X2 : Y2)[np] = (d ? X : Y)[k];
  (d ? Y2 : X2)[k]  = (d ? Y : X)[k];
  seg[k]            = 2 * s + (k - o >= h ? 1 : 0);
}

/* ------------------------------------------------ points in tree order */

/* fs[k], ft[k]: the point at position k of the leaf order is a source / one of this rank's targets */
__global__ void ClassifyKernel(PetscInt U, PetscInt N, int same, PetscInt t0, PetscInt t1, const PetscInt *X, PetscInt *fs, PetscInt *ft)
{
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k > U) return;
  if (k == U) {
    fs[k] = ft[k] = 0;
    return;
  }
  const PetscInt i = X[k], g = same ? i : i - N;
  fs[k] = i < N ? 1 : 0;
  ft[k] = ((same || i >= N) && g >= t0 && g < t1) ? 1 : 0;
}

/* leaf ranges from the leaf offsets of the point order */
__global__ void LeafRangeKernel(PetscInt nleaves, const PetscInt *off, const PetscInt *ss, const PetscInt *st, PetscInt *sleaf, PetscInt *tleaf)
{
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  sleaf[b] = ss[off[b]];
  tleaf[b] = st[off[b]];
}

/* sources and this rank's targets in tree order, with the strengths per unit
   density of src/plan.c (same expressions, so the same rounding) */
__global__ void ScatterPointsKernel(PetscInt U, PetscInt N, int same, PetscInt t0, const PetscInt *X, const PetscInt *seg, const PetscInt *fs, const PetscInt *ss, const PetscInt *ft, const PetscInt *st, const double *xy, const double *nrm, const double *wts, double alpha, double beta, PetscInt *sperm, double *sx, double *sy, double *cq, double *cdx, double *cdy, PetscInt *tperm, double *tx, double *ty, PetscInt *tleafof)
{
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt i = X[k];
  const double   twopi = 2.0 * PETSC_PI;
  if (fs[k]) {
    const PetscInt s = ss[k];
    const double   w = wts ? wts[i] : 1.0;
    sperm[s]         = i;
    sx[s]            = xy[2 * i];
    sy[s]            = xy[2 * i + 1];
    cq[s]            = -beta * w / twopi;
    cdx[s]           = nrm ? alpha * w * nrm[2 * i] / twopi : 0.0;
    cdy[s]           = nrm ? alpha * w * nrm[2 * i + 1] / twopi : 0.0;
  }
  if (ft[k]) {
    const PetscInt t = st[k];
    tperm[t]         = (same ? i : i - N) - t0;
    tx[t]            = xy[2 * i];
    ty[t]            = xy[2 * i + 1];
    tleafof[t]       = seg[k];
  }
}

/* centre and radius of every box from its bounding box; the scale floor of src/plan.c */
__global__ void GeometryKernel(PetscInt nboxes, const double *bb, double *cx, double *cy, double *scale)
{
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nboxes) return;
  double floor_s = 0.0;
  if (bb[0] < PETSC_MAX_REAL) floor_s = 0.5 * sqrt((bb[0] + bb[2]) * (bb[0] + bb[2]) + (bb[1] + bb[3]) * (bb[1] + bb[3])) * 1e-9;
  if (floor_s == 0.0) floor_s = 1.0;
  const double *q = bb + 4 * b;
  double        r = 0.0;
  if (q[0] == PETSC_MAX_REAL) cx[b] = cy[b] = 0.0;
  else {
    cx[b] = 0.5 * (q[0] - q[2]);
    cy[b] = 0.5 * (q[1] - q[3]);
    r     = 0.5 * sqrt((q[0] + q[2]) * (q[0] + q[2]) + (q[1] + q[3]) * (q[1] + q[3]));
  }
  scale[b] = fmax(r, floor_s);
}

/* ------------------------------------------------ interaction lists */

/* one thread per box t of level l+1 (c0 = its first global number): its
   strong (near) and far candidates, the children of its parent's strong
   list, separated by the theta-criterion on the expansion scales (see src/plan.c).  pass 0 counts into cnts[t], cntf[t] (and zeros entry nb); pass 1
   writes at the scanned offsets, in the order of src/plan.c */
__global__ void ListKernel(int pass, PetscInt nb, PetscInt c0, PetscInt span, double theta, const PetscInt *sleaf, const PetscInt *tleaf, const double *cx, const double *cy, const double *scale, const PetscInt *stroff, const PetscInt *str, PetscInt *cnts, PetscInt *cntf, PetscInt *nstr, PetscInt *far, PetscInt farbase, PetscInt *faroff)
{
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t > nb) return;
  if (t == nb) {
    if (!pass) cnts[nb] = cntf[nb] = 0;
    return;
  }
  PetscInt ks = 0, kf = 0;
  if (tleaf[(t + 1) * span] != tleaf[t * span]) { /* targets of this rank here */
    const PetscInt tp = t / 4;
    const double   xt = cx[c0 + t], yt = cy[c0 + t], rt = scale[c0 + t];
    for (PetscInt j = stroff[tp]; j < stroff[tp + 1]; j++) {
      for (int ch = 0; ch < 4; ch++) {
        const PetscInt s = 4 * str[j] + ch;
        if (sleaf[(s + 1) * span] == sleaf[s * span]) continue; /* no source there */
        const double d = sqrt((xt - cx[c0 + s]) * (xt - cx[c0 + s]) + (yt - cy[c0 + s]) * (yt - cy[c0 + s]));
        const double rs = scale[c0 + s], R = fmax(rt, rs), r = fmin(rt, rs);
        if (R + theta * r <= theta * d) {
          if (pass) far[farbase + cntf[t] + kf] = c0 + s;
          kf++;
        } else {
          if (pass) nstr[cnts[t] + ks] = s;
          ks++;
        }
      }
    }
  }
  if (!pass) {
    cnts[t] = ks;
    cntf[t] = kf;
  } else faroff[c0 + t + 1] = farbase + cntf[t] + kf;
}

/* ------------------------------------------------ the work of the product */

/* per leaf: neighbour sources, P2P pairs, source chunks of FMMCUDA_P2P_S, items and partials (see fmmcuda.h) */
__global__ void LeafWorkKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *nearoff, const PetscInt *near, PetscInt *ns, PetscInt *nsc, PetscInt *nit, PetscInt *npart)
{
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  if (b == nleaves) {
    nit[b] = npart[b] = 0;
    return;
  }
  const PetscInt nt = tleaf[b + 1] - tleaf[b];
  PetscInt       n  = 0;
  for (PetscInt j = nearoff[b]; j < nearoff[b + 1]; j++) n += sleaf[near[j] + 1] - sleaf[near[j]];
  const PetscInt k = (nt && n) ? (n + FMMCUDA_P2P_S - 1) / FMMCUDA_P2P_S : 0;
  ns[b]            = n;
  nsc[b]           = k;
  nit[b]           = k * ((nt + FMMCUDA_P2P_T - 1) / FMMCUDA_P2P_T);
  npart[b]         = k > 1 ? k * nt : 0;
}

struct MaxOp {
  __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};

/* statistics of the host plan, one block: max sources and targets per leaf, sum of neighbour sources, P2P pairs */
__global__ void __launch_bounds__(1024) StatsKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *ns, long long *out)
{
  typedef cub::BlockReduce<long long, 1024> R;
  __shared__ typename R::TempStorage        tmp;
  long long                                 v[4] = {0, 0, 0, 0};
  for (PetscInt b = threadIdx.x; b < nleaves; b += 1024) {
    const long long s = sleaf[b + 1] - sleaf[b], t = tleaf[b + 1] - tleaf[b];
    v[0]              = max(v[0], s);
    v[1]              = max(v[1], t);
    v[2] += ns[b];
    v[3] += (long long)ns[b] * t;
  }
  for (int q = 0; q < 4; q++) {
    const long long r = q < 2 ? R(tmp).Reduce(v[q], MaxOp()) : R(tmp).Sum(v[q]);
    if (threadIdx.x == 0) out[q] = r;
    __syncthreads();
  }
}

/* the P2P items of each leaf: its targets in blocks of FMMCUDA_P2P_T, its near
   list in chunks of FMMCUDA_P2P_S sources (the walk of a near list to the
   first source of each chunk is sequential, one thread per leaf) */
__global__ void ItemsKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *nearoff, const PetscInt *near, const PetscInt *ns, const PetscInt *nsc, const PetscInt *itoff, const PetscInt *partoff, PetscInt *leafpart, FMMP2PItem *it)
{
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nleaves) return;
  const PetscInt nt = tleaf[b + 1] - tleaf[b], K = nsc[b];
  leafpart[b] = K > 1 ? partoff[b] : -1;
  if (!K) return;
  PetscInt j = nearoff[b], pos = sleaf[near[j]], e = 0, n = itoff[b];
  for (PetscInt k = 0; k < K; k++) {
    const PetscInt e0 = k * FMMCUDA_P2P_S;
    while (e < e0) {
      const PetscInt end = sleaf[near[j] + 1], step = min(end - pos, e0 - e);
      pos += step;
      e += step;
      if (pos == end && j + 1 < nearoff[b + 1]) pos = sleaf[near[++j]];
    }
    for (PetscInt t = 0; t < nt; t += FMMCUDA_P2P_T, n++) {
      FMMP2PItem I;
      I.leaf = b;
      I.t0   = tleaf[b] + t;
      I.nt   = min((PetscInt)FMMCUDA_P2P_T, nt - t);
      I.e0   = e0;
      I.ne   = min((PetscInt)FMMCUDA_P2P_S, ns[b] - e0);
      I.j    = j;
      I.pos  = pos;
      I.part = K > 1 ? partoff[b] + k * nt + t : -1;
      it[n]  = I;
    }
  }
}

/* M2L: the target box of each pair, and per box the number of 32-pair chunks its run touches */
__global__ void PairTargetKernel(PetscInt nboxes, const PetscInt *faroff, PetscInt *pairtgt, PetscInt *tcnt)
{
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t > nboxes) return;
  if (t == nboxes) {
    tcnt[t] = 0;
    return;
  }
  const PetscInt g0 = faroff[t], g1 = faroff[t + 1];
  for (PetscInt g = g0; g < g1; g++) pairtgt[g] = t;
  tcnt[t] = g1 > g0 ? (g1 - 1) / 32 - g0 / 32 + 1 : 0;
}

/* M2L: the partial sums of each chunk (runs of one target box within it) */
__global__ void ChunkKernel(PetscInt nchunks, PetscInt npairs, const PetscInt *pairtgt, PetscInt *ccnt)
{
  const PetscInt ch = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (ch > nchunks) return;
  PetscInt n = 0;
  if (ch < nchunks)
    for (PetscInt g = 32 * ch; g < min(32 * ch + 32, npairs); g++)
      if (g == 32 * ch || pairtgt[g] != pairtgt[g - 1]) n++;
  ccnt[ch] = n;
}

#define LAUNCH_N(n) FMMCUDABlocks((PetscInt64)(n), BS), BS, 0, c->stream

/* the M2L chunks and partial sums from faroff (device) */
PetscErrorCode FMMCUDAM2LPlan(FMM_CUDA *c, const FMMPlan *P)
{
  Scratch   own = {NULL, 0}, *s = &own;
  PetscInt *tcnt, *ccnt, tot[2];

  PetscFunctionBegin;
  c->npairs  = P->nfar;
  c->nchunks = (c->npairs + 31) / 32;
  PetscCall(FMMCUDAMalloc((void **)&c->pairtgt, sizeof(PetscInt) * PetscMax(c->npairs, 1), "the M2L targets"));
  PetscCall(FMMCUDAMalloc((void **)&c->chunkpart, sizeof(PetscInt) * (c->nchunks + 1), "the M2L chunks"));
  PetscCall(FMMCUDAMalloc((void **)&c->tpart, sizeof(PetscInt) * (P->nboxes + 1), "the M2L partial offsets"));
  PetscCall(FMMCUDAMalloc((void **)&tcnt, sizeof(PetscInt) * (PetscMax(P->nboxes, c->nchunks) + 1), "the M2L counts"));
  ccnt = tcnt;
  PairTargetKernel<<<LAUNCH_N(P->nboxes + 1)>>>(P->nboxes, c->faroff, c->pairtgt, tcnt);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, tcnt, c->tpart, P->nboxes));
  ChunkKernel<<<LAUNCH_N(c->nchunks + 1)>>>(c->nchunks, c->npairs, c->pairtgt, ccnt);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, ccnt, c->chunkpart, c->nchunks));
  FMMCallCUDA(cudaMemcpyAsync(&tot[0], c->tpart + P->nboxes, sizeof(PetscInt), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(&tot[1], c->chunkpart + c->nchunks, sizeof(PetscInt), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  FMMCallCUDA(cudaFree(tcnt));
  if (own.tmp) FMMCallCUDA(cudaFree(own.tmp));
  PetscCheck(tot[0] == tot[1], PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: M2L partial count mismatch %" PetscInt_FMT " != %" PetscInt_FMT, tot[0], tot[1]);
  c->nparts = tot[0];
  PetscCall(FMMCUDAMalloc((void **)&c->part, sizeof(PetscReal) * (size_t)c->nparts * c->ne, "the M2L partial sums"));
  PetscFunctionReturn(0);
}

/* the P2P items and partials from the leaf ranges and near lists (device); the
   host statistics of P too */
PetscErrorCode FMMCUDAP2PPlan(FMM_CUDA *c, FMMPlan *P)
{
  Scratch    own = {NULL, 0}, *s = &own;
  PetscInt  *ns, *nit, *npart, *itoff, *partoff, tot[2];
  long long *dstat, stat[4];
  PetscInt   nl = P->nleaves;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc((void **)&ns, sizeof(PetscInt) * (4 * (size_t)(nl + 1)), "the P2P leaf counts"));
  nit     = ns + (nl + 1);
  npart   = nit + (nl + 1);
  itoff   = npart + (nl + 1);
  PetscCall(FMMCUDAMalloc((void **)&partoff, sizeof(PetscInt) * (nl + 1), "the P2P partial offsets"));
  PetscCall(FMMCUDAMalloc((void **)&dstat, sizeof(long long) * 4, "the plan statistics"));
  PetscCall(FMMCUDAMalloc((void **)&c->leafnsc, sizeof(PetscInt) * nl, "the P2P chunk counts"));
  PetscCall(FMMCUDAMalloc((void **)&c->leafpart, sizeof(PetscInt) * nl, "the P2P partial offsets"));
  LeafWorkKernel<<<LAUNCH_N(nl + 1)>>>(nl, c->sleaf, c->tleaf, c->nearoff, c->near, ns, c->leafnsc, nit, npart);
  FMMCheckLaunch();
  StatsKernel<<<1, 1024, 0, c->stream>>>(nl, c->sleaf, c->tleaf, ns, dstat);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, nit, itoff, nl));
  PetscCall(ExclusiveScan(c, s, npart, partoff, nl));
  FMMCallCUDA(cudaMemcpyAsync(stat, dstat, sizeof(stat), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(&tot[0], itoff + nl, sizeof(PetscInt), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(&tot[1], partoff + nl, sizeof(PetscInt), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  P->maxleafsrc = (PetscInt)stat[0];
  P->maxleaftgt = (PetscInt)stat[1];
  P->nearsrc    = (PetscInt)stat[2];
  P->p2ppairs   = (PetscCount)stat[3];
  c->nitems     = tot[0];
  c->p2psplit   = tot[1] > 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(FMMCUDAMalloc((void **)&c->items, sizeof(FMMP2PItem) * c->nitems, "the P2P work items"));
  PetscCall(FMMCUDAMalloc((void **)&c->p2ppart, sizeof(PetscReal) * tot[1], "the P2P partial sums"));
  if (nl) ItemsKernel<<<LAUNCH_N(nl)>>>(nl, c->sleaf, c->tleaf, c->nearoff, c->near, ns, c->leafnsc, itoff, partoff, c->leafpart, c->items);
  FMMCheckLaunch();
  /* the host keeps the first item of each leaf (the repetition layout launches by leaf ranges) */
  PetscCall(PetscMalloc1(nl + 1, &c->itemstart));
  FMMCallCUDA(cudaMemcpyAsync(c->itemstart, itoff, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  FMMCallCUDA(cudaFree(ns));
  FMMCallCUDA(cudaFree(partoff));
  FMMCallCUDA(cudaFree(dstat));
  if (own.tmp) FMMCallCUDA(cudaFree(own.tmp));
  PetscFunctionReturn(0);
}

/* the neighbour sources of each leaf (tree positions), concatenated over the leaves */
__global__ void NearSourcesKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *nearoff, const PetscInt *near, const PetscInt *nbroff, PetscInt *nbr)
{
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nleaves) return;
  PetscInt k = nbroff[b];
  for (PetscInt j = nearoff[b]; j < nearoff[b + 1]; j++)
    for (PetscInt i = sleaf[near[j]]; i < sleaf[near[j] + 1]; i++) nbr[k++] = i;
}

__global__ void NearCountKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *nearoff, const PetscInt *near, PetscInt *ns)
{
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  PetscInt n = 0;
  if (b < nleaves)
    for (PetscInt j = nearoff[b]; j < nearoff[b + 1]; j++) n += sleaf[near[j] + 1] - sleaf[near[j]];
  ns[b] = n;
}

__global__ void GlobalIndexKernel(PetscInt n, const PetscInt *sperm, PetscInt *nbr)
{
  const PetscInt e = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n) nbr[e] = sperm[nbr[e]];
}

/* the lists of the indexing and repetition layouts: c->nbroff and, per leaf,
   its neighbour sources as tree positions (*nbr) or, with global = true,
   as global source indices; the host gets the offsets when hnbroff is not NULL */
PetscErrorCode FMMCUDANearSources(FMM_CUDA *c, const FMMPlan *P, PetscBool global, PetscInt **nbr, PetscInt *hnbroff)
{
  Scratch   s = {NULL, 0};
  PetscInt *ns, nl = P->nleaves;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc((void **)&ns, sizeof(PetscInt) * (nl + 1), "the neighbour-source counts"));
  PetscCall(FMMCUDAMalloc((void **)&c->nbroff, sizeof(PetscInt) * (nl + 1), "the neighbour-source offsets"));
  PetscCall(FMMCUDAMalloc((void **)nbr, sizeof(PetscInt) * P->nearsrc, "the neighbour-source lists"));
  NearCountKernel<<<LAUNCH_N(nl + 1)>>>(nl, c->sleaf, c->nearoff, c->near, ns);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, &s, ns, c->nbroff, nl));
  if (nl) NearSourcesKernel<<<LAUNCH_N(nl)>>>(nl, c->sleaf, c->nearoff, c->near, c->nbroff, *nbr);
  FMMCheckLaunch();
  if (global && P->nearsrc) GlobalIndexKernel<<<LAUNCH_N(P->nearsrc)>>>(P->nearsrc, c->sperm, *nbr);
  FMMCheckLaunch();
  if (hnbroff) FMMCallCUDA(cudaMemcpyAsync(hnbroff, c->nbroff, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  FMMCallCUDA(cudaFree(ns));
  if (s.tmp) FMMCallCUDA(cudaFree(s.tmp));
  PetscFunctionReturn(0);
}

/*
  FMMCUDATreeBuild - the plan of src/plan.c, built on the GPU (see the top of this file).

  Input: xy, the U = N + Mg points of all ranks on the device (sources in
  global order, then, when the targets are not the sources, the targets in
  global order), nrm (2N, or NULL) and wts (N, or NULL) on the device.  Fills
  the device plan of c (sperm ... scale, faroff, far, nearoff, near, tleafof)
  and the counts and statistics of P (no host arrays).
*/
PetscErrorCode FMMCUDATreeBuild(FMM_CUDA *c, FMMPlan *P, PetscInt ct, PetscReal theta, PetscBool same, PetscInt t0, PetscReal alpha, PetscReal beta, const double *xy, const double *nrm, const double *wts, PetscInt U)
{
  const PetscInt      N = P->N, M = P->M;
  PetscInt            L = 0, nleaves, nboxes;
  Scratch             s = {NULL, 0};
  unsigned long long *kx, *ky, *kt;
  PetscInt           *val, *X, *Y, *X2, *Y2, *seg, *f, *sc, *offbase, *off, *noff, *fs, *ss, *ft, *st;
  char               *dir, *left;
  double             *bb;

  PetscFunctionBegin;
  while (L < 14 && (PetscInt64)ct * ((PetscInt64)1 << (2 * L)) < U) L++;
  nleaves    = (PetscInt)1 << (2 * L);
  nboxes     = FMMLevelStart(L + 1);
  P->L       = L;
  P->nleaves = nleaves;
  P->nboxes  = nboxes;

  /* work arrays of the tree (freed at the end) */
  PetscCall(FMMCUDAMalloc((void **)&kx, sizeof(unsigned long long) * 3 * (size_t)PetscMax(U, 1), "the sort keys"));
  ky = kx + PetscMax(U, 1);
  kt = ky + PetscMax(U, 1);
  PetscCall(FMMCUDAMalloc((void **)&val, sizeof(PetscInt) * (12 * (size_t)(U + 1)), "the point lists"));
  X   = val + (U + 1);
  Y   = X + (U + 1);
  X2  = Y + (U + 1);
  Y2  = X2 + (U + 1);
  seg = Y2 + (U + 1);
  f   = seg + (U + 1);
  sc  = f + (U + 1);
  fs  = sc + (U + 1);
  ss  = fs + (U + 1);
  ft  = ss + (U + 1);
  st  = ft + (U + 1);
  PetscCall(FMMCUDAMalloc((void **)&offbase, sizeof(PetscInt) * 2 * ((size_t)nleaves + 1), "the box offsets"));
  off  = offbase;
  noff = off + nleaves + 1;
  PetscCall(FMMCUDAMalloc((void **)&dir, 2 * (size_t)PetscMax(U, nleaves) + 2, "the split flags"));
  left = dir + PetscMax(U, nleaves) + 1;
  PetscCall(FMMCUDAMalloc((void **)&bb, sizeof(double) * 4 * (size_t)nboxes, "the bounding boxes"));

  /* the two sorted lists */
  if (U) {
    size_t need = 0;
    KeysKernel<<<LAUNCH_N(U)>>>(U, xy, kx, ky, val);
    FMMCheckLaunch();
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, kx, kt, val, X, (int)U, 0, 64, c->stream));
    PetscCall(ScratchEnsure(&s, need));
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s.tmp, need, kx, kt, val, X, (int)U, 0, 64, c->stream));
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s.tmp, need, ky, kt, val, Y, (int)U, 0, 64, c->stream));
  }
  FMMCallCUDA(cudaMemsetAsync(seg, 0, sizeof(PetscInt) * (U + 1), c->stream));
  {
    PetscInt h[2] = {0, U};
    FMMCallCUDA(cudaMemcpyAsync(off, h, sizeof(h), cudaMemcpyHostToDevice, c->stream));
  }

  /* 2L rounds of halving; the boxes of level l are the segments of round 2l */
  for (PetscInt r = 0; r < 2 * L; r++) {
    const PetscInt nseg = (PetscInt)1 << r;
    double        *lbb  = (r % 2 == 0) ? bb + 4 * FMMLevelStart(r / 2) : NULL;
    SegmentKernel<<<LAUNCH_N(nseg)>>>(nseg, off, X, Y, xy, noff, dir, lbb);
    FMMCheckLaunch();
    if (U) {
      FlagKernel<<<LAUNCH_N(U)>>>(U, seg, off, dir, X, Y, left);
      FMMCheckLaunch();
      OtherFlagKernel<<<LAUNCH_N(U + 1)>>>(U, seg, dir, X, Y, left, f);
      FMMCheckLaunch();
      PetscCall(ExclusiveScan(c, &s, f, sc, U));
      PartitionKernel<<<LAUNCH_N(U)>>>(U, seg, off, dir, X, Y, f, sc, X2, Y2);
      FMMCheckLaunch();
      { PetscInt *t = X; X = X2; X2 = t; t = Y; Y = Y2; Y2 = t; }
    }
    { PetscInt *t = off; off = noff; noff = t; }
  }
  /* the leaves' bounding boxes */
  SegmentKernel<<<LAUNCH_N(nleaves)>>>(nleaves, off, X, Y, xy, NULL, NULL, bb + 4 * FMMLevelStart(L));
  FMMCheckLaunch();

  /* sources and this rank's targets in tree order */
  PetscCall(FMMCUDAMalloc((void **)&c->sperm, sizeof(PetscInt) * N, "the source permutation"));
  PetscCall(FMMCUDAMalloc((void **)&c->sx, sizeof(double) * N, "the source coordinates"));
  PetscCall(FMMCUDAMalloc((void **)&c->sy, sizeof(double) * N, "the source coordinates"));
  PetscCall(FMMCUDAMalloc((void **)&c->cq, sizeof(double) * N, "the charges per unit density"));
  PetscCall(FMMCUDAMalloc((void **)&c->cdx, sizeof(double) * N, "the dipoles per unit density"));
  PetscCall(FMMCUDAMalloc((void **)&c->cdy, sizeof(double) * N, "the dipoles per unit density"));
  PetscCall(FMMCUDAMalloc((void **)&c->tperm, sizeof(PetscInt) * M, "the target permutation"));
  PetscCall(FMMCUDAMalloc((void **)&c->tx, sizeof(double) * M, "the target coordinates"));
  PetscCall(FMMCUDAMalloc((void **)&c->ty, sizeof(double) * M, "the target coordinates"));
  PetscCall(FMMCUDAMalloc((void **)&c->tleafof, sizeof(PetscInt) * M, "the target leaves"));
  PetscCall(FMMCUDAMalloc((void **)&c->sleaf, sizeof(PetscInt) * (nleaves + 1), "the leaf source ranges"));
  PetscCall(FMMCUDAMalloc((void **)&c->tleaf, sizeof(PetscInt) * (nleaves + 1), "the leaf target ranges"));
  ClassifyKernel<<<LAUNCH_N(U + 1)>>>(U, N, same ? 1 : 0, t0, t0 + M, X, fs, ft);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, &s, fs, ss, U));
  PetscCall(ExclusiveScan(c, &s, ft, st, U));
  LeafRangeKernel<<<LAUNCH_N(nleaves + 1)>>>(nleaves, off, ss, st, c->sleaf, c->tleaf);
  FMMCheckLaunch();
  if (U) ScatterPointsKernel<<<LAUNCH_N(U)>>>(U, N, same ? 1 : 0, t0, X, seg, fs, ss, ft, st, xy, nrm, wts, alpha, beta, c->sperm, c->sx, c->sy, c->cq, c->cdx, c->cdy, c->tperm, c->tx, c->ty, c->tleafof);
  FMMCheckLaunch();

  /* box geometry */
  PetscCall(FMMCUDAMalloc((void **)&c->cx, sizeof(double) * nboxes, "the box centres"));
  PetscCall(FMMCUDAMalloc((void **)&c->cy, sizeof(double) * nboxes, "the box centres"));
  PetscCall(FMMCUDAMalloc((void **)&c->scale, sizeof(double) * nboxes, "the box scales"));
  GeometryKernel<<<LAUNCH_N(nboxes)>>>(nboxes, bb, c->cx, c->cy, c->scale);
  FMMCheckLaunch();

  /* interaction lists, level by level (the strong lists of level l in stroff/str) */
  {
    PetscInt *stroff, *str, *cnts, *cntf, *sscan, *fscan, *far = NULL, nfar = 0, farcap = 0, one[3] = {0, (N > 0 && M > 0) ? 1 : 0, 0};
    PetscCall(FMMCUDAMalloc((void **)&c->faroff, sizeof(PetscInt) * (nboxes + 1), "the M2L offsets"));
    PetscCall(FMMCUDAMalloc((void **)&cnts, sizeof(PetscInt) * 4 * ((size_t)nleaves + 1), "the list counts"));
    cntf  = cnts + nleaves + 1;
    sscan = cntf + nleaves + 1;
    fscan = sscan + nleaves + 1;
    PetscCall(FMMCUDAMalloc((void **)&stroff, sizeof(PetscInt) * 2, "the strong lists"));
    PetscCall(FMMCUDAMalloc((void **)&str, sizeof(PetscInt), "the strong lists"));
    FMMCallCUDA(cudaMemcpyAsync(stroff, one, 2 * sizeof(PetscInt), cudaMemcpyHostToDevice, c->stream));
    FMMCallCUDA(cudaMemcpyAsync(str, &one[2], sizeof(PetscInt), cudaMemcpyHostToDevice, c->stream));
    FMMCallCUDA(cudaMemsetAsync(c->faroff, 0, 2 * sizeof(PetscInt), c->stream)); /* the root has no far field */
    for (PetscInt l = 0; l < L; l++) {
      const PetscInt nb = (PetscInt)1 << (2 * (l + 1)), c0 = FMMLevelStart(l + 1), span = (PetscInt)1 << (2 * (L - l - 1));
      PetscInt       tot[2], *nstr;
      ListKernel<<<LAUNCH_N(nb + 1)>>>(0, nb, c0, span, theta, c->sleaf, c->tleaf, c->cx, c->cy, c->scale, stroff, str, cnts, cntf, NULL, NULL, 0, NULL);
      FMMCheckLaunch();
      PetscCall(ExclusiveScan(c, &s, cnts, sscan, nb));
      PetscCall(ExclusiveScan(c, &s, cntf, fscan, nb));
      FMMCallCUDA(cudaMemcpyAsync(&tot[0], sscan + nb, sizeof(PetscInt), cudaMemcpyDeviceToHost, c->stream));
      FMMCallCUDA(cudaMemcpyAsync(&tot[1], fscan + nb, sizeof(PetscInt), cudaMemcpyDeviceToHost, c->stream));
      FMMCallCUDA(cudaStreamSynchronize(c->stream));
      PetscCall(FMMCUDAMalloc((void **)&nstr, sizeof(PetscInt) * (tot[0] + 1), "the strong lists"));
      if (nfar + tot[1] > farcap) { /* grow the far list */
        PetscInt *nf, cap = PetscMax(2 * farcap, nfar + tot[1]);
        PetscCall(FMMCUDAMalloc((void **)&nf, sizeof(PetscInt) * cap, "the M2L list"));
        if (nfar) FMMCallCUDA(cudaMemcpyAsync(nf, far, sizeof(PetscInt) * nfar, cudaMemcpyDeviceToDevice, c->stream));
        if (far) FMMCallCUDA(cudaFree(far));
        far    = nf;
        farcap = cap;
      }
      ListKernel<<<LAUNCH_N(nb)>>>(1, nb, c0, span, theta, c->sleaf, c->tleaf, c->cx, c->cy, c->scale, stroff, str, sscan, fscan, nstr, far, nfar, c->faroff);
      FMMCheckLaunch();
      nfar += tot[1];
      FMMCallCUDA(cudaFree(str));
      FMMCallCUDA(cudaFree(stroff));
      PetscCall(FMMCUDAMalloc((void **)&stroff, sizeof(PetscInt) * (nb + 1), "the strong lists"));
      FMMCallCUDA(cudaMemcpyAsync(stroff, sscan, sizeof(PetscInt) * (nb + 1), cudaMemcpyDeviceToDevice, c->stream));
      str = nstr;
    }
    c->far     = far;
    c->nearoff = stroff;
    c->near    = str;
    P->nfar    = nfar;
    FMMCallCUDA(cudaFree(cnts));
  }
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  FMMCallCUDA(cudaFree(kx));
  FMMCallCUDA(cudaFree(val));
  FMMCallCUDA(cudaFree(offbase));
  FMMCallCUDA(cudaFree(dir));
  FMMCallCUDA(cudaFree(bb));
  if (s.tmp) FMMCallCUDA(cudaFree(s.tmp));
  PetscFunctionReturn(0);
}
