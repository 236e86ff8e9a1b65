#!/usr/bin/env bash
# Device call 17 (2026-12-03, session 12): call 16's lever lost (0.988x) and
# its lab rows put the old copy ahead; two more arms to tell its parts apart:
# --copy blockdivlat (HEAD's copy code with call 16's shorter chains after
# the wait: one round trip for the table, x after the weights, the routes'
# weights loaded during the stream) and --copy blocktile (call 16's copy
# with the gate's tile copied before the up's), each against HEAD's code
# (--copy blockdiv).  The lab's rows; the golden digests with each arm.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab build/bench/tcv >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 120 build/bench/tcv all >"$OUT/lab-tcv.tsv" 2>"$OUT/x/lab-tcv.err"
echo "lab tcv rc=$? ($((SECONDS-t0)) s)"; grep -E 'moe' "$OUT/lab-tcv.tsv" | grep tc8_k1 | cut -f2,3,5
for c in blockdivlat blocktile; do bash bench/results/2026-12-03/golden.sh --copy $c; done
echo "golden ($((SECONDS-t0)) s)"
wait
ab() { # name ctx a b
	timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
ab lat 512 "--copy blockdiv" "--copy blockdivlat"
ab tile 512 "--copy blockdiv" "--copy blocktile"
ab lat 4096 "--copy blockdiv" "--copy blockdivlat"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
