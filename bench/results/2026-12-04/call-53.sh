#!/usr/bin/env bash
# Device call 53 (2026-12-04, session 19): lever D, the routed gate/up in
# one wave: one token's launch has as many rows of routed blocks as the
# card holds beside the shared column (on the H200 3 of 4: 64 + 192 = 256
# blocks of 264 places), the block of row m also taking tile m + 3 after
# its first (the same x and B words; the weights' copies into the same
# buffers), that tile's rows bulk-prefetched into the L2 after the top k.
# Temporary arms: --copy onetile (a tile a block, 320 blocks: main),
# --copy nopf (one wave, no prefetch).  The bits must not move.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 200 build/tests/gpu_kern moe_experts >"$OUT/x/kern-moe_experts.txt" 2>&1
echo "gpu_kern moe_experts rc=$?: $(tail -n 1 "$OUT/x/kern-moe_experts.txt")"; grep -E "^FAIL" "$OUT/x/kern-moe_experts.txt" | head -5
echo "golden:"; bash bench/results/2026-12-03/golden.sh
echo "golden --copy nopf:"; bash bench/results/2026-12-03/golden.sh --copy nopf
timeout 60 build/bench/moe_trace new >"$OUT/x/trace.tsv" 2>"$OUT/x/trace.err"
echo "trace rc=$?"; grep -E 'time|traced_span' "$OUT/x/trace.tsv" | head -5
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy onetile|\n--copy onetile|--copy nopf' \
	timeout 300 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512-pdlon.err" | tail -n 1)"
awk -F'\t' '$1 == "kernel" {printf "%s %s %s %s\n", $2, $4, $5, $12}' "$OUT/x/profile-512-pdlon.tsv" | head -6
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
