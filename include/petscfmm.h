/*
   petscfmm: GPU-fast hierarchical operators as PETSc matrices.

   MATFMM ("fmm") is an M x N matrix that maps densities on N sources to
   values of the 2D Laplace single/double layer potential at M targets,
   applied by an adaptive fast multipole method (Greengard & Rokhlin 1987;
   Goude & Engblom 2013).  See the manual page of MATFMM.
*/
#pragma once

#include <petscmat.h>

#if defined(PETSC_USE_COMPLEX)
  #error "petscfmm needs a PETSc configured with real scalars (--with-scalar-type=real)"
#endif

/*J
   MATFMM - "fmm" - A matrix type whose MatMult is a 2D fast multipole method.

   Level: beginner

.seealso: `MatFMMSetSources()`, `MatFMMSetTargets()`, `MatFMMSetKernel()`
J*/
#define MATFMM "fmm"

/*E
   MatFMMKernel - The Laplace layer potential a `MATFMM` applies

$  `MATFMM_KERNEL_SINGLE`   - single layer S: (S s)_i = -(1/2pi) sum_j log|z_i - y_j| w_j s_j
$  `MATFMM_KERNEL_DOUBLE`   - double layer D: (D s)_i = (1/2pi) sum_j n_j.(z_i - y_j)/|z_i - y_j|^2 w_j s_j
$  `MATFMM_KERNEL_COMBINED` - alpha D + beta S

   Level: beginner

.seealso: `MatFMMSetKernel()`, `MATFMM`
E*/
typedef enum {
  MATFMM_KERNEL_SINGLE,
  MATFMM_KERNEL_DOUBLE,
  MATFMM_KERNEL_COMBINED
} MatFMMKernel;
PETSC_EXTERN const char *const MatFMMKernels[];

/*E
   MatFMMLayout - Data layout of the near field (P2P) evaluation

$  `MATFMM_LAYOUT_TILED`      - sources of each leaf box contiguous in tree order; each target leaf walks
$                               its neighbour leaves as contiguous blocks (shared-memory tiles on the GPU)
$  `MATFMM_LAYOUT_INDEXING`   - compact index arrays: per leaf the indices of all neighbour sources
$  `MATFMM_LAYOUT_REPETITION` - per target a contiguous record with a copy of every neighbour source,
$                               built in chunks that respect `-mat_fmm_repetition_mb`

   Level: intermediate

.seealso: `MatFMMSetLayout()`
E*/
typedef enum {
  MATFMM_LAYOUT_TILED,
  MATFMM_LAYOUT_INDEXING,
  MATFMM_LAYOUT_REPETITION
} MatFMMLayout;
PETSC_EXTERN const char *const MatFMMLayouts[];

/*E
   MatFMMMethod - How a `MATFMM` evaluates its product

$  `MATFMM_METHOD_FMM`    - the fast multipole method
$  `MATFMM_METHOD_DIRECT` - exact O(N M) summation of the same operator (the accuracy reference)

   Level: intermediate
E*/
typedef enum {
  MATFMM_METHOD_FMM,
  MATFMM_METHOD_DIRECT
} MatFMMMethod;
PETSC_EXTERN const char *const MatFMMMethods[];

/*E
   MatFMMDevice - Where a `MATFMM` computes

$  `MATFMM_DEVICE_AUTO` - CUDA when the library was built with it and a GPU is present, else the CPU
$  `MATFMM_DEVICE_CPU`  - the CPU backend (C with OpenMP)
$  `MATFMM_DEVICE_CUDA` - the CUDA backend

   Level: intermediate
E*/
typedef enum {
  MATFMM_DEVICE_AUTO,
  MATFMM_DEVICE_CPU,
  MATFMM_DEVICE_CUDA
} MatFMMDevice;
PETSC_EXTERN const char *const MatFMMDevices[];

PETSC_EXTERN PetscErrorCode PetscFMMInitializePackage(void);
PETSC_EXTERN PetscErrorCode PetscFMMFinalizePackage(void);

PETSC_EXTERN PetscErrorCode MatCreateFMM(MPI_Comm, PetscInt, PetscInt, PetscInt, PetscInt, Mat *);
PETSC_EXTERN PetscErrorCode MatFMMSetSources(Mat, PetscInt, const PetscReal[], const PetscReal[], const PetscReal[]);
PETSC_EXTERN PetscErrorCode MatFMMSetTargets(Mat, PetscInt, const PetscReal[]);
PETSC_EXTERN PetscErrorCode MatFMMSetKernel(Mat, MatFMMKernel, PetscReal, PetscReal);
PETSC_EXTERN PetscErrorCode MatFMMSetClusteringThreshold(Mat, PetscInt);
PETSC_EXTERN PetscErrorCode MatFMMSetExpansionOrder(Mat, PetscInt);
PETSC_EXTERN PetscErrorCode MatFMMSetTolerance(Mat, PetscReal);
PETSC_EXTERN PetscErrorCode MatFMMSetTheta(Mat, PetscReal);
PETSC_EXTERN PetscErrorCode MatFMMSetLayout(Mat, MatFMMLayout);
PETSC_EXTERN PetscErrorCode MatFMMSetMethod(Mat, MatFMMMethod);
PETSC_EXTERN PetscErrorCode MatFMMSetDevice(Mat, MatFMMDevice);
PETSC_EXTERN PetscErrorCode MatFMMGetExpansionOrder(Mat, PetscInt *);
PETSC_EXTERN PetscErrorCode MatFMMGetClusteringThreshold(Mat, PetscInt *);
PETSC_EXTERN PetscErrorCode MatFMMGetTreeInfo(Mat, PetscInt *, PetscInt *, PetscInt *, PetscCount *);
PETSC_EXTERN PetscErrorCode MatFMMGetDevice(Mat, MatFMMDevice *);
PETSC_EXTERN PetscErrorCode PetscFMMCUDAGetDeviceCount(PetscInt *);
PETSC_EXTERN PetscErrorCode PetscFMMCUDAInitialize(void);
