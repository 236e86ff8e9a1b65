#!/usr/bin/env python3
"""bench/decode_tsv.py - the decode goal table (issue 11) as a TSV with the
agreed header, from the files bench/gpu-session.sh's `decode` and `profile`
steps leave in one folder:

    python3 bench/decode_tsv.py DIR COMMIT DATE [PROFILE_OPTS] > bench/results/decode.tsv

and, with --prefill first, the prefill goal table (issue 12) with the same
header, from the `decode` step's files and the `long` step's long-N.json
(x4-run at N tokens of context):

    python3 bench/decode_tsv.py --prefill DIR COMMIT DATE > bench/results/prefill.tsv

prefill_tok_s by prompt length (x4-bench-abab's arms at 512 and 4096, x4-run
beyond), decode_tok_s and first_step_ms by context where x4-run ran, and
max_context: the longest context a run prefilled and decoded in.

PROFILE_OPTS: the options the profile ran with (DECODE_OPTS of the profile
step, e.g. "--pdl off"), written into its rows' command.

DIR holds decode-512.tsv, decode-4096.tsv (x4-bench-abab, a control pair),
decode-32768.json (x4-run --json), profile-512.tsv, profile-4096.tsv (and
profile-32500.tsv where it ran) and their .err files (x4-profile).  A weight
family's stream rate is its bytes over its kernels' time, against the read
ceiling the profile measured; the cache's (stream_pct_of_ceiling_kv_cache)
the cache rows the attention reads over the attention kernels' time.  The
gpu column is the card the runs name.
"""
import json
import os
import re
import sys

argv = sys.argv[1:]
prefill_mode = bool(argv) and argv[0] == "--prefill"
if prefill_mode:
    argv = argv[1:]
d, commit, date = argv[0:3]
popts = (" " + argv[3]) if len(argv) > 3 and argv[3] else ""
rows = []


def card():
    """the card the runs name: x4-bench-abab's device column, else x4-profile's line"""
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if re.fullmatch(r"decode-[0-9]+\.tsv", name):
            for r in tsv(path):
                if r.get("kind") == "run" and r.get("device"):
                    return re.sub(r" \(cuda:[0-9]+\)$", "", r["device"])
        if re.fullmatch(r"profile-[0-9]+\.err", name):
            m = re.search(r"device cuda:[0-9]+ \((.*) \(cuda:[0-9]+\)\)", open(path).read())
            if m:
                return m.group(1)
    return "unknown"


def row(metric, ctx, value, unit, command):
    rows.append((metric, str(ctx), value, unit, commit, gpu, date, command))


def tsv(path):
    with open(path) as f:
        lines = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    head = lines[0]
    return [dict(zip(head, l)) for l in lines[1:]]


gpu = card()


def abab_cmd(ctx):
    return ("x4-bench-abab -m FULL --device cuda:0 -a '' -b '' --prompt-tokens %d -n 64 "
            "--pairs 2 --warmup 1" % ctx)


def run_cmd(j):
    n = j["prompt_tokens"]
    return ("x4-run -m FULL --device cuda:0 -f %d-word-prompt -n %d --ignore-eos --max-model-len %d"
            % (n, j.get("generated_tokens", 64), j.get("max_ctx", n + 64)))


def prefill_rows():
    for ctx in (512, 4096):
        p = os.path.join(d, "decode-%d.tsv" % ctx)
        if not os.path.exists(p):
            continue
        arms = [r for r in tsv(p) if r["kind"] == "arm"]
        rate = sum(float(r["prefill_tok_s"]) for r in arms) / len(arms)
        row("prefill_tok_s", ctx, "%.1f" % rate, "tok/s", abab_cmd(ctx))
    runs = []
    for name in sorted(os.listdir(d)):
        if name == "decode-32768.json" or re.fullmatch(r"long-[0-9]+\.json", name):
            try:
                runs.append(json.load(open(os.path.join(d, name))))
            except ValueError:
                continue
    runs.sort(key=lambda j: j["prompt_tokens"])
    longest = None
    for j in runs:
        cmd = run_cmd(j)
        if j.get("prefill_tok_s"):
            row("prefill_tok_s", j["prompt_tokens"], "%.1f" % j["prefill_tok_s"], "tok/s", cmd)
        if j.get("decode_tok_s"):
            row("decode_tok_s", j["prompt_tokens"], "%.1f" % j["decode_tok_s"], "tok/s", cmd)
            longest = j
        if j.get("first_step_ms"):
            row("first_step_ms", j["prompt_tokens"], "%.3f" % j["first_step_ms"], "ms", cmd)
    if longest:
        n = longest["prompt_tokens"] + longest.get("generated_tokens", 0)
        row("max_context", n, "%d" % n, "positions", run_cmd(longest) +
            " (the longest run that prefilled and decoded)")


def decode_rows():
    for ctx in (512, 4096):
        p = os.path.join(d, "decode-%d.tsv" % ctx)
        if not os.path.exists(p):
            continue
        t = tsv(p)
        arms = [r for r in t if r["kind"] == "arm"]
        ms = sum(float(r["decode_ms_tok"]) for r in arms) / len(arms)
        cmd = ("x4-bench-abab -m FULL --device cuda:0 -a '' -b '' --prompt-tokens %d -n 64 "
               "--pairs 2 --warmup 1" % ctx)
        row("decode_tok_s", ctx, "%.1f" % (1000.0 / ms), "tok/s", cmd)
        firsts = sorted(float(r["first_step_ms"]) for r in t if r["kind"] == "run")
        row("first_step_ms", ctx, "%.3f" % firsts[len(firsts) // 2], "ms", cmd + " (median first step)")
    p = os.path.join(d, "decode-32768.json")
    if os.path.exists(p):
        j = json.load(open(p))
        cmd = "x4-run -m FULL --device cuda:0 -f 32k-prompt -n 64 --ignore-eos --max-model-len 32832"
        if j.get("decode_tok_s"):
            row("decode_tok_s", j["prompt_tokens"], "%.1f" % j["decode_tok_s"], "tok/s", cmd)
        if j.get("first_step_ms"):
            row("first_step_ms", j["prompt_tokens"], "%.3f" % j["first_step_ms"], "ms", cmd)

    WEIGHT_CLASSES = {"routed_experts": "experts", "shared_expert": "shared_expert",
                      "dense_ffn": "dense_ffn", "head_pick": "head"}
    for ctx in (512, 4096, 32500):
        p = os.path.join(d, "profile-%d.tsv" % ctx)
        if not os.path.exists(p):
            continue
        err = open(os.path.join(d, "profile-%d.err" % ctx)).read()
        m = re.search(r"read ceiling ([0-9.]+) GB/s", err)
        ceiling = float(m.group(1)) if m else float("nan")
        t = tsv(p)
        cmd = "x4-profile -m FULL --device cuda:0 --context %d --steps 16%s%s" % (
            ctx, popts, " --max-model-len 32832" if ctx > 4096 else "")
        step = {r["name"]: r for r in t if r["section"] == "step"}
        row("kernels_per_step", ctx, "%d" % float(step["kernels"]["launches_step"]), "kernels", cmd)
        kern = [r for r in t if r["section"] == "kernel"]
        # the gate's launches on the step's chain: hc_coef_kernel, the
        # coefficients' Sinkhorn, runs on a side stream beside the sublayer
        hc = sum(float(r["us_step"]) for r in kern if r["class"] == "hc_gate"
                 and not r["name"].startswith("hc_coef_kernel"))
        row("hc_gate_us", ctx, "%.2f" % (hc / 80), "us",
            cmd + " (hc_gate class but the side stream's hc_coef_kernel / 80 sublayers)")
        attk = [r for r in kern if r["class"] == "attention"
                and re.search(r"mla_attn|mla_combine|mla_decode|mla_mma_kernel|attend", r["name"])]
        att = sum(float(r["us_step"]) for r in attk)
        row("attn_layer_us", ctx, "%.2f" % (att / 40), "us", cmd + " (decode attention kernels / 40 layers)")
        # the cache's stream: the latent cache rows the attention reads (the
        # profile's bytes of its operation) over its kernels' time
        cb = sum(float(r["bytes_step"]) for r in attk if r["bytes_step"] not in ("", "NA"))
        if cb > 0 and att > 0:
            gbps = cb / (att * 1e-6) / 1e9
            row("stream_pct_of_ceiling_kv_cache", ctx, "%.1f" % (100 * gbps / ceiling), "%",
                cmd + " (%.0f GB/s of %.0f: the cache rows over the attention's kernels)" % (gbps, ceiling))
        fam = {}
        for r in kern:
            if r["bytes_step"] in ("", "0", "NA"):
                continue
            f = WEIGHT_CLASSES.get(r["class"])
            if r["class"] == "attention" and re.search(r"gemv|bmv", r["name"]):
                f = "attention"
            if not f:
                continue
            b, us = fam.get(f, (0.0, 0.0))
            fam[f] = (b + float(r["bytes_step"]), us + float(r["us_step"]))
        for f, (b, us) in sorted(fam.items()):
            gbps = b / (us * 1e-6) / 1e9
            row("stream_pct_of_ceiling_" + f, ctx, "%.1f" % (100 * gbps / ceiling), "%",
                cmd + " (%.0f GB/s of %.0f)" % (gbps, ceiling))



if prefill_mode:
    prefill_rows()
else:
    decode_rows()
print("metric\tcontext\tvalue\tunit\tcommit\tgpu\tdate\tcommand")
for r in rows:
    print("\t".join(r))
