/*
   petscfmm: GPU-fast hierarchical operators as PETSc matrices.

   MATFMM ("fmm") is an M x N matrix that maps densities on N sources to
   values of the 2D Laplace single/double layer potential at M targets,
   applied by an adaptive fast multipole method (Greengard & Rokhlin 1987;
   Goude & Engblom 2013).  See the manual page of MATFMM.

   MATSWEEP ("sweep") is the operator of Krylov-accelerated source iteration
   for steady multigroup discrete-ordinates transport on a 3D DMDA grid: its
   product is one transport sweep (SNAP's, lanl/SNAP).  See the manual page
   of MATSWEEP.
*/
#pragma once

#include <petscmat.h>
#include <petscdmda.h>

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

/*E
   MatFMMDistribution - How a `MATFMM` on several MPI ranks holds its sources

$  `MATFMM_DISTRIBUTION_AUTO`       - the distributed tree where it applies, else replicated
$  `MATFMM_DISTRIBUTION_REPLICATED` - every rank holds all sources and evaluates its own targets
$  `MATFMM_DISTRIBUTION_TREE`       - the tree is shared out among the ranks: each holds its part and a halo

   Level: intermediate

.seealso: `MatFMMSetDistribution()`
E*/
typedef enum {
  MATFMM_DISTRIBUTION_AUTO,
  MATFMM_DISTRIBUTION_REPLICATED,
  MATFMM_DISTRIBUTION_TREE
} MatFMMDistribution;
PETSC_EXTERN const char *const MatFMMDistributions[];

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
PETSC_EXTERN PetscErrorCode MatFMMSetDistribution(Mat, MatFMMDistribution);
PETSC_EXTERN PetscErrorCode MatFMMSetDevice(Mat, MatFMMDevice);
PETSC_EXTERN PetscErrorCode MatFMMGetExpansionOrder(Mat, PetscInt *);
PETSC_EXTERN PetscErrorCode MatFMMGetClusteringThreshold(Mat, PetscInt *);
PETSC_EXTERN PetscErrorCode MatFMMGetTreeInfo(Mat, PetscInt *, PetscInt *, PetscInt *, PetscCount *);
PETSC_EXTERN PetscErrorCode MatFMMGetTreeLeaves(Mat, PetscInt *, const PetscInt *[], const PetscInt *[], const PetscInt *[], const PetscInt *[]);
PETSC_EXTERN PetscErrorCode MatFMMGetTreePartition(Mat, IS *, IS *);
PETSC_EXTERN PetscErrorCode MatFMMGetDevice(Mat, MatFMMDevice *);
PETSC_EXTERN PetscErrorCode MatFMMGetDistribution(Mat, MatFMMDistribution *);
PETSC_EXTERN PetscErrorCode PetscFMMCUDAGetDeviceCount(PetscInt *);
PETSC_EXTERN PetscErrorCode PetscFMMCUDAInitialize(void);

/* ---------------------------------------------------------------------------
   MATSWEEP: a discrete-ordinates transport sweep as a matrix (see the manual
   page of MATSWEEP).
   --------------------------------------------------------------------------- */

/*J
   MATSWEEP - "sweep" - A matrix type whose MatMult is one discrete-ordinates transport sweep: A phi = phi - D L^-1 M S phi.

   Level: beginner

.seealso: `MatCreateSweep()`, `MatSweepComputeRHS()`
J*/
#define MATSWEEP "sweep"

/*E
   MatSweepQuadrature - The angular quadrature of a `MATSWEEP`

$  `MATSWEEP_QUADRATURE_SNAP`     - SNAP's: nang directions per octant, mu_n = (n - 1/2)/nang, eta_n = 1 - (n - 1/2)/nang,
$                                   xi_n = sqrt(1 - mu_n^2 - eta_n^2), equal weights
$  `MATSWEEP_QUADRATURE_LEVELSYM` - level-symmetric S_N, N = 2, 4, ..., 16 (Lewis & Miller's LQ_N), N(N+2)/8 directions per octant

   Level: beginner

.seealso: `MatSweepSetQuadrature()`
E*/
typedef enum {
  MATSWEEP_QUADRATURE_SNAP,
  MATSWEEP_QUADRATURE_LEVELSYM
} MatSweepQuadrature;
PETSC_EXTERN const char *const MatSweepQuadratures[];

/*E
   MatSweepScheme - The spatial discretisation of a `MATSWEEP`

$  `MATSWEEP_SCHEME_DD`   - diamond difference (second order)
$  `MATSWEEP_SCHEME_STEP` - step (upwind) differencing (first order, positive)

   Level: beginner

.seealso: `MatSweepSetScheme()`
E*/
typedef enum {
  MATSWEEP_SCHEME_DD,
  MATSWEEP_SCHEME_STEP
} MatSweepScheme;
PETSC_EXTERN const char *const MatSweepSchemes[];

/*E
   MatSweepBoundary - The boundary condition on one face of the grid

$  `MATSWEEP_BOUNDARY_VACUUM`     - no incoming flux
$  `MATSWEEP_BOUNDARY_REFLECTIVE` - specular reflection

   Level: beginner

.seealso: `MatSweepSetBoundary()`
E*/
typedef enum {
  MATSWEEP_BOUNDARY_VACUUM,
  MATSWEEP_BOUNDARY_REFLECTIVE
} MatSweepBoundary;
PETSC_EXTERN const char *const MatSweepBoundaries[];

/*E
   MatSweepExpansion - The angular functions of the flux moments and the scattering source

$  `MATSWEEP_EXPANSION_HARMONICS` - real spherical harmonics Y_lm (l <= L, -l <= m <= l), the physics
$  `MATSWEEP_EXPANSION_SNAP`      - SNAP's mock expansion coefficients (powers of the direction cosines), to compare with SNAP

   Level: advanced

.seealso: `MatSweepSetScatteringOrder()`
E*/
typedef enum {
  MATSWEEP_EXPANSION_HARMONICS,
  MATSWEEP_EXPANSION_SNAP
} MatSweepExpansion;
PETSC_EXTERN const char *const MatSweepExpansions[];

/*E
   MatSweepLayout - Which of direction (D), group (G) and cell (Z, zone) is fastest in the sweep's angular
   working arrays (Kripke's names, slowest first)

   Level: advanced

.seealso: `MatSweepSetLayout()`
E*/
typedef enum {
  MATSWEEP_LAYOUT_DGZ,
  MATSWEEP_LAYOUT_DZG,
  MATSWEEP_LAYOUT_GDZ,
  MATSWEEP_LAYOUT_GZD,
  MATSWEEP_LAYOUT_ZDG,
  MATSWEEP_LAYOUT_ZGD
} MatSweepLayout;
PETSC_EXTERN const char *const MatSweepLayouts[];

/*E
   MatSweepDevice - Where a `MATSWEEP` sweeps

$  `MATSWEEP_DEVICE_AUTO` - CUDA when the library was built with it and a GPU is present, else the CPU
$  `MATSWEEP_DEVICE_CPU`  - the CPU backend (C with OpenMP)
$  `MATSWEEP_DEVICE_CUDA` - the CUDA backend

   Level: intermediate
E*/
typedef enum {
  MATSWEEP_DEVICE_AUTO,
  MATSWEEP_DEVICE_CPU,
  MATSWEEP_DEVICE_CUDA
} MatSweepDevice;
PETSC_EXTERN const char *const MatSweepDevices[];

PETSC_EXTERN PetscErrorCode MatCreateSweep(DM, Mat *);
PETSC_EXTERN PetscErrorCode MatSweepSetDM(Mat, DM);
PETSC_EXTERN PetscErrorCode MatSweepGetDM(Mat, DM *);
PETSC_EXTERN PetscErrorCode MatSweepSetDomain(Mat, PetscReal, PetscReal, PetscReal);
PETSC_EXTERN PetscErrorCode MatSweepSetQuadrature(Mat, MatSweepQuadrature, PetscInt);
PETSC_EXTERN PetscErrorCode MatSweepSetGroups(Mat, PetscInt);
PETSC_EXTERN PetscErrorCode MatSweepSetScatteringOrder(Mat, PetscInt, MatSweepExpansion);
PETSC_EXTERN PetscErrorCode MatSweepSetMaterials(Mat, PetscInt, const PetscReal[], const PetscReal[]);
PETSC_EXTERN PetscErrorCode MatSweepSetMaterialMap(Mat, const PetscInt[]);
PETSC_EXTERN PetscErrorCode MatSweepSetTotalCrossSection(Mat, const PetscReal[]);
PETSC_EXTERN PetscErrorCode MatSweepSetSource(Mat, const PetscReal[]);
PETSC_EXTERN PetscErrorCode MatSweepSetAngularSource(Mat, const PetscReal[]);
PETSC_EXTERN PetscErrorCode MatSweepSetBoundary(Mat, const MatSweepBoundary[]);
PETSC_EXTERN PetscErrorCode MatSweepSetScheme(Mat, MatSweepScheme, PetscBool);
PETSC_EXTERN PetscErrorCode MatSweepSetLayout(Mat, MatSweepLayout);
PETSC_EXTERN PetscErrorCode MatSweepSetDevice(Mat, MatSweepDevice);
PETSC_EXTERN PetscErrorCode MatSweepSetChunk(Mat, PetscInt);
PETSC_EXTERN PetscErrorCode MatSweepGetDevice(Mat, MatSweepDevice *);
PETSC_EXTERN PetscErrorCode MatSweepGetGroups(Mat, PetscInt *);
PETSC_EXTERN PetscErrorCode MatSweepGetScatteringOrder(Mat, PetscInt *, MatSweepExpansion *);
PETSC_EXTERN PetscErrorCode MatSweepGetQuadratureType(Mat, MatSweepQuadrature *, PetscInt *, PetscInt *);
PETSC_EXTERN PetscErrorCode MatSweepGetQuadrature(Mat, PetscInt *, const PetscReal *[], const PetscReal *[], const PetscReal *[], const PetscReal *[]);
PETSC_EXTERN PetscErrorCode MatSweepGetSizes(Mat, PetscInt *, PetscInt *, PetscInt *, PetscInt *);
PETSC_EXTERN PetscErrorCode MatSweepComputeRHS(Mat, Vec);
PETSC_EXTERN PetscErrorCode MatSweepSourceIteration(Mat, Vec, Vec);
PETSC_EXTERN PetscErrorCode MatSweepGetFluxVector(Mat, Vec, Vec *);
PETSC_EXTERN PetscErrorCode MatSweepRestoreFluxVector(Mat, Vec, Vec *);
PETSC_EXTERN PetscErrorCode MatSweepGetStatistics(Mat, PetscInt *, PetscReal *, PetscReal *);
