#!/usr/bin/env bash
# Device call 76 (session 24; run it on main after the merge of
# land-head-tc): make test-gpu on main's tree alone (call 75 ran it on a tree
# with lever arms, beside an orphaned 32,500-token bench that its timeout
# had not stopped, and gpu_profile's prefill check failed there), the goal
# table's x4-run at 512; then the wide decode attention's arms applied to
# the same tree (call-76-wide.patch: lever-attn-wide merged onto this main,
# its temporary --copy wide|wide96|wide64|widep|widep64) and priced at
# 32,500 tokens of context against the landed step (2 pairs), the bench
# stopped at the call's end.
set -u
. bench/call-lib.sh
call_begin
call_build all tests
call_full_bg
timeout 300 bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 8 "$OUT/x/test-gpu.txt"
cp build/test-logs/gpu_profile.log "$OUT/x/" 2>/dev/null
wait
echo "synth done ($((SECONDS-t0)) s)"
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
timeout 60 bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 64 --ignore-eos >/dev/null 2>"$OUT/x/run-512.err"
echo "x4-run 512 rc=$? ($((SECONDS-t0)) s): $(grep -E 'steady|first' "$OUT/x/run-512.err" | tr '\n' ' ')"
git apply bench/results/2026-12-05/call-76-wide.patch && echo "wide patch applied"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build-wide.log" 2>&1; echo "build wide rc=$? ($((SECONDS-t0)) s)"
call_levers l32 32500 2 $((CALL_END - 15 - (SECONDS - t0))) $'|--copy wide'
pkill -f x4-bench-abab; sleep 1
ls -la "$OUT/x/l32" 2>/dev/null | tail -n 3
call_end
