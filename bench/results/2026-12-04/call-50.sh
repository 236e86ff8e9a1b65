#!/usr/bin/env bash
# Device call 50 (2026-12-04, session 19): call 49's two levers priced by
# x4-bench-abab in one process at 512 and 4,096 tokens of context (arm a the
# lever off through its temporary --copy arm, arm b the defaults: b/a > 1
# when the lever pays), then x4-profile at 512 with PDL on (exposed us).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
[ -e bin/x4-run ] || make -j16 CUDA_ARCH=90 all >/dev/null 2>&1
[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy kvsep|\n--copy nocomb|' \
	timeout 420 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512-pdlon.err" | tail -n 1)"
awk -F'\t' '$1 == "kernel" {printf "%s %s %s %s\n", $2, $4, $5, $12}' "$OUT/x/profile-512-pdlon.tsv" | head -24
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
