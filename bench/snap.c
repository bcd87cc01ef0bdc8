static char help[] = "Solves the problem of a SNAP input deck (lanl/SNAP, 3D steady) with a MATSWEEP, to compare with SNAP.\n\
  -deck <file>        SNAP's input deck (namelist &invar ... /); keys used: nx ny nz lx ly lz nang ng nmom\n\
                      mat_opt src_opt fixup scatrat (a local SNAP extension: sigma_s = scatrat sigma_t); ndimen must be 3,\n\
                      timedep 0\n\
  -out <file>         write the scalar flux and moments per cell and group in SNAP's full-precision dump format\n\
  -sweep1             only one sweep of the fixed sources from zero flux (SNAP with oitm=1 iitm=1 angcpy=2)\n\
  -rtol <r>           GMRES tolerance (default 1e-14); with fixup, source iteration to this change instead\n\
Every -mat_sweep_ option applies (-mat_sweep_device cuda, ...).\n\n";

/*
  The problem SNAP builds from its deck, built here from SNAP's definitions
  (lanl/SNAP's setup and mms modules; docs/sweep.md says how to reproduce
  the comparison): SNAP's quadrature and expansion functions, diamond
  difference, vacuum faces; materials by mat_opt (1: a centre box, 2: a
  corner box of material 2), cross sections sigma_t = 1 and 2 plus 0.01 per
  group, sigma_s = 0.5 and 1.2 plus 0.005 per group (or scatrat sigma_t), the
  group-to-group fractions of SNAP (self/up/down 0.2/0.1/0.7 and 0.5/0.1/0.4,
  first and last groups special), anisotropic orders scaled by 0.1, 0.5 (0.8,
  0.6 for material 2); sources by src_opt (0 everywhere, 1 centre box, 2 corner
  box, 3 SNAP's manufactured solution as an angular source).  Without fixup
  the flux solves A phi = b (GMRES); with it, SNAP's nonlinear fixed point is
  found by source iteration (MatSweepSourceIteration()).
*/
#include <petscfmm.h>
#include <petscksp.h>

typedef struct {
  PetscInt  nx, ny, nz, nang, ng, nmom, mat_opt, src_opt, fixup, ndimen, timedep;
  PetscReal lx, ly, lz, scatrat;
} Deck;

/* key = value lines of the namelist; other keys are SNAP's own (threads, iteration, output) */
static PetscErrorCode ReadDeck(const char *fn, Deck *d)
{
  FILE *f;
  char  line[256];

  PetscFunctionBeginUser;
  *d = (Deck){4, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1.0, 1.0, 1.0, 0.0};
  PetscCall(PetscFOpen(PETSC_COMM_SELF, fn, "r", &f));
  while (fgets(line, sizeof(line), f)) {
    char *eq = strchr(line, '='), key[64];
    int   n  = 0;
    if (!eq || line[0] == '!') continue;
    for (char *p = line; p < eq && n < 63; p++)
      if (*p != ' ' && *p != '\t') key[n++] = *p;
    key[n] = 0;
    const double v = atof(eq + 1);
#define KEY(name, field) \
  if (!strcmp(key, name)) d->field = v
    KEY("nx", nx);
    KEY("ny", ny);
    KEY("nz", nz);
    KEY("lx", lx);
    KEY("ly", ly);
    KEY("lz", lz);
    KEY("nang", nang);
    KEY("ng", ng);
    KEY("nmom", nmom);
    KEY("mat_opt", mat_opt);
    KEY("src_opt", src_opt);
    KEY("fixup", fixup);
    KEY("scatrat", scatrat);
    KEY("ndimen", ndimen);
    KEY("timedep", timedep);
#undef KEY
  }
  PetscCall(PetscFClose(PETSC_COMM_SELF, f));
  PetscCheck(d->ndimen == 3 && d->timedep == 0, PETSC_COMM_SELF, PETSC_ERR_SUP, "%s: ndimen %" PetscInt_FMT ", timedep %" PetscInt_FMT ": only 3D steady decks (ndimen=3, timedep=0)", fn, d->ndimen, d->timedep);
  PetscCheck(d->mat_opt >= 0 && d->mat_opt <= 2 && d->src_opt >= 0 && d->src_opt <= 3, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s: mat_opt %" PetscInt_FMT ", src_opt %" PetscInt_FMT ": expected 0-2 and 0-3", fn, d->mat_opt, d->src_opt);
  PetscFunctionReturn(0);
}

/* cell (i, j, k) (0-based) in SNAP's box of option opt: 1 the centre half, 2 the low corner */
static PetscBool InBox(const Deck *d, PetscInt opt, PetscInt i, PetscInt j, PetscInt k)
{
  if (opt == 1) return (i >= d->nx / 4 && i < 3 * d->nx / 4 && j >= d->ny / 4 && j < 3 * d->ny / 4 && k >= d->nz / 4 && k < 3 * d->nz / 4) ? PETSC_TRUE : PETSC_FALSE;
  if (opt == 2) return (i < d->nx / 2 && j < d->ny / 2 && k < d->nz / 2) ? PETSC_TRUE : PETSC_FALSE;
  return PETSC_FALSE;
}

/* SNAP's cross sections: sigt[m ng + g], and the scattering table in MATSWEEP's layout */
static void CrossSections(const Deck *d, PetscReal *sigt, PetscReal *sigs)
{
  const PetscInt  ng = d->ng, nm = d->nmom, nmat = d->mat_opt > 0 ? 2 : 1;
  const PetscReal st1[2] = {1.0, 2.0}, ss1[2] = {0.5, 1.2}, self[2] = {0.2, 0.5}, up[2] = {0.1, 0.1}, down[2] = {0.7, 0.4}, first[2] = {0.3, 0.6};
  const PetscReal l2[2] = {0.1, 0.8}, l3[2] = {0.5, 0.6};
  PetscReal       s[2][64];

  for (PetscInt m = 0; m < nmat; m++) {
    PetscReal t = st1[m], v = ss1[m];
    for (PetscInt g = 0; g < ng; g++) {
      if (g > 0) {
        t = t + 0.01;
        v = v + 0.005;
      }
      sigt[m * ng + g] = t;
      s[m][g]          = d->scatrat > 0 ? d->scatrat * t : v;
    }
  }
  for (PetscInt i = 0; i < nmat * nm * ng * ng; i++) sigs[i] = 0;
  for (PetscInt m = 0; m < nmat; m++) {
    PetscReal *s0 = sigs + (size_t)m * nm * ng * ng; /* s0[to ng + from] */
    if (ng == 1) s0[0] = s[m][0];
    else
      for (PetscInt g = 0; g < ng; g++) { /* from g */
        s0[g * ng + g] = self[m] * s[m][g];
        if (g > 0)
          for (PetscInt t = 0; t < g; t++) s0[t * ng + g] = up[m] * s[m][g] * (1.0 / g);
        if (g == 0) s0[0] = first[m] * s[m][0];
        if (g < ng - 1)
          for (PetscInt t = g + 1; t < ng; t++) s0[t * ng + g] = down[m] * s[m][g] * (1.0 / (ng - 1 - g));
        if (g == ng - 1) s0[g * ng + g] = 0.9 * s[m][g];
      }
    for (PetscInt l = 1; l < nm; l++)
      for (PetscInt i = 0; i < ng * ng; i++) s0[l * ng * ng + i] = (l == 1 ? l2[m] : l3[m]) * s0[(l - 1) * ng * ng + i];
  }
}

/* SNAP's manufactured solution (src_opt 3): cell averages of g sin(a x) sin(b y) sin(c z) and the angular source
   that makes it the solution, with SNAP's truncated pi */
static PetscErrorCode MMSSource(const Deck *d, const PetscInt *mat, const PetscReal *sigt, const PetscReal *sigs, PetscInt nang, const PetscReal *mu, const PetscReal *eta, const PetscReal *xi, PetscReal *qa)
{
  const PetscReal pi = 3.14159265358979, dl[3] = {d->lx / d->nx, d->ly / d->ny, d->lz / d->nz}, L[3] = {d->lx, d->ly, d->lz};
  const PetscInt  n[3] = {d->nx, d->ny, d->nz}, ng = d->ng, nd = 8 * nang;
  PetscReal      *cav[3], *sav[3];

  PetscFunctionBeginUser;
  for (int ax = 0; ax < 3; ax++) {
    const PetscReal a = pi / L[ax];
    PetscReal       b0 = 0;
    PetscCall(PetscMalloc2(n[ax], &cav[ax], n[ax], &sav[ax]));
    for (PetscInt i = 0; i < n[ax]; i++) {
      const PetscReal b1 = b0 + dl[ax];
      cav[ax][i]         = (PetscCosReal(a * b0) - PetscCosReal(a * b1)) / (a * dl[ax]);
      sav[ax][i]         = (PetscSinReal(a * b1) - PetscSinReal(a * b0)) / dl[ax];
      b0                 = b1;
    }
  }
  for (PetscInt k = 0; k < d->nz; k++)
    for (PetscInt j = 0; j < d->ny; j++)
      for (PetscInt i = 0; i < d->nx; i++) {
        const PetscInt  c = (k * d->ny + j) * d->nx + i, m = mat[c];
        const PetscReal cc = cav[0][i] * cav[1][j] * cav[2][k];
        for (PetscInt oct = 0; oct < 8; oct++)
          for (PetscInt a = 0; a < nang; a++)
            for (PetscInt g = 0; g < ng; g++) {
              const PetscReal gg = g + 1, sx = oct & 1 ? -1 : 1, sy = oct & 2 ? -1 : 1, sz = oct & 4 ? -1 : 1;
              PetscReal       v  = gg * sx * mu[a] * sav[0][i] * cav[1][j] * cav[2][k] + sigt[m * ng + g] * (gg * cc);
              v += gg * sy * eta[a] * cav[0][i] * sav[1][j] * cav[2][k];
              v += gg * sz * xi[a] * cav[0][i] * cav[1][j] * sav[2][k];
              for (PetscInt gp = 0; gp < ng; gp++) v -= sigs[(size_t)m * d->nmom * ng * ng + g * ng + gp] * ((gp + 1) * cc);
              qa[((size_t)c * nd + oct * nang + a) * ng + g] = v;
            }
      }
  for (int ax = 0; ax < 3; ax++) PetscCall(PetscFree2(cav[ax], sav[ax]));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  char           fn[PETSC_MAX_PATH_LEN] = "", out[PETSC_MAX_PATH_LEN] = "";
  Deck           d;
  DM             da;
  Mat            A;
  Vec            phi, b;
  PetscInt       nc, cm, its = 0, nmat, *mat;
  PetscReal     *sigt, *sigs, *q = NULL, rtol = 1e-14;
  PetscBool      sweep1 = PETSC_FALSE;
  PetscLogDouble t0, t1;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCall(PetscOptionsGetString(NULL, NULL, "-deck", fn, sizeof(fn), NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-out", out, sizeof(out), NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-sweep1", &sweep1, NULL));
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-rtol", &rtol, NULL));
  PetscCheck(fn[0], PETSC_COMM_WORLD, PETSC_ERR_USER_INPUT, "give a SNAP deck with -deck <file>");
  PetscCall(ReadDeck(fn, &d));
  nmat = d.mat_opt > 0 ? 2 : 1;
  nc   = d.nx * d.ny * d.nz;

  PetscCall(DMDACreate3d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, d.nx, d.ny, d.nz, 1, 1, 1, 1, 1, NULL, NULL, NULL, &da));
  PetscCall(DMSetUp(da));
  PetscCall(MatCreateSweep(da, &A));
  PetscCall(MatSweepSetDomain(A, d.lx, d.ly, d.lz));
  PetscCall(MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_SNAP, d.nang));
  PetscCall(MatSweepSetGroups(A, d.ng));
  PetscCall(MatSweepSetScatteringOrder(A, d.nmom - 1, MATSWEEP_EXPANSION_SNAP));
  PetscCall(MatSweepSetScheme(A, MATSWEEP_SCHEME_DD, d.fixup ? PETSC_TRUE : PETSC_FALSE));
  PetscCall(PetscMalloc3(nmat * d.ng, &sigt, nmat * d.nmom * d.ng * d.ng, &sigs, nc, &mat));
  CrossSections(&d, sigt, sigs);
  PetscCall(MatSweepSetMaterials(A, nmat, sigt, sigs));
  for (PetscInt k = 0; k < d.nz; k++)
    for (PetscInt j = 0; j < d.ny; j++)
      for (PetscInt i = 0; i < d.nx; i++) mat[(k * d.ny + j) * d.nx + i] = InBox(&d, d.mat_opt, i, j, k) ? 1 : 0;
  PetscCall(MatSweepSetMaterialMap(A, mat));
  if (d.src_opt < 3) {
    PetscCall(PetscMalloc1(nc * d.ng, &q));
    for (PetscInt k = 0; k < d.nz; k++)
      for (PetscInt j = 0; j < d.ny; j++)
        for (PetscInt i = 0; i < d.nx; i++)
          for (PetscInt g = 0; g < d.ng; g++) q[((k * d.ny + j) * d.nx + i) * d.ng + g] = (d.src_opt == 0 || InBox(&d, d.src_opt, i, j, k)) ? 1.0 : 0.0;
    PetscCall(MatSweepSetSource(A, q));
  }
  PetscCall(MatSetFromOptions(A));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  if (d.src_opt == 3) {
    const PetscReal *mu, *eta, *xi;
    PetscInt         nang;
    PetscReal       *qa;
    PetscCall(MatSweepGetQuadrature(A, &nang, &mu, &eta, &xi, NULL));
    PetscCall(PetscMalloc1((size_t)nc * 8 * nang * d.ng, &qa));
    PetscCall(MMSSource(&d, mat, sigt, sigs, nang, mu, eta, xi, qa));
    PetscCall(MatSweepSetAngularSource(A, qa));
    PetscCall(PetscFree(qa));
  }

  PetscCall(MatCreateVecs(A, &phi, &b));
  PetscCall(PetscTime(&t0));
  PetscCall(MatSweepComputeRHS(A, b));
  if (sweep1) PetscCall(VecCopy(b, phi));
  else if (!d.fixup) { /* the linear problem A phi = b */
    KSP ksp;
    PC  pc;
    PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PetscCall(KSPSetOperators(ksp, A, A));
    PetscCall(KSPSetType(ksp, KSPGMRES));
    PetscCall(KSPGMRESSetRestart(ksp, 200));
    PetscCall(KSPGetPC(ksp, &pc));
    PetscCall(PCSetType(pc, PCNONE));
    PetscCall(KSPSetTolerances(ksp, rtol, 1e-300, PETSC_DEFAULT, 2000));
    PetscCall(KSPSetFromOptions(ksp));
    PetscCall(KSPSolve(ksp, b, phi));
    PetscCall(KSPGetIterationNumber(ksp, &its));
    PetscCall(KSPDestroy(&ksp));
  } else { /* fixup: SNAP's nonlinear fixed point by source iteration, until the largest relative change is below rtol */
    Vec       nx;
    PetscReal dmax = 1, fmax;
    PetscCall(VecDuplicate(phi, &nx));
    PetscCall(VecCopy(b, phi));
    while (dmax > rtol && its < 100000) {
      PetscCall(MatSweepSourceIteration(A, phi, nx));
      PetscCall(VecAXPY(phi, -1.0, nx));
      PetscCall(VecNorm(phi, NORM_INFINITY, &dmax));
      PetscCall(VecNorm(nx, NORM_INFINITY, &fmax));
      dmax /= fmax;
      PetscCall(VecCopy(nx, phi));
      its++;
    }
    PetscCall(VecDestroy(&nx));
  }
  PetscCall(PetscTime(&t1));
  PetscCall(MatSweepGetSizes(A, NULL, NULL, &cm, NULL));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "snap deck %s: cells=%" PetscInt_FMT " nang=%" PetscInt_FMT " ng=%" PetscInt_FMT " nmom=%" PetscInt_FMT " mat_opt=%" PetscInt_FMT " src_opt=%" PetscInt_FMT " fixup=%" PetscInt_FMT " %s its=%" PetscInt_FMT " solve_s=%.3g\n", fn, nc, d.nang, d.ng, d.nmom, d.mat_opt, d.src_opt, d.fixup, sweep1 ? "one sweep" : (d.fixup ? "source iteration" : "gmres"), its, t1 - t0));
  if (out[0]) { /* SNAP's full-precision dump: i fastest, then j, k, g; flux0 and the moments */
    FILE              *f;
    const PetscScalar *pa;
    PetscCall(PetscFOpen(PETSC_COMM_WORLD, out, "w", &f));
    PetscCall(PetscFPrintf(PETSC_COMM_WORLD, f, "# MATSWEEP flux dump (SNAP's hp format): nx ny nz ng cmom\n%8d%8d%8d%8d%8d\n# i j k g flux0 fluxm(1:cmom-1)\n", (int)d.nx, (int)d.ny, (int)d.nz, (int)d.ng, (int)cm));
    PetscCall(VecGetArrayRead(phi, &pa));
    for (PetscInt g = 0; g < d.ng; g++)
      for (PetscInt k = 0; k < d.nz; k++)
        for (PetscInt j = 0; j < d.ny; j++)
          for (PetscInt i = 0; i < d.nx; i++) {
            const PetscScalar *v = pa + (((k * d.ny + j) * d.nx + i) * d.ng + g) * cm;
            PetscCall(PetscFPrintf(PETSC_COMM_WORLD, f, "%6d%6d%6d%6d", (int)i + 1, (int)j + 1, (int)k + 1, (int)g + 1));
            for (PetscInt m = 0; m < cm; m++) PetscCall(PetscFPrintf(PETSC_COMM_WORLD, f, " %25.17e", (double)v[m]));
            PetscCall(PetscFPrintf(PETSC_COMM_WORLD, f, "\n"));
          }
    PetscCall(VecRestoreArrayRead(phi, &pa));
    PetscCall(PetscFClose(PETSC_COMM_WORLD, f));
  }
  PetscCall(PetscFree3(sigt, sigs, mat));
  PetscCall(PetscFree(q));
  PetscCall(VecDestroy(&phi));
  PetscCall(VecDestroy(&b));
  PetscCall(MatDestroy(&A));
  PetscCall(DMDestroy(&da));
  PetscCall(PetscFinalize());
  return 0;
}
