/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the distributed
  tree's interaction lists of the levels below l0 of a rank's boxes
  (FMMCUDADistLists), the lists src/fmm/dist.c's pass makes on the host, with
  the same entries in the same order.  As lists.cuh does for one GPU, a level's
  candidates (the 4 children of each strong entry of the parent, for each of
  its 4 children) are enumerated flat, one thread each, scanned and written;
  a candidate is the rank's own box (its slot's circle and the own leaves'
  counts) or a remote one fetched for the level (FMMDistLists fetch: a
  collective of the host, so each level's remote strong entries come back to
  the host before the next level).
*/
#pragma once

/* strong, far, and remote strong entries before a candidate (a level's scan) */
typedef struct {
  PetscInt s, f, r;
} DistCount;

struct DistCountSum {
  __device__ __forceinline__ DistCount operator()(const DistCount &a, const DistCount &b) const { return DistCount{a.s + b.s, a.f + b.f, a.r + b.r}; }
};

/* the candidates of level l: 16 for each of the nc / 16 strong entries of level l - 1 (stroff over the
   rank's boxes of level l - 1, str their global numbers, owner the box of each entry); the rank's nbt boxes
   of level l, global numbers from obase on, slots from slot0 on, span leaves each; the fetched remote
   boxes rid (ascending) with their FMM_NGEO reals rgeo */
struct DistCand {
  PetscInt        nc, nbt, span, obase, slot0, nrid;
  double          theta;
  const PetscInt *rid, *sleaf, *tleaf, *stroff, *str, *owner;
  const double   *rgeo, *cx, *cy, *scale;
  int            *missing;

  /* candidate i: 0 none, 1 strong, 2 far; its target t (the rank's box of level l), source s (global),
     and the source's slot (own) or its place among the fetched (loc; -1 where own) */
  __device__ __forceinline__ int Classify(PetscInt i, PetscInt *t, PetscInt *s, PetscInt *slot, PetscInt *loc) const
  {
    double   sx, sy, ss;
    PetscInt nsrc;
    Candidate(i, stroff, str, owner, t, s);
    *loc = -1;
    if (tleaf[(*t + 1) * span] == tleaf[*t * span]) return 0; /* none of this rank's targets */
    const PetscInt sb = *s - obase;
    if (sb >= 0 && sb < nbt) {
      *slot = slot0 + sb;
      nsrc  = sleaf[(sb + 1) * span] - sleaf[sb * span];
      sx    = cx[*slot];
      sy    = cy[*slot];
      ss    = scale[*slot];
    } else {
      PetscInt lo = 0, hi = nrid;
      while (lo < hi) {
        const PetscInt mid = (lo + hi) / 2;
        if (rid[mid] < *s) lo = mid + 1;
        else hi = mid;
      }
      if (lo >= nrid || rid[lo] != *s) {
        *missing = 1;
        return 0;
      }
      *loc = lo;
      sx   = rgeo[FMM_NGEO * lo];
      sy   = rgeo[FMM_NGEO * lo + 1];
      ss   = rgeo[FMM_NGEO * lo + 2];
      nsrc = (PetscInt)rgeo[FMM_NGEO * lo + 3];
    }
    if (!nsrc) return 0;
    const PetscInt ts = slot0 + *t;
    const double   dx = cx[ts] - sx, dy = cy[ts] - sy, d = sqrt(dx * dx + dy * dy);
    const double   rt = scale[ts], R = fmax(rt, ss), r = fmin(rt, ss);
    return (R + theta * r <= theta * d) ? 2 : 1; /* the theta-criterion (FMMSeparated()) */
  }
  __device__ DistCount operator()(PetscInt i) const
  {
    PetscInt t, s, slot, loc;
    if (i >= nc) return DistCount{0, 0, 0};
    const int k = Classify(i, &t, &s, &slot, &loc);
    return DistCount{k == 1 ? 1 : 0, k == 2 ? 1 : 0, k == 1 && loc >= 0 ? 1 : 0};
  }
};

/* a level's entries after its scan sc: the strong lists (str, owner; rem: the remote entries), the far
   entries (the source's slot, or -1 - (roff + its place among the fetched), which it marks used), and
   the offsets of both over the rank's nbt boxes (stroff, faroff, nbt + 1) */
__global__ void DistListWriteKernel(DistCand k, const DistCount *sc, PetscInt roff, PetscInt *str, PetscInt *owner, PetscInt *rem, PetscInt *far, char *used, PetscInt *stroff, PetscInt *faroff)
{
  FMMWaitPrior();
  for (PetscInt i = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x; i < k.nc || i <= k.nbt; i += (PetscInt)gridDim.x * blockDim.x) {
    if (i < k.nc) {
      const DistCount a = sc[i], b = sc[i + 1];
      if (b.s != a.s || b.f != a.f) {
        PetscInt t, s, slot, loc;
        if (k.Classify(i, &t, &s, &slot, &loc) == 1) {
          str[a.s]   = s;
          owner[a.s] = t;
          if (loc >= 0) rem[a.r] = s;
        } else {
          far[a.f] = loc >= 0 ? -1 - (roff + loc) : slot;
          if (loc >= 0) used[loc] = 1;
        }
      }
    }
    if (i <= k.nbt) {
      const PetscInt tp = i / 4, first = i == k.nbt ? k.nc : 16 * k.stroff[tp] + 4 * (i % 4) * (k.stroff[tp + 1] - k.stroff[tp]);
      stroff[i] = sc[first].s;
      faroff[i] = sc[first].f;
    }
  }
}

/* the far entries' remote boxes (-1 - their place among the fetched) to their slots (hidx) */
__global__ void DistHaloNumbersKernel(PetscInt n, const PetscInt *hidx, PetscInt *far)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n && far[k] < 0) far[k] = hidx[-1 - far[k]];
}

/* the box of each of the n entries of strong lists with offsets off over nb boxes */
__global__ void DistOwnerKernel(PetscInt nb, const PetscInt *off, PetscInt *owner)
{
  FMMWaitPrior();
  const PetscInt b = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < nb)
    for (PetscInt j = off[b]; j < off[b + 1]; j++) owner[j] = b;
}

/*
  FMMCUDADistLists - the lists of levels l0 + 1 .. L of this rank's boxes
  (FMMDistLists: inputs on the host, but for the slots' circles dcx, the
  cx, cy and scale of the nown slots on the GPU; the far entries' counts, the used marks
  and the leaves' strong lists back on the host, as src/fmm/dist.c's pass
  makes them).  Each level: the fetch of the remote boxes its candidates may
  name (the host's collective), their upload, the scan of its candidates, a
  readback of its sizes, the writes, and a readback of its remote strong
  entries (the next level's fetch).  The far lists stay on the GPU: *dfar
  (ntopfar + nfarl entries, the top's first), the fetched boxes numbered as
  the halo's slots, and so do the slots' circles: dslot[0..3) the cx, cy
  and scale of the *nslot slots (the own ones from dcx, then the halo's, as
  fetched).  Collective (the fetches).
*/
PetscErrorCode FMMCUDADistLists(FMM_CUDA *c, FMMDistLists *dl, const double *dcx, PetscInt **dfar, double *dslot[3], PetscInt *nslot)
{
  const PetscInt L = dl->L, l0 = dl->l0, nb0 = dl->nb0, nown = dl->nown, nl = nb0 << (2 * (L - l0));
  Scratch        scr = {NULL, 0, PETSC_FALSE};
  const double  *dcy = dcx + nown, *dsc = dcy + nown;
  PetscInt      *dsleaf, *dtleaf, *stroff, *str, *owner, np, nrem = 0, *par = NULL, *hoff, **lfar, *nlfar;
  int           *dmiss;

  PetscFunctionBegin;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dsleaf, sizeof(PetscInt) * 2 * (nl + 1), "the own leaves' counts"));
  dtleaf = dsleaf + nl + 1;
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&dmiss, sizeof(int), "the lists' check"));
  FMMCallCUDA(cudaMemcpyAsync(dsleaf, dl->sleaf, sizeof(PetscInt) * (nl + 1), cudaMemcpyHostToDevice, c->stream));
  FMMCallCUDA(cudaMemcpyAsync(dtleaf, dl->tleaf, sizeof(PetscInt) * (nl + 1), cudaMemcpyHostToDevice, c->stream));
  FMMCallCUDA(cudaMemsetAsync(dmiss, 0, sizeof(int), c->stream));
  /* level l0's strong lists, from the host, and their remote entries */
  np = dl->stroff[nb0];
  PetscCall(PetscMalloc1(PetscMax(np, 1), &par));
  for (PetscInt j = 0; j < np; j++)
    if (dl->str[j] < dl->B0 || dl->str[j] >= dl->B0 + nb0) par[nrem++] = dl->str[j];
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&stroff, sizeof(PetscInt) * (nb0 + 1), "the strong lists"));
  PetscCall(FMMCUDAMalloc(c->stream, (void **)&str, sizeof(PetscInt) * 2 * PetscMax(np, 1), "the strong lists"));
  owner = str + PetscMax(np, 1);
  FMMCallCUDA(cudaMemcpyAsync(stroff, dl->stroff, sizeof(PetscInt) * (nb0 + 1), cudaMemcpyHostToDevice, c->stream));
  if (np) FMMCallCUDA(cudaMemcpyAsync(str, dl->str, sizeof(PetscInt) * np, cudaMemcpyHostToDevice, c->stream));
  FMMLaunch(DistOwnerKernel, LAUNCH_N(nb0), nb0, stroff, owner);
  FMMCheckLaunch();
  PetscCall(PetscMalloc1(nl + 1, &hoff));
  PetscCall(PetscCalloc2(L + 1, &lfar, L + 1, &nlfar)); /* each level's far entries, kept to the end */
  dl->nfarl = 0;

  for (PetscInt l = l0 + 1; l <= L; l++) {
    const PetscInt nbt = nb0 << (2 * (l - l0)), nc = 16 * np;
    DistCand       k;
    DistCount     *sc, tot;
    PetscInt      *drid, *nstroff, *nstr, *nowner, *rem, *far, *faroff;
    double        *drgeo;
    char          *used;
    int            miss;

    PetscCheck(np <= PETSC_MAX_INT / 16, PETSC_COMM_SELF, PETSC_ERR_SUP, "GPU distributed lists: %" PetscInt_FMT " strong entries at level %" PetscInt_FMT " give more candidates than a 32-bit PetscInt counts", np, l - 1);
    /* the remote boxes of level l its candidates may name */
    PetscCall((*dl->fetch)(dl->fctx, l, nrem, par, &dl->rid[l], &dl->nrid[l], &dl->rgeo[l]));
    dl->roff[l + 1] = dl->roff[l] + dl->nrid[l];
    PetscCall(PetscCalloc1(PetscMax(dl->nrid[l], 1), &dl->used[l]));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&drgeo, sizeof(double) * FMM_NGEO * PetscMax(dl->nrid[l], 1), "the fetched boxes"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&drid, sizeof(PetscInt) * PetscMax(dl->nrid[l], 1) + PetscMax(dl->nrid[l], 1), "the fetched boxes"));
    used = (char *)(drid + PetscMax(dl->nrid[l], 1));
    if (dl->nrid[l]) {
      FMMCallCUDA(cudaMemcpyAsync(drgeo, dl->rgeo[l], sizeof(double) * FMM_NGEO * dl->nrid[l], cudaMemcpyHostToDevice, c->stream));
      FMMCallCUDA(cudaMemcpyAsync(drid, dl->rid[l], sizeof(PetscInt) * dl->nrid[l], cudaMemcpyHostToDevice, c->stream));
      FMMCallCUDA(cudaMemsetAsync(used, 0, dl->nrid[l], c->stream));
    }
    k = DistCand{nc, nbt, (PetscInt)1 << (2 * (L - l)), dl->B0 << (2 * (l - l0)), dl->ntop + nb0 * ((((PetscInt)1 << (2 * (l - l0))) - 1) / 3) - nb0, dl->nrid[l], (double)dl->theta, drid, dsleaf, dtleaf, stroff, str, owner, drgeo, dcx, dcy, dsc, dmiss};
    /* the scan of the candidates, and the level's sizes */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&sc, sizeof(DistCount) * (nc + 2), "the lists' scan"));
    PetscCall(ExclusiveScanBy(c, &scr, thrust::make_transform_iterator(thrust::counting_iterator<PetscInt>(0), k), sc, DistCountSum(), DistCount{0, 0, 0}, nc));
    FMMCallCUDA(cudaMemcpyAsync(sc + nc + 1, dmiss, sizeof(int), cudaMemcpyDeviceToDevice, c->stream));
    {
      DistCount h[2];
      PetscCall(FMMCUDAReadback(c->stream, h, sc + nc, sizeof(h)));
      tot = h[0];
      PetscCall(PetscMemcpy(&miss, &h[1], sizeof(miss)));
    }
    PetscCheck(!miss, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATFMM CUDA: a remote box of level %" PetscInt_FMT " was not fetched", l);
    /* the writes */
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&nstroff, sizeof(PetscInt) * 2 * (nbt + 1), "the strong lists"));
    faroff = nstroff + nbt + 1;
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&nstr, sizeof(PetscInt) * (2 * PetscMax(tot.s, 1) + PetscMax(tot.r, 1)), "the strong lists"));
    nowner = nstr + PetscMax(tot.s, 1);
    rem    = nowner + PetscMax(tot.s, 1);
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&far, sizeof(PetscInt) * PetscMax(tot.f, 1), "the M2L list"));
    lfar[l]  = far;
    nlfar[l] = tot.f;
    FMMLaunch(DistListWriteKernel, PetscMin(FMMCUDABlocks(PetscMax(nc, nbt + 1), BS), 4096u), BS, 0, c->stream, k, sc, dl->roff[l], nstr, nowner, rem, far, used, nstroff, faroff);
    FMMCheckLaunch();
    /* back to the host: the far entries' counts and the used marks; the remote strong entries (the next
       level's fetch); the leaves' strong lists (the near lists).  The far entries stay */
    if (l < L) {
      PetscCall(PetscFree(par));
      PetscCall(PetscMalloc1(PetscMax(tot.r, 1), &par));
      if (tot.r) FMMCallCUDA(cudaMemcpyAsync(par, rem, sizeof(PetscInt) * tot.r, cudaMemcpyDeviceToHost, c->stream));
    }
    if (dl->nrid[l]) FMMCallCUDA(cudaMemcpyAsync(dl->used[l], used, dl->nrid[l], cudaMemcpyDeviceToHost, c->stream));
    PetscCall(FMMCUDAReadbackStaged(c->stream, hoff, faroff, sizeof(PetscInt) * (nbt + 1)));
    if (l == L) {
      PetscCall(PetscMalloc1(nl + 1, &dl->stroffL));
      PetscCall(PetscMalloc1(PetscMax(tot.s, 1), &dl->strL));
      dl->nstrL = tot.s;
      PetscCall(FMMCUDAReadbackStaged(c->stream, dl->stroffL, nstroff, sizeof(PetscInt) * (nl + 1)));
      PetscCall(FMMCUDAReadbackStaged(c->stream, dl->strL, nstr, sizeof(PetscInt) * tot.s));
    }
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    for (PetscInt t = 0; t < nbt; t++) dl->farcnt[k.slot0 + t] = hoff[t + 1] - hoff[t];
    dl->nfarl += tot.f;
    nrem = tot.r;
    /* the next level's input */
    PetscCall(FMMCUDAFree(c->stream, sc));
    PetscCall(FMMCUDAFree(c->stream, drid));
    PetscCall(FMMCUDAFree(c->stream, drgeo));
    PetscCall(FMMCUDAFree(c->stream, stroff));
    PetscCall(FMMCUDAFree(c->stream, str));
    stroff = nstroff;
    str    = nstr;
    owner  = nowner;
    np     = tot.s;
  }
  /* the far lists: the top's, then the levels' in order, the fetched boxes renumbered as the halo's;
     the slots' circles, the halo's after the own ones */
  {
    PetscInt *hidx, *dhidx, nh, off = dl->ntopfar;
    double   *hgeo;
    PetscCall(PetscMalloc1(PetscMax(dl->roff[L + 1], 1), &hidx));
    nh = FMMDistHaloNumbers(L, dl->nrid, dl->roff, dl->used, dl->nown, hidx);
    PetscCall(PetscMalloc1(3 * PetscMax(nh, 1), &hgeo));
    for (PetscInt l = l0 + 1; l <= L; l++)
      for (PetscInt j = 0; j < dl->nrid[l]; j++) {
        const PetscInt h = hidx[dl->roff[l] + j] - dl->nown;
        if (h < 0) continue;
        for (int a = 0; a < 3; a++) hgeo[a * nh + h] = dl->rgeo[l][FMM_NGEO * j + a];
      }
    *nslot = dl->nown + nh;
    for (int a = 0; a < 3; a++) {
      PetscCall(FMMCUDAMalloc(c->stream, (void **)&dslot[a], sizeof(double) * PetscMax(*nslot, 1), "the slots' circles"));
      if (dl->nown) FMMCallCUDA(cudaMemcpyAsync(dslot[a], dcx + a * dl->nown, sizeof(double) * dl->nown, cudaMemcpyDeviceToDevice, c->stream));
      if (nh) FMMCallCUDA(cudaMemcpyAsync(dslot[a] + dl->nown, hgeo + a * nh, sizeof(double) * nh, cudaMemcpyHostToDevice, c->stream));
    }
    PetscCall(FMMCUDAMalloc(c->stream, (void **)dfar, sizeof(PetscInt) * PetscMax(dl->ntopfar + dl->nfarl, 1), "the M2L list"));
    PetscCall(FMMCUDAMalloc(c->stream, (void **)&dhidx, sizeof(PetscInt) * PetscMax(dl->roff[L + 1], 1), "the halo's numbers"));
    if (dl->ntopfar) FMMCallCUDA(cudaMemcpyAsync(*dfar, dl->topfar, sizeof(PetscInt) * dl->ntopfar, cudaMemcpyHostToDevice, c->stream));
    if (dl->roff[L + 1]) FMMCallCUDA(cudaMemcpyAsync(dhidx, hidx, sizeof(PetscInt) * dl->roff[L + 1], cudaMemcpyHostToDevice, c->stream));
    for (PetscInt l = l0 + 1; l <= L; l++) {
      if (nlfar[l]) FMMCallCUDA(cudaMemcpyAsync(*dfar + off, lfar[l], sizeof(PetscInt) * nlfar[l], cudaMemcpyDeviceToDevice, c->stream));
      off += nlfar[l];
      PetscCall(FMMCUDAFree(c->stream, lfar[l]));
    }
    if (dl->nfarl) FMMLaunch(DistHaloNumbersKernel, LAUNCH_N(dl->nfarl), dl->nfarl, dhidx, *dfar + dl->ntopfar);
    FMMCheckLaunch();
    FMMCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(FMMCUDAFree(c->stream, dhidx));
    PetscCall(PetscFree(hidx));
    PetscCall(PetscFree(hgeo));
  }
  PetscCall(FMMCUDAFree(c->stream, stroff));
  PetscCall(FMMCUDAFree(c->stream, str));
  PetscCall(FMMCUDAFree(c->stream, dsleaf));
  PetscCall(FMMCUDAFree(c->stream, dmiss));
  if (scr.tmp) PetscCall(FMMCUDAFree(c->stream, scr.tmp));
  PetscCall(PetscFree(par));
  PetscCall(PetscFree(hoff));
  PetscCall(PetscFree2(lfar, nlfar));
  PetscFunctionReturn(0);
}
