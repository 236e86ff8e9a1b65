#!/usr/bin/env bash
# Device call 25 (2026-12-03, session 14): main's final code (the router's
# selection inside the experts' gate/up launch, the head's mean a round of
# loads under PDL, the head's Q6_K product 4 rows a warp; the temporary
# arms of call 24 removed).
#   `call-25.sh 1`: build, make test-gpu's programs (tests/run-gpu.sh) while
#                   the call's time lasts, the golden digests;
#   `call-25.sh 2`: the goal table's figures (bench/gpu-session.sh decode
#                   profile) and compute-sanitizer on the changed kernels.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
if [ "${1:-1}" = 1 ]; then
	make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
	echo "build rc=$? ($((SECONDS-t0)) s)"
	(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
	bash bench/results/2026-12-03/golden.sh
	echo "golden ($((SECONDS-t0)) s)"
	timeout 480 bash tests/run-gpu.sh >"$OUT/test-gpu.txt" 2>&1
	echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; cat "$OUT/test-gpu.txt"
	cp build/test-logs/gpu_* "$OUT/x/" 2>/dev/null
	wait
else
	[ -x bin/x4-run ] || make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
	[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
	OUT="$OUT/x" COMMIT=$(git rev-parse --short HEAD) bash bench/gpu-session.sh decode profile >"$OUT/x/gs.txt" 2>&1
	echo "gpu-session rc=$? ($((SECONDS-t0)) s)"; grep -E "decode ctx|profile ctx|^class|^step	(kernels|unprof)" "$OUT/x/gs.txt"
	for f in moe_experts head gemv_q6k_rows; do
		timeout 100 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern $f \
			>"$OUT/x/sanitize-$f.log" 2>&1
		echo "sanitize $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/sanitize-$f.log")"
	done
fi
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
