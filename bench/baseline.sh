#!/usr/bin/env bash
# baseline.sh - the first figures of the CUDA trunk (issue 4, deliverable 6):
# load time and resident bytes, prefill tokens/s at 512 and 4096 prompt
# tokens, decode tokens/s at 512 and 4096 tokens of context (the first step
# apart from the steady rate: the median step after the first,
# docs/record.md 6), each configuration in one process, 3 times, the median
# kept.
#
# Usage, from the tree's root on the GPU machine, after
#   bin/x4-synth --preset full --seed 1 -o DIR
# run   bash bench/baseline.sh DIR [REPEATS [DEVICE [SHORT LONG]]]
# (defaults 3, cuda:0, 512 4096; `DIR 1 cpu 128 1024` on the tiny preset is a
# dry run of the script).  A TSV goes to stdout (and $OUT/baseline.tsv, OUT
# default build/bench), with the GPU, the commit (git's, else $X4_COMMIT, as
# the GPU machine's copy of the tree has no .git), the model's fingerprint and
# every row's command; each run's JSON is kept beside it.  Greedy, --ignore-eos, so every arm generates
# exactly the stated token count (seed 004's rule: no comparison of runs of
# different lengths).
set -u
cd "$(dirname "$0")/.." || exit 2
MODEL=${1:?usage: bench/baseline.sh MODEL_DIR [REPEATS [DEVICE [SHORT LONG]]]}
REPEATS=${2:-3}
DEV=${3:-cuda:0}
SHORT=${4:-512}
LONG=${5:-4096}
OUT=${OUT:-build/bench}
RUN=bin/x4-run
DEC=65 # generated tokens: 64 decode forwards, the first reported apart

mkdir -p "$OUT"
[ -x "$RUN" ] || { echo "baseline.sh: $RUN missing: run make" >&2; exit 1; }

# Prompts of exact lengths as raw ids (a text prompt's token count would
# depend on the tokenizer): a fixed spread over the first 32000 ids.
for n in "$SHORT" "$LONG"; do
	python3 -c 'import sys; n=int(sys.argv[1]); print(",".join(str(100 + (i * 7919 + 13) % 32000) for i in range(n)))' \
		"$n" >"$OUT/ids$n.txt"
done

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
commit=$(git describe --always --dirty 2>/dev/null || echo "${X4_COMMIT:-unknown}")

# $1 prompt length, $2 max-model-len, $3 repeat index: one process.
one() {
	local n=$1 ctx=$2 r=$3
	local cmd="$RUN -m $MODEL --device $DEV --max-model-len $ctx --tokens \"\$(cat $OUT/ids$n.txt)\" -n $DEC --ignore-eos --json"
	echo "$cmd" >"$OUT/cmd$n.txt"
	timeout 300 "$RUN" -m "$MODEL" --device "$DEV" --max-model-len "$ctx" --tokens "$(cat "$OUT/ids$n.txt")" \
		-n "$DEC" --ignore-eos --json >"$OUT/run$n.$r.json" 2>"$OUT/run$n.$r.err"
	local rc=$?
	if [ $rc -ne 0 ]; then
		echo "baseline.sh: x4-run (prompt $n, repeat $r) failed with exit $rc:" >&2
		tail -n 5 "$OUT/run$n.$r.err" >&2
		return 1
	fi
	echo "# prompt $n repeat $r done" >&2
}

t0=$SECONDS
for r in $(seq 1 "$REPEATS"); do
	# Interleaved, so drift lands on both configurations.
	one "$SHORT" $((SHORT * 2)) "$r" || exit 1
	one "$LONG" $((LONG * 2)) "$r" || exit 1
done

python3 - "$OUT" "$REPEATS" "$gpu" "$commit" "$DEC" "$SHORT" "$LONG" <<'EOF' | tee "$OUT/baseline.tsv"
import json
import statistics
import sys

out, reps, gpu, commit, dec = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
lens = (int(sys.argv[6]), int(sys.argv[7]))
runs = {n: [json.load(open(f"{out}/run{n}.{r}.json")) for r in range(1, reps + 1)] for n in lens}
cmds = {n: open(f"{out}/cmd{n}.txt").read().strip() for n in lens}
j0 = runs[lens[0]][0]
print(f"# gpu\t{gpu or j0['device_name']}")
print(f"# device\t{j0['device_name']}")
print(f"# commit\t{commit} (binary: {j0['commit']})")
print(f"# model\t{j0['model']}\tfingerprint {j0['model_fingerprint']}")
print(f"# each value: the median of {reps} processes (all values listed); greedy, --ignore-eos")
print("metric\tprompt_tokens\tvalue\truns\twhat\tcommand")


def row(metric, vals, what, n, fmt="{:.2f}", shown=None):
    v = statistics.median(vals)
    print(f"{metric}\t{n if shown is None else shown}\t{fmt.format(v)}\t" + ",".join(fmt.format(x) for x in vals)
          + f"\t{what}\t{cmds[n]}")


allruns = runs[lens[0]] + runs[lens[1]]
what = f"every process of both prompt lengths ({len(allruns)})"
row("load_s", [j["load_s"] for j in allruns], what, lens[0], shown="-")
row("load_gbps", [j["resident_bytes"] / max(j["load_s"], 1e-9) / 1e9 for j in allruns], what,
    lens[0], shown="-")
row("resident_bytes", [j["resident_bytes"] for j in allruns], what, lens[0], "{:.0f}", shown="-")
for n in lens:
    rs = runs[n]
    assert all(j["prompt_tokens"] == n and j["generated_tokens"] == dec for j in rs), \
        f"a run of prompt {n} did not generate exactly {dec} tokens"
    row("cache_bytes", [j["cache_bytes"] for j in rs], f"--max-model-len {rs[0]['max_ctx']}", n,
        "{:.0f}")
    row("prefill_tok_s", [j["prefill_tok_s"] for j in rs],
        f"{n} prompt tokens in chunks of {rs[0]['prefill_chunk']}", n, "{:.1f}")
    row("decode_first_step_ms", [j["first_step_ms"] for j in rs],
        f"the first decode step after the {n}-token prefill (context {n + 1})", n)
    steps = rs[0]["decode_steady_steps"]
    row("decode_tok_s", [j["decode_tok_s"] for j in rs],
        f"1 / median of the {steps} steps after the first (context {n + 2}..{n + 1 + steps})", n)
    row("decode_step_ms", [j["decode_median_step_ms"] for j in rs],
        f"median of the {steps} steps after the first", n, "{:.3f}")
EOF
echo "# baseline.sh took $((SECONDS - t0)) s" >&2
