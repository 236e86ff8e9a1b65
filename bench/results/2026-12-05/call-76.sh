#!/usr/bin/env bash
# Device call 76 (session 24; run it on main after the merge of
# land-head-tc): the landing's GPU checks on main's tree alone (call 75 ran
# all of make test-gpu on a tree with lever arms, beside an orphaned
# 32,500-token bench, and gpu_profile's prefill check failed there) and the
# goal table's figures, in the order of their worth, each step cut to the
# time left before CALL_END (CALL_END_76, default 240: this session's
# budget ran low on failed starts), so that call_end always packs:
#   gpu_model (the whole model against the CPU float64 reference, the golden
#   digests) and gpu_profile; the goal table (gpu-session.sh decode:
#   x4-bench-abab's control pair at 512 and 4,096, x4-run at 32,500);
#   gpu_kern's Q6_K, gemv and head cases, gpu_trunk, gpu_ceiling; x4-profile
#   --pdl off at 512 and 4,096.  (The wide decode attention's arm, once a
#   patch applied here, is call 80's on lever-combo-25, which holds the same
#   branch: session 25.)
set -u
. bench/call-lib.sh
CALL_END=${CALL_END_76:-240}
call_begin
call_build all tests
call_full_bg
for t in tests/gpu_model.sh tests/gpu_profile.sh; do
	n=$(basename "$t" .sh)
	upto 100 bash "$t" >"$OUT/x/$n.log" 2>&1
	echo "$n rc=$?: $(grep -c '^PASS' "$OUT/x/$n.log") passed, $(grep -c '^FAIL' "$OUT/x/$n.log") failed ($((SECONDS-t0)) s)"
	grep -E '^FAIL' "$OUT/x/$n.log" | head -3
done
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/g" upto 80 bash bench/gpu-session.sh decode 2>&1 | grep -E "^decode|arm"
pkill -f bin/x4-bench-abab; pkill -f bin/x4-run # (if its cut stopped the session's shell only)
for t in gemv_q6k_rows head gemv; do
	upto 30 build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt")"; grep -E "^FAIL" "$OUT/x/kern-$t.txt" | head -3
done
upto 20 build/tests/gpu_trunk >"$OUT/x/gpu_trunk.log" 2>&1; echo "gpu_trunk rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_trunk.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_trunk.log") failed"
upto 30 bash tests/gpu_ceiling.sh >"$OUT/x/gpu_ceiling.log" 2>&1; echo "gpu_ceiling rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_ceiling.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_ceiling.log") failed"
for ctx in 512 4096; do
	mkdir -p "$OUT/x/g"
	upto 30 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl off \
		>"$OUT/x/g/profile-$ctx.tsv" 2>"$OUT/x/g/profile-$ctx.err"
	echo "profile $ctx rc=$? ($((SECONDS-t0)) s)"
done
pkill -f x4-bench-abab
call_end
