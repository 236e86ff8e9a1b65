#!/usr/bin/env bash
# Device call 81 (written in session 26, no device lent that session; run it
# on main, first in the next session: it is cheap, and it says whether the
# step's structure or its kernels should take the sessions after it).
# bench/kernels/dataflow.cu: a decode step of the released model's shapes
# with ideal products, as a kernel a stage under PDL (x4's structure) and as
# one persistent dataflow kernel (a loader warp's ring of 5 or 2 pages, a
# counter a stage), at 512, 4,096 and 32,768 positions of cache; 16 steps a
# run, 3 pairs (kernels, dataflow, dataflow2, kernels).  The program checks
# that every form gives the same bits and exits 1 if not; a wait that never
# ends gives up after 2 s with a message.  Each step cut to the time left.
set -u
. bench/call-lib.sh
CALL_END=${CALL_END_81:-240}
call_begin
call_build build/bench/dataflow
for ctx in 512 4096 32768; do
	upto 60 build/bench/dataflow all $ctx 16 3 >"$OUT/x/dataflow-$ctx.tsv" 2>"$OUT/x/dataflow-$ctx.err"
	echo "dataflow $ctx rc=$? ($((SECONDS - t0)) s)"
	grep -vE "^# pair" "$OUT/x/dataflow-$ctx.err" | head -n 12
	cut -f2,5-7 "$OUT/x/dataflow-$ctx.tsv"
done
call_end
