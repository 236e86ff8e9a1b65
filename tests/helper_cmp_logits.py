#!/usr/bin/env python3
"""helper_cmp_logits.py - compare two x4-run --dump-logits runs (tests/gpu_model.sh).

usage: helper_cmp_logits.py NAME TEST.npy TEST.json REF.npy REF.json TOL

Both runs are greedy over the same prompt.  Prints PASS/FAIL lines:
  NAME.tokens   the generated ids are the same
  NAME.logits   over the rows whose context is the same in both runs (every
                prompt row, and each generated row up to the first id that
                differs), max_row |test - ref| / max_row |ref| <= TOL, with
                the measured value printed either way.
A token mismatch prints the reference's top-2 margin at that step, so that a
near-tie (a margin below the tolerance) reads as what it is.
"""
import json
import sys

import numpy as np


def main():
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    name, a_npy, a_json, b_npy, b_json, tol = sys.argv[1:]
    tol = float(tol)
    a, b = np.load(a_npy), np.load(b_npy)
    ja, jb = json.load(open(a_json)), json.load(open(b_json))
    ta, tb = ja["tokens"], jb["tokens"]
    p = int(jb["prompt_tokens"])
    if a.shape != b.shape or int(ja["prompt_tokens"]) != p:
        print(f"FAIL {name}.shape: test {a.shape} (prompt {ja['prompt_tokens']}) vs "
              f"reference {b.shape} (prompt {p})")
        return 1
    div = next((i for i in range(min(len(ta), len(tb))) if ta[i] != tb[i]), None)
    if div is None and len(ta) == len(tb):
        print(f"PASS {name}.tokens ({len(tb)} greedy tokens equal)")
        rows = a.shape[0]
    else:
        i = div if div is not None else min(len(ta), len(tb))
        r = p - 1 + i
        msg = f"first difference at generated token {i}"
        if div is not None and r < b.shape[0]:
            top = np.argsort(-b[r].astype(np.float64), kind="stable")[:2]
            margin = float(b[r, top[0]] - b[r, top[1]])
            scale = float(np.abs(b[r]).max())
            msg += (f": test {ta[i]}, reference {tb[i]}; the reference's top-2 margin there is "
                    f"{margin:.3g} ({margin / scale:.2g} of its largest |logit|), test logits "
                    f"of the two ids {a[r, top[0]]:.6g}, {a[r, top[1]]:.6g}")
        print(f"FAIL {name}.tokens: {msg}")
        rows = r + 1
    x, y = a[:rows].astype(np.float64), b[:rows].astype(np.float64)
    if not np.isfinite(x).all():
        bad = int(np.argwhere(~np.isfinite(x))[0][0])
        print(f"FAIL {name}.logits: non-finite test logits at row {bad}")
        return 1
    err = np.abs(x - y).max(axis=1) / np.maximum(np.abs(y).max(axis=1), 1e-30)
    worst = int(err.argmax())
    line = (f"max row error {err.max():.3g} (row {worst} of {rows}; mean {err.mean():.3g}); "
            f"tolerance {tol:g}")
    print(f"{'PASS' if err.max() <= tol else 'FAIL'} {name}.logits: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
