#!/usr/bin/env python3
"""bench/moe_step_trace.py - the batch-1 MoE launches' timeline, block by
block, from stamp files of one format: a trace build's (make X4_TRACE_MOE=1;
X4_MOE_TRACE=FILE bin/x4-run ... --graph off: kernels/moe_experts.cu) or
the kernel lab's (build/bench/moe_trace writes one a config):

    python3 bench/moe_step_trace.py [--column N] FILE [FILE...]

A line a block: the kernel (gate_up or down), the block's linear index in
its grid, then its 16 words (kernels/gemv_tc.cuh): %globaltimer at word i
for stamp i, clock64 at word 8 + i, the SM id at word 15.  Stamps: gate/up 0
entry, 1 after the wait, 2 after the top k (routed blocks only), 3 weights
landed and B built, 4 products, 5 written; down 0 entry, 1 after the wait,
3 landed, 5 written.  A stamp earlier than its block's entry is an earlier
launch's (a block that returned before writing it) and is left out.

For each file, in us after the gate/up's first block entered: each stamp's
min, median, p90 and max over the blocks; each phase's median and p90
duration (a block's own stamps; clock64's median in cycles); the blocks that
entered more than 1 us after the first (a second wave), and those stamps for
the early and the late blocks apart; how many of the down's blocks entered
before the gate/up's last block ended (the down copies its routes' weights
before its wait); the gate/up's blocks an SM.

--column N: the gate/up's blocks 0 .. N-1 are the shared expert's column
(the grid's y 0: N = n_ff_exp / 16, 64 on the released model), summarised
apart from the routed blocks.  A trace, not a speed.
"""
import signal
import sys

GU_ROUTED = (0, 1, 2, 3, 4, 5)
GU_SHARED = (0, 1, 3, 4, 5)
DOWN = (0, 1, 3, 5)


def q(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]


def stamp(r, s):
    """stamp s of block r, None where unset or an earlier launch's"""
    return r[s] if r[s] and r[s] >= r[0] else None


def group(name, rs, stamps, t0):
    for s in stamps:
        v = [(stamp(r, s) - t0) / 1e3 for r in rs if stamp(r, s) is not None]
        if v:
            print(f"{name}\tstamp{s}\tn {len(v)}\tmin {q(v, 0):.2f}\tmedian {q(v, 0.5):.2f}"
                  f"\tp90 {q(v, 0.9):.2f}\tmax {q(v, 1):.2f}")
    for a, b in zip(stamps, stamps[1:]):
        d = [r for r in rs if stamp(r, a) is not None and stamp(r, b) is not None]
        if d:
            us = [(r[b] - r[a]) / 1e3 for r in d]
            cy = [r[8 + b] - r[8 + a] for r in d]
            print(f"{name}\tphase{a}-{b}\tn {len(d)}\tmedian {q(us, 0.5):.2f}\tp90 {q(us, 0.9):.2f}"
                  f"\tmedian {q(cy, 0.5):.0f} cycles")


def summarise(path, column):
    rows = {"gate_up": [], "down": []}
    try:
        with open(path) as fh:
            for n, line in enumerate(fh, 1):
                p = line.rstrip("\n").split("\t")
                if len(p) != 18 or p[0] not in rows or not all(x.isdigit() for x in p[1:]):
                    sys.exit(f"{path}:{n}: not a stamp line (kernel, block, 16 words)")
                rows[p[0]].append([int(x) for x in p[1:]])
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    gate_up = sorted(rows["gate_up"])
    gu, ids = [r[1:] for r in gate_up], [r[0] for r in gate_up]
    dn = [r[1:] for r in rows["down"]]
    if not gu:
        print(f"{path}: no gate/up stamps")
        return
    t0 = min(r[0] for r in gu)
    print(f"== {path}: {len(gu)} gate/up blocks, {len(dn)} down blocks, "
          f"us after the first gate/up entry")
    shared = [r for i, r in zip(ids, gu) if i < column]
    routed = [r for i, r in zip(ids, gu) if i >= column]
    group("gate_up" if not column else "gate_up routed", routed, GU_ROUTED, t0)
    if shared:
        group("gate_up shared", shared, GU_SHARED, t0)
    late = [r for r in routed if r[0] > t0 + 1000]
    print(f"gate_up\tlate starters {len(late)} of {len(routed)}"
          f"{' routed' if column else ''}")
    if late and len(late) < len(routed):
        group("gate_up early", [r for r in routed if r[0] <= t0 + 1000], GU_ROUTED, t0)
        group("gate_up late", late, GU_ROUTED, t0)
    group("down", dn, DOWN, t0)
    end = max(r[5] if stamp(r, 5) is not None else r[4] for r in gu)
    early = sum(1 for r in dn if r[0] and r[0] < end)
    print(f"down\tentered before the gate/up's last block ended: {early} of {len(dn)}")
    sms = {}
    for r in gu:
        sms[r[15]] = sms.get(r[15], 0) + 1
    hist = [0] * 8
    for c in sms.values():
        hist[min(c, 7)] += 1
    print(f"gate_up\tSMs by blocks 1..7: {hist[1:]}  ({len(sms)} SMs)")


def main(argv):
    column = 0
    if argv[:1] == ["--column"]:
        if len(argv) < 2 or not argv[1].isdigit():
            sys.exit("--column takes a block count")
        column, argv = int(argv[1]), argv[2:]
    if not argv:
        sys.exit(__doc__)
    for path in argv:
        summarise(path, column)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader that stops early (head) ends it quietly
    main(sys.argv[1:])
