#!/usr/bin/env bash
# Device call 72 (written in session 23, no device lent that session; run it
# on the branch lever-head-tc, whose temporary --copy headtc arm it uses):
# the LM head's Q6_K product on the tensor cores (gemv_q6k_tc_kernel:
# mma.sync m16n8k16 u8 x s8, the codes as stored against x's four 8-bit
# limbs, the -32 in the MMA's C; a grid the card holds at once walking
# 16-row tiles, two in flight a block).  Section 40 found the one-shot
# form (main) bound by its instructions, ~157 us of its 161 at 512; this
# form's loop is 795 SASS instructions for a lane's 256 weights (3.1 a
# weight) against the rows form's 745 for 128 (5.8; static counts, sm_90).
#   checks: gpu_kern gemv_q6k_rows (the tc form against the float64
#     reference by the kernel tests' rule, both forms the same bits, 1 to
#     131,072 rows, k 512 to 4,096) and gemv, head; compute-sanitizer
#     memcheck on the tensor-core form's part tiles at k 3,584 and 4,096
#     (gemv_q6k_rows' cases of 1,061 and 2,053 rows); the golden digests with the default and with --copy headtc
#     (the logits' bits move: the sums are exact integers, not fp32's
#     order), then the small preset's logits with headtc against the
#     default's (helper_cmp_logits at 1e-4: tokens and max row error);
#   lab: build/bench/gemv new, output_head rows new (main's), tc (two
#     tiles in flight a block, two blocks an SM), tc1 (one, three) and tcr
#     (tc with B in registers and the corrections loaded as the MMA's C:
#     697 loop instructions against 795, 110 registers);
#   step: x4-bench-abab arm a main's head, arm b headtc, at 512 and 4,096
#     (3 pairs), and headtc1 at 512 (2 pairs); x4-profile at 512 of main's
#     head and headtc, side by side; Nsight Compute on one tc launch in the
#     lab (a profiled run, not a speed: where its time goes if it is not at
#     the ceiling).
set -u
. bench/call-lib.sh
call_begin
call_build all tests build/bench/gemv build/bench/mma_rate
call_full_bg
for t in gemv_q6k_rows gemv head; do
	build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt") ($((SECONDS-t0)) s)"
	grep -E "^FAIL" "$OUT/x/kern-$t.txt" | head -5
done
grep -E "tensor cores.*(worst|parity)" "$OUT/x/kern-gemv_q6k_rows.txt" | head -4
timeout 120 build/bench/gemv new >"$OUT/x/lab-gemv.tsv" 2>"$OUT/x/lab-gemv.err"
echo "lab rc=$? ($((SECONDS-t0)) s)"; grep -E "output_head" "$OUT/x/lab-gemv.tsv" | cut -f1-8
timeout 30 build/bench/mma_rate new >"$OUT/x/lab-mma_rate.tsv" 2>"$OUT/x/lab-mma_rate.err"
echo "mma_rate rc=$?"; cut -f2,3,5,8 "$OUT/x/lab-mma_rate.tsv"
echo "golden, default:"; bash bench/results/2026-12-03/golden.sh
cp /tmp/g-small.npy /tmp/g-small-block.npy; cp /tmp/g-small-greedy.json /tmp/g-small-block.json
echo "golden, --copy headtc:"; bash bench/results/2026-12-03/golden.sh --copy headtc
python3 tests/helper_cmp_logits.py small.headtc_vs_block /tmp/g-small.npy /tmp/g-small-greedy.json \
	/tmp/g-small-block.npy /tmp/g-small-block.json 1e-4
wait
echo "synth done ($((SECONDS-t0)) s)"
call_levers l "512 4096" 3 260 $'|--copy headtc'
call_levers l1 512 2 90 $'|--copy headtc1'
for a in block headtc; do
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --copy "$a" \
		>"$OUT/x/prof-512-$a.tsv" 2>"$OUT/x/prof-512-$a.err"
	echo "profile $a rc=$? ($((SECONDS-t0)) s)"
done
python3 bench/profile_diff.py "$OUT/x/prof-512-block.tsv" "$OUT/x/prof-512-headtc.tsv" 2>&1 | head -12
for c in "rows 1061 cols 3584 offset 0" "rows 2053 cols 4096 offset 0"; do
	timeout 60 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern "gemv_q6k_rows:$c" \
		>>"$OUT/x/memcheck-q6k.txt" 2>&1
	echo "memcheck $c rc=$? ($((SECONDS-t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-q6k.txt" | tail -n 1)"
done
timeout $((CALL_END - (SECONDS - t0))) ncu --set full --clock-control none -k regex:gemv_q6k_tc -c 1 \
	build/bench/gemv new >"$OUT/x/ncu-tc.txt" 2>&1
echo "ncu rc=$? ($((SECONDS-t0)) s)"
grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Eligible Warps|Registers Per|Achieved Occupancy)" \
	"$OUT/x/ncu-tc.txt" | head -8
call_end
