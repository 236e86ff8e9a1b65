#!/usr/bin/env bash
# tool_emu_mla.sh - the tensor-core attention kernels (x4k_mla_decode_mma,
# x4k_mla_prefill_mma and the combine) run on the CPU by bench/emu's
# emulator: the real kernel headers compiled with g++, a fiber a thread,
# shfl, ldmatrix and mma.sync m16n8k16 as the PTX ISA defines their
# fragments, cp.async landing at issue or as late as its wait allows, the
# warps in order or at random.  It checks their indexing and ordering where
# there is no GPU (CI): every output against the plain-C reference
# x4r_mla_attn at the kernel tests' rule, the same bits under a random
# schedule with late copies, and the prefill's chunking invariance.  Its MMA
# sums exactly (the hardware truncates), so its figures are not the GPU's
# bits; build/tests/gpu_kern "mla:..." is the test of those.  Prints the
# emulator's PASS/FAIL lines.
set -u
. "$(dirname "$0")/emu_setup.sh"
emu_setup emu_mla
for nst in 2 3; do
	emu_build emu_mla.build_nst$nst bench/emu/emu.cc "$T/emu$nst" -DNST=$nst
done
echo "PASS emu_mla.build (the kernel headers compile for the emulator)"
"$T/emu2" decode || exit 1
"$T/emu2" prefill || exit 1
"$T/emu3" prefill >"$T/emu3.out"; rc=$?
sed 's/^\(PASS\|FAIL\) prefill/\1 prefill3/' "$T/emu3.out"
exit $rc
