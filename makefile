# petscfmm: GNU make against an installed PETSc.
#
#   make            build lib/libpetscfmm.so (with the CUDA backend when nvcc is found)
#   make run        build and run the main tutorial
#   make test       build and run the test suite; ends with "N passed, N failed"
#   make bench      build the benchmarks (bench/)
#
# Variables: PETSC_DIR (default /usr/lib/petsc, Debian's petsc-dev), PETSC_ARCH
# (default empty), CUDA=0 to build without CUDA, NVCC, CUDA_ARCH (default sm_90),
# MPIEXEC, OMP_NUM_THREADS.

.DEFAULT_GOAL := all
PETSC_DIR  ?= /usr/lib/petsc
PETSC_ARCH ?=
PETSC_CONF := $(PETSC_DIR)/$(PETSC_ARCH)/lib/petsc/conf/petscvariables

# No PETSc yet: this rule installs Debian's (make then restarts with it).
include $(PETSC_CONF)
$(PETSC_CONF):
	@./bin/install-petsc "$(PETSC_DIR)"

PETSC_LIB_DIR := $(PETSC_DIR)/$(PETSC_ARCH)/lib
CC      := $(PCC)
MPIEXEC := $(or $(shell command -v mpiexec 2>/dev/null),$(firstword $(MPIEXEC))) --oversubscribe
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1

# CUDA: on when nvcc is found, unless CUDA=0
NVCC      ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA      ?= $(if $(NVCC),1,0)
CUDA_ARCH ?= sm_90
# nvcc may be a wrapper script outside the toolkit (/usr/local/bin/nvcc): ask it for its toolkit root
CUDA_TOP  := $(if $(filter 1,$(CUDA)),$(shell $(NVCC) -dryrun -x cu /dev/null 2>&1 | sed -n 's/^#\$$ TOP=//p'))
CUDA_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard $(CUDA_TOP)/lib64/libcudart_static.a $(CUDA_TOP)/targets/*/lib/libcudart_static.a $(abspath $(dir $(NVCC))/..)/lib64/libcudart_static.a))))

OPTFLAGS   ?= -O3 -march=native -fno-math-errno -fno-trapping-math
CFLAGS_FMM := $(OPTFLAGS) -fPIC -fopenmp -Wall -Wno-unknown-pragmas -Iinclude -Isrc $(PETSC_CC_INCLUDES)
LIBS_FMM   := -fopenmp -L$(PETSC_LIB_DIR) -Wl,-rpath,$(PETSC_LIB_DIR) $(PETSC_LIB_BASIC) -lm

LIB_SRCS := $(wildcard src/*.c src/mat/*.c src/cpu/*.c)
LIB_OBJS := $(patsubst %.c,build/%.o,$(LIB_SRCS))
ifeq ($(CUDA),1)
  CU_SRCS    := $(wildcard cuda/*.cu)
  LIB_OBJS   += $(patsubst %.cu,build/%.o,$(CU_SRCS))
  # PETSCFMM_HAVE_CUDA: device detection; PETSCFMM_HAVE_CUDA_BACKEND: MatAssemblyEnd may select FMMBackendCUDA
  CFLAGS_FMM += -DPETSCFMM_HAVE_CUDA -DPETSCFMM_HAVE_CUDA_BACKEND
  NVCCFLAGS  := -O3 -std=c++17 -arch=$(CUDA_ARCH) -lineinfo -Xcompiler -fPIC,-fopenmp -DPETSCFMM_HAVE_CUDA -DPETSCFMM_HAVE_CUDA_BACKEND -Iinclude -Isrc $(PETSC_CC_INCLUDES) $(shell $(CC) --showme:compile 2>/dev/null)
  # static CUDA runtime: the library loads (and runs on the CPU) where no CUDA driver exists
  ifeq ($(CUDA_LIBDIR),)
    $(error CUDA: no libcudart_static.a under the toolkit of $(NVCC) (root '$(CUDA_TOP)'); build with CUDA=0 or set CUDA_LIBDIR)
  endif
  LIBS_FMM   += -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++
endif

LIB := lib/libpetscfmm.so
TESTS     := $(patsubst %.c,%,$(wildcard tests/*.c))
TUTORIALS := $(patsubst %.c,%,$(wildcard tutorials/*.c))
BENCHES   := $(patsubst %.c,%,$(wildcard bench/*.c))

all: $(LIB)

build/%.o: %.c include/petscfmm.h $(wildcard src/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_FMM) -c $< -o $@

build/%.o: %.cu include/petscfmm.h $(wildcard src/*.h cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p lib
	$(CC) -shared -o $@ $(LIB_OBJS) $(LIBS_FMM)

# programs link the library; tests/noload.c must not (it loads it with -dll_append)
$(TESTS) $(TUTORIALS) $(BENCHES): %: %.c $(LIB) $(wildcard tests/*.h)
	$(CC) $(CFLAGS_FMM) $< -o $@ $(if $(filter tests/noload,$@),,-L$(CURDIR)/lib -Wl,-rpath,$(CURDIR)/lib -lpetscfmm) $(LIBS_FMM)

# the main job: the boundary-integral tutorial (ex1) on its default problem
MAIN ?= tutorials/ex1
run: $(MAIN)
	$(MPIEXEC) -n 1 ./$(MAIN)

# PETSc configured with CUDA (device vectors, VECCUDA)
PETSC_CUDA := $(if $(shell grep -s 'define PETSC_HAVE_CUDA 1' $(PETSC_DIR)/$(PETSC_ARCH)/include/petscconf.h),1,0)

test: $(LIB) $(TESTS) $(TUTORIALS)
	@MPIEXEC="$(MPIEXEC)" CUDA_BUILT=$(CUDA) PETSC_CUDA=$(PETSC_CUDA) ./bin/runtests $(TESTS:=.c) $(TUTORIALS:=.c)

bench: $(BENCHES)

clean:
	rm -rf build lib $(TESTS) $(TUTORIALS) $(BENCHES) tests/results

.PHONY: all run test bench clean
