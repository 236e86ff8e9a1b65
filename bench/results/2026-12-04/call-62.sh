#!/usr/bin/env bash
# Device call 62 (2026-12-04, session 20): the gate's finish spread over
# its blocks.  The split gate's blocks also leave their columns' Gram
# matrix of the streams; the last block sums the partials and publishes pre
# and the collapse's norm (|x|^2 = sum pre_s pre_t G_st) under a
# generation flag, and every block collapses and norms its own 32 columns
# (held in shared memory) instead of the last block doing all 3584.
# Priced against the last block's collapse (temporary --copy gatelast).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 100 build/tests/gpu_kern hc >"$OUT/x/kern-hc.txt" 2>&1
echo "gpu_kern hc rc=$?: $(tail -n 1 "$OUT/x/kern-hc.txt")"; grep -E "^FAIL" "$OUT/x/kern-hc.txt" | head -8
echo "golden --copy gatelast:"; bash bench/results/2026-12-03/golden.sh --copy gatelast
echo "golden (flag):"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy gatelast|\n--copy gatelast|--copy gatelast' \
	timeout 240 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for a in "" "--copy gatelast"; do
	t=$(echo "x$a" | tr -c 'a-z0-9' '_')
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 $a >"$OUT/x/prof-$t.tsv" 2>"$OUT/x/prof-$t.err"
	echo "profile '$a' rc=$? $(grep unprofiled "$OUT/x/prof-$t.err" | tail -1)"
	awk -F'\t' '$1=="kernel"{printf "%-46s %7s %9s %9s\n", substr($2,1,46), $4, $5, $12}' "$OUT/x/prof-$t.tsv" | head -6
done
timeout 60 compute-sanitizer --tool memcheck build/tests/gpu_kern hc >"$OUT/x/memcheck.txt" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck.txt" | tail -n 1)"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
