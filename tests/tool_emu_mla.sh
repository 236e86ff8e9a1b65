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
cd "$(dirname "$0")/.." || exit 2
lib=build/libx4.a
[ -f "$lib" ] || { echo "FAIL emu_mla.build: $lib is missing (run make first)"; exit 1; }
cuda=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../lib64
if ! ls "$cuda"/libcudart.so* >/dev/null 2>&1; then
	echo "SKIP emu_mla: no CUDA runtime to link the library against ($cuda)"
	exit 0
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/x4-emu.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
python3 bench/emu/prep.py kernels "$T/kern" >"$T/prep.log" 2>&1 ||
	{ echo "FAIL emu_mla.prep: $(tail -n 3 "$T/prep.log")"; exit 1; }
# LDFLAGS: the library's own link flags (make asan's sanitizers, which its objects call)
for nst in 2 3; do
	g++ -O2 -std=c++17 -D_GNU_SOURCE -DX4_HAVE_CUDA -D__CUDA_ARCH__=800 -DNST=$nst \
		-Ibench/emu/fake -I"$T/kern" -Ilib -w bench/emu/emu.cc -o "$T/emu$nst" "$lib" \
		-lpthread -lm -L"$cuda" -lcudart -Wl,-rpath,"$cuda" ${LDFLAGS:-} >"$T/build$nst.log" 2>&1 ||
		{ echo "FAIL emu_mla.build_nst$nst: $(grep -m 3 error "$T/build$nst.log")"; exit 1; }
done
echo "PASS emu_mla.build (the kernel headers compile for the emulator)"
"$T/emu2" decode || exit 1
"$T/emu2" prefill || exit 1
"$T/emu3" prefill >"$T/emu3.out"; rc=$?
sed 's/^\(PASS\|FAIL\) prefill/\1 prefill3/' "$T/emu3.out"
exit $rc
