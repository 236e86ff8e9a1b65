#!/usr/bin/env bash
# Device call 38 (2026-12-04, session 17), branch lever-attn64 (9de1a71): the
# tensor-core decode attention in rounds of 64 cache rows against rounds
# of 32 (call 37's Nsight Compute: 2 warps a scheduler, 0.27 issued a
# cycle, the stalls short and fixed-latency dependencies of a round's
# chain: scores, barrier, softmax, barrier, values).  The bits move (the
# online softmax's rescale every 64 rows): gpu_kern's attention cases
# (tolerance against the fp32 kernel and float64), the kernel lab's checks,
# the golden digests (expected to differ with the lever, to hold with
# --copy attn32), then new golden files written from this build and
# tests/gpu_model.sh (the whole model against the CPU float64 reference on
# tiny and small).  Price: x4-bench-abab --copy attn32 against the default
# at 512, 4,096 and 32,500.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for t in mla attention; do
	build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt")"
	grep -E "^FAIL" "$OUT/x/kern-$t.txt" | head -5
done
build/bench/mla_decode new >"$OUT/x/lab-mla.tsv" 2>"$OUT/x/lab-mla.err"
echo "lab rc=$? ($((SECONDS-t0)) s)"; cut -f1-7 "$OUT/x/lab-mla.tsv" | grep -E "mma|new"; grep -E "check|FAIL" "$OUT/x/lab-mla.err" | head -20
echo "golden, rounds of 64:"; bash bench/results/2026-12-03/golden.sh
echo "golden, --copy attn32:"; bash bench/results/2026-12-03/golden.sh --copy attn32
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy attn32|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
OUT="$OUT/x/l32" LEVER_CTX="32500" LEVER_PAIRS=2 LEVER_WARMUP=1 LEVERS='--copy attn32|' bash bench/gpu-session.sh levers >"$OUT/x/levers-32500.txt" 2>&1
echo "levers 32500 rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers-32500.txt"
OUT="$OUT/x" GOLDEN_TREE=. COMMIT=9de1a71 bash bench/gpu-session.sh golden >"$OUT/x/golden-write.txt" 2>&1
echo "golden write rc=$? ($((SECONDS-t0)) s)"; cp tests/data/gpu_golden_*.json "$OUT/x/"
timeout $((590 - (SECONDS - t0))) bash tests/gpu_model.sh >"$OUT/x/gpu_model.txt" 2>&1
echo "gpu_model rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/gpu_model.txt")"; grep -E "^FAIL" "$OUT/x/gpu_model.txt" | head
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
