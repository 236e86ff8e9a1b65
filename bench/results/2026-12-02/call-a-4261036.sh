#!/usr/bin/env bash
# one-off device call: the tensor-core prefill kernels tested, timed and priced
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/a.tgz" -C "$W" .' EXIT
export COMMIT=${COMMIT:-x}
t0=$SECONDS
make -j16 CUDA_ARCH=90 COMMIT="$COMMIT" all tests bench-kernels >"$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
echo "build $((SECONDS-t0)) s"
build/tests/gpu_kern >"$W/gpu_kern.log" 2>&1; echo "gpu_kern rc=$?"; grep -E "^FAIL" "$W/gpu_kern.log" | head -20; tail -2 "$W/gpu_kern.log"
for p in mla_prefill gemm moe mla_decode; do timeout 120 build/bench/$p all >"$W/lab-$p.tsv" 2>"$W/lab-$p.err"; echo "lab $p rc=$? ($((SECONDS-t0)) s)"; grep -iE "check|fail|error" "$W/lab-$p.err" | head -8; done
cat "$W"/lab-*.tsv | awk -F'\t' '$2!="variant"{printf "%-10s %-6s %-44s %9s us %7s GB/s %s TF\n",$1,$2,$3,$5,$6,$8}'
timeout 200 bash tests/gpu_model.sh >"$W/gpu_model.log" 2>&1; echo "gpu_model rc=$? ($((SECONDS-t0)) s)"; grep -E "^FAIL|passed" "$W/gpu_model.log" | head -20
[ -f /tmp/x4-full/xing4_0-full.gguf ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "full preset ($((SECONDS-t0)) s)"
for ctx in 512 4096; do
  while IFS= read -r lv; do
    a=${lv%%|*}; b=${lv#*|}; tag=$(echo "$ctx-$a-$b" | tr -c 'a-z0-9-' '_')
    timeout 150 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$a" -b "$b" --prompt-tokens $ctx -n 32 --pairs 2 --warmup 1 >"$W/abab-$tag.tsv" 2>"$W/abab-$tag.err"
    echo "ctx $ctx a='$a' b='$b': $(tail -n 1 "$W/abab-$tag.err") ($((SECONDS-t0)) s)"
  done <<<$'--attn fp32|--attn mma\n--gemm fma|--gemm mma'
done
python3 -c 'print(" ".join(["word"] * 32500))' >/tmp/p32k.txt
timeout 200 bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p32k.txt -n 64 --ignore-eos --max-model-len 32832 --json >"$W/decode-32768.json" 2>"$W/decode-32768.err"
echo "32k rc=$? ($((SECONDS-t0)) s)"; tail -c 400 "$W/decode-32768.err"
