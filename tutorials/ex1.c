static char help[] = "Solves Laplace Dirichlet problems on smooth curves by second-kind boundary\n\
integral equations, with KSP and a MATFMM (or the same Nystrom matrix, dense).\n\
  -problem <interior,exterior>  interior (one curve) or exterior (one or many curves) Dirichlet problem (default interior)\n\
  -curve <star,ellipse>         shape of each body (default star)\n\
  -star_a <a>                   star r(t) = 1 + a cos(k t): amplitude, |a| < 1 (default 0.25)\n\
  -star_k <k>                   star: number of lobes (default 5)\n\
  -ellipse_a <a>, -ellipse_b <b> ellipse semi-axes (default 1, 0.5)\n\
  -bodies <K>                   exterior: K copies of the curve, rotated, on a square grid (default 1)\n\
  -spacing <s>                  exterior: distance between neighbouring body centres, > 2 rmax (default 3 rmax)\n\
  -n <n>                        points per curve, periodic trapezoid rule (default 400); N = K n unknowns\n\
  -tol <tol>                    fail unless the error at the evaluation points is at most tol (default: no check)\n\
  -renumber <bool>              number each rank's unknowns as its part of the FMM's tree holds them, so that a\n\
                                product moves no density between ranks (MatFMMGetTreePartition(); default false)\n\
  -mat_type <fmm,dense>         FMM (default) or the explicitly assembled Nystrom matrix\n\
  -mat_fmm_eps, -mat_fmm_p, -mat_fmm_ct, -mat_fmm_layout, ... tune the FMM of the operator\n\
  -log_mat_fmm_eps, ...         exterior: tune the FMM of the logarithmic term (default eps: as -mat_fmm_eps)\n\
  -eval_mat_fmm_eps, ...        tune the FMMs that evaluate the solution (default eps 1e-13)\n\
  -ksp_type, -ksp_rtol, -pc_type, ... the Krylov solver (default GMRES(100), rtol 1e-10; no preconditioner for\n\
                                the interior problem, the body-mean preconditioner, right side, for the exterior one)\n\n";

/*
  ex1: Laplace boundary-integral solves with KSP and -mat_type fmm.

  Geometry.  K bodies, each a smooth closed curve gamma(t), t in [0, 2 pi),
  counterclockwise: the star r(t) = 1 + a cos(k t) or an ellipse, rotated and
  placed on a square grid.  The periodic trapezoid rule with n points
  t_j = 2 pi j / n gives the Nystrom nodes x_j = gamma(t_j), outward unit
  normals n_j = (y', -x')/|gamma'|, curvatures kappa_j = (x'y'' - y'x'')/|gamma'|^3
  (> 0 where convex) and weights w_j = 2 pi |gamma'(t_j)| / n.  The rule is
  spectrally accurate for smooth periodic integrands, which is why the
  formulations below use only kernels that are smooth on the curve.

  Double layer.  With G(x, y) = -(1/2 pi) log|x - y| and outward normals,
    (D s)(x) = int_Gamma dG/dn_y s ds_y = (1/2 pi) int n_y.(x - y)/|x - y|^2 s(y) ds_y,
  which is MATFMM_KERNEL_DOUBLE.  D[1] = -1 inside a curve, 0 outside, and
  the jump relations for x on Gamma are
    u_inside(x)  = -1/2 s(x) + (D s)(x),     u_outside(x) = +1/2 s(x) + (D s)(x)
  (D s on Gamma being the principal value).  The kernel is smooth on a smooth
  curve: as y -> x along Gamma, n_y.(x - y)/|x - y|^2 -> -kappa(x)/2 (write
  y = x + s t - s^2 kappa n / 2 and n_y = n + s kappa t), so the Nystrom
  matrix has the diagonal entry -kappa_i w_i / (4 pi).  MATFMM takes the kernel
  as 0 at zero distance, so the tutorial adds these entries, and the +-1/2,
  with MatDiagonalSet(ADD_VALUES) and MatShift().  Check: on a circle of
  radius R the kernel is -1/(4 pi R) everywhere, and its integral is -1/2.

  Interior problem (one curve): u = D s in the domain, (-1/2 I + D) s = f on
  Gamma.  Uniquely solvable (Kress, Linear Integral Equations, ch. 6): if
  (-1/2 I + D) s = 0, u = D s vanishes inside, so its normal derivative, which
  is continuous across Gamma, vanishes; outside u is then the decaying
  (O(1/|z|)) solution of a Neumann problem with zero data, u = 0, and
  s = u_outside - u_inside = 0.

  Exterior problem (K curves, multiply connected): the plain u = D s fails,
  since 1/2 I + D has the K-dimensional null space of functions constant on
  each curve, and D s has no logarithmic term at infinity and no flux through
  any curve.  The classical completion (Mikhlin; used with the FMM e.g. by
  Greengard & Moura, Acta Numerica 1994) adds one logarithmic source per body,
  at a point c_k inside body k, whose strength is the integral of the density
  over that body; we also scale the logarithm by a length R0 (see below):
    u(z) = (D s)(z) + sum_k A_k log(|z - c_k| / R0),  A_k = int_{Gamma_k} s ds,
    1/2 s + D s + sum_k A_k log(|x - c_k| / R0) = f   on Gamma.
  All kernels are smooth on Gamma (no log-singular single layer, which the
  trapezoid rule would integrate only to O(h log h)).  It represents the
  solutions with u = A log(|z|/R0) + O(1/|z|) at infinity, A = sum A_k (the
  total flux / 2 pi).  Uniqueness: if f = 0, u vanishes on Gamma and grows
  like A log|z|, so u = A g, g = log|z| - log cap + o(1) the Green's function
  of the exterior with pole at infinity; comparing constants at infinity,
  A (log R0 - log cap) = 0.  The (logarithmic) capacity of the bodies is at
  most the radius rho of a disc about 0 holding them, and we take R0 = e rho,
  so A = 0 and u = 0 outside.  Then u has no flux through Gamma_k, nor has
  D s (harmonic inside, normal derivative continuous across Gamma), nor the
  logarithms of the other bodies, so 2 pi A_k = 0 for every k; D s = 0
  outside makes s constant on each curve, and A_k = 0 makes it 0.  (With
  R0 = 1, the textbook form, the equation is singular when the capacity is 1,
  e.g. for the unit circle: s = 1 is then a null vector.)
  Discretely the rank-K term is sum_k log(|x_i - c_k|/R0) sum_{j in body k} w_j s_j.
  With -mat_type fmm it is applied by a MatShell around the MATFMM: the K
  sums, then a second MATFMM (single layer, sources c_k, targets x_i) for the
  logarithms, so a product stays O(N + K); with -mat_type dense it is
  assembled into the matrix.

  Preconditioner (exterior).  1/2 I + D annihilates the K body-constant
  functions, so on them the operator is the rank-K term alone, which maps
  the body means to sums of logarithms: nearly the K x K matrix
  2 G diag|Gamma_k|, G_jk = log(|c_j - c_k|/R0), a log-kernel matrix whose
  eigenvalues spread as K grows (with n = 64, rtol 1e-10, GMRES alone took
  41, 79, 121 iterations for K = 25, 100, 400).  The right preconditioner P
  replaces the mean of each body by the solution of that K x K system (LU
  once, on every rank: O(K^3), fine for thousands of bodies), which moves
  those eigenvalues near 1/2: 21, 22, 22 iterations (-pc_type none turns it
  off).  It is applied on the right, so s = P y is the same Nystrom
  solution and the residual is the true one.

  Test solutions.  u = sum_m q_m log(|z - p_m| / R0), harmonic away from the
  charges p_m: outside the curve for the interior problem; one charge inside
  each body (q varying in sign and size, so the total flux is not 0) for the
  exterior problem, where this u is in the class above.  The error is
  max_i |u_h(z_i) - u(z_i)| / max_i |u(z_i)| over evaluation points z_i
  away from the boundary (interior: two scaled copies of the curve, 0.3 and
  0.6; exterior: a ring of radius spacing/2 around each body).  u_h is
  evaluated by MATFMMs with separate targets (options prefix eval_).

  Output ends with
    summary: N=<unknowns> type=<mat type> its=<KSP iterations> error=<e> setup_s=<t> solve_s=<t>
  setup_s covers creating and assembling the operator (the FMM tree, or the
  dense matrix) and setting up the KSP (with the exterior preconditioner's
  LU); solve_s is KSPSolve.  -log_view shows the FMM phases
  (FMMP2M, FMMM2L, FMMP2P, ...) per stage.
*/
#include <petscfmm.h>
#include <petscksp.h>

typedef enum {
  PROBLEM_INTERIOR,
  PROBLEM_EXTERIOR
} ProblemType;
static const char *const ProblemTypes[] = {"interior", "exterior", "ProblemType", "PROBLEM_", NULL};
typedef enum {
  CURVE_STAR,
  CURVE_ELLIPSE
} CurveType;
static const char *const CurveTypes[] = {"star", "ellipse", "CurveType", "CURVE_", NULL};

typedef struct {
  ProblemType problem;
  CurveType   curve;
  PetscReal   star_a, ell_a, ell_b;
  PetscInt    star_k;
  PetscInt    K, n, N;              /* bodies, points per body, unknowns */
  PetscReal   spacing;              /* distance of neighbouring centres on the grid */
  PetscReal   rmin, rmax;           /* of one body about its centre */
  PetscReal   logR0;                /* log of the length scale of the exterior logarithms */
  PetscReal  *xy, *nrm, *w, *kappa; /* all N nodes, on every rank (2N, 2N, N, N) */
  PetscInt   *body;                 /* the body of each node (N) */
  PetscReal  *ctr;                  /* body centres c_k (2K) */
  PetscInt    M;                    /* evaluation points */
  PetscReal  *exy;                  /* (2M) */
  PetscInt    nq;                   /* charges of the exact solution */
  PetscReal  *qxy, *q;              /* (2nq), (nq) */
} AppCtx;

/* the exterior operator: s -> A s + sum_k log(|x_i - c_k|/R0) (sum_{j in body k} w_j s_j) */
typedef struct {
  Mat              A;    /* MATFMM: 1/2 I + D (diagonal terms included) */
  Mat              L;    /* MATFMM N x K: log|x_i - c_k| a_k */
  Vec              a;    /* K body integrals, layout of the columns of L */
  PetscReal       *sums; /* K, work */
  PetscInt         rstart, nloc, K, kstart, kloc;
  PetscReal        logR0;
  const PetscReal *w;
  const PetscInt  *body;
} ExtCtx;

static PetscErrorCode ProcessOptions(AppCtx *user)
{
  PetscFunctionBegin;
  user->problem = PROBLEM_INTERIOR;
  user->curve   = CURVE_STAR;
  user->star_a  = 0.25;
  user->star_k  = 5;
  user->ell_a   = 1.0;
  user->ell_b   = 0.5;
  user->K       = 1;
  user->n       = 400;
  user->spacing = -1;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "ex1: Laplace Dirichlet problems by boundary integral equations", NULL);
  PetscCall(PetscOptionsEnum("-problem", "Dirichlet problem", NULL, ProblemTypes, (PetscEnum)user->problem, (PetscEnum *)&user->problem, NULL));
  PetscCall(PetscOptionsEnum("-curve", "Shape of each body", NULL, CurveTypes, (PetscEnum)user->curve, (PetscEnum *)&user->curve, NULL));
  PetscCall(PetscOptionsReal("-star_a", "Star r(t) = 1 + a cos(k t): amplitude", NULL, user->star_a, &user->star_a, NULL));
  PetscCall(PetscOptionsInt("-star_k", "Star: number of lobes", NULL, user->star_k, &user->star_k, NULL));
  PetscCall(PetscOptionsReal("-ellipse_a", "Ellipse: semi-axis along x", NULL, user->ell_a, &user->ell_a, NULL));
  PetscCall(PetscOptionsReal("-ellipse_b", "Ellipse: semi-axis along y", NULL, user->ell_b, &user->ell_b, NULL));
  PetscCall(PetscOptionsInt("-bodies", "Number of bodies (exterior problem)", NULL, user->K, &user->K, NULL));
  PetscCall(PetscOptionsReal("-spacing", "Distance between neighbouring body centres", NULL, user->spacing, &user->spacing, NULL));
  PetscCall(PetscOptionsInt("-n", "Points per curve", NULL, user->n, &user->n, NULL));
  PetscOptionsEnd();

  PetscCheck(user->n >= 8, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-n %" PetscInt_FMT " must be >= 8", user->n);
  PetscCheck(user->K >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-bodies %" PetscInt_FMT " must be >= 1", user->K);
  PetscCheck(user->problem == PROBLEM_EXTERIOR || user->K == 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "The interior problem is posed on one curve; -bodies %" PetscInt_FMT " needs -problem exterior", user->K);
  if (user->curve == CURVE_STAR) {
    PetscCheck(PetscAbsReal(user->star_a) < 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-star_a %g: need |a| < 1 for a simple curve", (double)user->star_a);
    PetscCheck(user->star_k >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-star_k %" PetscInt_FMT " must be >= 0", user->star_k);
    user->rmin = 1 - PetscAbsReal(user->star_a);
    user->rmax = 1 + PetscAbsReal(user->star_a);
  } else {
    PetscCheck(user->ell_a > 0 && user->ell_b > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "Ellipse semi-axes %g, %g must be > 0", (double)user->ell_a, (double)user->ell_b);
    user->rmin = PetscMin(user->ell_a, user->ell_b);
    user->rmax = PetscMax(user->ell_a, user->ell_b);
  }
  if (user->spacing < 0) user->spacing = 3 * user->rmax;
  PetscCheck(user->spacing > 2 * user->rmax, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-spacing %g: bodies of radius up to %g would overlap; need spacing > %g", (double)user->spacing, (double)user->rmax, (double)(2 * user->rmax));
  PetscCheck(user->K <= PETSC_MAX_INT / user->n, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "K n too large for PetscInt");
  user->N = user->K * user->n;
  PetscFunctionReturn(0);
}

/* gamma(t) of one body about its centre, unrotated, and its first two derivatives */
static void CurveEval(const AppCtx *user, PetscReal t, PetscReal g[2], PetscReal d1[2], PetscReal d2[2])
{
  PetscReal c = PetscCosReal(t), s = PetscSinReal(t);

  if (user->curve == CURVE_STAR) {
    PetscReal k = (PetscReal)user->star_k, a = user->star_a;
    PetscReal r = 1 + a * PetscCosReal(k * t), r1 = -a * k * PetscSinReal(k * t), r2 = -a * k * k * PetscCosReal(k * t);
    g[0]  = r * c;
    g[1]  = r * s;
    d1[0] = r1 * c - r * s;
    d1[1] = r1 * s + r * c;
    d2[0] = r2 * c - 2 * r1 * s - r * c;
    d2[1] = r2 * s + 2 * r1 * c - r * s;
  } else {
    g[0]  = user->ell_a * c;
    g[1]  = user->ell_b * s;
    d1[0] = -user->ell_a * s;
    d1[1] = user->ell_b * c;
    d2[0] = -user->ell_a * c;
    d2[1] = -user->ell_b * s;
  }
}

/* rotation of body k: distinct angles make the copies differ (golden angle) */
static PetscReal BodyAngle(PetscInt k)
{
  return 2.399963229728653 * (PetscReal)k;
}

/* Nodes, normals, curvatures, weights, centres, evaluation points and charges.
   Every rank builds all of it (cheap, O(N)), so any rank count solves the same problem. */
static PetscErrorCode CreateGeometry(AppCtx *user)
{
  PetscInt  K = user->K, n = user->n, nx, ny;
  PetscReal rho2 = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc5(2 * user->N, &user->xy, 2 * user->N, &user->nrm, user->N, &user->w, user->N, &user->kappa, user->N, &user->body));
  PetscCall(PetscMalloc1(2 * K, &user->ctr));
  nx = (PetscInt)PetscCeilReal(PetscSqrtReal((PetscReal)K) - 1e-12);
  ny = (K + nx - 1) / nx;
  for (PetscInt k = 0; k < K; k++) {
    PetscReal cr = PetscCosReal(BodyAngle(k)), sr = PetscSinReal(BodyAngle(k));

    user->ctr[2 * k]     = ((k % nx) - 0.5 * (nx - 1)) * user->spacing;
    user->ctr[2 * k + 1] = ((k / nx) - 0.5 * (ny - 1)) * user->spacing;
    for (PetscInt j = 0; j < n; j++) {
      PetscInt  i = k * n + j;
      PetscReal g[2], d1[2], d2[2], sp, tx, ty;

      CurveEval(user, 2 * PETSC_PI * j / n, g, d1, d2);
      sp                   = PetscSqrtReal(d1[0] * d1[0] + d1[1] * d1[1]);
      user->xy[2 * i]      = user->ctr[2 * k] + cr * g[0] - sr * g[1];
      user->xy[2 * i + 1]  = user->ctr[2 * k + 1] + sr * g[0] + cr * g[1];
      tx                   = (cr * d1[0] - sr * d1[1]) / sp; /* unit tangent, rotated */
      ty                   = (sr * d1[0] + cr * d1[1]) / sp;
      user->nrm[2 * i]     = ty; /* outward for a counterclockwise curve */
      user->nrm[2 * i + 1] = -tx;
      user->kappa[i]       = (d1[0] * d2[1] - d1[1] * d2[0]) / (sp * sp * sp);
      user->w[i]           = 2 * PETSC_PI * sp / n;
      user->body[i]        = k;
      rho2                 = PetscMax(rho2, user->xy[2 * i] * user->xy[2 * i] + user->xy[2 * i + 1] * user->xy[2 * i + 1]);
    }
  }
  /* the grid is centred at 0, so all bodies lie in the disc of radius rho about 0 */
  user->logR0 = 1 + 0.5 * PetscLogReal(rho2);

  if (user->problem == PROBLEM_INTERIOR) {
    const PetscInt  m    = 32;
    const PetscReal f[2] = {0.3, 0.6}, qv[4] = {1.0, -0.7, 0.45, 0.8};

    /* evaluation points: the curve scaled by 0.3 and 0.6 (inside, as the curves are star-shaped about 0) */
    user->M = 2 * m;
    PetscCall(PetscMalloc1(2 * user->M, &user->exy));
    for (PetscInt r = 0; r < 2; r++)
      for (PetscInt j = 0; j < m; j++) {
        PetscReal g[2], d1[2], d2[2];
        CurveEval(user, 2 * PETSC_PI * (j + 0.5) / m, g, d1, d2);
        user->exy[2 * (r * m + j)]     = f[r] * g[0];
        user->exy[2 * (r * m + j) + 1] = f[r] * g[1];
      }
    /* charges outside, at distance >= rmax/2 from the curve */
    user->nq = 4;
    PetscCall(PetscMalloc2(2 * user->nq, &user->qxy, user->nq, &user->q));
    for (PetscInt i = 0; i < user->nq; i++) {
      PetscReal phi        = 0.4 + 2 * PETSC_PI * i / user->nq + 0.3 * i * i;
      user->qxy[2 * i]     = 1.5 * user->rmax * PetscCosReal(phi);
      user->qxy[2 * i + 1] = 1.5 * user->rmax * PetscSinReal(phi);
      user->q[i]           = qv[i];
    }
  } else {
    const PetscInt m = 16;

    /* evaluation points: a ring of radius spacing/2 about each centre, halfway to the neighbours */
    user->M = m * K;
    PetscCall(PetscMalloc1(2 * user->M, &user->exy));
    for (PetscInt k = 0; k < K; k++)
      for (PetscInt j = 0; j < m; j++) {
        PetscReal phi                  = 2 * PETSC_PI * (j + 0.5) / m;
        user->exy[2 * (k * m + j)]     = user->ctr[2 * k] + 0.5 * user->spacing * PetscCosReal(phi);
        user->exy[2 * (k * m + j) + 1] = user->ctr[2 * k + 1] + 0.5 * user->spacing * PetscSinReal(phi);
      }
    /* one charge inside each body, off its centre c_k (so the log term of the representation differs from it) */
    user->nq = K;
    PetscCall(PetscMalloc2(2 * user->nq, &user->qxy, user->nq, &user->q));
    for (PetscInt k = 0; k < K; k++) {
      PetscReal phi        = 1.0 + 2.2 * k;
      user->qxy[2 * k]     = user->ctr[2 * k] + 0.4 * user->rmin * PetscCosReal(phi);
      user->qxy[2 * k + 1] = user->ctr[2 * k + 1] + 0.4 * user->rmin * PetscSinReal(phi);
      user->q[k]           = 0.3 + PetscCosReal(1.7 * k + 0.2);
    }
  }
  PetscFunctionReturn(0);
}

static PetscErrorCode DestroyGeometry(AppCtx *user)
{
  PetscFunctionBegin;
  PetscCall(PetscFree5(user->xy, user->nrm, user->w, user->kappa, user->body));
  PetscCall(PetscFree(user->ctr));
  PetscCall(PetscFree(user->exy));
  PetscCall(PetscFree2(user->qxy, user->q));
  PetscFunctionReturn(0);
}

/* the exact solution: u(z) = sum_m q_m log(|z - p_m| / R0) */
static PetscReal Exact(const AppCtx *user, const PetscReal z[2])
{
  PetscReal u = 0;

  for (PetscInt m = 0; m < user->nq; m++) {
    PetscReal dx = z[0] - user->qxy[2 * m], dy = z[1] - user->qxy[2 * m + 1];
    u += user->q[m] * (0.5 * PetscLogReal(dx * dx + dy * dy) - user->logR0);
  }
  return u;
}

/* first global index and local size of a PETSC_DECIDE split of n items */
static PetscErrorCode Split(PetscInt n, PetscInt *start, PetscInt *nloc)
{
  PetscFunctionBegin;
  *nloc = PETSC_DECIDE;
  PetscCall(PetscSplitOwnership(PETSC_COMM_WORLD, nloc, &n));
  PetscCallMPI(MPI_Scan(nloc, start, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  *start -= *nloc;
  PetscFunctionReturn(0);
}

/* MATFMM evaluating sum_k a_k log|z - c_k| at the given local targets (m of them):
   the single layer -(1/2pi) log|z - c| w a with weights w = -2 pi; tolerance eps
   (before the options with this prefix; <= 0: the MATFMM default) */
static PetscErrorCode CreateLogMatrix(const AppCtx *user, PetscInt m, const PetscReal *txy, const char *prefix, PetscReal eps, Mat *L)
{
  PetscInt   kstart, kloc;
  PetscReal *wts;

  PetscFunctionBegin;
  PetscCall(Split(user->K, &kstart, &kloc));
  PetscCall(MatCreate(PETSC_COMM_WORLD, L));
  PetscCall(MatSetSizes(*L, m, kloc, PETSC_DETERMINE, user->K));
  PetscCall(MatSetOptionsPrefix(*L, prefix));
  PetscCall(MatSetType(*L, MATFMM));
  PetscCall(PetscMalloc1(kloc, &wts));
  for (PetscInt k = 0; k < kloc; k++) wts[k] = -2 * PETSC_PI;
  PetscCall(MatFMMSetSources(*L, kloc, user->ctr + 2 * kstart, NULL, wts));
  PetscCall(PetscFree(wts));
  PetscCall(MatFMMSetTargets(*L, m, txy));
  PetscCall(MatFMMSetKernel(*L, MATFMM_KERNEL_SINGLE, 0, 0));
  if (eps > 0) PetscCall(MatFMMSetTolerance(*L, eps));
  PetscCall(MatSetFromOptions(*L));
  PetscCall(MatAssemblyBegin(*L, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*L, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* a_k = sum over body k of w_j s_j (all K on every rank), copied into the local part of e->a */
static PetscErrorCode BodyIntegrals(ExtCtx *e, Vec s)
{
  const PetscScalar *sa;
  PetscScalar       *aa;

  PetscFunctionBegin;
  PetscCall(PetscArrayzero(e->sums, e->K));
  PetscCall(VecGetArrayRead(s, &sa));
  for (PetscInt i = 0; i < e->nloc; i++) e->sums[e->body[e->rstart + i]] += e->w[e->rstart + i] * sa[i];
  PetscCall(VecRestoreArrayRead(s, &sa));
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, e->sums, (PetscMPIInt)e->K, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
  PetscCall(VecGetArrayWrite(e->a, &aa));
  for (PetscInt k = 0; k < e->kloc; k++) aa[k] = e->sums[e->kstart + k];
  PetscCall(VecRestoreArrayWrite(e->a, &aa));
  PetscFunctionReturn(0);
}

/* y += sum_k a_k log(|z - c_k|/R0) at the rows of L, a = the current body integrals */
static PetscErrorCode AddLogTerm(ExtCtx *e, Mat L, Vec y)
{
  PetscReal total = 0;

  PetscFunctionBegin;
  for (PetscInt k = 0; k < e->K; k++) total += e->sums[k];
  PetscCall(MatMultAdd(L, e->a, y, y));
  PetscCall(VecShift(y, -e->logR0 * total));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatMult_Exterior(Mat S, Vec x, Vec y)
{
  ExtCtx *e;

  PetscFunctionBegin;
  PetscCall(MatShellGetContext(S, &e));
  PetscCall(MatMult(e->A, x, y));
  PetscCall(BodyIntegrals(e, x));
  PetscCall(AddLogTerm(e, e->L, y));
  PetscFunctionReturn(0);
}

/* Right preconditioner of the exterior problem (see the header): on each body
   the mean of the density is replaced by the solution of a K x K system,
     P y = y - Pi y + sum_k 1_k g_k,   (2 G |Gamma|) g = ybar,   ybar_k = mean of y over body k,
   G_jk = log(|c_j - c_k|/R0), G_kk = mean over body k of log(|x - c_k|/R0). */
typedef struct {
  PetscInt         K, rstart, nloc;
  const PetscReal *w;
  const PetscInt  *body;
  PetscReal       *len;  /* |Gamma_k| */
  PetscReal       *mean; /* K, work */
  Mat              H;    /* 2 G diag(|Gamma|), LU-factored, redundantly on every rank (K is small) */
  Vec              hb, hg;
} BodyPC;

static PetscErrorCode BodyPCSetUp(const AppCtx *user, PetscInt rstart, PetscInt nloc, BodyPC *b)
{
  PetscInt     K = user->K;
  PetscScalar *h;
  PetscReal   *g;

  PetscFunctionBegin;
  b->K      = K;
  b->rstart = rstart;
  b->nloc   = nloc;
  b->w      = user->w;
  b->body   = user->body;
  PetscCall(PetscCalloc2(K, &b->len, K, &b->mean));
  PetscCall(PetscCalloc1(K, &g));
  for (PetscInt i = 0; i < user->N; i++) {
    const PetscInt k  = user->body[i];
    PetscReal      dx = user->xy[2 * i] - user->ctr[2 * k], dy = user->xy[2 * i + 1] - user->ctr[2 * k + 1];
    b->len[k] += user->w[i];
    g[k] += user->w[i] * (0.5 * PetscLogReal(dx * dx + dy * dy) - user->logR0);
  }
  PetscCall(MatCreateSeqDense(PETSC_COMM_SELF, K, K, NULL, &b->H));
  PetscCall(MatSetOptionsPrefix(b->H, "bodypc_")); /* keeps it out of -mat_view */
  PetscCall(MatDenseGetArrayWrite(b->H, &h)); /* column-major, leading dimension K */
  for (PetscInt k = 0; k < K; k++)
    for (PetscInt j = 0; j < K; j++) {
      PetscReal dx = user->ctr[2 * j] - user->ctr[2 * k], dy = user->ctr[2 * j + 1] - user->ctr[2 * k + 1];
      h[j + k * K] = 2 * (j == k ? g[k] : b->len[k] * (0.5 * PetscLogReal(dx * dx + dy * dy) - user->logR0));
    }
  PetscCall(MatDenseRestoreArrayWrite(b->H, &h));
  PetscCall(PetscFree(g));
  PetscCall(MatAssemblyBegin(b->H, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(b->H, MAT_FINAL_ASSEMBLY));
  PetscCall(MatLUFactor(b->H, NULL, NULL, NULL));
  PetscCall(MatCreateVecs(b->H, &b->hg, &b->hb));
  PetscFunctionReturn(0);
}

static PetscErrorCode BodyPCApply(PC pc, Vec x, Vec y)
{
  BodyPC            *b;
  const PetscScalar *xa, *ga;
  PetscScalar       *ya, *ba;

  PetscFunctionBegin;
  PetscCall(PCShellGetContext(pc, &b));
  PetscCall(PetscArrayzero(b->mean, b->K));
  PetscCall(VecGetArrayRead(x, &xa));
  for (PetscInt i = 0; i < b->nloc; i++) b->mean[b->body[b->rstart + i]] += b->w[b->rstart + i] * xa[i];
  PetscCall(MPIU_Allreduce(MPI_IN_PLACE, b->mean, (PetscMPIInt)b->K, MPIU_REAL, MPIU_SUM, PetscObjectComm((PetscObject)pc)));
  PetscCall(VecGetArrayWrite(b->hb, &ba));
  for (PetscInt k = 0; k < b->K; k++) ba[k] = b->mean[k] /= b->len[k];
  PetscCall(VecRestoreArrayWrite(b->hb, &ba));
  PetscCall(MatSolve(b->H, b->hb, b->hg));
  PetscCall(VecGetArrayRead(b->hg, &ga));
  PetscCall(VecGetArrayWrite(y, &ya));
  for (PetscInt i = 0; i < b->nloc; i++) {
    PetscInt k = b->body[b->rstart + i];
    ya[i]      = xa[i] - b->mean[k] + ga[k];
  }
  PetscCall(VecRestoreArrayWrite(y, &ya));
  PetscCall(VecRestoreArrayRead(b->hg, &ga));
  PetscCall(VecRestoreArrayRead(x, &xa));
  PetscFunctionReturn(0);
}

static PetscErrorCode BodyPCDestroy(BodyPC *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree2(b->len, b->mean));
  PetscCall(MatDestroy(&b->H));
  PetscCall(VecDestroy(&b->hb));
  PetscCall(VecDestroy(&b->hg));
  PetscFunctionReturn(0);
}

/* The same Nystrom matrix, entry by entry, without its diagonal (added afterwards as for MATFMM) */
static PetscErrorCode AssembleExplicit(const AppCtx *user, Mat A)
{
  PetscInt     rstart, rend, *cols;
  PetscScalar *vals;

  PetscFunctionBegin;
  PetscCall(MatSetUp(A));
  PetscCall(MatGetOwnershipRange(A, &rstart, &rend));
  PetscCall(PetscMalloc2(user->N, &cols, user->N, &vals));
  for (PetscInt j = 0; j < user->N; j++) cols[j] = j;
  for (PetscInt i = rstart; i < rend; i++) {
    const PetscReal *x = &user->xy[2 * i];
    for (PetscInt j = 0; j < user->N; j++) {
      PetscReal dx = x[0] - user->xy[2 * j], dy = x[1] - user->xy[2 * j + 1];
      vals[j] = j == i ? 0.0 : (user->nrm[2 * j] * dx + user->nrm[2 * j + 1] * dy) / (dx * dx + dy * dy) * user->w[j] / (2 * PETSC_PI);
      if (user->problem == PROBLEM_EXTERIOR) {
        const PetscReal *c  = &user->ctr[2 * user->body[j]];
        PetscReal        cx = x[0] - c[0], cy = x[1] - c[1];
        vals[j] += (0.5 * PetscLogReal(cx * cx + cy * cy) - user->logR0) * user->w[j];
      }
    }
    PetscCall(MatSetValues(A, 1, &i, user->N, cols, vals, INSERT_VALUES));
  }
  PetscCall(PetscFree2(cols, vals));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* The operator -+1/2 I + D on this rank's nodes [rstart, rstart + nloc): a MATFMM, or the dense Nystrom
   matrix with -mat_type dense.  The type is set to MATFMM before MatSetFromOptions() so that -mat_type
   can override it; the MatFMMSet...() calls do nothing when the type is changed. */
static PetscErrorCode CreateOperator(const AppCtx *user, PetscInt rstart, PetscInt nloc, Mat *A, PetscBool *isfmm)
{
  MatType mtype;

  PetscFunctionBegin;
  PetscCall(MatCreate(PETSC_COMM_WORLD, A));
  PetscCall(MatSetSizes(*A, nloc, nloc, user->N, user->N));
  PetscCall(MatSetType(*A, MATFMM));
  PetscCall(MatFMMSetSources(*A, nloc, user->xy + 2 * rstart, user->nrm + 2 * rstart, user->w + rstart));
  PetscCall(MatFMMSetKernel(*A, MATFMM_KERNEL_DOUBLE, 0, 0));
  PetscCall(MatSetFromOptions(*A));
  PetscCall(MatGetType(*A, &mtype));
  PetscCall(PetscObjectTypeCompare((PetscObject)*A, MATFMM, isfmm));
  if (*isfmm) {
    PetscCall(MatAssemblyBegin(*A, MAT_FINAL_ASSEMBLY)); /* builds the tree */
    PetscCall(MatAssemblyEnd(*A, MAT_FINAL_ASSEMBLY));
  } else {
    char *dense;
    PetscCall(PetscStrstr(mtype, "dense", &dense));
    PetscCheck(dense, PETSC_COMM_WORLD, PETSC_ERR_SUP, "-mat_type %s: this tutorial makes fmm or dense matrices", mtype);
    PetscCall(AssembleExplicit(user, *A));
  }
  /* the Nystrom diagonal, for both types: -+1/2 from the jump relation and the kernel's limit -kappa w/(4 pi) */
  PetscCall(MatShift(*A, user->problem == PROBLEM_INTERIOR ? -0.5 : 0.5));
  {
    Vec          d;
    PetscScalar *da;
    PetscCall(MatCreateVecs(*A, &d, NULL));
    PetscCall(VecGetArrayWrite(d, &da));
    for (PetscInt i = 0; i < nloc; i++) da[i] = -user->kappa[rstart + i] * user->w[rstart + i] / (4 * PETSC_PI);
    PetscCall(VecRestoreArrayWrite(d, &da));
    PetscCall(MatDiagonalSet(*A, d, ADD_VALUES));
    PetscCall(VecDestroy(&d));
  }
  PetscFunctionReturn(0);
}

/* -renumber: the nodes numbered anew so that each rank's unknowns are those its part of A's tree holds
   (MatFMMGetTreePartition(), in the tree's order): every rank's set, gathered in rank order, gives the new
   number k of old node old[k], and each rank's unknowns are again one range [rstart, rstart + nloc).  The
   problem is the same; a product then moves no density or potential between ranks.  (Here every rank
   holds all nodes; a program whose nodes are distributed would move them with a PetscSF.) */
static PetscErrorCode Renumber(AppCtx *user, Mat A, PetscInt *rstart, PetscInt *nloc)
{
  const PetscInt  N = user->N;
  IS              mine, all;
  const PetscInt *old;
  PetscReal      *xy, *nrm, *w, *kappa;
  PetscInt       *body;

  PetscFunctionBegin;
  PetscCall(MatFMMGetTreePartition(A, &mine, NULL));
  PetscCall(ISGetLocalSize(mine, nloc));
  PetscCallMPI(MPI_Scan(nloc, rstart, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  *rstart -= *nloc;
  PetscCall(ISAllGather(mine, &all));
  PetscCall(ISGetIndices(all, &old));
  PetscCall(PetscMalloc5(2 * N, &xy, 2 * N, &nrm, N, &w, N, &kappa, N, &body));
  for (PetscInt k = 0; k < N; k++) {
    const PetscInt i = old[k];
    xy[2 * k]        = user->xy[2 * i];
    xy[2 * k + 1]    = user->xy[2 * i + 1];
    nrm[2 * k]       = user->nrm[2 * i];
    nrm[2 * k + 1]   = user->nrm[2 * i + 1];
    w[k]             = user->w[i];
    kappa[k]         = user->kappa[i];
    body[k]          = user->body[i];
  }
  PetscCall(ISRestoreIndices(all, &old));
  PetscCall(ISDestroy(&all));
  PetscCall(ISDestroy(&mine));
  PetscCall(PetscFree5(user->xy, user->nrm, user->w, user->kappa, user->body));
  user->xy    = xy;
  user->nrm   = nrm;
  user->w     = w;
  user->kappa = kappa;
  user->body  = body;
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  AppCtx             user;
  ExtCtx             ext;
  BodyPC             bpc;
  PetscInt           rstart, nloc, estart, mloc, its;
  PetscReal          tol = -1, errloc[2], errglob[2], err;
  PetscBool          isfmm, renumber = PETSC_FALSE;
  MatType            mtype;
  Mat                A, Op, E, Le = NULL;
  Vec                f, s, ue;
  KSP                ksp;
  PC                 pc;
  KSPConvergedReason reason;
  PetscLogDouble     t0, t1, t2;
  PetscLogStage      stageSetup, stageSolve, stageEval;
  const PetscScalar *ua;
  PetscScalar       *fa;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCall(PetscLogStageRegister("ex1 setup", &stageSetup));
  PetscCall(PetscLogStageRegister("ex1 solve", &stageSolve));
  PetscCall(PetscLogStageRegister("ex1 evaluate", &stageEval));
  PetscCall(ProcessOptions(&user));
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-tol", &tol, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-renumber", &renumber, NULL));
  PetscCall(CreateGeometry(&user));
  PetscCall(Split(user.N, &rstart, &nloc));
  PetscCall(Split(user.M, &estart, &mloc));
  PetscCall(PetscMemzero(&ext, sizeof(ext)));
  PetscCall(PetscMemzero(&bpc, sizeof(bpc)));

  PetscCall(PetscLogStagePush(stageSetup));
  PetscCall(PetscTime(&t0));
  PetscCall(CreateOperator(&user, rstart, nloc, &A, &isfmm));
  if (renumber && isfmm) { /* the same operator, on the nodes numbered as the tree holds them */
    PetscCall(Renumber(&user, A, &rstart, &nloc));
    PetscCall(MatDestroy(&A));
    PetscCall(CreateOperator(&user, rstart, nloc, &A, &isfmm));
  }
  PetscCall(MatGetType(A, &mtype));

  /* Exterior: the body integrals and logarithms (a dense A holds the rank-K term already; with
     MATFMM a shell adds it).  The evaluation needs the same pieces. */
  Op = A;
  PetscCall(PetscObjectReference((PetscObject)A));
  if (user.problem == PROBLEM_EXTERIOR) {
    ext.A      = A;
    ext.rstart = rstart;
    ext.nloc   = nloc;
    ext.body   = user.body;
    ext.K      = user.K;
    ext.logR0  = user.logR0;
    ext.w      = user.w;
    PetscCall(Split(user.K, &ext.kstart, &ext.kloc));
    PetscCall(PetscMalloc1(user.K, &ext.sums));
    PetscCall(VecCreateMPI(PETSC_COMM_WORLD, ext.kloc, user.K, &ext.a));
    if (isfmm) {
      PetscReal eps = -1;
      PetscCall(PetscOptionsGetReal(NULL, NULL, "-mat_fmm_eps", &eps, NULL)); /* as accurate as the operator's MATFMM */
      PetscCall(CreateLogMatrix(&user, nloc, user.xy + 2 * rstart, "log_", eps, &ext.L));
      PetscCall(MatDestroy(&Op));
      PetscCall(MatCreateShell(PETSC_COMM_WORLD, nloc, nloc, user.N, user.N, &ext, &Op));
      PetscCall(MatShellSetOperation(Op, MATOP_MULT, (void (*)(void))MatMult_Exterior));
    }
  }

  /* the right-hand side: the exact solution on the boundary */
  PetscCall(MatCreateVecs(A, &s, &f));
  PetscCall(VecGetArrayWrite(f, &fa));
  for (PetscInt i = 0; i < nloc; i++) fa[i] = Exact(&user, &user.xy[2 * (rstart + i)]);
  PetscCall(VecRestoreArrayWrite(f, &fa));

  /* GMRES: the operator is +-1/2 I plus a compact operator, so the iteration count does not
     grow with N.  Interior: no preconditioner needed.  Exterior: the body means, which the
     rank-K logarithmic term couples across all bodies, are preconditioned by BodyPC; a long
     restart suits many bodies. */
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, Op, Op));
  PetscCall(KSPSetType(ksp, KSPGMRES));
  PetscCall(KSPGMRESSetRestart(ksp, 100));
  PetscCall(KSPGetPC(ksp, &pc));
  if (user.problem == PROBLEM_EXTERIOR) {
    PetscCall(BodyPCSetUp(&user, rstart, nloc, &bpc));
    PetscCall(PCSetType(pc, PCSHELL));
    PetscCall(PCShellSetContext(pc, &bpc));
    PetscCall(PCShellSetApply(pc, BodyPCApply));
    PetscCall(PCShellSetName(pc, "body means: K x K logarithmic system"));
    PetscCall(KSPSetPCSide(ksp, PC_RIGHT)); /* the residual stays the true one, and s = P y is the Nystrom solution */
  } else PetscCall(PCSetType(pc, PCNONE));
  PetscCall(KSPSetTolerances(ksp, 1e-10, PETSC_DEFAULT, PETSC_DEFAULT, 1000));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(KSPSetUp(ksp));
  PetscCall(PetscTime(&t1));
  PetscCall(PetscLogStagePop());

  PetscCall(PetscLogStagePush(stageSolve));
  PetscCall(KSPSolve(ksp, f, s));
  PetscCall(PetscTime(&t2));
  PetscCall(PetscLogStagePop());
  PetscCall(KSPGetIterationNumber(ksp, &its));
  PetscCall(KSPGetConvergedReason(ksp, &reason));

  /* u_h = D s (+ the logarithms) at the evaluation points, by MATFMMs with targets != sources */
  PetscCall(PetscLogStagePush(stageEval));
  PetscCall(MatCreate(PETSC_COMM_WORLD, &E));
  PetscCall(MatSetSizes(E, mloc, nloc, user.M, user.N));
  PetscCall(MatSetOptionsPrefix(E, "eval_"));
  PetscCall(MatSetType(E, MATFMM));
  PetscCall(MatFMMSetSources(E, nloc, user.xy + 2 * rstart, user.nrm + 2 * rstart, user.w + rstart));
  PetscCall(MatFMMSetTargets(E, mloc, user.exy + 2 * estart));
  PetscCall(MatFMMSetKernel(E, MATFMM_KERNEL_DOUBLE, 0, 0));
  PetscCall(MatFMMSetTolerance(E, 1e-13)); /* so that the evaluation does not limit the measured error */
  PetscCall(MatSetFromOptions(E));
  PetscCall(MatAssemblyBegin(E, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(E, MAT_FINAL_ASSEMBLY));
  PetscCall(MatCreateVecs(E, NULL, &ue));
  PetscCall(MatMult(E, s, ue));
  if (user.problem == PROBLEM_EXTERIOR) {
    PetscCall(CreateLogMatrix(&user, mloc, user.exy + 2 * estart, "eval_", 1e-13, &Le));
    PetscCall(BodyIntegrals(&ext, s));
    PetscCall(AddLogTerm(&ext, Le, ue));
  }
  PetscCall(VecGetArrayRead(ue, &ua));
  errloc[0] = errloc[1] = 0;
  for (PetscInt i = 0; i < mloc; i++) {
    PetscReal u = Exact(&user, &user.exy[2 * (estart + i)]);
    errloc[0]   = PetscMax(errloc[0], PetscAbsReal(PetscRealPart(ua[i]) - u));
    errloc[1]   = PetscMax(errloc[1], PetscAbsReal(u));
  }
  PetscCall(VecRestoreArrayRead(ue, &ua));
  PetscCall(MPIU_Allreduce(errloc, errglob, 2, MPIU_REAL, MPIU_MAX, PETSC_COMM_WORLD));
  err = errglob[0] / errglob[1];
  PetscCall(PetscLogStagePop());

  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s Dirichlet problem: %" PetscInt_FMT " %s curve%s, %" PetscInt_FMT " points each, %" PetscInt_FMT " evaluation points\n", ProblemTypes[user.problem], user.K, CurveTypes[user.curve], user.K > 1 ? "s" : "", user.n, user.M));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "KSP %s: %s\n", reason > 0 ? "converged" : "did not converge", KSPConvergedReasons[reason]));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "summary: N=%" PetscInt_FMT " type=%s its=%" PetscInt_FMT " error=%.3e setup_s=%.4f solve_s=%.4f\n", user.N, mtype, its, (double)err, (double)(t1 - t0), (double)(t2 - t1)));
  if (tol > 0) {
    PetscCheck(reason > 0 && err <= tol, PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED, "error %g exceeds -tol %g (KSP %s)", (double)err, (double)tol, KSPConvergedReasons[reason]);
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "check: error <= %g\n", (double)tol));
  }

  PetscCall(KSPDestroy(&ksp));
  PetscCall(BodyPCDestroy(&bpc));
  PetscCall(VecDestroy(&f));
  PetscCall(VecDestroy(&s));
  PetscCall(VecDestroy(&ue));
  PetscCall(MatDestroy(&E));
  PetscCall(MatDestroy(&Le));
  PetscCall(MatDestroy(&Op));
  PetscCall(MatDestroy(&A));
  PetscCall(MatDestroy(&ext.L));
  PetscCall(VecDestroy(&ext.a));
  PetscCall(PetscFree(ext.sums));
  PetscCall(DestroyGeometry(&user));
  PetscCall(PetscFinalize());
  return 0;
}

/*TEST
  test:
    suffix: interior
    args: -n 400 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: dense
    args: -n 400 -mat_type dense -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: mpi
    nsize: 2
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: mpi_1
    nsize: 1
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: mpi_3
    nsize: 3
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: mpi_4
    nsize: 4
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: mpi_renumber
    nsize: 3
    args: -n 3000 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12 -tol 1e-10 -renumber -mat_fmm_distribution tree
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_mpi_3.out
  test:
    suffix: exterior_renumber
    nsize: 2
    args: -problem exterior -bodies 16 -n 128 -mat_fmm_eps 1e-12 -ksp_rtol 1.7e-9 -tol 1e-8 -renumber -mat_fmm_distribution tree -mat_fmm_device cpu
    filter: sed -e 's/ error=.*$//'
    output_file: output/ex1_exterior.out
  test:
    suffix: exterior
    nsize: 2
    args: -problem exterior -bodies 16 -n 128 -mat_fmm_eps 1e-12 -ksp_rtol 1.7e-9 -tol 1e-8
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: exterior_dense
    args: -problem exterior -bodies 4 -n 100 -mat_type dense -ksp_rtol 4.5e-12 -tol 1e-10
    filter: sed -e 's/ error=.*$//'
  test:
    suffix: circle
    args: -problem exterior -curve ellipse -ellipse_a 1 -ellipse_b 1 -n 128 -ksp_rtol 1e-12 -tol 1e-12
    filter: sed -e 's/ error=.*$//'
TEST*/
