#!/usr/bin/env bash
# Device call 5 (2026-12-03): the tree as it lands (--step auto is the
# multi-kernel step; the persistent step by name): the whole model against
# the CPU and the golden digests (tests/gpu_model.sh), the profiler
# (tests/gpu_profile.sh), the trunk (tests/gpu_trunk.sh), the router's
# kernel cases (its selection moved to kernels/moe_dev.cuh).
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/c5.tgz" -C "$W" .' EXIT
t0=$SECONDS
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-walk-residual bin/x4-profile build/tests/helper_sample build/tests/gpu_kern >"$W/build.log" 2>&1; echo "build rc=$? ($((SECONDS-t0)) s)"
timeout 170 bash tests/gpu_model.sh >"$W/gpu_model.log" 2>&1; echo "gpu_model rc=$? ($((SECONDS-t0)) s)"
grep -E "^FAIL" "$W/gpu_model.log" | head; echo "$(grep -cE '^PASS' "$W/gpu_model.log") passed"
grep -E "step_(kernels|persistent)|step_auto" "$W/gpu_model.log" | head -20
timeout 60 bash tests/gpu_profile.sh >"$W/gpu_profile.log" 2>&1; echo "gpu_profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^FAIL" "$W/gpu_profile.log" | head -5; echo "$(grep -cE '^PASS' "$W/gpu_profile.log") passed"
timeout 60 build/tests/gpu_kern moe_router >"$W/gpu_kern-moe_router.log" 2>&1; echo "gpu_kern moe_router rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$W/gpu_kern-moe_router.log")"
