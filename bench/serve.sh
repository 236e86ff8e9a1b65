#!/usr/bin/env bash
# serve.sh - x4-serve against x4-run on one model and device: the time to the
# first token and the decode rate a stock OpenAI client sees through the
# endpoint, and what x4-run reports for the same prompt, interleaved.
#   bash bench/serve.sh MODEL [DEV] [ROUNDS] [N]
# MODEL: a .gguf or its folder; DEV: cuda:0 (default) or cpu; ROUNDS: 3 (0: the
# closing chat only); N: tokens generated (128).  Prompts of about 512 and 4,096 tokens (PROMPTS:
# words in each, default "500 4000").  Each round gives x4-run and the server
# a prompt that shares no prefix with any before it (the store misses), then
# the server the same prompt again (the store hits).  A round whose token
# counts differ is voided.  TSV on stdout: one row per run, then medians.
# decode_tok_s is the whole decode (the tokens after the first over the time
# from the first to the last, the first step after the prefill in it);
# steady_tok_s one over the median step, which is x4-run's decode_tok_s.
# CTX: positions the cache holds (8192).  Needs bin/x4-serve, bin/x4-run and python3 with the openai package (PY,
# default build/venv/bin/python).
set -u
cd "$(dirname "$0")/.." || exit 2
MODEL=${1:?usage: bench/serve.sh MODEL [DEV] [ROUNDS] [N]}
DEV=${2:-cuda:0} ROUNDS=${3:-3} N=${4:-128}
PY=${PY:-build/venv/bin/python}
CTX=${CTX:-8192}
tmp=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for b in bin/x4-serve bin/x4-run; do
	[ -x "$b" ] || { echo "serve.sh: $b is not built (make)" >&2; exit 2; }
done
"$PY" -c 'import openai' 2>/dev/null || { echo "serve.sh: no openai package in $PY (make venv)" >&2; exit 2; }
bin/x4-serve -m "$MODEL" --device "$DEV" --port 0 --max-model-len $CTX --quiet 2>"$tmp/serve.err" &
spid=$!
url=
for _ in $(seq 600); do
	url=$(grep -o 'http://[^ ]*' "$tmp/serve.err" | head -n 1)
	[ -n "$url" ] && break
	kill -0 "$spid" 2>/dev/null || { echo "serve.sh: x4-serve exited: $(tail -n 2 "$tmp/serve.err")" >&2; exit 1; }
	sleep 0.5
done
[ -n "$url" ] || { echo "serve.sh: x4-serve did not listen in 300 s" >&2; exit 1; }
name=$(curl -s "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
printf 'arm\tround\twords\tprompt_tokens\tgenerated\tttft_ms\tdecode_tok_s\tsteady_tok_s\tsame_text\n'
for r in $(seq "$ROUNDS"); do
	for w in ${PROMPTS:-500 4000}; do
		# A first word of its own per round and size: no prefix shared with earlier prompts.
		python3 -c 'import sys; sys.stdout.write("round%s-%s " % (sys.argv[1], sys.argv[2]) + " ".join(["word"] * int(sys.argv[2])))' "$r" "$w" >"$tmp/p.txt"
		bin/x4-run -m "$MODEL" --device "$DEV" -f "$tmp/p.txt" -n "$N" --ignore-eos --max-model-len $CTX \
			--json >"$tmp/run.json" 2>"$tmp/run.err" || { echo "serve.sh: x4-run failed: $(tail -n 2 "$tmp/run.err")" >&2; exit 1; }
		for arm in serve-miss serve-hit; do
			"$PY" bench/serve_bench.py "$url" "$name" "$tmp/p.txt" "$N" >"$tmp/$arm.json" ||
				{ echo "serve.sh: the client failed" >&2; exit 1; }
		done
		python3 - "$r" "$w" "$tmp/run.json" "$tmp/serve-miss.json" "$tmp/serve-hit.json" <<'PY'
import json, sys
r, w = sys.argv[1], sys.argv[2]
run, miss, hit = (json.load(open(f)) for f in sys.argv[3:6])
# x4-run: its whole decode rate is the generated tokens after the first over
# its steps' sum; its steady rate, one over the median step after the first.
whole = (run["generated_tokens"] - 1) / (run["first_step_ms"] / 1e3 +
                                         (run["generated_tokens"] - 2) * run["decode_median_step_ms"] / 1e3)
rows = [("x4-run", run["prompt_tokens"], run["generated_tokens"], 1e3 * run["prefill_s"],
         whole, run["decode_tok_s"], "-")]
for arm, j in (("serve-miss", miss), ("serve-hit", hit)):
    rows.append((arm, j["prompt_tokens"], j["completion_tokens"], 1e3 * j["ttft_s"],
                 j["decode_tok_s"], j["steady_tok_s"], "yes" if j["text"] == run["text"] else "no"))
void = len({x[2] for x in rows}) != 1 or len({x[1] for x in rows}) != 1
for a, p, g, t, d, sd, s in rows:
    print("%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s%s" % (a, r, w, p, g, t, d, sd, s,
          "\tvoid" if void else ""))
PY
	done
done >"$tmp/rows.tsv"
cat "$tmp/rows.tsv"
python3 - "$tmp/rows.tsv" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
kept = [x for x in rows if len(x) == 9]
print("median\tarm\twords\tprompt_tokens\tttft_ms\tdecode_tok_s\tsteady_tok_s\tsame_text\trounds")
for w in sorted({x[2] for x in kept}, key=int):
    for a in ("x4-run", "serve-miss", "serve-hit"):
        s = [x for x in kept if x[0] == a and x[2] == w]
        if s:
            med = lambda k: statistics.median(float(x[k]) for x in s)
            print("median\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%d" % (a, w, s[0][3], med(5), med(6),
                  med(7), ",".join(sorted({x[8] for x in s})), len(s)))
print("serve.sh: %d rows, %d voided (token counts differ)" % (len(rows), len(rows) - len(kept)),
      file=sys.stderr)
PY
# A chat, streamed by the same client: the issue's "done means".
echo "What is the capital of France? Answer in one word." >"$tmp/q.txt"
"$PY" bench/serve_bench.py "$url" "$name" "$tmp/q.txt" 64 chat >"$tmp/chat.json" ||
	{ echo "serve.sh: the chat client failed" >&2; exit 1; }
python3 - "$tmp/chat.json" <<'PY' >&2
import json, sys
j = json.load(open(sys.argv[1]))
print("serve.sh: chat streamed by openai: %d events, %s prompt and %s completion tokens, finish %s,"
      " TTFT %.1f ms, decode %.1f tok/s (steady %.1f), text %r" % (j["events"], j["prompt_tokens"],
      j["completion_tokens"], j["finish_reason"], 1e3 * j["ttft_s"], j["decode_tok_s"],
      j["steady_tok_s"], j["text"][:60]))
PY
curl -s "$url/metrics" | grep -E '^x4_(prefix_(hits|misses|reused_tokens)_total|requests_total|resident_bytes|cache_bytes) ' >&2
