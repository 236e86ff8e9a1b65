#!/usr/bin/env bash
# Device call 30 (2026-12-03, session 15), branch lever-bulk (main + the
# down's early routes + the bulk copy): the decode step's IQ4_NL
# tensor-core products copy their weights with the copy engine's bulk
# copies (cp.async.bulk, one a 144-byte group of a row, completed on an
# mbarrier) instead of the block's cp.async 16-byte copies.  Checks:
# gpu_kern moe_experts and gemv (every copy mode against the others and
# float64), the golden digests with bulk and block, compute-sanitizer on
# moe_experts.  Price: x4-bench-abab `--copy block` against the default.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for f in moe_experts gemv; do
	build/tests/gpu_kern $f >"$OUT/x/gpu_kern-$f.log" 2>&1
	echo "gpu_kern $f rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_kern-$f.log") passed, $(grep -c '^FAIL' "$OUT/x/gpu_kern-$f.log") failed ($((SECONDS-t0)) s)"
	grep '^FAIL' "$OUT/x/gpu_kern-$f.log" | head -5
done
echo "golden, bulk:"; bash bench/results/2026-12-03/golden.sh
echo "golden, block:"; bash bench/results/2026-12-03/golden.sh --copy block
wait
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy block|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for c in bulk block; do
	bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --copy $c >"$OUT/x/profile-512-pdlon-$c.tsv" 2>"$OUT/x/profile-512-pdlon-$c.err"
	echo "profile $c rc=$? ($((SECONDS-t0)) s)"
done
timeout 120 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern moe_experts >"$OUT/x/sanitize-moe_experts.log" 2>&1
echo "sanitize rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/sanitize-moe_experts.log")"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
