#!/usr/bin/env bash
# tool_emu_step.sh - the persistent decode step (kernels/step_kernel.cuh,
# x4k_step; docs/step.md) run on the CPU by bench/emu's emulator: every block
# of a small grid on fibers at once (the grid barrier needs them all live), a
# fiber a thread, cp.async landing at issue or as late as its wait allows,
# warps in order or at random.  On the tiny checkpoint and its Q8_0-expert
# twin, step after step from position 0, each step's logits against the CPU
# trunk's (F32, the fp16 cache: docs/numerics.md 4's 1e-3 for two fp32 paths,
# the same argmax), and the same bits under a random schedule with late
# copies: the step's indexing, its ring, its ownership of columns and its
# barriers where there is no GPU (CI).  Grids of 1, 2, 3 and 5 blocks and
# the four block shapes (16 or 8 warps, 3 or 2 ring slots).  The GPU's
# own bits are make test-gpu's (tests/gpu_model.sh).  Prints the emulator's
# PASS/FAIL lines.
set -u
. "$(dirname "$0")/emu_setup.sh"
emu_setup emu_step
# -fno-strict-aliasing: the kernels read shared memory through the vector
# types CUDA allows; g++ -O2 would assume they do not alias.
emu_build emu_step.build bench/emu/emu_step.cc "$T/emu_step" -D__CUDACC__ -DX4_EMU -fno-strict-aliasing
echo "PASS emu_step.build (the persistent step compiles for the emulator)"
SYNTH=bin/x4-synth
[ -x "$SYNTH" ] || { echo "FAIL emu_step.synth: $SYNTH is missing (run make)"; exit 1; }
"$SYNTH" --preset tiny --seed 1 -o "$T/tiny" >"$T/synth.log" 2>&1 &&
	"$SYNTH" --preset tiny --seed 1 --expert-type q8_0 -o "$T/q8" >>"$T/synth.log" 2>&1 ||
	{ echo "FAIL emu_step.synth: $(tail -n 2 "$T/synth.log")"; exit 1; }
rc=0
for run in "tiny 16 3 5 4" "tiny 16 2 3 3" "tiny 8 3 2 3" "tiny 8 2 1 3" "q8 16 3 3 3"; do
	set -- $run
	"$T/emu_step" "$T/$1" "$2" "$3" "$4" "$5" 2>"$T/err" | grep -v '^#' || true
	r=${PIPESTATUS[0]}
	[ "$r" -eq 0 ] || { rc=1; echo "FAIL emu_step.run.$1.nw$2.nslot$3.g$4: exit $r $(tail -n 2 "$T/err")"; }
done
exit $rc
