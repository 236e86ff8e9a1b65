# x4 - build, test and benchmark.  `make` builds build/libx4.a and bin/x4-*;
# `make test` runs every CPU test and compiles every .cu; `make test-gpu` runs
# the GPU tests (on a machine with an NVIDIA GPU).
#
# CUDA: found through nvcc on PATH or CUDA_HOME.  Without it the CPU parts are
# built and the skipped parts are named.  CUDA_ARCH=90 builds one arch.

CC       ?= cc
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null))
NVCC     := $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,)
ifeq ($(wildcard $(NVCC)),)
  NVCC :=
endif
CUDA_ARCH ?= 75 80 86 89 90
COMMIT   := $(shell git describe --always --dirty 2>/dev/null || echo unknown)

CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
            -MMD -MP -pthread -Ilib
LDLIBS   := -lm -lpthread
# Machine code for each arch, plus the newest arch's PTX so that a newer GPU
# can still run the kernels (the driver compiles it at load).
NVFLAGS  := -O3 -std=c++17 -Ilib -Xcompiler -Wall,-Wno-unused-parameter -MMD -MP \
            $(foreach a,$(CUDA_ARCH),-gencode=arch=compute_$(a),code=sm_$(a)) \
            -gencode=arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))

# X4_PDL=1: programmatic dependent launch on from the start (kernels/pdl.cuh).
ifeq ($(X4_PDL),1)
  NVFLAGS += -DX4_PDL_DEFAULT=1
endif

ifneq ($(NVCC),)
  CFLAGS += -DX4_HAVE_CUDA -I$(CUDA_HOME)/include
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
  CU_SRC := $(wildcard kernels/*.cu)
else
  CU_SRC :=
endif

LIB_SRC  := $(wildcard lib/*.c lib/ref/*.c)
LIB_ASM  := $(wildcard lib/*.S)
LIB_OBJ  := $(LIB_SRC:%.c=build/%.o) $(LIB_ASM:%.S=build/%.o) $(CU_SRC:%.cu=build/%.o)
CMD_SRC  := $(wildcard cmd/x4-*.c)
TOOLS    := $(CMD_SRC:cmd/%.c=bin/%)
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(TEST_SRC:tests/%.c=build/tests/%)
GPU_TEST_SRC := $(wildcard tests/gpu_*.c)
GPU_TESTS := $(if $(NVCC),$(GPU_TEST_SRC:tests/%.c=build/tests/%),)

.PHONY: all tools tests test test-gpu venv fuzz clean tiny print-nvcc bench-kernels
all: build/libx4.a $(TOOLS) tiny
	@$(if $(NVCC),,echo "x4: nvcc not found: built the CPU parts only; skipped the CUDA kernels (kernels/*.cu) and the GPU tests")

# The commit goes into err.o alone, rebuilt when build/commit.txt changes
# (rewritten only when `git describe` gives something new).
$(shell mkdir -p build && (echo '$(COMMIT)' | cmp -s - build/commit.txt || echo '$(COMMIT)' >build/commit.txt))
build/lib/err.o: build/commit.txt
build/lib/err.o: CFLAGS += -DX4_COMMIT='"$(COMMIT)"'

build/libx4.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

build/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# Embedded data (the tokenizer): .incbin paths are relative to the tree's root.
build/%.o: %.S
	@mkdir -p $(@D)
	$(CC) -c -I. $< -o $@

build/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

bin/%: cmd/%.c build/libx4.a
	@mkdir -p $(@D) build/cmd
	$(CC) $(CFLAGS) -MF build/cmd/$*.d $< -o $@ build/libx4.a $(LDLIBS)

build/tests/%: tests/%.c tests/t.h build/libx4.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests $< -o $@ build/libx4.a $(LDLIBS)

# tests/helper_*.c: programs the Python oracles drive (not run on their own).
HELPERS := $(patsubst tests/%.c,build/tests/%,$(wildcard tests/helper_*.c))
tools: $(TOOLS)
# The kernel lab: one program an operation, old and new variants side by
# side (bench/kernels/lab.h); bench/kernels/run.sh builds and runs them all.
LAB_SRC := $(wildcard bench/kernels/*.cu)
LAB := $(if $(NVCC),$(LAB_SRC:bench/kernels/%.cu=build/bench/%),)
tests: $(TESTS) $(GPU_TESTS) $(HELPERS) $(LAB)
bench-kernels: $(LAB)
build/bench/%: bench/kernels/%.cu bench/kernels/lab.h build/libx4.a
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -Ikernels -Ibench/kernels $< -o $@ build/libx4.a -lm -lpthread

# The tiny checkpoint every test and the README's first command use.
TINY := build/models/tiny/xing4_0-tiny.gguf
tiny: $(TINY)
$(TINY): bin/x4-synth
	@mkdir -p build/models
	bin/x4-synth --preset tiny --seed 1 -o build/models/tiny

# A local virtual environment with the oracle packages (never system-wide).
VENV := build/venv
venv: $(VENV)/.ok
$(VENV)/.ok: tests/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	touch $@

test: all tests venv
	@tests/run.sh

test-gpu: all tests
	@tests/run-gpu.sh

FUZZ_SECONDS ?= 60
fuzz: build/fuzz_gguf
	mkdir -p build/fuzz-corpus
	build/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build/fuzz-corpus tests/fuzz-seeds
FUZZ_SRC := $(wildcard lib/gguf*.c) lib/err.c lib/quant.c
build/fuzz_gguf: tests/fuzz_gguf.c $(FUZZ_SRC) $(wildcard lib/gguf*.h) lib/x4.h lib/x4_int.h
	@mkdir -p $(@D)
	clang -g -O1 -std=c11 -D_GNU_SOURCE -Ilib -fsanitize=fuzzer,address,undefined \
	  tests/fuzz_gguf.c $(FUZZ_SRC) -o $@ -lm

# What the build decided about CUDA, for tests/run.sh.
print-nvcc:
	@echo $(NVCC)

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
