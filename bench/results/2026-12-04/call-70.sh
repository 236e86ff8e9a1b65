#!/usr/bin/env bash
# Device call 70 (written in session 22; run after call 69, on the branch
# lever-attn-wide): the wide decode attention at 512 and 4,096 tokens of
# context, where its 128 splits move more partial bytes than cache bytes
# and its blocks are half as many at a short span: wide (128 splits),
# wide64, widep (pipelined, 128), widep64, each against main's kernel, 3
# pairs; then x4-profile at 32,500 with ARM (default wide: set it to call
# 69's winner) for the attention's and the combine's exposed time.
set -u
t0=$SECONDS
ARM=${ARM:-wide}
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
[ -f /tmp/x4-full/xing4_0-full.gguf ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x/l" LEVER_CTX="512 4096" LEVER_PAIRS=3 LEVER_WARMUP=1 \
	LEVERS=$'|--copy wide\n|--copy wide64\n|--copy widep\n|--copy widep64' \
	timeout 420 bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
for a in block "$ARM"; do
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 32500 --steps 16 --copy "$a" \
		>"$OUT/x/prof-32500-$a.tsv" 2>"$OUT/x/prof-32500-$a.err"
	echo "profile $a rc=$? ($((SECONDS-t0)) s)"
done
python3 bench/profile_diff.py "$OUT/x/prof-32500-block.tsv" "$OUT/x/prof-32500-$ARM.tsv" 2>&1 | head -14
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
