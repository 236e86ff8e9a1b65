#!/usr/bin/env bash
# tool_emu_tc.sh - the decode's IQ4_NL products on the tensor cores
# (kernels/gemv_tc.cuh) checked on the CPU: `build/bench/tcv emu` emulates
# one warp's fragments on the host with the header's own code (the codebook
# lookup, the k permutation of the staged words, the B builds of both cores)
# and the MMAs by the PTX ISA's fragment layouts, against the float64
# product of the same bytes, for both cores at both k ranges, on uniform and
# widely spread x.  No GPU is touched; build/tests/gpu_kern tests the
# kernels themselves.  The lab program is built by `make tests` where nvcc
# is; without it, one SKIP line.
set -u
cd "$(dirname "$0")/.." || exit 2
b=build/bench/tcv
[ -x "$b" ] || { echo "SKIP emu_tc: $b is not built (no nvcc)"; exit 0; }
out=$("$b" emu 2>&1); rc=$?
printf '%s\n' "$out" | sed -n -e 's/^# tcv emu *\(.*[^ ]\) *PASS$/PASS emu_tc: \1/p' \
	-e 's/^# tcv emu *\(.*[^ ]\) *FAIL$/FAIL emu_tc: \1/p'
n=$(printf '%s\n' "$out" | grep -c '^# tcv emu ')
[ "$n" -ge 8 ] || echo "FAIL emu_tc.count: $n emulated cases, expected 8 (exit $rc)"
exit $rc
