"""serve_client.py - x4-serve against clients no line of x4 wrote: the openai
package from PyPI (pinned in tests/requirements.txt) and raw sockets.
tests/tool_serve.sh runs it; each check prints one PASS or FAIL line.

  serve_client.py openai BASE_URL KEY MODEL      the client's four calls, errors
  serve_client.py disconnect BASE_URL KEY        a stream dropped mid-way
  serve_client.py load BASE_URL KEY PID N C [asan]  N requests from C clients, RSS
  serve_client.py slow HOST PORT KEY TIMEOUT     a body slower than --timeout
"""
import http.client
import json
import socket
import sys
import threading
import time
import urllib.parse


def check(name, ok, why=""):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)
    return ok


def metrics(base, key=None):
    """The server's /metrics as {name: value} (labels kept in the name)."""
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def post(base, path, body, key, timeout=120):
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    c.request("POST", path, json.dumps(body),
              {"Content-Type": "application/json", "Authorization": "Bearer " + key})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def run_openai(base, key, model):
    import openai
    cl = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"}]
    r = cl.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                   extra_body={"ignore_eos": True})
    whole = r.choices[0].message.content
    check("openai.chat.whole", r.object == "chat.completion" and r.choices[0].finish_reason ==
          "length" and r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 0 and
          r.usage.total_tokens == r.usage.prompt_tokens + 12 and isinstance(whole, str),
          repr(r))
    parts, fin, usage, n_chunks, role = [], None, None, 0, None
    for ch in cl.chat.completions.create(model=model, messages=msgs, max_tokens=12,
                                         temperature=0, stream=True,
                                         stream_options={"include_usage": True},
                                         extra_body={"ignore_eos": True}):
        n_chunks += 1
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.role:
                role = c.delta.role
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                fin = c.finish_reason
    check("openai.chat.stream", "".join(parts) == whole and fin == "length" and
          role == "assistant", "stream %r (%s) vs whole %r" % ("".join(parts), fin, whole))
    check("openai.chat.stream.usage", usage is not None and usage.completion_tokens == 12 and
          usage.prompt_tokens == r.usage.prompt_tokens, repr(usage))
    check("openai.chat.stream.chunks", 2 <= n_chunks <= 12 + 3, "%d chunks" % n_chunks)

    c = cl.completions.create(model=model, prompt="Once upon a time", max_tokens=10,
                              temperature=0, extra_body={"ignore_eos": True})
    check("openai.completion.whole", c.object == "text_completion" and
          c.choices[0].finish_reason == "length" and c.usage.completion_tokens == 10, repr(c))
    text = "".join(x.choices[0].text for x in cl.completions.create(
        model=model, prompt="Once upon a time", max_tokens=10, temperature=0, stream=True,
        extra_body={"ignore_eos": True}) if x.choices)
    check("openai.completion.stream", text == c.choices[0].text, "%r vs %r" %
          (text, c.choices[0].text))
    # A seed makes sampling reproducible, through the client as on the command line.
    s = [cl.completions.create(model=model, prompt="Once upon a time", max_tokens=10,
                               temperature=0.9, top_p=0.95, seed=7,
                               extra_body={"ignore_eos": True, "top_k": 50}).choices[0].text
         for _ in range(2)]
    check("openai.seed.reproducible", s[0] == s[1], repr(s))
    # The client's own error classes from the statuses and objects.
    cases = [
        ("openai.error.401", openai.AuthenticationError,
         lambda: openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
         .chat.completions.create(model=model, messages=msgs)),
        ("openai.error.404_model", openai.NotFoundError,
         lambda: cl.chat.completions.create(model="no-such-model", messages=msgs)),
        ("openai.error.400_context", openai.BadRequestError,
         lambda: cl.completions.create(model=model, prompt="word " * 5000, max_tokens=4)),
        ("openai.error.422_max_tokens", openai.UnprocessableEntityError,
         lambda: cl.completions.create(model=model, prompt="x", max_tokens=-3)),
    ]
    for name, cls, fn in cases:
        try:
            fn()
            check(name, False, "no error")
        except cls as e:
            body = e.body if isinstance(e.body, dict) else {}
            check(name, "message" in body and "type" in body, repr(e.body))
        except Exception as e:  # noqa: BLE001 - any other class is the failure
            check(name, False, "%s: %s" % (type(e).__name__, e))
    m = cl.models.list()
    check("openai.models", [x.id for x in m.data] == [model], repr(m))


def run_disconnect(base, key):
    before = metrics(base)
    u = urllib.parse.urlsplit(base)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 240, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    got = b""
    while got.count(b"data: ") < 3:
        d = s.recv(4096)
        if not d:
            break
        got += d
    s.close()
    check("disconnect.streamed", got.count(b"data: ") >= 3, repr(got[:200]))
    t0, m = time.time(), before
    while time.time() - t0 < 30:
        m = metrics(base)
        if m["x4_cancellations_total"] > before["x4_cancellations_total"] and \
                m["x4_requests_running"] == 0:
            break
        time.sleep(0.05)
    check("disconnect.cancelled", m["x4_cancellations_total"] ==
          before["x4_cancellations_total"] + 1, "cancellations %s -> %s" %
          (before["x4_cancellations_total"], m["x4_cancellations_total"]))
    gen = m["x4_generation_tokens_total"] - before["x4_generation_tokens_total"]
    check("disconnect.stopped_early", 0 < gen < 200, "%d of 240 tokens generated" % gen)
    st, data = post(base, "/v1/completions", {"prompt": "Hello", "max_tokens": 2}, key)
    check("disconnect.next_answered", st == 200, "%d %r" % (st, data[:200]))


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_load(base, key, pid, n, conc, asan):
    body = {"prompt": [1, 5, 9], "max_tokens": 1, "temperature": 0.7, "seed": 3}
    results, lock = [], threading.Lock()

    def client(k, n):
        for i in range(k, n, conc):
            try:
                st, data = post(base, "/v1/completions", dict(body, seed=i), key)
                ok = st == 200 and json.loads(data)["usage"]["completion_tokens"] == 1
            except Exception as e:  # noqa: BLE001 - a lost request is the failure
                st, ok = repr(e), False
            with lock:
                results.append((i, st, ok))

    def clients(n):
        th = [threading.Thread(target=client, args=(k, n)) for k in range(conc)]
        for t in th:
            t.start()
        for t in th:
            t.join()

    # The warm-up as the load: as many connection threads at once (their
    # stacks and malloc arenas stay with the process; measured flat to the
    # KiB over 1,000 more requests after 200 such), then the measure.
    clients(n // 2)
    del results[:]
    r0, m0 = rss(pid), metrics(base)
    t0 = time.time()
    clients(n)
    dt = time.time() - t0
    m1, r1 = metrics(base), rss(pid)
    bad = [(i, st) for i, st, ok in results if not ok]
    check("load.all_answered", len(results) == n and not bad,
          "%d of %d, failed: %r" % (len(results), n, bad[:5]))
    check("load.counted", m1["x4_requests_total"] - m0["x4_requests_total"] == n,
          "requests_total %s -> %s" % (m0["x4_requests_total"], m1["x4_requests_total"]))
    # A request is answered from its end callback, before the worker offers
    # its prompt to the prefix store and goes idle: the last one may still
    # count as running for a moment after its client has the answer.
    md, t1 = m1, time.time()
    while (md["x4_queue_depth"] or md["x4_requests_running"]) and time.time() - t1 < 10:
        time.sleep(0.05)
        md = metrics(base)
    check("load.queue_drained", md["x4_queue_depth"] == 0 and md["x4_requests_running"] == 0,
          "depth %s running %s, 10 s after the last answer" % (md["x4_queue_depth"],
                                                              md["x4_requests_running"]))
    # Memory flat: what the load added after a warm-up, bounded (a leak of a
    # few KiB a request would show as MiB here).
    grow = r1 - r0
    if asan:
        print("SKIP load.rss_flat: an ASan build keeps freed memory in quarantine (RSS %d -> "
              "%d); LeakSanitizer checks for leaks at the server's exit instead" % (r0, r1))
    else:
        check("load.rss_flat", grow < 8 << 20, "RSS %d -> %d (+%d bytes)" % (r0, r1, grow))
    print("load: %d requests from %d clients in %.1f s, RSS %.1f -> %.1f MiB" %
          (n, conc, dt, r0 / 2**20, r1 / 2**20))


def run_slow(host, port, key, timeout):
    s = socket.create_connection((host, port), timeout=4 * timeout + 10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: 12\r\n\r\n")
    step = (timeout + 1.0) / 12
    for _ in range(12):
        s.sendall(b" ")
        time.sleep(step)
    got = s.recv(4096)
    s.close()
    check("bad.slow_body_408", got.startswith(b"HTTP/1.1 408") and b'"error"' in got,
          repr(got[:200]))


def main():
    cmd = sys.argv[1]
    if cmd == "openai":
        run_openai(*sys.argv[2:5])
    elif cmd == "disconnect":
        run_disconnect(*sys.argv[2:4])
    elif cmd == "load":
        run_load(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
                 len(sys.argv) > 7 and sys.argv[7] == "asan")
    elif cmd == "slow":
        run_slow(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
