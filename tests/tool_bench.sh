#!/usr/bin/env bash
# tool_bench.sh - x4-bench-abab on the tiny preset on the CPU: a control
# near 1.00x, a lever with a real effect (f64 arithmetic against f32) in the
# right direction, a comparison voided when the arms generate different
# token counts, the TSV and JSON shapes, usage errors.  Run from the tree's
# root (tests/run.sh does).
set -u
cd "$(dirname "$0")/.." || exit 2
BENCH=bin/x4-bench-abab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/t.sh
# The median ratio of a TSV row kind ("ratio", "control").
ratio() { awk -F'\t' -v k="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	$1 == k { print $c["ratio"] }' "$1"; }
inrange() { python3 -c "import sys; v=float('$1'); sys.exit(0 if $2 <= v <= $3 else 1)" 2>/dev/null; }

if [ ! -x "$BENCH" ]; then
	fail bench.setup "$BENCH missing: run make"
	exit 1
fi
common=(--prompt-tokens 16 -n 12 --pairs 3 --warmup 2 --threads 1)
# The control's bracket: 0.7-1.4x, wider (0.5-2.0x) under `make asan`, whose
# instrumented runs of a few milliseconds swing with the machine's load (a
# control of 1.53x was seen once in a fresh clone's .ci/run; alone the same
# build gave ~1.0x three times in three).
lo=0.7 hi=1.4
ldd "$BENCH" 2>/dev/null | grep -q libasan && lo=0.5 hi=2.0

# The control: the same options on both sides; the verdict line on stderr.
# Runs of a few milliseconds swing with whatever else the machine runs (a
# control of 1.93x was seen in a fresh clone's .ci/run while two compiles
# ran beside it): a control outside the bracket is measured once more, and
# the second measurement is the one checked.
"$BENCH" "${common[@]}" -a "" -b "" >"$tmp/c.tsv" 2>"$tmp/c.err"; rc=$?
r=$(ratio "$tmp/c.tsv" ratio); k=$(ratio "$tmp/c.tsv" control)
if [ "$rc" = 0 ] && ! { inrange "$r" $lo $hi && inrange "$k" $lo $hi; }; then
	echo "# control b/a $r, control $k outside $lo-$hi: measured again"
	"$BENCH" "${common[@]}" -a "" -b "" >"$tmp/c.tsv" 2>"$tmp/c.err"; rc=$?
	r=$(ratio "$tmp/c.tsv" ratio); k=$(ratio "$tmp/c.tsv" control)
fi
check bench.control.exit $((rc != 0)) "exit $rc: $(head -c 300 "$tmp/c.err")"
inrange "$r" $lo $hi; check bench.control.near_one $? "b/a '$r' for identical arms ($lo-$hi)"
inrange "$k" $lo $hi; check bench.control.bracket_near_one $? "control '$k' ($lo-$hi)"
grep -q '^x4-bench-abab: b/a [0-9.]*x decode (rounds [0-9.]*-[0-9.]*), prefill .*control [0-9.]*x (.*), 3 pairs$' "$tmp/c.err"
check bench.verdict_line $? "stderr: $(tail -c 300 "$tmp/c.err")"
# Every row has the header's columns and carries the fingerprint, the types,
# the commit, the device and the context.
awk -F'\t' 'NR == 1 { n = NF } NF != n { bad = 1 } END { exit bad }' "$tmp/c.tsv"
check bench.tsv.columns $? "rows with a different column count"
head -1 "$tmp/c.tsv" | grep -q "^kind	round	arm	seq	prompt_tokens	generated_tokens	prefill_tok_s.*decode_ms_tok.*model_fingerprint	types	commit	device	context	max_ctx	options	settings$"
check bench.tsv.header $? "$(head -1 "$tmp/c.tsv")"
n_run=$(awk -F'\t' '$1 == "run"' "$tmp/c.tsv" | wc -l); n_warm=$(awk -F'\t' '$1 == "warmup"' "$tmp/c.tsv" | wc -l)
check bench.tsv.runs $((n_run != 12 || n_warm != 2)) "$n_run measured runs (want 12), $n_warm warm-ups (want 2)"
# ABBA: each round's arms in the order a b b a.
order=$(awk -F'\t' '$1 == "run" { printf "%s", $3 }' "$tmp/c.tsv")
check bench.abba_order $([ "$order" = abbaabbaabba ]; echo $?) "order '$order'"
awk -F'\t' 'NR > 1 && (length($18) != 16 || $18 !~ /^[0-9a-f]+$/ || $19 !~ /IQ4_NL:/ || $21 != "cpu" || $22 != 16) { bad = 1 } END { exit bad }' "$tmp/c.tsv"
check bench.tsv.provenance $? "a row lacks the fingerprint, types, device or context"

# A lever with a real effect: the float64 trunk is slower than float32.
"$BENCH" "${common[@]}" -a "--prec f32" -b "--prec f64" >"$tmp/p.tsv" 2>"$tmp/p.err"; rc=$?
r=$(ratio "$tmp/p.tsv" ratio)
check bench.f64_slower $( [ "$rc" = 0 ] && inrange "$r" 0 0.9; echo $?) "exit $rc, b/a '$r' (f64 should be slower)"

# The settings column names the decode attention (n/a on the CPU, which has
# one), and the options column each arm's --attn: the command that prices it
# on a GPU (-a "--attn fp32" -b "--attn mma") runs here as two like arms.
"$BENCH" --prompt-tokens 8 -n 4 --pairs 1 --warmup 0 --threads 1 -a "--attn fp32" -b "--attn mma" \
	>"$tmp/at.tsv" 2>"$tmp/at.err"; rc=$?
awk -F'\t' '$1 == "run" && $3 == "b" && $NF ~ /(^| )attn=n\/a( |$)/ && $(NF-1) == "--attn mma" { ok = 1 } END { exit !ok }' "$tmp/at.tsv"
check bench.attn_arms $((rc != 0 || $? != 0)) "exit $rc: $(tail -c 300 "$tmp/at.err") $(awk -F'\t' '$1 == "run"' "$tmp/at.tsv" | head -1)"

# JSON: one object with the arms, the runs, the ratio and the verdict.
"$BENCH" --prompt-tokens 8 -n 4 --pairs 1 --warmup 0 --threads 1 -a "" -b "--resid bf16" --json \
	>"$tmp/j" 2>"$tmp/j.err"; rc=$?
python3 - "$tmp/j" <<'PY' >"$tmp/jmsg" 2>&1
import json, sys
o = json.load(open(sys.argv[1]))
assert o["void"] is False and len(o["runs"]) == 4 and len(o["arms"]) == 2, o
assert o["arms"][1]["options"] == "--resid bf16", o["arms"]
assert o["ratio"]["median"] > 0 and "b/a" in o["verdict"], o
PY
check bench.json $((rc != 0 || $? != 0)) "exit $rc: $(cat "$tmp/jmsg" | tail -3)"

# Arms that generate different counts void the comparison: B's cache fills.
"$BENCH" "${common[@]}" -a "" -b "--max-model-len 20" >"$tmp/v.tsv" 2>"$tmp/v.err"; rc=$?
grep -q "^x4-bench-abab: void: .*generated" "$tmp/v.err"; ok=$?
check bench.void $((rc != 1 || ok != 0)) "exit $rc: $(tail -c 300 "$tmp/v.err")"
awk -F'\t' '$1 == "ratio"' "$tmp/v.tsv" | grep -q . 
check bench.void_no_ratio $((! $?)) "a voided comparison printed a ratio"

# Usage: exit 2 and one message.
for args in "-a x" "-b x" "-a '' -b '--device cuda:0'" "-a '--gpu-memory 1G' -b ''" \
	"-a '--bogus' -b ''" "-a '--hc' -b ''" "-a '' -b '' --pairs 0" "-a '' -b '' -n 2" \
	"-a '' -b '' --prompt-tokens x" "-a '' -b '' stray"; do
	eval "\"$BENCH\" $args" </dev/null >"$tmp/out" 2>"$tmp/err"; rc=$?
	check "bench.usage[$args]" $((rc != 2 || $(wc -l <"$tmp/err") != 1)) "exit $rc: $(head -c 300 "$tmp/err")"
done
grep -q "load option" <("$BENCH" -a "--device cuda:0" -b "" 2>&1)
check bench.load_option_named $? "the refusal does not say it needs the weights reloaded"
"$BENCH" -h | grep -q '^usage: x4-bench-abab'; check bench.help $? "no usage on -h"
exit 0
