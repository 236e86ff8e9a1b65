#!/usr/bin/env bash
# One device call's worth of work on the GPU machine (it keeps nothing between
# calls): build for the card, run the GPU tests, write the full preset and
# inspect it.  Usage (from the tree root, on the GPU machine):
#   COMMIT=<git describe> bash bench/gpu-session.sh [steps...]
#   steps: build test-gpu full bench sanitize (default: all five, in that order)
# Logs and tables go to $OUT (or build/gpu-out when OUT is unset).
set -u
# The device tool brings back at most 8 files from $OUT: everything is
# written to a work folder and packed into $OUT/session.tgz at exit.
FINAL=${OUT:-build/gpu-out}
OUT=$(mktemp -d /tmp/x4-gpu-out.XXXXXX)
mkdir -p "$FINAL"
trap 'cp "$OUT/session.log" "$FINAL/" 2>/dev/null; tar czf "$FINAL/session.tgz" -C "$OUT" .' EXIT
steps=${*:-build test-gpu full bench sanitize}
COMMIT=${COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
export X4_COMMIT=$COMMIT
log() { echo "== $*" | tee -a "$OUT/session.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
date -u +%FT%TZ | tee -a "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
for s in $steps; do
	case $s in
	build)
		log "build (CUDA_ARCH=90)"
		t0=$SECONDS
		make -j16 CUDA_ARCH=90 COMMIT="$COMMIT" all tests >"$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log"; exit 1; }
		log "build took $((SECONDS - t0)) s";;
	test-gpu)
		log "make test-gpu"
		make CUDA_ARCH=90 COMMIT="$COMMIT" test-gpu >"$OUT/test-gpu.log" 2>&1
		grep -E '^(FAIL|# time|#.*GB/s)|passed' "$OUT/test-gpu.log" | tail -n 40
		cp build/test-logs/gpu_* "$OUT/" 2>/dev/null;;
	full)
		log "x4-synth --preset full"
		d=/tmp/x4-full; rm -rf "$d"
		/usr/bin/time -v bin/x4-synth --preset full --seed 1 -o "$d" 2>"$OUT/synth-full.err" || { tail "$OUT/synth-full.err"; exit 1; }
		grep -E "Elapsed|Maximum resident" "$OUT/synth-full.err" | tee -a "$OUT/session.log"
		tail -n 2 "$OUT/synth-full.err" | tee -a "$OUT/session.log"
		ls -l "$d" | tee -a "$OUT/session.log"
		bin/x4-inspect "$d"/xing4_0-full.gguf >"$OUT/inspect-full.tsv" 2>&1
		bin/x4-inspect --check "$d"/xing4_0-full.gguf 2>&1 | tail -n 3 | tee -a "$OUT/session.log";;
	bench)
		log "bench/baseline.sh on the full preset"
		OUT="$OUT" bash bench/baseline.sh /tmp/x4-full 3 cuda:0 2>&1 | tail -n 12;;
	sanitize)
		# Once, for the record: the parity tests under compute-sanitizer.
		for t in gpu_trunk gpu_kern_quant gpu_kern_core; do
			log "compute-sanitizer memcheck $t"
			timeout 150 compute-sanitizer --tool memcheck --print-limit 5 build/tests/$t \
				>"$OUT/sanitize-$t.log" 2>&1
			echo "rc=$? $(grep -c '^PASS' "$OUT/sanitize-$t.log") PASS $(grep -c '^FAIL' "$OUT/sanitize-$t.log") FAIL; $(grep 'ERROR SUMMARY' "$OUT/sanitize-$t.log")" | tee -a "$OUT/session.log"
		done;;
	*) echo "unknown step $s"; exit 2;;
	esac
done
