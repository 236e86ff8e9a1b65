#!/usr/bin/env bash
# Device call 87 (session 28, main): after call 86 (dataflowv 0.67x,
# dataflowv16 0.78x of the kernels form at 512; 1.03x on the uniform step of
# 120 stages, 0.88x at 240: ~6 us a stage more than the kernels form's ~3),
# where the warp form's stage goes: dataflowv16n (a pause between a count's
# polls) and dataflowv16x (no wait for other blocks' counts: timing only,
# the form's cost without its cross-block waits), on x4's plan at 512, the
# fold plan and the uniform steps of 120 and 240 stages.
set -u
. bench/call-lib.sh
call_begin
call_build build/bench/dataflow
for run in "512" "512 fold" "512 uniform=120" "512 uniform=240" "512 uniform=480"; do
	set -- $run
	n=${run// /-}
	upto 60 build/bench/dataflow all $1 16 3 ${2:-bf16} >"$OUT/x/dataflow-$n.tsv" 2>"$OUT/x/dataflow-$n.err"
	echo "dataflow $run rc=$? ($((SECONDS - t0)) s)"
	grep -E "^# (kernels|dataflow|outputs)|^lab" "$OUT/x/dataflow-$n.err"
done
call_end
