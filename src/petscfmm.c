/* Package registration: the Mat type, the log events, the dynamic-library entry point. */
#include "fmm/fmmimpl.h"
#include "sweep/sweepimpl.h"

PetscLogEvent MATSWEEP_Setup, MATSWEEP_Source, MATSWEEP_Sweep, MATSWEEP_KBAWait;
PetscLogEvent MATFMM_Exchange, MATFMM_Move, MATFMM_Copy, MATFMM_Partition, MATFMM_Setup, MATFMM_Tree, MATFMM_P2M, MATFMM_M2M, MATFMM_M2L, MATFMM_L2L, MATFMM_L2P, MATFMM_P2P, MATFMM_Direct;

static PetscBool PetscFMMPackageInitialized = PETSC_FALSE;

PETSC_EXTERN PetscErrorCode MatCreate_FMM(Mat);
PETSC_EXTERN PetscErrorCode MatCreate_Sweep(Mat);

/*@C
   PetscFMMFinalizePackage - Called by `PetscFinalize()` to forget the package's registration.

   Not collective

   Level: developer

.seealso: `PetscFMMInitializePackage()`
@*/
PetscErrorCode PetscFMMFinalizePackage(void)
{
  PetscFunctionBegin;
  PetscFMMPackageInitialized = PETSC_FALSE;
  PetscFunctionReturn(0);
}

/*@C
   PetscFMMInitializePackage - Registers the `MATFMM` and `MATSWEEP` types and
   the log events of their phases (FMMSetup, FMMTreeBuild, FMMP2M, FMMM2M,
   FMMM2L, FMML2L, FMML2P, FMMP2P, FMMDirect; SweepSetup, SweepSource,
   Sweep), so `-mat_type fmm`, `-mat_type sweep` and `-log_view` know them.

   Not collective; call after `PetscInitialize()` in programs that link
   petscfmm (`MatCreateFMM()`, `MatCreateSweep()` and `-dll_append` call it for you).  Calling it
   again does nothing.

   Level: beginner

.seealso: `MATFMM`, `PetscFMMFinalizePackage()`
@*/
PetscErrorCode PetscFMMInitializePackage(void)
{
  PetscFunctionBegin;
  if (PetscFMMPackageInitialized) PetscFunctionReturn(0);
  PetscFMMPackageInitialized = PETSC_TRUE;
  PetscCall(MatInitializePackage());
  PetscCall(MatRegister(MATFMM, MatCreate_FMM));
  PetscCall(PetscLogEventRegister("FMMSetup", MAT_CLASSID, &MATFMM_Setup));
  PetscCall(PetscLogEventRegister("FMMTreeBuild", MAT_CLASSID, &MATFMM_Tree));
  PetscCall(PetscLogEventRegister("FMMP2M", MAT_CLASSID, &MATFMM_P2M));
  PetscCall(PetscLogEventRegister("FMMM2M", MAT_CLASSID, &MATFMM_M2M));
  PetscCall(PetscLogEventRegister("FMMM2L", MAT_CLASSID, &MATFMM_M2L));
  PetscCall(PetscLogEventRegister("FMML2L", MAT_CLASSID, &MATFMM_L2L));
  PetscCall(PetscLogEventRegister("FMML2P", MAT_CLASSID, &MATFMM_L2P));
  PetscCall(PetscLogEventRegister("FMMP2P", MAT_CLASSID, &MATFMM_P2P));
  PetscCall(PetscLogEventRegister("FMMDirect", MAT_CLASSID, &MATFMM_Direct));
  PetscCall(PetscLogEventRegister("FMMPartition", MAT_CLASSID, &MATFMM_Partition));
  PetscCall(PetscLogEventRegister("FMMExchange", MAT_CLASSID, &MATFMM_Exchange));
  PetscCall(PetscLogEventRegister("FMMMove", MAT_CLASSID, &MATFMM_Move));
  PetscCall(PetscLogEventRegister("FMMCopy", MAT_CLASSID, &MATFMM_Copy));
  PetscCall(MatRegister(MATSWEEP, MatCreate_Sweep));
  PetscCall(PetscLogEventRegister("SweepSetup", MAT_CLASSID, &MATSWEEP_Setup));
  PetscCall(PetscLogEventRegister("SweepSource", MAT_CLASSID, &MATSWEEP_Source));
  PetscCall(PetscLogEventRegister("Sweep", MAT_CLASSID, &MATSWEEP_Sweep));
  PetscCall(PetscLogEventRegister("SweepKBAWait", MAT_CLASSID, &MATSWEEP_KBAWait));
  PetscCall(PetscRegisterFinalize(PetscFMMFinalizePackage));
  PetscFunctionReturn(0);
}

/*
  PetscDLLibraryRegister_petscfmm - entry point PETSc calls when the library is
  loaded with -dll_append /path/to/libpetscfmm.so
*/
PETSC_EXTERN PetscErrorCode PetscDLLibraryRegister_petscfmm(void)
{
  PetscFunctionBegin;
  PetscCall(PetscFMMInitializePackage());
  PetscFunctionReturn(0);
}
