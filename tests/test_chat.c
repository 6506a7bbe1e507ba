/* test_chat — template family detection and rendering. The expected strings were rendered with Jinja2
 * (trim_blocks, lstrip_blocks, as Hugging Face does) from each family's reference template: the Phi-3 and
 * SmolLM2 (ChatML) templates as stored in their GGUF files, the published Llama 2, Llama 3, Mistral v0.1,
 * Gemma and Zephyr templates for the others.
 *
 * Then the model's own template through the Jinja interpreter (chat_render_jinja), down to token ids: the
 * real files' templates (SmolLM2's model, the Phi-3 vocab) and corpus templates on the vocabularies the tests
 * have (Phi-3.5 on Phi-3's, Mistral v0.1 on Llama's SentencePiece vocab, DeepSeek LLM on its own). The
 * expected texts follow from the templates; the ids are the tokenizer's for those texts (the tokenizer is
 * checked against llama.cpp's outputs for these vocab files in test_tok), with every special token -- <s>,
 * <|user|>, <|im_start|>, ... -- at the place the template writes it and no BOS added twice. */
#include "test.h"
#include "gguf/gguf.h"
#include "jinja_templates.h"
#include "tokenizer/chat.h"
#include "tokenizer/tok.h"

static const struct chat_msg conv[] = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
static const struct chat_msg conv_sys[] = {{"system", "SYS"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};

static int render_is(enum chat_family f, const struct chat_msg *m, size_t n, const char *bos, const char *eos,
                     const char *want, char *got, size_t cap)
{
    char *out = NULL;
    struct err e = {{0}};
    if (chat_render(f, m, n, bos, eos, &out, &e)) {
        snprintf(got, cap, "error: %.200s", e.msg);
        return 0;
    }
    int ok = strcmp(out, want) == 0;
    size_t w = 0; /* escape newlines for the message */
    for (const char *p = out; *p && w + 3 < cap; p++) {
        if (*p == '\n') {
            got[w++] = '\\';
            got[w++] = 'n';
        } else {
            got[w++] = *p;
        }
    }
    got[w] = '\0';
    free(out);
    return ok;
}

#define RENDER_IS(f, m, n, bos, eos, want)                                                                \
    do {                                                                                                  \
        char got_[2048];                                                                                  \
        CHECK_MSG(render_is(f, m, n, bos, eos, want, got_, sizeof got_), "%s: got \"%.400s\"",          \
                  chat_family_name(f), got_);                                                             \
    } while (0)

TEST(render_chatml)
{
    RENDER_IS(
        CHAT_CHATML, conv_sys, 4, "", "",
        "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    RENDER_IS(CHAT_CHATML, conv, 1, "", "", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(render_llama3)
{
    static const struct chat_msg m[] = {{"system", "S"}, {"user", " Hi \n"}, {"assistant", "Hello!"}, {"user", "Bye"}};
    RENDER_IS(
        CHAT_LLAMA3, m, 4, "<|begin_of_text|>", "<|eot_id|>",
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(render_llama2)
{
    RENDER_IS(CHAT_LLAMA2, conv_sys, 4, "<s>", "</s>",
              "<s>[INST] <<SYS>>\nSYS\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");
    RENDER_IS(CHAT_LLAMA2, conv, 1, "<s>", "</s>", "<s>[INST] Hi [/INST]");
}

TEST(render_mistral)
{
    RENDER_IS(CHAT_MISTRAL, conv, 3, "<s>", "</s>", "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]");
    /* no system turn in the template: the system text leads the first user message */
    RENDER_IS(CHAT_MISTRAL, conv_sys, 2, "<s>", "</s>", "<s>[INST] SYS\n\nHi [/INST]");
}

TEST(render_phi3)
{
    RENDER_IS(CHAT_PHI3, conv, 3, "<s>", "<|endoftext|>",
              "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
}

TEST(render_gemma)
{
    static const struct chat_msg m[] = {{"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}};
    RENDER_IS(
        CHAT_GEMMA, m, 3, "<bos>", "<eos>",
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\n"
        "Bye<end_of_turn>\n<start_of_turn>model\n");
    RENDER_IS(CHAT_GEMMA, conv_sys, 2, "<bos>", "<eos>",
              "<bos><start_of_turn>user\nSYS\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}

/* The Gemma 3 instruct template (as Google publishes it) through the Jinja interpreter gives the same text
 * as the built-in gemma renderer, system message folded into the first user turn included: a Gemma 3 file
 * without a template of its own (the 270M base model that scripts/fetch-model gemma3 gets) is rendered with
 * `--chat-template gemma` exactly as the template would. */
TEST(gemma3_jinja_matches_builtin)
{
    jinja_template *t = NULL;
    struct err e = {{0}};
    CHECK(jinja_compile(tmpl_gemma3, strlen(tmpl_gemma3), &t, &e) == 0);
    static const struct chat_msg one[] = {{"user", "What is the capital of France?"}};
    const struct {
        const struct chat_msg *m;
        size_t n;
    } convs[] = {{one, 1}, {conv, 3}, {conv_sys, 4}, {conv_sys, 2}};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        char *a = NULL, *b = NULL;
        CHECK_MSG(chat_render_jinja(t, convs[i].m, convs[i].n, "<bos>", "<eos>", &a, &e) == 0, "%s", e.msg);
        CHECK_MSG(chat_render(CHAT_GEMMA, convs[i].m, convs[i].n, "<bos>", "<eos>", &b, &e) == 0, "%s", e.msg);
        CHECK_MSG(strcmp(a, b) == 0, "conversation %zu: jinja '%s', built-in '%s'", i, a, b);
        if (i == 0)
            CHECK_STR(a,
                      "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n");
        free(a);
        free(b);
    }
    jinja_free(t);
}

TEST(render_zephyr)
{
    RENDER_IS(CHAT_ZEPHYR, conv_sys, 4, "<s>", "</s>",
              "<|system|>\nSYS</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
}

TEST(render_errors)
{
    char *out = (char *)1;
    struct err e = {{0}};
    CHECK(chat_render(CHAT_CHATML, conv, 0, "", "", &out, &e) != 0 && out == NULL);
    static const struct chat_msg tool[] = {{"user", "Hi"}, {"tool", "42"}};
    CHECK(chat_render(CHAT_CHATML, tool, 2, "", "", &out, &e) != 0);
    CHECK_MSG(strstr(e.msg, "tool") && strstr(e.msg, "message 1"), "%.300s", e.msg);
    static const struct chat_msg only_sys[] = {{"system", "S"}};
    CHECK(chat_render(CHAT_LLAMA2, only_sys, 1, "<s>", "</s>", &out, &e) != 0);
    /* two system messages in a row: the families that fold the system text into the next user turn refuse
     * them (found by fuzz_chat: the first was dropped without a word) */
    static const struct chat_msg two_sys[] = {{"system", "A"}, {"system", "B"}, {"user", "Hi"}};
    enum chat_family folding[] = {CHAT_LLAMA2, CHAT_MISTRAL, CHAT_GEMMA};
    for (int k = 0; k < 3; k++) {
        CHECK(chat_render(folding[k], two_sys, 3, "<s>", "</s>", &out, &e) != 0 && out == NULL);
        CHECK_MSG(strstr(e.msg, "two system messages") && strstr(e.msg, "message 1"), "%.300s", e.msg);
    }
    CHECK(chat_render(CHAT_CHATML, two_sys, 3, "", "", &out, &e) == 0 && strstr(out, "A") && strstr(out, "B"));
    free(out);
    CHECK(chat_render(CHAT_NONE, conv, 1, "", "", &out, &e) != 0);
    CHECK_MSG(strstr(e.msg, "chatml, llama2"), "%.300s", e.msg);
}

TEST(detect_families)
{
    /* excerpts of real templates */
    CHECK(chat_detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                      "'<|im_end|>' + '\n'}}{% endfor %}") == CHAT_CHATML);
    CHECK(chat_detect("{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
                      "message['content'] | trim + '<|eot_id|>' %}") == CHAT_LLAMA3);
    CHECK(chat_detect("{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
                      "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{{ bos_token + '[INST] ' + "
                      "content.strip() + ' [/INST]' }}") == CHAT_LLAMA2);
    CHECK(chat_detect("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
                      "message['content'] + ' [/INST]' }}{% endif %}{% endfor %}") == CHAT_MISTRAL);
    CHECK(chat_detect("{{ bos_token }}{% for message in messages %}{{'<|user|>' + '\n' + message['content'] + "
                      "'<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% endfor %}") == CHAT_PHI3);
    CHECK(chat_detect("{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}") ==
          CHAT_GEMMA);
    CHECK(chat_detect("{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}") ==
          CHAT_ZEPHYR);
    CHECK(chat_detect("{{ messages }}") == CHAT_NONE);
    CHECK(chat_detect(NULL) == CHAT_NONE);
    CHECK(chat_detect("") == CHAT_NONE);
}

TEST(detect_real_files)
{
    /* the Phi-3 vocab file's template */
    gguf_file *f = NULL;
    struct err e = {{0}};
    CHECK_MSG(gguf_open(test_shared("testdata/vocab/ggml-vocab-phi-3.gguf"), &f, &e) == 0, "%.300s", e.msg);
    char tmpl[4096];
    int rc = gguf_get_cstr(f, "tokenizer.chat_template", tmpl, sizeof tmpl, &e);
    gguf_close(f);
    CHECK_MSG(rc == 0, "%.300s", e.msg);
    CHECK(chat_detect(tmpl) == CHAT_PHI3);
    const char *smol = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(smol, R_OK) == 0) {
        CHECK(gguf_open(smol, &f, &e) == 0);
        rc = gguf_get_cstr(f, "tokenizer.chat_template", tmpl, sizeof tmpl, &e);
        gguf_close(f);
        CHECK(rc == 0 && chat_detect(tmpl) == CHAT_CHATML);
    }
}

TEST(family_names)
{
    enum chat_family f;
    for (int i = 1; i < CHAT_FAMILY_COUNT; i++) {
        CHECK(chat_family_parse(chat_family_name((enum chat_family)i), &f) == 0 && (int)f == i);
        CHECK(strstr(chat_family_list(), chat_family_name((enum chat_family)i)) != NULL);
    }
    CHECK(chat_family_parse("vicuna", &f) == -1);
    CHECK_STR(chat_family_name(CHAT_NONE), "none");
}

/* ---------- the model's own template (Jinja) ---------- */

/* The vocab of a GGUF file, its BOS / EOS text and, when template is not NULL, its chat template (malloc'd).
 */
struct vocab_file {
    gguf_file *f;
    tok_vocab *v;
    const char *bos, *eos;
    char *tmpl;
};

static int vocab_open(const char *path, struct vocab_file *vf, struct err *e)
{
    memset(vf, 0, sizeof *vf);
    if (gguf_open(path, &vf->f, e) != 0 || tok_load(vf->f, &vf->v, e) != 0) return -1;
    vf->bos = tok_bos(vf->v) >= 0 ? tok_piece(vf->v, tok_bos(vf->v)) : "";
    vf->eos = tok_eos(vf->v) >= 0 ? tok_piece(vf->v, tok_eos(vf->v)) : "";
    struct gguf_str t;
    if (gguf_find_kv(vf->f, "tokenizer.chat_template") >= 0 &&
        gguf_get_str(vf->f, "tokenizer.chat_template", &t, e) == 0 && (vf->tmpl = malloc(t.len + 1))) {
        memcpy(vf->tmpl, t.ptr, t.len);
        vf->tmpl[t.len] = '\0';
    }
    return 0;
}

static void vocab_close(struct vocab_file *vf)
{
    free(vf->tmpl);
    tok_free(vf->v);
    gguf_close(vf->f);
}

/* Renders msgs with tmpl and tokenizes the text as a run does (parse_special on, no BOS added): 0 when the
 * text is want_text and the ids are want_ids, else -1 with msg saying what differs. */
static int jinja_prompt_is(const struct vocab_file *vf, const char *tmpl, const struct chat_msg *msgs,
                           size_t n, const char *want_text, const int32_t *want_ids, size_t n_want, char *msg,
                           size_t cap)
{
    jinja_template *t = NULL;
    struct err e = {{0}};
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = -1;
    if (jinja_compile(tmpl, strlen(tmpl), &t, &e) != 0 ||
        chat_render_jinja(t, msgs, n, vf->bos, vf->eos, &text, &e) != 0 ||
        tok_encode(vf->v, text, strlen(text), 0, 1, &ids, &n_ids, &e) != 0) {
        snprintf(msg, cap, "%.300s", e.msg);
    } else if (strcmp(text, want_text) != 0) {
        snprintf(msg, cap, "text \"%.400s\"", text);
    } else if (n_ids != n_want || memcmp(ids, want_ids, n_ids * sizeof *ids) != 0) {
        size_t k = (size_t)snprintf(msg, cap, "%zu ids (want %zu):", n_ids, n_want);
        for (size_t i = 0; i < n_ids && k + 12 < cap; i++)
            k += (size_t)snprintf(msg + k, cap - k, " %d", ids[i]);
    } else {
        rc = 0;
    }
    free(ids);
    free(text);
    jinja_free(t);
    return rc;
}

#define JINJA_PROMPT_IS(vf, tmpl, msgs, n, text, ids)                                                        \
    do {                                                                                                     \
        char msg_[1200];                                                                                     \
        CHECK_MSG(jinja_prompt_is(vf, tmpl, msgs, n, text, ids, sizeof ids / sizeof ids[0], msg_,            \
                                  sizeof msg_) == 0,                                                         \
                  "%s: %s", #tmpl, msg_);                                                                    \
    } while (0)

/* SmolLM2's own template adds its default system prompt: 37 prompt tokens for a plain user message, as HF
 * transformers and vLLM count them; the ChatML family renderer (the fallback) gives the 16 without it. */
TEST(jinja_smollm2_prompt)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) SKIP("no %s (scripts/fetch-model)", path);
    struct vocab_file vf;
    struct err e = {{0}};
    CHECK_MSG(vocab_open(path, &vf, &e) == 0, "%.300s", e.msg);
    int same = vf.tmpl && strcmp(vf.tmpl, tmpl_smollm2) == 0;
    static const struct chat_msg sun[] = {{"user", "Name one color of the sun."}};
    static const int32_t want[] = {1,    9690, 198,   2683, 359,  253,  5356, 5646,  11173, 3365,
                                   3511, 308,  34519, 28,   7018, 411,  407,  19712, 8182,  2,
                                   198,  1,    4093,  198,  5820, 582,  2380, 282,   260,   2388,
                                   30,   2,    198,   1,    520,  9531, 198};
    char msg[1200];
    int rc =
        same ? jinja_prompt_is(
                   &vf, vf.tmpl, sun, 1,
                   "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                   "<|im_end|>\n<|im_start|>user\nName one color of the "
                   "sun.<|im_end|>\n<|im_start|>assistant\n",
                   want, sizeof want / sizeof want[0], msg, sizeof msg)
             : -1;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int fam = chat_render(CHAT_CHATML, sun, 1, vf.bos, vf.eos, &text, &e) == 0 &&
              tok_encode(vf.v, text, strlen(text), 0, 1, &ids, &n, &e) == 0;
    free(text);
    free(ids);
    vocab_close(&vf);
    CHECK_MSG(same, "the model's template is not tests/jinja_templates.h's tmpl_smollm2");
    CHECK_MSG(rc == 0, "%s", msg);
    CHECK(fam && n == 16);
}

/* The Phi-3 vocab file's own template, and Phi-3.5's on the same vocabulary. */
TEST(jinja_phi3_ids)
{
    struct vocab_file vf;
    struct err e = {{0}};
    CHECK_MSG(vocab_open(test_shared("testdata/vocab/ggml-vocab-phi-3.gguf"), &vf, &e) == 0, "%.300s", e.msg);
    int same = vf.tmpl && strcmp(vf.tmpl, tmpl_phi3vocab) == 0;
    vocab_close(&vf);
    CHECK_MSG(same, "the vocab's template is not tests/jinja_templates.h's tmpl_phi3vocab");
    CHECK(vocab_open(test_shared("testdata/vocab/ggml-vocab-phi-3.gguf"), &vf, &e) == 0);
    static const struct chat_msg m[] = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    /* <s>=1 <|user|>=32010 <|end|>=32007 <|assistant|>=32001 <|system|>=32006; "\n" after a special is "▁"
     * <0x0A> */
    static const int32_t own[] = {1,     32010, 29871, 13,    18567, 32007, 29871, 13,    32001,
                                  29871, 13,    10994, 32007, 29871, 13,    32010, 29871, 13,
                                  2059,  29872, 32007, 29871, 13,    32001, 29871, 13};
    static const int32_t phi35[] = {32006, 29871, 13,    3629,  11473, 29889, 32007, 29871, 13,
                                    32010, 29871, 13,    18567, 32007, 29871, 13,    32001, 29871,
                                    13,    10994, 32007, 29871, 13,    32010, 29871, 13,    2059,
                                    29872, 32007, 29871, 13,    32001, 29871, 13};
    char msg[1200];
    /* the early Phi-3 template has no system turn (the system message is dropped) and opens the assistant's
     * turn after every user message */
    int rc1 = jinja_prompt_is(
        &vf, tmpl_phi3vocab, m, 4,
        "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n", own,
        sizeof own / sizeof own[0], msg, sizeof msg);
    char msg2[1200];
    int rc2 = jinja_prompt_is(
        &vf, tmpl_phi35, m, 4,
        "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye"
        "<|end|>\n<|assistant|>\n",
        phi35, sizeof phi35 / sizeof phi35[0], msg2, sizeof msg2);
    vocab_close(&vf);
    CHECK_MSG(rc1 == 0, "phi-3: %s", msg);
    CHECK_MSG(rc2 == 0, "phi-3.5: %s", msg2);
}

TEST(jinja_mistral_and_deepseek_ids)
{
    struct vocab_file vf;
    struct err e = {{0}};
    static const struct chat_msg m[] = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    static const struct chat_msg ms[] = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    /* Llama's SentencePiece vocab: <s>=1 </s>=2, [INST] is plain text */
    static const int32_t mistral[] = {1, 518, 25580, 29962, 6324, 518,   29914, 25580, 29962, 10994,
                                      2, 518, 25580, 29962, 2648, 29872, 518,   29914, 25580, 29962};
    /* DeepSeek's byte-level BPE: <｜begin▁of▁sentence｜>=100000, <｜end▁of▁sentence｜>=100001 */
    static const int32_t deepseek[] = {100000, 4677, 8749, 13,    185, 185,   5726,   25,
                                       11598,  185,  185,  77398, 25,  37727, 100001, 5726,
                                       25,     3563, 68,   185,   185, 77398, 25};
    char msg[1200];
    CHECK_MSG(vocab_open(test_shared("testdata/vocab/ggml-vocab-llama-spm.gguf"), &vf, &e) == 0, "%.300s",
              e.msg);
    int rc = jinja_prompt_is(&vf, tmpl_mistral01, m, 3, "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]",
                             mistral, sizeof mistral / sizeof mistral[0], msg, sizeof msg);
    vocab_close(&vf);
    CHECK_MSG(rc == 0, "mistral: %s", msg);
    CHECK_MSG(vocab_open(test_shared("testdata/vocab/ggml-vocab-deepseek-llm.gguf"), &vf, &e) == 0, "%.300s",
              e.msg);
    rc = jinja_prompt_is(&vf, tmpl_deepseek_llm, ms, 4,
                         "<\xef\xbd\x9c"
                         "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>Be brief.\n\nUser: Hi\n\n"
                         "Assistant: Hello<\xef\xbd\x9c"
                         "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>User: Bye\n\nAssistant:",
                         deepseek, sizeof deepseek / sizeof deepseek[0], msg, sizeof msg);
    vocab_close(&vf);
    CHECK_MSG(rc == 0, "deepseek: %s", msg);
}

TEST(jinja_render_results)
{
    jinja_template *t = NULL;
    struct err e = {{0}};
    char *out = NULL;
    CHECK(jinja_compile(tmpl_gemma2, strlen(tmpl_gemma2), &t, &e) == 0);
    static const struct chat_msg sys[] = {{"system", "S"}, {"user", "Hi"}};
    CHECK_EQ_INT(chat_render_jinja(t, sys, 2, "<bos>", "<eos>", &out, &e), JINJA_RAISED);
    CHECK_STR(e.msg, "System role not supported");
    CHECK(out == NULL);
    CHECK(chat_render_jinja(t, sys, 0, "<bos>", "<eos>", &out, &e) == -1 && strstr(e.msg, "no messages"));
    static const struct chat_msg no_content[] = {{"user", NULL}};
    CHECK(chat_render_jinja(t, no_content, 1, NULL, NULL, &out, &e) == -1 && strstr(e.msg, "no content"));
    static const struct chat_msg tool[] = {{"user", "Hi"},
                                           {"tool", "42"}}; /* any role: the template decides */
    CHECK(chat_render_jinja(t, tool, 2, NULL, NULL, &out, &e) == 0);
    CHECK_STR(
        out,
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>tool\n42<end_of_turn>\n<start_of_turn>model\n");
    free(out);
    CHECK_STR(chat_template_name(CHAT_CHATML, NULL), "chatml");
    CHECK_STR(chat_template_name(CHAT_CHATML, t), jinja_id(t));
    CHECK(strncmp(chat_template_name(CHAT_NONE, t), "jinja:", 6) == 0);
    jinja_free(t);
}

int main(void)
{
    RUN(render_chatml);
    RUN(render_llama3);
    RUN(render_llama2);
    RUN(render_mistral);
    RUN(render_phi3);
    RUN(render_gemma);
    RUN(gemma3_jinja_matches_builtin);
    RUN(render_zephyr);
    RUN(render_errors);
    RUN(detect_families);
    RUN(detect_real_files);
    RUN(family_names);
    RUN(jinja_smollm2_prompt);
    RUN(jinja_phi3_ids);
    RUN(jinja_mistral_and_deepseek_ids);
    RUN(jinja_render_results);
    return test_summary();
}
