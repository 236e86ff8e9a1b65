#!/usr/bin/env bash
# Device call 28 (2026-12-03, session 14), branch levers-s14b: call 26's
# lever (the MoE down selecting its routes before its wait) priced against
# eab7707's down kernel verbatim (its SASS identical to main's, 1,792
# instructions), launched beside the new one: arm a `--copy down`.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden, the lever:"; bash bench/results/2026-12-03/golden.sh
echo "golden, eab7707's down:"; bash bench/results/2026-12-03/golden.sh --copy down
wait
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|\n--copy down|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
