#!/usr/bin/env bash
# Device call 33 (2026-12-03, session 16), branch lever-xb: the router's
# launch forms x-hat's tensor-core image (the B words and 1/s that every
# block of the MoE gate/up built for itself) and the gate/up's blocks read
# it from global memory (L1), so that a block's shared memory is its
# weights and sums alone (66 KB against 96: 3 blocks an SM, the launch's
# 320 blocks in one wave).  Arm a `--copy noxb` (temporary) builds B in
# every block, as main does.  Checks: gpu_kern moe_experts and moe_router
# (the image arm against the router's table, the same bits), the golden
# digests with both arms, memcheck on moe_experts.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for t in moe_experts moe_router; do
	build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt")"
done
grep -c "x's image" "$OUT/x/kern-moe_experts.txt" | sed 's/^/image cases: /'
grep -E "^FAIL" "$OUT/x/kern-moe_experts.txt" | head -5
echo "golden, the lever:"; bash bench/results/2026-12-03/golden.sh
echo "golden, noxb:"; bash bench/results/2026-12-03/golden.sh --copy noxb
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy noxb|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for arm in xb noxb; do
	o=(); [ $arm = noxb ] && o=(--copy noxb)
	bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --pdl on "${o[@]}" \
		>"$OUT/x/profile-512-pdlon-$arm.tsv" 2>"$OUT/x/profile-512-pdlon-$arm.err"
	echo "profile $arm rc=$? ($((SECONDS-t0)) s): $(grep unprofiled "$OUT/x/profile-512-pdlon-$arm.err" | cut -c1-150)"
done
timeout $((560 - (SECONDS - t0))) compute-sanitizer --tool memcheck build/tests/gpu_kern moe_experts >"$OUT/x/memcheck-moe.txt" 2>&1
echo "memcheck rc=$? ($((SECONDS-t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-moe.txt" | tail -n 1)"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
