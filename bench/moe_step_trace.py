#!/usr/bin/env python3
"""bench/moe_step_trace.py - the MoE launches' timeline in the step, from a
trace build's file (make X4_TRACE_MOE=1; X4_MOE_TRACE=FILE bin/x4-run ...
--graph off: kernels/moe_experts.cu):

    python3 bench/moe_step_trace.py FILE [FILE...]

For each file: the gate/up's and the down's blocks, each stamp's min,
median, p90 and max (us after the gate/up's first block entered), the
blocks that entered more than 1 us after the first (a second wave), and how
many of the down's blocks entered before the gate/up's last block ended
(the down streams its routes' weights before its wait: section 42's
question).  Stamps: gate/up 0 entry, 1 after the wait, 2 after the top k,
3 weights landed and B built, 4 products, 5 written; down 0 entry, 1 after
the wait, 3 landed, 5 written.  A trace, not a speed.
"""
import sys


def q(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]


def main(paths):
    for path in paths:
        rows = {"gate_up": [], "down": []}
        with open(path) as fh:
            for line in fh:
                p = line.split("\t")
                rows[p[0]].append([int(x) for x in p[2:18]])
        gu, dn = rows["gate_up"], rows["down"]
        if not gu:
            print(f"{path}: no gate/up stamps")
            continue
        t0 = min(r[0] for r in gu)
        print(f"== {path}: {len(gu)} gate/up blocks, {len(dn)} down blocks, us after the first gate/up entry")
        for name, rs, stamps in (("gate_up", gu, (0, 1, 2, 3, 4, 5)), ("down", dn, (0, 1, 3, 5))):
            for s in stamps:
                # a stamp before the block's own entry is an earlier call's (a block that
                # returned before it, as the split's first half does before stamp 5)
                v = [(r[s] - t0) / 1e3 for r in rs if r[s] and r[s] >= r[0]]
                if v:
                    print(f"{name}\tstamp{s}\tn {len(v)}\tmin {q(v, 0):.2f}\tmedian {q(v, 0.5):.2f}"
                          f"\tp90 {q(v, 0.9):.2f}\tmax {q(v, 1):.2f}")
        late = [r for r in gu if r[0] > t0 + 1000]
        print(f"gate_up\tlate starters {len(late)} of {len(gu)}")
        end = max(r[5] if r[5] >= r[0] else r[4] for r in gu)
        early = sum(1 for r in dn if r[0] and r[0] < end)
        print(f"down\tentered before the gate/up's last block ended: {early} of {len(dn)}")
        sms = {}
        for r in gu:
            sms[r[15]] = sms.get(r[15], 0) + 1
        hist = [0] * 8
        for c in sms.values():
            hist[min(c, 7)] += 1
        print(f"gate_up\tSMs by blocks 1..7: {hist[1:]}  ({len(sms)} SMs)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
