#!/usr/bin/env bash
# End-to-end test of the Files and Batches API of `nightshift serve` (issue 16) with the official `openai`
# package from PyPI (tests/serve_batch.py: round trip against `nightshift run`, restart after SIGKILL, cancel,
# hostile ids, purposes and sizes), installed on first use into a venv next to the binary
# (NIGHTSHIFT_OPENAI_VENV overrides it); skipped, never passed, when it cannot be installed. Then checks that
# need no SDK: request_counts that follow the store's commits (tests/serve_batch_progress.py), a body that is
# not multipart, wrong methods, ids that are not ids, a second server on the same data directory.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip serve_batch "no $model"; exit 0; fi
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then skip serve_batch "curl and python3 are needed"; exit 0; fi

venv=${NIGHTSHIFT_OPENAI_VENV:-$(dirname "$NS")/openai-venv}
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 && timeout 180 "$venv/bin/pip" install -q --retries 0 --timeout 15 openai >/dev/null 2>&1
fi
if "$venv/bin/python" -c 'import openai' 2>/dev/null; then
    timeout 900 "$venv/bin/python" tests/serve_batch.py "$NS" "$model" "$e2e_tmp" || E2E_FAILED=1
else
    skip serve_batch_openai_sdk "the openai package could not be installed into $venv (no network?)"
fi

# request_counts follow the commits (no SDK: urllib, curl and the store read with sqlite3)
timeout 300 python3 tests/serve_batch_progress.py "$NS" "$model" "$e2e_tmp" || E2E_FAILED=1

# curl level
"$NS" serve -m "$model" --host 127.0.0.1 --port 0 -t 1 --data-dir "$e2e_tmp/curl.data" >/dev/null 2>"$e2e_tmp/curl.log" &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; rm -rf "$e2e_tmp"' EXIT
port=
for _ in $(seq 1 100); do
    grep -q "ready:" "$e2e_tmp/curl.log" 2>/dev/null && port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$e2e_tmp/curl.log" | grep -o '[0-9]*$') && break
    sleep 0.1
done
url=http://127.0.0.1:$port
st() { curl -s -m 20 -o "$e2e_tmp/body" -w '%{http_code}' "$@"; }
[ "$(st -X POST -H 'Content-Type: application/json' -d '{"purpose":"batch"}' "$url/v1/files")" = 400 ] &&
    grep -q multipart "$e2e_tmp/body" && ok serve_batch_upload_not_multipart || fail serve_batch_upload_not_multipart "$(cat "$e2e_tmp/body")"
[ "$(st -F purpose=batch -F other=1 -F "file=@$0" "$url/v1/files")" = 400 ] && ok serve_batch_upload_extra_field ||
    fail serve_batch_upload_extra_field "$(cat "$e2e_tmp/body")"
[ "$(st -F purpose=batch "$url/v1/files")" = 400 ] && ok serve_batch_upload_no_file || fail serve_batch_upload_no_file "$(cat "$e2e_tmp/body")"
[ "$(st -X DELETE "$url/v1/batches")" = 405 ] && ok serve_batch_wrong_method || fail serve_batch_wrong_method "$(cat "$e2e_tmp/body")"
[ "$(st -X GET "$url/v1/batches/batch_x/cancel")" = 405 ] && ok serve_batch_cancel_needs_post || fail serve_batch_cancel_needs_post "$(cat "$e2e_tmp/body")"
[ "$(st "$url/v1/files/..%2F..%2Fetc%2Fpasswd/content")" = 404 ] && ok serve_batch_traversal_404 || fail serve_batch_traversal_404 "$(cat "$e2e_tmp/body")"
[ "$(st -H 'Content-Type: application/json' -d '{"input_file_id":"file-x","endpoint":"/v1/completions","completion_window":"24h","extra":1}' "$url/v1/batches")" = 400 ] &&
    ok serve_batch_unknown_field || fail serve_batch_unknown_field "$(cat "$e2e_tmp/body")"
[ "$(st -H 'Content-Type: application/json' -d '{"input_file_id":' "$url/v1/batches")" = 400 ] && ok serve_batch_bad_json || fail serve_batch_bad_json "$(cat "$e2e_tmp/body")"
[ "$(st "$url/v1/batches?limit=0")" = 400 ] && ok serve_batch_bad_limit || fail serve_batch_bad_limit "$(cat "$e2e_tmp/body")"
expect_err serve_batch_data_dir_locked 1 "in use by another" "$NS" serve -m "$model" --port 0 -t 1 --data-dir "$e2e_tmp/curl.data"
kill -TERM $pid; wait $pid && ok serve_batch_curl_stop || fail serve_batch_curl_stop "exit status"
exit $E2E_FAILED
