"""Oracle: x4's fp32 CPU logits against a float64 numpy reference written from docs/forward.md alone.

Checks (one PASS/FAIL line each):
  dequant <type>      gguf's dequantizer equals the docs/gguf.md 3 block formulas, bit for bit
  absorbed            the reference's absorbed and expanded MLA forms agree to 1e-12
  x4 <model> relerr   every logits row of `x4-run --dump-logits` is within 1e-4 (relative L2)
  x4 <model> argmax   every row has the reference's argmax (near-ties reported, not failed)
on the tiny preset, on it with its routed experts written as Q8_0 (`x4-synth --expert-type
q8_0`), and on a `x4-synth --loud` checkpoint (fp32 residuals must survive the loud
expert).  Until the tiny preset and x4-run exist, the first two run on a small random file and
the x4 checks print SKIP.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xing4_ref as X  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_DIR = os.path.join(ROOT, "build/models/tiny")
TINY = os.path.join(TINY_DIR, "xing4_0-tiny.gguf")
X4RUN = os.path.join(ROOT, "bin/x4-run")
X4SYNTH = os.path.join(ROOT, "bin/x4-synth")
N_PROMPT, N_GEN = 32, 16
# The issue's bound, for x4's fp32 arithmetic against this float64 reference with both caches
# exact (x4-run --kv-cache exact, reference kv="f64").
REL_TOL = 1e-4
# With the fp16 cache (docs/numerics.md 1.7) on both sides, the two round values that differ by fp32-vs-float64
# noise to fp16; a value near a rounding boundary can land on either neighbour, a jump of one
# fp16 ulp (2^-11 relative, 4.9e-4), so agreement is bounded by that and not by the arithmetic:
# measured 7e-5..1.6e-4. The default (fp16) path is checked at this looser bound plus argmax.
REL_TOL_F16 = 1e-3
fails = 0


def report(ok, name, why=""):
    global fails
    if ok:
        print(f"PASS {name}" + (f" ({why})" if why else ""))
    else:
        fails += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()


def prompt_ids(path):
    """32 deterministic ids: bos, a few common word pieces if the vocabulary has them, then
    seeded random ids in [3, V)."""
    r = X.GGUFReader(path)
    V = X.Hparams(r).V
    if V < 0:
        V = int([t for t in r.tensors if t.name == "token_embd.weight"][0].shape[1])
    ids = [1]
    f = r.get_field("tokenizer.ggml.tokens")
    if f is not None:
        toks = f.contents()
        where = {t: i for i, t in enumerate(toks)}
        for w in ("\u2581The", "\u2581cat", "\u2581sat", "\u2581on", "\u2581the", "\u2581mat", "."):
            if w in where and where[w] >= 3:
                ids.append(where[w])
    rng = np.random.default_rng(20240613)
    ids += [int(v) for v in rng.integers(3, V, N_PROMPT - len(ids))]
    return ids


def check_dequant(path):
    m = X.Xing4Ref(path)
    seen = set()
    for t in m.r.tensors:
        dec = X.SPEC_DECODERS.get(t.tensor_type)
        if dec is None or t.tensor_type in seen:
            continue
        seen.add(t.tensor_type)
        raw = t.data.reshape(-1, t.data.shape[-1])[:64]  # a few rows are plenty
        a = X.dequantize(raw, t.tensor_type).astype(np.float64)
        b = dec(np.ascontiguousarray(raw))
        bad = int(np.sum(a != b))
        report(bad == 0, f"dequant {t.tensor_type.name}",
               f"{t.name}: {a.size} values" if bad == 0 else f"{t.name}: {bad} of {a.size} differ")


def check_absorbed(path, ids):
    t0 = time.time()
    e = X.Xing4Ref(path, kv="f64").run(ids)
    a = X.Xing4Ref(path, kv="f64", absorbed=True).run(ids)
    rel = np.linalg.norm(a - e, axis=1) / np.linalg.norm(e, axis=1)
    report(rel.max() < 1e-12, "absorbed",
           f"worst relative difference {rel.max():.3g} over {len(ids)} positions, {time.time() - t0:.1f}s")


def x4_logits(model, ids, out, kv="f16"):
    # Greedy (temperature 0) with the fp32 residual, which is the default: said explicitly.
    cmd = [X4RUN, "-m", model, "--tokens", ",".join(map(str, ids)), "-n", str(N_GEN),
           "--ignore-eos", "--temperature", "0", "--resid", "f32", "-s", "1", "--device", "cpu",
           "--kv-cache", kv,
           "--dump-logits", out]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.decode()[-500:]}")
    return np.load(out).astype(np.float64)


def compare(label, model_dir, gguf_path, ids, tmp, kv="exact"):
    tol = REL_TOL if kv == "exact" else REL_TOL_F16
    label = f"{label} kv={kv}"
    try:
        got = x4_logits(model_dir, ids, os.path.join(tmp, label.replace(" ", "_") + ".npy"), kv)
    except Exception as ex:  # noqa: BLE001 -- one clear FAIL line is the point
        report(False, f"x4 {label} run", str(ex))
        return None
    n = got.shape[0]
    # Rows (man x4-run): every prompt position, then one per generated token, each fed back,
    # the last one included: 32 + 16.
    if got.ndim != 2 or n != N_PROMPT + N_GEN:
        report(False, f"x4 {label} rows", f"logits shape {got.shape}, expected "
               f"[{N_PROMPT + N_GEN}, V]")
        return None
    toks = list(ids) + [int(np.argmax(got[i])) for i in range(N_PROMPT - 1, n - 1)]
    t0 = time.time()
    m = X.Xing4Ref(gguf_path, kv="f64" if kv == "exact" else "f16")
    ref = m.run(toks)
    dt = time.time() - t0
    if ref.shape != got.shape:
        report(False, f"x4 {label} relerr", f"shape {got.shape} vs reference {ref.shape}")
        return None
    rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    w = int(np.argmax(rel))
    why = (f"worst row {w} relative error {rel[w]:.3g}, median {np.median(rel):.3g}, {n} rows; "
           f"reference {dt:.1f}s")
    if not rel.max() < tol:
        why += f"; smallest router top-k margin {m.min_margin:.3g}"
    report(bool(rel.max() < tol), f"x4 {label} relerr < {tol:g}", why)
    if dt < 30 and kv != "exact":
        # How much of the agreement the fp16 cache accounts for: informative, not a check.
        r64 = X.Xing4Ref(gguf_path, kv="f64").run(toks)
        rel64 = np.linalg.norm(got - r64, axis=1) / np.linalg.norm(r64, axis=1)
        print(f"NOTE x4 {label} against an exact (f64) cache: worst relative error {rel64.max():.3g}")
    bad, ties = [], []
    for i in range(n):
        a, b = int(np.argmax(got[i])), int(np.argmax(ref[i]))
        if a == b:
            continue
        gap = ref[i, b] - ref[i, a]
        if gap <= 2 * np.max(np.abs(got[i] - ref[i])):
            ties.append(f"row {i}: {a} vs {b}, gap {gap:.3g}")
        else:
            bad.append(f"row {i}: x4 {a}, reference {b}, gap {gap:.3g}")
    for t in ties:
        print(f"NOTE x4 {label} argmax near-tie {t}")
    report(not bad, f"x4 {label} argmax", f"{n} rows" + (f", {len(ties)} near-ties" if ties else "")
           if not bad else "; ".join(bad[:5]))
    return m.max_resid


def main():
    with tempfile.TemporaryDirectory(prefix="x4-oracle-") as tmp:
        path = TINY
        if not os.path.exists(TINY):
            path = os.path.join(tmp, "dev.gguf")
            X.write_synthetic(path, seed=1)
            print(f"NOTE {TINY} missing (make tiny): self-checks run on a random file")
        ids = prompt_ids(path)
        print("NOTE prompt ids " + ",".join(map(str, ids)))
        check_dequant(path)
        check_absorbed(path, ids)
        if not (os.access(X4RUN, os.X_OK) and os.path.exists(TINY)):
            print("SKIP x4 comparisons: bin/x4-run or the tiny preset is not built")
            return
        quiet = compare("tiny", TINY_DIR, TINY, ids, tmp, "exact")
        compare("tiny", TINY_DIR, TINY, ids, tmp, "f16")
        if not os.access(X4SYNTH, os.X_OK):
            print("SKIP x4 loud: bin/x4-synth is not built")
            return
        # The second expert format: the routed experts as Q8_0 blocks, against the same
        # independent reference (gguf's dequantizer, checked against docs/gguf.md 3's formula).
        q8 = os.path.join(tmp, "q8_0")
        p = subprocess.run([X4SYNTH, "--preset", "tiny", "--seed", "1", "--expert-type", "q8_0",
                            "-o", q8], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        ggufs = [f for f in os.listdir(q8) if f.endswith(".gguf")] if os.path.isdir(q8) else []
        if p.returncode != 0 or len(ggufs) != 1:
            report(False, "x4 q8_0 synth", f"x4-synth --expert-type q8_0 exited {p.returncode}: "
                   f"{p.stderr.decode()[-300:]}")
        else:
            check_dequant(os.path.join(q8, ggufs[0]))
            compare("q8_0 experts", q8, os.path.join(q8, ggufs[0]), ids, tmp, "exact")
        loud = os.path.join(tmp, "loud")
        p = subprocess.run([X4SYNTH, "--preset", "tiny", "--seed", "1", "--loud", "2:0:8", "-o", loud],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        ggufs = [f for f in os.listdir(loud) if f.endswith(".gguf")] if os.path.isdir(loud) else []
        if p.returncode != 0 or len(ggufs) != 1:
            report(False, "x4 loud synth", f"x4-synth --loud exited {p.returncode}: "
                   f"{p.stderr.decode()[-300:]}")
            return
        loud_max = compare("loud", loud, os.path.join(loud, ggufs[0]), ids, tmp, "exact")
        if quiet is not None and loud_max is not None:
            # The loud check means something only if the prompt routes to the loud expert.
            report(loud_max > 10 * quiet, "x4 loud exercised",
                   f"largest residual |H| {loud_max:.4g} loud, {quiet:.4g} plain")


if __name__ == "__main__":
    main()
    sys.exit(1 if fails else 0)
