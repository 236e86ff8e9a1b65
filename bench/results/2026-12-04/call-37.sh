#!/usr/bin/env bash
# Device call 37 (2026-12-04, session 17): why the tensor-core decode
# attention reads its cache at 22% of the read ceiling at 32,500 tokens of
# context (call 36's profile: 33 us a layer for 33 MB).  Nsight Compute on
# the first decode step's first mla_mma_kernel and combine after a
# 32,500-token prefill (a profiled run, not a speed).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "synth rc=$? ($((SECONDS-t0)) s)"
IDS=$(python3 -c 'print(",".join(["7"] * 32500))')
timeout 400 ncu --set full --import-source yes --clock-control none -k 'regex:mla_mma_kernel|mla_combine' -c 2 \
	-o "$OUT/x/attn" bin/x4-run -m /tmp/x4-full --device cuda:0 --tokens "$IDS" -n 2 --ignore-eos \
	--max-model-len 32832 --graph off >"$OUT/x/ncu.log" 2>&1
echo "ncu rc=$? ($((SECONDS-t0)) s)"; tail -n 3 "$OUT/x/ncu.log"
ncu -i "$OUT/x/attn.ncu-rep" --page details >"$OUT/x/attn-details.txt" 2>&1
ncu -i "$OUT/x/attn.ncu-rep" --page source --csv --print-source sass >"$OUT/x/attn-source.csv" 2>&1
grep -E 'mla_|Duration|DRAM Throughput|Executed Ipc A|Issued Warp|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Block Limit' "$OUT/x/attn-details.txt" | head -40
rm -f "$OUT/x/attn.ncu-rep"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
