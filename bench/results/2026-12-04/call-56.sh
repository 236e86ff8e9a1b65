#!/usr/bin/env bash
# Device call 56 (2026-12-04, session 19): main's final code (the step's
# kernels those of b223dc9; x4-profile counts the step graph's edges by
# kind): tests/run-gpu.sh whole, then x4-profile on the full preset at 512
# tokens of context, PDL on and off (its pdl_edges / full_edges rows).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 400 bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 12 "$OUT/x/test-gpu.txt"
wait
for pdl in on off; do
	timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --pdl $pdl \
		>"$OUT/x/profile-512-pdl$pdl.tsv" 2>"$OUT/x/profile-512-pdl$pdl.err"
	echo "profile pdl $pdl rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512-pdl$pdl.err" | tail -n 1)"
	awk -F'\t' '$1 == "step" && ($2 ~ /edges|kernels|enqueued/) {print "  " $2, $4}' "$OUT/x/profile-512-pdl$pdl.tsv"
done
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
