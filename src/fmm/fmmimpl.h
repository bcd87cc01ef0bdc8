/*
  Private to MATFMM: the method's parameters, the plan, the matrix's copy of
  the points, and the interface between the Mat layer (src/fmm/mat.c, api.c,
  points.c, plan.c) and its backends (src/fmm/cpu, cuda/fmm).

  The Mat layer talks to a backend only through its ops table (FMMBackendOps)
  and gives it an FMMContext: the parameters, the plan and the points, never
  the Mat.  A backend keeps two kinds of state: per Mat (its settings and what
  it keeps of the matrix's sources, from MatCreate() to MatDestroy(): create,
  setfromoptions, setsources, destroy) and per assembly (ctx->data: from plan or
  setup to reset).
*/
#pragma once

#include <petscfmm.h>
#include <petscsf.h>
#include <petsc/private/matimpl.h>

#if PETSC_VERSION_LT(3, 20, 0) /* PetscAssertPointer() replaced PetscValid...Pointer() in 3.20 */
  #define PetscAssertPointer(h, arg) PetscValidPointer(h, arg)
#endif
#if PETSC_VERSION_LT(3, 23, 0) /* PetscOptionItems is a pointer type since PETSc 3.23 */
typedef PetscOptionItems *FMMOptionItems;
#else
typedef PetscOptionItems FMMOptionItems;
#endif

PETSC_INTERN PetscLogEvent MATFMM_Exchange, MATFMM_Move, MATFMM_Copy, MATFMM_Partition, MATFMM_Setup, MATFMM_Tree, MATFMM_P2M, MATFMM_M2M, MATFMM_M2L, MATFMM_L2L, MATFMM_L2P, MATFMM_P2P, MATFMM_Direct;

/* the largest expansion order: the limit of MatFMMSetExpansionOrder(), the
   cap of the order chosen from the tolerance, and the size of the backends'
   work arrays */
#define FMM_P_MAX 64

/* below this many points (sources + targets) the CPU work of one product is
   tens of microseconds: OpenMP threads would cost more than they give, and
   under CPU contention each parallel region can wait a scheduler slice */
#define FMM_OMP_MIN_POINTS 8192

/* The method's parameters: set by the setters and the options, read by the
   plan and the backends (which take effect at the next assembly) */
typedef struct {
  MatFMMKernel kernel;
  PetscReal    alpha, beta;   /* operator = alpha D + beta S */
  PetscInt     ct;            /* clustering threshold: the one set, else the default of the device (after assembly, the device in use) */
  PetscInt     p;             /* expansion order in use (set at assembly) */
  PetscReal    eps, theta;    /* tolerance (chooses p unless set), separation parameter */
  MatFMMLayout layout;        /* near field */
  MatFMMMethod method;        /* FMM or exact sums */
  PetscBool    split_median;  /* the tree's split rule: the median along the longer side (-mat_fmm_tree_split median) */
  PetscReal    repetition_mb; /* memory budget of the repetition layout */
} FMMParams;

/*
  The plan: built once per geometry at assembly, read by every backend.

  The tree is the asymmetric adaptive pyramid of Goude & Engblom: level l has
  4^l boxes, boxes are numbered level by level (box b of level l has global
  number FMMLevelStart(l) + b), and the four children of box b are 4b..4b+3 of
  the next level.  Sources (all N of them, on every rank) and this rank's
  targets are stored in tree order, so each box owns a contiguous range of
  each; only the leaf ranges are kept (box b of level l owns the leaves
  b*4^(L-l) .. (b+1)*4^(L-l) - 1).

  Interaction lists are directed (target box <- source box).  far[] holds, for
  every box, the source boxes whose multipole expansions are translated into
  its local expansion (M2L); near[] holds, for every leaf, the source leaves it
  sums directly (P2P).  Both are CSR arrays.  Pairs whose target box holds no
  target or whose source box holds no source are dropped.

  Expansions are radius-scaled: box b with centre c_b and scale s_b (the radius
  of the circle about c_b holding its points) stores
    multipole  Phi(z) = A_0 log(z - c) + sum_{k=1..p} A_k (s/(z - c))^k
    local      Phi(z) = sum_{l=0..p} B_l ((z - c)/s)^l
  as 2(p+1) reals: the p+1 real parts, then the p+1 imaginary parts.

  FMMPlan holds the plan's sizes and statistics, which whoever builds the plan
  sets; FMMHostPlan its arrays in host memory, built by FMMPlanBuild()
  (src/fmm/plan.c).  A backend that builds the plan itself (the CUDA backend,
  on the GPU) keeps the arrays in its own memory and fills FMMPlan only.
*/
typedef struct {
  PetscInt   L;       /* leaves are level L; depth = L + 1 levels */
  PetscInt   nboxes;  /* (4^(L+1) - 1)/3 */
  PetscInt   nleaves; /* 4^L */
  PetscInt   N;       /* sources (global count, all replicated) */
  PetscInt   M;       /* targets on this rank */
  PetscInt   maxleafsrc, maxleaftgt;
  PetscInt   nfar;     /* M2L pairs: faroff[nboxes] */
  PetscInt   nearsrc;  /* sum over leaves of the neighbour sources (indexing layout length) */
  PetscCount p2ppairs; /* target-source pairs the near field sums */
  PetscInt   l0, b0, b1; /* a rank's part of the distributed tree: the subtrees of boxes b0..b1-1 of level l0 (b1 = 0: all) */
  PetscInt   wleaves, wtargets, wm2p, wp2l; /* the walks (FMMWalks): leaves, their targets, M2P, boxes taking P2L */
  PetscCount wpairs;                        /* the walks' point pairs (in p2ppairs) */
} FMMPlan;

/* the deepest leaf level of the pyramid (the plan's L is chosen from the clustering threshold up to it) */
#define FMM_MAX_LEVELS 14

/* the boxes of level l that a plan evaluates below its part's level l0 (FMMPlan): first, count */
static inline void FMMPlanLevelBoxes(const FMMPlan *P, PetscInt l, PetscInt *first, PetscInt *n)
{
  if (P->b1 > P->b0 && l >= P->l0) {
    *first = P->b0 << (2 * (l - P->l0));
    *n     = (P->b1 - P->b0) << (2 * (l - P->l0));
  } else {
    *first = 0;
    *n     = (PetscInt)1 << (2 * l);
  }
}

/* The near field of a leaf whose points lie far apart next to a dense
   cluster (its near list holds many times the typical leaf's sources), walked
   point by point instead (FMMPlanWalks(), src/fmm/walk.c): such leaves leave
   the near lists both ways, and
   - each of their targets i = wt[w] takes the multipoles of the boxes
     wm[wmoff[w]..wmoff[w+1]) (M2P) and the sources of the leaves
     wp[wpoff[w]..wpoff[w+1]) (P2P), which together are its lost near field;
   - each of their sources k goes into the local expansion of the boxes
     lb[] (P2L: box lb[j] takes the sources ls[lsoff[j]..lsoff[j+1]) after M2L,
     before L2L) or straight to the targets of the leaves xl[] (leaf xl[j]
     takes the sources xs[xsoff[j]..xsoff[j+1])).
   Source and target numbers are tree positions, boxes global numbers. */
typedef struct {
  PetscInt   nbig;                          /* leaves walked */
  PetscInt   nwt, *wt, *wmoff, *wm, *wpoff, *wp; /* targets */
  PetscInt   nlb, *lb, *lsoff, *ls;         /* P2L */
  PetscInt   nxl, *xl, *xsoff, *xs;         /* sources to targets */
  PetscCount npairs;                        /* point pairs the walks sum (P2P of wp[] and xs[]) */
} FMMWalks;

typedef struct {
  /* sources in tree order */
  PetscInt  *sperm;          /* [N] tree position -> global source index */
  PetscReal *sx, *sy;        /* [N] coordinates */
  PetscReal *cq, *cdx, *cdy; /* [N] charge and dipole per unit density (FMMSourceCoefficients) */
  PetscInt  *sleaf;          /* [nleaves+1] source range of each leaf */
  /* this rank's targets in tree order */
  PetscInt  *tperm;   /* [M] tree position -> local target index */
  PetscReal *tx, *ty; /* [M] */
  PetscBool  talias;  /* tx, ty point into sx, sy (not freed apart) */
  PetscInt  *tleaf;   /* [nleaves+1] */
  /* with the part in the backend's memory (FMMDistHostPlan(), FMMContext part): the sources [devb, devb +
     devn) and every target but the halo's are there, not here, with their numbers (the part's
     partnumbers()); sx .. cdy and sperm hold the other N - devn sources in order, tx, ty (talias) point
     into them, tperm is NULL */
  PetscInt   devb, devn;
  /* boxes */
  PetscReal *cx, *cy, *scale; /* [nboxes] centre and radius (scale of the expansions) */
  PetscInt  *faroff, *far;    /* [nboxes+1], [nfar]: M2L sources of each box */
  PetscInt  *nearoff, *near;  /* [nleaves+1], [nearoff[nleaves]]: P2P source leaves of each leaf */
  FMMWalks  *walk;            /* the walks of spread leaves next to dense ones (FMMPlanWalks(); NULL: none) */
} FMMHostPlan;

/* a growing array of PetscInt (the lists of dist.c and walk.c) */
typedef struct {
  PetscInt *v, n, cap;
} IntList;

static inline PetscErrorCode IntListPush(IntList *a, PetscInt x)
{
  PetscFunctionBegin;
  if (a->n == a->cap) {
    a->cap = PetscMax(16, 2 * a->cap);
    PetscCall(PetscRealloc(sizeof(PetscInt) * a->cap, &a->v));
  }
  a->v[a->n++] = x;
  PetscFunctionReturn(0);
}

/* the sources in the near field of leaf b of H */
static inline PetscInt FMMNearSources(const FMMHostPlan *H, PetscInt b)
{
  PetscInt ns = 0;
  for (PetscInt j = H->nearoff[b]; j < H->nearoff[b + 1]; j++) ns += H->sleaf[H->near[j] + 1] - H->sleaf[H->near[j]];
  return ns;
}

/* The compact split rule of the tree (-mat_fmm_tree_split compact, src/fmm/plan.c
   and cuda/fmm/tree/compact.cuh): a box of n points may be cut after h - w .. h + w of its
   points in x or in y order, h = n/2, w = n/FMM_SPLIT_WINDOW; the cost of a cut
   is the sum of its two children's bounding-box half-perimeters (width +
   height), and a cut off the median costs FMM_SPLIT_GAIN times more, so the
   split moves only when that pays.  Both backends evaluate FMMSplitCost with
   the same additions in the same order (no products: nothing to contract into
   an FMA), so they pick bitwise the same cuts. */
/* The expansion scale of a box is its radius, but at least FMM_SCALE_FLOOR
   times the root's: a box of coincident points (radius 0) needs some
   positive scale, any is exact for it, and a tiny one would overflow its
   dipole term.  The theta-criterion compares scales, so the floor must lie
   below every true radius: 2^-100 (8e-31) of the root is below the spacing
   of doubles anywhere but next to the origin (1e-9, before, made every box
   of a cluster of radius 1e-9 near every other). */
#define FMM_SCALE_FLOOR 0x1p-100

/* Box geometry (plan.c, dist.c).  A box's bounding box is stored as
   (xmin, ymin, -xmax, -ymax), all PETSC_MAX_REAL where it holds no point, so
   a parent's is the elementwise minimum of its children's */
static inline void FMMBoxUnion4(PetscReal p[4], const PetscReal *c0, const PetscReal *c1, const PetscReal *c2, const PetscReal *c3)
{
  for (int j = 0; j < 4; j++) p[j] = PetscMin(PetscMin(c0[j], c1[j]), PetscMin(c2[j], c3[j]));
}

/* the radius of the circle about the bounding box's centre that holds it (0: empty) */
static inline PetscReal FMMBoxRadius(const PetscReal q[4])
{
  return q[0] == PETSC_MAX_REAL ? 0.0 : 0.5 * PetscSqrtReal(PetscSqr(q[0] + q[2]) + PetscSqr(q[1] + q[3]));
}

/* centre and expansion scale of a box (centre 0 where empty), with the floor FMMScaleFloor() of the root's box */
static inline void FMMBoxCircle(const PetscReal q[4], PetscReal floor_s, PetscReal *cx, PetscReal *cy, PetscReal *scale)
{
  const PetscBool empty = q[0] == PETSC_MAX_REAL ? PETSC_TRUE : PETSC_FALSE;
  *cx                   = empty ? 0.0 : 0.5 * (q[0] - q[2]);
  *cy                   = empty ? 0.0 : 0.5 * (q[1] - q[3]);
  *scale                = PetscMax(FMMBoxRadius(q), floor_s);
}

static inline PetscReal FMMScaleFloor(const PetscReal root[4])
{
  const PetscReal f = FMMBoxRadius(root) * FMM_SCALE_FLOOR;
  return f == 0.0 ? 1.0 : f;
}
#define FMM_SPLIT_WINDOW 32
#define FMM_SPLIT_GAIN   1.5
#define FMMHalfPerimeter(x0, y0, x1, y1) (((x1) - (x0)) + ((y1) - (y0)))

/* A point of the tree build (src/fmm/plan.c, dist.c): its coordinates and
   key index i (sources: global index; targets: N + global index), which
   breaks ties of equal coordinates the same way on every rank; j is what
   the builder keeps with it */
typedef struct {
  PetscReal x, y;
  PetscInt  i, j;
} FMMPoint;

static inline PetscBool FMMKeyLess(const FMMPoint *a, const FMMPoint *b, int dir)
{
  PetscReal ca = dir ? a->y : a->x, cb = dir ? b->y : b->x;
  return (ca < cb || (ca == cb && a->i < b->i)) ? PETSC_TRUE : PETSC_FALSE;
}

/* the theta-criterion R + theta r <= theta d on the expansion scales of a
   target and a source box.  The radii are the scales (floored for boxes of
   coincident points): with the bare radii, two one-point boxes at the same
   place (a target on a source, split apart by the median) pass with d = 0,
   and their M2L divides by zero */
static inline PetscBool FMMSeparated(PetscReal rt, PetscReal rs, PetscReal d, PetscReal theta)
{
  PetscReal R = PetscMax(rt, rs), r = PetscMin(rt, rs);
  return (R + theta * r <= theta * d) ? PETSC_TRUE : PETSC_FALSE;
}

static inline PetscInt FMMLevelStart(PetscInt l)
{
  return ((((PetscInt)1) << (2 * l)) - 1) / 3;
}

/* The flop model of a product, one count per phase (the log events of both
   backends and bench/bench's rates read them): P2M 20 p per source, M2M and
   L2L 8 p^2 per box below the root, M2L 4 p^2 + 20 p per translation (the two
   real p x p matrix-vector products of FMMM2L and the powers and scalings
   around them), L2P 8 p per target, P2P and the direct sum 12 per pair */
typedef enum {
  FMM_PHASE_P2M,
  FMM_PHASE_M2M,
  FMM_PHASE_M2L,
  FMM_PHASE_L2L,
  FMM_PHASE_L2P,
  FMM_PHASE_P2P,
  FMM_PHASE_DIRECT
} FMMPhase;

static inline PetscLogDouble FMMFlops(FMMPhase ph, PetscInt p, const FMMPlan *P)
{
  const PetscLogDouble q = (PetscLogDouble)p;

  switch (ph) {
  case FMM_PHASE_P2M:
    return 20.0 * q * P->N;
  case FMM_PHASE_M2M:
  case FMM_PHASE_L2L:
    return 8.0 * q * q * (P->nboxes - 1);
  case FMM_PHASE_M2L:
    return (4.0 * q * q + 20.0 * q) * P->nfar;
  case FMM_PHASE_L2P:
    return 8.0 * q * P->M;
  case FMM_PHASE_P2P:
    return 12.0 * (PetscLogDouble)P->p2ppairs;
  case FMM_PHASE_DIRECT:
    return 12.0 * (PetscLogDouble)P->N * P->M;
  }
  return 0.0;
}

/* The matrix's copy of this rank's sources (src/fmm/points.c): one block of
   FMMSourceBlock() reals, the points (interleaved), then the normals, then the
   weights; in host memory, or in the memory of the device backend where the
   caller gave its arrays there */
typedef struct {
  PetscInt   n;              /* local sources; -1: MatFMMSetSources() not called yet */
  PetscReal *block;          /* the block; xy = block */
  PetscReal *nrm, *wts;      /* in the block, or NULL */
  PetscBool  hasnrm, haswts; /* normals, weights given */
  PetscBool  dev;            /* the block is in device memory */
  PetscInt   nrefill;        /* MatFMMSetSources() calls that refilled the block (same sizes) */
  PetscInt   distinct;       /* dev: the first local source not at source 0's place (-1: none) */
  PetscInt   bad[3];         /* first NaN/Inf entry of the points, normals, weights, -1: none (found while copying) */
  PetscReal  badv[3];        /* their values */
  PetscReal  range[4];       /* xmin, xmax, ymin, ymax of the points (found while copying; n = 0: +inf, -inf) */
} FMMSources;

/* and of this rank's targets */
typedef struct {
  PetscInt   m;    /* local targets; -1: the targets are the sources */
  PetscReal *xy;
  PetscBool  dev;
  PetscInt   bad;  /* first NaN/Inf entry, -1: none */
  PetscReal  badv;
  PetscReal  range[4]; /* as the sources' */
} FMMTargets;

/* reals in the block of n sources (MatFMMSetSources): points, then normals, then weights */
static inline size_t FMMSourceBlock(PetscInt n, PetscBool nrm, PetscBool w)
{
  return (size_t)n * (2 + (nrm ? 2 : 0) + (w ? 1 : 0));
}

/* What the Mat gives a backend.  The points are those the plan is built
   from, in global order: the N sources and, unless the targets are the
   sources, the Mg targets of all ranks; on one rank they are the matrix's own
   copies (alias), possibly in device memory (sources->dev). */
typedef struct {
  MPI_Comm          comm;
  PetscObject       obj;    /* the matrix, for PetscInfo() only */
  const FMMParams  *par;
  FMMPlan           plan;   /* sizes and statistics: set by whoever builds the plan */
  FMMHostPlan      *host;   /* the plan's arrays in host memory (FMMPlanBuild()); NULL where the backend built the plan itself */
  PetscInt          N, Mg;  /* sources; targets of all ranks (0: the targets are the sources) */
  PetscBool         same;   /* the targets are the sources */
  PetscBool         halotgt; /* the distributed plan's targets are all its sources, the halo's dropped (tperm -1) */
  PetscInt          t0;     /* global index of this rank's first target (of the sources where same) */
  const PetscReal  *src, *nrm, *wts, *tgt; /* [2N], [2N] or NULL, [N] or NULL, [2 Mg] (NULL after setup, or same) */
  PetscBool         alias;  /* one rank: src, nrm, wts are the matrix's block, tgt its targets */
  const FMMSources *sources;
  /* the distributed tree (FMMDistHostPlan()): after M2M the backend gives the rows xexp[0..nxexp) of its
     multipoles to exchange(xctx, rows, rows') and puts rows' at ximp[0..nximp) (NULL: no exchange) */
  PetscInt          nxexp, nximp;
  const PetscInt   *xexp, *ximp;
  PetscErrorCode  (*exchange)(void *, const PetscReal *, PetscReal *);
  void             *xctx;
  /* and its boxes in the rank's numbering (FMMDist's slots: levels 0..l0, its own below level by level,
     then the halo's nslot - nown, of global numbers box[], ascending): geometry [nslot] and far lists
     (faroff [nown + 1], far [faroff[nown]], in slots; far and the geometry NULL where the backend keeps
     them from lists()), which a backend's copy of the plan takes as they are (nslot 0: none; read during
     setup only) */
  PetscInt          nslot, nsown;
  const PetscReal  *slcx, *slcy, *slscale;
  const PetscInt   *slfaroff, *slfar, *slbox;
  /* and its densities and potentials in two pieces each: mult(ctx, x, y) reads x[0..nin) then xin[0..nin2)
     (sperm numbers them so) and writes y[0..nout) then yout[0..nout2) (tperm likewise); x and y are the
     caller's arrays, so what stays on the rank moves on the device (split false: N and M, one piece each) */
  PetscBool          split;
  PetscInt           nin, nin2, nout, nout2;
  const PetscScalar *xin;
  PetscScalar       *yout;
  void             *bmat;   /* the backend's per-Mat state */
  void             *data;   /* the backend's state of this assembly */
  void             *part;   /* the distributed tree's points in the backend's memory, from topcuts() to setup() (NULL: in host memory) */
} FMMContext;

/* the events of the matrix's source block that a backend may follow
   (setsources): FREE before the block is freed (new sizes, MatDestroy());
   FILL before it is refilled in host memory, COPIED once array k of it (0
   points, 1 normals, 2 weights; those given) is copied in, FILLED after */
typedef enum {
  FMM_SOURCES_FREE,
  FMM_SOURCES_FILL,
  FMM_SOURCES_COPIED,
  FMM_SOURCES_FILLED
} FMMSourcesEvent;

/* A device's memory, where the caller may give its points (MatFMMSetSources(),
   MatFMMSetTargets()) */
typedef struct {
  PetscErrorCode (*isdevice)(const void *, PetscBool *);                 /* the array is in this memory */
  PetscErrorCode (*alloc)(size_t, PetscReal **);                         /* n reals */
  PetscErrorCode (*free)(PetscReal *);
  PetscErrorCode (*tohost)(PetscReal *, const PetscReal *, size_t);      /* h = d, n reals */
  /* dst[k] = src[k] (n[k] reals, k < na) with the first NaN/Inf of each (bad, badv; -1: none),
     the first point of array 0 not at the place of its point 0 (*distinct, if not NULL; -1: none)
     and the range of array 0's points (range: xmin, xmax, ymin, ymax; n[0] = 0: +inf, -inf) */
  PetscErrorCode (*copychecked)(PetscInt, PetscReal *const[], const PetscReal *const[], const PetscInt[], PetscInt[], PetscReal[], PetscInt *, PetscReal[4]);
} FMMDeviceMemory;

#define FMM_NGEO 5 /* reals of a box in the distributed tree's fetch table: centre x, y, scale, sources, first source (tree order) */

/* The distributed tree's interaction lists of the levels below l0 (src/fmm/dist.c), where the backend
   makes them (FMMBackendOps lists): what the host's list pass reads, and where its results go.  Level l
   of the rank's boxes holds nb0 4^(l - l0) of them, global numbers from B0 4^(l - l0) on, slots from
   FMMDistSlot(D, l, B0 4^(l - l0)) on */
typedef struct {
  PetscInt         L, l0, B0, nb0, ntop, nown; /* levels, the rank's boxes of level l0, the slots of the top and the own */
  PetscReal        theta;
  const PetscReal *cx, *cy, *scale;            /* [nown]: the slots' circles (host) */
  const PetscInt  *sleaf, *tleaf;              /* [nb0 4^(L - l0) + 1]: the sources and targets before each own leaf */
  const PetscInt  *stroff, *str;               /* the strong lists of the rank's boxes of level l0: offsets (nb0 + 1),
                                                  global numbers of level l0 */
  /* the remote boxes of level l whose parents are the n boxes par of level l - 1 (global numbers, repeats
     allowed): *rid (ascending, unique), *nrid, *rgeo (FMM_NGEO reals each), PetscMalloc'ed; collective */
  PetscErrorCode (*fetch)(void *, PetscInt l, PetscInt n, const PetscInt *par, PetscInt **rid, PetscInt *nrid, PetscReal **rgeo);
  void            *fctx;
  /* results, level by level for l0 < l <= L, as the host's pass makes them: */
  PetscInt        **rid, *nrid, *roff; /* [L + 1], [L + 1], [L + 2]: the fetched boxes; roff[l + 1] = roff[l] + nrid[l] */
  PetscReal       **rgeo;              /* [L + 1] */
  char            **used;              /* [L + 1]: used[l][j] where a far list names rid[l][j] (PetscCalloc'ed) */
  PetscInt         *farcnt;            /* [nown]: the far entries of each own slot below level l0 */
  const PetscInt   *topfar;            /* [ntopfar]: the far entries of the top's slots (host) */
  PetscInt          ntopfar, nfarl;    /* nfarl: the far entries of the levels below l0 */
  PetscInt         *stroffL, *strL, nstrL; /* the strong lists of the own leaves (nb0 4^(L - l0) + 1 offsets,
                                              entries: global leaf numbers; PetscMalloc'ed) */
  /* the far lists themselves, the top's then the levels', in slot order with the halo's boxes numbered from
     nown on (the fetched boxes that used marks, level by level, ascending in each), stay with the backend,
     whose setup takes them (the host gets none: FMMDist far stays NULL), and so do the circles of the
     slots, the own ones (cx ..) then the halo's (FMMDist cx .. keep the own ones only: ngeo = nown) */
} FMMDistLists;

/* A backend evaluates the plan.  mult() gets the N densities in global source
   order and writes the M potentials in local target order, without the
   diagonal/shift/scale terms, which the Mat layer adds (or combine() does). */
typedef struct _FMMBackendOps *FMMBackend;
struct _FMMBackendOps {
  const char            *name;
  MatFMMDevice           device;
  PetscInt               ct;          /* clustering threshold where none is set */
  PetscErrorCode       (*devicecount)(PetscInt *); /* devices this process can use (NULL: the host, always there) */
  const FMMDeviceMemory *mem;                      /* NULL: host memory only */
  /* once per process, where devicecount finds one (PetscFMMCUDAInitialize()): initialize makes the device's
     context, warmup loads what a warm-up product did not use */
  PetscErrorCode (*initialize)(void);
  PetscErrorCode (*warmup)(void);
  /* per Mat */
  PetscErrorCode (*create)(void **);                                       /* its settings, at their defaults */
  PetscErrorCode (*destroy)(void **);
  PetscErrorCode (*setfromoptions)(void *, FMMOptionItems, PetscBool *);  /* its options (*changed: the plan must be built again) */
  PetscErrorCode (*setsources)(void *, FMMSourcesEvent, const FMMSources *, PetscInt);
  PetscErrorCode (*buildsplan)(void *, PetscBool *);                        /* plan() builds the plan (it reads points in device memory in place) */
  /* per assembly */
  PetscErrorCode (*plan)(FMMContext *);  /* builds the plan itself, where buildsplan says so (else FMMPlanBuild() on the host) */
  PetscErrorCode (*setup)(FMMContext *); /* after the plan is built */
  PetscErrorCode (*mult)(FMMContext *, const PetscScalar *, PetscScalar *);   /* FMM product (output NULL: kept for combine) */
  PetscErrorCode (*direct)(FMMContext *, const PetscScalar *, PetscScalar *); /* exact O(NM) product (likewise) */
  /* y = [y +] scale (the product kept) + (shift + d) .* x, with x this rank's densities, d (or NULL) and y
     in device memory (NULL: not supported) */
  PetscErrorCode (*combine)(FMMContext *, PetscScalar, PetscScalar, const PetscScalar *, const PetscScalar *, PetscScalar *, PetscBool);
  PetscErrorCode (*reset)(FMMContext *);                 /* frees ctx->data and ctx->part */
  PetscErrorCode (*view)(FMMContext *, PetscViewer);     /* backend lines of -mat_view (ASCII, after assembly; NULL: none) */
  /* the distributed tree's subtrees (src/fmm/dist.c), where the backend builds them (NULL, or *done false: the
     host does): n points xy (2n reals, host memory; NULL: the part's, partslots(), place q holding point
     pj[q] (< nr: source slot, else nr + target slot; pj NULL: q)) in nroot boxes, box b's from off[b] to
     off[b + 1] in the order of their global indices, each box split levels deep by FMMTreeSplit()'s rule;
     order (n): the points leaf by leaf (NULL: kept with the part, for partorder()), loff (nroot 4^levels +
     1): the leaves' offsets in order, bb: the boxes' bounding boxes (FMMBoxUnion4()'s form), level by level,
     the nroot 4^k of level k in tree order */
  PetscErrorCode (*subtrees)(FMMContext *, PetscInt, const PetscReal *, const PetscInt *, PetscInt, const PetscInt *, PetscInt, PetscInt *, PetscInt *, PetscReal *, PetscBool *);
  /* the distributed tree's top cuts (src/fmm/dist.c), where the backend makes them (NULL, or *done false on
     every rank: the host does): this rank's ns sources xy (2 ns reals, host memory; global indices s0 + k)
     and mt targets txy (NULL: none; N + t0 + k), U points on all ranks, cut l0 levels deep as TopLevels()
     does; cnt (2 4^l0): this rank's sources in each box of level l0, then its targets.  Where it is done
     the backend keeps the points and their boxes in its memory (ctx->part) for the ops below, which then
     must all exist.  Collective on comm */
  PetscErrorCode (*topcuts)(FMMContext *, MPI_Comm, PetscInt, const PetscReal *, PetscInt, const PetscReal *, PetscInt, PetscInt, PetscInt, PetscInt, PetscInt *, PetscBool *);
  /* the slots of the part's sources (tgt false) or targets (OwnerMoves()), cnt[B] of them in box B (as
     topcuts() gave them): box B's points (first[B] >= 0) go to nslot slots of this rank from slot first[B]
     on, in the caller's order; the other boxes' points are given in il (nrem: the caller's indices, box by
     box, each box's in the caller's order); the slots no point of this rank fills are the received ones */
  PetscErrorCode (*partowners)(FMMContext *, PetscBool tgt, PetscInt n0, const PetscInt *cnt, const PetscInt *first, PetscInt nslot, PetscInt nrem, PetscInt *il);
  /* the part's points to this rank's slots (partowners()): the sources' (tgt false; where hasnrm, haswts
     also the caller's nc normals nrm and weights wts, host memory, NULL: zero normals, unit weights; they
     must stay until partgather() or the setup, which may read them late) or the targets' (tgt true: their
     points only); slot croot[c] takes the received point c (rxy, rnrm, rw: ncr of each, host) */
  PetscErrorCode (*partslots)(FMMContext *, PetscBool tgt, PetscInt nc, PetscBool hasnrm, const PetscReal *nrm, PetscBool haswts, const PetscReal *wts, PetscInt nslot, PetscInt ncr, const PetscInt *croot, const PetscReal *rxy, const PetscReal *rnrm, const PetscReal *rw);
  /* the part's sources in tree order (the subtrees' order kept, whose nl leaves start at loff[b]) with
     their coefficients by FMMSourceCoefficients() from the slots' normals and weights (made by the time
     partgather() or the setup reads them), and its targets;
     scnt, tcnt (nl + 1): the sources and the targets before each leaf */
  PetscErrorCode (*partorder)(FMMContext *, PetscInt nl, const PetscInt *loff, PetscInt *scnt, PetscInt *tcnt);
  /* the product's numbers of the part's sources (tgt false) or targets in tree order (SplitMoves(): the
     caller's index where the point stays on the rank, else nc + its place among the ncr received slots
     croot, ascending, host), kept for the plan; out[j] = the number of tree place q[j], j < nq */
  PetscErrorCode (*partnumbers)(FMMContext *, PetscBool tgt, PetscInt nc, PetscInt ncr, const PetscInt *croot, PetscInt nq, const PetscInt *q, PetscInt *out);
  /* out[5c .. 5c + 4] = sx, sy, cq, cdx, cdy of the part's source idx[c] (tree order), c < nc */
  PetscErrorCode (*partgather)(FMMContext *, PetscInt nc, const PetscInt *idx, PetscReal *out);
  /* after a setup from the part: the product's numbers of this rank's n own sources (tgt false) or targets
     in tree order, from the plan (partnumbers()) */
  PetscErrorCode (*plannumbers)(FMMContext *, PetscBool tgt, PetscInt n, PetscInt *out);
  /* the distributed tree's lists of the levels below l0 (FMMDistLists), after topcuts() kept the part;
     collective */
  PetscErrorCode (*lists)(FMMContext *, FMMDistLists *);
};

PETSC_INTERN struct _FMMBackendOps FMMBackendCPU;
#if defined(PETSCFMM_HAVE_CUDA)
PETSC_INTERN struct _FMMBackendOps FMMBackendCUDA;
  #define FMM_NBACKENDS 2
#else
  #define FMM_NBACKENDS 1
#endif
PETSC_INTERN const FMMBackend FMMBackends[FMM_NBACKENDS]; /* this build's, the CPU first (src/fmm/mat.c) */

/* the index in FMMBackends of the backend of device d, -1: none in this build */
static inline PetscInt FMMBackendIndex(MatFMMDevice d)
{
  for (PetscInt b = 0; b < FMM_NBACKENDS; b++)
    if (FMMBackends[b]->device == d) return b;
  return -1;
}

/*
  The distributed tree of one rank (src/fmm/dist.c, evaluated by
  src/fmm/cpu/dist.c): the global pyramid of depth L, whose boxes of level
  l0 are shared out among the ranks (this rank's: B0..B1-1).  Box slots:
  [0, ntop) the boxes of levels 0..l0 by global number (on every rank),
  [ntop, nown) this rank's boxes below level l0, level by level, [nown,
  nslot) the remote boxes whose multipoles it receives.  Leaves: [0, nl)
  this rank's, [nl, nl + nhl) the remote leaves of its near lists, whose
  sources follow its own in the source arrays.
*/
/* the parts of the distributed tree: part k is the boxes [FirstBox(k), FirstBox(k + 1)) of level
   l0 (n0 = 4^l0 of them) and rank rankof[k] holds it (partof: the inverse), chosen at assembly so that most
   points stay on the rank that holds them in the caller's layout (src/fmm/dist.c, AssignParts()) */
typedef struct {
  PetscMPIInt  size;
  PetscInt     n0;
  PetscMPIInt *rankof, *partof; /* [size] */
} FMMParts;

typedef struct {
  PetscInt   L, l0, B0, B1;
  FMMParts   parts;
  PetscBool  same;                 /* the targets are the sources */
  PetscBool  dipoles;              /* some rank's sources have normals and alpha != 0 (the coefficients have dipoles) */
  PetscInt   ntop, nown, nslot, nhb; /* nhb = nslot - nown */
  PetscReal *cx, *cy, *scale;      /* [ngeo]: the slots' circles, all (ngeo = nslot) or the own ones where the
                                      backend keeps the halo's (FMMDistLists: ngeo = nown) */
  PetscInt   ngeo;
  PetscInt  *nsb, *ntb;            /* [nown] sources and targets in each box (the top's: of all ranks) */
  PetscInt  *faroff, *far;         /* [nown+1]: M2L source slots of each slot (far NULL where the backend made and
                                      keeps them: FMMDistLists) */
  PetscInt   n, m, nh, nl, nhl;    /* sources, targets, halo sources, leaves, halo leaves */
  PetscReal *sx, *sy, *cq, *cdx, *cdy; /* [n + nh], tree order, then the halo (devpart: the halo's only) */
  PetscBool  devpart;              /* this rank's own points are in the backend's memory (FMMContext part), not in sx .. cdy, tx, ty */
  PetscInt  *sleaf, *nearoff, *near;   /* [nl + nhl + 1], [nl + 1], near leaves */
  PetscReal *tx, *ty;              /* [m] targets in tree order */
  PetscInt  *tleaf;                /* [nl + 1] */
  PetscInt  *sperm, *tperm;        /* tree position -> the point's slot as received (devpart: NULL, the backend's) */
  PetscInt  *lsrc, *ltgt;          /* [n], [m] slot -> the caller's index on this rank that fills it (-1: another rank's; devpart: NULL) */
  PetscSF    sfsrc, sftgt;         /* the caller's sources on other ranks (leaves) -> this rank's slots fed by them (roots); targets likewise (NULL: same) */
  PetscInt  *csrc, *ctgt;          /* [nrr], [nrt] the slots of sfsrc's and sftgt's roots */
  PetscSF    sfhalo, sfmp;         /* owners' sources in tree order -> the halo's; owners' multipoles (slots ntop..nown) -> halo slots */
  /* each product's moves (FMMDistIOSetup()): a density is the caller's x[c] (c < nxc) or din[c - nxc], din holding
     the nrr densities from other ranks (sfin) and then the halo's nh (sfhx: from the owners' x, sfhd: from their din);
     a potential goes to the caller's y[c] (c < myc) or dout[c - myc], which sfout sends to the other ranks' y */
  PetscInt     nxc, myc, nrr, nrt;
  PetscInt    *cin, *cout;         /* [n], [m] tree order (devpart: NULL, the backend's partnumbers()) */
  PetscSF      sfin, sfout, sfhx, sfhd; /* sfin, sfout: sfsrc, sftgt themselves; sfout NULL: sfin (the targets are the sources) */
  PetscScalar *din, *dout;         /* [nrr + nh], [nrt] */
  const FMMDeviceMemory *iomem;    /* din and dout in this device memory (FMMDistDeviceIO(); NULL: host memory) */
  PetscInt64 nfar, nfartop, p2ppairs; /* M2L of this rank's boxes (+ the top's, on rank 0), of the top; P2P pairs */
  PetscInt  *halbox, *halleaf;     /* [nhb], [nhl] global numbers of the halo's boxes and leaves */
  /* the multipole exchange of a backend that evaluates FMMDistHostPlan() (FMMDistExchangeSetup()) */
  PetscInt   xne, nxexp, nximp, *xexp, *ximp; /* rows sent (this rank's level l0 boxes, then those others need), rows received (the top, the halo) */
  PetscReal *xtop, *xbinom;        /* the top's multipoles, the binomials of its M2M */
  MPI_Datatype unit;               /* an expansion's reals (hasunit: made; FMMDistUnit()) */
  PetscBool    hasunit;
  PetscSF    sfmpc;                /* the sent rows (roots) -> the halo's */
  PetscInt   maxleafsrc, maxleaftgt;   /* over this rank's leaves */
  /* the CPU evaluation (src/fmm/cpu/dist.c) */
  PetscInt   p, ne;
  PetscBool  hasq, hasd, par;
  PetscReal *binom, *m2l, *inv, *mpole, *local; /* tables; [nslot * ne] */
  PetscReal *q, *dx, *dy;          /* [n + nh] strengths */
  PetscScalar *pot;                /* [m] potentials in tree order */
} FMMDist;

typedef struct {
  FMMSources   src;
  FMMTargets   tgt;
  FMMParams    par;
  PetscInt     p_user;                /* the order set (0: from the tolerance) */
  PetscBool    ct_set;                /* CT given by the user; else the device's default */
  MatFMMDevice device, device_used;   /* requested; in use (after assembly) */
  MatFMMDevice device_unbound;        /* the request before MatBindToCPU() */
  PetscBool    setvectype;            /* MatCreateVecs() gives VECCUDA because the matrix is on the GPU (SetVecType) */
  /* diagonal terms: y = scale*K x + diag .* x + shift*x */
  PetscScalar  scale, shift;
  Vec          diag; /* NULL when none (row layout) */
  Vec          kx;   /* the distributed tree's K x of a product with diagonal terms on device vectors (row layout; made at first use) */
  /* setup */
  PetscBool    setup;
  PetscSF      sf;                  /* allgather of the source data and densities */
  PetscScalar *sigma;               /* [N] gathered densities (global order) */
  PetscScalar *pot;                 /* [M] potentials, local target order */
  FMMContext   ctx;                 /* what the backend in use gets */
  FMMBackend   ops;                 /* the backend in use (after assembly) */
  void        *bmat[FMM_NBACKENDS]; /* each backend's per-Mat state */
  /* scale-free coordinates (FMMPointsScale): where the sources' extent is
     outside [2^-FMM_XEXP_MAX, 2^FMM_XEXP_MAX], the plan and the backends get
     the points times 2^-xexp (exact: a power of two) and the operator's
     coefficients in those units (parx); the product adds what the scaling
     takes out of the logarithm, log 2^xexp times the charges of the pairs
     the kernel counts: all but the sources at each target's place (coff,
     cidx: CSR, this rank's targets) */
  PetscInt  xexp;
  FMMParams parx;
  PetscInt *coff, *cidx;
  /* across ranks: the distributed tree (NULL: every rank holds all sources) */
  MatFMMDistribution distribution;
  FMMDist           *dist;
  PetscBool          distplan;   /* CPU: the distributed tree evaluated as the CUDA backend does (-mat_fmm_distribution_global_plan) */
  const char        *whynotdist; /* where the sources are replicated on several ranks: why */
  char               whybuf[192]; /* (whynotdist, where it has numbers) */
  /* the OpenMP team of the host's work in a setup on a GPU (FMMSetupTeamBegin()) */
  PetscMPIInt noderanks;     /* the matrix's ranks on this node */
  PetscInt    setup_threads; /* -mat_fmm_setup_threads (0: the rule) */
  int         team, omp, cpus; /* the last setup's team, OpenMP's, this rank's share of the CPUs */
} Mat_FMM;

/* the slot of box b of level l on this rank of the distributed tree (its own, or the top's) */
static inline PetscInt FMMDistSlot(const FMMDist *D, PetscInt l, PetscInt b)
{
  const PetscInt nb0 = D->B1 - D->B0;
  if (l <= D->l0) return FMMLevelStart(l) + b;
  return D->ntop + nb0 * ((((PetscInt)1 << (2 * (l - D->l0))) - 1) / 3) - nb0 + (b - (D->B0 << (2 * (l - D->l0))));
}

/* the window of extents (powers of two) in which the points are used as given */
#define FMM_XEXP_MAX 400
#define FMM_LN2      0.693147180559945309417232121458

/* mat.c, api.c */
PETSC_INTERN PetscErrorCode MatFMMInvalidate(Mat);
PETSC_INTERN PetscErrorCode FMMSetupTeamBegin(Mat, int *);
PETSC_INTERN void           FMMSetupTeamEnd(int);
PETSC_INTERN PetscErrorCode MatFMMComposeSetters(Mat, PetscBool);
/* plan.c */
PETSC_INTERN PetscErrorCode FMMPlanBuild(FMMContext *);
PETSC_INTERN void           FMMPlanStatistics(FMMPlan *, const FMMHostPlan *);
PETSC_INTERN void           FMMSelect(FMMPoint *, PetscInt, PetscInt, int);
PETSC_INTERN PetscErrorCode FMMTreeSplit(FMMPoint *, PetscInt, const PetscInt[], PetscInt, PetscBool, PetscInt **);
PETSC_INTERN PetscErrorCode FMMHostPlanDestroy(FMMHostPlan **);
PETSC_INTERN PetscErrorCode FMMHostPlanPoints(FMMHostPlan *, PetscInt, PetscInt, PetscInt, PetscBool);
PETSC_INTERN PetscBool      FMMWalksApply(FMMContext *);
PETSC_INTERN PetscInt       FMMWalksCount(PetscInt, const PetscInt *, const PetscInt *, PetscInt *);
PETSC_INTERN PetscErrorCode FMMWalksBuild(FMMPlan *, FMMHostPlan *, PetscReal, PetscObject);
PETSC_INTERN PetscErrorCode FMMPlanWalks(FMMContext *);
PETSC_INTERN PetscErrorCode FMMWalksDestroy(FMMWalks **);
PETSC_INTERN PetscErrorCode FMMChooseOrder(PetscReal, PetscReal, PetscInt *);
PETSC_INTERN PetscErrorCode FMMRepetitionBudget(const FMMContext *, PetscReal);
/* dist.c, cpu/dist.c */
PETSC_INTERN PetscErrorCode FMMDistLevels(PetscInt, PetscInt, PetscMPIInt, PetscInt *, PetscInt *);
PETSC_INTERN PetscInt       FMMDistHaloNumbers(PetscInt, const PetscInt *, const PetscInt *, char *const *, PetscInt, PetscInt *);
PETSC_INTERN PetscErrorCode FMMDistBuild(Mat, FMMDist **);
PETSC_INTERN PetscErrorCode FMMDistDestroy(FMMDist **);
PETSC_INTERN PetscErrorCode FMMDistUnit(FMMDist *, PetscInt);
PETSC_INTERN PetscErrorCode FMMDistPartition(FMMContext *, FMMBackend, FMMDist *, PetscInt, PetscInt, IS *, IS *);
PETSC_INTERN PetscErrorCode FMMDistHostPlan(FMMDist *, PetscBool, PetscBool, FMMPlan *, FMMHostPlan **);
PETSC_INTERN PetscErrorCode FMMDistExchangeSetup(FMMDist *, PetscInt);
PETSC_INTERN PetscErrorCode FMMDistDeviceIO(FMMDist *, const FMMDeviceMemory *);
PETSC_INTERN PetscErrorCode FMMDistExchange(void *, const PetscReal *, PetscReal *);
PETSC_INTERN PetscErrorCode FMMDistSetupCPU(FMMDist *, const FMMParams *);
PETSC_INTERN PetscErrorCode FMMDistResetCPU(FMMDist *);
PETSC_INTERN PetscErrorCode FMMDistMultCPU(FMMDist *, const PetscScalar *, PetscScalar *);
PETSC_INTERN PetscErrorCode FMMDistDensities(FMMDist *, const PetscScalar *, const FMMDeviceMemory *);
PETSC_INTERN PetscErrorCode FMMDistPotentials(FMMDist *, PetscScalar *, const FMMDeviceMemory *);
/* a setup stage's end for -info: the time and the process's resident memory (bytes) */
static inline PetscErrorCode FMMStageMark(PetscLogDouble *t, PetscLogDouble *rss)
{
  PetscFunctionBegin;
  PetscCall(PetscTime(t));
  PetscCall(PetscMemoryGetCurrentUsage(rss));
  PetscFunctionReturn(0);
}
/* points.c */
PETSC_INTERN void           FMMCopyBytes(void *, const void *, size_t);
PETSC_INTERN void           FMMAdviseHugePages(void *, size_t);
PETSC_INTERN void           FMMCopyReals(PetscReal *, const PetscReal *, PetscInt);
PETSC_INTERN PetscErrorCode FMMWaitForPETSc(PetscBool);
PETSC_INTERN PetscErrorCode FMMArraysOnDevice(PetscInt, const PetscReal *const[], const char *const[], PetscBool *);
PETSC_INTERN PetscErrorCode FMMSourcesSet(Mat_FMM *, PetscInt, const PetscReal[], const PetscReal[], const PetscReal[], PetscBool);
PETSC_INTERN PetscErrorCode FMMSourcesFree(Mat_FMM *);
PETSC_INTERN PetscErrorCode FMMTargetsSet(Mat_FMM *, PetscInt, const PetscReal[], PetscBool);
PETSC_INTERN PetscErrorCode FMMTargetsFree(Mat_FMM *);
PETSC_INTERN PetscErrorCode FMMPointsToHost(Mat_FMM *);
PETSC_INTERN PetscErrorCode FMMPointsGather(Mat);
PETSC_INTERN PetscErrorCode FMMPointsReleaseTargets(Mat_FMM *);
PETSC_INTERN PetscErrorCode FMMPointsRelease(Mat_FMM *);
PETSC_INTERN PetscErrorCode FMMPointsExtent(Mat);
PETSC_INTERN PetscErrorCode FMMPointsScale(Mat);
PETSC_INTERN PetscErrorCode FMMPointsHost(Mat_FMM *, const PetscReal **, const PetscReal **, const PetscReal **, const PetscReal **, PetscReal **);
