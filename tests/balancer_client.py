#!/usr/bin/env python3
"""tests/balancer_client.py - the clients of tests/tool_balancer.sh, with
nothing but the standard library.

    balancer_client.py burst URL N CLIENTS [PID AFTER]
        N completion requests from CLIENTS threads; with PID, SIGKILL that
        process once AFTER answers have come back.  Prints one JSON object:
        sent, answered (200 and a completion), clear_errors (a status of 400
        or more with a body: an error object, or the balancer's error page),
        lost (no status: a reset, a timeout, a malformed answer) and the
        statuses seen.
    balancer_client.py stream URL MAX_TOKENS
        One streamed completion; prints the seconds from the request to the
        headers, the first token's event and "data: [DONE]", and the count
        of token events.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.parse

BODY = {"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0, "ignore_eos": True}


def conn(url):
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)


def one(url, body):
    """(class, status): answered, clear_error or lost."""
    c = conn(url)
    try:
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
    except (OSError, http.client.HTTPException) as e:
        return "lost", type(e).__name__
    finally:
        c.close()
    if r.status == 200:
        try:
            d = json.loads(data)
            ok = isinstance(d["choices"][0]["text"], str) and d["usage"]["completion_tokens"] >= 1
        except (ValueError, KeyError, IndexError, TypeError):
            ok = False
        return ("answered" if ok else "lost"), 200
    return ("clear_error" if r.status >= 400 and data else "lost"), r.status


def burst(url, n, clients, pid=None, after=0):
    counts = {"sent": 0, "answered": 0, "clear_error": 0, "lost": 0}
    statuses = {}
    lock = threading.Lock()
    todo = list(range(n))
    killed = [False]

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
                counts["sent"] += 1
            cls, st = one(url, BODY)
            with lock:
                counts[cls] += 1
                statuses[str(st)] = statuses.get(str(st), 0) + 1
                if pid and not killed[0] and counts["answered"] >= after:
                    killed[0] = True
                    os.kill(pid, signal.SIGKILL)

    ts = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"sent": counts["sent"], "answered": counts["answered"],
                      "clear_errors": counts["clear_error"], "lost": counts["lost"],
                      "killed": killed[0], "statuses": statuses}))


def stream(url, max_tokens):
    body = dict(BODY, max_tokens=max_tokens, stream=True)
    c = conn(url)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Content-Type": "application/json", "Accept-Encoding": "gzip"})
    r = c.getresponse()
    t_head = time.monotonic() - t0
    first = done = None
    events = 0
    while True:
        line = r.fp.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            events += 1
            if first is None:
                first = time.monotonic() - t0
        elif line.startswith(b"data: [DONE]"):
            done = time.monotonic() - t0
    c.close()
    print(json.dumps({"status": r.status, "content_type": r.getheader("Content-Type"),
                      "content_encoding": r.getheader("Content-Encoding"), "headers_s": t_head,
                      "first_event_s": first, "done_s": done, "events": events}))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "burst" and len(a) in (4, 6):
        burst(a[1], int(a[2]), int(a[3]), *(map(int, a[4:6])))
    elif a and a[0] == "stream" and len(a) == 3:
        stream(a[1], int(a[2]))
    else:
        sys.exit(__doc__)
