#!/usr/bin/env bash
# Device call 67 (2026-12-04, session 21): the L2 prefetch of a sublayer's
# next weights in the chain's idle windows, on a prefetch stream forked
# from the chain (Hopper's cp.async.bulk.prefetch.L2, 4 blocks).  Arms
# (temporary --copy): pfo = W_vb and W_o, forked after the absorb (the
# attention and combine read little); pfq = q_a, kv_a, q_b, W_kb of the
# layer, forked before its attention gate (after the last down); pfall both.
# The arms were temporary: the code is f8277b4 on the branch lever-l2pf-idle.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden --copy pfall:"; bash bench/results/2026-12-03/golden.sh --copy pfall
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy pfo\n|--copy pfq\n|--copy pfall' \
	timeout 200 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers 512 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
OUT="$OUT/x/l4" LEVER_CTX="4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy pfo\n|--copy pfq\n|--copy pfall' \
	timeout 200 bash bench/gpu-session.sh levers >"$OUT/x/levers4.txt" 2>&1
echo "levers 4096 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers4.txt"
for a in "" "--copy pfall"; do
	t=$(echo "x$a" | tr -c 'a-z0-9' '_')
	timeout 50 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 $a >"$OUT/x/prof-$t.tsv" 2>"$OUT/x/prof-$t.err"
	echo "profile '$a' rc=$? $(grep unprofiled "$OUT/x/prof-$t.err" | tail -1)"
	awk -F'\t' '$1=="kernel"{printf "%-46s %7s %9s %9s\n", substr($2,1,46), $4, $5, $12}' "$OUT/x/prof-$t.tsv" | head -14
done
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
