#!/usr/bin/env python3
"""oracle_quant.py - x4's block formats against the gguf package.

Written from the block formats of docs/gguf.md 3 and the gguf package's API, not
from x4's C code.  For each type x4 dequantizes, random valid blocks (random
bytes, with every fp16 scale field set to a finite value) go through
build/tests/helper_quant and through gguf.quants.dequantize; the float32
outputs must be bit-identical.  Then x4's quantizer output is dequantized by
gguf (closing the loop), and for Q8_0, BF16 and F16, where gguf (or numpy)
quantizes with ggml's rounding, x4's bytes must equal gguf's.

Run from the tree root: build/venv/bin/python tests/oracle_quant.py
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

HELPER = "build/tests/helper_quant"
SEED = 20240611
NBLOCKS = 4096

# type: (block elements, block bytes, byte offsets of the fp16 scale fields)
TYPES = {
    "F32": (QT.F32, 1, 4, []),
    "F16": (QT.F16, 1, 2, []),
    "BF16": (QT.BF16, 1, 2, []),
    "Q8_0": (QT.Q8_0, 32, 34, [0]),
    "Q4_K": (QT.Q4_K, 256, 144, [0, 2]),
    "Q6_K": (QT.Q6_K, 256, 210, [208]),
    "IQ4_NL": (QT.IQ4_NL, 32, 18, [0]),
}

passed = failed = 0


def check(ok, name, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()


def run_helper(mode, tname, data, tmp):
    inp = os.path.join(tmp, "in.bin")
    out = os.path.join(tmp, "out.bin")
    data.tofile(inp)
    r = subprocess.run([HELPER, mode, tname, inp, out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"helper_quant {mode} {tname}: rc {r.returncode}: {r.stderr.strip()}")
    return np.fromfile(out, dtype=np.uint8)


def sane_scales(rng, n):
    """fp16 scales: mostly normal*0.01 (both signs), some subnormal, some
    large, some zero; always finite."""
    s = (rng.standard_normal(n) * 0.01).astype(np.float16)
    kind = rng.integers(0, 16, n)
    sub = rng.integers(1, 0x400, n).astype(np.uint16) | (rng.integers(0, 2, n).astype(np.uint16) << 15)
    s = np.where(kind == 0, sub.view(np.float16), s)
    s = np.where(kind == 1, (rng.standard_normal(n) * 300).astype(np.float16), s)
    s = np.where(kind == 2, np.float16(0), s)
    assert np.all(np.isfinite(s))
    return s.view(np.uint8).reshape(n, 2)


def random_blocks(rng, tname, nblocks):
    qt, elems, nbytes, scale_offs = TYPES[tname]
    if tname in ("F16", "BF16"):
        # every 16-bit pattern, then random ones
        allpat = np.arange(65536, dtype=np.uint16)
        extra = rng.integers(0, 65536, nblocks * 16, dtype=np.uint16)
        return np.concatenate([allpat, extra]).view(np.uint8)
    if tname == "F32":
        return rng.integers(0, 256, nblocks * 64, dtype=np.uint8)
    b = rng.integers(0, 256, (nblocks, nbytes), dtype=np.uint8)
    for off in scale_offs:
        b[:, off:off + 2] = sane_scales(rng, nblocks)
    return b.reshape(-1)


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).reshape(-1)


def first_diff(x, ref, elems):
    i = int(np.nonzero(x != ref)[0][0])
    return (f"{int(np.count_nonzero(x != ref))} elements differ; first at element {i} "
            f"(block {i // elems}): x4 0x{int(x[i]):08x} gguf 0x{int(ref[i]):08x}")


def test_dequant(rng, tmp):
    for tname, (qt, elems, nbytes, _) in TYPES.items():
        data = random_blocks(rng, tname, NBLOCKS)
        name = f"oracle_dequant_bits type={tname} blocks={data.size // nbytes} seed={SEED}"
        try:
            x4 = run_helper("dequant", tname, data, tmp).view(np.uint32)
        except RuntimeError as ex:
            check(False, name, str(ex))
            continue
        ref = bits(quants.dequantize(data.copy(), qt))
        if x4.shape != ref.shape:
            check(False, name, f"x4 gave {x4.size} floats, gguf {ref.size}")
            continue
        check(np.array_equal(x4, ref), name,
              first_diff(x4, ref, elems) if not np.array_equal(x4, ref) else "")


def gaussian_rows(rng, nblocks, elems):
    """Gaussian data with a per-block scale spread over six decades, plus
    a few outliers, like real weight rows."""
    x = rng.standard_normal((nblocks, elems)).astype(np.float32)
    scale = (10.0 ** rng.uniform(-4, 2, (nblocks, 1))).astype(np.float32)
    x *= scale
    out = rng.integers(0, x.size, x.size // 200)
    x.reshape(-1)[out] *= 8
    x[0] = 0  # an all-zero block
    return x.reshape(-1)


def rel_rms(x, y):
    return float(np.sqrt(np.sum((x.astype(np.float64) - y) ** 2) / np.sum(x.astype(np.float64) ** 2)))


# Relative RMS error bounds for gaussian data (see tests/test_quant.c for
# the derivation): IQ4_NL ~0.10 expected, Q6_K ~0.02, Q8_0 ~0.005, BF16 <2^-9.
BOUNDS = {"IQ4_NL": 0.12, "Q6_K": 0.03, "Q8_0": 0.01, "BF16": 2.0 ** -8, "F16": 2.0 ** -11}


def test_quant_loop(rng, tmp):
    for tname in ("IQ4_NL", "Q6_K", "Q8_0", "BF16", "F16"):
        qt, elems, nbytes, _ = TYPES[tname]
        # NBLOCKS blocks; the scalar types in rows of 32
        x = gaussian_rows(rng, NBLOCKS, max(elems, 32))
        case = f"type={tname} n={x.size} seed={SEED}"
        try:
            q = run_helper("quant", tname, x, tmp)
            x4y = run_helper("dequant", tname, q, tmp).view(np.uint32)
        except RuntimeError as ex:
            check(False, f"oracle_quant_loop {case}", str(ex))
            continue
        ref = bits(quants.dequantize(q.copy(), qt))
        check(np.array_equal(x4y, ref), f"oracle_quant_loop {case}",
              first_diff(x4y, ref, elems) if not np.array_equal(x4y, ref) else "")
        err = rel_rms(x, x4y.view(np.float32))
        check(err <= BOUNDS[tname], f"oracle_quant_error {case} rel_rms={err:.5f} bound={BOUNDS[tname]:.5f}",
              f"relative RMS error {err:.5f} above {BOUNDS[tname]}")

        if tname in ("IQ4_NL", "Q6_K"):
            print(f"# {tname}: the gguf package has no quantizer for it; x4's searched "
                  f"bytes are checked through gguf's dequantizer and the error bound only")
        if tname in ("Q8_0", "BF16", "F16"):
            # gguf's Q8_0 and BF16 quantizers follow ggml's reference
            # rounding exactly (d = amax/127, roundf on x*(1/d), fp16 d;
            # BF16 nearest even with quiet NaN) and F16 is numpy's
            # nearest-even cast: x4's bytes must be equal.
            g = np.ascontiguousarray(quants.quantize(x, qt)).view(np.uint8).reshape(-1)
            same = np.array_equal(g, q)
            check(same, f"oracle_quant_bytes_equal_gguf {case}",
                  f"{int(np.count_nonzero(g != q))} of {q.size} bytes differ" if not same else "")


def test_special_bits(rng, tmp):
    """Every float32 class through BF16 and F16 against gguf/numpy:
    ties, subnormals, overflow, inf, NaN."""
    pats = np.concatenate([
        rng.integers(0, 2 ** 32, 1 << 18, dtype=np.uint64).astype(np.uint32),
        np.array([0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
                  0x7f800001, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0xff7fffff,
                  0x477fe000, 0x477ff000, 0x477fefff, 0x33000000, 0x33000001, 0x38800000,
                  0x387fe000, 0x00000001], dtype=np.uint32),
        # every float32 exponent with fp16 tie and near-tie mantissas
        (np.arange(256, dtype=np.uint32)[:, None] << 23 |
         np.array([0x1000, 0x3000, 0xfff, 0x1001, 0x7fffff, 0x8000, 0x18000], dtype=np.uint32)[None, :]).reshape(-1),
    ])
    x = pats.view(np.float32)
    case = f"n={x.size} seed={SEED}"
    q = run_helper("quant", "BF16", x, tmp)
    g = np.ascontiguousarray(quants.quantize(x, QT.BF16)).view(np.uint8).reshape(-1)
    check(np.array_equal(g, q), f"oracle_bf16_bits_all_classes {case}",
          f"{int(np.count_nonzero(g.view(np.uint16) != q.view(np.uint16)))} values differ")
    q = run_helper("quant", "F16", x, tmp).view(np.uint16)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    # NaN payloads are not specified by IEEE for narrowing; require NaN->NaN
    # and equal sign, and bit equality for everything else.
    ok_nan = np.all(np.isnan(q[nan].view(np.float16))) and np.array_equal(q[nan] >> 15, ref[nan] >> 15)
    ok_rest = np.array_equal(q[~nan], ref[~nan])
    bad = np.nonzero((q != ref) & ~nan)[0]
    check(ok_nan and ok_rest, f"oracle_f16_bits_all_classes {case}",
          f"{bad.size} differ, first f32 0x{int(pats[bad[0]]):08x}: x4 0x{int(q[bad[0]]):04x} numpy 0x{int(ref[bad[0]]):04x}"
          if bad.size else "NaN handling differs")


def main():
    if not os.access(HELPER, os.X_OK):
        check(False, "oracle_quant_helper", f"{HELPER} is missing: run make tests")
        return 1
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        test_dequant(rng, tmp)
        test_quant_loop(rng, tmp)
        test_special_bits(rng, tmp)
    print(f"# {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
