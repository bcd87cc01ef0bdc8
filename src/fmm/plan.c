/*
  The plan: the adaptive median-split pyramid and the theta-criterion
  interaction lists (Goude & Engblom 2013, Sec. 2; Engblom 2011).

  Every rank builds the same tree from all points: the N sources and, when the
  targets are not the sources, the targets of all ranks.  Each box of a level
  is split in two near the median of its points (Split() below), then each
  half again, giving the four children, so boxes adapt to where sources and
  targets are (targets away from the sources get
  boxes of their own instead of stretching the source boxes).  Medians are
  taken on the key (coordinate, index), so ties between equal coordinates are
  broken the same way on every rank and every backend.  The plan, and hence
  the product, does not depend on how rows and columns are distributed.
*/
#include "fmmimpl.h"
#include "expansions.h"
#include <stdint.h>
#include <stdlib.h>

#define KeyLess FMMKeyLess

static inline void Swap(FMMPoint *a, FMMPoint *b)
{
  FMMPoint t = *a;
  *a         = *b;
  *b         = t;
}

static int CmpX(const void *a, const void *b)
{
  return KeyLess((const FMMPoint *)a, (const FMMPoint *)b, 0) ? -1 : (KeyLess((const FMMPoint *)b, (const FMMPoint *)a, 0) ? 1 : 0);
}

static int CmpY(const void *a, const void *b)
{
  return KeyLess((const FMMPoint *)a, (const FMMPoint *)b, 1) ? -1 : (KeyLess((const FMMPoint *)b, (const FMMPoint *)a, 1) ? 1 : 0);
}

/* Quickselect: reorder pt[0..n) so that pt[k] is the k-th smallest key and the
   ones before it are smaller.  Keys are distinct (the index breaks ties), so
   the result is unique whatever the pivots.  Pivots are the median of three
   pseudo-random entries (fixed seed, so runs repeat): points split by the
   parent box arrive in patterns that make median-of-first/middle/last
   quadratic.  After 2 log2(n) rounds the rest is sorted (introselect). */
void FMMSelect(FMMPoint *pt, PetscInt n, PetscInt k, int dir)
{
  PetscInt lo = 0, hi = n - 1, rounds = 0, maxrounds = 8;
  uint64_t r = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;

  for (PetscInt m = n; m > 1; m >>= 1) maxrounds += 2;
  while (hi > lo) {
    PetscInt len = hi - lo + 1, c[3];
    if (++rounds > maxrounds) {
      qsort(pt + lo, (size_t)len, sizeof(FMMPoint), dir ? CmpY : CmpX);
      return;
    }
    for (int j = 0; j < 3; j++) { /* xorshift64 */
      r ^= r << 13;
      r ^= r >> 7;
      r ^= r << 17;
      c[j] = lo + (PetscInt)(r % (uint64_t)len);
    }
    /* median of the three into pt[hi] */
    if (KeyLess(&pt[c[1]], &pt[c[0]], dir)) { PetscInt t = c[0]; c[0] = c[1]; c[1] = t; }
    if (KeyLess(&pt[c[2]], &pt[c[1]], dir)) { PetscInt t = c[1]; c[1] = c[2]; c[2] = t; }
    if (KeyLess(&pt[c[1]], &pt[c[0]], dir)) { PetscInt t = c[0]; c[0] = c[1]; c[1] = t; }
    Swap(&pt[c[1]], &pt[hi]);
    FMMPoint piv = pt[hi];
    PetscInt s   = lo;
    for (PetscInt i = lo; i < hi; i++)
      if (KeyLess(&pt[i], &piv, dir)) Swap(&pt[i], &pt[s++]);
    Swap(&pt[s], &pt[hi]);
    if (s == k) return;
    if (s < k) lo = s + 1;
    else hi = s - 1;
  }
}

typedef struct {
  PetscReal x0, y0, x1, y1;
} FMMBox;

static inline void BoxAdd(FMMBox *b, const FMMPoint *p)
{
  b->x0 = PetscMin(b->x0, p->x);
  b->y0 = PetscMin(b->y0, p->y);
  b->x1 = PetscMax(b->x1, p->x);
  b->y1 = PetscMax(b->y1, p->y);
}

static inline FMMBox BoxOf(const FMMPoint *pt, PetscInt n)
{
  FMMBox b = {PETSC_MAX_REAL, PETSC_MAX_REAL, -PETSC_MAX_REAL, -PETSC_MAX_REAL};
  for (PetscInt i = 0; i < n; i++) BoxAdd(&b, &pt[i]);
  return b;
}

/* Split pt[0..n) in two: reorders it so that the first k points, k returned,
   are the k smallest keys along the chosen direction.

   median (Goude & Engblom's rule): k = n/2 along the longer side of the bounding box.

   compact (default): the cut of least cost among k = h - w .. h + w, h = n/2,
   w = n/FMM_SPLIT_WINDOW, along x or y (see fmmimpl.h): points 0..h-w-1 and
   h+w..n-1 are placed by selection, the 2w between them are sorted, and one
   pass each way over them gives the bounding boxes of every cut.  Ties go to
   x, then to the smaller k, as in cuda/fmm/tree/compact.cuh.  Why: with medians along the
   longer side, a box where the curve turns back gives one child a few points
   of the far arm; they stay with points of the near arm down to a leaf whose
   radius is the distance between the arms, and such leaves and their boxes
   carried half of the P2P pairs and a quarter of the M2L translations on the
   star curve.  Moving the cut by a few points keeps the arms apart.
   work[] holds 2w + 1 reals. */
static PetscInt Split(FMMPoint *pt, PetscInt n, PetscBool median, PetscReal *work)
{
  PetscInt  h = n / 2, w = n / FMM_SPLIT_WINDOW, bestd = 0, bestk = h;
  PetscReal best = PETSC_MAX_REAL;

  if (n < 2) return h;
  if (median) {
    FMMBox b = BoxOf(pt, n);
    FMMSelect(pt, n, h, (b.y1 - b.y0 > b.x1 - b.x0) ? 1 : 0);
    return h;
  }
  for (int d = 0; d < 2; d++) {
    FMMBox l, r;
    if (w) {
      FMMSelect(pt, n, h - w, d);
      FMMSelect(pt + h - w, n - h + w, 2 * w, d);
      qsort(pt + h - w, (size_t)(2 * w), sizeof(FMMPoint), d ? CmpY : CmpX);
    } else FMMSelect(pt, n, h, d);
    /* work[j]: half-perimeter of the first child of cut k = h - w + j, then the cut's cost */
    l = BoxOf(pt, h - w);
    for (PetscInt j = 0; j <= 2 * w; j++) {
      if (j) BoxAdd(&l, &pt[h - w + j - 1]);
      work[j] = FMMHalfPerimeter(l.x0, l.y0, l.x1, l.y1);
    }
    r = BoxOf(pt + h + w, n - h - w);
    for (PetscInt j = 2 * w; j >= 0; j--) {
      if (j < 2 * w) BoxAdd(&r, &pt[h - w + j]);
      work[j] = work[j] + FMMHalfPerimeter(r.x0, r.y0, r.x1, r.y1);
      if (j != w) work[j] = work[j] * FMM_SPLIT_GAIN;
    }
    for (PetscInt j = 0; j <= 2 * w; j++)
      if (work[j] < best) {
        best  = work[j];
        bestd = d;
        bestk = h - w + j;
      }
  }
  /* the points are now in the y arrangement, which serves any cut in y */
  if (bestd == 0) FMMSelect(pt, n, bestk, 0);
  return bestk;
}

/* Splits each of the nb boxes of pt (point ranges off[0..nb]) into four,
   levels times: *noff (allocated, nb 4^levels + 1 entries) gets the ranges of
   the boxes of the last level, in tree order (children 4b..4b+3 of box b) */
PetscErrorCode FMMTreeSplit(FMMPoint *pt, PetscInt nb, const PetscInt off0[], PetscInt levels, PetscBool median, PetscInt **noffp)
{
  PetscInt  *off, *noff;
  PetscReal *work;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(nb + 1, &off));
  PetscCall(PetscArraycpy(off, off0, nb + 1));
  PetscCall(PetscMalloc1(off[nb] - off[0] + 1, &work)); /* a box's splits use work[] at its own points */
  work -= off[0];
  for (PetscInt l = 0; l < levels; l++, nb *= 4) {
    PetscCall(PetscMalloc1(4 * nb + 1, &noff));
#pragma omp parallel for schedule(dynamic, 1) if (nb > 1 && off[nb] - off[0] >= FMM_OMP_MIN_POINTS) /* a box a thread: the top levels' few large boxes too */
    for (PetscInt b = 0; b < nb; b++) {
      PetscInt u0 = off[b], n = off[b + 1] - u0, h, h0, h1;
      h               = Split(pt + u0, n, median, work + u0);
      h0              = Split(pt + u0, h, median, work + u0);
      h1              = Split(pt + u0 + h, n - h, median, work + u0 + h);
      noff[4 * b]     = u0;
      noff[4 * b + 1] = u0 + h0;
      noff[4 * b + 2] = u0 + h;
      noff[4 * b + 3] = u0 + h + h1;
    }
    noff[4 * nb] = off[nb];
    PetscCall(PetscFree(off));
    off = noff;
  }
  work += off[0];
  PetscCall(PetscFree(work));
  *noffp = off;
  PetscFunctionReturn(0);
}

/*
  FMMChooseOrder - expansion order p for a relative accuracy eps and
  separation parameter theta.  The truncation error of the theta-criterion
  decays like theta^p (Engblom 2011).  Measured relative 2-norm errors of whole
  products, worst case the double layer on a closed curve (tests/accuracy.c,
  tests/kernels.c), are K theta^p with K at most about 0.6/p: 0.007 to 0.09 for
  p = 6..52 and theta = 0.35..0.7 (K = 0.02 at p = 27, theta = 0.5, N = 3000,
  where the former rule 1e-2 theta^p = eps missed eps = 1e-10).  So p solves
  0.1 theta^p = eps: a margin of 2 at p ~ 6, above 5 for p >= 20.  An eps
  that needs more than FMM_P_MAX is refused, with the theta (or the eps)
  that the largest order reaches, rather than missed without a word.
*/
PetscErrorCode FMMChooseOrder(PetscReal eps, PetscReal theta, PetscInt *p)
{
  const PetscReal need = PetscLogReal(eps / 0.1) / PetscLogReal(theta);

  PetscFunctionBegin;
  PetscCheck(need <= FMM_P_MAX, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "MATFMM: eps %g with theta %g needs expansion order %d, above the largest, %d; use theta <= %.4g for this eps (-mat_fmm_theta), or eps >= %.3g for this theta", (double)eps, (double)theta, (int)PetscCeilReal(need), FMM_P_MAX, (double)PetscPowReal(eps / 0.1, 1.0 / FMM_P_MAX), (double)(0.1 * PetscPowReal(theta, FMM_P_MAX)));
  *p = (PetscInt)PetscCeilReal(need);
  *p = PetscMax(*p, 4);
  PetscFunctionReturn(0);
}

/* the repetition layout: the records of the largest leaf (need reals) must fit
   -mat_fmm_repetition_mb (the other leaves go in chunks); the error says by how
   much to raise it (an option out of range, not PETSc's out-of-memory) */
PetscErrorCode FMMRepetitionBudget(const FMMContext *ctx, PetscReal need)
{
  const PetscReal mb = need * sizeof(PetscReal) / 1048576.0;

  PetscFunctionBegin;
  PetscCheck(mb <= ctx->par->repetition_mb, ctx->comm, PETSC_ERR_ARG_OUTOFRANGE, "-mat_fmm_layout repetition: one leaf box needs %.3g MB of records, more than -mat_fmm_repetition_mb %g: raise it to at least %.3g (%.3g MB more), lower -mat_fmm_ct, or use -mat_fmm_layout tiled", (double)mb, (double)ctx->par->repetition_mb, (double)mb, (double)(mb - ctx->par->repetition_mb));
  PetscFunctionReturn(0);
}

#define Separated FMMSeparated /* the theta-criterion (fmmimpl.h) */

PetscErrorCode FMMPlanBuild(FMMContext *ctx)
{
  const FMMParams *par  = ctx->par;
  FMMPlan         *P    = &ctx->plan;
  FMMHostPlan     *H;
  PetscBool        same = ctx->same;
  PetscInt         N = ctx->N, Mg = ctx->Mg, U = N + Mg, M = P->M, L = 0, nleaves, nboxes;
  PetscInt         t0 = ctx->t0, t1 = t0 + M; /* this rank's targets: global indices [t0, t1) of the sources (same) or of the targets */
  FMMPoint        *pt;                        /* all points: sources i < N, targets N + global index */
  PetscInt        *off, *scnt, *tcnt;
  const PetscReal *gtgt = ctx->tgt; /* all targets (gathered at assembly) */
  PetscReal       *bb; /* box bounding boxes (xmin, ymin, -xmax, -ymax) */
  PetscInt        *stroff, *str, *far, nfar;

  PetscFunctionBegin;
  PetscCall(FMMHostPlanDestroy(&ctx->host));
  PetscCall(PetscNew(&ctx->host));
  H = ctx->host;
  /* depth: leaves of about CT points; 4^14 leaves at most */
  while (L < FMM_MAX_LEVELS && (PetscInt64)par->ct * ((PetscInt64)1 << (2 * L)) < U) L++;
  nleaves    = (PetscInt)1 << (2 * L);
  nboxes     = FMMLevelStart(L + 1);
  P->L       = L;
  P->wleaves = P->wtargets = P->wm2p = P->wp2l = 0; /* no walks yet (FMMPlanWalks()) */
  P->wpairs  = 0;
  P->nleaves = nleaves;
  P->nboxes  = nboxes;

  PetscCall(PetscMalloc1(U, &pt));
  for (PetscInt i = 0; i < U; i++) {
    const PetscReal *z = i < N ? &ctx->src[2 * i] : &gtgt[2 * (i - N)];
    pt[i].x            = z[0];
    pt[i].y            = z[1];
    pt[i].i            = i;
    pt[i].j            = i;
  }

  /* sorting: every box split into four, L times */
  {
    PetscInt root[2] = {0, U};
    PetscCall(FMMTreeSplit(pt, 1, root, L, par->split_median, &off));
  }

  /* sources and this rank's targets of each leaf, in tree order */
  PetscCall(PetscCalloc2(nleaves + 1, &scnt, nleaves + 1, &tcnt));
#pragma omp parallel for schedule(static) if (U >= FMM_OMP_MIN_POINTS)
  for (PetscInt b = 0; b < nleaves; b++) {
    for (PetscInt k = off[b]; k < off[b + 1]; k++) {
      PetscInt i = pt[k].i, g = same ? i : i - N;
      if (i < N) scnt[b + 1]++;
      if ((same || i >= N) && g >= t0 && g < t1) tcnt[b + 1]++;
    }
  }
  for (PetscInt b = 0; b < nleaves; b++) {
    scnt[b + 1] += scnt[b];
    tcnt[b + 1] += tcnt[b];
  }
  PetscCall(FMMHostPlanPoints(H, N, M, nleaves, PETSC_TRUE));
  PetscCall(PetscArraycpy(H->sleaf, scnt, nleaves + 1));
  PetscCall(PetscArraycpy(H->tleaf, tcnt, nleaves + 1));
#pragma omp parallel for schedule(static) if (U >= FMM_OMP_MIN_POINTS)
  for (PetscInt b = 0; b < nleaves; b++) {
    PetscInt s = H->sleaf[b], t = H->tleaf[b];
    for (PetscInt k = off[b]; k < off[b + 1]; k++) {
      PetscInt i = pt[k].i, g = same ? i : i - N;
      if (i < N) {
        PetscReal w = ctx->wts ? ctx->wts[i] : 1.0, cdn;
        H->sperm[s] = i;
        H->sx[s]    = pt[k].x;
        H->sy[s]    = pt[k].y;
        FMMSourceCoefficients(par->alpha, par->beta, w, ctx->nrm ? &ctx->nrm[2 * i] : NULL, &H->cq[s], &H->cdx[s], &H->cdy[s], &cdn);
        s++;
      }
      if ((same || i >= N) && g >= t0 && g < t1) {
        H->tperm[t] = g - t0;
        H->tx[t]    = pt[k].x;
        H->ty[t]    = pt[k].y;
        t++;
      }
    }
  }

  /* box geometry: bounding boxes of the leaves' points, then upward */
  PetscCall(PetscMalloc1(4 * nboxes, &bb));
  PetscCall(PetscMalloc3(nboxes, &H->cx, nboxes, &H->cy, nboxes, &H->scale));
  {
    PetscReal *leafbb = bb + 4 * FMMLevelStart(L);
#pragma omp parallel for schedule(static) if (U >= FMM_OMP_MIN_POINTS)
    for (PetscInt b = 0; b < nleaves; b++) {
      PetscReal *q = leafbb + 4 * b;
      FMMBox     e = BoxOf(pt + off[b], off[b + 1] - off[b]); /* empty: q[] = PETSC_MAX_REAL */
      q[0]         = e.x0;
      q[1]         = e.y0;
      q[2]         = -e.x1;
      q[3]         = -e.y1;
    }
    for (PetscInt l = L - 1; l >= 0; l--) {
      PetscReal *pb = bb + 4 * FMMLevelStart(l), *cb = bb + 4 * FMMLevelStart(l + 1);
      for (PetscInt b = 0; b < ((PetscInt)1 << (2 * l)); b++)
        FMMBoxUnion4(pb + 4 * b, cb + 16 * b, cb + 16 * b + 4, cb + 16 * b + 8, cb + 16 * b + 12);
    }
    /* floor of the expansion scale for boxes of coincident points: any positive
       scale is exact for them, a tiny one would overflow the dipole term */
    const PetscReal floor_s = FMMScaleFloor(bb);
    for (PetscInt b = 0; b < nboxes; b++) FMMBoxCircle(bb + 4 * b, floor_s, &H->cx[b], &H->cy[b], &H->scale[b]);
  }

  /* interaction lists by the theta-criterion, level by level: children of the
     parent's strongly coupled boxes become far (M2L) when separated, else stay
     strongly coupled; strong pairs at the leaf level are the near field */
  PetscCall(PetscMalloc1(nboxes + 1, &H->faroff));
  PetscCall(PetscMalloc1(2, &stroff));
  PetscCall(PetscMalloc1(1, &str));
  PetscCall(PetscMalloc1(1, &far));
  H->faroff[0] = H->faroff[1] = 0; /* the root has no far field */
  stroff[0]                   = 0;
  stroff[1]                   = (N > 0 && M > 0) ? 1 : 0;
  str[0]                      = 0;
  nfar                        = 0;
  for (PetscInt l = 0; l < L; l++) {
    PetscInt  nb = (PetscInt)1 << (2 * (l + 1)), c0 = FMMLevelStart(l + 1), span = (PetscInt)1 << (2 * (L - l - 1));
    PetscInt *cnts, *cntf, *nstr = NULL;
    PetscCall(PetscCalloc2(nb + 1, &cnts, nb + 1, &cntf));
    for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(dynamic, 64) if (U >= FMM_OMP_MIN_POINTS)
      for (PetscInt t = 0; t < nb; t++) {
        PetscInt tp = t / 4, ks = 0, kf = 0;
        if (H->tleaf[(t + 1) * span] == H->tleaf[t * span]) continue; /* no target of this rank here */
        for (PetscInt j = stroff[tp]; j < stroff[tp + 1]; j++) {
          for (int c = 0; c < 4; c++) {
            PetscInt  s = 4 * str[j] + c;
            PetscReal d;
            if (H->sleaf[(s + 1) * span] == H->sleaf[s * span]) continue; /* no source there */
            d = PetscSqrtReal(PetscSqr(H->cx[c0 + t] - H->cx[c0 + s]) + PetscSqr(H->cy[c0 + t] - H->cy[c0 + s]));
            if (Separated(H->scale[c0 + t], H->scale[c0 + s], d, par->theta)) {
              if (pass) far[nfar + cntf[t] + kf] = c0 + s;
              kf++;
            } else {
              if (pass) nstr[cnts[t] + ks] = s;
              ks++;
            }
          }
        }
        if (!pass) {
          cnts[t + 1] = ks;
          cntf[t + 1] = kf;
        }
      }
      if (!pass) {
        for (PetscInt t = 0; t < nb; t++) {
          cnts[t + 1] += cnts[t];
          cntf[t + 1] += cntf[t];
        }
        PetscCall(PetscMalloc1(cnts[nb] + 1, &nstr));
        PetscCall(PetscRealloc(sizeof(PetscInt) * (nfar + cntf[nb] + 1), &far));
      }
    }
    for (PetscInt t = 0; t < nb; t++) H->faroff[c0 + t + 1] = nfar + cntf[t + 1];
    nfar += cntf[nb];
    PetscCall(PetscFree(stroff));
    PetscCall(PetscFree(str));
    PetscCall(PetscMalloc1(nb + 1, &stroff));
    PetscCall(PetscArraycpy(stroff, cnts, nb + 1));
    str = nstr;
    PetscCall(PetscFree2(cnts, cntf));
  }
  H->far     = far;
  P->nfar    = nfar;
  H->nearoff = stroff;
  H->near    = str;

  FMMPlanStatistics(P, H);

  PetscCall(PetscFree(off));
  PetscCall(PetscFree2(scnt, tcnt));
  PetscCall(PetscFree(bb));
  PetscCall(PetscFree(pt));
  PetscFunctionReturn(0);
}

/* the leaf and near-field statistics of P from the plan's arrays (P->nleaves set) */
void FMMPlanStatistics(FMMPlan *P, const FMMHostPlan *H)
{
  PetscInt   mls = 0, mlt = 0;
  PetscInt64 nsrc = 0, pairs = 0;
#pragma omp parallel for schedule(static) reduction(max : mls, mlt) reduction(+ : nsrc, pairs) if (P->nleaves >= 4096)
  for (PetscInt b = 0; b < P->nleaves; b++) {
    const PetscInt ns = FMMNearSources(H, b);
    mls               = PetscMax(mls, H->sleaf[b + 1] - H->sleaf[b]);
    mlt               = PetscMax(mlt, H->tleaf[b + 1] - H->tleaf[b]);
    nsrc += ns;
    pairs += (PetscInt64)ns * (H->tleaf[b + 1] - H->tleaf[b]);
  }
  P->maxleafsrc = mls;
  P->maxleaftgt = mlt;
  P->nearsrc    = (PetscInt)nsrc;
  P->p2ppairs   = (PetscCount)pairs + P->wpairs;
}

/* a host plan's arrays of points and leaves, each apart (dist.c hands the plan arrays of its own): the
   permutations and leaf ranges, and where coords the coordinates and coefficients */
PetscErrorCode FMMHostPlanPoints(FMMHostPlan *H, PetscInt N, PetscInt M, PetscInt nleaves, PetscBool coords)
{
  PetscFunctionBegin;
  PetscCall(PetscMalloc1(N, &H->sperm));
  PetscCall(PetscMalloc1(nleaves + 1, &H->sleaf));
  PetscCall(PetscMalloc1(M, &H->tperm));
  PetscCall(PetscMalloc1(nleaves + 1, &H->tleaf));
  if (coords) {
    PetscCall(PetscMalloc1(N, &H->sx));
    PetscCall(PetscMalloc1(N, &H->sy));
    PetscCall(PetscMalloc1(N, &H->cq));
    PetscCall(PetscMalloc1(N, &H->cdx));
    PetscCall(PetscMalloc1(N, &H->cdy));
    PetscCall(PetscMalloc1(M, &H->tx));
    PetscCall(PetscMalloc1(M, &H->ty));
  }
  PetscFunctionReturn(0);
}

PetscErrorCode FMMHostPlanDestroy(FMMHostPlan **host)
{
  FMMHostPlan *H = *host;

  PetscFunctionBegin;
  if (!H) PetscFunctionReturn(0);
  PetscCall(PetscFree(H->sperm));
  PetscCall(PetscFree(H->sx));
  PetscCall(PetscFree(H->sy));
  PetscCall(PetscFree(H->cq));
  PetscCall(PetscFree(H->cdx));
  PetscCall(PetscFree(H->cdy));
  PetscCall(PetscFree(H->sleaf));
  PetscCall(PetscFree(H->tperm));
  if (!H->talias) {
    PetscCall(PetscFree(H->tx));
    PetscCall(PetscFree(H->ty));
  }
  PetscCall(PetscFree(H->tleaf));
  PetscCall(PetscFree3(H->cx, H->cy, H->scale));
  PetscCall(PetscFree(H->faroff));
  PetscCall(PetscFree(H->far));
  PetscCall(PetscFree(H->nearoff));
  PetscCall(PetscFree(H->near));
  PetscCall(FMMWalksDestroy(&H->walk));
  PetscCall(PetscFree(*host));
  PetscFunctionReturn(0);
}
