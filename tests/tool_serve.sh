#!/usr/bin/env bash
# tool_serve.sh - bin/x4-serve on the tiny preset against real clients: curl,
# the openai package (tests/serve_client.py) and a fuzzed corpus
# (tests/serve_fuzz.py).  Run from the tree's root (tests/run.sh does).
#
#   tests/tool_serve.sh [MODEL [DEVICE]]   (default build/models/tiny cpu;
#                                           tests/gpu_serve.sh passes the
#                                           small preset and cuda:0)
#
# Every server listens on port 0 and the test reads the port it chose from
# its "listening on" line, so runs never collide.  Each server is stopped
# with SIGTERM and must exit 0 with no sanitizer report (under `make asan`
# LeakSanitizer checks that it freed everything).
set -u
cd "$(dirname "$0")/.." || exit 2
SERVE=bin/x4-serve
RUN=bin/x4-run
MODEL=${1:-build/models/tiny}
DEV=${2:-cpu}
PY=${PY:-build/venv/bin/python}
KEY=test-key-1
tmp=$(mktemp -d)
servers=()
cleanup() {
	for p in "${servers[@]+"${servers[@]}"}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

. tests/t.sh
# A value from the JSON in a file: a python expression over d.
jq_() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }

if [ ! -x "$SERVE" ]; then
	echo "SKIP serve: bin/x4-serve was not built (it needs libmicrohttpd and jansson:" \
		"apt-get install libmicrohttpd-dev libjansson-dev, then make)"
	exit 0
fi
if [ ! -x "$RUN" ] || [ ! -e "$MODEL" ]; then
	fail serve.setup "$RUN or $MODEL missing: run make"
	exit 1
fi

# start NAME ARGS...: a server in the background; sets PORT and URL, and
# PID_<NAME>.  Waits for its "listening on" line (a GPU load takes a while).
start() {
	local name=$1; shift
	"$SERVE" -m "$MODEL" --device "$DEV" --port 0 "$@" 2>"$tmp/$name.err" &
	local pid=$!
	servers+=("$pid")
	eval "PID_$name=$pid"
	local i
	for i in $(seq 1 1200); do
		PORT=$(sed -n 's|^x4-serve: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$tmp/$name.err")
		[ -n "$PORT" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	URL=http://127.0.0.1:$PORT
	[ -n "$PORT" ]
}
# stop NAME [SIGNAL]: the signal (TERM), then exit 0 and a clean stderr.
stop() {
	local name=$1 sig=${2:-TERM} pid
	eval "pid=\$PID_$name"
	kill -"$sig" "$pid"
	wait "$pid"; local rc=$?
	check "serve.$name.exit_0_on_SIG$sig" "$rc" "exit $rc: $(tail -n 5 "$tmp/$name.err")"
	grep -q 'Sanitizer\|runtime error:' "$tmp/$name.err"
	check "serve.$name.no_sanitizer_report" $((! $?)) "$(grep -m3 -A8 'Sanitizer\|runtime error:' "$tmp/$name.err")"
}
# req [curl args]: the status on stdout, the body in $tmp/out.
AUTH="Authorization: Bearer $KEY"
req() { curl -s -o "$tmp/out" -w '%{http_code}' -H "$AUTH" "$@"; }
J=(-H 'Content-Type: application/json')
# err_is NAME STATUS CURL-ARGS...: the status and an OpenAI error object.
err_is() {
	local name=$1 want=$2; shift 2
	local st
	st=$(req "$@")
	local ok
	ok=$(jq_ "$tmp/out" 'sorted(d["error"]) == ["code", "message", "param", "type"] and bool(d["error"]["message"])')
	check "bad.$name" $([ "$st" = "$want" ] && [ "$ok" = True ]; echo $?) \
		"status $st (want $want): $(head -c 300 "$tmp/out")"
}

# ---- the command line ----
for args in "--port x" "--port 70000" "--max-queue -1" "--max-body 0" "--timeout 0" \
	"--prefix-cache 1X" "--api-key=" "--no-such-flag" "extra"; do
	# shellcheck disable=SC2086
	"$SERVE" $args >"$tmp/o" 2>"$tmp/e"; rc=$?
	check "serve.usage[$args]" $((rc != 2 || $(wc -c <"$tmp/e") == 0)) "exit $rc: $(head -c 200 "$tmp/e")"
done
"$SERVE" -h >"$tmp/o" 2>&1; rc=$?
grep -q '^usage: x4-serve' "$tmp/o"; check serve.help $((rc != 0 || $? != 0)) "exit $rc"
"$SERVE" --version >"$tmp/o" 2>&1; rc=$?
grep -q 'commit .*CUDA runtime' "$tmp/o"; check serve.version $((rc != 0 || $? != 0)) "exit $rc"
"$SERVE" -m "$tmp/no/such" --port 0 >/dev/null 2>"$tmp/e"; rc=$?
grep -q "$tmp/no/such" "$tmp/e"; check serve.missing_model $((rc != 1 || $? != 0)) "exit $rc: $(head -c 200 "$tmp/e")"

# ---- one server for the API ----
if ! start main --api-key "$KEY" --max-model-len 256 --max-body 64K --timeout 3 --max-queue 1; then
	fail serve.start "no listening line: $(tail -n 5 "$tmp/main.err")"
	exit 1
fi
pass serve.start

# The address in use: exit 1 with a message.
"$SERVE" -m "$MODEL" --device "$DEV" --port "$PORT" >/dev/null 2>"$tmp/e"; rc=$?
check serve.port_in_use $((rc != 1)) "exit $rc: $(head -c 200 "$tmp/e")"

st=$(curl -s -o "$tmp/out" -w '%{http_code}' "$URL/health")
check serve.health $([ "$st" = 200 ] && grep -q '"ok"' "$tmp/out"; echo $?) "$st $(cat "$tmp/out")"
# /metrics without a key (only /v1/ needs it), published from the start.
st=$(curl -s -o "$tmp/m0" -w '%{http_code}' "$URL/metrics")
miss=""
for m in x4_resident_bytes x4_cache_bytes x4_context_positions process_resident_memory_bytes \
	x4_requests_total x4_prompt_tokens_total x4_generation_tokens_total \
	x4_prefill_tokens_per_second x4_decode_tokens_per_second x4_queue_depth \
	x4_cancellations_total x4_prefix_hits_total x4_prefix_misses_total \
	x4_prefix_reused_tokens_total x4_prefix_entries x4_prefix_bytes x4_prefix_budget_bytes; do
	grep -q "^$m [0-9.e+-]*$" "$tmp/m0" && grep -q "^# TYPE $m " "$tmp/m0" || miss="$miss $m"
done
check serve.metrics.published $([ "$st" = 200 ] && [ -z "$miss" ]; echo $?) "status $st, missing:$miss"
grep -q '^x4_context_positions 256$' "$tmp/m0"; check serve.metrics.context $? "$(grep context "$tmp/m0")"
st=$(req "$URL/v1/models")
name=$(jq_ "$tmp/out" 'd["data"][0]["id"]')
gguf=$(basename "$(ls "$MODEL"/*.gguf 2>/dev/null || echo "$MODEL")" .gguf)
check serve.models $([ "$st" = 200 ] && [ "$name" = "$gguf" ]; echo $?) "$st $(cat "$tmp/out"), want $gguf"

# ---- whole and streamed, against x4-run ----
q="Tell me a story about a cat."
"$RUN" -m "$MODEL" --device "$DEV" --max-model-len 256 --chat -p "$q" -n 16 --ignore-eos --json \
	>"$tmp/run_chat.json" 2>/dev/null
body=$(python3 -c 'import json,sys; print(json.dumps({"model":sys.argv[1],"messages":[{"role":"user","content":sys.argv[2]}],"max_tokens":16,"temperature":0,"ignore_eos":True}))' "$name" "$q")
st=$(req "${J[@]}" -d "$body" "$URL/v1/chat/completions"); cp "$tmp/out" "$tmp/chat.json"
check chat.whole.status $([ "$st" = 200 ]; echo $?) "$st $(head -c 300 "$tmp/out")"
a=$(jq_ "$tmp/chat.json" 'd["x4"]["token_ids"]'); b=$(jq_ "$tmp/run_chat.json" 'd["tokens"]')
check chat.greedy_ids_as_x4_run $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) "serve $a, x4-run $b"
a=$(jq_ "$tmp/chat.json" 'repr(d["choices"][0]["message"]["content"])'); b=$(jq_ "$tmp/run_chat.json" 'repr(d["text"])')
check chat.greedy_text_as_x4_run $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) "serve $a, x4-run $b"
a=$(jq_ "$tmp/chat.json" '(d["usage"]["prompt_tokens"], d["usage"]["completion_tokens"], d["usage"]["total_tokens"], d["choices"][0]["finish_reason"], d["object"])')
b=$(jq_ "$tmp/run_chat.json" '(d["prompt_tokens"], 16, d["prompt_tokens"] + 16, "length", "chat.completion")')
check chat.usage $([ "$a" = "$b" ]; echo $?) "$a, want $b"

"$RUN" -m "$MODEL" --device "$DEV" --max-model-len 256 -p "Once upon a time" -n 12 --ignore-eos --json \
	>"$tmp/run_cmpl.json" 2>/dev/null
st=$(req "${J[@]}" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true}' "$URL/v1/completions")
cp "$tmp/out" "$tmp/cmpl.json"
a=$(jq_ "$tmp/cmpl.json" '(d["x4"]["token_ids"], d["choices"][0]["text"], d["usage"]["prompt_tokens"])')
b=$(jq_ "$tmp/run_cmpl.json" '(d["tokens"], d["text"], d["prompt_tokens"])')
check completion.greedy_as_x4_run $([ "$st" = 200 ] && [ -n "$a" ] && [ "$a" = "$b" ]; echo $?) "$st: serve $a, x4-run $b"
# A prompt of token ids is the same request.
ids=$("$RUN" -m "$MODEL" --tokenize -p "Once upon a time" 2>/dev/null)
st=$(req "${J[@]}" -d "{\"prompt\":[$ids],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}" "$URL/v1/completions")
a=$(jq_ "$tmp/out" 'd["x4"]["token_ids"]'); b=$(jq_ "$tmp/run_cmpl.json" 'd["tokens"]')
check completion.token_id_prompt $([ "$st" = 200 ] && [ "$a" = "$b" ]; echo $?) "$st: $a vs $b"

# Streamed: data: lines, the role first, one event a token, the finish, usage, [DONE].
chat_body=$body
body=${body%\}},\"stream\":true,\"stream_options\":{\"include_usage\":true}}
curl -sN -H "Authorization: Bearer $KEY" "${J[@]}" -d "$body" "$URL/v1/chat/completions" >"$tmp/sse"
msg=$(python3 - "$tmp/sse" "$tmp/chat.json" <<'EOF'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
whole = json.load(open(sys.argv[2]))
events = raw.split("\n\n")
assert events[-1] == "", "the stream does not end with a blank line"
events = events[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events), "not one data: line an event"
assert events[-1] == "data: [DONE]", events[-1]
ch = [json.loads(e[6:]) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" and c["id"] == ch[0]["id"] for c in ch)
assert ch[0]["choices"][0]["delta"].get("role") == "assistant", ch[0]
content = [c["choices"][0]["delta"]["content"] for c in ch[1:] if c["choices"] and "content" in c["choices"][0]["delta"]]
assert "".join(content) == whole["choices"][0]["message"]["content"], ("".join(content), whole)
assert 0 < len(content) <= 16, "%d content events for 16 tokens" % len(content)
fin = [c for c in ch if c["choices"] and c["choices"][0]["finish_reason"]]
assert len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] == "length", fin
assert ch[-1]["choices"] == [] and ch[-1]["usage"] == whole["usage"], ch[-1]
assert all(c["usage"] is None for c in ch[:-1])
print("ok")
EOF
)
check chat.stream.sse $([ "$msg" = ok ]; echo $?) "$msg"
curl -sN -H "Authorization: Bearer $KEY" "${J[@]}" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true,"stream":true}' "$URL/v1/completions" >"$tmp/sse"
msg=$(python3 - "$tmp/sse" "$tmp/cmpl.json" <<'EOF'
import json, sys
ev = [e for e in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if e]
assert ev[-1] == "data: [DONE]", ev[-1]
ch = [json.loads(e[6:]) for e in ev[:-1]]
assert all(c["object"] == "text_completion" for c in ch)
text = "".join(c["choices"][0]["text"] for c in ch)
assert text == json.load(open(sys.argv[2]))["choices"][0]["text"], text
assert ch[-1]["choices"][0]["finish_reason"] == "length" and "usage" not in ch[-1]
assert all(c["choices"][0]["finish_reason"] is None for c in ch[:-1])
print("ok")
EOF
)
check completion.stream.sse $([ "$msg" = ok ]; echo $?) "$msg"
grep -qi '^content-type: text/event-stream' <(curl -sN -D - -o /dev/null -H "Authorization: Bearer $KEY" "${J[@]}" \
	-d '{"prompt":"Hi","max_tokens":1,"stream":true}' "$URL/v1/completions")
check completion.stream.content_type $? "no text/event-stream"

# stop: the text ends before the first match, finish_reason stop, whole or streamed.
stop=$(jq_ "$tmp/cmpl.json" 'd["choices"][0]["text"][6:10]')
sbody=$(python3 -c 'import json,sys; print(json.dumps({"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":True,"stop":["zzzz-never", sys.argv[1]]}))' "$stop")
req "${J[@]}" -d "$sbody" "$URL/v1/completions" >/dev/null; cp "$tmp/out" "$tmp/stop.json"
curl -sN -H "Authorization: Bearer $KEY" "${J[@]}" -d "${sbody%\}},\"stream\":true}" "$URL/v1/completions" >"$tmp/sse"
msg=$(python3 - "$tmp/cmpl.json" "$tmp/stop.json" "$tmp/sse" "$stop" <<'EOF2'
import json, sys
full = json.load(open(sys.argv[1]))["choices"][0]["text"]
stop = sys.argv[4]
want = full[:full.index(stop)]
got = json.load(open(sys.argv[2]))["choices"][0]
assert (got["text"], got["finish_reason"]) == (want, "stop"), ("whole", got, want)
ch = [json.loads(e[6:]) for e in open(sys.argv[3]).read().split("\n\n") if e.startswith("data: {")]
text = "".join(c["choices"][0]["text"] for c in ch)
assert (text, ch[-1]["choices"][0]["finish_reason"]) == (want, "stop"), ("stream", text, want)
print("ok")
EOF2
)
check completion.stop "$([ "$msg" = ok ]; echo $?)" "stop '$stop': $msg"

# ---- the prefix store: a repeat restores all but the last prompt token ----
curl -s "$URL/metrics" >"$tmp/p0"
st=$(req "${J[@]}" -d "$chat_body" "$URL/v1/chat/completions"); cp "$tmp/out" "$tmp/chat2.json"
curl -s "$URL/metrics" >"$tmp/p1"
# On the CPU a restored prompt answers bit for bit as a fresh one; on a GPU
# the one token forwarded runs another kernel than the whole prefill did
# (docs/serving.md, "The prefix store"), so only the counts are checked there.
msg=$(python3 - "$tmp/chat.json" "$tmp/chat2.json" "$tmp/p0" "$tmp/p1" "$DEV" <<'EOF2'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
m = [dict(l.rsplit(" ", 1) for l in open(f) if l[0] != "#") for f in sys.argv[3:5]]
d = lambda k: float(m[1][k]) - float(m[0][k])
n = b["usage"]["prompt_tokens"]
assert b["x4"]["reused_tokens"] == n - 1, ("reused", b["x4"]["reused_tokens"], n)
assert sys.argv[5] != "cpu" or b["x4"]["token_ids"] == a["x4"]["token_ids"], \
    "the restored prompt answered otherwise"
assert d("x4_prefix_hits_total") == 1 and d("x4_prefix_misses_total") == 0, "hits/misses"
assert d("x4_prefix_reused_tokens_total") == n - 1, ("reused_tokens_total", d("x4_prefix_reused_tokens_total"))
assert float(m[1]["x4_prefix_entries"]) >= 1 and float(m[1]["x4_prefix_bytes"]) > 0
assert float(m[1]["x4_prefix_budget_bytes"]) == 2**30 and m[1]["x4_prefix_enabled"] == "1\n"
print("ok")
EOF2
)
check prefix.repeat_reused "$([ "$st" = 200 ] && [ "$msg" = ok ]; echo $?)" "$st: $msg"
# A chat's second turn: the template renders the first answer unlike the
# generation prompt (<_bot></think>ANSWER, not <_bot><think>\n), so what is
# reused is the first turn's prompt but for its last two ids.
t2=$(python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"user","content":sys.argv[1]},{"role":"assistant","content":"Paris."},{"role":"user","content":"And Japan?"}],"max_tokens":2,"temperature":0}))' "$q")
st=$(req "${J[@]}" -d "$t2" "$URL/v1/chat/completions")
a=$(jq_ "$tmp/out" 'd["x4"]["reused_tokens"]'); b=$(jq_ "$tmp/chat.json" 'd["usage"]["prompt_tokens"] - 2')
check prefix.second_turn "$([ "$st" = 200 ] && [ "$a" = "$b" ]; echo $?)" "$st: reused $a, want $b"

# ---- the openai client ----
if "$PY" -c 'import openai' 2>/dev/null; then
	"$PY" tests/serve_client.py openai "$URL" "$KEY" "$name"
else
	fail serve.openai "no openai package in $PY: run make venv (tests/requirements.txt)"
fi

# ---- bad and hostile input: each its status and an error object ----
AUTH="X-No-Key: 1" err_is no_key 401 "${J[@]}" -d '{"prompt":"x"}' "$URL/v1/completions"
AUTH="Authorization: Bearer nope" err_is wrong_key 401 "${J[@]}" -d '{"prompt":"x"}' "$URL/v1/completions"
AUTH="Authorization: nope $KEY" err_is not_bearer 401 "${J[@]}" -d '{"prompt":"x"}' "$URL/v1/completions"
AUTH="X-No-Key: 1" err_is models_no_key 401 "$URL/v1/models"
err_is malformed_json 400 "${J[@]}" -d '{"prompt": "x",' "$URL/v1/completions"
err_is not_an_object 400 "${J[@]}" -d '[1,2]' "$URL/v1/completions"
err_is no_messages 400 "${J[@]}" -d '{"max_tokens":2}' "$URL/v1/chat/completions"
err_is no_prompt 400 "${J[@]}" -d '{"max_tokens":2}' "$URL/v1/completions"
err_is content_type 415 -d '{"prompt":"x"}' "$URL/v1/completions"
err_is content_type_text 415 -H 'Content-Type: text/plain' -d '{"prompt":"x"}' "$URL/v1/completions"
err_is max_tokens_0 422 "${J[@]}" -d '{"prompt":"x","max_tokens":0}' "$URL/v1/completions"
err_is max_tokens_huge 422 "${J[@]}" -d '{"prompt":"x","max_tokens":99999999999}' "$URL/v1/completions"
err_is max_tokens_string 422 "${J[@]}" -d '{"prompt":"x","max_tokens":"5"}' "$URL/v1/completions"
err_is temperature 422 "${J[@]}" -d '{"prompt":"x","temperature":7}' "$URL/v1/completions"
err_is top_p 422 "${J[@]}" -d '{"prompt":"x","top_p":0}' "$URL/v1/completions"
err_is stop_five 422 "${J[@]}" -d '{"prompt":"x","stop":["a","b","c","d","e"]}' "$URL/v1/completions"
err_is role 422 "${J[@]}" -d '{"messages":[{"role":"wizard","content":"x"}]}' "$URL/v1/chat/completions"
err_is n_2 422 "${J[@]}" -d '{"prompt":"x","n":2}' "$URL/v1/completions"
err_is token_id_out_of_vocab 422 "${J[@]}" -d '{"prompt":[1,99999999]}' "$URL/v1/completions"
err_is empty_prompt 422 "${J[@]}" -d '{"prompt":""}' "$URL/v1/completions"
long=$(python3 -c 'print("word " * 400)')
err_is prompt_over_context 400 "${J[@]}" -d "{\"prompt\":\"$long\"}" "$URL/v1/completions"
grep -q context_length_exceeded "$tmp/out"; check bad.prompt_over_context.code $? "$(head -c 200 "$tmp/out")"
err_is prompt_plus_max_tokens 400 "${J[@]}" -d '{"prompt":"x","max_tokens":300}' "$URL/v1/completions"
err_is unknown_model 404 "${J[@]}" -d '{"model":"gpt-9","prompt":"x"}' "$URL/v1/completions"
err_is unknown_path 404 "$URL/v1/nothing"
err_is get_on_post 405 "$URL/v1/completions"
err_is post_on_get 405 "${J[@]}" -d '{}' "$URL/health"
head -c 100000 /dev/zero | tr '\0' ' ' >"$tmp/big"
err_is body_over_limit 413 "${J[@]}" --data-binary @"$tmp/big" "$URL/v1/completions"
err_is body_over_limit_chunked 413 "${J[@]}" -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big" "$URL/v1/completions"
"$PY" tests/serve_client.py slow 127.0.0.1 "$PORT" "$KEY" 3
# A client that sends half a request and goes quiet is dropped at --timeout.
python3 -c 'import socket,sys,time; s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"); s.settimeout(20); t=time.time(); d=s.recv(100); print("closed" if not d else "data", round(time.time()-t))' "$PORT" >"$tmp/idle" 2>&1
check bad.idle_dropped $(grep -q '^closed [2-9]' "$tmp/idle"; echo $?) "$(cat "$tmp/idle")"
# Queue full: one request runs, one waits (--max-queue 1), the third gets 503.
long_req='{"prompt":"Once","max_tokens":250,"temperature":0,"ignore_eos":true}'
# On a GPU the running request lasts well under a second: no sleeps, only
# polls, between the first request starting and the third arriving.
curl -s -o /dev/null -H "Authorization: Bearer $KEY" "${J[@]}" -d "$long_req" "$URL/v1/completions" & c1=$!
for _ in $(seq 500); do curl -s "$URL/metrics" | grep -q '^x4_requests_running 1$' && break; done
curl -s -o /dev/null -H "Authorization: Bearer $KEY" "${J[@]}" -d "$long_req" "$URL/v1/completions" & c2=$!
for _ in $(seq 500); do curl -s "$URL/metrics" | grep -q '^x4_queue_depth 1$' && break; done
err_is queue_full 503 "${J[@]}" -d '{"prompt":"x","max_tokens":1}' "$URL/v1/completions"
kill "$c1" "$c2" 2>/dev/null; wait "$c1" "$c2" 2>/dev/null
# The two clients that went away are cancelled by the server in its own time
# (slowly under ASan): let the queue drain before the checks that follow.
for _ in $(seq 300); do
	curl -s "$URL/metrics" | grep -q '^x4_queue_depth 0$' &&
		curl -s "$URL/metrics" | grep -q '^x4_requests_running 0$' && break
	sleep 0.1
done
st=$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")
check bad.still_serving $([ "$st" = 200 ]; echo $?) "health $st after the bad inputs"
curl -s "$URL/metrics" >"$tmp/m1"
grep -q '^x4_http_responses_total{code="413"} 2$' "$tmp/m1"; check serve.metrics.statuses $? "$(grep responses "$tmp/m1")"

# ---- a client that goes away mid-stream cancels; the next request is answered ----
"$PY" tests/serve_client.py disconnect "$URL" "$KEY"
stop main

# ---- a bounded load: 200 requests from 8 clients ----
if start load --api-key "$KEY" --max-model-len 64 --quiet --prefix-cache 0; then
	curl -s "$URL/metrics" >"$tmp/m2"
	grep -q '^x4_prefix_enabled 0$' "$tmp/m2" && grep -q '^x4_prefix_budget_bytes 0$' "$tmp/m2"
	check prefix.off "$?" "$(grep prefix "$tmp/m2")"
	# shellcheck disable=SC2046
	"$PY" tests/serve_client.py load "$URL" "$KEY" "$PID_load" 200 8 \
		$(ldd "$SERVE" 2>/dev/null | grep -q libasan && echo asan)
	stop load
else
	fail load.start "$(tail -n 5 "$tmp/load.err")"
fi

# ---- SIGINT and SIGTERM with a stream running: the stream ends, exit 0 ----
for sig in INT TERM; do
	if ! start sig$sig --max-model-len 2048; then fail "signal.$sig.start" "$(tail -n 3 "$tmp/sig$sig.err")"; continue; fi
	curl -sN "${J[@]}" -d '{"prompt":"Once","max_tokens":2000,"temperature":0,"ignore_eos":true,"stream":true}' \
		"$URL/v1/completions" >"$tmp/sig.sse" & c=$!
	for _ in $(seq 100); do [ "$(grep -c '^data: ' "$tmp/sig.sse")" -ge 3 ] && break; sleep 0.05; done
	stop "sig$sig" "$sig"
	wait "$c"
	tail -c 300 "$tmp/sig.sse" | grep -q '"finish_reason":"cancelled"' && tail -n 2 "$tmp/sig.sse" | grep -q '^data: \[DONE\]$'
	check "signal.$sig.stream_closed" $? "$(tail -c 300 "$tmp/sig.sse")"
done

# ---- the fuzzed corpus: no crash, no leak, still serving ----
if start fuzz --api-key "$KEY" --max-model-len 8 --max-body 64K --timeout 2 --quiet; then
	"$PY" tests/serve_fuzz.py "$URL" "$KEY" 3000
	st=$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")
	check fuzz.still_serving $([ "$st" = 200 ]; echo $?) "health $st"
	stop fuzz
else
	fail fuzz.start "$(tail -n 5 "$tmp/fuzz.err")"
fi

# ---- the man page: every option, endpoint and metric named ----
miss=""
for w in $("$SERVE" -h | grep -o -- '--[a-z][a-z-]*' | sort -u) /v1/chat/completions /v1/completions \
	/v1/models /health /metrics $(grep -v '^#' "$tmp/m0" | sed 's/[{ ].*//' | sort -u); do
	w=${w#--}
	grep -q -- "$w" man/x4-serve.1 || miss="$miss $w"
done
for sec in OPTIONS ENDPOINTS METRICS "EXIT STATUS" EXAMPLES; do
	grep -q "^\.Sh $sec\$" man/x4-serve.1 || miss="$miss .Sh:$sec"
done
grep -q '^\.Dd [A-Z][a-z]* [0-9][0-9]*, 20[0-9][0-9]$' man/x4-serve.1 || miss="$miss .Dd"
check serve.man_page "$([ -z "$miss" ]; echo $?)" "man/x4-serve.1 lacks:$miss"
