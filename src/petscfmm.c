/* Package registration: the Mat type, the log events, the dynamic-library entry point. */
#include "fmm/fmmimpl.h"

PetscLogEvent MATFMM_Setup, MATFMM_Tree, MATFMM_P2M, MATFMM_M2M, MATFMM_M2L, MATFMM_L2L, MATFMM_L2P, MATFMM_P2P, MATFMM_Direct;

static PetscBool PetscFMMPackageInitialized = PETSC_FALSE;

PETSC_EXTERN PetscErrorCode MatCreate_FMM(Mat);

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
   PetscFMMInitializePackage - Registers the `MATFMM` type and the log events
   of its phases (FMMSetup, FMMTreeBuild, FMMP2M, FMMM2M, FMMM2L, FMML2L,
   FMML2P, FMMP2P, FMMDirect), so `-mat_type fmm` and `-log_view` know them.

   Not collective; call after `PetscInitialize()` in programs that link
   petscfmm (`MatCreateFMM()` and `-dll_append` call it for you).  Calling it
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

/*@
   PetscFMMCUDAGetDeviceCount - Number of CUDA GPUs this process can use (0 when
   petscfmm was built without CUDA or no GPU/driver is present).

   Not collective

   Output Parameter:
.  n - the number of devices

   Level: intermediate

.seealso: `MatFMMSetDevice()`
@*/
PetscErrorCode PetscFMMCUDAGetDeviceCount(PetscInt *n)
{
  PetscFunctionBegin;
  PetscAssertPointer(n, 1);
  *n = 0;
#if defined(PETSCFMM_HAVE_CUDA)
  {
    int c = 0;
    PetscCall(FMMCUDADeviceCount(&c));
    *n = c;
  }
#endif
  PetscFunctionReturn(0);
}

#if defined(PETSCFMM_HAVE_CUDA)
/* a product of the default configuration on a small problem: the GPU
   kernels it uses (ours and CUB's) are loaded on first use (CUDA lazy
   loading), about a quarter of a millisecond each */
static PetscErrorCode FMMCUDAWarmUp(void)
{
  const PetscInt n = 1 << 17;
  PetscReal     *xy;
  Mat            A;
  Vec            x, y;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(2 * n, &xy));
  for (PetscInt i = 0; i < n; i++) { /* golden-angle spiral filling the unit disc */
    PetscReal r = PetscSqrtReal((i + 0.5) / n), a = 2.399963229728653 * i;
    xy[2 * i]     = r * PetscCosReal(a);
    xy[2 * i + 1] = r * PetscSinReal(a);
  }
  PetscCall(MatCreate(PETSC_COMM_SELF, &A));
  PetscCall(MatSetSizes(A, n, n, n, n));
  PetscCall(MatSetType(A, MATFMM));
  PetscCall(MatFMMSetSources(A, n, xy, NULL, NULL));
  PetscCall(MatFMMSetDevice(A, MATFMM_DEVICE_CUDA));
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatCreateVecs(A, &x, &y));
  PetscCall(VecSet(x, 1.0));
  PetscCall(MatMult(A, x, y));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&y));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFree(xy));
  PetscFunctionReturn(0);
}
#endif

/*@
   PetscFMMCUDAInitialize - Pays the once-per-process costs of the GPU now:
   selects this rank's GPU (MPI rank in `PETSC_COMM_WORLD` modulo the number
   of devices, as `MATFMM` does), creates its CUDA context, pins the host
   staging buffers, and loads the GPU kernels of the default configuration by
   one small product (and one sort for the kernels that CUB picks only for
   larger problems, and those that copy points given in GPU memory), so that
   the first `MatAssemblyEnd()` and `MatMult()` of a `MATFMM` on the GPU cost
   about what later ones cost.  What a first assembly still pays is the GPU
   memory it takes: petscfmm's pool maps it fresh (about 0.35 ms for 10^6
   points, 2.5 ms for 10^7 on an H100), and later assemblies reuse it;
   `-mat_fmm_cuda_pool_reserve` maps it here instead.

   Not collective

   Options Database Key:
.  -mat_fmm_cuda_pool_reserve <MB> - GPU memory, in MB (2^20 bytes), that
   petscfmm's memory pool on this rank's GPU maps when it is made (default
   0), so that the first assemblies reuse it as later ones do instead of
   mapping it fresh.  Read once per process, when the CUDA context is made:
   here, or at the first GPU assembly without this call.  `MatView()` of a
   `MATFMM` on the GPU prints what the pool holds and the most of it in use
   at once so far, the size to give; the memory stays with petscfmm until
   `PetscFinalize()` (or until an allocation would otherwise fail).  With a
   reserve, a matrix's copy of points given in GPU memory
   (`MatFMMSetSources()`, 5 reals a point) comes from the pool as well.

   Notes:
   Without this call the first assembly on the GPU pays these costs: the
   context alone takes 0.1 to 0.5 s, kernel loading (CUDA loads kernels on
   first use) a few milliseconds.  Does nothing when petscfmm was built
   without CUDA or no GPU is present, and when called again.  The warm-up
   product appears once in -log_view.

   GPU memory of `MATFMM` comes from a stream-ordered memory pool of
   petscfmm's own on this rank's device, created here, which keeps what is
   freed: `MatDestroy()` and a new assembly return memory to the pool, and the
   next assembly reuses it without mapping new pages.  The pool's unused
   memory is released when an allocation would otherwise fail and at
   `PetscFinalize()`; the device's default pool is left as it is.

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - `-mat_fmm_cuda_pool_reserve` is negative, not
   finite or more than the GPU's memory (nothing but the CUDA context is
   made; a later call tries again)
.  `PETSC_ERR_MEM` - the GPU has less free memory than
   `-mat_fmm_cuda_pool_reserve` (the rest is made and the reserve is not
   tried again)
-  `PETSC_ERR_GPU` - the CUDA runtime failed

   Level: intermediate

.seealso: `PetscFMMCUDAGetDeviceCount()`, `MatFMMSetDevice()`
@*/
PetscErrorCode PetscFMMCUDAInitialize(void)
{
  static PetscBool done = PETSC_FALSE;

  PetscFunctionBegin;
  if (done) PetscFunctionReturn(0);
#if defined(PETSCFMM_HAVE_CUDA)
  {
    int c = 0;
    PetscCall(FMMCUDADeviceCount(&c));
    if (c > 0) {
      PetscCall(PetscFMMInitializePackage());
      PetscCall(FMMCUDAInitializeContext());
      PetscCall(FMMCUDAWarmUp());
      PetscCall(FMMCUDAWarmUpSorts());
      PetscCall(FMMCUDAPointsLoad()); /* those of points given in GPU memory */
    }
  }
#endif
  done = PETSC_TRUE; /* after an error, a later call tries again */
  PetscFunctionReturn(0);
}
