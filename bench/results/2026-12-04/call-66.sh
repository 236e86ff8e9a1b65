#!/usr/bin/env bash
# Device call 66 (2026-12-04, session 20): main's final tree (its library
# and kernels those of d048da6; this session added results and docs):
# tests/run-gpu.sh whole, and the decode rate at 512 tokens of context on
# the full preset (x4-run's steady rate, the goal table's command).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 380 bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 12 "$OUT/x/test-gpu.txt"
wait
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
timeout 60 bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 64 --ignore-eos >/dev/null 2>"$OUT/x/run-512.err"
echo "x4-run 512 rc=$? ($((SECONDS-t0)) s): $(grep -E 'steady|first' "$OUT/x/run-512.err" | tr '\n' ' ')"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
