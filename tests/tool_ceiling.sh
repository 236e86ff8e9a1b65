#!/usr/bin/env bash
# tool_ceiling.sh - x4-ceiling on the CPU: the memory plan's prediction for
# the tiny preset checked against an independent count (the gguf package's
# reader gives every tensor's bytes, the cache is n_block x (kv_lora_rank +
# rope dimension) x 2 bytes a position from the file's keys), the promise
# against that arithmetic, the TSV and JSON shapes, more memory never a
# shorter context, a card too small for the weights, a preset predicted
# without a file as its file is, and usage errors.  Run from the tree's root
# (tests/run.sh does).
set -u
cd "$(dirname "$0")/.." || exit 2
CEIL=bin/x4-ceiling
PY=build/venv/bin/python
TINY=build/models/tiny/xing4_0-tiny.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/t.sh

for f in "$CEIL" "$TINY" "$PY"; do
	if [ ! -e "$f" ]; then
		fail ceiling.setup "$f missing: run make (and make venv)"
		exit 1
	fi
done

cards=48M,290M,296M,302M,303M,304M,306M,1G,24G
"$CEIL" --cards "$cards" >"$tmp/t.tsv" 2>"$tmp/t.err"; rc=$?
check ceiling.predict.exit $rc "exit $rc: $(head -c 300 "$tmp/t.err")"
head -1 "$tmp/t.tsv" | grep -q "^section	card_mib	basis	row	max_model_len	chunk	weights_mib	cache_mib	ws_mib	room_mib	free_after_mib	measured_mib	predicted_mib	ratio	a_kib_token	b_mib	accepted	last_chunk	how	note	model	model_fingerprint	commit	device	context	reserve_mib$"
check ceiling.tsv.header $? "$(head -1 "$tmp/t.tsv")"
awk -F'\t' 'NR == 1 { n = NF } NF != n { bad = 1 } END { exit bad }' "$tmp/t.tsv"
check ceiling.tsv.columns $? "rows with a different column count"
grep -q "card 1024 MiB (plan): the runtime promises 4096 positions" "$tmp/t.err"
check ceiling.stderr_summary $? "$(head -c 300 "$tmp/t.err")"

# The arithmetic, computed again from the file by the gguf package.
"$PY" - "$TINY" "$tmp/t.tsv" "$cards" <<'PY' >"$tmp/arith" 2>&1
import csv, sys
from gguf import GGUFReader
path, tsv, cards = sys.argv[1:]
r = GGUFReader(path)
def key(k):
    return int(r.fields["xing4_0." + k].parts[-1][0])
n_block = key("block_count") - key("nextn_predict_layers")
cw = key("attention.kv_lora_rank") + key("rope.dimension_count")
n_ctx = key("context_length")
pos_bytes = n_block * cw * 2
weights = 0
for t in r.tensors:
    parts = t.name.split(".")
    if parts[0] == "blk" and int(parts[1]) >= n_block:
        continue  # NextN: not part of the trunk
    weights += (int(t.n_bytes) + 255) // 256 * 256
MiB = 1 << 20
rows = list(csv.DictReader(open(tsv), delimiter="\t"))
def num(row, k):
    return float(row[k])
bad = []
w = [x for x in rows if x["section"] == "formula" and x["row"] == "weights"][0]
if abs(num(w, "weights_mib") - weights / MiB) > 0.006:
    bad.append("weights %s MiB, the gguf package counts %.3f" % (w["weights_mib"], weights / MiB))
c = [x for x in rows if x["section"] == "formula" and x["row"] == "cache"][0]
if abs(num(c, "a_kib_token") - pos_bytes / 1024) > 0.001:
    bad.append("cache %s KiB a position, expected %.3f" % (c["a_kib_token"], pos_bytes / 1024))
reserve = 256 * MiB
for x in rows:
    if x["section"] != "card" or x["row"] == "weights":
        continue
    L = int(x["max_model_len"])
    if abs(num(x, "cache_mib") - L * pos_bytes / MiB) > 0.006:
        bad.append("card %s len %d: cache %s MiB, expected %.3f" % (x["card_mib"], L, x["cache_mib"], L * pos_bytes / MiB))
    card = num(x, "card_mib") * MiB
    room = card - weights - L * pos_bytes
    if abs(num(x, "room_mib") - room / MiB) > 0.006:
        bad.append("card %s len %d: room %s MiB, expected %.3f" % (x["card_mib"], L, x["room_mib"], room / MiB))
    ws = num(x, "ws_mib") * MiB
    fits = weights + L * pos_bytes + ws + reserve <= card + 0.006 * MiB
    if (x["accepted"] == "yes") != fits:
        bad.append("card %s len %d: accepted %s, the sum says %s" % (x["card_mib"], L, x["accepted"], fits))
    if x["row"] == "promise" and 128 <= L < n_ctx:
        # one position more must not fit: its cache row is what tips it
        # over (below 128 the narrowest chunk grows with the context too)
        if weights + (L + 1) * pos_bytes + ws + reserve <= card - 0.006 * MiB:
            bad.append("card %s: promise %d, but %d fits the sum" % (x["card_mib"], L, L + 1))
    if x["row"] == "edge" and 128 <= L < n_ctx and weights + (L + 1) * pos_bytes + ws <= card - 0.006 * MiB:
        bad.append("card %s: edge %d, but %d fits the sum without the reserve" % (x["card_mib"], L, L + 1))
print("\n".join(bad) if bad else "ok: weights %d bytes, %d bytes a position" % (weights, pos_bytes))
sys.exit(1 if bad else 0)
PY
check ceiling.arithmetic_vs_gguf_package $? "$(head -c 600 "$tmp/arith")"

# The chunk's workspace is affine in the chunk: the plan's rows lie on the
# line its formula row states (to 1%).
awk -F'\t' '$1 == "formula" && $4 == "chunk" { a = $15; b = $16 }
	$1 == "chunk" { T[n + 0] = $6; y[n + 0] = $13; n++ }
	END { if (!n || a == "") exit 1
	      for (i = 0; i < n; i++) { p = a / 1024 * T[i] + b; if (p / y[i] > 1.01 || p / y[i] < 0.99) exit 1 } }' "$tmp/t.tsv"
check ceiling.formula_line $? "the chunk rows are off the formula's line"

# More memory: never a shorter promise nor a shorter edge.
awk -F'\t' '$1 == "card" && ($4 == "promise" || $4 == "edge") { v = $5 + 0
	if ($4 in last && v < last[$4]) bad = 1; last[$4] = v } END { exit bad }' "$tmp/t.tsv"
check ceiling.monotone $? "a larger card got a shorter context"
n=$(awk -F'\t' '$1 == "card" && $4 == "promise"' "$tmp/t.tsv" | cut -f5 | sort -u | wc -l)
check ceiling.cards_differ $((n < 3)) "only $n distinct promises over $cards: the cards do not test the solve"
# The 24G card holds the tiny model's whole context.
awk -F'\t' '$1 == "card" && $2 == 24576 && $4 == "promise" && $5 == 4096 && $17 == "yes" && $18 == "fits" { ok = 1 } END { exit !ok }' "$tmp/t.tsv"
check ceiling.large_card_whole_context $? "24G does not promise the whole 4096 positions"

# A card too small for the weights: one clear row.
"$CEIL" --cards 16M >"$tmp/s.tsv" 2>"$tmp/s.err"; rc=$?
awk -F'\t' '$1 == "card" { n++; if ($4 == "weights" && $18 == "no_weights" && $20 ~ /the weights need/) ok = 1 } END { exit !(ok && n == 1) }' "$tmp/s.tsv"
check ceiling.small_card $((rc != 0 || $? != 0)) "exit $rc: $(grep '^card' "$tmp/s.tsv" | head -3)"
grep -q "do not fit" "$tmp/s.err"
check ceiling.small_card_stderr $? "$(cat "$tmp/s.err")"

# --gpu-memory without a GPU: the edge section, predicted.
"$CEIL" --gpu-memory 300M --cards 300M >"$tmp/g.tsv" 2>"$tmp/g.err"; rc=$?
p1=$(awk -F'\t' '$1 == "edge" && $4 == "promise" { print $5 }' "$tmp/g.tsv")
p2=$(awk -F'\t' '$1 == "card" && $4 == "promise" { print $5 }' "$tmp/g.tsv")
check ceiling.edge_predicted $((rc != 0 || ${p1:-0} != ${p2:-1})) "exit $rc: edge promise '$p1', card promise '$p2'"

# The preset's layout, without a file, predicts what its file does.
"$CEIL" --preset tiny --cards "$cards" >"$tmp/p.tsv" 2>/dev/null; rc=$?
cut -f1-19 "$tmp/t.tsv" >"$tmp/t.cut"; cut -f1-19 "$tmp/p.tsv" >"$tmp/p.cut"
cmp -s "$tmp/t.cut" "$tmp/p.cut"
check ceiling.preset_equals_file $((rc != 0 || $? != 0)) "exit $rc: $(diff "$tmp/t.cut" "$tmp/p.cut" | head -4)"
# The full preset: 22G does not hold the whole context, 48G does.
"$CEIL" --preset full --cards 22G,48G >"$tmp/f.tsv" 2>/dev/null
awk -F'\t' '$1 == "card" && $4 == "promise" { p[$2] = $5 } END { exit !(p[22528] > 0 && p[22528] < 262144 && p[49152] == 262144) }' "$tmp/f.tsv"
check ceiling.full_preset $? "$(grep promise "$tmp/f.tsv" | cut -f2,5)"

# JSON: one object a line, the same rows.
"$CEIL" --cards "$cards" --json >"$tmp/j" 2>/dev/null; rc=$?
"$PY" -m json.tool --json-lines "$tmp/j" >/dev/null 2>"$tmp/jerr"
check ceiling.json_valid $((rc != 0 || $? != 0)) "exit $rc: $(head -c 300 "$tmp/jerr")"
check ceiling.json_rows $(($(wc -l <"$tmp/j") != $(wc -l <"$tmp/t.tsv") - 1)) "$(wc -l <"$tmp/j") JSON lines for $(($(wc -l <"$tmp/t.tsv") - 1)) rows"
"$PY" -c 'import json,sys; o=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if all(x["device"].startswith("none") and x["reserve_mib"] == 256 for x in o) and any(x["section"] == "card" and x["accepted"] == "yes" for x in o) else 1)' "$tmp/j"
check ceiling.json_fields $? "the JSON rows lack the device or the reserve"

# Usage: exit 2 and one line on stderr.
for args in "--cards" "--cards 0" "--cards 1X" "--cards 1G,,2G" "--chunks 0" "--contexts -5" \
	"--context x" "--device gpu" "--gpu-memory 0" "--bogus" "stray" "--preset tiny -m $TINY" \
	"--preset nonesuch" "--preset tiny --device cuda:0"; do
	# shellcheck disable=SC2086
	"$CEIL" $args </dev/null >"$tmp/out" 2>"$tmp/err"; rc=$?
	check "ceiling.usage[$args]" $((rc != 2 || $(wc -l <"$tmp/err") != 1)) "exit $rc: $(head -c 300 "$tmp/err")"
done
"$CEIL" -h >"$tmp/h" 2>"$tmp/herr"; rc=$?
grep -q "^usage: x4-ceiling" "$tmp/h"
check ceiling.help $((rc != 0 || $? != 0 || $(wc -c <"$tmp/herr") != 0)) "exit $rc"
"$CEIL" --version | grep -q "^x4-ceiling [0-9]"
check ceiling.version $? "no version line"
