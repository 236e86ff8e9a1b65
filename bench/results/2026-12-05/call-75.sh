#!/usr/bin/env bash
# Device call 75 (session 24; run it on the branch lever-combo-land): calls
# 73, 71 and 69 in one, for a session whose lends are scarce.  The tree is
# land-head-tc (the head's Q6_K product on the tensor cores by default, call
# 72: 1.014x at 512) with lever-combo's temporary --copy arms (2 rs, 3 rsf,
# 4 wide, 5 wide96, 6 wide64, 7 widep, 8 widep64, 9-16 the L2 prefetch's).
#   landing: the small preset's golden digests written from this tree (its
#     head's bits move on purpose; tiny's do not), x4-run's steady decode at
#     512 (the goal table's command), then tests/run-gpu.sh (make
#     test-gpu) within the call's time;
#   checks: gpu_kern moe_experts (rs, rsf against the router's own logits
#     and table: the same bits) and mla (wide at 128 and 64 splits, widep
#     at 128: the tests' rule and a second call's bits); the golden
#     digests with --copy rs, rsf and wide against the tree's (the same bits
#     expected);
#   step: x4-bench-abab, arm a the landed step, at 512 and 4,096 rs and rsf
#     (3 pairs), at 32,500 wide and widep (2 pairs); x4-profile at 512 of
#     the default, rs and rsf (attribution, not a speed).
set -u
. bench/call-lib.sh
call_begin
call_build all tests build/bench/gemv
call_full_bg
GOLDEN_TREE=. COMMIT=${COMMIT:-land-head-tc} OUT="$OUT/x/golden" bash bench/gpu-session.sh golden 2>&1 | tail -n 2
cp tests/data/gpu_golden_tiny.json tests/data/gpu_golden_small.json "$OUT/x/"
for t in moe_experts mla; do
	timeout 90 build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt") ($((SECONDS-t0)) s)"
	grep -E "^FAIL" "$OUT/x/kern-$t.txt" | head -5
done
for a in rs rsf wide; do echo "golden --copy $a:"; timeout 60 bash bench/results/2026-12-03/golden.sh --copy $a; done
wait
echo "synth done ($((SECONDS-t0)) s)"
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
timeout 60 bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 64 --ignore-eos >/dev/null 2>"$OUT/x/run-512.err"
echo "x4-run 512 rc=$? ($((SECONDS-t0)) s): $(grep -E 'steady|first' "$OUT/x/run-512.err" | tr '\n' ' ')"
call_levers l "512 4096" 3 150 $'|--copy rs\n|--copy rsf'
call_levers l32 32500 2 120 $'|--copy wide\n|--copy widep'
for a in block rs rsf; do
	timeout 30 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --copy "$a" \
		>"$OUT/x/prof-512-$a.tsv" 2>"$OUT/x/prof-512-$a.err"
	echo "profile $a rc=$? ($((SECONDS-t0)) s)"
done
for a in rs rsf; do python3 bench/profile_diff.py "$OUT/x/prof-512-block.tsv" "$OUT/x/prof-512-$a.tsv" 2>&1 | head -8; done
timeout $((CALL_END - (SECONDS - t0))) bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 14 "$OUT/x/test-gpu.txt"
call_end
