static char help[] = "MATSWEEP benchmark: the grind time of one transport sweep (median of -reps products).\n\
  -nx <n>, -ny <n>, -nz <n>   cells (default 64 64 64)\n\
  -reps <r>                   timed products (default 10)\n\
  -c <c>                      scattering ratio (default 0.5; the sweep's cost does not depend on it)\n\
  -mat_sweep_nang <n>         directions per octant (default here 36), -mat_sweep_groups (default here 16),\n\
  -mat_sweep_device, -mat_sweep_layout, -mat_sweep_fixup, ...: every -mat_sweep_ option applies\n\
  -breakdown                  then -reps more products with PETSc's logging on: per product, the Sweep\n\
                              event and SweepKBAWait (waits on other ranks; CUDA: the GPU idle meanwhile), max over ranks\n\n";

/*
  Prints
    sweep: device=.. ranks=.. cells=.. nx=.. ny=.. nz=.. nang=.. dirs=.. groups=.. moments=.. layout=.. threads=..
           reps=.. mult_med_s=.. mult_min_s=.. mult_max_s=.. grind_med_ns=.. kernel_med_s=..
           kernel_grind_med_ns=.. kernel_grind_min_ns=.. face_GB=.. face_GBs=..
  On several ranks (KBA: the grid split in y and z, -da_processors_y/z) the
  times are rank 0's, each product between barriers, and the grind time
  counts all ranks' cells (SNAP's), so it falls as ranks are added.
  mult_*: the wall time of MatMult (on host vectors with Debian's PETSc: with
  the copies of x up and of y down); grind: SNAP's grind time, time over
  cells x directions (all octants) x groups; kernel_*: the sweep's kernels
  alone, timed on the GPU (CUDA backend only; 0 on the CPU).  face_GB is the
  traffic of the y and z face fluxes (read and written once per cell,
  direction and group: 32 bytes), face_GBs that over the kernel time: set
  against the GPU's memory bandwidth it says how near the sweep is to that
  limit.
    check: phi_sum=..  (the sum of the last product, to 17 digits)
  The problem is tutorials/ex3's: two materials, up- and downscatter,
  vacuum faces, a source box; the products apply to the right-hand side.
*/
#include <petscfmm.h>
#if defined(_OPENMP)
  #include <omp.h>
#endif

static int CmpReal(const void *a, const void *b)
{
  const PetscReal x = *(const PetscReal *)a, y = *(const PetscReal *)b;
  return x < y ? -1 : (x > y ? 1 : 0);
}

int main(int argc, char **argv)
{
  PetscInt       nx = 64, ny = 64, nz = 64, reps = 10, ng = 16, nang = 36, nc, nd, cm, threads = 1;
  PetscReal      c = 0.5, *sigt, *sigs, *q, *tw, *tk, sum;
  PetscInt      *mat;
  DM             da;
  DMDALocalInfo  info;
  Mat            A;
  Vec            x, y;
  MatSweepDevice dev;
  PetscBool      set, breakdown = PETSC_FALSE;
  char           layout[16];
  PetscMPIInt    size;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-nx", &nx, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-ny", &ny, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-nz", &nz, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-reps", &reps, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-breakdown", &breakdown, NULL));
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-c", &c, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-mat_sweep_groups", &ng, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-mat_sweep_nang", &nang, &set));
  PetscCheck(reps >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-reps %" PetscInt_FMT ": expected at least 1", reps);
#if defined(_OPENMP)
  threads = omp_get_max_threads();
#endif

  /* one rank along x (KBA splits y and z); -da_processors_y, -da_processors_z choose the rest */
  PetscCall(DMDACreate3d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, nx, ny, nz, 1, PETSC_DECIDE, PETSC_DECIDE, 1, 1, NULL, NULL, NULL, &da));
  PetscCall(DMSetFromOptions(da));
  PetscCall(DMSetUp(da));
  PetscCall(DMDAGetLocalInfo(da, &info));
  PetscCall(MatCreateSweep(da, &A));
  PetscCall(MatSweepSetGroups(A, ng));
  PetscCall(MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_SNAP, nang));
  PetscCall(MatSweepSetDomain(A, 10, 10, 10));
  PetscCall(MatSetFromOptions(A));
  /* tutorials/ex3's materials, isotropic part (the bench's default nmom is 1) */
  PetscCall(PetscMalloc2(2 * ng, &sigt, 2 * ng * ng, &sigs));
  PetscCall(PetscArrayzero(sigs, 2 * ng * ng));
  for (PetscInt m = 0; m < 2; m++)
    for (PetscInt g = 0; g < ng; g++) {
      const PetscReal st = (m ? 2.0 : 1.0) * (1 + 0.05 * g), down = g < ng - 1 ? 0.15 : 0.0, up = g > 0 ? 0.05 : 0.0;
      sigt[m * ng + g]                    = st;
      sigs[m * ng * ng + g * ng + g]      = (1 - down - up) * c * st;
      if (down > 0) sigs[m * ng * ng + (g + 1) * ng + g] = down * c * st;
      if (up > 0) sigs[m * ng * ng + (g - 1) * ng + g] = up * c * st;
    }
  PetscCall(MatSweepSetMaterials(A, 2, sigt, sigs));
  nc = info.xm * info.ym * info.zm; /* this rank's cells, given from their global indices */
  PetscCall(PetscMalloc2(nc, &mat, nc * ng, &q));
  for (PetscInt k = info.zs, cell = 0; k < info.zs + info.zm; k++)
    for (PetscInt j = info.ys; j < info.ys + info.ym; j++)
      for (PetscInt i = info.xs; i < info.xs + info.xm; i++, cell++) {
        mat[cell] = (2 * i < nx && 2 * j < ny && 2 * k < nz) ? 1 : 0;
        for (PetscInt g = 0; g < ng; g++) q[cell * ng + g] = (4 * i >= nx && 4 * i < 3 * nx && 4 * j >= ny && 4 * j < 3 * ny && 4 * k >= nz && 4 * k < 3 * nz) ? 1.0 : 0.0;
      }
  PetscCall(MatSweepSetMaterialMap(A, mat));
  PetscCall(MatSweepSetSource(A, q));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatSweepGetDevice(A, &dev));
  PetscCall(MatSweepGetSizes(A, NULL, &nd, &cm, NULL));
  nc = nx * ny * nz; /* grind times over all ranks' cells, as SNAP's */
  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(MatSweepComputeRHS(A, x));
  PetscCall(MatMult(A, x, y)); /* warm-up: first-touch pages, kernel loading */

  PetscCall(PetscMalloc2(reps, &tw, reps, &tk));
  for (PetscInt r = 0; r < reps; r++) {
    PetscLogDouble t0, t1;
    PetscReal      kg;
    PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
    PetscCall(PetscTime(&t0));
    PetscCall(MatMult(A, x, y));
    PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
    PetscCall(PetscTime(&t1));
    PetscCall(MatSweepGetStatistics(A, NULL, NULL, &kg));
    tw[r] = t1 - t0;
    tk[r] = kg * 1e-9 * (PetscReal)nc * nd * ng; /* seconds */
  }
  qsort(tw, reps, sizeof(PetscReal), CmpReal);
  qsort(tk, reps, sizeof(PetscReal), CmpReal);
  PetscCall(VecSum(y, &sum));
  {
    const PetscReal work = (PetscReal)nc * nd * ng, face = 32.0 * work / 1e9, tkm = tk[reps / 2];
    PetscCall(PetscStrncpy(layout, "GZD", sizeof(layout)));
    PetscCall(PetscOptionsGetString(NULL, NULL, "-mat_sweep_layout", layout, sizeof(layout), NULL));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "sweep: device=%s ranks=%d cells=%" PetscInt_FMT " nx=%" PetscInt_FMT " ny=%" PetscInt_FMT " nz=%" PetscInt_FMT " nang=%" PetscInt_FMT " dirs=%" PetscInt_FMT " groups=%" PetscInt_FMT " moments=%" PetscInt_FMT " layout=%s threads=%" PetscInt_FMT " reps=%" PetscInt_FMT, MatSweepDevices[dev], size, nc, nx, ny, nz, nd / 8, nd, ng, cm, layout, threads, reps));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, " mult_med_s=%.6f mult_min_s=%.6f mult_max_s=%.6f grind_med_ns=%.5f", (double)tw[reps / 2], (double)tw[0], (double)tw[reps - 1], (double)(1e9 * tw[reps / 2] / work)));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, " kernel_med_s=%.6f kernel_grind_med_ns=%.5f kernel_grind_min_ns=%.5f face_GB=%.2f face_GBs=%.0f\n", (double)tkm, (double)(1e9 * tkm / work), (double)(1e9 * tk[0] / work), (double)face, tkm > 0 ? (double)(face / tkm) : 0.0));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "check: phi_sum=%.17e\n", (double)sum));
  }
  PetscCall(PetscFree2(tw, tk));
  if (breakdown) { /* logging syncs the GPU after each phase: a run of its own, after the timed one */
    PetscLogEvent      ev[2];
    PetscEventPerfInfo b[2], a[2];
    const char        *name[2] = {"Sweep", "SweepKBAWait"};
    PetscReal          t[2], tmax[2];
    PetscCall(PetscLogDefaultBegin());
    for (int e = 0; e < 2; e++) {
      PetscCall(PetscLogEventGetId(name[e], &ev[e]));
      PetscCall(PetscLogEventGetPerfInfo(PETSC_DETERMINE, ev[e], &b[e]));
    }
    for (PetscInt r = 0; r < reps; r++) PetscCall(MatMult(A, x, y));
    for (int e = 0; e < 2; e++) {
      PetscCall(PetscLogEventGetPerfInfo(PETSC_DETERMINE, ev[e], &a[e]));
      t[e] = (PetscReal)(a[e].time - b[e].time) / reps;
    }
    PetscCall(MPIU_Allreduce(t, tmax, 2, MPIU_REAL, MPIU_MAX, PETSC_COMM_WORLD));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "breakdown: sweep_event_max_s=%.6f kba_wait_max_s=%.6f (per product, the slowest rank's)\n", (double)tmax[0], (double)tmax[1]));
  }
  PetscCall(PetscFree2(mat, q));
  PetscCall(PetscFree2(sigt, sigs));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
  PetscCall(DMDestroy(&da));
  PetscCall(PetscFinalize());
  return 0;
}
