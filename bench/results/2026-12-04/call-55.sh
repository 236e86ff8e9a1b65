#!/usr/bin/env bash
# Device call 55 (2026-12-04, session 19; call 54 was the graph's edge
# census, one command: every kernel of the step's chain has a programmatic
# edge but the argmax pair).  Lever E: a BF16 product whose grid is more
# than the card holds at once (the attention's output projection: 896
# blocks, 396 an H200 wave) has each block of the first wave bulk-prefetch
# its later-wave successors' rows into the L2 before its wait.  Temporary
# arm: --copy nopf (none).  The bits must not move.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 200 build/tests/gpu_kern gemv >"$OUT/x/kern-gemv.txt" 2>&1
echo "gpu_kern gemv rc=$?: $(tail -n 1 "$OUT/x/kern-gemv.txt")"; grep -E "^FAIL" "$OUT/x/kern-gemv.txt" | head -5
echo "golden:"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy nopf|' \
	timeout 300 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512-pdlon.err" | tail -n 1)"
awk -F'\t' '$1 == "kernel" {printf "%s %s %s %s\n", $2, $4, $5, $12}' "$OUT/x/profile-512-pdlon.tsv" | head -4
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
