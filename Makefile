# x4 - build, test and benchmark.  `make` builds build/libx4.a and bin/x4-*;
# `make test` runs every CPU test and compiles every .cu; `make test-gpu` runs
# the GPU tests (on a machine with an NVIDIA GPU); `make asan` runs the CPU
# suite again with ASan and UBSan; `make check-opt` compiles the C at every
# -O level; `make install PREFIX=... [DESTDIR=...]` installs.
#
# CUDA: found through nvcc on PATH or CUDA_HOME.  Without it the CPU parts are
# built and the skipped parts are named.  CUDA_ARCH=90 builds one arch.
#
# CFLAGS and LDFLAGS are the user's (default -O2 -g) and add to X4_CFLAGS,
# which the build always needs: `make CFLAGS=-O0` keeps -std=c11 ... -Ilib.

# `make` alone is `make all`, whatever rule comes first (x4-serve's, where
# its libraries are installed, is written above all's).
.DEFAULT_GOAL := all

# Without -j on the command line, use every core: most of a fresh build is
# nvcc, one process a file.  Sub-makes share the top level's jobserver.
NPROC    := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
ifeq ($(MAKELEVEL),0)
  MAKEFLAGS += -j$(NPROC)
endif
# `make clean all` must not remove while it builds.
ifneq ($(filter clean,$(MAKECMDGOALS)),)
  .NOTPARALLEL:
endif

CC       ?= cc
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null))
NVCC     := $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,)
ifeq ($(wildcard $(NVCC)),)
  NVCC :=
endif
CUDA_ARCH ?= 75 80 86 89 90
COMMIT   := $(shell git describe --always --dirty 2>/dev/null || echo unknown)

CFLAGS   ?= -O2 -g
LDFLAGS  ?=
X4_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter -pthread -Ilib
DEPFLAGS := -MMD -MP
ALL_CFLAGS = $(X4_CFLAGS) $(DEPFLAGS) $(CPPFLAGS) $(CFLAGS)
LDLIBS   := -lm -lpthread
# Machine code for each arch, plus the newest arch's PTX so that a newer GPU
# can still run the kernels (the driver compiles it at load).
# Warnings are errors on both sides (nvcc's own and the host compiler's);
# -lineinfo maps SASS to source lines for Nsight Compute and x4-profile
# without changing the code generated.
NVFLAGS  := -O3 -std=c++17 -Ilib -Werror all-warnings -lineinfo \
            -Xcompiler -Wall,-Wno-unused-parameter,-Werror -MMD -MP \
            $(foreach a,$(CUDA_ARCH),-gencode=arch=compute_$(a),code=sm_$(a)) \
            -gencode=arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))

# X4_PDL=1: programmatic dependent launch on from the start (kernels/pdl.cuh).
ifeq ($(X4_PDL),1)
  NVFLAGS += -DX4_PDL_DEFAULT=1
endif
# X4_TRACE_MOE=1: a trace build, not a speed: the batch-1 MoE launches stamp
# their blocks' phases, and X4_MOE_TRACE=FILE writes the last call's stamps
# at exit (kernels/moe_experts.cu; bench/moe_step_trace.py reads them).
ifeq ($(X4_TRACE_MOE),1)
  NVFLAGS += -DX4_TCV_TRACE=1
endif

ifneq ($(NVCC),)
  X4_CFLAGS += -DX4_HAVE_CUDA -I$(CUDA_HOME)/include
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
  CU_SRC := $(wildcard kernels/*.cu)
else
  CU_SRC :=
endif

# lib/ holds the public header (x4.h) and the internal ones; each part's
# sources are a folder of their own (README: the library's parts).
LIB_SRC  := $(wildcard lib/*/*.c)
LIB_ASM  := $(wildcard lib/*/*.S)
LIB_OBJ  := $(LIB_SRC:%.c=build/%.o) $(LIB_ASM:%.S=build/%.o) $(CU_SRC:%.cu=build/%.o)
CMD_SRC  := $(wildcard cmd/x4-*.c)
TOOLS    := $(CMD_SRC:cmd/%.c=bin/%)
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(TEST_SRC:tests/%.c=build/tests/%)
# x4-serve needs libmicrohttpd and jansson (Debian: apt-get install
# libmicrohttpd-dev libjansson-dev); without them it is not built, and said so.
HAVE_SERVE := $(shell pkg-config --exists libmicrohttpd jansson 2>/dev/null && echo yes)
SERVE_SRC := $(wildcard cmd/serve_*.c)
SERVE_OBJ := $(SERVE_SRC:%.c=build/%.o)
ifeq ($(HAVE_SERVE),yes)
  SERVE_CFLAGS := $(shell pkg-config --cflags libmicrohttpd jansson)
  # private: the library's objects, prerequisites too, are built without them
  bin/x4-serve $(SERVE_OBJ): private X4_CFLAGS += $(SERVE_CFLAGS)
  bin/x4-serve: $(SERVE_OBJ)
  bin/x4-serve: private TOOL_EXTRA = $(SERVE_OBJ)
  bin/x4-serve: private LDLIBS += $(shell pkg-config --libs libmicrohttpd jansson)
else
  TOOLS := $(filter-out bin/x4-serve,$(TOOLS))
  CMD_SRC := $(filter-out cmd/x4-serve.c,$(CMD_SRC))
  SERVE_SRC :=
endif
# tests/gpu_*.c: a program each (gpu_kern: every kernel's parity, its cases in
# tests/gpu_kern/<kernel>.h over tests/gpu_harness.h); tests/run-gpu.sh runs them.
GPU_TEST_SRC := $(wildcard tests/gpu_*.c)
GPU_TESTS := $(if $(NVCC),$(GPU_TEST_SRC:tests/%.c=build/tests/%),)

.PHONY: all tools tests test test-gpu venv corpus fuzz clean tiny print-nvcc asan check-opt \
        install uninstall bench-kernels
all: build/libx4.a $(TOOLS) tiny
	@$(if $(NVCC),,echo "x4: nvcc not found: built the CPU parts only; skipped the CUDA kernels (kernels/*.cu) and the GPU tests")

# The commit goes into err.o alone, rebuilt when build/commit.txt changes
# (rewritten only when `git describe` gives something new).
$(shell mkdir -p build && (echo '$(COMMIT)' | cmp -s - build/commit.txt || echo '$(COMMIT)' >build/commit.txt))
build/lib/util/err.o: build/commit.txt
build/lib/util/err.o: X4_CFLAGS += -DX4_COMMIT='"$(COMMIT)"'

# The flags too: every object depends on build/flags.txt, rewritten only
# when the compilers, the flags or CUDA_ARCH differ from the last build's,
# so `make CUDA_ARCH=90` after a full build rebuilds what it changes.
# (A dry run, make -n, leaves it alone: it says what would be built.)
FLAGS_SIG := $(CC) $(ALL_CFLAGS) | $(NVCC) $(NVFLAGS) | $(LDFLAGS) $(LDLIBS)
ifeq ($(findstring n,$(filter-out -%,$(firstword $(MAKEFLAGS)))),)
  $(shell mkdir -p build && (echo '$(FLAGS_SIG)' | cmp -s - build/flags.txt || echo '$(FLAGS_SIG)' >build/flags.txt))
endif
$(LIB_OBJ): build/flags.txt

build/libx4.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

build/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Embedded data (the tokenizer): .incbin paths are relative to the tree's root.
build/%.o: %.S
	@mkdir -p $(@D)
	$(CC) -c -I. $< -o $@

build/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# cmd/tool.c: the helpers every tool shares (messages, parsers, checked writes).
TOOL_OBJ := build/cmd/tool.o
.SECONDARY: $(TOOL_OBJ) # made through a pattern rule: kept, not removed as intermediate
$(TOOL_OBJ): build/flags.txt
bin/%: cmd/%.c $(TOOL_OBJ) build/libx4.a build/flags.txt
	@mkdir -p $(@D) build/cmd
	$(CC) $(ALL_CFLAGS) -MF build/cmd/$*.d $< -o $@ $(TOOL_EXTRA) $(TOOL_OBJ) build/libx4.a \
	  $(LDFLAGS) $(LDLIBS)

build/tests/%: tests/%.c tests/t.h build/libx4.a build/flags.txt
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests $< -o $@ build/libx4.a $(LDFLAGS) $(LDLIBS)

# tests/helper_*.c: programs the Python oracles drive (not run on their own).
HELPERS := $(patsubst tests/%.c,build/tests/%,$(wildcard tests/helper_*.c))
tools: $(TOOLS)
# The kernel lab: one program an operation, old and new variants side by
# side (bench/kernels/lab.h); bench/kernels/run.sh builds and runs them all.
LAB_SRC := $(wildcard bench/kernels/*.cu)
LAB := $(if $(NVCC),$(LAB_SRC:bench/kernels/%.cu=build/bench/%),)
tests: $(TESTS) $(GPU_TESTS) $(HELPERS) $(LAB)
bench-kernels: $(LAB)
build/bench/%: bench/kernels/%.cu bench/kernels/lab.h build/libx4.a build/flags.txt
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
	@echo "x4: fetching the test oracles from PyPI into $(VENV) (nothing system-wide):" \
	  $$(grep -v '^#' tests/requirements.txt | tr '\n' ' ') >&2
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	touch $@

# The tokenizer oracle's English text (Debian packages unpacked under
# build/corpus; the script says what it fetches).  A failure here is the
# oracle's to report, so the rest of the suite still runs.
corpus:
	@tests/get-corpus.sh || echo "x4: no corpus: tests/oracle_tok.py will fail tok_corpus" >&2

test: all tests venv corpus
	@tests/run.sh

test-gpu: all tests
	@tests/run-gpu.sh

FUZZ_SECONDS ?= 60
fuzz: build/fuzz_gguf
	mkdir -p build/fuzz-corpus
	build/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build/fuzz-corpus tests/fuzz-seeds
FUZZ_SRC := $(wildcard lib/gguf/*.c) lib/util/err.c lib/quant/quant.c
build/fuzz_gguf: tests/fuzz_gguf.c $(FUZZ_SRC) lib/gguf_int.h lib/blockfmt.h lib/x4.h lib/x4_int.h
	@mkdir -p $(@D)
	clang -g -O1 -std=c11 -D_GNU_SOURCE -Ilib -fsanitize=fuzzer,address,undefined \
	  tests/fuzz_gguf.c $(FUZZ_SRC) -o $@ -lm

# ---- x4-profile: CUPTI and zlib ----------------------------------------------
# CUPTI ships with the CUDA Toolkit beside cudart (lib64/, lib/, or
# extras/CUPTI/); zlib compresses a .gz trace.  Without either, x4-profile is
# built anyway and refuses --device cuda:N (or a .gz trace) with a message.
CUPTI_LIBDIR := $(if $(NVCC),$(firstword $(foreach d,lib64 lib extras/CUPTI/lib64 extras/CUPTI/lib,\
  $(if $(wildcard $(CUDA_HOME)/$(d)/libcupti.so),$(CUDA_HOME)/$(d)))))
CUPTI_INC := $(if $(CUPTI_LIBDIR),$(firstword $(foreach d,include extras/CUPTI/include,\
  $(if $(wildcard $(CUDA_HOME)/$(d)/cupti.h),$(CUDA_HOME)/$(d)))))
HAVE_ZLIB := $(shell printf '\043include <zlib.h>\n' | $(CC) -E - >/dev/null 2>&1 && echo yes)
PROF_LIBS :=
PROF_SKIPPED :=
ifneq ($(CUPTI_INC),)
  build/lib/prof/prof_cupti.o: X4_CFLAGS += -DX4_HAVE_CUPTI -I$(CUPTI_INC)
  PROF_LIBS += -L$(CUPTI_LIBDIR) -Wl,-rpath,$(CUPTI_LIBDIR) -lcupti
else
  PROF_SKIPPED += CUPTI (x4-profile --device cuda:N)
endif
ifeq ($(HAVE_ZLIB),yes)
  build/lib/prof/trace.o: X4_CFLAGS += -DX4_HAVE_ZLIB
  PROF_LIBS += -lz
else
  PROF_SKIPPED += zlib (x4-profile --trace FILE.gz; apt-get install zlib1g-dev)
endif
bin/x4-profile build/tests/test_prof: LDLIBS += $(PROF_LIBS)
all: prof-note
.PHONY: prof-note
prof-note: $(TOOLS)
	@$(if $(strip $(PROF_SKIPPED)),echo "x4: not found at build time and so skipped: $(strip $(PROF_SKIPPED))",:)
	@$(if $(HAVE_SERVE),:,echo "x4: libmicrohttpd and jansson not found (pkg-config libmicrohttpd jansson): x4-serve not built; apt-get install libmicrohttpd-dev libjansson-dev")

# The CPU suite again, built with ASan and UBSan (no CUDA), in a tree of its
# own: build-asan/tree links to the sources and shares build/venv and
# build/corpus, so the same tests/run.sh runs the instrumented bin/ and
# build/ there.  Any sanitizer report fails the run (halt_on_error).
ASAN_TREE := build-asan/tree
ASAN_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0 \
            UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan: venv corpus
	@mkdir -p $(ASAN_TREE)/build
	@for d in Makefile lib cmd tests man data kernels bench deploy; do \
	  [ -e $(ASAN_TREE)/$$d ] || ln -s ../../$$d $(ASAN_TREE)/$$d; done
	@for d in venv corpus; do \
	  [ -e $(ASAN_TREE)/build/$$d ] || ln -s ../../../build/$$d $(ASAN_TREE)/build/$$d; done
	$(ASAN_ENV) $(MAKE) --no-print-directory -C $(ASAN_TREE) CUDA_HOME= CFLAGS='$(ASAN_CFLAGS)' \
	  LDFLAGS='-fsanitize=address,undefined' test

# Every C file of lib/, cmd/ and tests/ compiles warning-free at each -O
# level (the optimiser decides which warnings GCC can see): compile only.
OPT_LEVELS := -O0 -O1 -O2 -O3 -Os
OPT_SRC := $(LIB_SRC) $(CMD_SRC) cmd/tool.c $(SERVE_SRC) $(wildcard tests/*.c)
check-opt:
	@for o in $(OPT_LEVELS); do \
	  echo "x4: compiling lib/, cmd/ and tests/ at $$o" >&2; \
	  printf '%s\n' $(OPT_SRC) | \
	    xargs -P $(NPROC) -I{} $(CC) $$o $(X4_CFLAGS) $(SERVE_CFLAGS) -Itests -c {} -o /dev/null || exit 1; \
	done

# Installed tools find the tiny model at PREFIX/share/x4/models/tiny
# (x4t_default_model in cmd/tool.c: <bindir>/../share/x4/models/tiny).
PREFIX ?= /usr/local
BINDIR  = $(DESTDIR)$(PREFIX)/bin
MAN1DIR = $(DESTDIR)$(PREFIX)/share/man/man1
TINYDIR = $(DESTDIR)$(PREFIX)/share/x4/models/tiny
install: all
	install -d '$(BINDIR)' '$(MAN1DIR)' '$(TINYDIR)'
	install -m 0755 $(TOOLS) '$(BINDIR)/'
	install -m 0644 $(wildcard man/*.1) '$(MAN1DIR)/'
	install -m 0644 build/models/tiny/* '$(TINYDIR)/' # globbed after `all` wrote them

uninstall:
	rm -f $(TOOLS:bin/%='$(BINDIR)'/%) $(patsubst man/%,'$(MAN1DIR)'/%,$(wildcard man/*.1))
	rm -rf '$(DESTDIR)$(PREFIX)/share/x4'

# What the build decided about CUDA, for tests/run.sh.
print-nvcc:
	@echo $(NVCC)

clean:
	rm -rf build bin build-asan

-include $(shell find build -name '*.d' 2>/dev/null)
