/*
  M2L on the GPU: every (target box <- source box) pair of all levels in one
  launch, then a deterministic per-box sum.

  The pairs are the CSR list far[] of the plan, ordered by target box.  A warp
  takes 32 consecutive pairs (a chunk): it stages their 32 multipoles in shared
  memory (coalesced), each lane translates one pair, and the contributions of
  each run of pairs with the same target box are summed in lane order into one
  partial.  A second kernel sums the partials of each box in order.  No atomics:
  the result does not depend on scheduling.

  The translation is FMMM2L (expansions.h): T_k = A_k (-alpha)^k, then
  y = C T with the constant p x p matrix C(l+k-1, k-1), then B_l = beta^l y_l.
  For p <= FMMCUDA_PFAST the kernel is unrolled for a compile-time order PP >= p
  (p rounded up to even; the extra T_k are zero): T lives in registers and C is
  read from constant memory with compile-time offsets, so the product is
  2 DFMA per (l, k) with constant-bank operands.  Higher orders call FMMM2L.

  The tensor-core variant (default for p <= FMMCUDA_PFAST; -mat_fmm_cuda_m2l
  fma selects the unrolled one) forms the same product for a whole chunk as
  one matrix product Y = C [T_1 .. T_32] on the FP64 tensor cores (WMMA
  m8n8k4, C padded to KP x KP, KP = p rounded up to 8, held in registers by a
  persistent warp), with re and im parts of the 32 T vectors as 64 columns.

  On Hopper (sm_90, in a build for it) with p + 1 <= 32 the register variant M2LRegKernel replaces
  it (see there): mma.sync m16n8k8 FP64, every operand in registers, A_0 and the
  B_0 sum folded into the product.
*/
#include "fmmcuda.h"
#include "fmm/expansions.h"
#include <mma.h>

#define FULL_MASK 0xffffffffu
#define M2L_WARPS 4

__constant__ double cM2L[FMMCUDA_PFAST * FMMCUDA_PFAST]; /* cM2L[(l-1)*PFAST + k-1] = C(l+k-1, k-1) */
__constant__ FMMCUDAInvTable cInv = FMMCUDAInvMake();  /* 1/l */

static bool M2LRegCode(int);

/* the order KP of the register tensor-core kernel (p + 1 rounded up to 8), or 0 where
   it does not run: tensor cores off, p + 1 > 32 (its operands would not fit in
   registers), or no code for sm_90 on this GPU (M2LRegCode) */
static int M2LRegOrder(const FMM_CUDA *c)
{
  if (!c->kp || c->p + 1 > 32 || !M2LRegCode(c->dev)) return 0;
  return (int)(8 * ((c->p + 8) / 8));
}

/* the tables of the expansions at order p: the binomial table and the p x p
   M2L matrix of the CPU backend (FMMTables, so the same rounded values for
   large n) for M2M, L2L and the generic M2L, and the padded matrix of the
   tensor-core M2L; each kept once per process, device and order
   (FMMCUDATableKeep).  cM2L, the same for every matrix, is set once per
   process and device (the copy waits for the device). */
PetscErrorCode FMMCUDAM2LSetup(FMM_CUDA *c)
{
  const int                nb = 2 * FMMCUDA_PFAST + 1, kr = M2LRegOrder(c), p = (int)c->p;
  const char              *padname = kr ? "the M2L matrix of the register tensor-core kernel" : "the M2L matrix of the WMMA kernel";
  const PetscInt           padkey  = kr ? p : c->kp; /* the WMMA matrix depends on kp only */
  static unsigned long long done   = 0;              /* bit dev: cM2L is set on device dev */
  double                  *binom, m2l[FMMCUDA_PFAST * FMMCUDA_PFAST], inv[FMMCUDA_PFAST + 1];

  PetscFunctionBegin;
  c->binom  = (double *)FMMCUDATableFind(c->dev, "the binomial table", p);
  c->m2l    = (double *)FMMCUDATableFind(c->dev, "the M2L matrix", p);
  c->m2lpad = c->kp ? (double *)FMMCUDATableFind(c->dev, padname, padkey) : NULL;
  if (c->binom && c->m2l && (c->m2lpad || !c->kp) && c->dev < 64 && (done >> c->dev & 1)) PetscFunctionReturn(0);
  if (!c->binom || !c->m2l) { /* at order p */
    double *pb, *pm;
    PetscCall(PetscCalloc2((2 * p + 1) * (2 * p + 1), &pb, p * p, &pm));
    FMMTables(p, pb, pm);
    if (!c->binom) PetscCall(FMMCUDATableKeep(c->dev, "the binomial table", p, pb, sizeof(double) * (2 * p + 1) * (2 * p + 1), (void **)&c->binom));
    if (!c->m2l) PetscCall(FMMCUDATableKeep(c->dev, "the M2L matrix", p, pm, sizeof(double) * p * p, (void **)&c->m2l));
    PetscCall(PetscFree2(pb, pm));
  }
  PetscCall(PetscCalloc1(nb * nb, &binom)); /* at FMMCUDA_PFAST */
  FMMTables(FMMCUDA_PFAST, binom, m2l);
  FMMInverses(FMMCUDA_PFAST, inv);
  PetscCall(PetscFree(binom));
  if (c->dev >= 64 || !(done >> c->dev & 1)) {
    FMMCallCUDA(cudaMemcpyToSymbol(cM2L, m2l, sizeof(m2l)));
    if (c->dev < 64) done |= 1ull << c->dev;
  }
  if (c->kp && !c->m2lpad) {
    const size_t n = kr ? (size_t)kr * kr : (size_t)c->kp * c->kp;
    double      *pad;
    PetscCall(PetscCalloc1(n, &pad));
    if (kr) { /* the (p+1) x (p+1) matrix of the register kernel, zero-padded to kr x kr (see M2LRegKernel) */
      for (PetscInt l = 0; l <= c->p; l++)
        for (PetscInt k = 0; k <= c->p; k++) pad[l * kr + k] = l == 0 ? (k == 0 ? 0.0 : 1.0) : (k == 0 ? -inv[l] : m2l[(l - 1) * FMMCUDA_PFAST + k - 1]);
    } else { /* the kp x kp corner for the WMMA kernel */
      for (PetscInt l = 0; l < c->kp; l++)
        for (PetscInt k = 0; k < c->kp; k++) pad[l * c->kp + k] = m2l[l * FMMCUDA_PFAST + k];
    }
    PetscCall(FMMCUDATableKeep(c->dev, padname, padkey, pad, sizeof(double) * n, (void **)&c->m2lpad));
    PetscCall(PetscFree(pad));
  }
  PetscFunctionReturn(0);
}

/* one pair, unrolled for order PP >= p: reads the multipole from row, writes the contribution over it */
template <int PP>
__device__ __forceinline__ void M2LPairFast(int p, double *row, double z0x, double z0y, double sm, double sl)
{
  double       tr[PP], ti[PP];
  const double iz = 1.0 / (z0x * z0x + z0y * z0y);
  const double ar = -sm * z0x * iz, ai = sm * z0y * iz; /* -alpha = -sm/z0 */
  const double br = sl * z0x * iz, bi = -sl * z0y * iz; /* beta = sl/z0 */
  const double A0 = row[0];
  double       pr = 1.0, pi = 0.0, s0r = 0.0, s0i = 0.0;
#pragma unroll
  for (int k = 1; k <= PP; k++) {
    double t = pr * ar - pi * ai;
    pi       = pr * ai + pi * ar;
    pr       = t;
    double xr = k <= p ? row[k] : 0.0, xi = k <= p ? row[p + 1 + k] : 0.0;
    tr[k - 1] = xr * pr - xi * pi;
    ti[k - 1] = xr * pi + xi * pr;
    s0r += tr[k - 1];
    s0i += ti[k - 1];
  }
  row[0]     = A0 * 0.5 * log(1.0 / iz) + s0r;
  row[p + 1] = s0i;
  pr         = 1.0;
  pi         = 0.0;
#pragma unroll
  for (int l = 1; l <= PP; l++) {
    double yr = -A0 * cInv.v[l], yi = 0.0;
#pragma unroll
    for (int k = 0; k < PP; k++) {
      const double cc = cM2L[(l - 1) * FMMCUDA_PFAST + k];
      yr += cc * tr[k];
      yi += cc * ti[k];
    }
    double t = pr * br - pi * bi; /* beta^l */
    pi       = pr * bi + pi * br;
    pr       = t;
    if (l <= p) {
      row[l]         = yr * pr - yi * pi;
      row[p + 1 + l] = yr * pi + yi * pr;
    }
  }
}

/* one coefficient over the pairs r < nrows of a chunk (value of pair r at
   v[r * rstride]): the sum of each run of equal target box, in pair order, to
   out[seg * ne] for the run's partial seg (heads: the runs' first pairs) */
__device__ __forceinline__ void M2LRunSums(const double *v, int rstride, unsigned heads, int nrows, int ne, double *out)
{
  double acc = 0.0;
  int    seg = -1;
  for (int r = 0; r < nrows; r++) {
    if ((heads >> r) & 1u) {
      if (seg >= 0) out[(PetscInt)seg * ne] = acc;
      seg++;
      acc = 0.0;
    }
    acc += v[r * rstride];
  }
  out[(PetscInt)seg * ne] = acc;
}

template <int PP>
__global__ void __launch_bounds__(32 * M2L_WARPS) M2LChunkKernel(PetscInt npairs, int p, int ne, int stride, const PetscInt *far, const PetscInt *pairtgt, const PetscInt *chunkpart, const double *cx, const double *cy, const double *scale, const double *mpole, const double *m2l, double *part)
{
  FMMWaitPrior();
  extern __shared__ double sh[];
  const int      lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const PetscInt chunk = (PetscInt)blockIdx.x * M2L_WARPS + w, g0 = chunk * 32;
  if (g0 >= npairs) return; /* whole warp */
  const int nrows = npairs - g0 < 32 ? (int)(npairs - g0) : 32;
  double   *rows  = sh + (size_t)w * 32 * stride;
  PetscInt  s = 0, t = -1;
  if (lane < nrows) {
    s = far[g0 + lane];
    t = pairtgt[g0 + lane];
  }
  /* stage the multipoles: row r <- mpole of the source of pair g0 + r; 8 rows of loads in flight */
  constexpr int H = PP ? 3 : 5; /* ne <= 32 H */
  for (int r0 = 0; r0 < nrows; r0 += 8) {
    double v[8][H];
#pragma unroll
    for (int rr = 0; rr < 8; rr++) {
      const PetscInt sr = __shfl_sync(FULL_MASK, s, (r0 + rr) & 31);
#pragma unroll
      for (int h = 0; h < H; h++) v[rr][h] = (r0 + rr < nrows && lane + 32 * h < ne) ? mpole[sr * ne + lane + 32 * h] : 0.0;
    }
#pragma unroll
    for (int rr = 0; rr < 8; rr++)
#pragma unroll
      for (int h = 0; h < H; h++)
        if (r0 + rr < nrows && lane + 32 * h < ne) rows[(r0 + rr) * stride + lane + 32 * h] = v[rr][h];
  }
  __syncwarp();
  if (lane < nrows) {
    double *row = rows + lane * stride;
    double  z0x = cx[s] - cx[t], z0y = cy[s] - cy[t];
    if constexpr (PP > 0) M2LPairFast<PP>(p, row, z0x, z0y, scale[s], scale[t]);
    else {
      double A[2 * (FMMCUDA_PMAX + 1)], B[2 * (FMMCUDA_PMAX + 1)], work[2 * FMMCUDA_PMAX];
      for (int k = 0; k < ne; k++) {
        A[k] = row[k];
        B[k] = 0.0;
      }
      FMMM2L(p, m2l, z0x, z0y, scale[s], scale[t], A, B, work);
      for (int k = 0; k < ne; k++) row[k] = B[k];
    }
  }
  __syncwarp();
  /* runs of equal target: heads are the first pair of each run in this chunk */
  PetscInt       tprev = __shfl_up_sync(FULL_MASK, t, 1);
  const unsigned heads = __ballot_sync(FULL_MASK, lane < nrows && (lane == 0 || t != tprev));
  const PetscInt pbase = chunkpart[chunk];
  for (int col = lane; col < ne; col += 32) M2LRunSums(rows + col, stride, heads, nrows, ne, part + pbase * ne + col);
}

/* local[t] = sum of the partials of box t, in order (zero for boxes without far field) */
__global__ void M2LSumKernel(PetscInt first, PetscInt nboxes, int ne, const PetscInt *tpart, const double *part, double *local)
{
  FMMWaitPrior();
  const PetscInt64 idx = (PetscInt64)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (PetscInt64)nboxes * ne) return;
  const PetscInt t = first + (PetscInt)(idx / ne), col = (PetscInt)(idx % ne);
  double         acc = 0.0;
  for (PetscInt k = tpart[t]; k < tpart[t + 1]; k++) acc += part[k * ne + col];
  local[(PetscInt64)t * ne + col] = acc;
}

/* sums of runs of equal target box over the 32 pairs of a chunk: column col of
   pair r is at src(col)[2 r] (TC layout) or rows[r*stride + col] (FMA layout) */
#define M2L_TC_WARPS 4
#define M2L_TC_LDT   66 /* 64 columns + 2: a multiple of 16 bytes, as WMMA wants */
/* doubles of shared memory per warp: KP + 1 rows, rounded to 32 bytes (WMMA pointers) */
#define M2L_TC_WARPMEM(KP) ((((KP) + 1) * M2L_TC_LDT + 3) & ~3)

template <int KP>
__global__ void __launch_bounds__(32 * M2L_TC_WARPS) M2LTensorKernel(PetscInt nchunks, PetscInt npairs, int p, int ne, const PetscInt *far, const PetscInt *pairtgt, const PetscInt *chunkpart, const double *cx, const double *cy, const double *scale, const double *mpole, const double *cmat, double *part)
{
  FMMWaitPrior();
  using namespace nvcuda;
  extern __shared__ __align__(128) double sh[];
  constexpr int  LDT  = M2L_TC_LDT, MT = KP / 8, KT = KP / 4;
  const int      lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  double        *T    = sh + (size_t)w * M2L_TC_WARPMEM(KP); /* rows 0..KP-1: T_k then y_l; row KP: B_0 terms */
  const PetscInt nw   = (PetscInt)gridDim.x * M2L_TC_WARPS;

  wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> af[MT][KT];
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int kk = 0; kk < KT; kk++) wmma::load_matrix_sync(af[i][kk], cmat + 8 * i * KP + 4 * kk, KP);

  for (PetscInt chunk = (PetscInt)blockIdx.x * M2L_TC_WARPS + w; chunk < nchunks; chunk += nw) {
    const PetscInt g0    = chunk * 32;
    const int      nrows = npairs - g0 < 32 ? (int)(npairs - g0) : 32;
    PetscInt       s = 0, t = -1;
    double         A0 = 0.0, br = 0.0, bi = 0.0;
    if (lane < nrows) {
      s = far[g0 + lane];
      t = pairtgt[g0 + lane];
    }
    /* A_k of pair r into column 2r (re) / 2r + 1 (im) of row k-1: coalesced loads,
       8 rows (24 loads per lane) in flight at a time */
    for (int r0 = 0; r0 < nrows; r0 += 8) {
      double v[8][3];
#pragma unroll
      for (int rr = 0; rr < 8; rr++) {
        const PetscInt sr = __shfl_sync(FULL_MASK, s, (r0 + rr) & 31);
#pragma unroll
        for (int h = 0; h < 3; h++) {
          const int col = lane + 32 * h;
          v[rr][h]      = (r0 + rr < nrows && col < ne) ? mpole[sr * ne + col] : 0.0;
        }
      }
#pragma unroll
      for (int rr = 0; rr < 8; rr++)
#pragma unroll
        for (int h = 0; h < 3; h++) {
          const int col = lane + 32 * h, r = r0 + rr;
          if (r < nrows && col >= 1 && col <= p) T[(col - 1) * LDT + 2 * r] = v[rr][h];
          else if (r < nrows && col >= p + 2 && col < ne) T[(col - p - 2) * LDT + 2 * r + 1] = v[rr][h];
        }
    }
    __syncwarp();
    /* T_k = A_k (-alpha)^k in place */
    if (lane < nrows) {
      const double z0x = cx[s] - cx[t], z0y = cy[s] - cy[t], sm = scale[s], sl = scale[t];
      const double iz = 1.0 / (z0x * z0x + z0y * z0y);
      const double ar = -sm * z0x * iz, ai = sm * z0y * iz;
      double       pr = 1.0, pi = 0.0, s0r = 0.0, s0i = 0.0;
      br = sl * z0x * iz;
      bi = -sl * z0y * iz;
      A0 = mpole[s * ne];
#pragma unroll
      for (int k = 1; k <= KP; k++) {
        double *x = T + (k - 1) * LDT + 2 * lane;
        double  v = pr * ar - pi * ai;
        pi        = pr * ai + pi * ar;
        pr        = v;
        double xr = k <= p ? x[0] : 0.0, xi = k <= p ? x[1] : 0.0, tr = xr * pr - xi * pi, ti = xr * pi + xi * pr;
        x[0] = tr;
        x[1] = ti;
        s0r += tr;
        s0i += ti;
      }
      T[KP * LDT + 2 * lane]     = A0 * 0.5 * log(1.0 / iz) + s0r;
      T[KP * LDT + 2 * lane + 1] = s0i;
    } else {
#pragma unroll
      for (int k = 0; k < KP; k++) T[k * LDT + 2 * lane] = T[k * LDT + 2 * lane + 1] = 0.0;
    }
    __syncwarp();
    /* Y = C T, column block by column block; Y overwrites the block of T it consumed */
#pragma unroll 1
    for (int j = 0; j < 8; j++) {
      wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc[MT];
#pragma unroll
      for (int i = 0; i < MT; i++) wmma::fill_fragment(acc[i], 0.0);
#pragma unroll
      for (int kk = 0; kk < KT; kk++) {
        wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::row_major> bf;
        wmma::load_matrix_sync(bf, T + 4 * kk * LDT + 8 * j, LDT);
#pragma unroll
        for (int i = 0; i < MT; i++) wmma::mma_sync(acc[i], af[i][kk], bf, acc[i]);
      }
      __syncwarp();
#pragma unroll
      for (int i = 0; i < MT; i++) wmma::store_matrix_sync(T + 8 * i * LDT + 8 * j, acc[i], LDT, wmma::mem_row_major);
    }
    __syncwarp();
    /* B_l = beta^l (y_l - A_0/l), in place */
    if (lane < nrows) {
      double pr = 1.0, pi = 0.0;
      for (int l = 1; l <= p; l++) {
        double *y  = T + (l - 1) * LDT + 2 * lane;
        double  yr = y[0] - A0 * cInv.v[l], yi = y[1], v = pr * br - pi * bi;
        pi         = pr * bi + pi * br;
        pr         = v;
        y[0]       = yr * pr - yi * pi;
        y[1]       = yr * pi + yi * pr;
      }
    }
    __syncwarp();
    /* runs of equal target: partial sums in pair order */
    PetscInt       tprev = __shfl_up_sync(FULL_MASK, t, 1);
    const unsigned heads = __ballot_sync(FULL_MASK, lane < nrows && (lane == 0 || t != tprev));
    const PetscInt pbase = chunkpart[chunk];
    for (int col = lane; col < ne; col += 32) {
      const int     l = col <= p ? col : col - p - 1;
      M2LRunSums(T + (l == 0 ? KP : l - 1) * LDT + (col > p ? 1 : 0), 2, heads, nrows, ne, part + pbase * ne + col);
    }
    __syncwarp();
  }
}

/*
  M2LRegKernel: the tensor-core M2L with the pair operands in registers.

  By count, M2LTensorKernel spends its time in shared memory rather than on the
  tensor cores: per chunk of 32 pairs the multipoles are transposed into it, T_k
  formed in it, Y stored back and scaled in it, mostly with 4-way bank
  conflicts (row stride 66 doubles), and the m8n8k4 WMMA tiles are loaded from
  it: about 2500 shared-memory wavefronts (cycles of the SM's shared-memory
  pipe) against 512 cycles of FP64 tensor work at full rate.  Here
  the product is transposed, Y^T = T^T Chat^T, so that the pairs are the rows
  of the A operand and of the result, and a lane holds the real and the
  imaginary part of the same coefficients of the same pair:

    mma.sync m16n8k8 (FP64, sm_90): rows g and g + 8 of a 16 x 8 tile are Re and
    Im of pair g of a group of 8 pairs (g = lane/4); lane t = lane%4 holds the
    coefficients k = 8j + 2t, 8j + 2t + 1 (j = 0..KP/8-1) of T, and receives
    l = 8n + 2t, 8n + 2t + 1 of Y.

  So T_k = A_k x^k (x = -alpha) and B_l = beta^l Y_l are formed in registers by
  the lane that feeds / receives them (powers x^(2t) by two selected products,
  then steps of x^8), the multipole is read straight from global memory (the 4
  lanes of a pair read 8 consecutive doubles of its row per step j), and the
  B fragments of the KP x KP matrix Chat are read from shared memory (one
  conflict-free 16-byte load per mma).  Holding Chat in registers (KP^2/32
  doubles a lane) took 232 registers a thread, so only 2 blocks (8 warps) per
  SM, and the kernel waited on mma latency; with Chat in shared memory (168
  registers, 3 blocks) it is faster.
  Chat is the (p+1) x (p+1) matrix over l, k = 0..p of
     Chat(0,0) = 0, Chat(0,k) = 1, Chat(l,0) = -1/l, Chat(l,k) = C(l+k-1, k-1),
  so that Y_0 = sum_k T_k and Y_l = -A_0/l + sum_k C(l+k-1,k-1) T_k: the
  terms of FMMM2L that are not a product are in the product too, and
  B_0 = Y_0 + A_0 log|z0|.  Besides Chat only the sums over runs of equal
  target box go through shared memory (8 pairs x 2 KP doubles a warp, written with
  conflict-free 16-byte stores): about 256 wavefronts per chunk.  They are
  added in pair order as in M2LTensorKernel: same partials, same determinism.

  A warp takes the 32 pairs of a chunk as 4 groups of 8; the multipoles of the
  next group and the box indices of the next chunk are loaded while the current
  group computes.

  The pipe that FP64 and the FP64 tensor cores share bounds the kernel, with
  3 warps a scheduler (168 registers); M2LSumKernel mostly waits on the
  partials' loads.  Measured slower:
  - warps owning whole target boxes (no partials, no M2LSumKernel), as a few
    boxes have far lists of thousands of pairs (the two-arm boxes);
  - warps owning equal ranges of pairs, only the boxes cut by a range summed
    afterwards (probably as the block's warps no longer share sources in L1;
    it also spilled);
  - the same by 128-pair segments in turn, with the multipoles staged in
    shared memory by cp.async (probably as the shared memory a block takes
    leaves a small L1);
  - four partials in flight per thread in M2LSumKernel (no gain), and
    streaming stores of the partials.
*/
#define M2L_RW 4 /* warps per block of the register kernel */

/* D += A B on one 16 x 8 x 8 FP64 tile (PTX mma.m16n8k8, sm_90; fragments as in the PTX ISA) */
__device__ __forceinline__ void Dmma16x8x8(double (&d)[4], double a0, double a1, double a2, double a3, double b0, double b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3]) : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
#else
  __trap(); /* never launched there (M2LRegOrder) */
#endif
}

struct M2LCx {
  double r, i;
};
__device__ __forceinline__ M2LCx CMul(M2LCx a, M2LCx b)
{
  return {a.r * b.r - a.i * b.i, a.r * b.i + a.i * b.r};
}
/* x^(2t), t = 0..3, from x^2 and x^4: one product */
__device__ __forceinline__ M2LCx CPow2t(int t, M2LCx x2, M2LCx x4)
{
  const M2LCx e = (t & 2) ? x4 : M2LCx{1.0, 0.0};
  return (t & 1) ? CMul(e, x2) : e;
}

/* row stride (doubles) of the matrix Chat in shared memory: rows g and g + 1
   64 bytes apart modulo 128, so the 16-byte fragment loads of a quarter warp
   (g = 0, 1; t = 0..3) hit distinct banks */
#define M2L_LDC(KP) (16 * (((KP) + 15) / 16) + 8)

template <int KP>
__global__ void __launch_bounds__(32 * M2L_RW, 3) M2LRegKernel(PetscInt nchunks, PetscInt npairs, int p, int ne, const PetscInt *far, const PetscInt *pairtgt, const PetscInt *chunkpart, const double *cx, const double *cy, const double *scale, const double *mpole, const double *chat, double *part)
{
  FMMWaitPrior();
  constexpr int NK = KP / 8, RS = 2 * KP + 8; /* k steps = n tiles; row stride of the run-sum tile (16-byte stores of a quarter warp in distinct banks) */
  extern __shared__ double m2lsh[];
  const int      lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  double        *S    = m2lsh + (threadIdx.x >> 5) * 8 * RS; /* [8 pairs][RS]: Re B_l at l, Im B_l at KP + l */
  const PetscInt nw   = (PetscInt)gridDim.x * M2L_RW;
  double        *C = m2lsh + M2L_RW * 8 * RS; /* Chat, row stride M2L_LDC(KP): B fragment (l = 8n + g, k = 8s + 2t + q) */
  for (int e = threadIdx.x; e < KP * KP; e += 32 * M2L_RW) C[(e / KP) * M2L_LDC(KP) + e % KP] = chat[e];
  __syncthreads();

  PetscInt chunk = (PetscInt)blockIdx.x * M2L_RW + (threadIdx.x >> 5), nsb = 0, ntb = -1;
  if (chunk < nchunks && chunk * 32 + lane < npairs) {
    nsb = far[chunk * 32 + lane];
    ntb = pairtgt[chunk * 32 + lane];
  }
  for (; chunk < nchunks; chunk += nw) {
    const PetscInt g0 = chunk * 32, sb = nsb, tb = ntb; /* pair lane of this chunk (tb < 0: none) */
    const int      nrows = npairs - g0 < 32 ? (int)(npairs - g0) : 32;
    nsb = 0;
    ntb = -1;
    if (chunk + nw < nchunks && (chunk + nw) * 32 + lane < npairs) { /* the next chunk's boxes, in flight meanwhile */
      nsb = far[(chunk + nw) * 32 + lane];
      ntb = pairtgt[(chunk + nw) * 32 + lane];
    }
    /* A_k of pair 8 m + g, k = 8j + 2t + q, zero beyond p */
    double ar[NK][2], ai[NK][2];
    auto   loadA = [&](int m) {
      const PetscInt sp  = __shfl_sync(FULL_MASK, sb, (8 * m + g) & 31);
      const bool     ok  = 8 * m + g < nrows;
      const double  *row = mpole + sp * ne;
#pragma unroll
      for (int j = 0; j < NK; j++)
#pragma unroll
        for (int q = 0; q < 2; q++) {
          const int k = 8 * j + 2 * t + q;
          ar[j][q]    = ok && k <= p ? row[k] : 0.0;
          ai[j][q]    = ok && k <= p ? row[p + 1 + k] : 0.0;
        }
    };
    loadA(0);
    /* pair lane: x = -alpha = -sm/z0, beta = sl/z0, log|z0| */
    double wr = 0.0, wi = 0.0, br = 0.0, bi = 0.0, lz = 0.0;
    if (lane < nrows) {
      const double z0x = cx[sb] - cx[tb], z0y = cy[sb] - cy[tb], sm = scale[sb], sl = scale[tb];
      const double iz = 1.0 / (z0x * z0x + z0y * z0y);
      wr              = -sm * z0x * iz;
      wi              = sm * z0y * iz;
      br              = sl * z0x * iz;
      bi              = -sl * z0y * iz;
      lz              = 0.5 * log(1.0 / iz);
    }
    /* runs of equal target: heads are the first pair of each run in this chunk */
    const PetscInt tprev = __shfl_up_sync(FULL_MASK, tb, 1);
    const unsigned heads = __ballot_sync(FULL_MASK, lane < nrows && (lane == 0 || tb != tprev));
    const PetscInt pbase = chunkpart[chunk];
    double         accr = 0.0, acci = 0.0; /* lane l: the running sum of B_l over the current run */
    int            seg  = -1;
#pragma unroll
    for (int m = 0; m < 4; m++) {
      if (8 * m >= nrows) break; /* whole warp */
      const int src = 8 * m + g;
      double    Tr[NK][2], Ti[NK][2];
#pragma unroll
      for (int j = 0; j < NK; j++)
#pragma unroll
        for (int q = 0; q < 2; q++) {
          Tr[j][q] = ar[j][q];
          Ti[j][q] = ai[j][q];
        }
      const double A0 = ar[0][0]; /* Re A_0 on the lanes t = 0 */
      if (m < 3 && 8 * (m + 1) < nrows) loadA(m + 1);
      /* T_k = A_k x^k */
      const M2LCx x = {__shfl_sync(FULL_MASK, wr, src), __shfl_sync(FULL_MASK, wi, src)};
      const M2LCx y = {__shfl_sync(FULL_MASK, br, src), __shfl_sync(FULL_MASK, bi, src)};
      const double lzp = __shfl_sync(FULL_MASK, lz, src);
      {
        const M2LCx x2 = CMul(x, x), x4 = CMul(x2, x2), x8 = CMul(x4, x4);
        M2LCx       e  = CPow2t(t, x2, x4);
#pragma unroll
        for (int j = 0; j < NK; j++) {
          const M2LCx e1 = CMul(e, x), t0 = CMul({Tr[j][0], Ti[j][0]}, e), t1 = CMul({Tr[j][1], Ti[j][1]}, e1);
          Tr[j][0]       = t0.r;
          Ti[j][0]       = t0.i;
          Tr[j][1]       = t1.r;
          Ti[j][1]       = t1.i;
          if (j + 1 < NK) e = CMul(e, x8);
        }
      }
      /* Y^T = T^T Chat^T */
      double d[NK][4];
#pragma unroll
      for (int n = 0; n < NK; n++) {
        d[n][0] = d[n][1] = d[n][2] = d[n][3] = 0.0;
#pragma unroll
        for (int s = 0; s < NK; s++) {
          const double2 b = *(const double2 *)(C + (8 * n + g) * M2L_LDC(KP) + 8 * s + 2 * t);
          Dmma16x8x8(d[n], Tr[s][0], Ti[s][0], Tr[s][1], Ti[s][1], b.x, b.y);
        }
      }
      /* B_l = beta^l Y_l (B_0 = Y_0 + A_0 log|z0|) into the run-sum tile */
      {
        const M2LCx y2 = CMul(y, y), y4 = CMul(y2, y2), y8 = CMul(y4, y4);
        M2LCx       f  = CPow2t(t, y2, y4);
        double     *Sg = S + g * RS + 2 * t;
#pragma unroll
        for (int n = 0; n < NK; n++) {
          M2LCx b0 = CMul({d[n][0], d[n][2]}, f);
          const M2LCx b1 = CMul({d[n][1], d[n][3]}, CMul(f, y));
          if (n == 0 && t == 0) b0.r += A0 * lzp;
          *(double2 *)(Sg + 8 * n)      = make_double2(b0.r, b1.r);
          *(double2 *)(Sg + KP + 8 * n) = make_double2(b0.i, b1.i);
          if (n + 1 < NK) f = CMul(f, y8);
        }
      }
      __syncwarp();
      /* lane l adds B_l of the 8 pairs in pair order; a run head writes the finished run */
#pragma unroll
      for (int r = 0; r < 8; r++) {
        const int gp = 8 * m + r;
        if (gp >= nrows) break;
        if ((heads >> gp) & 1u) {
          if (seg >= 0 && lane <= p) {
            part[(pbase + seg) * ne + lane]         = accr;
            part[(pbase + seg) * ne + p + 1 + lane] = acci;
          }
          seg++;
          accr = acci = 0.0;
        }
        if (lane < KP) {
          accr += S[r * RS + lane];
          acci += S[r * RS + KP + lane];
        }
      }
      __syncwarp();
    }
    if (lane <= p) {
      part[(pbase + seg) * ne + lane]         = accr;
      part[(pbase + seg) * ne + p + 1 + lane] = acci;
    }
  }
}

typedef void (*M2LRegFn)(PetscInt, PetscInt, int, int, const PetscInt *, const PetscInt *, const PetscInt *, const double *, const double *, const double *, const double *, const double *, double *);
static const M2LRegFn M2LRegKernels[] = {M2LRegKernel<8>, M2LRegKernel<16>, M2LRegKernel<24>, M2LRegKernel<32>};

/* whether device dev runs M2LRegKernel from code for sm_90 or later (its
   m16n8k8 FP64 mma): not a GPU older than sm_90 (no such code runs there),
   nor a build for an older GPU only (CUDA_ARCH=sm_80) run on an sm_90 one,
   which compiles its PTX there, where Dmma16x8x8 traps (the device's
   compute capability alone chose the kernel before: every product failed
   with "unspecified launch failure").  Once per process and device */
static bool M2LRegCode(int dev)
{
  static unsigned long long asked = 0, yes = 0;
  const unsigned long long  bit   = dev >= 0 && dev < 64 ? 1ull << dev : 0;
  cudaFuncAttributes        fa;

  if (bit && (asked & bit)) return (yes & bit) != 0;
  const bool ok = cudaFuncGetAttributes(&fa, M2LRegKernels[0]) == cudaSuccess && fa.ptxVersion >= 90;
  (void)cudaGetLastError();
  asked |= bit;
  if (ok) yes |= bit;
  return ok;
}

typedef void (*M2LTensorFn)(PetscInt, PetscInt, int, int, const PetscInt *, const PetscInt *, const PetscInt *, const double *, const double *, const double *, const double *, const double *, double *);
static const M2LTensorFn M2LTensorKernels[] = {M2LTensorKernel<8>, M2LTensorKernel<16>, M2LTensorKernel<24>, M2LTensorKernel<32>, M2LTensorKernel<40>};

typedef void (*M2LKernelFn)(PetscInt, int, int, int, const PetscInt *, const PetscInt *, const PetscInt *, const double *, const double *, const double *, const double *, const double *, double *);

/* index pp/2: 0 generic, then PP = 2, 4, ..., FMMCUDA_PFAST */
static const M2LKernelFn M2LKernels[] = {M2LChunkKernel<0>, M2LChunkKernel<2>, M2LChunkKernel<4>, M2LChunkKernel<6>, M2LChunkKernel<8>, M2LChunkKernel<10>, M2LChunkKernel<12>, M2LChunkKernel<14>, M2LChunkKernel<16>, M2LChunkKernel<18>, M2LChunkKernel<20>, M2LChunkKernel<22>, M2LChunkKernel<24>, M2LChunkKernel<26>, M2LChunkKernel<28>, M2LChunkKernel<30>, M2LChunkKernel<32>, M2LChunkKernel<34>, M2LChunkKernel<36>, M2LChunkKernel<38>, M2LChunkKernel<40>};

PetscErrorCode FMMCUDAM2L(FMM_CUDA *c, const FMMPlan *P)
{
  PetscFunctionBegin;
  const int kr = c->npairs ? M2LRegOrder(c) : 0;
  if (kr) { /* tensor cores, operands in registers: a persistent grid of warps */
    const size_t shmem = (size_t)(M2L_RW * 8 * (2 * kr + 8) + kr * M2L_LDC(kr)) * sizeof(double);
    M2LRegFn     kern  = M2LRegKernels[kr / 8 - 1];
    if (!c->m2lblocks) {
      PetscCall(FMMCUDAResidentBlocks(c, (const void *)kern, 32 * M2L_RW, shmem, &c->m2lblocks));
      c->m2lblocks = PetscMin((c->nchunks + M2L_RW - 1) / M2L_RW, c->m2lblocks);
    }
    FMMLaunch(kern, (unsigned)c->m2lblocks, 32 * M2L_RW, shmem, c->stream, c->nchunks, c->npairs, (int)c->p, (int)c->ne, c->far, c->pairtgt, c->chunkpart, c->cx, c->cy, c->scale, c->mpole, c->m2lpad, c->part);
    FMMCheckLaunch();
  } else if (c->npairs && c->kp) { /* tensor cores (WMMA m8n8k4): a persistent grid of warps */
    const int    kp = (int)c->kp, threads = 32 * M2L_TC_WARPS;
    const size_t shmem = (size_t)M2L_TC_WARPS * M2L_TC_WARPMEM(kp) * sizeof(double);
    M2LTensorFn  kern  = M2LTensorKernels[kp / 8 - 1];
    if (!c->m2lblocks) {
      PetscCall(FMMCUDAResidentBlocks(c, (const void *)kern, threads, shmem, &c->m2lblocks));
      c->m2lblocks = PetscMin((c->nchunks + M2L_TC_WARPS - 1) / M2L_TC_WARPS, c->m2lblocks);
    }
    FMMLaunch(kern, (unsigned)c->m2lblocks, threads, shmem, c->stream, c->nchunks, c->npairs, (int)c->p, (int)c->ne, c->far, c->pairtgt, c->chunkpart, c->cx, c->cy, c->scale, c->mpole, c->m2lpad, c->part);
    FMMCheckLaunch();
  } else if (c->npairs) {
    const int    stride = (int)c->ne + 1;
    const size_t shmem  = (size_t)M2L_WARPS * 32 * stride * sizeof(double);
    M2LKernelFn  kern   = M2LKernels[c->pp / 2];
    if (shmem > 49152) FMMCallCUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
    FMMLaunch(kern, FMMCUDABlocks(c->nchunks, M2L_WARPS), 32 * M2L_WARPS, shmem, c->stream, c->npairs, (int)c->p, (int)c->ne, stride, c->far, c->pairtgt, c->chunkpart, c->cx, c->cy, c->scale, c->mpole, c->m2l, c->part);
    FMMCheckLaunch();
  }
  if (!P->b1) {
    FMMLaunch(M2LSumKernel, FMMCUDABlocks((PetscInt64)P->nboxes * c->ne, 256), 256, 0, c->stream, 0, P->nboxes, (int)c->ne, c->tpart, c->part, c->local); /* (one rank: nbc = 0) */
    FMMCheckLaunch();
  } else
    for (PetscInt l = 0; l <= P->L; l++) { /* a rank's part of the distributed tree: its boxes (and the top's) */
      PetscInt first, nb;
      FMMPlanLevelBoxes(P, l, &first, &nb);
      FMMLaunch(M2LSumKernel, FMMCUDABlocks((PetscInt64)nb * c->ne, 256), 256, 0, c->stream, FMMCUDABoxBase(c, l) + first, nb, (int)c->ne, c->tpart, c->part, c->local);
      FMMCheckLaunch();
    }
  PetscFunctionReturn(0);
}
