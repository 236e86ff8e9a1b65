#!/usr/bin/env bash
# Device call 84 (session 27, on main after the one-round cache store
# landed, 78b64e1, and the probe's kernelsp, 7bccc03):
#   - main's checks: gpu_kern kv_store, gpu_model (the whole model against
#     the CPU float64 reference, the golden digests: the landing keeps them);
#   - the probe with its third kernels form, kernelsp (as many blocks as the
#     card holds, each taking its units through a ring of two pages, the
#     input staged once a block): x4's plan at 512 with trace, at 4,096, the
#     iq4 plan, fold, and uniform=120/240/480 (call 82 found the one-unit-a-
#     block form 1.87x slower than the ceilings' synthetic step at K=120);
#   - the goal table at main: gpu-session.sh decode (x4-bench-abab's
#     control pair at 512 and 4,096, x4-run at 32,500), x4-profile --pdl off
#     at 512 and 4,096.
set -u
. bench/call-lib.sh
CALL_END=${CALL_END_84:-560}
call_begin
call_build all tests build/bench/dataflow
call_full_bg
upto 60 build/tests/gpu_kern kv_store >"$OUT/x/kern-kv.txt" 2>&1
echo "gpu_kern kv_store rc=$?: $(tail -n 1 "$OUT/x/kern-kv.txt") ($((SECONDS - t0)) s)"
upto 120 bash tests/gpu_model.sh >"$OUT/x/gpu_model.log" 2>&1
echo "gpu_model rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_model.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_model.log") failed ($((SECONDS - t0)) s)"
grep -E '^FAIL' "$OUT/x/gpu_model.log" | head -3
for run in "bf16 512 trace" "bf16 4096" "iq4 512" "bf16 512 fold" "bf16 512 uniform=120" \
	"bf16 512 uniform=240" "bf16 512 uniform=480"; do
	set -- $run
	tag=$(echo "$run" | tr ' =' '-_')
	f="$OUT/x/dataflow-$tag"
	extra="${3:-}"
	extra=${extra//trace/trace=$f}
	upto 60 build/bench/dataflow old $2 16 3 $1 $extra >"$f.tsv" 2>"$f.err"
	echo "dataflow $run rc=$? ($((SECONDS - t0)) s)"
	grep -E "^# (kernels|dataflow:|outputs|trace)" "$f.err" | head -n 8
done
grep -E "^# trace kernelsp" -A 21 "$OUT/x/dataflow-bf16-512-trace.err"
wait
echo "synth done ($((SECONDS - t0)) s)"
OUT="$OUT/x/g" upto 100 bash bench/gpu-session.sh decode 2>&1 | grep -E "^decode|arm"
pkill -f bin/x4-bench-abab; pkill -f bin/x4-run
for ctx in 512 4096; do
	mkdir -p "$OUT/x/g"
	upto 30 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl off \
		>"$OUT/x/g/profile-$ctx.tsv" 2>"$OUT/x/g/profile-$ctx.err"
	echo "profile $ctx rc=$? ($((SECONDS - t0)) s)"
done
call_end
