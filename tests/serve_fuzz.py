"""serve_fuzz.py - a fuzzed request corpus for x4-serve, generated from a seed
and sent over raw sockets: mutations of valid requests (bytes flipped,
dropped, inserted, cut; values swapped for other types, huge numbers, long
and odd strings; keys dropped and added), random bytes, huge and deeply
nested JSON, and HTTP that is wrong in its method, path, headers, length or
chunking.  tests/tool_serve.sh runs it against a server with a small
context (so that what does generate is short) and then checks that the
server still answers and exits cleanly; under `make asan` that is the
sanitizers' verdict too.

  serve_fuzz.py BASE_URL KEY N [SEED]

Each reply must be an HTTP status line or a closed connection; a status of
500 or above other than 503 is a failure, and so is an error status whose
body (when the server wrote it as JSON) is not an OpenAI error object.
"""
import json
import random
import socket
import sys
import threading
import time
import urllib.parse

BASES = [
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
    {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                  {"role": "assistant", "content": "A"}, {"role": "user", "content": "B"}],
     "max_tokens": 1, "temperature": 0.5, "top_p": 0.9, "seed": 4, "stream": True},
    {"prompt": "Once", "max_tokens": 2, "temperature": 0, "stop": ["e"]},
    {"prompt": [1, 5, 9], "max_tokens": 1, "stream": True,
     "stream_options": {"include_usage": True}},
    {"prompt": "x", "max_tokens": 1, "top_k": 3, "ignore_eos": True, "model": "M"},
]
PATHS = ["/v1/chat/completions", "/v1/completions"]
ODD = [None, True, False, 0, -1, 1, 2**63, -2**63, 2**64, 1e308, -1e-308, 0.5, "", "x" * 3000,
       "\u2603\ud83d\ude00", "<_end>", "\\", [], {}, [[[]]], {"a": {"b": []}}, [1] * 100,
       "\x01\x7f", "é" * 50]


def mutate_value(rng, v):
    if isinstance(v, dict) and v:
        k = rng.choice(list(v))
        r = rng.random()
        if r < 0.3:
            v.pop(k)
        elif r < 0.5:
            v[rng.choice(["n", "echo", "logprobs", "stop", "model", "extra", "messages",
                          "prompt", "max_completion_tokens", "stream_options"])] = \
                rng.choice(ODD)
        else:
            v[k] = mutate_value(rng, v[k])
        return v
    if isinstance(v, list) and v and rng.random() < 0.7:
        i = rng.randrange(len(v))
        v[i] = mutate_value(rng, v[i])
        return v
    return rng.choice(ODD)


def mutate_bytes(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        i = rng.randrange(len(b) + 1)
        if r < 0.25 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif r < 0.5:
            b[i:i] = bytes([rng.choice(b'{}[]",:\\0\x00\xff')])
        elif r < 0.75 and b:
            del b[i:i + rng.randint(1, 8)]
        else:
            b = b[:i]
    return bytes(b)


def http(method, path, body, headers=None, key=None, ctype="application/json"):
    h = {"Host": "x", "Connection": "close"}
    if ctype:
        h["Content-Type"] = ctype
    if key:
        h["Authorization"] = "Bearer " + key
    if body is not None:
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    head = "%s %s HTTP/1.1\r\n" % (method, path) + "".join(
        "%s: %s\r\n" % kv for kv in h.items() if kv[1] is not None) + "\r\n"
    return head.encode("latin-1", "replace") + (body or b"")


# A request that may leave the server waiting for more (a length larger than
# the body, a chunked body without its end, a request line without its end):
# the client waits a moment and hangs up, as a real one would, rather than
# sit out the server's --timeout.  The marker is stripped before sending.
INCOMPLETE = b"\0incomplete\0"


def corpus(n, key, seed):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        r = rng.random()
        path = rng.choice(PATHS)
        if r < 0.45:  # a JSON-level mutation of a valid request
            base = json.loads(json.dumps(rng.choice(BASES)))
            if "model" in base:
                base.pop("model")
            for _ in range(rng.randint(1, 3)):
                base = mutate_value(rng, base) if isinstance(base, (dict, list)) else base
            try:
                body = json.dumps(base, ensure_ascii=rng.random() < 0.5).encode("utf-8",
                                                                                 "surrogatepass")
            except (TypeError, ValueError):
                continue
            out.append(http("POST", path, body, key=key))
        elif r < 0.75:  # a byte-level mutation
            body = mutate_bytes(rng, json.dumps(rng.choice(BASES)).encode())
            out.append(http("POST", path, body, key=key))
        elif r < 0.82:  # random bytes as the body
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 400)))
            out.append(http("POST", path, body, key=key))
        elif r < 0.86:  # huge or deeply nested JSON
            k = rng.randint(1, 4)
            body = (b"[" * 30000 + b"]" * 30000 if k == 1 else
                    b'{"a":' * 5000 + b"1" + b"}" * 5000 if k == 2 else
                    json.dumps({"prompt": "w " * 20000}).encode() if k == 3 else
                    json.dumps({"messages": [{"role": "user", "content": "a"}] * 3000}).encode())
            out.append(http("POST", path, body, key=key))
        elif r < 0.93:  # the HTTP around a valid body
            body = json.dumps(rng.choice(BASES)).encode()
            k = rng.randint(1, 9)
            if k == 1:
                out.append(http(rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW",
                                            "HEAD"]), path, body, key=key))
            elif k == 2:
                out.append(http("POST", rng.choice(["/", "/v1", "/v1/", "//v1/completions",
                                                    "/v1/completions/../models", "/%00",
                                                    "/" + "a" * 3000, "/v1/models?x=1"]),
                                body, key=key))
            elif k == 3:
                out.append(http("POST", path, body, key=rng.choice(["", "x" * 500, key + "x"])))
            elif k == 4:
                out.append(http("POST", path, body, key=key,
                                ctype=rng.choice([None, "", "text/plain", "application/jsonx",
                                                  "application/json; charset=utf-8",
                                                  "APPLICATION/JSON", "multipart/form-data"])))
            elif k == 5:
                out.append(INCOMPLETE + http("POST", path, body, key=key,
                                headers={"Content-Length": rng.choice(["-1", "abc", "1e3",
                                                                       "99999999999999999999",
                                                                       "0"])}))
            elif k == 6:
                chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                                  for i in range(0, len(body), 7))
                tail = rng.choice([b"0\r\n\r\n", b"zz\r\n", b"0\r\n"])
                out.append((b"" if tail == b"0\r\n\r\n" else INCOMPLETE) +
                           http("POST", path, None, key=key,
                                headers={"Transfer-Encoding": "chunked"}) + chunks + tail)
            elif k == 7:
                out.append(http("POST", path, body, key=key, headers={"X-Big": "y" * 40000}))
            elif k == 8:
                out.append(http("POST", path, body, key=key, headers={"Expect": "100-continue"}))
            else:
                out.append(http("GET", rng.choice(["/health", "/metrics", "/v1/models"]), None,
                                key=key, ctype=None))
        else:  # garbage where the request line should be
            g = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
            out.append(rng.choice([INCOMPLETE + g, b"GET / HTTP/9.9\r\n\r\n", b"\r\n\r\n",
                                   INCOMPLETE + b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" +
                                   g + b"\r\n\r\n"]))
    return out


def send(addr, data, timeout):
    if data.startswith(INCOMPLETE):
        data, timeout = data[len(INCOMPLETE):], 0.3
    s = socket.create_connection(addr, timeout=timeout)
    got = b""
    try:
        s.sendall(data)
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except (ConnectionResetError, BrokenPipeError):
        pass
    except socket.timeout:
        got += b"<timeout>"
    finally:
        s.close()
    return got


def judge(req, got):
    """'' when the reply to req is acceptable, else why not."""
    if not got or got == b"<timeout>":
        return ""  # the server closed, or waited for more of a broken request
    if not got.startswith(b"HTTP/1."):
        return "not HTTP: %r" % got[:80]
    status = int(got[9:12])
    # 503: the queue is full; 505: libmicrohttpd's own answer to HTTP/9.9
    if status >= 500 and status not in (503, 505):
        return "status %d: %r" % (status, got[:300])
    head, _, body = got.partition(b"\r\n\r\n")
    if status >= 400 and b"application/json" in head.lower() and not req.startswith(b"HEAD "):
        try:
            e = json.loads(body)["error"]
            assert sorted(e) == ["code", "message", "param", "type"]
        except Exception:  # noqa: BLE001 - anything else is the failure
            return "status %d without an error object: %r" % (status, body[:200])
    return ""


def main():
    base, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    u = urllib.parse.urlsplit(base)
    addr = (u.hostname, u.port)
    reqs = corpus(n, key, seed)
    bad, statuses, lock = [], {}, threading.Lock()
    t0 = time.time()

    def worker(k):
        for i in range(k, len(reqs), 8):
            try:
                got = send(addr, reqs[i], 10)
                why = judge(reqs[i], got)
                st = got[9:12].decode("latin-1") if got.startswith(b"HTTP/1.") else "closed"
            except OSError as e:
                why, st = "connection: %s" % e, "error"
            with lock:
                statuses[st] = statuses.get(st, 0) + 1
                if why:
                    bad.append((i, why))

    th = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    print("fuzz: %d requests in %.1f s, replies %s" % (len(reqs), time.time() - t0,
                                                         sorted(statuses.items())))
    ok = not bad
    print(("PASS fuzz.corpus[%d]" % len(reqs)) if ok else
          "FAIL fuzz.corpus: %d bad replies, first %r" % (len(bad), bad[:3]))
    for i, why in bad[:10]:
        print("  request %d: %s (%r)" % (i, why, reqs[i][:200]))


if __name__ == "__main__":
    main()
