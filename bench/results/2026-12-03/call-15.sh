#!/usr/bin/env bash
# Device call 15 (2026-12-03, session 12): the block copy's issue cost.
# stage_block divided by the row's chunk count for every 16-byte chunk it
# copied (~45 SASS instructions a copy); the new form takes one column of
# rows t / cpr, + rpt, ... a thread, one division a thread and ~12
# instructions a copy.  The pricing arm
# (--copy blockdiv) keeps the old form for this call.  Parity (gpu_kern
# gemv, moe_experts), the golden digests (the same bits), the price at 512
# and 4,096, the 512 profile with PDL off, the routed gate/up's SASS and one
# Nsight Compute report of it with source counters (a profiled run).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile build/tests/gpu_kern \
	>"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for f in gemv moe_experts; do
	timeout 90 build/tests/gpu_kern $f >"$OUT/x/k-$f.log" 2>&1
	echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/k-$f.log")"
	grep -E "^FAIL" "$OUT/x/k-$f.log" | head -5
done
bash bench/results/2026-12-03/golden.sh
echo "golden ($((SECONDS-t0)) s)"
wait
ab() { # name ctx a b
	timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
ab copydiv 512 "--copy blockdiv" "--copy block"
ab copydiv 4096 "--copy blockdiv" "--copy block"
timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>/dev/null; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	.*tc_|^class|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7,10,11
cuobjdump -sass build/kernels/moe_experts.o >"$OUT/x/moe.sass" 2>&1; echo "sass rc=$?"
IDS=$(seq -s, 1 40)
timeout 150 ncu --set full --import-source yes --clock-control none -k regex:tc_rows -s 5 -c 1 -o "$OUT/x/gu" \
	bin/x4-run -m /tmp/x4-full --device cuda:0 --tokens "$IDS" -n 3 --ignore-eos --graph off \
	>"$OUT/x/ncu.log" 2>&1; echo "ncu rc=$? ($((SECONDS-t0)) s)"
ncu -i "$OUT/x/gu.ncu-rep" --page details >"$OUT/x/gu-details.txt" 2>&1
ncu -i "$OUT/x/gu.ncu-rep" --page source --csv --print-source sass >"$OUT/x/gu-source.csv" 2>&1
echo "ncu pages rc=$? $(wc -l <"$OUT/x/gu-source.csv") lines"
grep -E 'Duration|Executed Ipc A|Issued Warp|Warp Cycles Per Issued|Executed Instructions  ' "$OUT/x/gu-details.txt"
rm -f "$OUT/x/gu.ncu-rep"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
