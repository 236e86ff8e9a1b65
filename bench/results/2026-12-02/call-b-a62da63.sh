#!/usr/bin/env bash
# one-off final device call: golden files of this tree, make test-gpu, the goal figures
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/b.tgz" -C "$W" .' EXIT
export COMMIT=${COMMIT:-x}
t0=$SECONDS
OUT=$W/s bash bench/gpu-session.sh deps build >/dev/null 2>&1; echo "deps build rc=$? ($((SECONDS-t0)) s)"
OUT=$W/g GOLDEN_TREE=. bash bench/gpu-session.sh golden 2>&1 | grep golden; cp tests/data/gpu_golden_*.json "$W/"
echo "golden ($((SECONDS-t0)) s)"
make CUDA_ARCH=90 COMMIT="$COMMIT" test-gpu >"$W/test-gpu.log" 2>&1; echo "test-gpu rc=$? ($((SECONDS-t0)) s)"
grep -E '^[a-z_]+: FAIL|passed' "$W/test-gpu.log" | tail -n 20; cp build/test-logs/gpu_model.log "$W/" 2>/dev/null
[ -f /tmp/x4-full/xing4_0-full.gguf ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
python3 -c 'print(" ".join(["word"] * 32500))' >/tmp/p32k.txt
timeout 150 bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p32k.txt -n 64 --ignore-eos --max-model-len 32832 --json >"$W/decode-32768.json" 2>"$W/decode-32768.err"
echo "32k rc=$? ($((SECONDS-t0)) s)"; tail -c 300 "$W/decode-32768.err"; echo
left=$((575 - SECONDS))
n=${LONG_N:-65536}
python3 -c 'import sys; print(" ".join(["word"] * (int(sys.argv[1]) - 128)))' "$n" >/tmp/plong.txt
timeout $left bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/plong.txt -n 64 --ignore-eos --max-model-len "$n" --json >"$W/long-$n.json" 2>"$W/long-$n.err"
echo "long $n rc=$? (limit $left s, at $((SECONDS-t0)) s)"; tail -c 300 "$W/long-$n.err"
