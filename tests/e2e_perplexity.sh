#!/usr/bin/env bash
# e2e_perplexity — `nightshift perplexity` through the real binary: usage errors exit 2, runtime errors 1,
# the output ends with llama.cpp's "Final estimate: PPL = X +/- Y" line after the running estimates,
# --json gives the same numbers, --stride scores the tokens the rule says, the batch size changes nothing,
# and a quantized model's perplexity is close to its source's. SmolLM2 parts skip when it is not fetched.
. tests/lib.sh

src="$SHARED/models/stories260K.gguf"
text=examples/stories.txt
smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
P() { "$NS" perplexity "$@"; }

P --help >"$e2e_tmp/help" 2>&1 && grep -q -- "--stride" "$e2e_tmp/help" && ok perplexity_help || fail perplexity_help "no help"
expect_err perplexity_no_text 2 "give the text file" P -m "$src"
expect_err perplexity_unknown_flag 2 "unexpected argument '--bogus'" P -m "$src" -f "$text" --bogus
expect_err perplexity_two_texts 2 "unexpected argument" P -m "$src" "$text" "$text"
expect_err perplexity_bad_ctx 2 "--ctx expects an integer in \[3," P -m "$src" -f "$text" --ctx 2
expect_err perplexity_bad_kv_type 2 "--kv-type q4: expected f32, f16, q8_0 or fp8" P -m "$src" -f "$text" --kv-type q4
expect_err perplexity_bad_backend 2 "--backend" P -m "$src" -f "$text" --backend nope
expect_err perplexity_missing_text 1 "no-such.txt: cannot open" P -m "$src" -f "$e2e_tmp/no-such.txt"
echo "Once upon a time" >"$e2e_tmp/short.txt"
expect_err perplexity_short_text 1 "fewer than one window of 512" P -m "$src" -f "$e2e_tmp/short.txt"
expect_err perplexity_stride_too_long 1 "--stride 128 is outside 1 .. 127" P -m "$src" -f "$text" --ctx 128 --stride 128

if P -m "$src" -f "$text" --ctx 128 >"$e2e_tmp/out" 2>"$e2e_tmp/err"; then
    last=$(tail -1 "$e2e_tmp/out")
    if echo "$last" | grep -Eq '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}$' &&
        grep -Eq '^\[1\][0-9.]+,\[2\]' "$e2e_tmp/out" && grep -q "^tokens scored: " "$e2e_tmp/out"; then
        ok perplexity_output_form
    else
        fail perplexity_output_form "$(cat "$e2e_tmp/out")"
    fi
else
    fail perplexity_output_form "exit $?: $(tail -3 "$e2e_tmp/err")"
fi
ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$e2e_tmp/out")
# stories260K on this text is near 11 (a garbled forward pass would be in the hundreds)
awk -v p="$ppl" 'BEGIN { exit !(p > 5 && p < 20) }' && ok perplexity_stories_range || fail perplexity_stories_range "PPL $ppl"

P -m "$src" -f "$text" --ctx 128 --batch 7 >"$e2e_tmp/out7" 2>/dev/null
[ "$(tail -1 "$e2e_tmp/out7")" = "$(tail -1 "$e2e_tmp/out")" ] && ok perplexity_batch_invariant ||
    fail perplexity_batch_invariant "$(tail -1 "$e2e_tmp/out7") vs $(tail -1 "$e2e_tmp/out")"
# --max-batch-tokens, the name every command uses (--batch stays as its older spelling): the same numbers
P -m "$src" -f "$text" --ctx 128 --max-batch-tokens 7 >"$e2e_tmp/out7b" 2>/dev/null
[ -s "$e2e_tmp/out7b" ] && [ "$(tail -1 "$e2e_tmp/out7b")" = "$(tail -1 "$e2e_tmp/out7")" ] &&
    ok perplexity_batch_alias ||
    fail perplexity_batch_alias "$(tail -1 "$e2e_tmp/out7b") vs $(tail -1 "$e2e_tmp/out7")"
expect_err perplexity_engine_flag_not_taken 2 "unexpected argument '--max-seqs'" P -m "$src" -f "$text" --max-seqs 4

# --json: one object on stdout with the same value; with --stride 32 the scored count follows the rule
if P "$text" -m "$src" --ctx 128 --stride 32 --json >"$e2e_tmp/json" 2>"$e2e_tmp/err" &&
    python3 - "$e2e_tmp/json" <<'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))
n, ctx, s = j["tokens"], j["ctx"], j["stride"]
windows = (n - ctx) // s + 1
assert j["windows"] == windows and j["tokens_scored"] == windows * s, j
assert j["ppl"] > 1 and j["ppl_error"] > 0 and abs(j["ppl"] - 2.718281828459045 ** j["mean_nll"]) < 1e-6 * j["ppl"], j
PY
    ok perplexity_json_stride
else
    fail perplexity_json_stride "$(cat "$e2e_tmp/json" "$e2e_tmp/err" | tail -5)"
fi

# a Q8_0 quantization scores within 1% of the F32 source
"$NS" quantize "$src" "$e2e_tmp/q8.gguf" q8_0 >/dev/null 2>&1
q8=$(P -m "$e2e_tmp/q8.gguf" -f "$text" --ctx 128 2>/dev/null | sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p')
awk -v a="$ppl" -v b="$q8" 'BEGIN { exit !(b > 0 && b / a > 0.99 && b / a < 1.01) }' && ok perplexity_q8_0_close ||
    fail perplexity_q8_0_close "F32 $ppl, Q8_0 $q8"

if [ -f "$smol" ]; then
    head -c 5000 README.md >"$e2e_tmp/readme.txt"
    if P -m "$smol" -f "$e2e_tmp/readme.txt" --ctx 256 >"$e2e_tmp/out" 2>"$e2e_tmp/err"; then
        ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$e2e_tmp/out")
        awk -v p="$ppl" 'BEGIN { exit !(p > 5 && p < 200) }' && ok perplexity_smollm2 || fail perplexity_smollm2 "PPL $ppl"
    else
        fail perplexity_smollm2 "$(tail -3 "$e2e_tmp/err")"
    fi
else
    skip perplexity_smollm2 "no $smol (scripts/fetch-model)"
fi
exit $E2E_FAILED
