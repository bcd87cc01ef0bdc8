/* Private data of MATSWEEP: the quadrature, the problem (grid, cross sections,
   sources, boundaries) and the backends' ops table. */
#pragma once

#include <petscfmm.h>
#include <petscdmda.h>
#include <petsc/private/matimpl.h>

#if PETSC_VERSION_LT(3, 20, 0) /* PetscAssertPointer() replaced PetscValid...Pointer() in 3.20 */
  #define PetscAssertPointer(h, arg) PetscValidPointer(h, arg)
#endif

PETSC_INTERN PetscLogEvent MATSWEEP_Setup, MATSWEEP_Source, MATSWEEP_Sweep, MATSWEEP_KBAWait;

/* Largest supported orders (array sizes in the backends' kernels) */
#define SWEEP_MAX_NMOM 8   /* scattering order L <= 7 */
#define SWEEP_MAX_SN   16  /* level-symmetric S16 */
#define SWEEP_MAX_NANG 512 /* directions per octant */

/*
  The quadrature.  Directions are numbered d = oct*nang + a: octant oct has
  signs s_x = (oct & 1) ? -1 : +1, s_y = (oct & 2) ? -1 : +1,
  s_z = (oct & 4) ? -1 : +1, and angle a of every octant has the same
  |mu|, |eta|, |xi| and weight (both quadratures are octant-symmetric), so
  specular reflection on an x face maps d to d ^ (1 * nang) etc.  The weights
  sum to 1 over the 8 octants, so an isotropic angular flux psi has scalar
  flux phi_00 = psi.

  Flux moments: phi_m = sum_d w_d Y_m(Omega_d) psi_d for m = 0..cmom-1; the
  angular source of the moments q_m is q_d = sum_m (2l_m+1)... as chosen by the
  expansion (see quadrature.c): q_d = sum_m Ys_m(Omega_d) q_m.  Y and Ys are
  stored per direction: Y[d*cmom + m], Ys[d*cmom + m].  Moment 0 is the scalar
  flux, Y_0 = Ys_0 = 1.
*/
typedef struct {
  PetscInt   nang;          /* directions per octant */
  PetscInt   ndir;          /* 8 nang */
  PetscReal *mu, *eta, *xi; /* [nang] positive direction cosines of octant 0 */
  PetscReal *w;             /* [nang] weights (each octant the same; 8 sum(w) = 1) */
  PetscInt   nmom;          /* Legendre orders L + 1 */
  PetscInt   cmom;          /* flux moments: nmom^2 */
  PetscInt  *lmom;          /* [cmom] Legendre order l of each moment */
  PetscReal *Y, *Ys;        /* [ndir*cmom] moment and source expansion functions */
} SweepQuadrature;

/*
  The problem, as a backend sees it.  Cells are numbered c = (k*ny + j)*nx + i
  (x fastest, the DMDA's order).  The flux-moment vector phi has, per cell,
  ng*cmom entries, moment fastest: phi[(c*ng + g)*cmom + m].  The carried
  boundary unknowns (see below) follow the moments in the same vector.
*/
typedef struct {
  PetscInt  nx, ny, nz;   /* this rank's cells (x is never split: nx is the grid's) */
  PetscInt  ncells;
  PetscInt  gny, gnz, ys, zs; /* the grid's cells along y and z, and this rank's first */
  PetscMPIInt nbr[6];     /* the rank across each face of this rank's block, -1 at the grid's boundary */
  PetscInt  py, pz;       /* ranks along y and z (KBA's process grid) */
  PetscInt  iy, iz;       /* this rank's place in it */
  PetscInt  chunk;        /* x cells a message between ranks carries (KBA pipelining) */
  MPI_Comm  comm;
  PetscReal dx, dy, dz;   /* cell widths */
  PetscBool twod;         /* a 2D DMDA: no streaming along z (the x-y problem) */
  PetscInt  ng;           /* energy groups */
  SweepQuadrature Q;
  MatSweepScheme  scheme;
  PetscBool       fixup;
  /* cross sections: sigt per cell and group, sigs per material, order and group pair */
  PetscReal *sigt;        /* [ncells*ng] */
  PetscInt   nmat;
  PetscInt  *mat;         /* [ncells] material of each cell */
  PetscReal *sigs;        /* [nmat*nmom*ng*ng]: sigs[((mat*nmom + l)*ng + g)*ng + gp] = sigma_s,l(gp -> g) */
  /* fixed sources (used only by the right-hand side) */
  PetscReal *q;           /* [ncells*ng] isotropic, or NULL */
  PetscReal *qang;        /* [ncells*ndir*ng] angular: qang[(c*ndir + d)*ng + g], or NULL */
  /* boundaries: face f = 2*axis + (0 low, 1 high) */
  MatSweepBoundary bc[6];
  /* octant order of a sweep (reflective faces make some octants wait for others):
     octants of one level wait on none of the same level */
  PetscInt  octorder[8], octlevel[8];
  /* carried boundary unknowns: for an axis with both faces reflective, the
     angular flux entering through its low face (the 4 octants moving up that
     axis), per face cell, group and angle, on the ranks that hold part of that
     face.  ncarry[axis] entries each, at offset carryoff[axis] after the
     moments; layout [oct4][facecell][g][a] */
  PetscInt  ncarry[3], carryoff[3], nb; /* nb: this rank's total */
  PetscInt  nbglobal;                   /* all ranks' (the vectors are a DMDA's where it is 0) */
  PetscInt  nphi;                       /* ncells*ng*cmom */
} SweepProblem;

/* the number of cells of this rank's face normal to axis (0 x, 1 y, 2 z) */
static inline PetscInt SweepFaceCells(const SweepProblem *P, PetscInt axis)
{
  return axis == 0 ? P->ny * P->nz : (axis == 1 ? P->nx * P->nz : P->nx * P->ny);
}

/*
  A backend applies the transport sweep T = D L^-1 (M S . + q) with the
  boundary conditions:  given x = [phi; psi_b] (moments and carried boundary
  fluxes, host memory, nphi + nb entries) it writes y = [D L^-1 (M S phi +
  src); R psi_out] where src is the fixed source when withsrc and 0
  otherwise, and R psi_out the reflected outgoing flux at the carried faces.
  x NULL: phi = 0 and psi_b = 0 (the right-hand side).  y and x may not alias.
*/
typedef struct _SweepBackendOps *SweepBackend;
struct _SweepBackendOps {
  const char *name;
  PetscErrorCode (*setup)(Mat);
  PetscErrorCode (*sweep)(Mat, const PetscScalar *, PetscScalar *, PetscBool);
  PetscErrorCode (*destroy)(Mat);
  PetscErrorCode (*view)(Mat, PetscViewer);
};

typedef struct {
  DM                 da;       /* the user's grid */
  DM                 daphi;    /* the moments' DMDA: da with ng*cmom dof */
  /* user data as given (copies, local cells) */
  PetscInt           ng, nmom;
  MatSweepQuadrature qtype;
  PetscInt           qorder;   /* nang (snap) or N (level-symmetric S_N) */
  MatSweepExpansion  expansion;
  MatSweepScheme     scheme;
  PetscBool          fixup;
  MatSweepBoundary   bc[6];
  PetscReal          len[3];   /* domain lengths */
  PetscInt           nmat;
  PetscReal         *msigt, *msigs; /* material table [nmat*ng], [nmat*nmom*ng*ng] */
  PetscInt          *matmap;        /* [ncells] or NULL (all material 0) */
  PetscReal         *csigt;         /* [ncells*ng] per-cell sigma_t, or NULL (from the materials) */
  PetscReal         *q, *qang;      /* sources as given, or NULL */
  /* the sizes each array was given with, checked against the problem's at setup */
  PetscInt           mat_ng, mat_nm, map_n, csigt_ng, csigt_n, q_ng, q_n, qang_ng, qang_dir, qang_n;
  MatSweepLayout     layout;
  MatSweepDevice     device, device_used;
  PetscInt           chunk;         /* KBA chunk (-mat_sweep_chunk); 0: the default */
  /* state */
  PetscBool          setup;
  PetscBool          built;         /* P is the problem of the present settings (MatSetUp() or the assembly built it) */
  SweepProblem       P;
  SweepBackend       ops;
  void              *backend;
  PetscInt           nsweeps;       /* sweeps done (products and right-hand sides) */
  PetscLogDouble     last_sweep_s;  /* wall time of the last sweep (the product or right-hand side) */
  PetscLogDouble     last_device_s; /* its kernels' time on the GPU (CUDA backend; 0 on the CPU) */
} Mat_Sweep;

PETSC_INTERN PetscErrorCode SweepQuadratureCreate(MatSweepQuadrature, PetscInt, PetscInt, MatSweepExpansion, SweepQuadrature *);
PETSC_INTERN PetscErrorCode SweepQuadratureDestroy(SweepQuadrature *);
PETSC_INTERN PetscErrorCode SweepLevelSymmetric(PetscInt, PetscInt *, PetscReal **, PetscReal **, PetscReal **, PetscReal **);
PETSC_INTERN PetscErrorCode SweepOctantOrder(const MatSweepBoundary[6], PetscInt[8], PetscInt[8]);

/* an octant batch of the sweep across ranks: its octants, and its number on every rank */
typedef struct {
  PetscInt n, oct[8], id;
} SweepBatch;
PETSC_INTERN PetscInt       SweepKBABatches(const SweepProblem *, PetscInt, PetscInt, SweepBatch[16]);
PETSC_INTERN PetscErrorCode SweepKBAModel(const SweepProblem *, PetscBool, PetscReal *);

PETSC_INTERN struct _SweepBackendOps SweepBackendCPU;
#if defined(PETSCFMM_HAVE_CUDA)
PETSC_INTERN struct _SweepBackendOps SweepBackendCUDA;
PETSC_INTERN PetscErrorCode          SweepCUDADeviceCount(int *);
#endif
