#!/usr/bin/env bash
# Device call 86 (session 28, main): the probe's persistent form by warps
# (dataflowv, dataflowv16: no block barrier a unit, the input staged in one
# round a run of a stage's units) against the kernels forms and section
# 52's dataflow forms, on x4's plan at 512 and 4,096, the fold plan, the
# uniform steps of 120 and 240 stages, work=2000 and iq4 at 512.
set -u
. bench/call-lib.sh
call_begin
call_build build/bench/dataflow
for run in "512" "4096" "512 fold" "512 uniform=120" "512 uniform=240" "512 work=2000" "512 iq4"; do
	set -- $run
	n=${run// /-}
	upto 60 build/bench/dataflow all $1 16 3 ${2:-bf16} >"$OUT/x/dataflow-$n.tsv" 2>"$OUT/x/dataflow-$n.err"
	echo "dataflow $run rc=$? ($((SECONDS - t0)) s)"
	grep -E "^# (kernels|dataflow|outputs)|^lab" "$OUT/x/dataflow-$n.err"
done
call_end
