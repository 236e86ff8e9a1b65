#!/usr/bin/env bash
# Device call 1 (2026-12-03): build for the H200, the whole model on tiny,
# Q8_0, loud and small against the CPU with the persistent step (the new
# default) and the multi-kernel step by name (tests/gpu_model.sh: the golden
# digests are expected to move), the profiler's checks (tests/gpu_profile.sh),
# then on the full preset the lever priced by x4-bench-abab (arm a --step
# kernels, arm b the default) at 512 and 4096 tokens of context, and the
# persistent step's phases by x4-profile at 512.  Everything under $OUT.
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/c1.tgz" -C "$W" .' EXIT
export COMMIT=${COMMIT:-x}
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$W/gpu.txt"
make -j16 CUDA_ARCH=90 COMMIT="$COMMIT" all tests >"$W/build.log" 2>&1; echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >"$W/synth.log" 2>&1; echo "full preset rc=$? ($((SECONDS-t0)) s)") &
timeout 300 bash tests/gpu_model.sh >"$W/gpu_model.log" 2>&1; echo "gpu_model rc=$? ($((SECONDS-t0)) s)"
grep -E "^FAIL" "$W/gpu_model.log" | head -20; grep -cE "^PASS" "$W/gpu_model.log"
timeout 120 bash tests/gpu_profile.sh >"$W/gpu_profile.log" 2>&1; echo "gpu_profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^FAIL" "$W/gpu_profile.log" | head -5
wait
for ctx in 512 4096; do
	left=$((560 - SECONDS)); [ $left -lt 60 ] && break
	timeout $left bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "--step kernels" -b "" \
		--prompt-tokens $ctx -n 64 --pairs 2 --warmup 1 >"$W/abab-$ctx.tsv" 2>"$W/abab-$ctx.err"
	echo "abab $ctx rc=$? ($((SECONDS-t0)) s): $(tail -n 3 "$W/abab-$ctx.err" | tr '\n' ' ')"
done
left=$((585 - SECONDS))
[ $left -gt 30 ] && timeout $left bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 \
	>"$W/profile-512.tsv" 2>"$W/profile-512.err"; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^phase|unprofiled" "$W/profile-512.tsv" | cut -f2,4,5,6,10,11
