#!/usr/bin/env bash
# Device call 24 (2026-12-03, session 14): three levers on main plus a
# temporary arm each, checked and priced.
#   the router's selection inside the experts' gate/up launch (default)
#     against its own launch (`--copy route`, temporary);
#   the streams' mean before the head, a round of columns a round trip
#     under PDL (default), against a column a round trip, plainly
#     launched (`--copy head`, temporary);
#   the head's Q6_K product 4 rows a warp (default) against 1 and 2
#     (`--head-rows 1|2`, temporary).
#   `call-24.sh 1`: build; gpu_kern's cases for the changed kernels; the
#                   golden digests with every lever on and with each off;
#   `call-24.sh 2`: (after part 1 found the mean's kernel refused D 12288,
#                   as its predecessor was: the mean now kept in registers)
#                   build, gpu_kern head, the golden digests; x4-bench-abab
#                   at 512 and 4,096 with a control, and x4-profile at 512
#                   with PDL off.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
if [ "${1:-1}" = 1 ]; then
	make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
	echo "build rc=$? ($((SECONDS-t0)) s)"
	(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
	for f in moe_experts moe_router head gemv; do
		timeout 200 build/tests/gpu_kern "$f" >"$OUT/x/kern-$f.txt" 2>&1
		echo "gpu_kern $f rc=$? ($((SECONDS-t0)) s): $(grep -c '^PASS' "$OUT/x/kern-$f.txt") passed," \
			"$(grep -c '^FAIL' "$OUT/x/kern-$f.txt") failed"
		grep '^FAIL' "$OUT/x/kern-$f.txt" | head -n 5
	done
	echo "golden, every lever on:"; bash bench/results/2026-12-03/golden.sh
	echo "golden, the router's launch and a row a warp:"; bash bench/results/2026-12-03/golden.sh --copy route --head-rows 1
	echo "golden, the mean's old kernel, 2 rows a warp:"; bash bench/results/2026-12-03/golden.sh --copy head --head-rows 2
	echo "golden ($((SECONDS-t0)) s)"
	wait
else
	make -j16 CUDA_ARCH=90 all tests >"$OUT/x/build.log" 2>&1
	echo "build rc=$? ($((SECONDS-t0)) s)"
	[ -e /tmp/x4-full ] || (bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
	timeout 100 build/tests/gpu_kern head >"$OUT/x/kern-head.txt" 2>&1
	echo "gpu_kern head rc=$? ($((SECONDS-t0)) s): $(grep -c '^PASS' "$OUT/x/kern-head.txt") passed," \
		"$(grep -c '^FAIL' "$OUT/x/kern-head.txt") failed"
	grep '^FAIL' "$OUT/x/kern-head.txt" | head -n 5
	echo "golden, every lever on:"; bash bench/results/2026-12-03/golden.sh
	echo "golden, the mean's old kernel:"; bash bench/results/2026-12-03/golden.sh --copy head
	wait
	OUT="$OUT/x" LEVER_PAIRS=3 LEVER_WARMUP=1 \
		LEVERS=$'|\n--copy route|\n--copy head|\n--head-rows 1|\n--head-rows 2|' \
		bash bench/gpu-session.sh levers >"$OUT/x/levers.txt" 2>&1
	echo "levers rc=$? ($((SECONDS-t0)) s)"; grep "ctx" "$OUT/x/levers.txt"
	OUT="$OUT/x" PROFILE_CTX=512 DECODE_OPTS="--pdl off" bash bench/gpu-session.sh profile >"$OUT/x/prof.txt" 2>&1
	echo "profile rc=$? ($((SECONDS-t0)) s)"; grep -E "^class|^step	(kernels|unprof)" "$OUT/x/prof.txt"
fi
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
