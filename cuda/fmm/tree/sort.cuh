/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the sort of the
  points by x and by y (the key (coordinate, index), through short keys and
  their ties, SortShort), the first stage of the tree build.
*/
#pragma once

/* radix keys of (coordinate, index); values are indices */
__global__ void KeysKernel(PetscInt a, PetscInt b, const double *xy, unsigned long long *kx, unsigned long long *ky, PetscInt *val)
{
  FMMWaitPrior();
  const PetscInt i = a + (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= b) return;
  kx[i]  = OrderKey(xy[2 * i]);
  ky[i]  = OrderKey(xy[2 * i + 1]);
  val[i] = i;
}

/* ---- short keys: the same order from a sort of fewer bits

   A radix sort of the 64-bit keys above makes 8 passes.  Quantized to b bits
   (-mat_fmm_cuda_tree_key_bits, default 32) over the points' bounding box,
   q(x) = floor(2^b (x - xmin) / (xmax - xmin)) never decreases with x (each
   rounded operation is monotone), so a stable sort by q is the order by
   (x, index) except within runs of equal q whose points differ in x by less
   than a 2^-b-th of the box: FixRunsKernel sorts each such run of up to
   FIX_RUN points by (x, index) (one thread; two or three points in practice).
   Longer runs come where points crowd along one coordinate, as a curve's do
   where its tangent is perpendicular to it (about 50 points a run at 10^7
   points on the star curve), or when the box's width is 0 or overflows (all
   keys 0): if one of them is out of order, the points of all runs longer
   than FIX_RUN are selected (in order, so equal coordinates stay in index
   order) and sorted by their 64-bit keys, which orders them across runs as
   the short keys do.  Two sorts of 4 passes instead of 8, a faster sort
   stage (24 or 28 bits measured no faster than 32). */
#define FIX_RUN 32

typedef struct {
  unsigned long long lo[2], hi[2]; /* OrderKey of the least and greatest x and y */
} KeyBox;

struct KeyBoxOf {
  const double *xy;
  __device__ __forceinline__ KeyBox operator()(PetscInt i) const
  {
    const unsigned long long x = OrderKey(xy[2 * i]), y = OrderKey(xy[2 * i + 1]);
    return KeyBox{{x, y}, {x, y}};
  }
};

struct KeyBoxJoin {
  __device__ __forceinline__ KeyBox operator()(const KeyBox &a, const KeyBox &b) const
  {
    KeyBox r;
    for (int d = 0; d < 2; d++) {
      r.lo[d] = a.lo[d] < b.lo[d] ? a.lo[d] : b.lo[d];
      r.hi[d] = a.hi[d] > b.hi[d] ? a.hi[d] : b.hi[d];
    }
    return r;
  }
};

/* the b-bit key of coordinate v in [lo, hi]; 0 when the width is 0 or not finite (one run) */
__device__ __forceinline__ unsigned int ShortKey(double v, double lo, double hi, int bits)
{
  const double w = __dsub_rn(hi, lo), top = ldexp(1.0, bits);
  if (!(w > 0) || !isfinite(w)) return 0;
  const double t = __dmul_rn(__ddiv_rn(__dsub_rn(v, lo), w), top); /* t * 2^b is exact: no rounding after the division */
  return t >= top ? (unsigned int)(top - 1) : (unsigned int)t;
}

/* short radix keys of both coordinates, values are indices; clears the flags of FixRunsKernel */
__global__ void ShortKeysKernel(PetscInt U, int bits, const double *xy, const KeyBox *box, unsigned int *qx, unsigned int *qy, PetscInt *val, int *flag)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) flag[0] = flag[1] = 0;
  if (i >= U) return;
  qx[i]  = ShortKey(xy[2 * i], OrderValue(box->lo[0]), OrderValue(box->hi[0]), bits);
  qy[i]  = ShortKey(xy[2 * i + 1], OrderValue(box->lo[1]), OrderValue(box->hi[1]), bits);
  val[i] = i;
}

/* (coordinate d of point a, a) < (that of b, b); -0 equals +0 */
__device__ __forceinline__ bool CoordIndexLess(const double *xy, int d, PetscInt a, PetscInt b)
{
  const double u = xy[2 * a + d], v = xy[2 * b + d];
  return u < v || (u == v && a < b);
}

/* the first and last positions s, e of the run of equal keys q around pair
   (i, i + 1), looked for up to FIX_RUN positions either way; whether the run
   is longer than FIX_RUN (when not, [s, e] is all of it) */
__device__ __forceinline__ bool RunOf(PetscInt U, const unsigned int *q, PetscInt i, PetscInt *s, PetscInt *e)
{
  *s = i;
  *e = i + 1;
  while (*s > 0 && i - *s < FIX_RUN && q[*s - 1] == q[i]) (*s)--;
  while (*e + 1 < U && *e + 1 - *s < FIX_RUN && q[*e + 1] == q[i]) (*e)++;
  return *e - *s + 1 > FIX_RUN || (*s > 0 && q[*s - 1] == q[i]) || (*e + 1 < U && q[*e + 1] == q[i]); /* (the walk back can reach past FIX_RUN) */
}

/* list d (blockIdx.y) sorted by its short keys q: each run of equal keys of
   up to FIX_RUN points sorted by (coordinate, index) by the thread of its
   first pair; an unsorted pair in a longer run sets flag[d].  Only a run's
   first thread writes it, and no thread reads the indices of a short run */
__global__ void FixRunsKernel(PetscInt U, const unsigned int *qx, const unsigned int *qy, PetscInt *X, PetscInt *Y, const double *xy, int *flag)
{
  FMMWaitPrior();
  const PetscInt      i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  const int           d = blockIdx.y;
  const unsigned int *q = d ? qy : qx;
  PetscInt           *id = d ? Y : X, s, e;
  if (i + 1 >= U || q[i] != q[i + 1]) return;
  if (RunOf(U, q, i, &s, &e)) {
    if (CoordIndexLess(xy, d, id[i + 1], id[i])) flag[d] = 1;
    return;
  }
  if (s != i) return;
  {
    PetscInt r[FIX_RUN], n = e - s + 1;
    for (PetscInt k = 0; k < n; k++) {
      const PetscInt a = id[s + k];
      PetscInt       j = k;
      for (; j > 0 && CoordIndexLess(xy, d, a, r[j - 1]); j--) r[j] = r[j - 1];
      r[j] = a;
    }
    for (PetscInt k = 0; k < n; k++) id[s + k] = r[k];
  }
}

/* mark[i]: position i is in a run of more than FIX_RUN equal keys */
__global__ void LongRunsKernel(PetscInt U, const unsigned int *q, unsigned char *mark)
{
  FMMWaitPrior();
  const PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  PetscInt       s, e;
  if (i >= U) return;
  mark[i] = (i + 1 < U && q[i] == q[i + 1] && RunOf(U, q, i, &s, &e)) || (i > 0 && q[i - 1] == q[i] && RunOf(U, q, i - 1, &s, &e));
}

/* the 64-bit keys (coordinate d) and indices of the n selected positions pos of list id */
__global__ void RunKeysKernel(PetscInt n, const PetscInt *pos, const PetscInt *id, const double *xy, int d, unsigned long long *key, PetscInt *val)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  val[k] = id[pos[k]];
  key[k] = OrderKey(xy[2 * val[k] + d]);
}

/* the sorted indices back to the selected positions */
__global__ void RunScatterKernel(PetscInt n, const PetscInt *pos, const PetscInt *val, PetscInt *id)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) id[pos[k]] = val[k];
}

/* the order of (key, index) pairs: the merge of two sorted parts gives what
   one stable sort of the keys gives (cub::DeviceMerge is not stable) */
struct KeyIndexLess {
  template <class T>
  __device__ __forceinline__ bool operator()(const T &p, const T &q) const
  {
    return thrust::get<0>(p) < thrust::get<0>(q) || (thrust::get<0>(p) == thrust::get<0>(q) && thrust::get<1>(p) < thrust::get<1>(q));
  }
};

/* the other coordinate along each sorted list: XO[k] = y of point X[k], YO[k] =
   x of point Y[k]; the splits carry them with the lists, so that the kernels
   of a round read them in order instead of gathering from xy */
__global__ void OtherKernel(PetscInt U, const PetscInt *X, const PetscInt *Y, const double *xy, double *XO, double *YO)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  XO[k] = xy[2 * X[k] + 1];
  YO[k] = xy[2 * Y[k]];
}

/* the scratch of SortShort: its reduction's, or its two sorts' side by side */
static PetscErrorCode SortShortScratch(FMM_CUDA *c, PetscInt U, PetscInt bits, size_t *bytes, size_t *sortbytes)
{
  const KeyBox none = {{~0ull, ~0ull}, {0, 0}};
  const auto   in   = thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), KeyBoxOf{NULL});
  size_t       need = 0, n2 = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cub::DeviceReduce::Reduce(NULL, need, in, (KeyBox *)NULL, (int)U, KeyBoxJoin(), none, c->stream));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, n2, (unsigned int *)NULL, (unsigned int *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)U, 0, (int)bits, c->stream));
  n2         = (n2 + 255) & ~(size_t)255; /* the y sort's scratch after the x sort's */
  *sortbytes = n2;
  *bytes     = PetscMax(need, 2 * n2);
  PetscFunctionReturn(0);
}

/* the x and y lists X, Y of all U points sorted by (coordinate, index) through
   short keys (see ShortKey): the bounding box, the keys in kx's space, the
   two sorts into kt's (then the box, the flags and the marks), the runs
   fixed; the long runs, where one is out of order, sorted by 64-bit keys in
   the space of ky (keys), kx (sorted keys) and of the second list buffers
   (positions, indices) after Y (one more wait for the GPU, two where a
   long run is out of order); s holds SortShortScratch's bytes, n2 a sort's */
static PetscErrorCode SortShort(FMM_CUDA *c, Scratch *s, size_t n2, PetscInt U, PetscInt bits, const double *xy, unsigned long long *kx, unsigned long long *ky, unsigned long long *kt, PetscInt *val, PetscInt *X, PetscInt *Y)
{
  unsigned int  *qx = (unsigned int *)kx, *qy = qx + U, *qtx = (unsigned int *)kt, *qty = qtx + U;
  KeyBox        *box  = (KeyBox *)(kt + U);
  int           *flag = (int *)FMMCUDAReadbackTarget(2 * sizeof(int)), bad[2];
  unsigned char *mark = (unsigned char *)(box + 1) + 2 * sizeof(int);
  PetscInt      *pos = Y + (U + 1), *v0 = pos + (U + 1), *v1 = v0 + (U + 1);
  const KeyBox   none = {{~0ull, ~0ull}, {0, 0}};
  const auto     in   = thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), KeyBoxOf{xy});
  size_t         need;

  PetscFunctionBegin;
  if (!flag) flag = (int *)(box + 1);
  need = s->bytes;
  FMMCallCUDA(cub::DeviceReduce::Reduce(s->tmp, need, in, box, (int)U, KeyBoxJoin(), none, c->stream));
  FMMLaunch(ShortKeysKernel, LAUNCH_N(U), U, (int)bits, xy, box, qx, qy, val, flag);
  FMMCheckLaunch();
  /* the two sorts side by side, the y list's on the side stream 1: at 10^6
     points each is a chain of small passes that does not fill the GPU */
  FMMCallCUDA(cudaEventRecord(FMMCUDAStaging.evfork, c->stream));
  FMMCallCUDA(cudaStreamWaitEvent(FMMCUDAStaging.side[1], FMMCUDAStaging.evfork, 0));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, n2, qx, qtx, val, X, (int)U, 0, (int)bits, c->stream));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs((char *)s->tmp + n2, n2, qy, qty, val, Y, (int)U, 0, (int)bits, FMMCUDAStaging.side[1]));
  FMMCallCUDA(cudaEventRecord(FMMCUDAStaging.evjoin, FMMCUDAStaging.side[1]));
  FMMCallCUDA(cudaStreamWaitEvent(c->stream, FMMCUDAStaging.evjoin, 0));
  FMMLaunch(FixRunsKernel, dim3((unsigned)FMMCUDABlocks(U, BS), 2), BS, 0, c->stream, U, qtx, qty, X, Y, xy, flag);
  FMMCheckLaunch();
  PetscCall(FMMCUDAReadback(c->stream, bad, flag, sizeof(bad)));
  for (int d = 0; d < 2; d++) {
    PetscInt *id = d ? Y : X, *dn = (PetscInt *)flag, n = 0; /* the count read back where the flags were */
    if (!bad[d]) continue;
    FMMLaunch(LongRunsKernel, LAUNCH_N(U), U, d ? qty : qtx, mark);
    FMMCheckLaunch();
    FMMCallCUDA(cub::DeviceSelect::Flagged(NULL, need, thrust::counting_iterator<PetscInt>(0), mark, pos, dn, (int)U, c->stream));
    PetscCall(ScratchEnsure(c, s, need));
    FMMCallCUDA(cub::DeviceSelect::Flagged(s->tmp, need, thrust::counting_iterator<PetscInt>(0), mark, pos, dn, (int)U, c->stream));
    PetscCall(FMMCUDAReadback(c->stream, &n, dn, sizeof(n)));
    PetscCall(PetscInfo(NULL, "GPU tree build: %s list: %" PetscInt_FMT " of %" PetscInt_FMT " points in runs of more than %d equal %d-bit keys, one out of order: sorted by 64-bit keys\n", d ? "y" : "x", n, U, FIX_RUN, (int)bits));
    FMMLaunch(RunKeysKernel, LAUNCH_N(n), n, pos, id, xy, d, ky, v0);
    FMMCheckLaunch();
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, ky, kx, v0, v1, (int)n, 0, 64, c->stream));
    PetscCall(ScratchEnsure(c, s, need));
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, need, ky, kx, v0, v1, (int)n, 0, 64, c->stream));
    FMMLaunch(RunScatterKernel, LAUNCH_N(n), n, pos, v1, id);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

/* the sort stage of FMMCUDATreeBuild: the points up and sorted into the x and
   y lists X and Y, with the other coordinate of each point along them (XO,
   YO); the upload of the normals and weights started once the points are up */
static PetscErrorCode TreeSort(FMMTreeWork *w)
{
  FMM_CUDA               *c  = w->c;
  const FMMCUDATreeInput *in = w->in;
  const PetscInt          U = in->U, keybits = in->keybits, K = w->K, h = w->h;
  const PetscBool         shortkeys = w->shortkeys;
  const size_t            n2        = w->n2;
  const double           *xy        = in->xy;
  const auto              up        = in->up.points;
  const auto              late      = in->up.late;
  void                   *uctx = in->up.pctx, *lctx = in->up.lctx;
  Scratch                &s  = w->s;
  unsigned long long     *kx = w->kx, *ky = w->ky, *kt = w->kt;
  PetscInt               *val = w->val, *X = w->X, *Y = w->Y;
  double                 *XO = w->XO, *YO = w->YO;
  cudaEvent_t            &lated = w->lated;

  PetscFunctionBegin;
  /* the points go up in parts on a second stream, each part's two lists
     sorted while the next goes up, then merged: the upload of large
     problems overlaps the sort (sorting the x and y lists at the same time
     here, the y list on a second stream with its own scratch, measured
     slower) */
  if (U) {
    PetscInt      *X1 = K == 2 ? Y + (U + 1) : X, *Y1 = K == 2 ? Y + 2 * (U + 1) : Y; /* the parts' lists: the second buffers, when merged */
    cudaStream_t   us = K == 2 ? FMMCUDAStaging.side[1] : c->stream;              /* the upload's */
    cudaEvent_t    ev;
    size_t         need = 0;

    FMMCallCUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    if (K == 2) {
      FMMCallCUDA(cudaEventRecord(ev, c->stream)); /* xy is allocated */
      FMMCallCUDA(cudaStreamWaitEvent(us, ev, 0));
    }
    if (!shortkeys) need = s.bytes; /* the block's scratch, sized above for the larger part */
    for (PetscInt j = 0; j < K; j++) {
      const PetscInt a = j ? h : 0, b = j == K - 1 ? U : h;
      if (up) PetscCall(up(c, uctx, a, b, us));
      FMMCallCUDA(cudaEventRecord(ev, us));
      if (us != c->stream) FMMCallCUDA(cudaStreamWaitEvent(c->stream, ev, 0));
      if (shortkeys) PetscCall(SortShort(c, &s, n2, U, keybits, xy, kx, ky, kt, val, X, Y));
      else {
        FMMLaunch(KeysKernel, LAUNCH_N(b - a), a, b, xy, kx, ky, val);
        FMMCheckLaunch();
        FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s.tmp, need, kx + a, kt + a, val + a, X1 + a, (int)(b - a), 0, 64, c->stream));
        FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s.tmp, need, ky + a, kt + U + a, val + a, Y1 + a, (int)(b - a), 0, 64, c->stream));
      }
    }
    if (K == 2) { /* the merges write keys over the sorts' inputs (XO, YO below) */
      const auto xa = thrust::make_zip_iterator(kt, X1), xb = thrust::make_zip_iterator(kt + h, X1 + h), xo = thrust::make_zip_iterator(kx, X);
      const auto ya = thrust::make_zip_iterator(kt + U, Y1), yb = thrust::make_zip_iterator(kt + U + h, Y1 + h), yo = thrust::make_zip_iterator(ky, Y);
      FMMCallCUDA(cub::DeviceMerge::MergeKeys(NULL, need, xa, h, xb, U - h, xo, KeyIndexLess(), c->stream));
      PetscCall(ScratchEnsure(c, &s, need));
      FMMCallCUDA(cub::DeviceMerge::MergeKeys(s.tmp, need, xa, h, xb, U - h, xo, KeyIndexLess(), c->stream));
      FMMCallCUDA(cub::DeviceMerge::MergeKeys(s.tmp, need, ya, h, yb, U - h, yo, KeyIndexLess(), c->stream));
    }
    FMMLaunch(OtherKernel, LAUNCH_N(U), U, X, Y, xy, XO, YO);
    FMMCheckLaunch();
    if (late) PetscCall(late(c, lctx, ev, &lated)); /* after the points, while the GPU sorts and splits */
    FMMCallCUDA(cudaEventDestroy(ev));
  } else if (late) PetscCall(late(c, lctx, NULL, &lated));
  PetscFunctionReturn(0);
}
