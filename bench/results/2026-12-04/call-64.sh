#!/usr/bin/env bash
# Device call 64 (2026-12-04, session 20): what a chain kernel costs the
# step, measured by leaving it out.  Temporary timing-only arms (--copy):
# nokv (no cache row, no c_q norm), nocomb (no attention combine), nogatea
# (no attention gate), norouter (no router logits), nogatef (no FFN gate).
# Wrong tokens, the same count; x4-bench-abab b/a is the step without the
# kernel against main's: the most any fold of it can save.  Not a speed.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy nokv\n|--copy nocomb\n|--copy nogatea\n|--copy norouter\n|--copy nogatef' \
	timeout 300 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers 512 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
OUT="$OUT/x/l4" LEVER_CTX="4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|--copy nokv\n|--copy nocomb' \
	timeout 150 bash bench/gpu-session.sh levers >"$OUT/x/levers4.txt" 2>&1
echo "levers 4096 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers4.txt"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
