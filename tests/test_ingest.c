/* Tests for jobs/ingest on the stories260K vocabulary (context cut to 64 tokens): lines and bad lines, folding
 * of equal keys, n completions, max_tokens clamped to the context, every work's key equal to the key of the
 * engine request that runs it (read again from the backlog), chat rendering (by family and by the model's own
 * template), chat input without a template, digests, duplicate ids through the id table, a backlog changed
 * under the run, interruption. */
#include "jobs/ingest.h"

#include "gguf/gguf.h"
#include "jobs/key.h"
#include "test.h"
#include "util/log.h"

static char tmp_dir[] = "/tmp/ns_test_ingest_XXXXXX";
static tok_vocab *vocab;
static struct model_hparams hp;

static const char *write_tmp(const char *name, const char *content)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    return test_write_file(path, content, strlen(content)) == 0 ? path : NULL;
}

static void setup(struct job_config *c, struct job_model *m, const char *backlog)
{
    *c = job_default_config();
    c->backlog = backlog;
    memset(m, 0, sizeof *m);
    m->path = "stories260K.gguf";
    m->name = "tiny";
    m->sha256[0] = 0x42;
    m->hp = &hp;
    m->vocab = vocab;
    m->chat = CHAT_CHATML;
    m->chat_source = "flag";
    m->ep = engine_default_params();
}

static ingest_source *src; /* of the last ingest() */

static int ingest(const struct job_config *c, const struct job_model *m, ledger *l, struct ingest_stats *st,
                  json_t **backlog, struct err *e)
{
    struct ledger_params p = {.model_name = m->name, .debug_checks = 1};
    ingest_source_close(src);
    src = NULL;
    if (ledger_init(l, &p, e) != 0) return -1;
    return ingest_backlog(c, m, l, st, backlog, &src, e);
}

/* Work w's key equals the key of the parameters the request ingest_work_request makes for it runs with, and
 * the book's key is its first PLAN_KEY_BYTES. */
static int key_of_request_matches(const ledger *l, const struct job_model *m, uint32_t w)
{
    struct ingest_request ir;
    struct err e;
    if (ingest_work_request(src, w, &ir, &e) != 0) {
        fprintf(stderr, "work %u: %s\n", w, e.msg);
        return 0;
    }
    const struct engine_request *rq = &ir.rq;
    struct gen_params g = ir.it.gen;
    g.max_tokens = rq->max_tokens;
    struct sampler_params sp;
    genparam_to_sampler(&g, rq->sampling.seed, &sp);
    const struct sampler_params *q = &rq->sampling;
    int ok = sp.temperature == q->temperature && sp.top_k == q->top_k && sp.top_p == q->top_p && sp.min_p == q->min_p &&
             sp.repeat_penalty == q->repeat_penalty && sp.repeat_last_n == q->repeat_last_n &&
             sp.presence_penalty == q->presence_penalty && sp.frequency_penalty == q->frequency_penalty &&
             sp.n_logit_bias == q->n_logit_bias && sp.logit_bias == q->logit_bias && rq->ignore_eos == g.ignore_eos &&
             rq->n_stop == g.n_stop;
    struct key_params kp = {m->sha256, (uint32_t)m->ep.kv_type, &g, rq->sampling.seed, rq->prompt, rq->n_prompt,
                            l->works[w].index, 0};
    uint8_t key[32];
    ok = ok && rq->id == w && key_compute(&kp, key, &e) == 0 && !memcmp(key, ir.key, 32) &&
         !memcmp(key, plan_keymap_key(l->keys, w), PLAN_KEY_BYTES);
    ingest_request_free(&ir);
    return ok;
}

static const char *bad_code(const ledger *l, size_t i)
{
    return l->lines[i].bad ? ledger_codes[l->lines[i].code] : "ok";
}

/* A line's message (read again). */
static const char *message_of(const ledger *l, uint32_t li)
{
    struct ledger_line_info info;
    static struct err e;
    if (ingest_line_info(src, l, li, &info, &e) != 0) return e.msg;
    return info.message ? info.message : "";
}

/* The request of work w (read again); 0 ok. */
static int request_of_work(uint32_t w, struct ingest_request *ir)
{
    struct err e;
    if (ingest_work_request(src, w, ir, &e) == 0) return 0;
    fprintf(stderr, "work %u: %s\n", w, e.msg);
    return -1;
}

TEST(lines_works_and_folding)
{
    if (!vocab) SKIP("no stories260K model");
    char long_prompt[2000] = "";
    for (int i = 0; i < 80; i++) strcat(long_prompt, "the dog ");
    char text[4096];
    snprintf(text, sizeof text,
             "{\"id\":\"a\",\"prompt\":\"Once upon a time\",\"temperature\":0,\"seed\":1}\n"
             "{\"id\":\"b\",\"prompt\":\"Once upon a time\",\"temperature\":0,\"seed\":2}\n"
             "\n"
             "{\"id\":\"c\",\"prompt\":\"Once upon a time\",\"n\":3,\"temperature\":0.8,\"stop\":[\".\"]}\n"
             "{\"id\":\"d\",\"prompt\":[1,99999]}\n"
             "not json\n"
             "{\"id\":\"e\",\"prompt\":\"%s\"}\n"
             "{\"id\":\"f\",\"prompt\":\"Lily\",\"max_tokens\":1000,\"logit_bias\":{\"5\":2}}\n",
             long_prompt);
    struct job_config c;
    struct job_model m;
    setup(&c, &m, write_tmp("a.jsonl", text));
    ledger l;
    struct ingest_stats st;
    json_t *facts;
    struct err e;
    CHECK_MSG(ingest(&c, &m, &l, &st, &facts, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(l.n_lines, 7);
    CHECK_EQ_INT(st.bad_lines, 3);
    CHECK_STR(bad_code(&l, 3), "invalid_value"); /* token id outside the vocabulary */
    CHECK_MSG(strstr(message_of(&l, 3), "99999") != NULL, "%s", message_of(&l, 3));
    CHECK_STR(bad_code(&l, 4), "invalid_json");
    CHECK_STR(bad_code(&l, 5), "prompt_too_long");
    CHECK_EQ_INT(l.lines[2].no, 4); /* the blank line is no line */
    /* a and b fold (greedy: the seed is not part of the key); c has 3 works; f 1 */
    CHECK_EQ_INT(st.folded_duplicates, 1);
    CHECK_EQ_INT(l.n_works, 5);
    CHECK_EQ_INT(ledger_line_work(&l, &l.lines[1], 0), ledger_line_work(&l, &l.lines[0], 0));
    CHECK_EQ_INT(l.lines[2].n, 3);
    uint32_t c0 = ledger_line_work(&l, &l.lines[2], 0), c1 = ledger_line_work(&l, &l.lines[2], 1),
             c2 = ledger_line_work(&l, &l.lines[2], 2);
    CHECK(c0 != c1 && c1 != c2);
    struct ingest_request ir;
    CHECK(request_of_work(c1, &ir) == 0);
    CHECK(ir.rq.sampling.seed == key_completion_seed(key_id_seed("c"), 1));
    ingest_request_free(&ir);
    CHECK(request_of_work(ledger_line_work(&l, &l.lines[6], 0), &ir) == 0);
    CHECK_EQ_INT(ir.rq.max_tokens, 64 - ir.rq.n_prompt); /* clamped to the context */
    CHECK_EQ_INT(l.works[ledger_line_work(&l, &l.lines[6], 0)].plan.n_prompt, ir.rq.n_prompt);
    ingest_request_free(&ir);
    for (uint32_t w = 0; w < l.n_works; w++) CHECK_MSG(key_of_request_matches(&l, &m, w), "work %u", w);
    for (size_t i = 0; i < l.n_lines; i++)
        for (size_t k = 0; k < i; k++) CHECK(l.lines[i].digest != l.lines[k].digest);
    CHECK_STR(json_string_value(json_object_get(facts, "format")), "jsonl");
    CHECK_EQ_INT(json_integer_value(json_object_get(facts, "lines")), 8);
    CHECK_EQ_INT(json_integer_value(json_object_get(facts, "blank_lines")), 1);
    json_decref(facts);
    ledger_free(&l);
}

TEST(chat_lines_are_rendered_with_the_template)
{
    if (!vocab) SKIP("no stories260K model");
    const char *text = "{\"id\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}\n";
    struct job_config c;
    struct job_model m;
    setup(&c, &m, write_tmp("chat.jsonl", text));
    ledger l;
    struct ingest_stats st;
    json_t *facts;
    struct err e;
    CHECK_MSG(ingest(&c, &m, &l, &st, &facts, &e) == 0, "%s", e.msg);
    json_decref(facts);
    CHECK_EQ_INT(l.n_lines, 1);
    CHECK(!l.lines[0].bad);
    struct chat_msg msg = {"user", "Hi"};
    const char *bos = tok_piece(vocab, tok_bos(vocab)), *eos = tok_piece(vocab, tok_eos(vocab));
    char *rendered;
    int32_t *ids;
    size_t n_ids;
    CHECK(chat_render(CHAT_CHATML, &msg, 1, bos, eos, &rendered, &e) == 0);
    int add_bos = tok_add_bos(vocab) && strncmp(rendered, bos, strlen(bos)) != 0;
    CHECK(tok_encode(vocab, rendered, strlen(rendered), add_bos, 1, &ids, &n_ids, &e) == 0);
    struct ingest_request ir;
    CHECK(request_of_work(ledger_line_work(&l, &l.lines[0], 0), &ir) == 0);
    CHECK_EQ_INT(ir.rq.n_prompt, (int32_t)n_ids);
    CHECK(!memcmp(ir.rq.prompt, ids, n_ids * sizeof *ids));
    ingest_request_free(&ir);
    CHECK_EQ_INT(l.lines[0].kind, INPUT_KIND_CHAT);
    free(rendered);
    free(ids);
    ledger_free(&l);

    /* without a template the chat line is bad (its own error line), not the whole run */
    m.chat = CHAT_NONE;
    m.chat_source = "no tokenizer.chat_template in the model";
    CHECK(ingest(&c, &m, &l, &st, &facts, &e) == 0);
    CHECK(l.lines[0].bad && !strcmp(ledger_codes[l.lines[0].code], "chat_template"));
    CHECK_EQ_INT(l.lines[0].kind, INPUT_KIND_CHAT);
    json_decref(facts);
    facts = NULL;
    ledger_free(&l);
}

/* Tokens of text as a run makes them from a rendering (parse_special on); 1 when they are the prompt of
 * line li (read again). */
static int prompt_is(const ledger *l, uint32_t li, const char *text, int add_bos)
{
    int32_t *ids = NULL;
    size_t n = 0;
    struct err e;
    struct ingest_request ir;
    const struct ledger_line *L = &l->lines[li];
    if (L->bad || request_of_work(ledger_line_work(l, L, 0), &ir) != 0) return 0;
    int same = tok_encode(vocab, text, strlen(text), add_bos, 1, &ids, &n, &e) == 0 && ir.rq.n_prompt == (int32_t)n &&
               !memcmp(ir.rq.prompt, ids, n * sizeof *ids);
    free(ids);
    ingest_request_free(&ir);
    return same;
}

/* The model's own template renders the whole prompt (no BOS added); raise_exception fails the line with the
 * template's message; a line the template fails on otherwise is rendered by the family renderer, or fails
 * when there is none. */
TEST(chat_lines_with_the_models_own_template)
{
    if (!vocab) SKIP("no stories260K model");
    static const char tmpl[] = "{{ bos_token }}{% for m in messages %}"
                               "{% if loop.index0 > 0 and m.role == messages[loop.index0 - 1].role %}"
                               "{{ raise_exception('roles must alternate') }}{% endif %}"
                               "{% if m.content == 'boom' %}{{ nothing.here }}{% endif %}"
                               "<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>";
    const char *text = "{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}\n"
                       "{\"id\":\"b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\","
                       "\"content\":\"y\"}]}\n"
                       "{\"id\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":\"boom\"}]}\n";
    struct job_config c;
    struct job_model m;
    setup(&c, &m, write_tmp("own.jsonl", text));
    jinja_template *t = NULL;
    struct err e;
    CHECK(jinja_compile(tmpl, strlen(tmpl), &t, &e) == 0);
    m.chat_jinja = t;
    ledger l;
    struct ingest_stats st;
    json_t *facts;
    log_set_level(LOG_QUIET); /* the fallback is warned about */
    int rc = ingest(&c, &m, &l, &st, &facts, &e);
    log_set_level(LOG_WARN);
    json_decref(facts);
    const char *bos = tok_piece(vocab, tok_bos(vocab)), *eos = tok_piece(vocab, tok_eos(vocab));
    char want[256], *family = NULL;
    snprintf(want, sizeof want, "%s<user>Hi<assistant>", bos);
    struct chat_msg boom = {"user", "boom"};
    int ok = rc == 0 && l.n_lines == 3 && prompt_is(&l, 0, want, 0) && l.lines[1].bad &&
             !strcmp(bad_code(&l, 1), "chat_template") && strstr(message_of(&l, 1), "roles must alternate") &&
             chat_render(CHAT_CHATML, &boom, 1, bos, eos, &family, &e) == 0 &&
             prompt_is(&l, 2, family, tok_add_bos(vocab)) && st.bad_lines == 1;
    free(family);
    if (rc == 0) ledger_free(&l);
    /* without a family renderer to fall back to, the line the template fails on is a bad line */
    m.chat = CHAT_NONE;
    rc = ingest(&c, &m, &l, &st, &facts, &e);
    json_decref(facts);
    int ok2 = rc == 0 && l.n_lines == 3 && !l.lines[0].bad && l.lines[2].bad &&
              strstr(message_of(&l, 2), "the model's chat template failed") &&
              strstr(message_of(&l, 2), "'nothing' is undefined");
    if (rc == 0) ledger_free(&l);
    jinja_free(t);
    CHECK_MSG(ok, "rc %d: %s", rc, rc ? e.msg : "a line is not as expected");
    CHECK_MSG(ok2, "rc %d: %s", rc, rc ? e.msg : "the failing line is not bad");
}

/* The digest covers what a line's bytes are built from: the model name recorded, the keys, the id. */
TEST(digests_follow_what_the_line_is_built_from)
{
    if (!vocab) SKIP("no stories260K model");
    const char *text = "{\"id\":\"a\",\"prompt\":\"Once\"}\n{\"id\":\"b\",\"prompt\":\"Lily\"}\nnot json\n";
    struct job_config c;
    struct job_model m;
    setup(&c, &m, write_tmp("d.jsonl", text));
    ledger l1, l2, l3;
    struct ingest_stats st;
    json_t *facts;
    struct err e;
    CHECK(ingest(&c, &m, &l1, &st, &facts, &e) == 0);
    json_decref(facts);
    CHECK(ingest(&c, &m, &l2, &st, &facts, &e) == 0);
    json_decref(facts);
    CHECK(l1.lines[0].digest == l2.lines[0].digest); /* deterministic */
    m.name = "other";
    c.input.defaults.max_tokens = 9;
    CHECK(ingest(&c, &m, &l3, &st, &facts, &e) == 0);
    json_decref(facts);
    CHECK(l1.lines[0].digest != l3.lines[0].digest);
    CHECK(l3.lines[2].bad);
    CHECK(l1.lines[2].digest == l3.lines[2].digest); /* a bad line: only its id and error */
    ledger_free(&l1);
    ledger_free(&l2);
    ledger_free(&l3);
}

TEST(a_stop_request_interrupts_reading)
{
    if (!vocab) SKIP("no stories260K model");
    struct job_config c;
    struct job_model m;
    setup(&c, &m, write_tmp("s.txt", "Once\nupon\n"));
    volatile sig_atomic_t stop = 1;
    c.stop = &stop;
    ledger l;
    struct ingest_stats st;
    json_t *facts;
    struct err e;
    CHECK(ingest(&c, &m, &l, &st, &facts, &e) == 0);
    json_decref(facts);
    CHECK(st.interrupted);
    CHECK_EQ_INT(l.n_lines, 0);
    ledger_free(&l);
}

/* ingest_prompt, the server's way in: the prompt a line would get, and the bad-line messages. */
/* The bound on one sequence's tokens: the most any good line needs, its bytes + INGEST_TEMPLATE_TOKENS +
 * its own max_tokens / max_completion_tokens as genparam reads it (or the default); a bad line widens
 * nothing. */
static int64_t bound_of(const char *path, int32_t max_tokens, struct err *e)
{
    struct input_opts o = input_default_opts();
    o.defaults.max_tokens = max_tokens;
    int64_t t = -1;
    return ingest_seq_tokens_bound(path, &o, &t, e) == 0 ? t : -1;
}

TEST(seq_tokens_bound)
{
    struct err e;
    const char *l1 = "{\"id\": \"1\", \"prompt\": \"hi\"}\n";
    const char *l2 = "{\"id\": \"2\", \"prompt\": \"a longer prompt\", \"max_tokens\" : 40}\n";
    char both[256];
    snprintf(both, sizeof both, "%s%s", l1, l2);
    const char *a = write_tmp("bound_a.jsonl", both);
    int64_t n1 = (int64_t)strlen(l1), n2 = (int64_t)strlen(l2);
    int64_t t = bound_of(a, 16, &e);
    CHECK_MSG(t >= 0, "%s", e.msg);
    CHECK_EQ_INT(t, n2 + INGEST_TEMPLATE_TOKENS + 40);
    CHECK_EQ_INT(bound_of(a, 100, &e), n1 + INGEST_TEMPLATE_TOKENS + 100); /* line 1 takes the default */
    const char *b = write_tmp("bound_b.jsonl",
                              "{\"custom_id\": \"x\", \"method\": \"POST\", \"url\": "
                              "\"/v1/chat/completions\", \"body\": {\"max_completion_tokens\": 900, "
                              "\"messages\": [{\"role\": \"user\", \"content\": \"say \\\"max_tokens\\\": no\"}]}}\n");
    size_t n = 0;
    char *text = test_read_file(b, &n);
    CHECK_EQ_INT(bound_of(b, 16, &e), (int64_t)n + INGEST_TEMPLATE_TOKENS + 900);
    free(text);
    /* bad lines, however long and whatever they ask for, widen nothing: the bound is line 1's */
    char bad[4096];
    snprintf(bad, sizeof bad, "%s{\"id\": \"3\", \"prompt\": \"%0999d\", \"max_tokens\": \"many\"}\n"
             "{\"id\": \"4\", \"prompt\": \"x\", \"max_tokens\": 5000, \"temperature\": \"hot\"}\n"
             "{\"id\": \"5\", \"prompt\": \"x\", \"max_tokens\": -3}\nnot json at all %0999d\n", l1, 7, 8);
    const char *c = write_tmp("bound_c.jsonl", bad);
    CHECK_EQ_INT(bound_of(c, 16, &e), n1 + INGEST_TEMPLATE_TOKENS + 16);
    const char *d = write_tmp("bound_d.jsonl", "{\"id\": \"1\", \"prompt\": \"hi\", \"max_tokens\": \"12\"}\n");
    CHECK_EQ_INT(bound_of(d, 16, &e), 1); /* no good line: nothing will run */
    CHECK(bound_of("/nonexistent/x.jsonl", 16, &e) < 0);
}

TEST(prompt_of_one_request)
{
    if (!vocab) SKIP("no stories260K model");
    struct job_config c;
    struct job_model m;
    setup(&c, &m, NULL);
    struct input_item it;
    memset(&it, 0, sizeof it);
    it.kind = INPUT_KIND_COMPLETION;
    it.prompt = "Once upon a time";
    it.prompt_len = strlen(it.prompt);
    int32_t *ids, *want;
    int32_t n;
    size_t n_want;
    const char *code;
    char msg[256];
    struct err e;
    CHECK(ingest_prompt(&m, 1, &it, &ids, &n, NULL, &code, msg, sizeof msg, &e) == 0);
    CHECK(tok_encode(vocab, it.prompt, it.prompt_len, tok_add_bos(vocab), 1, &want, &n_want, &e) == 0);
    CHECK_EQ_INT(n, (int32_t)n_want);
    CHECK(!memcmp(ids, want, n_want * sizeof *ids));
    free(ids);
    free(want);
    CHECK_EQ_INT(ingest_max_tokens(&m, 60, 100), 4);
    CHECK_EQ_INT(ingest_max_tokens(&m, 10, 20), 20);
    /* too long for the 64-token context */
    char longp[1024] = "";
    for (int i = 0; i < 40; i++) strcat(longp, "the cat ");
    it.prompt = longp;
    it.prompt_len = strlen(longp);
    CHECK(ingest_prompt(&m, 1, &it, &ids, &n, NULL, &code, msg, sizeof msg, &e) == 1);
    CHECK_STR(code, "prompt_too_long");
    CHECK_MSG(strstr(msg, "the model's context is 64 tokens"), "%s", msg);
    /* token ids outside the vocabulary */
    int32_t bad_ids[2] = {1, 1 << 20};
    it.prompt = NULL;
    it.prompt_ids = malloc(sizeof bad_ids);
    memcpy(it.prompt_ids, bad_ids, sizeof bad_ids);
    it.n_prompt_ids = 2;
    CHECK(ingest_prompt(&m, 1, &it, &ids, &n, NULL, &code, msg, sizeof msg, &e) == 1);
    CHECK_MSG(strstr(msg, "prompt token id 1048576 is outside the vocabulary"), "%s", msg);
    free(it.prompt_ids);
    it.prompt_ids = NULL;
    /* chat without a template */
    struct input_msg cm = {"user", "Hi"};
    it.kind = INPUT_KIND_CHAT;
    it.msgs = &cm;
    it.n_msgs = 1;
    m.chat = CHAT_NONE;
    CHECK(ingest_prompt(&m, 1, &it, &ids, &n, NULL, &code, msg, sizeof msg, &e) == 1);
    CHECK_STR(code, "chat_template");
    m.chat = CHAT_CHATML;
    CHECK(ingest_prompt(&m, 1, &it, &ids, &n, NULL, &code, msg, sizeof msg, &e) == 0);
    CHECK(n > 3);
    free(ids);
}

/* Duplicate ids are found through the id table (hashes, the earlier line read again to compare), with the
 * same message when the line is read again; the text format needs no table at all. */
TEST(duplicate_ids_through_the_id_table)
{
    if (!vocab) SKIP("no stories260K model");
    const char *text =
        "{\"id\":\"x\",\"prompt\":\"Once\"}\n{\"id\":\"y\",\"prompt\":\"Lily\"}\n"
        "{\"id\":\"x\",\"prompt\":\"again\"}\n{\"id\":5,\"prompt\":\"num\"}\n{\"id\":\"5\",\"prompt\":\"str\"}\n";
    struct job_config c;
    struct job_model m;
    setup(&c, &m, write_tmp("dup.jsonl", text));
    ledger l;
    struct ingest_stats st;
    json_t *facts;
    struct err e;
    CHECK_MSG(ingest(&c, &m, &l, &st, &facts, &e) == 0, "%s", e.msg);
    json_decref(facts);
    CHECK_EQ_INT(st.bad_lines, 2);
    CHECK_STR(bad_code(&l, 2), "duplicate_id");
    CHECK_MSG(strstr(message_of(&l, 2), "first on line 1"), "%s", message_of(&l, 2));
    CHECK_STR(bad_code(&l, 4), "duplicate_id"); /* the integer id 5 is the id "5" */
    CHECK_MSG(strstr(message_of(&l, 4), "first on line 4"), "%s", message_of(&l, 4));
    CHECK_STR(bad_code(&l, 0), "ok");
    struct ledger_line_info info;
    CHECK(ingest_line_info(src, &l, 0, &info, &e) == 0);
    CHECK_STR(info.custom_id, "x"); /* read again: its own id is no duplicate */
    CHECK(ingest_source_bytes(src) > 0);
    ledger_free(&l);

    setup(&c, &m, write_tmp("dup.txt", "one\ntwo\none\n"));
    CHECK_MSG(ingest(&c, &m, &l, &st, &facts, &e) == 0, "%s", e.msg);
    json_decref(facts);
    CHECK_EQ_INT(st.bad_lines, 0);
    CHECK_EQ_INT(ingest_source_bytes(src), 0); /* text: a line's id is its number */
    ledger_free(&l);
}

/* What the run computes from a line later is what it read: a backlog changed in place under the run is
 * refused (the key of a work, the id of a line), never run or written as something else. */
TEST(a_backlog_changed_under_the_run_is_refused)
{
    if (!vocab) SKIP("no stories260K model");
    const char *text = "{\"id\":\"a\",\"prompt\":\"Once upon\"}\n{\"id\":\"b\",\"prompt\":\"Lily\"}\n";
    struct job_config c;
    struct job_model m;
    const char *path = write_tmp("change.jsonl", text);
    setup(&c, &m, path);
    ledger l;
    struct ingest_stats st;
    json_t *facts;
    struct err e;
    CHECK_MSG(ingest(&c, &m, &l, &st, &facts, &e) == 0, "%s", e.msg);
    json_decref(facts);
    struct ingest_request ir;
    CHECK(request_of_work(0, &ir) == 0);
    ingest_request_free(&ir);
    FILE *f = fopen(path, "r+"); /* same lengths, other bytes */
    CHECK(f && fputs("{\"id\":\"a\",\"prompt\":\"Once UPON\"}\n{\"id\":\"c\",\"prompt\":\"Lily\"}\n", f) >= 0);
    fclose(f);
    CHECK(ingest_work_request(src, 0, &ir, &e) != 0);
    CHECK_MSG(strstr(e.msg, "line 1 changed") && strstr(e.msg, "key"), "%s", e.msg);
    struct ledger_line_info info;
    CHECK(ingest_line_info(src, &l, 1, &info, &e) == 0);
    CHECK_STR(info.custom_id, "c"); /* the id reads back changed: the ledger's digest check refuses it */
    ledger_free(&l);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    log_set_level(LOG_WARN);
    gguf_file *f;
    struct err e;
    if (gguf_open(test_shared("models/stories260K.gguf"), &f, &e) == 0) {
        if (tok_load(f, &vocab, &e) != 0) vocab = NULL;
        gguf_close(f);
    }
    hp.n_ctx_train = 64;
    RUN(lines_works_and_folding);
    RUN(chat_lines_are_rendered_with_the_template);
    RUN(chat_lines_with_the_models_own_template);
    RUN(digests_follow_what_the_line_is_built_from);
    RUN(a_stop_request_interrupts_reading);
    RUN(seq_tokens_bound);
    RUN(prompt_of_one_request);
    RUN(duplicate_ids_through_the_id_table);
    RUN(a_backlog_changed_under_the_run_is_refused);
    ingest_source_close(src);
    tok_free(vocab);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
