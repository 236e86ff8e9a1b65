#!/usr/bin/env bash
# Device call 18 (2026-12-03, session 12): calls 15-17's levers all lost
# and are gone; HEAD's code with one change: tc_down_sum's epilogue loads
# the routes' weights (start, route, weight: three dependent loads a route)
# for every route at once, three round trips in all instead of three a
# route one route after another.  The pricing arm --copy routeserial keeps
# HEAD's epilogue.  Parity, golden digests, the lab's rows, the price at
# 512 and 4,096, the 512 profile with PDL off.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile build/tests/gpu_kern \
	build/bench/tcv >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 90 build/tests/gpu_kern moe_experts >"$OUT/x/k-moe_experts.log" 2>&1
echo "gpu_kern moe_experts rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/k-moe_experts.log")"
grep -E "^FAIL" "$OUT/x/k-moe_experts.log" | head -5
bash bench/results/2026-12-03/golden.sh
echo "golden ($((SECONDS-t0)) s)"
timeout 120 build/bench/tcv all >"$OUT/lab-tcv.tsv" 2>"$OUT/x/lab-tcv.err"
echo "lab tcv rc=$? ($((SECONDS-t0)) s)"; grep -E 'moe' "$OUT/lab-tcv.tsv" | grep tc8_k1 | cut -f2,3,5
wait
ab() { # name ctx a b
	timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
ab epi 512 "--copy routeserial" "--copy block"
ab epi 4096 "--copy routeserial" "--copy block"
timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>/dev/null; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	.*tc_|^class	routed|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7,10,11
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
