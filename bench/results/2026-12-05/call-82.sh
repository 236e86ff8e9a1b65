#!/usr/bin/env bash
# Device call 82 (session 27, on main): where a kernel a stage spends the
# 2,999 us of section 52's probe, and what three changes of the structure
# allow, on the probe's ideal products; then the gpu_profile mend (642549a).
#   - bf16 at 512 with trace=: the kernels form and kernelsv (the input
#     staged with all of a thread's 16-byte loads issued at once) timed in
#     3 pairs, then one traced run each: every stage's first entry, first and
#     last release from the wait, input staged, weights landed, end;
#   - fold: the 82 one-unit stages (norms and cache row, combine, head's
#     gate, argmax) left out: the most that folding them into their
#     consumers gives;
#   - uniform=K (120, 240, 480): the same bytes as K equal stages, the
#     ceilings' synthetic step on this probe's kernels (its calibration);
#   - bf16 at 4,096 and iq4 at 512 with kernelsv, to see that it holds;
#   - tests/gpu_profile.sh (the mend), then x4-profile at 512 with PDL on
#     (the default step), x4's own kinds beside the probe's trace.
set -u
. bench/call-lib.sh
CALL_END=${CALL_END_82:-560}
call_begin
call_build all tests build/bench/dataflow
call_full_bg
for run in "bf16 512 trace" "bf16 512 fold trace" "bf16 512 uniform=120" "bf16 512 uniform=240" \
	"bf16 512 uniform=480" "bf16 4096" "iq4 512" "bf16 512 fold work=2000"; do
	set -- $run
	tag=$(echo "$run" | tr ' =' '-_')
	f="$OUT/x/dataflow-$tag"
	extra="${3:-} ${4:-}"
	extra=${extra//trace/trace=$f}
	upto 60 build/bench/dataflow old $2 16 3 $1 $extra >"$f.tsv" 2>"$f.err"
	echo "dataflow $run rc=$? ($((SECONDS - t0)) s)"
	grep -vE "^# pair" "$f.err" | head -n 40
done
upto 150 bash tests/gpu_profile.sh >"$OUT/x/gpu_profile.log" 2>&1
echo "gpu_profile rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_profile.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_profile.log") failed ($((SECONDS - t0)) s)"
grep -E '^FAIL' "$OUT/x/gpu_profile.log" | head -3
wait
echo "synth done ($((SECONDS - t0)) s)"
upto 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 \
	>"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile 512 (PDL on) rc=$? ($((SECONDS - t0)) s)"
grep -E "^step" "$OUT/x/profile-512-pdlon.tsv" | cut -f1-5 | head -4
call_end
