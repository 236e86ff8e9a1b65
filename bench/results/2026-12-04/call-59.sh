#!/usr/bin/env bash
# Device call 59 (2026-12-04, session 20): the next attention gate behind
# the MoE's down (x4k_moe_experts_sum_next: each down block updates the
# streams at its 16 columns and leaves its partial dots, the last block
# finishes the gate), priced against the separate gate launch through a
# temporary arm, --copy gatesep.  The separate gate's bits must not move
# (the refactored hc_split: golden digests with --copy gatesep).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 120 build/tests/gpu_kern "moe_experts:sum next" >"$OUT/x/kern-next.txt" 2>&1
echo "gpu_kern sum next rc=$?: $(tail -n 1 "$OUT/x/kern-next.txt")"; grep -E "^FAIL" "$OUT/x/kern-next.txt" | head -8
timeout 100 build/tests/gpu_kern hc >"$OUT/x/kern-hc.txt" 2>&1
echo "gpu_kern hc rc=$?: $(tail -n 1 "$OUT/x/kern-hc.txt")"; grep -E "^FAIL" "$OUT/x/kern-hc.txt" | head -5
echo "golden --copy gatesep:"; bash bench/results/2026-12-03/golden.sh --copy gatesep
echo "golden (gate behind the down):"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy gatesep|\n--copy gatesep|--copy gatesep' \
	timeout 280 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 60 compute-sanitizer --tool memcheck build/tests/gpu_kern "moe_experts:sum next" >"$OUT/x/memcheck.txt" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck.txt" | tail -n 1)"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
