#!/usr/bin/env bash
# Device call 26 (2026-12-03, session 14): one more lever on main plus a
# temporary arm, priced, with make test-gpu's programs and the goal table on
# the same tree (the arm's removal afterwards is host code only):
#   the one-token MoE's down selects its routes from the router's scores
#     before its dependency wait and copies its weights then (default),
#     against reading the table after the wait (`--copy down`, temporary);
#     the gate/up's routed blocks now let it start only after their wait.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 100 build/tests/gpu_kern moe_experts >"$OUT/x/kern-moe_experts.txt" 2>&1
echo "gpu_kern moe_experts rc=$? ($((SECONDS-t0)) s): $(grep -c '^PASS' "$OUT/x/kern-moe_experts.txt") passed," \
	"$(grep -c '^FAIL' "$OUT/x/kern-moe_experts.txt") failed"
grep '^FAIL' "$OUT/x/kern-moe_experts.txt" | head -n 5
echo "golden, the default:"; bash bench/results/2026-12-03/golden.sh
echo "golden, the table after the wait:"; bash bench/results/2026-12-03/golden.sh --copy down
wait
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'|\n--copy down|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 300 bash tests/run-gpu.sh >"$OUT/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; cat "$OUT/test-gpu.txt"
cp build/test-logs/gpu_* "$OUT/x/" 2>/dev/null
if [ $((SECONDS-t0)) -lt 480 ]; then
	OUT="$OUT/x" COMMIT=$(git rev-parse --short HEAD) bash bench/gpu-session.sh decode >"$OUT/x/gs.txt" 2>&1
	OUT="$OUT/x" PROFILE_CTX=512 DECODE_OPTS="--pdl off" bash bench/gpu-session.sh profile >>"$OUT/x/gs.txt" 2>&1
	echo "gpu-session ($((SECONDS-t0)) s)"; grep -E "decode ctx|profile ctx" "$OUT/x/gs.txt"
fi
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
