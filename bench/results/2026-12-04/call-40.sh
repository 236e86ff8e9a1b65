#!/usr/bin/env bash
# Device call 40 (written in session 17, NOT YET RUN: its device time was
# spent): what session 17 left unmeasured on the GPU.  tests/run-gpu.sh on
# the final code (848bcfe: the attention's choice of rounds), memcheck on
# gpu_kern mla (rounds of 64 at contexts to 32,768), and the cost of rounds
# of 64 where a large cache's spans are short: the same position in a
# 6,300-row cache (rounds of 32) and a 32,832-row one (rounds of 64); both
# have 64 splits, so the rounds are the only difference.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
bash tests/run-gpu.sh >"$OUT/x/test-gpu.txt" 2>&1
echo "run-gpu rc=$? ($((SECONDS-t0)) s)"; tail -n 8 "$OUT/x/test-gpu.txt"
timeout 120 compute-sanitizer --tool memcheck --print-limit 5 build/tests/gpu_kern mla >"$OUT/x/memcheck-mla.txt" 2>&1
echo "memcheck mla rc=$? ($((SECONDS-t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/x/memcheck-mla.txt" | tail -n 1)"
wait
for ctx in 2048 4096 6144; do
	bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a '--max-model-len 6300' -b '--max-model-len 32832' \
		--prompt-tokens $ctx -n 64 --pairs 3 --warmup 1 >"$OUT/x/abab-rounds-$ctx.tsv" 2>"$OUT/x/abab-rounds-$ctx.err"
	echo "ctx $ctx rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-rounds-$ctx.err")"
done
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
