/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the walks of
  spread leaves next to dense ones (FMMWalks; src/fmm/walk.c builds the same
  lists on the host), built on the GPU at setup.  walk.cu runs them in each
  product.

  The host walks a point over marks of every box (some / every leaf below it
  that counts lies in the walked leaf's near field).  Here a box's marks are
  two counts instead: the leaves below box c are the range [r0, r1) of the
  leaf numbering, so with the walked leaf's near list ascending and a running
  count over it, "some" and "every" are two binary searches and a difference
  of prefix sums over the leaves.  Each point's walk is one thread, run twice
  (count, then fill), in the host's order: the lists equal the host's entry
  for entry.
*/

#define WALK_LMAX  15                 /* deepest tree of the walks (PetscInt box numbers of 32 bits) */
#define WALK_STACK (3 * WALK_LMAX + 4) /* a depth-first walk pushes at most 3 siblings a level */
#ifndef WALK_MARKS_MAX
  #define WALK_MARKS_MAX (1 << 26) /* bytes of marks (a byte per walked leaf and box) at most; beyond, walks search */
#endif

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

/* per leaf b (b = nl: zeros, the scans' totals): has sources, has targets,
   the entries its near list keeps (none for a walked leaf, and no walked
   leaf in any list); big[b]: walked (near field over thr sources) */
__global__ void WalkLeafKernel(PetscInt nl, PetscInt thr, const PetscInt *ns, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, const PetscInt *tleaf, PetscInt *fs, PetscInt *ft, PetscInt *keep)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nl) return;
  if (b == nl) {
    fs[b] = ft[b] = keep[b] = 0;
    return;
  }
  PetscInt k = 0;
  if (ns[b] <= thr)
    for (PetscInt j = nearoff[b]; j < nearoff[b + 1]; j++) k += ns[near[j]] <= thr;
  fs[b]   = sleaf[b + 1] > sleaf[b];
  ft[b]   = tleaf[b + 1] > tleaf[b];
  keep[b] = k;
}

/* per walked leaf k = 0..nbig-1 (bl[k]): its near list's length, targets and sources (k = nbig: zeros) */
__global__ void WalkBigKernel(PetscInt nbig, const PetscInt *bl, const PetscInt *nearoff, const PetscInt *sleaf, const PetscInt *tleaf, PetscInt *gn, PetscInt *tn, PetscInt *sn)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k > nbig) return;
  if (k == nbig) {
    gn[k] = tn[k] = sn[k] = 0;
    return;
  }
  const PetscInt B = bl[k];
  gn[k]            = nearoff[B + 1] - nearoff[B];
  tn[k]            = tleaf[B + 1] - tleaf[B];
  sn[k]            = sleaf[B + 1] - sleaf[B];
}

/* entry e of the walked leaves' near lists, gathered: key its leaf, value its walked leaf k */
__global__ void WalkGatherKernel(PetscInt ng, PetscInt nbig, const PetscInt *bl, const PetscInt *goff, const PetscInt *nearoff, const PetscInt *near, unsigned *key, PetscInt *val)
{
  FMMWaitPrior();
  const PetscInt e = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= ng) return;
  const PetscInt k = FMMLastLE(goff, 0, nbig, e);
  key[e]           = (unsigned)near[nearoff[bl[k]] + e - goff[k]];
  val[e]           = k;
}

/* the pairs (leaf, k) sorted by leaf to (k, leaf) for the second, stable, sort by k */
__global__ void WalkSwapKernel(PetscInt ng, const unsigned *key, const PetscInt *val, unsigned *key2, PetscInt *val2)
{
  FMMWaitPrior();
  const PetscInt e = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= ng) return;
  key2[e] = (unsigned)val[e];
  val2[e] = (PetscInt)key[e];
}

/* per gathered entry (e = ng: zeros): its leaf has sources (the targets'
   walks count it); its leaf has targets and is not walked (the sources') */
__global__ void WalkEntryKernel(PetscInt ng, const PetscInt *g, const PetscInt *fs, const PetscInt *ft, const PetscInt *ns, PetscInt thr, PetscInt *es, PetscInt *et)
{
  FMMWaitPrior();
  const PetscInt e = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (e > ng) return;
  if (e == ng) {
    es[e] = et[e] = 0;
    return;
  }
  es[e] = fs[g[e]];
  et[e] = ft[g[e]] && ns[g[e]] <= thr;
}

/* the leaves of one walked leaf's near field that count, as the host's marks
   (src/fmm/walk.c, Marks()): g[g0..g1) ascending, pin[] the running count of
   the entries that count, hall[r] the leaves below r that count.  With mk,
   the marks of every box computed before (WalkMarksKernel), bits sh, sh + 1 */
struct WalkSet {
  const PetscInt      *g, *pin, *hall;
  PetscInt             g0, g1;
  int                  L;
  const unsigned char *mk;
  int                  sh;
  __device__ __forceinline__ PetscInt Lower(PetscInt r) const /* the first entry >= r */
  {
    PetscInt lo = g0, hi = g1;
    while (lo < hi) {
      const PetscInt m = lo + (hi - lo) / 2;
      if (g[m] < r) lo = m + 1;
      else hi = m;
    }
    return lo;
  }
  /* box c (numbered level by level): some leaf below it counts and lies in the set; every one does */
  __device__ __forceinline__ void Search(PetscInt c, bool *any, bool *full) const
  {
    const int      l = (63 - __clzll(3 * (long long)c + 1)) / 2, s = 2 * (L - l);
    const PetscInt b = c - ((((PetscInt)1) << (2 * l)) - 1) / 3, r0 = b << s, r1 = (b + 1) << s;
    const PetscInt in = pin[Lower(r1)] - pin[Lower(r0)];
    *any              = in > 0;
    *full             = in == hall[r1] - hall[r0];
  }
  __device__ __forceinline__ void Marks(PetscInt c, bool *any, bool *full) const
  {
    if (!mk) Search(c, any, full);
    else {
      const unsigned m = mk[c] >> sh;
      *any             = m & 1;
      *full            = (m >> 1) & 1;
    }
  }
};

/* what a walk reads: the tree, the walked leaves' gathered near lists, their marks (or NULL) */
struct WalkTree {
  int                  L;
  double               theta;
  PetscInt             nbig, nb;
  const PetscInt      *bl, *goff, *g, *sleaf, *tleaf;
  const double        *cx, *cy, *scale;
  const unsigned char *mk;
};

/* the marks of box c for walked leaf k (thread k nb + c): bits 0, 1 those of
   its targets' walks (pin es, hall hs), bits 2, 3 those of its sources'
   (pin et, hall ht) */
__global__ void WalkMarksKernel(WalkTree T, const PetscInt *es, const PetscInt *hs, const PetscInt *et, const PetscInt *ht, unsigned char *mk)
{
  FMMWaitPrior();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)T.nbig * T.nb) return;
  const PetscInt k = (PetscInt)(i / T.nb), c = (PetscInt)(i % T.nb);
  const WalkSet  St = {T.g, es, hs, T.goff[k], T.goff[k + 1], T.L, NULL, 0}, Ss = {T.g, et, ht, T.goff[k], T.goff[k + 1], T.L, NULL, 0};
  bool           a, f, as, fs;
  St.Search(c, &a, &f);
  Ss.Search(c, &as, &fs);
  mk[i] = (unsigned char)(a | (f << 1) | (as << 2) | (fs << 3));
}

/* the walk of the point (x, y), as the host's Walk(): a box of the set that
   is full and separated from the point goes to far[], a leaf that is not to
   near[]; counts nf, nn, and the points of the near leaves (cnt[]) in pairs */
template <bool fill, class K>
__device__ void WalkPoint(const WalkSet &S, double x, double y, double theta, const double *cx, const double *cy, const double *scale, const PetscInt *cnt, K *far, K *near, PetscInt *nf, PetscInt *nn, long long *pairs)
{
  const PetscInt l0 = ((((PetscInt)1) << (2 * S.L)) - 1) / 3;
  PetscInt       stack[WALK_STACK];
  int            top = 0;
  bool           any, full;

  S.Marks(0, &any, &full);
  if (any) stack[top++] = 0;
  while (top) {
    const PetscInt c = stack[--top];
    const double   dx = x - cx[c], dy = y - cy[c];
    S.Marks(c, &any, &full);
    if (full && scale[c] <= theta * sqrt(dx * dx + dy * dy)) { /* FMMSeparated() with a box of radius 0 */
      if (fill) far[*nf] = (K)c;
      (*nf)++;
    } else if (c >= l0) {
      if (fill) near[*nn] = (K)(c - l0);
      (*nn)++;
      *pairs += cnt[c - l0 + 1] - cnt[c - l0];
    } else
      for (int k = 3; k >= 0; k--) {
        const PetscInt ch = 4 * c + 1 + k;
        S.Marks(ch, &any, &full);
        if (any) stack[top++] = ch;
      }
  }
}

/* one side of the walks: its walked points (v < n; off[k]: those before
   walked leaf k's, first[]: where each leaf's points start), their
   coordinates, the marks' running counts and leaf counts (pin, hall) and
   bits (sh), and the other side's leaf offsets (cnt: the point pairs) */
typedef struct {
  PetscInt        n;
  const PetscInt *off, *first, *pin, *hall, *cnt;
  const double   *x, *y;
  int             sh;
} WalkSide;

/* thread v: walked point v of side W.  Count: its far and near entries (cf,
   cn; v = n: zeros) and pairs.  Fill: its far boxes and near leaves at
   foff[v], noff[v]; with fval, nval the point's number beside each (the
   sources' pairs, grouped later); with pt, the point's number at v (the
   targets' wt) */
template <bool fill, class K>
__global__ void WalkKernel(WalkTree T, WalkSide W, PetscInt *cf, PetscInt *cn, unsigned long long *pairs, const PetscInt *foff, K *far, PetscInt *fval, const PetscInt *noff, K *near, PetscInt *nval, PetscInt *pt)
{
  FMMWaitPrior();
  const PetscInt v = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (v > W.n) return;
  if (v == W.n) {
    if (!fill) cf[v] = cn[v] = 0;
    return;
  }
  const PetscInt k = FMMLastLE(W.off, 0, T.nbig, v), i = W.first[T.bl[k]] + v - W.off[k];
  const WalkSet  S = {T.g, W.pin, W.hall, T.goff[k], T.goff[k + 1], T.L, T.mk ? T.mk + (long long)k * T.nb : NULL, W.sh};
  PetscInt       nf = 0, nn = 0;
  long long      pr = 0;
  WalkPoint<fill>(S, W.x[i], W.y[i], T.theta, T.cx, T.cy, T.scale, W.cnt, fill ? far + foff[v] : NULL, fill ? near + noff[v] : NULL, &nf, &nn, &pr);
  if (fill) {
    if (pt) pt[v] = i;
    if (fval)
      for (PetscInt j = 0; j < nf; j++) fval[foff[v] + j] = i;
    if (nval)
      for (PetscInt j = 0; j < nn; j++) nval[noff[v] + j] = i;
  } else {
    cf[v] = nf;
    cn[v] = nn;
    if (pr) atomicAdd(pairs, (unsigned long long)pr); /* integers: exact in any order */
  }
}

/* the run heads of sorted keys: head[j] = key[j] != key[j - 1] (head[n] = 0) */
__global__ void RunHeadKernel(PetscInt n, const unsigned *key, PetscInt *head)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j > n) return;
  head[j] = j < n && (!j || key[j] != key[j - 1]);
}

/* run r (rs: the scan of the heads): its key and first entry; off[runs] = n */
__global__ void RunOffKernel(PetscInt n, const unsigned *key, const PetscInt *head, const PetscInt *rs, PetscInt *ukey, PetscInt *off)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j > n) return;
  if (j == n) off[rs[n]] = n;
  else if (head[j]) {
    ukey[rs[j]] = (PetscInt)key[j];
    off[rs[j]]  = j;
  }
}

/* the near lists without the walked leaves (noff: the scan of keep) */
__global__ void NearFilterKernel(PetscInt nl, PetscInt thr, const PetscInt *ns, const PetscInt *nearoff, const PetscInt *near, const PetscInt *noff, PetscInt *out)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nl || ns[b] > thr) return;
  PetscInt k = noff[b];
  for (PetscInt j = nearoff[b]; j < nearoff[b + 1]; j++)
    if (ns[near[j]] <= thr) out[k++] = near[j];
}

/* up to 8 device sizes (PetscInt, or the pairs' unsigned long long), gathered for one readback */
typedef struct {
  const PetscInt           *p[8];
  const unsigned long long *pairs;
} WalkTotals;

__global__ void WalkTotalsKernel(int n, WalkTotals t, long long *out)
{
  FMMWaitPrior();
  if (threadIdx.x || blockIdx.x) return;
  for (int k = 0; k < n; k++) out[k] = *t.p[k];
  if (t.pairs) out[n] = (long long)*t.pairs;
}

static PetscErrorCode WalkReadback(FMM_CUDA *c, long long *d, int n, WalkTotals t, long long *h)
{
  PetscFunctionBegin;
  FMMLaunch(WalkTotalsKernel, 1, 32, 0, c->stream, n, t, d);
  FMMCheckLaunch();
  PetscCall(FMMCUDAReadback(c->stream, h, d, sizeof(long long) * (n + (t.pairs ? 1 : 0))));
  PetscFunctionReturn(0);
}

static int WalkBits(PetscInt n) /* bits of the keys below n */
{
  int b = 1;
  while (b < 32 && ((PetscInt64)1 << b) < n) b++;
  return b;
}

/* (key, val) sorted by key, stably, into (key2, val2) */
static PetscErrorCode WalkSort(FMM_CUDA *c, Scratch *s, PetscInt n, int bits, const unsigned *key, unsigned *key2, const PetscInt *val, PetscInt *val2)
{
  size_t need = 0;

  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(0);
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, key, key2, val, val2, (int)n, 0, bits, c->stream));
  PetscCall(ScratchEnsure(c, s, need));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, need, key, key2, val, val2, (int)n, 0, bits, c->stream));
  PetscFunctionReturn(0);
}

/* n pairs (key[0..n), val) grouped by key, as Group() of src/fmm/walk.c:
   sorted stably into (key[n+1..], sval), the keys that occur to ukey[], the
   first value of each to off[] (the count of keys: head[2n+1], head has
   2(n+1) entries) */
static PetscErrorCode WalkGroup(FMM_CUDA *c, Scratch *s, PetscInt n, int bits, unsigned *key, const PetscInt *val, PetscInt *ukey, PetscInt *off, PetscInt *sval, PetscInt *head)
{
  const unsigned *sk = key + n + 1;

  PetscFunctionBegin;
  PetscCall(WalkSort(c, s, n, bits, key, key + n + 1, val, sval));
  FMMLaunch(RunHeadKernel, LAUNCH_N(n + 1), n, sk, head);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, head, head + n + 1, n));
  FMMLaunch(RunOffKernel, LAUNCH_N(n + 1), n, sk, (const PetscInt *)head, (const PetscInt *)(head + n + 1), ukey, off);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

/* the walks of the plan on the GPU (FMMWalksApply() holds; once per tree):
   the near counts come back to the host, which picks the leaves to walk
   (FMMWalksCount()); the rest stays on the GPU, and the near lists lose the
   walked leaves in place.  Four waits for sizes in all. */
PetscErrorCode FMMCUDAWalks(FMMContext *ctx, FMM_CUDA *c)
{
  FMMPlan       *P  = &ctx->plan;
  const PetscInt nl = P->nleaves, nb = P->nboxes;
  PetscInt      *dns, *ns, *tleaf, thr, nbig, *bl, *w0, *w1, *w2;
  PetscInt       ng, nwt, nws, nnew, nwm, nwp, nlp, nxp;
  long long     *dtot, tot[9];
  unsigned      *uk, *w3;
  unsigned char *mk = NULL;
  Scratch        s = {0};
  PetscLogDouble t[4];

  PetscFunctionBegin;
  PetscCheck(P->L <= WALK_LMAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "MATFMM CUDA: walks of a tree of %" PetscInt_FMT " levels (at most %d)", P->L, WALK_LMAX);
  PetscCall(PetscTime(&t[0]));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dns, sizeof(PetscInt) * (nl + 1), "the near-field counts"));
  FMMLaunch(NearCountKernel, LAUNCH_N(nl), nl, c->nearoff, c->near, c->sleaf, dns);
  FMMCheckLaunch();
  PetscCall(PetscMalloc2(nl, &ns, nl + 1, &tleaf));
  FMMCallCUDA(cudaMemcpyAsync(ns, dns, sizeof(PetscInt) * nl, cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(tleaf, c->tleaf, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  nbig = FMMWalksCount(nl, tleaf, ns, &thr);
  if (!nbig) {
    PetscCall(FMMCUDAFree(c->stream, dns));
    PetscCall(PetscFree2(ns, tleaf));
    PetscFunctionReturn(0);
  }
  PetscCall(PetscMalloc1(nbig, &bl));
  nbig = 0;
  for (PetscInt b = 0; b < nl; b++)
    if (ns[b] > thr) bl[nbig++] = b;
  PetscCall(PetscFree2(ns, tleaf));
  PetscCall(PetscTime(&t[1]));

  /* the walked leaves' sizes and offsets; per leaf whether it has sources,
     targets, and the entries its near list keeps, and their prefix sums */
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dtot, sizeof(long long) * 9 + sizeof(unsigned long long), "the walks' totals"));
  unsigned long long *dpairs = (unsigned long long *)(dtot + 9);
  FMMCallCUDA(cudaMemsetAsync(dpairs, 0, sizeof(unsigned long long), c->stream));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w0, sizeof(PetscInt) * (7 * (nbig + 1) + 6 * (nl + 1)), "the walks' work"));
  PetscInt *dbl = w0, *gn = dbl + (nbig + 1), *tn = gn + (nbig + 1), *sn = tn + (nbig + 1), *goff = sn + (nbig + 1), *toff = goff + (nbig + 1), *soff = toff + (nbig + 1);
  PetscInt *fs = soff + (nbig + 1), *ft = fs + (nl + 1), *keep = ft + (nl + 1), *hs = keep + (nl + 1), *ht = hs + (nl + 1), *noff = ht + (nl + 1);
  FMMCallCUDA(cudaMemcpyAsync(dbl, bl, sizeof(PetscInt) * nbig, cudaMemcpyHostToDevice, c->stream));
  FMMLaunch(WalkBigKernel, LAUNCH_N(nbig + 1), nbig, (const PetscInt *)dbl, c->nearoff, c->sleaf, c->tleaf, gn, tn, sn);
  FMMCheckLaunch();
  FMMLaunch(WalkLeafKernel, LAUNCH_N(nl + 1), nl, thr, (const PetscInt *)dns, c->nearoff, c->near, c->sleaf, c->tleaf, fs, ft, keep);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, &s, gn, tn, sn, goff, toff, soff, nbig));
  PetscCall(ExclusiveScan3(c, &s, fs, ft, keep, hs, ht, noff, nl));
  PetscCall(WalkReadback(c, dtot, 4, WalkTotals{{goff + nbig, toff + nbig, soff + nbig, noff + nl}, NULL}, tot));
  ng   = (PetscInt)tot[0];
  nwt  = (PetscInt)tot[1];
  nws  = (PetscInt)tot[2];
  nnew = (PetscInt)tot[3];

  /* the walked leaves' near lists gathered, each ascending (stable sorts by
     leaf, then by walked leaf), and the running counts of the entries that
     count; the walks counted; their offsets; the filtered near lists */
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&uk, sizeof(unsigned) * 2 * (ng + 1), "the walks' work"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w1, sizeof(PetscInt) * (5 * (ng + 1) + 4 * (nwt + 1) + 4 * (nws + 1) + PetscMax(nnew, 1)), "the walks' work"));
  PetscInt *gv = w1, *g = gv + (ng + 1), *g2 = g + (ng + 1), *es = g2 + (ng + 1), *et = es + (ng + 1);
  PetscInt *cm = et + (ng + 1), *cp = cm + (nwt + 1), *wmoff = cp + (nwt + 1), *wpoff = wmoff + (nwt + 1);
  PetscInt *cf = wpoff + (nwt + 1), *cn = cf + (nws + 1), *lpoff = cn + (nws + 1), *xpoff = lpoff + (nws + 1), *nnear = xpoff + (nws + 1);
  WalkTree T = {(int)P->L, ctx->par->theta, nbig, nb, dbl, goff, g, c->sleaf, c->tleaf, c->cx, c->cy, c->scale, NULL};
  if (ng) {
    FMMLaunch(WalkGatherKernel, LAUNCH_N(ng), ng, nbig, (const PetscInt *)dbl, (const PetscInt *)goff, c->nearoff, c->near, uk, gv);
    FMMCheckLaunch();
    PetscCall(WalkSort(c, &s, ng, WalkBits(nl), uk, uk + (ng + 1), gv, g2));
    FMMLaunch(WalkSwapKernel, LAUNCH_N(ng), ng, (const unsigned *)(uk + (ng + 1)), (const PetscInt *)g2, uk, gv);
    FMMCheckLaunch();
    PetscCall(WalkSort(c, &s, ng, WalkBits(nbig), uk, uk + (ng + 1), gv, g));
  }
  FMMLaunch(WalkEntryKernel, LAUNCH_N(ng + 1), ng, (const PetscInt *)g, (const PetscInt *)fs, (const PetscInt *)ft, (const PetscInt *)dns, thr, es, et);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, &s, es, et, et, gv, g2, g2, ng));
  if ((PetscInt64)nbig * nb <= WALK_MARKS_MAX) { /* the marks of every box once, not two searches a box a visit */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&mk, (size_t)nbig * nb, "the walks' marks"));
    FMMLaunch(WalkMarksKernel, LAUNCH_N((PetscInt64)nbig * nb), T, (const PetscInt *)gv, (const PetscInt *)hs, (const PetscInt *)g2, (const PetscInt *)ht, mk);
    FMMCheckLaunch();
    T.mk = mk;
  }
  /* the targets walk over the sources of their leaf's near field, the sources over its targets but the walked leaves' */
  const WalkSide Wt = {nwt, toff, c->tleaf, gv, hs, c->sleaf, c->tx, c->ty, 0}, Ws = {nws, soff, c->sleaf, g2, ht, c->tleaf, c->sx, c->sy, 2};
  FMMLaunch(WalkKernel<false, PetscInt>, LAUNCH_N(nwt + 1), T, Wt, cm, cp, dpairs, (const PetscInt *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (const PetscInt *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (PetscInt *)NULL);
  FMMCheckLaunch();
  FMMLaunch(WalkKernel<false, PetscInt>, LAUNCH_N(nws + 1), T, Ws, cf, cn, dpairs, (const PetscInt *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (const PetscInt *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (PetscInt *)NULL);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, &s, cm, cp, cp, wmoff, wpoff, wpoff, nwt)); /* (a third scan of cp: one CUB scan of triples for all) */
  PetscCall(ExclusiveScan3(c, &s, cf, cn, cn, lpoff, xpoff, xpoff, nws));
  FMMLaunch(NearFilterKernel, LAUNCH_N(nl), nl, thr, (const PetscInt *)dns, c->nearoff, c->near, (const PetscInt *)noff, nnear);
  FMMCheckLaunch();
  PetscCall(WalkReadback(c, dtot, 4, WalkTotals{{wmoff + nwt, wpoff + nwt, lpoff + nws, xpoff + nws}, dpairs}, tot));
  nwm       = (PetscInt)tot[0];
  nwp       = (PetscInt)tot[1];
  nlp       = (PetscInt)tot[2];
  nxp       = (PetscInt)tot[3];
  P->wpairs = (PetscCount)tot[4];
  PetscCall(PetscTime(&t[2]));

  /* the walks' block (walk.cu reads it): wt, wmoff, wm, wpoff, wp, lb, lsoff, ls, xl, xsoff, xs (lb, xl: room for a key a pair) */
  {
    const PetscInt len[11] = {nwt, nwt + 1, nwm, nwt + 1, nwp, nlp, nlp + 1, nlp, nxp, nxp + 1, nxp};
    PetscInt     **dst[11] = {&c->wt, &c->wmoff, &c->wm, &c->wpoff, &c->wp, &c->lb, &c->lsoff, &c->ls, &c->xl, &c->xsoff, &c->xs};
    PetscInt       n       = 0;
    for (int k = 0; k < 11; k++) n += len[k];
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->walk, sizeof(PetscInt) * n, "the walks"));
    n = 0;
    for (int k = 0; k < 11; k++) {
      *dst[k] = c->walk + n;
      n += len[k];
    }
  }
  FMMCallCUDA(cudaMemcpyAsync(c->wmoff, wmoff, sizeof(PetscInt) * (nwt + 1), cudaMemcpyDeviceToDevice, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(c->wpoff, wpoff, sizeof(PetscInt) * (nwt + 1), cudaMemcpyDeviceToDevice, c->stream));
  FMMLaunch(WalkKernel<true, PetscInt>, LAUNCH_N(nwt + 1), T, Wt, cm, cp, dpairs, (const PetscInt *)c->wmoff, c->wm, (PetscInt *)NULL, (const PetscInt *)c->wpoff, c->wp, (PetscInt *)NULL, c->wt);
  FMMCheckLaunch();
  /* the pairs of P2L and of the direct sums, grouped by box and by leaf */
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w3, sizeof(unsigned) * 2 * (nlp + nxp + 2), "the walks' work"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w2, sizeof(PetscInt) * 3 * (nlp + nxp + 2), "the walks' work"));
  {
    unsigned *lk = w3, *xk = lk + 2 * (nlp + 1);
    PetscInt *lv = w2, *xv = lv + (nlp + 1), *lh = xv + (nxp + 1), *xh = lh + 2 * (nlp + 1);
    FMMLaunch(WalkKernel<true, unsigned>, LAUNCH_N(nws + 1), T, Ws, cf, cn, dpairs, (const PetscInt *)lpoff, lk, lv, (const PetscInt *)xpoff, xk, xv, (PetscInt *)NULL);
    FMMCheckLaunch();
    PetscCall(WalkGroup(c, &s, nlp, WalkBits(nb), lk, lv, c->lb, c->lsoff, c->ls, lh));
    PetscCall(WalkGroup(c, &s, nxp, WalkBits(nl), xk, xv, c->xl, c->xsoff, c->xs, xh));
    /* the near lists without the walked leaves, in place (shorter) */
    FMMCallCUDA(cudaMemcpyAsync(c->nearoff, noff, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToDevice, c->stream));
    if (nnew) FMMCallCUDA(cudaMemcpyAsync(c->near, nnear, sizeof(PetscInt) * nnew, cudaMemcpyDeviceToDevice, c->stream));
    PetscCall(WalkReadback(c, dtot, 2, WalkTotals{{lh + (nlp + 1) + nlp, xh + (nxp + 1) + nxp}, NULL}, tot));
  }
  PetscCall(PetscTime(&t[3]));
  c->nnear    = nnew;
  c->nwt      = nwt;
  c->nlb      = (PetscInt)tot[0];
  c->nxl      = (PetscInt)tot[1];
  P->wleaves  = nbig;
  P->wtargets = nwt;
  P->wm2p     = nwm;
  P->wp2l     = c->nlb;
  if (s.tmp && !s.lent) PetscCall(FMMCUDAFree(c->stream, s.tmp));
  if (mk) PetscCall(FMMCUDAFree(c->stream, mk));
  PetscCall(FMMCUDAFree(c->stream, w3));
  PetscCall(FMMCUDAFree(c->stream, w2));
  PetscCall(FMMCUDAFree(c->stream, w1));
  PetscCall(FMMCUDAFree(c->stream, uk));
  PetscCall(FMMCUDAFree(c->stream, w0));
  PetscCall(FMMCUDAFree(c->stream, dtot));
  PetscCall(FMMCUDAFree(c->stream, dns));
  PetscCall(PetscFree(bl));
  PetscCall(PetscInfo(ctx->obj, "GPU walks: %" PetscInt_FMT " leaves (near fields of more than %" PetscInt_FMT " sources): %" PetscInt_FMT " targets, %" PetscInt_FMT " M2P; %" PetscInt_FMT " boxes take P2L; %" PetscCount_FMT " point pairs; near counts %.2f ms, sizes %.2f ms, lists %.2f ms\n", nbig, thr, nwt, nwm, c->nlb, P->wpairs, 1e3 * (t[1] - t[0]), 1e3 * (t[2] - t[1]), 1e3 * (t[3] - t[2])));
  PetscFunctionReturn(0);
}
