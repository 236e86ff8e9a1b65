#!/usr/bin/env bash
# Device call 10 (2026-12-03, session 11): the q_b fold and the cluster gate
# priced on the full preset by x4-bench-abab (one process, interleaved, a
# control each) at 512 and 4,096; x4-profile at 512 with PDL off
# (attribution only).
set -u
t0=$SECONDS
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile >"$OUT/build10.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
echo "full preset ($((SECONDS-t0)) s)"
ab() { # name ctx a b
	timeout 150 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/abab-$2-$1.err")"
}
ab fold 512 "--fold off" "--fold on"
ab hc 512 "--hc split" "--hc fused"
ab fold 4096 "--fold off" "--fold on"
ab hc 4096 "--hc split" "--hc fused"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>"$OUT/profile-512-pdloff.err"; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	(gemv_bf16|kv_store|.*hc_)|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7
