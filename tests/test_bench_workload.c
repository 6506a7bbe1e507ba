/* test_bench_workload — the prompts of `nightshift bench`: random ids (shape, shared prefix, determinism)
 * and copy prompts (a passage of about the asked length inside the task, through the chat template when
 * the model has one; deterministic in the seed; every passage different). */
#include "cli/bench_workload.h"

#include <stdint.h>

#include "gguf/gguf.h"
#include "test.h"

TEST(workload_random)
{
    struct err e;
    struct bench_workload a, b;
    CHECK(bench_workload_random(5, 100, 3, 7, 42, &a, &e) == 0);
    CHECK(bench_workload_random(5, 100, 3, 7, 42, &b, &e) == 0);
    CHECK(a.kind == BENCH_WORKLOAD_RANDOM && a.n == 5 && a.stride == 10 && a.total == 50 && a.ignore_eos);
    CHECK(memcmp(a.ids, b.ids, 50 * sizeof *a.ids) == 0);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(a.len[i], 10);
        CHECK(memcmp(a.ids + i * 10, a.ids, 3 * sizeof *a.ids) == 0); /* the shared prefix */
        for (int k = 0; k < 10; k++) CHECK(a.ids[i * 10 + k] >= 0 && a.ids[i * 10 + k] < 100);
    }
    CHECK(memcmp(a.ids + 3, a.ids + 13, 7 * sizeof *a.ids) != 0);
    bench_workload_free(&a);
    bench_workload_free(&b);
    CHECK(a.ids == NULL && a.n == 0);
    CHECK(bench_workload_random(0, 100, 0, 7, 1, &a, &e) != 0);
    enum bench_workload_kind k;
    CHECK(bench_workload_parse("copy", &k) == 0 && k == BENCH_WORKLOAD_COPY);
    CHECK(bench_workload_parse("random", &k) == 0 && k == BENCH_WORKLOAD_RANDOM);
    CHECK(bench_workload_parse("json", &k) != 0);
    CHECK_STR(bench_workload_name(BENCH_WORKLOAD_COPY), "copy");
}

/* Copy prompts of passage tokens on the model at path (chat: it has a chatml template). */
static void check_copy(const char *path, int chat, int32_t passage)
{
    struct err e;
    gguf_file *f;
    tok_vocab *v;
    if (access(path, R_OK) != 0) SKIP("%s not found", path);
    CHECK(gguf_open(path, &f, &e) == 0 && tok_load(f, &v, &e) == 0);
    enum chat_family fam = chat ? CHAT_CHATML : CHAT_NONE;
    struct bench_workload a, b, c;
    CHECK(bench_workload_copy(fam, v, 6, passage, 1, &a, &e) == 0);
    CHECK(bench_workload_copy(fam, v, 6, passage, 1, &b, &e) == 0);
    CHECK(bench_workload_copy(fam, v, 6, passage, 2, &c, &e) == 0);
    CHECK(a.kind == BENCH_WORKLOAD_COPY && a.n == 6 && !a.ignore_eos);
    CHECK(memcmp(a.len, b.len, 6 * sizeof *a.len) == 0 &&
          memcmp(a.ids, b.ids, (size_t)(6 * a.stride) * sizeof *a.ids) == 0);
    CHECK(memcmp(a.ids, c.ids, (size_t)a.len[0] * sizeof *a.ids) != 0); /* the seed matters */
    int64_t total = 0;
    for (int i = 0; i < 6; i++) {
        total += a.len[i];
        CHECK(a.len[i] > passage && a.len[i] <= a.stride);
        char *text;
        size_t len;
        CHECK(tok_decode_ex(v, a.ids + (size_t)i * (size_t)a.stride, (size_t)a.len[i], 1, &text, &len, &e) == 0);
        CHECK(strstr(text, i % 2 ? "Fix the spelling mistakes" : "Repeat the following text exactly") != NULL);
        CHECK(!chat || strstr(text, "<|im_start|>user") != NULL);
        CHECK(chat || strstr(text, "<|im_start|>") == NULL);
        free(text);
        if (i)
            CHECK(a.len[i] != a.len[i - 1] ||
                  memcmp(a.ids + (size_t)i * (size_t)a.stride, a.ids + (size_t)(i - 1) * (size_t)a.stride,
                         (size_t)a.len[i] * sizeof *a.ids) != 0);
    }
    CHECK_EQ_INT(a.total, total);
    bench_workload_free(&a);
    bench_workload_free(&b);
    bench_workload_free(&c);
    tok_free(v);
    gguf_close(f);
}

TEST(workload_copy_plain)
{
    check_copy(test_shared("models/stories260K.gguf"), 0, 40);
}

TEST(workload_copy_chat)
{
    check_copy("models/SmolLM2-135M-Instruct.Q4_1.gguf", 1, 100);
}

int main(void)
{
    RUN(workload_random);
    RUN(workload_copy_plain);
    RUN(workload_copy_chat);
    return test_summary();
}
