/*
  The public setters and getters of MATSWEEP, with their manual pages.  Each
  copies what it is given and marks the matrix for a new setup (at the next
  MatAssemblyEnd()); the checks that need the whole problem (sizes against
  the grid, the scattering ratio) are made at that setup (mat.c).
*/
#include "sweepimpl.h"

const char *const MatSweepSchemes[]    = {"dd", "step", "MatSweepScheme", "MATSWEEP_SCHEME_", NULL};
const char *const MatSweepBoundaries[] = {"vacuum", "reflective", "MatSweepBoundary", "MATSWEEP_BOUNDARY_", NULL};
const char *const MatSweepLayouts[]    = {"DGZ", "DZG", "GDZ", "GZD", "ZDG", "ZGD", "MatSweepLayout", "MATSWEEP_LAYOUT_", NULL};
const char *const MatSweepDevices[]    = {"auto", "cpu", "cuda", "MatSweepDevice", "MATSWEEP_DEVICE_", NULL};

/* the MATSWEEP data of A, after checking its type; the next assembly sets it up again when invalidate */
static PetscErrorCode SweepGet(Mat A, PetscBool invalidate, Mat_Sweep **sw)
{
  PetscBool is;

  PetscFunctionBegin;
  *sw = NULL;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscCall(PetscObjectTypeCompare((PetscObject)A, MATSWEEP, &is));
  PetscCheck(is, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONG, "Matrix of type %s, expected %s", ((PetscObject)A)->type_name ? ((PetscObject)A)->type_name : "(not set)", MATSWEEP);
  *sw = (Mat_Sweep *)A->data;
  if (invalidate) (*sw)->setup = (*sw)->built = PETSC_FALSE; /* PETSc's flag stays: products reach MATSWEEP's own message */
  PetscFunctionReturn(0);
}

/* index of the first non-finite entry of a[0..n), or -1 */
static PetscInt FirstNonFinite(const PetscReal *a, PetscInt n)
{
  for (PetscInt i = 0; i < n; i++)
    if (PetscIsInfOrNanReal(a[i])) return i;
  return -1;
}

/* the local cells of the grid (its DMDA must be set) */
static PetscErrorCode LocalCells(Mat A, Mat_Sweep *sw, const char *fn, PetscInt *n)
{
  DMDALocalInfo info;

  PetscFunctionBegin;
  PetscCheck(sw->da, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: call MatSweepSetDM() (or MatCreateSweep()) before %s(): the array's length depends on the grid", fn);
  PetscCall(DMDAGetLocalInfo(sw->da, &info));
  *n = info.xm * info.ym * (info.dim == 3 ? info.zm : 1);
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetDM - Sets the grid of a `MATSWEEP`: a `DMDA` with one grid point per cell.

   Collective

   Input Parameters:
+  A  - the `MATSWEEP`
-  da - a 3D `DMDA` (nx x ny x nz cells), or a 2D one for an x-y problem (no streaming along z); any dof and stencil

   Notes:
   The matrix keeps a reference to da.  Its cells are numbered as the `DMDA`
   numbers its points, x fastest: cell c = (k ny + j) nx + i of this rank's part.
   On several ranks the sweep is SNAP's KBA: the `DMDA` must split y and z
   only (one rank along x: m = 1 in `DMDACreate3d()`, or `-da_processors_x 1`),
   and each octant's wavefront is pipelined through the ranks in chunks of x
   cells (`MatSweepSetChunk()`).
   The cell widths are the domain lengths (`MatSweepSetDomain()`) over the
   cell counts.  The flux-moment vectors of `MatCreateVecs()` live on a
   `DMDA` like da with ng * (L+1)^2 dof per cell (`MatSweepGetDM()`).

   Errors:
+  `PETSC_ERR_ARG_WRONG` - da is not a `DMDA`, or not of dimension 2 or 3
-  at assembly, `PETSC_ERR_SUP` - da splits x over several ranks

   Level: beginner

.seealso: `MATSWEEP`, `MatCreateSweep()`, `MatSweepGetDM()`
@*/
PetscErrorCode MatSweepSetDM(Mat A, DM da)
{
  Mat_Sweep *sw;
  PetscBool  isda;
  PetscInt   dim;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscValidHeaderSpecific(da, DM_CLASSID, 2);
  PetscCall(PetscObjectTypeCompare((PetscObject)da, DMDA, &isda));
  PetscCheck(isda, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONG, "MATSWEEP: the grid must be a DMDA, got a DM of type %s", ((PetscObject)da)->type_name);
  PetscCall(DMGetDimension(da, &dim));
  PetscCheck(dim == 2 || dim == 3, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONG, "MATSWEEP: the DMDA has dimension %" PetscInt_FMT ", expected 3 (or 2 for an x-y problem)", dim);
  PetscCall(PetscObjectReference((PetscObject)da));
  PetscCall(DMDestroy(&sw->da));
  sw->da = da;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetDM - Gets the `DMDA` of the flux moments of a `MATSWEEP` (the grid with ng * (L+1)^2 dof per cell), set up at assembly.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`, assembled

   Output Parameter:
.  dm - the `DMDA` (owned by A; do not destroy it)

   Notes:
   The dof of a cell are ordered by group, then moment: entry g (L+1)^2 + m is
   moment m of group g; moment 0 is the scalar flux.  `DMDASetFieldName()`
   names them phi_g<g>_m<m> for VTK output.

   Errors:
.  `PETSC_ERR_ARG_WRONGSTATE` - A is not assembled

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepGetFluxVector()`
@*/
PetscErrorCode MatSweepGetDM(Mat A, DM *dm)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscAssertPointer(dm, 2);
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix before asking for its DM");
  *dm = sw->daphi;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetDomain - Sets the lengths of the box the grid covers (default 1 x 1 x 1).

   Logically collective

   Input Parameters:
+  A          - the `MATSWEEP`
-  lx, ly, lz - lengths along x, y, z (in the units of 1/sigma_t); the cells are lx/nx x ly/ny x lz/nz (lz unused in 2D)

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - a length not positive and finite

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepSetDM()`
@*/
PetscErrorCode MatSweepSetDomain(Mat A, PetscReal lx, PetscReal ly, PetscReal lz)
{
  Mat_Sweep      *sw;
  const PetscReal l[3] = {lx, ly, lz};

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  for (int k = 0; k < 3; k++) {
    PetscCheck(l[k] > 0 && l[k] < PETSC_MAX_REAL, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: domain length along %c is %g, expected a positive finite number", "xyz"[k], (double)l[k]);
    sw->len[k] = l[k];
  }
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetQuadrature - Sets the angular quadrature of a `MATSWEEP`.

   Logically collective

   Input Parameters:
+  A - the `MATSWEEP`
.  q - `MATSWEEP_QUADRATURE_SNAP` (SNAP's) or `MATSWEEP_QUADRATURE_LEVELSYM` (level-symmetric S_N)
-  n - for SNAP's, nang, the directions per octant (1 to 512); for S_N, the order N (even, 2 to 16: N(N+2)/8 directions per octant)

   Options Database Keys:
+  -mat_sweep_quadrature <snap,levelsym> - the type
.  -mat_sweep_nang <nang> - directions per octant of SNAP's quadrature (default 4)
-  -mat_sweep_sn <N> - order of the level-symmetric quadrature (selects it)

   Notes:
   SNAP's quadrature (lanl/SNAP, setup_angle) has mu_n = (n - 1/2)/nang, eta_n
   = 1 - (n - 1/2)/nang, xi_n = sqrt(1 - mu_n^2 - eta_n^2) and equal weights;
   it is not a quadrature of any accuracy, but a stand-in of a given size.
   Level-symmetric LQ_N: Lewis & Miller, Computational Methods of Neutron
   Transport (1984), Table 4-1 (the seven-digit weights rescaled to sum to 1).
   In both the weights sum to 1 over the sphere, so an isotropic angular flux
   psi has scalar flux psi.  `MatSweepGetQuadrature()` returns the directions.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - n out of range, or an odd or unavailable S_N order

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepGetQuadrature()`
@*/
PetscErrorCode MatSweepSetQuadrature(Mat A, MatSweepQuadrature q, PetscInt n)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  if (q == MATSWEEP_QUADRATURE_SNAP) PetscCheck(n >= 1 && n <= SWEEP_MAX_NANG, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: %" PetscInt_FMT " directions per octant, expected 1 to %d", n, SWEEP_MAX_NANG);
  else {
    PetscCheck(q == MATSWEEP_QUADRATURE_LEVELSYM, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: unknown quadrature %d", (int)q);
    PetscCheck(n >= 2 && n <= SWEEP_MAX_SN && n % 2 == 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: level-symmetric order S%" PetscInt_FMT ", expected an even order from 2 to %d", n, SWEEP_MAX_SN);
  }
  sw->qtype  = q;
  sw->qorder = n;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetGroups - Sets the number of energy groups of a `MATSWEEP`.

   Logically collective

   Input Parameters:
+  A  - the `MATSWEEP`
-  ng - groups, >= 1 (default 1)

   Options Database Key:
.  -mat_sweep_groups <ng> - the number of groups

   Notes:
   Set the groups before the cross sections and sources, whose lengths depend
   on them.  The matrix couples all groups at once (the scattering source of
   every group is built from the input moments of all groups: Jacobi in
   energy), so that up- and down-scattering are both exact at convergence.
   Gauss-Seidel in energy instead (a group at a time, downscatter from the
   groups already solved): one `MATSWEEP` per group with ng = 1, its
   in-group scattering in its material table and the downscatter added to
   its source.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - ng < 1

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepSetMaterials()`
@*/
PetscErrorCode MatSweepSetGroups(Mat A, PetscInt ng)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCheck(ng >= 1, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: %" PetscInt_FMT " energy groups, expected at least 1", ng);
  sw->ng = ng;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetScatteringOrder - Sets the Legendre order L of the scattering (SNAP's nmom = L + 1) and the angular functions of the moments.

   Logically collective

   Input Parameters:
+  A - the `MATSWEEP`
.  L - the order, 0 (isotropic, the default) to 7; there are (L+1)^2 flux moments per cell and group
-  e - `MATSWEEP_EXPANSION_HARMONICS` (real spherical harmonics, the default) or `MATSWEEP_EXPANSION_SNAP`

   Options Database Keys:
+  -mat_sweep_nmom <L+1> - SNAP's name for L + 1
-  -mat_sweep_expansion <harmonics,snap> - the functions

   Notes:
   Harmonics: Y_lm real, Schmidt semi-normalised about the z axis, moment
   index l^2 + l + m; phi_lm = sum_d w_d Y_lm(Omega_d) psi_d and the scattering
   source of direction Omega is sum_l (2l+1) sigma_s,l sum_m Y_lm(Omega) phi_lm
   (Lewis & Miller, Eq. 4-6).  SNAP: its expansion coefficients (SNAP's
   expcoeff: powers of the direction cosines, not spherical harmonics) with
   no (2l+1), so that a `MATSWEEP` reproduces SNAP's answers with nmom > 1.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - L < 0 or L > 7, or an unknown expansion

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetMaterials()`
@*/
PetscErrorCode MatSweepSetScatteringOrder(Mat A, PetscInt L, MatSweepExpansion e)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCheck(L >= 0 && L < SWEEP_MAX_NMOM, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: scattering order L = %" PetscInt_FMT " (nmom %" PetscInt_FMT "), expected 0 <= L <= %d", L, L + 1, SWEEP_MAX_NMOM - 1);
  PetscCheck(e == MATSWEEP_EXPANSION_HARMONICS || e == MATSWEEP_EXPANSION_SNAP, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: unknown expansion %d", (int)e);
  sw->nmom      = L + 1;
  sw->expansion = e;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetMaterials - Sets the material table: total and scattering cross sections per material and group.

   Logically collective

   Input Parameters:
+  A    - the `MATSWEEP`
.  nmat - number of materials, >= 1
.  sigt - total cross sections sigma_t, nmat * ng reals: sigt[m ng + g] (per unit length, >= 0)
-  sigs - scattering cross sections, nmat * (L+1) * ng * ng reals: sigs[((m (L+1) + l) ng + g) ng + gp]
          = sigma_s,l(gp -> g), the Legendre moment l of scattering from group gp into group g; NULL: none

   Notes:
   Cells take material 0 unless `MatSweepSetMaterialMap()` says otherwise, and
   their sigma_t from the table unless `MatSweepSetTotalCrossSection()` gives
   it per cell.  Set the groups and the scattering order first.  The default
   table is one material with sigma_t = 1 and no scattering.  At assembly
   each cell's group g must satisfy sum_g' sigma_s,0(g -> g') <= sigma_t,g
   (scattering ratio at most 1: a material that multiplies particles is not a
   source-iteration problem).

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - nmat < 1, a sigma_t negative or not finite, a sigma_s,0 negative, any entry not finite
-  at assembly - the tables' sizes (ng, L) differ from the matrix's, or a scattering ratio above 1

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepSetMaterialMap()`, `MatSweepSetTotalCrossSection()`
@*/
PetscErrorCode MatSweepSetMaterials(Mat A, PetscInt nmat, const PetscReal sigt[], const PetscReal sigs[])
{
  Mat_Sweep *sw;
  PetscInt   ng, nm, bad;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  ng = sw->ng;
  nm = sw->nmom;
  PetscCheck(nmat >= 1, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: %" PetscInt_FMT " materials, expected at least 1", nmat);
  PetscAssertPointer(sigt, 3);
  for (PetscInt i = 0; i < nmat * ng; i++)
    PetscCheck(sigt[i] >= 0 && sigt[i] < PETSC_MAX_REAL, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: sigma_t of material %" PetscInt_FMT " group %" PetscInt_FMT " is %g, expected a finite number >= 0", i / ng, i % ng, (double)sigt[i]);
  if (sigs) {
    bad = FirstNonFinite(sigs, nmat * nm * ng * ng);
    PetscCheck(bad < 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: sigma_s entry %" PetscInt_FMT " (material %" PetscInt_FMT ", order %" PetscInt_FMT ") is %g, expected a finite number", bad, bad / (nm * ng * ng), (bad / (ng * ng)) % nm, bad >= 0 ? (double)sigs[bad] : 0.0);
    for (PetscInt m = 0; m < nmat; m++)
      for (PetscInt i = 0; i < ng * ng; i++) {
        const PetscReal v = sigs[(size_t)m * nm * ng * ng + i];
        PetscCheck(v >= 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: sigma_s,0 of material %" PetscInt_FMT " from group %" PetscInt_FMT " to group %" PetscInt_FMT " is %g, expected >= 0", m, i % ng, i / ng, (double)v);
      }
  }
  PetscCall(PetscFree2(sw->msigt, sw->msigs));
  PetscCall(PetscMalloc2(nmat * ng, &sw->msigt, nmat * nm * ng * ng, &sw->msigs));
  PetscCall(PetscArraycpy(sw->msigt, sigt, nmat * ng));
  if (sigs) PetscCall(PetscArraycpy(sw->msigs, sigs, nmat * nm * ng * ng));
  else PetscCall(PetscArrayzero(sw->msigs, nmat * nm * ng * ng));
  sw->nmat   = nmat;
  sw->mat_ng = ng;
  sw->mat_nm = nm;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetMaterialMap - Sets the material of each cell of this rank.

   Logically collective

   Input Parameters:
+  A   - the `MATSWEEP`, with its grid set
-  mat - the material (0 to nmat-1) of each local cell, in the grid's order (x fastest); NULL: all material 0

   Errors:
.  at assembly - a material number outside the table

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepSetMaterials()`
@*/
PetscErrorCode MatSweepSetMaterialMap(Mat A, const PetscInt mat[])
{
  Mat_Sweep *sw;
  PetscInt   n;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCall(PetscFree(sw->matmap));
  if (!mat) PetscFunctionReturn(0);
  PetscCall(LocalCells(A, sw, "MatSweepSetMaterialMap", &n));
  PetscCall(PetscMalloc1(n, &sw->matmap));
  PetscCall(PetscArraycpy(sw->matmap, mat, n));
  sw->map_n = n;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetTotalCrossSection - Sets sigma_t per cell and group, instead of from the material table.

   Logically collective

   Input Parameters:
+  A    - the `MATSWEEP`, with its grid and groups set
-  sigt - sigma_t of each local cell and group, ncells * ng reals: sigt[c ng + g] (>= 0, finite); NULL: from the materials

   Notes:
   The scattering cross sections stay those of the cell's material.

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - an entry negative or not finite (with its cell and group)
-  at assembly - the number of groups changed since

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetMaterials()`
@*/
PetscErrorCode MatSweepSetTotalCrossSection(Mat A, const PetscReal sigt[])
{
  Mat_Sweep *sw;
  PetscInt   n;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCall(PetscFree(sw->csigt));
  if (!sigt) PetscFunctionReturn(0);
  PetscCall(LocalCells(A, sw, "MatSweepSetTotalCrossSection", &n));
  for (PetscInt i = 0; i < n * sw->ng; i++)
    PetscCheck(sigt[i] >= 0 && sigt[i] < PETSC_MAX_REAL, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: sigma_t of local cell %" PetscInt_FMT " group %" PetscInt_FMT " is %g, expected a finite number >= 0", i / sw->ng, i % sw->ng, (double)sigt[i]);
  PetscCall(PetscMalloc1(n * sw->ng, &sw->csigt));
  PetscCall(PetscArraycpy(sw->csigt, sigt, n * sw->ng));
  sw->csigt_ng = sw->ng;
  sw->csigt_n  = n;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetSource - Sets the isotropic fixed source q per cell and group (the right-hand side's source).

   Logically collective

   Input Parameters:
+  A - the `MATSWEEP`, with its grid and groups set
-  q - the source of each local cell and group, ncells * ng reals: q[c ng + g] (the array of a `DMDA` vector
       with ng dof, as `DMDACreateCompatibleDMDA()` gives); NULL: none

   Notes:
   q is the angular source of every direction (particles per unit volume,
   time and unit weight of the quadrature, whose weights sum to 1): in an
   infinite medium of one group psi = phi = q/(sigma_t - sigma_s).  Only
   `MatSweepComputeRHS()` uses it; `MatMult()` does not.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - an entry not finite (with its cell and group)

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepComputeRHS()`, `MatSweepSetAngularSource()`
@*/
PetscErrorCode MatSweepSetSource(Mat A, const PetscReal q[])
{
  Mat_Sweep *sw;
  PetscInt   n, bad;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscCall(PetscFree(sw->q));
  if (!q) PetscFunctionReturn(0);
  PetscCall(LocalCells(A, sw, "MatSweepSetSource", &n));
  bad = FirstNonFinite(q, n * sw->ng);
  PetscCheck(bad < 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: source of local cell %" PetscInt_FMT " group %" PetscInt_FMT " is %g, expected a finite number", bad / sw->ng, bad % sw->ng, bad >= 0 ? (double)q[bad] : 0.0);
  PetscCall(PetscMalloc1(n * sw->ng, &sw->q));
  PetscCall(PetscArraycpy(sw->q, q, n * sw->ng));
  sw->q_ng = sw->ng;
  sw->q_n  = n;
  if (sw->setup) sw->P.q = sw->q;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetAngularSource - Sets a fixed source per cell, direction and group (manufactured solutions, SNAP's src_opt 3).

   Logically collective

   Input Parameters:
+  A - the `MATSWEEP`, with its grid, groups and quadrature set
-  q - ncells * ndir * ng reals: q[(c ndir + d) ng + g] for direction d = oct nang + a (see `MatSweepGetQuadrature()`); NULL: none

   Notes:
   Added to the isotropic source of `MatSweepSetSource()` in `MatSweepComputeRHS()`.
   Set the quadrature first: the array's length depends on it.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - an entry not finite

   Level: advanced

.seealso: `MATSWEEP`, `MatSweepSetSource()`, `MatSweepGetQuadrature()`
@*/
PetscErrorCode MatSweepSetAngularSource(Mat A, const PetscReal q[])
{
  Mat_Sweep *sw;
  PetscInt   n, nd, bad;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscCall(PetscFree(sw->qang));
  if (!q) PetscFunctionReturn(0);
  PetscCall(LocalCells(A, sw, "MatSweepSetAngularSource", &n));
  if (sw->qtype == MATSWEEP_QUADRATURE_SNAP) nd = 8 * sw->qorder;
  else nd = sw->qorder * (sw->qorder + 2);
  bad = FirstNonFinite(q, n * nd * sw->ng);
  PetscCheck(bad < 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: angular source entry %" PetscInt_FMT " is %g, expected a finite number", bad, bad >= 0 ? (double)q[bad] : 0.0);
  PetscCall(PetscMalloc1((size_t)n * nd * sw->ng, &sw->qang));
  PetscCall(PetscArraycpy(sw->qang, q, (size_t)n * nd * sw->ng));
  sw->qang_ng  = sw->ng;
  sw->qang_dir = nd;
  sw->qang_n   = n;
  if (sw->setup) sw->P.qang = sw->qang;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetBoundary - Sets the boundary condition of each face of the grid.

   Logically collective

   Input Parameters:
+  A  - the `MATSWEEP`
-  bc - six conditions: faces x = 0, x = lx, y = 0, y = ly, z = 0, z = lz (each `MATSWEEP_BOUNDARY_VACUUM` or
        `MATSWEEP_BOUNDARY_REFLECTIVE`)

   Options Database Key:
.  -mat_sweep_bc <vacuum,...> - six comma-separated conditions in the same order (fewer: the rest vacuum)

   Notes:
   Reflection is specular.  A sweep visits the octants so that an octant
   entering through a reflective face comes after the one leaving through
   it: with at most one reflective face per axis (symmetry planes, as in
   Kobayashi's benchmarks) every reflected flux is found in the same sweep.
   Where both faces of an axis reflect, the flux entering through the low
   face is carried in the matrix's vectors as unknowns after the moments (as
   Detran does), so that the operator stays linear and GMRES converges;
   `MatSweepGetFluxVector()` then gives the moments alone.  In 2D the z faces
   are ignored.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - an unknown condition

   Level: beginner

.seealso: `MATSWEEP`, `MatSweepGetFluxVector()`
@*/
PetscErrorCode MatSweepSetBoundary(Mat A, const MatSweepBoundary bc[])
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscAssertPointer(bc, 2);
  for (int f = 0; f < 6; f++) {
    PetscCheck(bc[f] == MATSWEEP_BOUNDARY_VACUUM || bc[f] == MATSWEEP_BOUNDARY_REFLECTIVE, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: boundary condition %d of face %d is unknown", (int)bc[f], f);
    sw->bc[f] = bc[f];
  }
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetScheme - Sets the spatial scheme and the negative-flux fixup.

   Logically collective

   Input Parameters:
+  A      - the `MATSWEEP`
.  scheme - `MATSWEEP_SCHEME_DD` (diamond difference, the default) or `MATSWEEP_SCHEME_STEP` (step, upwind)
-  fixup  - with diamond difference, SNAP's negative-flux fixup: an outgoing face flux that would be negative is
            set to 0 and the cell balance solved again without it (default false)

   Options Database Keys:
+  -mat_sweep_scheme <dd,step> - the scheme
-  -mat_sweep_fixup <bool> - the fixup

   Notes:
   The fixup makes the sweep nonlinear in its source, so the product is no
   longer a linear operator; Krylov methods then converge only where the
   fixup is inactive near the solution.  Step differencing never produces
   negative fluxes and is first-order accurate.

   Level: beginner

.seealso: `MATSWEEP`
@*/
PetscErrorCode MatSweepSetScheme(Mat A, MatSweepScheme scheme, PetscBool fixup)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCheck(scheme == MATSWEEP_SCHEME_DD || scheme == MATSWEEP_SCHEME_STEP, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: unknown scheme %d", (int)scheme);
  sw->scheme = scheme;
  sw->fixup  = fixup;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetLayout - Sets the memory layout of the sweep's angular working arrays (Kripke's names).

   Logically collective

   Input Parameters:
+  A      - the `MATSWEEP`
-  layout - which of direction (D), group (G) and cell (Z) is fastest, named slowest first (default `MATSWEEP_LAYOUT_GZD`)

   Options Database Key:
.  -mat_sweep_layout <DGZ,DZG,GDZ,GZD,ZDG,ZGD> - the layout

   Notes:
   The flux-moment vectors keep the `DMDA` layout whatever the choice.  The
   CPU backend keeps each group's arrays apart (a thread per group) and
   follows the layout's order of D and Z; the CUDA backend follows all three.

   Level: advanced

.seealso: `MATSWEEP`
@*/
PetscErrorCode MatSweepSetLayout(Mat A, MatSweepLayout layout)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCheck(layout >= MATSWEEP_LAYOUT_DGZ && layout <= MATSWEEP_LAYOUT_ZGD, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: unknown layout %d", (int)layout);
  sw->layout = layout;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetDevice - Sets where a `MATSWEEP` sweeps.

   Logically collective

   Input Parameters:
+  A      - the `MATSWEEP`
-  device - `MATSWEEP_DEVICE_AUTO` (CUDA when built with it and a GPU is present, the default), `MATSWEEP_DEVICE_CPU` or `MATSWEEP_DEVICE_CUDA`

   Options Database Key:
.  -mat_sweep_device <auto,cpu,cuda> - the device

   Notes:
   `MatBindToCPU()` with true has the effect of `MATSWEEP_DEVICE_CPU`.

   Errors:
.  at assembly, `PETSC_ERR_SUP` - cuda without a GPU or a CUDA build

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepGetDevice()`
@*/
PetscErrorCode MatSweepSetDevice(Mat A, MatSweepDevice device)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCheck(device >= MATSWEEP_DEVICE_AUTO && device <= MATSWEEP_DEVICE_CUDA, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: unknown device %d", (int)device);
  sw->device = device;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetDevice - Gets the device a `MATSWEEP` sweeps on: after assembly the one in use, before it the one asked for.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`

   Output Parameter:
.  device - the device

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetDevice()`
@*/
PetscErrorCode MatSweepGetDevice(Mat A, MatSweepDevice *device)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscAssertPointer(device, 2);
  *device = sw->setup ? sw->device_used : sw->device;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetGroups - Gets the number of energy groups of a `MATSWEEP` (set by `MatSweepSetGroups()` or -mat_sweep_groups).

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`

   Output Parameter:
.  ng - the number of groups

   Notes:
   Valid before assembly: the lengths of the tables and sources set next
   (`MatSweepSetMaterials()`, `MatSweepSetSource()`, ...) depend on it.

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetGroups()`
@*/
PetscErrorCode MatSweepGetGroups(Mat A, PetscInt *ng)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscAssertPointer(ng, 2);
  *ng = sw->ng;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetScatteringOrder - Gets the Legendre order L of the scattering of a `MATSWEEP` and the angular functions of its moments.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`

   Output Parameters (either may be NULL):
+  L - the order (SNAP's nmom = L + 1); the material table has L + 1 scattering orders and the
       flux has (L+1)^2 moments per cell and group
-  e - the expansion

   Notes:
   Valid before assembly (set by `MatSweepSetScatteringOrder()`, -mat_sweep_nmom, -mat_sweep_expansion).

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetScatteringOrder()`
@*/
PetscErrorCode MatSweepGetScatteringOrder(Mat A, PetscInt *L, MatSweepExpansion *e)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  if (L) *L = sw->nmom - 1;
  if (e) *e = sw->expansion;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetQuadratureType - Gets the kind and size of the angular quadrature of a `MATSWEEP`, as set.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`

   Output Parameters (any may be NULL):
+  q    - `MATSWEEP_QUADRATURE_SNAP` or `MATSWEEP_QUADRATURE_LEVELSYM`
.  n    - nang (SNAP's) or the order N (S_N), as given to `MatSweepSetQuadrature()`
-  ndir - the directions of all octants: 8 nang, or N(N+2) for S_N

   Notes:
   Valid before assembly (the length of `MatSweepSetAngularSource()`'s array
   depends on ndir); `MatSweepGetQuadrature()` gives the directions after it.

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetQuadrature()`, `MatSweepGetQuadrature()`
@*/
PetscErrorCode MatSweepGetQuadratureType(Mat A, MatSweepQuadrature *q, PetscInt *n, PetscInt *ndir)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  if (q) *q = sw->qtype;
  if (n) *n = sw->qorder;
  if (ndir) *ndir = sw->qtype == MATSWEEP_QUADRATURE_SNAP ? 8 * sw->qorder : sw->qorder * (sw->qorder + 2);
  PetscFunctionReturn(0);
}

/*@C
   MatSweepGetQuadrature - Gets the directions and weights of an assembled `MATSWEEP`.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`, assembled

   Output Parameters:
+  nang         - directions per octant
-  mu, eta, xi, w - arrays of nang reals (owned by A): the positive direction cosines and the weights of
                  octant 0; octant oct (0 to 7) has the signs (-1)^(oct&1), (-1)^((oct>>1)&1), (-1)^((oct>>2)&1)
                  and the same weights.  Direction d = oct nang + a.  The 8 nang weights sum to 1.  Any may be NULL.

   Errors:
.  `PETSC_ERR_ARG_WRONGSTATE` - A is not assembled

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetQuadrature()`
@*/
PetscErrorCode MatSweepGetQuadrature(Mat A, PetscInt *nang, const PetscReal *mu[], const PetscReal *eta[], const PetscReal *xi[], const PetscReal *w[])
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix before asking for its quadrature");
  if (nang) *nang = sw->P.Q.nang;
  if (mu) *mu = sw->P.Q.mu;
  if (eta) *eta = sw->P.Q.eta;
  if (xi) *xi = sw->P.Q.xi;
  if (w) *w = sw->P.Q.w;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetSizes - Gets the sizes of an assembled `MATSWEEP`.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`, assembled

   Output Parameters (any may be NULL):
+  ncells - local cells
.  ndir   - directions (all octants)
.  cmom   - flux moments per cell and group, (L+1)^2
-  nb     - local carried boundary unknowns (after the moments in the matrix's vectors; 0 unless both faces of an axis reflect)

   Errors:
.  `PETSC_ERR_ARG_WRONGSTATE` - A is not assembled

   Level: intermediate

.seealso: `MATSWEEP`, `MatSweepSetBoundary()`
@*/
PetscErrorCode MatSweepGetSizes(Mat A, PetscInt *ncells, PetscInt *ndir, PetscInt *cmom, PetscInt *nb)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  PetscCheck(sw->setup, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_WRONGSTATE, "MATSWEEP: assemble the matrix before asking for its sizes");
  if (ncells) *ncells = sw->P.ncells;
  if (ndir) *ndir = sw->P.Q.ndir;
  if (cmom) *cmom = sw->P.Q.cmom;
  if (nb) *nb = sw->P.nb;
  PetscFunctionReturn(0);
}

/*@
   MatSweepGetStatistics - Gets the number of sweeps done and the grind time of the last one.

   Not collective

   Input Parameter:
.  A - the `MATSWEEP`

   Output Parameters (any may be NULL):
+  nsweeps    - sweeps so far (products and right-hand sides)
.  grind_ns   - the last sweep's wall time (the whole product, with any copies of host vectors to and from the GPU)
                over cells x directions (all octants) x groups, in nanoseconds (SNAP's grind time); 0 before the first
-  device_ns  - the same for the sweep's kernels alone, timed on the GPU (CUDA backend; 0 on the CPU)

   Level: intermediate

.seealso: `MATSWEEP`
@*/
PetscErrorCode MatSweepGetStatistics(Mat A, PetscInt *nsweeps, PetscReal *grind_ns, PetscReal *device_ns)
{
  Mat_Sweep *sw;
  PetscReal  work;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_FALSE, &sw));
  work = (sw->setup && sw->nsweeps) ? (PetscReal)sw->P.ncells * sw->P.Q.ndir * sw->P.ng : 0.0;
  if (nsweeps) *nsweeps = sw->nsweeps;
  if (grind_ns) *grind_ns = work > 0 ? 1e9 * sw->last_sweep_s / work : 0.0;
  if (device_ns) *device_ns = work > 0 ? 1e9 * sw->last_device_s / work : 0.0;
  PetscFunctionReturn(0);
}

/*@
   MatSweepSetChunk - Sets how many x cells the KBA pipeline carries in one message between ranks.

   Logically collective

   Input Parameters:
+  A     - the `MATSWEEP`
-  chunk - cells along x per chunk, >= 1, or 0 for the default (SNAP's ichunk)

   Options Database Key:
.  -mat_sweep_chunk <chunk> - the chunk

   Notes:
   Koch, Baker & Alcouffe's sweep: each rank owns a block of y and z and all
   of x; per octant it receives the faces entering its block for one chunk of
   x cells from the ranks upstream in y and z, sweeps the chunk, and sends
   the faces leaving it downstream, receiving the next chunk's faces while it
   sweeps.  Small chunks start the ranks downstream sooner (a shorter pipeline
   fill), large ones send fewer messages.  The default is 4 x cells where
   there are ranks to send to, the whole line on one rank.  A chunk larger
   than the grid is the whole line.

   The CUDA backend sweeps a chunk with one launch per diagonal of its
   block's y-z lines, so small chunks multiply its launches; its default is
   a quarter of the line.  It runs the octants of one level of the octant order
   that share their signs along y and z together (they share their upstream
   ranks), and each rank takes these batches in the order of the number of
   ranks upstream of it, so that ranks at opposite ends of the grid start at
   once (as SNAP's octants interleaved): on two ranks the pipeline never
   fills or drains.  `-mat_view` prints the pipeline model's predicted
   parallel efficiency of the schedule in use.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - chunk < 0

   Level: advanced

.seealso: `MATSWEEP`, `MatSweepSetDM()`
@*/
PetscErrorCode MatSweepSetChunk(Mat A, PetscInt chunk)
{
  Mat_Sweep *sw;

  PetscFunctionBegin;
  PetscCall(SweepGet(A, PETSC_TRUE, &sw));
  PetscCheck(chunk >= 0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "MATSWEEP: chunk of %" PetscInt_FMT " x cells, expected >= 1 (or 0: the default)", chunk);
  sw->chunk = chunk;
  PetscFunctionReturn(0);
}
