/*
  The CPU backend of MATSWEEP (C + OpenMP), the reference.  One thread per
  energy group (the groups of a sweep are independent: the scattering source
  is built from the input moments first, Jacobi in energy); within a group
  the octants go in the order of SweepOctantOrder(), and each octant visits
  the cells line by line in its direction, all angles of the octant at once
  in the innermost loops (as SNAP vectorises over angles).  The incoming
  face fluxes live in small per-thread buffers: one value per angle along x,
  one row along y, one plane along z.

  Cell equations (diamond difference, SNAP's dim3_sweep): with
  c_x = 2|mu|/dx, c_y = 2|eta|/dy, c_z = 2|xi|/dz,
    psi = (s + c_x psi_x + c_y psi_y + c_z psi_z)/(sigma_t + c_x + c_y + c_z),
    outgoing psi_out = 2 psi - psi_in on each axis,
  with SNAP's negative-flux fixup when enabled; the step scheme takes
  c = |mu|/dx and psi_out = psi.  Moments: phi_m += w Y_m(Omega) psi.
*/
#include "../sweepimpl.h"
#if defined(_OPENMP)
  #include <omp.h>
#endif

typedef struct {
  PetscReal *qmom;    /* [ncells*ng*cmom] source moments of the product: S phi (+ q) */
  PetscReal *refl[6]; /* outgoing angular flux at each reflective face: [oct4][facecell][g][a] */
  PetscReal *cx, *cy, *cz, *wY, *Ys; /* [nang] streaming coefficients; [8][cmom][nang] w Y and Ys, angle fastest */
  PetscInt   nthr;
  PetscReal *buf;     /* per thread: psix, psiy, psiz, s, psi */
  size_t     bufsz;
  PetscBool  dfast;   /* face buffers with the direction fastest (else the cell) */
} SweepCPU;

/* oct4: the number of octant oct among the four that share its sign along axis (its other two bits) */
static inline PetscInt Oct4(PetscInt oct, PetscInt axis)
{
  return axis == 0 ? oct >> 1 : (axis == 1 ? (oct & 1) | ((oct >> 1) & 2) : oct & 3);
}

static PetscErrorCode SweepCPUDestroy(Mat A)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  SweepCPU  *c  = (SweepCPU *)sw->backend;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  PetscCall(PetscFree(c->qmom));
  for (int f = 0; f < 6; f++) PetscCall(PetscFree(c->refl[f]));
  PetscCall(PetscFree5(c->cx, c->cy, c->cz, c->wY, c->Ys));
  PetscCall(PetscFree(c->buf));
  PetscCall(PetscFree(sw->backend));
  PetscFunctionReturn(0);
}

static PetscErrorCode SweepCPUSetup(Mat A)
{
  Mat_Sweep             *sw = (Mat_Sweep *)A->data;
  const SweepProblem    *P  = &sw->P;
  const SweepQuadrature *Q  = &P->Q;
  const PetscInt         na = Q->nang, cm = Q->cmom;
  SweepCPU              *c;

  PetscFunctionBegin;
  PetscCall(SweepCPUDestroy(A));
  PetscCall(PetscNew(&c));
  sw->backend = c;
  PetscCall(PetscMalloc1((size_t)P->ncells * P->ng * cm, &c->qmom));
  for (int f = 0; f < 6; f++)
    if (P->bc[f] == MATSWEEP_BOUNDARY_REFLECTIVE) PetscCall(PetscCalloc1((size_t)4 * SweepFaceCells(P, f / 2) * P->ng * na, &c->refl[f]));
  PetscCall(PetscMalloc5(na, &c->cx, na, &c->cy, na, &c->cz, 8 * cm * na, &c->wY, 8 * cm * na, &c->Ys));
  for (PetscInt a = 0; a < na; a++) {
    const PetscReal f = P->scheme == MATSWEEP_SCHEME_DD ? 2.0 : 1.0;
    c->cx[a] = f * Q->mu[a] / P->dx;
    c->cy[a] = f * Q->eta[a] / P->dy;
    c->cz[a] = P->twod ? 0.0 : f * Q->xi[a] / P->dz;
  }
  for (PetscInt oct = 0; oct < 8; oct++)
    for (PetscInt m = 0; m < cm; m++)
      for (PetscInt a = 0; a < na; a++) {
        const PetscInt d                = oct * na + a;
        c->wY[(oct * cm + m) * na + a] = Q->w[a] * Q->Y[d * cm + m];
        c->Ys[(oct * cm + m) * na + a] = Q->Ys[d * cm + m];
      }
  c->dfast = (sw->layout == MATSWEEP_LAYOUT_DGZ || sw->layout == MATSWEEP_LAYOUT_DZG || sw->layout == MATSWEEP_LAYOUT_GDZ) ? PETSC_FALSE : PETSC_TRUE;
  c->nthr  = 1;
#if defined(_OPENMP)
  c->nthr = omp_get_max_threads();
#endif
  c->bufsz = (size_t)na * (3 + P->nx + (size_t)P->nx * P->ny);
  PetscCall(PetscMalloc1(c->bufsz * c->nthr, &c->buf));
  PetscFunctionReturn(0);
}

/* SNAP's negative-flux fixup of one angle (dim3_sweep): faces whose
   diamond-difference outgoing flux would be negative are set to zero and
   the cell balance solved again without them, until no new face turns
   negative.  pin: the incoming fluxes; cf: the streaming coefficients;
   returns psi and writes the outgoing fluxes to pout. */
static inline PetscReal Fixup(PetscReal s, PetscReal st, const PetscReal pin[3], const PetscReal cf[3], PetscInt nax, PetscReal pc, PetscReal pout[3])
{
  PetscReal hv[3] = {1, 1, 1}, fx[3] = {0, 0, 0}, sum = 3;

  for (;;) {
    PetscReal nsum = 0, num, den;
    for (PetscInt k = 0; k < nax; k++) {
      fx[k] = 2 * pc - pin[k];
      if (fx[k] < 0) hv[k] = 0;
    }
    for (PetscInt k = 0; k < 3; k++) nsum += hv[k];
    if (nsum == sum) break;
    sum = nsum;
    num = s;
    den = st;
    for (PetscInt k = 0; k < nax; k++) {
      num += 0.5 * pin[k] * cf[k] * (1 + hv[k]);
      den += cf[k] * hv[k];
    }
    pc = den > 1e-12 ? num / den : 0.0;
  }
  for (PetscInt k = 0; k < nax; k++) pout[k] = fx[k] * hv[k];
  return pc;
}

/* the sweep of one octant for group g; px, py, pz: the x-face value per
   angle, the y-face row, the z-face plane (strides sy and sz between angles,
   si between cells: the layout); qang: the angular source, or NULL; y: the
   output moments */
static void SweepOctant(const SweepProblem *P, const SweepCPU *c, PetscInt oct, PetscInt g, const PetscReal *qang, const PetscScalar *xb, PetscScalar *y, PetscReal *px, PetscReal *py, PetscReal *pz, PetscReal *s, PetscReal *ps, PetscInt say, PetscInt saz, PetscInt si)
{
  const SweepQuadrature *Q  = &P->Q;
  const PetscInt         na = Q->nang, cm = Q->cmom, ng = P->ng, nx = P->nx, ny = P->ny, nz = P->nz;
  const PetscInt         sx = (oct & 1) ? -1 : 1, sy = (oct & 2) ? -1 : 1, sz = (oct & 4) ? -1 : 1;
  const PetscInt         fin[3]  = {sx > 0 ? 0 : 1, sy > 0 ? 2 : 3, sz > 0 ? 4 : 5}; /* entry faces */
  const PetscInt         fout[3] = {fin[0] ^ 1, fin[1] ^ 1, fin[2] ^ 1};
  const PetscReal       *wY = c->wY + oct * cm * na, *Ys = c->Ys + oct * cm * na;
  const PetscReal       *cx = c->cx, *cy = c->cy, *cz = c->cz;
  const PetscBool        dd = P->scheme == MATSWEEP_SCHEME_DD ? PETSC_TRUE : PETSC_FALSE, fix = P->fixup;
  const PetscInt         nax = P->twod ? 2 : 3;
  const PetscReal       *face[3];
  PetscReal             *rin[3], *rout[3];
  PetscScalar           *yb[3];

  /* where each entry face's flux comes from and each exit face's goes */
  for (PetscInt ax = 0; ax < 3; ax++) {
    const PetscInt F = SweepFaceCells(P, ax), o4 = Oct4(oct, ax), ng_na = ng * na;
    face[ax] = NULL;
    rin[ax] = rout[ax] = NULL;
    yb[ax]             = NULL;
    if (P->bc[fin[ax]] == MATSWEEP_BOUNDARY_REFLECTIVE) {
      if (P->ncarry[ax] && fin[ax] == 2 * ax) face[ax] = xb ? xb + P->carryoff[ax] + (size_t)o4 * F * ng_na : NULL; /* carried: an input */
      else rin[ax] = c->refl[fin[ax]] + (size_t)o4 * F * ng_na;                                                    /* left by the mirrored octant */
    }
    if (P->bc[fout[ax]] == MATSWEEP_BOUNDARY_REFLECTIVE) {
      if (P->ncarry[ax] && fout[ax] == 2 * ax) yb[ax] = y + P->nphi + P->carryoff[ax] + (size_t)o4 * F * ng_na; /* the carried unknown's new value */
      else rout[ax] = c->refl[fout[ax]] + (size_t)o4 * F * ng_na;
    }
    if (rin[ax]) face[ax] = rin[ax];
  }
  /* z faces in */
  for (PetscInt j = 0; j < ny; j++)
    for (PetscInt i = 0; i < nx; i++)
      for (PetscInt a = 0; a < na; a++) pz[(j * nx + i) * si + a * saz] = face[2] ? face[2][((size_t)(j * nx + i) * ng + g) * na + a] : 0.0;
  for (PetscInt kk = 0; kk < nz; kk++) {
    const PetscInt k = sz > 0 ? kk : nz - 1 - kk;
    for (PetscInt i = 0; i < nx; i++) /* y faces in */
      for (PetscInt a = 0; a < na; a++) py[i * si + a * say] = face[1] ? face[1][((size_t)(k * nx + i) * ng + g) * na + a] : 0.0;
    for (PetscInt jj = 0; jj < ny; jj++) {
      const PetscInt j = sy > 0 ? jj : ny - 1 - jj;
      for (PetscInt a = 0; a < na; a++) px[a] = face[0] ? face[0][((size_t)(k * ny + j) * ng + g) * na + a] : 0.0;
      for (PetscInt ii = 0; ii < nx; ii++) {
        const PetscInt   i = sx > 0 ? ii : nx - 1 - ii, cell = (k * ny + j) * nx + i;
        const PetscReal  st = P->sigt[cell * ng + g], *qm = c->qmom + ((size_t)cell * ng + g) * cm;
        PetscReal       *pyi = py + i * si, *pzi = pz + (j * nx + i) * si;
        PetscScalar     *phi = y + ((size_t)cell * ng + g) * cm;
        for (PetscInt a = 0; a < na; a++) s[a] = qm[0];
        for (PetscInt m = 1; m < cm; m++)
          for (PetscInt a = 0; a < na; a++) s[a] += Ys[m * na + a] * qm[m];
        if (qang)
          for (PetscInt a = 0; a < na; a++) s[a] += qang[((size_t)cell * Q->ndir + oct * na + a) * ng + g];
        if (dd) {
#pragma omp simd
          for (PetscInt a = 0; a < na; a++) {
            const PetscReal psi = (s[a] + cx[a] * px[a] + cy[a] * pyi[a * say] + cz[a] * pzi[a * saz]) / (st + cx[a] + cy[a] + cz[a]);
            ps[a]               = psi;
          }
          if (fix) {
            for (PetscInt a = 0; a < na; a++) {
              const PetscReal pin[3] = {px[a], pyi[a * say], pzi[a * saz]}, cf[3] = {cx[a], cy[a], cz[a]};
              PetscReal       pout[3];
              if (2 * ps[a] - pin[0] >= 0 && 2 * ps[a] - pin[1] >= 0 && (nax == 2 || 2 * ps[a] - pin[2] >= 0)) {
                px[a] = 2 * ps[a] - pin[0];
                pyi[a * say] = 2 * ps[a] - pin[1];
                pzi[a * saz] = 2 * ps[a] - pin[2];
                continue;
              }
              ps[a]       = Fixup(s[a], st, pin, cf, nax, ps[a], pout);
              px[a]       = pout[0];
              pyi[a * say] = pout[1];
              pzi[a * saz] = nax == 3 ? pout[2] : pin[2];
            }
          } else {
#pragma omp simd
            for (PetscInt a = 0; a < na; a++) {
              px[a]       = 2 * ps[a] - px[a];
              pyi[a * say] = 2 * ps[a] - pyi[a * say];
              pzi[a * saz] = 2 * ps[a] - pzi[a * saz];
            }
          }
        } else {
#pragma omp simd
          for (PetscInt a = 0; a < na; a++) {
            const PetscReal psi = (s[a] + cx[a] * px[a] + cy[a] * pyi[a * say] + cz[a] * pzi[a * saz]) / (st + cx[a] + cy[a] + cz[a]);
            ps[a]               = psi;
            px[a]               = psi;
            pyi[a * say]         = psi;
            pzi[a * saz]         = psi;
          }
        }
        for (PetscInt m = 0; m < cm; m++) {
          PetscReal acc = 0;
#pragma omp simd reduction(+ : acc)
          for (PetscInt a = 0; a < na; a++) acc += wY[m * na + a] * ps[a];
          phi[m] += acc;
        }
      }
      if (rout[0] || yb[0]) /* x faces out */
        for (PetscInt a = 0; a < na; a++) (rout[0] ? rout[0] : yb[0])[((size_t)(k * ny + j) * ng + g) * na + a] = px[a];
    }
    if (rout[1] || yb[1]) /* y faces out */
      for (PetscInt i = 0; i < nx; i++)
        for (PetscInt a = 0; a < na; a++) (rout[1] ? rout[1] : yb[1])[((size_t)(k * nx + i) * ng + g) * na + a] = py[i * si + a * say];
  }
  if (rout[2] || yb[2]) /* z faces out */
    for (PetscInt j = 0; j < ny; j++)
      for (PetscInt i = 0; i < nx; i++)
        for (PetscInt a = 0; a < na; a++) (rout[2] ? rout[2] : yb[2])[((size_t)(j * nx + i) * ng + g) * na + a] = pz[(j * nx + i) * si + a * saz];
}

/* the source moments of a product: qmom = S phi (+ q) */
static void SourceMoments(const SweepProblem *P, PetscReal *qmom, const PetscScalar *phi, PetscBool withsrc)
{
  const PetscInt ng = P->ng, cm = P->Q.cmom, nm = P->Q.nmom;

#pragma omp parallel for schedule(static)
  for (PetscInt cell = 0; cell < P->ncells; cell++) {
    const PetscReal *ss = P->sigs + (size_t)P->mat[cell] * nm * ng * ng;
    for (PetscInt g = 0; g < ng; g++)
      for (PetscInt m = 0; m < cm; m++) {
        const PetscReal *sg  = ss + ((size_t)P->Q.lmom[m] * ng + g) * ng;
        PetscReal        acc = (withsrc && m == 0 && P->q) ? P->q[cell * ng + g] : 0.0;
        if (phi)
          for (PetscInt gp = 0; gp < ng; gp++) acc += sg[gp] * phi[((size_t)cell * ng + gp) * cm + m];
        qmom[((size_t)cell * ng + g) * cm + m] = acc;
      }
  }
}

static PetscErrorCode SweepCPUSweep(Mat A, const PetscScalar *x, PetscScalar *y, PetscBool withsrc)
{
  Mat_Sweep          *sw = (Mat_Sweep *)A->data;
  const SweepProblem *P  = &sw->P;
  SweepCPU           *c  = (SweepCPU *)sw->backend;
  const PetscInt      na = P->Q.nang, nx = P->nx;
  const PetscScalar  *xb = x ? x + P->nphi : NULL;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATSWEEP_Source, A, 0, 0, 0));
  SourceMoments(P, c->qmom, x, withsrc);
  PetscCall(PetscLogFlops(2.0 * P->ncells * P->ng * P->ng * P->Q.cmom));
  PetscCall(PetscLogEventEnd(MATSWEEP_Source, A, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATSWEEP_Sweep, A, 0, 0, 0));
  PetscCall(PetscArrayzero(y, P->nphi + P->nb));
#pragma omp parallel for schedule(static, 1)
  for (PetscInt g = 0; g < P->ng; g++) {
    PetscInt t = 0;
#if defined(_OPENMP)
    t = omp_get_thread_num();
#endif
    PetscReal *b = c->buf + c->bufsz * t, *px = b, *s = b + na, *ps = b + 2 * na, *py = b + 3 * na, *pz = py + (size_t)na * nx;
    for (PetscInt o = 0; o < 8; o++) {
      if (c->dfast) SweepOctant(P, c, P->octorder[o], g, withsrc ? P->qang : NULL, xb, y, px, py, pz, s, ps, 1, 1, na);
      else SweepOctant(P, c, P->octorder[o], g, withsrc ? P->qang : NULL, xb, y, px, py, pz, s, ps, nx, nx * P->ny, 1);
    }
  }
  PetscCall(PetscLogFlops(20.0 * P->ncells * P->Q.ndir * P->ng));
  PetscCall(PetscLogEventEnd(MATSWEEP_Sweep, A, 0, 0, 0));
  PetscFunctionReturn(0);
}

static PetscErrorCode SweepCPUView(Mat A, PetscViewer v)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  SweepCPU  *c  = (SweepCPU *)sw->backend;

  PetscFunctionBegin;
  if (c) PetscCall(PetscViewerASCIIPrintf(v, "  CPU: %" PetscInt_FMT " OpenMP threads over groups, face buffers with the %s fastest\n", c->nthr, c->dfast ? "direction" : "cell"));
  PetscFunctionReturn(0);
}

struct _SweepBackendOps SweepBackendCPU = {"cpu", SweepCPUSetup, SweepCPUSweep, SweepCPUDestroy, SweepCPUView};
