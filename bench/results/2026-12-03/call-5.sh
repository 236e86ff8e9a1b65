#!/usr/bin/env bash
# Device call 5 (2026-12-03): main after the persistent step moved to its
# branch (the library is fd7efde's, whose device code was never run on a GPU
# as a whole): build what the checks run, the whole model against the CPU
# and the golden digests (tests/gpu_model.sh), the one-token MoE kernels that
# fd7efde reorganised (gpu_kern moe_experts), the trunk (gpu_trunk).  Logs
# straight to $OUT so that a cut-off run still reports.
set -u
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-walk-residual build/tests/helper_sample \
	build/tests/gpu_kern build/tests/gpu_trunk >"$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
timeout 150 bash tests/gpu_model.sh >"$OUT/gpu_model.log" 2>&1
echo "gpu_model rc=$? ($((SECONDS-t0)) s): $(grep -cE '^PASS' "$OUT/gpu_model.log") passed"
grep -E "^FAIL" "$OUT/gpu_model.log" | head
timeout 60 build/tests/gpu_kern moe_experts >"$OUT/gpu_kern-moe_experts.log" 2>&1
echo "gpu_kern moe_experts rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/gpu_kern-moe_experts.log")"
make -s CUDA_ARCH=90 tiny >/dev/null 2>&1 # gpu_trunk opens build/models/tiny
timeout 40 build/tests/gpu_trunk >"$OUT/gpu_trunk.log" 2>&1
echo "gpu_trunk rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/gpu_trunk.log")"
