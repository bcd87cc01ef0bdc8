/*
  The plan on the GPU: the topological phase of Goude & Engblom (2013, Sec. 3)
  with CUB, producing the tree and lists of src/fmm/plan.c where they are used, so
  that an assembly moves only the points across the bus.

  Splits without sorting each box.  The points (sources, then the
  targets of all ranks) are sorted once by the key (x, index) and once by
  (y, index) with CUB's radix sort, which is stable, so equal coordinates go
  by index as in src/fmm/plan.c (through 32-bit keys and then their ties:
  SortShort).  Two lists of point indices, X and Y, then hold the points of
  every box contiguously, each sorted in its own direction.  A box's
  bounding box is read off the ends of its two ranges.  Its split direction d
  and cut (the longer side and the median with -mat_fmm_tree_split median,
  else the compact split below) take the first points of its d-list as they
  are, and the d-list stays where it is; the other list is split by a stable
  partition into its second buffer (one pass over all boxes at once,
  SplitMoveKernel: each point's key compared with the cut's, a segmented
  scan of these flags, the point moved), so each box records which buffer holds each of its lists.
  Each list carries the other coordinate of its points, so a round
  reads its lists in order.  Both lists stay sorted within every
  box, so a level costs O(N), and the boxes are those of src/fmm/plan.c: the same
  keys and the same cost sums give the same cuts.  Points in a leaf are in x order (the CPU
  leaves them in selection order; only rounding of sums depends on it).  Once
  the segments fit in shared memory, the rounds left run in one launch, a
  block per segment (SplitLocalKernel).

  The theta-criterion lists are built level by level as in src/fmm/plan.c, one
  thread per candidate pair (the children of a strong pair of the level
  above): one exclusive scan counts and places them (the criterion is
  evaluated as the scan reads its input), one kernel writes them and the
  boxes' offsets, in the CPU's order (the first levels, of few candidates,
  all in one block and one launch).  The sizes stay on the GPU: each level's
  lists get room for a number of entries per box, and the host reads the
  sizes once, after the last level (lists that did not fit are built again
  with the sizes found).  Then the work
  arrays of the product that depend on the lists: the M2L chunks and partial
  sums and the P2P items (see fmmcuda.h), and the statistics of the host plan.  Only the box-level
  statistics come back to the host; the plan's arrays stay on the GPU (no FMMHostPlan).

  This file is one translation unit made of its parts in tree/, by concern:
  common.cuh (what the stages share), sort.cuh, split.cuh (the rounds in
  global memory), compact.cuh (the compact split rule), splitlocal.cuh (the
  rounds in shared memory), lists.cuh, workplan.cuh (the product's work from
  the lists), symplan.cuh (the symmetric P2P's), walks.cuh (the walks of
  spread leaves next to dense ones), top.cuh (the distributed tree's top
  cuts, FMMCUDATopCuts) and distlists.cuh (its lists below them).  Why one unit: CUB's
  kernels that several parts use (scans, radix sorts of the same types) are
  then instantiated once, so CUDA loads each once per process on first use
  (lazy loading) rather than once per file, and FMMCUDAWarmUpSorts() loads the
  sorts that the build itself runs.  This file keeps the build's
  orchestration (FMMCUDATreeBuild and its splitting stage) and the points in
  tree order.
*/
#include "fmmcuda.h"
#include <cub/cub.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/zip_iterator.h>

#define BS 256

#include "tree/common.cuh"
#include "tree/sort.cuh"
#include "tree/split.cuh"
#include "tree/compact.cuh"
#include "tree/splitlocal.cuh"
#include "tree/lists.cuh"
#include "tree/workplan.cuh"
#include "tree/symplan.cuh"
#include "tree/walks.cuh"
#include "tree/top.cuh"
#include "tree/distlists.cuh"

/* ------------------------------------------------ points in tree order */

/* fs[k], ft[k]: the point at position k of the leaf order is a source / one of this rank's targets */
__global__ void ClassifyKernel(PetscInt U, PetscInt N, int same, PetscInt t0, PetscInt t1, const PetscInt *X, PetscInt *fs, PetscInt *ft)
{
  FMMWaitPrior();
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
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > nleaves) return;
  sleaf[b] = ss[off[b]];
  tleaf[b] = st[off[b]];
}

/* sources and this rank's targets in tree order, with the strengths per unit
   density of src/fmm/plan.c (same expressions, so the same rounding) */
__global__ void ScatterPointsKernel(PetscInt U, PetscInt N, int same, PetscInt t0, const PetscInt *X, const PetscInt *seg, const PetscInt *fs, const PetscInt *ss, const PetscInt *ft, const PetscInt *st, const double *xy, const double *nrm, const double *wts, double alpha, double beta, PetscInt *sperm, double *sx, double *sy, double *cq, double *cdx, double *cdy, PetscInt *tperm, double *tx, double *ty, PetscInt *tleafof)
{
  FMMWaitPrior();
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

/* centre and radius of every box from its bounding box; the scale floor of src/fmm/plan.c */
__global__ void GeometryKernel(PetscInt nboxes, const double *bb, double *cx, double *cy, double *scale)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nboxes) return;
  double floor_s = 0.0;
  if (bb[0] < PETSC_MAX_REAL) floor_s = 0.5 * sqrt((bb[0] + bb[2]) * (bb[0] + bb[2]) + (bb[1] + bb[3]) * (bb[1] + bb[3])) * FMM_SCALE_FLOOR;
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

/* with -info: the GPU time (events) and the host time of the stages of the tree build */
#define NSTAGE 6
typedef struct {
  PetscBool      on;
  int            n;
  cudaEvent_t    ev[NSTAGE];
  PetscLogDouble t[NSTAGE];
} Stages;

static PetscErrorCode StageMark(FMM_CUDA *c, Stages *st)
{
  PetscFunctionBegin;
  if (!st->on || st->n >= NSTAGE) PetscFunctionReturn(0);
  FMMCallCUDA(cudaEventCreate(&st->ev[st->n]));
  FMMCallCUDA(cudaEventRecord(st->ev[st->n], c->stream));
  PetscCall(PetscTime(&st->t[st->n]));
  st->n++;
  PetscFunctionReturn(0);
}

/* after the stream is synchronized */
static PetscErrorCode StageReport(Stages *st, const char *names[])
{
  float ms[NSTAGE] = {0};

  PetscFunctionBegin;
  if (!st->on) PetscFunctionReturn(0);
  for (int k = 1; k < st->n; k++) FMMCallCUDA(cudaEventElapsedTime(&ms[k], st->ev[k - 1], st->ev[k]));
  for (int k = 1; k < st->n; k++) PetscCall(PetscInfo(NULL, "GPU tree build, %s: GPU %.3f ms, host %.3f ms\n", names[k - 1], (double)ms[k], 1e3 * (st->t[k] - st->t[k - 1])));
  for (int k = 0; k < st->n; k++) FMMCallCUDA(cudaEventDestroy(st->ev[k]));
  PetscFunctionReturn(0);
}


/* the splitting stage of FMMCUDATreeBuild and FMMCUDASubtrees: 2L rounds of
   halving of the nroot boxes of off; the boxes of level l are the segments
   of round 2l, nroot 4^l of them.  off: the leaf offsets after it, seg the
   leaf of each position, X the x list in its first buffer, bb the boxes'
   bounding boxes (level l's from nroot FMMLevelStart(l) on) */
static PetscErrorCode TreeSplit(FMMTreeWork *w)
{
  FMM_CUDA       *c = w->c;
  const PetscInt  U = w->in->U, L = w->L, nleaves = w->nleaves, ntiles = w->ntiles, nroot = w->nroot;
  const PetscBool median = w->in->median, lsplit = w->lsplit;
  const double   *xy = w->in->xy;
  PetscInt       *X = w->X, *seg = w->seg, *cseg = w->cseg, *dmax = w->dmax;
  PetscInt      *&off = w->off, *&noff = w->noff;
  char           *dir = w->dir, *tst = w->tst;
  const size_t    tbytes = w->tbytes;
  unsigned char  *sel = w->sel, *nsel = w->nsel;
  double         *bb = w->bb, *XO = w->XO;
  SplitWork      &sp = w->sp;
  SplitLists      lists;
  SplitTiles      tiles;
  PetscInt        nch;
  PetscBool       local = PETSC_FALSE;
  cudaEvent_t     evmax = NULL;                                              /* after ChildMaxKernel */
  PetscInt       *hmax  = (PetscInt *)FMMCUDAReadbackTarget(sizeof(PetscInt)); /* where it writes, else dmax */

  PetscFunctionBegin;
  lists = SplitLists{X, XO, U + 1, PetscMax(U, 1), sel}; /* X, Y, X2, Y2 and XO, YO, XO2, YO2 follow each other */
  FMMCallCUDA(tiles.Init((int)ntiles, tst, tbytes));
  nch   = (U + SEG_CHUNK - 1) / SEG_CHUNK; /* chunks of positions (SegmentOf) */
  /* 2L rounds of halving; the boxes of level l are the segments of round 2l.
     The last rounds run in shared memory (SplitLocalKernel) from the first
     round whose largest segment fits a block (one readback, when the
     average fits) */
  /* Rounds that may run in shared memory (fits): the round before each finds
     its children's largest size once its cuts are picked (ChildMaxKernel),
     and the host reads it from the pinned buffer (evmax) while that round's
     moves run, instead of waiting for them and a kernel after them.  Without
     the pinned buffer the size goes to dmax and is read back after the moves */
  const auto fits = [&](PetscInt r) { return lsplit && r >= 0 && r < 2 * L && 2 * L - r <= SRMAX && U <= (((PetscInt64)SCAP * nroot) << r); }; /* (true from some round on) */
  if (hmax && fits(2 * L - 1)) FMMCallCUDA(cudaEventCreateWithFlags(&evmax, cudaEventDisableTiming));
  for (PetscInt r = 0; r < 2 * L; r++) {
    const PetscInt nseg = nroot << r;
    double        *lbb  = (r % 2 == 0) ? bb + 4 * nroot * FMMLevelStart(r / 2) : NULL;
    if (fits(r)) {
      PetscInt nmax = U; /* round 0: one segment */
      if (r && hmax) {
        FMMCallCUDA(cudaEventSynchronize(evmax));
        nmax = *hmax;
      } else if (r) PetscCall(FMMCUDAReadback(c->stream, &nmax, dmax, sizeof(PetscInt)));
      if (nmax <= SCAP) {
        const int ipt = SplitLocalIPT(nmax);
        FMMLaunch(SplitLocalOf(ipt), (unsigned)nseg, SNT, SplitLocalBytes(ipt), c->stream, (int)(2 * L - r), r, nroot, median ? 1 : 0, off, lists, xy, seg, noff, bb);
        FMMCheckLaunch();
        PetscCall(PetscInfo(NULL, "GPU tree build: rounds %" PetscInt_FMT " to %" PetscInt_FMT " of %" PetscInt_FMT " in shared memory, %" PetscInt_FMT " blocks of up to %" PetscInt_FMT " points, %d a thread\n", r, 2 * L - 1, 2 * L, nseg, nmax, ipt));
        { PetscInt *t = off; off = noff; noff = t; }
        local = PETSC_TRUE;
        break;
      }
    }
    FMMLaunch(SegmentKernel, LAUNCH_N(PetscMax(nseg, nch + 1)), nseg, off, lists, xy, noff, dir, lbb, sp.core, sp.best, sp.rank, nch, cseg, tiles, (int)ntiles);
    FMMCheckLaunch();
    if (U && sp.core) PetscCall(CompactSplit(c, &sp, nseg, U, off, cseg, lists, xy));
    if (fits(r + 1)) {
      FMMLaunch(ChildMaxKernel, 1, BS, 0, c->stream, nseg, off, noff, dir, sp.rank, hmax ? hmax : dmax);
      FMMCheckLaunch();
      if (hmax) FMMCallCUDA(cudaEventRecord(evmax, c->stream));
    }
    if (U) FMMLaunch(SplitMoveKernel, (unsigned)ntiles, MNT, 0, c->stream, U, off, cseg, noff, dir, sp.rank, lists, nsel, xy, tiles);
    FMMCheckLaunch();
    { PetscInt *t = off; off = noff; noff = t; }
    { unsigned char *t = lists.sel; lists.sel = nsel; nsel = t; }
  }
  if (evmax) FMMCallCUDA(cudaEventDestroy(evmax));
  if (!local) { /* the leaves' bounding boxes, the leaf of each position, the x list in one buffer */
    FMMLaunch(SegmentKernel, LAUNCH_N(nleaves), nleaves, off, lists, xy, NULL, NULL, bb + 4 * nroot * FMMLevelStart(L), NULL, NULL, NULL, 0, NULL, tiles, 0);
    FMMCheckLaunch();
    if (U) FMMLaunch(LeafOfKernel, LAUNCH_N(U), U, nleaves, off, lists, seg);
    FMMCheckLaunch();
  }
  PetscFunctionReturn(0);
}

/* the work arrays of a tree build, one block (*work, freed by the caller)
   with scr bytes of CUB's scratch in it (w->s, lent); the sort keys' space
   then holds the other coordinates: XO, YO, then their second buffers */
static PetscErrorCode TreeWorkAlloc(FMMTreeWork *w, size_t scr, FMMCarve *work)
{
  FMM_CUDA      *c = w->c;
  const PetscInt U = w->in->U, L = w->L, nleaves = w->nleaves, nboxes = w->nboxes;
  PetscInt      *offbase;
  const auto     carve = [&](FMMCarve *k) {
    w->kx   = FMMCarveArray<unsigned long long>(k, 4 * (size_t)PetscMax(U, 1));
    w->val  = FMMCarveArray<PetscInt>(k, 11 * (size_t)(U + 1));
    offbase = FMMCarveArray<PetscInt>(k, 2 * ((size_t)nleaves + 1));
    w->dir  = FMMCarveArray<char>(k, (size_t)nleaves);
    w->sel  = FMMCarveArray<unsigned char>(k, 2 * (size_t)nleaves);
    w->bb   = FMMCarveArray<double>(k, 4 * (size_t)nboxes);
    w->tst  = FMMCarveArray<char>(k, w->tbytes);
    w->dmax = FMMCarveArray<PetscInt>(k, 1);
    if (!w->in->median && L > 0 && U) SplitWorkCarve(k, U, nleaves / 2, &w->sp);
    w->s.tmp = FMMCarveArray<char>(k, scr);
  };

  PetscFunctionBegin;
  w->ntiles = (PetscInt)FMMCUDABlocks(U, MTILE); /* of SplitMoveKernel */
  FMMCallCUDA(SplitTiles::AllocationSize((int)w->ntiles, w->tbytes));
  *work = FMMCarve{NULL, 0};
  carve(work);
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&work->base, work->off, "the work arrays of the tree build"));
  work->off = 0;
  carve(work);
  w->s.bytes = scr;
  w->s.lent  = PETSC_TRUE;
  w->ky      = w->kx + PetscMax(U, 1);
  w->kt      = w->ky + PetscMax(U, 1);
  w->XO      = (double *)w->kx;
  w->YO      = (double *)w->ky;
  w->X       = w->val + (U + 1);
  w->Y       = w->X + (U + 1);
  w->seg     = w->Y + 3 * (U + 1); /* after Y, the second buffers of X and Y */
  w->cseg    = w->seg + (U + 1);   /* the chunks' segments (SegmentOf) */
  w->fs      = w->cseg + (U + 1);
  w->ss      = w->fs + (U + 1);
  w->ft      = w->ss + (U + 1);
  w->st      = w->ft + (U + 1);
  w->off     = offbase;
  w->noff    = w->off + nleaves + 1;
  w->nsel    = w->sel + nleaves;
  FMMCallCUDA(cudaMemsetAsync(w->sel, 0, 2 * (size_t)nleaves, c->stream));
  if (L > 0 && U && w->in->splitlocal) PetscCall(SplitLocalSetup(c, &w->lsplit));
  PetscFunctionReturn(0);
}

/*
  FMMCUDATreeBuild - the plan of src/fmm/plan.c, built on the GPU (see the top of this file).

  Input (FMMCUDATreeInput, fmmcuda.h): xy, room on the device for the U =
  N + Mg points of all ranks (sources in global order, then, when the
  targets are not the sources, the targets in global order), which
  in->up.points copies there, points a to b - 1, on stream s (NULL: xy holds
  them already); nrm (2N, or NULL) and wts (N, or NULL) on the device, whose
  upload in->up.late (when not NULL) starts once the sort is queued.  parts:
  the points come from host memory (from SORT_PARTS_MIN on, they go up in two
  parts, each sorted while the next goes up).  Fills
  the device plan of c (sperm ... scale, faroff, far, nearoff, near, tleafof)
  and the counts and statistics of P (no host arrays).
*/
PetscErrorCode FMMCUDATreeBuild(FMM_CUDA *c, FMMPlan *P, const FMMCUDATreeInput *in)
{
  const PetscInt       ct = in->ct, t0 = in->t0, U = in->U, keybits = in->keybits;
  const PetscReal      alpha = in->alpha, beta = in->beta;
  const PetscBool      same = in->same, parts = in->parts;
  const double        *xy = in->xy, *nrm = in->nrm, *wts = in->wts;
  const PetscInt       N = P->N, M = P->M;
  FMMTreeWork          tw{};
  FMMTreeWork         *w = &tw;
  PetscInt            &L = w->L, &nleaves = w->nleaves, &nboxes = w->nboxes;
  Scratch             &s = w->s;
  FMMCarve             work = {NULL, 0}, out = {NULL, 0};
  PetscInt           *&X = w->X, *&seg = w->seg, *&off = w->off;
  PetscInt           *&fs = w->fs, *&ss = w->ss, *&ft = w->ft, *&st = w->st;
  double             *&bb = w->bb;
  cudaEvent_t         &lated  = w->lated;
  Stages               stg = {PETSC_FALSE, 0, {0}, {0}};
  const char          *stgname[] = {"allocation and sort", "splits", "leaves and scatter", "interaction lists", "frees"};

  PetscFunctionBegin;
  w->c     = c;
  w->P     = P;
  w->in    = in;
  w->nroot = 1;
  PetscCall(PetscInfoEnabled(MAT_CLASSID, &stg.on));
  PetscCall(StageMark(c, &stg));
  while (L < FMM_MAX_LEVELS && (PetscInt64)ct * ((PetscInt64)1 << (2 * L)) < U) L++;
  nleaves    = (PetscInt)1 << (2 * L);
  nboxes     = FMMLevelStart(L + 1);
  P->L       = L;
  P->nleaves = nleaves;
  P->nboxes  = nboxes;

  /* the sort's scratch: in the work block (TreeWorkAlloc) */
  const PetscInt  K         = parts && U >= SORT_PARTS_MIN ? 2 : 1, h = U / K; /* the points go up in parts [0, h) and [h, U) */
  const PetscBool shortkeys = keybits < 64 && K == 1 && U >= 64 ? PETSC_TRUE : PETSC_FALSE; /* (the parts' merge compares the keys of both) */
  size_t          n2 = 0, scr = 0; /* the scratch of one of SortShort's sorts; of the sort */
  if (U && shortkeys) PetscCall(SortShortScratch(c, U, keybits, &scr, &n2));
  else if (U) FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, scr, (unsigned long long *)NULL, (unsigned long long *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)PetscMax(U - h, h), 0, 64, c->stream)); /* the larger part (h = U for one) */
  PetscCall(TreeWorkAlloc(w, scr, &work));
  w->K         = K;
  w->h         = h;
  w->shortkeys = shortkeys;
  w->n2        = n2;
  PetscCall(TreeSort(w));
  {
    PetscInt h[2] = {0, U};
    FMMCallCUDA(cudaMemcpyAsync(off, h, sizeof(h), cudaMemcpyHostToDevice, c->stream));
  }

  PetscCall(StageMark(c, &stg));
  PetscCall(TreeSplit(w));

  PetscCall(StageMark(c, &stg));
  if (lated) { /* the normals and weights are up */
    FMMCallCUDA(cudaStreamWaitEvent(c->stream, lated, 0));
    FMMCallCUDA(cudaEventDestroy(lated));
  }
  /* sources and this rank's targets in tree order */
  { /* the plan's arrays of points, leaves and boxes in one block (c->treeblk, freed by the backend's destroy) */
    const auto carve = [&](FMMCarve *k) {
      c->sperm   = FMMCarveArray<PetscInt>(k, (size_t)N);
      c->sx      = FMMCarveArray<double>(k, (size_t)N);
      c->sy      = FMMCarveArray<double>(k, (size_t)N);
      c->cq      = FMMCarveArray<double>(k, (size_t)N);
      c->cdx     = FMMCarveArray<double>(k, (size_t)N);
      c->cdy     = FMMCarveArray<double>(k, (size_t)N);
      c->tperm   = FMMCarveArray<PetscInt>(k, (size_t)M);
      c->tx      = FMMCarveArray<double>(k, (size_t)M);
      c->ty      = FMMCarveArray<double>(k, (size_t)M);
      c->tleafof = FMMCarveArray<PetscInt>(k, (size_t)M);
      c->sleaf   = FMMCarveArray<PetscInt>(k, (size_t)nleaves + 1);
      c->tleaf   = FMMCarveArray<PetscInt>(k, (size_t)nleaves + 1);
      c->cx      = FMMCarveArray<double>(k, (size_t)nboxes);
      c->cy      = FMMCarveArray<double>(k, (size_t)nboxes);
      c->scale   = FMMCarveArray<double>(k, (size_t)nboxes);
      c->faroff  = FMMCarveArray<PetscInt>(k, (size_t)nboxes + 1);
    };
    carve(&out);
    PetscCall(FMMCUDAMalloc(c->stream, &c->treeblk, out.off, "the plan's points, leaves and boxes"));
    out.base = (char *)c->treeblk;
    out.off  = 0;
    carve(&out);
  }
  FMMLaunch(ClassifyKernel, LAUNCH_N(U + 1), U, N, same ? 1 : 0, t0, t0 + M, X, fs, ft);
  FMMCheckLaunch();
  PetscCall(ExclusiveScan(c, &s, fs, ss, U));
  PetscCall(ExclusiveScan(c, &s, ft, st, U));
  FMMLaunch(LeafRangeKernel, LAUNCH_N(nleaves + 1), nleaves, off, ss, st, c->sleaf, c->tleaf);
  FMMCheckLaunch();
  if (U) FMMLaunch(ScatterPointsKernel, LAUNCH_N(U), U, N, same ? 1 : 0, t0, X, seg, fs, ss, ft, st, xy, nrm, wts, alpha, beta, c->sperm, c->sx, c->sy, c->cq, c->cdx, c->cdy, c->tperm, c->tx, c->ty, c->tleafof);
  FMMCheckLaunch();

  /* box geometry */
  FMMLaunch(GeometryKernel, LAUNCH_N(nboxes), nboxes, bb, c->cx, c->cy, c->scale);
  FMMCheckLaunch();

  PetscCall(StageMark(c, &stg));
  PetscCall(TreeLists(w));
  PetscCall(StageMark(c, &stg));
  PetscCall(FMMCUDAFree(c->stream, work.base));
  if (s.tmp && !s.lent) PetscCall(FMMCUDAFree(c->stream, s.tmp));
  PetscCall(StageMark(c, &stg));
  if (stg.on) FMMCallCUDA(cudaStreamSynchronize(c->stream)); /* (the readback of the lists' sizes waited for the rest) */
  PetscCall(StageReport(&stg, stgname));
  PetscFunctionReturn(0);
}

/* ------------------------------------------------ a rank's subtrees */

/* key[k] = the box of point id[k] (the boxes' points are consecutive: box b's from off[b] on) */
__global__ void BoxKeyKernel(PetscInt U, PetscInt nroot, const PetscInt *off, const PetscInt *id, unsigned int *key)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < U) key[k] = (unsigned int)FMMLastLE(off, 0, nroot, id[k]);
}

/*
  FMMCUDASubtrees - a rank's subtrees of the distributed tree (src/fmm/dist.c,
  FMMBackendOps' subtrees): the U points xy (device) in nroot boxes (hoff,
  host: box b's points from hoff[b] on, in the order of their global
  indices) each split levels deep by the splitting stage of FMMCUDATreeBuild
  (the same rule and keys, so the cuts of FMMTreeSplit()).  The x and y lists
  start sorted by (box, coordinate, index): given in sorted (device, 2U;
  the top cuts' lists, FMMCUDASubtreesLists()), or,
  where it is NULL, a stable sort by coordinate, then a stable sort of that
  by box.  Gives order (U: the points leaf by leaf; in
  device memory where dorder, else host), and in host memory loff (nroot
  4^levels + 1: the leaves' offsets) and bb (the bounding boxes of the nroot
  (4^(levels+1) - 1) / 3 boxes, level by level).
*/
PetscErrorCode FMMCUDASubtrees(FMM_CUDA *c, PetscInt U, const double *xy, const PetscInt *sorted, PetscInt nroot, const PetscInt *hoff, PetscInt levels, PetscBool median, PetscBool splitlocal, PetscInt *order, PetscBool dorder, PetscInt *loff, double *hbb)
{
  FMMCUDATreeInput in{};
  FMMTreeWork      tw{};
  FMMTreeWork     *w    = &tw;
  FMMCarve         work = {NULL, 0};
  size_t           scr = 0, need = 0;
  int              bits = 1;

  PetscFunctionBegin;
  in.U          = U;
  in.median     = median;
  in.splitlocal = splitlocal;
  in.xy         = xy;
  w->c          = c;
  w->in         = &in;
  w->nroot      = nroot;
  w->L          = levels;
  w->nleaves    = nroot << (2 * levels);
  w->nboxes     = nroot * FMMLevelStart(levels + 1);
  while (((PetscInt)1 << bits) < nroot) bits++;
  if (U && !sorted) {
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, scr, (unsigned long long *)NULL, (unsigned long long *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)U, 0, 64, c->stream));
    FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, need, (unsigned int *)NULL, (unsigned int *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)U, 0, bits, c->stream));
    scr = PetscMax(scr, need);
  }
  PetscCall(TreeWorkAlloc(w, scr, &work));
  FMMCallCUDA(cudaMemcpyAsync(w->off, hoff, sizeof(PetscInt) * (nroot + 1), cudaMemcpyHostToDevice, c->stream));
  if (U && sorted) {
    FMMCallCUDA(cudaMemcpyAsync(w->X, sorted, sizeof(PetscInt) * U, cudaMemcpyDeviceToDevice, c->stream));
    FMMCallCUDA(cudaMemcpyAsync(w->Y, sorted + U, sizeof(PetscInt) * U, cudaMemcpyDeviceToDevice, c->stream));
  } else if (U) {
    unsigned int *bk = (unsigned int *)w->kx, *bks = bk + U; /* box keys, in the space of kx once it is sorted */
    PetscInt     *tmp = w->Y + (U + 1);                      /* the second buffer of X */
    FMMLaunch(KeysKernel, LAUNCH_N(U), 0, U, xy, w->kx, w->ky, w->val);
    FMMCheckLaunch();
    for (int d = 0; d < 2; d++) {
      need = scr;
      FMMCallCUDA(cub::DeviceRadixSort::SortPairs(w->s.tmp, need, d ? w->ky : w->kx, w->kt, w->val, tmp, (int)U, 0, 64, c->stream));
      FMMLaunch(BoxKeyKernel, LAUNCH_N(U), U, nroot, w->off, tmp, bk);
      FMMCheckLaunch();
      need = scr;
      FMMCallCUDA(cub::DeviceRadixSort::SortPairs(w->s.tmp, need, bk, bks, tmp, d ? w->Y : w->X, (int)U, 0, bits, c->stream));
    }
  }
  if (U) {
    FMMLaunch(OtherKernel, LAUNCH_N(U), U, w->X, w->Y, xy, w->XO, w->YO);
    FMMCheckLaunch();
  }
  PetscCall(TreeSplit(w));
  if (U) FMMCallCUDA(cudaMemcpyAsync(order, w->X, sizeof(PetscInt) * U, dorder ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, c->stream));
  PetscCall(FMMCUDAReadbackStaged(c->stream, loff, w->off, sizeof(PetscInt) * (w->nleaves + 1))); /* (through the pinned ring) */
  PetscCall(FMMCUDAReadbackStaged(c->stream, hbb, w->bb, sizeof(double) * 4 * w->nboxes));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(FMMCUDAFree(c->stream, work.base));
  PetscFunctionReturn(0);
}

/* inv[lsrc[q]] = q for the slots q that hold one of the caller's points (lsrc[q] >= 0) */
__global__ void SlotOfKernel(PetscInt n, const PetscInt *lsrc, PetscInt *inv)
{
  FMMWaitPrior();
  const PetscInt q = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (q < n && lsrc[q] >= 0) inv[lsrc[q]] = q;
}

/* the slot of the caller's point keep[k] (-1: it left the rank) */
struct SlotOfPoint {
  const PetscInt *inv;
  __device__ __forceinline__ PetscInt operator()(PetscInt i) const { return inv[i]; }
};

struct IsSlot {
  __device__ __forceinline__ bool operator()(PetscInt q) const { return q >= 0; }
};

struct IsReceived {
  const PetscInt *lsrc;
  __device__ __forceinline__ bool operator()(PetscInt q) const { return lsrc[q] < 0; }
};

/* slot a before slot b in a subtrees' list: by box (off: the boxes' first slots), then coordinate d, then slot */
struct SlotLess {
  const double   *xy;
  const PetscInt *off;
  PetscInt        nroot;
  int             d;
  __device__ __forceinline__ bool operator()(PetscInt a, PetscInt b) const
  {
    const PetscInt ba = FMMLastLE(off, 0, nroot, a), bb = FMMLastLE(off, 0, nroot, b);
    return ba < bb || (ba == bb && CoordIndexLess(xy, d, a, b));
  }
};

/*
  FMMCUDASubtreesLists - the sorted input of FMMCUDASubtrees() from the top
  cuts' lists: keep (device, 2 ns: the x and y lists of the caller's ns
  sources, box after box, FMMCUDATopCuts()) renumbered as the rank's n
  slots (lsrc, device: slot -> the caller's source there, -1 where
  received; xy, device: the slots' points), without the nleft points that
  left the rank; the received slots, sorted by (box, coordinate, slot)
  (hoff, host: the nroot boxes' first slots), merged in.  Gives sorted
  (device, 2n): the lists that FMMCUDASubtrees()'s own sort makes (equal
  coordinates in slot order, which in a box is the order of the global
  indices), in a pass over the lists and a sort of the received slots only.
*/
PetscErrorCode FMMCUDASubtreesLists(FMM_CUDA *c, PetscInt n, const double *xy, PetscInt nroot, const PetscInt *hoff, PetscInt ns, const PetscInt *keep, const PetscInt *lsrc, PetscInt nleft, PetscInt *sorted)
{
  const PetscInt nstay = ns - nleft, nrecv = n - nstay;
  PetscInt      *inv, *off, *part, *dn, hn[3] = {0, 0, 0};
  void          *tmp = NULL;
  size_t         bytes = 0, need = 0;
  const auto     slots = thrust::make_transform_iterator(keep, SlotOfPoint{NULL});

  PetscFunctionBegin;
  PetscCheck(nstay >= 0 && nrecv >= 0, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: %" PetscInt_FMT " slots for %" PetscInt_FMT " sources of which %" PetscInt_FMT " left", n, ns, nleft);
  if (!n) PetscFunctionReturn(0);
  FMMCallCUDA(cub::DeviceSelect::If(NULL, need, slots, sorted, (PetscInt *)NULL, (int)ns, IsSlot(), c->stream));
  bytes = need;
  if (nrecv) {
    SlotLess less{xy, NULL, nroot, 0};
    FMMCallCUDA(cub::DeviceSelect::If(NULL, need, thrust::counting_iterator<PetscInt>(0), sorted, (PetscInt *)NULL, (int)n, IsReceived{lsrc}, c->stream));
    bytes = PetscMax(bytes, need);
    FMMCallCUDA(cub::DeviceMergeSort::SortKeys(NULL, need, sorted, nrecv, less, c->stream));
    bytes = PetscMax(bytes, need);
    FMMCallCUDA(cub::DeviceMerge::MergeKeys(NULL, need, sorted, nstay, sorted, nrecv, sorted, less, c->stream));
    bytes = PetscMax(bytes, need);
  }
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&inv, sizeof(PetscInt) * PetscMax(ns, 1), "the slots of the caller's points"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&off, sizeof(PetscInt) * (nroot + 1), "the subtrees' boxes"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&part, sizeof(PetscInt) * (2 * (nrecv ? nstay + nrecv : 0) + 3), "the subtrees' lists in parts"));
  PetscCall(FMMCUDAMalloc(c->stream, &tmp, PetscMax(bytes, 1), "the subtrees' lists' work"));
  dn = part + 2 * (nrecv ? nstay + nrecv : 0);
  FMMCallCUDA(cudaMemsetAsync(inv, 0xff, sizeof(PetscInt) * ns, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(off, hoff, sizeof(PetscInt) * (nroot + 1), cudaMemcpyHostToDevice, c->stream));
  FMMLaunch(SlotOfKernel, LAUNCH_N(n), n, lsrc, inv);
  FMMCheckLaunch();
  if (nrecv) { /* the received slots, in both lists' places */
    PetscInt *r = part + 2 * nstay;
    need        = bytes;
    FMMCallCUDA(cub::DeviceSelect::If(tmp, need, thrust::counting_iterator<PetscInt>(0), r, dn + 2, (int)n, IsReceived{lsrc}, c->stream));
    FMMCallCUDA(cudaMemcpyAsync(r + nrecv, r, sizeof(PetscInt) * nrecv, cudaMemcpyDeviceToDevice, c->stream));
  }
  for (int d = 0; d < 2; d++) {
    PetscInt *a = nrecv ? part + d * nstay : sorted + d * n, *r = part + 2 * nstay + d * nrecv;
    need        = bytes;
    FMMCallCUDA(cub::DeviceSelect::If(tmp, need, thrust::make_transform_iterator(keep + d * ns, SlotOfPoint{inv}), a, dn + d, (int)ns, IsSlot(), c->stream));
    if (!nrecv) continue;
    SlotLess less{xy, off, nroot, d};
    need = bytes;
    FMMCallCUDA(cub::DeviceMergeSort::SortKeys(tmp, need, r, nrecv, less, c->stream));
    need = bytes;
    FMMCallCUDA(cub::DeviceMerge::MergeKeys(tmp, need, a, nstay, r, nrecv, sorted + d * n, less, c->stream));
  }
  FMMCallCUDA(cudaMemcpyAsync(hn, dn, sizeof(PetscInt) * (nrecv ? 3 : 2), cudaMemcpyDeviceToHost, c->stream));
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(FMMCUDAFree(c->stream, tmp));
  PetscCall(FMMCUDAFree(c->stream, part));
  PetscCall(FMMCUDAFree(c->stream, off));
  PetscCall(FMMCUDAFree(c->stream, inv));
  PetscCheck(hn[0] == nstay && hn[1] == nstay && (!nrecv || hn[2] == nrecv), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: %" PetscInt_FMT " and %" PetscInt_FMT " of the caller's sources stay and %" PetscInt_FMT " slots were received, not %" PetscInt_FMT " and %" PetscInt_FMT, hn[0], hn[1], hn[2], nstay, nrecv);
  PetscFunctionReturn(0);
}

/*
  FMMCUDATopCuts - the top l0 levels of the distributed tree on the GPUs
  (src/fmm/dist.c's TopLevels(), the same cuts; tree/top.cuh): this rank's u
  points xy (device; its ns sources, global indices s0 + i, then its
  targets, tg0 + i - ns), U points on all ranks; up->points (up may be NULL)
  puts them there, in two parts from SORT_PARTS_MIN on, each sorted while
  the next goes up, as the one-GPU build does.  Gives boxof (device, u): the
  box of level l0 of each point, and where keep (device, 2u) is not NULL,
  the x and y lists of the points, box after box, each sorted by
  (coordinate, index) in its box (TopKeepKernel).  Collective on comm.
*/
PetscErrorCode FMMCUDATopCuts(FMM_CUDA *c, MPI_Comm comm, PetscInt u, PetscInt U, const double *xy, PetscInt ns, PetscInt64 s0, PetscInt64 tg0, PetscInt l0, PetscInt *boxof, PetscInt *keep, const FMMCUDAUploads *up)
{
  const PetscInt   n0 = (PetscInt)1 << (2 * l0), nch = (u + SEG_CHUNK - 1) / SEG_CHUNK;
  FMMCUDATreeInput in{};
  FMMTreeWork      tw{};
  FMMTreeWork     *w    = &tw;
  FMMCarve         work = {NULL, 0};
  size_t           scr  = 0;
  PetscMPIInt      size;
  SplitLists       lists;
  SplitTiles       tiles;
  PetscInt        *hoff, *hnoff, *need, *act, *hcnt, *gcnt, *ncnt, *dcnt, rounds = 0, M, *mc;
  PetscInt64      *lt;
  double          *hbb, *dbb;
  char            *hdir;
  TopWin          *hwin, *dwin;
  TopKey          *hprop, *allp, *dprop, *cand, *dcand;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  in.U       = u;
  in.median  = PETSC_TRUE;
  in.keybits = 64;
  in.xy      = xy;
  w->c       = c;
  w->in      = &in;
  w->nroot   = 1;
  w->L       = l0;
  w->nleaves = n0;
  w->nboxes  = FMMLevelStart(l0 + 1);
  if (up) in.up = *up;
  w->K = (up && up->points && u >= SORT_PARTS_MIN) ? 2 : 1; /* (the sort's scratch below is sized for all u) */
  w->h = u / w->K;
  if (u) FMMCallCUDA(cub::DeviceRadixSort::SortPairs(NULL, scr, (unsigned long long *)NULL, (unsigned long long *)NULL, (PetscInt *)NULL, (PetscInt *)NULL, (int)u, 0, 64, c->stream));
  PetscCall(TreeWorkAlloc(w, scr, &work));
  PetscCall(TreeSort(w));
  PetscCall(PetscMalloc5(n0 + 1, &hoff, 2 * n0 + 1, &hnoff, n0, &need, n0, &act, n0, &gcnt));
  M = (PetscInt)size * TOP_PROPOSALS; /* the candidates of a cut */
  PetscCall(PetscMalloc6(n0, &ncnt, (size_t)2 * n0 * M, &lt, 4 * n0, &hbb, n0, &hdir, n0, &hwin, (size_t)n0 * TOP_PROPOSALS, &hprop));
  PetscCall(PetscMalloc4((size_t)size * n0 * TOP_PROPOSALS, &allp, (size_t)n0 * M, &cand, n0, &mc, (size_t)2 * n0 * M, &hcnt));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dbb, sizeof(double) * 4 * n0, "the top cuts' boxes"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dwin, sizeof(TopWin) * n0, "the top cuts' windows"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dprop, sizeof(TopKey) * n0 * TOP_PROPOSALS, "the top cuts' proposals"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dcand, sizeof(TopKey) * n0 * M, "the top cuts' candidates"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dcnt, sizeof(PetscInt) * 2 * n0 * M, "the top cuts' counts"));
  {
    PetscInt h[2] = {0, u};
    FMMCallCUDA(cudaMemcpyAsync(w->off, h, sizeof(h), cudaMemcpyHostToDevice, c->stream));
  }
  lists = SplitLists{w->X, w->XO, u + 1, PetscMax(u, 1), w->sel};
  FMMCallCUDA(tiles.Init((int)w->ntiles, w->tst, w->tbytes));
  gcnt[0] = U;
  for (PetscInt r = 0; r < 2 * l0; r++) {
    const PetscInt nseg = (PetscInt)1 << r;
    PetscBool      busy = PETSC_TRUE;
    /* the segments' bounding boxes over all ranks, the directions */
    FMMLaunch(SegmentKernel, LAUNCH_N(PetscMax(nseg, nch + 1)), nseg, w->off, lists, xy, w->noff, w->dir, dbb, NULL, NULL, NULL, nch, w->cseg, tiles, (int)w->ntiles);
    FMMCheckLaunch();
    PetscCall(FMMCUDAReadback(c->stream, hbb, dbb, sizeof(double) * 4 * nseg));
    PetscCall(FMMCUDAReadback(c->stream, hoff, w->off, sizeof(PetscInt) * (nseg + 1)));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, hbb, 4 * nseg, MPIU_REAL, MPIU_MIN, comm));
    for (PetscInt s = 0; s < nseg; s++) {
      const double *q = hbb + 4 * s;
      hdir[s]         = (-q[3] - q[1] > -q[2] - q[0]) ? 1 : 0; /* y where the box is taller */
      need[s]         = gcnt[s] / 2;
      act[s]          = gcnt[s];
      hwin[s]         = TopWin{hoff[s], hoff[s + 1]};
    }
    FMMCallCUDA(cudaMemcpyAsync(w->dir, hdir, nseg, cudaMemcpyHostToDevice, c->stream));
    /* the selection of each segment's cut */
    while (busy) {
      PetscCheck(++rounds < 100000, comm, PETSC_ERR_PLIB, "MATFMM CUDA: the top cuts' selection did not converge");
      FMMCallCUDA(cudaMemcpyAsync(dwin, hwin, sizeof(TopWin) * nseg, cudaMemcpyHostToDevice, c->stream));
      FMMLaunch(TopProposeKernel, LAUNCH_N(nseg * TOP_PROPOSALS), nseg, lists, w->dir, dwin, xy, ns, s0, tg0, dprop);
      FMMCheckLaunch();
      PetscCall(FMMCUDAReadback(c->stream, hprop, dprop, sizeof(TopKey) * nseg * TOP_PROPOSALS));
      for (PetscInt s = 0; s < nseg; s++)
        if (need[s] == 0 || need[s] == act[s])
          for (int i = 0; i < TOP_PROPOSALS; i++) hprop[s * TOP_PROPOSALS + i].w = 0; /* done */
      PetscCallMPI(MPI_Allgather(hprop, (PetscMPIInt)(sizeof(TopKey) * nseg * TOP_PROPOSALS), MPI_BYTE, allp, (PetscMPIInt)(sizeof(TopKey) * nseg * TOP_PROPOSALS), MPI_BYTE, comm));
      for (PetscInt s = 0; s < nseg; s++) { /* the candidates: every rank's proposals, ascending (the same on every rank) */
        TopKey *cs = cand + (size_t)s * M;
        mc[s]      = 0;
        for (PetscMPIInt q = 0; q < size; q++)
          for (int i = 0; i < TOP_PROPOSALS; i++) {
            const TopKey x = allp[((size_t)q * nseg + s) * TOP_PROPOSALS + i];
            PetscInt     j = mc[s];
            if (!x.w) continue;
            for (; j > 0 && (x.c < cs[j - 1].c || (x.c == cs[j - 1].c && x.g < cs[j - 1].g)); j--) cs[j] = cs[j - 1];
            cs[j] = x;
            mc[s]++;
          }
        PetscCheck(mc[s] > 0 || need[s] == 0 || need[s] == act[s], PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: no proposal for an active cut");
        for (PetscInt j = mc[s]; j < M; j++) cs[j].w = 0;
      }
      FMMCallCUDA(cudaMemcpyAsync(dcand, cand, sizeof(TopKey) * nseg * M, cudaMemcpyHostToDevice, c->stream));
      FMMLaunch(TopCountKernel, LAUNCH_N(nseg * M), nseg, M, lists, w->dir, dwin, dcand, xy, ns, s0, tg0, dcnt);
      FMMCheckLaunch();
      PetscCall(FMMCUDAReadback(c->stream, hcnt, dcnt, sizeof(PetscInt) * 2 * nseg * M));
      for (PetscInt k = 0; k < 2 * nseg * M; k++) lt[k] = hcnt[k];
      PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, lt, (PetscMPIInt)(2 * nseg * M), MPIU_INT64, MPI_SUM, comm));
      busy = PETSC_FALSE;
      for (PetscInt s = 0; s < nseg; s++) { /* the window: the keys from the last candidate with at most need below to the next */
        const PetscInt64 *LT = lt + (size_t)2 * s * M;
        const PetscInt   *lc = hcnt + (size_t)2 * s * M, lo = hwin[s].lo;
        PetscInt          j  = -1;
        if (need[s] == 0 || need[s] == act[s]) continue;
        while (j + 1 < mc[s] && LT[2 * (j + 1)] <= need[s]) j++;
        if (j >= 0) { /* the keys below candidate j go left */
          hwin[s].lo = lo + lc[2 * j];
          need[s] -= (PetscInt)LT[2 * j];
          act[s] -= (PetscInt)LT[2 * j];
        }
        if (j + 1 < mc[s]) { /* candidate j + 1 and the keys above it go right */
          hwin[s].hi = lo + lc[2 * (j + 1)];
          act[s]     = (PetscInt)(LT[2 * (j + 1)] - (j >= 0 ? LT[2 * j] : 0));
        }
        if (need[s] != 0 && need[s] != act[s]) busy = PETSC_TRUE;
      }
    }
    /* the cuts, and the other list split by them */
    for (PetscInt s = 0; s < nseg; s++) {
      hnoff[2 * s]     = hoff[s];
      hnoff[2 * s + 1] = need[s] == 0 ? hwin[s].lo : hwin[s].hi;
      ncnt[2 * s]      = gcnt[s] / 2;
      ncnt[2 * s + 1]  = gcnt[s] - gcnt[s] / 2;
    }
    hnoff[2 * nseg] = u;
    PetscCall(PetscArraycpy(gcnt, ncnt, 2 * nseg));
    FMMCallCUDA(cudaMemcpyAsync(w->noff, hnoff, sizeof(PetscInt) * (2 * nseg + 1), cudaMemcpyHostToDevice, c->stream));
    if (u) FMMLaunch(SplitMoveKernel, (unsigned)w->ntiles, MNT, 0, c->stream, u, w->off, w->cseg, w->noff, w->dir, NULL, lists, w->nsel, xy, tiles);
    FMMCheckLaunch();
    { PetscInt *t = w->off; w->off = w->noff; w->noff = t; }
    { unsigned char *t = lists.sel; lists.sel = w->nsel; w->nsel = t; }
  }
  if (u) {
    FMMLaunch(TopBoxOfKernel, LAUNCH_N(u), u, n0, w->off, lists, boxof);
    FMMCheckLaunch();
    if (keep) FMMLaunch(TopKeepKernel, LAUNCH_N(u), u, n0, w->off, lists, keep);
    FMMCheckLaunch();
  }
  FMMCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscInfo(NULL, "GPU top cuts: %" PetscInt_FMT " levels, %" PetscInt_FMT " selection steps\n", l0, rounds));
  PetscCall(FMMCUDAFree(c->stream, dbb));
  PetscCall(FMMCUDAFree(c->stream, dwin));
  PetscCall(FMMCUDAFree(c->stream, dprop));
  PetscCall(FMMCUDAFree(c->stream, dcand));
  PetscCall(FMMCUDAFree(c->stream, dcnt));
  PetscCall(FMMCUDAFree(c->stream, work.base));
  PetscCall(PetscFree5(hoff, hnoff, need, act, gcnt));
  PetscCall(PetscFree6(ncnt, lt, hbb, hdir, hwin, hprop));
  PetscCall(PetscFree4(allp, cand, mc, hcnt));
  PetscFunctionReturn(0);
}
