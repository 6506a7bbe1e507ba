#!/usr/bin/env python3
"""The Files and Batches API of `nightshift serve`, driven by the official `openai` package (issue 16).

  serve_batch.py NIGHTSHIFT MODEL TMPDIR

Starts servers on 127.0.0.1 (--port 0, the port read from the log) with their own --data-dir under TMPDIR,
and prints "ok NAME" / "FAIL NAME: why" lines for tests/run:
  - round trip: upload (purpose batch), create, poll until completed, download the output and error files;
    they equal what `nightshift run --order input` writes for the same file, byte for byte once the per-run
    parts are blanked: each line's "id" (batch_req_...), "request_id" (req_...), the body's "id" and
    "created"; a line the backlog cannot use is in the error file as run has it
  - an interactive request answered while a batch runs
  - restart: SIGKILL mid-batch, a new server on the same data directory resumes it; every custom_id ends in
    exactly one of the files once, and the files equal run's as above
  - cancel: a running batch ends cancelled; what it finished is in its output file, each line once
  - hostile: an unknown file or batch id (404), a file of another purpose (400), an upload over
    --max-upload-bytes (413), a batch on a file that is not of purpose batch (400)
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import openai

NS, MODEL, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
FAILED = False
N_BIG = 2000  # lines of the batches that are killed or cancelled while they run (several seconds of work)


def ok(name):
    print(f"ok {name}", flush=True)


def fail(name, why):
    global FAILED
    FAILED = True
    print(f"FAIL {name}: {why}", flush=True)


def check(name, cond, why=""):
    ok(name) if cond else fail(name, why)


SERVERS = []  # every server started, killed at the end whatever happened


class Server:
    def __init__(self, name, data, *args):
        self.log = os.path.join(TMP, name + ".log")
        self.p = subprocess.Popen([NS, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "1",
                                   "--data-dir", data, *args],
                                  stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        SERVERS.append(self.p)
        self.port = None
        for _ in range(200):
            text = open(self.log).read()
            if "ready:" in text:
                self.port = int(re.search(r"listening on http://127\.0\.0\.1:(\d+)", text).group(1))
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            raise RuntimeError("server did not start: " + open(self.log).read()[-500:])
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=30)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return "hung"

    def kill(self):
        self.p.kill()
        self.p.wait()


def backlog(path, n, max_tokens, bad=True):
    """n completion lines (greedy), plus (bad) a line that is not JSON and one with a bad parameter."""
    words = ["Once", "The dog", "A little girl", "Tom and Sue", "The sun", "One day", "Lily saw", "The cat"]
    with open(path, "w") as f:
        for i in range(n):
            body = {"model": "stories260K", "prompt": f"{words[i % len(words)]} {i}", "max_tokens": max_tokens,
                    "temperature": 0}
            f.write(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": "/v1/completions",
                                "body": body}) + "\n")
            if bad and i == 2:
                f.write("this line is not JSON\n")
            if bad and i == 4:
                f.write(json.dumps({"custom_id": "bad-temp", "method": "POST", "url": "/v1/completions",
                                    "body": {"prompt": "x", "max_tokens": 4, "temperature": -3}}) + "\n")


PER_RUN = [(re.compile(rb'"id":"batch_req_[0-9a-f]+"'), b'"id":"batch_req_X"'),
           (re.compile(rb'"request_id":"req_[0-9a-f]+"'), b'"request_id":"req_X"'),
           (re.compile(rb'"id":"(chatcmpl|cmpl)-[0-9a-f]+"'), b'"id":"cmpl-X"'),
           (re.compile(rb'"created":[0-9]+'), b'"created":0')]


def blank(data):
    for rx, to in PER_RUN:
        data = rx.sub(to, data)
    return data


def run_files(path):
    """What `nightshift run --order input` writes for path: (output bytes, error bytes)."""
    out = path + ".run.jsonl"
    err = path + ".run.errors.jsonl"
    for p in (out, err, path + ".run.db"):
        if os.path.exists(p):
            os.unlink(p)
    subprocess.run([NS, "run", path, "-m", MODEL, "-t", "1", "-q", "--order", "input", "-o", out, "--errors", err,
                    "--store", path + ".run.db", "--record", path + ".run.record.json"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return open(out, "rb").read(), open(err, "rb").read()


def content(client, file_id):
    return client.files.content(file_id).read() if file_id else b""


def wait_status(client, batch_id, statuses, seconds):
    deadline = time.time() + seconds
    while True:
        b = client.batches.retrieve(batch_id)
        if b.status in statuses or time.time() > deadline:
            return b
        time.sleep(0.2)


def same_as_run(name, client, b, path):
    out, err = content(client, b.output_file_id), content(client, b.error_file_id)
    want_out, want_err = run_files(path)
    check(name + "_output", blank(out) == blank(want_out) and out,
          f"{len(out)} bytes vs run's {len(want_out)}: {out[:200]!r} / {want_out[:200]!r}")
    check(name + "_errors", blank(err) == blank(want_err),
          f"{err[:300]!r} / {want_err[:300]!r}")
    return out, err


def custom_ids(*files):
    ids = []
    for data in files:
        for line in data.splitlines():
            ids.append(json.loads(line)["custom_id"])
    return ids


def test_round_trip():
    s = Server("rt", os.path.join(TMP, "rt.data"))
    c = s.client
    path = os.path.join(TMP, "small.jsonl")
    backlog(path, 12, 16)
    f = c.files.create(file=open(path, "rb"), purpose="batch")
    check("batch_upload", f.id.startswith("file-") and f.purpose == "batch" and f.bytes == os.path.getsize(path),
          str(f))
    got = c.files.retrieve(f.id)
    check("batch_file_retrieve", got.id == f.id and got.filename == "small.jsonl", str(got))
    check("batch_file_content", c.files.content(f.id).read() == open(path, "rb").read(), "content differs")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h",
                         metadata={"team": "night"})
    check("batch_create", b.id.startswith("batch_") and b.status in ("validating", "in_progress")
          and b.metadata == {"team": "night"}, str(b))
    b = wait_status(c, b.id, ("completed", "failed", "cancelled"), 120)
    rc = b.request_counts
    check("batch_completed", b.status == "completed" and rc.total == 14 and rc.completed == 12 and rc.failed == 2
          and b.completed_at and b.in_progress_at, str(b))
    same_as_run("batch_same_as_run", c, b, path)
    listed = c.batches.list(limit=5)
    check("batch_list", [x.id for x in listed.data] == [b.id], str(listed))
    out = c.files.retrieve(b.output_file_id)
    check("batch_output_file_object", out.purpose == "batch_output" and out.bytes > 0, str(out))
    # an interactive request while a batch runs: answered (interactive first), then the batch completes
    big = os.path.join(TMP, "busy.jsonl")
    backlog(big, 200, 48, bad=False)
    f2 = c.files.create(file=open(big, "rb"), purpose="batch")
    b2 = c.batches.create(input_file_id=f2.id, endpoint="/v1/completions", completion_window="24h")
    wait_status(c, b2.id, ("in_progress",), 30)
    t0 = time.time()
    r = c.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=8, temperature=0)
    dt = time.time() - t0
    b2now = c.batches.retrieve(b2.id)
    print(f"# interactive request during a batch ({b2now.status}): {dt * 1000:.0f} ms", flush=True)
    check("batch_interactive_beside_batch", r.choices[0].text and dt < 10, f"{dt:.1f} s")
    b2 = wait_status(c, b2.id, ("completed", "failed", "cancelled"), 300)
    check("batch_busy_completed", b2.status == "completed" and b2.request_counts.completed == 200, str(b2))
    check("batch_stop", s.stop() == 0, "exit status")


def test_restart():
    data = os.path.join(TMP, "restart.data")
    s = Server("restart1", data)
    path = os.path.join(TMP, "restart.jsonl")
    backlog(path, N_BIG, 128)
    f = s.client.files.create(file=open(path, "rb"), purpose="batch")
    b = s.client.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    wait_status(s.client, b.id, ("in_progress",), 30)
    store = os.path.join(data, "batches", b.id, "output.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline and (not os.path.exists(store) or os.path.getsize(store) == 0):
        time.sleep(0.02)
    done_before = len(open(store, "rb").read().splitlines()) if os.path.exists(store) else 0
    s.kill()  # SIGKILL mid-batch
    s2 = Server("restart2", data)
    # while it runs, the counts follow the files: total fixed, completed never going back, within total
    snaps = []
    deadline = time.time() + 300
    while time.time() < deadline:
        b2 = s2.client.batches.retrieve(b.id)
        if b2.status != "in_progress":
            break
        snaps.append((b2.request_counts.total, b2.request_counts.completed, b2.request_counts.failed))
        time.sleep(0.1)
    b2 = wait_status(s2.client, b.id, ("completed", "failed", "cancelled"), 300)
    counted = [x for x in snaps if x[0]]
    print(f"# restart: {len(snaps)} polls in progress, counts seen {sorted(set(counted))[:3]}...", flush=True)
    check("batch_progress_counts", all(t == N_BIG + 2 and c + f <= t for t, c, f in counted)
          and all(a[1] <= b_[1] for a, b_ in zip(counted, counted[1:])), str(counted[:20]))
    check("batch_restart_completed", b2.status == "completed" and b2.request_counts.total == N_BIG + 2, str(b2))
    print(f"# restart: {done_before} result lines were written before the SIGKILL", flush=True)
    check("batch_restart_killed_mid_batch", 0 < done_before < N_BIG, f"{done_before} lines before the kill")
    out, err = same_as_run("batch_restart_same_as_run", s2.client, b2, path)
    ids = custom_ids(out, err)
    want = [f"req-{i}" for i in range(N_BIG)] + ["bad-temp", None]
    check("batch_restart_each_custom_id_once", sorted(ids, key=str) == sorted(want, key=str),
          f"{len(ids)} lines, {len(set(map(str, ids)))} distinct")
    check("batch_restart_stop", s2.stop() == 0, "exit status")


def test_cancel():
    data = os.path.join(TMP, "cancel.data")
    s = Server("cancel", data)
    c = s.client
    path = os.path.join(TMP, "cancel.jsonl")
    backlog(path, N_BIG, 128, bad=False)
    f = c.files.create(file=open(path, "rb"), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    queued = c.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    wait_status(c, b.id, ("in_progress",), 30)
    store = os.path.join(data, "batches", b.id, "output.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline and (not os.path.exists(store) or os.path.getsize(store) == 0):
        time.sleep(0.02)
    r = c.batches.cancel(b.id)
    check("batch_cancel_answer", r.status in ("cancelling", "cancelled"), str(r))
    q = c.batches.cancel(queued.id)
    check("batch_cancel_queued", q.status == "cancelled" and q.output_file_id is None, str(q))
    b = wait_status(c, b.id, ("cancelled", "completed", "failed"), 60)
    out = content(c, b.output_file_id)
    ids = custom_ids(out)
    check("batch_cancelled", b.status == "cancelled" and b.cancelled_at and len(ids) == len(set(ids)) < N_BIG
          and b.request_counts.completed == len(ids), f"{b.status}, {len(ids)} lines")
    try:
        c.batches.cancel(b.id)
        ok("batch_cancel_again")
    except openai.APIStatusError as x:
        fail("batch_cancel_again", str(x))
    # the server still runs batches after a cancel
    small = os.path.join(TMP, "after_cancel.jsonl")
    backlog(small, 3, 4, bad=False)
    f2 = c.files.create(file=open(small, "rb"), purpose="batch")
    b2 = c.batches.create(input_file_id=f2.id, endpoint="/v1/completions", completion_window="24h")
    b2 = wait_status(c, b2.id, ("completed", "failed", "cancelled"), 60)
    check("batch_after_cancel", b2.status == "completed" and b2.request_counts.completed == 3, str(b2))
    check("batch_cancel_stop", s.stop() == 0, "exit status")


def expect_status(name, status, fn):
    try:
        fn()
        fail(name, f"no error (want {status})")
    except openai.APIStatusError as x:
        check(name, x.status_code == status, f"HTTP {x.status_code}: {x}")


def test_hostile():
    s = Server("hostile", os.path.join(TMP, "hostile.data"), "--max-upload-bytes", "1000")
    c = s.client
    expect_status("batch_unknown_file_404", 404, lambda: c.files.retrieve("file-" + "0" * 24))
    expect_status("batch_unknown_file_content_404", 404, lambda: c.files.content("file-" + "0" * 24))
    expect_status("batch_bad_file_id_404", 404, lambda: c.files.retrieve("..%2F..%2Fetc%2Fpasswd"))
    expect_status("batch_unknown_batch_404", 404, lambda: c.batches.retrieve("batch_" + "0" * 24))
    path = os.path.join(TMP, "h.jsonl")
    backlog(path, 2, 4, bad=False)
    expect_status("batch_wrong_purpose_400", 400, lambda: c.files.create(file=open(path, "rb"), purpose="fine-tune"))
    big = os.path.join(TMP, "big.jsonl")
    backlog(big, 40, 4, bad=False)
    expect_status("batch_upload_too_large_413", 413, lambda: c.files.create(file=open(big, "rb"), purpose="batch"))
    expect_status("batch_create_unknown_file_404", 404, lambda: c.batches.create(
        input_file_id="file-" + "1" * 24, endpoint="/v1/completions", completion_window="24h"))
    f = c.files.create(file=open(path, "rb"), purpose="batch")
    expect_status("batch_create_bad_endpoint_400", 400, lambda: c.batches.create(
        input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h"))
    expect_status("batch_create_bad_window_400", 400, lambda: c.batches.create(
        input_file_id=f.id, endpoint="/v1/completions", completion_window="1h"))
    # files on disk: only names the server made
    names = sorted(os.listdir(os.path.join(TMP, "hostile.data", "files")))
    check("batch_files_server_names", all(re.fullmatch(r"file-[0-9a-f]{24}\.jsonl?", n) for n in names), str(names))
    check("batch_hostile_stop", s.stop() == 0, "exit status")


for t in (test_round_trip, test_restart, test_cancel, test_hostile):
    try:
        t()
    except Exception as x:  # a crash of one group fails it, the others still run
        fail(t.__name__, f"{type(x).__name__}: {x}")
    for p in SERVERS:  # a group that failed half-way leaves no server behind
        if p.poll() is None:
            p.kill()
            p.wait()
sys.exit(1 if FAILED else 0)
