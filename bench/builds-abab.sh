#!/usr/bin/env bash
# builds-abab.sh - two builds of x4 compared on one machine: the decode
# step's steady rate of build A's x4-run against build B's, as processes
# alternated in rounds of A B B A, with a control (each round's second A over
# its first).  x4-bench-abab compares options inside one process; this is for
# what one binary cannot hold twice (a kernel rewritten, not switched), and
# for checking an in-process arm against the commit it stands for (section
# 37 of bench/RESULTS.md: an arm 3% slower than the commit it stood for).
#
# Usage, from the tree's root, after each build's `make all`:
#   bash bench/builds-abab.sh MODEL_DIR BIN_A BIN_B [CTX [ROUNDS [DEVICE]]]
# BIN_A, BIN_B: the two x4-run executables (e.g. ../old/bin/x4-run);
# CTX the prompt's tokens (default 512), ROUNDS (default 3), DEVICE
# (default cuda:0; `cpu` with the tiny preset is a dry run).  Each run is
# greedy, --ignore-eos, -n 64 on the same prompt, so every run generates the
# same tokens; a run whose token count differs voids the comparison (seed
# 004's rule).  Prints one line a round and the summary: b/a of the decode
# rate (median over rounds, and the rounds' range), the control, and each
# build's median ms a token.  Exits 1 on a failed run or a token mismatch.
set -u
cd "$(dirname "$0")/.." || exit 2
MODEL=${1:?usage: bench/builds-abab.sh MODEL_DIR BIN_A BIN_B [CTX [ROUNDS [DEVICE]]]}
A=${2:?BIN_A}
B=${3:?BIN_B}
CTX=${4:-512}
ROUNDS=${5:-3}
DEV=${6:-cuda:0}
T=$(mktemp -d "${TMPDIR:-/tmp}/x4-builds.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
python3 -c 'import sys; print(" ".join(["word"] * max(1, int(sys.argv[1]) - 2)))' "$CTX" >"$T/prompt.txt"

# run BIN TAG: one x4-run, its JSON kept as $T/TAG.json
run() {
	"$1" -m "$MODEL" --device "$DEV" -f "$T/prompt.txt" -n 64 --ignore-eos --json >"$T/$2.json" 2>"$T/$2.err" ||
		{ echo "builds-abab: $1 failed: $(tail -n 2 "$T/$2.err")" >&2; exit 1; }
}

for r in $(seq 1 "$ROUNDS"); do
	run "$A" "a1-$r"
	run "$B" "b1-$r"
	run "$B" "b2-$r"
	run "$A" "a2-$r"
done

python3 - "$T" "$ROUNDS" "$A" "$B" <<'EOF'
import json, statistics, sys
d, rounds, a_bin, b_bin = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(tag):
    with open(f"{d}/{tag}.json") as f:
        return json.load(f)
ratios, controls, ms_a, ms_b, tokens = [], [], [], [], set()
for r in range(1, rounds + 1):
    j = {t: load(f"{t}-{r}") for t in ("a1", "b1", "b2", "a2")}
    for t, v in j.items():
        tokens.add((v["prompt_tokens"], v["generated_tokens"], tuple(v["tokens"])))
    ra = statistics.mean([j["a1"]["decode_median_step_ms"], j["a2"]["decode_median_step_ms"]])
    rb = statistics.mean([j["b1"]["decode_median_step_ms"], j["b2"]["decode_median_step_ms"]])
    ms_a += [j["a1"]["decode_median_step_ms"], j["a2"]["decode_median_step_ms"]]
    ms_b += [j["b1"]["decode_median_step_ms"], j["b2"]["decode_median_step_ms"]]
    ratios.append(ra / rb)
    controls.append(j["a1"]["decode_median_step_ms"] / j["a2"]["decode_median_step_ms"])
    print(f"round {r}: a {ra:.4f} ms, b {rb:.4f} ms a token, b/a {ra / rb:.3f}x, control {controls[-1]:.3f}x")
if len(tokens) != 1:
    print("builds-abab: the runs generated different tokens or counts: the comparison is void", file=sys.stderr)
    sys.exit(1)
print(f"builds-abab: b/a {statistics.median(ratios):.3f}x decode (rounds {min(ratios):.3f}-{max(ratios):.3f}), "
      f"control {statistics.median(controls):.3f}x ({min(controls):.3f}-{max(controls):.3f}), {rounds} rounds; "
      f"a {statistics.median(ms_a):.4f} ms a token ({a_bin}), b {statistics.median(ms_b):.4f} ({b_bin})")
EOF
