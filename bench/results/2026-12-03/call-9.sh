#!/usr/bin/env bash
# Device call 9 (2026-12-03, session 11): checks of two levers.
#  - the q_b fold after call 8's price (its norm's loads one round trip,
#    80 registers so that q_b's 385 blocks run in one wave; the combine fold
#    removed): it must keep the golden digests of ed0477f bit for bit, which
#    the split gate (--hc split) reproduces;
#  - the cluster gate (--hc fused, a decode token's gate on a cluster of 16
#    blocks): its parity cases, and the whole model against the CPU
#    (gpu_model; its golden lines are expected to fail: the dots' order
#    moved), then new golden digests from this tree ($OUT/gpu_golden_*).
set -u
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-walk-residual bin/x4-bench-abab bin/x4-profile \
	build/tests/helper_sample build/tests/gpu_kern build/tests/gpu_trunk >"$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
for f in hc gemv_q_b gemv gemv2 kv_store absorb attention; do
	timeout 120 build/tests/gpu_kern $f >"$OUT/gpu_kern-$f.log" 2>&1
	echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/gpu_kern-$f.log")"
	grep -E "^FAIL" "$OUT/gpu_kern-$f.log" | head -5
done
long=""; for _ in 1 2 3 4 5 6 7 8 9 10; do long+="The quick brown fox jumps over the lazy dog, and the dog sleeps on. "; done
short="Once upon a time there was a small model that ran on a large card."
golden() { # tag extra-options...: the golden commands of bench/gpu-session.sh, their digests
	local tag=$1; shift
	for p in tiny small; do
		d=/tmp/x4-golden-$p; [ -e "$d" ] || bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1
		prompt=$long; [ $p = small ] && prompt=$short
		common=(-m "$d" -p "$prompt" -n 64 --ignore-eos --json --device cuda:0 "$@")
		bin/x4-run "${common[@]}" >/tmp/g-$p-greedy.json 2>/dev/null
		bin/x4-run "${common[@]}" --temperature 0.8 --top-p 0.9 -s 7 >/tmp/g-$p-samp.json 2>/dev/null
		bin/x4-run "${common[@]}" --dump-logits /tmp/g-$p.npy >/dev/null 2>&1
		python3 - "$p" /tmp/g-$p-greedy.json /tmp/g-$p-samp.json /tmp/g-$p.npy "$tag" >"$OUT/gpu_golden_$p-$tag.json" <<'PY'
import hashlib, json, sys
p, g, s, npy, rev = sys.argv[1:]
print(json.dumps({"preset": p, "commit": rev, "greedy": json.load(open(g))["tokens"],
                  "sampled_seed7": json.load(open(s))["tokens"],
                  "logits_sha256": hashlib.sha256(open(npy, "rb").read()).hexdigest()}))
PY
		python3 - tests/data/gpu_golden_$p.json "$OUT/gpu_golden_$p-$tag.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
same = all(a[k] == b[k] for k in ("greedy", "sampled_seed7", "logits_sha256"))
print("%s %s %s: %s golden of %s" % (b["preset"], b["commit"], "SAME as" if same else "differs from",
      "the", a["commit"]))
PY
	done
}
golden split --hc split
golden fold_off_split --hc split --fold off
timeout 200 bash tests/gpu_model.sh >"$OUT/gpu_model.log" 2>&1
echo "gpu_model rc=$? ($((SECONDS-t0)) s): $(grep -cE '^PASS' "$OUT/gpu_model.log") passed"
grep -E "^FAIL" "$OUT/gpu_model.log" | head
golden cluster
make -s CUDA_ARCH=90 tiny >/dev/null 2>&1
timeout 60 build/tests/gpu_trunk >"$OUT/gpu_trunk.log" 2>&1
echo "gpu_trunk rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/gpu_trunk.log")"
