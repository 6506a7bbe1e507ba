#!/usr/bin/env bash
# End-to-end test of `nightshift serve` (issue 16) with curl, on stories260K. Every server listens on
# 127.0.0.1 on a free port (--port 0; the port is read from its log), every curl call has a time limit, and
# every server is stopped on exit. Covers: completions, chat, streaming (SSE lines ending in data: [DONE]),
# models, health, metrics, the API key (401; /health open), malformed JSON, invalid UTF-8 and unknown fields
# (400), huge bodies (413, with and without Content-Length), oversized headers, unknown paths (404), wrong
# methods (405), 429 with Retry-After from a full queue, a client that disconnects (its request is
# cancelled), an idle client cut by --idle-timeout, SIGTERM draining (exit 0), and the server's greedy
# results equal to `nightshift run`'s for the same requests.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip serve "no $model"; exit 0; fi
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then skip serve "curl and python3 are needed"; exit 0; fi

pids=""
cleanup() {
    for p in $pids; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$e2e_tmp"
}
trap cleanup EXIT

# start_server NAME ARGS...: starts a server, waits until it is ready (10 s at most); sets PID, PORT, URL.
start_server() {
    local name=$1; shift
    "$NS" serve -m "$model" --host 127.0.0.1 --port 0 -t 1 --data-dir "$e2e_tmp/$name.data" "$@" >"$e2e_tmp/$name.out" 2>"$e2e_tmp/$name.log" &
    PID=$!
    pids="$pids $PID"
    PORT=
    for _ in $(seq 1 100); do
        if grep -q "ready:" "$e2e_tmp/$name.log" 2>/dev/null; then
            PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$e2e_tmp/$name.log" | grep -o '[0-9]*$')
            break
        fi
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    URL=http://127.0.0.1:$PORT
    [ -n "$PORT" ]
}

# stop_server: SIGTERM, then waits (10 s at most) and sets RC to the exit status ("killed" if it hung).
stop_server() {
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID"; wait "$PID" 2>/dev/null; RC=killed; return; fi
    wait "$PID"
    RC=$?
}

# req METHOD PATH [curl args...]: the status code on the first line of $e2e_tmp/code, the body in $e2e_tmp/body,
# the headers in $e2e_tmp/headers.
req() {
    local m=$1 p=$2; shift 2
    curl -s -m 20 -X "$m" -o "$e2e_tmp/body" -D "$e2e_tmp/headers" -w '%{http_code}' "$@" "$URL$p" >"$e2e_tmp/code"
}
code() { cat "$e2e_tmp/code"; }
json() { python3 -c "import json,sys; d=json.load(open('$e2e_tmp/body')); print($1)" 2>/dev/null; }
check() { # check NAME WANT_CODE PYTHON_CONDITION (over d, the body's JSON)
    local c; c=$(code)
    if [ "$c" = "$2" ] && [ "$(json "bool($3)")" = True ]; then ok "$1"; else fail "$1" "HTTP $c: $(head -c 300 "$e2e_tmp/body")"; fi
}

if ! start_server main --chat-template chatml --api-key sekret --max-body-bytes 100000 --idle-timeout 2 --header-timeout 3 --body-timeout 3; then
    fail serve_start "$(tail -5 "$e2e_tmp/main.log")"
    exit 1
fi
ok serve_start
H=(-H "Authorization: Bearer sekret" -H "Content-Type: application/json")

# --- the endpoints ----------------------------------------------------------------------------------------
req GET /health
check serve_health_open 200 'd["status"] == "ok"'
req GET /v1/models "${H[@]}"
check serve_models 200 'd["object"] == "list" and d["data"][0]["id"] == "stories260K" and d["data"][0]["object"] == "model"'
req GET /v1/models/stories260K "${H[@]}"
check serve_model 200 'd["id"] == "stories260K"'
req POST /v1/completions "${H[@]}" -d '{"model":"stories260K","prompt":"Once upon a time","max_tokens":24,"temperature":0}'
check serve_completion 200 'd["object"] == "text_completion" and d["choices"][0]["finish_reason"] == "length" and
    len(d["choices"][0]["text"]) > 20 and d["usage"]["completion_tokens"] == 24 and d["usage"]["total_tokens"] == 24 + d["usage"]["prompt_tokens"] and d["id"].startswith("cmpl-")'
req POST /v1/chat/completions "${H[@]}" -d '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":16,"temperature":0,"n":2,"seed":4}'
check serve_chat 200 'd["object"] == "chat.completion" and len(d["choices"]) == 2 and d["choices"][1]["index"] == 1 and
    d["choices"][0]["message"]["role"] == "assistant" and isinstance(d["choices"][0]["message"]["content"], str)'

# structured output reaches the engine through the server too
req POST /v1/completions "${H[@]}" -d '{"prompt":"Once upon a time","max_tokens":16,"temperature":0.9,"seed":3,"guided_choice":["happy","sad"]}'
check serve_guided_choice 200 'd["choices"][0]["text"] in ("happy", "sad") and d["choices"][0]["finish_reason"] == "stop"'

# streaming: SSE lines, deltas that add up to the non-streamed text, usage, then data: [DONE]
req POST /v1/completions "${H[@]}" -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}'
whole=$(json 'd["choices"][0]["text"]')
curl -s -N -m 20 "${H[@]}" -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
    -D "$e2e_tmp/sse_headers" "$URL/v1/completions" >"$e2e_tmp/sse"
python3 - "$e2e_tmp/sse" "$whole" <<'PY' && ok serve_stream || fail serve_stream "$(head -c 400 "$e2e_tmp/sse")"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), events[:3]
assert events[-1] == "data: [DONE]", events[-1]
chunks = [json.loads(e[6:]) for e in events[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
assert text == sys.argv[2], (text, sys.argv[2])
assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["text"]) > 5
assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
assert chunks[-1]["usage"]["completion_tokens"] == 24 and chunks[-1]["choices"] == []
PY
grep -qi '^content-type: text/event-stream' "$e2e_tmp/sse_headers" && ok serve_stream_content_type || fail serve_stream_content_type "$(cat "$e2e_tmp/sse_headers")"
curl -s -N -m 20 "${H[@]}" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true}' "$URL/v1/chat/completions" >"$e2e_tmp/sse"
python3 - "$e2e_tmp/sse" <<'PY' && ok serve_stream_chat || fail serve_stream_chat "$(head -c 400 "$e2e_tmp/sse")"
import json, sys
events = [e for e in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if e]
assert events[-1] == "data: [DONE]"
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
PY

req GET /metrics "${H[@]}"
if [ "$(code)" = 200 ] && grep -q '^nightshift_queue_depth ' "$e2e_tmp/body" && grep -q '^nightshift_running_sequences ' "$e2e_tmp/body" &&
    grep -q '^nightshift_kv_usage_ratio ' "$e2e_tmp/body" && grep -q '^nightshift_generation_tokens_per_second ' "$e2e_tmp/body" &&
    grep -q '^nightshift_request_duration_seconds_bucket{le="+Inf"} [1-9]' "$e2e_tmp/body" &&
    grep -q '^nightshift_rejections_total{reason="queue_full"} ' "$e2e_tmp/body"; then ok serve_metrics; else fail serve_metrics "$(head -c 300 "$e2e_tmp/body")"; fi

# --- hostile and wrong requests: clear 4xx, and the server goes on ----------------------------------------
req GET /v1/models
check serve_no_key_401 401 'd["error"]["type"] == "authentication_error"'
grep -qi '^www-authenticate: Bearer' "$e2e_tmp/headers" && ok serve_401_header || fail serve_401_header "$(cat "$e2e_tmp/headers")"
req POST /v1/completions -H "Authorization: Bearer wrong" -d '{"prompt":"x"}'
check serve_wrong_key_401 401 '"API key" in d["error"]["message"]'
req POST /v1/completions "${H[@]}" -d '{"prompt":"Once", "max_tokens":'
check serve_malformed_json_400 400 'd["error"]["code"] == "invalid_json" and "not JSON" in d["error"]["message"]'
printf '{"prompt":"Once \xff upon"}' >"$e2e_tmp/bad_utf8"
req POST /v1/completions "${H[@]}" --data-binary @"$e2e_tmp/bad_utf8"
check serve_invalid_utf8_400 400 'd["error"]["code"] == "invalid_utf8" and "invalid UTF-8 at byte 16" in d["error"]["message"]'
req POST /v1/completions "${H[@]}" -d '{"prompt":"Once","temperature":7}'
check serve_out_of_range_400 400 '"temperature" in d["error"]["message"] and d["error"]["code"] == "invalid_value"'
req POST /v1/completions "${H[@]}" -d '{"prompt":"Once","frobnicate":true}'
check serve_unknown_field_400 400 'd["error"]["code"] == "unknown_parameter" and d["error"]["param"] == "frobnicate"'
req POST /v1/chat/completions "${H[@]}" -d '{"prompt":"Once"}'
check serve_wrong_kind_400 400 '"messages" in d["error"]["message"]'
head -c 300000 /dev/zero | tr '\0' 'a' >"$e2e_tmp/huge"
req POST /v1/completions "${H[@]}" --data-binary @"$e2e_tmp/huge"
check serve_huge_body_413 413 'd["error"]["code"] == "body_too_large"'
req POST /v1/completions "${H[@]}" -H "Transfer-Encoding: chunked" --data-binary @"$e2e_tmp/huge"
check serve_huge_chunked_body_413 413 'd["error"]["code"] == "body_too_large"'
big=$(head -c 40000 /dev/zero | tr '\0' 'b')
curl -s -m 10 -o /dev/null -w '%{http_code}' -H "X-Big: $big" "$URL/health" >"$e2e_tmp/code" 2>/dev/null
case "$(code)" in 4*|000) ok serve_huge_header_refused ;; *) fail serve_huge_header_refused "HTTP $(code)" ;; esac
req GET /v1/nothing "${H[@]}"
check serve_unknown_path_404 404 'd["error"]["code"] == "not_found"'
req GET /../../etc/passwd "${H[@]}" --path-as-is
check serve_no_paths_404 404 'd["error"]["code"] == "not_found"'
req GET /v1/completions "${H[@]}"
check serve_wrong_method_405 405 'd["error"]["code"] == "method_not_allowed"'
grep -qi '^allow: POST' "$e2e_tmp/headers" && ok serve_405_allow || fail serve_405_allow "$(cat "$e2e_tmp/headers")"
req DELETE /health
check serve_wrong_method_health_405 405 'True'

# an idle client (half a request line, then nothing) is cut by --idle-timeout; the server goes on
python3 - "$PORT" <<'PY' && ok serve_idle_client_cut || fail serve_idle_client_cut "connection stayed open"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
t0 = time.time()
try:
    data = s.recv(100)  # the server closes: b"" (or a 408)
except socket.timeout:
    sys.exit(1)
sys.exit(0 if time.time() - t0 < 8 else 1)
PY
# a client that trickles its body (a byte every 0.5 s: never idle) is answered 408 by --body-timeout
python3 - "$PORT" <<'PY' && ok serve_slow_body_408 || fail serve_slow_body_408 "no 408 within 6 s"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n"
          b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
s.setblocking(False)
t0, got = time.time(), b""
while time.time() - t0 < 6 and not got:
    time.sleep(0.5)
    try:
        s.send(b" ")
        got = s.recv(100)
    except BlockingIOError:
        pass
    except OSError:
        break
sys.exit(0 if got.startswith(b"HTTP/1.1 408") and time.time() - t0 >= 2.5 else 1)
PY
# a slowloris client (a header byte every 0.5 s: never idle) is cut by --header-timeout
python3 - "$PORT" <<'PY' && ok serve_slowloris_cut || fail serve_slowloris_cut "connection stayed open"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
t0 = time.time()
try:
    while time.time() - t0 < 8:
        s.sendall(b"X")
        time.sleep(0.5)
except OSError:  # reset or broken pipe: closed by the server
    sys.exit(0 if time.time() - t0 >= 2.5 else 1)
sys.exit(1)
PY
req GET /health
check serve_alive_after_hostile 200 'd["status"] == "ok"'

# a client that disconnects mid-request (after 0.3 s of a request of about 1.5 s): its request is cancelled
curl -s -m 0.3 "${H[@]}" -d '{"prompt":"Once","max_tokens":480,"ignore_eos":true,"n":128}' "$URL/v1/completions" >/dev/null 2>&1
for _ in $(seq 1 50); do
    req GET /metrics "${H[@]}"
    grep -q '^nightshift_completions_total{finish="cancelled"} [1-9]' "$e2e_tmp/body" && break
    sleep 0.1
done
grep -q '^nightshift_completions_total{finish="cancelled"} [1-9]' "$e2e_tmp/body" && ok serve_disconnect_cancels || fail serve_disconnect_cancels "$(grep finish= "$e2e_tmp/body")"

stop_server
[ "$RC" = 0 ] && grep -q "stopped" "$e2e_tmp/main.log" && ok serve_sigterm_exit_0 || fail serve_sigterm_exit_0 "exit $RC: $(tail -3 "$e2e_tmp/main.log")"

# --- the server's greedy results equal run's --------------------------------------------------------------
cat >"$e2e_tmp/backlog.jsonl" <<'EOF'
{"id":"a","prompt":"Once upon a time","max_tokens":48,"temperature":0}
{"id":"b","prompt":"Lily and Tom went to the park","max_tokens":48,"temperature":0,"stop":["."]}
{"id":"c","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":40,"temperature":0}
{"id":"d","prompt":"The dog","max_tokens":32,"temperature":0.8,"seed":9}
EOF
$NS run "$e2e_tmp/backlog.jsonl" -m "$model" -o "$e2e_tmp/run.jsonl" --chat-template chatml -q -t 1 2>"$e2e_tmp/run.err" ||
    fail serve_equals_run "run failed: $(tail -2 "$e2e_tmp/run.err")"
start_server same --chat-template chatml || fail serve_start_2 "$(tail -3 "$e2e_tmp/same.log")"
python3 - "$e2e_tmp/backlog.jsonl" "$e2e_tmp/run.jsonl" "$URL" <<'PY' && ok serve_equals_run || fail serve_equals_run "see above"
import json, sys, urllib.request
lines = [json.loads(l) for l in open(sys.argv[1])]
run = {}
for l in open(sys.argv[2]):
    d = json.loads(l)
    run[d["custom_id"]] = d["response"]["body"]
bad = 0
for l in lines:
    chat = "messages" in l
    body = {k: v for k, v in l.items() if k != "id"}
    req = urllib.request.Request(sys.argv[3] + ("/v1/chat/completions" if chat else "/v1/completions"),
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    got = json.load(urllib.request.urlopen(req, timeout=20))
    want = run[l["id"]]
    g, w = got["choices"][0], want["choices"][0]
    gt = g["message"]["content"] if chat else g["text"]
    wt = w["message"]["content"] if chat else w["text"]
    usage = lambda u: {k: v for k, v in u.items() if k != "prompt_tokens_details"}  # cached_tokens: what ran before
    if gt != wt or g["finish_reason"] != w["finish_reason"] or usage(got["usage"]) != usage(want["usage"]):
        print(f"{l['id']}: server {gt!r} {g['finish_reason']} {got['usage']} vs run {wt!r} {w['finish_reason']} {want['usage']}")
        bad += 1
sys.exit(1 if bad else 0)
PY
stop_server
[ "$RC" = 0 ] || fail serve_same_exit "exit $RC"

# --- admission: a full queue answers 429 with Retry-After at once; draining answers 503 --------------------
start_server tight --max-queue 1 --max-seqs 1 --drain-timeout 0.2 || fail serve_start_3 "$(tail -3 "$e2e_tmp/tight.log")"
long='{"prompt":"Once","max_tokens":480,"ignore_eos":true}'
# 64 completions one at a time: seconds of work, counted as queued beyond the one running sequence
curl -s -m 20 -d '{"prompt":"Once","max_tokens":480,"ignore_eos":true,"n":64}' "$URL/v1/completions" -o /dev/null &
for _ in $(seq 1 50); do
    req GET /metrics
    grep -q '^nightshift_active_requests 1' "$e2e_tmp/body" && break
    sleep 0.05
done
t0=$(date +%s%N)
req POST /v1/completions -d "$long"
check serve_429_queue_full 429 'd["error"]["code"] == "rate_limit_exceeded" and "queue_full" in d["error"]["message"]'
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -lt 1000 ] && ok serve_429_fast || fail serve_429_fast "$ms ms"
grep -qi '^retry-after: [1-9]' "$e2e_tmp/headers" && ok serve_429_retry_after || fail serve_429_retry_after "$(cat "$e2e_tmp/headers")"
kill -TERM "$PID"
sleep 0.05
req POST /v1/completions -d "$long"
case "$(code)" in 503|000) ok serve_503_draining ;; *) fail serve_503_draining "HTTP $(code)" ;; esac
for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
wait "$PID"
RC=$?
[ "$RC" = 0 ] && grep -q "cancelled" "$e2e_tmp/tight.log" && ok serve_drain_deadline || fail serve_drain_deadline "exit $RC: $(tail -3 "$e2e_tmp/tight.log")"
wait

# --- flags ---------------------------------------------------------------------------------------------------
expect_err -i serve_bad_host 1 "not an IPv4 or IPv6" $NS serve -m "$model" --host nowhere --port 0 --data-dir "$e2e_tmp/bad.data"
expect_err -i serve_bad_port 2 "port" $NS serve -m "$model" --port 70000
$NS serve --help >"$e2e_tmp/help" 2>&1 && grep -q -- "--api-key" "$e2e_tmp/help" && ok serve_help || fail serve_help "no usage"

exit $E2E_FAILED
