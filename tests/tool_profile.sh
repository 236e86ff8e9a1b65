#!/usr/bin/env bash
# tool_profile.sh - run bin/x4-profile on the CPU trunk of the tiny preset and
# check its tables, its JSON, its trace and its exit codes.  Run from the
# tree's root (tests/run.sh does).  The GPU side is tests/gpu_profile.sh.
set -u
cd "$(dirname "$0")/.." || exit 2
PROF=bin/x4-profile
MODEL=build/models/tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. tests/t.sh

if [ ! -x "$PROF" ] || [ ! -d "$MODEL" ]; then
	fail tool_profile.setup "$PROF or $MODEL missing: run make"
	exit 1
fi

# The tables: one header, then kernel, class and step rows.  --ceiling keeps
# the test from timing a 256 MiB read on a shared machine.
STEPS=3
"$PROF" -m "$MODEL" --context 24 --steps $STEPS --ceiling 10 --trace "$tmp/t.json" \
	>"$tmp/out" 2>"$tmp/err"; rc=$?
check profile.cpu.exit $((rc != 0)) "exit $rc: $(head -c 400 "$tmp/err")"
msg=$(python3 - "$tmp/out" "$STEPS" <<'EOF' 2>&1
import sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "no final newline"
lines = lines[:-1]
want = ["section", "name", "class", "launches_step", "us_step", "share_pct", "min_us",
        "max_us", "bytes_step", "gbps", "ceiling_pct", "exposed_us", "floor_us", "over_floor_us"]
head = lines[0].split("\t")
assert head == want, ("header", head)
rows = [dict(zip(want, l.split("\t"))) for l in lines[1:]]
assert all(len(l.split("\t")) == len(want) for l in lines[1:]), "a row of another width"
num = lambda v: None if v == "NA" else float(v)
sec = {}
for r in rows:
    sec.setdefault(r["section"], []).append(r)
assert set(sec) == {"kernel", "class", "step"}, sorted(sec)
for s in ("kernel", "class"):
    tot = sum(num(r["share_pct"]) for r in sec[s])
    assert abs(tot - 100) < 0.5, (s, "shares sum to", tot)
    for r in sec[s]:
        assert num(r["us_step"]) >= 0 and num(r["launches_step"]) > 0, r
        assert num(r["min_us"]) <= num(r["max_us"]), r
# Every class of the tiny preset's step (2 dense blocks, 3 MoE blocks with a
# shared expert) has time, and nothing is left unclaimed.
classes = {r["name"] for r in sec["class"]}
need = {"hc_gate", "sublayer_norm", "attention", "moe_router", "routed_experts",
        "shared_expert", "dense_ffn", "head_pick", "embed"}
assert need <= classes, ("classes", sorted(classes))
assert "other" not in classes, "an unclaimed operation"
st = {r["name"]: r for r in sec["step"]}
for n in ("kernels", "enqueued", "pdl_edges", "full_edges", "unattributed", "outside_step",
          "device_busy", "gaps", "step_wall", "host_submit", "unprofiled_step", "overhead"):
    assert n in st, ("no step row", n)
# no graphs on the CPU: the graph's edges are not known
assert st["pdl_edges"]["launches_step"] == "NA" == st["full_edges"]["launches_step"], st["pdl_edges"]
k, q = num(st["kernels"]["launches_step"]), num(st["enqueued"]["launches_step"])
assert k == q and k > 50, ("kernels", k, "enqueued", q)
assert num(st["unattributed"]["launches_step"]) == 0, st["unattributed"]
wall, busy = num(st["step_wall"]["us_step"]), num(st["device_busy"]["us_step"])
assert 0 < busy <= wall, ("busy", busy, "wall", wall)
assert num(st["unprofiled_step"]["us_step"]) > 0, st["unprofiled_step"]
# The routed experts' bytes are known on the CPU (its routes are on the host).
kb = {(r["name"], r["class"]): num(r["bytes_step"]) for r in sec["kernel"]}
assert kb[("head_logits", "head_pick")] > 0, kb
assert kb[("moe_experts_gate_up", "routed_experts")] > 0, kb
# The CPU's operations run one after another, so each row's exposed time is
# all its time, and the kernel rows' exposed times make up the busy time.
for s in ("kernel", "class"):
    for r in sec[s]:
        assert abs(num(r["exposed_us"]) - num(r["us_step"])) <= 0.002, ("exposed", r)
exp = sum(num(r["exposed_us"]) for r in sec["kernel"])
assert abs(exp - busy) <= 0.005 * busy, ("exposed sum", exp, "device_busy", busy)
assert all(r["exposed_us"] == "NA" for r in sec["step"]), "a step row with exposed_us"
# --ceiling 10: the share of the ceiling is the rate over 10 GB/s.
for r in sec["kernel"]:
    b, us, g, c = num(r["bytes_step"]), num(r["us_step"]), num(r["gbps"]), num(r["ceiling_pct"])
    assert (g is None) == (c is None) == (not b), r
    assert g is None or abs(c - 100 * b / us / 1e3 / 10) < 0.06, r
# floor_us: the row's bytes at 10 GB/s; over_floor_us: its exposed time (a
# step row's own time) past that; NA where a row has neither.
for s in ("kernel", "class"):
    for r in sec[s]:
        b, f, o, e = num(r["bytes_step"]), num(r["floor_us"]), num(r["over_floor_us"]), num(r["exposed_us"])
        assert f is not None and abs(f - b / 10 / 1e3) <= 0.002, ("floor", r)
        assert o is not None and abs(o - (e - f)) <= 0.003, ("over", r)
st = {r["name"]: r for r in sec["step"]}
for n in ("device_busy", "step_wall", "unprofiled_step"):
    r = st[n]
    b, f, o, us = num(r["bytes_step"]), num(r["floor_us"]), num(r["over_floor_us"]), num(r["us_step"])
    assert abs(f - b / 10 / 1e3) <= 0.002 and abs(o - (us - f)) <= 0.003, ("step floor", r)
assert st["kernels"]["over_floor_us"] == "NA" and st["gaps"]["floor_us"] == "NA", "step floors"
print("ok")
EOF
)
check profile.cpu.tables "$([ "$msg" = ok ]; echo $?)" "$msg"
grep -qx '# profiled run: not a speed' "$tmp/err"
check profile.cpu.says_profiled $? "stderr: $(head -c 300 "$tmp/err")"
n_other=$(grep -vc '^\(# \|x4-profile: \)' "$tmp/err")
check profile.cpu.stderr_form $((n_other != 0)) "other lines: $(grep -v '^\(# \|x4-profile: \)' "$tmp/err" | head -3)"

# The trace: JSON, N steps, every operation inside its step.
msg=$(python3 - "$tmp/t.json" "$STEPS" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert d["otherData"]["profiled"] is True, d["otherData"]
ev = d["traceEvents"]
steps = sorted((e for e in ev if e.get("cat") == "step"), key=lambda e: e["args"]["step"])
assert [s["args"]["step"] for s in steps] == list(range(n)), [s["args"] for s in steps]
ops = [e for e in ev if e.get("cat") == "kernel"]
for s in steps:
    mine = [e for e in ops if e["args"]["step"] == s["args"]["step"]]
    assert len(mine) == s["args"]["kernels"] == s["args"]["enqueued"], (len(mine), s["args"])
    for e in mine:
        assert e["ts"] >= s["ts"] - 0.002 and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 0.002, (e, s)
print("ok")
EOF
)
check profile.cpu.trace "$([ "$msg" = ok ]; echo $?)" "$msg"
ls "$tmp"/t.json.tmp.* >/dev/null 2>&1
check profile.cpu.trace_no_temp $((! $?)) "a temporary file is left beside the trace"

# A gzip trace through zlib.
"$PROF" -m "$MODEL" --context 8 --steps 2 --ceiling 10 --trace "$tmp/t.json.gz" \
	>/dev/null 2>"$tmp/err"; rc=$?
msg=$(python3 -c 'import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
n = sum(1 for e in d["traceEvents"] if e.get("cat") == "step")
assert n == 2, n
print("ok")' "$tmp/t.json.gz" 2>&1)
check profile.cpu.trace_gz "$([ "$rc" = 0 ] && [ "$msg" = ok ]; echo $?)" "exit $rc: $msg $(head -c 200 "$tmp/err")"

# --json: one object a line, each saying it is profiled; stderr empty.
"$PROF" -m "$MODEL" --context 8 --steps 2 --ceiling 10 --json >"$tmp/j" 2>"$tmp/err"; rc=$?
msg=$(python3 -c 'import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
assert objs[0]["section"] == "run" and objs[0]["note"] == "profiled run: not a speed", objs[0]
assert objs[-1]["section"] == "summary", objs[-1]
assert all(o["profiled"] is True for o in objs), "a line without profiled"
s = objs[-1]
assert s["kernels_total"] == s["enqueued_total"] and s["mismatched_steps"] == 0, s
assert s["steps"] == 2 and s["tokens_step"] == 1, s
assert s["graphed_steps"] == 0 and s["pdl_edges_step"] is None and s["full_edges_step"] is None, s
print("ok")' "$tmp/j" 2>&1)
check profile.cpu.json "$([ "$rc" = 0 ] && [ "$msg" = ok ]; echo $?)" "exit $rc: $msg"
check profile.cpu.json_stderr_empty $(( $(wc -c <"$tmp/err") != 0 )) "stderr: $(head -c 300 "$tmp/err")"

# --prefill: the prefill of a prompt, whole, is the step.
"$PROF" -m "$MODEL" --prefill 40 --steps 2 --ceiling 10 --json >"$tmp/j" 2>"$tmp/err"; rc=$?
msg=$(python3 -c 'import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
s = objs[-1]
assert s["tokens_step"] == 40 and s["pos"] == 0 and s["kernels_total"] == s["enqueued_total"], s
assert objs[0]["mode"] == "prefill", objs[0]
print("ok")' "$tmp/j" 2>&1)
check profile.cpu.prefill "$([ "$rc" = 0 ] && [ "$msg" = ok ]; echo $?)" "exit $rc: $msg $(head -c 200 "$tmp/err")"

# The measured ceiling (no --ceiling) is a positive figure, said on stderr.
"$PROF" -m "$MODEL" --context 4 --steps 1 >/dev/null 2>"$tmp/err"; rc=$?
grep -q '^x4-profile: read ceiling [0-9.]* GB/s (a read of 256 MiB' "$tmp/err"
check profile.cpu.ceiling_measured $((rc != 0 || $? != 0)) "exit $rc: $(head -c 400 "$tmp/err")"

# Usage errors: exit 2, one message on stderr.
for args in "--steps 0" "--steps x" "-n 1.5" "--context -1" "--context 0" "--prefill 0" \
	"--device gpu" "--graph maybe" "--hc lazy" "--sublayer f8" "--resid f8" "--prec f16" \
	"--kv-cache f8" "--ceiling abc" "--ceiling 0" "--ceiling -5" "--gpu-memory 12X" \
	"--top-p 2" "-s -1" "--no-such-flag" "extra-arg" "--trace"; do
	# shellcheck disable=SC2086
	"$PROF" $args </dev/null >"$tmp/out" 2>"$tmp/err"; rc=$?
	check "profile.usage[$args]" $((rc != 2 || $(wc -c <"$tmp/err") == 0 || $(wc -c <"$tmp/out") != 0)) \
		"exit $rc, stderr '$(head -c 200 "$tmp/err")'"
done
"$PROF" -h >"$tmp/out" 2>&1; rc=$?
grep -q '^usage: x4-profile' "$tmp/out"
check profile.help $((rc != 0 || $? != 0)) "exit $rc"
"$PROF" --version >"$tmp/out" 2>&1; rc=$?
grep -q 'commit .*CUDA runtime' "$tmp/out"
check profile.version $((rc != 0 || $? != 0)) "exit $rc: $(cat "$tmp/out")"

# Runtime failures: exit 1 with the cause named.
"$PROF" -m "$tmp/no/such/model" >/dev/null 2>"$tmp/err"; rc=$?
grep -q "$tmp/no/such/model" "$tmp/err"
check profile.missing_model $((rc != 1 || $? != 0)) "exit $rc: $(head -c 300 "$tmp/err")"
"$PROF" -m "$MODEL" --context 100 --steps 10 --max-model-len 50 >/dev/null 2>"$tmp/err"; rc=$?
grep -q 'max-model-len' "$tmp/err"
check profile.max_model_len $((rc != 1 || $? != 0)) "exit $rc: $(head -c 300 "$tmp/err")"
# A GPU asked of a machine without one (or a build without CUDA or CUPTI):
# a clear refusal, exit 1.
"$PROF" -m "$MODEL" --device cuda:0 --context 4 --steps 1 >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" -eq 0 ]; then
	pass profile.cuda_refused # a machine with a GPU: tests/gpu_profile.sh covers it
else
	grep -q '^x4-profile: .*\(CUDA\|CUPTI\|cuda:0\)' "$tmp/err"
	check profile.cuda_refused $((rc != 1 || $? != 0)) "exit $rc: $(head -c 300 "$tmp/err")"
fi

# SIGINT, SIGTERM and SIGHUP: exit 128+N, no trace and no temporary file left.
for sig in INT TERM HUP; do
	"$PROF" -m "$MODEL" --prefill 64 --steps 100000 --ceiling 10 --trace "$tmp/s.json" \
		>/dev/null 2>"$tmp/err" &
	pid=$!
	sleep 1.5
	kill -s "$sig" "$pid"
	wait "$pid"; rc=$?
	want=$((128 + $(kill -l "$sig")))
	left=$(ls "$tmp"/s.json* 2>/dev/null | wc -l)
	check "profile.signal[$sig]" $((rc != want || left != 0)) "exit $rc (want $want), $left files left"
done

exit 0
