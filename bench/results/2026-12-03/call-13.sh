#!/usr/bin/env bash
# Device call 13 (2026-12-03, session 11): call 12's lever (--copy block
# against --copy warp) in the device time that was left (~5 min): gpu_kern's
# IQ4_NL products on both copies and the one-token MoE (warp copy = block
# copy, bit for bit); the golden digests of ed0477f on tiny and small with
# the default options (the same bits); the price at 512 and 4,096; the 512
# profile with PDL off (attribution only).
set -u
t0=$SECONDS
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile build/tests/gpu_kern \
	>"$OUT/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for f in gemv moe_experts; do
	timeout 60 build/tests/gpu_kern $f >"$OUT/k-$f.log" 2>&1
	echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/k-$f.log")"
	grep -E "^FAIL" "$OUT/k-$f.log" | head -5
done
long=""; for _ in 1 2 3 4 5 6 7 8 9 10; do long+="The quick brown fox jumps over the lazy dog, and the dog sleeps on. "; done
short="Once upon a time there was a small model that ran on a large card."
for p in tiny small; do
	d=/tmp/x4-golden-$p; bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1
	prompt=$long; [ $p = small ] && prompt=$short
	common=(-m "$d" -p "$prompt" -n 64 --ignore-eos --json --device cuda:0)
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
echo "golden ($((SECONDS-t0)) s)"
wait
ab() { # name ctx a b
	timeout 100 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/abab-$2-$1.err")"
}
ab copy 512 "--copy warp" "--copy block"
ab copy 4096 "--copy warp" "--copy block"
timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off \
	>"$OUT/profile-512-pdloff.tsv" 2>/dev/null; echo "profile rc=$? ($((SECONDS-t0)) s)"
grep -E "^kernel	.*tc_|^class|unprofiled|^step	kernels" "$OUT/profile-512-pdloff.tsv" | cut -f1-7,10,11
