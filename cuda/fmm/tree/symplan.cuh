/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the work of the
  symmetric P2P (p2p.cu), each unordered pair of points once.
*/
#pragma once

/* ------------------------------------------------ symmetric P2P (p2p.cu) */

/* one thread per leaf A: its first near-list entry >= A (the lists ascend: the
   lower entries are a prefix), its items of FMMCUDA_SYM_E upper entries, and
   its slots: one per lower entry (a column partial) plus one per item when
   there are several (row partials); long slot lists are summed in chunks */
__global__ void SymLeafKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, PetscInt *dg, PetscInt *nk, PetscInt *nsl, PetscInt *nslv, PetscInt *nch, long long *bad)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A > nl) return;
  if (A == nl) { /* for the scans; and the flag of SymEntryKernel, cleared */
    nk[A] = nslv[A] = nch[A] = 0;
    *bad                     = 0;
    return;
  }
  PetscInt lo = nearoff[A], hi = nearoff[A + 1];
  while (lo < hi) { /* lower bound of A */
    const PetscInt mid = lo + (hi - lo) / 2;
    if (near[mid] < A) lo = mid + 1;
    else hi = mid;
  }
  const PetscInt up = nearoff[A + 1] - lo, k = (up + FMMCUDA_SYM_E - 1) / FMMCUDA_SYM_E, ns = lo - nearoff[A] + (k > 1 ? k : 0);
  dg[A]   = lo;
  nk[A]   = k;
  nsl[A]  = ns;
  nslv[A] = ns * (sleaf[A + 1] - sleaf[A]);
  nch[A]  = ns > FMMCUDA_SYM_GMAX ? (ns + FMMCUDA_SYM_GCHUNK - 1) / FMMCUDA_SYM_GCHUNK : 0;
}

/* entries of item k of leaf A: its share of A's upper entries dg[A] .. nearoff[A+1]-1 */
__device__ __forceinline__ PetscInt SymItemEntries(const PetscInt *nearoff, const PetscInt *dg, PetscInt A, PetscInt k)
{
  return PetscMin(FMMCUDA_SYM_E, nearoff[A + 1] - dg[A] - k * FMMCUDA_SYM_E);
}

/* one thread per leaf A: per item the sort key FMMCUDA_SYM_E - entries (see SymItemKernel) */
__global__ void SymItemKeyKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *symleaf, unsigned *key, PetscInt *idx)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A >= nl) return;
  const PetscInt *dg = symleaf, *item = symleaf + (nl + 1);
  for (PetscInt it = item[A]; it < item[A + 1]; it++) {
    key[it] = (unsigned)(FMMCUDA_SYM_E - SymItemEntries(nearoff, dg, A, it - item[A]));
    idx[it] = it;
  }
}

/* pos[order[j]] = j */
__global__ void InversePermKernel(PetscInt n, const PetscInt *order, PetscInt *pos)
{
  FMMWaitPrior();
  const PetscInt j = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) pos[order[j]] = j;
}

/* one thread per leaf A: the descriptors of its items (FMM_CUDA symitem), item it
   at place pos[it]: items with more entries first, in leaf order within a count,
   so that the kernel's last items are short ones */
__global__ void SymItemKernel(PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, const PetscInt *tleaf, const PetscInt *symleaf, const PetscInt *wslot, const PetscInt *pos, PetscInt *desc)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A >= nl) return;
  const PetscInt *dg = symleaf, *item = symleaf + (nl + 1), *slot = symleaf + 2 * (nl + 1), a0 = sleaf[A], nA = sleaf[A + 1] - a0;
  for (PetscInt it = item[A]; it < item[A + 1]; it++) {
    const PetscInt k = it - item[A], e0 = dg[A] + k * FMMCUDA_SYM_E, ne = SymItemEntries(nearoff, dg, A, k);
    PetscInt      *d = desc + pos[it] * FMMCUDA_SYM_D;
    d[0]             = a0;
    d[1]             = nA;
    d[2]             = ne;
    d[3]             = item[A + 1] - item[A] > 1 ? slot[A] + (dg[A] - nearoff[A] + k) * nA : -1 - tleaf[A];
    for (PetscInt j = 0; j < FMMCUDA_SYM_E; j++) {
      const PetscInt B = j < ne ? near[e0 + j] : 0;
      d[4 + 3 * j]     = j < ne ? sleaf[B] : 0;
      d[5 + 3 * j]     = j < ne ? sleaf[B + 1] - sleaf[B] : 0;
      d[6 + 3 * j]     = j < ne ? wslot[e0 + j] : -1;
    }
    for (PetscInt j = 4 + 3 * FMMCUDA_SYM_E; j < FMMCUDA_SYM_D; j++) d[j] = 0;
  }
}

/* the leaf of each chunk of a long slot list (one thread per leaf) */
__global__ void SymChunkLeafKernel(PetscInt nl, const PetscInt *ch, PetscInt *chleaf)
{
  FMMWaitPrior();
  const PetscInt A = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (A < nl)
    for (PetscInt h = ch[A]; h < ch[A + 1]; h++) chleaf[h] = A;
}

/* one thread per near-list entry e, leaf A -> leaf B: lists must ascend, and
   hold A in B's list (found by binary search) whenever they hold B in A's;
   for B > A, wslot[e] is where A's warp writes B's column sums: B's slot of
   its lower entry A.  out[3] = 1 when they do not (cleared by SymLeafKernel), and
   out[0..2] = *n.p[0..2] (the plan's sizes, one readback) */
__global__ void SymEntryKernel(PetscInt nnear, PetscInt nl, const PetscInt *nearoff, const PetscInt *near, const PetscInt *sleaf, const PetscInt *slot, PetscInt *wslot, Totals3 n, long long *out)
{
  FMMWaitPrior();
  const PetscInt e   = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  long long     *bad = out + 3;
  if (e < 3) out[e] = *n.p[e];
  if (e >= nnear) return;
  const PetscInt A = FMMLastLE(nearoff, 0, nl, e), B = near[e];
  if (e > nearoff[A] && near[e - 1] >= B) *bad = 1;
  wslot[e] = -1;
  if (B == A) return;
  const PetscInt f = FMMLastLE(near, nearoff[B], nearoff[B + 1], A);
  if (nearoff[B] == nearoff[B + 1] || near[f] != A) *bad = 1;
  else if (B > A) wslot[e] = slot[B] + (f - nearoff[B]) * (sleaf[B + 1] - sleaf[B]);
}

/*
  The work of the symmetric P2P (FMMCUDAP2PPlanBegin and End with sym).  Rows of a leaf go
  to groups of syma lanes with symr rows per lane: the smallest syma of 8, 16,
  32 with at least syma points in every leaf (a group's lanes take distinct
  columns) and at most 7 syma in each, else at most 8 syma: with 8 rows a lane
  the kernel takes all 128 registers and waits on its own dependences, while
  up to 7 rows with fewer lanes were faster than half as many with twice the
  lanes.  Leaves outside that, or near lists that are not
  symmetric, leave syma = 0 (the tiled kernel then evaluates every ordered
  pair).

  SymCount, before the plan's readback: per leaf its items, slots and chunks
  and their scans (c->symleaf), per entry its column slot, and in dout[0..3]
  the three totals and whether the lists are not symmetric.  SymItems, after
  it (out: dout read back): the lanes, rows and items, or syma = 0.
*/
static PetscErrorCode SymCount(FMM_CUDA *c, const FMMPlan *P, Scratch *s, SymWork *sw, long long *dout)
{
  PetscInt *nk, *nslv, *nch, nl = P->nleaves;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&sw->w, sizeof(PetscInt) * 3 * ((size_t)nl + 1), "the symmetric P2P work"));
  nk   = sw->w;
  nslv = nk + (nl + 1);
  nch  = nslv + (nl + 1);
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symleaf, sizeof(PetscInt) * 5 * ((size_t)nl + 1), "the symmetric P2P leaf work"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&sw->wslot, sizeof(PetscInt) * c->nnear, "the symmetric P2P work"));
  /* symleaf: dg [nl+1], items [nl+1], slots (doubles) [nl+1], slot count [nl+1], chunks [nl+1] */
  FMMLaunch(SymLeafKernel, LAUNCH_N(nl + 1), nl, c->nearoff, c->near, c->sleaf, c->symleaf, nk, c->symleaf + 3 * (nl + 1), nslv, nch, dout + 3);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan3(c, s, nk, nslv, nch, c->symleaf + (nl + 1), c->symleaf + 2 * (nl + 1), c->symleaf + 4 * (nl + 1), nl));
  FMMLaunch(SymEntryKernel, LAUNCH_N(PetscMax(c->nnear, 3)), c->nnear, nl, c->nearoff, c->near, c->sleaf, c->symleaf + 2 * (nl + 1), sw->wslot, Totals3{{c->symleaf + (nl + 1) + nl, c->symleaf + 2 * (nl + 1) + nl, c->symleaf + 4 * (nl + 1) + nl}}, dout);
  FMMCheckLaunch();
  PetscFunctionReturn(0);
}

static PetscErrorCode SymItems(FMM_CUDA *c, const FMMPlan *P, Scratch *s, SymWork *sw, const long long *out)
{
  PetscInt tot[3], nl = P->nleaves;

  PetscFunctionBegin;
  c->syma = c->symr = c->symblocks = 0;
  for (PetscInt rmax = 7; rmax <= 8 && !c->syma; rmax++)
    for (PetscInt a = 8; a <= 32 && !c->syma; a *= 2)
      if (c->minleafsrc >= a && P->maxleafsrc <= rmax * a) c->syma = a;
  for (int k = 0; k < 3; k++) tot[k] = (PetscInt)out[k];
  if (!c->syma || !c->nnear) {
    c->syma = 0;
    PetscCall(PetscInfo(NULL, "GPU P2P: every ordered pair (leaves of %" PetscInt_FMT " to %" PetscInt_FMT " points, symmetric evaluation needs 8 to 256)\n", c->minleafsrc, P->maxleafsrc));
  } else if (out[3]) {
    c->syma = 0;
    PetscCall(PetscInfo(NULL, "GPU P2P: every ordered pair (the near lists are not ascending and symmetric)\n"));
  } else {
    c->symr      = (P->maxleafsrc + c->syma - 1) / c->syma;
    c->nsymitems = tot[0];
    c->nsymch    = tot[2];
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->colpart, sizeof(PetscReal) * PetscMax(tot[1], 1), "the symmetric P2P partial sums"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->chsum, sizeof(PetscReal) * PetscMax(tot[2] * P->maxleafsrc, 1), "the symmetric P2P chunk sums"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symnext, sizeof(unsigned long long), "the symmetric P2P item counter"));
    FMMCallCUDA(cudaMemsetAsync(c->symnext, 0, sizeof(unsigned long long), c->stream)); /* then reset by each product's L2P */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symchleaf, sizeof(PetscInt) * PetscMax(tot[2], 1), "the symmetric P2P chunk leaves"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symchdone, sizeof(unsigned) * PetscMax(tot[2], 1), "the symmetric P2P chunk counters"));
    FMMCallCUDA(cudaMemsetAsync(c->symchdone, 0, sizeof(unsigned) * PetscMax(tot[2], 1), c->stream));
    FMMLaunch(SymChunkLeafKernel, LAUNCH_N(nl), nl, c->symleaf + 4 * (nl + 1), c->symchleaf);
    FMMCheckLaunch();
    {
      const PetscInt ni = PetscMax(tot[0], 1);
      unsigned      *key;
      PetscInt      *idx;
      size_t         need = 0;
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&key, sizeof(unsigned) * 2 * ni, "the symmetric P2P work"));
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&idx, sizeof(PetscInt) * 3 * ni, "the symmetric P2P work"));
      FMMLaunch(SymItemKeyKernel, LAUNCH_N(nl), nl, c->nearoff, c->symleaf, key, idx);
      FMMCheckLaunch();
      FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, key, key + ni, idx, idx + ni, (int)tot[0], 0, 4, c->stream));
      PetscCall(ScratchEnsure(c, s, need));
      FMMCallCUDA(cub::DeviceRadixSort::SortPairs(s->tmp, need, key, key + ni, idx, idx + ni, (int)tot[0], 0, 4, c->stream));
      FMMLaunch(InversePermKernel, LAUNCH_N(tot[0]), tot[0], idx + ni, idx + 2 * ni);
      FMMCheckLaunch();
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->symitem, sizeof(PetscInt) * FMMCUDA_SYM_D * ni, "the symmetric P2P items"));
      FMMLaunch(SymItemKernel, LAUNCH_N(nl), nl, c->nearoff, c->near, c->sleaf, c->tleaf, c->symleaf, sw->wslot, idx + 2 * ni, c->symitem);
      FMMCheckLaunch();
      PetscCall(FMMCUDAFree(c->stream, key));
      PetscCall(FMMCUDAFree(c->stream, idx));
    }
    PetscCall(PetscInfo(NULL, "GPU P2P: symmetric, %" PetscInt_FMT " lanes per row group, %" PetscInt_FMT " rows per lane, %" PetscInt_FMT " items, %" PetscInt_FMT " partial sums, %" PetscInt_FMT " chunks of long slot lists\n", c->syma, c->symr, tot[0], tot[1], tot[2]));
  }
  if (!c->syma) {
    PetscCall(FMMCUDAFree(c->stream, c->symleaf));
    c->symleaf = NULL;
  }
  PetscCall(FMMCUDAFree(c->stream, sw->w));
  PetscCall(FMMCUDAFree(c->stream, sw->wslot));
  sw->w = sw->wslot = NULL;
  PetscFunctionReturn(0);
}

/* CUB picks a radix sort's kernels by its size: the symmetric P2P's sort of
   its items (SymItems) runs as one tile up to a few thousand
   leaves, as in the small warm-up product of PetscFMMCUDAInitialize(), and
   in passes of three other kernels beyond.  A dummy sort of that type and
   size loads them (CUDA loads a kernel at its first launch), which a first
   assembly of a large problem would otherwise pay, several times its P2P
   work.  (Growing petscfmm's pool in one allocation before a first
   assembly, instead of by its allocations one at a time, measured no
   gain.) */
PetscErrorCode FMMCUDAWarmUpSorts(void)
{
  const PetscInt n = 1 << 16;
  cudaStream_t   s;
  unsigned      *key;
  PetscInt      *idx;
  void          *tmp  = NULL;
  size_t         need = 0;

  PetscFunctionBegin;
  FMMCallCUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  PetscCall(FMMCUDAMalloc(s, (void **)&key, sizeof(unsigned) * 2 * n, "the warm-up sort"));
  PetscCall(FMMCUDAMalloc(s, (void **)&idx, sizeof(PetscInt) * 2 * n, "the warm-up sort"));
  FMMCallCUDA(cudaMemsetAsync(key, 0, sizeof(unsigned) * n, s));
  FMMCallCUDA(cudaMemsetAsync(idx, 0, sizeof(PetscInt) * n, s));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, key, key + n, idx, idx + n, (int)n, 0, 4, s));
  PetscCall(FMMCUDAMalloc(s, &tmp, need, "the warm-up sort"));
  FMMCallCUDA(cub::DeviceRadixSort::SortPairs(tmp, need, key, key + n, idx, idx + n, (int)n, 0, 4, s));
  PetscCall(FMMCUDAFree(s, tmp));
  PetscCall(FMMCUDAFree(s, key));
  PetscCall(FMMCUDAFree(s, idx));
  FMMCallCUDA(cudaStreamSynchronize(s));
  FMMCallCUDA(cudaStreamDestroy(s));
  PetscFunctionReturn(0);
}
