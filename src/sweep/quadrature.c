/*
  The angular side of MATSWEEP: the quadratures (SNAP's and level-symmetric
  S_N), the angular functions of the flux moments (real spherical harmonics,
  or SNAP's expansion coefficients), and the order in which a sweep visits the
  octants when reflective faces couple them.
*/
#include "sweepimpl.h"

const char *const MatSweepQuadratures[] = {"snap", "levelsym", "MatSweepQuadrature", "MATSWEEP_QUADRATURE_", NULL};
const char *const MatSweepExpansions[]  = {"harmonics", "snap", "MatSweepExpansion", "MATSWEEP_EXPANSION_", NULL};

/*
  Level-symmetric LQ_N (Lewis & Miller, Computational Methods of Neutron
  Transport, 1984, Table 4-1): the positive cosines of the N/2 levels are
  mu_i^2 = mu_1^2 + 2 (i-1) (1 - 3 mu_1^2)/(N - 2), and direction (i, j, k)
  (levels, i + j + k = N/2 + 2) has cosines (mu_i, mu_j, mu_k).  Its weight
  depends on the sorted triple of levels only (its "weight class"); the
  table's seven-digit weights are rescaled so that the octant sums to
  exactly 1/8.
*/
typedef struct {
  PetscInt  N;
  PetscReal mu1;
  PetscInt  nclass;
  PetscInt  cls[8][3]; /* sorted level triples (descending), 1-based */
  PetscReal w[8];
} LQTable;

static const LQTable LQ[] = {
  {2, 0.5773503, 1, {{1, 1, 1}}, {1.0}},
  {4, 0.3500212, 1, {{2, 1, 1}}, {1.0 / 3.0}},
  {6, 0.2666355, 2, {{3, 1, 1}, {2, 2, 1}}, {0.1761263, 0.1572071}},
  {8, 0.2182179, 3, {{4, 1, 1}, {3, 2, 1}, {2, 2, 2}}, {0.1209877, 0.0907407, 0.0925926}},
  {10, 0.1893213, 4, {{5, 1, 1}, {4, 2, 1}, {3, 3, 1}, {3, 2, 2}}, {0.0893031, 0.0725292, 0.0450438, 0.0539281}},
  {12, 0.1672126, 5, {{6, 1, 1}, {5, 2, 1}, {4, 3, 1}, {4, 2, 2}, {3, 3, 2}}, {0.0707626, 0.0558811, 0.0373377, 0.0502819, 0.0258513}},
  {14, 0.1519859, 7, {{7, 1, 1}, {6, 2, 1}, {5, 3, 1}, {5, 2, 2}, {4, 4, 1}, {4, 3, 2}, {3, 3, 3}}, {0.0579970, 0.0489008, 0.0221497, 0.0393867, 0.0407009, 0.0245518, 0.0121325}},
  {16, 0.1389568, 8, {{8, 1, 1}, {7, 2, 1}, {6, 3, 1}, {6, 2, 2}, {5, 4, 1}, {5, 3, 2}, {4, 4, 2}, {4, 3, 3}}, {0.0489872, 0.0413296, 0.0212326, 0.0360486, 0.0256207, 0.0144589, 0.0344958, 0.0085179}},
};

/* The LQ_N directions of octant 0 (all cosines positive) and their weights
   (summing to 1/8): N(N+2)/8 of them, ordered by the level of mu, then of eta */
PetscErrorCode SweepLevelSymmetric(PetscInt N, PetscInt *nang, PetscReal **mu, PetscReal **eta, PetscReal **xi, PetscReal **w)
{
  const LQTable *t = NULL;
  PetscInt       n = N / 2, a = 0;
  PetscReal      lev[SWEEP_MAX_SN / 2], sum = 0;

  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof(LQ) / sizeof(LQ[0]); i++)
    if (LQ[i].N == N) t = &LQ[i];
  PetscCheck(t, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "Level-symmetric order S%" PetscInt_FMT " is not available: expected an even N with 2 <= N <= %d", N, SWEEP_MAX_SN);
  for (PetscInt i = 0; i < n; i++) lev[i] = n == 1 ? t->mu1 : PetscSqrtReal(t->mu1 * t->mu1 + 2.0 * i * (1.0 - 3.0 * t->mu1 * t->mu1) / (N - 2));
  *nang = n * (n + 1) / 2;
  PetscCall(PetscMalloc4(*nang, mu, *nang, eta, *nang, xi, *nang, w));
  for (PetscInt i = 1; i <= n; i++)
    for (PetscInt j = 1; i + j <= n + 1; j++, a++) {
      PetscInt k = n + 2 - i - j, s[3] = {i, j, k}, c;
      for (int p = 0; p < 2; p++) /* sort descending */
        for (int q = 0; q < 2 - p; q++)
          if (s[q] < s[q + 1]) {
            PetscInt x = s[q];
            s[q]       = s[q + 1];
            s[q + 1]   = x;
          }
      for (c = 0; c < t->nclass; c++)
        if (t->cls[c][0] == s[0] && t->cls[c][1] == s[1] && t->cls[c][2] == s[2]) break;
      PetscCheck(c < t->nclass, PETSC_COMM_SELF, PETSC_ERR_PLIB, "S%" PetscInt_FMT ": no weight class for levels (%" PetscInt_FMT ",%" PetscInt_FMT ",%" PetscInt_FMT ")", N, i, j, k);
      (*mu)[a]  = lev[i - 1];
      (*eta)[a] = lev[j - 1];
      (*xi)[a]  = lev[k - 1];
      (*w)[a]   = t->w[c];
      sum += t->w[c];
    }
  for (a = 0; a < *nang; a++) (*w)[a] /= 8 * sum;
  PetscFunctionReturn(0);
}

/* SNAP's quadrature (setup_angle of SNAP's setup.f90): the cosines by the
   same cumulative sums, so that the directions are SNAP's to the last bit */
static PetscErrorCode SnapQuadrature(PetscInt nang, PetscReal *mu, PetscReal *eta, PetscReal *xi, PetscReal *w)
{
  const PetscReal dm = 1.0 / nang;

  PetscFunctionBegin;
  mu[0]  = 0.5 * dm;
  eta[0] = 1.0 - 0.5 * dm;
  for (PetscInt a = 1; a < nang; a++) {
    mu[a]  = mu[a - 1] + dm;
    eta[a] = eta[a - 1] - dm;
  }
  for (PetscInt a = 0; a < nang; a++) {
    xi[a] = PetscSqrtReal(1.0 - (mu[a] * mu[a] + eta[a] * eta[a]));
    w[a]  = 0.125 / nang;
  }
  PetscFunctionReturn(0);
}

/* Real spherical harmonics, Schmidt semi-normalised, polar axis z:
   Y_lm = sqrt(2 (l-|m|)!/(l+|m|)!) P_l^|m|(xi) {cos, sin}(|m| phi) (m > 0: cos,
   m < 0: sin; m = 0 without the root), with P_l^m(xi) = sin^m(theta)
   d^m P_l/dxi^m (no Condon-Shortley phase).  Then (1/4pi) int Y_lm Y_l'm' =
   delta/(2l+1), so phi_lm = sum_d w_d Y_lm psi_d and the scattering source is
   sum_l (2l+1) sigma_s,l sum_m Y_lm phi_lm.  Moment index l^2 + l + m.
   sin^m cos(m phi) = Re (mu + i eta)^m avoids the angles. */
static void Harmonics(PetscInt nmom, PetscReal mu, PetscReal eta, PetscReal xi, PetscReal *Y)
{
  PetscReal dP[SWEEP_MAX_NMOM][SWEEP_MAX_NMOM]; /* dP[l][m] = d^m P_l/dxi^m */
  PetscReal cr = 1.0, ci = 0.0;                 /* (mu + i eta)^m */

  for (PetscInt m = 0; m < nmom; m++) {
    PetscReal df = 1.0;
    for (PetscInt k = 1; k <= m; k++) df *= 2 * k - 1; /* (2m-1)!! */
    dP[m][m] = df;
    if (m + 1 < nmom) dP[m + 1][m] = (2 * m + 1) * xi * df;
    for (PetscInt l = m + 2; l < nmom; l++) dP[l][m] = ((2 * l - 1) * xi * dP[l - 1][m] - (l + m - 1) * dP[l - 2][m]) / (l - m);
  }
  for (PetscInt m = 0; m < nmom; m++) {
    for (PetscInt l = m; l < nmom; l++) {
      PetscReal f = 1.0; /* (l-m)!/(l+m)! */
      for (PetscInt k = l - m + 1; k <= l + m; k++) f /= k;
      if (m == 0) Y[l * l + l] = dP[l][0];
      else {
        const PetscReal c = PetscSqrtReal(2 * f) * dP[l][m];
        Y[l * l + l + m] = c * cr;
        Y[l * l + l - m] = c * ci;
      }
    }
    const PetscReal t = cr * mu - ci * eta;
    ci                = cr * eta + ci * mu;
    cr                = t;
  }
}

/* SNAP's expansion coefficients (expcoeff of SNAP's sn.f90, 3D): moment 0
   is 1; order l >= 1 has 2l+1 moments (s_x mu)^(2l-1) (s_z xi s_y eta)^n,
   n = 0..2l.  Not spherical harmonics: SNAP mocks the cost of an
   anisotropic expansion.  Sources use the same functions, with no (2l+1). */
static void SnapExpansion(PetscInt nmom, PetscReal mu, PetscReal eta, PetscReal xi, PetscReal *Y)
{
  PetscInt m = 1;

  Y[0] = 1.0;
  for (PetscInt l = 1; l < nmom; l++)
    for (PetscInt n = 0; n < 2 * l + 1; n++, m++) Y[m] = PetscPowRealInt(mu, 2 * l - 1) * PetscPowRealInt(xi * eta, n);
}

/*
  SweepQuadratureCreate - the directions and weights of type t and order n
  (nang for SNAP's, N for S_N), with the moment functions of nmom Legendre
  orders (the same in 2D, where the problem only drops the z streaming).
*/
PetscErrorCode SweepQuadratureCreate(MatSweepQuadrature t, PetscInt n, PetscInt nmom, MatSweepExpansion e, SweepQuadrature *Q)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(Q, sizeof(*Q)));
  if (t == MATSWEEP_QUADRATURE_SNAP) {
    Q->nang = n;
    PetscCall(PetscMalloc4(n, &Q->mu, n, &Q->eta, n, &Q->xi, n, &Q->w));
    PetscCall(SnapQuadrature(n, Q->mu, Q->eta, Q->xi, Q->w));
  } else PetscCall(SweepLevelSymmetric(n, &Q->nang, &Q->mu, &Q->eta, &Q->xi, &Q->w));
  Q->ndir = 8 * Q->nang;
  Q->nmom = nmom;
  Q->cmom = nmom * nmom;
  PetscCall(PetscMalloc3(Q->cmom, &Q->lmom, Q->ndir * Q->cmom, &Q->Y, Q->ndir * Q->cmom, &Q->Ys));
  for (PetscInt l = 0; l < nmom; l++)
    for (PetscInt m = 0; m < 2 * l + 1; m++) Q->lmom[l * l + m] = l;
  for (PetscInt oct = 0; oct < 8; oct++) {
    const PetscReal sx = (oct & 1) ? -1 : 1, sy = (oct & 2) ? -1 : 1, sz = (oct & 4) ? -1 : 1;
    for (PetscInt a = 0; a < Q->nang; a++) {
      const PetscInt d  = oct * Q->nang + a;
      PetscReal     *Yd = Q->Y + d * Q->cmom, *Ysd = Q->Ys + d * Q->cmom;
      if (e == MATSWEEP_EXPANSION_HARMONICS) Harmonics(nmom, sx * Q->mu[a], sy * Q->eta[a], sz * Q->xi[a], Yd);
      else SnapExpansion(nmom, sx * Q->mu[a], sy * Q->eta[a], sz * Q->xi[a], Yd);
      for (PetscInt m = 0; m < Q->cmom; m++) Ysd[m] = (e == MATSWEEP_EXPANSION_HARMONICS ? 2 * Q->lmom[m] + 1 : 1) * Yd[m];
    }
  }
  PetscFunctionReturn(0);
}

PetscErrorCode SweepQuadratureDestroy(SweepQuadrature *Q)
{
  PetscFunctionBegin;
  PetscCall(PetscFree4(Q->mu, Q->eta, Q->xi, Q->w));
  PetscCall(PetscFree3(Q->lmom, Q->Y, Q->Ys));
  PetscCall(PetscMemzero(Q, sizeof(*Q)));
  PetscFunctionReturn(0);
}

/*
  The order of the octants in a sweep.  An octant entering through a
  reflective face needs the flux that the mirrored octant leaves through it.
  Per axis: one reflective face: the octants moving away from it wait for
  those moving towards it; both faces reflective: the flux entering through
  the low face is a carried unknown (an input of the product), so the
  octants moving down wait for those moving up (whose flux they meet at the
  high face).  An octant's number of such waits is its level; octants in
  increasing level (then number) satisfy every wait, and those of one level
  may run together.
*/
PetscErrorCode SweepOctantOrder(const MatSweepBoundary bc[6], PetscInt order[8], PetscInt lev[8])
{
  PetscInt n = 0;

  PetscFunctionBegin;
  for (PetscInt oct = 0; oct < 8; oct++) {
    lev[oct] = 0;
    for (PetscInt ax = 0; ax < 3; ax++) {
      const PetscBool down = (oct >> ax) & 1 ? PETSC_TRUE : PETSC_FALSE; /* moving towards the low face */
      const PetscBool rlo = bc[2 * ax] == MATSWEEP_BOUNDARY_REFLECTIVE, rhi = bc[2 * ax + 1] == MATSWEEP_BOUNDARY_REFLECTIVE;
      if ((rlo && rhi && down) || (rlo && !rhi && !down) || (!rlo && rhi && down)) lev[oct]++;
    }
  }
  for (PetscInt l = 0; l <= 3; l++)
    for (PetscInt oct = 0; oct < 8; oct++)
      if (lev[oct] == l) order[n++] = oct;
  PetscFunctionReturn(0);
}
