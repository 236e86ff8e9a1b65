#!/usr/bin/env python3
"""helper_golden.py - the whole model's golden runs (tests/data/gpu_golden_*.json):
their prompts and their check, one definition for tests/gpu_model.sh,
bench/gpu-session.sh (which writes them) and the device calls' check
(bench/results/2026-12-03/golden.sh).

usage: helper_golden.py --prompt PRESET
       helper_golden.py GOLD.json GREEDY.json SAMPLED.json LOGITS.npy

--prompt prints the preset's prompt: ~190 tokens on tiny (positions past a
few cache tiles), a short one on small (its float64 reference is the slow
part of gpu_model.sh).  The check prints one PASS/FAIL line,
PRESET.same_as_golden_COMMIT: the greedy tokens, the seed-7 sampled tokens
and the sha256 of the dumped logits all equal the golden file's.
"""
import hashlib
import json
import sys

PROMPTS = {
    "tiny": "The quick brown fox jumps over the lazy dog, and the dog sleeps on. " * 10,
    "small": "Once upon a time there was a small model that ran on a large card.",
}


def check(gold, greedy_json, sampled_json, npy):
    g = json.load(open(gold))
    greedy, samp = (json.load(open(f))["tokens"] for f in (greedy_json, sampled_json))
    sha = hashlib.sha256(open(npy, "rb").read()).hexdigest()
    ok = greedy == g["greedy"] and samp == g["sampled_seed7"] and sha == g["logits_sha256"]
    print("PASS" if ok else "FAIL", "%s.same_as_golden_%s%s" % (g["preset"], g["commit"], "" if ok else
          ": greedy %s, sampled %s, logits %s" % (greedy == g["greedy"], samp == g["sampled_seed7"],
                                                  sha == g["logits_sha256"])))


if len(sys.argv) == 3 and sys.argv[1] == "--prompt" and sys.argv[2] in PROMPTS:
    print(PROMPTS[sys.argv[2]])
elif len(sys.argv) == 5:
    check(*sys.argv[1:])
else:
    sys.exit(__doc__.split("\n\n")[1])
