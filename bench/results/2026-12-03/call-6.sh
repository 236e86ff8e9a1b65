#!/usr/bin/env bash
# Device call 6 (2026-12-03, session 11): where the multi-kernel step's
# kernels stall, in the step itself.  Nsight Compute's full set over the
# first decode step's kernels of layers 0-2 (two dense layers and the first
# MoE layer: the gate, the BF16 projections, the decode attention and its
# combine, the dense and routed products) and the head, in x4-run on the
# full preset with a 40-token prompt (so the prefill takes hc_fused, and
# the matched kernels are the decode step's).  A profiled run: attribution
# only, not a speed.  Logs straight to $OUT.
set -u
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth >"$OUT/build.log" 2>&1; echo "build rc=$? ($((SECONDS-t0)) s)"
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >"$OUT/synth.log" 2>&1; echo "full preset rc=$? ($((SECONDS-t0)) s)"
IDS=$(seq -s, 1 40)
timeout 300 ncu --set full --clock-control none \
	-k regex:'hc_split|tc_rows|tc_down_sum|gemv_bf16|mla_mma_kernel|mla_combine|router_select_table' -c 34 \
	bin/x4-run -m /tmp/x4-full --device cuda:0 --tokens "$IDS" -n 3 --ignore-eos --graph off \
	>"$OUT/ncu-step-full.txt" 2>&1; echo "ncu rc=$? ($((SECONDS-t0)) s)"
timeout 120 ncu --set full --clock-control none -k regex:gemv_q6k -s 1 -c 1 \
	bin/x4-run -m /tmp/x4-full --device cuda:0 --tokens "$IDS" -n 3 --ignore-eos --graph off \
	>"$OUT/ncu-head-full.txt" 2>&1; echo "ncu head rc=$? ($((SECONDS-t0)) s)"
grep -E '^  [a-zA-Z_:<>, 0-9]+\(|Duration|DRAM Throughput|Memory Throughput' "$OUT/ncu-step-full.txt" | head -120
