#!/usr/bin/env bash
# Device call 14 (2026-12-03, session 12): the kernel lab's L2-prefetch
# program (bench/kernels/l2pf.cu: the one-token MoE cold, after a one-block
# and a 132-block prefetch of its chosen experts, and warm) with the MoE and
# tensor-core labs beside it, on HEAD.
set -u
t0=$SECONDS
make -j16 CUDA_ARCH=90 build/bench/l2pf build/bench/moe build/bench/tcv >"$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
for p in l2pf moe tcv; do
	timeout 120 build/bench/$p all >"$OUT/lab-$p.tsv" 2>"$OUT/lab-$p.err"
	echo "lab $p rc=$? ($((SECONDS-t0)) s)"
	cut -f1-3,5-7 "$OUT/lab-$p.tsv"; grep '^#' "$OUT/lab-$p.err" | head -5
done
