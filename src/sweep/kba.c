/*
  The sweep across ranks (Koch, Baker & Alcouffe's KBA, as SNAP): the
  schedule of the CUDA backend's octant batches, and the pipeline model
  both backends' -mat_view prints (the seed's model of a pipelined sweep:
  a rank sweeps a chunk once the ranks upstream have sent its faces).
*/
#include "sweepimpl.h"

/*
  The octant batches of the CUDA backend on the rank at (iy, iz) of the
  process grid, in that rank's order.  The octants of one level of
  SweepOctantOrder() that share their signs along the split axes share
  their upstream ranks, so they run together; batches go by level, then by
  the number of ranks upstream of this one (fewest first: ranks at opposite
  ends of the grid start at once, as SNAP's interleaved octants), then by
  id.  A rank then only ever waits on ranks with fewer ranks upstream in
  that batch, so no order of arrival deadlocks.  b[i].id numbers the batch
  the same on every rank (the messages' tags).
*/
PetscInt SweepKBABatches(const SweepProblem *P, PetscInt iy, PetscInt iz, SweepBatch b[16])
{
  PetscInt nb = 0, depth[16];

  for (PetscInt l = 0; l <= 3; l++)
    for (PetscInt sz = 0; sz < (P->pz > 1 ? 2 : 1); sz++)
      for (PetscInt sy = 0; sy < (P->py > 1 ? 2 : 1); sy++) {
        b[nb].n = 0;
        for (PetscInt o = 0; o < 8; o++) {
          const PetscInt oct = P->octorder[o];
          if (P->octlevel[oct] == l && (P->py == 1 || ((oct >> 1) & 1) == sy) && (P->pz == 1 || ((oct >> 2) & 1) == sz)) b[nb].oct[b[nb].n++] = oct;
        }
        if (!b[nb].n) continue;
        b[nb].id  = nb;
        depth[nb] = 4 * (P->py + P->pz) * l + (sy ? P->py - 1 - iy : iy) + (sz ? P->pz - 1 - iz : iz);
        nb++;
      }
  for (PetscInt i = 1; i < nb; i++) /* stable insertion sort by depth (the level first) */
    for (PetscInt j = i; j > 0 && depth[j - 1] > depth[j]; j--) {
      const SweepBatch t  = b[j];
      const PetscInt   td = depth[j];
      b[j] = b[j - 1], depth[j] = depth[j - 1];
      b[j - 1] = t, depth[j - 1] = td;
    }
  return nb;
}

/*
  The pipeline's predicted parallel efficiency, with every chunk of every
  octant costing one unit and messages free: each rank of the py x pz grid
  works through its tasks (batch, chunk) in its order, a task starting when
  the rank is free and the ranks upstream along y and z have finished the
  same task.  batched: the CUDA backend's batches (SweepKBABatches()); else
  the CPU backend's schedule, the octants one after another in the same
  order on every rank.  *eff = a rank's units over the time the last rank
  finishes; for the CPU schedule this is nch/(nch + py + pz - 2) per octant
  when no reflective face orders them.
*/
PetscErrorCode SweepKBAModel(const SweepProblem *P, PetscBool batched, PetscReal *eff)
{
  const PetscInt nr = P->py * P->pz, nch = (P->nx + P->chunk - 1) / P->chunk;
  SweepBatch    *bt;
  PetscInt      *next, nb = 8; /* batches a rank: the same number on every rank */
  PetscReal     *fin, *t, end = 0;
  PetscBool      moved = PETSC_TRUE;

  PetscFunctionBegin;
  PetscCall(PetscMalloc3(16 * nr, &bt, nr, &next, nr, &t));
  for (PetscInt r = 0; r < nr; r++) {
    if (batched) nb = SweepKBABatches(P, r % P->py, r / P->py, bt + 16 * r);
    else { /* one octant a batch, in the octant order */
      for (PetscInt o = 0; o < 8; o++) {
        bt[16 * r + o].n      = 1;
        bt[16 * r + o].oct[0] = P->octorder[o];
        bt[16 * r + o].id     = o;
      }
    }
    next[r] = 0;
    t[r]    = 0;
  }
  const PetscInt nt = nb * nch;
  PetscCall(PetscMalloc1(nr * 16 * nch, &fin));
  for (PetscInt i = 0; i < nr * 16 * nch; i++) fin[i] = -1;
  while (moved) { /* advance every rank as far as its upstream ranks allow, until all are done */
    moved = PETSC_FALSE;
    for (PetscInt r = 0; r < nr; r++)
      for (; next[r] < nt; next[r]++) {
        const SweepBatch *b = &bt[16 * r + next[r] / nch];
        const PetscInt    ch = next[r] % nch, iy = r % P->py, iz = r / P->py, o0 = b->oct[0];
        const PetscInt    uy = ((o0 >> 1) & 1) ? iy + 1 : iy - 1, uz = ((o0 >> 2) & 1) ? iz + 1 : iz - 1;
        PetscReal         start = t[r];
        if (uy >= 0 && uy < P->py) {
          const PetscReal f = fin[((iz * P->py + uy) * 16 + b->id) * nch + ch];
          if (f < 0) break;
          start = PetscMax(start, f);
        }
        if (uz >= 0 && uz < P->pz) {
          const PetscReal f = fin[((uz * P->py + iy) * 16 + b->id) * nch + ch];
          if (f < 0) break;
          start = PetscMax(start, f);
        }
        t[r]                               = start + 1;
        fin[(r * 16 + b->id) * nch + ch] = t[r];
        moved                              = PETSC_TRUE;
      }
  }
  for (PetscInt r = 0; r < nr; r++) {
    PetscCheck(next[r] == nt, PETSC_COMM_SELF, PETSC_ERR_PLIB, "KBA model: the schedule stalls on rank %" PetscInt_FMT, r);
    end = PetscMax(end, t[r]);
  }
  *eff = end > 0 ? (PetscReal)nt / end : 1.0;
  PetscCall(PetscFree(fin));
  PetscCall(PetscFree3(bt, next, t));
  PetscFunctionReturn(0);
}
