#!/usr/bin/env bash
# lever-abab.sh - price one x4-run option by interleaved arms (A B A B ...),
# each arm a separate process on the same weights, greedy with --ignore-eos so
# every run generates the same token count; the median of each arm and the
# ratio.  A stand-in until x4-bench-abab interleaves arms inside one process.
#   bash bench/lever-abab.sh MODEL_DIR "ARM_A_FLAGS" "ARM_B_FLAGS" [PAIRS [PROMPT [GEN]]]
set -u
cd "$(dirname "$0")/.." || exit 2
MODEL=$1 A=$2 B=$3 PAIRS=${4:-3} NP=${5:-512} NG=${6:-65}
DEV=${DEV:-cuda:0}
ids=$(python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(1000, 30000)) for _ in range($NP)))")
out=$(mktemp)
for i in $(seq "$PAIRS"); do
	for arm in A B; do
		flags=$A; [ $arm = B ] && flags=$B
		# shellcheck disable=SC2086
		bin/x4-run -m "$MODEL" --device "$DEV" --tokens "$ids" -n "$NG" --ignore-eos --json \
			--max-model-len $((NP + NG + 16)) $flags 2>/dev/null | sed "s/^/$arm /" >>"$out"
	done
done
python3 - "$out" "$A" "$B" "$NP" "$NG" <<'PY'
import json, statistics, sys
rows = {"A": [], "B": []}
for line in open(sys.argv[1]):
    arm, js = line.split(" ", 1)
    rows[arm].append(json.loads(js))
A, B = rows["A"], rows["B"]
gen = {len(r["tokens"]) for r in A + B}
if len(gen) != 1 or any(r["decode_tok_s"] is None for r in A + B):
    print(f"VOID: the runs generated different token counts {sorted(gen)}")
    sys.exit(1)
def med(rs, k): return statistics.median(r[k] for r in rs)
print(f"# model {A[0]['model']} fingerprint {A[0]['model_fingerprint']} commit {A[0]['commit']} "
      f"device {A[0]['device_name']}; prompt {sys.argv[4]}, generated {gen.pop()}, {len(A)} runs an arm, interleaved A B")
print("arm\tflags\tprefill_tok_s\tdecode_tok_s\tdecode_step_ms\tfirst_step_ms")
for name, rs, fl in (("A", A, sys.argv[2]), ("B", B, sys.argv[3])):
    print(f"{name}\t{fl}\t{med(rs, 'prefill_tok_s'):.1f}\t{med(rs, 'decode_tok_s'):.2f}\t"
          f"{med(rs, 'decode_median_step_ms'):.3f}\t{med(rs, 'first_step_ms'):.2f}"
          f"\t(decode runs {[round(r['decode_tok_s'], 2) for r in rs]})")
print(f"ratio_decode_A_over_B\t{med(A, 'decode_tok_s') / med(B, 'decode_tok_s'):.3f}")
print(f"ratio_prefill_A_over_B\t{med(A, 'prefill_tok_s') / med(B, 'prefill_tok_s'):.3f}")
PY
rm -f "$out"
