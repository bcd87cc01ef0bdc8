/*
  The expansion operators of the 2D Laplace FMM in radius-scaled form, shared
  by the CPU backend and (as __host__ __device__ code) the CUDA backend, so
  that each formula is written once.

  Source: Greengard & Rokhlin, J. Comput. Phys. 73 (1987), Lemmas 2.1-2.4,
  rewritten for scaled coefficients A_k = a_k/s^k, B_l = b_l s^l (see
  fmmimpl.h) as in Goude & Engblom (2013), Alg. 3.4b-3.6.  With the scaling
  every power that appears is of a number of modulus < 1 (or <~ 1 for M2M/L2L),
  so high orders neither overflow nor underflow.

  Expansions are arrays of 2(p+1) reals: re[0..p] then im[0..p].
  binom is the (2p+1) x (2p+1) row-major table of binomial coefficients
  C(n,k) = binom[n*(2p+1) + k].
*/
#pragma once
#include <math.h>
#include <stdbool.h>

#if defined(__CUDACC__)
  #define FMM_HD static inline __host__ __device__
#else
  #define FMM_HD static inline
#endif

/* The operator's coefficients, written once for every site that needs them:
   a source of weight w (1 for particles) and unit normal n (NULL: none) of
   the operator alpha D + beta S has the charge *cq = -beta w/(2 pi) and the
   dipole (*cdx, *cdy) = alpha w n/(2 pi) per unit density (the expansions and
   the near field sum Re[q log(z - y) + d/(z - y)]: the plan on either
   backend), and *cdn = alpha w/(2 pi) is the dipole's factor as the diagonal
   (MatGetDiagonal()) applies it to n.(z - y)/|z - y|^2: the same product
   rounded in another order, kept so that no result changes.  Include after
   PETSc's headers (PETSC_PI). */
FMM_HD void FMMSourceCoefficients(double alpha, double beta, double w, const double *n, double *cq, double *cdx, double *cdy, double *cdn)
{
  const double twopi = 2.0 * PETSC_PI;
  *cq                = -beta * w / twopi;
  *cdx               = n ? alpha * w * n[0] / twopi : 0.0;
  *cdy               = n ? alpha * w * n[1] / twopi : 0.0;
  *cdn               = alpha * w / twopi;
}

/* The tables of the operators below, for order p: binom is (2p+1) x (2p+1),
   binom[n*(2p+1) + k] = C(n,k) by Pascal's rule (exact up to 2^53, then the
   same rounded values on every backend); m2l is p x p,
   m2l[(l-1)*p + (k-1)] = C(l+k-1, k-1).  binom must come zeroed. */
static inline void FMMTables(int p, double *binom, double *m2l)
{
  const int nb = 2 * p + 1;
  for (int n = 0; n < nb; n++) {
    binom[n * nb] = 1.0;
    for (int k = 1; k <= n; k++) binom[n * nb + k] = binom[(n - 1) * nb + k - 1] + (k < n ? binom[(n - 1) * nb + k] : 0.0);
  }
  for (int l = 1; l <= p; l++)
    for (int k = 1; k <= p; k++) m2l[(l - 1) * p + (k - 1)] = binom[(l + k - 1) * nb + (k - 1)];
}

/* near-field pair: Re[q log(z - y) + d/(z - y)] with r = z - y; the zero
   distance pair (a target on its own source, or coincident points) is excluded */
#if !defined(__CUDACC__)
  #pragma omp declare simd
#endif
FMM_HD double FMMPairKernel(double rx, double ry, double q, double dx, double dy)
{
  double r2 = rx * rx + ry * ry;
  return r2 == 0.0 ? 0.0 : 0.5 * q * log(r2) + (dx * rx + dy * ry) / r2;
}

/* 1/k for k = 1..p (inv[0] = 0): P2M multiplies by these instead of dividing
   per source and term (a division costs ten or more instructions) */
static inline void FMMInverses(int p, double *inv)
{
  inv[0] = 0.0;
  for (int k = 1; k <= p; k++) inv[k] = 1.0 / k;
}

/* P2M: add one source (charge q, dipole d) at w = (y - c)/s to a multipole:
   A_0 += q, A_k += d/s w^(k-1) - q w^k/k (Greengard & Rokhlin, Lemma 2.1, scaled).
   is = 1/s, inv from FMMInverses(); dip false: d = 0 (no dipole terms) */
FMM_HD void FMMP2MAdd(int p, double is, double wx, double wy, double q, double dx, double dy, bool dip, const double *inv, double *A)
{
  double *Ar = A, *Ai = A + p + 1;
  double  pr = 1.0, pi = 0.0; /* w^(k-1) */
  dx *= is;
  dy *= is;
  Ar[0] += q;
  for (int k = 1; k <= p; k++) {
    if (dip) { /* d w^(k-1) */
      Ar[k] += dx * pr - dy * pi;
      Ai[k] += dx * pi + dy * pr;
    }
    const double t = pr * wx - pi * wy, qk = q * inv[k]; /* w^k */
    pi             = pr * wy + pi * wx;
    pr             = t;
    Ar[k] -= qk * pr;
    Ai[k] -= qk * pi;
  }
}

/* M2M: child multipole A (centre c, scale sc) into parent B (c', sp);
   u = (c - c')/sp, rho = sc/sp:
   B_0 += A_0,  B_l += -A_0 u^l/l + sum_{k=1..l} A_k rho^k u^(l-k) C(l-1,k-1) */
FMM_HD void FMMM2M(int p, const double *binom, double ux, double uy, double rho, const double *A, double *B, double *work)
{
  const int     nb = 2 * p + 1;
  const double *Ar = A, *Ai = A + p + 1;
  double       *Br = B, *Bi = B + p + 1;
  double       *ur = work, *ui = work + p + 1, *tr = work + 2 * (p + 1), *ti = work + 3 * (p + 1);
  double        rk = 1.0;
  ur[0]              = 1.0;
  ui[0]              = 0.0;
  for (int k = 1; k <= p; k++) {
    ur[k] = ur[k - 1] * ux - ui[k - 1] * uy;
    ui[k] = ur[k - 1] * uy + ui[k - 1] * ux;
    rk *= rho;
    tr[k] = Ar[k] * rk;
    ti[k] = Ai[k] * rk;
  }
  Br[0] += Ar[0];
  for (int l = 1; l <= p; l++) {
    double sr = -Ar[0] * ur[l] / l, si = -Ar[0] * ui[l] / l;
    for (int k = 1; k <= l; k++) {
      double c = binom[(l - 1) * nb + (k - 1)];
      sr += c * (tr[k] * ur[l - k] - ti[k] * ui[l - k]);
      si += c * (tr[k] * ui[l - k] + ti[k] * ur[l - k]);
    }
    Br[l] += sr;
    Bi[l] += si;
  }
}

/* M2M for one coefficient l >= 1 of the parent, from one child (the GPU's
   M2M, a thread per coefficient): *sr, *si += the child's term of FMMM2M's
   B_l, -A_0 u^l/l + sum_{k=1..l} C(l-1,k-1) A_k rho^k u^(l-k), with the sum
   over k by Horner's rule in u.  The same terms as FMMM2M in another order,
   so other roundings: each backend keeps its own. */
FMM_HD void FMMM2MCoefficient(int p, const double *binom, int l, double ux, double uy, double rho, const double *A, double *sr, double *si)
{
  const int     nbin = 2 * p + 1;
  const double *Ar = A, *Ai = A + p + 1;
  double        hr = 0.0, hi = 0.0, rk = 1.0, ulr = 1.0, uli = 0.0;
  for (int k = 1; k <= l; k++) { /* Horner: h = h u + C(l-1,k-1) A_k rho^k; and u^l */
    const double cc = binom[(l - 1) * nbin + (k - 1)], tr = hr * ux - hi * uy;
    rk *= rho;
    hi = hr * uy + hi * ux + cc * Ai[k] * rk;
    hr = tr + cc * Ar[k] * rk;
    const double v = ulr * ux - uli * uy;
    uli            = ulr * uy + uli * ux;
    ulr            = v;
  }
  *sr += hr - Ar[0] * ulr / l;
  *si += hi - Ar[0] * uli / l;
}

/* M2L: multipole A (centre c, scale sm) into local B (centre cL, scale sl);
   z0 = c - cL, alpha = sm/z0, beta = sl/z0, T_k = A_k (-alpha)^k:
   B_0 += A_0 log|z0| + sum_k T_k,
   B_l += beta^l (-A_0/l + sum_k T_k C(l+k-1,k-1)).
   Im log(-z0) is dropped: it only changes Im B_0, and Im B_0 never reaches
   the real part of the potential (L2L maps B_0 to B'_0 alone).
   m2l is the p x p matrix m2l[(l-1)*p + (k-1)] = C(l+k-1, k-1). */
FMM_HD void FMMM2L(int p, const double *m2l, double z0x, double z0y, double sm, double sl, const double *A, double *B, double *work)
{
  const double *Ar = A, *Ai = A + p + 1;
  double       *Br = B, *Bi = B + p + 1;
  double       *tr = work, *ti = work + p;
  double        iz = 1.0 / (z0x * z0x + z0y * z0y);
  double        ar = -sm * z0x * iz, ai = sm * z0y * iz; /* -alpha = -sm/z0 */
  double        br = sl * z0x * iz, bi = -sl * z0y * iz; /* beta = sl/z0 */
  double        pr = 1.0, pi = 0.0, s0r = 0.0, s0i = 0.0;
  for (int k = 1; k <= p; k++) {
    double t = pr * ar - pi * ai;
    pi       = pr * ai + pi * ar;
    pr       = t;
    tr[k - 1] = Ar[k] * pr - Ai[k] * pi;
    ti[k - 1] = Ar[k] * pi + Ai[k] * pr;
    s0r += tr[k - 1];
    s0i += ti[k - 1];
  }
  Br[0] += Ar[0] * 0.5 * log(1.0 / iz) + s0r;
  Bi[0] += s0i;
  pr = 1.0;
  pi = 0.0;
  for (int l = 1; l <= p; l++) {
    const double *row = m2l + (l - 1) * p;
    double        yr = -Ar[0] / l, yi = 0.0;
#if !defined(__CUDACC__)
  #pragma omp simd reduction(+ : yr, yi)
#endif
    for (int k = 0; k < p; k++) {
      yr += row[k] * tr[k];
      yi += row[k] * ti[k];
    }
    double t = pr * br - pi * bi; /* beta^l */
    pi       = pr * bi + pi * br;
    pr       = t;
    Br[l] += yr * pr - yi * pi;
    Bi[l] += yr * pi + yi * pr;
  }
}

/* L2L: parent local B (centre c, scale sp) into child local C (c', sc);
   u = (c' - c)/sp, rho = sc/sp:  C_l += rho^l sum_{k=l..p} B_k C(k,l) u^(k-l) */
FMM_HD void FMML2L(int p, const double *binom, double ux, double uy, double rho, const double *B, double *C, double *work)
{
  const int     nb = 2 * p + 1;
  const double *Br = B, *Bi = B + p + 1;
  double       *Cr = C, *Ci = C + p + 1;
  double       *ur = work, *ui = work + p + 1;
  double        rl = 1.0;
  ur[0]              = 1.0;
  ui[0]              = 0.0;
  for (int k = 1; k <= p; k++) {
    ur[k] = ur[k - 1] * ux - ui[k - 1] * uy;
    ui[k] = ur[k - 1] * uy + ui[k - 1] * ux;
  }
  for (int l = 0; l <= p; l++) {
    double sr = 0.0, si = 0.0;
    for (int k = l; k <= p; k++) {
      double c = binom[k * nb + l];
      sr += c * (Br[k] * ur[k - l] - Bi[k] * ui[k - l]);
      si += c * (Br[k] * ui[k - l] + Bi[k] * ur[k - l]);
    }
    Cr[l] += sr * rl;
    Ci[l] += si * rl;
    rl *= rho;
  }
}

/* L2L for one coefficient l of the child (the GPU's L2L, a thread per
   coefficient): *cr, *ci = FMML2L's increment of C_l, rho^l sum_{k=l..p}
   B_k C(k,l) u^(k-l), each power of u the running product of the one
   before, as FMML2L's table holds it */
FMM_HD void FMML2LCoefficient(int p, const double *binom, int l, double ux, double uy, double rho, const double *B, double *cr, double *ci)
{
  const int     nbin = 2 * p + 1;
  const double *Br = B, *Bi = B + p + 1;
  double        sr = 0.0, si = 0.0, pr = 1.0, pi = 0.0, rl = 1.0;
  for (int k = l; k <= p; k++) { /* u^(k-l) as the sequential product, like the CPU's table */
    const double c = binom[k * nbin + l];
    sr += c * (Br[k] * pr - Bi[k] * pi);
    si += c * (Br[k] * pi + Bi[k] * pr);
    const double v = pr * ux - pi * uy;
    pi             = pr * uy + pi * ux;
    pr             = v;
  }
  for (int k = 0; k < l; k++) rl *= rho;
  *cr = sr * rl;
  *ci = si * rl;
}

/* L2P: Re sum_l B_l w^l at w = (z - c)/s, by Horner's rule */
FMM_HD double FMML2P(int p, const double *B, double wx, double wy)
{
  const double *Br = B, *Bi = B + p + 1;
  double        vr = Br[p], vi = Bi[p];
  for (int l = p - 1; l >= 0; l--) {
    double t = vr * wx - vi * wy + Br[l];
    vi       = vr * wy + vi * wx + Bi[l];
    vr       = t;
  }
  return vr;
}

/* M2P: the multipole A (centre c, scale s) at a point z, zx + i zy = z - c
   with |z - c| > s: A_0 log|z - c| + Re sum_{k=1..p} A_k v^k, v = s/(z - c)
   (Greengard & Rokhlin, Lemma 2.1, scaled), by Horner's rule in v */
FMM_HD double FMMM2P(int p, const double *A, double zx, double zy, double s)
{
  const double *Ar = A, *Ai = A + p + 1, r2 = zx * zx + zy * zy, vx = s * zx / r2, vy = -s * zy / r2;
  double        hr = Ar[p], hi = Ai[p];
  for (int k = p - 1; k >= 1; k--) {
    const double t = hr * vx - hi * vy + Ar[k];
    hi             = hr * vy + hi * vx + Ai[k];
    hr             = t;
  }
  return 0.5 * Ar[0] * log(r2) + (hr * vx - hi * vy);
}

/* P2L: add one source (charge q, dipole d) at y to the local expansion B
   (centre cL, scale sl), z0x + i z0y = y - cL with |y - cL| > sl:
   q log(z - y) + d/(z - y) = Re sum_l B_l w^l, w = (z - cL)/sl, with
   B_0 += q log|z0| - d/z0 and B_l += (-q/l - d/z0) beta^l, beta = sl/z0
   (Greengard & Rokhlin, Lemma 2.2 for one source, scaled as M2L) */
FMM_HD void FMMP2LAdd(int p, double z0x, double z0y, double sl, double q, double dx, double dy, double *B)
{
  double      *Br = B, *Bi = B + p + 1;
  const double iz = 1.0 / (z0x * z0x + z0y * z0y), dr = (dx * z0x + dy * z0y) * iz, di = (dy * z0x - dx * z0y) * iz; /* d/z0 */
  const double br = sl * z0x * iz, bi = -sl * z0y * iz;                                                               /* beta */
  double       pr = 1.0, pi = 0.0;
  Br[0] += 0.5 * q * log(1.0 / iz) - dr;
  Bi[0] -= di;
  for (int l = 1; l <= p; l++) {
    const double t = pr * br - pi * bi, cr = -q / l - dr;
    pi = pr * bi + pi * br;
    pr = t;
    Br[l] += cr * pr + di * pi;
    Bi[l] += cr * pi - di * pr;
  }
}

