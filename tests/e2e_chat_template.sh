#!/usr/bin/env bash
# End-to-end tests of chat rendered with the model's own template (the Jinja interpreter):
#   - SmolLM2 adds its default system prompt: 37 prompt tokens for a plain user message, as HF transformers
#     and vLLM count them (16 with --chat-template chatml); the store is bound to the rendering;
#   - on tiny synthetic models carrying the Phi-3 vocabulary and a template of our own: raise_exception fails
#     only its line, with the template's message; a template that does not compile is warned about and the
#     family renderer takes over (nightshift info says which of the two a file gets).
. tests/lib.sh
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
jq_py() { python3 -c "import json,sys; $1" "${@:2}"; }
prompt_tokens() { jq_py 'print(" ".join(str(json.loads(l)["response"]["body"]["usage"]["prompt_tokens"]) for l in open(sys.argv[1])))' "$1"; }

smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$smol" ]; then
    base=(-m "$smol" --threads 2 --kv-memory 64M -q --max-tokens 2 --temperature 0)
    printf '%s\n' '{"id": "a", "messages": [{"role": "user", "content": "Name one color of the sun."}]}' >"$T/s.jsonl"
    $NS run "$T/s.jsonl" -o "$T/s.out" "${base[@]}" 2>"$T/log" || fail chat_smollm2_run "$(tail -2 "$T/log")"
    n=$(prompt_tokens "$T/s.out")
    [ "$n" = 37 ] && ok chat_smollm2_own_template_37_tokens || fail chat_smollm2_own_template_37_tokens "prompt_tokens $n"
    src=$(jq_py 'm=json.load(open(sys.argv[1]))["model"]; print(m["chat_template"][:6], m["chat_template_source"])' "$T/s.out.record.json")
    [ "$src" = "jinja: gguf" ] && ok chat_record_names_the_template || fail chat_record_names_the_template "$src"
    # the store was made with the model's template: the family renderer is another rendering, refused
    expect_err chat_store_bound_to_rendering nz "chat_template jinja:" \
        $NS run "$T/s.jsonl" -o "$T/s.out" "${base[@]}" --chat-template chatml
    $NS run "$T/s.jsonl" -o "$T/f.out" "${base[@]}" --chat-template chatml 2>"$T/log" || fail chat_flag "$(tail -2 "$T/log")"
    n=$(prompt_tokens "$T/f.out")
    [ "$n" = 16 ] && ok chat_template_flag_overrides || fail chat_template_flag_overrides "prompt_tokens $n"
else
    skip chat_smollm2_own_template_37_tokens "no $smol"
fi

# a vocab-only GGUF like the Phi-3 one, with tokenizer.chat_template replaced
retemplate() {
    python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
src, dst, tmpl = sys.argv[1], sys.argv[2], sys.argv[3].encode()
b = open(src, 'rb').read()
assert b[:4] == b'GGUF'
ver, n_t, n_kv = struct.unpack_from('<IQQ', b, 4)
assert n_t == 0
o = 24
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t, o):
    if t == 8: return o + 8 + struct.unpack_from('<Q', b, o)[0]
    if t == 9:
        et, n = struct.unpack_from('<IQ', b, o); o += 12
        for _ in range(n): o = skip(et, o)
        return o
    return o + sizes[t]
kvs = []
for _ in range(n_kv):
    start = o
    klen = struct.unpack_from('<Q', b, o)[0]; key = b[o + 8:o + 8 + klen]; o += 8 + klen
    t = struct.unpack_from('<I', b, o)[0]; o = skip(t, o + 4)
    if key != b'tokenizer.chat_template': kvs.append(b[start:o])
k = b'tokenizer.chat_template'
kvs.append(struct.pack('<Q', len(k)) + k + struct.pack('<IQ', 8, len(tmpl)) + tmpl)
out = b'GGUF' + struct.pack('<IQQ', ver, 0, len(kvs)) + b''.join(kvs)
out += b'\0' * (-len(out) % 32)
open(dst, 'wb').write(out)
PY
}

phi=$SHARED/testdata/vocab/ggml-vocab-phi-3.gguf
raising="{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system messages here') }}{% endif %}<|user|>
{{ m.content }}<|end|>
{% endfor %}<|assistant|>
"
if [ -f "$phi" ] && retemplate "$phi" "$T/raise.vocab.gguf" "$raising" &&
    $NS synth --shape tiny --type f32 --vocab "$T/raise.vocab.gguf" -o "$T/raise.gguf" >/dev/null 2>&1; then
    printf '%s\n' '{"id": "a", "messages": [{"role": "user", "content": "Hi"}]}' \
        '{"id": "b", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]}' >"$T/r.jsonl"
    $NS run "$T/r.jsonl" -o "$T/r.out" -m "$T/raise.gguf" --threads 1 -q --max-tokens 2 --temperature 0 2>"$T/log" ||
        fail chat_raise_run "$(tail -2 "$T/log")"
    # <s> <|user|> "\n" Hi <|end|> "\n" <|assistant|>: 9 tokens on the Phi-3 vocab (each "\n" after a special is
    # two; no BOS added twice; the template's last newline goes, as Jinja drops one at the end of a template)
    n=$(prompt_tokens "$T/r.out")
    [ "$n" = 9 ] && ok chat_jinja_line_runs || fail chat_jinja_line_runs "prompt_tokens '$n'"
    jq_py 'l=[json.loads(x) for x in open(sys.argv[1])]; assert len(l) == 1 and l[0]["custom_id"] == "b", l
s=json.dumps(l[0]); assert "no system messages here" in s and "chat_template" in s, s' "$T/r.out.errors.jsonl" 2>"$T/py" &&
        ok chat_raise_exception_fails_its_line || fail chat_raise_exception_fails_its_line "$(tail -1 "$T/py")"

    # a template that does not compile: warned, and the phi3 family renderer takes over
    retemplate "$phi" "$T/broken.vocab.gguf" "{% if %}<|user|>{{ m }}<|end|>" &&
        $NS synth --shape tiny --type f32 --vocab "$T/broken.vocab.gguf" -o "$T/broken.gguf" >/dev/null 2>&1
    $NS run "$T/r.jsonl" -o "$T/b.out" -m "$T/broken.gguf" --threads 1 --max-tokens 2 --temperature 0 >"$T/log" 2>&1
    src=$(jq_py 'print(json.load(open(sys.argv[1]))["model"]["chat_template"])' "$T/b.out.record.json" 2>/dev/null)
    grep -q "chat template does not compile (line 1:7: expected an expression" "$T/log" && [ "$src" = phi3 ] &&
        [ "$(wc -l <"$T/b.out")" = 2 ] && ok chat_uncompilable_template_falls_back ||
        fail chat_uncompilable_template_falls_back "record says '$src': $(head -3 "$T/log")"
    $NS info "$T/raise.gguf" | grep -qF "rendered by the Jinja interpreter (family: phi3)" &&
        $NS info "$T/broken.gguf" | grep -qF "does not compile (line 1:7: expected an expression, got '%}'); family: phi3" &&
        ok chat_info_says_whether_the_template_compiles || fail chat_info_says_whether_the_template_compiles \
        "$($NS info "$T/broken.gguf" | grep chat)"
else
    skip chat_raise_exception_fails_its_line "no $phi, or synth failed"
fi

exit $E2E_FAILED
