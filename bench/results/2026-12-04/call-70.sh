#!/usr/bin/env bash
# Device call 70 (written in session 22; run after call 69, on the branch
# lever-attn-wide): the wide decode attention at 512 and 4,096 tokens of
# context, where its 128 splits move more partial bytes than cache bytes
# and its blocks are half as many at a short span: wide (128 splits),
# wide64, widep (pipelined, 128), widep64, each against main's kernel, 3
# pairs; then x4-profile at 32,500 with ARM (default wide: set it to call
# 69's winner) for the attention's and the combine's exposed time.
set -u
. bench/call-lib.sh
ARM=${ARM:-wide}
call_begin
call_build all
call_full_bg
wait
echo "synth done ($((SECONDS-t0)) s)"
call_levers l "512 4096" 3 420 $'|--copy wide\n|--copy wide64\n|--copy widep\n|--copy widep64'
for a in block "$ARM"; do
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 32500 --steps 16 --copy "$a" \
		>"$OUT/x/prof-32500-$a.tsv" 2>"$OUT/x/prof-32500-$a.err"
	echo "profile $a rc=$? ($((SECONDS-t0)) s)"
done
python3 bench/profile_diff.py "$OUT/x/prof-32500-block.tsv" "$OUT/x/prof-32500-$ARM.tsv" 2>&1 | head -14
call_end
