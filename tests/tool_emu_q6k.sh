#!/usr/bin/env bash
# tool_emu_q6k.sh - the decode step's Q6_K product (kernels/gemv_quant.cu)
# run on the CPU by bench/emu's emulator: gemv_q6k_rows_kernel at 2 and 4
# rows a warp against the staged gemv_kernel's sums (chunk_dot's, which the
# GPU's gemv_q6k_kernel has too), their text copied out of the .cu by
# prep.py and compiled with g++, a fiber a thread, cp.async landing at issue
# or as late as its wait allows (and only inside the weights).  Its sums
# are the GPU's (fp32 FMAs and adds, each rounded once), so it checks where
# there is no GPU (CI) that every row has the same bits at 2 and 4 rows a
# warp as at 1, in order and under a random schedule, and each against a
# float64 reference (x4b_decode_row) at the kernel tests' rule; and the
# tensor-core form (kernels/gemv_q6k_tc.cuh, its MMA emulated exactly) in
# each of its forms against the same reference, with one another's bits;
# build/tests/gpu_kern checks the same on the GPU.  Prints the emulator's
# PASS/FAIL lines.
set -u
. "$(dirname "$0")/emu_setup.sh"
emu_setup emu_q6k
emu_run emu_q6k bench/emu/emu_q6k.cc "the Q6_K gemv kernels" -D__CUDACC__
