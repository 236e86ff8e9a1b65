#!/usr/bin/env bash
# The whole model's golden digests (tests/data/gpu_golden_{tiny,small}.json:
# greedy tokens, seed-7 sampled tokens, the logits' sha256) with the default
# options, on the GPU machine after bin/x4-run and bin/x4-synth are built.
# One PASS/FAIL line a preset.  Extra x4-run options: "$@".
set -u
long=""; for _ in 1 2 3 4 5 6 7 8 9 10; do long+="The quick brown fox jumps over the lazy dog, and the dog sleeps on. "; done
short="Once upon a time there was a small model that ran on a large card."
for p in tiny small; do
	d=/tmp/x4-golden-$p; [ -e "$d" ] || bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1
	prompt=$long; [ $p = small ] && prompt=$short
	common=(-m "$d" -p "$prompt" -n 64 --ignore-eos --json --device cuda:0 "$@")
	bin/x4-run "${common[@]}" >/tmp/g-$p-greedy.json 2>/dev/null
	bin/x4-run "${common[@]}" --temperature 0.8 --top-p 0.9 -s 7 >/tmp/g-$p-samp.json 2>/dev/null
	bin/x4-run "${common[@]}" --dump-logits /tmp/g-$p.npy >/dev/null 2>&1
	python3 - tests/data/gpu_golden_$p.json /tmp/g-$p-greedy.json /tmp/g-$p-samp.json /tmp/g-$p.npy <<'PY'
import hashlib, json, sys
g = json.load(open(sys.argv[1]))
greedy, samp = (json.load(open(f))["tokens"] for f in sys.argv[2:4])
sha = hashlib.sha256(open(sys.argv[4], "rb").read()).hexdigest()
ok = greedy == g["greedy"] and samp == g["sampled_seed7"] and sha == g["logits_sha256"]
print("PASS" if ok else "FAIL", "%s.same_as_golden_%s (greedy %s, sampled %s, logits %s)" % (g["preset"], g["commit"],
      greedy == g["greedy"], samp == g["sampled_seed7"], sha == g["logits_sha256"]))
PY
done
