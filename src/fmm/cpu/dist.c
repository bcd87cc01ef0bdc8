/*
  The product of the distributed tree (src/fmm/dist.c) on the CPU: the pass
  of src/fmm/cpu/backend.c on this rank's boxes, with the exchanges between:

    densities to the owners of the sources (sfin), then to the halo (sfhx, sfhd)
    P2M, M2M of this rank's boxes; the multipoles of level l0 summed over the
      ranks (MPI_Allreduce), M2M above l0 on every rank
    the remote multipoles of the far lists (sfmp), while P2P runs
    M2L, L2L, L2P; the potentials back to the caller's rows (sfout)

  Each output is written by one thread in a fixed order, as in backend.c.
*/
#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
  #pragma omp declare simd notinbranch
extern double log(double);
#endif
#include "../fmmimpl.h"
#if defined(PETSC_HAVE_CUDA)
  #include <petscdevice.h>
#endif
#include "../expansions.h"

PetscErrorCode FMMDistResetCPU(FMMDist *D)
{
  PetscFunctionBegin;
  PetscCall(PetscFree3(D->binom, D->m2l, D->inv));
  PetscCall(PetscFree2(D->mpole, D->local));
  PetscCall(PetscFree3(D->q, D->dx, D->dy));
  PetscCall(PetscFree(D->pot));
  PetscFunctionReturn(0);
}

PetscErrorCode FMMDistSetupCPU(FMMDist *D, const FMMParams *par)
{
  const PetscInt nt = D->n + D->nh;

  PetscFunctionBegin;
  PetscCall(FMMDistResetCPU(D));
  D->p    = par->p;
  D->ne   = 2 * (par->p + 1);
  D->hasq = par->beta != 0.0 ? PETSC_TRUE : PETSC_FALSE;
  D->hasd = par->alpha != 0.0 ? PETSC_TRUE : PETSC_FALSE;
  D->par  = (D->n + D->nh + D->m >= FMM_OMP_MIN_POINTS) ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscCalloc3((2 * D->p + 1) * (2 * D->p + 1), &D->binom, D->p * D->p, &D->m2l, D->p + 1, &D->inv));
  FMMTables((int)D->p, D->binom, D->m2l);
  FMMInverses((int)D->p, D->inv);
  PetscCall(PetscCalloc2((size_t)D->nslot * D->ne, &D->mpole, (size_t)D->nown * D->ne, &D->local));
  PetscCall(PetscMalloc3(nt, &D->q, nt, &D->dx, nt, &D->dy));
  PetscCall(PetscMalloc1(D->m, &D->pot));
  PetscCall(FMMDistUnit(D, D->ne));
  PetscFunctionReturn(0);
}

static PetscErrorCode Upward(FMMDist *D, MPI_Comm comm)
{
  const PetscInt p = D->p, ne = D->ne, L = D->L, l0 = D->l0, lb = D->B0 << (2 * (L - l0));

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_P2M, 0, 0, 0, 0));
#pragma omp parallel for schedule(dynamic, 16) if (D->par)
  for (PetscInt b = 0; b < D->nl; b++) {
    const PetscInt s  = FMMDistSlot(D, L, lb + b);
    PetscReal     *A  = D->mpole + (size_t)s * ne, cx = D->cx[s], cy = D->cy[s], is = 1.0 / D->scale[s];
    for (PetscInt k = 0; k < ne; k++) A[k] = 0.0;
    for (PetscInt i = D->sleaf[b]; i < D->sleaf[b + 1]; i++) FMMP2MAdd((int)p, is, (D->sx[i] - cx) * is, (D->sy[i] - cy) * is, D->q[i], D->dx[i], D->dy[i], D->hasd, D->inv, A);
  }
  PetscCall(PetscLogFlops(20.0 * p * D->n));
  PetscCall(PetscLogEventEnd(MATFMM_P2M, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_M2M, 0, 0, 0, 0));
  for (PetscInt l = L - 1; l >= 0; l--) {
    const PetscBool own = l >= l0 ? PETSC_TRUE : PETSC_FALSE;
    const PetscInt  b0 = own ? D->B0 << (2 * (l - l0)) : 0, b1 = own ? D->B1 << (2 * (l - l0)) : ((PetscInt)1 << (2 * l));
    if (l == l0 - 1) { /* the multipoles of level l0, summed over the ranks (only the owner's is not zero) */
      PetscReal *m0 = D->mpole + (size_t)FMMLevelStart(l0) * ne;
      for (PetscInt B = 0; B < ((PetscInt)1 << (2 * l0)); B++)
        if (B < D->B0 || B >= D->B1)
          for (PetscInt k = 0; k < ne; k++) m0[(size_t)B * ne + k] = 0.0;
      PetscCall(PetscLogEventBegin(MATFMM_Exchange, 0, 0, 0, 0));
      PetscCall(MPIU_Allreduce(MPI_IN_PLACE, m0, (PetscMPIInt)(ne << (2 * l0)), MPIU_REAL, MPIU_SUM, comm));
      PetscCall(PetscLogEventEnd(MATFMM_Exchange, 0, 0, 0, 0));
    }
#pragma omp parallel for schedule(dynamic, 4) if (D->par && b1 - b0 > 8)
    for (PetscInt b = b0; b < b1; b++) {
      const PetscInt ps = FMMDistSlot(D, l, b);
      PetscReal      work[4 * (FMM_P_MAX + 1)], *B = D->mpole + (size_t)ps * ne;
      for (PetscInt k = 0; k < ne; k++) B[k] = 0.0;
      for (PetscInt ch = 4 * b; ch < 4 * b + 4; ch++) {
        const PetscInt cs = FMMDistSlot(D, l + 1, ch);
        if (!D->nsb[cs]) continue; /* no sources: its centre is no place to translate from */
        FMMM2M((int)p, D->binom, (D->cx[cs] - D->cx[ps]) / D->scale[ps], (D->cy[cs] - D->cy[ps]) / D->scale[ps], D->scale[cs] / D->scale[ps], D->mpole + (size_t)cs * ne, B, work);
      }
    }
  }
  PetscCall(PetscLogEventEnd(MATFMM_M2M, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* the near field of this rank's targets: its sources and the halo's */
static void P2P(FMMDist *D)
{
#pragma omp parallel for schedule(dynamic, 8) if (D->par)
  for (PetscInt b = 0; b < D->nl; b++) {
    for (PetscInt i = D->tleaf[b]; i < D->tleaf[b + 1]; i++) {
      PetscReal zx = D->tx[i], zy = D->ty[i], acc = 0.0;
      for (PetscInt j = D->nearoff[b]; j < D->nearoff[b + 1]; j++) {
        const PetscInt s0 = D->sleaf[D->near[j]], s1 = D->sleaf[D->near[j] + 1];
        if (!D->hasd) {
#pragma omp simd reduction(+ : acc)
          for (PetscInt k = s0; k < s1; k++) acc += FMMPairKernel(zx - D->sx[k], zy - D->sy[k], D->q[k], 0.0, 0.0);
        } else {
#pragma omp simd reduction(+ : acc)
          for (PetscInt k = s0; k < s1; k++) acc += FMMPairKernel(zx - D->sx[k], zy - D->sy[k], D->q[k], D->dx[k], D->dy[k]);
        }
      }
      D->pot[i] += acc;
    }
  }
}

static PetscErrorCode Downward(FMMDist *D)
{
  const PetscInt p = D->p, ne = D->ne, L = D->L, l0 = D->l0;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_M2L, 0, 0, 0, 0));
#pragma omp parallel for schedule(dynamic, 16) if (D->par)
  for (PetscInt t = 0; t < D->nown; t++) {
    PetscReal work[2 * FMM_P_MAX], *B = D->local + (size_t)t * ne;
    for (PetscInt k = 0; k < ne; k++) B[k] = 0.0;
    if (!D->ntb[t]) continue;
    for (PetscInt j = D->faroff[t]; j < D->faroff[t + 1]; j++) {
      const PetscInt s = D->far[j];
      FMMM2L((int)p, D->m2l, D->cx[s] - D->cx[t], D->cy[s] - D->cy[t], D->scale[s], D->scale[t], D->mpole + (size_t)s * ne, B, work);
    }
  }
  PetscCall(PetscLogFlops((4.0 * p * p + 20.0 * p) * (PetscLogDouble)(D->faroff[D->nown])));
  PetscCall(PetscLogEventEnd(MATFMM_M2L, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_L2L, 0, 0, 0, 0));
  for (PetscInt l = 1; l <= L; l++) {
    const PetscBool own = l >= l0 ? PETSC_TRUE : PETSC_FALSE;
    const PetscInt  b0 = own ? D->B0 << (2 * (l - l0)) : 0, b1 = own ? D->B1 << (2 * (l - l0)) : ((PetscInt)1 << (2 * l));
#pragma omp parallel for schedule(dynamic, 16) if (D->par && b1 - b0 > 8)
    for (PetscInt b = b0; b < b1; b++) {
      const PetscInt cs = FMMDistSlot(D, l, b), ps = FMMDistSlot(D, l - 1, b / 4);
      PetscReal      work[2 * (FMM_P_MAX + 1)];
      if (!D->ntb[cs]) continue; /* no targets: its local expansion is not used */
      FMML2L((int)p, D->binom, (D->cx[cs] - D->cx[ps]) / D->scale[ps], (D->cy[cs] - D->cy[ps]) / D->scale[ps], D->scale[cs] / D->scale[ps], D->local + (size_t)ps * ne, D->local + (size_t)cs * ne, work);
    }
  }
  PetscCall(PetscLogEventEnd(MATFMM_L2L, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_L2P, 0, 0, 0, 0));
  {
    const PetscInt lb = D->B0 << (2 * (L - l0));
#pragma omp parallel for schedule(dynamic, 16) if (D->par)
    for (PetscInt b = 0; b < D->nl; b++) {
      const PetscInt   s = FMMDistSlot(D, L, lb + b);
      const PetscReal *B = D->local + (size_t)s * ne, cx = D->cx[s], cy = D->cy[s], sc = D->scale[s];
      for (PetscInt i = D->tleaf[b]; i < D->tleaf[b + 1]; i++) D->pot[i] += FMML2P((int)p, B, (D->tx[i] - cx) / sc, (D->ty[i] - cy) / sc);
    }
  }
  PetscCall(PetscLogFlops(8.0 * p * D->m));
  PetscCall(PetscLogEventEnd(MATFMM_L2P, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* the densities from the caller's x (this rank's columns) that the tree's part on this rank takes from
   elsewhere: those of other ranks' columns (din[0..nrr)), then the halo's (din[nrr..nrr + nh)); x in the
   device memory mem (a device vector of a PETSc with CUDA), or in host memory (mem NULL); collective */
PetscErrorCode FMMDistDensities(FMMDist *D, const PetscScalar *x, const FMMDeviceMemory *mem)
{
  const PetscMemType xm = mem ? PETSC_MEMTYPE_DEVICE : PETSC_MEMTYPE_HOST, dm = D->iomem ? PETSC_MEMTYPE_DEVICE : PETSC_MEMTYPE_HOST;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_Move, 0, 0, 0, 0));
  PetscCall(PetscSFReduceWithMemTypeBegin(D->sfin, MPIU_SCALAR, xm, x, dm, D->din, MPI_REPLACE));
  PetscCall(PetscSFBcastWithMemTypeBegin(D->sfhx, MPIU_SCALAR, xm, x, dm, D->din, MPI_REPLACE));
  PetscCall(PetscSFReduceEnd(D->sfin, MPIU_SCALAR, x, D->din, MPI_REPLACE));
  PetscCall(PetscSFBcastWithMemTypeBegin(D->sfhd, MPIU_SCALAR, dm, D->din, dm, D->din, MPI_REPLACE)); /* din's first nrr are the roots */
  PetscCall(PetscSFBcastEnd(D->sfhx, MPIU_SCALAR, x, D->din, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(D->sfhd, MPIU_SCALAR, D->din, D->din, MPI_REPLACE));
#if defined(PETSC_HAVE_CUDA)
  if (D->iomem) { /* PetscSF unpacked din on PETSc's stream; the backend reads it on its own */
    PetscDeviceContext dctx;
    PetscCall(PetscDeviceContextGetCurrentContext(&dctx));
    PetscCall(PetscDeviceContextSynchronize(dctx));
  }
#endif
  PetscCall(PetscLogEventEnd(MATFMM_Move, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* the potentials of the caller's rows y that other ranks computed (their dout); y in the device memory mem
   or in host memory (mem NULL); collective */
PetscErrorCode FMMDistPotentials(FMMDist *D, PetscScalar *y, const FMMDeviceMemory *mem)
{
  PetscSF sf = D->sfout ? D->sfout : D->sfin;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATFMM_Move, 0, 0, 0, 0));
  PetscCall(PetscSFBcastWithMemTypeBegin(sf, MPIU_SCALAR, D->iomem ? PETSC_MEMTYPE_DEVICE : PETSC_MEMTYPE_HOST, D->dout, mem ? PETSC_MEMTYPE_DEVICE : PETSC_MEMTYPE_HOST, y, MPI_REPLACE));
  PetscCall(PetscSFBcastEnd(sf, MPIU_SCALAR, D->dout, y, MPI_REPLACE));
  PetscCall(PetscLogEventEnd(MATFMM_Move, 0, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* y (this rank's rows, caller's layout) = K x (its columns); collective */
PetscErrorCode FMMDistMultCPU(FMMDist *D, const PetscScalar *x, PetscScalar *y)
{
  MPI_Comm comm;

  PetscFunctionBegin;
  PetscCall(PetscObjectGetComm((PetscObject)D->sfsrc, &comm));
  PetscCall(FMMDistDensities(D, x, NULL));
#pragma omp parallel for schedule(static) if (D->par)
  for (PetscInt i = 0; i < D->n + D->nh; i++) {
    const PetscInt c = i < D->n ? D->cin[i] : D->nxc + D->nrr + (i - D->n);
    const PetscScalar s = c < D->nxc ? x[c] : D->din[c - D->nxc];
    D->q[i]             = D->cq[i] * s;
    D->dx[i]            = D->cdx[i] * s;
    D->dy[i]            = D->cdy[i] * s;
  }
  PetscCall(Upward(D, comm));
  /* the remote multipoles arrive while the near field is summed */
  PetscCall(PetscLogEventBegin(MATFMM_Exchange, 0, 0, 0, 0));
  PetscCall(PetscSFBcastBegin(D->sfmp, D->unit, D->mpole + (size_t)D->ntop * D->ne, D->mpole + (size_t)D->nown * D->ne, MPI_REPLACE));
  PetscCall(PetscLogEventEnd(MATFMM_Exchange, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_P2P, 0, 0, 0, 0));
  for (PetscInt i = 0; i < D->m; i++) D->pot[i] = 0.0;
  P2P(D);
  PetscCall(PetscLogFlops(12.0 * (PetscLogDouble)D->p2ppairs));
  PetscCall(PetscLogEventEnd(MATFMM_P2P, 0, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATFMM_Exchange, 0, 0, 0, 0));
  PetscCall(PetscSFBcastEnd(D->sfmp, D->unit, D->mpole + (size_t)D->ntop * D->ne, D->mpole + (size_t)D->nown * D->ne, MPI_REPLACE));
  PetscCall(PetscLogEventEnd(MATFMM_Exchange, 0, 0, 0, 0));
  PetscCall(Downward(D));
#pragma omp parallel for schedule(static) if (D->par)
  for (PetscInt i = 0; i < D->m; i++) {
    const PetscInt c = D->cout[i];
    if (c < D->myc) y[c] = D->pot[i];
    else D->dout[c - D->myc] = D->pot[i];
  }
  PetscCall(FMMDistPotentials(D, y, NULL));
  PetscFunctionReturn(0);
}
