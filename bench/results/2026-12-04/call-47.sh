#!/usr/bin/env bash
# Device call 47 (2026-12-04, session 18), branch lever-split-counter with
# main's trace build (e8db86a): the MoE launches' timeline in the step, the
# unsplit gate/up (--copy nosplit) against the one-wave split, x4-run --graph
# off at 512 tokens of context, 8 tokens, the last MoE layer's stamps
# (bench/moe_step_trace.py).  A trace, not a speed.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 X4_TRACE_MOE=1 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "synth done ($((SECONDS-t0)) s)"
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
for arm in nosplit block; do
	X4_MOE_TRACE="$OUT/x/trace-$arm.tsv" bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 8 \
		--ignore-eos --graph off --copy $arm >/dev/null 2>"$OUT/x/run-$arm.err"
	echo "x4-run $arm rc=$? ($((SECONDS-t0)) s): $(grep -E 'steady' "$OUT/x/run-$arm.err")"
done
python3 bench/moe_step_trace.py "$OUT/x/trace-nosplit.tsv" "$OUT/x/trace-block.tsv"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
