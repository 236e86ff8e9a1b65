#!/usr/bin/env bash
# Device call 43 (2026-12-04, session 18): the MoE gate/up launch's block
# order (temporary --copy sfirst / slast: the shared expert's 64 blocks
# first or last in the launch's order, against today's interleave, where
# the second wave is 44 routed and 12 shared blocks).  The golden digests
# with each order (the same bits), then x4-bench-abab at 512 and 4,096.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for o in sfirst slast; do echo "golden --copy $o:"; bash bench/results/2026-12-03/golden.sh --copy $o; done
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy sfirst\n|--copy slast' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
