# petscfmm: GNU make against an installed PETSc.
#
#   make            build the library (with the CUDA backend when nvcc is found)
#   make run        build and run the main tutorial
#   make test       build and run the test suite (and build bench/); ends with "N passed, N failed"
#   make bench      build the benchmarks (bench/)
#   make install PREFIX=/usr/local   install the library, the header, petscfmm.pc and the Python package
#
# Variables: PETSC_DIR (default /usr/lib/petsc, Debian's petsc-dev), PETSC_ARCH
# (default empty), CUDA=0 to build without CUDA, NVCC, CUDA_ARCH (default sm_90),
# MPIEXEC, OMP_NUM_THREADS, WERROR=1 (warnings are errors, as in CI), PREFIX, PYTHON
# (an interpreter with petsc4py: default the first of /usr/bin/python3, python3
# that imports it), PYTHONDIR (where make install puts the package petscfmm).
#
# Objects and the library go to build/<PETSC_ARCH or "default">/ (with "-nocuda"
# appended for CUDA=0, so that both builds can live side by side); lib/libpetscfmm.so
# links to the library last built.  Programs (tests/, tutorials/, bench/) are built
# next to their sources and load the library through lib/.

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

BUILD      := build/$(or $(PETSC_ARCH),$(notdir $(realpath $(PETSC_DIR))),default)$(if $(filter 1,$(CUDA)),,-nocuda)
OPTFLAGS   ?= -O3 -march=native -fno-math-errno -fno-trapping-math
WARNFLAGS  := -Wall -Wno-unknown-pragmas $(if $(filter 1,$(WERROR)),-Werror)
CFLAGS_FMM := $(OPTFLAGS) -fPIC -fopenmp $(WARNFLAGS) -Iinclude -Isrc $(PETSC_CC_INCLUDES)
LIBS_FMM   := -fopenmp -L$(PETSC_LIB_DIR) -Wl,-rpath,$(PETSC_LIB_DIR) $(PETSC_LIB_BASIC) -lm

LIB_SRCS := $(wildcard src/*.c src/*/*.c src/*/*/*.c)
LIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRCS))
ifeq ($(CUDA),1)
  CU_SRCS    := $(wildcard cuda/*.cu cuda/*/*.cu)
  LIB_OBJS   += $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRCS))
  # PETSCFMM_HAVE_CUDA: the CUDA backends are part of this build
  CFLAGS_FMM += -DPETSCFMM_HAVE_CUDA
  NVCCFLAGS  := -O3 -std=c++17 -arch=$(CUDA_ARCH) -lineinfo -Xcompiler -fPIC,-fopenmp $(if $(filter 1,$(WERROR)),-Werror all-warnings) -DPETSCFMM_HAVE_CUDA -Iinclude -Isrc -Icuda $(PETSC_CC_INCLUDES) $(shell $(CC) --showme:compile 2>/dev/null)
  # static CUDA runtime: the library loads (and runs on the CPU) where no CUDA driver exists
  ifeq ($(CUDA_LIBDIR),)
    $(error CUDA: no libcudart_static.a under the toolkit of $(NVCC) (root '$(CUDA_TOP)'); build with CUDA=0 or set CUDA_LIBDIR)
  endif
  LIBS_FMM   += -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++
endif

LIB       := $(BUILD)/lib/libpetscfmm.so
TESTS     := $(patsubst %.c,%,$(wildcard tests/*.c))
PYTESTS   := $(wildcard tests/*.py tutorials/*.py)
TUTORIALS := $(patsubst %.c,%,$(wildcard tutorials/*.c))
BENCHES   := $(patsubst %.c,%,$(wildcard bench/*.c))

all: lib/libpetscfmm.so

# header dependencies: each object's .d, written by the compiler
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_FMM) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

-include $(LIB_OBJS:.o=.d)

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(LIB_OBJS) $(LIBS_FMM)

# (phony: it follows the build last made, CUDA or CUDA=0)
lib/libpetscfmm.so: $(LIB)
	@mkdir -p lib
	ln -sfn ../$(LIB) $@

# programs link the library; tests/noload.c must not (it loads it with -dll_append)
$(TESTS) $(TUTORIALS) $(BENCHES): %: %.c $(LIB) $(wildcard tests/*.h) | lib/libpetscfmm.so
	$(CC) $(CFLAGS_FMM) $< -o $@ $(if $(filter tests/noload,$@),,-L$(CURDIR)/$(dir $(LIB)) -Wl,-rpath,$(CURDIR)/lib -lpetscfmm) $(LIBS_FMM)

# the main job: the boundary-integral tutorial (ex1) on its default problem
MAIN ?= tutorials/ex1
run: $(MAIN)
	$(MPIEXEC) -n 1 ./$(MAIN)

# PETSc configured with CUDA (device vectors, VECCUDA)
PETSC_CUDA := $(if $(shell grep -s 'define PETSC_HAVE_CUDA 1' $(PETSC_DIR)/$(PETSC_ARCH)/include/petscconf.h),1,0)

# the PETSc version, which petsc4py must share for the Python cases
PETSC_VERSION = $(shell awk 'NF == 3 && $$2 ~ /^PETSC_VERSION_(MAJOR|MINOR|SUBMINOR)$$/ {v[$$2] = $$3} END {print v["PETSC_VERSION_MAJOR"] "." v["PETSC_VERSION_MINOR"] "." v["PETSC_VERSION_SUBMINOR"]}' $(PETSC_DIR)/include/petscversion.h)

# the C cases, then the Python ones (tests/*.py, tutorials/*.py: skipped where no python3 has petsc4py)
test: lib/libpetscfmm.so $(TESTS) $(TUTORIALS) $(BENCHES)
	@MPIEXEC="$(MPIEXEC)" CUDA_BUILT=$(CUDA) PETSC_CUDA=$(PETSC_CUDA) PETSC_VERSION=$(PETSC_VERSION) $(if $(PYTHON),PYTHON=$(PYTHON)) ./bin/runtests $(TESTS:=.c) $(TUTORIALS:=.c) $(PYTESTS)

test-gpu: lib/libpetscfmm.so $(TESTS) $(TUTORIALS)
	@MPIEXEC="$(MPIEXEC)" CUDA_BUILT=$(CUDA) PETSC_CUDA=$(PETSC_CUDA) ./bin/runtests --gpu $(TESTS:=.c) $(TUTORIALS:=.c)

bench: $(BENCHES)

# make install PREFIX=...: the library, the header, a pkg-config file, and the Python package
# (in PYTHONDIR: the interpreter's dist-packages or site-packages under PREFIX; its _config.py
# names the installed library)
PREFIX ?= /usr/local
PYTHON ?= $(firstword $(foreach p,/usr/bin/python3 python3,$(shell $(p) -c 'import petsc4py' >/dev/null 2>&1 && command -v $(p))))
PYTHONDIR ?= $(or $(shell $(or $(PYTHON),python3) -c 'import os, sys; print(os.path.join("$(PREFIX)", "lib", "python%d.%d" % sys.version_info[:2], "dist-packages" if os.path.isdir("/usr/lib/python3/dist-packages") else "site-packages"))' 2>/dev/null),$(PREFIX)/lib/python3/dist-packages)
install: $(LIB)
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PYTHONDIR)/petscfmm
	install -m 755 $(LIB) $(DESTDIR)$(PREFIX)/lib/libpetscfmm.so
	install -m 644 include/petscfmm.h $(DESTDIR)$(PREFIX)/include/petscfmm.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@PETSC_LIB_DIR@|$(PETSC_LIB_DIR)|g' -e 's|@PETSC_INCLUDES@|$(PETSC_CC_INCLUDES)|g' -e 's|@PETSC_LIB_BASIC@|$(PETSC_LIB_BASIC)|g' bin/petscfmm.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/petscfmm.pc
	install -m 644 python/petscfmm/*.py $(DESTDIR)$(PYTHONDIR)/petscfmm/
	printf '# written by make install\nLIBRARY = "%s"\n' '$(PREFIX)/lib/libpetscfmm.so' > $(DESTDIR)$(PYTHONDIR)/petscfmm/_config.py
	@echo "petscfmm: Python package in $(PYTHONDIR) (if not on the interpreter's path: PYTHONPATH=$(PYTHONDIR))"

clean:
	rm -rf $(BUILD) lib $(TESTS) $(TUTORIALS) $(BENCHES) tests/results

.PHONY: all run test test-gpu bench install clean lib/libpetscfmm.so
