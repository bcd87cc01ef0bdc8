static char help[] = "Bad input to MATSWEEP gets a clear PETSc error (no crash, no hang, no leak).\n\n";

/*
  Each case starts from a valid problem (a 4 x 3 x 2 grid, 2 groups, L = 1,
  not assembled), makes one mistake between
  PetscPushErrorHandler(PetscReturnErrorHandler) and PetscPopErrorHandler(),
  and prints
      case <name>: error <code> (expected <code>): <the error's message>
  The messages name the value and what was expected.  The matrix and grid
  are destroyed after each case (-malloc_dump: nothing may leak), and the
  arrays given to the matrix must still hold what they held.
*/
#include <petscfmm.h>
#include <petscdmshell.h>

static PetscInt        nfail = 0;
static const PetscReal gsigt[2] = {1.0, 2.0}, gsigs[8] = {0.5, 0.1, 0.2, 1.0, 0.1, 0.0, 0.0, 0.1};
static PetscReal       bad[8], q[24 * 2];

typedef PetscErrorCode (*CaseFn)(DM, Mat);

static PetscErrorCode Valid(DM *da, Mat *A)
{
  PetscFunctionBeginUser;
  PetscCall(DMDACreate3d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, 4, 3, 2, PETSC_DECIDE, PETSC_DECIDE, PETSC_DECIDE, 1, 1, NULL, NULL, NULL, da));
  PetscCall(DMSetUp(*da));
  PetscCall(MatCreate(PETSC_COMM_WORLD, A));
  PetscCall(MatSetType(*A, MATSWEEP));
  PetscCall(MatSweepSetGroups(*A, 2));
  PetscCall(MatSweepSetScatteringOrder(*A, 1, MATSWEEP_EXPANSION_HARMONICS));
  PetscCall(MatSweepSetMaterials(*A, 1, gsigt, gsigs));
  PetscFunctionReturn(0);
}

static PetscErrorCode Assemble(Mat A)
{
  PetscFunctionBegin;
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

static PetscErrorCode Run(const char *name, PetscErrorCode expected, CaseFn fn)
{
  DM             da;
  Mat            A;
  PetscErrorCode code;
  const char    *text = NULL;
  char          *specific = NULL;
  PetscReal      qc[48];

  PetscFunctionBeginUser;
  for (int i = 0; i < 48; i++) q[i] = 1.0 + i;
  PetscCall(PetscArraycpy(qc, q, 48));
  PetscCall(Valid(&da, &A));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  code = fn(da, A);
  PetscCall(PetscPopErrorHandler());
  if (code) PetscErrorMessage(code, &text, &specific);
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "case %s: error %d (expected %d)%s%s%s\n", name, (int)code, (int)expected, code == expected ? "" : "  FAILED", specific ? ": " : "", specific ? specific : ""));
  if (code != expected) nfail++;
  if (memcmp(q, qc, sizeof(qc))) {
    nfail++;
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  the source array was modified\n"));
  }
  PetscCall(MatDestroy(&A));
  PetscCall(DMDestroy(&da));
  PetscFunctionReturn(0);
}

static PetscErrorCode NoDM(DM da, Mat A)
{
  (void)da;
  return Assemble(A);
}
static PetscErrorCode WrongDim(DM da, Mat A)
{
  DM  d1;
  PetscErrorCode e;
  (void)da;
  PetscCall(DMDACreate1d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, 8, 1, 1, NULL, &d1));
  PetscCall(DMSetUp(d1));
  e = MatSweepSetDM(A, d1);
  PetscCall(DMDestroy(&d1));
  return e;
}
static PetscErrorCode NotDA(DM da, Mat A)
{
  DM             s;
  PetscErrorCode e;
  (void)da;
  PetscCall(DMShellCreate(PETSC_COMM_WORLD, &s));
  e = MatSweepSetDM(A, s);
  PetscCall(DMDestroy(&s));
  return e;
}
static PetscErrorCode ZeroGroups(DM da, Mat A)
{
  (void)da;
  return MatSweepSetGroups(A, 0);
}
static PetscErrorCode ZeroAngles(DM da, Mat A)
{
  (void)da;
  return MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_SNAP, 0);
}
static PetscErrorCode OddSn(DM da, Mat A)
{
  (void)da;
  return MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_LEVELSYM, 5);
}
static PetscErrorCode S18(DM da, Mat A)
{
  (void)da;
  return MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_LEVELSYM, 18);
}
static PetscErrorCode BigL(DM da, Mat A)
{
  (void)da;
  return MatSweepSetScatteringOrder(A, 8, MATSWEEP_EXPANSION_HARMONICS);
}
static PetscErrorCode NegSigt(DM da, Mat A)
{
  (void)da;
  bad[0] = 1.0;
  bad[1] = -0.5;
  return MatSweepSetMaterials(A, 1, bad, gsigs);
}
static PetscErrorCode NanSigt(DM da, Mat A)
{
  (void)da;
  bad[0] = NAN;
  bad[1] = 1.0;
  return MatSweepSetMaterials(A, 1, bad, gsigs);
}
static PetscErrorCode NanSigs(DM da, Mat A)
{
  (void)da;
  PetscCall(PetscArraycpy(bad, gsigs, 8));
  bad[5] = INFINITY;
  return MatSweepSetMaterials(A, 1, gsigt, bad);
}
static PetscErrorCode NegSigs(DM da, Mat A)
{
  (void)da;
  PetscCall(PetscArraycpy(bad, gsigs, 8));
  bad[1] = -0.1;
  return MatSweepSetMaterials(A, 1, gsigt, bad);
}
static PetscErrorCode RatioAboveOne(DM da, Mat A)
{
  PetscCall(PetscArraycpy(bad, gsigs, 8));
  bad[3] = 2.5; /* out of group 1: 2.5 (to itself) + 0.1 (to group 0) > sigma_t = 2 */
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(MatSweepSetMaterials(A, 1, gsigt, bad));
  return Assemble(A);
}
static PetscErrorCode MapOutOfRange(DM da, Mat A)
{
  PetscInt mat[24] = {0};
  mat[17]          = 3;
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(MatSweepSetMaterialMap(A, mat));
  return Assemble(A);
}
static PetscErrorCode NanSource(DM da, Mat A)
{
  PetscReal s[48];
  PetscCall(MatSweepSetDM(A, da));
  for (int i = 0; i < 48; i++) s[i] = 1;
  s[31] = NAN;
  return MatSweepSetSource(A, s);
}
static PetscErrorCode SourceBeforeDM(DM da, Mat A)
{
  (void)da;
  return MatSweepSetSource(A, q);
}
static PetscErrorCode TableBeforeGroups(DM da, Mat A)
{
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(MatSweepSetGroups(A, 3)); /* the table was set for 2 */
  return Assemble(A);
}
static PetscErrorCode SourceGroupsChanged(DM da, Mat A)
{
  const PetscReal s3[3] = {1, 1, 1}, ss3[18] = {0};
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(MatSweepSetSource(A, q)); /* for 2 groups */
  PetscCall(MatSweepSetGroups(A, 3));
  PetscCall(MatSweepSetMaterials(A, 1, s3, ss3));
  return Assemble(A);
}
static PetscErrorCode ZeroLength(DM da, Mat A)
{
  (void)da;
  return MatSweepSetDomain(A, 1.0, 0.0, 1.0);
}
static PetscErrorCode WrongVector(DM da, Mat A)
{
  Vec            x, y;
  PetscErrorCode e;
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(Assemble(A));
  PetscCall(DMCreateGlobalVector(da, &x)); /* one dof per cell: not the moments */
  PetscCall(MatCreateVecs(A, NULL, &y));
  e = MatMult(A, x, y);
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  return e;
}
static PetscErrorCode WrongRHS(DM da, Mat A)
{
  Vec            b;
  PetscErrorCode e;
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(Assemble(A));
  PetscCall(DMCreateGlobalVector(da, &b));
  e = MatSweepComputeRHS(A, b);
  PetscCall(VecDestroy(&b));
  return e;
}
static PetscErrorCode Unassembled(DM da, Mat A)
{
  Vec            b;
  PetscErrorCode e;
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(VecCreateSeq(PETSC_COMM_SELF, 96, &b));
  e = MatSweepComputeRHS(A, b);
  PetscCall(VecDestroy(&b));
  return e;
}
static PetscErrorCode SetterThenMult(DM da, Mat A)
{
  Vec            x, y;
  PetscErrorCode e;
  PetscCall(MatSweepSetDM(A, da));
  PetscCall(Assemble(A));
  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(VecSet(x, 1.0));
  PetscCall(MatSweepSetScheme(A, MATSWEEP_SCHEME_STEP, PETSC_FALSE)); /* a new operator: assemble again */
  e = MatMult(A, x, y);
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  return e;
}
static PetscErrorCode NotSweep(DM da, Mat A)
{
  Mat            B;
  PetscErrorCode e;
  (void)da;
  (void)A;
  PetscCall(MatCreate(PETSC_COMM_WORLD, &B));
  PetscCall(MatSetType(B, MATAIJ));
  e = MatSweepSetGroups(B, 2);
  PetscCall(MatDestroy(&B));
  return e;
}
static PetscErrorCode BadBoundary(DM da, Mat A)
{
  MatSweepBoundary bc[6] = {MATSWEEP_BOUNDARY_VACUUM, MATSWEEP_BOUNDARY_VACUUM, (MatSweepBoundary)7, MATSWEEP_BOUNDARY_VACUUM, MATSWEEP_BOUNDARY_VACUUM, MATSWEEP_BOUNDARY_VACUUM};
  (void)da;
  return MatSweepSetBoundary(A, bc);
}
static PetscErrorCode SplitX(DM da, Mat A)
{
  DM             dx;
  PetscErrorCode e;
  PetscMPIInt    size;
  (void)da;
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCall(DMDACreate3d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, 4 * size, 3, 2, size, 1, 1, 1, 1, NULL, NULL, NULL, &dx));
  PetscCall(DMSetUp(dx));
  PetscCall(MatSweepSetDM(A, dx));
  PetscCall(DMDestroy(&dx));
  e = Assemble(A);
  return e;
}

int main(int argc, char **argv)
{
  PetscMPIInt size;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscFMMInitializePackage());
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  if (size > 1) {
    PetscCall(Run("a DMDA that splits x over the ranks", PETSC_ERR_SUP, SplitX));
  } else {
    PetscCall(Run("assembly without a grid", PETSC_ERR_ARG_WRONGSTATE, NoDM));
    PetscCall(Run("a 1D DMDA", PETSC_ERR_ARG_WRONG, WrongDim));
    PetscCall(Run("a DM that is not a DMDA", PETSC_ERR_ARG_WRONG, NotDA));
    PetscCall(Run("zero groups", PETSC_ERR_ARG_OUTOFRANGE, ZeroGroups));
    PetscCall(Run("zero angles", PETSC_ERR_ARG_OUTOFRANGE, ZeroAngles));
    PetscCall(Run("odd S_N order", PETSC_ERR_ARG_OUTOFRANGE, OddSn));
    PetscCall(Run("S_N order 18", PETSC_ERR_ARG_OUTOFRANGE, S18));
    PetscCall(Run("scattering order 8", PETSC_ERR_ARG_OUTOFRANGE, BigL));
    PetscCall(Run("negative sigma_t", PETSC_ERR_ARG_OUTOFRANGE, NegSigt));
    PetscCall(Run("NaN sigma_t", PETSC_ERR_ARG_OUTOFRANGE, NanSigt));
    PetscCall(Run("Inf sigma_s", PETSC_ERR_ARG_OUTOFRANGE, NanSigs));
    PetscCall(Run("negative sigma_s,0", PETSC_ERR_ARG_OUTOFRANGE, NegSigs));
    PetscCall(Run("scattering ratio above 1", PETSC_ERR_ARG_OUTOFRANGE, RatioAboveOne));
    PetscCall(Run("material number outside the table", PETSC_ERR_ARG_OUTOFRANGE, MapOutOfRange));
    PetscCall(Run("NaN source", PETSC_ERR_ARG_OUTOFRANGE, NanSource));
    PetscCall(Run("source before the grid", PETSC_ERR_ARG_WRONGSTATE, SourceBeforeDM));
    PetscCall(Run("material table for other groups", PETSC_ERR_ARG_SIZ, TableBeforeGroups));
    PetscCall(Run("source for other groups", PETSC_ERR_ARG_SIZ, SourceGroupsChanged));
    PetscCall(Run("zero domain length", PETSC_ERR_ARG_OUTOFRANGE, ZeroLength));
    PetscCall(Run("MatMult with a vector of the grid, not of the moments", PETSC_ERR_ARG_SIZ, WrongVector));
    PetscCall(Run("right-hand side of the wrong layout", PETSC_ERR_ARG_SIZ, WrongRHS));
    PetscCall(Run("right-hand side before assembly", PETSC_ERR_ARG_WRONGSTATE, Unassembled));
    PetscCall(Run("MatSweep function on an AIJ matrix", PETSC_ERR_ARG_WRONG, NotSweep));
    PetscCall(Run("MatMult after a setter, not assembled again", PETSC_ERR_ARG_WRONGSTATE, SetterThenMult));
    PetscCall(Run("unknown boundary condition", PETSC_ERR_ARG_OUTOFRANGE, BadBoundary));
  }
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s\n", nfail ? "SOME CASES FAILED" : "all cases behaved as expected"));
  PetscCall(PetscFinalize());
  return nfail ? 1 : 0;
}

/*TEST
  test:
    args: -malloc_dump
  test:
    suffix: 2
    nsize: 2
    args: -malloc_dump
TEST*/
