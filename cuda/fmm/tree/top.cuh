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
  selection over the ranks' sorted ranges: each rank proposes TOP_PROPOSALS
  keys evenly spaced in its window (MPI_Allgather), a binary search in each
  window counts the keys below every proposal (MPI_Allreduce), and the
  windows shrink to the keys between the two consecutive proposals that
  hold the sought rank (at most 1/(TOP_PROPOSALS + 1) of the active keys
  stay: about six steps a cut at 10^7 points, where one pivot a step took
  about 23).  The cut's place in each list is then the count below, and
  the builder's SplitMoveKernel splits the other list.
*/
#pragma once

#define TOP_PROPOSALS 32 /* keys a rank proposes for each cut in a selection step */

/* a proposal: the key (c along the box's direction, global index g); w = 0: none */
typedef struct {
  double     c;
  PetscInt64 g;
  PetscInt   w;
} TopKey;

/* a segment's state in a selection step: its window [lo, hi) of positions of its d-list */
typedef struct {
  PetscInt lo, hi;
} TopWin;

/* the global index of the rank's point i: its sources (ns) first, then its targets */
__device__ __forceinline__ PetscInt64 TopGlobal(PetscInt i, PetscInt ns, PetscInt64 s0, PetscInt64 tg0)
{
  return i < ns ? s0 + i : tg0 + (i - ns);
}

/* proposals: TOP_PROPOSALS keys of each segment's window, evenly spaced past its first (all of them
   where it has no more; w = 0: none) */
__global__ void TopProposeKernel(PetscInt nseg, SplitLists L, const char *dir, const TopWin *win, const double *xy, PetscInt ns, PetscInt64 s0, PetscInt64 tg0, TopKey *prop)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= nseg * TOP_PROPOSALS) return;
  const PetscInt s = k / TOP_PROPOSALS, i = k % TOP_PROPOSALS, n = win[s].hi - win[s].lo;
  if (n <= 0 || (n <= TOP_PROPOSALS && i >= n)) {
    prop[k] = TopKey{0.0, 0, 0};
    return;
  }
  const int      d   = dir[s];
  const PetscInt pos = win[s].lo + (n <= TOP_PROPOSALS ? i : (PetscInt)((PetscInt64)(i + 1) * n / (TOP_PROPOSALS + 1)));
  const PetscInt id  = ListId(L, d, ListBuf(L, d, s))[pos];
  prop[k]            = TopKey{xy[2 * id + d], TopGlobal(id, ns, s0, tg0), 1};
}

/* cnt[2 k]: the keys of segment s = k / m's window below its candidate cand[k] (binary search), cnt[2 k + 1]:
   1 if the candidate is one of them (w = 0: no candidate, 0 and 0) */
__global__ void TopCountKernel(PetscInt nseg, PetscInt m, SplitLists L, const char *dir, const TopWin *win, const TopKey *cand, const double *xy, PetscInt ns, PetscInt64 s0, PetscInt64 tg0, PetscInt *cnt)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= nseg * m) return;
  const PetscInt  s = k / m;
  const int       d = dir[s];
  const PetscInt *id = ListId(L, d, ListBuf(L, d, s));
  const TopKey    p  = cand[k];
  PetscInt        lo = win[s].lo, hi = win[s].hi;
  const auto      less = [&](PetscInt j) { /* key at position j < the candidate */
    const PetscInt i = id[j];
    const double   c = xy[2 * i + d];
    return c < p.c || (c == p.c && TopGlobal(i, ns, s0, tg0) < p.g);
  };
  cnt[2 * k] = cnt[2 * k + 1] = 0;
  if (!p.w) return;
  while (lo < hi) {
    const PetscInt mid = lo + (hi - lo) / 2;
    if (less(mid)) lo = mid + 1;
    else hi = mid;
  }
  cnt[2 * k] = lo - win[s].lo;
  if (lo < win[s].hi) {
    const PetscInt i = id[lo];
    cnt[2 * k + 1]   = (xy[2 * i + d] == p.c && TopGlobal(i, ns, s0, tg0) == p.g) ? 1 : 0;
  }
}

/* keep[k], keep[U + k]: the point at place k of the x and of the y list (the last round's boxes one after
   the other, each list sorted by (coordinate, index) in each box) */
__global__ void TopKeepKernel(PetscInt U, PetscInt nseg, const PetscInt *off, SplitLists L, PetscInt *keep)
{
  FMMWaitPrior();
  const PetscInt k = (PetscInt)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= U) return;
  const PetscInt s = FMMLastLE(off, 0, nseg, k);
  keep[k]          = ListId(L, 0, ListBuf(L, 0, s))[k];
  keep[U + k]      = ListId(L, 1, ListBuf(L, 1, s))[k];
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
