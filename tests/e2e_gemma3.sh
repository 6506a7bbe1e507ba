#!/usr/bin/env bash
# e2e_gemma3 — the real Gemma 3 270M file (Q4_K_M, `scripts/fetch-model gemma3`; $NIGHTSHIFT_GEMMA3 or
# models/gemma-3-270m-q4_k_m.gguf), skipped when it is absent. The file is Google's pretrained (base)
# gemma-3-270m, not the instruction-tuned one, and holds no chat template: chat goes through nightshift's
# built-in gemma renderer (`--chat-template gemma`; test_chat checks it renders what the Gemma 3 Jinja
# template renders). Checks: info (gemma3, runs on cpu); plain completions that need the model to work
# ("Paris" after a question about France's capital; a count continued after 1,187 prompt tokens, far past
# the 512-position sliding window); a `nightshift run` of chat lines with the Gemma template (every line
# answered, the prompt tokens those of the template: <start_of_turn> etc. as single tokens).
. tests/lib.sh
m=${NIGHTSHIFT_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}
if [ ! -f "$m" ]; then
    skip gemma3 "no $m (scripts/fetch-model gemma3)"
    exit 0
fi
T=$e2e_tmp
export NIGHTSHIFT_CACHE_DIR=$T/cache

$NS info "$m" >"$T/info" 2>&1
grep -q "^architecture  *gemma3" "$T/info" && grep -q "^can run  *yes, on cpu" "$T/info" && ok gemma3_info ||
    fail gemma3_info "$(grep -E '^(architecture|can run)' "$T/info")"

out=$($NS generate -m "$m" -p "Question: What is the capital of France?
Answer:" -n 6 --threads 2 2>"$T/log")
case "$out" in *Paris*) ok gemma3_capital ;; *) fail gemma3_capital "'$out' $(tail -2 "$T/log")" ;; esac

p=$(python3 -c "print(', '.join(str(i) for i in range(1, 260)) + ',')")
out=$($NS generate -m "$m" -p "$p" -n 20 --threads 2 2>"$T/log")
case "$out" in " 260, 261, 262"*) ok gemma3_long_count ;; *) fail gemma3_long_count "'$out' $(tail -2 "$T/log")" ;; esac

cat >"$T/chat.jsonl" <<'EOF'
{"id": "capital", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 16, "temperature": 0}
{"id": "sys", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colors."}], "max_tokens": 16, "temperature": 0}
{"id": "turns", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Say yes."}], "max_tokens": 8, "temperature": 0}
EOF
if $NS run "$T/chat.jsonl" -m "$m" --chat-template gemma -o "$T/out.jsonl" --threads 2 -q 2>"$T/log"; then
    # "capital": <bos> <start_of_turn> user \n ... <end_of_turn> \n <start_of_turn> model \n = 16 tokens
    got=$(python3 -c '
import json, sys
res = {}
for l in open(sys.argv[1]):
    o = json.loads(l)
    b = o["response"]["body"]
    res[o["custom_id"]] = (b["usage"]["prompt_tokens"], b["usage"]["completion_tokens"], b["choices"][0]["message"]["content"])
print(len(res), res["capital"][0], all(c > 0 and t for _, c, t in res.values()))' "$T/out.jsonl")
    [ "$got" = "3 16 True" ] && ok gemma3_chat_run || fail gemma3_chat_run "$got"
else
    fail gemma3_chat_run "$(tail -3 "$T/log")"
fi
exit $E2E_FAILED
