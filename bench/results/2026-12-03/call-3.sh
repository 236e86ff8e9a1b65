#!/usr/bin/env bash
# Device call 3 (2026-12-03): the persistent step with its phases as
# descriptors (one ring loop, each kind's products out of line: the code
# 800 -> 370 KB a kernel); the whole model against the CPU; on the full
# preset x4-bench-abab (--step kernels against the default at 512 and
# 4096; --step-warps 16 against 8 at 512) and x4-profile's phases at 512.
set -u
W=$(mktemp -d); FINAL=$OUT; trap 'tar czf "$FINAL/c3.tgz" -C "$W" .' EXIT
t0=$SECONDS
make -j16 CUDA_ARCH=90 all tests >"$W/build.log" 2>&1; echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >"$W/synth.log" 2>&1; echo "full preset rc=$? ($((SECONDS-t0)) s)") &
timeout 240 bash tests/gpu_model.sh >"$W/gpu_model.log" 2>&1; echo "gpu_model rc=$? ($((SECONDS-t0)) s)"
grep -E "^FAIL" "$W/gpu_model.log" | head -20; grep -cE "^PASS" "$W/gpu_model.log"
wait
ab() { # name ctx a b
	local left=$((560 - SECONDS)); [ $left -lt 40 ] && return
	timeout $left bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" \
		--prompt-tokens $2 -n 64 --pairs 2 --warmup 1 >"$W/abab-$1.tsv" 2>"$W/abab-$1.err"
	echo "abab $1 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$W/abab-$1.err")"
	grep -E "^arm" "$W/abab-$1.tsv" | cut -f3,7,10
}
ab 512-step 512 "--step kernels" ""
ab 512-warps 512 "--step-warps 16" "--step-warps 8"
ab 4096-step 4096 "--step kernels" ""
for w in 16 8; do
	left=$((585 - SECONDS)); [ $left -lt 25 ] && break
	timeout $left bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --step-warps $w \
		>"$W/profile-512-w$w.tsv" 2>"$W/profile-512-w$w.err"; echo "profile w$w rc=$? ($((SECONDS-t0)) s)"
	grep -E "^phase	|unprofiled" "$W/profile-512-w$w.tsv" | cut -f2,4,5,7,8,10
done
