#!/usr/bin/env bash
# cpu-baseline.sh - CPU trunk rates (issue 3): prefill and steady decode
# tokens/s of `x4-run --device cpu` on a preset, each configuration 3 times in
# separate processes, the median kept; greedy, --ignore-eos, so every run
# generates the same token count.
#   bash bench/cpu-baseline.sh MODEL_DIR PROMPT_TOKENS GEN_TOKENS [THREADS]
set -eu
cd "$(dirname "$0")/.."
MODEL=$1 NP=$2 NG=$3 TH=${4:-0}
ids=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(1000, 30000)) for _ in range($NP)))")
for i in 1 2 3; do
	bin/x4-run -m "$MODEL" --device cpu --threads "$TH" --tokens "$ids" -n "$NG" --ignore-eos --json
done | python3 bench/cpu_summary.py
