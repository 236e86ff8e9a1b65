#!/usr/bin/env bash
# Device call 61 (2026-12-04, session 20): where the gate behind the down
# spends its time.  A trace build (make X4_TRACE_MOE=1): the gated downs
# stamp into the trace buffer past block 4096 (the last layer's plain down
# keeps its own place), stamp 6 after the gate's tail (a block's atomic;
# the last block's finish).  x4-run --graph off at 512 tokens of context,
# 8 tokens; the last gated down (layer 38) and the last plain one (39).  A
# trace, not a speed.
set -u
t0=$SECONDS
mkdir -p "$OUT/x"
make -j16 CUDA_ARCH=90 X4_TRACE_MOE=1 all >"$OUT/x/build.log" 2>&1
echo "build rc=$? ($((SECONDS-t0)) s)"; grep -E ' error' "$OUT/x/build.log" | head -5
[ -e /tmp/x4-full ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
python3 -c 'print(" ".join(["word"] * 510))' >/tmp/p512.txt
for arm in block gatesep; do
	X4_MOE_TRACE="$OUT/x/trace-$arm.tsv" bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p512.txt -n 8 \
		--ignore-eos --graph off --copy $arm >/dev/null 2>"$OUT/x/run-$arm.err"
	echo "x4-run $arm rc=$? ($((SECONDS-t0)) s): $(grep -E 'steady' "$OUT/x/run-$arm.err")"
done
python3 - "$OUT/x/trace-block.tsv" "$OUT/x/trace-gatesep.tsv" <<'PY'
import sys, statistics as st
def q(v, f):
    v = sorted(v); return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]
for path in sys.argv[1:]:
    rows = [l.split("\t") for l in open(path)]
    for tag, sel in (("gated", lambda b: b >= 4096), ("plain", lambda b: b < 4096)):
        dn = [[int(x) for x in r[2:18]] for r in rows if r[0] == "down" and sel(int(r[1]))]
        if not dn:
            continue
        t0 = min(r[0] for r in dn)
        print(f"== {path} {tag}: {len(dn)} down blocks, us after the first entry")
        for s in (0, 1, 3, 5, 6):
            v = [(r[s] - t0) / 1e3 for r in dn if r[s] and r[s] >= r[0]]
            if v:
                print(f"stamp{s}\tn {len(v)}\tmin {q(v,0):.2f}\tmedian {q(v,.5):.2f}\tp90 {q(v,.9):.2f}\tmax {q(v,1):.2f}")
        if tag == "gated":
            last = max(dn, key=lambda r: r[6])
            tail = [(r[6] - r[5]) / 1e3 for r in dn if r is not last and r[6] >= r[5] > 0]
            print(f"tail (stamp 5 -> 6) of the other blocks: median {q(tail,.5):.2f} max {q(tail,1):.2f} us")
            print(f"last block: stamp5 {(last[5]-t0)/1e3:.2f}, stamp6 {(last[6]-t0)/1e3:.2f}; latest stamp5 of all {(max(r[5] for r in dn)-t0)/1e3:.2f}")
PY
rm -f "$OUT/x/build.log"
tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
echo "end ($((SECONDS-t0)) s)"
