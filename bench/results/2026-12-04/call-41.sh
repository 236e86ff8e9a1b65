#!/usr/bin/env bash
# Device call 41 (2026-12-04, session 18): the routed experts' gate/up in
# one wave.  The kernel lab's timeline (build/bench/moe_trace: the step's
# unsplit launch against the split one, both with the top k on one warp by
# redux.sync), the MoE kernels' tests, the golden digests with the split
# (the default on sm_90) and without (--copy nosplit, temporary), then the
# step: in one process the split against the unsplit launch (x4-bench-abab
# through bench/gpu-session.sh levers), and main 7dd4c14's x4-run against
# this build's (bench/builds-abab.sh: the top k and the split together).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
build/bench/moe_trace new >"$OUT/x/trace.tsv" 2>"$OUT/x/trace.err"
echo "trace rc=$?"; grep -E 'time|check|traced_span' "$OUT/x/trace.tsv"; grep -E 'split\s+gate_up\s+(routed|shared)\s+(stamp5|phase)' "$OUT/x/trace.tsv"
build/tests/gpu_kern moe_experts moe_router gemv >"$OUT/x/kern.txt" 2>&1
echo "gpu_kern moe_experts moe_router gemv rc=$?: $(tail -n 1 "$OUT/x/kern.txt")"; grep -E "^FAIL" "$OUT/x/kern.txt" | head -5
echo "golden (split):"; bash bench/results/2026-12-03/golden.sh
echo "golden (--copy nosplit):"; bash bench/results/2026-12-03/golden.sh --copy nosplit
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy nosplit|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
bash bench/builds-abab.sh /tmp/x4-full build/main-x4-run bin/x4-run 512 3 >"$OUT/x/builds-512.txt" 2>&1
echo "builds-abab 512 rc=$? ($((SECONDS-t0)) s)"; tail -n 4 "$OUT/x/builds-512.txt"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
