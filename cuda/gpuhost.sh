#!/usr/bin/env bash
# Build, check and benchmark the CUDA backend on a GPU host without PETSc
# (see ../shared/gpu-host/README.md: the PETSc bundle travels in .petsc-bundle/).
#
#   cuda/gpuhost.sh [steps]   steps: any of build test sanitize ncu bench info table (default: all)
#
# Logs go to $OUT (default /tmp/gpuhost); the summary is printed last.
# BUDGET (seconds, default 540): benchmark runs that would start later are skipped.
set -u
OUT=${OUT:-/tmp/gpuhost}
BUDGET=${BUDGET:-540}
T0=$(date +%s)
mkdir -p "$OUT"
steps=${*:-build test sanitize ncu bench info table}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
left() { [ $(( $(date +%s) - T0 )) -lt "$BUDGET" ]; }

if [ ! -d /opt/petsc-runtime ]; then tar xJf .petsc-bundle/petsc-runtime.tar.xz -C /opt || exit 1; fi
. /opt/petsc-runtime/env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader

if has build; then
  if ! make -j16 PETSC_DIR="$PETSC_DIR" all tests/gpu bench/bench tutorials/ex2 > "$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; exit 1
  fi
  echo "build: ok at $(( $(date +%s) - T0 )) s"
fi

if has test; then
  timeout 400 make -j16 PETSC_DIR="$PETSC_DIR" CUDA=1 test-gpu > "$OUT/tests.log" 2>&1
  grep -E "^(ok|FAIL|skip)|passed" "$OUT/tests.log"
  [ -d tests/results ] && cp -r tests/results "$OUT/" 2>/dev/null
  grep -A14 "^FAIL" "$OUT/tests.log" | cut -c1-220 | head -50
  echo "tests: done at $(( $(date +%s) - T0 )) s"
fi

if has sanitize; then
  : > "$OUT/sanitize.log"
  for tool in memcheck racecheck initcheck; do
    echo "=== $tool" >> "$OUT/sanitize.log"
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 ./tests/gpu -n 1500 -geometry square -mat_fmm_ct 8 -mat_fmm_p 9 -mat_fmm_repetition_mb 0.5 >> "$OUT/sanitize.log" 2>&1
    echo "$tool (p 9): exit $?"
  done
  echo "=== memcheck p 44" >> "$OUT/sanitize.log"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/gpu -n 800 -geometry clusters -mat_fmm_p 44 -targets >> "$OUT/sanitize.log" 2>&1
  echo "memcheck (p 44, generic M2L, targets): exit $?"
  echo "=== memcheck fma p 20" >> "$OUT/sanitize.log"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/gpu -n 800 -geometry curve -mat_fmm_p 20 -mat_fmm_ct 6 -mat_fmm_cuda_m2l fma >> "$OUT/sanitize.log" 2>&1
  echo "memcheck (p 20, unrolled M2L): exit $?"
  echo "=== memcheck split P2P items" >> "$OUT/sanitize.log"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/gpu -n 8000 -geometry square -mat_fmm_ct 700 -mat_fmm_p 12 -mat_fmm_repetition_mb 200 >> "$OUT/sanitize.log" 2>&1
  echo "memcheck (split P2P items, repetition chunks): exit $?"
  for tool in memcheck racecheck; do # the symmetric P2P: 8 lanes x 6 rows, and 32 lanes x 6 rows
    for ct in 64 256; do
      echo "=== $tool symmetric P2P ct $ct" >> "$OUT/sanitize.log"
      timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 ./tests/gpu -n 3000 -geometry curve -mat_fmm_ct $ct -mat_fmm_p 12 >> "$OUT/sanitize.log" 2>&1
      echo "$tool (symmetric P2P, ct $ct): exit $?"
    done
  done
  grep -E "ERROR SUMMARY|all cases|FAILED" "$OUT/sanitize.log" | sort | uniq -c
  echo "sanitize: done at $(( $(date +%s) - T0 )) s"
fi

if has ncu; then
  timeout 200 ncu --kernel-name regex:'P2PTiled|P2PSymmetric|P2PColumnSum|M2LTensor|M2LReg|P2MFast' --launch-count 3 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    ./bench/bench -n 1000000 -mat_fmm_device cuda -reps 1 -sample 0 > "$OUT/ncu.log" 2>&1
  grep -E "^  [A-Za-z0-9_]+.*\(|Duration|Compute \(SM\) Throughput|Achieved Occupancy" "$OUT/ncu.log" | cut -c1-110 | head -60
  echo "ncu: done at $(( $(date +%s) - T0 )) s"
fi

B="timeout 120 ./bench/bench -mat_fmm_device cuda"
run() { if left; then $B "$@"; else echo "skipped (time budget): $*"; fi; }
if has bench; then
  {
    for eps in 1e-10 1e-6; do for ct in 16 32 64 128; do run -n 1000000 -mat_fmm_eps $eps -mat_fmm_ct $ct -reassemble 3; done; done
    run -n 1000000 -mat_fmm_eps 1e-10 -mat_fmm_ct 16 -mat_fmm_cuda_log libm
    run -n 1000000 -mat_fmm_eps 1e-10 -mat_fmm_ct 16 -mat_fmm_cuda_m2l fma
    run -n 1000000 -mat_fmm_eps 1e-10 -mat_fmm_ct 16 -mat_fmm_kernel double
    run -n 1000000 -mat_fmm_eps 1e-10 -mat_fmm_ct 16 -mat_fmm_kernel combined -mat_fmm_alpha 1 -mat_fmm_beta 1
    run -n 1000000 -mat_fmm_eps 1e-10 -mat_fmm_ct 16 -geometry square
    for n in 1000 3000 10000 30000; do
      run -n $n -mat_fmm_eps 1e-10 -sample 0
      run -n $n -mat_fmm_method direct -sample 0
    done
    for r in 1 2 3; do # the headline figures, three processes each
      run -n 1000000 -mat_fmm_eps 1e-10 -reassemble 3 -reps 20
      run -n 10000000 -mat_fmm_eps 1e-10 -reassemble 3 -reps 20
    done
    for n in 1000000 10000000; do run -n $n -mat_fmm_eps 1e-10 -mat_fmm_cuda_p2p_symmetric false -reps 20 -sample 0; done
    run -n 10000000 -mat_fmm_eps 1e-10 -mat_fmm_ct 32 -sample 0
    run -n 10000000 -mat_fmm_eps 1e-6 -mat_fmm_ct 64 -sample 0
    run -n 10000000 -mat_fmm_eps 1e-6 -mat_fmm_ct 32 -sample 0
  } > "$OUT/bench.log" 2>&1
  left && timeout 120 ./bench/bench -n 1000000 -mat_fmm_device cuda -mat_fmm_eps 1e-10 -mat_fmm_ct 16 -log_view > "$OUT/logview.log" 2>&1
fi

# where the assembly's time goes (PetscInfo of the CUDA backend)
if has info; then
  for n in 1000000 10000000; do
    left && timeout 120 ./bench/bench -n $n -mat_fmm_device cuda -reassemble 1 -sample 0 -reps 3 -info 2>&1 | grep -E "GPU (plan|tree|setup)|^bench:" | cut -c1-200
  done
fi

if has table; then
  for n in 1000000 100000; do
    for ct in 16 64 256; do
      for lay in tiled indexing repetition; do run -n $n -mat_fmm_eps 1e-10 -mat_fmm_ct $ct -mat_fmm_layout $lay -mat_fmm_repetition_mb 16384 -sample 0; done
    done
  done > "$OUT/table.log" 2>&1
fi

# summary: one line per run
for f in bench table; do
  [ -f "$OUT/$f.log" ] || continue
  echo "== $f: N eps p ct layout L setup assembly cuda_init mult_med reassembly | P2M M2M M2L L2L L2P P2P (ms) | p2p/s m2l_gflops relerr"
  awk '/^bench:/ {split("",v); for (i=2;i<=NF;i++) {split($i,kv,"="); v[kv[1]]=kv[2]}; s=v["N"]" "v["eps"]" "v["p"]" "v["ct"]" "v["layout"]" "v["levels"]" "v["setup_s"]" "v["assembly_s"]" "v["cuda_init_s"]" "v["mult_med_s"]" "v["reassembly_med_s"]}
       /^phases_ms:/ {ph=""; for (i=2;i<=NF;i++) {split($i,kv,"="); ph=ph" "kv[2]}}
       /^rates:/ {r=""; for (i=2;i<=NF;i++) {split($i,kv,"="); if (kv[1]!="m2l_count" && kv[1]!="p2p_pairs") r=r" "kv[2]}; print s" |"ph" |"r}' "$OUT/$f.log"
  grep -iE "error|skipped" "$OUT/$f.log" | sort | uniq -c | head -5
done
grep -E "^(FMM|MatMult )" "$OUT/logview.log" 2>/dev/null | cut -c1-110
echo "total $(( $(date +%s) - T0 )) s"
