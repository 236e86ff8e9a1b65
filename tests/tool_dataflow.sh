#!/usr/bin/env bash
# tool_dataflow.sh - the step-structure lab's plan, on the host (no device):
# `build/bench/dataflow plan CONTEXT BLOCKS` prints the decode step it times
# (every stage's rows, row bytes and units, from the full preset's tensor
# list) and runs its dataflow lists through a model of the kernel's waits.
# Checked: the stage count (13 a MoE block, 12 a dense one, the embedding,
# the head's gate, the head and the argmax), the cache stage's rows are the
# context, each unit fits a page, the routed experts' weights wait for the
# router and the shared expert's do not, the bytes are the stages' sum and
# grow by the cache's 1,152 bytes a position and block, the iq4 plan reads
# the IQ4_NL stages' bytes as codes and no other's, work=NS gives the small
# stages their serial work and no other, and the lists finish
# for 1, 7, 132 and 264 blocks.  A SKIP where nvcc did not build the lab.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/t.sh
B=build/bench/dataflow
if [ ! -x "$B" ]; then
	echo "SKIP dataflow: $B not built (no nvcc)"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ctx in 1 512 32768; do
	"$B" plan $ctx 132 >"$tmp/p$ctx.tsv" 2>"$tmp/e$ctx"
	check "plan.$ctx.runs" $? "$(cat "$tmp/e$ctx")"
done
# the iq4 plan, and work=NS (the small stages' serial work)
"$B" plan 512 132 iq4 >"$tmp/q.tsv" 2>"$tmp/qe"
check plan.iq4.runs $? "$(cat "$tmp/qe")"
"$B" plan 512 132 work=2000 >"$tmp/w.tsv" 2>"$tmp/we"
check plan.work.runs $? "$(cat "$tmp/we")"
# the variants: fold (the one-unit stages left out), uniform=K (K equal stages)
"$B" plan 512 132 fold >"$tmp/f.tsv" 2>"$tmp/fe"
check plan.fold.runs $? "$(cat "$tmp/fe")"
"$B" plan 512 132 uniform=240 >"$tmp/u.tsv" 2>"$tmp/ue"
check plan.uniform.runs $? "$(cat "$tmp/ue")"
python3 - "$tmp" <<'PY'
import sys, re
d = sys.argv[1]
def rows(f):
    t = [l.rstrip("\n").split("\t") for l in open(f"{d}/{f}")]
    return [dict(zip(t[0], map(int, r))) for r in t[1:]]
def gb(ctx):
    m = re.search(r"([0-9.]+) GB a step", open(f"{d}/e{ctx}").read())
    return float(m.group(1)) if m else -1
def check(name, ok, why):
    print(("PASS " if ok else "FAIL ") + "dataflow." + name + ("" if ok else ": " + why))
for ctx in (1, 512, 32768):
    r = rows(f"p{ctx}.tsv")
    check(f"{ctx}.stages", len(r) == 13 * 38 + 12 * 2 + 4, f"{len(r)} stages")
    cache = [s for s in r if s["row_bytes"] == 1152]
    check(f"{ctx}.cache", len(cache) == 40 and all(s["rows"] == ctx for s in cache),
          f"{len(cache)} cache stages, rows {sorted(set(s['rows'] for s in cache))}")
    check(f"{ctx}.pages", all(s["row_bytes"] % 16 == 0 and s["rows_a_unit"] * s["row_bytes"] <= 32768
                              and s["units"] * s["rows_a_unit"] >= s["rows"] > (s["units"] - 1) * s["rows_a_unit"]
                              for s in r), "a unit past its page or its rows")
    check(f"{ctx}.chain", r[0]["dep"] == len(r) - 1 and all(s["dep"] == i - 1 for i, s in enumerate(r) if i),
          "a stage not waiting for the one before")
    late = [(i, s) for i, s in enumerate(r) if s["late"] >= 0]
    ok = len(late) == 76 and all(r[s["late"]]["rows"] == 64 and r[s["late"]]["row_bytes"] == 14336 for _, s in late)
    gu = [s for _, s in late if s["late_from"] > 0]
    ok = ok and len(gu) == 38 and all(s["late_from"] * s["rows_a_unit"] == 2048 and s["rows"] == 10240 for s in gu)
    check(f"{ctx}.routed", ok, "the routed experts' waits are not the router's, or the shared rows wait")
    total = sum(s["bytes"] for s in r)
    check(f"{ctx}.bytes", abs(total * 1e-9 - gb(ctx)) < 1e-6, f"{total} against {gb(ctx)} GB")
b = rows("p512.tsv")
b1, b512 = sum(s["bytes"] for s in rows("p1.tsv")), sum(s["bytes"] for s in b)
check("cache_bytes", b512 - b1 == 511 * 1152 * 40, f"{b512 - b1}")
# the iq4 plan: the same stages and bytes, its 80 IQ4_NL stages (the two
# dense blocks' gate/up and down, each MoE block's experts' gate/up and
# down) read as codes, none in the bf16 plan
q = rows("q.tsv")
codes = [s for s in q if s["codes"]]
check("iq4.codes", len(codes) == 80 and all(s["row_bytes"] in (2016, 5184, 2880) for s in codes),
      f"{len(codes)} stages of codes")
check("iq4.same_stages", not any(s["codes"] for s in b) and
      [(s["rows"], s["row_bytes"]) for s in q] == [(s["rows"], s["row_bytes"]) for s in b], "the plans differ")
# work=NS on the 200 small stages (5 a MoE block, 4 a dense one, the head's
# gate and the argmax) and no other
w = rows("w.tsv")
small = [s for s in w if s["work_ns"]]
check("work.stages", len(small) == 200 and all(s["work_ns"] == 2000 and s["bytes"] <= 1 << 20 for s in small),
      f"{len(small)} stages with work")
check("work.same_bytes", not any(s["work_ns"] for s in b) and [s["bytes"] for s in w] == [s["bytes"] for s in b],
      "the plans differ")
# fold: the 82 one-unit stages of 16-byte rows gone (two a block, the head's
# gate, the argmax), every other stage as it was, still one chain
f = rows("f.tsv")
keep = [(s["rows"], s["row_bytes"]) for s in b if s["row_bytes"] != 16]
check("fold.stages", len(f) == len(b) - 82 and [(s["rows"], s["row_bytes"]) for s in f] == keep
      and f[0]["dep"] == len(f) - 1 and all(s["dep"] == i - 1 for i, s in enumerate(f) if i),
      f"{len(f)} stages")
late = [s for s in f if s["late"] >= 0]
check("fold.routed", len(late) == 76 and all(f[s["late"]]["row_bytes"] == 14336 for s in late),
      "a routed stage waits for another than the router")
# uniform=240: 240 stages of equal rows, the step's bytes within a row a stage
u = rows("u.tsv")
check("uniform.stages", len(u) == 240 and len(set((s["rows"], s["row_bytes"]) for s in u)) == 1
      and abs(sum(s["bytes"] for s in u) - b512) <= 240 * 16384 and not any(s["late"] >= 0 for s in u),
      f"{len(u)} stages, {sum(s['bytes'] for s in u)} bytes against {b512}")
PY
for g in 1 7 132 264; do
	"$B" plan 4096 $g >/dev/null 2>"$tmp/g"
	rc=$?
	grep -q "lists: finish" "$tmp/g"
	check "plan.blocks.$g" $((rc | $?)) "$(cat "$tmp/g")"
done
