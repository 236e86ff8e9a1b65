#!/usr/bin/env bash
# Run every CPU test (C binaries build/tests/test_*, Python oracles
# tests/oracle_*.py, shell tests tests/tool_*.sh) from the tree's root and
# count the PASS/FAIL lines they print.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 2
mkdir -p build/test-logs
pass=0 fail=0 skip=0 broken=()
run_one() { # name, command...
	local name=$1; shift
	local log=build/test-logs/$name.log
	local t0=$SECONDS
	"$@" >"$log" 2>&1
	local rc=$?
	local p f
	p=$(grep -c '^PASS ' "$log")
	f=$(grep -c '^FAIL ' "$log")
	k=$(grep -c '^SKIP ' "$log")
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k))
	grep '^FAIL ' "$log" | sed "s/^/$name: /"
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		# A crash or a setup failure counts as a failure of its own.
		fail=$((fail + 1)); broken+=("$name (exit $rc; see $log)")
		tail -n 5 "$log" | sed "s/^/$name: /"
	fi
	printf '%-28s %4d passed %3d failed %3d skipped  %3ds\n' "$name" "$p" "$f" "$k" \
		$((SECONDS - t0))
}
for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	run_one "$(basename "$t")" "$t"
done
for t in tests/tool_*.sh; do
	[ -e "$t" ] || continue
	run_one "$(basename "$t" .sh)" bash "$t"
done
for t in tests/oracle_*.py; do
	[ -e "$t" ] || continue
	run_one "$(basename "$t" .py)" build/venv/bin/python "$t"
done
# Every .cu must compile (the library build above did, when nvcc is here);
# without nvcc that check is a skip, said so.
if [ -z "$(make -s --no-print-directory print-nvcc 2>/dev/null)" ]; then
	skip=$((skip + 1)); echo "SKIP cuda: no nvcc, the kernels were not compiled"
else
	n=0 ok=0 # each kernels/X.cu against its build/kernels/X.o (a stale object of a removed file counts for nothing)
	for cu in kernels/*.cu; do
		[ -e "$cu" ] || continue
		n=$((n + 1)); [ -e "build/kernels/$(basename "$cu" .cu).o" ] && ok=$((ok + 1))
	done
	if [ "$n" -eq "$ok" ]; then pass=$((pass + 1)); echo "PASS cuda: $n kernels compiled"
	else fail=$((fail + 1)); echo "FAIL cuda: $ok of $n kernels compiled"; fi
fi
for b in "${broken[@]+"${broken[@]}"}"; do echo "broken: $b"; done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
