#!/usr/bin/env bash
# Device call 76 (session 24; run it on main after the merge of
# land-head-tc; ~400 s of budget left, so its steps end by 300 s): the GPU
# tests the landing touches, on main's tree alone (call 75 ran all of make
# test-gpu on a tree with lever arms, beside an orphaned 32,500-token bench,
# and gpu_profile's prefill check failed there): gpu_trunk, gpu_ceiling,
# gpu_model (the whole model against the CPU float64 reference and the
# golden digests), gpu_profile, and gpu_kern's Q6_K, gemv and head cases;
# the goal table's figures (gpu-session.sh decode: x4-bench-abab's control
# pair at 512 and 4,096, x4-run at 32,500; x4-profile --pdl off at 512 and
# 4,096); then, if 150 s are left, the wide decode attention's arm
# applied to the same tree (call-76-wide.patch: lever-attn-wide merged onto
# this main) priced at 32,500 against the landed step (1 pair).
set -u
. bench/call-lib.sh
CALL_END=${CALL_END_76:-300}
call_begin
call_build all tests
call_full_bg
for t in build/tests/gpu_trunk tests/gpu_ceiling.sh tests/gpu_model.sh tests/gpu_profile.sh; do
	n=$(basename "$t" .sh)
	if [[ $t == *.sh ]]; then timeout 120 bash "$t" >"$OUT/x/$n.log" 2>&1; else timeout 60 "$t" >"$OUT/x/$n.log" 2>&1; fi
	echo "$n rc=$?: $(grep -c '^PASS' "$OUT/x/$n.log") passed, $(grep -c '^FAIL' "$OUT/x/$n.log") failed ($((SECONDS-t0)) s)"
	grep -E '^FAIL' "$OUT/x/$n.log" | head -3
done
for t in gemv_q6k_rows gemv head; do
	timeout 60 build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt")"; grep -E "^FAIL" "$OUT/x/kern-$t.txt" | head -3
done
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/g" timeout 120 bash bench/gpu-session.sh decode 2>&1 | grep -E "^decode|arm"
for ctx in 512 4096; do
	timeout 30 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl off \
		>"$OUT/x/g/profile-$ctx.tsv" 2>"$OUT/x/g/profile-$ctx.err"
	echo "profile $ctx rc=$? ($((SECONDS-t0)) s)"
done
if [ $((CALL_END - (SECONDS - t0))) -ge 150 ]; then
	git apply bench/results/2026-12-05/call-76-wide.patch && echo "wide patch applied"
	make -j16 CUDA_ARCH=90 all >"$OUT/x/build-wide.log" 2>&1; echo "build wide rc=$? ($((SECONDS-t0)) s)"
	call_levers l32 32500 1 $((CALL_END - (SECONDS - t0))) $'|--copy wide'
else
	echo "wide: no time left ($((SECONDS-t0)) s)"
fi
call_end
