#!/usr/bin/env bash
# Device call 12 (2026-12-03, session 11): the IQ4_NL tensor-core products'
# weights copied block-wide (--copy block: a block's 16 rows as one
# contiguous span, 512 contiguous bytes a warp's copy) against each warp's
# own 144-byte slice of 16 rows (--copy warp, 34% and 54% excess sectors in
# call 6's Nsight Compute).  Checks: gpu_kern's IQ4_NL products on both
# copies and the one-token MoE (warp copy = block copy, bit for bit); the
# whole model and the golden digests (the same bits); then the price at 512
# and 4,096 and the 512 profile with PDL off (attribution only).
set -u
t0=$SECONDS
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-walk-residual bin/x4-bench-abab bin/x4-profile \
	build/tests/helper_sample build/tests/gpu_kern >"$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1; echo done >/tmp/full.done) &
for f in gemv moe_experts; do
	timeout 150 build/tests/gpu_kern $f >"$OUT/k-$f.log" 2>&1
	echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/k-$f.log")"
	grep -E "^FAIL" "$OUT/k-$f.log" | head -5
done
timeout 200 bash tests/gpu_model.sh >"$OUT/gpu_model.log" 2>&1
echo "gpu_model rc=$? ($((SECONDS-t0)) s): $(grep -cE '^PASS' "$OUT/gpu_model.log") passed"
grep -E "^FAIL" "$OUT/gpu_model.log" | head
wait
ab() { # name ctx a b
	timeout 150 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/abab-$2-$1.err")"
}
ab copy 512 "--copy warp" "--copy block"
ab copy 4096 "--copy warp" "--copy block"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>/dev/null; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	.*tc_|^class|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7,10,11
