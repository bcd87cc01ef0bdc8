/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the work of the
  product that depends on the lists, built at setup: the M2L chunks and
  partial sums, the P2P items and partials, the neighbour-source lists of the
  indexing and repetition layouts, and the statistics of the host plan.
*/
#pragma once

/* ------------------------------------------------ the work of the product */

/* ec[j] = the sources of near-list entry j (ec[nnear] = 0), for the scan
   nearscan, and entrysrc[j] = its first source (tree position) */
__global__ void EntryCountKernel(PetscInt nnear, const PetscInt *sleaf, const PetscInt *near, PetscInt *ec, PetscInt *entrysrc)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j > nnear) return;
  ec[j] = j < nnear ? sleaf[near[j] + 1] - sleaf[near[j]] : 0;
  if (j < nnear) entrysrc[j] = sleaf[near[j]];
}

/* nbroff[b] = the neighbour sources of the leaves before b (nearscan at the leaf's first entry) */
__global__ void NbrOffKernel(PetscInt nleaves, const PetscInt *nearoff, const PetscInt *nearscan, PetscInt *nbroff)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b <= nleaves) nbroff[b] = nearscan[nearoff[b]];
}

/* per leaf: neighbour sources, source chunks of FMMCUDA_P2P_S, items and
   partials (see fmmcuda.h); entry nleaves is 0 for the scans */
__global__ void LeafWorkKernel(PetscInt nleaves, const PetscInt *tleaf, const PetscInt *nbroff, PetscInt *ns, PetscInt *nsc, PetscInt *nit, PetscInt *npart)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  if (b == nleaves) {
    ns[b] = nsc[b] = nit[b] = npart[b] = 0;
    return;
  }
  const PetscInt nt = tleaf[b + 1] - tleaf[b], n = nbroff[b + 1] - nbroff[b];
  const PetscInt k = (nt && n) ? (n + FMMCUDA_P2P_S - 1) / FMMCUDA_P2P_S : 0;
  ns[b]            = n;
  nsc[b]           = k;
  nit[b]           = k * ((nt + FMMCUDA_P2P_T - 1) / FMMCUDA_P2P_T);
  npart[b]         = k > 1 ? k * nt : 0;
}

struct MaxOp {
  __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};
struct MinOp {
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};

/* statistics of the host plan, one block: max sources and targets per leaf,
   sum of neighbour sources, P2P pairs, min sources per leaf (out[0..4]);
   then out[5..7] = *n.p[0..2] */
__global__ void __launch_bounds__(1024) StatsKernel(PetscInt nleaves, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *ns, Totals3 n, long long *out)
{
  FMMWaitPrior();
  typedef cub::BlockReduce<long long, 1024> R;
  __shared__ typename R::TempStorage        tmp;
  long long                                 v[5] = {0, 0, 0, 0, LLONG_MAX};
  for (PetscInt b = threadIdx.x; b < nleaves; b += 1024) {
    const long long s = sleaf[b + 1] - sleaf[b], t = tleaf[b + 1] - tleaf[b];
    v[0]              = max(v[0], s);
    v[1]              = max(v[1], t);
    v[2] += ns[b];
    v[3] += (long long)ns[b] * t;
    if (ns[b]) v[4] = min(v[4], s); /* the leaves in some near list (a distributed plan's other leaves are in none) */
  }
  for (int q = 0; q < 5; q++) {
    const long long r = q < 2 ? R(tmp).Reduce(v[q], MaxOp()) : (q < 4 ? R(tmp).Sum(v[q]) : R(tmp).Reduce(v[q], MinOp()));
    if (threadIdx.x == 0) out[q] = r;
    __syncthreads();
  }
  if (threadIdx.x < 3) out[5 + threadIdx.x] = *n.p[threadIdx.x];
}

/* the first partial of each leaf whose list is split (-1: none) */
__global__ void LeafPartKernel(PetscInt nleaves, const PetscInt *nsc, const PetscInt *partoff, PetscInt *leafpart)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < nleaves) leafpart[b] = nsc[b] > 1 ? partoff[b] : -1;
}

/* one thread per source chunk q of a leaf's near list (choff: the scan of the
   chunk counts): the chunk's leaf and first source by binary search, then its
   items, the targets in blocks of FMMCUDA_P2P_T */
__global__ void ChunkItemsKernel(PetscInt nchunks, PetscInt nleaves, const PetscInt *choff, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *nearoff, const PetscInt *near, const PetscInt *nearscan, const PetscInt *nbroff, const PetscInt *nsc, const PetscInt *itoff, const PetscInt *partoff, FMMP2PItem *it)
{
  FMMWaitPrior();
  const PetscInt q = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= nchunks) return;
  const PetscInt b = FMMLastLE(choff, 0, nleaves, q), k = q - choff[b], K = nsc[b], nt = tleaf[b + 1] - tleaf[b];
  const PetscInt e0 = k * FMMCUDA_P2P_S, e = nbroff[b] + e0, ns = nbroff[b + 1] - nbroff[b];
  const PetscInt j = FMMLastLE(nearscan, nearoff[b], nearoff[b + 1], e); /* the entry holding source e0 */
  const PetscInt pos = sleaf[near[j]] + (e - nearscan[j]);
  PetscInt       n   = itoff[b] + k * ((nt + FMMCUDA_P2P_T - 1) / FMMCUDA_P2P_T);
  for (PetscInt t = 0; t < nt; t += FMMCUDA_P2P_T, n++) {
    FMMP2PItem I;
    I.leaf = b;
    I.t0   = tleaf[b] + t;
    I.nt   = min((PetscInt)FMMCUDA_P2P_T, nt - t);
    I.e0   = e0;
    I.ne   = min((PetscInt)FMMCUDA_P2P_S, ns - e0);
    I.j    = j;
    I.pos  = pos;
    I.part = K > 1 ? partoff[b] + k * nt + t : -1;
    it[n]  = I;
  }
}

/* M2L: the target box of each pair, by binary search in faroff */
__global__ void PairTargetKernel(PetscInt npairs, PetscInt nboxes, const PetscInt *faroff, PetscInt *pairtgt)
{
  FMMWaitPrior();
  const PetscInt g = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (g < npairs) pairtgt[g] = FMMLastLE(faroff, 0, nboxes, g);
}

/* M2L: per box the number of 32-pair chunks its run touches (tcnt[nboxes] = 0) */
__global__ void BoxChunksKernel(PetscInt nboxes, const PetscInt *faroff, PetscInt *tcnt)
{
  FMMWaitPrior();
  const PetscInt t = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (t > nboxes) return;
  const PetscInt g0 = t < nboxes ? faroff[t] : 0, g1 = t < nboxes ? faroff[t + 1] : 0;
  tcnt[t] = g1 > g0 ? (g1 - 1) / 32 - g0 / 32 + 1 : 0;
}

/* M2L: the partial sums of each chunk (runs of one target box within it) */
__global__ void ChunkKernel(PetscInt nchunks, PetscInt npairs, const PetscInt *pairtgt, PetscInt *ccnt)
{
  FMMWaitPrior();
  const PetscInt ch = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (ch > nchunks) return;
  PetscInt n = 0;
  if (ch < nchunks)
    for (PetscInt g = 32 * ch; g < min(32 * ch + 32, npairs); g++)
      if (g == 32 * ch || pairtgt[g] != pairtgt[g - 1]) n++;
  ccnt[ch] = n;
}

/* the M2L chunks and partial sums from faroff (device) */
PetscErrorCode FMMCUDAM2LPlan(FMM_CUDA *c, const FMMPlan *P)
{
  Scratch        own = {NULL, 0}, *s = &own;
  PetscInt      *tcnt, *ccnt;
  const PetscInt nb = FMMCUDABoxCount(c, P);

  PetscFunctionBegin;
  c->npairs    = P->nfar;
  c->nchunks   = (c->npairs + 31) / 32;
  c->m2lblocks = 0; /* chosen at the first product (FMMCUDAM2L) */
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->pairtgt, sizeof(PetscInt) * PetscMax(c->npairs, 1), "the M2L targets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->chunkpart, sizeof(PetscInt) * (c->nchunks + 1), "the M2L chunks"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->tpart, sizeof(PetscInt) * (nb + 1), "the M2L partial offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&tcnt, sizeof(PetscInt) * (PetscMax(nb, c->nchunks) + 1), "the M2L counts"));
  ccnt = tcnt;
  if (c->npairs) FMMLaunch(PairTargetKernel, LAUNCH_N(c->npairs), c->npairs, nb, c->faroff, c->pairtgt);
  FMMCheckLaunch();
  FMMLaunch(BoxChunksKernel, LAUNCH_N(nb + 1), nb, c->faroff, tcnt);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, tcnt, c->tpart, nb));
  FMMLaunch(ChunkKernel, LAUNCH_N(c->nchunks + 1), c->nchunks, c->npairs, c->pairtgt, ccnt);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, ccnt, c->chunkpart, c->nchunks));
  PetscCall(FMMCUDAFree(c->stream, tcnt));
  if (own.tmp) PetscCall(FMMCUDAFree(c->stream, own.tmp));
  /* the partials, without reading their number back: a chunk has one per
     target box it meets, one plus the box ends inside it */
  c->nparts = c->nchunks + nb;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->part, sizeof(PetscReal) * (size_t)c->nparts * c->ne, "the M2L partial sums"));
  PetscFunctionReturn(0);
}

/* the symmetric P2P's work between its counts and its items (SymCount, SymItems) */
typedef struct {
  PetscInt *w, *wslot; /* per leaf: item count, slot values, chunks; per near-list entry: the column slot */
} SymWork;
static PetscErrorCode SymCount(FMM_CUDA *, const FMMPlan *, Scratch *, SymWork *, long long *);
static PetscErrorCode SymItems(FMM_CUDA *, const FMMPlan *, Scratch *, SymWork *, const long long *);

/* the P2P work between FMMCUDAP2PPlanBegin and FMMCUDAP2PPlanEnd (c->p2pw):
   its scratch, the entry counts ec, the leaf counts and their scans (ns ..
   choff), the statistics (dstat) and the symmetric P2P's work */
struct FMMP2PWork_ {
  Scratch    own;
  PetscInt  *ec, *ns, *nit, *npart, *itoff, *partoff, *choff;
  long long *dstat; /* 8 statistics, then the symmetric P2P's 4 (SymCount) */
  PetscBool  sym;
  SymWork    sw;
};
typedef struct FMMP2PWork_ *FMMP2PWork;
#define P2P_NSTAT 12

/* its device memory and itself (also after an error between Begin and End) */
PetscErrorCode FMMCUDAP2PWorkDestroy(FMM_CUDA *c)
{
  FMMP2PWork w = c->p2pw;

  PetscFunctionBegin;
  if (!w) PetscFunctionReturn(0);
  PetscCall(FMMCUDAFree(c->stream, w->ec));
  PetscCall(FMMCUDAFree(c->stream, w->ns));
  if (w->dstat != FMMCUDAReadbackTarget(sizeof(long long) * P2P_NSTAT)) PetscCall(FMMCUDAFree(c->stream, w->dstat));
  PetscCall(FMMCUDAFree(c->stream, w->own.tmp));
  PetscCall(FMMCUDAFree(c->stream, w->sw.w));
  PetscCall(FMMCUDAFree(c->stream, w->sw.wslot));
  PetscCall(PetscFree(c->p2pw));
  PetscFunctionReturn(0);
}

/* the P2P items and partials from the leaf ranges and near lists (device), with
   c->nearscan (the sources before each near-list entry), c->entrysrc (its
   first source) and c->nbroff (the sources before each leaf's neighbour
   sources); the host statistics of P too.  sym: also the work of the
   symmetric P2P (the caller has checked that the targets are the sources),
   its sizes read back with the statistics (one wait for the GPU, not two).
   In two calls: Begin queues the counts and statistics, End waits for them
   and queues the items, so that the host may do other work between (the
   setup's allocations and the M2L plan: the counts then run on the GPU
   while the host works, instead of after it) */
PetscErrorCode FMMCUDAP2PPlanBegin(FMM_CUDA *c, const FMMPlan *P, PetscBool sym)
{
  FMMP2PWork w;
  Scratch   *s;
  PetscInt   nl = P->nleaves;

  PetscFunctionBegin;
  PetscCall(FMMCUDAP2PWorkDestroy(c));
  PetscCall(PetscNew(&c->p2pw));
  w      = c->p2pw;
  w->sym = sym;
  s      = &w->own;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w->ec, sizeof(PetscInt) * (c->nnear + 1), "the P2P entry counts"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->nearscan, sizeof(PetscInt) * (c->nnear + 1), "the P2P entry offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&w->ns, sizeof(PetscInt) * (6 * (size_t)(nl + 1)), "the P2P leaf counts"));
  w->nit     = w->ns + (nl + 1);
  w->npart   = w->nit + (nl + 1);
  w->itoff   = w->npart + (nl + 1);
  w->partoff = w->itoff + (nl + 1);
  w->choff   = w->partoff + (nl + 1);
  w->dstat   = (long long *)FMMCUDAReadbackTarget(sizeof(long long) * P2P_NSTAT);
  if (!w->dstat) PetscCall(FMMCUDAMalloc(c->stream, (void **)&w->dstat, sizeof(long long) * P2P_NSTAT, "the plan statistics"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->leafnsc, sizeof(PetscInt) * (nl + 1), "the P2P chunk counts"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->leafpart, sizeof(PetscInt) * nl, "the P2P partial offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->nbroff, sizeof(PetscInt) * (nl + 1), "the neighbour-source offsets"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->entrysrc, sizeof(PetscInt) * (c->nnear + 1), "the P2P entry sources"));
  FMMLaunch(EntryCountKernel, LAUNCH_N(c->nnear + 1), c->nnear, c->sleaf, c->near, w->ec, c->entrysrc);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, s, w->ec, c->nearscan, c->nnear));
  FMMLaunch(NbrOffKernel, LAUNCH_N(nl + 1), nl, c->nearoff, c->nearscan, c->nbroff);
  FMMCheckLaunch();
  FMMLaunch(LeafWorkKernel, LAUNCH_N(nl + 1), nl, c->tleaf, c->nbroff, w->ns, c->leafnsc, w->nit, w->npart);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, s, w->nit, w->npart, c->leafnsc, w->itoff, w->partoff, w->choff, nl));
  FMMLaunch(StatsKernel, 1, 1024, 0, c->stream, nl, c->sleaf, c->tleaf, w->ns, Totals3{{w->itoff + nl, w->partoff + nl, w->choff + nl}}, w->dstat);
  FMMCheckLaunch();
  if (sym) PetscCall(SymCount(c, P, s, &w->sw, w->dstat + 8));
  PetscFunctionReturn(0);
}

/* nothing may read back through the pinned buffer between Begin and End
   (the statistics may be written there) */
PetscErrorCode FMMCUDAP2PPlanEnd(FMM_CUDA *c, FMMPlan *P, PetscBool hostitems)
{
  FMMP2PWork w = c->p2pw;
  PetscInt   tot[3], nl = P->nleaves;
  long long  stat[P2P_NSTAT];

  PetscFunctionBegin;
  PetscCall(FMMCUDAReadback(c->stream, stat, w->dstat, sizeof(long long) * (w->sym ? 12 : 8)));
  for (int k = 0; k < 3; k++) tot[k] = (PetscInt)stat[5 + k];
  P->maxleafsrc = (PetscInt)stat[0];
  P->maxleaftgt = (PetscInt)stat[1];
  P->nearsrc    = (PetscInt)stat[2];
  P->p2ppairs   = (PetscCount)stat[3];
  c->minleafsrc = nl ? (PetscInt)stat[4] : 0;
  c->nitems     = tot[0];
  c->tlblocks   = 0; /* chosen at the first product (LaunchTiled) */
  c->p2psplit   = tot[1] > 0 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->items, sizeof(FMMP2PItem) * c->nitems, "the P2P work items"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->p2ppart, sizeof(PetscReal) * tot[1], "the P2P partial sums"));
  if (nl) FMMLaunch(LeafPartKernel, LAUNCH_N(nl), nl, c->leafnsc, w->partoff, c->leafpart);
  FMMCheckLaunch();
  if (tot[2]) FMMLaunch(ChunkItemsKernel, LAUNCH_N(tot[2]), tot[2], nl, w->choff, c->sleaf, c->tleaf, c->nearoff, c->near, c->nearscan, c->nbroff, c->leafnsc, w->itoff, w->partoff, c->items);
  FMMCheckLaunch();
  if (hostitems) { /* the host keeps the first item of each leaf (the repetition layout launches by leaf ranges) */
    PetscCall(PetscMalloc1(nl + 1, &c->itemstart));
    FMMCallCUDA(cudaMemcpyAsync(c->itemstart, w->itoff, sizeof(PetscInt) * (nl + 1), cudaMemcpyDeviceToHost, c->stream));
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
  }
  if (w->sym) PetscCall(SymItems(c, P, &w->own, &w->sw, stat + 8));
  PetscCall(FMMCUDAP2PWorkDestroy(c));
  PetscFunctionReturn(0);
}

/* one thread per near-list entry j: its sources (tree positions) at their place
   nearscan[j] of the concatenation over the leaves */
__global__ void NearSourcesKernel(PetscInt nnear, const PetscInt *sleaf, const PetscInt *near, const PetscInt *nearscan, PetscInt *nbr)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= nnear) return;
  PetscInt k = nearscan[j];
  for (PetscInt i = sleaf[near[j]]; i < sleaf[near[j] + 1]; i++) nbr[k++] = i;
}

__global__ void GlobalIndexKernel(PetscInt n, const PetscInt *sperm, PetscInt *nbr)
{
  FMMWaitPrior();
  const PetscInt e = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n) nbr[e] = sperm[nbr[e]];
}

/* the lists of the indexing and repetition layouts (after FMMCUDAP2PPlanEnd): per
   leaf b, its neighbour sources at c->nbroff[b] of *nbr as tree positions or,
   with global = true, as global source indices; the host gets the offsets when
   hnbroff is not NULL */
PetscErrorCode FMMCUDANearSources(FMM_CUDA *c, const FMMPlan *P, PetscBool global, PetscInt **nbr, PetscInt *hnbroff)
{
  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)nbr, sizeof(PetscInt) * P->nearsrc, "the neighbour-source lists"));
  if (c->nnear) FMMLaunch(NearSourcesKernel, LAUNCH_N(c->nnear), c->nnear, c->sleaf, c->near, c->nearscan, *nbr);
  FMMCheckLaunch();
  if (global && P->nearsrc) FMMLaunch(GlobalIndexKernel, LAUNCH_N(P->nearsrc), P->nearsrc, c->sperm, *nbr);
  FMMCheckLaunch();
  if (hnbroff) FMMCallCUDA(cudaMemcpyAsync(hnbroff, c->nbroff, sizeof(PetscInt) * (P->nleaves + 1), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}
