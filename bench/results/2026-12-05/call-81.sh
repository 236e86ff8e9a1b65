#!/usr/bin/env bash
# Device call 81 (written in session 26, no device lent that session; run it
# on main, first in the next session (~200 s): it says whether the
# step's structure or its kernels should take the sessions after it).
# bench/kernels/dataflow.cu: a decode step of the released model's shapes
# with ideal products, as a kernel a stage under PDL (x4's structure) and as
# one persistent dataflow kernel (a loader warp's ring of 5 or 2 pages, a
# counter a stage), at 512, 4,096 and 32,768 positions of cache, the
# products first as BF16 dot products (the structure's own cost), then with
# the IQ4_NL stages decoded as codes on the CUDA cores (iq4: what decoding
# costs 8 compute warps an SM), and with 2 us of serial work in each unit of
# the small stages (work=2000: the gates, the norms, the combine, the top k:
# does a form hide it behind the weights?); 16 steps a run, 3 pairs (kernels,
# dataflow, dataflow2, dataflow16, kernels).  The program checks
# that every form gives the same bits and exits 1 if not; a wait that never
# ends gives up after 2 s with a message.  Each step cut to the time left.
set -u
. bench/call-lib.sh
CALL_END=${CALL_END_81:-300}
call_begin
call_build build/bench/dataflow
for run in "bf16 512" "bf16 4096" "iq4 512" "iq4 4096" "bf16 512 work=2000" "bf16 4096 work=2000" \
	"bf16 32768" "iq4 32768"; do
	set -- $run
	f="$OUT/x/dataflow-$1-$2${3:+-$3}"
	upto 60 build/bench/dataflow all $2 16 3 $1 ${3:-} >"$f.tsv" 2>"$f.err"
	echo "dataflow $run rc=$? ($((SECONDS - t0)) s)"
	grep -vE "^# pair" "$f.err" | head -n 12
	cut -f2,5-7 "$f.tsv"
done
call_end
