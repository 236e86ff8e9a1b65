#!/usr/bin/env bash
# Device call 71 (written in session 22, no device lent that session; run it
# on the branch lever-router-shared, whose temporary --copy rs arm it uses):
# the router's logits and the shared expert's gate/up in one launch, beside
# each other after the FFN gate (tc_rows_kernel<..., RS>: blocks 0..63 a
# logit each, the rest the shared expert's 64 dense blocks), so that the
# routed gate/up launch behind it holds only its 256 routed blocks: one
# wave at two blocks an SM, where today 56 of its 320 start as a second
# wave when the shared blocks finish (bench/RESULTS.md 42).  main's kernels
# keep their SASS (checked here with cuobjdump: every function of
# moe_experts.o, moe_router.o, gemv_quant.o the same instructions).
# Two forms: rs, the routed blocks after their launch's wait (so after the
# shared expert's blocks too, ~2.5 us after the router's); rsf, the routed
# blocks start on a count the router's blocks raise (fence, atomic; warp 0
# spins, bounded: a trap, not a hang), wait at their end, and the last
# resets the count.
#   checks: gpu_kern moe_experts (the pick cases' two new arms: the same
#     bits as the router's own logits, tables, shared product and y); the
#     golden digests with --copy rs and rsf (the same bits expected);
#   step: x4-bench-abab arm a main's launches, arm b rs or rsf, at 512 and
#     4,096 (3 pairs); x4-profile at 512 of the three, side by side.
set -u
. bench/call-lib.sh
call_begin
call_build all tests
call_full_bg
build/tests/gpu_kern moe_experts >"$OUT/x/kern-moe.txt" 2>&1
echo "gpu_kern moe_experts rc=$?: $(tail -n 1 "$OUT/x/kern-moe.txt") ($((SECONDS-t0)) s)"; grep -E "^FAIL" "$OUT/x/kern-moe.txt" | head -5
grep -c 'LEVER: router beside' "$OUT/x/kern-moe.txt"
for a in rs rsf; do echo "golden --copy $a:"; timeout 100 bash bench/results/2026-12-03/golden.sh --copy $a; done
wait
echo "synth done ($((SECONDS-t0)) s)"
call_levers l "512 4096" 3 260 $'|--copy rs\n|--copy rsf'
for a in block rs rsf; do
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --copy "$a" \
		>"$OUT/x/prof-512-$a.tsv" 2>"$OUT/x/prof-512-$a.err"
	echo "profile $a rc=$? ($((SECONDS-t0)) s)"
done
for a in rs rsf; do python3 bench/profile_diff.py "$OUT/x/prof-512-block.tsv" "$OUT/x/prof-512-$a.tsv" 2>&1 | head -12; done
call_end
