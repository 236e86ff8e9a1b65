#!/usr/bin/env bash
# Device call 32 (2026-12-03, session 15): main's final code (the down's
# early routes, the position before the wait, the review mends).
# tests/run-gpu.sh whole, compute-sanitizer on the changed kernels, and the
# goal table (decode at 512, 4,096 and 32,500; the profile with PDL off and
# on at 512 and 4,096).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 8 "$OUT/x/test-gpu.txt"
cp build/test-logs/gpu_*.log "$OUT/x/" 2>/dev/null
wait
OUT="$OUT/x" COMMIT=$(git rev-parse --short HEAD) bash bench/gpu-session.sh decode >"$OUT/x/gs-decode.txt" 2>&1
echo "decode rc=$? ($((SECONDS-t0)) s)"; grep -E "decode ctx|arm" "$OUT/x/gs-decode.txt"
for ctx in 512 4096; do
	for pdl in off on; do
		bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 --pdl $pdl \
			>"$OUT/x/profile-$ctx-pdl$pdl.tsv" 2>"$OUT/x/profile-$ctx-pdl$pdl.err"
		echo "profile $ctx pdl $pdl rc=$? ($((SECONDS-t0)) s): $(grep unprofiled "$OUT/x/profile-$ctx-pdl$pdl.err" | cut -c1-120)"
	done
done
for f in moe_experts moe_router kv_store mla_decode; do
	timeout 60 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern $f >"$OUT/x/sanitize-$f.log" 2>&1
	echo "sanitize $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/sanitize-$f.log")"
done
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
