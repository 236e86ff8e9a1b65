#!/usr/bin/env bash
# One device call's worth of work on the GPU machine (it keeps nothing between
# calls): build for the card, run the GPU tests, write the full preset and
# inspect it.  Usage (from the tree root, on the GPU machine):
#   bash bench/gpu-session.sh [steps...]    steps: build test-gpu full
# Logs and tables go to $OUT (or build/gpu-out when OUT is unset).
set -u
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
steps=${*:-build test-gpu full}
log() { echo "== $*" | tee -a "$OUT/session.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
date -u +%FT%TZ | tee -a "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
for s in $steps; do
	case $s in
	build)
		log "build (CUDA_ARCH=90)"
		t0=$SECONDS
		make -j16 CUDA_ARCH=90 all tests >"$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log"; exit 1; }
		log "build took $((SECONDS - t0)) s";;
	test-gpu)
		log "make test-gpu"
		make CUDA_ARCH=90 test-gpu 2>&1 | tee "$OUT/test-gpu.log" | tail -n 60;;
	full)
		log "x4-synth --preset full"
		d=/tmp/x4-full; rm -rf "$d"
		/usr/bin/time -v bin/x4-synth --preset full --seed 1 -o "$d" 2>"$OUT/synth-full.err" || { tail "$OUT/synth-full.err"; exit 1; }
		grep -E "Elapsed|Maximum resident" "$OUT/synth-full.err" | tee -a "$OUT/session.log"
		tail -n 2 "$OUT/synth-full.err" | tee -a "$OUT/session.log"
		ls -l "$d" | tee -a "$OUT/session.log"
		bin/x4-inspect "$d"/xing4_0-full.gguf >"$OUT/inspect-full.tsv" 2>&1
		bin/x4-inspect --check "$d"/xing4_0-full.gguf 2>&1 | tail -n 3 | tee -a "$OUT/session.log";;
	*) echo "unknown step $s"; exit 2;;
	esac
done
