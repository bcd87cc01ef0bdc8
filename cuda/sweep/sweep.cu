/*
  The CUDA backend of MATSWEEP: the whole sweep on the GPU, for all octants,
  angles and groups, the moments accumulated on the device.

  Organisation (the "line march"): a thread owns one line of cells along x
  for one (octant, group, angle) and marches along it, the x-face flux in a
  register; the y- and z-face fluxes it needs were left in global memory by
  the lines upstream of it.  Lines are launched by diagonals of the y-z
  plane (j' + k' = s in the octant's direction of flight): one launch per
  diagonal, all octants that may run together (all 8 with vacuum faces) and
  all groups in it.  A block holds K lines x nang angles; every C cells its
  threads leave their psi in shared memory and the block sums each cell's
  moments over the angles in a fixed order (one thread per cell and moment),
  into that octant's partial moments; a last kernel adds the octants in the
  order of SweepOctantOrder().  So every sum has a fixed order and repeated
  products are bitwise identical.

  Per cell and angle the sweep reads and writes the y and z faces (32 bytes);
  the source moments and sigma_t are read once per cell and group (the
  angles of a block share them).  The cell equations are those of the CPU
  backend (src/sweep/cpu/backend.c).
*/
#include <cuda_runtime.h>
#include "sweep/sweepimpl.h"

#define SWEEP_C 8 /* cells between the moment reductions of a block */

#define SweepCallCUDA(...) \
  do { \
    cudaError_t _e = (__VA_ARGS__); \
    if (PetscUnlikely(_e != cudaSuccess)) { \
      (void)cudaGetLastError(); \
      SETERRQ(PETSC_COMM_SELF, _e == cudaErrorMemoryAllocation ? PETSC_ERR_MEM : PETSC_ERR_GPU, "MATSWEEP CUDA: %s (%s)", cudaGetErrorString(_e), cudaGetErrorName(_e)); \
    } \
  } while (0)

/* face-array strides of one layout: octant, group, face cell, angle */
typedef struct {
  long long o, g, z, a;
} Strides;

/* what the kernels read, by value */
typedef struct {
  int nx, ny, nz, ng, nang, cm, ndir, twod, dd, fixup;
  const double *cx, *cy, *cz, *wY, *Ys, *sigt, *qmom, *qang;
  double       *fy, *fz, *phio;
  Strides       sy, sz;
  long long     nphi;            /* cells * ng * cm: one octant's partial moments */
  int           bc[6];           /* boundary conditions */
  int           carry[3];        /* the axis carries its low face's entering flux */
  long long     carryoff[3];
  int           F[3];            /* face cells */
  double       *refl[6];         /* reflective faces' outgoing flux [oct4][facecell][g][a] */
  const double *xb;              /* carried fluxes in (NULL: zero) */
  double       *yb;              /* carried fluxes out */
} SweepArgs;

/* octant oct's number among the four sharing its sign along axis */
__device__ __forceinline__ int Oct4(int oct, int axis)
{
  return axis == 0 ? oct >> 1 : (axis == 1 ? (oct & 1) | ((oct >> 1) & 2) : oct & 3);
}

/* the flux entering octant oct through its entry face of axis ax at face cell fc */
__device__ __forceinline__ double FaceIn(const SweepArgs &k, int oct, int ax, int fc, int g, int a)
{
  const int down = (oct >> ax) & 1, f = 2 * ax + down; /* entry face: low when moving up */
  if (k.bc[f] != MATSWEEP_BOUNDARY_REFLECTIVE) return 0.0;
  const long long off = (((long long)Oct4(oct, ax) * k.F[ax] + fc) * k.ng + g) * k.nang + a;
  if (k.carry[ax] && !down) return k.xb ? k.xb[k.carryoff[ax] + off] : 0.0;
  return k.refl[f][off];
}

/* the flux leaving octant oct through its exit face of axis ax */
__device__ __forceinline__ void FaceOut(const SweepArgs &k, int oct, int ax, int fc, int g, int a, double v)
{
  const int down = (oct >> ax) & 1, f = 2 * ax + 1 - down;
  if (k.bc[f] != MATSWEEP_BOUNDARY_REFLECTIVE) return;
  const long long off = (((long long)Oct4(oct, ax) * k.F[ax] + fc) * k.ng + g) * k.nang + a;
  if (k.carry[ax] && down) k.yb[k.carryoff[ax] + off] = v;
  else k.refl[f][off] = v;
}

/* SNAP's negative-flux fixup of one angle (as Fixup() of the CPU backend) */
__device__ double Fixup(double s, double st, const double pin[3], const double cf[3], int nax, double pc, double pout[3])
{
  double hv[3] = {1, 1, 1}, fx[3] = {0, 0, 0}, sum = 3;
  for (;;) {
    double nsum = 0, num, den;
    for (int k = 0; k < nax; k++) {
      fx[k] = 2 * pc - pin[k];
      if (fx[k] < 0) hv[k] = 0;
    }
    for (int k = 0; k < 3; k++) nsum += hv[k];
    if (nsum == sum) break;
    sum = nsum;
    num = s;
    den = st;
    for (int k = 0; k < nax; k++) {
      num += 0.5 * pin[k] * cf[k] * (1 + hv[k]);
      den += cf[k] * hv[k];
    }
    pc = den > 1e-12 ? num / den : 0.0;
  }
  for (int k = 0; k < nax; k++) pout[k] = fx[k] * hv[k];
  return pc;
}

/* the octants of one launch */
typedef struct {
  int n, oct[8];
} OctBatch;

/* one diagonal of lines: lines[0..nl) are this diagonal's (j', k') packed as j' + ny k' */
__global__ void __launch_bounds__(1024) LineKernel(SweepArgs k, OctBatch ob, const int *__restrict__ lines, int nl, int K)
{
  extern __shared__ double sh[]; /* [K][SWEEP_C][nang] psi */
  const int  na = k.nang, a = threadIdx.x % na, il = threadIdx.x / na;
  const long long item = (long long)blockIdx.x * K + il, nitems = (long long)nl * k.ng * ob.n;
  const bool on = il < K && item < nitems;
  int        oct = 0, g = 0, j = 0, kk = 0, jp = 0, kp = 0, sx = 1;
  double     px = 0, cx = 0, cy = 0, cz = 0;

  if (on) {
    const int l = (int)(item % nl);
    const long long r = item / nl;
    g   = (int)(r % k.ng);
    oct = ob.oct[r / k.ng];
    jp  = lines[l] % k.ny;
    kp  = lines[l] / k.ny;
    sx  = (oct & 1) ? -1 : 1;
    j   = (oct & 2) ? k.ny - 1 - jp : jp;
    kk  = (oct & 4) ? k.nz - 1 - kp : kp;
    cx  = k.cx[a];
    cy  = k.cy[a];
    cz  = k.cz[a];
    px  = FaceIn(k, oct, 0, kk * k.ny + j, g, a);
  }
  const double *Ys = k.Ys + (size_t)oct * k.cm * na;
  for (int i0 = 0; i0 < k.nx; i0 += SWEEP_C) {
    const int nc = min(SWEEP_C, k.nx - i0);
    if (on) {
      for (int c = 0; c < nc; c++) {
        const int       ip = i0 + c, i = sx > 0 ? ip : k.nx - 1 - ip, cell = (kk * k.ny + j) * k.nx + i;
        const int       yf = kk * k.nx + i, zf = j * k.nx + i;
        const long long iy = oct * k.sy.o + g * k.sy.g + (long long)yf * k.sy.z + a * k.sy.a;
        const long long iz = oct * k.sz.o + g * k.sz.g + (long long)zf * k.sz.z + a * k.sz.a;
        const double    py = jp == 0 ? FaceIn(k, oct, 1, yf, g, a) : k.fy[iy];
        const double    pz = k.twod ? 0.0 : (kp == 0 ? FaceIn(k, oct, 2, zf, g, a) : k.fz[iz]);
        const double   *qm = k.qmom + ((size_t)cell * k.ng + g) * k.cm;
        const double    st = k.sigt[(size_t)cell * k.ng + g];
        double          s  = qm[0], psi, ox, oy, oz;
        for (int m = 1; m < k.cm; m++) s += Ys[m * na + a] * qm[m];
        if (k.qang) s += k.qang[((size_t)cell * k.ndir + oct * na + a) * k.ng + g];
        psi = (s + cx * px + cy * py + cz * pz) / (st + cx + cy + cz);
        if (!k.dd) ox = oy = oz = psi;
        else {
          ox = 2 * psi - px;
          oy = 2 * psi - py;
          oz = 2 * psi - pz;
          if (k.fixup && (ox < 0 || oy < 0 || (!k.twod && oz < 0))) {
            const double pin[3] = {px, py, pz}, cf[3] = {cx, cy, cz};
            double       pout[3];
            psi = Fixup(s, st, pin, cf, k.twod ? 2 : 3, psi, pout);
            ox  = pout[0];
            oy  = pout[1];
            oz  = k.twod ? pz : pout[2];
          }
        }
        px = ox;
        if (jp == k.ny - 1) FaceOut(k, oct, 1, yf, g, a, oy);
        else k.fy[iy] = oy;
        if (!k.twod) {
          if (kp == k.nz - 1) FaceOut(k, oct, 2, zf, g, a, oz);
          else k.fz[iz] = oz;
        }
        sh[(il * SWEEP_C + c) * na + a] = psi;
      }
    }
    __syncthreads();
    /* the moments of these cells: one thread per (line, cell, moment), angles in order */
    for (int t = threadIdx.x; t < K * SWEEP_C * k.cm; t += blockDim.x) {
      const int       m = t % k.cm, c = (t / k.cm) % SWEEP_C, jl = t / (k.cm * SWEEP_C);
      const long long it = (long long)blockIdx.x * K + jl;
      if (c >= nc || it >= nitems) continue;
      const int       l = (int)(it % nl);
      const long long r = it / nl;
      const int       gg = (int)(r % k.ng), o = ob.oct[r / k.ng];
      const int       jq = lines[l] % k.ny, kq = lines[l] / k.ny;
      const int       jj = (o & 2) ? k.ny - 1 - jq : jq, kz = (o & 4) ? k.nz - 1 - kq : kq, ip = i0 + c, i = (o & 1) ? k.nx - 1 - ip : ip;
      const double   *wy = k.wY + ((size_t)o * k.cm + m) * na, *ps = sh + (jl * SWEEP_C + c) * na;
      double          acc = 0;
      for (int b = 0; b < na; b++) acc += wy[b] * ps[b];
      k.phio[o * k.nphi + (((size_t)(kz * k.ny + jj) * k.nx + i) * k.ng + gg) * k.cm + m] = acc;
    }
    __syncthreads();
  }
  if (on) FaceOut(k, oct, 0, kk * k.ny + j, g, a, px);
}

/* qmom = S phi (+ q): one thread per cell, group and moment */
__global__ void SourceKernel(int ncells, int ng, int cm, int nm, const int *__restrict__ lmom, const int *__restrict__ mat, const double *__restrict__ sigs, const double *__restrict__ phi, const double *__restrict__ q, double *__restrict__ qmom)
{
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= (long long)ncells * ng * cm) return;
  const int m = (int)(t % cm), g = (int)((t / cm) % ng), cell = (int)(t / ((long long)cm * ng));
  const double *sg = sigs + (((size_t)mat[cell] * nm + lmom[m]) * ng + g) * ng;
  double acc = (q && m == 0) ? q[(size_t)cell * ng + g] : 0.0;
  if (phi)
    for (int gp = 0; gp < ng; gp++) acc += sg[gp] * phi[((size_t)cell * ng + gp) * cm + m];
  qmom[t] = acc;
}

/* y = sum of the octants' partial moments, in the order given */
__global__ void OctantSumKernel(long long n, const double *__restrict__ phio, OctBatch order, double *__restrict__ y)
{
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= n) return;
  double acc = 0;
  for (int o = 0; o < 8; o++) acc += phio[order.oct[o] * n + t];
  y[t] = acc;
}

typedef struct {
  int          dev;
  cudaStream_t stream;
  cudaEvent_t  ev0, ev1;
  double      *cx, *cy, *cz, *wY, *Ys, *sigt, *sigs, *qmom, *qang, *q, *fy, *fz, *phio, *x, *y, *refl[6];
  int         *mat, *lmom, *lines, *lineoff; /* lineoff on the host */
  int          ndiag, K;
  size_t       smem;
  OctBatch     batch[4], order;
  int          nbatch;
  Strides      sy, sz;
  PetscBool    sync;
} SweepCUDA;

PetscErrorCode SweepCUDADeviceCount(int *n)
{
  PetscFunctionBegin;
  if (cudaGetDeviceCount(n) != cudaSuccess) {
    (void)cudaGetLastError();
    *n = 0;
  }
  PetscFunctionReturn(0);
}

template <class T>
static PetscErrorCode Alloc(T **p, size_t n, const T *h, cudaStream_t s)
{
  PetscFunctionBegin;
  *p = NULL;
  if (!n) PetscFunctionReturn(0);
  SweepCallCUDA(cudaMalloc((void **)p, n * sizeof(T)));
  if (h) SweepCallCUDA(cudaMemcpyAsync(*p, h, n * sizeof(T), cudaMemcpyHostToDevice, s));
  PetscFunctionReturn(0);
}

template <class T>
static void Free(T **p)
{
  if (*p) (void)cudaFree(*p);
  *p = NULL;
}

static PetscErrorCode SweepCUDADestroy(Mat A)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  SweepCUDA *c  = (SweepCUDA *)sw->backend;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  (void)cudaSetDevice(c->dev);
  if (c->stream) (void)cudaStreamSynchronize(c->stream);
  Free(&c->cx), Free(&c->cy), Free(&c->cz), Free(&c->wY), Free(&c->Ys), Free(&c->sigt), Free(&c->sigs), Free(&c->qmom), Free(&c->qang), Free(&c->q);
  Free(&c->fy), Free(&c->fz), Free(&c->phio), Free(&c->x), Free(&c->y), Free(&c->mat), Free(&c->lmom), Free(&c->lines);
  for (int f = 0; f < 6; f++) Free(&c->refl[f]);
  if (c->ev0) (void)cudaEventDestroy(c->ev0);
  if (c->ev1) (void)cudaEventDestroy(c->ev1);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  PetscCall(PetscFree(c->lineoff));
  PetscCall(PetscFree(sw->backend));
  PetscFunctionReturn(0);
}

/* strides of a face array of F cells in layout L (slowest first), the octant slowest of all */
static Strides LayoutStrides(MatSweepLayout L, long long ng, long long F, long long na)
{
  const char *name = MatSweepLayouts[L]; /* e.g. "GZD" */
  long long   size[3], st[3], s = 1;     /* D, G, Z */
  Strides     r;
  size[0] = na;
  size[1] = ng;
  size[2] = F;
  for (int p = 2; p >= 0; p--) { /* fastest first */
    const int d = name[p] == 'D' ? 0 : (name[p] == 'G' ? 1 : 2);
    st[d]       = s;
    s *= size[d];
  }
  r.a = st[0];
  r.g = st[1];
  r.z = st[2];
  r.o = s;
  return r;
}

static PetscErrorCode SweepCUDASetup(Mat A)
{
  Mat_Sweep             *sw = (Mat_Sweep *)A->data;
  const SweepProblem    *P  = &sw->P;
  const SweepQuadrature *Q  = &P->Q;
  const PetscInt         na = Q->nang, cm = Q->cmom, ng = P->ng;
  SweepCUDA             *c;
  PetscMPIInt            rank;
  int                    ndev;

  PetscFunctionBegin;
  PetscCall(SweepCUDADestroy(A));
  PetscCall(PetscNew(&c));
  sw->backend = c;
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  SweepCallCUDA(cudaGetDeviceCount(&ndev));
  c->dev = rank % ndev; /* one GPU per rank, as MATFMM */
  SweepCallCUDA(cudaSetDevice(c->dev));
  SweepCallCUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  SweepCallCUDA(cudaEventCreate(&c->ev0));
  SweepCallCUDA(cudaEventCreate(&c->ev1));
  { /* the host tables of the CPU backend's setup: coefficients per angle, moment functions per octant */
    PetscReal *h;
    PetscCall(PetscMalloc1(3 * na + 16 * cm * na, &h));
    for (PetscInt a = 0; a < na; a++) {
      const PetscReal f = P->scheme == MATSWEEP_SCHEME_DD ? 2.0 : 1.0;
      h[a]              = f * Q->mu[a] / P->dx;
      h[na + a]         = f * Q->eta[a] / P->dy;
      h[2 * na + a]     = P->twod ? 0.0 : f * Q->xi[a] / P->dz;
    }
    for (PetscInt oct = 0; oct < 8; oct++)
      for (PetscInt m = 0; m < cm; m++)
        for (PetscInt a = 0; a < na; a++) {
          h[3 * na + (oct * cm + m) * na + a]          = Q->w[a] * Q->Y[(oct * na + a) * cm + m];
          h[3 * na + (8 + oct) * cm * na + m * na + a] = Q->Ys[(oct * na + a) * cm + m];
        }
    PetscCall(Alloc(&c->cx, na, h, c->stream));
    PetscCall(Alloc(&c->cy, na, h + na, c->stream));
    PetscCall(Alloc(&c->cz, na, h + 2 * na, c->stream));
    PetscCall(Alloc(&c->wY, 8 * cm * na, h + 3 * na, c->stream));
    PetscCall(Alloc(&c->Ys, 8 * cm * na, h + 3 * na + 8 * cm * na, c->stream));
    SweepCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(h));
  }
  PetscCall(Alloc(&c->sigt, (size_t)P->ncells * ng, P->sigt, c->stream));
  PetscCall(Alloc(&c->sigs, (size_t)P->nmat * Q->nmom * ng * ng, P->sigs, c->stream));
  PetscCall(Alloc(&c->mat, (size_t)P->ncells, P->mat, c->stream));
  {
    int *lm;
    PetscCall(PetscMalloc1(cm, &lm));
    for (PetscInt m = 0; m < cm; m++) lm[m] = (int)Q->lmom[m];
    PetscCall(Alloc(&c->lmom, cm, lm, c->stream));
    SweepCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(lm));
  }
  PetscCall(Alloc(&c->qmom, (size_t)P->nphi, (const double *)NULL, c->stream));
  PetscCall(Alloc(&c->x, (size_t)(P->nphi + P->nb), (const double *)NULL, c->stream));
  PetscCall(Alloc(&c->y, (size_t)(P->nphi + P->nb), (const double *)NULL, c->stream));
  PetscCall(Alloc(&c->phio, (size_t)8 * P->nphi, (const double *)NULL, c->stream));
  c->sy = LayoutStrides(sw->layout, ng, (long long)P->nx * P->nz, na);
  c->sz = LayoutStrides(sw->layout, ng, (long long)P->nx * P->ny, na);
  PetscCall(Alloc(&c->fy, (size_t)8 * c->sy.o, (const double *)NULL, c->stream));
  if (!P->twod) PetscCall(Alloc(&c->fz, (size_t)8 * c->sz.o, (const double *)NULL, c->stream));
  for (int f = 0; f < 6; f++)
    if (P->bc[f] == MATSWEEP_BOUNDARY_REFLECTIVE) {
      PetscCall(Alloc(&c->refl[f], (size_t)4 * SweepFaceCells(P, f / 2) * ng * na, (const double *)NULL, c->stream));
      SweepCallCUDA(cudaMemsetAsync(c->refl[f], 0, sizeof(double) * 4 * SweepFaceCells(P, f / 2) * ng * na, c->stream));
    }
  { /* the lines of each diagonal j' + k' = s of the y-z plane */
    const PetscInt ny = P->ny, nz = P->nz;
    int           *lines, n = 0;
    c->ndiag = (int)(ny + nz - 1);
    PetscCall(PetscMalloc1(ny * nz, &lines));
    PetscCall(PetscMalloc1(c->ndiag + 1, &c->lineoff));
    for (int s = 0; s < c->ndiag; s++) {
      c->lineoff[s] = n;
      for (PetscInt kp = 0; kp < nz; kp++) {
        const PetscInt jp = s - kp;
        if (jp >= 0 && jp < ny) lines[n++] = (int)(jp + ny * kp);
      }
    }
    c->lineoff[c->ndiag] = n;
    PetscCall(Alloc(&c->lines, (size_t)n, lines, c->stream));
    SweepCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(lines));
  }
  { /* octant batches: the octants of one level of SweepOctantOrder() run together */
    PetscInt lev[8];
    for (PetscInt oct = 0; oct < 8; oct++) { /* the level of each octant, as SweepOctantOrder() counts it */
      lev[oct] = 0;
      for (PetscInt ax = 0; ax < 3; ax++) {
        const PetscBool down = (oct >> ax) & 1 ? PETSC_TRUE : PETSC_FALSE;
        const bool rlo = P->bc[2 * ax] == MATSWEEP_BOUNDARY_REFLECTIVE, rhi = P->bc[2 * ax + 1] == MATSWEEP_BOUNDARY_REFLECTIVE;
        if ((rlo && rhi && down) || (rlo && !rhi && !down) || (!rlo && rhi && down)) lev[oct]++;
      }
    }
    c->nbatch = 0;
    for (PetscInt l = 0; l <= 3; l++) {
      OctBatch b;
      b.n = 0;
      for (PetscInt o = 0; o < 8; o++)
        if (lev[P->octorder[o]] == l) b.oct[b.n++] = (int)P->octorder[o];
      if (b.n) c->batch[c->nbatch++] = b;
    }
    c->order.n = 8;
    for (int o = 0; o < 8; o++) c->order.oct[o] = (int)P->octorder[o];
  }
  c->K    = (int)PetscMax(1, 256 / na);
  c->smem = sizeof(double) * c->K * SWEEP_C * na;
  SweepCallCUDA(cudaFuncSetAttribute(LineKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->smem));
  SweepCallCUDA(cudaStreamSynchronize(c->stream));
  PetscFunctionReturn(0);
}

/* where a is: this GPU's memory (used in place) or elsewhere (copied) */
static PetscBool OnDevice(const SweepCUDA *c, const void *a)
{
  cudaPointerAttributes at;
  if (!a || cudaPointerGetAttributes(&at, a) != cudaSuccess) {
    (void)cudaGetLastError();
    return PETSC_FALSE;
  }
  return at.type == cudaMemoryTypeDevice && at.device == c->dev ? PETSC_TRUE : PETSC_FALSE;
}

static PetscErrorCode SweepCUDASweep(Mat A, const PetscScalar *x, PetscScalar *y, PetscBool withsrc)
{
  Mat_Sweep          *sw = (Mat_Sweep *)A->data;
  const SweepProblem *P  = &sw->P;
  SweepCUDA          *c  = (SweepCUDA *)sw->backend;
  const size_t        n  = (size_t)(P->nphi + P->nb);
  const double       *dx = NULL;
  double             *dy;
  const PetscBool     ydev = OnDevice(c, y);
  SweepArgs           k;
  float               ms;

  PetscFunctionBegin;
  SweepCallCUDA(cudaSetDevice(c->dev));
  PetscCall(PetscLogIsActive(&c->sync));
  if (x) {
    if (OnDevice(c, x)) dx = x;
    else {
      SweepCallCUDA(cudaMemcpyAsync(c->x, x, n * sizeof(double), cudaMemcpyHostToDevice, c->stream));
      dx = c->x;
    }
  }
  dy = ydev ? y : c->y;
  if (withsrc && P->q) { /* the fixed sources go up when first used (they may be set after assembly) */
    if (!c->q) PetscCall(Alloc(&c->q, (size_t)P->ncells * P->ng, (const double *)NULL, c->stream));
    SweepCallCUDA(cudaMemcpyAsync(c->q, P->q, sizeof(double) * P->ncells * P->ng, cudaMemcpyHostToDevice, c->stream));
  }
  if (withsrc && P->qang) {
    if (!c->qang) PetscCall(Alloc(&c->qang, (size_t)P->ncells * P->Q.ndir * P->ng, (const double *)NULL, c->stream));
    SweepCallCUDA(cudaMemcpyAsync(c->qang, P->qang, sizeof(double) * P->ncells * P->Q.ndir * P->ng, cudaMemcpyHostToDevice, c->stream));
  }
  if (P->nb) SweepCallCUDA(cudaMemsetAsync(dy + P->nphi, 0, sizeof(double) * P->nb, c->stream));
  SweepCallCUDA(cudaEventRecord(c->ev0, c->stream));
  if (c->sync) SweepCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscLogEventBegin(MATSWEEP_Source, A, 0, 0, 0));
  {
    const long long nt = (long long)P->nphi;
    SourceKernel<<<(unsigned)((nt + 255) / 256), 256, 0, c->stream>>>((int)P->ncells, (int)P->ng, (int)P->Q.cmom, (int)P->Q.nmom, c->lmom, c->mat, c->sigs, dx, withsrc && P->q ? c->q : NULL, c->qmom);
    SweepCallCUDA(cudaGetLastError());
  }
  if (c->sync) SweepCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscLogFlops(2.0 * P->ncells * P->ng * P->ng * P->Q.cmom));
  PetscCall(PetscLogEventEnd(MATSWEEP_Source, A, 0, 0, 0));
  PetscCall(PetscLogEventBegin(MATSWEEP_Sweep, A, 0, 0, 0));
  PetscCall(PetscMemzero(&k, sizeof(k)));
  k.nx = (int)P->nx, k.ny = (int)P->ny, k.nz = (int)P->nz, k.ng = (int)P->ng, k.nang = (int)P->Q.nang, k.cm = (int)P->Q.cmom, k.ndir = (int)P->Q.ndir;
  k.twod = P->twod, k.dd = P->scheme == MATSWEEP_SCHEME_DD, k.fixup = P->fixup;
  k.cx = c->cx, k.cy = c->cy, k.cz = c->cz, k.wY = c->wY, k.Ys = c->Ys, k.sigt = c->sigt, k.qmom = c->qmom, k.qang = withsrc && P->qang ? c->qang : NULL;
  k.fy = c->fy, k.fz = c->fz, k.phio = c->phio, k.sy = c->sy, k.sz = c->sz, k.nphi = P->nphi;
  for (int f = 0; f < 6; f++) {
    k.bc[f]   = (int)P->bc[f];
    k.refl[f] = c->refl[f];
  }
  for (int ax = 0; ax < 3; ax++) {
    k.carry[ax]    = P->ncarry[ax] > 0;
    k.carryoff[ax] = P->carryoff[ax];
    k.F[ax]        = (int)SweepFaceCells(P, ax);
  }
  k.xb = dx ? dx + P->nphi : NULL;
  k.yb = dy + P->nphi;
  for (int b = 0; b < c->nbatch; b++)
    for (int s = 0; s < c->ndiag; s++) {
      const int       nl = c->lineoff[s + 1] - c->lineoff[s];
      const long long items = (long long)nl * P->ng * c->batch[b].n;
      LineKernel<<<(unsigned)((items + c->K - 1) / c->K), c->K * k.nang, c->smem, c->stream>>>(k, c->batch[b], c->lines + c->lineoff[s], nl, c->K);
      SweepCallCUDA(cudaGetLastError());
    }
  OctantSumKernel<<<(unsigned)((P->nphi + 255) / 256), 256, 0, c->stream>>>((long long)P->nphi, c->phio, c->order, dy);
  SweepCallCUDA(cudaGetLastError());
  SweepCallCUDA(cudaEventRecord(c->ev1, c->stream));
  if (c->sync) SweepCallCUDA(cudaStreamSynchronize(c->stream));
  PetscCall(PetscLogFlops(20.0 * P->ncells * P->Q.ndir * P->ng));
  PetscCall(PetscLogEventEnd(MATSWEEP_Sweep, A, 0, 0, 0));
  if (!ydev) SweepCallCUDA(cudaMemcpyAsync(y, dy, n * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
  SweepCallCUDA(cudaStreamSynchronize(c->stream));
  SweepCallCUDA(cudaEventElapsedTime(&ms, c->ev0, c->ev1));
  sw->last_device_s = 1e-3 * ms;
  PetscFunctionReturn(0);
}

static PetscErrorCode SweepCUDAView(Mat A, PetscViewer v)
{
  Mat_Sweep *sw = (Mat_Sweep *)A->data;
  SweepCUDA *c  = (SweepCUDA *)sw->backend;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(0);
  PetscCall(PetscViewerASCIIPrintf(v, "  CUDA: GPU %d, line march: %d diagonal launches x %d octant batches, %d lines x %" PetscInt_FMT " angles a block\n", c->dev, c->ndiag, c->nbatch, c->K, sw->P.Q.nang));
  if (sw->nsweeps && sw->last_device_s > 0) PetscCall(PetscViewerASCIIPrintf(v, "  CUDA: the last sweep's kernels %.4g s (grind time %.4g ns)\n", (double)sw->last_device_s, 1e9 * (double)sw->last_device_s / ((double)sw->P.ncells * sw->P.Q.ndir * sw->P.ng)));
  PetscFunctionReturn(0);
}

struct _SweepBackendOps SweepBackendCUDA = {"cuda", SweepCUDASetup, SweepCUDASweep, SweepCUDADestroy, SweepCUDAView};
