#!/usr/bin/env bash
# End-to-end test of issue 35's one request path: `nightshift serve` answers every body as `nightshift run`
# answers the same body in a backlog line (tests/serve_parity.py: over 50 bad bodies with the same error
# code, message, param and status; structured output, logprobs, echo, n, penalties and logit_bias with the
# same choices and usage; logprobs streamed; the fields README lists as refused are refused by both). The
# server listens on 127.0.0.1 only and is killed at the end.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip serve_parity "no $model"; exit 0; fi
if ! command -v python3 >/dev/null; then skip serve_parity "python3 is needed"; exit 0; fi
timeout 900 python3 tests/serve_parity.py "$NS" "$model" "$e2e_tmp" || E2E_FAILED=1
exit $E2E_FAILED
