#!/usr/bin/env bash
# tool_walk.sh - the story of docs/numerics.md 2 on a synthetic loud
# checkpoint: bin/x4-walk-residual --tokens 2 must show the fp16 residual
# going non-finite after the loud block while fp32 stays finite with the
# float64 run's top-4, and --replay must find the magnitude in the weights.
#
# The factor: x4-synth --loud B:E:F multiplies every weight of expert E's
# gate, up and down rows by F, so the expert's output grows as F^3 (silu(g)*u
# is quadratic in the input, the down projection linear); the synthetic bias
# also forces the loud expert into the top-k, so the one-token walk runs it.
# Measured on the tiny preset, seed 1, --tokens 2 (the stream maximum after
# block 2's FFN): F=20 1.47e4, F=30 4.95e4 (still finite in fp16), F=33
# 6.59e4 (the first to overflow), F=40 1.18e5, F=60 3.97e5.  F=60 overflows
# fp16 sixfold, so small changes to the synthetic weights keep the story, while
# fp32 and bf16 (range 3.4e38) are nowhere near their limit.  The walk on
# the plain tiny preset is the control: there no arm leaves the fp16 range.
set -u
cd "$(dirname "$0")/.." || exit 2
WALK=bin/x4-walk-residual
SYNTH=bin/x4-synth
LOUD_F=60
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. tests/t.sh
# Field N (1-based, after the '# ') of the summary row of arm A.
summary() { grep "^# $1	" "$2" | cut -f"$3"; }

if [ ! -x "$WALK" ] || [ ! -x "$SYNTH" ] || [ ! -d build/models/tiny ]; then
	fail tool_walk.setup "$WALK, $SYNTH or build/models/tiny missing: run make"
	exit 1
fi

# Control: the plain tiny preset stays in range in every arm.
"$WALK" -m build/models/tiny --tokens 2 >"$tmp/plain" 2>"$tmp/err"; rc=$?
check walk.plain.exit $((rc != 0)) "exit $rc: $(head -c 300 "$tmp/err")"
rows=$(grep -vc '^#' "$tmp/plain")
check walk.plain.rows $((rows != 9)) "$rows lines (header + 4 blocks x 2 sublayers expected)"
head -1 "$tmp/plain" | grep -q '^block	sublayer	f32_s0_max	f32_s0_rms.*f16_s0_max.*bf16_y_max	bf16_nonfinite$'
check walk.plain.header $? "header: $(head -1 "$tmp/plain")"
for arm in f32 f16 bf16; do
	o=$(summary $arm "$tmp/plain" 4)
	check "walk.plain.$arm.in_range" $([ "$o" = none ]; echo $?) "first_fp16_overflow '$o'"
done

# The loud checkpoint.
if ! "$SYNTH" --preset tiny --seed 1 --loud "2:0:$LOUD_F" -o "$tmp/loud" >"$tmp/synth" 2>&1; then
	fail walk.synth "x4-synth --loud failed: $(tail -c 300 "$tmp/synth")"
	exit 1
fi
"$WALK" -m "$tmp/loud" --tokens 2 --replay 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check walk.loud.exit $((rc != 0)) "exit $rc (0: the f32 arm stayed finite): $(head -c 300 "$tmp/err")"
check walk.loud.stderr_empty $(( $(wc -c <"$tmp/err") != 0 )) "stderr: $(head -c 300 "$tmp/err")"

f16_nf=$(summary f16 "$tmp/out" 5)
f16_blk=${f16_nf%%:*}
check walk.loud.f16_nonfinite_after_loud_block \
	$([[ "$f16_nf" =~ ^[0-9]+:(attn|ffn)$ ]] && [ "$f16_blk" -ge 2 ] && [ "$f16_nf" != 2:attn ]; echo $?) \
	"f16 first_nonfinite '$f16_nf', want block 2's FFN or later"
f16_ov=$(summary f16 "$tmp/out" 4)
check walk.loud.f16_leaves_range_at_loud_block $([ "$f16_ov" = 2:ffn ]; echo $?) \
	"f16 first_fp16_overflow '$f16_ov', want 2:ffn"
for arm in f32 f64; do
	nf=$(summary $arm "$tmp/out" 5)
	check "walk.loud.$arm.finite" $([ "$nf" = none ]; echo $?) "$arm first_nonfinite '$nf'"
done
f32_ov=$(summary f32 "$tmp/out" 4)
check walk.loud.f32_exceeds_fp16_range $([ "$f32_ov" = 2:ffn ]; echo $?) \
	"f32 first_fp16_overflow '$f32_ov': the factor does not make block 2 loud enough"
f32_ids=$(summary f32 "$tmp/out" 6 | sed 's/:[^,]*//g')
f64_ids=$(summary f64 "$tmp/out" 6 | sed 's/:[^,]*//g')
check walk.loud.f32_top4_equals_f64 \
	$([ -n "$f32_ids" ] && [ "$f32_ids" = "$f64_ids" ] && grep -q '^# f32_top4_ids_equal_f64: yes$' "$tmp/out"; echo $?) \
	"f32 '$f32_ids' vs f64 '$f64_ids'"

# --replay 2: the loud expert (0) is selected and carries the magnitude.
grep -q '^# replay of block 2' "$tmp/out"; check walk.replay.present $? "no replay section"
n_exp=$(grep -Ec '^# [0-9]+	' "$tmp/out")
check walk.replay.experts $((n_exp != 4)) "$n_exp expert rows, want 4"
loud=$(grep -E '^# 0	' "$tmp/out" | cut -f3)
others=$(grep -E '^# [1-9][0-9]*	' "$tmp/out" | cut -f3 | sort -g | tail -1)
check walk.replay.loud_expert \
	$(awk -v l="$loud" -v o="$others" 'BEGIN { exit !(l != "" && l + 0 > 100 * (o + 0)) }'; echo $?) \
	"expert 0 out_max '$loud', largest other '$others'"
rel=$(sed -n 's/^# replay_vs_trunk: .* = //p' "$tmp/out")
check walk.replay.matches_trunk $(awk -v r="$rel" 'BEGIN { exit !(r != "" && r + 0 < 1e-3) }'; echo $?) \
	"relative difference '$rel'"

# --json: every line one object.
"$WALK" -m "$tmp/loud" --tokens 2 --replay 2 --json >"$tmp/json" 2>"$tmp/err"; rc=$?
bad=$(python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1]):
    json.loads(line); n += 1
print("ok" if n >= 8 + 4 + 2 else "only %d lines" % n)' "$tmp/json" 2>&1 | tail -1)
check walk.json $([ "$rc" = 0 ] && [ "$bad" = ok ]; echo $?) "exit $rc: $bad"

# Usage errors (stdin empty: no input).
for args in "" "--tokens 2 -p x" "-p x -f $tmp/none" "--tokens 2 --arms f8" \
	"--tokens 2 --arms f32,f32" "--tokens 2 --replay 0" "--tokens 2 --replay x" "--tokens a" \
	"--tokens 2 --replay 2 --arms f16" "--tokens 2 --max-model-len 0" \
	"--tokens 2 --max-model-len 4097"; do
	# shellcheck disable=SC2086
	"$WALK" -m "$tmp/loud" $args >/dev/null 2>"$tmp/err" </dev/null; rc=$?
	check "walk.usage[${args//$tmp/T}]" $((rc != 2)) "exit $rc, want 2: $(head -c 200 "$tmp/err")"
done

# -p, -f FILE, -f - and stdin give the same tokens (one final newline dropped).
toks() { sed -n 's/^# model .* tokens \([0-9,]*\) device .*/\1/p' "$1"; }
"$WALK" --arms f32 -p "Hello world" >"$tmp/p.out" 2>"$tmp/err"; rc_p=$?
printf 'Hello world\n' >"$tmp/prompt.txt"
"$WALK" --arms f32 -f "$tmp/prompt.txt" >"$tmp/f.out" 2>>"$tmp/err"; rc_f=$?
"$WALK" --arms f32 -f - <"$tmp/prompt.txt" >"$tmp/fd.out" 2>>"$tmp/err"; rc_fd=$?
echo "Hello world" | "$WALK" --arms f32 >"$tmp/s.out" 2>>"$tmp/err"; rc_s=$?
tp=$(toks "$tmp/p.out")
check walk.prompt_file_and_stdin \
	$([ "$rc_p$rc_f$rc_fd$rc_s" = 0000 ] && [ -n "$tp" ] && [ "$tp" = "$(toks "$tmp/f.out")" ] &&
	  [ "$tp" = "$(toks "$tmp/fd.out")" ] && [ "$tp" = "$(toks "$tmp/s.out")" ]; echo $?) \
	"exits $rc_p $rc_f $rc_fd $rc_s; tokens '$tp' '$(toks "$tmp/f.out")' '$(toks "$tmp/s.out")': $(head -c 200 "$tmp/err")"
"$WALK" -f "$tmp/no-such-file" >/dev/null 2>"$tmp/err"; rc=$?
check walk.prompt_file_missing $([ $rc = 1 ] && grep -q 'cannot open the prompt file' "$tmp/err"; echo $?) \
	"exit $rc: $(head -c 200 "$tmp/err")"

# A prompt longer than the cache: the message names a flag the tool has.
"$WALK" --tokens 2,2,2 --max-model-len 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check walk.prompt_too_long \
	$([ $rc = 1 ] && grep -q 'the prompt has 3 tokens and the cache holds 2 positions (--max-model-len): raise --max-model-len, up to the model.s context of 4096' "$tmp/err" &&
	  "$WALK" -h | grep -q -- '--max-model-len N'; echo $?) "exit $rc: $(head -c 300 "$tmp/err")"
ids=$(python3 -c 'print(",".join(["2"] * 4097))')
"$WALK" --arms f32 --tokens "$ids" >"$tmp/out" 2>"$tmp/err"; rc=$?
check walk.prompt_over_context \
	$([ $rc = 1 ] && grep -q "the prompt has 4097 tokens and the model's context is 4096 positions: shorten the prompt" "$tmp/err"; echo $?) \
	"exit $rc: $(head -c 300 "$tmp/err")"

# stdout that cannot be written: exit 1 and say so (TSV, JSON Lines, -h).
for args in "--tokens 2" "--tokens 2 --json" "-h"; do
	# shellcheck disable=SC2086
	"$WALK" $args >/dev/full 2>"$tmp/err"; rc=$?
	check "walk.stdout_full[$args]" \
		$([ $rc = 1 ] && grep -q '^x4-walk-residual: writing .* to stdout failed: No space left on device$' "$tmp/err"; echo $?) \
		"exit $rc: $(head -c 200 "$tmp/err")"
done

# A weight that is not finite: the f32 arm goes non-finite.  The table is
# still printed, the cause is named, and two empty top-4 lists are no match.
cp -r build/models/tiny "$tmp/nan"
gguf=$tmp/nan/xing4_0-tiny.gguf
poke_nan() { # TENSOR: its first value becomes a NaN
	local data off
	data=$(bin/x4-inspect "$gguf" | awk -F'\t' 'p { print $5; exit } /^version/ { p = 1 }')
	off=$(bin/x4-inspect "$gguf" | awk -F'\t' -v t="$1" '$2 == t { print $6; exit }')
	printf '\000\000\300\177' | dd of="$gguf" bs=1 seek=$((data + off)) conv=notrunc status=none
}
poke_nan blk.3.ffn_norm.weight
"$WALK" -m "$tmp/nan" --tokens 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
rows=$(grep -vc '^#' "$tmp/out")
check walk.nonfinite.exit_and_table $([ $rc = 1 ] && [ "$rows" = 9 ]; echo $?) "exit $rc, $rows table lines"
check walk.nonfinite.cause_named \
	$(grep -q "^x4-walk-residual: the f32 arm went non-finite at block 3's ffn (.*) while the streams before it were at most .*, far inside fp32's range" "$tmp/err"; echo $?) \
	"stderr: $(head -c 400 "$tmp/err")"
check walk.nonfinite.top4_not_equal \
	$([ "$(summary f32 "$tmp/out" 5)" = 3:ffn ] && grep -q '^# f32_top4_ids_equal_f64: n/a$' "$tmp/out"; echo $?) \
	"$(grep -E '^# (f32|f32_top4)' "$tmp/out" | tr '\n' '|')"
"$WALK" -m "$tmp/nan" --tokens 2 --json >"$tmp/json" 2>/dev/null; rc=$?
check walk.nonfinite.json_null $([ $rc = 1 ] && grep -qx '{"f32_top4_ids_equal_f64":null}' "$tmp/json"; echo $?) \
	"exit $rc: $(grep top4_ids "$tmp/json")"

# --json is JSON Lines, and says so; the man page has a real date.
check walk.json_lines_named $("$WALK" -h | grep -q 'JSON Lines' && grep -q 'JSON Lines' man/x4-walk-residual.1; echo $?) \
	"-h or the man page does not say JSON Lines"
check walk.man_date $(grep -q '^\.Dd [A-Z][a-z]* [0-9][0-9]*, 20[0-9][0-9]$' man/x4-walk-residual.1; echo $?) \
	"$(grep '^\.Dd' man/x4-walk-residual.1)"
exit 0
