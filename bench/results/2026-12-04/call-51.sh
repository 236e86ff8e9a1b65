#!/usr/bin/env bash
# Device call 51 (2026-12-04, session 19): lever A of call 49 alone (lever B
# dropped: branch lever-comb-fused), its kernel held to three blocks an SM
# (x4k_gemv_rms at 80 registers: q_b's 384 blocks one wave; at 96 they were
# two).  Tests of the product, the digests under both arms (kvsep: the old
# golden; the default: call 49's), then x4-bench-abab at 512 and 4,096 (a:
# --copy kvsep, b: the defaults) and x4-profile at 512 with PDL on.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for op in gemv_rms gemv; do
	timeout 200 build/tests/gpu_kern $op >"$OUT/x/kern-$op.txt" 2>&1
	echo "gpu_kern $op rc=$?: $(tail -n 1 "$OUT/x/kern-$op.txt")"; grep -E "^FAIL" "$OUT/x/kern-$op.txt" | head -5
done
for p in tiny small; do
	d=/tmp/x4-golden-$p; [ -e "$d" ] || bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1
	prompt=$(python3 tests/helper_golden.py --prompt $p)
	for arm in block kvsep; do
		timeout 60 bin/x4-run -m "$d" -p "$prompt" -n 64 --ignore-eos --json --device cuda:0 --copy $arm \
			--dump-logits /tmp/g-$p-$arm.npy >/tmp/g-$p-$arm.json 2>/dev/null
		echo "digest $p $arm rc=$?: logits $(sha256sum </tmp/g-$p-$arm.npy | cut -c1-16)"
	done
done
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy kvsep|' \
	timeout 300 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep -E 'unprofiled' "$OUT/x/profile-512-pdlon.err" | tail -n 1)"
awk -F'\t' '$1 == "kernel" {printf "%s %s %s %s\n", $2, $4, $5, $12}' "$OUT/x/profile-512-pdlon.tsv" | head -12
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
