#!/usr/bin/env bash
# one device call: deps, build, make test-gpu at HEAD, the tcv lab (batch-1 IQ4_NL on tensor cores), the prefill profile at 4096
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/c.tgz" -C "$W" .' EXIT
export COMMIT=${COMMIT:-x}
t0=$SECONDS
OUT=$W/s bash bench/gpu-session.sh deps build >/dev/null 2>&1; echo "deps build rc=$? ($((SECONDS-t0)) s)"
(make -j8 CUDA_ARCH=90 bench-kernels >"$W/bench-build.log" 2>&1; echo "bench build rc=$?") &
OUT=$W/t bash bench/gpu-session.sh deps test-gpu 2>&1 | tail -n 12; echo "test-gpu ($((SECONDS-t0)) s)"
wait
timeout 120 build/bench/tcv all >"$W/tcv.tsv" 2>"$W/tcv.err"; echo "tcv rc=$? ($((SECONDS-t0)) s)"
grep -E 'FAIL|# tcv' "$W/tcv.err" | tail -5; cat "$W/tcv.tsv" | head -40
left=$((560 - SECONDS))
[ $left -gt 60 ] && { OUT=$W/p PREFILL_P=4096 timeout $left bash bench/gpu-session.sh prefill-profile 2>&1 | tail -n 25; echo "prefill-profile ($((SECONDS-t0)) s)"; }
