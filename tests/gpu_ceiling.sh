#!/usr/bin/env bash
# gpu_ceiling.sh - x4-ceiling on the GPU (issue 12, deliverable 3), on the
# small preset (the real widths, four blocks).  Run from the tree's root on a
# machine with a CUDA GPU (tests/run-gpu.sh does, under `make test-gpu`).
#
#   on the whole card (--no-run): every chunk's measured memory beside the
#     weights and the cache within 5% of the plan (exit 0), the overhead rows,
#     the measured formula, and the promise and the edge at the model's
#     whole context;
#   under a --gpu-memory cap that leaves ~40 MiB of cache: the bisection's
#     promise and edge (the last chunk run at each) equal the plan's
#     prediction to the position, one past the edge is refused in the
#     trunk's own words; x4-run at the promise with a prompt that fills the
#     context runs, and one position more is refused at load.
set -u
cd "$(dirname "$0")/.." || exit 2
CEIL=bin/x4-ceiling
RUN=bin/x4-run
SYNTH=bin/x4-synth
DEV=${1:-cuda:0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/t.sh
# A column of the rows of one section and row name: col FILE SECTION ROW NAME
col() { awk -F'\t' -v s="$2" -v r="$3" -v k="$4" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	$1 == s && $4 == r { print $c[k] }' "$1"; }

for b in "$CEIL" "$RUN" "$SYNTH"; do
	if [ ! -x "$b" ]; then
		fail gpu_ceiling.setup "$b missing: run make"
		exit 1
	fi
done
if ! "$SYNTH" --preset small --seed 1 -o "$tmp/small" >"$tmp/synth.err" 2>&1; then
	fail gpu_ceiling.synth "x4-synth --preset small failed: $(tail -c 300 "$tmp/synth.err")"
	exit 1
fi
M=$tmp/small

# The whole card: the chunk measurement and the overhead.
t0=$SECONDS
"$CEIL" -m "$M" --device "$DEV" --no-run --cards 22G,80G >"$tmp/w.tsv" 2>"$tmp/w.err"; rc=$?
check ceiling.gpu.exit $rc "exit $rc: $(tail -c 600 "$tmp/w.err")"
echo "# whole card: $((SECONDS - t0)) s"
sed 's/^/# /' "$tmp/w.err"
n=$(awk -F'\t' '$1 == "chunk" && $3 == "measured" && $12 != "-" && $14 != "-"' "$tmp/w.tsv" | wc -l)
check ceiling.gpu.chunks_measured $((n != 4)) "$n of 4 chunks measured"
awk -F'\t' '$1 == "chunk" { print "# chunk " $6 ": measured " $12 " MiB, plan " $13 " MiB, ratio " $14 }' "$tmp/w.tsv"
awk -F'\t' '$1 == "chunk" && $3 == "measured" && ($14 < 0.95 || $14 > 1.05) && ($12 - $13 > 6 || $13 - $12 > 6) { bad = 1 } END { exit bad }' "$tmp/w.tsv"
check ceiling.gpu.chunks_within_5pct $? "a chunk's measurement is more than 5% (and 6 MiB) off the plan"
ctx=$(col "$tmp/w.tsv" overhead context measured_mib)
check ceiling.gpu.overhead_context $(awk -v v="${ctx:-0}" 'BEGIN { exit !(v > 0) }'; echo $?) "context overhead '$ctx' MiB"
a_m=$(awk -F'\t' '$1 == "formula" && $3 == "measured" && $4 == "chunk" { print $15 }' "$tmp/w.tsv")
a_p=$(awk -F'\t' '$1 == "formula" && $3 == "plan" && $4 == "chunk" { print $15 }' "$tmp/w.tsv")
check ceiling.gpu.slope_within_5pct $(awk -v m="${a_m:-0}" -v p="${a_p:-1}" 'BEGIN { exit !(m / p > 0.95 && m / p < 1.05) }'; echo $?) \
	"measured $a_m KiB a chunk token, the plan $a_p"
p=$(col "$tmp/w.tsv" edge promise max_model_len); e=$(col "$tmp/w.tsv" edge edge max_model_len)
check ceiling.gpu.whole_card_whole_context $((${p:-0} != 262144 || ${e:-0} != 262144)) "promise '$p', edge '$e' on the whole card"
awk -F'\t' '$1 == "card" && $3 == "plan+overhead" { ok = 1 } END { exit !ok }' "$tmp/w.tsv"
check ceiling.gpu.cards_with_overhead $? "the card rows are not on the measured overhead"

# A cap that leaves ~40 MiB for the cache beside the weights, the narrowest
# chunk and the reserve: the promise near 9000 positions, the edge 256 MiB
# of cache (58254 positions at 4608 bytes) beyond it.
"$CEIL" -m "$M" --predict >"$tmp/p0.tsv" 2>/dev/null
w=$(col "$tmp/p0.tsv" formula weights weights_mib)
ws=$(awk -F'\t' '$1 == "chunk" && $6 == 128 { print $13 }' "$tmp/p0.tsv")
cap=$(awk -v w="${w:-0}" -v s="${ws:-0}" 'BEGIN { printf "%d", w + s + 256 + 41 }')
"$CEIL" -m "$M" --predict --gpu-memory "${cap}M" --cards "${cap}M" >"$tmp/p.tsv" 2>/dev/null
pp=$(col "$tmp/p.tsv" edge promise max_model_len); pe=$(col "$tmp/p.tsv" edge edge max_model_len)
echo "# cap ${cap} MiB: the plan promises $pp, its edge $pe"
t0=$SECONDS
"$CEIL" -m "$M" --device "$DEV" --gpu-memory "${cap}M" --context 2048 --chunks 128 --cards "${cap}M" \
	>"$tmp/c.tsv" 2>"$tmp/c.err"; rc=$?
echo "# capped bisection with runs: $((SECONDS - t0)) s"
sed 's/^/# /' "$tmp/c.err"
check ceiling.gpu.capped_exit $rc "exit $rc: $(tail -c 600 "$tmp/c.err")"
mp=$(col "$tmp/c.tsv" edge promise max_model_len); me=$(col "$tmp/c.tsv" edge edge max_model_len)
how=$(col "$tmp/c.tsv" edge edge how)
check ceiling.gpu.promise_as_planned $((${mp:-0} != ${pp:-1} || ${pp:-0} < 1000)) "measured promise '$mp', the plan's '$pp'"
check ceiling.gpu.edge_as_planned $((${me:-0} != ${pe:-1} || ${pe:-0} <= ${pp:-0})) "measured edge '$me', the plan's '$pe'"
check ceiling.gpu.edge_ran $([ "$how" = run ]; echo $?) "the edge row says how '$how'"
past=$(col "$tmp/c.tsv" edge past_edge note)
echo "$past" | grep -q -- "--max-model-len $((${me:-0} + 1)) needs a .* MiB cache"
check ceiling.gpu.past_edge_refused $? "past the edge: '$past'"

# x4-run at the promise, with a prompt that fills the context, and one past it.
if [ "${mp:-0}" -gt 1 ]; then
	ids=$(awk -v n=$((mp - 1)) 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? "," : "", 1000 + (i * 7919) % 30000 }')
	"$RUN" -m "$M" --device "$DEV" --gpu-memory "${cap}M" --max-model-len "$mp" --tokens "$ids" -n 1 \
		--ignore-eos --json >"$tmp/r.json" 2>"$tmp/r.err"; rc=$?
	check ceiling.gpu.run_at_promise $rc "exit $rc: $(tail -c 400 "$tmp/r.err")"
	grep -q "\"prompt_tokens\":$((mp - 1))" "$tmp/r.json"
	check ceiling.gpu.run_at_promise_filled $? "$(head -c 300 "$tmp/r.json")"
	"$RUN" -m "$M" --device "$DEV" --gpu-memory "${cap}M" --max-model-len $((mp + 1)) -p hi -n 1 \
		>/dev/null 2>"$tmp/r2.err"; rc=$?
	grep -q -- "--max-model-len $((mp + 1)) needs a .* MiB cache" "$tmp/r2.err"
	check ceiling.gpu.run_past_promise_refused $((rc != 1 || $? != 0)) "exit $rc: $(head -c 400 "$tmp/r2.err")"
fi
