#!/usr/bin/env bash
# Device call 76 (session 24; run it on main after the merge of
# land-head-tc; 586 s of budget left, so its steps end by 450 s): make
# test-gpu on main's tree alone (call 75 ran it on a tree with lever arms,
# beside an orphaned 32,500-token bench that its timeout had not stopped, and
# gpu_profile's prefill check failed there); the goal table's figures
# (gpu-session.sh decode: x4-bench-abab's control pair at 512 and 4,096,
# x4-run at 32,500; x4-profile --pdl off at 512 and 4,096); then, in what
# time is left, the wide decode attention's arm applied to the same tree
# (call-76-wide.patch: lever-attn-wide merged onto this main) priced at
# 32,500 against the landed step (1 pair), the bench stopped at the end.
set -u
. bench/call-lib.sh
CALL_END=450
call_begin
call_build all tests
call_full_bg
timeout 260 bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 8 "$OUT/x/test-gpu.txt"
cp build/test-logs/gpu_profile.log "$OUT/x/" 2>/dev/null
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/g" timeout 120 bash bench/gpu-session.sh decode 2>&1 | grep -E "^decode|arm"
for ctx in 512 4096; do
	timeout 30 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl off \
		>"$OUT/x/g/profile-$ctx.tsv" 2>"$OUT/x/g/profile-$ctx.err"
	echo "profile $ctx rc=$? ($((SECONDS-t0)) s)"
done
git apply bench/results/2026-12-05/call-76-wide.patch && echo "wide patch applied"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build-wide.log" 2>&1; echo "build wide rc=$? ($((SECONDS-t0)) s)"
call_levers l32 32500 1 $((CALL_END - (SECONDS - t0))) $'|--copy wide'
pkill -f x4-bench-abab; sleep 1
ls -la "$OUT/x/l32" 2>/dev/null | tail -n 3
call_end
