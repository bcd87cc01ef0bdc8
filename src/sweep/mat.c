/*
  MATSWEEP: the Mat type.  Options, the setup at assembly (the problem a
  backend sees: grid, quadrature, cross sections, boundaries, the vectors'
  layout), the product A x = x - T x and the right-hand side b = T_q 0, the
  flux vectors, the view; the backends (cpu/, ../../cuda/sweep/) sweep.
*/
#include "sweepimpl.h"

PETSC_EXTERN PetscErrorCode MatCreate_Sweep(Mat);

static PetscErrorCode FreeProblem(Mat_Sweep *sw)
{
  SweepProblem *P = &sw->P;

  PetscFunctionBegin;
  PetscCall(SweepQuadratureDestroy(&P->Q));
  PetscCall(PetscFree2(P->sigt, P->mat));
  PetscCall(PetscMemzero(P, sizeof(*P)));
  sw->built = PETSC_FALSE;
  PetscFunctionReturn(0);
}

static PetscErrorCode Invalidate(Mat A)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;

  PetscFunctionBegin;
  if (sw->ops && sw->ops->destroy) PetscCall((*sw->ops->destroy)(A));
  sw->ops = NULL;
  PetscCall(FreeProblem(sw));
  PetscCall(DMDestroy(&sw->daphi));
  sw->setup = PETSC_FALSE;
  PetscFunctionReturn(0);
}

#if PETSC_VERSION_LT(3, 23, 0)
static PetscErrorCode MatSetFromOptions_Sweep(Mat A, PetscOptionItems *PetscOptionsObject)
#else /* PetscOptionItems is a pointer type since PETSc 3.23 */
static PetscErrorCode MatSetFromOptions_Sweep(Mat A, PetscOptionItems PetscOptionsObject)
#endif
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  PetscInt   ival, n;
  PetscBool  set, set2, bval;
  PetscEnum  e;
  PetscReal  len[3];

  PetscFunctionBegin;
  PetscOptionsHeadBegin(PetscOptionsObject, "MATSWEEP options (discrete-ordinates transport sweep)");
  PetscCall(PetscOptionsEnum("-mat_sweep_quadrature", "Angular quadrature", "MatSweepSetQuadrature", MatSweepQuadratures, (PetscEnum)sw->qtype, &e, &set));
  if (set && (MatSweepQuadrature)e != sw->qtype) PetscCall(MatSweepSetQuadrature(A, (MatSweepQuadrature)e, 4));
  PetscCall(PetscOptionsInt("-mat_sweep_nang", "Directions per octant of SNAP's quadrature", "MatSweepSetQuadrature", sw->qtype == MATSWEEP_QUADRATURE_SNAP ? sw->qorder : 4, &ival, &set));
  if (set) PetscCall(MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_SNAP, ival));
  PetscCall(PetscOptionsInt("-mat_sweep_sn", "Order N of the level-symmetric quadrature S_N (selects it)", "MatSweepSetQuadrature", sw->qtype == MATSWEEP_QUADRATURE_LEVELSYM ? sw->qorder : 4, &ival, &set));
  if (set) PetscCall(MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_LEVELSYM, ival));
  PetscCall(PetscOptionsInt("-mat_sweep_groups", "Energy groups", "MatSweepSetGroups", sw->ng, &ival, &set));
  if (set) PetscCall(MatSweepSetGroups(A, ival));
  PetscCall(PetscOptionsInt("-mat_sweep_nmom", "Legendre orders of the scattering, L + 1 (SNAP's nmom)", "MatSweepSetScatteringOrder", sw->nmom, &ival, &set));
  PetscCall(PetscOptionsEnum("-mat_sweep_expansion", "Angular functions of the moments", "MatSweepSetScatteringOrder", MatSweepExpansions, (PetscEnum)sw->expansion, &e, &set2));
  if (set || set2) PetscCall(MatSweepSetScatteringOrder(A, (set ? ival : sw->nmom) - 1, set2 ? (MatSweepExpansion)e : sw->expansion));
  PetscCall(PetscOptionsEnum("-mat_sweep_scheme", "Spatial scheme", "MatSweepSetScheme", MatSweepSchemes, (PetscEnum)sw->scheme, &e, &set));
  PetscCall(PetscOptionsBool("-mat_sweep_fixup", "Negative-flux fixup of diamond difference (SNAP's)", "MatSweepSetScheme", sw->fixup, &bval, &set2));
  if (set || set2) PetscCall(MatSweepSetScheme(A, set ? (MatSweepScheme)e : sw->scheme, set2 ? bval : sw->fixup));
  {
    PetscEnum bc[6];
    n = 6;
    for (int f = 0; f < 6; f++) bc[f] = (PetscEnum)sw->bc[f];
    PetscCall(PetscOptionsEnumArray("-mat_sweep_bc", "Boundary conditions of the faces x-, x+, y-, y+, z-, z+", "MatSweepSetBoundary", MatSweepBoundaries, bc, &n, &set));
    if (set) {
      MatSweepBoundary b[6];
      for (int f = 0; f < 6; f++) b[f] = f < n ? (MatSweepBoundary)bc[f] : MATSWEEP_BOUNDARY_VACUUM;
      PetscCall(MatSweepSetBoundary(A, b));
    }
  }
  n = 3;
  for (int k = 0; k < 3; k++) len[k] = sw->len[k];
  PetscCall(PetscOptionsRealArray("-mat_sweep_domain", "Domain lengths lx,ly,lz", "MatSweepSetDomain", len, &n, &set));
  if (set) {
    PetscCheck(n == 3, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_SIZ, "-mat_sweep_domain takes 3 lengths lx,ly,lz, got %" PetscInt_FMT, n);
    PetscCall(MatSweepSetDomain(A, len[0], len[1], len[2]));
  }
  PetscCall(PetscOptionsEnum("-mat_sweep_layout", "Memory layout of the angular working arrays (Kripke's names, slowest first)", "MatSweepSetLayout", MatSweepLayouts, (PetscEnum)sw->layout, &e, &set));
  if (set) PetscCall(MatSweepSetLayout(A, (MatSweepLayout)e));
  PetscCall(PetscOptionsEnum("-mat_sweep_device", "Where to sweep", "MatSweepSetDevice", MatSweepDevices, (PetscEnum)sw->device, &e, &set));
  if (set) PetscCall(MatSweepSetDevice(A, (MatSweepDevice)e));
  PetscCall(PetscOptionsInt("-mat_sweep_chunk", "x cells the KBA pipeline sends at once between ranks (0: default)", "MatSweepSetChunk", sw->chunk, &ival, &set));
  if (set) PetscCall(MatSweepSetChunk(A, ival));
  PetscOptionsHeadEnd();
  PetscFunctionReturn(0);
}

/* the problem of the backends from what the user gave, with the checks that need all of it */
static PetscErrorCode BuildProblem(Mat A)
{
  Mat_Sweep    *sw   = (Mat_Sweep *)A->data;
  SweepProblem *P    = &sw->P;
  MPI_Comm      comm = PetscObjectComm((PetscObject)A);
  PetscInt      dim, M, N, K, pm, pn, pp, ng = sw->ng, nm = sw->nmom, n;
  DMDALocalInfo info;
  PetscMPIInt   rank;

  PetscFunctionBegin;
  PetscCheck(sw->da, comm, PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: set the grid (MatSweepSetDM() or MatCreateSweep()) before assembly");
  PetscCall(DMDAGetInfo(sw->da, &dim, &M, &N, &K, &pm, &pn, &pp, NULL, NULL, NULL, NULL, NULL, NULL));
  PetscCall(DMDAGetLocalInfo(sw->da, &info));
  PetscCheck(pm == 1, comm, PETSC_ERR_SUP, "MATSWEEP: the sweep across ranks (KBA) splits y and z only, but the DMDA splits x over %" PetscInt_FMT " ranks; create it with one rank along x (m = 1 in DMDACreate3d(), or -da_processors_x 1)", pm);
  PetscCallMPI(MPI_Comm_rank(PetscObjectComm((PetscObject)sw->da), &rank));
  P->comm   = PetscObjectComm((PetscObject)sw->da);
  P->nx     = M;
  P->ny     = info.ym;
  P->nz     = dim == 3 ? info.zm : 1;
  P->gny    = N;
  P->gnz    = dim == 3 ? K : 1;
  P->ys     = info.ys;
  P->zs     = dim == 3 ? info.zs : 0;
  P->twod   = dim == 2 ? PETSC_TRUE : PETSC_FALSE;
  P->ncells = P->nx * P->ny * P->nz;
  n         = P->ncells;
  P->dx     = sw->len[0] / M;
  P->dy     = sw->len[1] / N;
  P->dz     = sw->len[2] / P->gnz;
  { /* DMDA ranks go x fastest: with one rank along x, rank = y index + pn z index */
    const PetscMPIInt yi = rank % pn, zi = rank / pn;
    P->nbr[0] = P->nbr[1] = -1;
    P->nbr[2]             = yi > 0 ? rank - 1 : -1;
    P->nbr[3]             = yi < pn - 1 ? rank + 1 : -1;
    P->nbr[4]             = (dim == 3 && zi > 0) ? rank - (PetscMPIInt)pn : -1;
    P->nbr[5]             = (dim == 3 && zi < pp - 1) ? rank + (PetscMPIInt)pn : -1;
    P->py                 = pn;
    P->pz                 = dim == 3 ? pp : 1;
    P->iy                 = yi;
    P->iz                 = zi;
  }
  {
    PetscBool split = PETSC_FALSE;
    for (int f = 2; f < 6; f++) split = split || P->nbr[f] >= 0 ? PETSC_TRUE : PETSC_FALSE;
    P->chunk = sw->chunk ? PetscMin(sw->chunk, M) : (split ? PetscMin(4, M) : M);
  }
  P->ng     = ng;
  P->scheme = sw->scheme;
  P->fixup  = sw->scheme == MATSWEEP_SCHEME_DD ? sw->fixup : PETSC_FALSE;
  /* the arrays were given for these sizes */
  PetscCheck(sw->mat_ng == ng && sw->mat_nm == nm, comm, PETSC_ERR_ARG_SIZ, "MATSWEEP: the material table was set for %" PetscInt_FMT " groups and nmom %" PetscInt_FMT ", but the matrix has %" PetscInt_FMT " groups and nmom %" PetscInt_FMT "; call MatSweepSetMaterials() after MatSweepSetGroups() and MatSweepSetScatteringOrder()", sw->mat_ng, sw->mat_nm, ng, nm);
  PetscCheck(!sw->matmap || sw->map_n == n, comm, PETSC_ERR_ARG_SIZ, "MATSWEEP: the material map has %" PetscInt_FMT " cells, the grid %" PetscInt_FMT, sw->map_n, n);
  PetscCheck(!sw->csigt || (sw->csigt_n == n && sw->csigt_ng == ng), comm, PETSC_ERR_ARG_SIZ, "MATSWEEP: sigma_t per cell was given for %" PetscInt_FMT " cells and %" PetscInt_FMT " groups, the matrix has %" PetscInt_FMT " and %" PetscInt_FMT, sw->csigt_n, sw->csigt_ng, n, ng);
  PetscCheck(!sw->q || (sw->q_n == n && sw->q_ng == ng), comm, PETSC_ERR_ARG_SIZ, "MATSWEEP: the source was given for %" PetscInt_FMT " cells and %" PetscInt_FMT " groups, the matrix has %" PetscInt_FMT " and %" PetscInt_FMT, sw->q_n, sw->q_ng, n, ng);
  PetscCall(SweepQuadratureCreate(sw->qtype, sw->qorder, nm, sw->expansion, &P->Q));
  PetscCheck(!sw->qang || (sw->qang_n == n && sw->qang_ng == ng && sw->qang_dir == P->Q.ndir), comm, PETSC_ERR_ARG_SIZ, "MATSWEEP: the angular source was given for %" PetscInt_FMT " cells, %" PetscInt_FMT " directions and %" PetscInt_FMT " groups, the matrix has %" PetscInt_FMT ", %" PetscInt_FMT " and %" PetscInt_FMT, sw->qang_n, sw->qang_dir, sw->qang_ng, n, P->Q.ndir, ng);
  /* cross sections per cell */
  PetscCall(PetscMalloc2(n * ng, &P->sigt, n, &P->mat));
  P->nmat = sw->nmat;
  P->sigs = sw->msigs;
  for (PetscInt c = 0; c < n; c++) {
    const PetscInt m = sw->matmap ? sw->matmap[c] : 0;
    PetscCheck(m >= 0 && m < sw->nmat, comm, PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: local cell %" PetscInt_FMT " has material %" PetscInt_FMT ", expected 0 to %" PetscInt_FMT, c, m, sw->nmat - 1);
    P->mat[c] = m;
    for (PetscInt g = 0; g < ng; g++) {
      const PetscReal st = sw->csigt ? sw->csigt[c * ng + g] : sw->msigt[m * ng + g];
      PetscReal       out = 0; /* sum of sigma_s,0(g -> g') */
      for (PetscInt gp = 0; gp < ng; gp++) out += sw->msigs[(((size_t)m * nm) * ng + gp) * ng + g];
      PetscCheck(out <= st * (1 + 64 * PETSC_MACHINE_EPSILON), comm, PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: local cell %" PetscInt_FMT " (material %" PetscInt_FMT ") group %" PetscInt_FMT ": scattering out of the group sum_g' sigma_s,0(g -> g') = %g exceeds sigma_t = %g (scattering ratio %g > 1: the material multiplies particles)", c, m, g, (double)out, (double)st, st > 0 ? (double)(out / st) : (double)PETSC_INFINITY);
      P->sigt[c * ng + g] = st;
    }
  }
  P->q    = sw->q;
  P->qang = sw->qang;
  /* boundaries, octant order, carried unknowns */
  for (int f = 0; f < 6; f++) P->bc[f] = (P->twod && f >= 4) ? MATSWEEP_BOUNDARY_VACUUM : sw->bc[f];
  PetscCall(SweepOctantOrder(P->bc, P->octorder, P->octlevel));
  P->nphi = n * ng * P->Q.cmom;
  P->nb   = 0;
  for (PetscInt ax = 0; ax < 3; ax++) {
    const PetscBool both = (P->bc[2 * ax] == MATSWEEP_BOUNDARY_REFLECTIVE && P->bc[2 * ax + 1] == MATSWEEP_BOUNDARY_REFLECTIVE && P->nbr[2 * ax] < 0) ? PETSC_TRUE : PETSC_FALSE; /* on the ranks holding part of the low face */
    P->ncarry[ax]        = both ? 4 * SweepFaceCells(P, ax) * ng * P->Q.nang : 0;
    P->carryoff[ax]      = P->nb;
    P->nb += P->ncarry[ax];
  }
  PetscCall(MPIU_Allreduce(&P->nb, &P->nbglobal, 1, MPIU_INT, MPI_SUM, comm));
  sw->built = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* the vectors' layout: the moments, then the carried boundary unknowns */
static PetscErrorCode SetLayouts(Mat A)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  PetscInt   n  = sw->P.nphi + sw->P.nb;

  PetscFunctionBegin;
  if (A->rmap->n != n || A->rmap->N < 0) {
    PetscCall(PetscLayoutDestroy(&A->rmap));
    PetscCall(PetscLayoutDestroy(&A->cmap));
    PetscCall(PetscLayoutCreate(PetscObjectComm((PetscObject)A), &A->rmap));
    PetscCall(PetscLayoutCreate(PetscObjectComm((PetscObject)A), &A->cmap));
    PetscCall(PetscLayoutSetLocalSize(A->rmap, n));
    PetscCall(PetscLayoutSetLocalSize(A->cmap, n));
  }
  PetscCall(PetscLayoutSetUp(A->rmap));
  PetscCall(PetscLayoutSetUp(A->cmap));
  A->preallocated = PETSC_TRUE;
  PetscFunctionReturn(0);
}

/* MatSetUp() (which MatAssemblyBegin() calls in recent PETSc): the problem and so the vectors' sizes; the
   backend follows at the assembly */
static PetscErrorCode MatSetUp_Sweep(Mat A)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;

  PetscFunctionBegin;
  if (!sw->built) {
    PetscCall(Invalidate(A));
    PetscCall(BuildProblem(A));
  }
  PetscCall(SetLayouts(A));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatAssemblyEnd_Sweep(Mat A, MatAssemblyType type)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;

  PetscFunctionBegin;
  if (type == MAT_FLUSH_ASSEMBLY) PetscFunctionReturn(0);
  if (sw->setup) {
    A->assembled = PETSC_TRUE;
    PetscFunctionReturn(0);
  }
  PetscCall(PetscLogEventBegin(MATSWEEP_Setup, A, 0, 0, 0));
  PetscCall(MatSetUp_Sweep(A)); /* the problem, unless MatSetUp() built it from the present settings */
  PetscCall(DMDACreateCompatibleDMDA(sw->da, sw->ng * sw->P.Q.cmom, &sw->daphi));
  for (PetscInt g = 0; g < sw->ng; g++)
    for (PetscInt m = 0; m < sw->P.Q.cmom; m++) {
      char name[32];
      PetscCall(PetscSNPrintf(name, sizeof(name), "phi_g%" PetscInt_FMT "_m%" PetscInt_FMT, g, m));
      PetscCall(DMDASetFieldName(sw->daphi, g * sw->P.Q.cmom + m, name));
    }
  { /* device and backend */
    PetscInt ndev = 0;
#if defined(PETSCFMM_HAVE_CUDA)
    {
      int c = 0;
      PetscCall(SweepCUDADeviceCount(&c));
      ndev = c;
    }
#endif
    PetscCheck(sw->device != MATSWEEP_DEVICE_CUDA || ndev > 0, PetscObjectComm((PetscObject)A), PETSC_ERR_SUP, "MATSWEEP: -mat_sweep_device cuda, but %s; use -mat_sweep_device cpu or auto",
#if defined(PETSCFMM_HAVE_CUDA)
               "no CUDA GPU was found on this machine"
#else
               "petscfmm was built without CUDA (make CUDA=1 with nvcc on the PATH)"
#endif
    );
#if defined(PETSC_HAVE_DEVICE)
    if (A->boundtocpu) ndev = 0; /* MatBindToCPU() */
#endif
    sw->device_used = (sw->device != MATSWEEP_DEVICE_CPU && ndev > 0) ? MATSWEEP_DEVICE_CUDA : MATSWEEP_DEVICE_CPU;
    if (sw->device_used == MATSWEEP_DEVICE_CUDA && !sw->chunk) sw->P.chunk = (sw->P.nx + 3) / 4; /* a launch per diagonal and chunk: four chunks a line (measured) */
#if defined(PETSCFMM_HAVE_CUDA)
    sw->ops = sw->device_used == MATSWEEP_DEVICE_CUDA ? &SweepBackendCUDA : &SweepBackendCPU;
#else
    sw->ops = &SweepBackendCPU;
#endif
  }
  PetscCall((*sw->ops->setup)(A));
  sw->setup    = PETSC_TRUE;
  A->assembled = PETSC_TRUE;
  PetscCall(PetscLogEventEnd(MATSWEEP_Setup, A, 0, 0, 0));
  PetscFunctionReturn(0);
}

/* T x (x NULL: the right-hand side, with the fixed sources) into ya, timed */
static PetscErrorCode Sweep(Mat A, const PetscScalar *xa, PetscScalar *ya, PetscBool withsrc)
{
  Mat_Sweep     *sw = (Mat_Sweep *)A->data;
  PetscLogDouble t0, t1;

  PetscFunctionBegin;
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix (MatAssemblyBegin/End) after setting it up");
  PetscCall(PetscTime(&t0));
  PetscCall((*sw->ops->sweep)(A, xa, ya, withsrc));
  PetscCall(PetscTime(&t1));
  sw->last_sweep_s = t1 - t0;
  sw->nsweeps++;
  PetscFunctionReturn(0);
}

/* y = x - T x: one sweep of the moments (and carried boundary fluxes) of x.
   On the GPU the arrays are taken where they live, so that device vectors
   (a PETSc configured with CUDA) cross no bus. */
static PetscErrorCode MatMult_Sweep(Mat A, Vec x, Vec y)
{
  Mat_Sweep         *sw = (Mat_Sweep *)A->data;
  const PetscScalar *xa;
  PetscScalar       *ya;

  PetscFunctionBegin;
  if (sw->device_used == MATSWEEP_DEVICE_CUDA) {
    PetscCall(VecGetArrayReadAndMemType(x, &xa, NULL));
    PetscCall(VecGetArrayWriteAndMemType(y, &ya, NULL));
  } else {
    PetscCall(VecGetArrayRead(x, &xa));
    PetscCall(VecGetArrayWrite(y, &ya));
  }
  PetscCall(Sweep(A, xa, ya, PETSC_FALSE));
  if (sw->device_used == MATSWEEP_DEVICE_CUDA) {
    PetscCall(VecRestoreArrayWriteAndMemType(y, &ya));
    PetscCall(VecRestoreArrayReadAndMemType(x, &xa));
  } else {
    PetscCall(VecRestoreArrayWrite(y, &ya));
    PetscCall(VecRestoreArrayRead(x, &xa));
  }
  PetscCall(VecAYPX(y, -1.0, x));
  PetscFunctionReturn(0);
}

/*@
   MatSweepComputeRHS - Computes the right-hand side b = D L^-1 q of Krylov-accelerated source iteration: one sweep of the fixed sources from zero flux.

   Collective

   Input Parameter:
.  A - the `MATSWEEP`, assembled

   Output Parameter:
.  b - a vector of A's layout (`MatCreateVecs()`): the scalar flux and moments of the uncollided flux, and
       the reflected boundary fluxes where A carries some

   Notes:
   With A x = x - D L^-1 M S x, the solution of A phi = b is the flux of the
   transport problem: `KSPSolve()` with GMRES is Krylov-accelerated source
   iteration, and with `KSPRICHARDSON` (scale 1, no preconditioner) it is
   source iteration itself, phi_{k+1} = D L^-1 (M S phi_k + q).  Uses the
   sources of `MatSweepSetSource()` and `MatSweepSetAngularSource()`.

   Errors:
+  `PETSC_ERR_ARG_WRONGSTATE` - A is not assembled
-  `PETSC_ERR_ARG_SIZ` - b does not have A's layout

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepSetSource()`
@*/
PetscErrorCode MatSweepComputeRHS(Mat A, Vec b)
{
  Mat_Sweep   *sw;
  PetscScalar *ba;
  PetscInt     n;
  PetscBool    is;

  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidHeaderSpecific(b, VEC_CLASSID, 2);
  PetscCall(PetscObjectTypeCompare((PetscObject)A, MATSWEEP, &is));
  PetscCheck(is, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONG, "Matrix of type %s, expected %s", ((PetscObject)A)->type_name, MATSWEEP);
  sw = (Mat_Sweep *)A->data;
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix before computing the right-hand side");
  PetscCall(VecGetLocalSize(b, &n));
  PetscCheck(n == A->rmap->n, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "MATSWEEP: the right-hand side has %" PetscInt_FMT " local entries, the matrix %" PetscInt_FMT " (moments and carried boundary fluxes); create it with MatCreateVecs()", n, A->rmap->n);
  PetscCall(VecGetArrayWrite(b, &ba));
  PetscCall(Sweep(A, NULL, ba, PETSC_TRUE));
  PetscCall(VecRestoreArrayWrite(b, &ba));
  PetscFunctionReturn(0);
}

/*@
   MatSweepSourceIteration - One step of source iteration: y = D L^-1 (M S x + q), a sweep of the scattering source of x and the fixed sources.

   Collective

   Input Parameters:
+  A - the `MATSWEEP`, assembled
-  x - flux moments (and carried boundary fluxes), a vector of A's layout

   Output Parameter:
.  y - the next iterate, a vector of A's layout (not x)

   Notes:
   Without the fixup this is y = b + x - A x with b from `MatSweepComputeRHS()`,
   so that `KSPRICHARDSON` on A is the same iteration.  With the negative-flux
   fixup the sweep is nonlinear in its total source, and this function
   applies the fixup to the whole source (scattering and fixed), as SNAP
   does; its fixed point is SNAP's solution, which A and b then do not
   describe exactly.  Use it to iterate such problems.

   Errors:
+  `PETSC_ERR_ARG_WRONGSTATE` - A is not assembled
.  `PETSC_ERR_ARG_SIZ` - x or y does not have A's layout
-  `PETSC_ERR_ARG_IDN` - x and y are the same vector

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepComputeRHS()`, `MatSweepSetScheme()`
@*/
PetscErrorCode MatSweepSourceIteration(Mat A, Vec x, Vec y)
{
  Mat_Sweep         *sw;
  const PetscScalar *xa;
  PetscScalar       *ya;
  PetscInt           nx, ny;
  PetscBool          is;

  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidHeaderSpecific(x, VEC_CLASSID, 2);
  PetscValidHeaderSpecific(y, VEC_CLASSID, 3);
  PetscCall(PetscObjectTypeCompare((PetscObject)A, MATSWEEP, &is));
  PetscCheck(is, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONG, "Matrix of type %s, expected %s", ((PetscObject)A)->type_name, MATSWEEP);
  PetscCheck(x != y, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_IDN, "MATSWEEP: x and y must be different vectors");
  sw = (Mat_Sweep *)A->data;
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix before iterating");
  PetscCall(VecGetLocalSize(x, &nx));
  PetscCall(VecGetLocalSize(y, &ny));
  PetscCheck(nx == A->rmap->n && ny == A->rmap->n, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "MATSWEEP: the vectors have %" PetscInt_FMT " and %" PetscInt_FMT " local entries, the matrix %" PetscInt_FMT, nx, ny, A->rmap->n);
  PetscCall(VecGetArrayRead(x, &xa));
  PetscCall(VecGetArrayWrite(y, &ya));
  PetscCall(Sweep(A, xa, ya, PETSC_TRUE));
  PetscCall(VecRestoreArrayWrite(y, &ya));
  PetscCall(VecRestoreArrayRead(x, &xa));
  PetscFunctionReturn(0);
}

/* vectors of the moments' DMDA when there are no carried unknowns, so that VecView writes them (VTK) */
static PetscErrorCode MatCreateVecs_Sweep(Mat A, Vec *right, Vec *left)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  Vec       *v[2] = {right, left};

  PetscFunctionBegin;
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix before MatCreateVecs(): the vectors' size depends on the groups, moments and boundaries");
  for (int k = 0; k < 2; k++) {
    if (!v[k]) continue;
    if (!sw->P.nbglobal) PetscCall(DMCreateGlobalVector(sw->daphi, v[k]));
    else {
      PetscCall(VecCreate(PetscObjectComm((PetscObject)A), v[k]));
      PetscCall(VecSetLayout(*v[k], k ? A->rmap : A->cmap));
      PetscCall(VecSetType(*v[k], A->defaultvectype));
    }
  }
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetFluxVector - Gets the flux moments of a vector of a `MATSWEEP` as a vector of its moments' `DMDA` (for `VecView()`, VTK output).

   Collective

   Input Parameters:
+  A - the `MATSWEEP`, assembled
-  x - a vector of A's layout (`MatCreateVecs()`)

   Output Parameter:
.  phi - a vector of the `DMDA` of `MatSweepGetDM()`: x itself when A carries no boundary unknowns, else
         a copy of the moments of x (read-only: changes do not go back to x)

   Notes:
   Return it with `MatSweepRestoreFluxVector()`.  The scalar flux of group g
   is dof g (L+1)^2 of each cell (field phi_g<g>_m0).

   Errors:
+  `PETSC_ERR_ARG_WRONGSTATE` - A is not assembled
-  `PETSC_ERR_ARG_SIZ` - x does not have A's layout

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepRestoreFluxVector()`, `MatSweepGetDM()`
@*/
PetscErrorCode MatSweepGetFluxVector(Mat A, Vec x, Vec *phi)
{
  Mat_Sweep         *sw;
  PetscInt           n;
  const PetscScalar *xa;
  PetscScalar       *pa;
  DM                 dm;

  PetscFunctionBegin;
  PetscValidHeaderSpecific(x, VEC_CLASSID, 2);
  PetscAssertPointer(phi, 3);
  PetscCall(MatSweepGetDM(A, &dm)); /* checks the type and the assembly */
  sw = (Mat_Sweep *)A->data;
  PetscCall(VecGetLocalSize(x, &n));
  PetscCheck(n == A->rmap->n, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "MATSWEEP: the vector has %" PetscInt_FMT " local entries, the matrix %" PetscInt_FMT, n, A->rmap->n);
  if (!sw->P.nbglobal) {
    PetscCall(PetscObjectReference((PetscObject)x));
    *phi = x;
    PetscFunctionReturn(0);
  }
  PetscCall(DMGetGlobalVector(sw->daphi, phi));
  PetscCall(VecGetArrayRead(x, &xa));
  PetscCall(VecGetArrayWrite(*phi, &pa));
  PetscCall(PetscArraycpy(pa, xa, sw->P.nphi));
  PetscCall(VecRestoreArrayWrite(*phi, &pa));
  PetscCall(VecRestoreArrayRead(x, &xa));
  PetscFunctionReturn(0);
}

/*@
   MatSweepRestoreFluxVector - Returns the vector of `MatSweepGetFluxVector()`.

   Collective

   Input Parameters:
+  A   - the `MATSWEEP`
.  x   - the vector given to `MatSweepGetFluxVector()`
-  phi - the flux vector

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepGetFluxVector()`
@*/
PetscErrorCode MatSweepRestoreFluxVector(Mat A, Vec x, Vec *phi)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;

  PetscFunctionBegin;
  if (*phi == x) PetscCall(VecDestroy(phi));
  else PetscCall(DMRestoreGlobalVector(sw->daphi, phi));
  *phi = NULL;
  PetscFunctionReturn(0);
}

static PetscErrorCode MatView_Sweep(Mat A, PetscViewer viewer)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  PetscBool  ascii;

  PetscFunctionBegin;
  PetscCall(PetscObjectTypeCompare((PetscObject)viewer, PETSCVIEWERASCII, &ascii));
  if (!ascii) PetscFunctionReturn(0);
  if (!sw->setup) {
    PetscCall(PetscViewerASCIIPrintf(viewer, "  discrete-ordinates sweep (not assembled)\n"));
    PetscFunctionReturn(0);
  }
  {
    const SweepProblem *P = &sw->P;
    char                bcs[128] = "";
    PetscReal           grind;
    for (int f = 0; f < 6; f++) {
      PetscCall(PetscStrlcat(bcs, MatSweepBoundaries[P->bc[f]], sizeof(bcs)));
      if (f < 5) PetscCall(PetscStrlcat(bcs, ",", sizeof(bcs)));
    }
    PetscCall(PetscViewerASCIIPrintf(viewer, "  discrete-ordinates sweep: %s grid %" PetscInt_FMT " x %" PetscInt_FMT " x %" PetscInt_FMT " cells of %g x %g x %g\n", P->twod ? "2D" : "3D", P->nx, P->ny, P->nz, (double)P->dx, (double)P->dy, (double)P->dz));
    if (sw->qtype == MATSWEEP_QUADRATURE_SNAP) PetscCall(PetscViewerASCIIPrintf(viewer, "  quadrature: SNAP's, %" PetscInt_FMT " directions per octant (%" PetscInt_FMT " in all)\n", P->Q.nang, P->Q.ndir));
    else PetscCall(PetscViewerASCIIPrintf(viewer, "  quadrature: level-symmetric S%" PetscInt_FMT ", %" PetscInt_FMT " directions per octant (%" PetscInt_FMT " in all)\n", sw->qorder, P->Q.nang, P->Q.ndir));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  groups %" PetscInt_FMT ", scattering order L = %" PetscInt_FMT " (%" PetscInt_FMT " moments, %s), materials %" PetscInt_FMT "%s\n", P->ng, P->Q.nmom - 1, P->Q.cmom, MatSweepExpansions[sw->expansion], P->nmat, sw->csigt ? ", sigma_t per cell" : ""));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  scheme %s%s, boundaries (x-,x+,y-,y+,z-,z+) %s\n", P->scheme == MATSWEEP_SCHEME_DD ? "diamond difference" : "step", P->fixup ? " with negative-flux fixup" : "", bcs));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  octant order %" PetscInt_FMT " %" PetscInt_FMT " %" PetscInt_FMT " %" PetscInt_FMT " %" PetscInt_FMT " %" PetscInt_FMT " %" PetscInt_FMT " %" PetscInt_FMT "; unknowns: %" PetscInt_FMT " moments + %" PetscInt_FMT " carried boundary fluxes\n", P->octorder[0], P->octorder[1], P->octorder[2], P->octorder[3], P->octorder[4], P->octorder[5], P->octorder[6], P->octorder[7], P->nphi, P->nb));
    if (P->nbglobal != P->nb) PetscCall(PetscViewerASCIIPrintf(viewer, "  (on the first rank; %" PetscInt_FMT " carried boundary fluxes on all ranks)\n", P->nbglobal));
    PetscCall(PetscViewerASCIIPrintf(viewer, "  layout %s, device %s\n", MatSweepLayouts[sw->layout], MatSweepDevices[sw->device_used]));
    {
      PetscMPIInt size;
      PetscCallMPI(MPI_Comm_size(P->comm, &size));
      if (size > 1) {
        /* Koch, Baker & Alcouffe's pipeline model (SweepKBAModel()): chunks of unit cost, messages free */
        const PetscInt  nch = (P->nx + P->chunk - 1) / P->chunk;
        const PetscBool gpu = sw->device_used == MATSWEEP_DEVICE_CUDA ? PETSC_TRUE : PETSC_FALSE;
        PetscReal       eff;
        PetscCall(SweepKBAModel(P, gpu, &eff));
        PetscCall(PetscViewerASCIIPrintf(viewer, "  KBA sweep over %d ranks, %" PetscInt_FMT " x %" PetscInt_FMT " in y and z (%" PetscInt_FMT " x %" PetscInt_FMT " cells of y and z on the first), chunks of %" PetscInt_FMT " x cells\n", (int)size, P->py, P->pz, P->ny, P->nz, P->chunk));
        PetscCall(PetscViewerASCIIPrintf(viewer, "  KBA model: %" PetscInt_FMT " chunks a line, %s, predicted parallel efficiency %.3f (equal chunks, no messages' cost)\n", nch, gpu ? "octants batched by their upstream ranks, each rank fewest-upstream first" : "the octants one after another", (double)eff));
      }
    }
    if (sw->ops && sw->ops->view) PetscCall((*sw->ops->view)(A, viewer));
    PetscCall(MatSweepGetStatistics(A, NULL, &grind, NULL));
    if (sw->nsweeps) PetscCall(PetscViewerASCIIPrintf(viewer, "  sweeps %" PetscInt_FMT ", the last %.4g s: grind time %.4g ns per cell, direction and group\n", sw->nsweeps, (double)sw->last_sweep_s, (double)grind));
    else PetscCall(PetscViewerASCIIPrintf(viewer, "  no sweep yet\n"));
  }
  PetscFunctionReturn(0);
}

static PetscErrorCode MatBindToCPU_Sweep(Mat A, PetscBool flg)
{
  PetscFunctionBegin;
  (void)flg;
  PetscCall(Invalidate(A)); /* the next assembly chooses the device again */
  PetscFunctionReturn(0);
}

static PetscErrorCode MatDestroy_Sweep(Mat A)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;

  PetscFunctionBegin;
  PetscCall(Invalidate(A));
  PetscCall(DMDestroy(&sw->da));
  PetscCall(PetscFree2(sw->msigt, sw->msigs));
  PetscCall(PetscFree(sw->matmap));
  PetscCall(PetscFree(sw->csigt));
  PetscCall(PetscFree(sw->q));
  PetscCall(PetscFree(sw->qang));
  PetscCall(PetscFree(A->data));
  PetscCall(PetscObjectChangeTypeName((PetscObject)A, NULL));
  PetscFunctionReturn(0);
}

/*MC
   MATSWEEP - "sweep" - The operator of Krylov-accelerated source iteration for
   steady multigroup discrete-ordinates (S_N) neutral-particle transport on a
   structured grid: its product is one transport sweep, as in LANL's SNAP.

   For flux moments phi (cells x groups x moments) the matrix is

     A phi = phi - D L^-1 M S phi

   with S the scattering (all groups at once), M the moments-to-directions
   operator, L^-1 a sweep (streaming and collision of every direction, cell
   by cell in the direction of flight: diamond difference or step), D the
   directions-to-moments quadrature (Adams & Larsen, Prog. Nucl. Energy 40,
   2002).  `MatSweepComputeRHS()` gives b = D L^-1 q; then `KSPSolve`(A, b,
   phi) with GMRES is Krylov-accelerated source iteration, and
   `KSPRICHARDSON` plain source iteration (whose error falls like c^k for
   scattering ratio c).

   Options Database Keys:
+  -mat_type sweep - select this type with `MatSetFromOptions()` (then call `MatSweepSetDM()`)
.  -mat_sweep_quadrature <snap,levelsym> - angular quadrature (default snap)
.  -mat_sweep_nang <nang> - directions per octant of SNAP's quadrature (default 4)
.  -mat_sweep_sn <N> - level-symmetric order (selects it; 2 to 16, even)
.  -mat_sweep_groups <ng> - energy groups (default 1)
.  -mat_sweep_nmom <L+1> - scattering orders (default 1: isotropic)
.  -mat_sweep_expansion <harmonics,snap> - angular functions of the moments (default harmonics)
.  -mat_sweep_scheme <dd,step> - spatial scheme (default dd)
.  -mat_sweep_fixup <bool> - negative-flux fixup of diamond difference (default false)
.  -mat_sweep_bc <vacuum,reflective,...> - the faces x-, x+, y-, y+, z-, z+ (default all vacuum)
.  -mat_sweep_domain <lx,ly,lz> - the box (default 1,1,1)
.  -mat_sweep_layout <DGZ,DZG,GDZ,GZD,ZDG,ZGD> - memory layout of the angular working arrays (default GZD)
.  -mat_sweep_chunk <n> - x cells the KBA pipeline sends at once between ranks (default 4 on the CPU, a quarter of the line on the GPU)
.  -mat_sweep_device <auto,cpu,cuda> - where to sweep (default auto)
.  -mat_sweep_cuda_schedule <tiles,diagonal,pipelined> - CUDA backend: tiles of 4 x 4 x TZ cells a block (default on one rank, up to 288 directions an octant), or the line march by diagonals of lines (default on several ranks) or pipelined (one rank)
.  -mat_sweep_cuda_tile_z <4,8> - CUDA backend, tiles: cells of a tile along z (default 8)
-  -mat_sweep_cuda_ipc <bool> - CUDA backend on several ranks: faces between the ranks of one host go GPU to GPU by CUDA IPC (default true); false stages them through host memory

   Usage:
.vb
   DMDACreate3d(comm, ..., nx, ny, nz, ..., &da);  DMSetUp(da);
   MatCreateSweep(da, &A);
   MatSweepSetGroups(A, ng);  MatSweepSetQuadrature(A, MATSWEEP_QUADRATURE_LEVELSYM, 8);
   MatSweepSetMaterials(A, nmat, sigt, sigs);  MatSweepSetMaterialMap(A, mat);  MatSweepSetSource(A, q);
   MatSetFromOptions(A);
   MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY);  MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY);
   MatCreateVecs(A, &phi, &b);  MatSweepComputeRHS(A, b);
   KSPSetOperators(ksp, A, A);  KSPSolve(ksp, b, phi);    // each MatMult is one sweep
.ve

   Notes:
   Units: cross sections per unit length, the grid's lengths in the same
   unit; the quadrature weights sum to 1, so moment 0 is the scalar flux and
   an isotropic angular flux psi has scalar flux psi.  `MatMult()` uses only
   the documented inputs, and a second product of the same input gives
   bitwise the same output on each backend (fixed orders of every sum).
   `-mat_view` prints the grid, quadrature, groups, moments, boundaries,
   layout, device and the last sweep's grind time; `-log_view` shows the
   events SweepSetup, SweepSource (S phi) and Sweep, and on several ranks
   SweepKBAWait (inside Sweep: on the CPU, waiting for the faces from
   upstream and for the buffers of earlier sends; with CUDA, the time the
   GPU has no chunk to sweep while faces are awaited).  On several ranks the
   grid must be split in y and z only (`-da_processors_x 1`) and both
   backends sweep as SNAP does (KBA, `MatSweepSetChunk()`), the CUDA backend
   with one GPU per rank (rank modulo the GPUs of its host; on one rank
   the CUDA backend sweeps tiles of cells, a block a tile, docs/sweep.md); faces between
   ranks of one host go GPU to GPU (CUDA IPC, `-mat_sweep_cuda_ipc`), others
   through page-locked host memory and MPI (which need not be CUDA-aware).

   Level: beginner

.seealso: `MatCreateSweep()`, `MatSweepComputeRHS()`, `MatSweepSetMaterials()`, `MatSweepSetBoundary()`
M*/
PETSC_EXTERN PetscErrorCode MatCreate_Sweep(Mat A)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(PetscFMMInitializePackage());
  PetscCall(PetscNew(&sw));
  A->data       = (void *)sw;
  sw->ng        = 1;
  sw->nmom      = 1;
  sw->qtype     = MATSWEEP_QUADRATURE_SNAP;
  sw->qorder    = 4;
  sw->expansion = MATSWEEP_EXPANSION_HARMONICS;
  sw->scheme    = MATSWEEP_SCHEME_DD;
  sw->layout    = MATSWEEP_LAYOUT_GZD;
  sw->device    = MATSWEEP_DEVICE_AUTO;
  for (int k = 0; k < 3; k++) sw->len[k] = 1.0;
  for (int f = 0; f < 6; f++) sw->bc[f] = MATSWEEP_BOUNDARY_VACUUM;
  sw->nmat   = 1; /* sigma_t = 1, no scattering */
  sw->mat_ng = sw->mat_nm = 1;
  PetscCall(PetscMalloc2(1, &sw->msigt, 1, &sw->msigs));
  sw->msigt[0] = 1.0;
  sw->msigs[0] = 0.0;

  A->ops->mult           = MatMult_Sweep;
  A->ops->view           = MatView_Sweep;
  A->ops->destroy        = MatDestroy_Sweep;
  A->ops->setfromoptions = MatSetFromOptions_Sweep;
  A->ops->setup          = MatSetUp_Sweep;
  A->ops->assemblyend    = MatAssemblyEnd_Sweep;
  A->ops->getvecs        = MatCreateVecs_Sweep;
  A->ops->bindtocpu      = MatBindToCPU_Sweep;
#if defined(PETSC_HAVE_DEVICE)
  A->boundtocpu = PETSC_FALSE; /* MatCreate() binds every matrix (a PETSc with a device): unbound, the GPU when there is one */
#endif
  A->assembled = PETSC_FALSE;
  PetscCall(PetscObjectChangeTypeName((PetscObject)A, MATSWEEP));
  PetscFunctionReturn(0);
}

/*@
   MatCreateSweep - Creates a `MATSWEEP` on a grid.

   Collective

   Input Parameter:
.  da - the grid: a 3D `DMDA` with one grid point per cell (or 2D for an x-y problem), on one rank

   Output Parameter:
.  A - the matrix

   Notes:
   Equivalent to `MatCreate()`, `MatSetType`(A, `MATSWEEP`), `MatSweepSetDM`(A, da).
   Then set the groups, quadrature, materials and sources, call
   `MatSetFromOptions()`, and assemble: the sizes of A (moments, and the
   carried boundary fluxes of axes with two reflective faces) are set at
   assembly.

   Errors:
.  see `MatSweepSetDM()`

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepSetDM()`
@*/
PetscErrorCode MatCreateSweep(DM da, Mat *A)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(da, DM_CLASSID, 1);
  PetscAssertPointer(A, 2);
  PetscCall(PetscFMMInitializePackage());
  PetscCall(MatCreate(PetscObjectComm((PetscObject)da), A));
  PetscCall(MatSetType(*A, MATSWEEP));
  PetscCall(MatSweepSetDM(*A, da));
  PetscFunctionReturn(0);
}
