#!/usr/bin/env bash
# e2e_tokenize — nightshift info / tokenize / detokenize on the bundled stories260K model and the shared
# vocab files.
. tests/lib.sh
M=$SHARED/models/stories260K.gguf
SPM=$SHARED/testdata/vocab/ggml-vocab-llama-spm.gguf
GPT2=$SHARED/testdata/vocab/ggml-vocab-gpt-2.gguf

# round trip: text -> ids -> the same bytes (trailing newline included)
printf 'Once upon a time, there was a little dog.\nIt liked to run  fast!\n' >"$e2e_tmp/in.txt"
if "$NS" tokenize -m "$M" <"$e2e_tmp/in.txt" >"$e2e_tmp/ids.txt" 2>"$e2e_tmp/err" &&
    "$NS" detokenize -m "$M" <"$e2e_tmp/ids.txt" >"$e2e_tmp/out.txt" 2>>"$e2e_tmp/err" &&
    cmp -s "$e2e_tmp/in.txt" "$e2e_tmp/out.txt"; then
    ok tokenize_roundtrip_stories260k
else
    fail tokenize_roundtrip_stories260k "$(head -c 300 "$e2e_tmp/err") ids=$(head -c 200 "$e2e_tmp/ids.txt")"
fi

# one line of space-separated ids, no BOS by default, BOS first with --bos
ids=$(printf 'Hello' | "$NS" tokenize -m "$M")
bos_ids=$(printf 'Hello' | "$NS" tokenize -m "$M" --bos)
if [[ $ids =~ ^[0-9]+( [0-9]+)*$ ]] && [[ ${ids%% *} != 1 ]] && [[ $bos_ids == "1 $ids" ]]; then
    ok tokenize_bos_flag
else
    fail tokenize_bos_flag "without: '$ids' with --bos: '$bos_ids'"
fi

# ids equal to the reference vectors (Hugging Face) for a real vocab
got=$(printf 'Hello world' | "$NS" tokenize -m "$SPM")
got2=$(printf ' Hello, world!' | "$NS" tokenize -m "$GPT2")
if [[ $got == "15043 3186" && $got2 == "18435 11 995 0" ]]; then ok tokenize_reference_ids; else fail tokenize_reference_ids "spm '$got' gpt2 '$got2'"; fi

# --special: control-token text becomes the token
sp=$(printf '<s>' | "$NS" tokenize -m "$M" --special)
plain=$(printf '<s>' | "$NS" tokenize -m "$M")
if [[ $sp == 1 && $plain != 1 ]]; then ok tokenize_special_flag; else fail tokenize_special_flag "'$sp' / '$plain'"; fi

# detokenize: no newline added; control tokens hidden unless --special
out=$(printf '1 15043 2' | "$NS" detokenize -m "$SPM" | od -An -c | tr -s ' ')
outs=$(printf '1 15043 2' | "$NS" detokenize -m "$SPM" --special)
if [[ $out == " H e l l o" && $outs == "<s>Hello</s>" ]]; then ok detokenize_output; else fail detokenize_output "'$out' / '$outs'"; fi

# --flag=value: the same as "--flag value"
eq_ids=$(printf 'Hello' | "$NS" tokenize --model="$M" --bos)
eq_text=$(printf '1 15043 2' | "$NS" detokenize --model="$SPM" --special)
if [[ $eq_ids == "$bos_ids" && $eq_text == "<s>Hello</s>" ]]; then ok tokenize_flag_equals_value
else fail tokenize_flag_equals_value "'$eq_ids' (want '$bos_ids') / '$eq_text'"; fi

# info: the facts of stories260K
"$NS" info "$M" >"$e2e_tmp/info.txt" 2>&1
if grep -Eq '^  block_count +5$' "$e2e_tmp/info.txt" && grep -q '^architecture  *llama$' "$e2e_tmp/info.txt" &&
    grep -q '^vocab  *512 tokens, llama' "$e2e_tmp/info.txt" && grep -q '^tensors  *48,' "$e2e_tmp/info.txt"; then
    ok info_text_stories260k
else
    fail info_text_stories260k "$(head -c 600 "$e2e_tmp/info.txt")"
fi
if "$NS" info "$M" --json >"$e2e_tmp/info.json" &&
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["architecture"] == "llama", d["architecture"]
assert d["hparams"]["block_count"] == 5
assert d["hparams"]["attention.head_count_kv"] == 4
assert d["vocab"]["size"] == 512 and d["vocab"]["model"] == "llama"
assert d["vocab"]["bos"] == 1 and d["vocab"]["eos"] == 2 and d["vocab"]["pad"] is None
assert d["vocab"]["add_bos"] is True and d["vocab"]["add_eos"] is False
assert d["tensors"]["count"] == 48 and d["gguf_version"] == 3
assert d["chat_template"]["present"] is False
' "$e2e_tmp/info.json"; then
    ok info_json_stories260k
else
    fail info_json_stories260k "$(head -c 300 "$e2e_tmp/info.json")"
fi
# the model as -m, --model and --model=: the same object as the positional form
for form in "-m $M" "--model $M" "--model=$M"; do
    # shellcheck disable=SC2086
    "$NS" info --json $form >"$e2e_tmp/info2.json" 2>&1
    if ! cmp -s "$e2e_tmp/info.json" "$e2e_tmp/info2.json"; then fail info_model_flag_forms "info --json $form"; break; fi
done && ok info_model_flag_forms
expect_err info_two_models 2 "unexpected argument '-m'" "$NS" info "$M" -m "$M" <"$e2e_tmp/in.txt"
# a vocab-only file (zero tensors) with a chat template
if "$NS" info --json "$SHARED/testdata/vocab/ggml-vocab-phi-3.gguf" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["tensors"]["count"]==0 and d["chat_template"]["family"]=="phi3" and d["vocab"]["size"]==32064'; then
    ok info_vocab_only
else
    fail info_vocab_only "info --json on the phi-3 vocab"
fi

# errors: missing file, not a GGUF, bad ids, bad flags
printf 'hi' >"$e2e_tmp/stdin"
expect_err info_missing_file 1 "no-such.gguf" "$NS" info "$e2e_tmp/no-such.gguf" <"$e2e_tmp/stdin"
expect_err tokenize_missing_file 1 "no-such.gguf" "$NS" tokenize -m "$e2e_tmp/no-such.gguf" <"$e2e_tmp/stdin"
printf 'this is not a gguf file at all, just some text\n' >"$e2e_tmp/not.gguf"
expect_err tokenize_not_gguf 1 "not.gguf" "$NS" tokenize -m "$e2e_tmp/not.gguf" <"$e2e_tmp/stdin"
expect_err info_not_gguf 1 "not.gguf" "$NS" info "$e2e_tmp/not.gguf" <"$e2e_tmp/stdin"
printf '1 15 abc 2' >"$e2e_tmp/stdin"
expect_err detokenize_bad_id 1 "'abc' at position 2" "$NS" detokenize -m "$M" <"$e2e_tmp/stdin"
printf '1 99999' >"$e2e_tmp/stdin"
expect_err detokenize_out_of_range 1 "99999 at position 1 is outside the vocab" "$NS" detokenize -m "$M" <"$e2e_tmp/stdin"
printf '' >"$e2e_tmp/stdin"
expect_err tokenize_bad_flag 2 "unknown argument" "$NS" tokenize --frobnicate <"$e2e_tmp/stdin"
expect_err tokenize_bos_with_value 2 "--bos takes no value" "$NS" tokenize --bos=1 <"$e2e_tmp/stdin"
expect_err detokenize_bad_flag 2 "unknown argument" "$NS" detokenize --frobnicate <"$e2e_tmp/stdin"
expect_err detokenize_missing_value 2 "--model needs a value" "$NS" detokenize --model <"$e2e_tmp/stdin"
if "$NS" tokenize --help | grep -q -- '--bos' && "$NS" detokenize --help | grep -q usage && "$NS" info --help | grep -q -- '--json'; then
    ok cli_help
else
    fail cli_help "--help output"
fi

exit $E2E_FAILED
