#!/usr/bin/env bash
# tool_balancer.sh - the deployment recipe of README "Serving from several
# cards", run: two bin/x4-serve instances of the tiny preset on the CPU
# behind HAProxy on loopback, with deploy/haproxy.cfg as shipped (its
# addresses come from the environment).  A burst spread over both, one
# instance killed in the middle of a second burst with no request lost, the
# killed one out of rotation, a stream passed through token by token, a
# client that gives up cancelling its request on the instance.
# Run from the tree's root (tests/run.sh does); under a minute.
set -u
cd "$(dirname "$0")/.." || exit 2
SERVE=bin/x4-serve
MODEL=build/models/tiny
CFG=deploy/haproxy.cfg
tmp=$(mktemp -d)
pids=()
cleanup() {
	exec 2>/dev/null
	for p in "${pids[@]+"${pids[@]}"}"; do kill -KILL "$p"; done
	wait
	rm -rf "$tmp"
}
trap cleanup EXIT
. tests/t.sh
# A value from a JSON line: a python expression over d.
jv() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }

# Debian puts it in /usr/sbin, which a user's PATH may lack.
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
if [ ! -x "$HAPROXY" ]; then
	echo "SKIP balancer: haproxy is not installed (Debian: apt-get install haproxy)"
	exit 0
fi
if [ ! -x "$SERVE" ]; then
	echo "SKIP balancer: bin/x4-serve was not built (apt-get install libmicrohttpd-dev libjansson-dev, then make)"
	exit 0
fi

# instance NAME: an x4-serve on a free port; sets PORT_<NAME> and PID_<NAME>.
instance() {
	"$SERVE" -m "$MODEL" --device cpu --threads 1 --max-model-len 512 --port 0 --quiet \
		2>"$tmp/$1.err" &
	local pid=$! port="" i
	pids+=("$pid")
	for i in $(seq 1 300); do
		port=$(sed -n 's|^x4-serve: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$tmp/$1.err")
		[ -n "$port" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	eval "PORT_$1=$port PID_$1=$pid"
	[ -n "$port" ]
}
# x4_requests_total of an instance, asked directly.
served() { curl -s "http://127.0.0.1:$1/metrics" | sed -n 's/^x4_requests_total \([0-9]*\)$/\1/p'; }
# The state HAProxy's stats give server $1 (UP, DOWN, ...).
state() { curl -s "http://$X4_LB_STATS/;csv" | awk -F, -v s="$1" '$1 == "x4_serve" && $2 == s { print $18 }'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

instance a && instance b
check balancer.instances_start $? "$(tail -n 3 "$tmp/a.err" "$tmp/b.err")"
export X4_BACKEND0=127.0.0.1:$PORT_a X4_BACKEND1=127.0.0.1:$PORT_b
export X4_LB_LISTEN=127.0.0.1:$(free_port) X4_LB_STATS=127.0.0.1:$(free_port)
export X4_LB_LOG=stderr X4_LB_USER=$(id -un) X4_LB_GROUP=$(id -gn)
"$HAPROXY" -c -f "$CFG" >"$tmp/check.out" 2>&1
check balancer.config_valid $? "$(tail -n 5 "$tmp/check.out")"
"$HAPROXY" -db -f "$CFG" 2>"$tmp/haproxy.err" &
pids+=($!)
LB=http://$X4_LB_LISTEN
for _ in $(seq 1 100); do
	[ "$(state x4-0)$(state x4-1)" = UPUP ] && break
	sleep 0.1
done
check balancer.both_up $([ "$(state x4-0)$(state x4-1)" = UPUP ]; echo $?) \
	"states '$(state x4-0)' '$(state x4-1)': $(tail -n 5 "$tmp/haproxy.err")"

# ---- a burst: every request answered, both instances served some ----
r=$(python3 tests/balancer_client.py burst "$LB" 100 4 2>"$tmp/c1.err")
na=$(served "$PORT_a"); nb=$(served "$PORT_b")
echo "# burst: $r; instance a served ${na:-?}, b ${nb:-?}"
check balancer.burst_all_answered $([ "$(jv "$r" 'd["answered"]')" = 100 ]; echo $?) "$r $(tail -n 3 "$tmp/c1.err")"
check balancer.burst_spread $([ "${na:-0}" -gt 0 ] && [ "${nb:-0}" -gt 0 ] && [ $((na + nb)) -eq 100 ]; echo $?) \
	"a served '$na', b '$nb' of 100"

# ---- instance b killed in the middle of a burst: none lost ----
disown "$PID_b" # (no "Killed" line from the shell)
r=$(python3 tests/balancer_client.py burst "$LB" 100 4 "$PID_b" 30 2>"$tmp/c2.err")
echo "# burst with b killed after 30 answers: $r"
echo "# haproxy on x4-1: $(curl -s "http://$X4_LB_STATS/;csv" | awk -F, '$1 == "x4_serve" && $2 == "x4-1" { print "connection errors " $14 ", response errors " $15 ", retries " $16 ", redispatches " $17 }')"
msg=$(jv "$r" '"ok" if d["killed"] and d["sent"] == 100 and d["answered"] + d["clear_errors"] == d["sent"] and d["lost"] == 0 else "answered %(answered)d + clear_errors %(clear_errors)d of sent %(sent)d, lost %(lost)d, killed %(killed)s" % d')
check balancer.kill.none_lost $([ "$msg" = ok ]; echo $?) "${msg:-no result: $(tail -n 3 "$tmp/c2.err")}"
check balancer.kill.retried_all $([ "$(jv "$r" 'd["answered"]')" = 100 ]; echo $?) "$r"
for _ in $(seq 1 50); do [ "$(state x4-1)" = DOWN ] && break; sleep 0.1; done
check balancer.kill.out_of_rotation $([ "$(state x4-1)" = DOWN ] && [ "$(state x4-0)" = UP ]; echo $?) \
	"x4-0 '$(state x4-0)', x4-1 '$(state x4-1)'"
st=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
	-d '{"prompt":"Hi","max_tokens":1}' "$LB/v1/completions")
check balancer.kill.still_serving $([ "$st" = 200 ]; echo $?) "status $st"

# ---- a stream through the balancer: its events arrive as they are made ----
# (a token that ends inside a UTF-8 character, or could start a stop
# string, has no event of its own: fewer events than tokens, plus the finish)
r=$(python3 tests/balancer_client.py stream "$LB" 96 2>"$tmp/c3.err")
echo "# stream: $r"
msg=$(jv "$r" '"ok" if d["status"] == 200 and d["content_type"] == "text/event-stream" and 48 <= d["events"] <= 97 and d["done_s"] else repr(d)')
check balancer.stream.whole $([ "$msg" = ok ]; echo $?) "${msg:-$(tail -n 3 "$tmp/c3.err")}"
# The first token's event before half the stream's time: not held back.
msg=$(jv "$r" '"ok" if d["first_event_s"] < 0.5 * d["done_s"] else "first event at %.2f s of %.2f" % (d["first_event_s"], d["done_s"])')
check balancer.stream.incremental $([ "$msg" = ok ]; echo $?) "${msg:-$r}"
check balancer.stream.not_compressed $([ "$(jv "$r" 'd["content_encoding"]')" = None ]; echo $?) "$r"

# ---- a client that gives up: the instance cancels, whole or streamed ----
# running N: wait (5 s at most) until x4_requests_running is N.
running() {
	local i
	for i in $(seq 1 50); do
		[ "$(curl -s "http://127.0.0.1:$PORT_a/metrics" | sed -n 's/^x4_requests_running //p')" = "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
cancelled() { curl -s "http://127.0.0.1:$PORT_a/metrics" | sed -n 's/^x4_cancellations_total //p'; }
for how in whole stream; do
	c0=$(cancelled)
	s=false; [ $how = stream ] && s=true
	curl -sN -m 1 -o /dev/null -H 'Content-Type: application/json' \
		-d "{\"prompt\":\"Once\",\"max_tokens\":400,\"ignore_eos\":true,\"stream\":$s}" "$LB/v1/completions"
	running 0; idle=$?
	c1=$(cancelled)
	check "balancer.client_gone.$how" $([ "$idle" = 0 ] && [ "$c1" = $((c0 + 1)) ]; echo $?) \
		"cancellations $c0 -> $c1, running $(curl -s "http://127.0.0.1:$PORT_a/metrics" | sed -n 's/^x4_requests_running //p') 5 s after the client left"
done

# The survivor stops cleanly behind the balancer (under `make asan`, with no
# sanitizer report).
kill -TERM "$PID_a"; wait "$PID_a"; rc=$?
check balancer.instance_exit_0 $((rc != 0)) "exit $rc: $(tail -n 3 "$tmp/a.err")"
grep -q 'Sanitizer\|runtime error:' "$tmp/a.err" "$tmp/b.err"
check balancer.no_sanitizer_report $((! $?)) "$(grep -h -m3 -A5 'Sanitizer\|runtime error:' "$tmp/a.err" "$tmp/b.err")"
