#!/usr/bin/env bash
# Device call 52 (2026-12-04, session 19): lever C, the routed gate/up's
# L2 prefetches (Hopper's bulk prefetch, cp.async.bulk.prefetch.L2): right
# after its top k each block of the first half of the tiles prefetches the
# rows of the tile k/2 later (blocks that start late, as the first wave
# ends) and a slice of its and that tile's expert's down; the shared
# expert's blocks a slice of the shared down before their wait.  Temporary
# arms: --copy nopf (none), --copy pfgu (the late tiles' rows only).  The
# bits must not move: gpu_kern moe_experts, the golden digests.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 200 build/tests/gpu_kern moe_experts >"$OUT/x/kern-moe_experts.txt" 2>&1
echo "gpu_kern moe_experts rc=$?: $(tail -n 1 "$OUT/x/kern-moe_experts.txt")"; grep -E "^FAIL" "$OUT/x/kern-moe_experts.txt" | head -5
echo "golden:"; bash bench/results/2026-12-03/golden.sh
echo "golden --copy nopf:"; bash bench/results/2026-12-03/golden.sh --copy nopf
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy nopf|\n--copy nopf|--copy pfgu' \
	timeout 300 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512-pdlon.err" | tail -n 1)"
awk -F'\t' '$1 == "kernel" {printf "%s %s %s %s\n", $2, $4, $5, $12}' "$OUT/x/profile-512-pdlon.tsv" | head -8
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
