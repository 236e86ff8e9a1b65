#!/usr/bin/env bash
# Device call 73 (written in session 23; run it on the branch land-head-tc
# only once call 72 has priced the head on the tensor cores as paying):
# the landing of lever-head-tc, its temporary arms gone and the tensor-core
# head the default under --gemm mma (two tiles in flight a block where the
# card's shared memory takes them, else one).  The small preset's golden
# digests move on purpose (its head runs the tensor-core form; tiny's, k
# 256, does not): they are written from this tree first (gpu-session.sh
# golden, GOLDEN_TREE=.), then tests/run-gpu.sh runs every GPU test against
# them, the whole model against the CPU float64 reference on tiny and
# small included; then x4-run's steady decode at 512 tokens of context (the
# goal table's command).  The new golden files come back in x/ to commit.
# Before the merge (not before this call): call 72's lab decides the QB
# form (its tcr row: B in registers, the corrections as the MMA's C); if it
# beats tc, it becomes the default form, else its code goes; and the
# FIGURES(call 72) marks in docs/numerics.md and README.md take the figures.
set -u
. bench/call-lib.sh
call_begin
call_build all tests build/bench/gemv
call_full_bg
GOLDEN_TREE=. COMMIT=${COMMIT:-land-head-tc} OUT="$OUT/x/golden" bash bench/gpu-session.sh golden 2>&1 | tail -n 2
cp tests/data/gpu_golden_tiny.json tests/data/gpu_golden_small.json "$OUT/x/"
git diff --stat -- tests/data/ 2>/dev/null | tail -n 1
timeout 330 bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 12 "$OUT/x/test-gpu.txt"
wait
echo "synth done ($((SECONDS-t0)) s)"
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
timeout 60 bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 64 --ignore-eos >/dev/null 2>"$OUT/x/run-512.err"
echo "x4-run 512 rc=$? ($((SECONDS-t0)) s): $(grep -E 'steady|first' "$OUT/x/run-512.err" | tr '\n' ' ')"
timeout 60 build/bench/gemv new 2>/dev/null | grep -E "output_head" | cut -f1-8
call_end
