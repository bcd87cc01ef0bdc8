#!/usr/bin/env bash
# Build a PETSc configured with CUDA, as the headline figures of petscfmm used
# it (device vectors), and optionally pack it for a GPU host that has CUDA and
# Open MPI but no PETSc and no network.  See docs/build-petsc-cuda.md.
#
#   bin/build-petsc-cuda.sh [SRC]          configure and build (and install, with PREFIX)
#   bin/build-petsc-cuda.sh pack OUTDIR    pack the installed PREFIX into OUTDIR/petsc-cuda-runtime.tar.xz
#
# SRC: a PETSc source tree, an unpacked release tarball or a checkout of a
# v3.24.x tag (default ./petsc-$PETSC_VERSION).  When SRC does not exist, the
# release tarball petsc-$PETSC_VERSION.tar.gz is downloaded from
#   https://web.cels.anl.gov/projects/petsc/download/release-snapshots/
# and unpacked there (needs network; otherwise download it elsewhere and carry it).
#
# Environment (default):
#   PETSC_VERSION   (3.24.6)          the release to download
#   PETSC_ARCH      (arch-cuda-opt)   PETSc's build folder under SRC
#   PREFIX          (none)            configure --prefix=PREFIX and make install there;
#                                     needed by "pack"; without it PETSc stays built in SRC/PETSC_ARCH
#   CUDA_ARCH       (90)              --with-cuda-arch (90: H100 and H200)
#   CUDA_DIR        (the toolkit of the nvcc on PATH, else /usr/local/cuda)
#   JOBS            (the number of cores)  parallel make jobs (--with-make-np, MAKE_NP)
#   CONFIGURE_EXTRA (none)            more configure options (e.g. --download-f2cblaslapack
#                                     where no BLAS/LAPACK is installed)
#   DRY_RUN         (0)               1: print the commands instead of running them
#
# The configure line is that of the figures in README.md:
#   --with-cuda --with-cuda-arch=90 --with-debugging=0 --with-fc=0
# on the MPI found on PATH (Open MPI, not CUDA-aware: run PETSc programs with
# -use_gpu_aware_mpi 0).  With --with-cuda-arch given, configure needs nvcc but
# no GPU.
set -euo pipefail

PETSC_VERSION=${PETSC_VERSION:-3.24.6}
ARCH=${PETSC_ARCH:-arch-cuda-opt}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
DRY_RUN=${DRY_RUN:-0}
URL=https://web.cels.anl.gov/projects/petsc/download/release-snapshots/petsc-$PETSC_VERSION.tar.gz

say() { echo "build-petsc-cuda: $*" >&2; }
run() {
  echo "+ $*" >&2
  [ "$DRY_RUN" = 1 ] || "$@"
}

cuda_dir() {
  if [ -n "${CUDA_DIR:-}" ]; then echo "$CUDA_DIR"; return; fi
  local nvcc
  nvcc=$(command -v nvcc 2>/dev/null || true)
  [ -n "$nvcc" ] || nvcc=/usr/local/cuda/bin/nvcc
  [ -x "$nvcc" ] || { say "no nvcc on PATH or in /usr/local/cuda/bin: set CUDA_DIR"; exit 1; }
  (cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
}

# ------------------------------------------------------------------ pack
# Like shared/gpu-host/make-petsc-bundle.sh for Debian's PETSc: PREFIX's
# include/ and lib/, the MPI headers, and the libraries libpetsc needs except
# those the GPU host has (glibc, libstdc++, libgcc, Open MPI, the CUDA
# toolkit's), with the PREFIX paths of PETSc's makefiles and pkg-config file
# rewritten when env.sh is sourced where the tarball was unpacked.
pack() {
  local out=$1 pd lib work b
  [ -n "${PREFIX:-}" ] || { say "pack: set PREFIX to the installed PETSc"; exit 1; }
  pd=$(readlink -f "$PREFIX")
  lib=$(readlink -f "$pd/lib/libpetsc.so" 2>/dev/null || true)
  if [ ! -f "$lib" ] || ! grep -qs 'define PETSC_HAVE_CUDA 1' "$pd/include/petscconf.h"; then
    say "pack: no PETSc with CUDA installed at $pd"
    exit 1
  fi
  [ "$DRY_RUN" = 1 ] && { say "pack: would pack $pd into $out/petsc-cuda-runtime.tar.xz"; return; }
  work=$(mktemp -d)
  b=$work/petsc-cuda-runtime
  mkdir -p "$b/lib"
  cp -a "$pd/include" "$b/"
  local mpiinc
  mpiinc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
  [ -n "$mpiinc" ] && cp -rLn "$mpiinc/." "$b/include/"
  cp -a "$pd"/lib/libpetsc.so* "$b/lib/"
  strip --strip-debug "$b/lib/$(basename "$lib")"
  # (libcuda.so.1, the driver's, is "not found" where there is no GPU driver: skipped)
  ldd "$lib" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r l; do
    case $(basename "$l") in
      libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
      libmpi* | libopen-rte* | libopen-pal* | libhwloc* | libevent* | libpmix*) ;;
      libcuda.so* | libcudart* | libcublas* | libcusparse* | libcusolver* | libcufft* | libcurand* | libnvJitLink* | libnvrtc*) ;;
      *) cp -L "$l" "$b/lib/" ;;
    esac
  done
  cp -a "$pd/lib/petsc" "$b/lib/petsc"
  mkdir -p "$b/lib/pkgconfig"
  cp -L "$pd"/lib/pkgconfig/*.pc "$b/lib/pkgconfig/"
  grep -rlF "$pd" "$b/lib/petsc" "$b/lib/pkgconfig" | while read -r f; do sed -i "s|$pd|@PETSC_BUNDLE@|g" "$f"; done
  echo "_cb=$(cuda_dir) # the CUDA toolkit PETSc was built with" > "$b/env.sh"
  cat >> "$b/env.sh" << 'ENV'
# source me on the GPU host: . petsc-cuda-runtime/env.sh
_b=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
grep -rlF "@PETSC_BUNDLE@" "$_b/lib/petsc" "$_b/lib/pkgconfig" | while read -r f; do sed -i "s|@PETSC_BUNDLE@|$_b|g" "$f"; done
# PETSc's makefile variables name the toolkit's include and lib folders: where
# this host's toolkit lives elsewhere, point them at CUDA_HOME (or /usr/local/cuda)
_ch=${CUDA_HOME:-/usr/local/cuda}
if [ ! -d "$_cb" ] && [ -d "$_ch" ]; then
  grep -rlF "$_cb" "$_b/lib/petsc" "$_b/lib/pkgconfig" | while read -r f; do sed -i "s|$_cb|$_ch|g" "$f"; done
fi
export PETSC_DIR=$_b PETSC_ARCH=
export LD_LIBRARY_PATH=$_b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# the CUDA libraries libpetsc needs (cuBLAS, cuSPARSE, ...) from the host's toolkit
for _d in "$_ch/lib64" "$_ch/targets/x86_64-linux/lib"; do
  [ -d "$_d" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_d && break
done
export PKG_CONFIG_PATH=$_b/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI without CUDA awareness: PETSc stops at startup unless told so
case " ${PETSC_OPTIONS:-} " in *" -use_gpu_aware_mpi "*) ;; *) export PETSC_OPTIONS="${PETSC_OPTIONS:+$PETSC_OPTIONS }-use_gpu_aware_mpi 0" ;; esac
ENV
  mkdir -p "$out"
  tar -C "$work" -cf - petsc-cuda-runtime | xz -T0 -6 > "$out/petsc-cuda-runtime.tar.xz"
  rm -rf "$work"
  ls -l "$out/petsc-cuda-runtime.tar.xz"
  say "on the GPU host: tar xJf petsc-cuda-runtime.tar.xz -C /opt && . /opt/petsc-cuda-runtime/env.sh"
}

if [ "${1:-}" = pack ]; then
  [ $# -eq 2 ] || { say "usage: $0 pack OUTDIR"; exit 1; }
  pack "$2"
  exit 0
fi
[ $# -le 1 ] || { say "usage: $0 [SRC] | pack OUTDIR"; exit 1; }

# ------------------------------------------------------------------ source
SRC=${1:-petsc-$PETSC_VERSION}
if [ ! -e "$SRC/configure" ]; then
  [ ! -e "$SRC" ] || [ -z "$(ls -A "$SRC")" ] || { say "$SRC exists but holds no PETSc source (no configure)"; exit 1; }
  say "no PETSc source at $SRC: downloading $URL"
  tgz=$(dirname "$SRC")/petsc-$PETSC_VERSION.tar.gz
  if command -v curl > /dev/null; then run curl -fL --retry 3 -o "$tgz" "$URL"; else run wget -O "$tgz" "$URL"; fi
  run mkdir -p "$SRC"
  run tar xzf "$tgz" -C "$SRC" --strip-components=1
fi
[ "$DRY_RUN" = 1 ] || SRC=$(cd "$SRC" && pwd)

# ------------------------------------------------------------------ configure and build
CD=$(cuda_dir)
opts=(PETSC_ARCH="$ARCH" --with-cuda --with-cuda-arch="$CUDA_ARCH" --with-debugging=0 --with-fc=0 --with-cuda-dir="$CD")
[ -z "${PREFIX:-}" ] || opts+=(--prefix="$PREFIX")
# shellcheck disable=SC2206
[ -z "${CONFIGURE_EXTRA:-}" ] || opts+=($CONFIGURE_EXTRA)
say "PETSc source $SRC, PETSC_ARCH $ARCH, CUDA $CD, sm_$CUDA_ARCH, $JOBS jobs${PREFIX:+, installed to $PREFIX}"
command -v mpicc > /dev/null || say "warning: no mpicc on PATH: configure will look for an MPI itself"
run cd "$SRC"
run python3 ./configure "${opts[@]}" --with-make-np="$JOBS"
run make PETSC_DIR="$SRC" PETSC_ARCH="$ARCH" MAKE_NP="$JOBS" all
if [ -n "${PREFIX:-}" ]; then
  run make PETSC_DIR="$SRC" PETSC_ARCH="$ARCH" install
  say "done.  Build petscfmm with: make PETSC_DIR=$PREFIX PETSC_ARCH="
else
  say "done.  Build petscfmm with: make PETSC_DIR=$SRC PETSC_ARCH=$ARCH"
fi
say "run PETSc programs with -use_gpu_aware_mpi 0 (in PETSC_OPTIONS or ~/.petscrc) where MPI is not CUDA-aware"
