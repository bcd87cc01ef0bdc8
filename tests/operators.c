static char help[] = "Checks each expansion operator of src/fmm/expansions.h (P2P pair kernel, P2M, M2M, M2L, L2L, L2P)\n\
against direct evaluation of Re sum_j q_j log(z - y_j) + d_j/(z - y_j), for growing expansion orders p.\n\
  -verbose  print the measured errors too (not deterministic across machines: not for the reference output)\n\n";

/*
  The operators are tested alone, without the tree: each test places a cloud of
  charges q_j (real) and dipoles d_j (complex) in a disk, builds an expansion
  with the operator(s) under test, evaluates it and compares with the exact sum,
  computed here independently with C99 complex arithmetic.

  Error measure: max |approx - exact| over the evaluation points, divided by
  Q + D/dmin with Q = sum |q_j|, D = sum |d_j| and dmin the smallest distance
  from an evaluation point to a source (the natural scale of the potential and
  of the Greengard-Rokhlin error bounds).  Each check is
      error <= C ratio^p + floor
  with ratio the geometric convergence factor of the configuration (radius /
  distance for P2M and M2M, theta of the theta-criterion for M2L and L2L),
  C = 0.5 (10 to 50 times the measured worst case) and floor = 1e-13
  for rounding.  Exact translations (M2M, L2L) are in addition compared with
  the expansion they must reproduce to rounding (1e-13 relative).
*/
#include <petscsys.h>
#include <complex.h>
#include "../src/fmm/expansions.h"
#include "testutil.h"

#define PMAX  64
#define FLOOR 1e-13

typedef double _Complex cplx;

typedef struct {
  PetscInt   n;
  PetscReal *x, *y, *q, *dx, *dy;
  PetscReal  cx, cy, r; /* the disk holding the cloud */
} Cloud;

static PetscRandom rnd;
static PetscBool   verbose = PETSC_FALSE;
static PetscInt    nfail   = 0;

/* The tables exactly as src/fmm/cpu/backend.c SetupTables() builds them */
static PetscErrorCode SetupTables(PetscInt p, PetscReal **binom, PetscReal **m2l)
{
  PetscInt nb = 2 * p + 1;

  PetscFunctionBeginUser;
  PetscCall(PetscCalloc2(nb * nb, binom, p * p, m2l));
  for (PetscInt n = 0; n < nb; n++) {
    (*binom)[n * nb] = 1.0;
    for (PetscInt k = 1; k <= n; k++) (*binom)[n * nb + k] = (*binom)[(n - 1) * nb + k - 1] + (k < n ? (*binom)[(n - 1) * nb + k] : 0.0);
  }
  for (PetscInt l = 1; l <= p; l++)
    for (PetscInt k = 1; k <= p; k++) (*m2l)[(l - 1) * p + (k - 1)] = (*binom)[(l + k - 1) * nb + (k - 1)];
  PetscFunctionReturn(0);
}

static PetscReal Rand(void)
{
  PetscReal v;
  PetscCallAbort(PETSC_COMM_SELF, PetscRandomGetValueReal(rnd, &v));
  return v;
}

/* n points uniform in the disk |y - c| <= r, charges in [-1,1] (withq), dipoles of modulus <= r (withd) */
static PetscErrorCode CloudCreate(PetscInt n, PetscReal cx, PetscReal cy, PetscReal r, PetscBool withq, PetscBool withd, Cloud *c)
{
  PetscFunctionBeginUser;
  c->n  = n;
  c->cx = cx;
  c->cy = cy;
  c->r  = r;
  PetscCall(PetscMalloc5(n, &c->x, n, &c->y, n, &c->q, n, &c->dx, n, &c->dy));
  for (PetscInt j = 0; j < n; j++) {
    PetscReal rr = r * PetscSqrtReal(Rand()), t = 2 * PETSC_PI * Rand();
    c->x[j]  = cx + rr * PetscCosReal(t);
    c->y[j]  = cy + rr * PetscSinReal(t);
    c->q[j]  = withq ? 2 * Rand() - 1 : 0.0;
    c->dx[j] = withd ? r * (2 * Rand() - 1) : 0.0;
    c->dy[j] = withd ? r * (2 * Rand() - 1) : 0.0;
  }
  /* one point on the rim: the bound must hold for the worst case */
  if (n) {
    c->x[0] = cx + r * PetscCosReal(0.3);
    c->y[0] = cy + r * PetscSinReal(0.3);
  }
  PetscFunctionReturn(0);
}

static PetscErrorCode CloudDestroy(Cloud *c)
{
  PetscFunctionBeginUser;
  PetscCall(PetscFree5(c->x, c->y, c->q, c->dx, c->dy));
  PetscFunctionReturn(0);
}

/* all the sources of four child clouds of equal size in one cloud, child after child
   (only the sources: the disk of the result is not set) */
static PetscErrorCode CloudConcat(const Cloud ch[4], Cloud *all)
{
  PetscInt n = ch[0].n;

  PetscFunctionBeginUser;
  all->n = 4 * n;
  PetscCall(PetscMalloc5(4 * n, &all->x, 4 * n, &all->y, 4 * n, &all->q, 4 * n, &all->dx, 4 * n, &all->dy));
  for (PetscInt k = 0; k < 4; k++) {
    PetscCall(PetscArraycpy(all->x + n * k, ch[k].x, n));
    PetscCall(PetscArraycpy(all->y + n * k, ch[k].y, n));
    PetscCall(PetscArraycpy(all->q + n * k, ch[k].q, n));
    PetscCall(PetscArraycpy(all->dx + n * k, ch[k].dx, n));
    PetscCall(PetscArraycpy(all->dy + n * k, ch[k].dy, n));
  }
  PetscFunctionReturn(0);
}

/* exact potential, independent of expansions.h */
static PetscReal Exact(const Cloud *c, PetscReal zx, PetscReal zy)
{
  PetscReal s = 0.0;
  for (PetscInt j = 0; j < c->n; j++) {
    cplx r = (zx - c->x[j]) + I * (zy - c->y[j]);
    s += creal(c->q[j] * clog(r) + (c->dx[j] + I * c->dy[j]) / r);
  }
  return s;
}

/* Q + D/dmin for a set of evaluation points */
static PetscReal Norm(const Cloud *c, PetscInt m, const PetscReal *zx, const PetscReal *zy)
{
  PetscReal Q = 0, D = 0, dmin = PETSC_MAX_REAL;
  for (PetscInt j = 0; j < c->n; j++) {
    Q += PetscAbsReal(c->q[j]);
    D += PetscSqrtReal(c->dx[j] * c->dx[j] + c->dy[j] * c->dy[j]);
    for (PetscInt i = 0; i < m; i++) dmin = PetscMin(dmin, PetscSqrtReal(PetscSqr(zx[i] - c->x[j]) + PetscSqr(zy[i] - c->y[j])));
  }
  return Q + D / dmin;
}

/* evaluation of a radius-scaled multipole (centre c, scale s): A_0 log|z - c| + Re sum_k A_k (s/(z - c))^k */
static PetscReal M2P(PetscInt p, const PetscReal *A, PetscReal cx, PetscReal cy, PetscReal s, PetscReal zx, PetscReal zy)
{
  cplx w = s / ((zx - cx) + I * (zy - cy)), v = 0.0;
  for (PetscInt k = p; k >= 1; k--) v = (v + (A[k] + I * A[p + 1 + k])) * w;
  return A[0] * 0.5 * log(PetscSqr(zx - cx) + PetscSqr(zy - cy)) + creal(v);
}

/* m points on the circle |z - c| = R */
static void Ring(PetscInt m, PetscReal cx, PetscReal cy, PetscReal R, PetscReal *zx, PetscReal *zy)
{
  for (PetscInt i = 0; i < m; i++) {
    PetscReal t = 2 * PETSC_PI * (i + 0.5) / m;
    zx[i]       = cx + R * PetscCosReal(t);
    zy[i]       = cy + R * PetscSinReal(t);
  }
}

/* m points in the disk |z - c| <= r, the first 16 on its rim */
static void Disk(PetscInt m, PetscReal cx, PetscReal cy, PetscReal r, PetscReal *zx, PetscReal *zy)
{
  for (PetscInt i = 0; i < m; i++) {
    PetscReal rr = i < 16 ? r : r * PetscSqrtReal(Rand()), t = 2 * PETSC_PI * Rand();
    zx[i]        = cx + rr * PetscCosReal(t);
    zy[i]        = cy + rr * PetscSinReal(t);
  }
}

static PetscErrorCode Report(const char *name, PetscInt p, PetscReal ratio, PetscReal C, PetscReal err)
{
  PetscReal tol = C * PetscPowRealInt(ratio, p) + FLOOR;
  PetscBool ok  = (err <= tol) ? PETSC_TRUE : PETSC_FALSE; /* NaN fails */

  PetscFunctionBeginUser;
  if (!ok) nfail++;
  PetscCall(PetscPrintf(PETSC_COMM_SELF, "%-34s p=%2" PetscInt_FMT ": error <= %g*%.3g^p + 1e-13 %s\n", name, p, (double)C, (double)ratio, ok ? "ok" : "FAILED"));
  if (verbose || !ok) PetscCall(PetscPrintf(PETSC_COMM_SELF, "    error %.3e, bound %.3e\n", (double)err, (double)tol));
  PetscFunctionReturn(0);
}

static PetscErrorCode ReportExact(const char *name, PetscInt p, PetscReal err)
{
  PetscBool ok = (err <= FLOOR) ? PETSC_TRUE : PETSC_FALSE;

  PetscFunctionBeginUser;
  if (!ok) nfail++;
  PetscCall(PetscPrintf(PETSC_COMM_SELF, "%-34s p=%2" PetscInt_FMT ": agrees to 1e-13 %s\n", name, p, ok ? "ok" : "FAILED"));
  if (verbose || !ok) PetscCall(PetscPrintf(PETSC_COMM_SELF, "    difference %.3e\n", (double)err));
  PetscFunctionReturn(0);
}

/* max |a - b| over the 2(p+1) reals of two expansions, relative to max |b| */
static PetscReal CoefDiff(PetscInt p, const PetscReal *a, const PetscReal *b)
{
  PetscReal d = 0, m = 0;
  for (PetscInt k = 0; k < 2 * (p + 1); k++) {
    d = PetscMax(d, PetscAbsReal(a[k] - b[k]));
    m = PetscMax(m, PetscAbsReal(b[k]));
  }
  return d / m;
}

static void P2MCloud(PetscInt p, const Cloud *c, PetscReal cx, PetscReal cy, PetscReal s, PetscReal *A)
{
  PetscReal inv[PMAX + 1];
  FMMInverses((int)p, inv);
  for (PetscInt k = 0; k < 2 * (p + 1); k++) A[k] = 0.0;
  for (PetscInt j = 0; j < c->n; j++) FMMP2MAdd((int)p, 1.0 / s, (c->x[j] - cx) / s, (c->y[j] - cy) / s, c->q[j], c->dx[j], c->dy[j], true, inv, A);
}

/* the pair kernel used by P2P and the direct sum */
static PetscErrorCode TestPairKernel(void)
{
  Cloud     c;
  PetscReal err = 0, zx, zy;

  PetscFunctionBeginUser;
  PetscCall(CloudCreate(200, 0.1, -0.2, 3.0, PETSC_TRUE, PETSC_TRUE, &c));
  for (PetscInt i = 0; i < 50; i++) {
    PetscReal s = 0, e, scale = 0;
    zx = 6 * Rand() - 3;
    zy = 6 * Rand() - 3;
    for (PetscInt j = 0; j < c.n; j++) {
      PetscReal rx = zx - c.x[j], ry = zy - c.y[j], r = PetscSqrtReal(rx * rx + ry * ry);
      s += FMMPairKernel(rx, ry, c.q[j], c.dx[j], c.dy[j]);
      scale += PetscAbsReal(c.q[j]) * (1 + PetscAbsReal(PetscLogReal(r))) + PetscSqrtReal(c.dx[j] * c.dx[j] + c.dy[j] * c.dy[j]) / r;
    }
    e   = Exact(&c, zx, zy);
    err = PetscMax(err, PetscAbsReal(s - e) / scale);
  }
  PetscCall(PetscPrintf(PETSC_COMM_SELF, "P2P pair kernel vs complex formula: agrees to 1e-14 %s\n", err <= 1e-14 ? "ok" : "FAILED"));
  if (err > 1e-14) nfail++;
  /* zero distance: excluded (0), whatever the strengths */
  {
    PetscReal z = FMMPairKernel(0.0, 0.0, 1.0, 1.0, -1.0), zm = FMMPairKernel(-0.0, 0.0, -3.0, 0.0, 2.0);
    PetscBool ok = (z == 0.0 && zm == 0.0) ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(PetscPrintf(PETSC_COMM_SELF, "P2P pair kernel at zero distance is 0 %s\n", ok ? "ok" : "FAILED"));
    if (!ok) nfail++;
  }
  PetscCall(CloudDestroy(&c));
  PetscFunctionReturn(0);
}

/* P2M, then the multipole evaluated on a ring of radius R: ratio r/R */
static PetscErrorCode TestP2M(const char *label, PetscReal cx, PetscReal cy, PetscReal r, PetscReal s, PetscReal ratio, PetscBool withq, PetscBool withd, PetscInt np, const PetscInt *ps, PetscReal C)
{
  Cloud     c;
  PetscReal A[2 * (PMAX + 1)], zx[64], zy[64], ex[64], nrm;
  char      name[64];

  PetscFunctionBeginUser;
  PetscCall(CloudCreate(100, cx, cy, r, withq, withd, &c));
  Ring(64, cx, cy, r / ratio, zx, zy);
  for (PetscInt i = 0; i < 64; i++) ex[i] = Exact(&c, zx[i], zy[i]);
  nrm = Norm(&c, 64, zx, zy);
  for (PetscInt t = 0; t < np; t++) {
    PetscInt  p   = ps[t];
    PetscReal err = 0;
    P2MCloud(p, &c, cx, cy, s, A);
    for (PetscInt i = 0; i < 64; i++) err = PetscMax(err, PetscAbsReal(M2P(p, A, cx, cy, s, zx[i], zy[i]) - ex[i]));
    PetscCall(PetscSNPrintf(name, sizeof(name), "P2M %s", label));
    PetscCall(Report(name, p, ratio, C, err / nrm));
  }
  PetscCall(CloudDestroy(&c));
  PetscFunctionReturn(0);
}

/* four child clouds (quadrants of a parent disk), P2M at each child, M2M into the parent:
   (a) equals P2M of all sources about the parent centre (M2M is exact), (b) vs exact on a ring */
static PetscErrorCode TestM2M(PetscReal cx, PetscReal cy, PetscReal h, PetscReal ratio, PetscInt np, const PetscInt *ps, PetscReal C)
{
  Cloud     ch[4], all;
  PetscReal zx[64], zy[64], ex[64], nrm, sp = h * PetscSqrtReal(2.0), ccx[4], ccy[4], cs[4];
  PetscReal A[4][2 * (PMAX + 1)], B[2 * (PMAX + 1)], Bd[2 * (PMAX + 1)], work[4 * (PMAX + 1)];

  PetscFunctionBeginUser;
  /* children: squares of half-side h/2 centred at c + (+-h/2, +-h/2); clouds in their inscribed-ish disks */
  for (PetscInt k = 0; k < 4; k++) {
    ccx[k] = cx + ((k & 1) ? 0.5 : -0.5) * h;
    ccy[k] = cy + ((k & 2) ? 0.5 : -0.5) * h;
    cs[k]  = 0.5 * h * PetscSqrtReal(2.0) * (0.6 + 0.1 * k); /* different child scales */
    PetscCall(CloudCreate(40, ccx[k], ccy[k], cs[k], PETSC_TRUE, PETSC_TRUE, &ch[k]));
  }
  PetscCall(CloudConcat(ch, &all));
  Ring(64, cx, cy, sp / ratio, zx, zy);
  for (PetscInt i = 0; i < 64; i++) ex[i] = Exact(&all, zx[i], zy[i]);
  nrm = Norm(&all, 64, zx, zy);
  for (PetscInt t = 0; t < np; t++) {
    PetscInt  p = ps[t], nb = 2 * p + 1;
    PetscReal err = 0, *binom, *m2l;
    PetscCall(SetupTables(p, &binom, &m2l));
    for (PetscInt k = 0; k < 2 * (p + 1); k++) B[k] = 0.0;
    for (PetscInt k = 0; k < 4; k++) {
      P2MCloud(p, &ch[k], ccx[k], ccy[k], cs[k], A[k]);
      FMMM2M((int)p, binom, (ccx[k] - cx) / sp, (ccy[k] - cy) / sp, cs[k] / sp, A[k], B, work);
    }
    P2MCloud(p, &all, cx, cy, sp, Bd);
    PetscCall(ReportExact("M2M child->parent = P2M at parent", p, CoefDiff(p, B, Bd)));
    for (PetscInt i = 0; i < 64; i++) err = PetscMax(err, PetscAbsReal(M2P(p, B, cx, cy, sp, zx[i], zy[i]) - ex[i]));
    PetscCall(Report("M2M child->parent, evaluated", p, ratio, C, err / nrm));
    (void)nb;
    PetscCall(PetscFree2(binom, m2l));
  }
  for (PetscInt k = 0; k < 4; k++) PetscCall(CloudDestroy(&ch[k]));
  PetscCall(CloudDestroy(&all));
  PetscFunctionReturn(0);
}

/* M2L between a source disk (radius rs) and a target disk (radius rt) on the boundary of
   the theta-criterion, R + theta r = theta d, then L2P in the target disk */
static PetscErrorCode TestM2L(const char *label, PetscReal rs, PetscReal rt, PetscReal theta, PetscInt np, const PetscInt *ps, PetscReal C)
{
  Cloud     c;
  PetscReal R = PetscMax(rs, rt), r = PetscMin(rs, rt), d = (R + theta * r) / theta, ang = 0.7;
  PetscReal cx = 1.5, cy = -0.5, lx = cx - d * PetscCosReal(ang), ly = cy - d * PetscSinReal(ang);
  PetscReal A[2 * (PMAX + 1)], B[2 * (PMAX + 1)], work[2 * PMAX], zx[128], zy[128], ex[128], nrm;
  char      name[64];

  PetscFunctionBeginUser;
  PetscCall(CloudCreate(100, cx, cy, rs, PETSC_TRUE, PETSC_TRUE, &c));
  Disk(128, lx, ly, rt, zx, zy);
  for (PetscInt i = 0; i < 128; i++) ex[i] = Exact(&c, zx[i], zy[i]);
  nrm = Norm(&c, 128, zx, zy);
  for (PetscInt t = 0; t < np; t++) {
    PetscInt  p   = ps[t];
    PetscReal err = 0, *binom, *m2l;
    PetscCall(SetupTables(p, &binom, &m2l));
    P2MCloud(p, &c, cx, cy, rs, A);
    for (PetscInt k = 0; k < 2 * (p + 1); k++) B[k] = 0.0;
    FMMM2L((int)p, m2l, cx - lx, cy - ly, rs, rt, A, B, work);
    for (PetscInt i = 0; i < 128; i++) err = PetscMax(err, PetscAbsReal(FMML2P((int)p, B, (zx[i] - lx) / rt, (zy[i] - ly) / rt) - ex[i]));
    PetscCall(PetscSNPrintf(name, sizeof(name), "M2L+L2P %s", label));
    PetscCall(Report(name, p, theta, C, err / nrm));
    PetscCall(PetscFree2(binom, m2l));
  }
  PetscCall(CloudDestroy(&c));
  PetscFunctionReturn(0);
}

/* M2L into a parent disk (radius rp) on the theta boundary, L2L to its four quadrant children,
   L2P in each child: (a) equals L2P of the parent expansion (L2L is exact), (b) vs exact */
static PetscErrorCode TestL2L(PetscReal theta, PetscInt np, const PetscInt *ps, PetscReal C)
{
  Cloud     c;
  PetscReal rp = 0.25, rs = 0.25, d = (rp + theta * rs) / theta, cx = 0.2, cy = 0.1;
  PetscReal lx = cx + d, ly = cy, h = rp / PetscSqrtReal(2.0); /* children: quadrants of the square inscribed in the parent disk */
  PetscReal A[2 * (PMAX + 1)], B[2 * (PMAX + 1)], Cc[2 * (PMAX + 1)], work[2 * (PMAX + 1)], zx[4][32], zy[4][32], ex[4][32], nrm = 0;

  PetscFunctionBeginUser;
  PetscCall(CloudCreate(100, cx, cy, rs, PETSC_TRUE, PETSC_TRUE, &c));
  for (PetscInt k = 0; k < 4; k++) {
    PetscReal ccx = lx + ((k & 1) ? 0.5 : -0.5) * h, ccy = ly + ((k & 2) ? 0.5 : -0.5) * h, cr = 0.5 * h * PetscSqrtReal(2.0);
    Disk(32, ccx, ccy, cr, zx[k], zy[k]);
    for (PetscInt i = 0; i < 32; i++) ex[k][i] = Exact(&c, zx[k][i], zy[k][i]);
    nrm = PetscMax(nrm, Norm(&c, 32, zx[k], zy[k]));
  }
  for (PetscInt t = 0; t < np; t++) {
    PetscInt  p   = ps[t];
    PetscReal err = 0, diff = 0, lmax = 0, *binom, *m2l, work2[2 * PMAX];
    PetscCall(SetupTables(p, &binom, &m2l));
    P2MCloud(p, &c, cx, cy, rs, A);
    for (PetscInt k = 0; k < 2 * (p + 1); k++) B[k] = 0.0;
    FMMM2L((int)p, m2l, cx - lx, cy - ly, rs, rp, A, B, work2);
    for (PetscInt k = 0; k < 4; k++) {
      PetscReal ccx = lx + ((k & 1) ? 0.5 : -0.5) * h, ccy = ly + ((k & 2) ? 0.5 : -0.5) * h, cr = 0.5 * h * PetscSqrtReal(2.0) * (1.0 + 0.05 * k);
      for (PetscInt j = 0; j < 2 * (p + 1); j++) Cc[j] = 0.0;
      FMML2L((int)p, binom, (ccx - lx) / rp, (ccy - ly) / rp, cr / rp, B, Cc, work);
      for (PetscInt i = 0; i < 32; i++) {
        PetscReal vc = FMML2P((int)p, Cc, (zx[k][i] - ccx) / cr, (zy[k][i] - ccy) / cr);
        PetscReal vp = FMML2P((int)p, B, (zx[k][i] - lx) / rp, (zy[k][i] - ly) / rp);
        diff         = PetscMax(diff, PetscAbsReal(vc - vp));
        lmax         = PetscMax(lmax, PetscAbsReal(vp));
        err          = PetscMax(err, PetscAbsReal(vc - ex[k][i]));
      }
    }
    /* the local expansion's terms: sum |B_l| bounds |vp|, and rounding scales with it */
    {
      PetscReal bs = 0;
      for (PetscInt l = 0; l <= p; l++) bs += PetscSqrtReal(B[l] * B[l] + B[p + 1 + l] * B[p + 1 + l]);
      PetscCall(ReportExact("L2L parent->child = parent L2P", p, diff / PetscMax(bs, lmax)));
    }
    PetscCall(Report("L2L parent->child + L2P, vs exact", p, theta, C, err / nrm));
    PetscCall(PetscFree2(binom, m2l));
  }
  PetscCall(CloudDestroy(&c));
  PetscFunctionReturn(0);
}

/* the whole chain P2M (4 children) -> M2M -> M2L -> L2L (4 children) -> L2P, theta boundary at the parents */
static PetscErrorCode TestChain(PetscReal theta, PetscInt np, const PetscInt *ps, PetscReal C)
{
  Cloud     ch[4], all;
  PetscReal h = 0.2, sp = h * PetscSqrtReal(2.0), cx = -0.3, cy = 0.4, d = (sp + theta * sp) / theta, lx = cx + d * PetscCosReal(2.0), ly = cy + d * PetscSinReal(2.0);
  PetscReal ccx[4], ccy[4], cs[4], A[4][2 * (PMAX + 1)], M[2 * (PMAX + 1)], B[2 * (PMAX + 1)], Cc[2 * (PMAX + 1)], work[4 * (PMAX + 1)];
  PetscReal zx[4][32], zy[4][32], ex[4][32], nrm = 0;

  PetscFunctionBeginUser;
  for (PetscInt k = 0; k < 4; k++) {
    ccx[k] = cx + ((k & 1) ? 0.5 : -0.5) * h;
    ccy[k] = cy + ((k & 2) ? 0.5 : -0.5) * h;
    cs[k]  = 0.5 * h * PetscSqrtReal(2.0);
    PetscCall(CloudCreate(30, ccx[k], ccy[k], cs[k], PETSC_TRUE, PETSC_TRUE, &ch[k]));
  }
  PetscCall(CloudConcat(ch, &all));
  for (PetscInt k = 0; k < 4; k++) {
    Disk(32, lx + ((k & 1) ? 0.5 : -0.5) * h, ly + ((k & 2) ? 0.5 : -0.5) * h, 0.5 * h * PetscSqrtReal(2.0), zx[k], zy[k]);
    for (PetscInt i = 0; i < 32; i++) ex[k][i] = Exact(&all, zx[k][i], zy[k][i]);
    nrm = PetscMax(nrm, Norm(&all, 32, zx[k], zy[k]));
  }
  for (PetscInt t = 0; t < np; t++) {
    PetscInt  p   = ps[t];
    PetscReal err = 0, *binom, *m2l;
    PetscCall(SetupTables(p, &binom, &m2l));
    for (PetscInt j = 0; j < 2 * (p + 1); j++) M[j] = B[j] = 0.0;
    for (PetscInt k = 0; k < 4; k++) {
      P2MCloud(p, &ch[k], ccx[k], ccy[k], cs[k], A[k]);
      FMMM2M((int)p, binom, (ccx[k] - cx) / sp, (ccy[k] - cy) / sp, cs[k] / sp, A[k], M, work);
    }
    FMMM2L((int)p, m2l, cx - lx, cy - ly, sp, sp, M, B, work);
    for (PetscInt k = 0; k < 4; k++) {
      PetscReal tx = lx + ((k & 1) ? 0.5 : -0.5) * h, ty = ly + ((k & 2) ? 0.5 : -0.5) * h, tr = 0.5 * h * PetscSqrtReal(2.0);
      for (PetscInt j = 0; j < 2 * (p + 1); j++) Cc[j] = 0.0;
      FMML2L((int)p, binom, (tx - lx) / sp, (ty - ly) / sp, tr / sp, B, Cc, work);
      for (PetscInt i = 0; i < 32; i++) err = PetscMax(err, PetscAbsReal(FMML2P((int)p, Cc, (zx[k][i] - tx) / tr, (zy[k][i] - ty) / tr) - ex[k][i]));
    }
    PetscCall(Report("chain P2M-M2M-M2L-L2L-L2P", p, theta, C, err / nrm));
    PetscCall(PetscFree2(binom, m2l));
  }
  for (PetscInt k = 0; k < 4; k++) PetscCall(CloudDestroy(&ch[k]));
  PetscCall(CloudDestroy(&all));
  PetscFunctionReturn(0);
}

/* order 64 on tiny and huge boxes far from the origin: the radius scaling keeps every power in range */
static PetscErrorCode TestExtremeScales(void)
{
  const PetscReal scales[] = {1e-9, 1e6};
  PetscInt        p        = PMAX;

  PetscFunctionBeginUser;
  for (PetscInt t = 0; t < 2; t++) {
    Cloud     c;
    PetscReal r = scales[t], cx = 1e3 + 0.37, cy = -2e3, theta = 0.5, d = 1.5 * r / theta, lx = cx + d * PetscCosReal(-1.0), ly = cy + d * PetscSinReal(-1.0);
    PetscReal A[2 * (PMAX + 1)], B[2 * (PMAX + 1)], work[2 * (PMAX + 1)], zx[64], zy[64], err = 0, nrm, *binom, *m2l;
    PetscBool finite = PETSC_TRUE;
    char      name[64];
    PetscCall(CloudCreate(50, cx, cy, r, PETSC_TRUE, PETSC_TRUE, &c));
    PetscCall(SetupTables(p, &binom, &m2l));
    P2MCloud(p, &c, cx, cy, r, A);
    for (PetscInt k = 0; k < 2 * (p + 1); k++) B[k] = 0.0;
    FMMM2L((int)p, m2l, cx - lx, cy - ly, r, r, A, B, work);
    for (PetscInt k = 0; k < 2 * (p + 1); k++) finite = (finite && !PetscIsInfOrNanReal(A[k]) && !PetscIsInfOrNanReal(B[k])) ? PETSC_TRUE : PETSC_FALSE;
    Disk(64, lx, ly, r, zx, zy);
    nrm = Norm(&c, 64, zx, zy);
    for (PetscInt i = 0; i < 64; i++) err = PetscMax(err, PetscAbsReal(FMML2P((int)p, B, (zx[i] - lx) / r, (zy[i] - ly) / r) - Exact(&c, zx[i], zy[i])));
    PetscCall(PetscPrintf(PETSC_COMM_SELF, "M2L+L2P p=64 box radius %g: coefficients finite %s\n", (double)r, finite ? "ok" : "FAILED"));
    if (!finite) nfail++;
    /* theta^64 = 5e-20: only rounding remains; the exact sum sees the same rounded coordinates */
    {
      PetscReal fl = FLOOR;
      PetscBool ok = (err / nrm <= fl) ? PETSC_TRUE : PETSC_FALSE;
      PetscCall(PetscSNPrintf(name, sizeof(name), "M2L+L2P p=64 box radius %g", (double)r));
      PetscCall(PetscPrintf(PETSC_COMM_SELF, "%s: error at rounding level %s\n", name, ok ? "ok" : "FAILED"));
      if (verbose || !ok) PetscCall(PetscPrintf(PETSC_COMM_SELF, "    error %.3e, allowed %.3e\n", (double)(err / nrm), (double)fl));
      if (!ok) nfail++;
    }
    PetscCall(PetscFree2(binom, m2l));
    PetscCall(CloudDestroy(&c));
  }
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  const PetscInt ps[] = {2, 4, 8, 12, 16, 24, 32}, np = 7;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-verbose", &verbose, NULL));
  PetscCall(TestRandomCreate(PETSC_COMM_SELF, 7, &rnd));

  PetscCall(TestPairKernel());
  /* P2M: bound (Greengard-Rokhlin Lemma 2.1, with dipoles) ~ ratio^p/(1 - ratio) */
  PetscCall(TestP2M("charges+dipoles r/R=0.5", 0.3, -0.7, 1.0, 1.0, 0.5, PETSC_TRUE, PETSC_TRUE, np, ps, 0.5));
  PetscCall(TestP2M("charges r/R=0.25", -2.0, 5.0, 0.01, 0.01, 0.25, PETSC_TRUE, PETSC_FALSE, np, ps, 0.5));
  PetscCall(TestP2M("dipoles r/R=0.5", 0.0, 0.0, 100.0, 100.0, 0.5, PETSC_FALSE, PETSC_TRUE, np, ps, 0.5));
  PetscCall(TestP2M("scale 2r r/R=0.5", 1.0, 1.0, 0.5, 1.0, 0.5, PETSC_TRUE, PETSC_TRUE, np, ps, 0.5));
  /* M2M: the parent expansion, evaluated on a ring at parent radius / ratio */
  PetscCall(TestM2M(0.25, -0.4, 0.3, 0.5, np, ps, 0.5));
  /* M2L (+ L2P): error ~ theta^p at the boundary of the theta-criterion (Engblom 2011) */
  PetscCall(TestM2L("equal radii theta=0.5", 0.1, 0.1, 0.5, np, ps, 0.5));
  PetscCall(TestM2L("big source theta=0.5", 0.2, 0.05, 0.5, np, ps, 0.5));
  PetscCall(TestM2L("big target theta=0.5", 0.05, 0.2, 0.5, np, ps, 0.5));
  PetscCall(TestM2L("equal radii theta=0.35", 1.0, 1.0, 0.35, np, ps, 0.5));
  PetscCall(TestL2L(0.5, np, ps, 0.5));
  PetscCall(TestChain(0.5, np, ps, 0.5));
  PetscCall(TestExtremeScales());

  PetscCall(PetscPrintf(PETSC_COMM_SELF, "%s\n", nfail ? "SOME CHECKS FAILED" : "all operator checks passed"));
  PetscCall(PetscRandomDestroy(&rnd));
  PetscCall(PetscFinalize());
  return nfail ? 1 : 0;
}

/*TEST
  test:
    args: -malloc_dump
TEST*/
