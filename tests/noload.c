static char help[] = "A PETSc program that does not link petscfmm gets MATFMM through -dll_append.\n\
Run with -dll_append lib/libpetscfmm.so -mat_type fmm (path relative to the repository root, or absolute).\n\
  -n <N>                      number of sources, targets = sources (default 3000)\n\
  -kernel <single,double>     passed as -mat_fmm_kernel through the options database (default single)\n\n";

/*
  This file includes only petscmat.h and is linked without -lpetscfmm (see the
  makefile): everything goes through PETSc.  MatSetFromOptions() with
  -mat_type fmm creates the type registered by PetscDLLibraryRegister_petscfmm();
  the sources are set through the composed method "MatFMMSetSources_C" (what
  MatFMMSetSources() calls), the kernel and the parameters through the options
  database.  The product is checked against a direct sum computed here from the
  documented definition of the operator.
*/
#include <petscmat.h>
#include <petsc/private/petscimpl.h> /* PetscUseMethod() */

typedef PetscErrorCode (*SetSourcesFn)(Mat, PetscInt, const PetscReal[], const PetscReal[], const PetscReal[]);

int main(int argc, char **argv)
{
  Mat                A;
  Vec                x, y;
  PetscInt           N = 3000, n = PETSC_DECIDE, s0, m;
  PetscReal         *xy, *nrm, *w, err = 0, mx = 0, gerr, gmx;
  PetscBool          isfmm, dbl = PETSC_FALSE;
  char               kernel[32] = "single";
  MatType            type;
  SetSourcesFn       setsrc = NULL;
  const PetscScalar *ya;
  PetscMPIInt        rank;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &N, NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-kernel", kernel, sizeof(kernel), NULL));
  PetscCall(PetscStrcmp(kernel, "double", &dbl));
  PetscCall(PetscOptionsSetValue(NULL, "-mat_fmm_kernel", kernel));

  /* geometry: a circle of radius 1 with outward normals and weights 2 pi / N (all ranks hold all) */
  PetscCall(PetscMalloc3(2 * N, &xy, 2 * N, &nrm, N, &w));
  for (PetscInt j = 0; j < N; j++) {
    PetscReal t = 2 * PETSC_PI * j / N, r = 1 + 0.2 * PetscSinReal(3 * t);
    xy[2 * j]      = r * PetscCosReal(t);
    xy[2 * j + 1]  = r * PetscSinReal(t);
    nrm[2 * j]     = PetscCosReal(t);
    nrm[2 * j + 1] = PetscSinReal(t);
    w[j]           = 2 * PETSC_PI / N;
  }
  PetscCall(PetscSplitOwnership(PETSC_COMM_WORLD, &n, &N));
  PetscCallMPI(MPI_Scan(&n, &s0, 1, MPIU_INT, MPI_SUM, PETSC_COMM_WORLD));
  s0 -= n;

  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, n, n, N, N));
  PetscCall(MatSetFromOptions(A)); /* -mat_type fmm */
  PetscCall(MatGetType(A, &type));
  PetscCall(PetscStrcmp(type, "fmm", &isfmm));
  PetscCheck(isfmm, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "Expected a matrix of type fmm from -dll_append .../libpetscfmm.so -mat_type fmm, got %s", type);
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "MatSetFromOptions gave type %s\n", type));

  /* the composed setter, as MatFMMSetSources() does with PetscTryMethod() */
  PetscCall(PetscObjectQueryFunction((PetscObject)A, "MatFMMSetSources_C", &setsrc));
  PetscCheck(setsrc, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "MatFMMSetSources_C is not composed with the matrix");
  PetscUseMethod(A, "MatFMMSetSources_C", (Mat, PetscInt, const PetscReal[], const PetscReal[], const PetscReal[]), (A, n, xy + 2 * s0, nrm + 2 * s0, w + s0));
  PetscCall(MatSetFromOptions(A)); /* now the fmm options (-mat_fmm_kernel) apply */
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));

  PetscCall(MatCreateVecs(A, &x, &y));
  {
    PetscScalar *xa;
    PetscCall(VecGetArrayWrite(x, &xa));
    for (PetscInt j = 0; j < n; j++) xa[j] = PetscCosReal(0.001 * (s0 + j) * (s0 + j));
    PetscCall(VecRestoreArrayWrite(x, &xa));
  }
  PetscCall(MatMult(A, x, y));

  /* direct sum: S_ij = -(1/2pi) log|z_i - y_j| w_j,  D_ij = (1/2pi) n_j.(z_i - y_j)/|z_i - y_j|^2 w_j,  j != i */
  PetscCall(MatGetOwnershipRange(A, &s0, &m));
  m -= s0;
  PetscCall(VecGetArrayRead(y, &ya));
  for (PetscInt i = 0; i < m; i++) {
    PetscInt  gi = s0 + i;
    PetscReal s  = 0;
    for (PetscInt j = 0; j < N; j++) {
      PetscReal rx = xy[2 * gi] - xy[2 * j], ry = xy[2 * gi + 1] - xy[2 * j + 1], r2 = rx * rx + ry * ry, xj = PetscCosReal(0.001 * j * j);
      if (j == gi) continue;
      if (dbl) s += (nrm[2 * j] * rx + nrm[2 * j + 1] * ry) / r2 * w[j] * xj / (2 * PETSC_PI);
      else s += -0.5 * PetscLogReal(r2) * w[j] * xj / (2 * PETSC_PI);
    }
    err = PetscMax(err, PetscAbsReal(ya[i] - s));
    mx  = PetscMax(mx, PetscAbsReal(s));
  }
  PetscCall(VecRestoreArrayRead(y, &ya));
  PetscCallMPI(MPI_Allreduce(&err, &gerr, 1, MPIU_REAL, MPI_MAX, PETSC_COMM_WORLD));
  PetscCallMPI(MPI_Allreduce(&mx, &gmx, 1, MPIU_REAL, MPI_MAX, PETSC_COMM_WORLD));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s layer, N=%" PetscInt_FMT ": MatMult matches the direct sum to 1e-10 (max norm, relative) %s\n", dbl ? "double" : "single", N, gerr <= 1e-10 * gmx ? "ok" : "FAILED"));
  PetscCheck(gerr <= 1e-10 * gmx, PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED, "relative error %g", (double)(gerr / gmx));

  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFree3(xy, nrm, w));
  PetscCall(PetscFinalize());
  return 0;
}

/*TEST
  test:
    args: -dll_append lib/libpetscfmm.so -mat_type fmm -malloc_dump
  test:
    suffix: double
    nsize: 2
    args: -dll_append lib/libpetscfmm.so -mat_type fmm -kernel double -mat_fmm_layout indexing -malloc_dump
TEST*/
