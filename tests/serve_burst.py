#!/usr/bin/env python3
"""Connection limits of `nightshift serve` (Python stdlib only; traffic to the given 127.0.0.1 URL only).

    serve_burst.py URL [--burst N] [--slow S] [--requests M] [--max-tokens T] [--hold-past S2] [--strict]

Two checks, each bounded in time:
  burst: N connections opened at once, each sending one completion request. Every connection must get an
         HTTP status (200, 429 or 503 with Retry-After), none may be closed without one; /metrics must count
         exactly those responses (nightshift_http_responses_total grows by N + 1, the +1 being the first
         /metrics read itself), its 503s as rejections with reason "connections"; right after, an ordinary
         request must complete.
  slow:  S connections that send a request line and then one header byte a second, never finishing their
         headers (re-opened when the server cuts them), while one client sends M requests one after another,
         each on a new connection. Its latencies are compared with M requests sent before the slow
         connections came (its own generation time): p99 under load less the baseline's p50 must stay under
         1 s. --hold-past S2 keeps the slow connections open S2 seconds more and checks that the server cut
         them with a 408.
Prints one line of numbers per check and exits 1 when a property fails.
"""
import argparse
import asyncio
import json
import sys
import time
import urllib.parse

DEADLINE = 120  # seconds: no connection of a check waits longer


def request_bytes(host, port, body, path="/v1/completions", method="POST"):
    head = "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n" % (method, path, host, port)
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + (body or b"")


async def exchange(host, port, data, timeout=DEADLINE):
    """One request on a new connection: (status or None, headers dict, body bytes, seconds, error text)."""
    t0 = time.monotonic()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(data)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(-1), timeout)
    except Exception as e:  # refused, reset or timed out: no status
        return None, {}, b"", time.monotonic() - t0, "%s: %s" % (type(e).__name__, e)
    finally:
        if writer:
            writer.close()
    dt = time.monotonic() - t0
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return None, {}, b"", dt, "no status line (%d bytes)" % len(raw)
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(parts[1]), hdrs, body, dt, ""


async def metrics(host, port):
    """{(name, labels): value} of the server's /metrics."""
    st, _, body, _, err = await exchange(host, port, request_bytes(host, port, None, "/metrics", "GET"), 30)
    if st != 200:
        raise RuntimeError("GET /metrics: %s %s" % (st, err))
    out = {}
    text = body.decode()
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        key, _, val = ln.rpartition(" ")
        try:
            out[key] = float(val)
        except ValueError:
            pass
    return out


def total(m, prefix):
    return sum(v for k, v in m.items() if k.startswith(prefix))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else 0.0


async def burst(host, port, n, body, problems):
    m0 = await metrics(host, port)
    data = request_bytes(host, port, body)
    t0 = time.monotonic()
    res = await asyncio.gather(*(exchange(host, port, data) for _ in range(n)))
    wall = time.monotonic() - t0
    m1 = await metrics(host, port)
    by = {}
    for st, hdrs, _, _, err in res:
        by[st] = by.get(st, 0) + 1
        if st is None:
            continue
        if st not in (200, 429, 503):
            problems.append("burst: status %d" % st)
        elif st != 200 and not hdrs.get("retry-after", "").isdigit():
            problems.append("burst: a %d without Retry-After" % st)
    none = [r[4] for r in res if r[0] is None]
    lat = [r[3] for r in res if r[0] is not None]
    counted = total(m1, "nightshift_http_responses_total") - total(m0, "nightshift_http_responses_total")
    busy = (m1.get('nightshift_rejections_total{reason="connections"}', 0) -
            m0.get('nightshift_rejections_total{reason="connections"}', 0))
    print("# burst: %d connections at once in %.2f s: %d x 200, %d x 429, %d x 503, %d without a status%s; "
          "latency p50 %.2f s p99 %.2f s; /metrics counted %d responses (+1 its own), %d rejected for "
          "connections" % (n, wall, by.get(200, 0), by.get(429, 0), by.get(503, 0), len(none),
                           " (%s)" % none[0] if none else "", pct(lat, 50), pct(lat, 99), counted - 1, busy))
    if none:
        problems.append("burst: %d connections closed without a status, e.g. %s" % (len(none), none[0]))
    if counted != n + 1 - len(none):
        problems.append("burst: /metrics counted %d responses, %d were received (+1 /metrics)" %
                        (counted, n - len(none)))
    if busy != by.get(503, 0):
        problems.append("burst: %d x 503 but %d rejections for connections" % (by.get(503, 0), busy))
    st, _, _, dt, err = await exchange(host, port, data, 30)
    print("# burst: a request right after: %s in %.2f s" % (st, dt))
    if st != 200:
        problems.append("burst: the request right after got %s %s" % (st, err))


async def sequential(host, port, m, body):
    data = request_bytes(host, port, body)
    out = []
    for _ in range(m):
        st, _, resp, dt, err = await exchange(host, port, data, 30)
        ok = st == 200
        if ok:
            try:
                ok = bool(json.loads(resp)["choices"][0]["finish_reason"])
            except Exception:
                ok = False
        out.append((ok, dt, st, err))
    return out


async def slow_one(host, port, until, stats):
    """One slow client: a request line, then a header byte a second; re-opened when cut, until `until`."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except Exception:
            stats["refused"] += 1
            await asyncio.sleep(0.2)
            continue
        stats["open"] += 1
        try:
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            await writer.drain()
            while time.monotonic() < until:
                try:
                    got = await asyncio.wait_for(reader.read(4096), 1.0)
                except asyncio.TimeoutError:
                    writer.write(b"a")
                    await writer.drain()
                    continue
                if got.startswith(b"HTTP/1.1 408"):
                    stats["408"] += 1
                else:
                    stats["closed"] += 1
                break
        except Exception:
            stats["closed"] += 1
        finally:
            stats["open"] -= 1
            writer.close()


async def slow(host, port, s, m, body, hold_past, problems):
    base = await sequential(host, port, m, body)
    if not all(r[0] for r in base):
        problems.append("slow: a baseline request failed: %r" % ([r for r in base if not r[0]][0],))
    stats = {"open": 0, "refused": 0, "408": 0, "closed": 0}
    until = time.monotonic() + DEADLINE
    tasks = [asyncio.ensure_future(slow_one(host, port, until, stats)) for _ in range(s)]
    for _ in range(100):  # until they are all connected (10 s at most)
        if stats["open"] >= s:
            break
        await asyncio.sleep(0.1)
    opened = stats["open"]
    t_attack = time.monotonic()
    load = await sequential(host, port, m, body)
    t_load = time.monotonic() - t_attack
    if hold_past > 0:
        held = time.monotonic() + hold_past
        while time.monotonic() < held and stats["408"] < s:
            await asyncio.sleep(0.2)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    failed = [r for r in load if not r[0]]
    b50, l50, l99 = pct([r[1] for r in base], 50), pct([r[1] for r in load], 50), pct([r[1] for r in load], 99)
    print("# slow: %d slow-header connections open (%d refused); %d requests one after another: baseline p50 "
          "%.3f s, with them p50 %.3f s p99 %.3f s (p99 - baseline p50 = %.3f s), %d failed, in %.1f s; the slow "
          "clients got %d x 408, %d closed otherwise" % (opened, stats["refused"], m, b50, l50, l99, l99 - b50,
                                                         len(failed), t_load, stats["408"], stats["closed"]))
    if opened < s:
        problems.append("slow: only %d of %d slow connections were open at once" % (opened, s))
    if failed:
        problems.append("slow: %d requests failed under the slow connections, e.g. %r" % (len(failed), failed[0]))
    if l99 - b50 >= 1.0:
        problems.append("slow: p99 %.3f s is more than 1 s beyond the baseline's p50 %.3f s" % (l99, b50))
    if hold_past > 0 and stats["408"] < opened:
        problems.append("slow: %d of %d slow connections got a 408 within %.1f s more" %
                        (stats["408"], opened, hold_past))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--slow", type=int, default=600)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--hold-past", type=float, default=0)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname != "127.0.0.1":
        sys.exit("serve_burst: only 127.0.0.1")
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": a.max_tokens, "ignore_eos": True,
                       "temperature": 0.8}).encode()
    problems = []

    async def run():
        if a.burst > 0:
            await burst(u.hostname, u.port, a.burst, body, problems)
        if a.slow > 0:
            await slow(u.hostname, u.port, a.slow, a.requests, body, a.hold_past, problems)

    asyncio.run(run())
    for p in problems[:10]:
        print("FAIL serve_burst: %s" % p)
    if not problems:
        print("ok serve_burst")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
