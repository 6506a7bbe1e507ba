#!/usr/bin/env python3
"""A batch's request_counts follow its commits (issue 35): never more than one commit interval behind the store.

  serve_batch_progress.py NIGHTSHIFT MODEL TMPDIR

Starts a server on 127.0.0.1 (--port 0; killed at the end), uploads a batch of 900 requests whose prompt
lengths run against the input order (so an --order input run's files stay empty until late while its store
fills), and polls, every 0.05 s for at most 120 s: the store's committed lines (SQLite, read-only, beside the
run in WAL mode) at t0, then GET /v1/batches/{id}, then the store again. Each answer's completed + failed
must be at least what the store held one commit interval (1 s) before t0, and at most what it held after the
answer. Prints "ok NAME" / "FAIL NAME: why" lines for tests/run.
"""
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request

NS, MODEL, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
COMMIT_INTERVAL = 1.0  # run's default, which a batch keeps
# lines: a batch of several seconds on stories260K; a sanitizer build (it links libasan) is ~10x slower and
# a shared machine slower again, so it gets fewer lines (still many commit intervals)
_asan = b"libasan" in subprocess.run(["ldd", NS], capture_output=True).stdout
N = 300 if _asan else 900


def fail(name, why):
    print("FAIL %s: %s" % (name, why), flush=True)
    sys.exit(1)


def start():
    log = os.path.join(TMP, "progress.log")
    p = subprocess.Popen([NS, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "1",
                          "--data-dir", os.path.join(TMP, "progress.data")],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    for _ in range(200):
        text = open(log).read()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        if "ready:" in text and m:
            return p, "http://127.0.0.1:" + m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    fail("batch_progress_start", open(log).read()[-300:])


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def stored(db):
    """Lines the store has committed (result and error rows), 0 before the store exists."""
    if not os.path.exists(db):
        return 0
    try:
        c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        try:
            return c.execute("SELECT count(*) FROM lines").fetchone()[0]
        finally:
            c.close()
    except sqlite3.OperationalError:  # the table is not made yet
        return 0


def main():
    srv, base = start()
    try:
        backlog = os.path.join(TMP, "progress.jsonl")
        with open(backlog, "w") as f:
            for i in range(N):  # the first lines are the longest: ascending-length order runs them last
                f.write(json.dumps({"custom_id": "p%d" % i, "method": "POST", "url": "/v1/completions",
                                    "body": {"prompt": "Story %d. " % i + "Once upon a time " * (1 + (N - i) // 30),
                                             "max_tokens": 400, "temperature": 0}}) + "\n")
        up = subprocess.run(["curl", "-s", "-m", "30", "-F", "purpose=batch", "-F", "file=@" + backlog,
                             base + "/v1/files"], capture_output=True, timeout=60)
        fid = json.loads(up.stdout)["id"]
        req = urllib.request.Request(base + "/v1/batches", data=json.dumps(
            {"input_file_id": fid, "endpoint": "/v1/completions", "completion_window": "24h"}).encode(),
            headers={"Content-Type": "application/json"})
        bid = json.loads(urllib.request.urlopen(req, timeout=30).read())["id"]
        db = os.path.join(TMP, "progress.data", "batches", bid, "store.db")
        history = []  # (time, stored lines)
        polls = behind = 0
        first = None
        t_end = time.time() + 270  # the caller's timeout is 300 s
        while time.time() < t_end:
            t0 = time.time()
            history.append((t0, stored(db)))
            b = get(base + "/v1/batches/" + bid)
            after = stored(db)
            history.append((time.time(), after))
            rc = b["request_counts"]
            told = rc["completed"] + rc["failed"]
            due = max([n for t, n in history if t <= t0 - COMMIT_INTERVAL] or [0])
            polls += 1
            if told < due or told > after:
                fail("batch_progress_follows_commits", "at %.2f s: request_counts say %d, the store held %d a "
                     "commit interval before and %d after" % (t0 - history[0][0], told, due, after))
            behind = max(behind, after - told)
            if told and first is None:
                first = t0 - history[0][0]
            if b["status"] in ("completed", "failed", "cancelled", "expired"):
                break
            time.sleep(0.05)
        if b["status"] != "completed" or rc["completed"] != N:
            fail("batch_progress_follows_commits", "the batch ended %s with %s" % (b["status"], json.dumps(rc)))
        print("ok batch_progress_follows_commits (%d polls over %.1f s; first count above 0 at %.1f s; at most %d lines "
              "behind the store)" % (polls, time.time() - history[0][0], first, behind))
    finally:
        srv.kill()
        srv.wait()


main()
