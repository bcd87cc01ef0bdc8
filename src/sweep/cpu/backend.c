/*
  The CPU backend of MATSWEEP (C + OpenMP), the reference.  One thread per
  energy group (the groups of a sweep are independent: the scattering source
  is built from the input moments first, Jacobi in energy); the octants go in
  the order of SweepOctantOrder(), and each octant visits the cells line by
  line in its direction of flight, all angles of the octant at once in the
  innermost loops (as SNAP vectorises over angles).

  Across ranks the sweep is Koch, Baker & Alcouffe's (SNAP's): each rank owns
  a block of y and z and all of x; an octant goes through its block in chunks
  of P->chunk x cells, and for each chunk the rank receives the faces
  entering its block from the ranks upstream in y and z, sweeps the chunk,
  and sends the faces leaving it downstream, the next chunk's receives
  already posted.  The incoming faces live in small buffers: per group one
  value per angle of each x line (kept from chunk to chunk), per thread a
  row of the chunk along y and a plane of the chunk along z.

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
  PetscReal *refl[6]; /* outgoing angular flux at each reflective face of the grid: [oct4][facecell][g][a] */
  PetscReal *cx, *cy, *cz, *wY, *Ys; /* [nang] streaming coefficients; [8][cmom][nang] w Y and Ys, angle fastest */
  PetscInt   nthr;
  PetscReal *buf;     /* per thread: s, psi, the chunk's y row and z plane */
  PetscReal *px;      /* per group: the x faces of the lines, kept from chunk to chunk: [g][line][a] */
  size_t     bufsz;
  PetscBool  dfast;   /* face buffers with the direction fastest (else the cell) */
  PetscReal *msg[2][2][2]; /* KBA messages: [y, z][in, out][two buffers]: [g][row][chunk cell][a] */
  MPI_Request req[2][2][2];
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
  PetscCall(PetscFree(c->px));
  for (int ax = 0; ax < 2; ax++)
    for (int io = 0; io < 2; io++)
      for (int b = 0; b < 2; b++) PetscCall(PetscFree(c->msg[ax][io][b]));
  PetscCall(PetscFree(sw->backend));
  PetscFunctionReturn(0);
}

static PetscErrorCode SweepCPUSetup(Mat A)
{
  Mat_Sweep             *sw = (Mat_Sweep *)A->data;
  const SweepProblem    *P  = &sw->P;
  const SweepQuadrature *Q  = &P->Q;
  const PetscInt         na = Q->nang, cm = Q->cmom, cw = P->chunk;
  SweepCPU              *c;

  PetscFunctionBegin;
  PetscCall(SweepCPUDestroy(A));
  PetscCall(PetscNew(&c));
  sw->backend = c;
  PetscCall(PetscMalloc1((size_t)P->ncells * P->ng * cm, &c->qmom));
  for (int f = 0; f < 6; f++)
    if (P->bc[f] == MATSWEEP_BOUNDARY_REFLECTIVE && P->nbr[f] < 0) PetscCall(PetscCalloc1((size_t)4 * SweepFaceCells(P, f / 2) * P->ng * na, &c->refl[f]));
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
  c->bufsz = (size_t)na * (2 + cw + (size_t)P->ny * cw);
  PetscCall(PetscMalloc1(c->bufsz * c->nthr, &c->buf));
  PetscCall(PetscMalloc1((size_t)P->ng * P->ny * P->nz * na, &c->px));
  for (int ax = 0; ax < 2; ax++) /* faces across ranks: y faces [g][k][i][a], z faces [g][j][i][a] of a chunk */
    if (P->nbr[2 + 2 * ax] >= 0 || P->nbr[3 + 2 * ax] >= 0)
      for (int io = 0; io < 2; io++)
        for (int b = 0; b < 2; b++) {
          PetscCall(PetscMalloc1((size_t)P->ng * (ax ? P->ny : P->nz) * cw * na, &c->msg[ax][io][b]));
          c->req[ax][io][b] = MPI_REQUEST_NULL;
        }
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

/* Where the faces of octant oct come from and go to at the boundaries of this rank's block: a face of the
   grid with a boundary condition (the reflected flux, or a carried unknown: xb in, yb out), or a
   message buffer (the faces of the chunk, from or to the rank across) */
typedef struct {
  const PetscReal *in[3];  /* entering flux at the grid's face, [facecell][g][a] of this octant (NULL: vacuum, or a message) */
  PetscScalar     *out[3]; /* leaving flux at the grid's face (NULL: not needed, or a message) */
  const PetscReal *min[3]; /* y, z: the message of the chunk, [g][row][i][a] (NULL: at the grid's face) */
  PetscReal       *mout[3];
} Faces;

/* cells i' in [i0, i1) (the octant's order along x) of octant oct for group g; px: the x faces of the
   lines [line][a], py the y row of the chunk, pz its z plane (strides say, saz between angles and si
   between cells: the layout); qang: the angular source, or NULL; y: the output moments */
static void SweepChunk(const SweepProblem *P, const SweepCPU *c, PetscInt oct, PetscInt g, PetscInt i0, PetscInt i1, const Faces *F, const PetscReal *qang, PetscScalar *y, PetscReal *px, PetscReal *py, PetscReal *pz, PetscReal *s, PetscReal *ps, PetscInt say, PetscInt saz, PetscInt si)
{
  const SweepQuadrature *Q  = &P->Q;
  const PetscInt         na = Q->nang, cm = Q->cmom, ng = P->ng, nx = P->nx, ny = P->ny, nz = P->nz, cw = i1 - i0;
  const PetscInt         sx = (oct & 1) ? -1 : 1, sy = (oct & 2) ? -1 : 1, sz = (oct & 4) ? -1 : 1;
  const PetscReal       *wY = c->wY + oct * cm * na, *Ys = c->Ys + oct * cm * na;
  const PetscReal       *cx = c->cx, *cy = c->cy, *cz = c->cz;
  const PetscBool        dd = P->scheme == MATSWEEP_SCHEME_DD ? PETSC_TRUE : PETSC_FALSE, fix = P->fixup;
  const PetscInt         nax = P->twod ? 2 : 3;

  /* z faces in: from the grid's face or the message, for the chunk's cells of every row j */
  for (PetscInt j = 0; j < ny; j++)
    for (PetscInt ic = 0; ic < cw; ic++) {
      const PetscInt i = sx > 0 ? i0 + ic : nx - 1 - i0 - ic;
      for (PetscInt a = 0; a < na; a++) pz[(j * cw + ic) * si + a * saz] = F->min[2] ? F->min[2][(((size_t)g * ny + j) * cw + ic) * na + a] : (F->in[2] ? F->in[2][((size_t)(j * nx + i) * ng + g) * na + a] : 0.0);
    }
  for (PetscInt kk = 0; kk < nz; kk++) {
    const PetscInt k = sz > 0 ? kk : nz - 1 - kk;
    for (PetscInt ic = 0; ic < cw; ic++) { /* y faces in */
      const PetscInt i = sx > 0 ? i0 + ic : nx - 1 - i0 - ic;
      for (PetscInt a = 0; a < na; a++) py[ic * si + a * say] = F->min[1] ? F->min[1][(((size_t)g * nz + k) * cw + ic) * na + a] : (F->in[1] ? F->in[1][((size_t)(k * nx + i) * ng + g) * na + a] : 0.0);
    }
    for (PetscInt jj = 0; jj < ny; jj++) {
      const PetscInt j  = sy > 0 ? jj : ny - 1 - jj;
      PetscReal     *pl = px + (size_t)(k * ny + j) * na; /* this line's x face */
      if (i0 == 0)
        for (PetscInt a = 0; a < na; a++) pl[a] = F->in[0] ? F->in[0][((size_t)(k * ny + j) * ng + g) * na + a] : 0.0;
      for (PetscInt ic = 0; ic < cw; ic++) {
        const PetscInt   i = sx > 0 ? i0 + ic : nx - 1 - i0 - ic, cell = (k * ny + j) * nx + i;
        const PetscReal  st = P->sigt[cell * ng + g], *qm = c->qmom + ((size_t)cell * ng + g) * cm;
        PetscReal       *pyi = py + ic * si, *pzi = pz + (j * cw + ic) * si;
        PetscScalar     *phi = y + ((size_t)cell * ng + g) * cm;
        for (PetscInt a = 0; a < na; a++) s[a] = qm[0];
        for (PetscInt m = 1; m < cm; m++)
          for (PetscInt a = 0; a < na; a++) s[a] += Ys[m * na + a] * qm[m];
        if (qang)
          for (PetscInt a = 0; a < na; a++) s[a] += qang[((size_t)cell * Q->ndir + oct * na + a) * ng + g];
        if (dd) {
#pragma omp simd
          for (PetscInt a = 0; a < na; a++) ps[a] = (s[a] + cx[a] * pl[a] + cy[a] * pyi[a * say] + cz[a] * pzi[a * saz]) / (st + cx[a] + cy[a] + cz[a]);
          if (fix) {
            for (PetscInt a = 0; a < na; a++) {
              const PetscReal pin[3] = {pl[a], pyi[a * say], pzi[a * saz]}, cf[3] = {cx[a], cy[a], cz[a]};
              PetscReal       pout[3];
              if (2 * ps[a] - pin[0] >= 0 && 2 * ps[a] - pin[1] >= 0 && (nax == 2 || 2 * ps[a] - pin[2] >= 0)) {
                pl[a]        = 2 * ps[a] - pin[0];
                pyi[a * say] = 2 * ps[a] - pin[1];
                pzi[a * saz] = 2 * ps[a] - pin[2];
                continue;
              }
              ps[a]        = Fixup(s[a], st, pin, cf, nax, ps[a], pout);
              pl[a]        = pout[0];
              pyi[a * say] = pout[1];
              pzi[a * saz] = nax == 3 ? pout[2] : pin[2];
            }
          } else {
#pragma omp simd
            for (PetscInt a = 0; a < na; a++) {
              pl[a]        = 2 * ps[a] - pl[a];
              pyi[a * say] = 2 * ps[a] - pyi[a * say];
              pzi[a * saz] = 2 * ps[a] - pzi[a * saz];
            }
          }
        } else {
#pragma omp simd
          for (PetscInt a = 0; a < na; a++) {
            const PetscReal psi = (s[a] + cx[a] * pl[a] + cy[a] * pyi[a * say] + cz[a] * pzi[a * saz]) / (st + cx[a] + cy[a] + cz[a]);
            ps[a]               = psi;
            pl[a]               = psi;
            pyi[a * say]        = psi;
            pzi[a * saz]        = psi;
          }
        }
        for (PetscInt m = 0; m < cm; m++) {
          PetscReal acc = 0;
#pragma omp simd reduction(+ : acc)
          for (PetscInt a = 0; a < na; a++) acc += wY[m * na + a] * ps[a];
          phi[m] += acc;
        }
      }
      if (i1 == nx && F->out[0]) /* x faces out at the end of the line */
        for (PetscInt a = 0; a < na; a++) F->out[0][((size_t)(k * ny + j) * ng + g) * na + a] = pl[a];
    }
    for (PetscInt ic = 0; ic < cw; ic++) { /* y faces out */
      const PetscInt i = sx > 0 ? i0 + ic : nx - 1 - i0 - ic;
      for (PetscInt a = 0; a < na; a++) {
        if (F->mout[1]) F->mout[1][(((size_t)g * nz + k) * cw + ic) * na + a] = py[ic * si + a * say];
        else if (F->out[1]) F->out[1][((size_t)(k * nx + i) * ng + g) * na + a] = py[ic * si + a * say];
      }
    }
  }
  for (PetscInt j = 0; j < ny; j++) /* z faces out */
    for (PetscInt ic = 0; ic < cw; ic++) {
      const PetscInt i = sx > 0 ? i0 + ic : nx - 1 - i0 - ic;
      for (PetscInt a = 0; a < na; a++) {
        if (F->mout[2]) F->mout[2][(((size_t)g * ny + j) * cw + ic) * na + a] = pz[(j * cw + ic) * si + a * saz];
        else if (F->out[2]) F->out[2][((size_t)(j * nx + i) * ng + g) * na + a] = pz[(j * cw + ic) * si + a * saz];
      }
    }
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

/* the faces of octant oct at the grid's faces of this rank's block (see Faces; the messages are set per chunk) */
static void OctantFaces(const SweepProblem *P, const SweepCPU *c, PetscInt oct, const PetscScalar *xb, PetscScalar *y, Faces *F)
{
  const PetscInt na = P->Q.nang, ng = P->ng;

  for (PetscInt ax = 0; ax < 3; ax++) {
    const PetscInt down = (oct >> ax) & 1, fin = 2 * ax + down, fout = 2 * ax + 1 - down;
    const size_t   off  = (size_t)Oct4(oct, ax) * SweepFaceCells(P, ax) * ng * na;
    F->in[ax] = NULL;
    F->out[ax] = NULL;
    F->min[ax] = NULL;
    F->mout[ax] = NULL;
    if (P->nbr[fin] < 0 && P->bc[fin] == MATSWEEP_BOUNDARY_REFLECTIVE) {
      if (P->ncarry[ax] && !down) F->in[ax] = xb ? xb + P->carryoff[ax] + off : NULL; /* carried: an input */
      else F->in[ax] = c->refl[fin] + off;                                           /* left by the mirrored octant */
    }
    if (P->nbr[fout] < 0 && P->bc[fout] == MATSWEEP_BOUNDARY_REFLECTIVE) {
      if (P->ncarry[ax] && down) F->out[ax] = y + P->nphi + P->carryoff[ax] + off; /* the carried unknown's new value */
      else F->out[ax] = c->refl[fout] + off;
    }
  }
}

/* the tag of the faces of chunk ch of the o-th octant of the sweep crossing the y (ax 0) or z (ax 1) faces */
static inline PetscMPIInt Tag(PetscInt o, PetscInt ch, PetscInt nch, PetscInt ax)
{
  return (PetscMPIInt)(2 * (o * nch + ch) + ax);
}

static PetscErrorCode SweepCPUSweep(Mat A, const PetscScalar *x, PetscScalar *y, PetscBool withsrc)
{
  Mat_Sweep          *sw = (Mat_Sweep *)A->data;
  const SweepProblem *P  = &sw->P;
  SweepCPU           *c  = (SweepCPU *)sw->backend;
  const PetscInt      na = P->Q.nang, cw = P->chunk, nch = (P->nx + cw - 1) / cw, ny = P->ny;
  const PetscScalar  *xb = x ? x + P->nphi : NULL;
  const PetscReal    *qang = withsrc ? P->qang : NULL;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(MATSWEEP_Source, A, 0, 0, 0));
  SourceMoments(P, c->qmom, x, withsrc);
  PetscCall(PetscLogFlops(2.0 * P->ncells * P->ng * P->ng * P->Q.cmom));
  PetscCall(PetscLogEventEnd(MATSWEEP_Source, A, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATSWEEP_Sweep, A, 0, 0, 0));
  PetscCall(PetscArrayzero(y, P->nphi + P->nb));
  for (PetscInt o = 0; o < 8; o++) {
    const PetscInt    oct = P->octorder[o];
    const PetscMPIInt up[2] = {P->nbr[2 + ((oct >> 1) & 1)], P->nbr[4 + ((oct >> 2) & 1)]}, dn[2] = {P->nbr[3 - ((oct >> 1) & 1)], P->nbr[5 - ((oct >> 2) & 1)]};
    Faces             F;
    OctantFaces(P, c, oct, xb, y, &F);
    for (PetscInt ax = 0; ax < 2; ax++) /* the first chunk's faces */
      if (up[ax] >= 0) PetscCallMPI(MPI_Irecv(c->msg[ax][0][0], (PetscMPIInt)(P->ng * (ax ? ny : P->nz) * PetscMin(cw, P->nx) * na), MPIU_REAL, up[ax], Tag(o, 0, nch, ax), P->comm, &c->req[ax][0][0]));
    for (PetscInt ch = 0; ch < nch; ch++) {
      const PetscInt i0 = ch * cw, i1 = PetscMin(P->nx, i0 + cw), b = ch & 1;
      PetscCall(PetscLogEventBegin(MATSWEEP_KBAWait, A, 0, 0, 0)); /* the upstream faces, and our sends' buffers */
      for (PetscInt ax = 0; ax < 2; ax++) {
        if (up[ax] < 0) continue;
        PetscCallMPI(MPI_Wait(&c->req[ax][0][b], MPI_STATUS_IGNORE));
        if (ch + 1 < nch) { /* the next chunk's faces arrive while this one is swept */
          const PetscInt n1 = PetscMin(P->nx, i1 + cw) - i1;
          PetscCallMPI(MPI_Irecv(c->msg[ax][0][!b], (PetscMPIInt)(P->ng * (ax ? ny : P->nz) * n1 * na), MPIU_REAL, up[ax], Tag(o, ch + 1, nch, ax), P->comm, &c->req[ax][0][!b]));
        }
        F.min[1 + ax] = c->msg[ax][0][b];
      }
      for (PetscInt ax = 0; ax < 2; ax++)
        if (dn[ax] >= 0) { /* the buffer's send of two chunks ago is done */
          PetscCallMPI(MPI_Wait(&c->req[ax][1][b], MPI_STATUS_IGNORE));
          F.mout[1 + ax] = c->msg[ax][1][b];
        }
      PetscCall(PetscLogEventEnd(MATSWEEP_KBAWait, A, 0, 0, 0));
#pragma omp parallel for schedule(static, 1)
      for (PetscInt g = 0; g < P->ng; g++) {
        PetscInt t = 0;
#if defined(_OPENMP)
        t = omp_get_thread_num();
#endif
        PetscReal *bf = c->buf + c->bufsz * t, *s = bf, *ps = bf + na, *py = bf + 2 * na, *pz = py + (size_t)na * cw, *px = c->px + (size_t)g * ny * P->nz * na;
        if (c->dfast) SweepChunk(P, c, oct, g, i0, i1, &F, qang, y, px, py, pz, s, ps, 1, 1, na);
        else SweepChunk(P, c, oct, g, i0, i1, &F, qang, y, px, py, pz, s, ps, i1 - i0, (i1 - i0) * ny, 1);
        if (t == 0 && nch > 1) /* the main thread (MPI_THREAD_FUNNELED) moves the messages in flight on: without
                                  a single-copy transport MPI moves a large message only while both ranks call it */
          for (PetscInt ax = 0; ax < 2; ax++) {
            int flag;
            (void)MPI_Testall(2, c->req[ax][0], &flag, MPI_STATUSES_IGNORE);
            (void)MPI_Testall(2, c->req[ax][1], &flag, MPI_STATUSES_IGNORE);
          }
      }
      for (PetscInt ax = 0; ax < 2; ax++)
        if (dn[ax] >= 0) PetscCallMPI(MPI_Isend(c->msg[ax][1][b], (PetscMPIInt)(P->ng * (ax ? ny : P->nz) * (i1 - i0) * na), MPIU_REAL, dn[ax], Tag(o, ch, nch, ax), P->comm, &c->req[ax][1][b]));
    }
    PetscCall(PetscLogEventBegin(MATSWEEP_KBAWait, A, 0, 0, 0));
    for (PetscInt ax = 0; ax < 2; ax++) /* this octant's sends are done before their buffers serve the next */
      if (dn[ax] >= 0) PetscCallMPI(MPI_Waitall(2, c->req[ax][1], MPI_STATUSES_IGNORE));
    PetscCall(PetscLogEventEnd(MATSWEEP_KBAWait, A, 0, 0, 0));
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
