#!/usr/bin/env python3
"""bench/profile_diff.py - where the difference between two x4-profile runs
goes: a lever's attribution after x4-bench-abab has priced it
(docs/measuring.md 9).

    python3 bench/profile_diff.py A.tsv B.tsv

A.tsv and B.tsv are x4-profile's TSV output for the two arms (the same
model, context and steps; arm b is the lever).  Printed, as a TSV: each
kernel and class row of either run, matched by section, name and class,
with its launches a step and exposed us in a and b and b - a, the rows that
moved most first (a row in one run only has NA for the other); then the
step rows device_busy and unprofiled_step the same way, and a last line
that sets the kernels' summed change against device_busy's.  Exposed time
is what the step pays (the kernels' own spans overlap under programmatic
dependent launch), so the kernel rows' changes add up to the busy time's.
Both runs are profiled runs: their differences attribute a price, they are
not one.
"""
import signal
import sys

FIELDS = ("launches_step", "exposed_us")


def load(path):
    try:
        with open(path) as fh:
            lines = [l.rstrip("\n").split("\t") for l in fh if l.strip()]
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    if not lines or "exposed_us" not in lines[0] or "section" not in lines[0]:
        sys.exit(f"{path}: not x4-profile's TSV (no header with section and exposed_us)")
    head = lines[0]
    rows = {}
    for n, l in enumerate(lines[1:], 2):
        if len(l) != len(head):
            sys.exit(f"{path}:{n}: {len(l)} fields, the header has {len(head)}")
        r = dict(zip(head, l))
        rows[(r["section"], r["name"], r["class"])] = r
    return rows


def num(r, f):
    if r is None or r.get(f, "NA") == "NA":
        return None
    return float(r[f])


def fmt(v, spec):
    return "NA" if v is None else format(v, spec)


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    a, b = load(argv[0]), load(argv[1])
    print("section\tname\tclass\tlaunches_a\tlaunches_b\texposed_us_a\texposed_us_b\tdelta_us")
    keys = [k for k in a if k[0] in ("kernel", "class")]
    keys += [k for k in b if k[0] in ("kernel", "class") and k not in a]

    def delta(k):
        ea, eb = num(a.get(k), "exposed_us"), num(b.get(k), "exposed_us")
        return (eb or 0.0) - (ea or 0.0)

    for sec in ("kernel", "class"):
        for k in sorted((k for k in keys if k[0] == sec), key=lambda k: -abs(delta(k))):
            ra, rb = a.get(k), b.get(k)
            print("\t".join([k[0], k[1], k[2], fmt(num(ra, "launches_step"), ".2f"),
                             fmt(num(rb, "launches_step"), ".2f"),
                             fmt(num(ra, "exposed_us"), ".3f"), fmt(num(rb, "exposed_us"), ".3f"),
                             fmt(delta(k), "+.3f")]))
    busy = None
    for name in ("device_busy", "unprofiled_step"):
        k = ("step", name, "-")
        ua, ub = num(a.get(k), "us_step"), num(b.get(k), "us_step")
        d = ub - ua if ua is not None and ub is not None else None
        if name == "device_busy":
            busy = d
        print("\t".join(["step", name, "-", "NA", "NA", fmt(ua, ".3f"), fmt(ub, ".3f"),
                         fmt(d, "+.3f")]))
    kern = sum(delta(k) for k in keys if k[0] == "kernel")
    print(f"# the kernels' exposed time moved {kern:+.3f} us a step, device_busy "
          f"{fmt(busy, '+.3f')}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader that stops early (head) ends it quietly
    main(sys.argv[1:])
