/*
  MATFMM across ranks: the distributed tree and each rank's locally essential
  tree (docs/distributed-fmm.md).

  The tree is the pyramid of plan.c, built by all ranks together.  Its top
  l0 levels are cut by parallel selection: every cut at the median along the
  longer side of the box (as -mat_fmm_tree_split median) on the key
  (coordinate, global index), so the cuts are those one rank makes.  Rank r
  owns a contiguous run of the boxes of level l0 (4^l0 >= P of them, about
  U/P points each), receives their points from the caller's layout (copied
  where they stay on the rank, a PetscSF for the others), and builds the
  levels below with plan.c's split rule.  A backend may make the top cuts
  and the subtrees itself (FMMBackendOps topcuts, subtrees: the CUDA
  backend on the GPUs, cuda/fmm/tree/top.cuh, FMMCUDASubtrees), with the
  same cuts; else TopLevels() and FMMTreeSplit() here.

  Each rank then builds the interaction lists of its own boxes level by
  level, as plan.c does, fetching the geometry of the remote boxes its lists
  reach (one PetscSF a level), and from those lists the two exchanges of
  every product: the multipole expansions of the remote boxes in its far
  lists and the sources of the remote leaves in its near lists.  The boxes
  of levels 0..l0 are on every rank: the multipoles of level l0 are summed
  over ranks (MPI_Allreduce), those above by M2M on every rank, and the
  local expansions above level l0 are computed on every rank.  The CPU
  evaluation is in src/fmm/cpu/dist.c.
*/
#include "fmmimpl.h"
#if defined(_OPENMP)
  #include <omp.h>
#endif
#include "expansions.h"

/* part k holds the boxes [FirstBox(k), FirstBox(k + 1)) of level l0 (n0 = 4^l0), part PartOf(B) box B */
static inline PetscInt FirstBox(PetscMPIInt k, PetscMPIInt size, PetscInt n0)
{
  return (PetscInt)(((PetscInt64)k * n0) / size);
}

static inline PetscMPIInt PartOf(PetscInt B, PetscMPIInt size, PetscInt n0)
{
  PetscMPIInt k = (PetscMPIInt)(((PetscInt64)B * size) / n0);
  while (k + 1 < size && FirstBox(k + 1, size, n0) <= B) k++;
  while (k > 0 && FirstBox(k, size, n0) > B) k--;
  return k;
}

/* the rank that holds box B of level l0, the first of rank q's boxes, and their number */
static inline PetscMPIInt OwnerOf(const FMMParts *pa, PetscInt B)
{
  return pa->rankof[PartOf(B, pa->size, pa->n0)];
}
static inline PetscInt RankFirstBox(const FMMParts *pa, PetscMPIInt q)
{
  return FirstBox(pa->partof[q], pa->size, pa->n0);
}
static inline PetscInt RankBoxes(const FMMParts *pa, PetscMPIInt q)
{
  return FirstBox(pa->partof[q] + 1, pa->size, pa->n0) - FirstBox(pa->partof[q], pa->size, pa->n0);
}

/* the index of box s of level l >= l0 among the boxes rank q owns (levels l0, l0+1, .. in turn) */
static inline PetscInt OwnIndex(PetscInt l, PetscInt s, PetscInt l0, PetscMPIInt q, const FMMParts *pa)
{
  const PetscInt b0 = RankFirstBox(pa, q), nb0 = RankBoxes(pa, q), span = (PetscInt)1 << (2 * (l - l0));
  return nb0 * ((span - 1) / 3) + (s - b0 * span);
}

/*
  AssignParts - which rank holds which part of the distributed tree: the
  parts are the same whatever the caller's layout (the places of the
  points make them), but any rank may hold any part, and a point whose
  part is held by another rank than the one the caller gave it to moves
  at assembly and in every product.  So each part goes to a rank that
  holds many of its points: greedily, the largest counts first (ties: a
  rank its own part, then in order), then pairs of ranks swap parts while
  that keeps more points in place.  A caller whose layout follows space
  (points along a curve in order, a mesh partition) then moves few points;
  one who renumbers by MatFMMGetTreePartition() keeps the same assignment,
  and moves none.  cl: this rank's sources in each box of level l0, then
  its targets.  Beyond FMM_PARTS_ASSIGN_MAX ranks (the P x P counts on
  every rank) rank k holds part k.  Collective.
*/
#define FMM_PARTS_ASSIGN_MAX 256
typedef struct {
  PetscInt64 key; /* twice the points of rank i / size in part i % size, +1 where that is its own part */
  PetscInt   i;
} PartPair;

static int PartPairCompare(const void *a, const void *b) /* the largest key first, then by i: the same order on every rank */
{
  const PartPair *x = (const PartPair *)a, *y = (const PartPair *)b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return x->i < y->i ? -1 : (x->i > y->i);
}

static PetscErrorCode AssignParts(MPI_Comm comm, PetscInt n0, const PetscInt cl[], FMMParts *pa, PetscInt64 *stay, PetscInt64 *stayid)
{
  PetscMPIInt size, rank;
  PetscInt64 *w, *row;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  pa->size = size;
  pa->n0   = n0;
  PetscCall(PetscMalloc2(size, &pa->rankof, size, &pa->partof));
  for (PetscMPIInt k = 0; k < size; k++) pa->rankof[k] = pa->partof[k] = k;
  *stay = *stayid = -1;
  if (size == 1) PetscFunctionReturn(0);
  if (size > FMM_PARTS_ASSIGN_MAX) { /* rank k holds part k: the points that stay */
    PetscInt64 m = 0;
    for (PetscInt B = FirstBox(rank, size, n0); B < FirstBox(rank + 1, size, n0); B++) m += cl[B] + cl[n0 + B];
    PetscCallMPI(MPI_Allreduce(&m, stayid, 1, MPIU_INT64, MPI_SUM, comm));
    *stay = *stayid;
    PetscFunctionReturn(0);
  }
  PetscCall(PetscCalloc2(size, &row, (size_t)size * size, &w));
  for (PetscInt B = 0; B < n0; B++) row[PartOf(B, size, n0)] += cl[B] + cl[n0 + B];
  PetscCallMPI(MPI_Allgather(row, size, MPIU_INT64, w, size, MPIU_INT64, comm)); /* w[q size + k]: rank q's points in part k */
  { /* greedy: the largest counts first */
    const PetscInt m = (PetscInt)size * size;
    PartPair      *ord;
    PetscCall(PetscMalloc1(m, &ord));
    for (PetscInt i = 0; i < m; i++) ord[i] = (PartPair){2 * w[i] + (i / size == i % size ? 1 : 0), i}; /* a rank's own part first among equals */
    qsort(ord, (size_t)m, sizeof(PartPair), PartPairCompare);
    for (PetscMPIInt k = 0; k < size; k++) pa->rankof[k] = pa->partof[k] = -1;
    for (PetscInt j = 0; j < m; j++) {
      const PetscMPIInt q = (PetscMPIInt)(ord[j].i / size), k = (PetscMPIInt)(ord[j].i % size);
      if (pa->partof[q] < 0 && pa->rankof[k] < 0) {
        pa->partof[q] = k;
        pa->rankof[k] = q;
      }
    }
    PetscCall(PetscFree(ord));
  }
  for (PetscBool better = PETSC_TRUE; better;) { /* pairs of ranks swap parts where more points stay */
    better = PETSC_FALSE;
    for (PetscMPIInt a = 0; a < size; a++)
      for (PetscMPIInt b = a + 1; b < size; b++) {
        const PetscMPIInt ka = pa->partof[a], kb = pa->partof[b];
        if (w[(size_t)a * size + kb] + w[(size_t)b * size + ka] > w[(size_t)a * size + ka] + w[(size_t)b * size + kb]) {
          pa->partof[a] = kb;
          pa->partof[b] = ka;
          pa->rankof[kb] = a;
          pa->rankof[ka] = b;
          better         = PETSC_TRUE;
        }
      }
  }
  *stay = *stayid = 0;
  for (PetscMPIInt q = 0; q < size; q++) {
    *stay += w[(size_t)q * size + pa->partof[q]];
    *stayid += w[(size_t)q * size + q];
  }
  PetscCall(PetscFree2(row, w));
  PetscFunctionReturn(0);
}

PetscErrorCode FMMDistLevels(PetscInt U, PetscInt ct, PetscMPIInt size, PetscInt *L, PetscInt *l0)
{
  PetscFunctionBegin;
  *L = 0;
  while (*L < FMM_MAX_LEVELS && (PetscInt64)ct * ((PetscInt64)1 << (2 * *L)) < U) (*L)++;
  *l0 = 0;
  while (((PetscInt64)1 << (2 * *l0)) < size) (*l0)++;
  if ((((PetscInt64)1 << (2 * *l0)) % size) != 0) (*l0)++; /* at least 4 boxes a rank where they cannot be shared evenly */
  PetscFunctionReturn(0);
}

/* the halo's numbers of the fetched remote boxes (box rid[l][j] at roff[l] + j, levels 0..L): base, base + 1,
   ... for those a far list names (used[l][j]), level by level, ascending in each (their global order), -1
   for the others; returns how many.  The host's far lists and the backend's (FMMDistLists) number them so */
PetscInt FMMDistHaloNumbers(PetscInt L, const PetscInt *nrid, const PetscInt *roff, char *const *used, PetscInt base, PetscInt *hidx)
{
  PetscInt nh = 0;
  for (PetscInt l = 0; l <= L; l++)
    for (PetscInt j = 0; j < nrid[l]; j++) hidx[roff[l] + j] = used[l][j] ? base + nh++ : -1;
  return nh;
}

/* the bounding box of n points as (xmin, ymin, -xmax, -ymax); empty: PETSC_MAX_REAL (FMMBoxUnion4()) */
static void PointsBox(const FMMPoint *pt, PetscInt n, PetscReal q[4])
{
  q[0] = q[1] = q[2] = q[3] = PETSC_MAX_REAL;
  for (PetscInt u = 0; u < n; u++) {
    q[0] = PetscMin(q[0], pt[u].x);
    q[1] = PetscMin(q[1], pt[u].y);
    q[2] = PetscMin(q[2], -pt[u].x);
    q[3] = PetscMin(q[3], -pt[u].y);
  }
}

/* A candidate pivot of the parallel selection: the median key of a rank's
   active points of a box, and how many they are */
typedef struct {
  PetscReal c;
  PetscInt  i, w;
} Cand;

static inline PetscBool CandLess(const Cand *a, const Cand *b)
{
  return (a->c < b->c || (a->c == b->c && a->i < b->i)) ? PETSC_TRUE : PETSC_FALSE;
}

/* pt[a..e) in three: below lo, neither, above hi (NULL: no point is below /
   above it); *m1, *m2: where the middle part starts and ends */
static void Partition3(FMMPoint *pt, PetscInt a, PetscInt e, const FMMPoint *lo, const FMMPoint *hi, int dir, PetscInt *m1, PetscInt *m2)
{
  PetscInt l = a, mid = a, h = e;
  while (mid < h) {
    if (lo && FMMKeyLess(&pt[mid], lo, dir)) {
      FMMPoint t = pt[l];
      pt[l++]    = pt[mid];
      pt[mid++]  = t;
    } else if (hi && FMMKeyLess(hi, &pt[mid], dir)) {
      FMMPoint t = pt[--h];
      pt[h]      = pt[mid];
      pt[mid]    = t;
    } else mid++;
  }
  *m1 = l;
  *m2 = h;
}

static int CandCompare(const void *x, const void *y)
{
  return CandLess((const Cand *)x, (const Cand *)y) ? -1 : (CandLess((const Cand *)y, (const Cand *)x) ? 1 : 0);
}

/*
  Before the rounds of ParallelCut(): the need[b]-th smallest key of each box
  bracketed by two pivots from a sample (Floyd & Rivest, Comm. ACM 18 (1975)
  173).  Each rank's keys at S evenly spaced places of the box's active
  points are gathered; the pivots lie 3 sqrt(T) + 1 places either side of
  the sought key's place among the T gathered; one count of the points below
  each (all threads) says whether they bracket it.  Where they do, the
  active points are split three ways and the rounds go on among the middle
  ones only (a few percent).  Exact either way: a failed bracket changes
  nothing.
*/
static PetscErrorCode Bracket(MPI_Comm comm, FMMPoint *pt, PetscInt nb, const int dir[], PetscInt a[], PetscInt e[], PetscInt need[], PetscInt act[])
{
  PetscMPIInt size;
  PetscInt    S, *cnt;
  Cand       *mine, *all, *t;
  FMMPoint   *piv;
  char       *has;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  S = PetscMax(16, PetscMin(4096, (1 << 20) / (nb * size)));
  PetscCall(PetscMalloc4((size_t)nb * S, &mine, (size_t)nb * S * size, &all, (size_t)S * size, &t, 2 * nb, &piv));
  PetscCall(PetscMalloc2(2 * nb, &cnt, 2 * nb, &has));
  for (PetscInt b = 0; b < nb; b++) {
    const PetscInt m = e[b] - a[b];
    for (PetscInt s = 0; s < S; s++) {
      const PetscInt u = m >= S ? a[b] + (PetscInt)(((PetscInt64)s * m) / S) : a[b] + s;
      mine[b * S + s]  = (need[b] == 0 || need[b] == act[b] || (m < S && s >= m)) ? (Cand){0, 0, 0} : (Cand){dir[b] ? pt[u].y : pt[u].x, pt[u].i, 1};
    }
  }
  PetscCallMPI(MPI_Allgather(mine, (PetscMPIInt)(nb * S * sizeof(Cand)), MPI_BYTE, all, (PetscMPIInt)(nb * S * sizeof(Cand)), MPI_BYTE, comm));
  for (PetscInt b = 0; b < nb; b++) {
    PetscInt T = 0;
    has[2 * b] = has[2 * b + 1] = 0;
    for (PetscMPIInt r = 0; r < size; r++)
      for (PetscInt s = 0; s < S; s++)
        if (all[((size_t)r * nb + b) * S + s].w) t[T++] = all[((size_t)r * nb + b) * S + s];
    if (T < 64) continue;
    qsort(t, (size_t)T, sizeof(Cand), CandCompare);
    {
      const PetscReal at = (PetscReal)need[b] / (PetscReal)act[b] * T, d = 3 * PetscSqrtReal((PetscReal)T) + 1;
      const PetscInt  lo = (PetscInt)PetscFloorReal(at - d), hi = (PetscInt)PetscCeilReal(at + d);
      if (lo >= 0) {
        has[2 * b] = 1;
        piv[2 * b] = (FMMPoint){dir[b] ? 0 : t[lo].c, dir[b] ? t[lo].c : 0, t[lo].i, 0};
      }
      if (hi < T) {
        has[2 * b + 1] = 1;
        piv[2 * b + 1] = (FMMPoint){dir[b] ? 0 : t[hi].c, dir[b] ? t[hi].c : 0, t[hi].i, 0};
      }
    }
  }
  for (PetscInt b = 0; b < nb; b++) { /* below the lower pivot; not above the upper one */
    const FMMPoint *pl = &piv[2 * b], *ph = &piv[2 * b + 1];
    const int       dr = dir[b], hl = has[2 * b], hh = has[2 * b + 1];
    PetscInt        L = 0, H = 0;
#pragma omp parallel for reduction(+ : L, H) if (e[b] - a[b] >= FMM_OMP_MIN_POINTS)
    for (PetscInt u = a[b]; u < e[b]; u++) {
      L += hl && FMMKeyLess(&pt[u], pl, dr);
      H += hh && !FMMKeyLess(ph, &pt[u], dr);
    }
    cnt[2 * b]     = L;
    cnt[2 * b + 1] = H;
  }
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, cnt, 2 * nb, MPIU_INT, MPI_SUM, comm));
  for (PetscInt b = 0; b < nb; b++) {
    const PetscInt L = has[2 * b] ? cnt[2 * b] : 0, H = has[2 * b + 1] ? cnt[2 * b + 1] : act[b];
    if (!(has[2 * b] || has[2 * b + 1]) || L > need[b] || H < need[b]) continue;
    Partition3(pt, a[b], e[b], has[2 * b] ? &piv[2 * b] : NULL, has[2 * b + 1] ? &piv[2 * b + 1] : NULL, dir[b], &a[b], &e[b]);
    need[b] -= L;
    act[b] = H - L;
  }
  PetscCall(PetscFree4(mine, all, t, piv));
  PetscCall(PetscFree2(cnt, has));
  PetscFunctionReturn(0);
}

/*
  Cuts each of the nb boxes (local point ranges off[], global counts cnt[])
  after its k[b] smallest keys along the longer side of its global bounding
  box: on return the local points of box b are reordered so that those
  [off[b], sp[b]) are the ones among the k[b] smallest.  After a bracket by
  samples (Bracket()), selection by the weighted median of the ranks' local
  medians: each round discards at least a quarter of the points still in
  play, and costs one MPI_Allgather and one MPI_Allreduce for all boxes
  together.
*/
static PetscErrorCode ParallelCut(MPI_Comm comm, FMMPoint *pt, PetscInt nb, const PetscInt off[], const PetscInt cnt[], const PetscInt k[], PetscInt sp[])
{
  PetscMPIInt size;
  PetscReal  *bb;
  PetscInt   *a, *e, *need, *act, *cntl, *m2, rounds = 0;
  int        *dir;
  Cand       *mine, *all, *c;
  PetscBool   busy = PETSC_TRUE;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(PetscMalloc5(4 * nb, &bb, nb, &a, nb, &e, nb, &need, nb, &act));
  PetscCall(PetscMalloc4(2 * nb, &cntl, nb, &dir, nb, &mine, (size_t)nb * size, &all));
  PetscCall(PetscMalloc2(size, &c, nb, &m2));
  for (PetscInt b = 0; b < nb; b++) PointsBox(pt + off[b], off[b + 1] - off[b], bb + 4 * b);
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, bb, 4 * nb, MPIU_REAL, MPIU_MIN, comm));
  for (PetscInt b = 0; b < nb; b++) {
    const PetscReal *q = bb + 4 * b;
    dir[b]             = (-q[3] - q[1] > -q[2] - q[0]) ? 1 : 0; /* as plan.c's median rule: y where the box is taller */
    a[b]               = off[b];
    e[b]               = off[b + 1];
    need[b]            = k[b];
    act[b]             = cnt[b];
  }
  PetscCall(Bracket(comm, pt, nb, dir, a, e, need, act));
  while (busy) {
    PetscCheck(++rounds < 400, comm, PETSC_ERR_PLIB, "MATFMM: parallel median selection did not converge");
    busy = PETSC_FALSE;
    for (PetscInt b = 0; b < nb; b++) {
      mine[b] = (Cand){0, 0, 0};
      if (need[b] == 0 || need[b] == act[b] || e[b] == a[b]) continue;
      FMMSelect(pt + a[b], e[b] - a[b], (e[b] - a[b]) / 2, dir[b]);
      {
        const FMMPoint *m = &pt[a[b] + (e[b] - a[b]) / 2];
        mine[b]           = (Cand){dir[b] ? m->y : m->x, m->i, e[b] - a[b]};
      }
    }
    PetscCallMPI(MPI_Allgather(mine, (PetscMPIInt)(nb * sizeof(Cand)), MPI_BYTE, all, (PetscMPIInt)(nb * sizeof(Cand)), MPI_BYTE, comm));
    for (PetscInt b = 0; b < nb; b++) {
      PetscInt nc = 0, W = 0, cum = 0;
      Cand     piv;
      cntl[2 * b] = cntl[2 * b + 1] = 0;
      if (need[b] == 0 || need[b] == act[b]) continue;
      for (PetscMPIInt r = 0; r < size; r++)
        if (all[(size_t)r * nb + b].w > 0) { /* insertion by key */
          Cand     x = all[(size_t)r * nb + b];
          PetscInt j = nc++;
          for (; j > 0 && CandLess(&x, &c[j - 1]); j--) c[j] = c[j - 1];
          c[j] = x;
          W += x.w;
        }
      piv = c[0];
      for (PetscInt j = 0; j < nc; j++) { /* weighted median of the medians */
        cum += c[j].w;
        if (2 * cum >= W) {
          piv = c[j];
          break;
        }
      }
      { /* the active points: < pivot, = pivot, > pivot */
        const FMMPoint P = {dir[b] ? 0 : piv.c, dir[b] ? piv.c : 0, piv.i, 0};
        Partition3(pt, a[b], e[b], &P, &P, dir[b], &sp[b], &m2[b]);
        cntl[2 * b]     = sp[b] - a[b];
        cntl[2 * b + 1] = m2[b] - sp[b];
      }
    }
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, cntl, 2 * nb, MPIU_INT, MPI_SUM, comm));
    for (PetscInt b = 0; b < nb; b++) {
      PetscInt LT = cntl[2 * b], EQ = cntl[2 * b + 1];
      if (need[b] == 0 || need[b] == act[b]) continue;
      if (LT >= need[b]) { /* the pivot and all above it go right */
        e[b]   = sp[b];
        act[b] = LT;
      } else { /* all below it and the pivot go left */
        a[b] = m2[b];
        need[b] -= LT + EQ;
        act[b] -= LT + EQ;
      }
      if (need[b] != 0 && need[b] != act[b]) busy = PETSC_TRUE;
    }
  }
  for (PetscInt b = 0; b < nb; b++) sp[b] = need[b] == 0 ? a[b] : e[b];
  PetscCall(PetscFree5(bb, a, e, need, act));
  PetscCall(PetscFree4(cntl, dir, mine, all));
  PetscCall(PetscFree2(c, m2));
  PetscFunctionReturn(0);
}

/* the top l0 levels: on return off[0..4^l0] are the local ranges of the
   boxes of level l0 and cnt[] their global counts */
static PetscErrorCode TopLevels(MPI_Comm comm, FMMPoint *pt, PetscInt u, PetscInt U, PetscInt l0, PetscInt **offp, PetscInt **cntp)
{
  PetscInt *off, *cnt;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(2, &off, 1, &cnt));
  off[0] = 0;
  off[1] = u;
  cnt[0] = U;
  for (PetscInt l = 0; l < l0; l++) {
    const PetscInt nb = (PetscInt)1 << (2 * l);
    PetscInt      *k1, *sp1, *off2, *cnt2, *k2, *sp2, *noff, *ncnt;
    PetscCall(PetscMalloc6(nb, &k1, nb, &sp1, 2 * nb + 1, &off2, 2 * nb, &cnt2, 2 * nb, &k2, 2 * nb, &sp2));
    for (PetscInt b = 0; b < nb; b++) k1[b] = cnt[b] / 2;
    PetscCall(ParallelCut(comm, pt, nb, off, cnt, k1, sp1));
    for (PetscInt b = 0; b < nb; b++) {
      off2[2 * b]     = off[b];
      off2[2 * b + 1] = sp1[b];
      cnt2[2 * b]     = k1[b];
      cnt2[2 * b + 1] = cnt[b] - k1[b];
    }
    off2[2 * nb] = off[nb];
    for (PetscInt h = 0; h < 2 * nb; h++) k2[h] = cnt2[h] / 2;
    PetscCall(ParallelCut(comm, pt, 2 * nb, off2, cnt2, k2, sp2));
    PetscCall(PetscMalloc2(4 * nb + 1, &noff, 4 * nb, &ncnt));
    for (PetscInt b = 0; b < nb; b++) {
      noff[4 * b]     = off[b];
      noff[4 * b + 1] = sp2[2 * b];
      noff[4 * b + 2] = sp1[b];
      noff[4 * b + 3] = sp2[2 * b + 1];
      ncnt[4 * b]     = k2[2 * b];
      ncnt[4 * b + 1] = cnt2[2 * b] - k2[2 * b];
      ncnt[4 * b + 2] = k2[2 * b + 1];
      ncnt[4 * b + 3] = cnt2[2 * b + 1] - k2[2 * b + 1];
    }
    noff[4 * nb] = u;
    PetscCall(PetscFree6(k1, sp1, off2, cnt2, k2, sp2));
    PetscCall(PetscFree2(off, cnt));
    off = noff;
    cnt = ncnt;
  }
  *offp = off;
  *cntp = cnt;
  PetscFunctionReturn(0);
}

/* an MPI type of n reals, for the SFs */
static PetscErrorCode RealsType(PetscInt n, MPI_Datatype *t)
{
  PetscFunctionBegin;
  PetscCallMPI(MPI_Type_contiguous((PetscMPIInt)n, MPIU_REAL, t));
  PetscCallMPI(MPI_Type_commit(t));
  PetscFunctionReturn(0);
}

/* D->unit: the MPI type of an expansion of ne reals, made once for the products' exchanges */
PetscErrorCode FMMDistUnit(FMMDist *D, PetscInt ne)
{
  PetscFunctionBegin;
  if (D->hasunit) PetscFunctionReturn(0);
  PetscCall(RealsType(ne, &D->unit));
  D->hasunit = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* the index of key in the sorted v[0..n), -1: not there (thread-safe, unlike PetscFindInt's error path) */
static inline PetscInt FindSorted(PetscInt key, PetscInt n, const PetscInt *v)
{
  PetscInt lo = 0, hi = n;
  while (lo < hi) {
    const PetscInt mid = lo + (hi - lo) / 2;
    if (v[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return (lo < n && v[lo] == key) ? lo : -1;
}

/* an SF of nleaves at ilocal (NULL: contiguous) from remote; it takes both arrays */
static PetscErrorCode MakeSF(MPI_Comm comm, PetscInt nroots, PetscInt nleaves, PetscInt *ilocal, PetscSFNode *remote, PetscSF *sf)
{
  PetscFunctionBegin;
  PetscCall(PetscSFCreate(comm, sf));
  PetscCall(PetscSFSetGraph(*sf, nroots, nleaves, ilocal, PETSC_OWN_POINTER, remote, PETSC_OWN_POINTER));
  PetscCall(PetscSFSetUp(*sf));
  PetscFunctionReturn(0);
}

/* The caller's n points to their owners' slots (box[k]: each one's box of level l0; cl: this rank's points in
   each box, c: all ranks', e: the ranks' before this one): a box's points take its owner's slots in rank
   order, each rank's in the caller's order (so in the order of their global indices: the key's ties, which
   a backend's subtrees break by position).  Those that stay on this rank are copied (*lmap: for each of
   its nroots slots the caller's point there, -1: another rank's), the others go through *sf (leaves: their
   caller's indices; roots: the slots other ranks feed, numbered apart in slot order, *croot their slots on
   this rank); the product's densities take the same PetscSF.  Every rank numbers those roots from the
   owners' counts of their own points, without a message, and no array of all n destinations is made (its
   pages cost more to touch than the loop).  box NULL: the points and their boxes are the backend's part
   (tgt: its targets), which keeps the slot map (partowners(); *lmap NULL) and lists the points that leave
   box by box.  Collective */
static PetscErrorCode OwnerMoves(FMMContext *ctx, FMMBackend ops, PetscBool tgt, MPI_Comm comm, const FMMParts *pa, PetscInt n, const PetscInt box[], const PetscInt cl[], const PetscInt c[], const PetscInt e[], PetscInt nroots, PetscSF *sf, PetscInt **lmap, PetscInt **croot)
{
  const PetscInt n0 = pa->n0;
  PetscMPIInt    rank, *owner;
  PetscInt       B0, B1, ncr = 0, nrem = 0, *next, *own, *before, *il; /* a box's next slot; its owner's own points; the owner's own slots in its boxes before */
  PetscSFNode *rr;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  B0 = RankFirstBox(pa, rank);
  B1 = B0 + RankBoxes(pa, rank);
  PetscCall(PetscCalloc4(n0, &next, n0, &own, n0, &before, n0, &owner));
  for (PetscInt B = B0; B < B1; B++) own[B] = cl[B];
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, own, n0, MPIU_INT, MPI_SUM, comm));
  for (PetscInt B = 0; B < n0; B++) {
    owner[B] = OwnerOf(pa, B);
    if (B != RankFirstBox(pa, owner[B])) {
      next[B]   = next[B - 1] + c[B - 1];
      before[B] = before[B - 1] + own[B - 1];
    }
    if (owner[B] != rank) nrem += cl[B];
  }
  for (PetscInt B = B0; B < B1; B++) ncr += c[B] - cl[B];
  PetscCall(PetscMalloc1(ncr, croot));
  for (PetscInt B = B0, j = 0; B < B1; B++) { /* the box's slots around this rank's own: the received ones */
    for (PetscInt s = next[B]; s < next[B] + e[B]; s++) (*croot)[j++] = s;
    for (PetscInt s = next[B] + e[B] + cl[B]; s < next[B] + c[B]; s++) (*croot)[j++] = s;
  }
  for (PetscInt B = 0; B < n0; B++) next[B] += e[B];
  PetscCall(PetscMalloc1(nrem, &il));
  PetscCall(PetscMalloc1(nrem, &rr));
  if (!box) { /* on the backend: the slot map there, the points that leave here box by box */
    PetscInt *first;
    PetscCall(PetscMalloc1(n0, &first));
    for (PetscInt B = 0; B < n0; B++) first[B] = owner[B] == rank ? next[B] : -1;
    PetscCall((*ops->partowners)(ctx, tgt, n0, cl, first, nroots, nrem, il));
    PetscCall(PetscFree(first));
    for (PetscInt B = 0, j = 0; B < n0; B++) {
      const PetscMPIInt q = owner[B];
      if (q != rank)
        for (PetscInt s = next[B]; s < next[B] + cl[B]; s++, j++) rr[j] = (PetscSFNode){q, s - before[B] - (q < rank ? own[B] : 0)};
    }
    *lmap = NULL;
  } else { /* in T chunks of the caller's points, each given its first slot in each box and its first remote
       point by counts, so that the slots are those of one pass in order */
#if defined(_OPENMP)
    const int T = n >= FMM_OMP_MIN_POINTS ? omp_get_max_threads() : 1;
#else
    const int T = 1;
#endif
    PetscInt *at; /* [T][n0 + 1]: a chunk's points in each box, then its remote points; then their starts */
    PetscCall(PetscMalloc1(PetscMax(nroots, 1), lmap));
#pragma omp parallel for schedule(static) if (nroots >= FMM_OMP_MIN_POINTS)
    for (PetscInt r = 0; r < nroots; r++) (*lmap)[r] = -1;
    PetscCall(PetscCalloc1((size_t)T * (n0 + 1), &at));
#pragma omp parallel for schedule(static, 1) num_threads(T) if (T > 1)
    for (int t = 0; t < T; t++) {
      PetscInt *a = at + (size_t)t * (n0 + 1);
      for (PetscInt k = (PetscInt)((PetscInt64)n * t / T); k < (PetscInt)((PetscInt64)n * (t + 1) / T); k++) {
        a[box[k]]++;
        if (owner[box[k]] != rank) a[n0]++;
      }
    }
    for (PetscInt B = 0; B <= n0; B++) {
      PetscInt run = B < n0 ? next[B] : 0;
      for (int t = 0; t < T; t++) {
        const PetscInt c             = at[(size_t)t * (n0 + 1) + B];
        at[(size_t)t * (n0 + 1) + B] = run;
        run += c;
      }
    }
#pragma omp parallel for schedule(static, 1) num_threads(T) if (T > 1)
    for (int t = 0; t < T; t++) {
      PetscInt *a = at + (size_t)t * (n0 + 1);
      for (PetscInt k = (PetscInt)((PetscInt64)n * t / T); k < (PetscInt)((PetscInt64)n * (t + 1) / T); k++) {
        const PetscInt    B = box[k], s = a[B]++;
        const PetscMPIInt q = owner[B];
        if (q == rank) (*lmap)[s] = k;
        else {
          const PetscInt j = a[n0]++;
          il[j]            = k;
          rr[j]            = (PetscSFNode){q, s - before[B] - (q < rank ? own[B] : 0)};
        }
      }
    }
    PetscCall(PetscFree(at));
  }
  PetscCall(PetscFree4(next, own, before, owner));
  PetscCall(MakeSF(comm, ncr, nrem, il, rr, sf));
  PetscFunctionReturn(0);
}

/* to[r] = r0 + k for each of the nroots slots r, k the caller's point there (OwnerMoves(); croot: the
   slots the sf's roots fill; nc: the caller's points on this rank, whose first has global index r0);
   collective */
static PetscErrorCode MoveIndices(PetscSF sf, const PetscInt lmap[], const PetscInt croot[], PetscInt nroots, PetscInt nc, PetscInt r0, PetscInt *to)
{
  PetscInt ncr, nleaves, *g = NULL, *v;

  PetscFunctionBegin;
  PetscCall(PetscSFGetGraph(sf, &ncr, &nleaves, NULL, NULL));
  if (nleaves > 0) { /* (only where points leave this rank) */
    PetscCall(PetscMalloc1(nc, &g));
    for (PetscInt k = 0; k < nc; k++) g[k] = r0 + k;
  }
#pragma omp parallel for schedule(static) if (nroots >= FMM_OMP_MIN_POINTS)
  for (PetscInt r = 0; r < nroots; r++)
    if (lmap[r] >= 0) to[r] = r0 + lmap[r];
  PetscCall(PetscMalloc1(ncr, &v));
  PetscCall(PetscSFReduceBegin(sf, MPIU_INT, g, v, MPI_REPLACE));
  PetscCall(PetscSFReduceEnd(sf, MPIU_INT, g, v, MPI_REPLACE));
  for (PetscInt j = 0; j < ncr; j++) to[croot[j]] = v[j];
  PetscCall(PetscFree(v));
  PetscCall(PetscFree(g));
  PetscFunctionReturn(0);
}

/* *v: the bs = 1 or 2 reals a point of the slots other ranks feed (OwnerMoves(): sf's *ncr roots, in
   croot's order) from the caller's from; collective.  PETSc's own MPI types: the products' device moves
   take the same PetscSF, and with an MPI type made and freed here they went wrong (PETSc 3.24 with CUDA) */
static PetscErrorCode ReceiveReals(PetscSF sf, PetscInt bs, const PetscReal *from, PetscInt *ncr, PetscReal **v)
{
  MPI_Datatype unit;

  PetscFunctionBegin;
  PetscCheck(bs == 1 || bs == 2, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: moves of %" PetscInt_FMT " reals a point", bs);
  PetscCall(PetscSFGetGraph(sf, ncr, NULL, NULL, NULL));
  PetscCall(PetscMalloc1(bs * *ncr, v));
  unit = bs == 1 ? MPIU_REAL : MPIU_2SCALAR; /* (PetscScalar is PetscReal: petscfmm.h) */
  PetscCall(PetscSFReduceBegin(sf, unit, from, *v, MPI_REPLACE));
  PetscCall(PetscSFReduceEnd(sf, unit, from, *v, MPI_REPLACE));
  PetscFunctionReturn(0);
}

/* to[r] = from[k] (bs reals) for each of the nroots slots r, k the caller's point there (OwnerMoves(),
   croot as MoveIndices()); collective */
static PetscErrorCode MoveReals(PetscSF sf, const PetscInt lmap[], const PetscInt croot[], PetscInt nroots, PetscInt bs, const PetscReal *from, PetscReal *to)
{
  PetscInt   ncr;
  PetscReal *v;

  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if (nroots >= FMM_OMP_MIN_POINTS)
  for (PetscInt r = 0; r < nroots; r++)
    if (lmap[r] >= 0)
      for (PetscInt j = 0; j < bs; j++) to[bs * r + j] = from[bs * lmap[r] + j];
  PetscCall(ReceiveReals(sf, bs, from, &ncr, &v));
#pragma omp parallel for schedule(static) if (ncr >= FMM_OMP_MIN_POINTS)
  for (PetscInt c = 0; c < ncr; c++)
    for (PetscInt j = 0; j < bs; j++) to[bs * croot[c] + j] = v[bs * c + j];
  PetscCall(PetscFree(v));
  PetscFunctionReturn(0);
}

/* the roots of sf that leaves name (PetscSFGetLeafRanks(): every rank's leaves, this one's too; with
   repeats), *nref of them at *ref (sf's own array) */
static PetscErrorCode NamedRoots(PetscSF sf, PetscInt *nref, const PetscInt **ref)
{
#if PETSC_VERSION_LT(3, 22, 0)
  PetscInt niranks;
#else
  PetscMPIInt niranks; /* (PetscMPIInt since PETSc 3.22) */
#endif
  const PetscMPIInt *iranks;
  const PetscInt    *ioffset;

  PetscFunctionBegin;
  PetscCall(PetscSFGetLeafRanks(sf, &niranks, &iranks, &ioffset, ref));
  *nref = ioffset[niranks];
  PetscFunctionReturn(0);
}

/* sf's roots that have leaves, numbered in root order (croot[0..nc): their indices), and sfc: the same
   leaves, each pointing at its root's number.  Only the named roots are visited (NamedRoots()), not all
   of sf's: the halo's SF has a root for each of the rank's sources and a few leaves */
static PetscErrorCode CompactRoots(PetscSF sf, PetscInt *nc, PetscInt **croot, PetscSF *sfc)
{
  MPI_Comm           comm;
  PetscInt           nroots, nleaves, lstart, lend, nref = 0, *num, *lnum;
  const PetscInt    *ilocal, *ref = NULL;
  const PetscSFNode *rem;
  PetscSFNode       *rr;

  PetscFunctionBegin;
  PetscCall(PetscObjectGetComm((PetscObject)sf, &comm));
  PetscCall(PetscSFGetGraph(sf, &nroots, &nleaves, &ilocal, &rem));
  PetscCall(PetscSFGetLeafRange(sf, &lstart, &lend));
  PetscCall(NamedRoots(sf, &nref, &ref));
  *nc = nref;
  PetscCall(PetscMalloc1(PetscMax(nref, 1), croot));
  PetscCall(PetscArraycpy(*croot, ref, nref));
  PetscCall(PetscSortRemoveDupsInt(nc, *croot));
  PetscCall(PetscMalloc1(PetscMax(nroots, 1), &num)); /* set at the named roots only, the only ones PetscSF reads */
  PetscCall(PetscMalloc1(PetscMax(lend + 1, 1), &lnum));
  for (PetscInt c = 0; c < *nc; c++) num[(*croot)[c]] = c;
  PetscCall(PetscSFBcastBegin(sf, MPIU_INT, num, lnum, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(sf, MPIU_INT, num, lnum, MPI_REPLACE));
  PetscCall(PetscMalloc1(nleaves, &rr));
  for (PetscInt k = 0; k < nleaves; k++) rr[k] = (PetscSFNode){rem[k].rank, lnum[ilocal ? ilocal[k] : k]};
  PetscCall(PetscSFCreate(comm, sfc));
  PetscCall(PetscSFSetGraph(*sfc, *nc, nleaves, (PetscInt *)ilocal, PETSC_COPY_VALUES, rr, PETSC_OWN_POINTER));
  PetscCall(PetscSFSetUp(*sfc));
  PetscCall(PetscFree(num));
  PetscCall(PetscFree(lnum));
  PetscFunctionReturn(0);
}

/* the moves of OwnerMoves() (sf, lmap, croot: the caller's nc points -> this rank's slots) as a number for
   each of this rank's n points in tree order (perm: its slot): its caller's index where that is on this
   rank (0..nc), else nc + its number among the slots fed from other ranks (sf's root), which *sfr (sf
   itself) moves; *nr of them */
static PetscErrorCode SplitMoves(PetscSF sf, const PetscInt lmap[], const PetscInt croot[], PetscInt nc, PetscInt n, const PetscInt perm[], PetscInt **num, PetscInt *nr, PetscSF *sfr)
{
  PetscInt bad = -1, nroot;

  PetscFunctionBegin;
  PetscCall(PetscSFGetGraph(sf, nr, NULL, NULL, NULL));
  nroot = *nr;
  PetscCall(PetscMalloc1(PetscMax(n, 1), num));
#pragma omp parallel for schedule(static) reduction(max : bad) if (n >= FMM_OMP_MIN_POINTS)
  for (PetscInt i = 0; i < n; i++) { /* (croot ascends: the slots fed from other ranks in slot order) */
    const PetscInt r = perm[i], c = lmap[r] >= 0 ? -1 : FindSorted(r, nroot, croot);
    (*num)[i]        = lmap[r] >= 0 ? lmap[r] : (c >= 0 ? nc + c : -1);
    if ((*num)[i] < 0) bad = PetscMax(bad, r);
  }
  PetscCheck(bad < 0, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: slot %" PetscInt_FMT " of this rank's points is fed by no caller's point", bad);
  PetscCall(PetscObjectReference((PetscObject)sf));
  *sfr = sf;
  PetscFunctionReturn(0);
}

/* a product's moves between the caller's layout and the tree's (the numbers of FMMDist: nxc ... sfhd; where
   the points are the backend's part, the numbers cin and cout stay there, partnumbers()) */
static PetscErrorCode FMMDistIOSetup(FMMContext *ctx, FMMBackend ops, FMMDist *D, PetscInt ns, PetscInt mt)
{
  MPI_Comm           comm;
  PetscInt           nroots, nleaves, nx = 0, nd = 0, *code, *lcode, *ix, *id;
  const PetscInt    *ilocal;
  const PetscSFNode *rem;
  PetscSFNode       *rx, *rd;

  PetscFunctionBegin;
  D->nxc = ns;
  D->myc = D->same ? ns : mt;
  if (D->devpart) {
    PetscCall(PetscSFGetGraph(D->sfsrc, &D->nrr, NULL, NULL, NULL));
    PetscCall(PetscObjectReference((PetscObject)D->sfsrc));
    D->sfin = D->sfsrc;
    D->nrt  = D->nrr;
    if (!D->same) {
      PetscCall(PetscSFGetGraph(D->sftgt, &D->nrt, NULL, NULL, NULL));
      PetscCall(PetscObjectReference((PetscObject)D->sftgt));
      D->sfout = D->sftgt;
      PetscCall((*ops->partnumbers)(ctx, PETSC_TRUE, mt, D->nrt, D->ctgt, 0, NULL, NULL));
    }
  } else {
    PetscCall(SplitMoves(D->sfsrc, D->lsrc, D->csrc, ns, D->n, D->sperm, &D->cin, &D->nrr, &D->sfin));
    if (D->same) {
      D->nrt  = D->nrr;
      D->cout = D->cin;
    } else PetscCall(SplitMoves(D->sftgt, D->ltgt, D->ctgt, mt, D->m, D->tperm, &D->cout, &D->nrt, &D->sfout));
  }
  /* the halo: each of its sources from its owner's x (code >= 0: the column) or din (code < 0: -1 - its
     place), two PetscSFs rooted there, so the owner's columns go without a gather of ours (PetscSF packs
     them where x lives) */
  PetscCall(PetscObjectGetComm((PetscObject)D->sfhalo, &comm));
  PetscCall(PetscSFGetGraph(D->sfhalo, &nroots, &nleaves, &ilocal, &rem));
  PetscCheck(!ilocal && nroots == D->n, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: the halo's SF has contiguous leaves and a root for each of the rank's sources");
  PetscCall(PetscMalloc2(PetscMax(nroots, 1), &code, PetscMax(nleaves, 1), &lcode));
  {
    PetscInt        nref = 0;
    const PetscInt *ref  = NULL;
    PetscInt       *num = NULL;
    PetscCall(NamedRoots(D->sfhalo, &nref, &ref)); /* (set there only, the only roots PetscSF reads) */
    if (D->devpart) {
      PetscCall(PetscMalloc1(PetscMax(nref, 1), &num));
      PetscCall((*ops->partnumbers)(ctx, PETSC_FALSE, ns, D->nrr, D->csrc, nref, ref, num));
    }
    for (PetscInt j = 0; j < nref; j++) {
      const PetscInt i = ref[j], c = num ? num[j] : D->cin[i];
      code[i]          = c < D->nxc ? c : -1 - (c - D->nxc);
    }
    PetscCall(PetscFree(num));
  }
  PetscCall(PetscSFBcastBegin(D->sfhalo, MPIU_INT, code, lcode, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(D->sfhalo, MPIU_INT, code, lcode, MPI_REPLACE));
  for (PetscInt h = 0; h < nleaves; h++) lcode[h] >= 0 ? nx++ : nd++;
  PetscCall(PetscMalloc1(nx, &ix));
  PetscCall(PetscMalloc1(nx, &rx));
  PetscCall(PetscMalloc1(nd, &id));
  PetscCall(PetscMalloc1(nd, &rd));
  for (PetscInt h = 0, jx = 0, jd = 0; h < nleaves; h++) { /* leaf h is din[nrr + h] */
    if (lcode[h] >= 0) {
      ix[jx]   = D->nrr + h;
      rx[jx++] = (PetscSFNode){rem[h].rank, lcode[h]};
    } else {
      id[jd]   = D->nrr + h;
      rd[jd++] = (PetscSFNode){rem[h].rank, -1 - lcode[h]};
    }
  }
  PetscCall(PetscFree2(code, lcode));
  PetscCall(MakeSF(comm, D->nxc, nx, ix, rx, &D->sfhx));
  PetscCall(MakeSF(comm, D->nrr, nd, id, rd, &D->sfhd));
  PetscCall(PetscMalloc2(D->nrr + D->nh, &D->din, D->nrt, &D->dout));
  PetscFunctionReturn(0);
}

/*
  FMMDistDeviceIO - a product's densities from other ranks and potentials for them (D->din, D->dout) in
  the device memory mem, where the backend evaluates the product there and PETSc moves device memory
  (PetscSF with memory types): the moves of a product then stay on the GPUs where the caller's vectors
  are device vectors.  Not collective.
*/
PetscErrorCode FMMDistDeviceIO(FMMDist *D, const FMMDeviceMemory *mem)
{
  PetscFunctionBegin;
  if (D->iomem || !mem) PetscFunctionReturn(0);
  PetscCall(PetscFree2(D->din, D->dout));
  PetscCall((*mem->alloc)((size_t)PetscMax(D->nrr + D->nh, 1), &D->din));
  PetscCall((*mem->alloc)((size_t)PetscMax(D->nrt, 1), &D->dout));
  D->iomem = mem;
  PetscFunctionReturn(0);
}

/* fetch nr reals a box of the remote boxes ids[0..n) of level l from their owners' table T (OwnIndex order) */
static PetscErrorCode FetchBoxes(MPI_Comm comm, PetscInt l, PetscInt l0, const FMMParts *pa, PetscInt nown, const PetscReal *T, PetscInt nr, PetscInt n, const PetscInt ids[], PetscReal *out)
{
  PetscSFNode *rem;
  PetscSF      sf;
  MPI_Datatype t;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(n, &rem));
  for (PetscInt j = 0; j < n; j++) {
    const PetscMPIInt q = OwnerOf(pa, ids[j] >> (2 * (l - l0)));
    rem[j].rank         = q;
    rem[j].index        = OwnIndex(l, ids[j], l0, q, pa);
  }
  PetscCall(MakeSF(comm, nown, n, NULL, rem, &sf));
  PetscCall(RealsType(nr, &t));
  PetscCall(PetscSFBcastBegin(sf, t, T, out, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(sf, t, T, out, MPI_REPLACE));
  PetscCallMPI(MPI_Type_free(&t));
  PetscCall(PetscSFDestroy(&sf));
  PetscFunctionReturn(0);
}

/* the remote boxes want of level l (any order, repeats allowed) made ascending and unique, handed over as
   *ids (n of them), and their FMM_NGEO reals fetched into *geo (FetchBoxes()); collective */
static PetscErrorCode FetchLevel(MPI_Comm comm, PetscInt l, PetscInt l0, const FMMParts *pa, PetscInt nown, const PetscReal *T, IntList *want, PetscInt **ids, PetscInt *n, PetscReal **geo)
{
  PetscFunctionBegin;
  PetscCall(PetscSortRemoveDupsInt(&want->n, want->v));
  *ids = want->v;
  *n   = want->n;
  PetscCall(PetscMalloc1(FMM_NGEO * PetscMax(want->n, 1), geo));
  PetscCall(FetchBoxes(comm, l, l0, pa, nown, T, FMM_NGEO, want->n, want->v, *geo));
  PetscFunctionReturn(0);
}

/* FMMDistLists' fetch: the children of the remote boxes par of level l - 1 (FetchLevel()); collective */
typedef struct {
  MPI_Comm         comm;
  PetscInt         l0;
  const FMMParts  *pa;
  PetscInt         nown;
  const PetscReal *T;
} FetchCtx;

static PetscErrorCode FetchParents(void *ctx, PetscInt l, PetscInt n, const PetscInt *par, PetscInt **rid, PetscInt *nrid, PetscReal **rgeo)
{
  FetchCtx *f    = (FetchCtx *)ctx;
  IntList   want = {NULL, 0, PetscMax(4 * n, 1)};

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(want.cap, &want.v));
  for (PetscInt j = 0; j < n; j++)
    for (int c = 0; c < 4; c++) want.v[want.n++] = 4 * par[j] + c;
  PetscCall(FetchLevel(f->comm, l, f->l0, f->pa, f->nown, f->T, &want, rid, nrid, rgeo));
  PetscFunctionReturn(0);
}

PetscErrorCode FMMDistDestroy(FMMDist **dp)
{
  FMMDist *D = *dp;

  PetscFunctionBegin;
  if (!D) PetscFunctionReturn(0);
  PetscCall(PetscFree(D->cx));
  PetscCall(PetscFree(D->cy));
  PetscCall(PetscFree(D->scale));
  PetscCall(PetscFree2(D->nsb, D->ntb));
  PetscCall(PetscFree(D->halbox));
  PetscCall(PetscFree(D->halleaf));
  PetscCall(PetscFree2(D->xexp, D->ximp));
  PetscCall(PetscFree2(D->xtop, D->xbinom));
  if (D->hasunit) PetscCallMPI(MPI_Type_free(&D->unit));
  PetscCall(PetscSFDestroy(&D->sfmpc));
  PetscCall(PetscFree(D->faroff));
  PetscCall(PetscFree(D->far));
  PetscCall(PetscFree(D->sx));
  PetscCall(PetscFree(D->sy));
  PetscCall(PetscFree(D->cq));
  PetscCall(PetscFree(D->cdx));
  PetscCall(PetscFree(D->cdy));
  PetscCall(PetscFree(D->sleaf));
  PetscCall(PetscFree(D->nearoff));
  PetscCall(PetscFree(D->near));
  PetscCall(PetscFree(D->tleaf));
  if (!D->same) {
    PetscCall(PetscFree(D->tx));
    PetscCall(PetscFree(D->ty));
  }
  PetscCall(PetscFree(D->sperm));
  if (!D->same) PetscCall(PetscFree(D->tperm));
  PetscCall(PetscSFDestroy(&D->sfsrc));
  if (D->sftgt) PetscCall(PetscSFDestroy(&D->sftgt));
  PetscCall(PetscFree(D->lsrc));
  PetscCall(PetscFree(D->ltgt));
  PetscCall(PetscFree(D->csrc));
  PetscCall(PetscFree(D->ctgt));
  PetscCall(PetscSFDestroy(&D->sfhalo));
  PetscCall(PetscFree(D->cin));
  if (!D->same) PetscCall(PetscFree(D->cout));
  PetscCall(PetscSFDestroy(&D->sfin));
  PetscCall(PetscSFDestroy(&D->sfout));
  PetscCall(PetscSFDestroy(&D->sfhx));
  PetscCall(PetscSFDestroy(&D->sfhd));
  if (D->iomem) {
    PetscCall((*D->iomem->free)(D->din));
    PetscCall((*D->iomem->free)(D->dout));
  } else PetscCall(PetscFree2(D->din, D->dout));
  PetscCall(PetscSFDestroy(&D->sfmp));
  PetscCall(FMMDistResetCPU(D));
  PetscCall(PetscFree2(D->parts.rankof, D->parts.partof));
  PetscCall(PetscFree(*dp));
  PetscFunctionReturn(0);
}

/*
  FMMDistBuild - the distributed tree of the matrix's points (in host
  memory, in the caller's layout) and this rank's lists and exchanges.
  Where the backend cuts the top levels it keeps the points in its memory
  (FMMContext part) and they stay there: their boxes, slots, tree order,
  coefficients and the product's numbers are made there (partowners(),
  partslots(), subtrees(), partorder(), partnumbers()), and the host holds
  counts, the points that change rank and the halo's.  Collective.
*/
PetscErrorCode FMMDistBuild(Mat A, FMMDist **dp)
{
  Mat_FMM         *fmm  = (Mat_FMM *)A->data;
  const FMMParams *par  = &fmm->par;
  MPI_Comm         comm = PetscObjectComm((PetscObject)A);
  const PetscBool  same = fmm->tgt.m < 0 ? PETSC_TRUE : PETSC_FALSE;
  const PetscInt   N = A->cmap->N, Mg = same ? 0 : A->rmap->N, U = N + Mg, s0 = A->cmap->rstart, t0 = A->rmap->rstart;
  const PetscInt   ns = fmm->src.n, mt = same ? 0 : fmm->tgt.m, u = ns + mt;
  PetscMPIInt      rank, size;
  FMMDist         *D;
  FMMPoint        *pt, *lp = NULL;
  PetscInt         L, l0, n0, B0, B1, nb0, *boxof = NULL, *cl, *cs, *ctg, *es, *et, nr, mr, nob, ntop, nl, *loff;
  PetscInt        *sperm = NULL, *tperm = NULL, *ord = NULL; /* ord: the points (slot, or nr + target slot) in tree order */
  PetscReal       *rxy = NULL, *rnrm = NULL, *rw = NULL, *txy = NULL, *bb, *T, *top;
  PetscInt        *rgi = NULL, *tgi = NULL; /* the points' global indices: the host's subtrees' ties (not moved where the GPUs cut the top, so that every rank's GPU makes its subtrees) */
  PetscBool        anynrm, anywts, gpubb = PETSC_FALSE, gputop = PETSC_FALSE;
  PetscLogDouble   tm[8], rm[8]; /* the stages' start times and resident memory, for -info */

  PetscFunctionBegin;
  PetscCall(FMMStageMark(&tm[0], &rm[0]));
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(FMMDistLevels(U, par->ct, size, &L, &l0));
  PetscCheck(l0 <= L, comm, PETSC_ERR_PLIB, "MATFMM: too few points for the distributed tree");
  PetscCall(PetscNew(&D));
  *dp   = D;
  n0    = (PetscInt)1 << (2 * l0);
  ntop  = FMMLevelStart(l0 + 1);
  D->L  = L;
  D->l0 = l0;
  D->same = same;
  D->ntop = ntop;
  {
    PetscMPIInt has[2] = {fmm->src.hasnrm ? 1 : 0, fmm->src.haswts ? 1 : 0};
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, has, 2, MPI_INT, MPI_LOR, comm));
    anynrm = (has[0] && par->alpha != 0.0) ? PETSC_TRUE : PETSC_FALSE;
    anywts = has[1] ? PETSC_TRUE : PETSC_FALSE;
    D->dipoles = anynrm;
  }

  /* 1. the top levels, cut in parallel: each point's box of level l0 (boxof: the sources, then the
     targets; on the GPUs where the backend can, which keeps them and gives their counts cl) */
  PetscCall(PetscLogEventBegin(MATFMM_Partition, A, 0, 0, 0));
  PetscCall(PetscCalloc1(2 * n0, &cl)); /* this rank's sources in each box, then its targets */
  if (fmm->ops->topcuts) PetscCall((*fmm->ops->topcuts)(&fmm->ctx, comm, ns, fmm->src.block, mt, same ? NULL : fmm->tgt.xy, s0, N + t0, U, l0, cl, &gputop));
  if (!gputop) {
    PetscInt *off, *cnt;
    PetscCall(PetscMalloc1(PetscMax(u, 1), &boxof));
    PetscCall(PetscMalloc1(u, &pt));
    for (PetscInt k = 0; k < ns; k++) pt[k] = (FMMPoint){fmm->src.block[2 * k], fmm->src.block[2 * k + 1], s0 + k, k};
    for (PetscInt k = 0; k < mt; k++) pt[ns + k] = (FMMPoint){fmm->tgt.xy[2 * k], fmm->tgt.xy[2 * k + 1], N + t0 + k, ns + k};
    PetscCall(TopLevels(comm, pt, u, U, l0, &off, &cnt));
    for (PetscInt B = 0; B < n0; B++)
      for (PetscInt k = off[B]; k < off[B + 1]; k++) boxof[pt[k].j] = B;
    PetscCall(PetscFree(pt));
    PetscCall(PetscFree2(off, cnt));
    for (PetscInt k = 0; k < u; k++) cl[(k < ns ? 0 : n0) + boxof[k]]++;
  }
  { /* which rank holds which part: the one that holds most of its points */
    PetscInt64 stay, stayid;
    PetscCall(AssignParts(comm, n0, cl, &D->parts, &stay, &stayid));
    B0    = RankFirstBox(&D->parts, rank);
    nb0   = RankBoxes(&D->parts, rank);
    B1    = B0 + nb0;
    D->B0 = B0;
    D->B1 = B1;
    if (stay >= 0) PetscCall(PetscInfo(A, "the parts of the distributed tree on the ranks that hold most of their points: %" PetscInt64_FMT " of the %" PetscInt_FMT " points stay on their rank (%" PetscInt64_FMT " with part k on rank k)\n", stay, U, stayid));
    if (fmm->distribution == MATFMM_DISTRIBUTION_AUTO && fmm->device_used == MATFMM_DEVICE_CUDA && 2 * stay < (PetscInt64)U) { /* auto with CUDA: the replicated sources instead (same choice on every rank) */
      PetscCall(PetscSNPrintf(fmm->whybuf, sizeof(fmm->whybuf), "with CUDA, auto shares the tree out where at least half the points stay on their rank; here %.0f%% would, the rest moving in every product", 100.0 * (double)stay / (double)U));
      fmm->whynotdist = fmm->whybuf;
      PetscCall(PetscFree(cl));
      PetscCall(PetscFree(boxof));
      PetscCall(PetscLogEventEnd(MATFMM_Partition, A, 0, 0, 0));
      PetscCall(FMMDistDestroy(dp));
      PetscFunctionReturn(0);
    }
  }

  PetscCall(FMMStageMark(&tm[1], &rm[1]));
  /* 2. the points to the owners of their boxes: sources and targets each in
     box order, then by rank, then in the caller's order (OwnerMoves(): copied
     where they stay on the rank, a PetscSF for the others) */
  PetscCall(PetscCalloc4(n0, &cs, n0, &ctg, n0, &es, n0, &et));
  PetscCall(PetscArraycpy(cs, cl, n0));
  PetscCall(PetscArraycpy(ctg, cl + n0, n0));
  PetscCallMPI(MPI_Exscan(cs, es, (PetscMPIInt)n0, MPIU_INT, MPI_SUM, comm));
  PetscCallMPI(MPI_Exscan(ctg, et, (PetscMPIInt)n0, MPIU_INT, MPI_SUM, comm));
  if (rank == 0) {
    PetscCall(PetscArrayzero(es, n0));
    PetscCall(PetscArrayzero(et, n0));
  }
  D->devpart = gputop && fmm->ctx.part ? PETSC_TRUE : PETSC_FALSE;
  PetscCheck(gputop == D->devpart && (!D->devpart || (fmm->ops->partowners && fmm->ops->partslots && fmm->ops->partorder && fmm->ops->partnumbers && fmm->ops->partgather && fmm->ops->plannumbers)), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: the backend made the top cuts but keeps no part, or lacks the part's operations");
  {
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, cs, n0, MPIU_INT, MPI_SUM, comm));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, ctg, n0, MPIU_INT, MPI_SUM, comm));
    nr = mr = 0;
    for (PetscInt B = B0; B < B1; B++) {
      nr += cs[B];
      mr += ctg[B];
    }
    PetscCall(OwnerMoves(&fmm->ctx, fmm->ops, PETSC_FALSE, comm, &D->parts, ns, boxof, cl, cs, es, nr, &D->sfsrc, &D->lsrc, &D->csrc));
    if (!same) PetscCall(OwnerMoves(&fmm->ctx, fmm->ops, PETSC_TRUE, comm, &D->parts, mt, boxof ? boxof + ns : NULL, cl + n0, ctg, et, mr, &D->sftgt, &D->ltgt, &D->ctgt));
    PetscCall(PetscFree(cl));
  }
  PetscCall(PetscFree(boxof));
  D->n = nr;
  D->m = same ? nr : mr;
  if (D->devpart) { /* the points, normals and weights to their owners' slots in the backend's memory: the
                       caller's that stay from the top cuts' copy, the others through the host */
    PetscReal *z = NULL, *ones = NULL, *v[3] = {NULL, NULL, NULL};
    PetscInt   ncr;
    if (anynrm && !fmm->src.hasnrm) PetscCall(PetscCalloc1(2 * ns, &z)); /* a rank without normals has no source (checked at assembly) */
    if (anywts && !fmm->src.haswts) {
      PetscCall(PetscMalloc1(ns, &ones));
      for (PetscInt k = 0; k < ns; k++) ones[k] = 1.0;
    }
    {
      const PetscReal *nrm = anynrm ? (z ? z : fmm->src.nrm) : NULL, *wts = anywts ? (ones ? ones : fmm->src.wts) : NULL; /* (NULL where ns = 0) */
      PetscCall(ReceiveReals(D->sfsrc, 2, fmm->src.block, &ncr, &v[0]));
      if (anynrm) PetscCall(ReceiveReals(D->sfsrc, 2, nrm, &ncr, &v[1]));
      if (anywts) PetscCall(ReceiveReals(D->sfsrc, 1, wts, &ncr, &v[2]));
      PetscCall((*fmm->ops->partslots)(&fmm->ctx, PETSC_FALSE, ns, anynrm, z ? NULL : nrm, anywts, ones ? NULL : wts, nr, ncr, D->csrc, v[0], v[1], v[2])); /* (the caller's, which stay; NULL: zeros, ones) */
    }
    for (int j = 0; j < 3; j++) PetscCall(PetscFree(v[j]));
    PetscCall(PetscFree(z));
    PetscCall(PetscFree(ones));
    if (!same) {
      PetscCall(ReceiveReals(D->sftgt, 2, fmm->tgt.xy, &ncr, &v[0]));
      PetscCall((*fmm->ops->partslots)(&fmm->ctx, PETSC_TRUE, mt, PETSC_FALSE, NULL, PETSC_FALSE, NULL, mr, ncr, D->ctgt, v[0], NULL, NULL));
      PetscCall(PetscFree(v[0]));
    }
  } else { /* the points, normals, weights and key indices to their owners */
    PetscReal *ones = NULL;
    PetscCall(PetscMalloc1(2 * nr, &rxy));
    PetscCall(MoveReals(D->sfsrc, D->lsrc, D->csrc, nr, 2, fmm->src.block, rxy));
    if (!gputop) {
      PetscCall(PetscMalloc1(nr, &rgi));
      PetscCall(MoveIndices(D->sfsrc, D->lsrc, D->csrc, nr, ns, s0, rgi));
    }
    if (anynrm) {
      PetscReal *z = NULL;
      if (!fmm->src.hasnrm) PetscCall(PetscCalloc1(2 * ns, &z)); /* a rank without normals has no source (checked at assembly) */
      PetscCall(PetscMalloc1(2 * nr, &rnrm));
      PetscCall(MoveReals(D->sfsrc, D->lsrc, D->csrc, nr, 2, z ? z : fmm->src.nrm, rnrm));
      PetscCall(PetscFree(z));
    }
    if (anywts) { /* weights given on some ranks only: 1 on the others */
      if (!fmm->src.haswts) {
        PetscCall(PetscMalloc1(ns, &ones));
        for (PetscInt k = 0; k < ns; k++) ones[k] = 1.0;
      }
      PetscCall(PetscMalloc1(nr, &rw));
      PetscCall(MoveReals(D->sfsrc, D->lsrc, D->csrc, nr, 1, ones ? ones : fmm->src.wts, rw));
      PetscCall(PetscFree(ones));
    }
    if (!same) {
      PetscCall(PetscMalloc1(2 * mr, &txy));
      PetscCall(MoveReals(D->sftgt, D->ltgt, D->ctgt, mr, 2, fmm->tgt.xy, txy));
      if (!gputop) {
        PetscCall(PetscMalloc1(mr, &tgi));
        PetscCall(MoveIndices(D->sftgt, D->ltgt, D->ctgt, mr, mt, N + t0, tgi));
      }
    }
  }

  PetscCall(PetscLogEventEnd(MATFMM_Partition, A, 0, 0, 0));

  PetscCall(FMMStageMark(&tm[2], &rm[2]));
  /* 3. this rank's subtrees: its boxes of level l0 split down to the leaves,
     by the backend where it can (the boxes' bounding boxes too: gpubb) */
  nl     = nb0 << (2 * (L - l0));
  nob    = nb0 * ((((PetscInt)1 << (2 * (L - l0 + 1))) - 1) / 3); /* this rank's boxes of levels l0..L */
  PetscCall(PetscMalloc1(4 * nob, &bb));
  {
    const PetscInt np = nr + (same ? 0 : mr);
    PetscInt      *off0, is = 0, it = 0, k = 0, *pj = NULL;
    if (!D->devpart) PetscCall(PetscMalloc1(PetscMax(np, 1), &ord)); /* (devpart: kept by the backend) */
    PetscCall(PetscMalloc1(nb0 + 1, &off0));
    for (PetscInt B = B0; B < B1; B++) { /* the points box by box: its sources (slots), then its targets */
      off0[B - B0] = k;
      k += cs[B] + (same ? 0 : ctg[B]);
    }
    off0[nb0] = k;
    if (fmm->ops->subtrees) {
      PetscReal *xy = rxy; /* (the targets are the sources: the slots are in box order; NULL: the part's) */
      if (!same) {         /* pj: the point at each place */
        PetscCall(PetscMalloc1(np, &pj));
        for (PetscInt B = B0, q = 0; B < B1; B++) {
          for (PetscInt c = 0; c < cs[B]; c++, is++, q++) pj[q] = is;
          for (PetscInt c = 0; c < ctg[B]; c++, it++, q++) pj[q] = nr + it;
        }
        if (!D->devpart) {
          PetscCall(PetscMalloc1(2 * np, &xy));
          for (PetscInt q = 0; q < np; q++) {
            const PetscReal *z = pj[q] < nr ? rxy + 2 * pj[q] : txy + 2 * (pj[q] - nr);
            xy[2 * q]          = z[0];
            xy[2 * q + 1]      = z[1];
          }
        }
      }
      PetscCall(PetscMalloc1(nl + 1, &loff));
      PetscCall((*fmm->ops->subtrees)(&fmm->ctx, np, xy, pj, nb0, off0, L - l0, ord, loff, bb, &gpubb));
      if (!gpubb) PetscCall(PetscFree(loff));
      else if (pj && ord)
        for (PetscInt q = 0; q < np; q++) ord[q] = pj[ord[q]];
      if (!same && xy) PetscCall(PetscFree(xy));
      PetscCall(PetscFree(pj));
    }
    if (!gpubb) { /* on the host: the points as FMMPoint, kept for their bounding boxes */
      is = it = k = 0;
      PetscCheck(!gputop, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: the GPUs cut the top levels but this rank's GPU did not make its subtrees");
      PetscCall(PetscMalloc1(np, &lp));
      for (PetscInt B = B0; B < B1; B++) {
        for (PetscInt c = 0; c < cs[B]; c++, is++, k++) lp[k] = (FMMPoint){rxy[2 * is], rxy[2 * is + 1], rgi[is], is};
        if (!same)
          for (PetscInt c = 0; c < ctg[B]; c++, it++, k++) lp[k] = (FMMPoint){txy[2 * it], txy[2 * it + 1], tgi[it], nr + it};
      }
      PetscCall(FMMTreeSplit(lp, nb0, off0, L - l0, par->split_median, &loff));
#pragma omp parallel for schedule(static) if (np >= FMM_OMP_MIN_POINTS)
      for (PetscInt q = 0; q < np; q++) ord[q] = lp[q].j;
    }
    PetscCall(PetscFree(off0));
  }
  D->nl  = nl;
  D->nown = ntop + nob - nb0;
  /* sources and targets of the leaves, in tree order */
  if (D->devpart) { /* the backend's (its order, points and coefficients) */
    PetscCall(PetscMalloc1(nl + 1, &D->sleaf));
    PetscCall(PetscMalloc1(nl + 1, &D->tleaf));
    PetscCall((*fmm->ops->partorder)(&fmm->ctx, nl, loff, D->sleaf, D->tleaf));
  } else {
    PetscInt *scnt, *tcnt;
    PetscCall(PetscCalloc2(nl + 1, &scnt, nl + 1, &tcnt));
#pragma omp parallel for schedule(static) if (nr >= FMM_OMP_MIN_POINTS)
    for (PetscInt b = 0; b < nl; b++)
      for (PetscInt k = loff[b]; k < loff[b + 1]; k++) {
        if (ord[k] < nr) scnt[b + 1]++;
        else tcnt[b + 1]++;
      }
    for (PetscInt b = 0; b < nl; b++) {
      scnt[b + 1] += scnt[b];
      tcnt[b + 1] += tcnt[b];
    }
    /* the halo's sources are appended later: room for them then */
    PetscCall(PetscMalloc1(nr, &sperm));
    PetscCall(PetscMalloc1(nr, &D->sx)); /* (each apart: they grow by the halo's) */
    PetscCall(PetscMalloc1(nr, &D->sy));
    PetscCall(PetscMalloc1(nr, &D->cq));
    PetscCall(PetscMalloc1(nr, &D->cdx));
    PetscCall(PetscMalloc1(nr, &D->cdy));
    PetscCall(PetscMalloc1(nl + 1, &D->tleaf));
    if (same) {
      tperm = sperm;
      PetscCall(PetscArraycpy(D->tleaf, scnt, nl + 1));
    } else {
      PetscCall(PetscMalloc1(mr, &tperm));
      PetscCall(PetscMalloc1(mr, &D->tx)); /* (each apart: FMMDistHostPlan() takes them) */
      PetscCall(PetscMalloc1(mr, &D->ty));
      PetscCall(PetscArraycpy(D->tleaf, tcnt, nl + 1));
    }
#pragma omp parallel for schedule(static) if (nr >= FMM_OMP_MIN_POINTS)
    for (PetscInt b = 0; b < nl; b++) {
      PetscInt s = scnt[b], t = tcnt[b];
      for (PetscInt k = loff[b]; k < loff[b + 1]; k++) {
        const PetscInt j = ord[k];
        if (j < nr) {
          PetscReal cdn;
          sperm[s] = j;
          D->sx[s] = rxy[2 * j];
          D->sy[s] = rxy[2 * j + 1];
          FMMSourceCoefficients(par->alpha, par->beta, rw ? rw[j] : 1.0, rnrm ? &rnrm[2 * j] : NULL, &D->cq[s], &D->cdx[s], &D->cdy[s], &cdn);
          s++;
        } else {
          tperm[t] = j - nr;
          D->tx[t] = txy[2 * (j - nr)];
          D->ty[t] = txy[2 * (j - nr) + 1];
          t++;
        }
      }
    }
    if (same) {
      D->tx = D->sx;
      D->ty = D->sy;
    }
    PetscCall(PetscMalloc1(nl + 1, &D->sleaf)); /* own leaves; the halo's added below */
    PetscCall(PetscArraycpy(D->sleaf, scnt, nl + 1));
    PetscCall(PetscFree2(scnt, tcnt));
  }
  D->sperm = sperm;
  D->tperm = tperm;
  PetscCall(PetscFree(ord));
  PetscCall(PetscFree(rxy));
  PetscCall(PetscFree(rgi));
  PetscCall(PetscFree(rnrm));
  PetscCall(PetscFree(rw));
  PetscCall(PetscFree(txy));
  PetscCall(PetscFree(tgi));

  PetscCall(FMMStageMark(&tm[3], &rm[3]));
  /* 4. box geometry: bounding boxes of this rank's boxes (OwnIndex order),
     then level l0 of all ranks and the top, on every rank */
  PetscCall(PetscMalloc1(4 * ntop, &top));
  if (!gpubb) {
    const PetscInt lb = nob - nl; /* own index of the first leaf */
#pragma omp parallel for schedule(static) if (nr >= FMM_OMP_MIN_POINTS)
    for (PetscInt b = 0; b < nl; b++) PointsBox(lp + loff[b], loff[b + 1] - loff[b], bb + 4 * (lb + b));
    for (PetscInt l = L - 1; l >= l0; l--) {
      const PetscInt nbl = nb0 << (2 * (l - l0)), o = nb0 * ((((PetscInt)1 << (2 * (l - l0))) - 1) / 3), oc = o + nbl;
      for (PetscInt b = 0; b < nbl; b++)
        FMMBoxUnion4(bb + 4 * (o + b), bb + 4 * (oc + 4 * b), bb + 4 * (oc + 4 * b + 1), bb + 4 * (oc + 4 * b + 2), bb + 4 * (oc + 4 * b + 3));
    }
  }
  {
    for (PetscInt k = 0; k < 4 * ntop; k++) top[k] = PETSC_MAX_REAL;
    for (PetscInt b = 0; b < nb0; b++)
      for (int j = 0; j < 4; j++) top[4 * (FMMLevelStart(l0) + B0 + b) + j] = bb[4 * b + j];
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, top + 4 * FMMLevelStart(l0), 4 * n0, MPIU_REAL, MPIU_MIN, comm));
    for (PetscInt l = l0 - 1; l >= 0; l--) {
      PetscReal *pb = top + 4 * FMMLevelStart(l), *cb = top + 4 * FMMLevelStart(l + 1);
      for (PetscInt b = 0; b < ((PetscInt)1 << (2 * l)); b++)
        FMMBoxUnion4(pb + 4 * b, cb + 16 * b, cb + 16 * b + 4, cb + 16 * b + 8, cb + 16 * b + 12);
    }
  }
  PetscCall(PetscFree(lp));
  PetscCall(PetscFree(loff));
  /* centres and scales of the slots: top (global numbers), then own boxes below l0; halo boxes appended later */
  {
    const PetscReal floor_s = FMMScaleFloor(top);
    PetscReal *cx, *cy, *sc;
    PetscCall(PetscMalloc1(D->nown, &cx)); /* (each apart: they grow by the halo's, in place) */
    PetscCall(PetscMalloc1(D->nown, &cy));
    PetscCall(PetscMalloc1(D->nown, &sc));
#pragma omp parallel for schedule(static) if (D->nown >= FMM_OMP_MIN_POINTS)
    for (PetscInt s = 0; s < D->nown; s++) FMMBoxCircle(s < ntop ? top + 4 * s : bb + 4 * (s - ntop + nb0), floor_s, &cx[s], &cy[s], &sc[s]);
    D->cx    = cx;
    D->cy    = cy;
    D->scale = sc;
    D->ngeo  = D->nown;
  }
  PetscCall(PetscFree(bb));
  PetscCall(PetscFree(top));

  /* counts of sources and targets of every box this rank sees: the top
     (global, from the counts of level l0) and its own (own index order) */
  {
    PetscInt *tsrc, *ttgt, *osrc, *otgt, *osst;
    PetscCall(PetscCalloc2(ntop, &tsrc, ntop, &ttgt));
    PetscCall(PetscMalloc3(nob, &osrc, nob, &otgt, nob, &osst));
    for (PetscInt B = 0; B < n0; B++) {
      tsrc[FMMLevelStart(l0) + B] = cs[B];
      ttgt[FMMLevelStart(l0) + B] = same ? cs[B] : ctg[B];
    }
    for (PetscInt l = l0 - 1; l >= 0; l--)
      for (PetscInt b = 0; b < ((PetscInt)1 << (2 * l)); b++)
        for (int c = 0; c < 4; c++) {
          tsrc[FMMLevelStart(l) + b] += tsrc[FMMLevelStart(l + 1) + 4 * b + c];
          ttgt[FMMLevelStart(l) + b] += ttgt[FMMLevelStart(l + 1) + 4 * b + c];
        }
    for (PetscInt l = l0; l <= L; l++) {
      const PetscInt nbl = nb0 << (2 * (l - l0)), o = nb0 * ((((PetscInt)1 << (2 * (l - l0))) - 1) / 3), span = (PetscInt)1 << (2 * (L - l));
#pragma omp parallel for schedule(static) if (nbl >= FMM_OMP_MIN_POINTS)
      for (PetscInt b = 0; b < nbl; b++) {
        osrc[o + b] = D->sleaf[(b + 1) * span] - D->sleaf[b * span];
        otgt[o + b] = D->tleaf[(b + 1) * span] - D->tleaf[b * span];
        osst[o + b] = D->sleaf[b * span];
      }
    }
    PetscCall(PetscFree4(cs, ctg, es, et));
    PetscCall(PetscMalloc2(D->nown, &D->nsb, D->nown, &D->ntb));
#pragma omp parallel for schedule(static) if (D->nown >= FMM_OMP_MIN_POINTS)
    for (PetscInt sl = 0; sl < D->nown; sl++) {
      D->nsb[sl] = sl < ntop ? tsrc[sl] : osrc[sl - ntop + nb0];
      D->ntb[sl] = sl < ntop ? ttgt[sl] : otgt[sl - ntop + nb0];
    }

    /* the table the other ranks fetch from: FMM_NGEO reals a box of levels l0..L */
    PetscCall(PetscMalloc1(FMM_NGEO * nob, &T));
#pragma omp parallel for schedule(static) if (nob >= FMM_OMP_MIN_POINTS)
    for (PetscInt o = 0; o < nob; o++) {
      const PetscInt s = o < nb0 ? FMMLevelStart(l0) + B0 + o : ntop + o - nb0;
      T[FMM_NGEO * o]     = D->cx[s];
      T[FMM_NGEO * o + 1] = D->cy[s];
      T[FMM_NGEO * o + 2] = D->scale[s];
      T[FMM_NGEO * o + 3] = (PetscReal)osrc[o];
      T[FMM_NGEO * o + 4] = (PetscReal)osst[o];
    }

    PetscCall(FMMStageMark(&tm[4], &rm[4]));
    /* 5. interaction lists, level by level, as plan.c: children of the
       parent's strongly coupled boxes are far (M2L) where separated, else
       strongly coupled; strong pairs of leaves are the near field.  Levels
       below l0 of this rank's boxes only; remote boxes by their global number
       (encoded -1 - g) until the halo is numbered */
    {
      IntList    farl = {0};
      PetscInt  *farcnt, *stroff, *str, npar, **rid, *nrid, *roff;
      PetscReal **rgeo;
      char      **used; /* used[l][j]: a far list names the fetched remote box rid[l][j] */
      PetscInt   nfarown = 0, nfartop = 0;
      /* gpulists: the backend makes the lists below l0 and keeps the far lists */
      const PetscBool gpulists = D->devpart && fmm->ops->lists && L > l0 ? PETSC_TRUE : PETSC_FALSE;
      FetchCtx        fc       = {comm, l0, &D->parts, nob, T};
      PetscCall(PetscCalloc1(D->nown, &farcnt));
      PetscCall(PetscCalloc3(L + 1, &rid, L + 1, &nrid, L + 1, &rgeo));
      PetscCall(PetscCalloc2(L + 2, &roff, L + 1, &used));
      /* the root: strongly coupled to itself where it has sources and targets */
      PetscCall(PetscMalloc1(2, &stroff));
      stroff[0] = 0;
      stroff[1] = 0;
      str       = NULL;
      if (tsrc[0] > 0 && ttgt[0] > 0) {
        PetscCall(PetscMalloc1(1, &str));
        str[0]    = 0;
        stroff[1] = 1;
      }
      npar = 1;
      /* on the host down to level l0, or to L where the backend does not make the levels below l0 */
      for (PetscInt l = 1; l <= (gpulists ? l0 : L); l++) {
        const PetscBool owned = l >= l0 ? PETSC_TRUE : PETSC_FALSE;
        const PetscInt  nbt = owned ? nb0 << (2 * (l - l0)) : (PetscInt)1 << (2 * l), base = owned ? B0 << (2 * (l - l0)) : 0;
        const PetscInt  pbase = (l - 1 >= l0) ? B0 << (2 * (l - 1 - l0)) : 0, cl = FMMLevelStart(l);
        const PetscInt  o = owned ? nb0 * ((((PetscInt)1 << (2 * (l - l0))) - 1) / 3) : 0;
        PetscInt       *nso;
        IntList         nstr = {0};
        /* the geometry of the remote boxes the lists may reach: the children of the remote strong entries */
        if (l > l0) {
          PetscInt *rp, nrp = 0;
          PetscCall(PetscMalloc1(PetscMax(stroff[npar], 1), &rp));
          for (PetscInt j = 0; j < stroff[npar]; j++)
            if (OwnerOf(&D->parts, str[j] >> (2 * (l - 1 - l0))) != rank) rp[nrp++] = str[j];
          PetscCall(FetchParents(&fc, l, nrp, rp, &rid[l], &nrid[l], &rgeo[l]));
          PetscCall(PetscFree(rp));
          PetscCall(PetscCalloc1(PetscMax(nrid[l], 1), &used[l]));
        }
        roff[l + 1] = roff[l] + nrid[l]; /* the fetched boxes numbered level by level */
        /* two passes, as plan.c: counts, then the entries, each target box by one thread */
        {
          PetscInt *nfc, *strv = NULL, missing = 0;
          PetscCall(PetscCalloc1(nbt + 1, &nso));
          PetscCall(PetscCalloc1(nbt + 1, &nfc));
          for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(dynamic, 64) if (nbt >= 256)
            for (PetscInt t = 0; t < nbt; t++) {
              const PetscInt tb = base + t, tslot = FMMDistSlot(D, l, tb);
              const PetscInt ntg = owned ? otgt[o + t] : ttgt[cl + tb];
              const PetscInt tp  = tb / 4 - pbase;
              PetscInt       kf = 0, ks = 0;
              if (ntg)
                for (PetscInt j = stroff[tp]; j < stroff[tp + 1]; j++)
                  for (int c = 0; c < 4; c++) {
                    const PetscInt s = 4 * str[j] + c;
                    PetscReal      sx, sy, ss, d;
                    PetscInt       nsrc, sslot = -1, loc = -1;
                    if (l <= l0) {
                      sslot = cl + s;
                      nsrc  = tsrc[sslot];
                      sx    = D->cx[sslot];
                      sy    = D->cy[sslot];
                      ss    = D->scale[sslot];
                    } else if (OwnerOf(&D->parts, s >> (2 * (l - l0))) == rank) {
                      sslot = FMMDistSlot(D, l, s);
                      nsrc  = osrc[sslot - ntop + nb0];
                      sx                = D->cx[sslot];
                      sy                = D->cy[sslot];
                      ss                = D->scale[sslot];
                    } else {
                      loc = FindSorted(s, nrid[l], rid[l]);
                      if (loc < 0) {
                        missing = 1;
                        continue;
                      }
                      sx   = rgeo[l][FMM_NGEO * loc];
                      sy   = rgeo[l][FMM_NGEO * loc + 1];
                      ss   = rgeo[l][FMM_NGEO * loc + 2];
                      nsrc = (PetscInt)rgeo[l][FMM_NGEO * loc + 3];
                    }
                    if (!nsrc) continue;
                    d = PetscSqrtReal(PetscSqr(D->cx[tslot] - sx) + PetscSqr(D->cy[tslot] - sy));
                    if (FMMSeparated(D->scale[tslot], ss, d, par->theta)) {
                      if (pass) {
                        farl.v[farl.n + nfc[t] + kf] = sslot >= 0 ? sslot : -1 - (roff[l] + loc);
                        if (sslot < 0) {
#pragma omp atomic write
                          used[l][loc] = 1;
                        }
                      }
                      kf++;
                    } else {
                      if (pass) strv[nso[t] + ks] = s;
                      ks++;
                    }
                  }
              if (!pass) {
                nfc[t + 1] = kf;
                nso[t + 1] = ks;
              }
            }
            PetscCheck(!missing, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: a remote box of level %" PetscInt_FMT " was not fetched", l);
            if (!pass) {
              for (PetscInt t = 0; t < nbt; t++) {
                nfc[t + 1] += nfc[t];
                nso[t + 1] += nso[t];
              }
              if (farl.n + nfc[nbt] > farl.cap) {
                farl.cap = PetscMax(2 * farl.cap, farl.n + nfc[nbt]);
                PetscCall(PetscRealloc(sizeof(PetscInt) * farl.cap, &farl.v));
              }
              PetscCall(PetscMalloc1(PetscMax(nso[nbt], 1), &strv));
            }
          }
          for (PetscInt t = 0; t < nbt; t++) {
            farcnt[FMMDistSlot(D, l, base + t)] = nfc[t + 1] - nfc[t];
          }
          if (owned) nfarown += nfc[nbt];
          else nfartop += nfc[nbt];
          farl.n += nfc[nbt];
          nstr.v = strv;
          PetscCall(PetscFree(nfc));
        }
        PetscCall(PetscFree(stroff));
        PetscCall(PetscFree(str));
        stroff = nso;
        str    = nstr.v;
        npar   = nbt;
      }
      if (gpulists) { /* the levels below l0 on the GPU, from the strong lists of level l0 */
        FMMDistLists dl = {L, l0, B0, nb0, ntop, D->nown, par->theta, D->cx, D->cy, D->scale, D->sleaf, D->tleaf, stroff, str, FetchParents, &fc, rid, nrid, roff, rgeo, used, farcnt, farl.v, farl.n, 0, NULL, NULL, 0};
        PetscCall((*fmm->ops->lists)(&fmm->ctx, &dl));
        nfarown += dl.nfarl;
        PetscCall(PetscFree(stroff));
        PetscCall(PetscFree(str));
        stroff = dl.stroffL;
        str    = dl.strL;
      }
      /* far lists: CSR over the slots (built in slot order), remote boxes numbered as the halo: the
         fetched ones a far list names, level by level, ascending in each (their global order) */
      {
        PetscInt    *hal = NULL, nhal, *hidx;
        PetscSFNode *rem;
        PetscCall(PetscMalloc1(PetscMax(roff[L + 1], 1), &hidx));
        nhal = FMMDistHaloNumbers(L, nrid, roff, used, 0, hidx);
        D->nslot = D->nown + nhal;
        D->nhb   = nhal;
        PetscCall(PetscMalloc1(D->nown + 1, &D->faroff));
        D->faroff[0] = 0;
        for (PetscInt s = 0; s < D->nown; s++) D->faroff[s + 1] = D->faroff[s] + farcnt[s];
        if (!gpulists) {
          PetscCall(PetscMalloc1(PetscMax(farl.n, 1), &D->far));
#pragma omp parallel for schedule(static) if (farl.n >= FMM_OMP_MIN_POINTS)
          for (PetscInt k = 0; k < farl.n; k++) {
            const PetscInt v = farl.v[k];
            D->far[k]        = v < 0 ? D->nown + hidx[-1 - v] : v;
          }
        }
        D->nfar    = nfarown + (rank == 0 ? nfartop : 0);
        D->nfartop = nfartop;
        PetscCall(PetscFree(farl.v));
        /* the halo boxes' geometry (fetched with their level) and the SF of their multipoles */
        PetscCall(PetscMalloc1(PetscMax(nhal, 1), &hal));
        D->ngeo = gpulists ? D->nown : D->nslot; /* (gpulists: the backend keeps the halo's) */
        if (!gpulists) {
          PetscCall(PetscRealloc(sizeof(PetscReal) * D->nslot, &D->cx));
          PetscCall(PetscRealloc(sizeof(PetscReal) * D->nslot, &D->cy));
          PetscCall(PetscRealloc(sizeof(PetscReal) * D->nslot, &D->scale));
        }
        PetscCall(PetscMalloc1(nhal, &rem));
        for (PetscInt l = 0; l <= L; l++)
          for (PetscInt j = 0; j < nrid[l]; j++) {
            const PetscInt    h = hidx[roff[l] + j], s = rid[l][j];
            const PetscReal  *g = rgeo[l] + FMM_NGEO * j;
            const PetscMPIInt q = OwnerOf(&D->parts, s >> (2 * (l - l0)));
            if (h < 0) continue;
            hal[h]            = FMMLevelStart(l) + s;
            if (!gpulists) {
              D->cx[D->nown + h]    = g[0];
              D->cy[D->nown + h]    = g[1];
              D->scale[D->nown + h] = g[2];
            }
            rem[h].rank       = q;
            rem[h].index      = OwnIndex(l, s, l0, q, &D->parts) - RankBoxes(&D->parts, q);
          }
        PetscCall(MakeSF(comm, nob - nb0, nhal, NULL, rem, &D->sfmp));
        PetscCall(PetscFree(hidx));
        D->halbox = hal; /* global numbers of the halo boxes */
      }
      /* near lists: the strong lists of the leaves; the remote leaves they name become halo leaves
         (ascending), found among the leaves fetched for the lists of level L */
      {
        PetscInt      *hl, *hj, *hidx, nhl = 0, nent = stroff[nl], nh = 0, missing = 0;
        char          *inl;
        PetscSFNode   *rem;
        const PetscInt lbase = B0 << (2 * (L - l0));
        if (L == l0) { /* (no level below the top's: its remote leaves fetched here) */
          IntList want = {0};
          for (PetscInt k = 0; k < nent; k++)
            if (OwnerOf(&D->parts, str[k]) != rank) PetscCall(IntListPush(&want, str[k]));
          PetscCall(FetchLevel(comm, L, l0, &D->parts, nob, T, &want, &rid[L], &nrid[L], &rgeo[L]));
        }
        PetscCall(PetscCalloc1(PetscMax(nrid[L], 1), &inl));
        PetscCall(PetscMalloc1(nl + 1, &D->nearoff));
        PetscCall(PetscMalloc1(PetscMax(nent, 1), &D->near));
        PetscCall(PetscArraycpy(D->nearoff, stroff, nl + 1));
#pragma omp parallel for schedule(static) if (nent >= FMM_OMP_MIN_POINTS)
        for (PetscInt k = 0; k < nent; k++) { /* (a remote one: -1 - its place among the fetched, for now) */
          const PetscInt s = str[k];
          if (OwnerOf(&D->parts, s >> (2 * (L - l0))) == rank) D->near[k] = s - lbase;
          else {
            const PetscInt loc = FindSorted(s, nrid[L], rid[L]);
            if (loc < 0) missing = 1;
            else {
#pragma omp atomic write
              inl[loc] = 1;
            }
            D->near[k] = -1 - loc;
          }
        }
        PetscCheck(!missing, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: a remote leaf of a near list was not fetched");
        PetscCall(PetscMalloc1(PetscMax(nrid[L], 1), &hidx));
        for (PetscInt j = 0; j < nrid[L]; j++) hidx[j] = inl[j] ? nhl++ : -1;
        PetscCall(PetscMalloc1(PetscMax(nhl, 1), &hl));
        PetscCall(PetscMalloc1(PetscMax(nhl, 1), &hj));
        for (PetscInt j = 0; j < nrid[L]; j++)
          if (hidx[j] >= 0) {
            hl[hidx[j]] = rid[L][j];
            hj[hidx[j]] = j;
          }
#pragma omp parallel for schedule(static) if (nent >= FMM_OMP_MIN_POINTS)
        for (PetscInt k = 0; k < nent; k++)
          if (D->near[k] < 0) D->near[k] = nl + hidx[-1 - D->near[k]];
        D->nhl = nhl;
        /* leaf ranges of the halo's sources after this rank's, and the SF that fills them */
        {
          PetscInt *sl;
          PetscCall(PetscMalloc1(nl + nhl + 1, &sl));
          PetscCall(PetscArraycpy(sl, D->sleaf, nl + 1));
          for (PetscInt h = 0; h < nhl; h++) sl[nl + h + 1] = sl[nl + h] + (PetscInt)rgeo[L][FMM_NGEO * hj[h] + 3];
          PetscCall(PetscFree(D->sleaf));
          D->sleaf = sl;
          nh       = sl[nl + nhl] - nr;
        }
        D->nh = nh;
        PetscCall(PetscMalloc1(nh, &rem));
        for (PetscInt h = 0, k = 0; h < nhl; h++) {
          const PetscMPIInt q = OwnerOf(&D->parts, hl[h] >> (2 * (L - l0)));
          const PetscReal  *g = rgeo[L] + FMM_NGEO * hj[h];
          for (PetscInt i = 0; i < (PetscInt)g[3]; i++, k++) rem[k] = (PetscSFNode){q, (PetscInt)g[4] + i};
        }
        PetscCall(MakeSF(comm, nr, nh, NULL, rem, &D->sfhalo));
        PetscCall(PetscFree(inl));
        PetscCall(PetscFree(hidx));
        PetscCall(PetscFree(hj));
        D->halleaf = hl; /* global numbers of the halo leaves */
      }
      /* statistics */
      {
        PetscInt64 pairs = 0;
        PetscInt   mls = 0, mlt = 0;
#pragma omp parallel for schedule(static) reduction(+ : pairs) reduction(max : mls, mlt) if (nl >= 4096)
        for (PetscInt b = 0; b < nl; b++) {
          PetscInt nsb = 0;
          for (PetscInt j = D->nearoff[b]; j < D->nearoff[b + 1]; j++) nsb += D->sleaf[D->near[j] + 1] - D->sleaf[D->near[j]];
          pairs += (PetscInt64)nsb * (D->tleaf[b + 1] - D->tleaf[b]);
          mls = PetscMax(mls, D->sleaf[b + 1] - D->sleaf[b]);
          mlt = PetscMax(mlt, D->tleaf[b + 1] - D->tleaf[b]);
        }
        D->p2ppairs   = pairs;
        D->maxleafsrc = mls;
        D->maxleaftgt = mlt;
      }
      PetscCall(PetscFree(stroff));
      PetscCall(PetscFree(str));
      for (PetscInt l = 0; l <= L; l++) {
        PetscCall(PetscFree(rid[l]));
        PetscCall(PetscFree(rgeo[l]));
        PetscCall(PetscFree(used[l]));
      }
      PetscCall(PetscFree3(rid, nrid, rgeo));
      PetscCall(PetscFree2(roff, used));
      PetscCall(PetscFree(farcnt));
    }
    PetscCall(PetscFree2(tsrc, ttgt));
    PetscCall(PetscFree3(osrc, otgt, osst));
  }
  PetscCall(PetscFree(T));

  PetscCall(FMMStageMark(&tm[5], &rm[5]));
  /* 6. the halo's sources: points and coefficients, once, from the sources
     other ranks' halos name (CompactRoots()); the arrays grow in place */
  {
    MPI_Datatype five;
    PetscReal   *pk, *hk;
    PetscInt     nc, *croot;
    PetscSF      sfc;
    PetscCall(CompactRoots(D->sfhalo, &nc, &croot, &sfc));
    PetscCall(PetscMalloc2(5 * PetscMax(nc, 1), &pk, 5 * PetscMax(D->nh, 1), &hk));
    if (D->devpart) PetscCall((*fmm->ops->partgather)(&fmm->ctx, nc, croot, pk));
    else
      for (PetscInt c = 0; c < nc; c++) {
        const PetscInt i = croot[c];
        pk[5 * c]        = D->sx[i];
        pk[5 * c + 1]    = D->sy[i];
        pk[5 * c + 2]    = D->cq[i];
        pk[5 * c + 3]    = D->cdx[i];
        pk[5 * c + 4]    = D->cdy[i];
      }
    PetscCall(RealsType(5, &five));
    PetscCall(PetscSFBcastBegin(sfc, five, pk, hk, MPI_REPLACE));
    PetscCall(PetscSFBcastEnd(sfc, five, pk, hk, MPI_REPLACE));
    PetscCallMPI(MPI_Type_free(&five));
    PetscCall(PetscSFDestroy(&sfc));
    PetscCall(PetscFree(croot));
    {
      const PetscInt h0 = D->devpart ? 0 : nr, nt = PetscMax(h0 + D->nh, 1); /* (devpart: the halo's only, never NULL) */
      PetscReal    **arr[5] = {&D->sx, &D->sy, &D->cq, &D->cdx, &D->cdy};
      for (int j = 0; j < 5; j++) {
        if (D->devpart) PetscCall(PetscMalloc1(nt, arr[j]));
        else PetscCall(PetscRealloc(sizeof(PetscReal) * nt, arr[j]));
      }
      for (PetscInt i = 0; i < D->nh; i++) {
        D->sx[h0 + i]  = hk[5 * i];
        D->sy[h0 + i]  = hk[5 * i + 1];
        D->cq[h0 + i]  = hk[5 * i + 2];
        D->cdx[h0 + i] = hk[5 * i + 3];
        D->cdy[h0 + i] = hk[5 * i + 4];
      }
      if (same) {
        D->tx = D->sx;
        D->ty = D->sy;
      }
    }
    PetscCall(PetscFree2(pk, hk));
  }
  PetscCall(FMMStageMark(&tm[6], &rm[6]));
  PetscCall(FMMDistIOSetup(&fmm->ctx, fmm->ops, D, ns, mt));
  PetscCall(FMMStageMark(&tm[7], &rm[7]));
  PetscCall(PetscInfo(A, "distributed tree on this rank: top cuts %.3f s, points to their owners %.3f s, subtrees %.3f s, box geometry %.3f s, lists %.3f s, halo %.3f s, moves %.3f s; resident memory after each %.0f %.0f %.0f %.0f %.0f %.0f %.0f MB\n", tm[1] - tm[0], tm[2] - tm[1], tm[3] - tm[2], tm[4] - tm[3], tm[5] - tm[4], tm[6] - tm[5], tm[7] - tm[6], rm[1] / 1048576, rm[2] / 1048576, rm[3] / 1048576, rm[4] / 1048576, rm[5] / 1048576, rm[6] / 1048576, rm[7] / 1048576));
  PetscFunctionReturn(0);
}

/* the global indices (in the caller's numbering: the first of this rank's nc points is r0) of this rank's
   n points in tree order (perm: tree position -> slot; the slots fed by OwnerMoves()'s sf, lmap and croot);
   collective */
static PetscErrorCode TreeOrderIndices(PetscSF sf, const PetscInt lmap[], const PetscInt croot[], PetscInt nc, PetscInt r0, PetscInt n, const PetscInt perm[], IS *is)
{
  MPI_Comm  comm;
  PetscInt *s, *idx;

  PetscFunctionBegin;
  PetscCall(PetscObjectGetComm((PetscObject)sf, &comm));
  PetscCall(PetscMalloc1(PetscMax(n, 1), &s));
  PetscCall(MoveIndices(sf, lmap, croot, n, nc, r0, s));
  PetscCall(PetscMalloc1(PetscMax(n, 1), &idx));
  for (PetscInt i = 0; i < n; i++) idx[i] = s[perm[i]];
  PetscCall(ISCreateGeneral(comm, n, idx, PETSC_OWN_POINTER, is));
  PetscCall(PetscFree(s));
  PetscFunctionReturn(0);
}

/* the same from the product's numbers num of the n points in tree order (SplitMoves()): the caller's
   index where < nc, else nc + the place of the point's slot among sf's roots; collective */
static PetscErrorCode NumberedIndices(PetscSF sf, PetscInt nc, PetscInt r0, PetscInt n, const PetscInt num[], IS *is)
{
  MPI_Comm  comm;
  PetscInt  ncr, nleaves, *g = NULL, *v, *idx;

  PetscFunctionBegin;
  PetscCall(PetscObjectGetComm((PetscObject)sf, &comm));
  PetscCall(PetscSFGetGraph(sf, &ncr, &nleaves, NULL, NULL));
  if (nleaves > 0) {
    PetscCall(PetscMalloc1(nc, &g));
    for (PetscInt k = 0; k < nc; k++) g[k] = r0 + k;
  }
  PetscCall(PetscMalloc1(PetscMax(ncr, 1), &v));
  PetscCall(PetscSFReduceBegin(sf, MPIU_INT, g, v, MPI_REPLACE));
  PetscCall(PetscSFReduceEnd(sf, MPIU_INT, g, v, MPI_REPLACE));
  PetscCall(PetscMalloc1(PetscMax(n, 1), &idx));
  for (PetscInt i = 0; i < n; i++) idx[i] = num[i] < nc ? r0 + num[i] : v[num[i] - nc];
  PetscCall(ISCreateGeneral(comm, n, idx, PETSC_OWN_POINTER, is));
  PetscCall(PetscFree(v));
  PetscCall(PetscFree(g));
  PetscFunctionReturn(0);
}

/* MatFMMGetTreePartition(): from the slots here, or from the backend's plan where the part's numbers went
   there (devpart); collective */
PetscErrorCode FMMDistPartition(FMMContext *ctx, FMMBackend ops, FMMDist *D, PetscInt s0, PetscInt t0, IS *src, IS *tgt)
{
  PetscSF  tsf = D->sftgt ? D->sftgt : D->sfsrc;
  PetscInt tr0 = D->sftgt ? t0 : s0;

  PetscFunctionBegin;
  if (D->devpart) {
    PetscInt *num;
    PetscCall(PetscMalloc1(PetscMax(PetscMax(D->n, D->m), 1), &num));
    if (src) {
      PetscCall((*ops->plannumbers)(ctx, PETSC_FALSE, D->n, num));
      PetscCall(NumberedIndices(D->sfsrc, D->nxc, s0, D->n, num, src));
    }
    if (tgt) {
      PetscCall((*ops->plannumbers)(ctx, PETSC_TRUE, D->m, num));
      PetscCall(NumberedIndices(tsf, D->myc, tr0, D->m, num, tgt));
    }
    PetscCall(PetscFree(num));
    PetscFunctionReturn(0);
  }
  if (src) PetscCall(TreeOrderIndices(D->sfsrc, D->lsrc, D->csrc, D->nxc, s0, D->n, D->sperm, src));
  if (tgt) PetscCall(TreeOrderIndices(tsf, D->sftgt ? D->ltgt : D->lsrc, D->sftgt ? D->ctgt : D->csrc, D->myc, tr0, D->m, D->tperm, tgt));
  PetscFunctionReturn(0);
}

/* v[0..n) ascending, by insertion: the short lists of a leaf, in threads (no PETSc call there) */
static inline void SortShortList(PetscInt n, PetscInt *v)
{
  for (PetscInt i = 1; i < n; i++) {
    const PetscInt x = v[i];
    PetscInt       j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

/* the global number of slot t */
static PetscInt SlotBox(const FMMDist *D, PetscInt t)
{
  const PetscInt nb0 = D->B1 - D->B0;
  if (t < D->ntop) return t;
  if (t >= D->nown) return D->halbox[t - D->nown];
  {
    PetscInt o = t - D->ntop + nb0, l = D->l0, first = 0, nbl = nb0; /* own index, then its level */
    while (o >= first + nbl) {
      first += nbl;
      nbl *= 4;
      l++;
    }
    return FMMLevelStart(l) + (D->B0 << (2 * (l - D->l0))) + (o - first);
  }
}

/* off[0..nleaves] of a plan by global leaf, from the rank's counts: the own leaves [lbase, lbase + nl) take
   own[a + 1] - own[a] entries each, the halo's leaves halleaf[h] (ascending, none among the own)
   hal[h + 1] - hal[h] (hal NULL: none), every other leaf none; runs of empty leaves filled in threads */
static void LeafOffsets(PetscInt nleaves, PetscInt lbase, PetscInt nl, const PetscInt own[], PetscInt nhl, const PetscInt halleaf[], const PetscInt hal[], PetscInt off[])
{
  PetscInt g = 0, h = 0, cur = 0;

  off[0] = 0;
  while (g < nleaves) {
    const PetscInt hs = h < nhl ? halleaf[h] : nleaves, s = (nl && g <= lbase) ? PetscMin(lbase, hs) : hs; /* the next leaf with entries */
#pragma omp parallel for schedule(static) if (s - g >= 4 * FMM_OMP_MIN_POINTS)
    for (PetscInt k = g + 1; k <= s; k++) off[k] = cur; /* leaves g .. s - 1: none */
    if (s == nleaves) break;
    if (nl && s == lbase) {
      const PetscInt c0 = cur - own[0];
#pragma omp parallel for schedule(static) if (nl >= 4 * FMM_OMP_MIN_POINTS)
      for (PetscInt a = 0; a < nl; a++) off[lbase + a + 1] = c0 + own[a + 1];
      cur = c0 + own[nl];
      g   = lbase + nl;
    } else {
      cur += hal ? hal[h + 1] - hal[h] : 0;
      off[s + 1] = cur;
      h++;
      g = s + 1;
    }
  }
}

/*
  FMMDistHostPlan - this rank's part of the distributed tree as a plan in the
  one-rank numbering (FMMHostPlan: every box and leaf of the global pyramid),
  for a backend that evaluates such plans (the CUDA backend).  Its sources are
  this rank's and the halo's (N = n + nh); sperm numbers the densities as
  the product gives them (the caller's x, then D->din: FMMContext's split),
  tperm the potentials likewise (the caller's y, then D->dout); its targets
  are this rank's.  halotgt (targets = sources only): the halo's sources are
  targets too, whose potentials are dropped (tperm -1), the halo's leaves list
  this rank's leaves whose near lists name them and every near list ascends:
  targets and sources are then the same points, index for index, and each
  pair of this rank's near field can be evaluated once for both of its sums
  (the symmetric P2P of the CUDA backend), the halo's pairs one way, for
  the price of the halo's far field.  Boxes this rank does not see get the root's
  centre and scale (their expansions are never read: far lists name this
  rank's boxes, the top's and the halo's, whose multipoles the exchange
  overwrites after M2M).  The plan takes D's arrays of sources and targets
  (reordered in place, so the rank's points are not copied) and its
  product numbers (cin, cout): once, after FMMDistBuild().  Where the rank's
  own points stay in the backend's memory (D->devpart), the plan's source
  arrays are the halo's only (FMMHostPlan devb, devn).  global: the boxes'
  geometry and far lists in the one-rank numbering too (the CPU backend's
  check path); else the backend takes them in the rank's slot numbering
  (FMMContext nslot ..., D's arrays) and the plan has none.
*/
PetscErrorCode FMMDistHostPlan(FMMDist *D, PetscBool halotgt, PetscBool global, FMMPlan *P, FMMHostPlan **hp)
{
  const PetscInt L = D->L, l0 = D->l0, nleaves = (PetscInt)1 << (2 * L), nboxes = FMMLevelStart(L + 1), N = D->n + D->nh;
  const PetscInt lbase = D->B0 << (2 * (L - l0)), M = halotgt ? N : D->m;
  FMMHostPlan   *H;
  PetscInt       nfar = 0, nnear = 0, *hoff = NULL, *hnear = NULL, hb;

  PetscFunctionBegin;
  PetscCheck(!halotgt || D->same, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: halo targets need targets = sources");
  PetscCall(FMMHostPlanDestroy(hp));
  PetscCall(PetscNew(&H));
  *hp = H;
  PetscCall(FMMHostPlanPoints(H, N, M, nleaves, PETSC_FALSE));
  /* sources in the global order of the leaves: the halo's leaves before this rank's (hb sources, the first
     of D's halo), this rank's, then the rest of the halo's; D's arrays (this rank's, then the halo's) are
     turned into that order in place and handed to the plan */
  H->tleaf[0] = 0;
  LeafOffsets(nleaves, lbase, D->nl, D->sleaf, D->nhl, D->halleaf, D->sleaf + D->nl, H->sleaf);
  hb = H->sleaf[lbase];
  {
    PetscReal **arr[5] = {&D->sx, &D->sy, &D->cq, &D->cdx, &D->cdy}, *tmp;
    PetscCheck(D->sx && H->sleaf[nleaves] == N && (D->nl == 0 || D->sleaf[D->nl] + hb <= N), PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: the rank's plan takes its part's sources once, in leaf order");
    if (D->devpart) { /* the own sources [hb, hb + n) in the backend's memory; D's halo is [halo before | halo after] */
      H->devb = hb;
      H->devn = D->n;
    } else {
      PetscCall(PetscMalloc1(PetscMax(hb, 1), &tmp));
      for (int j = 0; j < 5; j++) { /* [own | halo before | halo after] -> [halo before | own | halo after] */
        PetscReal *v = *arr[j];
        PetscCall(PetscArraycpy(tmp, v + D->n, hb));
        PetscCall(PetscArraymove(v + hb, v, D->n));
        PetscCall(PetscArraycpy(v, tmp, hb));
      }
      PetscCall(PetscFree(tmp));
    }
    H->sx  = D->sx;
    H->sy  = D->sy;
    H->cq  = D->cq;
    H->cdx = D->cdx;
    H->cdy = D->cdy;
    D->sx = D->sy = D->cq = D->cdx = D->cdy = NULL;
    if (D->same) D->tx = D->ty = NULL;
  }
  if (D->devpart) { /* the halo's numbers only (the own ones are the part's), and no target's */
    PetscCall(PetscFree(H->sperm));
    PetscCall(PetscFree(H->tperm));
    PetscCall(PetscMalloc1(PetscMax(D->nh, 1), &H->sperm));
    for (PetscInt h = 0; h < D->nh; h++) H->sperm[h] = D->nxc + D->nrr + h;
  } else {
#pragma omp parallel for schedule(static) if (N >= FMM_OMP_MIN_POINTS)
    for (PetscInt k = 0; k < N; k++) { /* D's number of place k: the caller's x, then din (FMMDistDensities()) */
      const PetscInt i = k < hb ? D->n + k : (k < hb + D->n ? k - hb : k);
      H->sperm[k]      = i < D->n ? D->cin[i] : D->nxc + D->nrr + (i - D->n);
    }
  }
  /* targets: this rank's leaves (halotgt: the sources, the halo's dropped) */
  if (halotgt) {
    const PetscInt m = D->tleaf[D->nl]; /* own leaves: own points only, in D's order */
    PetscCall(PetscArraycpy(H->tleaf, H->sleaf, nleaves + 1));
    H->tx     = H->sx;
    H->ty     = H->sy;
    H->talias = PETSC_TRUE;
    if (H->tperm)
#pragma omp parallel for schedule(static) if (N >= FMM_OMP_MIN_POINTS)
      for (PetscInt k = 0; k < N; k++) H->tperm[k] = (k >= hb && k < hb + m) ? D->cout[k - hb] : -1;
  } else { /* own leaves only: D's targets from the first own leaf's place on (the sources' own part where same) */
#pragma omp parallel for schedule(static) if (nleaves >= 4 * FMM_OMP_MIN_POINTS)
    for (PetscInt g = 0; g < nleaves; g++) H->tleaf[g + 1] = (g < lbase) ? 0 : (g < lbase + D->nl ? D->tleaf[g - lbase + 1] : D->m);
    if (H->tperm) PetscCall(PetscArraycpy(H->tperm, D->cout, M));
    if (D->same) {
      H->tx     = D->devpart ? NULL : H->sx + hb; /* (devpart: the own sources, in the backend's memory) */
      H->ty     = D->devpart ? NULL : H->sy + hb;
      H->talias = PETSC_TRUE;
    } else {
      H->tx = D->tx;
      H->ty = D->ty;
      D->tx = D->ty = NULL;
    }
  }
  /* the product's numbers of D's points are the plan's now */
  if (!D->same) PetscCall(PetscFree(D->cout));
  PetscCall(PetscFree(D->cin));
  D->cout = NULL;
  nfar = D->faroff[D->nown];
  if (global) { /* geometry, far lists by global box (slots below nown are in global order) */
    PetscCheck(D->ngeo == D->nslot && D->far, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM: the plan by global box needs the geometry and far lists of every slot on the host");
    PetscCall(PetscMalloc3(nboxes, &H->cx, nboxes, &H->cy, nboxes, &H->scale));
    for (PetscInt b = 0; b < nboxes; b++) {
      H->cx[b]    = D->cx[0];
      H->cy[b]    = D->cy[0];
      H->scale[b] = D->scale[0];
    }
    for (PetscInt t = 0; t < D->nslot; t++) {
      const PetscInt b = SlotBox(D, t);
      H->cx[b]         = D->cx[t];
      H->cy[b]         = D->cy[t];
      H->scale[b]      = D->scale[t];
    }
    PetscCall(PetscMalloc1(nboxes + 1, &H->faroff));
    PetscCall(PetscMalloc1(PetscMax(nfar, 1), &H->far));
    H->faroff[0] = 0;
#pragma omp parallel for schedule(static) if (nfar >= FMM_OMP_MIN_POINTS)
    for (PetscInt j = 0; j < nfar; j++) H->far[j] = SlotBox(D, D->far[j]); /* (in the slots' order) */
    for (PetscInt t = 0, b = 0; t < D->nown; t++) {
      const PetscInt g = SlotBox(D, t);
      for (; b < g; b++) H->faroff[b + 1] = D->faroff[t];
      H->faroff[g + 1] = D->faroff[t + 1];
      b                = g + 1;
      if (t == D->nown - 1)
        for (; b < nboxes; b++) H->faroff[b + 1] = nfar;
    }
  }
  /* near lists by global leaf */
  if (halotgt) { /* each halo leaf's list: this rank's leaves that name it, ascending */
    const PetscInt nent = D->nearoff[D->nl];
    PetscCall(PetscCalloc1(D->nhl + 1, &hoff));
#pragma omp parallel for schedule(static) if (nent >= FMM_OMP_MIN_POINTS)
    for (PetscInt j = 0; j < nent; j++)
      if (D->near[j] >= D->nl) {
#pragma omp atomic update
        hoff[D->near[j] - D->nl + 1]++;
      }
    for (PetscInt h = 0; h < D->nhl; h++) hoff[h + 1] += hoff[h];
    PetscCall(PetscMalloc1(PetscMax(hoff[D->nhl], 1), &hnear));
#pragma omp parallel for schedule(static) if (nent >= FMM_OMP_MIN_POINTS)
    for (PetscInt a = 0; a < D->nl; a++)
      for (PetscInt j = D->nearoff[a]; j < D->nearoff[a + 1]; j++)
        if (D->near[j] >= D->nl) {
          PetscInt k;
#pragma omp atomic capture
          k = hoff[D->near[j] - D->nl]++;
          hnear[k] = lbase + a;
        }
    for (PetscInt h = D->nhl; h > 0; h--) hoff[h] = hoff[h - 1]; /* back to the starts */
    hoff[0] = 0;
#pragma omp parallel for schedule(dynamic, 256) if (D->nhl >= 4096)
    for (PetscInt h = 0; h < D->nhl; h++) SortShortList(hoff[h + 1] - hoff[h], hnear + hoff[h]);
  }
  /* the near lists' offsets (the own leaves' and the halo leaves'), then each list, leaf by leaf at once */
  PetscCall(PetscMalloc1(nleaves + 1, &H->nearoff));
  LeafOffsets(nleaves, lbase, D->nl, D->nearoff, D->nhl, D->halleaf, hoff, H->nearoff);
  nnear = H->nearoff[nleaves];
  PetscCall(PetscMalloc1(PetscMax(nnear, 1), &H->near));
#pragma omp parallel for schedule(static) if (D->nl >= 4096)
  for (PetscInt a = 0; a < D->nl; a++) {
    PetscInt *o = H->near + H->nearoff[lbase + a];
    for (PetscInt j = D->nearoff[a]; j < D->nearoff[a + 1]; j++) {
      const PetscInt v = D->near[j];
      *o++             = v < D->nl ? lbase + v : D->halleaf[v - D->nl];
    }
    if (halotgt) SortShortList(D->nearoff[a + 1] - D->nearoff[a], H->near + H->nearoff[lbase + a]);
  }
  if (hoff)
#pragma omp parallel for schedule(static) if (D->nhl >= 4096)
    for (PetscInt h = 0; h < D->nhl; h++) memcpy(H->near + H->nearoff[D->halleaf[h]], hnear + hoff[h], sizeof(PetscInt) * (hoff[h + 1] - hoff[h])); /* (no PETSc call in threads) */
  PetscCall(PetscFree(hoff));
  PetscCall(PetscFree(hnear));
  /* sizes and statistics */
  P->L          = L;
  P->nleaves    = nleaves;
  P->nboxes     = nboxes;
  P->N          = N;
  P->M          = M;
  P->nfar       = nfar;
  P->l0         = l0;
  P->b0         = D->B0;
  P->b1         = D->B1;
  FMMPlanStatistics(P, H);
  PetscFunctionReturn(0);
}

/*
  FMMDistExchangeSetup - the multipole exchange of a backend that evaluates
  FMMDistHostPlan(): after its M2M it gives the rows D->xexp[0..nxexp) of its
  multipoles (global box numbers: this rank's boxes of level l0, then those
  other ranks' far lists name) to FMMDistExchange(), and puts the rows it
  returns at D->ximp[0..nximp) (every box of levels 0..l0, then the halo's).
  Collective.
*/
PetscErrorCode FMMDistExchangeSetup(FMMDist *D, PetscInt p)
{
  const PetscInt nb0 = D->B1 - D->B0, nroot = D->nown - D->ntop;
  const PetscInt *deg;
  PetscInt       *cidx, *leafc, nsend = 0, nroots, nleaves;
  const PetscSFNode *rem;
  PetscSFNode    *nrem;
  MPI_Comm        comm;

  PetscFunctionBegin;
  PetscCall(PetscObjectGetComm((PetscObject)D->sfmp, &comm));
  D->xne = 2 * (p + 1);
  PetscCall(PetscSFComputeDegreeBegin(D->sfmp, &deg));
  PetscCall(PetscSFComputeDegreeEnd(D->sfmp, &deg));
  PetscCall(PetscMalloc1(PetscMax(nroot, 1), &cidx));
  for (PetscInt r = 0; r < nroot; r++) cidx[r] = deg[r] > 0 ? nsend++ : -1;
  D->nxexp  = nb0 + nsend;
  D->nximp  = D->ntop + D->nhb;
  PetscCall(PetscMalloc2(D->nxexp, &D->xexp, D->nximp, &D->ximp));
  for (PetscInt b = 0; b < nb0; b++) D->xexp[b] = FMMLevelStart(D->l0) + D->B0 + b;
  for (PetscInt r = 0; r < nroot; r++)
    if (cidx[r] >= 0) D->xexp[nb0 + cidx[r]] = SlotBox(D, D->ntop + r);
  for (PetscInt t = 0; t < D->ntop; t++) D->ximp[t] = t;
  for (PetscInt h = 0; h < D->nhb; h++) D->ximp[D->ntop + h] = D->halbox[h];
  /* the compact SF: each halo box from its owner's row among the sent ones */
  PetscCall(PetscMalloc1(PetscMax(D->nhb, 1), &leafc));
  PetscCall(PetscSFBcastBegin(D->sfmp, MPIU_INT, cidx, leafc, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(D->sfmp, MPIU_INT, cidx, leafc, MPI_REPLACE));
  PetscCall(PetscSFGetGraph(D->sfmp, &nroots, &nleaves, NULL, &rem));
  PetscCall(PetscMalloc1(PetscMax(nleaves, 1), &nrem));
  for (PetscInt h = 0; h < nleaves; h++) nrem[h] = (PetscSFNode){rem[h].rank, leafc[h]};
  PetscCall(MakeSF(comm, nsend, nleaves, NULL, nrem, &D->sfmpc));
  PetscCall(PetscFree(leafc));
  PetscCall(PetscFree(cidx));
  /* the top's multipoles on the host, and the tables of its M2M */
  PetscCall(PetscCalloc2((size_t)D->ntop * D->xne, &D->xtop, (2 * p + 1) * (2 * p + 1), &D->xbinom));
  PetscCall(FMMDistUnit(D, D->xne));
  {
    PetscReal *m2l;
    PetscCall(PetscCalloc1(p * p, &m2l));
    FMMTables((int)p, D->xbinom, m2l);
    PetscCall(PetscFree(m2l));
  }
  PetscFunctionReturn(0);
}

/* exp: the rows D->xexp (host), imp: the rows D->ximp (host); collective */
PetscErrorCode FMMDistExchange(void *ctx, const PetscReal *exp, PetscReal *imp)
{
  FMMDist       *D  = (FMMDist *)ctx;
  const PetscInt ne = D->xne, nb0 = D->B1 - D->B0, l0 = D->l0, p = ne / 2 - 1;
  MPI_Comm       comm;

  PetscFunctionBegin;
  PetscCall(PetscObjectGetComm((PetscObject)D->sfmp, &comm));
  PetscCall(PetscLogEventBegin(MATFMM_Exchange, 0, 0, 0, 0));
  PetscCall(PetscSFBcastBegin(D->sfmpc, D->unit, exp + (size_t)nb0 * ne, imp + (size_t)D->ntop * ne, MPI_REPLACE));
  /* the top: level l0 summed over the ranks (each row is zero but on its owner), M2M above on every rank */
  PetscCall(PetscArrayzero(D->xtop, (size_t)D->ntop * ne));
  PetscCall(PetscArraycpy(D->xtop + (size_t)(FMMLevelStart(l0) + D->B0) * ne, exp, (size_t)nb0 * ne));
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, D->xtop + (size_t)FMMLevelStart(l0) * ne, (PetscMPIInt)(ne << (2 * l0)), MPIU_REAL, MPIU_SUM, comm));
  for (PetscInt l = l0 - 1; l >= 0; l--)
    for (PetscInt b = 0; b < ((PetscInt)1 << (2 * l)); b++) {
      const PetscInt ps = FMMLevelStart(l) + b;
      PetscReal      work[4 * (FMM_P_MAX + 1)];
      for (PetscInt ch = 4 * b; ch < 4 * b + 4; ch++) {
        const PetscInt cs = FMMLevelStart(l + 1) + ch;
        if (!D->nsb[cs]) continue;
        FMMM2M((int)p, D->xbinom, (D->cx[cs] - D->cx[ps]) / D->scale[ps], (D->cy[cs] - D->cy[ps]) / D->scale[ps], D->scale[cs] / D->scale[ps], D->xtop + (size_t)cs * ne, D->xtop + (size_t)ps * ne, work);
      }
    }
  PetscCall(PetscArraycpy(imp, D->xtop, (size_t)D->ntop * ne));
  PetscCall(PetscSFBcastEnd(D->sfmpc, D->unit, exp + (size_t)nb0 * ne, imp + (size_t)D->ntop * ne, MPI_REPLACE));
  PetscCall(PetscLogEventEnd(MATFMM_Exchange, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}
