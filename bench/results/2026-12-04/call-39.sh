#!/usr/bin/env bash
# Device call 39 (2026-12-04, session 17), branch lever-attn64 (1e5fcf0): rounds
# of 64 with a span's half-empty last round done as a round of 32, priced
# again against rounds of 32 (--copy attn32) at 32,500 first, then 512 and
# 4,096.  Checks: gpu_kern mla, the golden digests (tiny's spans are 32
# rows: every round is a half round there).  Little device time is left:
# output goes to stdout and two packed files.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
build/tests/gpu_kern mla >"$OUT/x/kern-mla.txt" 2>&1
echo "gpu_kern mla rc=$?: $(tail -n 1 "$OUT/x/kern-mla.txt")"; grep -E "^FAIL" "$OUT/x/kern-mla.txt" | head -5
echo "golden:"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l32" LEVER_CTX="32500" LEVER_PAIRS=2 LEVER_WARMUP=1 LEVERS='--copy attn32|' bash bench/gpu-session.sh levers >"$OUT/x/levers-32500.txt" 2>&1
echo "levers 32500 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers-32500.txt"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy attn32|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
