#!/usr/bin/env bash
# Device call 8 (2026-12-03, session 11): the two folds priced on the full
# preset by x4-bench-abab (one process, interleaved, a control each), one
# at a time at 512 and both at 4,096; then x4-profile at 512 with PDL off
# (attribution only) and the steady rates at 512 and 4,096.
set -u
t0=$SECONDS
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile >"$OUT/build8.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >"$OUT/synth.log" 2>&1
echo "full preset ($((SECONDS-t0)) s)"
ab() { # name ctx a b
	timeout 150 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 2 "$OUT/abab-$2-$1.err" | tr '\n' ' ')"
}
ab off-q_b 512 "--fold off" "--fold q_b"
ab q_b-on 512 "--fold q_b" "--fold on"
ab off-on 4096 "--fold off" "--fold on"
timeout 90 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>"$OUT/profile-512-pdloff.err"; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^step	|attn" "$OUT/profile-512-pdloff.tsv" | cut -f1-6 | head -30
