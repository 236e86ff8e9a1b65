#!/usr/bin/env bash
# Device call 88 (session 28, main): the profiler's cache bytes.  A graphed
# step's capture marked the attention's cache rows from the pinned
# position before graph_step staged the step's own (the prompt's last
# chunk's start): every replay's attention got a few rows of cache (437,760
# bytes a step at 512 and at 4,096 alike).  Now the staging comes first:
#   - gpu_profile.sh (its new check: the graphed and the eager profile give
#     every kernel the same bytes a step), gpu_model (the step's bits kept);
#   - x4-profile --pdl off at 512, 4,096 and 32,500 (--max-model-len 32832),
#     for the goal table's attention rows: the cache's share of the read
#     ceiling (bench/decode_tsv.py's stream_pct_of_ceiling_kv_cache).
set -u
. bench/call-lib.sh
call_begin
call_build all tests
call_full_bg
upto 60 bash tests/gpu_profile.sh >"$OUT/x/gpu_profile.log" 2>&1
echo "gpu_profile rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_profile.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_profile.log") failed ($((SECONDS - t0)) s)"
grep -E '^FAIL|same_bytes' "$OUT/x/gpu_profile.log" | head -5
upto 150 bash tests/gpu_model.sh >"$OUT/x/gpu_model.log" 2>&1
echo "gpu_model rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_model.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_model.log") failed ($((SECONDS - t0)) s)"
grep -E '^FAIL' "$OUT/x/gpu_model.log" | head -3
wait
echo "synth done ($((SECONDS - t0)) s)"
mkdir -p "$OUT/x/g"
for ctx in 512 4096 32500; do
	mml=""; [ $ctx -gt 4096 ] && mml="--max-model-len 32832"
	upto 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl off $mml \
		>"$OUT/x/g/profile-$ctx.tsv" 2>"$OUT/x/g/profile-$ctx.err"
	echo "profile $ctx rc=$? ($((SECONDS - t0)) s)"
	awk -F'\t' '$1=="kernel" && $2 ~ /mla/ {print $2, $4, $5, $9, $10, $11}' "$OUT/x/g/profile-$ctx.tsv"
	grep -E "read ceiling|unprofiled" "$OUT/x/g/profile-$ctx.err"
done
python3 bench/decode_tsv.py "$OUT/x/g" "$(git rev-parse --short HEAD)" "$(date -u +%F)" "--pdl off" | grep -E "attn|kv_cache"
call_end
