#!/usr/bin/env bash
# tool_profile_diff.sh - bench/profile_diff.py, a lever's attribution from
# two x4-profile runs, on two CPU profiles of the tiny checkpoint (the
# float32 trunk, then the float64 one): the header, every kernel row of
# either run, the rows that moved most first, the kernels' summed change
# equal to device_busy's, a row missing from one run shown as NA, and a
# file that is not a profile, or is missing, refused in one line.  Run from
# the tree's root (tests/run.sh does).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/t.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=bin/x4-profile D=bench/profile_diff.py MODEL=build/models/tiny
if [ ! -x "$P" ] || [ ! -e "$MODEL/xing4_0-tiny.gguf" ]; then
	fail pdiff.setup "$P or $MODEL missing: run make"
	exit 1
fi
common=(-m "$MODEL" --context 16 --steps 2 --ceiling 10 --threads 1)
"$P" "${common[@]}" >"$tmp/a.tsv" 2>"$tmp/a.err" &&
	"$P" "${common[@]}" --prec f64 >"$tmp/b.tsv" 2>"$tmp/b.err"
check pdiff.profiles $? "$(tail -n 2 "$tmp/a.err" "$tmp/b.err")"
python3 $D "$tmp/a.tsv" "$tmp/b.tsv" >"$tmp/d.tsv" 2>&1
check pdiff.runs $? "$(tail -n 3 "$tmp/d.tsv")"
msg=$(python3 - "$tmp/a.tsv" "$tmp/b.tsv" "$tmp/d.tsv" <<'PY' 2>&1
import sys
def rows(p):
    l = [x.rstrip("\n").split("\t") for x in open(p) if x.strip()]
    return l[0], l[1:]
ha, a = rows(sys.argv[1]); hb, b = rows(sys.argv[2])
lines = open(sys.argv[3]).read().splitlines()
assert lines[0] == "section\tname\tclass\tlaunches_a\tlaunches_b\texposed_us_a\texposed_us_b\tdelta_us", lines[0]
body = [l.split("\t") for l in lines[1:] if not l.startswith("#")]
kern = [r for r in body if r[0] == "kernel"]
want = {(r[1], r[2]) for r in a + b if r[0] == "kernel"}
assert {(r[1], r[2]) for r in kern} == want, "kernel rows"
d = [abs(float(r[7])) for r in kern]
assert d == sorted(d, reverse=True), "most moved first"
for r in kern:
    assert abs(float(r[6]) - float(r[5]) - float(r[7])) <= 0.002, r
busy = [r for r in body if r[1] == "device_busy"][0]
tail = lines[-1].split()
kd, bd = float(tail[6]), float(tail[-1])
assert abs(kd - float(busy[7])) <= 0.01 + 1e-4 * abs(kd) and abs(kd - bd) <= 0.01 + 1e-4 * abs(kd), (kd, bd, busy)
assert bd > 0, ("the float64 trunk is not slower", bd)
print("ok")
PY
)
check pdiff.table "$([ "$msg" = ok ]; echo $?)" "$msg"
# a kernel row in a only: NA for b
grep -v 'attn_q_b' "$tmp/b.tsv" >"$tmp/b2.tsv"
python3 $D "$tmp/a.tsv" "$tmp/b2.tsv" | grep -q "^kernel	attn_q_b	attention	[0-9.]*	NA	[0-9.]*	NA	"
check pdiff.one_side $? "$(python3 $D "$tmp/a.tsv" "$tmp/b2.tsv" | grep attn_q_b)"
echo "not a profile" >"$tmp/x.tsv"
python3 $D "$tmp/a.tsv" "$tmp/x.tsv" >"$tmp/o" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "x.tsv: not x4-profile's TSV" "$tmp/o" && [ "$(wc -l <"$tmp/o")" -eq 1 ]
check pdiff.foreign $? "rc $rc: $(cat "$tmp/o")"
python3 $D "$tmp/a.tsv" "$tmp/none.tsv" >"$tmp/o" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "none.tsv: No such file or directory" "$tmp/o" && [ "$(wc -l <"$tmp/o")" -eq 1 ]
check pdiff.missing $? "rc $rc: $(cat "$tmp/o")"
