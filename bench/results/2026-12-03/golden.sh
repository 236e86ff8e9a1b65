#!/usr/bin/env bash
# The whole model's golden digests (tests/data/gpu_golden_{tiny,small}.json:
# greedy tokens, seed-7 sampled tokens, the logits' sha256) with the default
# options, on the GPU machine after bin/x4-run and bin/x4-synth are built:
# tests/gpu_model.sh's golden check alone (tests/helper_golden.py), one
# PASS/FAIL line a preset.  Extra x4-run options: "$@".  (Calls 15-19 ran
# this with the check written out here; its line then read "(greedy True,
# sampled True, logits True)" after a PASS.)
set -u
for p in tiny small; do
	d=/tmp/x4-golden-$p; [ -e "$d" ] || bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1
	common=(-m "$d" -p "$(python3 tests/helper_golden.py --prompt $p)" -n 64 --ignore-eos --json --device cuda:0 "$@")
	bin/x4-run "${common[@]}" >/tmp/g-$p-greedy.json 2>/dev/null
	bin/x4-run "${common[@]}" --temperature 0.8 --top-p 0.9 -s 7 >/tmp/g-$p-samp.json 2>/dev/null
	bin/x4-run "${common[@]}" --dump-logits /tmp/g-$p.npy >/dev/null 2>&1
	python3 tests/helper_golden.py tests/data/gpu_golden_$p.json /tmp/g-$p-greedy.json /tmp/g-$p-samp.json /tmp/g-$p.npy
done
