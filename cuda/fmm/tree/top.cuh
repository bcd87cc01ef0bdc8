/*
  Part of cuda/fmm/tree.cu (one translation unit, see there): the top cuts
  of the distributed tree (src/fmm/dist.c's TopLevels()) on each rank's GPU.

  The rank's points are sorted once by (x, index) and by (y, index), as the
  tree build does (TreeSort), so the points of every box of a round are a
  range of each list, sorted; the index order is the order of the global
  indices.  Each round halves every box as the one-rank median rule does:
  along the longer side of its bounding box (over all ranks: an
  MPI_Allreduce of the list ends), at the key (coordinate, global index) of
  rank floor(n/2) among its n points of all ranks.  That key is found by a
  selection over the ranks' sorted ranges: each rank proposes the middle of
  its window, the weighted median of the proposals is the pivot, a binary
  search in each window counts the keys below it (MPI_Allreduce), and the
  windows shrink to the side that holds the sought rank (at least a quarter
  of the active keys go each time).  The cut's place in each list is then
  the count below, and the builder's SplitMoveKernel splits the other list.
*/
#pragma once

/* a proposal or pivot: the key (c along the box's direction, global index g); w: the proposing window's size */
typedef struct {
  double     c;
  PetscInt64 g;
  PetscInt   w;
} TopKey;

/* a segment's state in a selection step: its window [lo, hi) of positions of its d-list, the pivot */
typedef struct {
  PetscInt lo, hi;
  TopKey   piv;
} TopWin;

/* the global index of the rank's point i: its sources (ns) first, then its targets */
__device__ __forceinline__ PetscInt64 TopGlobal(PetscInt i, PetscInt ns, PetscInt64 s0, PetscInt64 tg0)
{
  return i < ns ? s0 + i : tg0 + (i - ns);
}

/* proposals: the key at the middle of each segment's window (w = 0: an empty window) */
__global__ void TopProposeKernel(PetscInt nseg, SplitLists L, const char *dir, const TopWin *win, const double *xy, PetscInt ns, PetscInt64 s0, PetscInt64 tg0, TopKey *prop)
{
  FMMWaitPrior();
  const PetscInt s = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= nseg) return;
  const int      d = dir[s];
  const PetscInt n = win[s].hi - win[s].lo;
  if (n <= 0) {
    prop[s] = TopKey{0.0, 0, 0};
    return;
  }
  const PetscInt i = ListId(L, d, ListBuf(L, d, s))[win[s].lo + n / 2];
  prop[s]          = TopKey{xy[2 * i + d], TopGlobal(i, ns, s0, tg0), n};
}

/* cnt[2 s]: the keys of segment s's window below its pivot (binary search), cnt[2 s + 1]: 1 if the pivot is one of its keys */
__global__ void TopCountKernel(PetscInt nseg, SplitLists L, const char *dir, const TopWin *win, const double *xy, PetscInt ns, PetscInt64 s0, PetscInt64 tg0, PetscInt *cnt)
{
  FMMWaitPrior();
  const PetscInt s = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= nseg) return;
  const int       d = dir[s];
  const PetscInt *id = ListId(L, d, ListBuf(L, d, s));
  const TopKey    p  = win[s].piv;
  PetscInt        lo = win[s].lo, hi = win[s].hi;
  const auto      less = [&](PetscInt k) { /* key at position k < pivot */
    const PetscInt i = id[k];
    const double   c = xy[2 * i + d];
    return c < p.c || (c == p.c && TopGlobal(i, ns, s0, tg0) < p.g);
  };
  while (lo < hi) {
    const PetscInt mid = lo + (hi - lo) / 2;
    if (less(mid)) lo = mid + 1;
    else hi = mid;
  }
  cnt[2 * s]     = lo - win[s].lo;
  cnt[2 * s + 1] = 0;
  if (lo < win[s].hi) {
    const PetscInt i = id[lo];
    cnt[2 * s + 1]   = (xy[2 * i + d] == p.c && TopGlobal(i, ns, s0, tg0) == p.g) ? 1 : 0;
  }
}

/* boxof[i]: the segment (box of the last round) of point i */
__global__ void TopBoxOfKernel(PetscInt U, PetscInt nseg, const PetscInt *off, SplitLists L, PetscInt *boxof)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt s = FMMLastLE(off, 0, nseg, k);
  boxof[ListId(L, 0, ListBuf(L, 0, s))[k]] = s;
}
