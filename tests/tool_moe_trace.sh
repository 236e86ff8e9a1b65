#!/usr/bin/env bash
# tool_moe_trace.sh - bench/moe_step_trace.py, the MoE timeline's summary
# (the lab's build/bench/moe_trace and a trace build's X4_MOE_TRACE file
# share its format), on a stamp file written here with known values: the
# shared column apart (--column), the stamps' quantiles, the phases' median
# durations in us and cycles, the late starters, the down's early entries,
# a stamp older than its block's entry left out, a malformed line and a
# missing file refused in one line.  Run from the tree's root (tests/run.sh
# does).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/t.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
S=bench/moe_step_trace.py
# A block: kernel, id, globaltimer at stamps 0-7, clock64 at 8-14, SM id at 15.
# Gate/up blocks 0-1 shared (no stamp 2), 2-5 routed, entries at 1000 ns
# (5 late, at 3000); each stamp 1 us after the one before it, clock 2000
# cycles.  Block 4's stamp 5 is 500 (an earlier launch's: left out).
python3 - "$tmp/t.tsv" <<'PY'
import sys
out = []
def blk(kind, i, entry, stamps, sm):
    w = [0] * 16
    for k, s in enumerate(stamps):
        w[s] = entry + 1000 * k
        w[8 + s] = 5000 + 2000 * k
    w[15] = sm
    return w
for i in range(6):
    entry = 3000 if i == 5 else 1000
    st = (0, 1, 3, 4, 5) if i < 2 else (0, 1, 2, 3, 4, 5)
    w = blk("gate_up", i, entry, st, i % 3)
    if i == 4:
        w[5] = 500
    out.append("gate_up\t%d\t%s" % (i, "\t".join(map(str, w))))
for i in range(3):
    w = blk("down", i, 2000 + 5000 * i, (0, 1, 3, 5), 7)
    out.append("down\t%d\t%s" % (i, "\t".join(map(str, w))))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
python3 $S --column 2 "$tmp/t.tsv" >"$tmp/out" 2>&1
check trace.runs $? "$(tail -n 3 "$tmp/out")"
has() { grep -qF -- "$2" "$tmp/out"; check "trace.$1" $? "no line with '$2' in: $(tr '\n' '|' <"$tmp/out")"; }
has header "6 gate/up blocks, 3 down blocks"
# routed entries 0,0,0,2 us after t0 = 1000 ns
has routed.entry "gate_up routed	stamp0	n 4	min 0.00	median 0.00	p90 2.00	max 2.00"
has shared.topk.none "gate_up shared	stamp1	n 2"
grep -q "gate_up shared	stamp2" "$tmp/out"; check trace.shared.no_topk $((! $?)) "a shared stamp 2"
# block 4's stamp 5 left out: 3 of the 4 routed
has stale.stamp "gate_up routed	stamp5	n 3"
has phase "gate_up routed	phase0-1	n 4	median 1.00	p90 1.00	median 2000 cycles"
has late "late starters 1 of 4 routed"
has late.group "gate_up late	stamp0	n 1	min 2.00"
# the gate/up's last block ends at 3000 + 5000 ns; downs enter at 2000, 7000, 12000
has down.early "entered before the gate/up's last block ended: 2 of 3"
has sms "SMs by blocks 1..7: [0, 3, 0, 0, 0, 0, 0]  (3 SMs)"  # blocks i % 3: two an SM
# without --column every gate/up block is one group
python3 $S "$tmp/t.tsv" >"$tmp/out2" 2>&1
grep -qF "gate_up	stamp0	n 6" "$tmp/out2"; check trace.nocolumn $? "$(head -n 3 "$tmp/out2" | tr '\n' '|')"
printf 'gate_up\t0\t1\t2\n' >"$tmp/bad.tsv"
python3 $S "$tmp/bad.tsv" >"$tmp/out3" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "bad.tsv:1: not a stamp line" "$tmp/out3"
check trace.malformed $? "rc $rc: $(cat "$tmp/out3")"
python3 $S "$tmp/none.tsv" >"$tmp/out4" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "none.tsv: No such file or directory" "$tmp/out4" && [ "$(wc -l <"$tmp/out4")" -eq 1 ]
check trace.missing_file $? "rc $rc: $(cat "$tmp/out4")"
