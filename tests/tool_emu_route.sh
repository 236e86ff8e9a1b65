#!/usr/bin/env bash
# tool_emu_route.sh - the router's top k (x4route::top_k of
# kernels/moe_route_dev.cuh, shared by the selection kernels and the batch-1
# gate/up launch) run on the CPU by bench/emu's emulator: the header
# compiled with g++, a fiber a thread, shfl and redux.sync as warp
# rendezvous, the warps in order or at random.  Built twice: at
# __CUDA_ARCH__ 800 (emu_build's), the selection by two reductions a round,
# and at 750, the shuffle tree; each must give every lane x4r_topk's picks
# (expert, unbiased score bit for bit, their sum) on random scores, the
# experts past n_expert, exact ties across and within lanes, -0 against +0,
# infinities and NaN.  Its picks are the GPU's bits (no arithmetic but the
# float sums g + bias and the score sum, rounded as on the device);
# build/tests/gpu_kern moe_router checks the same on the GPU.  Prints the
# emulator's PASS/FAIL lines.
set -u
. "$(dirname "$0")/emu_setup.sh"
emu_setup emu_route
emu_run emu_route bench/emu/emu_route.cc "the top k at sm_80, redux.sync"; a=$?
emu_run emu_route_sm75 bench/emu/emu_route.cc "the top k below sm_80, the shuffle tree" \
	-U__CUDA_ARCH__ -D__CUDA_ARCH__=750; b=$?
[ $a -eq 0 ] && [ $b -eq 0 ]
