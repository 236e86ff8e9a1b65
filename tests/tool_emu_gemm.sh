#!/usr/bin/env bash
# tool_emu_gemm.sh - the prefill's tensor-core gemm core (kernels/gemm_mma.cuh)
# run on the CPU by bench/emu's emulator: x4k_gemm's tile kernel
# (gemm_mma_kernel) on IQ4_NL and BF16 weights and the routed experts' tiles
# (moe_gu_mma, moe_down_mma) on IQ4_NL and Q8_0, their text copied out of
# kernels/*.cu by prep.py and compiled with g++, a fiber a thread, ldmatrix,
# mma.sync m16n8k16 (BF16) and fma.rn.bf16x2 as the PTX ISA defines them,
# cp.async landing at issue or as late as its wait allows (and only inside
# the buffers the driver allocated), the warps in order or at random.  It
# checks their indexing, decoding and pipeline where there is no GPU (CI):
# every output against a float64 reference from the same bytes
# (x4b_decode_row) at the kernel tests' rule (1e-5 of the sum of |terms|),
# and the same bits under a random schedule with late copies.  Its MMA sums
# exactly (the hardware truncates), so its figures are not the GPU's bits;
# build/tests/gpu_kern is the test of those.  Prints the emulator's PASS/FAIL
# lines.
set -u
. "$(dirname "$0")/emu_setup.sh"
emu_setup emu_gemm
emu_run emu_gemm bench/emu/emu_gemm.cc "the gemm core and its kernels" -D__CUDACC__
