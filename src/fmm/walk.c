/*
  The walks of spread leaves next to dense ones (FMMWalks, fmmimpl.h).

  With a fixed depth, a leaf of points spread over a box of radius r that
  lies within about r/theta of a dense cluster has the whole cluster in its
  near field, and each of the cluster's leaves has it in theirs: a few such
  leaves carried half of the near field of 10^6 points of a Gaussian blob
  with 1% outliers (docs/design.md, "Clustered points").  For those leaves
  the adaptive FMM's W and X lists (Carrier, Greengard & Rokhlin, SIAM J.
  Sci. Stat. Comput. 9 (1988), Sec. 3) are built point by point: a point is a
  box of radius 0, so the theta-criterion separates it from a small box of
  the cluster long before it separates its leaf.
*/
#include "fmmimpl.h"

/* a leaf is walked when its near field holds more than this many times the
   median leaf's sources (and more than FMM_WALK_MIN of them) */
#define FMM_WALK_RATIO 32
#define FMM_WALK_MIN   4096

/* marks of the boxes over a set S of leaves (in[] per leaf): any[c], some leaf
   below c that counts is in S; full[c], every leaf below c that counts is in
   S (a leaf counts when has[] says so) */
static void Marks(const FMMPlan *P, const char *has, const char *in, char *any, char *full)
{
  const PetscInt L = P->L, l0 = FMMLevelStart(L);
  for (PetscInt b = 0; b < P->nleaves; b++) {
    any[l0 + b]  = (char)(has[b] && in[b]);
    full[l0 + b] = (char)(!has[b] || in[b]);
  }
  for (PetscInt l = L - 1; l >= 0; l--) {
    const PetscInt pl = FMMLevelStart(l), cl = FMMLevelStart(l + 1);
    for (PetscInt b = 0; b < ((PetscInt)1 << (2 * l)); b++) {
      const PetscInt c = cl + 4 * b;
      any[pl + b]      = (char)(any[c] || any[c + 1] || any[c + 2] || any[c + 3]);
      full[pl + b]     = (char)(full[c] && full[c + 1] && full[c + 2] && full[c + 3]);
    }
  }
}

/* the walk of one point (x, y) over the boxes marked any: a box that is
   full and separated from the point (a box of radius 0) goes to far[], a
   leaf that is not to near[] (leaf numbers), else its children are walked */
static PetscErrorCode Walk(const FMMPlan *P, const FMMHostPlan *H, PetscReal theta, PetscReal x, PetscReal y, const char *any, const char *full, PetscInt *stack, IntList *far, IntList *near)
{
  const PetscInt L = P->L, l0 = FMMLevelStart(L);
  PetscInt       top = 0;

  PetscFunctionBegin;
  if (any[0]) stack[top++] = 0;
  while (top) {
    const PetscInt c = stack[--top];
    if (full[c] && FMMSeparated(0.0, H->scale[c], PetscSqrtReal(PetscSqr(x - H->cx[c]) + PetscSqr(y - H->cy[c])), theta)) PetscCall(IntListPush(far, c));
    else if (c >= l0) PetscCall(IntListPush(near, c - l0));
    else
      for (PetscInt k = 3; k >= 0; k--) { /* children 4b..4b+3 of box b = c - start of its level: global 4c+1.. */
        const PetscInt ch = 4 * c + 1 + k;
        if (any[ch]) stack[top++] = ch;
      }
  }
  PetscFunctionReturn(0);
}

/* the pairs (key, value) of l (2n entries, keys below nk, values ascending
   within a key as pushed) as the keys that occur and the values of each:
   a counting sort (stable) */
static PetscErrorCode Group(IntList *l, PetscInt nk, PetscInt *nkey, PetscInt **key, PetscInt **off, PetscInt **val)
{
  const PetscInt n = l->n / 2;
  PetscInt      *cnt, k = 0;

  PetscFunctionBegin;
  PetscCall(PetscCalloc1(nk + 1, &cnt));
  for (PetscInt j = 0; j < n; j++) cnt[l->v[2 * j] + 1]++;
  for (PetscInt b = 0; b < nk; b++) {
    if (cnt[b + 1]) k++;
    cnt[b + 1] += cnt[b];
  }
  PetscCall(PetscMalloc1(k + 1, key));
  PetscCall(PetscMalloc1(k + 1, off));
  PetscCall(PetscMalloc1(n + 1, val));
  k = 0;
  for (PetscInt b = 0; b < nk; b++)
    if (cnt[b + 1] > cnt[b]) {
      (*key)[k]   = b;
      (*off)[k++] = cnt[b];
    }
  (*off)[k] = n;
  *nkey     = k;
  for (PetscInt j = 0; j < n; j++) (*val)[cnt[l->v[2 * j]]++] = l->v[2 * j + 1];
  PetscCall(PetscFree(cnt));
  PetscFunctionReturn(0);
}

/* the k-th smallest of a[0..n) (reordered), by quickselect */
static PetscInt Select(PetscInt n, PetscInt *a, PetscInt k)
{
  PetscInt lo = 0, hi = n - 1;
  while (lo < hi) {
    const PetscInt piv = a[lo + (hi - lo) / 2];
    PetscInt       i = lo, j = hi;
    while (i <= j) {
      while (a[i] < piv) i++;
      while (a[j] > piv) j--;
      if (i <= j) {
        const PetscInt t = a[i];
        a[i++]           = a[j];
        a[j--]           = t;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else break;
  }
  return a[k];
}

/* whether the walks apply: the FMM on one rank, targets = sources (the near
   lists are then symmetric and every leaf's targets are its sources) */
PetscBool FMMWalksApply(FMMContext *ctx)
{
  PetscMPIInt size;
  if (MPI_Comm_size(ctx->comm, &size)) return PETSC_FALSE;
  return (PetscBool)(size == 1 && ctx->same && !ctx->split && !ctx->exchange && ctx->par->method == MATFMM_METHOD_FMM && ctx->plan.L >= 2);
}

/* the leaves to walk, from ns[b], the sources of each leaf's near field:
   those over FMM_WALK_RATIO times the median of the leaves with targets (and
   over FMM_WALK_MIN); returns their count, *thr the threshold */
PetscInt FMMWalksCount(PetscInt nl, const PetscInt *tleaf, const PetscInt *ns, PetscInt *thr)
{
  PetscInt *a, m = 0, nbig = 0;
  if (PetscMalloc1(nl + 1, &a)) return 0;
  for (PetscInt b = 0; b < nl; b++)
    if (tleaf[b + 1] > tleaf[b]) a[m++] = ns[b];
  *thr = PetscMax(FMM_WALK_RATIO * (m ? PetscMax(Select(m, a, m / 2), 1) : 1), FMM_WALK_MIN);
  for (PetscInt b = 0; b < nl; b++) nbig += ns[b] > *thr;
  (void)PetscFree(a);
  return nbig;
}

/*
  FMMWalksBuild - finds the leaves to walk and builds their walks (FMMWalks,
  H->walk), taking them out of H's near lists; P's walk counts follow (its
  near-field statistics are the caller's).  Where no leaf qualifies nothing
  changes.  Callers check FMMWalksApply().  (cuda/fmm/tree/walks.cuh builds
  the same lists on the GPU.)
*/
PetscErrorCode FMMWalksBuild(FMMPlan *P, FMMHostPlan *H, PetscReal theta, PetscObject obj)
{
  FMMWalks  *W;
  PetscInt   nl = P->nleaves, nb = P->nboxes, *ns, thr, nbig, *stack;
  char      *big, *in, *inx, *hs, *ht, *any, *full;
  IntList    wt = {0}, wmoff = {0}, wm = {0}, wpoff = {0}, wp = {0}, lp = {0}, xp = {0}, far = {0}, near = {0};
  PetscCount pairs = 0;

  PetscFunctionBegin;
  PetscCall(FMMWalksDestroy(&H->walk));
  PetscCall(PetscMalloc1(nl, &ns));
  for (PetscInt b = 0; b < nl; b++) ns[b] = FMMNearSources(H, b);
  nbig = FMMWalksCount(nl, H->tleaf, ns, &thr);
  if (!nbig) {
    PetscCall(PetscFree(ns));
    PetscFunctionReturn(0);
  }
  PetscCall(PetscCalloc6(nl, &big, 2 * nl, &in, nl, &hs, nl, &ht, nb, &any, nb, &full));
  inx = in + nl;
  for (PetscInt b = 0; b < nl; b++) {
    big[b] = (char)(ns[b] > thr);
    hs[b]  = (char)(H->sleaf[b + 1] > H->sleaf[b]);
    ht[b]  = (char)(H->tleaf[b + 1] > H->tleaf[b]);
  }
  PetscCall(PetscMalloc1(3 * P->L + 4, &stack));
  for (PetscInt B = 0; B < nl; B++) {
    if (!big[B]) continue;
    for (PetscInt j = H->nearoff[B]; j < H->nearoff[B + 1]; j++) {
      in[H->near[j]]  = 1;
      inx[H->near[j]] = (char)!big[H->near[j]]; /* a walked leaf's targets take every source of its near field in its own walk */
    }
    /* its targets: every source of its near field, through the multipoles of whole boxes where they are far enough */
    Marks(P, hs, in, any, full);
    for (PetscInt i = H->tleaf[B]; i < H->tleaf[B + 1]; i++) {
      PetscCall(IntListPush(&wt, i));
      PetscCall(IntListPush(&wmoff, wm.n));
      PetscCall(IntListPush(&wpoff, wp.n));
      PetscCall(Walk(P, H, theta, H->tx[i], H->ty[i], any, full, stack, &wm, &wp));
    }
    /* its sources: every target of its near field but those of walked leaves, through the local expansions of
       boxes whose targets all lie there (a local expansion reaches every target below its box) */
    Marks(P, ht, inx, any, full);
    for (PetscInt k = H->sleaf[B]; k < H->sleaf[B + 1]; k++) {
      far.n = near.n = 0;
      PetscCall(Walk(P, H, theta, H->sx[k], H->sy[k], any, full, stack, &far, &near));
      for (PetscInt j = 0; j < far.n; j++) {
        PetscCall(IntListPush(&lp, far.v[j]));
        PetscCall(IntListPush(&lp, k));
      }
      for (PetscInt j = 0; j < near.n; j++) {
        PetscCall(IntListPush(&xp, near.v[j]));
        PetscCall(IntListPush(&xp, k));
        pairs += H->tleaf[near.v[j] + 1] - H->tleaf[near.v[j]];
      }
    }
    for (PetscInt j = H->nearoff[B]; j < H->nearoff[B + 1]; j++) in[H->near[j]] = inx[H->near[j]] = 0;
  }
  PetscCall(PetscFree(far.v));
  PetscCall(PetscFree(near.v));
  PetscCall(IntListPush(&wmoff, wm.n));
  PetscCall(IntListPush(&wpoff, wp.n));
  for (PetscInt j = 0; j < wp.n; j++) pairs += H->sleaf[wp.v[j] + 1] - H->sleaf[wp.v[j]];

  PetscCall(PetscNew(&W));
  W->nbig  = nbig;
  W->nwt   = wt.n;
  W->wt    = wt.v;
  W->wmoff = wmoff.v;
  W->wm    = wm.v;
  W->wpoff = wpoff.v;
  W->wp    = wp.v;
  PetscCall(Group(&lp, nb, &W->nlb, &W->lb, &W->lsoff, &W->ls));
  PetscCall(Group(&xp, nl, &W->nxl, &W->xl, &W->xsoff, &W->xs));
  PetscCall(PetscFree(lp.v));
  PetscCall(PetscFree(xp.v));
  W->npairs = pairs;
  H->walk   = W;

  /* the near lists without the walked leaves, either way */
  {
    PetscInt k = 0, j0 = 0;
    for (PetscInt b = 0; b < nl; b++) {
      const PetscInt j1 = H->nearoff[b + 1];
      H->nearoff[b]     = k;
      if (!big[b])
        for (PetscInt j = j0; j < j1; j++)
          if (!big[H->near[j]]) H->near[k++] = H->near[j];
      j0 = j1;
    }
    H->nearoff[nl] = k;
  }
  P->wleaves  = nbig;
  P->wtargets = W->nwt;
  P->wm2p     = W->wmoff[W->nwt];
  P->wp2l     = W->nlb;
  P->wpairs   = W->npairs;
  PetscCall(PetscInfo(obj, "walks: %" PetscInt_FMT " leaves (near fields of more than %" PetscInt_FMT " sources): %" PetscInt_FMT " targets, %" PetscInt_FMT " M2P; %" PetscInt_FMT " boxes take P2L; %" PetscCount_FMT " point pairs\n", nbig, thr, W->nwt, P->wm2p, W->nlb, W->npairs));
  PetscCall(PetscFree(stack));
  PetscCall(PetscFree(ns));
  PetscCall(PetscFree6(big, in, hs, ht, any, full));
  PetscFunctionReturn(0);
}

/* FMMPlanWalks - the walks of the host plan (the CPU backend) */
PetscErrorCode FMMPlanWalks(FMMContext *ctx)
{
  PetscFunctionBegin;
  if (FMMWalksApply(ctx) && !ctx->host->walk) {
    PetscCall(FMMWalksBuild(&ctx->plan, ctx->host, ctx->par->theta, ctx->obj));
    if (ctx->host->walk) FMMPlanStatistics(&ctx->plan, ctx->host);
  }
  PetscFunctionReturn(0);
}

PetscErrorCode FMMWalksDestroy(FMMWalks **w)
{
  FMMWalks *W = *w;

  PetscFunctionBegin;
  if (!W) PetscFunctionReturn(0);
  PetscCall(PetscFree(W->wt));
  PetscCall(PetscFree(W->wmoff));
  PetscCall(PetscFree(W->wm));
  PetscCall(PetscFree(W->wpoff));
  PetscCall(PetscFree(W->wp));
  PetscCall(PetscFree(W->lb));
  PetscCall(PetscFree(W->lsoff));
  PetscCall(PetscFree(W->ls));
  PetscCall(PetscFree(W->xl));
  PetscCall(PetscFree(W->xsoff));
  PetscCall(PetscFree(W->xs));
  PetscCall(PetscFree(*w));
  PetscFunctionReturn(0);
}
