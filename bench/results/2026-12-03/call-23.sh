#!/usr/bin/env bash
# Device call 23 (2026-12-03, session 13): the output projection's BF16
# product (3584 x 4096, 896 blocks at 3 an SM: 2.3 waves) in other shapes
# (wkl: log2 of the warps a row's k is split over, R: rows a warp) through
# the temporary knob x4k_bf16_shape_set: the gemv lab's rows at that shape,
# then each shape priced in the step (the temporary --copy wWrR arms against
# the rule, --copy block) at 512, and the two fastest at 4,096.  The knob and
# the arms were uncommitted changes to 47f3ef2, dropped after this call
# (bench/RESULTS.md 36): this script no longer runs on main.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab build/bench/gemv >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
timeout 120 build/bench/gemv new >"$OUT/lab-gemv.tsv" 2>"$OUT/x/lab-gemv.err"
echo "lab gemv rc=$? ($((SECONDS-t0)) s)"; grep -E 'attn_output' "$OUT/lab-gemv.tsv" | cut -f2,3,5,6
grep -ciE 'fail' "$OUT/x/lab-gemv.err"
wait
bash bench/results/2026-12-03/golden.sh --copy w2r4 | head -2
ab() { # name ctx a b
	timeout 110 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
for v in w2r4 w1r4 w2r2 w3r2 w1r2; do ab $v 512 "--copy block" "--copy $v"; done
best=$(for v in w2r4 w1r4 w2r2 w3r2 w1r2; do
	awk -F'\t' -v v=$v '$1 == "ratio" { print $14, v }' "$OUT/abab-512-$v.tsv"; done | sort -rn | head -2 | cut -d' ' -f2)
for v in $best; do ab $v 4096 "--copy block" "--copy $v"; done
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
