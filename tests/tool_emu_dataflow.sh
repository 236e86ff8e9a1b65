#!/usr/bin/env bash
# tool_emu_dataflow.sh - the step-structure probe's kernels
# (bench/kernels/dataflow.cuh: the lab bench/kernels/dataflow.cu times them on
# the GPU) run on the CPU by bench/emu's emulator on the tiny preset's plan:
# the kernels form against a float64 product of each stage, and the dataflow
# form (one persistent grid: a loader warp's ring of pages, a counter a stage
# between the blocks) the same bits for 1 to 5 blocks, rings of 1, 2 and 5
# pages, in order and at random, the bulk copies at issue and late; in the
# bf16 plan and the iq4 plan (the IQ4_NL stages' bytes decoded as codes)
# (bench/emu/emu_dataflow.cc says what each check is).  Prints the
# emulator's PASS/FAIL lines.
set -u
. "$(dirname "$0")/emu_setup.sh"
emu_setup emu_dataflow
emu_run emu_dataflow bench/emu/emu_dataflow.cc "the probe's two forms" -D__CUDACC__ -Ibench/kernels
