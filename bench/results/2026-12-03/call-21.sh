#!/usr/bin/env bash
# Device call 21 (2026-12-03, session 13): two levers on e319d2a.
#  A: the shared expert's gate/up as one more column of blocks in the routed
#     experts' gate/up launch (x4k_moe_experts_sum with sgate/sup); arm
#     --copy apart keeps its own launch (the step as e319d2a runs it).
#  B: the tensor-core decode attention copies its first tile's cache rows
#     but the step's own before its dependency wait; arm --copy late copies
#     them after it (as e319d2a).
#  C: the gate's Sinkhorn (the coefficients) on a side stream of the step's
#     graph, joined before the next gate; arm --copy inline keeps it in the
#     gate's last block (as e319d2a).  (x4-profile matches a replay by
#     capture order, which a side branch breaks: the profile runs --copy
#     inline.)
# Parity (gpu_kern moe_experts, mla, attention), the golden digests with
# the defaults (both levers on) and with --copy old, the prices at 512 and
# 4,096, the 512 profile with PDL off, the tcv lab's MoE rows.
# In two device calls on one warm machine: `call-21.sh 1` (build, parity,
# golden, lab, the 512 prices), then `call-21.sh 2` (the rest).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
ab() { # name ctx a b
	timeout 110 bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$3" -b "$4" --prompt-tokens "$2" \
		-n 64 --pairs 3 --warmup 1 >"$OUT/abab-$2-$1.tsv" 2>"$OUT/x/abab-$2-$1.err"
	echo "abab $1 $2 rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/abab-$2-$1.err")"
}
if [ "${1:-1}" = 1 ]; then
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile build/tests/gpu_kern \
	build/bench/tcv >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
for k in moe_experts mla attention hc; do
	timeout 150 build/tests/gpu_kern $k >"$OUT/x/k-$k.log" 2>&1
	echo "gpu_kern $k rc=$? ($((SECONDS-t0)) s): $(tail -n 1 "$OUT/x/k-$k.log")"
	grep -E "^FAIL|not ok" "$OUT/x/k-$k.log" | head -5
done
bash bench/results/2026-12-03/golden.sh
echo "golden defaults ($((SECONDS-t0)) s)"
bash bench/results/2026-12-03/golden.sh --copy old
echo "golden --copy old ($((SECONDS-t0)) s)"
timeout 120 build/bench/tcv all >"$OUT/lab-tcv.tsv" 2>"$OUT/x/lab-tcv.err"
echo "lab tcv rc=$? ($((SECONDS-t0)) s)"; grep -E "moe" "$OUT/lab-tcv.tsv" | grep tc8_k1 | cut -f2,3,5
wait
ab shared 512 "--copy apart" "--copy block"
ab early 512 "--copy late" "--copy block"
ab side 512 "--copy inline" "--copy block"
else
make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth bin/x4-bench-abab bin/x4-profile >"$OUT/x/build2.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
ab shared 4096 "--copy apart" "--copy block"
ab early 4096 "--copy late" "--copy block"
ab side 4096 "--copy inline" "--copy block"
ab all 512 "--copy old" "--copy block"
for arm in block inline; do
	timeout 60 bin/x4-profile -m /tmp/x4-full --device cuda:0 --context 512 --steps 8 --pdl off --copy $arm \
		>"$OUT/profile-512-pdloff-$arm.tsv" 2>"$OUT/x/profile-$arm.err"; echo "profile $arm rc=$? ($((SECONDS-t0)) s)"
	grep -E "graph replays|step .* ms profiled" "$OUT/x/profile-$arm.err"
	grep -E "^kernel	.*(tc_|mla_mma|hc_)|^class	|unprofiled|^step	kernels" "$OUT/profile-512-pdloff-$arm.tsv" | cut -f1-7,10,11
done
make -j16 CUDA_ARCH=90 bin/x4-inspect bin/x4-walk-residual build/models/tiny/xing4_0-tiny.gguf >/dev/null 2>&1
timeout 200 bash tests/gpu_profile.sh >"$OUT/x/gpu_profile.log" 2>&1; echo "gpu_profile rc=$? ($((SECONDS-t0)) s)"
tail -n 3 "$OUT/x/gpu_profile.log"; grep -E "^FAIL|not ok" "$OUT/x/gpu_profile.log" | head
fi
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
