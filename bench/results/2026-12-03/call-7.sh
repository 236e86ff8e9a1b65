#!/usr/bin/env bash
# Device call 7 (2026-12-03, session 11): the decode step's two folds
# (--fold: the query's norm and the cache row in q_b's launch; the
# attention's split combine in the value expansion's launch), checked:
# gpu_kern whole (the new gemv_q_b and combine-expand cases, and every
# family whose code moved: the BF16 gemv, bmv16, the combine), the whole
# model against the CPU and the golden digests (which the folds must keep:
# the same bits), gpu_trunk.  Logs straight to $OUT.
set -u
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-walk-residual bin/x4-bench-abab bin/x4-profile \
	build/tests/helper_sample build/tests/gpu_kern build/tests/gpu_trunk >"$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
timeout 240 build/tests/gpu_kern >"$OUT/gpu_kern.log" 2>&1
echo "gpu_kern rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/gpu_kern.log")"
grep -E "^FAIL" "$OUT/gpu_kern.log" | head
timeout 200 bash tests/gpu_model.sh >"$OUT/gpu_model.log" 2>&1
echo "gpu_model rc=$? ($((SECONDS-t0)) s): $(grep -cE '^PASS' "$OUT/gpu_model.log") passed"
grep -E "^FAIL" "$OUT/gpu_model.log" | head
make -s CUDA_ARCH=90 tiny >/dev/null 2>&1
timeout 60 build/tests/gpu_trunk >"$OUT/gpu_trunk.log" 2>&1
echo "gpu_trunk rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/gpu_trunk.log")"
