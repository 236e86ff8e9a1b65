#!/usr/bin/env bash
# Device call 45 (2026-12-04, session 18): main's final code.  The whole GPU
# suite (tests/run-gpu.sh), compute-sanitizer memcheck on the MoE kernels,
# then the goal table's figures: bench/gpu-session.sh decode (x4-bench-abab
# control pairs at 512 and 4,096, x4-run at 32,500) and profile with PDL off
# (the per-family stream rates) and on (exposed time) at 512 and 4,096.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 8 "$OUT/x/test-gpu.txt"
timeout 100 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern moe_experts >"$OUT/x/memcheck-moe.txt" 2>&1
echo "memcheck moe_experts rc=$? ($((SECONDS-t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-moe.txt" | tail -n 1)"
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/g" bash bench/gpu-session.sh decode >"$OUT/x/decode.txt" 2>&1
echo "decode rc=$? ($((SECONDS-t0)) s)"; grep 'decode ctx' "$OUT/x/decode.txt"
OUT="$OUT/x/g" DECODE_OPTS="--pdl off" bash bench/gpu-session.sh profile >"$OUT/x/profile.txt" 2>&1
echo "profile (pdl off) rc=$? ($((SECONDS-t0)) s)"; grep 'profile ctx' "$OUT/x/profile.txt"
for ctx in 512 4096; do
	bin/x4-profile -m /tmp/x4-full --device cuda:0 --context $ctx --steps 16 >"$OUT/x/g/profile-$ctx-pdlon.tsv" 2>"$OUT/x/g/profile-$ctx-pdlon.err"
	echo "profile (pdl on) $ctx rc=$?: $(grep -E 'unprofiled' "$OUT/x/g/profile-$ctx-pdlon.err" | tail -n 1)"
done
rm -f "$OUT/x/build.log" "$OUT"/x/g/trace-*.json.gz
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
