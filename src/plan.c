/*
  The plan: the adaptive median-split pyramid and the theta-criterion
  interaction lists (Goude & Engblom 2013, Sec. 2; Engblom 2011).

  Every rank builds the same tree from all N sources: each box of a level is
  split at the median of its sources along the longer side of their bounding
  box, then each half again, giving the four children.  Medians are taken on
  the key (coordinate, global index), so ties between equal coordinates are
  broken the same way on every rank and every backend.  Targets follow the
  split values.  The box centres and radii cover the box's sources and the
  targets of all ranks (one MPI_Allreduce), so the plan and hence the result
  do not depend on how targets are distributed.
*/
#include "fmmimpl.h"

typedef struct {
  PetscReal x, y;
  PetscInt  i;
} FMMPoint;

static inline PetscBool KeyLess(const FMMPoint *a, const FMMPoint *b, int dir)
{
  PetscReal ca = dir ? a->y : a->x, cb = dir ? b->y : b->x;
  return (ca < cb || (ca == cb && a->i < b->i)) ? PETSC_TRUE : PETSC_FALSE;
}

static inline void Swap(FMMPoint *a, FMMPoint *b)
{
  FMMPoint t = *a;
  *a         = *b;
  *b         = t;
}

/* Quickselect: reorder pt[0..n) so that pt[k] is the k-th smallest key and the
   ones before it are smaller. Keys are distinct (the index breaks ties). */
static void Select(FMMPoint *pt, PetscInt n, PetscInt k, int dir)
{
  PetscInt lo = 0, hi = n - 1;
  while (hi > lo) {
    PetscInt mid = lo + (hi - lo) / 2;
    /* median of three into pt[hi] as pivot */
    if (KeyLess(&pt[mid], &pt[lo], dir)) Swap(&pt[mid], &pt[lo]);
    if (KeyLess(&pt[hi], &pt[lo], dir)) Swap(&pt[hi], &pt[lo]);
    if (KeyLess(&pt[mid], &pt[hi], dir)) Swap(&pt[mid], &pt[hi]);
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

/* Split pt[0..n) at its median along the longer side of its bounding box.
   Returns the direction and the split value (coordinate of the first point of
   the upper half); h = n/2 points go to the lower half. */
static void SplitSources(FMMPoint *pt, PetscInt n, int *dir, PetscReal *val)
{
  PetscReal xmin = PETSC_MAX_REAL, xmax = -PETSC_MAX_REAL, ymin = PETSC_MAX_REAL, ymax = -PETSC_MAX_REAL;
  if (n == 0) {
    *dir = 0;
    *val = PETSC_MAX_REAL; /* all targets go to the lower half */
    return;
  }
  for (PetscInt i = 0; i < n; i++) {
    xmin = PetscMin(xmin, pt[i].x);
    xmax = PetscMax(xmax, pt[i].x);
    ymin = PetscMin(ymin, pt[i].y);
    ymax = PetscMax(ymax, pt[i].y);
  }
  *dir = (ymax - ymin > xmax - xmin) ? 1 : 0;
  Select(pt, n, n / 2, *dir);
  *val = *dir ? pt[n / 2].y : pt[n / 2].x;
}

/* Partition targets: those with coordinate < val first; returns their count */
static PetscInt SplitTargets(FMMPoint *pt, PetscInt n, int dir, PetscReal val)
{
  PetscInt s = 0;
  for (PetscInt i = 0; i < n; i++) {
    PetscReal c = dir ? pt[i].y : pt[i].x;
    if (c < val) Swap(&pt[i], &pt[s++]);
  }
  return s;
}

/*
  FMMChooseOrder - expansion order p for a relative accuracy eps and
  separation parameter theta.  The truncation error of the theta-criterion
  decays like theta^p (Engblom 2011); measured relative 2-norm errors of whole
  products sit near 1e-3 theta^p in the worst case we know (double layer on a
  curve, tests/accuracy.c), so p solves 1e-2 theta^p = eps: a factor 10 margin.
*/
PetscErrorCode FMMChooseOrder(PetscReal eps, PetscReal theta, PetscInt *p)
{
  PetscFunctionBegin;
  *p = (PetscInt)PetscCeilReal(PetscLogReal(eps / 1e-2) / PetscLogReal(theta));
  *p = PetscMin(PetscMax(*p, 4), 64);
  PetscFunctionReturn(0);
}

/* strong/far list construction for the children of one level */
static inline PetscBool Separated(PetscReal rt, PetscReal rs, PetscReal d, PetscReal theta)
{
  PetscReal R = PetscMax(rt, rs), r = PetscMin(rt, rs);
  return (R + theta * r <= theta * d) ? PETSC_TRUE : PETSC_FALSE;
}

PetscErrorCode FMMPlanBuild(Mat A)
{
  Mat_FMM   *fmm = (Mat_FMM *)A->data;
  FMMPlan   *P   = &fmm->plan;
  PetscInt   N = A->cmap->N, M, L = 0, nleaves, nboxes;
  FMMPoint  *spt, *tpt;
  PetscInt **soff, **toff; /* per level: box ranges, 4^l + 1 */
  PetscReal *bb, *rad;     /* box bounding boxes (xmin,ymin,-xmax,-ymax), radii */
  PetscInt  *stroff, *str, *far, nfar;
  PetscReal  twopi = 2.0 * PETSC_PI;

  PetscFunctionBegin;
  PetscCall(FMMPlanDestroy(P));
  M = fmm->ntgt < 0 ? fmm->nsrc : fmm->ntgt;
  while (L < 15 && (PetscInt64)fmm->ct * ((PetscInt64)1 << (2 * L)) < N) L++;
  nleaves    = (PetscInt)1 << (2 * L);
  nboxes     = FMMLevelStart(L + 1);
  P->L       = L;
  P->nleaves = nleaves;
  P->nboxes  = nboxes;
  P->N       = N;
  P->M       = M;
  P->same    = fmm->ntgt < 0 ? PETSC_TRUE : PETSC_FALSE;

  PetscCall(PetscMalloc2(N, &spt, M, &tpt));
  for (PetscInt i = 0; i < N; i++) {
    spt[i].x = fmm->gsrc[2 * i];
    spt[i].y = fmm->gsrc[2 * i + 1];
    spt[i].i = i;
  }
  {
    const PetscReal *t = fmm->ntgt < 0 ? fmm->src : fmm->tgt;
    for (PetscInt i = 0; i < M; i++) {
      tpt[i].x = t[2 * i];
      tpt[i].y = t[2 * i + 1];
      tpt[i].i = i;
    }
  }

  /* sorting: split every box of level l into four */
  PetscCall(PetscMalloc2(L + 1, &soff, L + 1, &toff));
  for (PetscInt l = 0; l <= L; l++) PetscCall(PetscMalloc2(((PetscInt)1 << (2 * l)) + 1, &soff[l], ((PetscInt)1 << (2 * l)) + 1, &toff[l]));
  soff[0][0] = 0;
  soff[0][1] = N;
  toff[0][0] = 0;
  toff[0][1] = M;
  for (PetscInt l = 0; l < L; l++) {
    PetscInt nb = (PetscInt)1 << (2 * l);
#pragma omp parallel for schedule(dynamic, 1) if (nb > 8)
    for (PetscInt b = 0; b < nb; b++) {
      PetscInt  s0 = soff[l][b], ns = soff[l][b + 1] - s0, t0 = toff[l][b], nt = toff[l][b + 1] - t0;
      PetscInt  sh[5], th[5];
      int       dir;
      PetscReal val;
      /* first split: halves [0,h) and [h,ns) */
      SplitSources(spt + s0, ns, &dir, &val);
      PetscInt h  = ns / 2;
      PetscInt th0 = SplitTargets(tpt + t0, nt, dir, val);
      /* second split of each half */
      SplitSources(spt + s0, h, &dir, &val);
      PetscInt ta = SplitTargets(tpt + t0, th0, dir, val);
      SplitSources(spt + s0 + h, ns - h, &dir, &val);
      PetscInt tb = SplitTargets(tpt + t0 + th0, nt - th0, dir, val);
      sh[0] = 0;
      sh[1] = h / 2;
      sh[2] = h;
      sh[3] = h + (ns - h) / 2;
      sh[4] = ns;
      th[0] = 0;
      th[1] = ta;
      th[2] = th0;
      th[3] = th0 + tb;
      th[4] = nt;
      for (int c = 0; c < 4; c++) {
        soff[l + 1][4 * b + c] = s0 + sh[c];
        toff[l + 1][4 * b + c] = t0 + th[c];
      }
      if (b == nb - 1) {
        soff[l + 1][4 * nb] = N;
        toff[l + 1][4 * nb] = M;
      }
    }
  }

  /* points in tree order */
  PetscCall(PetscMalloc4(N, &P->sperm, N, &P->sx, N, &P->sy, nleaves + 1, &P->sleaf));
  PetscCall(PetscMalloc3(N, &P->cq, N, &P->cdx, N, &P->cdy));
  PetscCall(PetscMalloc4(M, &P->tperm, M, &P->tx, M, &P->ty, nleaves + 1, &P->tleaf));
  for (PetscInt i = 0; i < N; i++) {
    PetscInt  g = spt[i].i;
    PetscReal w = fmm->gwts ? fmm->gwts[g] : 1.0;
    P->sperm[i] = g;
    P->sx[i]    = spt[i].x;
    P->sy[i]    = spt[i].y;
    P->cq[i]    = -fmm->beta * w / twopi;
    P->cdx[i]   = fmm->gnrm ? fmm->alpha * w * fmm->gnrm[2 * g] / twopi : 0.0;
    P->cdy[i]   = fmm->gnrm ? fmm->alpha * w * fmm->gnrm[2 * g + 1] / twopi : 0.0;
  }
  for (PetscInt i = 0; i < M; i++) {
    P->tperm[i] = tpt[i].i;
    P->tx[i]    = tpt[i].x;
    P->ty[i]    = tpt[i].y;
  }
  PetscCall(PetscArraycpy(P->sleaf, soff[L], nleaves + 1));
  PetscCall(PetscArraycpy(P->tleaf, toff[L], nleaves + 1));

  /* box geometry: bounding boxes of leaves, targets of all ranks, then upward */
  PetscCall(PetscMalloc2(4 * nboxes, &bb, nboxes, &rad));
  PetscCall(PetscMalloc3(nboxes, &P->cx, nboxes, &P->cy, nboxes, &P->scale));
  {
    PetscReal *leafbb = bb + 4 * FMMLevelStart(L);
#pragma omp parallel for schedule(static)
    for (PetscInt b = 0; b < nleaves; b++) {
      PetscReal *q = leafbb + 4 * b;
      q[0] = q[1] = q[2] = q[3] = PETSC_MAX_REAL;
      for (PetscInt i = P->tleaf[b]; i < P->tleaf[b + 1]; i++) {
        q[0] = PetscMin(q[0], P->tx[i]);
        q[1] = PetscMin(q[1], P->ty[i]);
        q[2] = PetscMin(q[2], -P->tx[i]);
        q[3] = PetscMin(q[3], -P->ty[i]);
      }
    }
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, leafbb, 4 * nleaves, MPIU_REAL, MPI_MIN, PetscObjectComm((PetscObject)A)));
#pragma omp parallel for schedule(static)
    for (PetscInt b = 0; b < nleaves; b++) {
      PetscReal *q = leafbb + 4 * b;
      for (PetscInt i = P->sleaf[b]; i < P->sleaf[b + 1]; i++) {
        q[0] = PetscMin(q[0], P->sx[i]);
        q[1] = PetscMin(q[1], P->sy[i]);
        q[2] = PetscMin(q[2], -P->sx[i]);
        q[3] = PetscMin(q[3], -P->sy[i]);
      }
    }
    for (PetscInt l = L - 1; l >= 0; l--) {
      PetscReal *pb = bb + 4 * FMMLevelStart(l), *cb = bb + 4 * FMMLevelStart(l + 1);
      for (PetscInt b = 0; b < ((PetscInt)1 << (2 * l)); b++)
        for (int j = 0; j < 4; j++) pb[4 * b + j] = PetscMin(PetscMin(cb[16 * b + j], cb[16 * b + 4 + j]), PetscMin(cb[16 * b + 8 + j], cb[16 * b + 12 + j]));
    }
    /* floor of the expansion scale for boxes of coincident points: any positive
       scale is exact for them, a tiny one would overflow the dipole term */
    PetscReal floor_s = 0.0;
    if (bb[0] < PETSC_MAX_REAL) floor_s = 0.5 * PetscSqrtReal(PetscSqr(bb[0] + bb[2]) + PetscSqr(bb[1] + bb[3])) * 1e-9;
    if (floor_s == 0.0) floor_s = 1.0;
    for (PetscInt b = 0; b < nboxes; b++) {
      PetscReal *q = bb + 4 * b;
      if (q[0] == PETSC_MAX_REAL) { /* no point in this box on any rank */
        P->cx[b] = P->cy[b] = 0.0;
        rad[b]              = 0.0;
      } else {
        P->cx[b] = 0.5 * (q[0] - q[2]);
        P->cy[b] = 0.5 * (q[1] - q[3]);
        rad[b]   = 0.5 * PetscSqrtReal(PetscSqr(q[0] + q[2]) + PetscSqr(q[1] + q[3]));
      }
      P->scale[b] = PetscMax(rad[b], floor_s);
    }
  }

  /* interaction lists by the theta-criterion, level by level: children of the
     parent's strongly coupled boxes become far (M2L) when separated, else stay
     strongly coupled; strong pairs at the leaf level are the near field */
  PetscCall(PetscMalloc1(nboxes + 1, &P->faroff));
  PetscCall(PetscMalloc1(2, &stroff));
  PetscCall(PetscMalloc1(1, &str));
  PetscCall(PetscMalloc1(1, &far));
  P->faroff[0] = P->faroff[1] = 0; /* the root has no far field */
  stroff[0]                   = 0;
  stroff[1]                   = (N > 0 && M > 0) ? 1 : 0;
  str[0]                      = 0;
  nfar                        = 0;
  for (PetscInt l = 0; l < L; l++) {
    PetscInt  nb = (PetscInt)1 << (2 * (l + 1)), c0 = FMMLevelStart(l + 1);
    PetscInt *cnts, *cntf, *nstr = NULL;
    PetscCall(PetscCalloc2(nb + 1, &cnts, nb + 1, &cntf));
    for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(dynamic, 64)
      for (PetscInt t = 0; t < nb; t++) {
        PetscInt tp = t / 4, ks = 0, kf = 0;
        if (toff[l + 1][t + 1] == toff[l + 1][t]) continue; /* no target of this rank here */
        for (PetscInt j = stroff[tp]; j < stroff[tp + 1]; j++) {
          for (int c = 0; c < 4; c++) {
            PetscInt  s = 4 * str[j] + c;
            PetscReal d;
            if (soff[l + 1][s + 1] == soff[l + 1][s]) continue; /* no source there */
            d = PetscSqrtReal(PetscSqr(P->cx[c0 + t] - P->cx[c0 + s]) + PetscSqr(P->cy[c0 + t] - P->cy[c0 + s]));
            if (Separated(rad[c0 + t], rad[c0 + s], d, fmm->theta)) {
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
    for (PetscInt t = 0; t < nb; t++) P->faroff[c0 + t + 1] = nfar + cntf[t + 1];
    nfar += cntf[nb];
    PetscCall(PetscFree(stroff));
    PetscCall(PetscFree(str));
    PetscCall(PetscMalloc1(nb + 1, &stroff));
    PetscCall(PetscArraycpy(stroff, cnts, nb + 1));
    str = nstr;
    PetscCall(PetscFree2(cnts, cntf));
  }
  P->far     = far;
  P->nearoff = stroff;
  P->near    = str;

  /* statistics */
  P->maxleafsrc = P->maxleaftgt = 0;
  P->nearsrc                    = 0;
  P->p2ppairs                   = 0;
  for (PetscInt b = 0; b < nleaves; b++) {
    PetscInt ns = 0;
    P->maxleafsrc = PetscMax(P->maxleafsrc, P->sleaf[b + 1] - P->sleaf[b]);
    P->maxleaftgt = PetscMax(P->maxleaftgt, P->tleaf[b + 1] - P->tleaf[b]);
    for (PetscInt j = P->nearoff[b]; j < P->nearoff[b + 1]; j++) ns += P->sleaf[P->near[j] + 1] - P->sleaf[P->near[j]];
    P->nearsrc += ns;
    P->p2ppairs += (PetscCount)ns * (P->tleaf[b + 1] - P->tleaf[b]);
  }

  for (PetscInt l = 0; l <= L; l++) PetscCall(PetscFree2(soff[l], toff[l]));
  PetscCall(PetscFree2(soff, toff));
  PetscCall(PetscFree2(bb, rad));
  PetscCall(PetscFree2(spt, tpt));
  PetscFunctionReturn(0);
}

PetscErrorCode FMMPlanDestroy(FMMPlan *P)
{
  PetscFunctionBegin;
  PetscCall(PetscFree4(P->sperm, P->sx, P->sy, P->sleaf));
  PetscCall(PetscFree3(P->cq, P->cdx, P->cdy));
  PetscCall(PetscFree4(P->tperm, P->tx, P->ty, P->tleaf));
  PetscCall(PetscFree3(P->cx, P->cy, P->scale));
  PetscCall(PetscFree(P->faroff));
  PetscCall(PetscFree(P->far));
  PetscCall(PetscFree(P->nearoff));
  PetscCall(PetscFree(P->near));
  PetscCall(PetscMemzero(P, sizeof(*P)));
  PetscFunctionReturn(0);
}
