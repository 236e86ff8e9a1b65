#!/usr/bin/env bash
# Device call 49 (2026-12-04, session 19): two levers, each with a temporary
# --copy arm that turns it off.  A: the c_q norm's scale after q_b's product
# (x4k_gemv_rms) and the cache row on its own side stream, off the chain of
# launches (--copy kvsep: the kv_store_norm launch on the chain, as before).
# B: the decode attention's combine inside the tensor-core attention's
# launch after a grid barrier (--copy nocomb: the combine kernel, as before).
# Part 1: build; the new and changed kernels' tests; memcheck on the
# attention; the whole model against the CPU (gpu_model.sh: its golden
# lines are expected to FAIL on the logits' digest, lever A's new bits);
# the digests under each arm (B must give A's bits; kvsep the old golden).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for op in gemv_rms gemv mla kv_store; do
	timeout 200 build/tests/gpu_kern $op >"$OUT/x/kern-$op.txt" 2>&1
	echo "gpu_kern $op rc=$?: $(tail -n 1 "$OUT/x/kern-$op.txt")"; grep -E "^FAIL" "$OUT/x/kern-$op.txt" | head -5
done
timeout 200 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern mla >"$OUT/x/memcheck-mla.txt" 2>&1
echo "memcheck mla rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-mla.txt" | tail -n 1) ($((SECONDS-t0)) s)"
timeout 240 bash tests/gpu_model.sh >"$OUT/x/gpu_model.txt" 2>&1
echo "gpu_model rc=$?: $(grep -c '^PASS' "$OUT/x/gpu_model.txt") PASS, $(grep -c '^FAIL' "$OUT/x/gpu_model.txt") FAIL ($((SECONDS-t0)) s)"
grep -E '^FAIL' "$OUT/x/gpu_model.txt" | head -8
for p in tiny small; do
	d=/tmp/x4-golden-$p; [ -e "$d" ] || bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1
	prompt=$(python3 tests/helper_golden.py --prompt $p)
	for arm in block nocomb kvsep; do
		timeout 60 bin/x4-run -m "$d" -p "$prompt" -n 64 --ignore-eos --json --device cuda:0 --copy $arm \
			--dump-logits /tmp/g-$p-$arm.npy >/tmp/g-$p-$arm.json 2>/dev/null
		echo "digest $p $arm rc=$?: logits $(sha256sum </tmp/g-$p-$arm.npy | cut -c1-16) tokens $(python3 -c 'import json,sys,hashlib; print(hashlib.sha256(str(json.load(open(sys.argv[1]))["tokens"]).encode()).hexdigest()[:16])' /tmp/g-$p-$arm.json)"
	done
	echo "golden $p: logits $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["logits_sha256"][:16])' tests/data/gpu_golden_$p.json)"
done
wait
echo "synth done ($((SECONDS-t0)) s)"
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
