#!/usr/bin/env bash
# tool_cards.sh - bench/cards.sh's dry run: the tiny preset with two
# processes on the CPU (--devices cpu,cpu) and one, checked for the TSV's
# shape and provenance and its arithmetic, a run voided by differing token
# counts (--short-process), usage errors.  The figures themselves mean
# nothing here (both processes share the cores).  Run from the tree's root.
set -u
cd "$(dirname "$0")/.." || exit 2
CARDS=bench/cards.sh
MODEL=build/models/tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OUT=$tmp/out
. tests/t.sh
common=(--repeats 2 --prompt-tokens 12 -n 6 --threads 1)

bash "$CARDS" --devices cpu,cpu "${common[@]}" "$MODEL" >"$tmp/two.tsv" 2>"$tmp/two.err"; rc=$?
check cards.two.exit "$rc" "exit $rc: $(tail -n 3 "$tmp/two.err")"
for k in commit gpus devices model date command "each process"; do
	grep -q "^# $k	." "$tmp/two.tsv" || miss="${miss:-} $k"
done
check cards.provenance $([ -z "${miss:-}" ]; echo $?) "no '# KEY' line for:${miss:-}"
head="kind	repeat	arm	process	device	device_name	prompt_tokens	generated_tokens	prefill_tok_s	decode_tok_s	prefill_vs_alone	decode_vs_alone	gen_overlap	model_fingerprint	commit"
check cards.header $([ "$(grep -v '^#' "$tmp/two.tsv" | head -1)" = "$head" ]; echo $?) "$(grep -v '^#' "$tmp/two.tsv" | head -1)"
msg=$(python3 - "$tmp/two.tsv" <<'PY'
import statistics, sys
lines = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("#")]
head, rows = lines[0], [dict(zip(lines[0], l)) for l in lines[1:]]
assert all(len(l) == len(head) for l in lines), "rows of another width"
kinds = [r["kind"] for r in rows]
assert kinds == ["run"] * 6 + ["sum"] * 2 + ["median"] * 3 + ["aggregate"], kinds
run = [r for r in rows if r["kind"] == "run"]
# interleaved: repeat 1 alone first, repeat 2 together first (the rows are
# sorted by repeat, then alone before together)
assert [(r["repeat"], r["arm"], r["process"]) for r in run] == [
    ("1", "alone", "0"), ("1", "together", "0"), ("1", "together", "1"),
    ("2", "alone", "0"), ("2", "together", "0"), ("2", "together", "1")], run
assert {(r["prompt_tokens"], r["generated_tokens"]) for r in run} == {("12", "6")}
assert all(r["device"] == "cpu" and len(r["model_fingerprint"]) == 16 for r in run)
f = lambda r, k: float(r[k])
sums = [r for r in rows if r["kind"] == "sum"]
for s in sums:
    t = [r for r in run if r["repeat"] == s["repeat"] and r["arm"] == "together"]
    assert abs(f(s, "decode_tok_s") - sum(f(r, "decode_tok_s") for r in t)) < 0.02, s
    assert 0 <= f(s, "gen_overlap") <= 1, s
alone = statistics.median(f(r, "decode_tok_s") for r in run if r["arm"] == "alone")
agg = rows[-1]
assert abs(f(agg, "decode_tok_s") - statistics.median(f(s, "decode_tok_s") for s in sums)) < 0.02, agg
assert abs(f(agg, "decode_vs_alone") - f(agg, "decode_tok_s") / alone) < 0.002, agg
assert agg["generated_tokens"] == "12", agg
print("ok")
PY
)
check cards.two.table "$([ "$msg" = ok ]; echo $?)" "$msg"
grep -q '^cards.sh: 2 processes together: aggregate decode [0-9.]* tok/s, [0-9.]*x the [0-9.]* of cpu alone; prefill [0-9.]*x; generations overlapped [0-9]*%; 2 repeats$' "$tmp/two.err"
check cards.verdict_line $? "$(grep '^cards.sh' "$tmp/two.err")"

# N=1: the card alone and "together" are the same shape, one process.
bash "$CARDS" --devices cpu --repeats 1 --prompt-tokens 8 -n 4 --threads 1 "$MODEL" >"$tmp/one.tsv" 2>"$tmp/one.err"; rc=$?
n=$(grep -c '^run	' "$tmp/one.tsv")
check cards.one $([ "$rc" = 0 ] && [ "$n" = 2 ] && grep -q '^aggregate	' "$tmp/one.tsv"; echo $?) "exit $rc, $n run rows"

# A process that generates one token fewer voids the measurement.
bash "$CARDS" --devices cpu,cpu --repeats 1 --prompt-tokens 8 -n 4 --threads 1 --short-process 1 "$MODEL" \
	>"$tmp/void.tsv" 2>"$tmp/void.err"; rc=$?
check cards.void $([ "$rc" = 1 ] && grep -q '^# void: repeat 1 together process 1 (cpu) had 8 prompt and 3 generated tokens' "$tmp/void.tsv" &&
	! grep -q '^median\|^aggregate' "$tmp/void.tsv" && grep -q '^cards.sh: void:' "$tmp/void.err"; echo $?) \
	"exit $rc: $(tail -n 2 "$tmp/void.tsv")"

for args in "" "$MODEL" "-n x $MODEL 2" "--repeats 0 $MODEL 2" "--devices cpu,cpu $MODEL 3" \
	"--short-process 2 --devices cpu,cpu $MODEL" "--no-such $MODEL 2" "$MODEL 2 extra"; do
	# shellcheck disable=SC2086
	bash "$CARDS" $args >"$tmp/o" 2>"$tmp/e"; rc=$?
	check "cards.usage[$args]" $((rc != 2 || $(wc -c <"$tmp/e") == 0)) "exit $rc: $(head -c 200 "$tmp/e")"
done
bash "$CARDS" -h >"$tmp/o" 2>&1; rc=$?
check cards.help $([ "$rc" = 0 ] && grep -q 'bash bench/cards.sh DIR N' "$tmp/o"; echo $?) "exit $rc: $(head -3 "$tmp/o")"
