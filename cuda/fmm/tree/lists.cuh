/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the interaction
  lists by the theta-criterion, level by level, as src/fmm/plan.c builds them.
*/
#pragma once

/* ------------------------------------------------ interaction lists */

/*
  The lists of level l+1 (boxes t = 0..nb-1, global numbers c0 + t) from the
  strong lists of level l: the candidates of t are the 4 children of every box
  of its parent's strong list, and the 4 children of a parent share them.  So
  the candidates of all boxes are enumerated flat, one thread each, in the
  order of src/fmm/plan.c (target box, then strong-list entry, then child):
  parent tp with entries j0..j0+m-1 (j0 = stroff[tp]) owns the 16 m positions
  16 j0 .. 16 (j0 + m) - 1, position 16 j0 + 4 m ct + 4 (j - j0) + cs being
  child cs of entry j for target child ct.  owner[e] is the box of entry e.
  One thread per candidate keeps the work even when a few boxes have very long
  lists (boxes straddling two arcs of a curve have thousands of neighbours),
  which a thread per box walked alone.
*/
__device__ __forceinline__ void Candidate(PetscInt i, const PetscInt *stroff, const PetscInt *str, const PetscInt *owner, PetscInt *t, PetscInt *s)
{
  const PetscInt tp = owner[i / 16], j0 = stroff[tp], m = stroff[tp + 1] - j0, o = i - 16 * j0, r = o % (4 * m);
  *t = 4 * tp + o / (4 * m);
  *s = 4 * str[j0 + r / 4] + r % 4;
}

/* the strong and far entries among the candidates before one (the scan of a level) */
typedef struct {
  PetscInt s, f;
} ListCount;

/* what the lists of level l hold, on the device (the host reads them once,
   after the last level): n.s strong and n.f far entries, the far entries of
   the levels above (farbase), and whether the strong lists of level l and
   above fit the room given them (ok; else level l has no candidates and
   writes nothing) */
typedef struct {
  ListCount n;
  PetscInt  farbase, ok;
} ListTotal;

/* the candidates of the level after lev: 16 per strong entry */
__device__ __forceinline__ PetscInt LevelCandidates(const ListTotal *lev)
{
  return lev->ok ? 16 * lev->n.s : 0;
}

/* the far entries of the levels down to lev: where the next level's start */
__device__ __forceinline__ PetscInt NextFarBase(const ListTotal *lev)
{
  return lev->farbase + lev->n.f;
}

struct ListCountSum {
  __device__ __forceinline__ ListCount operator()(const ListCount &a, const ListCount &b) const { return ListCount{a.s + b.s, a.f + b.f}; }
};

/* candidate i: strong (1, 0), far (0, 1) or neither (0, 0), neither when
   the target box has none of this rank's targets or the source box no
   source, and from i = nc on (the scan's entries past the level's
   candidates: their number is on the device) */
struct CandidateKind {
  const ListTotal *lev;
  PetscInt         c0, span;
  double           theta;
  const PetscInt  *sleaf, *tleaf, *stroff, *str, *owner;
  const double    *cx, *cy, *scale;
  __device__ ListCount operator()(PetscInt i) const
  {
    PetscInt t, s;
    if (i >= LevelCandidates(lev)) return ListCount{0, 0};
    Candidate(i, stroff, str, owner, &t, &s);
    if (tleaf[(t + 1) * span] == tleaf[t * span] || sleaf[(s + 1) * span] == sleaf[s * span]) return ListCount{0, 0};
    const double dx = cx[c0 + t] - cx[c0 + s], dy = cy[c0 + t] - cy[c0 + s], d = sqrt(dx * dx + dy * dy);
    const double rt = scale[c0 + t], rs = scale[c0 + s], R = fmax(rt, rs), r = fmin(rt, rs);
    if (R + theta * r <= theta * d) return ListCount{0, 1}; /* the theta-criterion on the expansion scales (src/fmm/plan.c) */
    return ListCount{1, 0};
  }
};

/* the scan of the nc candidates of level lev to sc[0..nc]; at nc (the
   totals) the next level's ListTotal, ok while its strong entries fit its
   room (cap) */
struct ListScanOut {
  const ListTotal *lev;
  ListTotal       *next;
  ListCount       *sc;
  PetscInt         cap;
  __device__ __forceinline__ void operator()(ptrdiff_t i, ListCount v) const
  {
    const PetscInt nc = LevelCandidates(lev);
    if (i > nc) return;
    sc[i] = v;
    if (i == nc) *next = ListTotal{v, NextFarBase(lev), (lev->ok && v.s <= cap) ? 1 : 0};
  }
};

/* one level's step: from the lists of level l (kind: its strong lists and
   ListTotal) and the scan of its candidates (out: sc, and the next level's
   ListTotal), the strong lists of level l+1 (nstr, with their owners, and
   their offsets nstroff; room for out.cap entries), its far lists (in far,
   room for farcap entries in all) and far offsets */
typedef struct {
  CandidateKind kind;
  ListScanOut   out;
  PetscInt      nb, farcap;
  PetscInt     *nstr, *nowner, *nstroff, *far, *faroff;
} ListStep;

/* position i of a step after its scan sc (the kind of candidate i is the
   step from sc[i] to sc[i + 1]): i < nc, candidate i to its place, the
   strong list of level l+1 or the far list; i <= nb, the strong-list offsets
   of level l+1 and the far offsets of box i, from the scan at its first
   candidate (nc for i = nb) */
__device__ __forceinline__ void ListWriteAt(const ListStep &st, PetscInt i, PetscInt nc, PetscInt farbase)
{
  const CandidateKind &k = st.kind;
  const ListCount     *sc = st.out.sc;
  if (i < nc) {
    const ListCount a = sc[i], b = sc[i + 1];
    if (b.s != a.s || b.f != a.f) {
      PetscInt t, s;
      Candidate(i, k.stroff, k.str, k.owner, &t, &s);
      if (b.s != a.s) {
        if (a.s < st.out.cap) {
          st.nstr[a.s]   = s;
          st.nowner[a.s] = t;
        }
      } else if (farbase + a.f < st.farcap) st.far[farbase + a.f] = k.c0 + s;
    }
  }
  if (i <= st.nb) {
    const PetscInt tp = i / 4, first = i == st.nb ? nc : 16 * k.stroff[tp] + 4 * (i % 4) * (k.stroff[tp + 1] - k.stroff[tp]);
    st.nstroff[i]         = sc[first].s;
    st.faroff[k.c0 + i] = farbase + sc[first].f;
  }
}

/* a step after its scan (CUB's), a grid-stride loop over the level's nc
   candidates (on the device); nothing where the lists above lacked room */
__global__ void ListWriteKernel(ListStep st)
{
  FMMWaitPrior();
  const ListTotal *lev = st.kind.lev;
  if (!lev->ok) return;
  const PetscInt nc = LevelCandidates(lev), farbase = NextFarBase(lev);
  for (PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x; i < nc || i <= st.nb; i += (PetscInt)gridDim.x * blockDim.x) ListWriteAt(st, i, nc, farbase);
}

/* the first levels, whose candidates are few (at most LTOP_CAND), in one
   block and one launch, a level after another: each level's scan in chunks
   of LTB candidates (a block-wide scan each, the carry between them), then
   its writes: three launches a level cost the GPU their latency, however
   few its candidates */
#define LTB       1024
#define LTOP_MAX  5
#define LTOP_CAND 4096
typedef struct {
  ListStep st[LTOP_MAX];
  int      n;
} ListTop;

__global__ void __launch_bounds__(LTB) ListTopKernel(ListTop top)
{
  FMMWaitPrior();
  typedef cub::BlockScan<ListCount, LTB> Scan;
  __shared__ typename Scan::TempStorage tmp;

  for (int l = 0; l < top.n; l++) {
    const ListStep  &st  = top.st[l];
    const ListTotal *lev = st.kind.lev; /* written by the level before, before the barrier */
    const PetscInt   nc  = LevelCandidates(lev), farbase = NextFarBase(lev);
    ListCount        carry = {0, 0};
    for (PetscInt base = 0; base <= nc; base += LTB) {
      const PetscInt i = base + threadIdx.x;
      ListCount      v = st.kind(i), ex, agg; /* (0, 0) from nc on */
      Scan(tmp).ExclusiveScan(v, ex, ListCount{0, 0}, ListCountSum(), agg);
      st.out(i, ListCountSum()(carry, ex)); /* (nothing past nc) */
      carry = ListCountSum()(carry, agg);
      __syncthreads();
    }
    if (lev->ok)
      for (PetscInt i = threadIdx.x; i < nc || i <= st.nb; i += LTB) ListWriteAt(st, i, nc, farbase);
    __syncthreads();
  }
}

/* the lists of level l: its strong lists and their owners (cap[l] + 1
   each) and its strong-list offsets (4^l + 1), all levels in one allocation
   (one allocation and one free instead of one of each per level: the host's
   calls bound the lists at 10^6 points), then the scan of a level's 16
   cap[l] candidates (+ 1), one for all levels (a level's scan is read
   before the next level's is written, in stream order) */
typedef struct {
  PetscInt  *str, *owner, *stroff;
  ListCount *sc;
} ListLevel;

static PetscErrorCode ListLevelsAlloc(FMM_CUDA *c, PetscInt L, const PetscInt64 *cap, PetscInt **block, ListLevel *v)
{
  const auto lists = [cap](PetscInt l) { return 2 * ((size_t)cap[l] + 1) + ((size_t)1 << (2 * l)) + 1; }; /* the PetscInts of level l */
  size_t     n = 0, nsc = 1;

  PetscFunctionBegin;
  for (PetscInt l = 0; l <= L; l++) n += lists(l);
  for (PetscInt l = 0; l < L; l++) nsc = PetscMax(nsc, 16 * (size_t)cap[l] + 1);
  PetscCall(FMMCUDAMalloc(c->stream, (void **)block, sizeof(PetscInt) * (n + 2 * nsc), "the strong lists"));
  n = 0;
  for (PetscInt l = 0; l <= L; l++) {
    v[l].str    = *block + n;
    v[l].owner  = v[l].str + cap[l] + 1;
    v[l].stroff = v[l].owner + cap[l] + 1;
    n += lists(l);
  }
  for (PetscInt l = 0; l <= L; l++) v[l].sc = (ListCount *)(*block + n);
  PetscFunctionReturn(0);
}

/* the lists stage of FMMCUDATreeBuild: the far lists (faroff, far) and the
   near lists (nearoff, near) of the plan in c, P->nfar */
static PetscErrorCode TreeLists(FMMTreeWork *w)
{
  FMM_CUDA       *c = w->c;
  FMMPlan        *P = w->P;
  const PetscInt  N = P->N, M = P->M, L = w->L, nleaves = w->nleaves, nboxes = w->nboxes;
  const PetscReal theta = w->in->theta;
  Scratch        &s = w->s;

  PetscFunctionBegin;
  /* interaction lists, level by level: the strong lists of level l (stroff,
     str, and the box owning each entry) give the candidates of level l+1.
     Their sizes stay on the GPU (ListTotal), so the host queues all levels
     without waiting: the strong lists of each level get room for room
     entries a box and the far lists for 3 room (cap, farcap: 3-13 and 9-40
     are used on a curve and in a square), and the host reads the sizes once,
     at the end; where they did not fit, the lists are built again with the
     sizes found (exact down to the first level that did not fit, more below
     it).  A readback of the sizes at every level made the host wait at
     every level */
  {
    const PetscInt nroot = (N > 0 && M > 0) ? 1 : 0;
    PetscInt64    *cap;
    PetscInt      *far = NULL, *block, farcap = (PetscInt)PetscMin((PetscInt64)3 * c->listroom * nboxes, PETSC_MAX_INT - 1), root[6] = {0, 0, 0, 0, 0, 0};
    ListTotal     *dtot, *tot, t0 = {{nroot, 0}, 0, 1};
    ListLevel     *lev;

    PetscCall(PetscMalloc3(L + 1, &cap, L + 1, &tot, L + 1, &lev));
    cap[0] = nroot;
    for (PetscInt l = 1; l <= L; l++) cap[l] = PetscMin(16 * cap[l - 1], (PetscInt64)c->listroom << (2 * l));
    root[2 * nroot + 3] = nroot; /* the root's lists: str and owner 0, stroff {0, nroot} */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&dtot, sizeof(ListTotal) * (L + 1), "the sizes of the lists"));
    FMMCallCUDA(cudaMemsetAsync(c->faroff, 0, 2 * sizeof(PetscInt), c->stream)); /* the root has no far field */
    for (int attempt = 0;; attempt++) {
      PetscInt64 nfar, ncand = 0;
      PetscInt   bad = L + 1; /* the first level whose strong lists did not fit */

      for (PetscInt l = 0; l <= L; l++) ncand = PetscMax(ncand, 16 * cap[l]);
      PetscCheck(ncand < PETSC_MAX_INT, PETSC_COMM_SELF, PETSC_ERR_SUP, "GPU interaction lists: %" PetscInt64_FMT " candidate pairs at one level exceed the %d that a 32-bit PetscInt counts", ncand, (int)PETSC_MAX_INT);
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&far, sizeof(PetscInt) * PetscMax(farcap, 1), "the M2L list"));
      PetscCall(ListLevelsAlloc(c, L, cap, &block, lev));
      FMMCallCUDA(cudaMemcpyAsync(lev[0].str, root, sizeof(PetscInt) * (2 * nroot + 4), cudaMemcpyHostToDevice, c->stream));
      FMMCallCUDA(cudaMemcpyAsync(dtot, &t0, sizeof(t0), cudaMemcpyHostToDevice, c->stream));
      {
        ListTop top;
        top.n = 0;
        for (PetscInt l = 0; l < L; l++) {
          const PetscInt  nb = (PetscInt)1 << (2 * (l + 1)), c0 = FMMLevelStart(l + 1), span = (PetscInt)1 << (2 * (L - l - 1)), nc = (PetscInt)(16 * cap[l]);
          const ListLevel u = lev[l], v = lev[l + 1];
          const ListStep  st = {{dtot + l, c0, span, theta, c->sleaf, c->tleaf, u.stroff, u.str, u.owner, c->cx, c->cy, c->scale}, {dtot + l, dtot + l + 1, u.sc, (PetscInt)cap[l + 1]}, nb, farcap, v.str, v.owner, v.stroff, far, c->faroff};
          if (top.n == l && l < LTOP_MAX && nc <= LTOP_CAND) { /* the first levels: one launch below */
            top.st[top.n++] = st;
            continue;
          }
          if (top.n) {
            FMMLaunch(ListTopKernel, 1, LTB, 0, c->stream, top);
            FMMCheckLaunch();
            top.n = 0;
          }
          PetscCall(ExclusiveScanBy(c, &s, thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), st.kind), thrust::make_tabulate_output_iterator(st.out), ListCountSum(), ListCount{0, 0}, nc));
          FMMLaunch(ListWriteKernel, PetscMin(FMMCUDABlocks(PetscMax(nc, nb + 1), BS), 4096u), BS, 0, c->stream, st);
          FMMCheckLaunch();
        }
        if (top.n) {
          FMMLaunch(ListTopKernel, 1, LTB, 0, c->stream, top);
          FMMCheckLaunch();
        }
      }
      PetscCall(FMMCUDAReadback(c->stream, tot, dtot, sizeof(ListTotal) * (L + 1)));
      for (PetscInt l = L; l >= 0; l--)
        if (!tot[l].ok) bad = l;
      nfar = tot[L].farbase + tot[L].n.f; /* all of them when the strong lists fit */
      if (bad > L && nfar <= farcap) { /* the near lists (the leaves' strong lists) in a block of their size, not of their room */
        c->nnear = tot[L].n.s;
        PetscCall(FMMCUDAMalloc(c->stream, (void **)&c->near, sizeof(PetscInt) * ((size_t)c->nnear + nleaves + 1), "the P2P lists"));
        c->nearoff   = c->near + c->nnear; /* in near's block: not freed on its own */
        c->treebuilt = PETSC_TRUE;
        FMMCallCUDA(cudaMemcpyAsync(c->near, lev[L].str, sizeof(PetscInt) * c->nnear, cudaMemcpyDeviceToDevice, c->stream));
        FMMCallCUDA(cudaMemcpyAsync(c->nearoff, lev[L].stroff, sizeof(PetscInt) * (nleaves + 1), cudaMemcpyDeviceToDevice, c->stream));
        PetscCall(FMMCUDAFree(c->stream, block));
        c->far  = far;
        P->nfar = (PetscInt)nfar;
        break;
      }
      /* again, with the sizes found: exact down to level bad, below it the
         room scaled by what level bad needed (at most 16 times the entries
         of the level above) */
      PetscCheck(attempt <= L, PETSC_COMM_SELF, PETSC_ERR_PLIB, "GPU interaction lists: no fit after %d attempts", attempt + 1);
      PetscCall(PetscInfo(NULL, "GPU interaction lists: %s %" PetscInt_FMT " did not fit their room (-mat_fmm_cuda_tree_list_room %" PetscInt_FMT "): built again\n", bad <= L ? "the strong lists of level" : "the far lists of levels 1 to", bad <= L ? bad : L, c->listroom));
      {
        const PetscInt64 g = bad <= L ? (tot[bad].n.s + cap[bad] - 1) / PetscMax(cap[bad], 1) + 1 : 1;
        for (PetscInt l = 1; l <= L; l++) cap[l] = l <= bad ? tot[l].n.s : PetscMin(16 * cap[l - 1], g * cap[l]);
      }
      farcap = (PetscInt)PetscMin(bad > L ? nfar : PetscMax((PetscInt64)farcap, 2 * nfar), PETSC_MAX_INT - 1);
      PetscCall(FMMCUDAFree(c->stream, block));
      PetscCall(FMMCUDAFree(c->stream, far));
    }
    PetscCall(FMMCUDAFree(c->stream, dtot));
    PetscCall(PetscFree3(cap, tot, lev));
  }
  PetscFunctionReturn(0);
}
