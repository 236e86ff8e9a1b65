#!/usr/bin/env bash
# Device call 63 (2026-12-04, session 20): where the split gate lets the
# next kernel start.  Calls 59-62 say the gate's tail slows when the next
# kernel's weight loads are in flight beside it.  Arms (temporary --copy):
# trigearly (main: the trigger before the wait), the default (the trigger
# after the block's count: the next kernel's blocks start during the last
# block's finish), trignone (no trigger: they start at the gate's exit).
# The same bits (golden digests).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden (trigger after the count):"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy trigearly|\n--copy trigearly|--copy trignone' \
	timeout 240 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for a in "" "--copy trigearly"; do
	t=$(echo "x$a" | tr -c 'a-z0-9' '_')
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 $a >"$OUT/x/prof-$t.tsv" 2>"$OUT/x/prof-$t.err"
	echo "profile '$a' rc=$? $(grep unprofiled "$OUT/x/prof-$t.err" | tail -1)"
	awk -F'\t' '$1=="kernel"{printf "%-46s %7s %9s %9s\n", substr($2,1,46), $4, $5, $12}' "$OUT/x/prof-$t.tsv" | head -6
done
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
