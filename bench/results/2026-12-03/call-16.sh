#!/usr/bin/env bash
# Device call 16 (2026-12-03, session 12): the routed experts' launches
# after their wait (--copy block) against the pricing arm --copy blockdiv,
# which is HEAD's code: the block copy's addresses one add a copy instead
# of ~45 instructions; the gate/up's count, expert and start in one round
# trip with x loaded after the weights' copies; the down_sum's experts in
# one round trip and the routes' weights loaded during the weights' stream,
# not three dependent round trips a route in the epilogue.  Parity, the
# golden digests, the price at 512 and 4,096, the profile, the lab's rows.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile build/tests/gpu_kern \
	build/bench/tcv >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for f in gemv moe_experts; do
	timeout 90 build/tests/gpu_kern $f >"$OUT/x/k-$f.log" 2>&1
	echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/k-$f.log")"
	grep -E "^FAIL" "$OUT/x/k-$f.log" | head -5
done
bash bench/results/2026-12-03/golden.sh
echo "golden ($((SECONDS-t0)) s)"
timeout 120 build/bench/tcv all >"$OUT/lab-tcv.tsv" 2>"$OUT/x/lab-tcv.err"
echo "lab tcv rc=$? ($((SECONDS-t0)) s)"; grep -E 'moe' "$OUT/lab-tcv.tsv" | cut -f2,3,5; grep -ciE 'fail' "$OUT/x/lab-tcv.err"
wait
ab() { # name ctx a b
	timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
ab moe 512 "--copy blockdiv" "--copy block"
ab moe 4096 "--copy blockdiv" "--copy block"
timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>/dev/null; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	.*tc_|^class|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7,10,11
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
