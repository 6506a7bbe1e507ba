/* Tests for jobs/settings: a new store is bound to the run's settings; a store made with other settings
 * (or another model, or another chat rendering) is refused naming the difference, or rebound with force; a new
 * store next to non-empty output files is refused. */
#include "jobs/settings.h"

#include <sqlite3.h>

#include "test.h"

static char tmp_dir[] = "/tmp/ns_test_settings_XXXXXX";

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(path[k], sizeof path[k], "%s/%s", tmp_dir, name);
    return path[k];
}

static void setup(struct job_config *c, struct job_model *m, const char *db)
{
    *c = job_default_config();
    c->store = db;
    c->output = tmp_path("out.jsonl");
    c->errors = tmp_path("err.jsonl");
    c->version = "test";
    memset(m, 0, sizeof *m);
    m->path = "model.gguf";
    m->sha256[0] = 0xab;
    m->chat = CHAT_CHATML;
    m->ep.kv_type = KV_TYPE_F16;
}

static char *meta(store *st, const char *k)
{
    char *v = NULL;
    struct err e;
    if (store_meta_get(st, k, &v, &e) != 0) return NULL;
    return v;
}

TEST(new_store_gets_the_settings)
{
    struct job_config c;
    struct job_model m;
    setup(&c, &m, tmp_path("a.db"));
    c.input.defaults.temperature = 0.5f;
    store *st;
    struct err e;
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    char *v = meta(st, "default.temperature");
    CHECK_STR(v, "0.5");
    free(v);
    v = meta(st, "chat_template");
    CHECK_STR(v, "chatml");
    free(v);
    v = meta(st, "model.path");
    CHECK_STR(v, "model.gguf");
    free(v);
    v = meta(st, "model.sha256");
    CHECK(v && !strncmp(v, "ab00", 4));
    free(v);
    /* the same settings again: accepted */
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    store_close(st);
}

TEST(other_settings_are_refused_unless_force)
{
    struct job_config c;
    struct job_model m;
    setup(&c, &m, tmp_path("b.db"));
    store *st;
    struct err e;
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0);
    c.input.defaults.top_k = 40;
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0);
    CHECK_MSG(strstr(e.msg, "default.top_k 0 (now 40)") != NULL, "%s", e.msg);
    m.sha256[0] = 0xcd; /* another model */
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0);
    CHECK_MSG(strstr(e.msg, "model.sha256") && strstr(e.msg, "default.top_k"), "%s", e.msg);
    char *v = meta(st, "default.top_k");
    CHECK_STR(v, "0"); /* untouched */
    free(v);
    c.force = 1;
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    v = meta(st, "default.top_k");
    CHECK_STR(v, "40"); /* rebound */
    free(v);
    c.force = 0;
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    store_close(st);
}

static uint64_t row_bit(const char *name)
{
    for (int i = 0; i < genparam_count; i++)
        if (!strcmp(genparam_table[i].name, name)) return 1ull << i;
    return 0;
}

/* A default that differs but that no line fell back to (every line set its own value) changes no result: it is
 * not a difference, and the store keeps its value; when a line used it, the refusal is today's. */
TEST(unused_default_is_not_a_difference)
{
    struct job_config c;
    struct job_model m;
    setup(&c, &m, tmp_path("u.db"));
    store *st;
    struct err e;
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0);
    c.input.defaults.temperature = 0.25f;
    uint64_t used = GENPARAM_ALL_ROWS & ~row_bit("temperature");
    CHECK(row_bit("temperature") != 0);
    CHECK_MSG(settings_bind_store(st, &c, &m, used, &e) == 0, "%s", e.msg);
    char *v = meta(st, "default.temperature");
    CHECK_STR(v, "1"); /* kept */
    free(v);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0);
    CHECK_MSG(strstr(e.msg, "made with other settings: default.temperature 1 (now 0.25)") != NULL, "%s", e.msg);
    c.input.defaults.top_k = 7; /* another default, used: refused, naming only that one */
    CHECK(settings_bind_store(st, &c, &m, used, &e) != 0);
    CHECK_MSG(strstr(e.msg, "default.top_k 0 (now 7)") && !strstr(e.msg, "temperature"), "%s", e.msg);
    store_close(st);
}

/* The chat rendering is part of the settings: the model's own template ("jinja:<sha256>") and the family
 * renderer give different prompts, so a store made with one is refused to a run with the other. */
TEST(chat_rendering_is_a_setting)
{
    struct job_config c;
    struct job_model m;
    setup(&c, &m, tmp_path("t.db"));
    store *st;
    struct err e;
    jinja_template *t = NULL, *t2 = NULL;
    CHECK(jinja_compile("{{ messages }}", 14, &t, &e) == 0 &&
          jinja_compile("{{ messages }} ", 15, &t2, &e) == 0);
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0); /* made with the chatml renderer */
    m.chat_jinja = t;
    int refused = settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0 &&
                  strstr(e.msg, "chat_template chatml (now jinja:");
    c.force = 1;
    int rebound = settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0;
    c.force = 0;
    char *v = meta(st, "chat_template");
    int named = v && !strcmp(v, jinja_id(t));
    free(v);
    int same = settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0;
    m.chat_jinja = t2; /* another template */
    int other = settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0;
    store_close(st);
    jinja_free(t);
    jinja_free(t2);
    CHECK_MSG(refused, "%s", e.msg);
    CHECK(rebound && named && same && other);
}

TEST(new_store_next_to_old_outputs_is_refused)
{
    struct job_config c;
    struct job_model m;
    setup(&c, &m, tmp_path("c.db"));
    CHECK(test_write_file(c.errors, "{}\n", 3) == 0);
    store *st;
    struct err e;
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0);
    CHECK_MSG(strstr(e.msg, "already holds 3 bytes") != NULL, "%s", e.msg);
    char *v = meta(st, "model.sha256");
    CHECK(v == NULL); /* still new */
    c.force = 1;
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    v = meta(st, "model.sha256");
    CHECK(v != NULL);
    free(v);
    store_close(st);
    unlink(c.errors);
}

/* A constraint default is a setting ("KIND:TEXT"); another constraint is refused like any other setting. A
 * store made before the constraint parameters existed (no such settings) is accepted while they are unset. */
TEST(constraint_settings)
{
    struct job_config c;
    struct job_model m;
    setup(&c, &m, tmp_path("d.db"));
    store *st;
    struct err e;
    CHECK(constraint_spec_set(&c.input.defaults.constraint, CONSTRAINT_REGEX, "[a-z]+", 6, &e) == 0);
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    char *v = meta(st, "default.guided_regex");
    CHECK_STR(v, "regex:[a-z]+");
    free(v);
    v = meta(st, "default.response_format");
    CHECK_STR(v, "none");
    free(v);
    CHECK(constraint_spec_set(&c.input.defaults.constraint, CONSTRAINT_REGEX, "[a-z]*", 6, &e) == 0);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0);
    CHECK_MSG(strstr(e.msg, "default.guided_regex regex:[a-z]+ (now regex:[a-z]*)"), "%s", e.msg);
    store_close(st);
    constraint_spec_free(&c.input.defaults.constraint);
    /* an older store: the constraint settings are missing */
    sqlite3 *db;
    CHECK(sqlite3_open(c.store, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "DELETE FROM meta WHERE k LIKE 'default.guided%' OR k = 'default.response_format'", NULL,
                       NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK(store_open(c.store, STORE_DURABILITY_NORMAL, &st, &e) == 0);
    CHECK_MSG(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) == 0, "%s", e.msg);
    CHECK(constraint_spec_set(&c.input.defaults.constraint, CONSTRAINT_CHOICE, "[\"a\"]", 5, &e) == 0);
    CHECK(settings_bind_store(st, &c, &m, GENPARAM_ALL_ROWS, &e) != 0); /* set now: a difference */
    CHECK_MSG(strstr(e.msg, "default.guided_choice unset (now choice:[\"a\"])"), "%s", e.msg);
    constraint_spec_free(&c.input.defaults.constraint);
    store_close(st);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(new_store_gets_the_settings);
    RUN(other_settings_are_refused_unless_force);
    RUN(unused_default_is_not_a_difference);
    RUN(chat_rendering_is_a_setting);
    RUN(new_store_next_to_old_outputs_is_refused);
    RUN(constraint_settings);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
