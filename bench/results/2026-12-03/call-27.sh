#!/usr/bin/env bash
# Device call 27 (2026-12-03, session 14): call 26's lever priced again
# against the right arm.  Call 26's arm a (`--copy down`) kept the gate/up's
# new trigger after its wait, which eab7707 does not have; here `--copy
# down` is eab7707's step exactly (the gate/up triggers the down before its
# wait, the down reads the table after its own), arm b the lever.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden, the default:"; bash bench/results/2026-12-03/golden.sh
echo "golden, eab7707's step:"; bash bench/results/2026-12-03/golden.sh --copy down
wait
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|\n--copy down|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
