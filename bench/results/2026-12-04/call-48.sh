#!/usr/bin/env bash
# Device call 48 (2026-12-04, session 18; NOT RUN: the device time was spent): the review's mend of the MoE
# trace build (the file written through a temporary and renamed, a failure
# said in one line), on main: one traced x4-run, its summary, and a trace
# file in a folder that does not exist (one line, no file).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 X4_TRACE_MOE=1 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
X4_MOE_TRACE="$OUT/x/trace.tsv" bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 8 --ignore-eos \
	--graph off >/dev/null 2>"$OUT/x/run.err"
echo "x4-run rc=$? ($((SECONDS-t0)) s); files: $(ls "$OUT/x")"
python3 bench/moe_step_trace.py "$OUT/x/trace.tsv"
X4_MOE_TRACE=/nonexistent/dir/t.tsv bin/x4-run -m /tmp/x4-full --device cuda:0 -p hello -n 2 --graph off \
	>/dev/null 2>"$OUT/x/run-bad.err"
echo "bad path rc=$?: $(grep X4_MOE_TRACE "$OUT/x/run-bad.err"); left: $(ls /nonexistent/dir 2>&1 | head -1)"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
