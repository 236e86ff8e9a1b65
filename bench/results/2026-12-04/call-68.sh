#!/usr/bin/env bash
# Device call 68 (session 21, not run: no device was lent after call 67;
# run it on the branch lever-l2pf-idle, whose temporary --copy arms it uses):
# the L2 prefetch of a sublayer's next weights in the chain's idle windows,
# second form.  Call 67's side-stream prefetch from 4 blocks of 256 issued
# at 0.24-0.57 TB/s and the prefetch stream set the step; here
#   lab:  build/bench/l2pf (bf16_l2pf rows: W_o and q_a/kv_a cold, warm, and
#         after prefetches of several spreads and a 10 us gap);
#   arms (temporary --copy) against main's step, at 512:
#     pfo, pfq, pfs: the side stream's prefetch, now 132 blocks of 32 threads,
#       16 KB a prefetch (W_vb and W_o after the absorb; q_a, kv_a, q_b, W_kb
#       before the attention gate; the router and shared expert before the
#       FFN gate);
#     ipfo, ipfq, ipfoq: the same ranges prefetched by the attention's own
#       blocks (ipfo) and the attention gate's own blocks (ipfq) after their
#       wait, one warp a block (no stream, no block places to find).
# And the MoE lab's stamps through bench/moe_step_trace.py (the summary
# moved there from the lab this session: its first run on a GPU).
set -u
. bench/call-lib.sh
call_begin
call_build all build/bench/l2pf build/bench/moe_trace
call_full_bg
timeout 90 build/bench/l2pf new >"$OUT/x/lab-l2pf.tsv" 2>"$OUT/x/lab-l2pf.err"
echo "lab rc=$? ($((SECONDS-t0)) s)"; cut -f1-7 "$OUT/x/lab-l2pf.tsv" | grep bf16 | column -t
MOE_TRACE_DIR="$OUT/x" timeout 60 build/bench/moe_trace new >"$OUT/x/moe_trace.tsv" 2>"$OUT/x/moe_trace.err"
echo "moe_trace rc=$?"; python3 bench/moe_step_trace.py --column 64 "$OUT/x/moe_trace-step.tsv" | tee "$OUT/x/moe_trace-step.txt" | grep -E 'stamp(0|5)|late|entered'
for a in pfall ipfoq; do echo "golden --copy $a:"; bash bench/results/2026-12-03/golden.sh --copy $a; done
wait
echo "synth done ($((SECONDS-t0)) s)"
call_levers l 512 3 330 $'|--copy ipfoq\n|--copy ipfo\n|--copy ipfq\n|--copy pfo\n|--copy pfq\n|--copy pfs'
call_end
