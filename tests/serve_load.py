#!/usr/bin/env python3
"""Load test of `nightshift serve` (Python stdlib only; traffic to the given 127.0.0.1 URL only).

    serve_load.py URL --pid PID [--duration S] [--max-tokens N] [--overload X] [--strict]

Three phases, each bounded in time:
  1. capacity: 96 clients in a closed loop for S seconds (more than the server runs and queues; a 429
     makes a client wait its Retry-After): completed requests per second is the sustainable rate R.
  2. overload: open-loop arrivals at X * R per second (default 10) for S seconds, each on its own connection.
     Every response must be a 200 with a completion or a 429 with a Retry-After of at least 1 second;
     every admitted request must complete; rejections must be fast (p99 reported; --strict: < 50 ms).
  3. sustainable: open-loop arrivals at R / 2 per second for S seconds: no 429 at all.
The server's peak RSS (VmHWM of PID) is reported. Prints one line of numbers per phase and exits 1 when a
property fails. Stragglers are waited for at most 60 s after each phase.
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def post(url, body, timeout=60):
    """One request on a new connection: (status, retry_after or None, latency s, ok_body, end time)."""
    u = urllib.parse.urlparse(url)
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        status, retry = r.status, r.getheader("Retry-After")
        c.close()
    except Exception as e:  # a refused or broken connection is a failure of the server
        return ("error: %s" % e, None, time.monotonic() - t0, False, time.monotonic())
    ok_body = False
    if status == 200:
        try:
            ok_body = bool(json.loads(data)["choices"][0]["finish_reason"])
        except Exception:
            ok_body = False
    return (status, retry, time.monotonic() - t0, ok_body, time.monotonic())


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.results = []

    def add(self, r):
        with self.mu:
            self.results.append(r)


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def closed_loop(url, body, clients, duration):
    """Clients that send again when answered, and wait Retry-After when told to (as a polite client does)."""
    st, stop = Stats(), time.monotonic() + duration

    def run():
        while time.monotonic() < stop:
            r = post(url, body)
            st.add(r)
            if r[0] == 429 and r[1] and r[1].isdigit():
                time.sleep(min(float(r[1]), max(0.0, stop - time.monotonic())))

    ts = [threading.Thread(target=run) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(duration + 60)
    return st.results


def open_loop(url, body, rate, duration):
    st, threads = Stats(), []
    t0 = time.monotonic()
    n = 0
    while True:
        due = t0 + n / rate
        now = time.monotonic()
        if due - t0 >= duration:
            break
        if due > now:
            time.sleep(due - now)
        t = threading.Thread(target=lambda: st.add(post(url, body)))
        t.start()
        threads.append(t)
        n += 1
    offered = n / (time.monotonic() - t0)
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return st.results, offered, sum(t.is_alive() for t in threads)


def rss_kib(pid, key):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def check_responses(results, name, problems):
    """Every response is a 200 with a completion or a 429 with Retry-After >= 1; returns the counts."""
    ok = rej = 0
    for status, retry, _, ok_body, _ in results:
        if status == 200 and ok_body:
            ok += 1
        elif status == 429 and retry and retry.isdigit() and int(retry) >= 1:
            rej += 1
        else:
            problems.append("%s: a response that is neither a completion nor a 429 with Retry-After: %r %r" %
                            (name, status, retry))
    return ok, rej


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--overload", type=float, default=10)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--sustain-fraction", type=float, default=0.5,
                    help="the sustainable phase offers this fraction of the measured capacity")
    ap.add_argument("--sustain-report-only", action="store_true",
                    help="report 429s in the sustainable phase instead of failing (a machine shared with other "
                         "work moves the capacity between phases)")
    a = ap.parse_args()
    if urllib.parse.urlparse(a.url).hostname != "127.0.0.1":
        sys.exit("serve_load: only 127.0.0.1")
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": a.max_tokens, "ignore_eos": True,
                       "temperature": 0.8}).encode()
    problems = []
    rss0 = rss_kib(a.pid, "VmRSS")

    t0 = time.monotonic()
    res = closed_loop(a.url, body, 96, a.duration)
    ok, rej = check_responses(res, "capacity", problems)
    rate = sum(1 for r in res if r[0] == 200 and r[4] <= t0 + a.duration) / a.duration  # within the window
    print("# capacity: 96 clients, closed loop, %.1f s: %d completed (%.1f req/s), %d rejected (429)" %
          (a.duration, ok, rate, rej))
    if rate <= 0:
        print("FAIL serve_load: nothing completed")
        return 1

    res, offered, stuck = open_loop(a.url, body, a.overload * rate, a.duration)
    ok, rej = check_responses(res, "overload", problems)
    rej_lat = [r[2] * 1000 for r in res if r[0] == 429]
    ok_lat = [r[2] for r in res if r[0] == 200]
    retry = [int(r[1]) for r in res if r[0] == 429 and r[1] and r[1].isdigit()]
    print("# overload: %.0f req/s offered (%.1fx the capacity) for %.1f s: %d completed, %d rejected with 429; "
          "429 latency p50 %.1f ms p99 %.1f ms max %.1f ms; Retry-After %s..%s s; completed latency p50 %.2f s "
          "p99 %.2f s" % (offered, offered / rate, a.duration, ok, rej, pct(rej_lat, 50), pct(rej_lat, 99),
                           max(rej_lat or [0]), min(retry or [0]), max(retry or [0]), pct(ok_lat, 50),
                           pct(ok_lat, 99)))
    if stuck:
        problems.append("overload: %d requests still unanswered 60 s after the phase" % stuck)
    if rej == 0:
        problems.append("overload: no 429 at %.1fx the capacity" % (offered / rate))
    if a.strict and pct(rej_lat, 99) >= 50:
        problems.append("overload: 429 p99 %.1f ms >= 50 ms" % pct(rej_lat, 99))

    res, offered, stuck = open_loop(a.url, body, rate * a.sustain_fraction, a.duration)
    ok, rej = check_responses(res, "sustainable", problems)
    print("# sustainable: %.1f req/s offered for %.1f s: %d completed, %d rejected" % (offered, a.duration, ok, rej))
    if stuck or (rej and not a.sustain_report_only):
        problems.append("sustainable: %d rejected, %d unanswered at %.2f of the capacity" % (rej, stuck, a.sustain_fraction))
    elif rej:
        print("# note: %d rejected at %.2f of the capacity (reported only)" % (rej, a.sustain_fraction))
    print("# server RSS: %d KiB before the load, %d KiB after, peak %d KiB" %
          (rss0, rss_kib(a.pid, "VmRSS"), rss_kib(a.pid, "VmHWM")))
    for p in problems[:10]:
        print("FAIL serve_load: %s" % p)
    if not problems:
        print("ok serve_load")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
