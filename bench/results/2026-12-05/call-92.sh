#!/usr/bin/env bash
# Device call 92 (for session 29, on main, an H200: `run` with kind
# nvidia-h200): the goal table with its attention rows at 32,500, which
# x4-profile could not fill before 5ad2225 (RESULTS 56): gpu-session.sh
# decode (x4-bench-abab's control pair at 512 and 4,096, x4-run at 32,500),
# x4-profile --pdl off at 512, 4,096 and 32,500 (--max-model-len 32832),
# then bench/decode_tsv.py over them (stream_pct_of_ceiling_kv_cache).
set -u
. bench/call-lib.sh
call_begin
call_build all
call_full_bg
wait
OUT="$OUT/x/g" upto 150 bash bench/gpu-session.sh decode 2>&1 | grep -E "^decode|arm"
pkill -f bin/x4-bench-abab; pkill -f bin/x4-run
for ctx in 512 4096 32500; do
	mml=""; [ $ctx -gt 4096 ] && mml="--max-model-len 32832"
	upto 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl off $mml \
		>"$OUT/x/g/profile-$ctx.tsv" 2>"$OUT/x/g/profile-$ctx.err"
	echo "profile $ctx rc=$? ($((SECONDS - t0)) s)"
done
python3 bench/decode_tsv.py "$OUT/x/g" COMMIT "$(date -u +%F)" "--pdl off" | cut -f1-6
call_end
