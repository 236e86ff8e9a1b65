#!/usr/bin/env bash
# Device call 34 (2026-12-04, session 17): the head's Q6_K product
# pipelined (a grid the card holds at once, each warp walking its spans
# with 2 in flight) against its one-shot form (every warp one span, the
# grid covering them).  Checks: gpu_kern gemv_q6k_rows (every form against
# 1 row a warp bit for bit and the float64 reference) and gemv, the golden
# digests with both arms, memcheck on gemv_q6k_rows.  Figures: the kernel
# lab's head forms; x4-bench-abab `--copy head1` (temporary arm: the
# one-shot form) against the default at 512 and 4,096; main's x4-run
# (65b5d94, carried as build/main-x4-run) against this build's, A B B A;
# the PDL-on profile at 512.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for t in gemv_q6k_rows gemv head; do
	build/tests/gpu_kern $t >"$OUT/x/kern-$t.txt" 2>&1
	echo "gpu_kern $t rc=$?: $(tail -n 1 "$OUT/x/kern-$t.txt")"
	grep -E "^FAIL" "$OUT/x/kern-$t.txt" | head -5
done
build/bench/gemv new >"$OUT/x/lab-gemv.tsv" 2>"$OUT/x/lab-gemv.err"
echo "lab rc=$? ($((SECONDS-t0)) s)"; grep -E "output_head" "$OUT/x/lab-gemv.tsv" | cut -f1-8
echo "golden, pipelined:"; bash bench/results/2026-12-03/golden.sh
echo "golden, one-shot:"; bash bench/results/2026-12-03/golden.sh --copy head1
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy head1|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
bash bench/builds-abab.sh /tmp/x4-full build/main-x4-run bin/x4-run 512 3 >"$OUT/x/builds-abab.txt" 2>&1
echo "builds-abab rc=$? ($((SECONDS-t0)) s)"; tail -n 3 "$OUT/x/builds-abab.txt"
bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 --pdl on \
	>"$OUT/x/profile-512-pdlon.tsv" 2>"$OUT/x/profile-512-pdlon.err"
echo "profile rc=$? ($((SECONDS-t0)) s): $(grep unprofiled "$OUT/x/profile-512-pdlon.err" | cut -c1-150)"
grep -E "q6k" "$OUT/x/profile-512-pdlon.tsv" | cut -f2-12
timeout $((580 - (SECONDS - t0))) compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern gemv_q6k_rows >"$OUT/x/memcheck-q6k.txt" 2>&1
echo "memcheck rc=$? ($((SECONDS-t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-q6k.txt" | tail -n 1)"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
