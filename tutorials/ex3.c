static char help[] = "Steady multigroup discrete-ordinates transport (a SNAP-like problem) solved\n\
with KSP and a MATSWEEP: GMRES is Krylov-accelerated source iteration,\n\
-ksp_type richardson is source iteration itself.\n\
  -nx <n>, -ny <n>, -nz <n>  cells (default 16 16 16; -nz 1 -twod: the 2D x-y problem)\n\
  -twod                      a 2D grid (no streaming along z)\n\
  (on several ranks the grid is split in y and z only: -da_processors_x 1; the sweep is KBA)\n\
  -c <c>                     scattering ratio of every group and material, 0 <= c <= 1 (default 0.9)\n\
  -box <bool>                a box of the second material (twice as dense) in the low corner (default true)\n\
  -vtk <file.vts>            write the scalar flux of every group (and all moments) for VTK, at the cell\n\
                             centres (tutorials/plot_flux.py <file.vts> -o flux.png draws slices)\n\
  -mat_sweep_domain <lx,ly,lz>  the box (default 10,10,10: ten mean free paths of group 0)\n\
  -mat_sweep_nang, -mat_sweep_sn, -mat_sweep_groups, -mat_sweep_nmom, -mat_sweep_bc, -mat_sweep_device, ...\n\
  -ksp_type, -ksp_rtol, ...  the Krylov solver (default GMRES(50), rtol 1e-8, no preconditioner)\n\n";

/*
  ex3: the problem.  A box of nx x ny x nz cells (DMDA), two materials: the
  background and, in the low corner [0, lx/2] x [0, ly/2] x [0, lz/2], a box
  twice as dense.  Group g has sigma_t = 1 + 0.05 g (background), and the
  same scattering ratio c everywhere: of the particles a collision in group
  g scatters, 80% stay in g, 15% go down to g+1 and 5% up to g-1 (at the
  first and last group the missing share stays in g), so both downscatter
  and upscatter couple the groups.  With L > 0 (-mat_sweep_nmom) the
  anisotropic moments are sigma_s,l = 0.5^l sigma_s,0.  A unit isotropic
  source in every group fills the central box [lx/4, 3lx/4] x ... .  Vacuum
  faces (-mat_sweep_bc changes them).

  The operator A phi = phi - D L^-1 M S phi (one sweep per product) and
  b = D L^-1 q: the flux solves A phi = b.  Source iteration
  phi_{k+1} = D L^-1 (M S phi_k + q) is Richardson's iteration on it, whose
  error falls like c^k at best; GMRES needs far fewer sweeps as c -> 1.

  Output ends with one line
    summary: cells= angles= groups= moments= ksp= its= sweeps= residual= grind_ns= solve_s=
  residual: ||b - A phi||/||b|| recomputed after the solve; grind_ns: the
  last sweep's time over cells x directions x groups (SNAP's grind time).
*/
#include <petscfmm.h>
#include <petscksp.h>

int main(int argc, char **argv)
{
  PetscInt       nx = 16, ny = 16, nz = 16, ng, cm, nc, nb, ndir, its, nsweeps;
  PetscReal      c = 0.9, *sigt, *sigs, *q, len[3] = {10, 10, 10}, rnorm, bnorm, grind;
  PetscInt      *mat;
  PetscBool      twod = PETSC_FALSE, box = PETSC_TRUE;
  char           vtk[PETSC_MAX_PATH_LEN] = "";
  DM             da;
  Mat            A;
  Vec            phi, b, r;
  KSP            ksp;
  PC             pc;
  PetscLogDouble t0, t1;
  KSPType        ktype;
  DMDALocalInfo  info;
  PetscInt       L, nmom, n = 3;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-nx", &nx, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-ny", &ny, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-nz", &nz, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-twod", &twod, NULL));
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-c", &c, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-box", &box, NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-vtk", vtk, sizeof(vtk), NULL));
  PetscCheck(c >= 0 && c <= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-c %g: the scattering ratio must be in [0, 1]", (double)c);

  /* the grid: one DMDA point per cell */
  if (twod) PetscCall(DMDACreate2d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, nx, ny, PETSC_DECIDE, PETSC_DECIDE, 1, 1, NULL, NULL, &da));
  else PetscCall(DMDACreate3d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, nx, ny, nz, PETSC_DECIDE, PETSC_DECIDE, PETSC_DECIDE, 1, 1, NULL, NULL, NULL, &da));
  PetscCall(DMSetFromOptions(da));
  PetscCall(DMSetUp(da));
  PetscCall(DMDAGetLocalInfo(da, &info));
  if (twod) nz = 1;

  /* the matrix: groups and scattering order first (the tables' sizes depend on them), from the options */
  PetscCall(MatCreateSweep(da, &A));
  PetscCall(PetscOptionsGetRealArray(NULL, NULL, "-mat_sweep_domain", len, &n, NULL));
  PetscCall(MatSweepSetDomain(A, len[0], len[1], len[2]));
  PetscCall(MatSetFromOptions(A));
  PetscCall(MatSweepGetGroups(A, &ng));
  PetscCall(MatSweepGetScatteringOrder(A, &L, NULL));
  nmom = L + 1; /* Legendre orders of the scattering tables */

  /* two materials: sigma_t per group, scattering 80% in group, 15% down, 5% up, sigma_s,l = 0.5^l sigma_s,0 */
  PetscCall(PetscMalloc2(2 * ng, &sigt, 2 * nmom * ng * ng, &sigs));
  PetscCall(PetscArrayzero(sigs, 2 * nmom * ng * ng));
  for (PetscInt m = 0; m < 2; m++)
    for (PetscInt g = 0; g < ng; g++) {
      const PetscReal st = (m ? 2.0 : 1.0) * (1 + 0.05 * g), down = g < ng - 1 ? 0.15 : 0.0, up = g > 0 ? 0.05 : 0.0;
      sigt[m * ng + g] = st;
      for (PetscInt l = 0; l < nmom; l++) { /* sigs[((m L1 + l) ng + to) ng + from] */
        PetscReal *s = sigs + (m * nmom + l) * ng * ng, f = PetscPowRealInt(0.5, l) * c * st;
        s[g * ng + g] += (1 - down - up) * f;
        if (down > 0) s[(g + 1) * ng + g] += down * f;
        if (up > 0) s[(g - 1) * ng + g] += up * f;
      }
    }
  PetscCall(MatSweepSetMaterials(A, 2, sigt, sigs));

  /* the material map and the source of this rank's cells */
  nc = info.xm * info.ym * (twod ? 1 : info.zm);
  PetscCall(PetscMalloc2(nc, &mat, nc * ng, &q));
  for (PetscInt k = 0, cell = 0; k < (twod ? 1 : info.zm); k++)
    for (PetscInt j = 0; j < info.ym; j++)
      for (PetscInt i = 0; i < info.xm; i++, cell++) {
        const PetscInt  gi = info.xs + i, gj = info.ys + j, gk = (twod ? 0 : info.zs) + k;
        const PetscBool corner = (2 * gi < nx && 2 * gj < ny && (twod || 2 * gk < nz)) ? PETSC_TRUE : PETSC_FALSE;
        const PetscBool centre = (4 * gi >= nx && 4 * gi < 3 * nx && 4 * gj >= ny && 4 * gj < 3 * ny && (twod || (4 * gk >= nz && 4 * gk < 3 * nz))) ? PETSC_TRUE : PETSC_FALSE;
        mat[cell] = box && corner ? 1 : 0;
        for (PetscInt g = 0; g < ng; g++) q[cell * ng + g] = centre ? 1.0 : 0.0;
      }
  PetscCall(MatSweepSetMaterialMap(A, mat));
  PetscCall(MatSweepSetSource(A, q));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY)); /* builds the quadrature, sets the sizes */

  /* b = D L^-1 q, then A phi = b */
  PetscCall(MatCreateVecs(A, &phi, &b));
  PetscCall(VecDuplicate(b, &r));
  PetscCall(MatSweepComputeRHS(A, b));
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetType(ksp, KSPGMRES));
  PetscCall(KSPGMRESSetRestart(ksp, 50));
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCSetType(pc, PCNONE));
  PetscCall(KSPSetTolerances(ksp, 1e-8, PETSC_DEFAULT, PETSC_DEFAULT, 100000));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(KSPSetUp(ksp));
  PetscCall(PetscTime(&t0));
  PetscCall(KSPSolve(ksp, b, phi));
  PetscCall(PetscTime(&t1));
  PetscCall(KSPGetIterationNumber(ksp, &its));
  PetscCall(KSPGetType(ksp, &ktype));

  /* the true residual, and the sweeps' statistics */
  PetscCall(MatSweepGetStatistics(A, &nsweeps, &grind, NULL)); /* before the check's own product */
  PetscCall(MatMult(A, phi, r));
  PetscCall(VecAYPX(r, -1.0, b));
  PetscCall(VecNorm(r, NORM_2, &rnorm));
  PetscCall(VecNorm(b, NORM_2, &bnorm));
  PetscCall(MatSweepGetSizes(A, &nc, &ndir, &cm, &nb));

  if (vtk[0]) { /* the moments, named phi_g<g>_m<m>, on the grid (at the cell centres) */
    PetscViewer v;
    Vec         f;
    DM          dm;
    PetscCall(MatSweepGetFluxVector(A, phi, &f));
    PetscCall(VecGetDM(f, &dm));
    PetscCall(DMDASetUniformCoordinates(dm, 0.5 * len[0] / nx, len[0] - 0.5 * len[0] / nx, 0.5 * len[1] / ny, len[1] - 0.5 * len[1] / ny, 0.5 * len[2] / nz, len[2] - 0.5 * len[2] / nz));
    PetscCall(PetscViewerVTKOpen(PETSC_COMM_WORLD, vtk, FILE_MODE_WRITE, &v));
    PetscCall(VecView(f, v));
    PetscCall(PetscViewerDestroy(&v));
    PetscCall(MatSweepRestoreFluxVector(A, phi, &f));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "scalar flux and moments written to %s\n", vtk));
  }
  {
    PetscReal tot = 0, mx = 0;
    Vec       f;
    PetscCall(MatSweepGetFluxVector(A, phi, &f));
    { /* group 0's scalar flux: mean and peak */
      const PetscScalar *fa;
      PetscCall(VecGetArrayRead(f, &fa));
      for (PetscInt i = 0; i < nc; i++) {
        tot += fa[i * ng * cm];
        mx = PetscMax(mx, fa[i * ng * cm]);
      }
      PetscCall(VecRestoreArrayRead(f, &fa));
    }
    PetscCall(MatSweepRestoreFluxVector(A, phi, &f));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &tot, 1, MPIU_REAL, MPIU_SUM, PETSC_COMM_WORLD));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &mx, 1, MPIU_REAL, MPIU_MAX, PETSC_COMM_WORLD));
    PetscCall(MPIU_Allreduce(MPI_IN_PLACE, &nc, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "group 0 scalar flux: mean %.6e, peak %.6e\n", (double)(tot / nc), (double)mx));
  }
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "summary: cells=%" PetscInt_FMT " angles=%" PetscInt_FMT " groups=%" PetscInt_FMT " moments=%" PetscInt_FMT " ksp=%s its=%" PetscInt_FMT " sweeps=%" PetscInt_FMT " residual=%.2e grind_ns=%.4g solve_s=%.4g\n", nc, ndir, ng, cm, ktype, its, nsweeps, (double)(rnorm / bnorm), (double)grind, t1 - t0));

  PetscCall(PetscFree2(mat, q));
  PetscCall(PetscFree2(sigt, sigs));
  PetscCall(VecDestroy(&phi));
  PetscCall(VecDestroy(&b));
  PetscCall(VecDestroy(&r));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(MatDestroy(&A));
  PetscCall(DMDestroy(&da));
  PetscCall(PetscFinalize());
  return 0;
}

/*TEST
  test:
    suffix: gmres
    args: -nx 8 -ny 8 -nz 8 -mat_sweep_nang 3 -mat_sweep_groups 2 -c 0.9 -malloc_dump
    filter: sed -e 's/ grind_ns=.*$//'
  test:
    suffix: richardson
    args: -nx 8 -ny 8 -nz 8 -mat_sweep_nang 3 -mat_sweep_groups 2 -c 0.9 -ksp_type richardson
    filter: sed -e 's/ grind_ns=.*$//'
  test:
    suffix: levelsym
    args: -nx 6 -ny 5 -nz 4 -mat_sweep_sn 6 -mat_sweep_groups 3 -mat_sweep_nmom 3 -c 0.99 -mat_sweep_bc reflective,vacuum,reflective,vacuum,reflective,vacuum
    filter: sed -e 's/ grind_ns=.*$//'
  test:
    suffix: gmres_ranks
    nsize: 2
    args: -nx 8 -ny 8 -nz 8 -mat_sweep_nang 3 -mat_sweep_groups 2 -c 0.9 -da_processors_x 1 -malloc_dump
    filter: sed -e 's/ grind_ns=.*$//'
  test:
    suffix: twod
    args: -twod -nx 12 -ny 10 -mat_sweep_nang 4 -c 0.95 -mat_view
    filter: sed -e 's/ grind_ns=.*$//' -e 's/, device .*$//' -e '/CPU: /d' -e '/CUDA: /d'
  test:
    suffix: cuda_ranks
    nsize: 2
    requires: cuda
    args: -nx 16 -ny 16 -nz 16 -mat_sweep_nang 6 -mat_sweep_groups 2 -c 0.9 -da_processors_x 1 -mat_sweep_device cuda -malloc_dump
    filter: sed -e 's/ grind_ns=.*$//'
TEST*/
