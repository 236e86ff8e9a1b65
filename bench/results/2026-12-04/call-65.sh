#!/usr/bin/env bash
# Device call 65 (2026-12-04, session 20): the split gate's 6.2 us taken
# apart by leaving its parts out of all 80 gates (timing-only arms, wrong
# tokens, the same count; not a speed): gnocoll (the last block sums the
# partials and writes the side's input, no collapse and no norm), gnolast
# (no last block: every block exits after its count), gnowork (every block
# exits after its wait).  Call 64's nogatea/nogatef left whole gates out.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy gnocoll\n|--copy gnolast\n|--copy gnowork' \
	timeout 200 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers 512 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
OUT="$OUT/x/l4" LEVER_CTX="4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy gnocoll' \
	timeout 100 bash bench/gpu-session.sh levers >"$OUT/x/levers4.txt" 2>&1
echo "levers 4096 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers4.txt"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
