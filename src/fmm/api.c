/*
  MATFMM's public setters and getters, with their manual pages: the
  geometry (MatFMMSetSources(), MatFMMSetTargets(), copied by src/fmm/points.c),
  the operator and the method's parameters (validated here, in effect at the
  next assembly), and the GPU's once-per-process setup.
*/
#include "fmmimpl.h"

const char *const MatFMMKernels[] = {"single", "double", "combined", "MatFMMKernel", "MATFMM_KERNEL_", NULL};
const char *const MatFMMLayouts[] = {"tiled", "indexing", "repetition", "MatFMMLayout", "MATFMM_LAYOUT_", NULL};
const char *const MatFMMMethods[] = {"fmm", "direct", "MatFMMMethod", "MATFMM_METHOD_", NULL};
const char *const MatFMMDevices[] = {"auto", "cpu", "cuda", "MatFMMDevice", "MATFMM_DEVICE_", NULL};
const char *const MatFMMDistributions[] = {"auto", "replicated", "tree", "MatFMMDistribution", "MATFMM_DISTRIBUTION_", NULL};

/* the MATFMM data of A for the getters, after checking its type (PetscCheckTypeName() checks nothing in an optimized PETSc) */
static PetscErrorCode FMMGet(Mat A, Mat_FMM **fmm)
{
  PetscBool is;

  PetscFunctionBegin;
  *fmm = NULL;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscCall(PetscObjectTypeCompare((PetscObject)A, MATFMM, &is));
  PetscCheck(is, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "Matrix of type %s, expected %s", ((PetscObject)A)->type_name ? ((PetscObject)A)->type_name : "(not set)", MATFMM);
  *fmm = (Mat_FMM *)A->data;
  PetscFunctionReturn(0);
}

static PetscErrorCode MatFMMSetSources_FMM(Mat A, PetscInt n, const PetscReal xy[], const PetscReal nrm[], const PetscReal w[])
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool dev = PETSC_FALSE;

  PetscFunctionBegin;
  PetscCheck(n >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "Number of local sources %" PetscInt_FMT " must be >= 0", n);
  PetscCheck(A->cmap->n < 0 || A->cmap->n == n, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "Number of local sources %" PetscInt_FMT " differs from the local column size %" PetscInt_FMT " of the matrix", n, A->cmap->n);
  PetscCheck(n == 0 || xy, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "Source coordinates are required (array of 2*%" PetscInt_FMT " reals)", n);
  {
    const PetscReal  *a[3]    = {xy, nrm, w};
    const char *const name[3] = {"xy", "normals", "weights"};
    PetscCall(FMMArraysOnDevice(n ? 3 : 0, a, name, &dev));
  }
  PetscCall(MatFMMInvalidate(A));
  {
    PetscErrorCode ierr;
    int            saved;
    PetscCall(FMMSetupTeamBegin(A, &saved)); /* (the copy: the setup's team) */
    ierr = FMMSourcesSet(fmm, n, xy, nrm, w, dev);
    FMMSetupTeamEnd(saved);
    PetscCall(ierr);
  }
  if (A->cmap->n < 0) A->cmap->n = n;
  if (fmm->tgt.m < 0 && A->rmap->n < 0) A->rmap->n = n;
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetSources - Sets the sources (columns) of a `MATFMM`: their
   coordinates and, optionally, unit normals and quadrature weights.

   Collective on A (every rank calls it, with n = 0 where it owns no source)

   Input Parameters:
+  A       - the `MATFMM`
.  n       - number of sources on this rank: the local column size of A
.  xy      - coordinates, interleaved (x_0, y_0, x_1, y_1, ...), 2n reals
.  normals - unit normals (nx_0, ny_0, ...), 2n reals, or NULL; required by the double layer
-  weights - quadrature weights w_j, n reals, or NULL for w_j = 1 (particles)

   Notes:
   The arrays are copied.  Source j of the matrix (global column j) is the
   j-th source in rank order.  The operator (see `MatFMMSetKernel()`) uses the
   1/(2 pi) normalisation of the Laplace Green's function, and the kernel is
   taken as 0 for a target at zero distance from a source (the self term of an
   integral equation, or coincident points).  On the GPU, in the tiled layout
   with the table log (the defaults), a pair whose squared distance underflows
   to a subnormal number (distance below 1.5e-154) counts as coincident too.

   Coordinates may be of any size the double range holds.  Where the
   sources' extent (the larger side of their bounding box) is outside
   [2^-400, 2^400], the matrix builds its tree and runs its kernels on the
   points times 2^-k, a power of two that brings the extent to [1, 2) (an
   exact operation), and adds k log 2 times the single layer's charges on
   the host: log|r| = log|2^-k r| + k log 2.  The result is then what the
   unscaled sum gives, to the tolerance, for every configuration whose
   values are representable (pairs closer than 1.5e-154 times 2^k count as
   coincident on the GPU, as above, and their squared distance in the
   scaled units decides the CPU's zero test).  Inside the window nothing
   is scaled.  `-mat_view` says when the points are scaled.
   Calling this again replaces the geometry; assemble the matrix again before
   using it (arrays of the same sizes are refilled in place).  A time-stepping
   code that refills them before every assembly gets faster assemblies on the
   GPU: on one rank, from the 8th refill on, the CUDA backend page-locks the
   matrix's copy (5n reals with normals and weights; once, at a cost of a few
   assemblies) and copies it to the GPU without staging, so that the host is
   free to queue the tree's work.  From the next refill on, this function
   also sends each array, once it has copied it, to a copy of the block in
   GPU memory (5n more reals there): the points go up while it copies the
   normals and weights, and the assembly finds them on the GPU.  Without GPU
   memory for that copy the assembly uploads the block as before.  New sizes
   or `MatDestroy()` release both.  `-info` reports them.

   Device memory: in a build with CUDA the arrays may instead all be in GPU
   memory (a code whose points live on the GPU, e.g. the array of a device
   vector from `VecGetArrayReadAndMemType()`).  They are then copied, and
   checked for NaN/Inf, on the GPU (faster than from host memory), after
   PETSc's current device stream and the legacy default stream; the call
   returns when they may be changed.  With the CUDA backend on one rank the
   points never cross the bus, which makes assemblies faster too.  Other paths (more than one rank, `-mat_fmm_device cpu`, `-mat_fmm_cuda_tree
   cpu`) copy them to the host at assembly, and `MatGetDiagonal()` reads a
   temporary host copy.

   Errors:
+  `PETSC_ERR_ARG_SIZ` - n differs from the local column size already set
.  `PETSC_ERR_ARG_NULL` - xy is NULL with n > 0
.  `PETSC_ERR_ARG_WRONG` - some arrays in device memory and others in host memory (nothing is changed)
.  `PETSC_ERR_MEM` - no GPU memory for the copy of arrays given in device memory
.  at `MatAssemblyEnd()` - NaN/Inf in any array, all sources coincident, or no normals for a double layer
.  at `MatAssemblyEnd()`, `PETSC_ERR_ARG_OUTOFRANGE` - a target or source coordinate above 2^500 (about 3e150) in magnitude, in the scaled units where the points are scaled (its squared distance to the sources could overflow: give coordinates relative to a point near the sources), or the double layer's alpha times 2^k not a normal double
-  at `MatMult()`, `PETSC_ERR_FP` - with scaled points, a product that is not finite for finite densities (its true value overflows)

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetTargets()`, `MatFMMSetKernel()`
@*/
PetscErrorCode MatFMMSetSources(Mat A, PetscInt n, const PetscReal xy[], const PetscReal normals[], const PetscReal weights[])
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscTryMethod(A, "MatFMMSetSources_C", (Mat, PetscInt, const PetscReal[], const PetscReal[], const PetscReal[]), (A, n, xy, normals, weights));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatFMMSetTargets_FMM(Mat A, PetscInt m, const PetscReal xy[])
{
  Mat_FMM  *fmm = (Mat_FMM *)A->data;
  PetscBool dev = PETSC_FALSE;

  PetscFunctionBegin;
  PetscCheck(m >= 0 || m == PETSC_DETERMINE, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "Number of local targets %" PetscInt_FMT " must be >= 0, or PETSC_DETERMINE for targets = sources", m);
  PetscCheck(m != PETSC_DETERMINE || !xy, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "m = PETSC_DETERMINE (targets = sources) takes xy = NULL");
  PetscCheck(m <= 0 || xy, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "Target coordinates are required (array of 2*%" PetscInt_FMT " reals)", m);
  PetscCheck(m == PETSC_DETERMINE || A->rmap->n < 0 || A->rmap->n == m, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "Number of local targets %" PetscInt_FMT " differs from the local row size %" PetscInt_FMT " of the matrix", m, A->rmap->n);
  {
    const PetscReal  *a[1]    = {xy};
    const char *const name[1] = {"xy"};
    PetscCall(FMMArraysOnDevice(m > 0 ? 1 : 0, a, name, &dev));
  }
  PetscCall(MatFMMInvalidate(A));
  PetscCall(FMMTargetsSet(fmm, m, xy, dev));
  if (m != PETSC_DETERMINE && A->rmap->n < 0) A->rmap->n = m;
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetTargets - Sets the targets (rows) of a `MATFMM`, the points where
   the potential is evaluated.

   Collective on A

   Input Parameters:
+  A  - the `MATFMM`
.  m  - number of targets on this rank (the local row size of A, may be 0), or `PETSC_DETERMINE`
        to make the targets the sources (the default: the square operator of an integral
        equation, self term excluded)
-  xy - coordinates, interleaved (x_0, y_0, ...), 2m reals (NULL when m is 0 or `PETSC_DETERMINE`)

   Notes:
   The array is copied.  A target at zero distance from a source gets no
   contribution from it.  In a build with CUDA, xy may be in GPU memory; it
   is then copied and checked there (see `MatFMMSetSources()`).

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - m < 0 and not `PETSC_DETERMINE`
.  `PETSC_ERR_ARG_NULL` - xy NULL with m > 0
.  `PETSC_ERR_ARG_SIZ` - m differs from the local row size already set
.  `PETSC_ERR_MEM` - no GPU memory for the copy of an array given in device memory
-  at `MatAssemblyEnd()` - NaN/Inf coordinates

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetSources()`
@*/
PetscErrorCode MatFMMSetTargets(Mat A, PetscInt m, const PetscReal xy[])
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscTryMethod(A, "MatFMMSetTargets_C", (Mat, PetscInt, const PetscReal[]), (A, m, xy));
  PetscFunctionReturn(0);
}

static PetscErrorCode MatFMMSetKernel_FMM(Mat A, MatFMMKernel k, PetscReal alpha, PetscReal beta)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCheck(k >= MATFMM_KERNEL_SINGLE && k <= MATFMM_KERNEL_COMBINED, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "Unknown kernel %d", (int)k);
  PetscCheck(PetscIsNormalReal(alpha) || alpha == 0.0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "alpha %g must be finite", (double)alpha);
  PetscCheck(PetscIsNormalReal(beta) || beta == 0.0, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "beta %g must be finite", (double)beta);
  PetscCall(MatFMMInvalidate(A));
  fmm->par.kernel = k;
  fmm->par.alpha  = k == MATFMM_KERNEL_SINGLE ? 0.0 : (k == MATFMM_KERNEL_DOUBLE ? 1.0 : alpha);
  fmm->par.beta   = k == MATFMM_KERNEL_DOUBLE ? 0.0 : (k == MATFMM_KERNEL_SINGLE ? 1.0 : beta);
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetKernel - Chooses the Laplace layer potential of a `MATFMM`.

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
.  kernel - `MATFMM_KERNEL_SINGLE` (S), `MATFMM_KERNEL_DOUBLE` (D) or `MATFMM_KERNEL_COMBINED` (alpha D + beta S)
.  alpha  - weight of D, used by `MATFMM_KERNEL_COMBINED` only
-  beta   - weight of S, used by `MATFMM_KERNEL_COMBINED` only

   Options Database Keys:
+  -mat_fmm_kernel <single,double,combined> - the kernel
.  -mat_fmm_alpha <a> - alpha of the combined kernel
-  -mat_fmm_beta <b>  - beta of the combined kernel

   Notes:
   With sources y_j, normals n_j, weights w_j and targets z_i (points as complex numbers),
.vb
   (S s)_i = -(1/2pi) sum_j log|z_i - y_j| w_j s_j
   (D s)_i =  (1/2pi) sum_j n_j.(z_i - y_j) / |z_i - y_j|^2 w_j s_j
.ve
   summing over j with y_j != z_i.  Both are real parts of one analytic
   potential, sum_j q_j log(z - y_j) + d_j/(z - y_j), which the FMM expands
   (Greengard & Rokhlin 1987).  The default is the single layer.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - unknown kernel, or alpha or beta not finite

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetSources()`
@*/
PetscErrorCode MatFMMSetKernel(Mat A, MatFMMKernel kernel, PetscReal alpha, PetscReal beta)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, kernel, 2);
  PetscValidLogicalCollectiveReal(A, alpha, 3);
  PetscValidLogicalCollectiveReal(A, beta, 4);
  PetscTryMethod(A, "MatFMMSetKernel_C", (Mat, MatFMMKernel, PetscReal, PetscReal), (A, kernel, alpha, beta));
  PetscFunctionReturn(0);
}

/* parameter setters: validated here, take effect at the next assembly */
#define FMM_PARAM_SETTER(Name, T, field, check, ...) \
  static PetscErrorCode MatFMMSet##Name##_FMM(Mat A, T v) \
  { \
    Mat_FMM *fmm = (Mat_FMM *)A->data; \
    PetscFunctionBegin; \
    PetscCheck(check, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, __VA_ARGS__); \
    if (fmm->field != v) PetscCall(MatFMMInvalidate(A)); \
    fmm->field = v; \
    PetscFunctionReturn(0); \
  }

static PetscErrorCode MatFMMSetClusteringThreshold_FMM(Mat A, PetscInt v)
{
  Mat_FMM *fmm = (Mat_FMM *)A->data;

  PetscFunctionBegin;
  PetscCheck(v >= 1 && v <= 1048576, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "Clustering threshold %" PetscInt_FMT " out of range: expected 1 <= ct <= 1048576 points per leaf box", v);
  if (fmm->par.ct != v || !fmm->ct_set) PetscCall(MatFMMInvalidate(A));
  fmm->par.ct = v;
  fmm->ct_set = PETSC_TRUE;
  PetscFunctionReturn(0);
}
FMM_PARAM_SETTER(ExpansionOrder, PetscInt, p_user, v >= 1 && v <= FMM_P_MAX, "Expansion order %" PetscInt_FMT " out of range: expected 1 <= p <= %d", v, FMM_P_MAX)
FMM_PARAM_SETTER(Tolerance, PetscReal, par.eps, v > 0.0 && v < 1.0, "Tolerance %g out of range: expected 0 < eps < 1", (double)v)
FMM_PARAM_SETTER(Theta, PetscReal, par.theta, v > 0.0 && v < 1.0, "Theta %g out of range: expected 0 < theta < 1", (double)v)
FMM_PARAM_SETTER(Layout, MatFMMLayout, par.layout, v >= MATFMM_LAYOUT_TILED && v <= MATFMM_LAYOUT_REPETITION, "Unknown near-field layout %d", (int)v)
FMM_PARAM_SETTER(Method, MatFMMMethod, par.method, v == MATFMM_METHOD_FMM || v == MATFMM_METHOD_DIRECT, "Unknown method %d", (int)v)
FMM_PARAM_SETTER(Device, MatFMMDevice, device, v >= MATFMM_DEVICE_AUTO && v <= MATFMM_DEVICE_CUDA, "Unknown device %d", (int)v)
FMM_PARAM_SETTER(Distribution, MatFMMDistribution, distribution, v >= MATFMM_DISTRIBUTION_AUTO && v <= MATFMM_DISTRIBUTION_TREE, "Unknown distribution %d: expected auto, replicated or tree", (int)v)

/* the implementations of the setters above, composed with the matrix (on) or removed (off, MatDestroy()) */
PetscErrorCode MatFMMComposeSetters(Mat A, PetscBool on)
{
  PetscFunctionBegin;
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetSources_C", on ? MatFMMSetSources_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTargets_C", on ? MatFMMSetTargets_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetKernel_C", on ? MatFMMSetKernel_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetClusteringThreshold_C", on ? MatFMMSetClusteringThreshold_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetExpansionOrder_C", on ? MatFMMSetExpansionOrder_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTolerance_C", on ? MatFMMSetTolerance_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetTheta_C", on ? MatFMMSetTheta_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetLayout_C", on ? MatFMMSetLayout_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetMethod_C", on ? MatFMMSetMethod_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetDevice_C", on ? MatFMMSetDevice_FMM : NULL));
  PetscCall(PetscObjectComposeFunction((PetscObject)A, "MatFMMSetDistribution_C", on ? MatFMMSetDistribution_FMM : NULL));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetClusteringThreshold - Sets the clustering threshold CT: the tree
   is refined until a leaf box holds about CT sources, so it has
   L = ceil(log4(N/CT)) levels below the root.

   Logically collective on A

   Input Parameters:
+  A  - the `MATFMM`
-  ct - points per leaf box, 1 <= ct <= 2^20

   Options Database Key:
.  -mat_fmm_ct <ct> - the clustering threshold

   Notes:
   Larger CT moves work from the far field (M2L) to the near field (P2P).
   The default is the measured best of the device in use: 32 on the CPU, 96
   with CUDA (bench/bench, N = 1e5..2e7 on a curve, in a square and a blob,
   eps 1e-10 and 1e-6).
   Takes effect at the next `MatAssemblyEnd()`.  Source: Goude & Engblom 2013, Sec. 2.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - ct outside its range

   Level: intermediate

.seealso: `MATFMM`, `MatFMMSetExpansionOrder()`
@*/
PetscErrorCode MatFMMSetClusteringThreshold(Mat A, PetscInt ct)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveInt(A, ct, 2);
  PetscTryMethod(A, "MatFMMSetClusteringThreshold_C", (Mat, PetscInt), (A, ct));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetExpansionOrder - Sets the expansion order p (terms of the
   multipole and local expansions), overriding the choice from the tolerance.

   Logically collective on A

   Input Parameters:
+  A - the `MATFMM`
-  p - expansion order, 1 <= p <= 64

   Options Database Key:
.  -mat_fmm_p <p> - the expansion order

   Notes:
   The error falls like theta^p (Engblom 2011).  Takes effect at the next assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - p outside its range

   Level: intermediate

.seealso: `MATFMM`, `MatFMMSetTolerance()`, `MatFMMGetExpansionOrder()`
@*/
PetscErrorCode MatFMMSetExpansionOrder(Mat A, PetscInt p)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveInt(A, p, 2);
  PetscTryMethod(A, "MatFMMSetExpansionOrder_C", (Mat, PetscInt), (A, p));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetTolerance - Sets the requested relative accuracy eps, from which
   the expansion order is chosen, p = ceil(log(eps/0.1)/log(theta)), unless it
   was set with `MatFMMSetExpansionOrder()`.

   Logically collective on A

   Input Parameters:
+  A   - the `MATFMM`
-  eps - relative accuracy, 0 < eps < 1 (default 1e-10)

   Options Database Key:
.  -mat_fmm_eps <eps> - the tolerance

   Notes:
   Source of the rule: the theta^p error bound of Engblom (2011), with the
   constant measured on whole products (tests/accuracy.c; see FMMChooseOrder() in src/fmm/plan.c), a margin of 2 to 10.  Takes effect at the next assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - eps outside (0,1)

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetExpansionOrder()`, `MatFMMSetTheta()`
@*/
PetscErrorCode MatFMMSetTolerance(Mat A, PetscReal eps)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveReal(A, eps, 2);
  PetscTryMethod(A, "MatFMMSetTolerance_C", (Mat, PetscReal), (A, eps));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetTheta - Sets theta of the theta-criterion: boxes with radii
   r1, r2 and centre distance d are well separated (M2L) when
   R + theta r <= theta d, R = max(r1, r2), r = min(r1, r2).

   Logically collective on A

   Input Parameters:
+  A     - the `MATFMM`
-  theta - 0 < theta < 1 (default 0.5)

   Options Database Key:
.  -mat_fmm_theta <theta> - the separation parameter

   Notes:
   Source: Engblom, Appl. Numer. Math. 61 (2011).  Smaller theta means fewer
   M2L pairs per box but more P2P; the order from the tolerance grows as
   theta shrinks less.  Takes effect at the next assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - theta outside (0,1)

   Level: advanced

.seealso: `MATFMM`, `MatFMMSetTolerance()`
@*/
PetscErrorCode MatFMMSetTheta(Mat A, PetscReal theta)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveReal(A, theta, 2);
  PetscTryMethod(A, "MatFMMSetTheta_C", (Mat, PetscReal), (A, theta));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetLayout - Sets the data layout of the near field (P2P).

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
-  layout - `MATFMM_LAYOUT_TILED` (default), `MATFMM_LAYOUT_INDEXING` or `MATFMM_LAYOUT_REPETITION`

   Options Database Keys:
+  -mat_fmm_layout <tiled,indexing,repetition> - the layout
-  -mat_fmm_repetition_mb <mb> - memory budget of the repetition records (default 256 MB)

   Notes:
   All layouts compute the same sums (to rounding).  indexing and repetition
   are the two methods of a study of data replication in the near field of
   the MLFMA (compact index lists, or per-target copies); repetition stores, per target, 2 + 5 n reals
   for n neighbour sources and is built in chunks within the budget; a leaf
   whose records alone exceed it is refused at assembly.

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - unknown layout

   Level: intermediate

.seealso: `MATFMM`, `MatFMMLayout`
@*/
PetscErrorCode MatFMMSetLayout(Mat A, MatFMMLayout layout)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, layout, 2);
  PetscTryMethod(A, "MatFMMSetLayout_C", (Mat, MatFMMLayout), (A, layout));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetMethod - Chooses between the FMM and exact O(N M) summation of
   the same operator.

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
-  method - `MATFMM_METHOD_FMM` (default) or `MATFMM_METHOD_DIRECT`

   Options Database Key:
.  -mat_fmm_method <fmm,direct> - the method

   Errors:
.  `PETSC_ERR_ARG_OUTOFRANGE` - unknown method

   Level: intermediate

.seealso: `MATFMM`
@*/
PetscErrorCode MatFMMSetMethod(Mat A, MatFMMMethod method)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, method, 2);
  PetscTryMethod(A, "MatFMMSetMethod_C", (Mat, MatFMMMethod), (A, method));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetDistribution - Chooses how a `MATFMM` on several MPI ranks holds
   its sources: each rank all of them (replicated), or the tree shared out
   among the ranks (tree).

   Logically collective on A

   Input Parameters:
+  A    - the `MATFMM`
-  dist - `MATFMM_DISTRIBUTION_AUTO` (default), `MATFMM_DISTRIBUTION_REPLICATED` or `MATFMM_DISTRIBUTION_TREE`

   Options Database Key:
.  -mat_fmm_distribution <auto,replicated,tree> - the distribution

   Notes:
   tree: the top levels of the tree are cut by all ranks together, at the
   median along the longer side of each box (parallel selection on the key
   (coordinate, global index), so the cuts are those of one rank with
   -mat_fmm_tree_split median); each rank owns a contiguous run of the 4^l0 >= P
   boxes of level l0 (about N/P points; the run that holds most of its points
   in the caller's layout), receives their sources and targets
   from the ranks that hold them in the caller's layout, and builds the
   levels below them.  It then stores O(N/P) points plus a halo: the sources
   of the remote leaves its near field reaches and the multipole expansions
   of the remote boxes in its far lists (a locally essential tree; Warren &
   Salmon 1993, Lashuk et al. 2012).  Each product moves the densities to
   their owners and the potentials back (`PetscSF`), so the vectors keep the
   caller's layout and `KSPSolve()` works unchanged.  The far field is summed
   in another order than on one rank: results agree with one rank to the
   FMM's accuracy.

   replicated: every rank gathers all sources at assembly and all densities
   at each product, builds the whole tree and evaluates its own targets.

   The CPU backend evaluates its part directly; the CUDA backend (one GPU a
   rank) evaluates it as a plan of its own in the one-rank numbering, and
   exchanges multipoles through the host after its M2M.

   auto picks tree on more than one rank where it applies:
   `MATFMM_METHOD_FMM`, the tiled layout, coordinates within the window of
   `MatFMMSetSources()` (no scaling), at least 4^l0 leaves, for a square
   matrix rows and columns of the same layout; with CUDA, also only where
   at least half the points stay on the rank that holds them in the
   caller's layout once each part of the tree has gone to the rank that
   holds most of its points (`MatFMMGetTreePartition()`): points along a
   curve in order, or a mesh partition, move few, while a layout unrelated
   to space moves most, and then the replicated sources make faster
   products on the GPUs (each product moves the densities and potentials
   of the points that change rank through the host).  That choice is made
   after the top levels are cut, the same on every rank.  -mat_view says
   which is used and why.

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - unknown distribution
-  `PETSC_ERR_SUP` - (at assembly) tree where it does not apply

   Level: intermediate

.seealso: `MATFMM`, `MatFMMDistribution`, `MatFMMGetDistribution()`, `MatFMMGetTreePartition()`
@*/
PetscErrorCode MatFMMSetDistribution(Mat A, MatFMMDistribution dist)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, dist, 2);
  PetscTryMethod(A, "MatFMMSetDistribution_C", (Mat, MatFMMDistribution), (A, dist));
  PetscFunctionReturn(0);
}

/*@
   MatFMMSetDevice - Chooses where a `MATFMM` computes.

   Logically collective on A

   Input Parameters:
+  A      - the `MATFMM`
-  device - `MATFMM_DEVICE_AUTO` (default: CUDA when built with it and a GPU is present), `MATFMM_DEVICE_CPU` or `MATFMM_DEVICE_CUDA`

   Options Database Key:
.  -mat_fmm_device <auto,cpu,cuda> - the device

   Notes:
   `MatBindToCPU`(A, `PETSC_TRUE`) sets `MATFMM_DEVICE_CPU` too, and unbinding
   sets the device requested before it back.

   Errors:
+  `PETSC_ERR_ARG_OUTOFRANGE` - unknown device
-  `PETSC_ERR_SUP` (at assembly) - cuda requested in a build or on a machine without it

   Level: intermediate

.seealso: `MATFMM`, `MatFMMGetDevice()`, `MatBindToCPU()`
@*/
PetscErrorCode MatFMMSetDevice(Mat A, MatFMMDevice device)
{
  PetscFunctionBegin;
  PetscValidHeaderSpecific(A, MAT_CLASSID, 1);
  PetscValidLogicalCollectiveEnum(A, device, 2);
  PetscTryMethod(A, "MatFMMSetDevice_C", (Mat, MatFMMDevice), (A, device));
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetExpansionOrder - Gets the expansion order p in use (after assembly,
   the one chosen from the tolerance when p was not set).

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  p - the expansion order

   Level: intermediate

.seealso: `MatFMMSetExpansionOrder()`, `MatFMMSetTolerance()`
@*/
PetscErrorCode MatFMMGetExpansionOrder(Mat A, PetscInt *p)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  PetscAssertPointer(p, 2);
  if (fmm->p_user > 0) *p = fmm->p_user;
  else PetscCall(FMMChooseOrder(fmm->par.eps, fmm->par.theta, p));
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetClusteringThreshold - Gets the clustering threshold CT: the one set,
   else the default of the device (after assembly, the device in use).

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  ct - points per leaf box

   Level: intermediate

.seealso: `MatFMMSetClusteringThreshold()`
@*/
PetscErrorCode MatFMMGetClusteringThreshold(Mat A, PetscInt *ct)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  PetscAssertPointer(ct, 2);
  *ct = fmm->par.ct;
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetTreeInfo - Gets statistics of the tree of an assembled `MATFMM`.

   Not collective (values of this rank's plan)

   Input Parameter:
.  A - the assembled `MATFMM`

   Output Parameters (each may be NULL):
+  levels - L, the level of the leaves (the root is level 0)
.  leaves - number of leaf boxes, 4^L
.  m2l    - number of M2L translations in one product on this rank
-  p2p    - number of near-field target-source pairs on this rank

   Errors:
.  `PETSC_ERR_ARG_WRONGSTATE` - A not assembled

   Level: intermediate

.seealso: `MATFMM`, `MatView()`
@*/
PetscErrorCode MatFMMGetTreeInfo(Mat A, PetscInt *levels, PetscInt *leaves, PetscInt *m2l, PetscCount *p2p)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  PetscCheck(fmm->setup, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONGSTATE, "Assemble the MATFMM first (MatAssemblyBegin/End)");
  if (levels) *levels = fmm->ctx.plan.L;
  if (leaves) *leaves = fmm->ctx.plan.nleaves;
  if (m2l) *m2l = fmm->ctx.plan.nfar;
  if (p2p) *p2p = fmm->ctx.plan.p2ppairs;
  PetscFunctionReturn(0);
}

/*@C
   MatFMMGetTreeLeaves - Gets the leaf boxes of the tree of an assembled
   `MATFMM`: which sources and which of this rank's targets each leaf holds.

   Not collective (this rank's plan)

   Input Parameter:
.  A - the assembled `MATFMM`

   Output Parameters (each may be NULL):
+  nleaves - number of leaf boxes, 4^L
.  srcoff  - nleaves + 1 offsets into src: leaf b holds the sources src[srcoff[b]] .. src[srcoff[b+1] - 1]
.  src     - the N sources (all ranks') in tree order, as global source indices (columns of A)
.  tgtoff  - nleaves + 1 offsets into tgt
-  tgt     - this rank's targets in tree order, as local target indices (local rows of A)

   Notes:
   The arrays belong to A and stay valid until the next assembly that builds
   the tree again, or `MatDestroy()`.  Leaves are numbered as the tree numbers
   them: the four children of box b of a level are boxes 4b .. 4b+3 of the
   next, so leaves 4^(L-l) c .. 4^(L-l) (c+1) - 1 descend from box c of level
   l.  A leaf box is the bounding box of its points (sources and, when the
   targets are not the sources, targets of all ranks); a leaf may be empty.
   Every rank holds the whole tree of the sources.  tutorials/ex2.c (-tree_file)
   writes it for a picture.

   The arrays are in host memory where the plan was built there: on the CPU,
   or by the CUDA backend with -mat_fmm_cuda_tree cpu (the same tree as the
   GPU builds, which tests/gpu.c checks).

   Errors:
+  `PETSC_ERR_ARG_WRONG` - A is not a `MATFMM`
.  `PETSC_ERR_ARG_WRONGSTATE` - A not assembled
-  `PETSC_ERR_SUP` - the tree was built on the GPU, whose plan is not kept in host memory (assemble with
   -mat_fmm_cuda_tree cpu, or -mat_fmm_device cpu), or it is shared out among the ranks (assemble with
   -mat_fmm_distribution replicated)

   Level: intermediate

.seealso: `MATFMM`, `MatFMMGetTreeInfo()`, `MatFMMSetClusteringThreshold()`
@*/
PetscErrorCode MatFMMGetTreeLeaves(Mat A, PetscInt *nleaves, const PetscInt *srcoff[], const PetscInt *src[], const PetscInt *tgtoff[], const PetscInt *tgt[])
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  PetscCheck(fmm->setup, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONGSTATE, "Assemble the MATFMM first (MatAssemblyBegin/End)");
  PetscCheck(!fmm->dist, PETSC_COMM_SELF, PETSC_ERR_SUP, "MATFMM: the tree is shared out among the ranks (-mat_fmm_distribution tree): no rank holds its leaves; assemble with -mat_fmm_distribution replicated for them");
  PetscCheck(fmm->ctx.host, PETSC_COMM_SELF, PETSC_ERR_SUP, "MATFMM: the tree was built on the GPU and is not kept in host memory; assemble with -mat_fmm_cuda_tree cpu (the same tree) or -mat_fmm_device cpu");
  if (nleaves) *nleaves = fmm->ctx.plan.nleaves;
  if (srcoff) *srcoff = fmm->ctx.host->sleaf;
  if (src) *src = fmm->ctx.host->sperm;
  if (tgtoff) *tgtoff = fmm->ctx.host->tleaf;
  if (tgt) *tgt = fmm->ctx.host->tperm;
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetTreePartition - Gets the sources and targets that this rank's
   part of the distributed tree holds (`MatFMMSetDistribution()`): a layout
   in which a product moves no densities and no potentials between ranks.

   Collective on A

   Input Parameter:
.  A - the assembled `MATFMM`

   Output Parameters (each may be NULL):
+  sources - the global indices of the sources (columns of A, in the numbering of the caller's layout) this
             rank's part holds, in the tree's order (so neighbours in space are near in the list)
-  targets - likewise the targets (rows of A); the same as sources where the targets are the sources

   Notes:
   With `-mat_fmm_distribution tree` each product moves every density from
   the rank that holds it in the caller's layout to the rank whose part of
   the tree holds its source, and the potentials back. The parts depend on
   the places of the points, not on their numbering (ties are broken by the
   global index); each part goes to the rank that holds the most of its
   points in the caller's layout (greedily, then improved by swaps between
   pairs of ranks; up to 256 ranks, beyond that rank k holds part k), so a
   layout that follows space moves few. A caller free to choose its layout
   renumbers its unknowns with these sets (each rank then holds
   `ISGetLocalSize()` of them, in this order) and creates the matrix again
   with the renumbered points: the same tree and parts, and the moves stay
   on each rank.  The caller destroys the sets.

   With the replicated sources (one rank, or `MATFMM_DISTRIBUTION_REPLICATED`)
   every layout moves the same: the sets are this rank's ownership ranges.

   Errors:
.  `PETSC_ERR_ARG_WRONGSTATE` - A not assembled

   Level: advanced

.seealso: `MATFMM`, `MatFMMSetDistribution()`, `ISPartitioningToNumbering()`
@*/
PetscErrorCode MatFMMGetTreePartition(Mat A, IS *sources, IS *targets)
{
  Mat_FMM *fmm;
  MPI_Comm comm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  comm = PetscObjectComm((PetscObject)A);
  PetscCheck(fmm->setup, comm, PETSC_ERR_ARG_WRONGSTATE, "Assemble the MATFMM first (MatAssemblyBegin/End)");
  if (fmm->dist) PetscCall(FMMDistPartition(&fmm->ctx, fmm->ops, fmm->dist, A->cmap->rstart, A->rmap->rstart, sources, targets));
  else {
    if (sources) PetscCall(ISCreateStride(comm, A->cmap->n, A->cmap->rstart, 1, sources));
    if (targets) PetscCall(ISCreateStride(comm, A->rmap->n, A->rmap->rstart, 1, targets));
  }
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetDevice - Gets the device a `MATFMM` computes on: after assembly
   the one in use (`MATFMM_DEVICE_CPU` or `MATFMM_DEVICE_CUDA`), before it the one requested.

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  device - the device

   Level: intermediate

.seealso: `MatFMMSetDevice()`
@*/
PetscErrorCode MatFMMGetDevice(Mat A, MatFMMDevice *device)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  PetscAssertPointer(device, 2);
  *device = fmm->setup ? fmm->device_used : fmm->device;
  PetscFunctionReturn(0);
}

/*@
   MatFMMGetDistribution - Gets how a `MATFMM` holds its sources across the
   ranks: after assembly the way in use, before it the one requested
   (`MatFMMSetDistribution()`).

   Not collective

   Input Parameter:
.  A - the `MATFMM`

   Output Parameter:
.  dist - after assembly `MATFMM_DISTRIBUTION_TREE` (each rank holds its part of the tree and a halo) or
          `MATFMM_DISTRIBUTION_REPLICATED` (each rank holds all sources; also on one rank); before it the request,
          which may be `MATFMM_DISTRIBUTION_AUTO`

   Notes:
   With `MATFMM_DISTRIBUTION_AUTO` the choice depends on the method, the layout, the number of points and, with
   CUDA, on how many points stay on their rank (`MatFMMSetDistribution()`); `-mat_view` says why the sources
   are replicated where they are.  The value is the same on every rank.

   Errors:
.  `PETSC_ERR_ARG_WRONG` - A is not a `MATFMM`

   Level: intermediate

.seealso: `MATFMM`, `MatFMMSetDistribution()`, `MatFMMGetTreePartition()`
@*/
PetscErrorCode MatFMMGetDistribution(Mat A, MatFMMDistribution *dist)
{
  Mat_FMM *fmm;

  PetscFunctionBegin;
  PetscCall(FMMGet(A, &fmm));
  PetscAssertPointer(dist, 2);
  *dist = fmm->setup ? (fmm->dist ? MATFMM_DISTRIBUTION_TREE : MATFMM_DISTRIBUTION_REPLICATED) : fmm->distribution;
  PetscFunctionReturn(0);
}

/*@
   MatCreateFMM - Creates a `MATFMM` with given sizes (sources and targets are set afterwards).

   Collective

   Input Parameters:
+  comm - MPI communicator
.  m    - local number of targets (rows), or `PETSC_DECIDE`
.  n    - local number of sources (columns), or `PETSC_DECIDE`
.  M    - global number of targets, or `PETSC_DETERMINE`
-  N    - global number of sources, or `PETSC_DETERMINE`

   Output Parameter:
.  A - the matrix

   Notes:
   Equivalent to `MatCreate()`, `MatSetSizes()`, `MatSetType`(A, `MATFMM`).
   Then call `MatFMMSetSources()`, optionally `MatFMMSetTargets()`,
   `MatFMMSetKernel()` and `MatSetFromOptions()`, and assemble.

   Level: beginner

.seealso: `MATFMM`, `MatFMMSetSources()`
@*/
PetscErrorCode MatCreateFMM(MPI_Comm comm, PetscInt m, PetscInt n, PetscInt M, PetscInt N, Mat *A)
{
  PetscFunctionBegin;
  PetscCall(PetscFMMInitializePackage());
  PetscCall(MatCreate(comm, A));
  PetscCall(MatSetSizes(*A, m, n, M, N));
  PetscCall(MatSetType(*A, MATFMM));
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
  {
    const PetscInt b = FMMBackendIndex(MATFMM_DEVICE_CUDA);
    if (b >= 0) PetscCall((*FMMBackends[b]->devicecount)(n));
  }
  PetscFunctionReturn(0);
}

/* a product of the default configuration on a small problem: the GPU
   kernels it uses (ours and CUB's) are loaded on first use (CUDA lazy
   loading), about a quarter of a millisecond each */
static PetscErrorCode WarmUp(MatFMMDevice device)
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
  PetscCall(MatFMMSetDevice(A, device));
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

/*@
   PetscFMMCUDAInitialize - Pays the once-per-process costs of the GPU now:
   selects this rank's GPU (MPI rank in `PETSC_COMM_WORLD` modulo the number
   of devices, as `MATFMM` does), creates its CUDA context, pins the host
   staging buffers, and loads the GPU kernels of the default configuration by
   one small product (and one sort for the kernels that CUB picks only for
   larger problems, and those that copy points given in GPU memory), so that
   the first `MatAssemblyEnd()` and `MatMult()` of a `MATFMM` on the GPU cost
   about what later ones cost.  What a first assembly still pays is the GPU
   memory it takes: petscfmm's pool maps it fresh, and later assemblies reuse
   it; `-mat_fmm_cuda_pool_reserve` maps it here instead.

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

   With several ranks on a node, call it before making PETSc CUDA vectors
   (or assemble the matrix first and take its vectors from
   `MatCreateVecs()`, as the tutorials do).  Where a process has no CUDA
   context yet, PETSc's first CUDA vector made a second context on GPU 0
   in the second of two ranks (PETSc 3.24.6): about 0.5 GB of GPU 0's
   memory and 90 MB of that rank's host memory.  This call makes the
   context on the rank's own GPU first, and none is made on GPU 0.

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
  {
    const PetscInt b = FMMBackendIndex(MATFMM_DEVICE_CUDA);
    PetscInt       n = 0;
    if (b >= 0) PetscCall((*FMMBackends[b]->devicecount)(&n));
    if (n > 0) {
      PetscCall(PetscFMMInitializePackage());
      PetscCall((*FMMBackends[b]->initialize)());
      PetscCall(WarmUp(FMMBackends[b]->device));
      PetscCall((*FMMBackends[b]->warmup)()); /* what the product did not load */
    }
  }
  done = PETSC_TRUE; /* after an error, a later call tries again */
  PetscFunctionReturn(0);
}
