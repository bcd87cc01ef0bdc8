/*
  The CUDA backend of MATSWEEP: the whole sweep on the GPU, for all octants,
  angles and groups, the moments accumulated on the device.

  Two organisations.  On one rank, by default, the "tiles" schedule
  (TileKernel()): a block sweeps a tile of 4 x 4 x TZ cells for one octant,
  a few groups and all angles, a thread per (group, angle), with the tile's
  inner faces in registers and shared memory; one launch per diagonal of
  tiles.  Across ranks (KBA, SweepKBA()) and on request, the "line march":
  a thread owns J adjacent lines of cells along x (-mat_sweep_cuda_lines,
  default 2) for one (octant, group, angle) and marches along them, the x
  faces in registers and the y face passed from one line to the next in a
  register; the faces crossing between threads were left in global memory
  by the line groups upstream.  Line groups are launched by diagonals of
  the y-z plane (jb + k' = s in the octant's direction of flight): one
  launch per diagonal, all octants that may run together (all 8 with vacuum
  faces) and all groups in it; each thread copies its next cells' faces
  into shared memory ahead of its arithmetic (cp.async).
  -mat_sweep_cuda_schedule pipelined instead runs one launch per octant
  batch whose line groups wait on their upstream chunks.  Every SWEEP_C
  cells a block leaves its psi in shared memory and sums each cell's
  moments over the angles in a fixed order, into that octant's partial
  moments (the tiles do the same plane by plane); a last kernel adds the
  octants in the order of SweepOctantOrder().  So every sum has a fixed
  order and repeated products are bitwise identical.  The cell equations
  are those of the CPU backend (src/sweep/cpu/backend.c).
*/
#include <cuda_runtime.h>
#include <cuda_pipeline.h>
#include "sweep/sweepimpl.h"


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
  double       *fx, *fy, *fz, *phio; /* fx: the tiles schedule's only */
  Strides       sx, sy, sz;
  long long     nphi;            /* cells * ng * cm: one octant's partial moments */
  int           bc[6];           /* boundary conditions */
  int           carry[3];        /* the axis carries its low face's entering flux */
  long long     carryoff[3];
  int           F[3];            /* face cells */
  double       *refl[6];         /* reflective faces' outgoing flux [oct4][facecell][g][a] */
  const double *xb;              /* carried fluxes in (NULL: zero) */
  double       *yb;              /* carried fluxes out */
  /* across ranks (KBA): a launch marches cells i' in [i0, i1) of its lines (the octant's order along x) */
  int           i0, i1;
  int           msgf[6];         /* face f of this rank's block is between ranks: its fluxes are messages */
  int           bo[8];           /* octant oct's place in its batch (its slot in the messages) */
  const double *min[3];          /* y, z: the chunk's entering faces, [bo][g][row][i' - i0][a] (row: k for y, j for z) */
  double       *mout[3];         /* and its leaving faces */
  double       *pxs;             /* x faces between chunks: [oct][g][k ny + j][a] */
} SweepArgs;

/* octant oct's number among the four sharing its sign along axis */
__device__ __forceinline__ int Oct4(int oct, int axis)
{
  return axis == 0 ? oct >> 1 : (axis == 1 ? (oct & 1) | ((oct >> 1) & 2) : oct & 3);
}

/* the place of face cell fc (row fc / nx, x cell fc % nx) of axis ax (1 or 2) in a chunk's message */
__device__ __forceinline__ long long MsgIndex(const SweepArgs &k, int oct, int ax, int fc, int g, int a)
{
  const int row = fc / k.nx, i = fc - row * k.nx, ic = ((oct & 1) ? k.nx - 1 - i : i) - k.i0;
  return ((((long long)k.bo[oct] * k.ng + g) * (ax == 1 ? k.nz : k.ny) + row) * (k.i1 - k.i0) + ic) * k.nang + a;
}

/* the flux entering octant oct through its entry face of axis ax at face cell fc */
__device__ __forceinline__ double FaceIn(const SweepArgs &k, int oct, int ax, int fc, int g, int a)
{
  const int down = (oct >> ax) & 1, f = 2 * ax + down; /* entry face: low when moving up */
  if (k.msgf[f]) return k.min[ax][MsgIndex(k, oct, ax, fc, g, a)];
  if (k.bc[f] != MATSWEEP_BOUNDARY_REFLECTIVE) return 0.0;
  const long long off = (((long long)Oct4(oct, ax) * k.F[ax] + fc) * k.ng + g) * k.nang + a;
  if (k.carry[ax] && !down) return k.xb ? k.xb[k.carryoff[ax] + off] : 0.0;
  return k.refl[f][off];
}

/* the flux leaving octant oct through its exit face of axis ax */
__device__ __forceinline__ void FaceOut(const SweepArgs &k, int oct, int ax, int fc, int g, int a, double v)
{
  const int down = (oct >> ax) & 1, f = 2 * ax + 1 - down;
  if (k.msgf[f]) {
    k.mout[ax][MsgIndex(k, oct, ax, fc, g, a)] = v;
    return;
  }
  if (k.bc[f] != MATSWEEP_BOUNDARY_REFLECTIVE) return;
  const long long off = (((long long)Oct4(oct, ax) * k.F[ax] + fc) * k.ng + g) * k.nang + a;
  if (k.carry[ax] && down) k.yb[k.carryoff[ax] + off] = v;
  else k.refl[f][off] = v;
}

/* SNAP's negative-flux fixup of one angle (as Fixup() of the CPU backend) */
__device__ __noinline__ double Fixup(double s, double st, const double pin[3], const double cf[3], int nax, double pc, double pout[3])
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

/* SNAP's fixup of a cell (diamond difference, -mat_sweep_fixup) where a face leaving it, ox, oy or oz, is
   negative: psi and those faces again, from the entering faces x, y, z and *st, sigma_t (read only then;
   the line march and the tiles) */
__device__ __forceinline__ void FixupCell(const SweepArgs &k, double s, const double *st, double x, double y, double z, double cx, double cy, double cz, double &psi, double &ox, double &oy, double &oz)
{
  if (!(k.fixup && (ox < 0 || oy < 0 || (!k.twod && oz < 0)))) return;
  const double pin[3] = {x, y, z}, cf[3] = {cx, cy, cz};
  double       pout[3];
  psi = Fixup(s, *st, pin, cf, k.twod ? 2 : 3, psi, pout);
  ox  = pout[0];
  oy  = pout[1];
  oz  = k.twod ? z : pout[2];
}

/* the octants of one launch */
typedef struct {
  int n, oct[8];
} OctBatch;

/*
  A thread marches J lines of one (octant, group, angle) at once: the lines
  j' = J jb + u, u = 0..J-1, of one k', in the octant's direction of flight,
  cell by cell along x.  The y-face flux leaving line u enters line u+1 in
  a register, so per J cells the thread reads and writes one y face and J z
  faces (16 (1 + J)/J bytes a cell instead of 32).  A block holds K such
  line groups x nang angles; every SWEEP_C cells it loads the faces of the
  next cells into shared memory (all loads in flight at once), marches them,
  and sums each cell's moments over the angles in a fixed order.
*/
#define SWEEP_C 8

template <int J>
struct Lines {
  int           on, oct, g, kk, kp, jp0, sx, sy, i0c, nu, ju, jz, qstep, sstep, astep, fystep, fzstep;
  double        px[J], cx, cy, cz, ns[J], ninv[J]; /* x faces; the next cell's source and 1/(sigma_t + c_x + c_y + c_z) */
  const double *qm0, *st0, *qa0, *Ys;            /* line 0's cell at i' = 0; line u's is u steps of ju further */
  double       *fy0, *fz0;
};

#define LINE_J(L, u) ((L).sy > 0 ? (L).jp0 + (u) : k.ny - 1 - (L).jp0 - (u)) /* the grid row of line u */

/* the source and reciprocal of the cells at ip of the thread's lines (into L.ns, L.ninv) */
template <int J>
__device__ __forceinline__ void LinesLoad(const SweepArgs &k, Lines<J> &L, int a, int ip)
{
#pragma unroll
  for (int u = 0; u < J; u++) {
    if (u >= L.nu) break;
    const double *qm = L.qm0 + ip * L.qstep + u * L.ju * k.ng * k.cm;
    double        s  = qm[0];
    for (int m = 1; m < k.cm; m++) s += L.Ys[m * k.nang + a] * qm[m];
    if (L.qa0) s += L.qa0[ip * L.astep + u * L.ju * k.ndir * k.ng];
    L.ns[u]   = s;
    L.ninv[u] = __drcp_rn(L.st0[ip * L.sstep + u * L.ju * k.ng] + L.cx + L.cy + L.cz);
  }
}

/* the lines (jb, k') = (line % njb, line / njb) of group g, octant oct, angle a: where their cells,
   faces and sources are, as pointers and steps per cell; slot il of the block's per-line tables */
template <int J>
__device__ __forceinline__ void LinesInit(const SweepArgs &k, Lines<J> &L, int line, int g, int oct, int a, int il, long long *obase, int *ostep, int *ooct)
{
  const int njb = (k.ny + J - 1) / J, na = k.nang;
  L.on  = 1;
  L.g   = g;
  L.oct = oct;
  L.jp0 = (line % njb) * J;
  L.kp  = line / njb;
  L.nu  = min(J, k.ny - L.jp0);
  L.sx  = (oct & 1) ? -1 : 1;
  L.sy  = (oct & 2) ? -1 : 1;
  L.kk  = (oct & 4) ? k.nz - 1 - L.kp : L.kp;
  L.i0c = L.sx > 0 ? 0 : k.nx - 1;
  L.cx  = k.cx[a];
  L.cy  = k.cy[a];
  L.cz  = k.cz[a];
  L.qstep  = L.sx * k.ng * k.cm;
  L.sstep  = L.sx * k.ng;
  L.astep  = L.sx * k.ndir * k.ng;
  L.fy0    = k.fy + oct * k.sy.o + g * k.sy.g + (long long)(L.kk * k.nx + L.i0c) * k.sy.z + a * k.sy.a;
  L.fystep = L.sx * (int)k.sy.z;
  L.fzstep = L.sx * (int)k.sz.z;
  L.Ys     = k.Ys + (size_t)oct * k.cm * na;
  const int       j0    = LINE_J(L, 0);
  const long long cell0 = (long long)(L.kk * k.ny + j0) * k.nx + L.i0c;
  L.ju  = L.sy * k.nx; /* cells from one line to the next */
  L.jz  = L.sy * k.nx * (int)k.sz.z;
  L.qm0 = k.qmom + (cell0 * k.ng + g) * k.cm;
  L.st0 = k.sigt + cell0 * k.ng + g;
  L.qa0 = k.qang ? k.qang + (cell0 * k.ndir + oct * na + a) * k.ng + g : NULL;
  L.fz0 = k.twod ? NULL : k.fz + oct * k.sz.o + g * k.sz.g + (long long)(j0 * k.nx + L.i0c) * k.sz.z + a * k.sz.a;
#pragma unroll
  for (int u = 0; u < J; u++) {
    L.px[u] = 0;
    if (u >= L.nu) continue;
    L.px[u] = k.i0 == 0 ? FaceIn(k, oct, 0, L.kk * k.ny + LINE_J(L, u), g, a) : k.pxs[(((long long)oct * k.ng + g) * k.ny * k.nz + L.kk * k.ny + LINE_J(L, u)) * na + a];
    if (a == 0) {
      obase[il * J + u] = oct * k.nphi + (cell0 + (long long)u * L.ju) * k.ng * k.cm + (long long)g * k.cm;
      ostep[il * J + u] = L.qstep;
      ooct[il * J + u]  = oct;
    }
  }
  if (a == 0)
    for (int u = L.nu; u < J; u++) obase[il * J + u] = -1;
  LinesLoad(k, L, a, k.i0);
}

/* the x faces leaving the thread's lines at the end of the launch's chunk: out of the grid, or kept for the next */
template <int J>
__device__ __forceinline__ void LinesEnd(const SweepArgs &k, const Lines<J> &L, int a)
{
  for (int u = 0; u < L.nu; u++) {
    if (k.i1 == k.nx) FaceOut(k, L.oct, 0, L.kk * k.ny + LINE_J(L, u), L.g, a, L.px[u]);
    else k.pxs[(((long long)L.oct * k.ng + L.g) * k.ny * k.nz + L.kk * k.ny + LINE_J(L, u)) * k.nang + a] = L.px[u];
  }
}

/* cell ip (the c-th of its chunk) of the thread's lines, with the y face py entering line 0 and the z
   faces pz[u S] entering line u; psi to the block's rows sh */
template <int J>
__device__ __forceinline__ void MarchCell(const SweepArgs &k, Lines<J> &L, int a, int il, int c, int ip, double py, const double *pz, int S, double *sh, int P)
{
  const int i = L.i0c + L.sx * ip;
  double    sc[J], inv[J];
#pragma unroll
  for (int u = 0; u < J; u++) sc[u] = L.ns[u], inv[u] = L.ninv[u];
  if (ip + 1 < k.i1) LinesLoad(k, L, a, ip + 1); /* in flight while this cell is computed */
#pragma unroll
  for (int u = 0; u < J; u++) {
    if (u >= L.nu) break;
    const double z   = pz[u * S];
    const double t   = sc[u] + L.cy * py + L.cz * z; /* the part of the numerator off the chain through psi_x */
    double       psi = (t + L.cx * L.px[u]) * inv[u], ox, oy, oz;
    if (!k.dd) ox = oy = oz = psi;
    else {
      ox = 2 * psi - L.px[u];
      oy = 2 * psi - py;
      oz = 2 * psi - z;
      FixupCell(k, sc[u], L.st0 + ip * L.sstep + u * L.ju * k.ng, L.px[u], py, z, L.cx, L.cy, L.cz, psi, ox, oy, oz);
    }
    L.px[u] = ox;
    py      = oy; /* into the next line */
    if (!k.twod) {
      if (L.kp == k.nz - 1) FaceOut(k, L.oct, 2, LINE_J(L, u) * k.nx + i, L.g, a, oz);
      else L.fz0[ip * L.fzstep + u * L.jz] = oz;
    }
    sh[((il * J + u) * SWEEP_C + c) * P + a] = psi;
  }
  if (L.jp0 + L.nu == k.ny) FaceOut(k, L.oct, 1, L.kk * k.nx + i, L.g, a, py);
  else L.fy0[ip * L.fystep] = py;
}

/* the faces entering cell ip of the thread's lines into its slots dst[v S] of shared memory: y, then z of each
   line; async: by cp.async (L1, the diagonal schedule), else loads through L2 (other blocks of the launch wrote them) */
template <int J, bool async>
__device__ __forceinline__ void FacesIn(const SweepArgs &k, const Lines<J> &L, int a, int ip, double *dst, int S)
{
  const int i = L.i0c + L.sx * ip;
  if (L.jp0 == 0) dst[0] = FaceIn(k, L.oct, 1, L.kk * k.nx + i, L.g, a);
  else if (async) __pipeline_memcpy_async(dst, L.fy0 + ip * L.fystep, sizeof(double));
  else dst[0] = __ldcg(L.fy0 + ip * L.fystep);
#pragma unroll
  for (int u = 0; u < J; u++) {
    if (u >= L.nu) break;
    if (k.twod) dst[(1 + u) * S] = 0.0;
    else if (L.kp == 0) dst[(1 + u) * S] = FaceIn(k, L.oct, 2, LINE_J(L, u) * k.nx + i, L.g, a);
    else if (async) __pipeline_memcpy_async(dst + (1 + u) * S, L.fz0 + ip * L.fzstep + u * L.jz, sizeof(double));
    else dst[(1 + u) * S] = __ldcg(L.fz0 + ip * L.fzstep + u * L.jz);
  }
}

/* the moments of cells i0 .. i0+nc-1 of the block's lines: one thread per (line, cell, moment), the angles in a fixed order */
__device__ __forceinline__ void Moments(const SweepArgs &k, int KJ, int i0, int nc, const double *sh, int P, const long long *obase, const int *ostep, const int *ooct)
{
  for (int t = threadIdx.x; t < KJ * SWEEP_C * k.cm; t += blockDim.x) {
    const int m = t % k.cm, c = (t / k.cm) % SWEEP_C, lu = t / (k.cm * SWEEP_C);
    if (c >= nc || obase[lu] < 0) continue;
    const double *wy = k.wY + ((size_t)ooct[lu] * k.cm + m) * k.nang, *ps = sh + (lu * SWEEP_C + c) * P;
    double        acc[4] = {0, 0, 0, 0}; /* four chains, added in a fixed order */
    int           b      = 0;
    for (; b + 3 < k.nang; b += 4)
      for (int u = 0; u < 4; u++) acc[u] += wy[b + u] * ps[b + u];
    for (; b < k.nang; b++) acc[0] += wy[b] * ps[b];
    k.phio[obase[lu] + (long long)(i0 + c) * ostep[lu] + m] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
}

/* the block's shared memory: rows [K J][SWEEP_C][P] of psi, the threads' face slots (SWEEP_SLOTS(J) per thread, thread
   fastest), per line the first moment's index, step, octant */
#define SWEEP_SLOTS(J) (SWEEP_C * ((J) + 1))
#define SWEEP_SHARED(J) \
  extern __shared__ double sh[]; \
  const int  na = k.nang, T = blockDim.x, a = threadIdx.x % na, il = threadIdx.x / na, P = na | 1; /* P odd: the reductions' rows in distinct banks */ \
  double    *pf = sh + (size_t)K * J * SWEEP_C * P + threadIdx.x; \
  long long *obase = (long long *)(sh + (size_t)K * J * SWEEP_C * P + (size_t)SWEEP_SLOTS(J) * T); \
  int       *ostep = (int *)(obase + K * J), *ooct = ostep + K * J

/*
  One launch per diagonal jb + k' = s of line groups ("diagonal" schedule):
  lines[0..nl) are its (jb, k') packed as jb + njb k'; items (line, group,
  octant of the batch), K a block.  MAXT: the most threads a block has, MINB
  the blocks an SM should hold (they set the registers a thread may use).
*/
#define SWEEP_D 4 /* the diagonal schedule's copies: groups of SWEEP_D cells, two groups ahead */
template <int J, int MAXT, int MINB>
__global__ void __launch_bounds__(MAXT, MINB) DiagKernel(const __grid_constant__ SweepArgs k, const __grid_constant__ OctBatch ob, const int *__restrict__ lines, int nl, int K)
{
  SWEEP_SHARED(J);
  const long long item = (long long)blockIdx.x * K + il;
  Lines<J>        L;
#define PF(b, d) (pf + (((b) * SWEEP_D + (d)) * (J + 1)) * T)
  auto prefetch = [&](int grp) { /* the faces of cells i0 + SWEEP_D grp .. into slot group grp % 2 */
    for (int d = 0; d < SWEEP_D && k.i0 + grp * SWEEP_D + d < k.i1; d++) FacesIn<J, true>(k, L, a, k.i0 + grp * SWEEP_D + d, PF(grp & 1, d), T);
    __pipeline_commit();
  };

  L.on = 0;
  if (item < (long long)nl * k.ng * ob.n) {
    const long long r = item / nl;
    LinesInit(k, L, lines[item % nl], (int)(r % k.ng), ob.oct[r / k.ng], a, il, obase, ostep, ooct);
    prefetch(0);
    prefetch(1);
  } else if (a == 0)
    for (int u = 0; u < J; u++) obase[il * J + u] = -1;
  __syncthreads();
  for (int i0 = k.i0; i0 < k.i1; i0 += SWEEP_C) {
    const int nc = min(SWEEP_C, k.i1 - i0);
    if (L.on)
      for (int c = 0; c < nc; c++) {
        const int ip = i0 + c, grp = (ip - k.i0) / SWEEP_D, d = (ip - k.i0) % SWEEP_D;
        if (d == 0) __pipeline_wait_prior(1); /* this group's faces are in */
        MarchCell(k, L, a, il, c, ip, PF(grp & 1, d)[0], PF(grp & 1, d) + T, T, sh, P);
        if (d == SWEEP_D - 1 || ip == k.i1 - 1) prefetch(grp + 2); /* into the slots just read */
      }
    __syncthreads();
    Moments(k, K * J, i0, nc, sh, P, obase, ostep, ooct);
    __syncthreads();
  }
#undef PF
  if (L.on) {
    __pipeline_wait_prior(0);
    LinesEnd(k, L, a);
  }
}

/* a task of the pipelined schedule: a line group (jb + njb k'), its group and octant, and the tasks
   whose faces it reads (the line groups before it in y and in z; -1: none) */
typedef struct {
  int line, g, oct, upy, upz;
} Task;

/*
  The "pipelined" schedule: one launch per octant batch.  Blocks take K
  tasks at a time by ticket, in the order of the diagonals (each padded to a
  multiple of K, so that a block's tasks never wait on each other), and
  march them chunk by chunk; before chunk c a task waits until the tasks
  upstream of it have published chunk c (progress[], in chunks), and it
  publishes its own after marching it.  A task waits only on tasks of
  earlier tickets, which running blocks hold, so the launch always
  progresses; and no launch boundary holds a line back from the lines
  downstream of it.  Faces are read through L2 (__ldcg): other blocks of
  this launch wrote them.
*/
template <int J, int MAXT, int MINB>
__global__ void __launch_bounds__(MAXT, MINB) PipeKernel(const __grid_constant__ SweepArgs k, const Task *__restrict__ tasks, int ntb, int K, int *ticket, int *progress)
{
  SWEEP_SHARED(J);
  __shared__ int tb_s;
  volatile int  *prog = progress;

  for (;;) {
    Lines<J> L;
    int      task = -1, upy = -1, upz = -1;
    if (threadIdx.x == 0) tb_s = atomicAdd(ticket, 1);
    __syncthreads();
    const int tb = tb_s;
    if (tb >= ntb) break;
    L.on = 0;
    if (il < K) {
      task = tb * K + il;
      const Task t = tasks[task];
      if (t.line >= 0) {
        LinesInit(k, L, t.line, t.g, t.oct, a, il, obase, ostep, ooct);
        upy = t.upy;
        upz = t.upz;
      } else if (a == 0)
        for (int u = 0; u < J; u++) obase[il * J + u] = -1;
    }
    for (int i0 = 0, ch = 1; i0 < k.nx; i0 += SWEEP_C, ch++) {
      const int nc = min(SWEEP_C, k.nx - i0);
      if (L.on && a == 0) { /* the faces of this chunk are in once the tasks upstream have published it */
        if (upy >= 0)
          while (prog[upy] < ch) __nanosleep(32);
        if (upz >= 0)
          while (prog[upz] < ch) __nanosleep(32);
        __threadfence();
      }
      __syncthreads();
      if (L.on) {
        for (int d = 0; d < nc; d++) FacesIn<J, false>(k, L, a, i0 + d, pf + d * (J + 1) * T, T);
        for (int c = 0; c < nc; c++) MarchCell(k, L, a, il, c, i0 + c, pf[c * (J + 1) * T], pf + (c * (J + 1) + 1) * T, T, sh, P);
      }
      __threadfence(); /* the faces written, for the blocks that wait on this chunk */
      __syncthreads();
      if (L.on && a == 0) atomicExch(progress + task, ch);
      Moments(k, K * J, i0, nc, sh, P, obase, ostep, ooct);
      __syncthreads();
    }
    if (L.on) LinesEnd(k, L, a);
  }
}

/*
  The "tiles" schedule (the default on one rank): a block sweeps a tile of
  TILE_X x TILE_Y x TZ cells for one octant, GB groups and all angles, a
  thread per (group, angle), through the tile in the octant's direction of
  flight (x fastest, then y, then z).  The tile's inner faces stay on the
  SM: the x face along a line and a plane's y faces in registers, the z
  faces of a plane in shared memory from plane to plane.  Only the faces
  between tiles pass through global memory: 2 (1/TILE_X + 1/TILE_Y + 1/TZ)
  values a cell, direction and group, against 2 + 2/J for the line march.
  While a plane is swept, the faces entering the next plane come into
  registers and its sources and sigma_t into shared memory (cp.async).  One
  launch per diagonal I' + J' + K' = d of tiles (each octant counts its
  tiles in its own direction of flight), all octants of the batch and all
  groups in it.  After each plane the block sums the plane's moments over
  the angles in Moments()'s order.  The cell equations are MarchCell()'s;
  the instance for the common case (no fixup, no angular source, one
  moment) has no branch in a plane, so its 16 cells are scheduled together,
  and takes 1/(sigma_t + c) from Rcp().
*/
/* FaceIn() and FaceOut() at the grid's faces, out of line: they keep the tile kernel's registers for its loop */
__device__ __noinline__ double EdgeIn(const SweepArgs &k, int oct, int ax, int fc, int g, int a)
{
  return FaceIn(k, oct, ax, fc, g, a);
}

__device__ __noinline__ void EdgeOut(const SweepArgs &k, int oct, int ax, int fc, int g, int a, double v)
{
  FaceOut(k, oct, ax, fc, g, a, v);
}

/* 1/v for 0 < v < 1e30 without a branch (a float seed and two Newton steps: within an ulp of
   __drcp_rn(), whose special cases are branches that would keep a plane's cells from being scheduled together) */
__device__ __forceinline__ double Rcp(double v)
{
  double r = (double)__frcp_rn((float)v);
  r        = fma(r, fma(-v, r, 1.0), r);
  return fma(r, fma(-v, r, 1.0), r);
}

#define TILE_X 4
#define TILE_Y 4
#define TILE_C (TILE_X * TILE_Y) /* cells of a plane */
#define TILE_T 288               /* threads a block at most: 8 groups of 36 angles, two blocks an SM */
/* the shared memory of a block of GB groups of na angles (doubles): psi of a plane, z faces, sources of two planes */
#define TILE_SHARED(GB, na, cm) ((size_t)(GB) * TILE_C * ((na) | 1) + (size_t)TILE_C * (GB) * (na) + 2 * (size_t)TILE_C * (GB) * ((cm) + 1))
template <int TZ, bool G>
__global__ void __launch_bounds__(TILE_T, 2) TileKernel(const __grid_constant__ SweepArgs k, const __grid_constant__ OctBatch ob, const int *__restrict__ tiles, int nt, int GB)
{
  extern __shared__ double sh[];
  const int  na = k.nang, P = na | 1, T = blockDim.x, a = threadIdx.x % na, gl = threadIdx.x / na, ng = k.ng, cm = k.cm, nx = k.nx, ny = k.ny, SC = GB * (cm + 1);
  const int  r = blockIdx.x / nt, oct = ob.oct[r % ob.n], gb = (r / ob.n) * GB, g = gb + gl;
  const int  ntx = (nx + TILE_X - 1) / TILE_X, nty = (ny + TILE_Y - 1) / TILE_Y, tt = tiles[blockIdx.x % nt];
  const int  i0 = (tt % ntx) * TILE_X, j0 = ((tt / ntx) % nty) * TILE_Y, k0 = (tt / (ntx * nty)) * TZ; /* the tile's first cell, in the octant's order */
  const int  mx = min(TILE_X, nx - i0), my = min(TILE_Y, ny - j0), mz = min(TZ, k.nz - k0), ngb = min(GB, ng - gb);
  const int  ux = (oct & 1) ? -1 : 1, uy = (oct & 2) ? -1 : 1, uz = (oct & 4) ? -1 : 1;
  const int  ib = ux > 0 ? i0 : nx - 1 - i0, jb = uy > 0 ? j0 : ny - 1 - j0, kb = uz > 0 ? k0 : k.nz - 1 - k0; /* that cell in the grid */
  const bool on = g < ng;
  const bool xin = i0 > 0, yin = j0 > 0, zin = k0 > 0, xout = i0 + TILE_X < nx, yout = j0 + TILE_Y < ny, zout = k0 + TZ < k.nz; /* faces shared with other tiles */
  const double cx = k.cx[a], cy = k.cy[a], cz = k.cz[a], cs = cx + cy + cz, f = k.dd ? 2.0 : 1.0, d = k.dd ? 1.0 : 0.0; /* psi_out = f psi - d psi_in */
  const int    fxs = uy * (int)k.sx.z, fys = ux * (int)k.sy.z, fzx = ux * (int)k.sz.z, fzy = uy * nx * (int)k.sz.z;
  const double *Ys = k.Ys + (size_t)oct * cm * na;
  double       *fx = k.fx + oct * k.sx.o + g * k.sx.g + a * k.sx.a + (long long)jb * k.sx.z, *fy = k.fy + oct * k.sy.o + g * k.sy.g + a * k.sy.a + (long long)ib * k.sy.z;
  double       *fz  = k.twod ? NULL : k.fz + oct * k.sz.o + g * k.sz.g + a * k.sz.a + (long long)(jb * nx + ib) * k.sz.z;
  double       *psh = sh, *pz = sh + (size_t)GB * TILE_C * P + threadIdx.x, *src = pz - threadIdx.x + (size_t)TILE_C * T; /* psi [GB][TILE_C][P]; z faces [TILE_C][T]; [2][TILE_C][sigma_t of GB, then GB x cm moments] */
  double        xpre[TILE_Y] = {0}, ypre[TILE_X] = {0};

  /* the faces entering plane kz (x of each line, y of each column) into xpre, ypre */
  auto faces = [&](int kz) {
    const int kk = kb + uz * kz;
#pragma unroll
    for (int jy = 0; jy < TILE_Y; jy++)
      if (jy < my) xpre[jy] = xin ? __ldcg(fx + (long long)kk * ny * k.sx.z + jy * fxs) : EdgeIn(k, oct, 0, kk * ny + jb + uy * jy, g, a);
#pragma unroll
    for (int ix = 0; ix < TILE_X; ix++)
      if (ix < mx) ypre[ix] = yin ? __ldcg(fy + (long long)kk * nx * k.sy.z + ix * fys) : EdgeIn(k, oct, 1, kk * nx + ib + ux * ix, g, a);
  };
  /* sigma_t and the source moments of plane kz's cells and the block's groups into src[kz % 2] (cp.async) */
  auto sources = [&](int kz) {
    const int kk = kb + uz * kz;
    double   *dst = src + (size_t)(kz & 1) * TILE_C * SC;
    for (int e = threadIdx.x; e < TILE_C * SC; e += T) {
      const int c = e / SC, q = e % SC, ix = c % TILE_X, jy = c / TILE_X;
      if (ix >= mx || jy >= my || (q < GB ? q : (q - GB) / cm) >= ngb) continue;
      const long long cell = (long long)(kk * ny + jb + uy * jy) * nx + ib + ux * ix;
      __pipeline_memcpy_async(dst + e, q < GB ? k.sigt + cell * ng + gb + q : k.qmom + (cell * ng + gb) * cm + (q - GB), sizeof(double));
    }
    __pipeline_commit();
  };

  if (on) {
    for (int c = 0; c < TILE_C; c++) pz[c * T] = 0;
    if (!k.twod)
#pragma unroll
      for (int jy = 0; jy < TILE_Y; jy++)
#pragma unroll
        for (int ix = 0; ix < TILE_X; ix++)
          if (jy < my && ix < mx) pz[(jy * TILE_X + ix) * T] = zin ? __ldcg(fz + jy * fzy + ix * fzx) : EdgeIn(k, oct, 2, (jb + uy * jy) * nx + ib + ux * ix, g, a);
    faces(0);
  }
  sources(0);
  for (int kz = 0; kz < mz; kz++) {
    const int     kk = kb + uz * kz;
    const double *sc = src + (size_t)(kz & 1) * TILE_C * SC;
    double        px[TILE_Y], py[TILE_X];
#pragma unroll
    for (int u = 0; u < TILE_Y; u++) px[u] = xpre[u];
#pragma unroll
    for (int u = 0; u < TILE_X; u++) py[u] = ypre[u];
    if (kz + 1 < mz) sources(kz + 1); /* the next plane's, in flight while this one is swept */
    else __pipeline_commit();
    if (on && kz + 1 < mz) faces(kz + 1);
    __pipeline_wait_prior(1);
    __syncthreads(); /* this plane's sources are in; the moments of the last are summed */
    if (on) {
      double xo[TILE_Y], yo[TILE_X]; /* the faces leaving the plane's lines and columns */
      /* cell (ix, jy) of the plane, the x face along its line in x, the y face along its column in y */
      auto cell = [&](int jy, int ix, double &x, double &y) {
        const int     c  = jy * TILE_X + ix;
        const double *sq = sc + c * SC, st = sq[gl], z = pz[c * T];
        double        s  = sq[GB + gl * cm], psi, ox, oy, oz;
        if constexpr (G) {
          for (int m = 1; m < cm; m++) s += Ys[m * na + a] * sq[GB + gl * cm + m];
          if (k.qang) s += k.qang[((((long long)(kk * ny + jb + uy * jy) * nx + ib + ux * ix) * k.ndir + oct * na + a) * ng + g)];
          psi = (s + cy * y + cz * z + cx * x) * __drcp_rn(st + cs);
          ox  = f * psi - d * x;
          oy  = f * psi - d * y;
          oz  = f * psi - d * z;
          FixupCell(k, s, sq + gl, x, y, z, cx, cy, cz, psi, ox, oy, oz);
        } else { /* no branch: the plane's cells are scheduled together */
          psi = (s + cy * y + cz * z + cx * x) * Rcp(st + cs);
          ox  = fma(f, psi, -d * x);
          oy  = fma(f, psi, -d * y);
          oz  = fma(f, psi, -d * z);
        }
        x         = ox;
        y         = oy;
        pz[c * T] = k.twod ? 0.0 : oz;
        psh[(gl * TILE_C + c) * P + a] = psi;
        if (ix == mx - 1) xo[jy] = x;
        if (jy == my - 1) yo[ix] = y;
      };
      if constexpr (G) {
#pragma unroll 1
        for (int jy = 0; jy < my; jy++) {
          double x = px[0]; /* px[jy], without a dynamic index into registers */
#pragma unroll
          for (int u = 1; u < TILE_Y; u++)
            if (u == jy) x = px[u];
#pragma unroll
          for (int ix = 0; ix < TILE_X; ix++)
            if (ix < mx) cell(jy, ix, x, py[ix]);
        }
      } else /* every cell of the tile's plane, those outside the grid too (their results are not used) */
#pragma unroll
        for (int jy = 0; jy < TILE_Y; jy++)
#pragma unroll
          for (int ix = 0; ix < TILE_X; ix++) cell(jy, ix, px[jy], py[ix]);
#pragma unroll
      for (int jy = 0; jy < TILE_Y; jy++) {
        if (jy >= my) break;
        if (xout) __stcg(fx + (long long)kk * ny * k.sx.z + jy * fxs, xo[jy]);
        else EdgeOut(k, oct, 0, kk * ny + jb + uy * jy, g, a, xo[jy]);
      }
#pragma unroll
      for (int ix = 0; ix < TILE_X; ix++) {
        if (ix >= mx) break;
        if (yout) __stcg(fy + (long long)kk * nx * k.sy.z + ix * fys, yo[ix]);
        else EdgeOut(k, oct, 1, kk * nx + ib + ux * ix, g, a, yo[ix]);
      }
    }
    __syncthreads();
    for (int q = threadIdx.x; q < ngb * TILE_C * cm; q += T) { /* the plane's moments, as Moments() */
      const int m = q % cm, c = (q / cm) % TILE_C, gr = q / (cm * TILE_C), ix = c % TILE_X, jy = c / TILE_X;
      if (ix >= mx || jy >= my) continue;
      const long long cell = (long long)(kk * ny + jb + uy * jy) * nx + ib + ux * ix;
      const double   *w = k.wY + ((size_t)oct * cm + m) * na, *ps = psh + (gr * TILE_C + c) * P;
      double          acc[4] = {0, 0, 0, 0};
      int             b      = 0;
      for (; b + 3 < na; b += 4)
        for (int u = 0; u < 4; u++) acc[u] += w[b + u] * ps[b + u];
      for (; b < na; b++) acc[0] += w[b] * ps[b];
      k.phio[oct * k.nphi + (cell * ng + gb + gr) * cm + m] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
  }
  if (on && !k.twod)
#pragma unroll
    for (int jy = 0; jy < TILE_Y; jy++)
#pragma unroll
      for (int ix = 0; ix < TILE_X; ix++) {
        if (jy >= my || ix >= mx) continue;
        if (zout) __stcg(fz + jy * fzy + ix * fzx, pz[(jy * TILE_X + ix) * T]);
        else EdgeOut(k, oct, 2, (jb + uy * jy) * nx + ib + ux * ix, g, a, pz[(jy * TILE_X + ix) * T]);
      }
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

enum { SWEEP_DIAGONAL, SWEEP_PIPELINED, SWEEP_TILES };

typedef struct {
  int          dev;
  cudaStream_t stream;
  cudaEvent_t  ev0, ev1;
  double      *cx, *cy, *cz, *wY, *Ys, *sigt, *sigs, *qmom, *qang, *q, *fx, *fy, *fz, *phio, *x, *y, *refl[6];
  int         *mat, *lmom, *lines, *lineoff; /* lineoff on the host */
  int          ndiag, K, J, minb, sched;      /* sched: SWEEP_DIAGONAL, SWEEP_PIPELINED or SWEEP_TILES */
  int         *tiles, *tileoff, ntdiag, GB, TZ; /* the tiles schedule: tiles of each diagonal (tileoff on the host), groups a block, tile depth */
  void (*tile[2])(const SweepArgs, const OctBatch, const int *, int, int); /* the TileKernel instances: no branches, general */
  PetscBool    tfast;                                                        /* the data suit tile[0] */
  size_t       tsmem;
  void (*diag)(const SweepArgs, const OctBatch, const int *, int, int); /* the DiagKernel instance */
  void (*pipek)(const SweepArgs, const Task *, int, int, int *, int *); /* the PipeKernel instance */
  size_t       smem;
  Task        *tasks;          /* the pipelined schedule's tasks, batch after batch */
  int          taskoff[5], *ticket, *progress, pgrid;
  OctBatch     batch[4], order;
  int          nbatch;
  Strides      sx, sy, sz;
  PetscBool    sync;
  /* across ranks (KBA): octant batches in this rank's order, their ids (the same on every rank), levels
     (SweepOctantOrder()) and slots (their place among the batches of their level, which may run at once:
     a stream each, and the chunks' messages on the device and in page-locked host memory: [y, z][slot]
     in (two host buffers) and out); the faces out in [y, z][batch], a whole face each, so that no send
     is waited on before the sweep's end.  up, dn: the ranks upstream and downstream of each batch.
     Between the ranks of one host (-mat_sweep_cuda_ipc) a batch's faces go GPU to GPU instead: the
     receiver's two buffers rbuf[y, z][batch][chunk parity], mapped by the sender (peer, CUDA IPC); a
     message of no data says a chunk's faces are in, another (rack, sack) that its buffer is free */
  int          kba, nkb, kbid[16], klev[16], kslot[16], nslot, nch, up[16][2], dn[16][2], ipc;
  int          ipcin[2][16], ipcout[2][16];
  OctBatch     kb[16];
  cudaStream_t kst[4];
  cudaEvent_t  kev[16], kready, kjoin[4];
  double      *dmin[2][4], *dmout[2][4], *hin[2][4][2], *hout[2][16], *pxs, *rbuf[2][16][2], *peer[2][16][2];
  MPI_Request  rin[2][4][2], *rout[2], *rack[2], *sack[2];
  PetscLogDouble kwait; /* the last sweep: host time with no batch on the GPU (waiting on other ranks) */
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
  Free(&c->fx), Free(&c->fy), Free(&c->fz), Free(&c->phio), Free(&c->x), Free(&c->y), Free(&c->mat), Free(&c->lmom), Free(&c->lines), Free(&c->tiles);
  Free(&c->tasks), Free(&c->ticket), Free(&c->progress);
  for (int ax = 0; ax < 2; ax++) {
    for (int sl = 0; sl < 4; sl++) {
      Free(&c->dmin[ax][sl]), Free(&c->dmout[ax][sl]);
      for (int b = 0; b < 2; b++)
        if (c->hin[ax][sl][b]) (void)cudaFreeHost(c->hin[ax][sl][b]);
    }
    for (int b = 0; b < 16; b++) {
      if (c->hout[ax][b]) (void)cudaFreeHost(c->hout[ax][b]);
      for (int par = 0; par < 2; par++) {
        if (c->peer[ax][b][par]) (void)cudaIpcCloseMemHandle(c->peer[ax][b][par]);
        Free(&c->rbuf[ax][b][par]);
      }
    }
    PetscCall(PetscFree(c->rout[ax]));
    PetscCall(PetscFree2(c->rack[ax], c->sack[ax]));
  }
  for (int sl = 0; sl < 4; sl++) {
    if (c->kst[sl]) (void)cudaStreamDestroy(c->kst[sl]);
    if (c->kjoin[sl]) (void)cudaEventDestroy(c->kjoin[sl]);
  }
  for (int b = 0; b < 16; b++)
    if (c->kev[b]) (void)cudaEventDestroy(c->kev[b]);
  if (c->kready) (void)cudaEventDestroy(c->kready);
  Free(&c->pxs);
  for (int f = 0; f < 6; f++) Free(&c->refl[f]);
  if (c->ev0) (void)cudaEventDestroy(c->ev0);
  if (c->ev1) (void)cudaEventDestroy(c->ev1);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  PetscCall(PetscFree(c->lineoff));
  PetscCall(PetscFree(c->tileoff));
  PetscCall(PetscFree(sw->backend));
  PetscFunctionReturn(0);
}

/* the tag of the faces of chunk ch of batch id b crossing the y (ax 0) or z (ax 1) faces; the notices
   that a chunk's buffer is free (CUDA IPC) go the other way, with tags after all of these */
static inline PetscMPIInt KBATag(int b, PetscInt ch, PetscInt nch, int ax)
{
  return (PetscMPIInt)(2 * (b * nch + ch) + ax);
}
static inline PetscMPIInt KBAAckTag(int b, PetscInt ch, PetscInt nch, int ax)
{
  return (PetscMPIInt)(32 * nch) + KBATag(b, ch, nch, ax);
}

/*
  Which faces between ranks go GPU to GPU: a link (axis, batch) whose two
  ranks share a host (MPI_COMM_TYPE_SHARED), where both ask for it
  (-mat_sweep_cuda_ipc) and CUDA maps the receiver's buffers in the
  sender's process.  The receiver offers its buffers' handles, the sender
  answers whether it mapped them; a link that fails keeps the host path.
  Collective on P->comm.
*/
static PetscErrorCode KBAPeerSetup(const SweepProblem *P, SweepCUDA *c, int maxn)
{
  typedef struct {
    int                ok;
    cudaIpcMemHandle_t h[2];
  } Offer;
  Offer       offin[2][16], offout[2][16];
  int         okin[2][16], okout[2][16];
  MPI_Request req[64];
  int         nreq = 0;
  MPI_Comm    node;
  MPI_Group   gw, gn;
  PetscMPIInt tag = 0; /* one a link (batch ids < 16): every message of a sweep is received within it */

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_split_type(P->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  PetscCallMPI(MPI_Comm_group(P->comm, &gw));
  PetscCallMPI(MPI_Comm_group(node, &gn));
  for (int ax = 0; ax < 2; ax++)
    for (int b = 0; b < c->nkb; b++) {
      okin[ax][b] = okout[ax][b] = 0;
      if (c->up[b][ax] >= 0) { /* offer this batch's buffers to the rank upstream */
        PetscMPIInt r = c->up[b][ax], rn;
        const size_t cap = (size_t)maxn * P->ng * (ax ? P->ny : P->nz) * P->chunk * P->Q.nang;
        PetscCallMPI(MPI_Group_translate_ranks(gw, 1, &r, gn, &rn));
        offin[ax][b].ok = c->ipc && rn != MPI_UNDEFINED;
        for (int par = 0; par < 2 && offin[ax][b].ok; par++) {
          PetscCall(Alloc(&c->rbuf[ax][b][par], cap, (const double *)NULL, c->stream));
          if (cudaIpcGetMemHandle(&offin[ax][b].h[par], c->rbuf[ax][b][par]) != cudaSuccess) offin[ax][b].ok = 0;
        }
        (void)cudaGetLastError();
        PetscCallMPI(MPI_Isend(&offin[ax][b], (PetscMPIInt)sizeof(Offer), MPI_BYTE, r, tag + 2 * c->kbid[b] + ax, P->comm, &req[nreq++]));
      }
      if (c->dn[b][ax] >= 0) PetscCallMPI(MPI_Irecv(&offout[ax][b], (PetscMPIInt)sizeof(Offer), MPI_BYTE, c->dn[b][ax], tag + 2 * c->kbid[b] + ax, P->comm, &req[nreq++]));
    }
  PetscCallMPI(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
  nreq = 0;
  for (int ax = 0; ax < 2; ax++)
    for (int b = 0; b < c->nkb; b++) {
      if (c->dn[b][ax] >= 0) { /* map the offered buffers, and say whether that worked */
        okout[ax][b] = c->ipc && offout[ax][b].ok;
        for (int par = 0; par < 2 && okout[ax][b]; par++)
          if (cudaIpcOpenMemHandle((void **)&c->peer[ax][b][par], offout[ax][b].h[par], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) okout[ax][b] = 0;
        (void)cudaGetLastError();
        PetscCallMPI(MPI_Isend(&okout[ax][b], 1, MPI_INT, c->dn[b][ax], tag + 32 + 2 * c->kbid[b] + ax, P->comm, &req[nreq++]));
      }
      if (c->up[b][ax] >= 0) PetscCallMPI(MPI_Irecv(&okin[ax][b], 1, MPI_INT, c->up[b][ax], tag + 32 + 2 * c->kbid[b] + ax, P->comm, &req[nreq++]));
    }
  PetscCallMPI(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
  for (int ax = 0; ax < 2; ax++) {
    for (int b = 0; b < c->nkb; b++) {
      c->ipcin[ax][b]  = okin[ax][b];
      c->ipcout[ax][b] = okout[ax][b];
      if (okout[ax][b] && c->hout[ax][b]) { /* not staged */
        (void)cudaFreeHost(c->hout[ax][b]);
        c->hout[ax][b] = NULL;
      }
      for (int par = 0; par < 2; par++) {
        if (!okin[ax][b]) Free(&c->rbuf[ax][b][par]);
        if (!okout[ax][b] && c->peer[ax][b][par]) {
          (void)cudaIpcCloseMemHandle(c->peer[ax][b][par]);
          c->peer[ax][b][par] = NULL;
        }
      }
    }
    PetscCall(PetscMalloc2((size_t)c->nkb * c->nch, &c->rack[ax], (size_t)c->nkb * c->nch, &c->sack[ax]));
    for (int i = 0; i < c->nkb * c->nch; i++) c->rack[ax][i] = c->sack[ax][i] = MPI_REQUEST_NULL;
  }
  PetscCallMPI(MPI_Group_free(&gw));
  PetscCallMPI(MPI_Group_free(&gn));
  PetscCallMPI(MPI_Comm_free(&node));
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
  PetscMPIInt            rank, size;
  int                    ndev;
  PetscReal              cmin = PETSC_MAX_REAL, cmax = 0;

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
  { /* the host tables of the CPU backend's setup: coefficients per angle (their sums' range: cmin, cmax), moment functions per octant */
    PetscReal *h;
    PetscCall(PetscMalloc1(3 * na + 16 * cm * na, &h));
    for (PetscInt a = 0; a < na; a++) {
      const PetscReal f = P->scheme == MATSWEEP_SCHEME_DD ? 2.0 : 1.0;
      h[a]              = f * Q->mu[a] / P->dx;
      h[na + a]         = f * Q->eta[a] / P->dy;
      h[2 * na + a]     = P->twod ? 0.0 : f * Q->xi[a] / P->dz;
      cmin              = PetscMin(cmin, h[a] + h[na + a] + h[2 * na + a]);
      cmax              = PetscMax(cmax, h[a] + h[na + a] + h[2 * na + a]);
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
  PetscCallMPI(MPI_Comm_size(P->comm, &size));
  c->J     = 2;
  c->minb  = 2;
  c->sched = size == 1 && na <= TILE_T ? SWEEP_TILES : SWEEP_DIAGONAL;
  c->TZ    = 8;
  PetscObjectOptionsBegin((PetscObject)A);
  {
    const char *sched[] = {"diagonal", "pipelined", "tiles"};
    PetscInt    i       = c->sched;
    PetscCall(PetscOptionsEList("-mat_sweep_cuda_schedule", "CUDA sweep: a launch per diagonal of lines (line march), one launch per octant batch with lines waiting on the lines upstream, or a launch per diagonal of tiles of cells (one rank)", "MATSWEEP", sched, 3, sched[c->sched], &i, NULL));
    c->sched = (int)i;
  }
  PetscCall(PetscOptionsRangeInt("-mat_sweep_cuda_tile_z", "CUDA sweep, tiles schedule: cells of a tile along z (4 or 8; 4 x 4 along x and y)", "MATSWEEP", c->TZ, &c->TZ, NULL, 4, 8));
  PetscCall(PetscOptionsRangeInt("-mat_sweep_cuda_lines", "CUDA sweep: lines of cells a thread marches at once (1, 2 or 4)", "MATSWEEP", c->J, &c->J, NULL, 1, 4));
  PetscCall(PetscOptionsRangeInt("-mat_sweep_cuda_minblocks", "CUDA sweep: blocks of 256 threads an SM should hold (2: up to 128 registers a thread, 4: 64)", "MATSWEEP", c->minb, &c->minb, NULL, 2, 4));
  {
    PetscBool ipc = PETSC_TRUE;
    PetscCall(PetscOptionsBool("-mat_sweep_cuda_ipc", "CUDA sweep across ranks: faces between ranks of one host go GPU to GPU (CUDA IPC); false: through host memory and MPI", "MATSWEEP", ipc, &ipc, NULL));
    c->ipc = ipc ? 1 : 0;
  }
  PetscOptionsEnd();
  PetscCheck(c->J == 1 || c->J == 2 || c->J == 4, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "-mat_sweep_cuda_lines %d: expected 1, 2 or 4", c->J);
  PetscCheck(c->minb == 2 || c->minb == 4, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "-mat_sweep_cuda_minblocks %d: expected 2 or 4", c->minb);
  PetscCheck(c->TZ == 4 || c->TZ == 8, PetscObjectComm((PetscObject)A), PETSC_ERR_ARG_OUTOFRANGE, "-mat_sweep_cuda_tile_z %d: expected 4 or 8", c->TZ);
  PetscCheck(c->sched == SWEEP_DIAGONAL || size == 1, PetscObjectComm((PetscObject)A), PETSC_ERR_SUP, "MATSWEEP: -mat_sweep_cuda_schedule %s sweeps on one rank; on %d ranks use -mat_sweep_cuda_schedule diagonal (the default there)", c->sched == SWEEP_TILES ? "tiles" : "pipelined", (int)size);
  PetscCheck(c->sched != SWEEP_TILES || na <= TILE_T, PetscObjectComm((PetscObject)A), PETSC_ERR_SUP, "MATSWEEP: -mat_sweep_cuda_schedule tiles takes at most %d directions an octant, not %" PetscInt_FMT "; use -mat_sweep_cuda_schedule diagonal (the default there)", TILE_T, na);
  if (c->sched == SWEEP_TILES) { /* the tiles of each diagonal I' + J' + K' = d, packed I' + ntx (J' + nty K'); the x faces */
    const int ntx = (int)((P->nx + TILE_X - 1) / TILE_X), nty = (int)((P->ny + TILE_Y - 1) / TILE_Y), ntz = (int)((P->nz + c->TZ - 1) / c->TZ);
    int      *t, n = 0;
    c->ntdiag = ntx + nty + ntz - 2;
    PetscCall(PetscMalloc1((size_t)ntx * nty * ntz, &t));
    PetscCall(PetscMalloc1(c->ntdiag + 1, &c->tileoff));
    for (int d = 0; d < c->ntdiag; d++) {
      c->tileoff[d] = n;
      for (int K = 0; K < ntz; K++)
        for (int J = 0; J < nty; J++) {
          const int I = d - J - K;
          if (I >= 0 && I < ntx) t[n++] = I + ntx * (J + nty * K);
        }
    }
    c->tileoff[c->ntdiag] = n;
    PetscCall(Alloc(&c->tiles, (size_t)n, t, c->stream));
    SweepCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(t));
    c->sx = LayoutStrides(sw->layout, ng, (long long)P->ny * P->nz, na);
    PetscCall(Alloc(&c->fx, (size_t)8 * c->sx.o, (const double *)NULL, c->stream));
    c->GB = (int)PetscMax(1, PetscMin(ng, TILE_T / na)); /* groups a block: about TILE_T threads */
    c->tile[0] = c->TZ == 4 ? TileKernel<4, false> : TileKernel<8, false>;
    c->tile[1] = c->TZ == 4 ? TileKernel<4, true> : TileKernel<8, true>;
    { /* the instance without branches takes 1e-30 < sigma_t + c_x + c_y + c_z < 1e30 (Rcp()) */
      PetscReal smin = PETSC_MAX_REAL, smax = 0;
      for (PetscInt i = 0; i < P->ncells * ng; i++) smin = PetscMin(smin, P->sigt[i]), smax = PetscMax(smax, P->sigt[i]);
      c->tfast = smin + cmin > 1e-30 && smax + cmax < 1e30 ? PETSC_TRUE : PETSC_FALSE;
    }
    while (c->GB > 1 && sizeof(double) * TILE_SHARED(c->GB, na, cm) > 113 * 1024) c->GB--; /* two blocks an SM */
    c->tsmem = sizeof(double) * TILE_SHARED(c->GB, na, cm);
    for (int i = 0; i < 2; i++) SweepCallCUDA(cudaFuncSetAttribute(c->tile[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->tsmem));
  }
  { /* the line groups (jb, k') of each diagonal jb + k' = s */
    const PetscInt njb = (P->ny + c->J - 1) / c->J, nz = P->nz;
    int           *lines, n = 0;
    c->ndiag = (int)(njb + nz - 1);
    PetscCall(PetscMalloc1(njb * nz, &lines));
    PetscCall(PetscMalloc1(c->ndiag + 1, &c->lineoff));
    for (int s = 0; s < c->ndiag; s++) {
      c->lineoff[s] = n;
      for (PetscInt kp = 0; kp < nz; kp++) {
        const PetscInt jb = s - kp;
        if (jb >= 0 && jb < njb) lines[n++] = (int)(jb + njb * kp);
      }
    }
    c->lineoff[c->ndiag] = n;
    PetscCall(Alloc(&c->lines, (size_t)n, lines, c->stream));
    SweepCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(lines));
  }
  { /* octant batches: the octants of one level of SweepOctantOrder() run together */
    c->nbatch = 0;
    for (PetscInt l = 0; l <= 3; l++) {
      OctBatch b;
      b.n = 0;
      for (PetscInt o = 0; o < 8; o++)
        if (P->octlevel[P->octorder[o]] == l) b.oct[b.n++] = (int)P->octorder[o];
      if (b.n) c->batch[c->nbatch++] = b;
    }
    c->order.n = 8;
    for (int o = 0; o < 8; o++) c->order.oct[o] = (int)P->octorder[o];
  }
  for (int f = 2; f < 6; f++) c->kba = c->kba || P->nbr[f] >= 0;
  if (c->kba) { /* across ranks: the octant batches of SweepKBABatches(), in this rank's order */
    SweepBatch sb[16];
    int        maxn = 0, nlev[4] = {0, 0, 0, 0};
    c->nkb = (int)SweepKBABatches(P, P->iy, P->iz, sb);
    c->nslot = 0;
    for (int i = 0; i < c->nkb; i++) {
      c->kb[i].n = (int)sb[i].n;
      for (PetscInt q = 0; q < sb[i].n; q++) c->kb[i].oct[q] = (int)sb[i].oct[q];
      c->kbid[i]  = (int)sb[i].id;
      c->klev[i]  = (int)P->octlevel[sb[i].oct[0]];
      for (int ax = 0; ax < 2; ax++) { /* the octants of a batch share their signs along y and z */
        const int o0 = c->kb[i].oct[0];
        c->up[i][ax] = (int)P->nbr[2 + 2 * ax + ((o0 >> (1 + ax)) & 1)];
        c->dn[i][ax] = (int)P->nbr[3 + 2 * ax - ((o0 >> (1 + ax)) & 1)];
      }
      c->kslot[i] = nlev[c->klev[i]]++;
      c->nslot    = PetscMax(c->nslot, c->kslot[i] + 1);
      maxn        = PetscMax(maxn, c->kb[i].n);
      SweepCallCUDA(cudaEventCreateWithFlags(&c->kev[i], cudaEventDisableTiming));
    }
    PetscCheck(c->nslot <= 4, PETSC_COMM_SELF, PETSC_ERR_PLIB, "MATSWEEP: %d octant batches of one level", c->nslot);
    SweepCallCUDA(cudaEventCreateWithFlags(&c->kready, cudaEventDisableTiming));
    for (int sl = 0; sl < c->nslot; sl++) {
      SweepCallCUDA(cudaStreamCreateWithFlags(&c->kst[sl], cudaStreamNonBlocking));
      SweepCallCUDA(cudaEventCreateWithFlags(&c->kjoin[sl], cudaEventDisableTiming));
    }
    c->nch = (int)((P->nx + P->chunk - 1) / P->chunk);
    for (int ax = 0; ax < 2; ax++)
      for (int sl = 0; sl < 4; sl++)
        for (int b = 0; b < 2; b++) c->rin[ax][sl][b] = MPI_REQUEST_NULL; /* not 0 in every MPI */
    for (int ax = 0; ax < 2; ax++) {
      const size_t cap = (size_t)maxn * ng * (ax ? P->ny : P->nz) * P->chunk * na;
      if (P->nbr[2 + 2 * ax] < 0 && P->nbr[3 + 2 * ax] < 0) continue;
      for (int sl = 0; sl < c->nslot; sl++) {
        PetscCall(Alloc(&c->dmin[ax][sl], cap, (const double *)NULL, c->stream));
        PetscCall(Alloc(&c->dmout[ax][sl], cap, (const double *)NULL, c->stream));
        for (int b = 0; b < 2; b++) SweepCallCUDA(cudaMallocHost((void **)&c->hin[ax][sl][b], cap * sizeof(double)));
      }
      PetscCall(PetscMalloc1((size_t)c->nkb * c->nch, &c->rout[ax]));
      for (int b = 0; b < c->nkb; b++) {
        const int o0 = c->kb[b].oct[0];
        for (int ch = 0; ch < c->nch; ch++) c->rout[ax][b * c->nch + ch] = MPI_REQUEST_NULL;
        if (P->nbr[2 * ax + 3 - ((o0 >> (1 + ax)) & 1)] >= 0) SweepCallCUDA(cudaMallocHost((void **)&c->hout[ax][b], sizeof(double) * c->kb[b].n * ng * (ax ? P->ny : P->nz) * P->nx * na));
      }
    }
    if (P->chunk < P->nx) PetscCall(Alloc(&c->pxs, (size_t)8 * ng * P->ny * P->nz * na, (const double *)NULL, c->stream));
    PetscCall(KBAPeerSetup(P, c, maxn));
  }
  c->K = (int)PetscMax(1, 256 / na);
#define SWEEP_PICK(KER, J_, T_, B_) (J_ == 1 ? KER<1, T_, B_> : (J_ == 2 ? KER<2, T_, B_> : KER<4, T_, B_>))
  if (na > 256) {
    c->diag  = SWEEP_PICK(DiagKernel, c->J, 512, 1);
    c->pipek = SWEEP_PICK(PipeKernel, c->J, 512, 1);
  } else if (c->minb == 2) {
    c->diag  = SWEEP_PICK(DiagKernel, c->J, 256, 2);
    c->pipek = SWEEP_PICK(PipeKernel, c->J, 256, 2);
  } else {
    c->diag  = SWEEP_PICK(DiagKernel, c->J, 256, 4);
    c->pipek = SWEEP_PICK(PipeKernel, c->J, 256, 4);
  }
#undef SWEEP_PICK
  c->smem = sizeof(double) * ((size_t)c->K * c->J * SWEEP_C * (na | 1) + (size_t)SWEEP_SLOTS(c->J) * c->K * na) + (sizeof(long long) + 2 * sizeof(int)) * c->K * c->J;
  SweepCallCUDA(cudaFuncSetAttribute(c->diag, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->smem));
  SweepCallCUDA(cudaFuncSetAttribute(c->pipek, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->smem));
  if (c->sched == SWEEP_PIPELINED) { /* the tasks of each batch, diagonal by diagonal, each diagonal padded to a multiple of K */
    const PetscInt njb = (P->ny + c->J - 1) / c->J, nz = P->nz;
    int            n   = 0, *where, blocks, sms;
    Task          *t;
    size_t         cap = 0;
    for (int b = 0; b < c->nbatch; b++) cap += (size_t)(njb * nz * ng * c->batch[b].n + c->ndiag * c->K);
    PetscCall(PetscMalloc1(cap, &t));
    PetscCall(PetscMalloc1(njb * nz * ng * 8, &where)); /* the task of (line, g, oct) in its batch */
    for (int b = 0; b < c->nbatch; b++) {
      const int n0 = n;
      c->taskoff[b] = n;
      for (int sd = 0; sd < c->ndiag; sd++) {
        for (int o = 0; o < c->batch[b].n; o++)
          for (PetscInt g = 0; g < ng; g++)
            for (PetscInt kp = 0; kp < nz; kp++) {
              const PetscInt jb = sd - kp;
              if (jb < 0 || jb >= njb) continue;
              const int line                                        = (int)(jb + njb * kp);
              t[n].line                                             = line;
              t[n].g                                                = (int)g;
              t[n].oct                                              = c->batch[b].oct[o];
              t[n].upy                                              = jb > 0 ? where[((line - 1) * ng + g) * 8 + o] - n0 : -1;
              t[n].upz                                              = kp > 0 ? where[((line - njb) * ng + g) * 8 + o] - n0 : -1;
              where[(line * ng + g) * 8 + o]                        = n;
              n++;
            }
        while ((n - n0) % c->K) t[n++].line = -1; /* a block's tasks never wait on each other */
      }
    }
    c->taskoff[c->nbatch] = n;
    PetscCall(Alloc(&c->tasks, (size_t)n, t, c->stream));
    PetscCall(Alloc(&c->ticket, (size_t)c->nbatch, (const int *)NULL, c->stream));
    {
      int mx = 0;
      for (int b = 0; b < c->nbatch; b++) mx = PetscMax(mx, c->taskoff[b + 1] - c->taskoff[b]);
      PetscCall(Alloc(&c->progress, (size_t)mx, (const int *)NULL, c->stream));
    }
    SweepCallCUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, c->pipek, c->K * (int)na, c->smem));
    SweepCallCUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->dev));
    c->pgrid = PetscMax(1, blocks) * sms;
    SweepCallCUDA(cudaStreamSynchronize(c->stream));
    PetscCall(PetscFree(t));
    PetscCall(PetscFree(where));
  }
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

/*
  The sweep across ranks (Koch, Baker & Alcouffe, as the CPU backend): per
  octant batch, per chunk of x cells, the faces entering the block from the
  ranks upstream in y and z are received (the next chunk's receive posted
  once this one's arrive), go up to the GPU, the chunk is swept by
  diagonals, and the faces leaving it come down and are sent, each into its
  own place of a face buffer of its batch, waited on at the sweep's end.
  The batches of one level (they share no data: SweepOctantOrder()) each
  run on a stream of their own, and the host starts a batch's next chunk as
  soon as its faces are in and its last chunk is done, taking the batches in
  this rank's order (fewest ranks upstream first): so while a batch waits on
  its upstream ranks the others keep the GPU busy, and once the pipeline is
  full the launches of all the level's octants run at once, as on one rank
  (SNAP's interleaved octants, on the GPU).  A batch of a later level starts
  once every batch of the earlier ones is done (the reflective faces).  The
  host never blocks on MPI, so no order of arrival deadlocks.  Between the
  ranks of one host (KBAPeerSetup()) a chunk's faces are copied GPU to GPU
  into the receiver's buffer for that chunk's parity, and a message of no
  data says they are in; the receiver answers with another once the chunk
  is swept, before the buffer is filled again (two chunks later).  Other
  faces are staged through page-locked host memory (MPI need not be
  CUDA-aware).
*/
static PetscErrorCode SweepKBA(const SweepProblem *P, SweepCUDA *c, SweepArgs *k)
{
  const PetscInt cw = P->chunk, nch = c->nch, na = P->Q.nang, ng = P->ng;
  int            next[16], fly[16], left = c->nkb; /* next chunk to start, the chunk in flight (-1: none) */
  PetscBool      posted[16], waiting = PETSC_FALSE; /* the first chunk's receives posted; the GPU idle */
  PetscLogDouble tw = 0;
  const int(*up)[2] = c->up, (*dn)[2] = c->dn;

  PetscFunctionBegin;
  for (int f = 0; f < 6; f++) k->msgf[f] = P->nbr[f] >= 0;
  k->pxs = c->pxs;
  SweepCallCUDA(cudaEventRecord(c->kready, c->stream)); /* the source is computed */
  for (int sl = 0; sl < c->nslot; sl++) SweepCallCUDA(cudaStreamWaitEvent(c->kst[sl], c->kready, 0));
  c->kwait = 0;
  for (int bi = 0; bi < c->nkb; bi++) {
    next[bi]   = 0;
    fly[bi]    = -1;
    posted[bi] = PETSC_FALSE;
    for (int ax = 0; ax < 2; ax++) /* the notices that our chunks' buffers downstream are free */
      if (c->ipcout[ax][bi])
        for (int ch = 0; ch < nch; ch++) PetscCallMPI(MPI_Irecv(NULL, 0, MPIU_REAL, dn[bi][ax], KBAAckTag(c->kbid[bi], ch, nch, ax), P->comm, &c->rack[ax][bi * nch + ch]));
  }
  while (left) {
    PetscBool moved = PETSC_FALSE, busy = PETSC_FALSE;
    for (int bi = 0; bi < c->nkb; bi++) {
      const OctBatch *b  = &c->kb[bi];
      const int       sl = c->kslot[bi];
      if (fly[bi] >= 0) { /* the chunk in flight: its faces down? then send them */
        const PetscInt i0 = fly[bi] * cw, i1 = PetscMin(P->nx, i0 + cw);
        cudaError_t    e  = cudaEventQuery(c->kev[bi]);
        if (e == cudaErrorNotReady) continue;
        SweepCallCUDA(e);
        for (int ax = 0; ax < 2; ax++) {
          const PetscMPIInt cnt = c->ipcout[ax][bi] ? 0 : (PetscMPIInt)((size_t)b->n * ng * (ax ? P->ny : P->nz) * (i1 - i0) * na); /* GPU to GPU: the faces are there */
          if (dn[bi][ax] >= 0) PetscCallMPI(MPI_Isend(cnt ? c->hout[ax][bi] + (size_t)b->n * ng * (ax ? P->ny : P->nz) * i0 * na : NULL, cnt, MPIU_REAL, dn[bi][ax], KBATag(c->kbid[bi], fly[bi], nch, ax), P->comm, &c->rout[ax][bi * nch + fly[bi]]));
          if (c->ipcin[ax][bi]) PetscCallMPI(MPI_Isend(NULL, 0, MPIU_REAL, up[bi][ax], KBAAckTag(c->kbid[bi], fly[bi], nch, ax), P->comm, &c->sack[ax][bi * nch + fly[bi]])); /* its buffer is free */
        }
        fly[bi] = -1;
        moved   = PETSC_TRUE;
        if (next[bi] == nch) left--;
      }
      if (next[bi] == nch) continue;
      {
        PetscBool ready = PETSC_TRUE;
        for (int bj = 0; bj < c->nkb && ready; bj++) /* the earlier levels done (their slots free) */
          if (c->klev[bj] < c->klev[bi] && (next[bj] < nch || fly[bj] >= 0)) ready = PETSC_FALSE;
        if (!ready) continue;
        if (!posted[bi]) { /* the first chunk's faces */
          for (int ax = 0; ax < 2; ax++)
            if (up[bi][ax] >= 0) PetscCallMPI(MPI_Irecv(c->ipcin[ax][bi] ? NULL : c->hin[ax][sl][0], c->ipcin[ax][bi] ? 0 : (PetscMPIInt)(b->n * ng * (ax ? P->ny : P->nz) * PetscMin(cw, P->nx) * na), MPIU_REAL, up[bi][ax], KBATag(c->kbid[bi], 0, nch, ax), P->comm, &c->rin[ax][sl][0]));
          posted[bi] = PETSC_TRUE;
        }
        for (int ax = 0; ax < 2 && ready; ax++)
          if (c->ipcout[ax][bi] && next[bi] >= 2) { /* the buffer downstream that this chunk fills is free */
            int flag;
            PetscCallMPI(MPI_Test(&c->rack[ax][bi * nch + next[bi] - 2], &flag, MPI_STATUS_IGNORE));
            ready = flag ? PETSC_TRUE : PETSC_FALSE;
          }
        for (int ax = 0; ax < 2 && ready; ax++)
          if (up[bi][ax] >= 0) {
            int flag;
            PetscCallMPI(MPI_Test(&c->rin[ax][sl][next[bi] & 1], &flag, MPI_STATUS_IGNORE));
            ready = flag ? PETSC_TRUE : PETSC_FALSE;
          }
        if (!ready) continue;
      }
      { /* the chunk: the next receive, the faces up, the diagonals, the faces down */
        const PetscInt ch = next[bi], i0 = ch * cw, i1 = PetscMin(P->nx, i0 + cw), par = ch & 1;
        SweepArgs      kk = *k;
        for (int q = 0; q < b->n; q++) kk.bo[b->oct[q]] = q;
        for (int ax = 0; ax < 2; ax++) {
          const size_t cnt = (size_t)b->n * ng * (ax ? P->ny : P->nz) * (i1 - i0) * na;
          kk.min[1 + ax]   = c->ipcin[ax][bi] ? c->rbuf[ax][bi][par] : c->dmin[ax][sl];
          kk.mout[1 + ax]  = c->dmout[ax][sl];
          if (up[bi][ax] < 0) continue;
          if (ch + 1 < nch) PetscCallMPI(MPI_Irecv(c->ipcin[ax][bi] ? NULL : c->hin[ax][sl][!par], c->ipcin[ax][bi] ? 0 : (PetscMPIInt)((size_t)b->n * ng * (ax ? P->ny : P->nz) * (PetscMin(P->nx, i1 + cw) - i1) * na), MPIU_REAL, up[bi][ax], KBATag(c->kbid[bi], ch + 1, nch, ax), P->comm, &c->rin[ax][sl][!par]));
          if (!c->ipcin[ax][bi]) SweepCallCUDA(cudaMemcpyAsync(c->dmin[ax][sl], c->hin[ax][sl][par], cnt * sizeof(double), cudaMemcpyHostToDevice, c->kst[sl]));
        }
        kk.i0 = (int)i0;
        kk.i1 = (int)i1;
        for (int s = 0; s < c->ndiag; s++) {
          const int       nl    = c->lineoff[s + 1] - c->lineoff[s];
          const long long items = (long long)nl * ng * b->n;
          c->diag<<<(unsigned)((items + c->K - 1) / c->K), c->K * kk.nang, c->smem, c->kst[sl]>>>(kk, *b, c->lines + c->lineoff[s], nl, c->K);
          SweepCallCUDA(cudaGetLastError());
        }
        for (int ax = 0; ax < 2; ax++) {
          const size_t bytes = sizeof(double) * b->n * ng * (ax ? P->ny : P->nz) * (i1 - i0) * na;
          if (c->ipcout[ax][bi]) SweepCallCUDA(cudaMemcpyAsync(c->peer[ax][bi][par], c->dmout[ax][sl], bytes, cudaMemcpyDeviceToDevice, c->kst[sl]));
          else if (dn[bi][ax] >= 0) SweepCallCUDA(cudaMemcpyAsync(c->hout[ax][bi] + (size_t)b->n * ng * (ax ? P->ny : P->nz) * i0 * na, c->dmout[ax][sl], bytes, cudaMemcpyDeviceToHost, c->kst[sl]));
        }
        SweepCallCUDA(cudaEventRecord(c->kev[bi], c->kst[sl]));
        fly[bi] = (int)ch;
        next[bi]++;
        moved = PETSC_TRUE;
      }
    }
    if (!moved) /* MPI moves large messages (rendezvous) only while the ranks call it */
      for (int ax = 0; ax < 2; ax++) {
        int flag;
        if (c->rout[ax]) PetscCallMPI(MPI_Testall((PetscMPIInt)(c->nkb * nch), c->rout[ax], &flag, MPI_STATUSES_IGNORE));
      }
    for (int bi = 0; bi < c->nkb; bi++) busy = (PetscBool)(busy || fly[bi] >= 0);
    if (!busy != waiting && (left || waiting)) { /* the GPU waits on other ranks from now, or no longer */
      PetscLogDouble t;
      PetscCall(PetscTime(&t));
      if (!busy) PetscCall(PetscLogEventBegin(MATSWEEP_KBAWait, 0, 0, 0, 0));
      else PetscCall(PetscLogEventEnd(MATSWEEP_KBAWait, 0, 0, 0, 0));
      if (busy) c->kwait += t - tw;
      tw      = t;
      waiting = (PetscBool)!busy;
    }
  }
  if (waiting) PetscCall(PetscLogEventEnd(MATSWEEP_KBAWait, 0, 0, 0, 0)); /* not reached: the last chunk was in flight */
  for (int sl = 0; sl < c->nslot; sl++) { /* the moments' sum after every batch */
    SweepCallCUDA(cudaEventRecord(c->kjoin[sl], c->kst[sl]));
    SweepCallCUDA(cudaStreamWaitEvent(c->stream, c->kjoin[sl], 0));
  }
  /* the sends are waited on only now: a rank waiting on a send of a batch whose receiver is still busy with
     others (that may wait on this rank) could deadlock once messages are too large to be sent eagerly */
  for (int ax = 0; ax < 2; ax++) {
    if (c->rout[ax]) PetscCallMPI(MPI_Waitall((PetscMPIInt)(c->nkb * nch), c->rout[ax], MPI_STATUSES_IGNORE));
    if (c->rack[ax]) PetscCallMPI(MPI_Waitall((PetscMPIInt)(c->nkb * nch), c->rack[ax], MPI_STATUSES_IGNORE));
    if (c->sack[ax]) PetscCallMPI(MPI_Waitall((PetscMPIInt)(c->nkb * nch), c->sack[ax], MPI_STATUSES_IGNORE));
  }
  PetscFunctionReturn(0);
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
  k.fx = c->fx, k.fy = c->fy, k.fz = c->fz, k.phio = c->phio, k.sx = c->sx, k.sy = c->sy, k.sz = c->sz, k.nphi = P->nphi;
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
  k.i0 = 0;
  k.i1 = k.nx;
  if (c->kba) PetscCall(SweepKBA(P, c, &k));
  else if (c->sched == SWEEP_TILES) {
    const int G = !c->tfast || k.fixup || k.qang || k.cm > 1; /* the general instance */
    for (int b = 0; b < c->nbatch; b++)
      for (int d = 0; d < c->ntdiag; d++) {
        const int nt = c->tileoff[d + 1] - c->tileoff[d];
        c->tile[G]<<<(unsigned)(nt * c->batch[b].n * ((P->ng + c->GB - 1) / c->GB)), c->GB * k.nang, c->tsmem, c->stream>>>(k, c->batch[b], c->tiles + c->tileoff[d], nt, c->GB);
        SweepCallCUDA(cudaGetLastError());
      }
  }
  else if (c->sched == SWEEP_PIPELINED) {
    SweepCallCUDA(cudaMemsetAsync(c->ticket, 0, sizeof(int) * c->nbatch, c->stream));
    for (int b = 0; b < c->nbatch; b++) {
      const int nt = c->taskoff[b + 1] - c->taskoff[b];
      SweepCallCUDA(cudaMemsetAsync(c->progress, 0, sizeof(int) * nt, c->stream));
      c->pipek<<<(unsigned)PetscMin(c->pgrid, nt / c->K), c->K * k.nang, c->smem, c->stream>>>(k, c->tasks + c->taskoff[b], nt / c->K, c->K, c->ticket + b, c->progress);
      SweepCallCUDA(cudaGetLastError());
    }
  } else
    for (int b = 0; b < c->nbatch; b++)
      for (int s = 0; s < c->ndiag; s++) {
        const int       nl    = c->lineoff[s + 1] - c->lineoff[s];
        const long long items = (long long)nl * P->ng * c->batch[b].n;
        c->diag<<<(unsigned)((items + c->K - 1) / c->K), c->K * k.nang, c->smem, c->stream>>>(k, c->batch[b], c->lines + c->lineoff[s], nl, c->K);
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
  if (c->sched == SWEEP_TILES) PetscCall(PetscViewerASCIIPrintf(v, "  CUDA: GPU %d, tiles of %d x %d x %d cells: %d launches x %d octant batches, %d groups x %" PetscInt_FMT " angles a block\n", c->dev, TILE_X, TILE_Y, c->TZ, c->ntdiag, c->nbatch, c->GB, sw->P.Q.nang));
  else if (c->sched == SWEEP_PIPELINED) PetscCall(PetscViewerASCIIPrintf(v, "  CUDA: GPU %d, line march, pipelined: %d lines a thread, %d launches (octant batches) of %d blocks, %d line groups x %" PetscInt_FMT " angles a block\n", c->dev, c->J, c->nbatch, c->pgrid, c->K, sw->P.Q.nang));
  else PetscCall(PetscViewerASCIIPrintf(v, "  CUDA: GPU %d, line march, by diagonals: %d lines a thread, %d launches x %d octant batches, %d line groups x %" PetscInt_FMT " angles a block\n", c->dev, c->J, c->ndiag, c->nbatch, c->K, sw->P.Q.nang));
  if (sw->nsweeps && sw->last_device_s > 0) PetscCall(PetscViewerASCIIPrintf(v, "  CUDA: the last sweep's kernels %.4g s (grind time %.4g ns)\n", (double)sw->last_device_s, 1e9 * (double)sw->last_device_s / ((double)sw->P.ncells * sw->P.Q.ndir * sw->P.ng)));
  if (c->kba) {
    int         nl = 0, ni = 0;
    PetscMPIInt rank;
    PetscCallMPI(MPI_Comm_rank(sw->P.comm, &rank));
    for (int ax = 0; ax < 2; ax++)
      for (int b = 0; b < c->nkb; b++) {
        nl += (c->up[b][ax] >= 0) + (c->dn[b][ax] >= 0);
        ni += c->ipcin[ax][b] + c->ipcout[ax][b];
      }
    PetscCall(PetscViewerASCIIPushSynchronized(v));
    PetscCall(PetscViewerASCIISynchronizedPrintf(v, "  [%d] CUDA across ranks: faces of %d of %d links (batch, axis, direction) GPU to GPU (CUDA IPC), the others through host memory", (int)rank, ni, nl));
    if (sw->nsweeps) PetscCall(PetscViewerASCIISynchronizedPrintf(v, "; the last sweep's GPU idle, waiting on other ranks, %.4g s", (double)c->kwait));
    PetscCall(PetscViewerASCIISynchronizedPrintf(v, "\n"));
    PetscCall(PetscViewerFlush(v));
    PetscCall(PetscViewerASCIIPopSynchronized(v));
  }
  PetscFunctionReturn(0);
}

struct _SweepBackendOps SweepBackendCUDA = {"cuda", SweepCUDASetup, SweepCUDASweep, SweepCUDADestroy, SweepCUDAView};
