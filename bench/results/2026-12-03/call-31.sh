#!/usr/bin/env bash
# Device call 31 (2026-12-03, session 15), branch lever-pos (main + the
# down's early routes + this lever): the decode attention's kernels (the
# cache store, the tensor-core attention, the combine) read the position
# before their wait (it is uploaded by a copy before the step's first
# kernel), so that one dependent round trip leaves each one's chain.  Arm a
# `--copy poslate` reads it after the wait, as main does.  Then, with the
# lever's default: the goal table (decode at 512, 4,096 and 32,500; the
# profile with PDL off and on) and tests/run-gpu.sh whole.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
echo "golden, the lever:"; bash bench/results/2026-12-03/golden.sh
echo "golden, the position after the wait:"; bash bench/results/2026-12-03/golden.sh --copy poslate
wait
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy poslate|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
OUT="$OUT/x" COMMIT=$(git rev-parse --short HEAD) bash bench/gpu-session.sh decode >"$OUT/x/gs-decode.txt" 2>&1
echo "decode rc=$? ($((SECONDS-t0)) s)"; grep -E "decode ctx|arm" "$OUT/x/gs-decode.txt"
for ctx in 512 4096; do
	for pdl in off on; do
		bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl $pdl \
			>"$OUT/x/profile-$ctx-pdl$pdl.tsv" 2>"$OUT/x/profile-$ctx-pdl$pdl.err"
		echo "profile $ctx pdl $pdl rc=$? ($((SECONDS-t0)) s): $(grep unprofiled "$OUT/x/profile-$ctx-pdl$pdl.err" | cut -c1-150)"
	done
done
timeout $((570 - (SECONDS - t0))) bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 12 "$OUT/x/test-gpu.txt"
cp build/test-logs/gpu_*.log "$OUT/x/" 2>/dev/null
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
