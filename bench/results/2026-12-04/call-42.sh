#!/usr/bin/env bash
# Device call 42 (2026-12-04, session 18): the router's top k on one warp a
# block by redux.sync (the split of call 41 dropped).  The kernel lab's
# timeline, the MoE kernels' tests, the golden digests, then main 7dd4c14's
# x4-run against this build's (bench/builds-abab.sh) at 512 and 4,096, and
# x4-profile at 512 (PDL on) for the attribution.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
build/bench/moe_trace new >"$OUT/x/trace.tsv" 2>"$OUT/x/trace.err"
echo "trace rc=$?"; grep -E 'time|traced_span' "$OUT/x/trace.tsv"; grep -E '^step\s+gate_up\s+early\s+phase' "$OUT/x/trace.tsv"
for op in moe_experts moe_router gemv; do
	build/tests/gpu_kern $op >"$OUT/x/kern-$op.txt" 2>&1
	echo "gpu_kern $op rc=$?: $(tail -n 1 "$OUT/x/kern-$op.txt")"; grep -E "^FAIL" "$OUT/x/kern-$op.txt" | head -5
done
timeout 150 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern moe_router >"$OUT/x/memcheck-router.txt" 2>&1
echo "memcheck moe_router rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-router.txt" | tail -n 1)"
echo "golden:"; bash bench/results/2026-12-03/golden.sh
wait
echo "synth done ($((SECONDS-t0)) s)"
for ctx in 512 4096; do
	bash bench/builds-abab.sh /tmp/x4-full build/main-x4-run bin/x4-run $ctx 3 >"$OUT/x/builds-$ctx.txt" 2>&1
	echo "builds-abab $ctx rc=$? ($((SECONDS-t0)) s)"; tail -n 1 "$OUT/x/builds-$ctx.txt"
done
bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512.tsv" 2>"$OUT/x/profile-512.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512.err" | tail -n 1)"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
