#!/usr/bin/env bash
# Run every GPU test (build/tests/gpu_*, tests/gpu_*.sh) and count PASS/FAIL.
set -u
cd "$(dirname "$0")/.." || exit 2
mkdir -p build/test-logs
pass=0 fail=0 skip=0
for t in build/tests/gpu_* tests/gpu_*.sh; do
	[ -e "$t" ] || continue
	case "$t" in *.d|*.o) continue;; esac
	name=$(basename "$t" .sh); log=build/test-logs/$name.log
	# a program whose source is gone (an older build's) is not run
	[[ "$t" == *.sh || -e tests/$name.c ]] || continue
	t0=$SECONDS
	if [[ "$t" == *.sh ]]; then bash "$t" >"$log" 2>&1; else "$t" >"$log" 2>&1; fi
	rc=$?
	p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); k=$(grep -c '^SKIP ' "$log")
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k))
	grep '^FAIL ' "$log" | sed "s/^/$name: /"
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then fail=$((fail + 1)); tail -n 5 "$log" | sed "s/^/$name: /"; fi
	printf '%-28s %4d passed %3d failed %3d skipped  %3ds\n' "$name" "$p" "$f" "$k" \
		$((SECONDS - t0))
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
