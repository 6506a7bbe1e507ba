/* test_chat — template family detection and rendering. The expected strings were rendered with Jinja2
 * (trim_blocks, lstrip_blocks, as Hugging Face does) from each family's reference template: the Phi-3 and
 * SmolLM2 (ChatML) templates as stored in their GGUF files, the published Llama 2, Llama 3, Mistral v0.1,
 * Gemma and Zephyr templates for the others. */
#include "test.h"
#include "gguf/gguf.h"
#include "tokenizer/chat.h"

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
    RENDER_IS(CHAT_CHATML, conv_sys, 4, "", "",
              "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
              "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    RENDER_IS(CHAT_CHATML, conv, 1, "", "", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(render_llama3)
{
    static const struct chat_msg m[] = {{"system", "S"}, {"user", " Hi \n"}, {"assistant", "Hello!"}, {"user", "Bye"}};
    RENDER_IS(CHAT_LLAMA3, m, 4, "<|begin_of_text|>", "<|eot_id|>",
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
    RENDER_IS(CHAT_GEMMA, m, 3, "<bos>", "<eos>",
              "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\n"
              "Bye<end_of_turn>\n<start_of_turn>model\n");
    RENDER_IS(CHAT_GEMMA, conv_sys, 2, "<bos>", "<eos>",
              "<bos><start_of_turn>user\nSYS\n\nHi<end_of_turn>\n<start_of_turn>model\n");
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

int main(void)
{
    RUN(render_chatml);
    RUN(render_llama3);
    RUN(render_llama2);
    RUN(render_mistral);
    RUN(render_phi3);
    RUN(render_gemma);
    RUN(render_zephyr);
    RUN(render_errors);
    RUN(detect_families);
    RUN(detect_real_files);
    RUN(family_names);
    return test_summary();
}
