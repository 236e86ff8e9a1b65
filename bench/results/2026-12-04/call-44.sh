#!/usr/bin/env bash
# Device call 44 (2026-12-04, session 18): the gate's count with one fence
# (temporary --copy fence0): hc_split_kernel's threads each fenced before
# the barrier and again after it in the last block; instead thread 0 alone
# fences after the barrier, before its atomic, and after it where its block
# is the last (the pattern of a grid-wide barrier).  The golden digests with
# the arm (the same bits), then x4-bench-abab at 512 and 4,096.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden --copy fence0:"; bash bench/results/2026-12-03/golden.sh --copy fence0
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='|--copy fence0' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for arm in block fence0; do
	bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --copy $arm >"$OUT/x/profile-512-$arm.tsv" 2>"$OUT/x/profile-512-$arm.err"
	echo "profile $arm rc=$?: $(awk -F'\t' '$1 == "kernel" && $2 ~ /hc_split/ {print $2, $4, $5, $12}' "$OUT/x/profile-512-$arm.tsv")"
done
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
