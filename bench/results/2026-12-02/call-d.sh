#!/usr/bin/env bash
# one device call: deps, build, the golden digests of this tree (the decode's
# IQ4_NL products on the tensor cores move the bits on purpose), make test-gpu,
# the tcv lab, and the lever priced by x4-bench-abab (--gemm fma against the
# default) at 512 and 4096 tokens of context on the full preset
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'cp "$W"/g/gpu_golden_*.json "$FINAL/" 2>/dev/null; tar czf "$FINAL/d.tgz" -C "$W" .' EXIT
export COMMIT=${COMMIT:-x}
t0=$SECONDS
OUT=$W/s bash bench/gpu-session.sh deps build >/dev/null 2>&1; echo "deps build rc=$? ($((SECONDS-t0)) s)"
(make -j8 CUDA_ARCH=90 bench-kernels >"$W/bench-build.log" 2>&1; echo "bench build rc=$?"
 bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1; echo "full preset rc=$?") &
OUT=$W/g GOLDEN_TREE=. bash bench/gpu-session.sh golden 2>&1 | tail -n 3; echo "golden ($((SECONDS-t0)) s)"
OUT=$W/t bash bench/gpu-session.sh deps test-gpu 2>&1 | tail -n 14; echo "test-gpu ($((SECONDS-t0)) s)"
wait
timeout 90 build/bench/tcv all >"$W/tcv.tsv" 2>"$W/tcv.err"; echo "tcv rc=$? ($((SECONDS-t0)) s)"
grep -E 'FAIL|# tcv' "$W/tcv.err" | tail -5; cut -f3-7 "$W/tcv.tsv" | head -30
for ctx in 512 4096; do
	left=$((585 - SECONDS)); [ $left -lt 40 ] && break
	timeout $left bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "--gemm fma" -b "" --prompt-tokens $ctx \
		-n 64 --pairs 3 --warmup 1 >"$W/abab-$ctx.tsv" 2>"$W/abab-$ctx.err"
	echo "abab $ctx rc=$? ($((SECONDS-t0)) s): $(tail -n 2 "$W/abab-$ctx.err" | tr '\n' ' ')"
done
