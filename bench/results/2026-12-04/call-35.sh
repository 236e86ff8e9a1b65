#!/usr/bin/env bash
# Device call 35 (2026-12-04, session 17): two more forms of the head's
# Q6_K product after call 34's pipeline did not pay: x's values in a lane's
# registers (4 rows a warp, 2 spans in flight, no shared-memory read of x
# in the sums: `--copy headxr`) and 8 rows a warp one-shot (2.5 shared
# loads a 4-weight step of a row against 3: `--copy head8`), against the
# one-shot 4 rows (`--copy head1`, main's form).  Checks: gpu_kern
# gemv_q6k_rows (every form bit for bit against 1 row a warp), golden
# digests with each form, memcheck.  Figures: the lab's forms,
# x4-bench-abab at 512.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests bench-kernels >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
build/tests/gpu_kern gemv_q6k_rows >"$OUT/x/kern-gemv_q6k_rows.txt" 2>&1
echo "gpu_kern gemv_q6k_rows rc=$?: $(tail -n 1 "$OUT/x/kern-gemv_q6k_rows.txt")"
grep -E "^FAIL" "$OUT/x/kern-gemv_q6k_rows.txt" | head -5
build/bench/gemv new >"$OUT/x/lab-gemv.tsv" 2>"$OUT/x/lab-gemv.err"
echo "lab rc=$? ($((SECONDS-t0)) s)"; grep -E "output_head" "$OUT/x/lab-gemv.tsv" | cut -f1-8
for f in headxr head8; do echo "golden, $f:"; bash bench/results/2026-12-03/golden.sh --copy $f; done
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x" LEVER_CTX=512 LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS=$'--copy head1|--copy headxr\n--copy head1|--copy head8' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
timeout $((580 - (SECONDS - t0))) compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern gemv_q6k_rows >"$OUT/x/memcheck-q6k.txt" 2>&1
echo "memcheck rc=$? ($((SECONDS-t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-q6k.txt" | tail -n 1)"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
