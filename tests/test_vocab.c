/* Tests for tokenizer/vocab (the bottom of the tokenizer): loading tokens, scores and types from GGUF
 * metadata and their errors, the piece map (duplicates, NUL bytes, misses), special ids (defaults, file
 * overrides, "none", out of range), the guessed EOT and the end-of-generation set, the special-token
 * matcher (longest match, user-defined vs control), and the id list. vocab_check runs after every load. */
#include "gguf/gguf.h"
#include "test.h"
#include "tokenizer/vocab.h"

#define MAX_TOK 64

/* Tokenizer metadata to write: texts with lengths (so a piece may hold NUL), types, optional scores, and up
 * to four u32 keys. n_types / n_scores of -1 mean "key absent"; a different count than n_tok writes that
 * many entries. */
struct spec {
    const char *text[MAX_TOK];
    size_t len[MAX_TOK]; /* 0: strlen(text) */
    int n_tok;
    int32_t type[MAX_TOK];
    int n_types;
    float score[MAX_TOK];
    int n_scores;
    const char *u32_key[4];
    uint32_t u32_val[4];
};

/* Writes spec into a GGUF in memory and runs vocab_load (and vocab_load_specials with defaults when
 * defaults is non-NULL). Returns that status; *out is the vocab (NULL on failure). */
static int load(const struct spec *s, const struct vocab_specials *defaults, struct vocab **out, struct err *e)
{
    gguf_writer *w = gguf_writer_init();
    struct gguf_str strs[MAX_TOK];
    void *buf = NULL;
    size_t n = 0;
    gguf_file *f = NULL;
    int rc = -1;
    *out = NULL;
    if (!w) return err_set(e, "writer init");
    for (int i = 0; i < s->n_tok; i++)
        strs[i] = (struct gguf_str){s->text[i], s->len[i] ? s->len[i] : strlen(s->text[i])};
    if (gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)s->n_tok, e)) goto done;
    if (s->n_types >= 0 &&
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, s->type, (uint64_t)s->n_types, e))
        goto done;
    if (s->n_scores >= 0 &&
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, s->score, (uint64_t)s->n_scores, e))
        goto done;
    for (int i = 0; i < 4 && s->u32_key[i]; i++)
        if (gguf_writer_set_u32(w, s->u32_key[i], s->u32_val[i], e)) goto done;
    if (gguf_writer_write_mem(w, &buf, &n, NULL, NULL, e) || gguf_open_memory(buf, n, &f, e)) goto done;
    rc = vocab_load(f, out, e);
    if (rc == 0 && defaults) rc = vocab_load_specials(*out, f, defaults, e);
    if (rc == 0) rc = vocab_check(*out, e);
    if (rc) {
        vocab_free(*out);
        *out = NULL;
    }
done:
    gguf_close(f);
    free(buf);
    gguf_writer_free(w);
    return rc;
}

static const struct vocab_specials none = {-1, -1, -1, -1, -1};

/* <unk> <s> </s> a b ab, then two control tokens, one user-defined, one unknown-typed. */
static void base_spec(struct spec *s)
{
    static const char *const texts[] = {"<unk>", "<s>", "</s>", "a", "b", "ab", "<|im_end|>", "<|im", "<tool>", "<?>"};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 3, 3, 4, 2};
    memset(s, 0, sizeof *s);
    s->n_tok = (int)(sizeof texts / sizeof texts[0]);
    for (int i = 0; i < s->n_tok; i++) {
        s->text[i] = texts[i];
        s->type[i] = types[i];
        s->score[i] = (float)-i;
    }
    s->n_types = s->n_scores = s->n_tok;
}

TEST(load_and_lookup)
{
    struct spec s;
    base_spec(&s);
    struct vocab *v;
    struct err e = {{0}};
    CHECK_MSG(load(&s, &none, &v, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(vocab_n(v), s.n_tok);
    for (int32_t id = 0; id < s.n_tok; id++) {
        CHECK_STR(vocab_text(v, id), s.text[id]);
        CHECK_EQ_INT(vocab_text_len(v, id), strlen(s.text[id]));
        CHECK_EQ_INT(vocab_lookup(v, s.text[id], strlen(s.text[id])), id);
        CHECK(vocab_score(v, id) == (float)-id);
        CHECK_EQ_INT(vocab_token_type(v, id), s.type[id]);
    }
    CHECK_EQ_INT(vocab_lookup(v, "abc", 3), -1);
    CHECK_EQ_INT(vocab_lookup(v, "ab", 1), 3); /* the length given counts, not the NUL */
    CHECK_EQ_INT(vocab_lookup(v, "", 0), -1);
    vocab_free(v);
}

TEST(duplicates_nul_bytes_and_defaults)
{
    struct spec s = {0};
    s.text[0] = "x";
    s.text[1] = "a\0b";
    s.len[1] = 3;
    s.text[2] = "x"; /* duplicate: the later id wins the map */
    s.text[3] = "";  /* an empty piece is in the table but not in the map */
    s.len[3] = 0;
    s.n_tok = 4;
    s.n_types = s.n_scores = -1; /* absent: all normal, scores 0 */
    struct vocab *v;
    struct err e = {{0}};
    CHECK_MSG(load(&s, &none, &v, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(vocab_lookup(v, "x", 1), 2);
    CHECK_EQ_INT(vocab_lookup(v, "a\0b", 3), 1);
    CHECK_EQ_INT(vocab_lookup(v, "a", 1), -1);
    CHECK_EQ_INT(vocab_text_len(v, 1), 3);
    CHECK_EQ_INT(vocab_text_len(v, 3), 0);
    for (int32_t id = 0; id < 4; id++) {
        CHECK_EQ_INT(vocab_token_type(v, id), VOCAB_TYPE_NORMAL);
        CHECK(vocab_score(v, id) == 0.0f);
    }
    const struct vocab_specials *sp = vocab_specials(v);
    CHECK(sp->bos == -1 && sp->eos == -1 && sp->eot == -1 && sp->pad == -1 && sp->unk == -1);
    vocab_free(v);
}

TEST(load_errors)
{
    struct spec s;
    struct vocab *v;
    struct err e = {{0}};
    base_spec(&s);
    s.n_types = 3;
    CHECK(load(&s, NULL, &v, &e) != 0 && v == NULL);
    CHECK(strstr(e.msg, "token_type has 3 entries") != NULL);
    base_spec(&s);
    s.n_scores = 4;
    CHECK(load(&s, NULL, &v, &e) != 0);
    CHECK(strstr(e.msg, "scores has 4 entries") != NULL);
    base_spec(&s);
    s.type[5] = 7;
    CHECK(load(&s, NULL, &v, &e) != 0);
    CHECK(strstr(e.msg, "token_type[5] = 7") != NULL);
    base_spec(&s);
    s.type[5] = -1;
    CHECK(load(&s, NULL, &v, &e) != 0);
    CHECK(strstr(e.msg, "token_type[5] = -1") != NULL);
    base_spec(&s);
    s.n_tok = 0;
    s.n_types = s.n_scores = -1;
    CHECK(load(&s, NULL, &v, &e) != 0);
    CHECK(strstr(e.msg, "tokenizer.ggml.tokens is empty") != NULL);

    /* no token list at all */
    gguf_writer *w = gguf_writer_init();
    void *buf = NULL;
    size_t n = 0;
    gguf_file *f = NULL;
    CHECK(w != NULL);
    CHECK(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1, &e) == 0);
    CHECK(gguf_writer_write_mem(w, &buf, &n, NULL, NULL, &e) == 0);
    gguf_writer_free(w);
    CHECK(gguf_open_memory(buf, n, &f, &e) == 0);
    int rc = vocab_load(f, &v, &e);
    gguf_close(f);
    free(buf);
    CHECK(rc != 0 && v == NULL);
    CHECK(strstr(e.msg, "tokenizer.ggml.tokens is missing") != NULL);
}

TEST(special_ids)
{
    struct spec s;
    struct vocab *v;
    struct err e = {{0}};
    const struct vocab_specials spm = {.bos = 1, .eos = 2, .eot = -1, .pad = -1, .unk = 0};

    base_spec(&s); /* defaults kept; EOT guessed from <|im_end|> (a control token) */
    CHECK_MSG(load(&s, &spm, &v, &e) == 0, "%s", e.msg);
    const struct vocab_specials *sp = vocab_specials(v);
    CHECK(sp->bos == 1 && sp->eos == 2 && sp->unk == 0 && sp->pad == -1);
    CHECK_EQ_INT(sp->eot, 6);
    vocab_free(v);

    base_spec(&s); /* the file overrides; 0xFFFFFFFF is "none" */
    s.u32_key[0] = "tokenizer.ggml.bos_token_id", s.u32_val[0] = 3;
    s.u32_key[1] = "tokenizer.ggml.eos_token_id", s.u32_val[1] = 0xFFFFFFFFu;
    s.u32_key[2] = "tokenizer.ggml.padding_token_id", s.u32_val[2] = 4;
    s.u32_key[3] = "tokenizer.ggml.eot_token_id", s.u32_val[3] = 5;
    CHECK_MSG(load(&s, &spm, &v, &e) == 0, "%s", e.msg);
    sp = vocab_specials(v);
    CHECK(sp->bos == 3 && sp->eos == -1 && sp->pad == 4 && sp->eot == 5 && sp->unk == 0);
    vocab_free(v);

    base_spec(&s); /* an id past the vocab names the key */
    s.u32_key[0] = "tokenizer.ggml.unknown_token_id", s.u32_val[0] = 10;
    CHECK(load(&s, &spm, &v, &e) != 0);
    CHECK(strstr(e.msg, "tokenizer.ggml.unknown_token_id = 10 is outside the vocab (10 tokens)") != NULL);

    base_spec(&s); /* no EOT guess from a normal-typed text */
    s.type[6] = 1;
    CHECK_MSG(load(&s, &none, &v, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(vocab_specials(v)->eot, -1);
    vocab_free(v);
}

TEST(end_of_generation)
{
    struct spec s;
    struct vocab *v;
    struct err e = {{0}};
    base_spec(&s);
    const struct vocab_specials ids = {.bos = 1, .eos = 2, .eot = -1, .pad = -1, .unk = 0};
    CHECK_MSG(load(&s, &ids, &v, &e) == 0, "%s", e.msg);
    for (int32_t id = -2; id < vocab_n(v) + 2; id++) {
        int want = id == 2 || id == 6; /* EOS and <|im_end|> (also the guessed EOT) */
        CHECK_MSG(vocab_is_eog(v, id) == want, "id %d", id);
    }
    vocab_free(v);

    base_spec(&s); /* <|im_end|> typed unknown: not an end of generation, not an EOT */
    s.type[6] = 2;
    CHECK_MSG(load(&s, &none, &v, &e) == 0, "%s", e.msg);
    CHECK(!vocab_is_eog(v, 6));
    CHECK_EQ_INT(vocab_specials(v)->eot, -1);
    vocab_free(v);
}

TEST(match_special)
{
    struct spec s;
    struct vocab *v;
    struct err e = {{0}};
    base_spec(&s);
    CHECK_MSG(load(&s, &none, &v, &e) == 0, "%s", e.msg);
    const unsigned char *t = (const unsigned char *)"<|im_end|>x";
    int32_t id = -1;
    CHECK_EQ_INT(vocab_match_special(v, t, 11, 1, &id), 10); /* the longest wins over "<|im" */
    CHECK_EQ_INT(id, 6);
    id = -1;
    CHECK_EQ_INT(vocab_match_special(v, t, 6, 1, &id), 4); /* cut short by n: the shorter one */
    CHECK_EQ_INT(id, 7);
    CHECK_EQ_INT(vocab_match_special(v, t, 11, 0, &id), 0); /* control tokens only with parse_special */
    id = -1;
    CHECK_EQ_INT(vocab_match_special(v, (const unsigned char *)"<tool>", 6, 0, &id), 6); /* user-defined: always */
    CHECK_EQ_INT(id, 8);
    id = -1;
    CHECK_EQ_INT(vocab_match_special(v, (const unsigned char *)"<?>", 3, 1, &id), 3); /* unknown-typed */
    CHECK_EQ_INT(id, 9);
    CHECK_EQ_INT(vocab_match_special(v, (const unsigned char *)"<?>", 3, 0, &id), 0);
    CHECK_EQ_INT(vocab_match_special(v, (const unsigned char *)"ab", 2, 1, &id), 0); /* normal tokens never */
    CHECK_EQ_INT(vocab_match_special(v, (const unsigned char *)"<s", 2, 1, &id), 0);  /* a prefix only */
    vocab_free(v);
}

TEST(tokens_push)
{
    struct vocab_tokens t = {0};
    struct err e = {{0}};
    for (int32_t i = 0; i < 1000; i++) CHECK(vocab_tokens_push(&t, i * 3, &e) == 0);
    CHECK_EQ_INT(t.n, 1000);
    CHECK(t.cap >= 1000);
    int ok = 1;
    for (int32_t i = 0; i < 1000; i++) ok &= t.ids[i] == i * 3;
    free(t.ids);
    CHECK(ok);
}

int main(void)
{
    RUN(load_and_lookup);
    RUN(duplicates_nul_bytes_and_defaults);
    RUN(load_errors);
    RUN(special_ids);
    RUN(end_of_generation);
    RUN(match_special);
    RUN(tokens_push);
    return test_summary();
}
