#!/usr/bin/env bash
# Device call 36 (2026-12-04, session 17): main's final code (8bd9936; its
# kernels are 211d44c's, the goal table's).  tests/run-gpu.sh whole, then
# where a decode step at 32,500 tokens of context goes (x4-profile, PDL on
# and off): the goal table's 32,768 row had no profile.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 8 "$OUT/x/test-gpu.txt"
mkdir -p "$OUT/x/logs" && cp build/test-logs/gpu_*.log "$OUT/x/logs/" 2>/dev/null
wait
echo "synth done ($((SECONDS-t0)) s)"
for pdl in on off; do
	bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 32500 --steps 16 --pdl $pdl \
		>"$OUT/x/profile-32500-pdl$pdl.tsv" 2>"$OUT/x/profile-32500-pdl$pdl.err"
	echo "profile 32500 pdl $pdl rc=$? ($((SECONDS-t0)) s): $(grep unprofiled "$OUT/x/profile-32500-pdl$pdl.err" | cut -c1-150)"
	grep -E "^class|^step" "$OUT/x/profile-32500-pdl$pdl.tsv" | cut -f1-12 | head -20
done
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
