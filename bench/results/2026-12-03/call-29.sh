#!/usr/bin/env bash
# Device call 29 (2026-12-03, session 15), branch levers-s14c rebased on
# main 1f038e5: the MoE down selecting its routes before its wait, with the
# routed gate/up's top k reading the scores through L1 again (as eab7707) and
# the down's selection on one warp a block.  Priced twice: in one process
# against eab7707's down verbatim (`--copy down`), and as two builds'
# x4-run alternated (bench/builds-abab.sh: main 1f038e5, whose kernels are
# eab7707's, against this branch) to check arm a against main itself.
# Then x4-profile with PDL on at 512 (the exposed_us column, if built).
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"
(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
mkdir -p /tmp/mainsrc && tar -xzf bench/results/2026-12-03/call29-main.tgz -C /tmp/mainsrc &&
	(cd /tmp/mainsrc && make -j16 CUDA_ARCH=90 all >"$OUT/x/build-main.log" 2>&1)
echo "main build rc=$? ($((SECONDS-t0)) s)"
echo "golden, the lever:"; bash bench/results/2026-12-03/golden.sh
echo "golden, eab7707's down:"; bash bench/results/2026-12-03/golden.sh --copy down
wait
echo "synth done ($((SECONDS-t0)) s)"
OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 LEVERS='--copy down|' bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
bash bench/builds-abab.sh /tmp/x4-full /tmp/mainsrc/bin/x4-run bin/x4-run 512 3 >"$OUT/x/builds-512.txt" 2>&1
echo "builds-abab rc=$? ($((SECONDS-t0)) s)"; cat "$OUT/x/builds-512.txt"
for d in main s14c; do
	p=bin/x4-profile; [ $d = main ] && p=/tmp/mainsrc/bin/x4-profile
	$p -m /tmp/x4-full --device cuda:0 --context 512 --steps 16 >"$OUT/x/profile-512-pdlon-$d.tsv" 2>"$OUT/x/profile-512-pdlon-$d.err"
	echo "profile $d rc=$? ($((SECONDS-t0)) s)"
done
timeout 90 bash tests/gpu_profile.sh >"$OUT/x/gpu_profile.log" 2>&1; echo "gpu_profile rc=$? ($((SECONDS-t0)) s)"; tail -n 3 "$OUT/x/gpu_profile.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
