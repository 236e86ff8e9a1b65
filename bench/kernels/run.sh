#!/usr/bin/env bash
# bench/kernels/run.sh - build the kernel lab (bench/kernels/*.cu) and run
# every program on the GPU, old and new variants side by side, then print
# one summary table (old and new time, speedup, new GB/s, % of the read
# ceiling measured in the same process, and TFLOP/s for the matrix-matrix
# products; "-" where a shape has no old variant or a row no flops).  Rows
# go to build/bench/lab.tsv.
#
#   bench/kernels/run.sh            # on the GPU machine, from the checkout
#   bench/kernels/run.sh hc moe     # only these programs
#   CUDA_ARCH=90 is the default build arch (the H200's).
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s -j"$(nproc)" bench-kernels CUDA_ARCH="${CUDA_ARCH:-90}" >&2
out=build/bench/lab.tsv
: >"$out"
first=1
progs=(gemv gemm swiglu moe moe_router tcv hc rmsnorm embed head rope kv_store mla_absorb
	mla_decode mla_prefill sample chain)
[ $# -gt 0 ] && progs=("$@")
for p in "${progs[@]}"; do
	if [ $first = 1 ]; then
		build/bench/$p all >>"$out"
		first=0
	else
		build/bench/$p all | tail -n +2 >>"$out"
	fi
done
echo
printf '%-12s %-9s %-36s %10s %10s %8s %8s %6s %7s\n' op variant shape old_us us speedup gbps pct tflops
awk -F'\t' 'NR > 1 {
	key = $1 "\t" $3
	if ($2 == "old") { old[key] = $5; if (!(key in any)) order[n++] = key; any[key] = 1; next }
	if (!(key in any)) order[n++] = key
	any[key] = 1
	rows[key] = rows[key] $2 "\t" $5 "\t" $6 "\t" $7 "\t" $8 "\n"
}
END {
	for (i = 0; i < n; i++) {
		k = order[i]; split(k, f, "\t")
		m = split(rows[k], r, "\n")
		for (j = 1; j < m; j++) {
			split(r[j], c, "\t")
			sp = (k in old && c[2] > 0) ? sprintf("%.2fx", old[k] / c[2]) : "-"
			printf "%-12s %-9s %-36s %10s %10s %8s %8s %6s %7s\n", f[1], c[1], f[2], (k in old) ? old[k] : "-", c[2], sp, c[3], c[4], c[5]
		}
	}
}' "$out"
