#!/usr/bin/env bash
# Device call 60 (2026-12-04, session 20): call 59's lever lost 3.5%, and
# its profile put the loss in the down (+9.9 us a launch exposed).  Arm
# gateinl: the FFN gate before such a down finishes its own Sinkhorn in its
# launch (no side stream), so the down's launch needs no join on the side
# stream's event.  Priced against --copy gatesep (the separate gate), with
# call 59's arm again.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
timeout 120 build/tests/gpu_kern "moe_experts:sum next" >"$OUT/x/kern-next.txt" 2>&1
echo "gpu_kern sum next rc=$?: $(tail -n 1 "$OUT/x/kern-next.txt")"; grep -E "^FAIL" "$OUT/x/kern-next.txt" | head -8
echo "golden --copy gateinl:"; bash bench/results/2026-12-03/golden.sh --copy gateinl
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy gatesep|--copy gateinl\n--copy gatesep|' \
	timeout 240 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for a in "--copy gateinl" "--copy gatesep"; do
	t=$(echo "x$a" | tr -c 'a-z0-9' '_')
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 $a >"$OUT/x/prof-$t.tsv" 2>"$OUT/x/prof-$t.err"
	echo "profile $a rc=$? $(grep unprofiled "$OUT/x/prof-$t.err" | tail -1)"
	awk -F'\t' '$1=="kernel"{printf "%-46s %7s %9s %9s\n", substr($2,1,46), $4, $5, $12}' "$OUT/x/prof-$t.tsv" | head -8
done
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
