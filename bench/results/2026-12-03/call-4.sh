#!/usr/bin/env bash
# Device call 4 (2026-12-03): the persistent step's code 370 -> 290 KB
# (the block formats' word loops, the top k's rounds and the ring's fill
# rolled; phase_end and the descriptors out of line); x4-bench-abab at 512
# (--step kernels against the default), x4-profile's phases at 512, and
# Nsight Compute's warp states of one step kernel (where its warps stall:
# instruction fetch, memory, barriers) - a profiled run, not a speed.
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/c4.tgz" -C "$W" .' EXIT
t0=$SECONDS
make -j16 CUDA_ARCH=90 all >"$W/build.log" 2>&1; echo "build rc=$? ($((SECONDS-t0)) s)"
bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >"$W/synth.log" 2>&1; echo "full preset rc=$? ($((SECONDS-t0)) s)"
timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "--step kernels" -b "" \
	--prompt-tokens 512 -n 64 --pairs 2 --warmup 1 >"$W/abab-512.tsv" 2>"$W/abab-512.err"
echo "abab 512 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$W/abab-512.err")"
timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 \
	>"$W/profile-512.tsv" 2>"$W/profile-512.err"; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^phase	|unprofiled" "$W/profile-512.tsv" | cut -f2,4,5,7,8,10
timeout 200 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
	--section SpeedOfLight -k regex:step_kernel -c 1 \
	bin/x4-run -m /tmp/x4-full --device cuda:0 -p "Once upon a time" -n 3 --ignore-eos --graph off \
	>"$W/ncu-step.txt" 2>&1; echo "ncu rc=$? ($((SECONDS-t0)) s)"
grep -iE "stall|warp cycles|issued|eligible|active warps|throughput|duration|No Instruction|Barrier|Long Scoreboard|Membar|Branch" "$W/ncu-step.txt" | head -60
