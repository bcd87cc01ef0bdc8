/*
  The CPU backend (C, OpenMP): the reference implementation of the pass
  P2M -> M2M (upward) -> M2L -> L2L (downward) -> L2P, plus the P2P near field
  in three layouts and the exact direct sum.  Every loop writes each output
  from exactly one thread, in a fixed order, so results do not depend on the
  number of threads.
*/
#include <math.h>
/* The P2P sum is dominated by log(); glibc's vector log (libmvec, linked
   through libm) lets "omp simd" loops take 4 at a time.  glibc's math.h
   declares it only under -ffast-math, which we do not want elsewhere. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
  #pragma omp declare simd notinbranch
extern double log(double);
#endif
#include "../fmmimpl.h"
#include "../expansions.h"

typedef struct {
  PetscInt   p, ne;          /* order, reals per expansion 2(p+1) */
  PetscReal *binom, *m2l;    /* tables, see expansions.h */
  PetscReal *inv;            /* [p+1] 1/k (FMMInverses) */
  PetscReal *mpole, *local;  /* [nboxes * ne] */
  PetscReal *q, *dx, *dy;    /* [N] strengths in tree order */
  PetscReal *pot;            /* [M] potentials in tree order */
  PetscBool  hasq, hasd;     /* single layer / double layer terms present */
  PetscBool  par;            /* enough work for OpenMP threads (see FMM_OMP_MIN_POINTS) */
  /* indexing layout: neighbour source indices (global order) per leaf */
  PetscInt  *nbr, *nbroff;
  PetscReal *gq, *gdx, *gdy; /* [N] strengths in global order */
  /* repetition layout: chunk of per-target records */
  PetscReal  *rec;           /* one chunk of records */
  PetscInt64 *recoff;        /* [nleaves] offset of each leaf's records in its chunk */
  PetscInt   *nsrc;          /* [nleaves] neighbour sources of each leaf */
  PetscInt   *chunk, nchunk; /* [nchunk+1] first leaf of each chunk */
} FMM_CPU;

static PetscErrorCode FMMCPUReset(FMMContext *ctx)
{
  FMM_CPU *c = (FMM_CPU *)ctx->data;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  PetscCall(PetscFree3(c->binom, c->m2l, c->inv));
  PetscCall(PetscFree2(c->mpole, c->local));
  PetscCall(PetscFree4(c->q, c->dx, c->dy, c->pot));
  PetscCall(PetscFree2(c->nbr, c->nbroff));
  PetscCall(PetscFree3(c->gq, c->gdx, c->gdy));
  PetscCall(PetscFree(c->rec));
  PetscCall(PetscFree3(c->recoff, c->nsrc, c->chunk));
  PetscCall(PetscFree(ctx->data));
  PetscFunctionReturn(0);
}

static inline PetscInt RecordStride(const FMM_CPU *c)
{
  return 2 + (c->hasq ? 1 : 0) + (c->hasd ? 2 : 0);
}

static PetscErrorCode FMMCPUSetup(FMMContext *ctx)
{
  const FMMParams   *par = ctx->par;
  const FMMPlan     *P   = &ctx->plan;
  const FMMHostPlan *H   = ctx->host;
  FMM_CPU           *c;

  PetscFunctionBegin;
  PetscCheck(H, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CPU: no plan in host memory");
  PetscCall(FMMPlanWalks(ctx)); /* before the layouts read the near lists */
  PetscCall(FMMCPUReset(ctx));
  PetscCall(PetscNew(&c));
  ctx->data = c;
  c->p      = par->p;
  c->ne     = 2 * (par->p + 1);
  c->hasq   = par->beta != 0.0 ? PETSC_TRUE : PETSC_FALSE;
  c->hasd   = (par->alpha != 0.0 && ctx->nrm) ? PETSC_TRUE : PETSC_FALSE;
  c->par    = (P->N + P->M >= FMM_OMP_MIN_POINTS) ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscCalloc3((2 * c->p + 1) * (2 * c->p + 1), &c->binom, c->p * c->p, &c->m2l, c->p + 1, &c->inv));
  FMMTables((int)c->p, c->binom, c->m2l);
  FMMInverses((int)c->p, c->inv);
  PetscCall(PetscMalloc2(P->nboxes * c->ne, &c->mpole, P->nboxes * c->ne, &c->local));
  PetscCall(PetscMalloc4(P->N, &c->q, P->N, &c->dx, P->N, &c->dy, P->M, &c->pot));
  if (par->layout == MATFMM_LAYOUT_INDEXING) {
    PetscInt k = 0;
    PetscCall(PetscMalloc2(P->nearsrc, &c->nbr, P->nleaves + 1, &c->nbroff));
    PetscCall(PetscMalloc3(P->N, &c->gq, P->N, &c->gdx, P->N, &c->gdy));
    for (PetscInt b = 0; b < P->nleaves; b++) {
      c->nbroff[b] = k;
      for (PetscInt j = H->nearoff[b]; j < H->nearoff[b + 1]; j++)
        for (PetscInt i = H->sleaf[H->near[j]]; i < H->sleaf[H->near[j] + 1]; i++) c->nbr[k++] = H->sperm[i];
    }
    c->nbroff[P->nleaves] = k;
  } else if (par->layout == MATFMM_LAYOUT_REPETITION) {
    /* leaf-aligned chunks of records within the budget (one chunk when all fit);
       one leaf's records must fit alone */
    PetscReal  budget = par->repetition_mb * 1048576.0 / sizeof(PetscReal), need = 0;
    PetscInt   stride = RecordStride(c);
    PetscInt64 used = 0, maxused = 1;
    PetscCall(PetscMalloc3(P->nleaves, &c->recoff, P->nleaves, &c->nsrc, P->nleaves + 1, &c->chunk));
    for (PetscInt b = 0; b < P->nleaves; b++) {
      c->nsrc[b] = FMMNearSources(H, b);
      need       = PetscMax(need, (PetscReal)(H->tleaf[b + 1] - H->tleaf[b]) * (2 + stride * (PetscReal)c->nsrc[b]));
    }
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &need, 1, MPIU_REAL, MPIU_MAX, ctx->comm));
    PetscCall(FMMRepetitionBudget(ctx, need));
    c->chunk[0] = 0;
    c->nchunk   = 0;
    for (PetscInt b = 0; b < P->nleaves; b++) {
      PetscInt64 len = (PetscInt64)(H->tleaf[b + 1] - H->tleaf[b]) * (2 + stride * c->nsrc[b]);
      if (used + len > (PetscInt64)budget) {
        c->chunk[++c->nchunk] = b;
        used                  = 0;
      }
      c->recoff[b] = used;
      used += len;
      maxused = PetscMax(maxused, used);
    }
    c->chunk[++c->nchunk] = P->nleaves;
    PetscCall(PetscMalloc1(maxused, &c->rec));
  }
  PetscFunctionReturn(0);
}

/* strengths of this product in tree order */
static void Strengths(const FMMPlan *P, const FMMHostPlan *H, FMM_CPU *c, const PetscScalar *sigma)
{
#pragma omp parallel for schedule(static) if (c->par)
  for (PetscInt i = 0; i < P->N; i++) {
    PetscReal s = sigma[H->sperm[i]];
    c->q[i]     = H->cq[i] * s;
    c->dx[i]    = H->cdx[i] * s;
    c->dy[i]    = H->cdy[i] * s;
  }
}

static PetscErrorCode Upward(const FMMPlan *P, const FMMHostPlan *H, FMM_CPU *c)
{
  const PetscInt p = c->p, ne = c->ne, L = P->L, l0 = FMMLevelStart(L);

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_P2M, 0, 0, 0, 0));
#pragma omp parallel for schedule(dynamic, 16) if (c->par)
  for (PetscInt b = 0; b < P->nleaves; b++) {
    PetscReal *A = c->mpole + (l0 + b) * ne, cx = H->cx[l0 + b], cy = H->cy[l0 + b], is = 1.0 / H->scale[l0 + b];
    for (PetscInt k = 0; k < ne; k++) A[k] = 0.0;
    for (PetscInt i = H->sleaf[b]; i < H->sleaf[b + 1]; i++) FMMP2MAdd((int)p, is, (H->sx[i] - cx) * is, (H->sy[i] - cy) * is, c->q[i], c->dx[i], c->dy[i], c->hasd, c->inv, A);
  }
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_P2M, p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_P2M, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_M2M, 0, 0, 0, 0));
  for (PetscInt l = L - 1; l >= 0; l--) {
    PetscInt nb = (PetscInt)1 << (2 * l), pl = FMMLevelStart(l), cl = FMMLevelStart(l + 1), span = (PetscInt)1 << (2 * (L - l - 1));
#pragma omp parallel for schedule(dynamic, 4) if (c->par)
    for (PetscInt b = 0; b < nb; b++) {
      PetscReal work[4 * (FMM_P_MAX + 1)], *B = c->mpole + (pl + b) * ne;
      for (PetscInt k = 0; k < ne; k++) B[k] = 0.0;
      for (PetscInt ch = 4 * b; ch < 4 * b + 4; ch++) {
        if (H->sleaf[(ch + 1) * span] == H->sleaf[ch * span]) continue; /* no sources */
        FMMM2M((int)p, c->binom, (H->cx[cl + ch] - H->cx[pl + b]) / H->scale[pl + b], (H->cy[cl + ch] - H->cy[pl + b]) / H->scale[pl + b], H->scale[cl + ch] / H->scale[pl + b], c->mpole + (cl + ch) * ne, B, work);
      }
    }
  }
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_M2M, p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_M2M, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

static PetscErrorCode Downward(const FMMPlan *P, const FMMHostPlan *H, FMM_CPU *c)
{
  const PetscInt p = c->p, ne = c->ne, L = P->L;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_M2L, 0, 0, 0, 0));
#pragma omp parallel for schedule(dynamic, 16) if (c->par)
  for (PetscInt t = 0; t < P->nboxes; t++) {
    PetscReal work[2 * FMM_P_MAX], *B = c->local + t * ne;
    for (PetscInt k = 0; k < ne; k++) B[k] = 0.0;
    for (PetscInt j = H->faroff[t]; j < H->faroff[t + 1]; j++) {
      PetscInt s = H->far[j];
      FMMM2L((int)p, c->m2l, H->cx[s] - H->cx[t], H->cy[s] - H->cy[t], H->scale[s], H->scale[t], c->mpole + s * ne, B, work);
    }
  }
  if (H->walk) { /* P2L: the walked leaves' sources into the boxes they serve */
    const FMMWalks *W = H->walk;
#pragma omp parallel for schedule(dynamic, 4) if (c->par)
    for (PetscInt j = 0; j < W->nlb; j++) {
      const PetscInt b = W->lb[j];
      for (PetscInt e = W->lsoff[j]; e < W->lsoff[j + 1]; e++) {
        const PetscInt k = W->ls[e];
        FMMP2LAdd((int)p, H->sx[k] - H->cx[b], H->sy[k] - H->cy[b], H->scale[b], c->q[k], c->dx[k], c->dy[k], c->local + b * ne);
      }
    }
  }
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_M2L, p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_M2L, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_L2L, 0, 0, 0, 0));
  for (PetscInt l = 1; l <= L; l++) {
    PetscInt nb = (PetscInt)1 << (2 * l), pl = FMMLevelStart(l - 1), cl = FMMLevelStart(l), span = (PetscInt)1 << (2 * (L - l));
#pragma omp parallel for schedule(dynamic, 16) if (c->par)
    for (PetscInt b = 0; b < nb; b++) {
      PetscReal work[2 * (FMM_P_MAX + 1)];
      PetscInt  par = b / 4;
      if (H->tleaf[(b + 1) * span] == H->tleaf[b * span]) continue; /* no targets: local unused */
      FMML2L((int)p, c->binom, (H->cx[cl + b] - H->cx[pl + par]) / H->scale[pl + par], (H->cy[cl + b] - H->cy[pl + par]) / H->scale[pl + par], H->scale[cl + b] / H->scale[pl + par], c->local + (pl + par) * ne, c->local + (cl + b) * ne, work);
    }
  }
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_L2L, p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_L2L, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_L2P, 0, 0, 0, 0));
  {
    PetscInt l0 = FMMLevelStart(L);
#pragma omp parallel for schedule(dynamic, 16) if (c->par)
    for (PetscInt b = 0; b < P->nleaves; b++) {
      const PetscReal *B = c->local + (l0 + b) * ne, cx = H->cx[l0 + b], cy = H->cy[l0 + b], s = H->scale[l0 + b];
      for (PetscInt i = H->tleaf[b]; i < H->tleaf[b + 1]; i++) c->pot[i] = FMML2P((int)p, B, (H->tx[i] - cx) / s, (H->ty[i] - cy) / s);
    }
  }
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_L2P, p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_L2P, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* the walks' near field (FMMWalks): the walked leaves' targets take M2P and
   P2P, the other leaves' targets the walked sources that reach them directly */
static void P2PWalks(const FMMHostPlan *H, FMM_CPU *c)
{
  const FMMWalks *W = H->walk;
  const int       p = (int)c->p;
  const PetscInt  ne = c->ne;

#pragma omp parallel for schedule(dynamic, 4) if (c->par)
  for (PetscInt w = 0; w < W->nwt; w++) {
    const PetscInt  i  = W->wt[w];
    const PetscReal zx = H->tx[i], zy = H->ty[i];
    PetscReal       acc = 0.0;
    for (PetscInt j = W->wmoff[w]; j < W->wmoff[w + 1]; j++) {
      const PetscInt b = W->wm[j];
      acc += FMMM2P(p, c->mpole + b * ne, zx - H->cx[b], zy - H->cy[b], H->scale[b]);
    }
    for (PetscInt j = W->wpoff[w]; j < W->wpoff[w + 1]; j++)
      for (PetscInt k = H->sleaf[W->wp[j]]; k < H->sleaf[W->wp[j] + 1]; k++) acc += FMMPairKernel(zx - H->sx[k], zy - H->sy[k], c->q[k], c->dx[k], c->dy[k]);
    c->pot[i] += acc;
  }
#pragma omp parallel for schedule(dynamic, 4) if (c->par)
  for (PetscInt j = 0; j < W->nxl; j++) {
    const PetscInt b = W->xl[j];
    for (PetscInt i = H->tleaf[b]; i < H->tleaf[b + 1]; i++) {
      PetscReal acc = 0.0;
      for (PetscInt e = W->xsoff[j]; e < W->xsoff[j + 1]; e++) {
        const PetscInt k = W->xs[e];
        acc += FMMPairKernel(H->tx[i] - H->sx[k], H->ty[i] - H->sy[k], c->q[k], c->dx[k], c->dy[k]);
      }
      c->pot[i] += acc;
    }
  }
}

/* P2P, tiled: each target leaf walks its neighbour leaves as contiguous blocks */
static void P2PTiled(const FMMPlan *P, const FMMHostPlan *H, FMM_CPU *c)
{
#pragma omp parallel for schedule(dynamic, 8) if (c->par)
  for (PetscInt b = 0; b < P->nleaves; b++) {
    for (PetscInt i = H->tleaf[b]; i < H->tleaf[b + 1]; i++) {
      PetscReal zx = H->tx[i], zy = H->ty[i], acc = 0.0;
      for (PetscInt j = H->nearoff[b]; j < H->nearoff[b + 1]; j++) {
        PetscInt s0 = H->sleaf[H->near[j]], s1 = H->sleaf[H->near[j] + 1];
        /* omp simd: vector log (libmvec); the sum order is still fixed per build */
        if (!c->hasd) {
#pragma omp simd reduction(+ : acc)
          for (PetscInt k = s0; k < s1; k++) acc += FMMPairKernel(zx - H->sx[k], zy - H->sy[k], c->q[k], 0.0, 0.0);
        } else if (!c->hasq) {
#pragma omp simd reduction(+ : acc)
          for (PetscInt k = s0; k < s1; k++) {
            PetscReal rx = zx - H->sx[k], ry = zy - H->sy[k], r2 = rx * rx + ry * ry;
            acc += r2 == 0.0 ? 0.0 : (c->dx[k] * rx + c->dy[k] * ry) / r2;
          }
        } else {
#pragma omp simd reduction(+ : acc)
          for (PetscInt k = s0; k < s1; k++) acc += FMMPairKernel(zx - H->sx[k], zy - H->sy[k], c->q[k], c->dx[k], c->dy[k]);
        }
      }
      c->pot[i] += acc;
    }
  }
}

/* P2P, indexing (the data-replication study's compact lists): per leaf the compact list of the
   global indices of all neighbour sources; sources read through it from the
   arrays in global order */
static void P2PIndexing(const FMMContext *ctx, FMM_CPU *c, const PetscScalar *sigma)
{
  const FMMPlan     *P = &ctx->plan;
  const FMMHostPlan *H = ctx->host;
  const PetscReal   *g = ctx->src;
#pragma omp parallel for schedule(static) if (c->par)
  for (PetscInt i = 0; i < P->N; i++) {
    PetscInt  t = H->sperm[i];
    PetscReal s = sigma[t];
    c->gq[t]    = H->cq[i] * s;
    c->gdx[t]   = H->cdx[i] * s;
    c->gdy[t]   = H->cdy[i] * s;
  }
#pragma omp parallel for schedule(dynamic, 8) if (c->par)
  for (PetscInt b = 0; b < P->nleaves; b++) {
    for (PetscInt i = H->tleaf[b]; i < H->tleaf[b + 1]; i++) {
      PetscReal zx = H->tx[i], zy = H->ty[i], acc = 0.0;
      for (PetscInt k = c->nbroff[b]; k < c->nbroff[b + 1]; k++) {
        PetscInt j = c->nbr[k];
        acc += FMMPairKernel(zx - g[2 * j], zy - g[2 * j + 1], c->gq[j], c->gdx[j], c->gdy[j]);
      }
      c->pot[i] += acc;
    }
  }
}

/* P2P, repetition (the data-replication study's per-target copies): for every target a contiguous
   record [x, y, then per neighbour source x, y, (q), (dx, dy)], built for
   leaf-aligned chunks that fit the -mat_fmm_repetition_mb budget */
static void P2PRepetition(const FMMPlan *P, const FMMHostPlan *H, FMM_CPU *c)
{
  const PetscInt stride = RecordStride(c), hq = c->hasq, hd = c->hasd;

  for (PetscInt ch = 0; ch < c->nchunk; ch++) {
    const PetscInt b0 = c->chunk[ch], b1 = c->chunk[ch + 1];
    /* build the records */
#pragma omp parallel for schedule(dynamic, 8) if (c->par)
    for (PetscInt b = b0; b < b1; b++) {
      PetscReal *r = c->rec + c->recoff[b];
      for (PetscInt i = H->tleaf[b]; i < H->tleaf[b + 1]; i++) {
        *r++ = H->tx[i];
        *r++ = H->ty[i];
        for (PetscInt j = H->nearoff[b]; j < H->nearoff[b + 1]; j++)
          for (PetscInt k = H->sleaf[H->near[j]]; k < H->sleaf[H->near[j] + 1]; k++) {
            *r++ = H->sx[k];
            *r++ = H->sy[k];
            if (hq) *r++ = c->q[k];
            if (hd) {
              *r++ = c->dx[k];
              *r++ = c->dy[k];
            }
          }
      }
    }
    /* evaluate: one contiguous stretch per target */
#pragma omp parallel for schedule(dynamic, 8) if (c->par)
    for (PetscInt b = b0; b < b1; b++) {
      PetscInt ns = c->nsrc[b];
      for (PetscInt i = H->tleaf[b]; i < H->tleaf[b + 1]; i++) {
        const PetscReal *r  = c->rec + c->recoff[b] + (PetscInt64)(i - H->tleaf[b]) * (2 + stride * ns);
        PetscReal        zx = r[0], zy = r[1], acc = 0.0;
        r += 2;
        for (PetscInt k = 0; k < ns; k++, r += stride) acc += FMMPairKernel(zx - r[0], zy - r[1], hq ? r[2] : 0.0, hd ? r[2 + hq] : 0.0, hd ? r[3 + hq] : 0.0);
        c->pot[i] += acc;
      }
    }
  }
}

static PetscErrorCode FMMCPUMult(FMMContext *ctx, const PetscScalar *sigma, PetscScalar *y)
{
  const FMMPlan     *P = &ctx->plan;
  const FMMHostPlan *H = ctx->host;
  FMM_CPU           *c = (FMM_CPU *)ctx->data;
  PetscScalar       *in = NULL, *out = y;

  PetscFunctionBegin;
  if (ctx->split) { /* the distributed tree's plan: its densities and potentials in one array each */
    PetscCall(PetscMalloc2(ctx->nin + ctx->nin2, &in, ctx->nout + ctx->nout2, &out));
    PetscCall(PetscArraycpy(in, sigma, ctx->nin));
    PetscCall(PetscArraycpy(in + ctx->nin, ctx->xin, ctx->nin2));
    PetscCall(PetscArraycpy(out, y, ctx->nout)); /* rows other ranks compute keep what they held */
    sigma = in;
  }
  Strengths(P, H, c, sigma);
  PetscCall(Upward(P, H, c));
  if (ctx->exchange) { /* the distributed tree's plan (FMMDistHostPlan()): rows out, rows in */
    const PetscInt ne = c->ne;
    PetscReal     *rows;
    PetscCall(PetscMalloc1((size_t)(ctx->nxexp + ctx->nximp) * ne, &rows));
    for (PetscInt r = 0; r < ctx->nxexp; r++) PetscCall(PetscArraycpy(rows + (size_t)r * ne, c->mpole + (size_t)ctx->xexp[r] * ne, ne));
    PetscCall((*ctx->exchange)(ctx->xctx, rows, rows + (size_t)ctx->nxexp * ne));
    for (PetscInt r = 0; r < ctx->nximp; r++) PetscCall(PetscArraycpy(c->mpole + (size_t)ctx->ximp[r] * ne, rows + (size_t)(ctx->nxexp + r) * ne, ne));
    PetscCall(PetscFree(rows));
  }
  PetscCall(Downward(P, H, c));
  PetscCall(PetscLogEventBegin(MATFMM_P2P, 0, 0, 0, 0));
  switch (ctx->par->layout) {
  case MATFMM_LAYOUT_TILED:
    P2PTiled(P, H, c);
    break;
  case MATFMM_LAYOUT_INDEXING:
    P2PIndexing(ctx, c, sigma);
    break;
  case MATFMM_LAYOUT_REPETITION:
    P2PRepetition(P, H, c);
    break;
  }
  if (H->walk) P2PWalks(H, c);
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_P2P, c->p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_P2P, 0, 0, 0, 0));
  for (PetscInt i = 0; i < P->M; i++)
    if (H->tperm[i] >= 0) out[H->tperm[i]] = c->pot[i]; /* -1: a halo target (FMMDistHostPlan()) */
  if (ctx->split) {
    PetscCall(PetscArraycpy(y, out, ctx->nout));
    PetscCall(PetscArraycpy(ctx->yout, out + ctx->nout, ctx->nout2));
    PetscCall(PetscFree2(in, out));
  }
  PetscFunctionReturn(0);
}

/* exact O(N M) sum of the same operator (the accuracy reference) */
static PetscErrorCode FMMCPUDirect(FMMContext *ctx, const PetscScalar *sigma, PetscScalar *y)
{
  const FMMPlan     *P = &ctx->plan;
  const FMMHostPlan *H = ctx->host;
  FMM_CPU           *c = (FMM_CPU *)ctx->data;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_Direct, 0, 0, 0, 0));
  Strengths(P, H, c, sigma);
#pragma omp parallel for schedule(static) if ((PetscLogDouble)P->N * P->M > 1e6)
  for (PetscInt i = 0; i < P->M; i++) {
    PetscReal zx = H->tx[i], zy = H->ty[i], acc = 0.0;
    for (PetscInt k = 0; k < P->N; k++) acc += FMMPairKernel(zx - H->sx[k], zy - H->sy[k], c->q[k], c->dx[k], c->dy[k]);
    y[H->tperm[i]] = acc;
  }
  PetscCall(PetscLogFlops(FMMFlops(FMM_PHASE_DIRECT, c->p, P)));
  PetscCall(PetscLogEventEnd(MATFMM_Direct, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* the CPU backend: the plan built on the host (src/fmm/plan.c), no options, no device memory */
struct _FMMBackendOps FMMBackendCPU = {
  .name   = "cpu",
  .device = MATFMM_DEVICE_CPU,
  .ct     = 32,
  .setup  = FMMCPUSetup,
  .mult   = FMMCPUMult,
  .direct = FMMCPUDirect,
  .reset  = FMMCPUReset,
};
