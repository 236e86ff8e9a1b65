#!/usr/bin/env bash
# Device call 19 (2026-12-03, session 12): the tensor-core IQ4_NL products'
# block copy by phases (stage_phases: 288 bytes of every row a phase, each
# phase's copies arriving on a shared-memory barrier; a warp waits for its
# own k range, not the block's; the down_sum a phase a matrix) against
# 492c089's block copy (the pricing arm --copy blockall).  Parity, golden
# digests, the price at 512 and 4,096, the lab's rows, the profile; then the
# rest of make test-gpu but gpu_kern's other families, while the time lasts
# (the device budget was nearly spent on machines that did not start).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests build/bench/tcv >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for f in gemv moe_experts; do
	timeout 90 build/tests/gpu_kern $f >"$OUT/x/k-$f.log" 2>&1
	echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/k-$f.log")"
	grep -E "^FAIL" "$OUT/x/k-$f.log" | head -5
done
bash bench/results/2026-12-03/golden.sh
echo "golden ($((SECONDS-t0)) s)"
wait
ab() { # name ctx a b
	timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
ab phases 512 "--copy blockall" "--copy block"
ab phases 4096 "--copy blockall" "--copy block"
timeout 120 build/bench/tcv all >"$OUT/lab-tcv.tsv" 2>"$OUT/x/lab-tcv.err"
echo "lab tcv rc=$? ($((SECONDS-t0)) s)"; grep -E 'tc8_k1' "$OUT/lab-tcv.tsv" | cut -f2,3,5; grep -c FAIL "$OUT/x/lab-tcv.err"
timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>/dev/null; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	.*tc_|^class	(routed|shared|dense)|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7,10,11
for t in build/tests/gpu_trunk tests/gpu_profile.sh tests/gpu_ceiling.sh tests/gpu_model.sh; do
	[ $((SECONDS - t0)) -lt 330 ] || { echo "skipped $t: out of time"; continue; }
	n=$(basename "$t" .sh)
	if [[ "$t" == *.sh ]]; then timeout 150 bash "$t" >"$OUT/x/$n.log" 2>&1; else timeout 60 "$t" >"$OUT/x/$n.log" 2>&1; fi
	echo "$n rc=$? ($((SECONDS-t0)) s): $(grep -c '^PASS ' "$OUT/x/$n.log") passed, $(grep -c '^FAIL ' "$OUT/x/$n.log") failed"
	grep '^FAIL ' "$OUT/x/$n.log" | head -5
done
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
