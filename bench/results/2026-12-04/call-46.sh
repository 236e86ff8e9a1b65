#!/usr/bin/env bash
# Device call 46 (2026-12-04, session 18), branch lever-split-counter: a
# diagnostic of call 41's loss.  The gate/up in k halves in one wave as
# call 41's first form (no cluster: the halves meet through global memory,
# a counter a tile, the second adding both halves' sums in warp order),
# against the unsplit launch (temporary --copy nosplit), on main 239041a's
# kernels otherwise (the top k on one warp, the shared blocks first).  If
# this also loses in the step, what loses is the one wave, not the
# clusters.  The golden digests first (the same bits).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden (split):"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy nosplit|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
