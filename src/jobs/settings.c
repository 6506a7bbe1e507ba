/* settings — see settings.h. */
#include "jobs/settings.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "jobs/key.h"
#include "util/log.h"
#include "util/sha256.h"

struct setting {
    char key[64];
    char value[768];
};

/* model.sha256, one per generation parameter, chat_template, kv_type, parse_special, key.version */
enum { N_SETTINGS_MAX = 64 };

/* Sets s[*k] to key and the printf-formatted value, and advances *k. */
static void setting_set(struct setting *s, int *k, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void setting_set(struct setting *s, int *k, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    snprintf(s[*k].key, sizeof s[*k].key, "%s", key);
    vsnprintf(s[*k].value, sizeof s[*k].value, fmt, ap);
    va_end(ap);
    (*k)++;
}

/* The run-wide settings a store is bound to: the model, the generation defaults (every row of the genparam
 * table, as "default.NAME") and whatever else changes results. Returns the count (<= N_SETTINGS_MAX). */
static int settings_of(const struct job_config *c, const struct job_model *m, struct setting *s)
{
    int k = 0;
    char hex[65];
    sha256_hex(m->sha256, hex);
    setting_set(s, &k, "model.sha256", "%s", hex);
    for (int i = 0; i < genparam_count; i++, k++) {
        snprintf(s[k].key, sizeof s[k].key, "default.%s", genparam_table[i].name);
        genparam_setting(&genparam_table[i], &c->input.defaults, s[k].value, sizeof s[k].value);
    }
    setting_set(s, &k, "chat_template", "%s", chat_template_name(m->chat, m->chat_jinja));
    setting_set(s, &k, "kv_type", "%s", model_kv_type_name(m->ep.kv_type));
    setting_set(s, &k, "parse_special", "%d", c->parse_special);
    setting_set(s, &k, "key.version", "%d", KEY_VERSION);
    assert(k <= N_SETTINGS_MAX);
    return k;
}

/* Compares the store's settings with s: *fresh = the store has none yet; *n_diff differences, described in
 * diff (cap bytes). */
static int compare_settings(store *st, const struct setting *s, int n, uint64_t defaults_used, int *fresh,
                            int *n_diff, char *diff, size_t cap, struct err *e)
{
    char *have = NULL;
    if (store_meta_get(st, "model.sha256", &have, e) != 0) return -1;
    *fresh = have == NULL;
    free(have);
    *n_diff = 0;
    diff[0] = '\0';
    size_t off = 0;
    for (int k = 0; k < n && !*fresh; k++) {
        char *v = NULL;
        if (store_meta_get(st, s[k].key, &v, e) != 0) return -1;
        /* a setting the store lacks at "none" is a parameter added since the store was made, left unset */
        if (!v && !strcmp(s[k].value, "none")) continue;
        /* settings 1 .. genparam_count are the defaults of the table's rows, in order (settings_of) */
        int unused = k >= 1 && k <= genparam_count && !(defaults_used >> (k - 1) & 1);
        if ((!v || strcmp(v, s[k].value)) && !unused) {
            (*n_diff)++;
            if (off < cap - 200)
                off += (size_t)snprintf(diff + off, cap - off, "%s%s %.64s (now %.64s)", *n_diff > 1 ? "; " : "",
                                        s[k].key, v ? v : "unset", s[k].value);
        }
        free(v);
    }
    return 0;
}

/* A store made under another KEY_VERSION (one without "key.version" predates it: version 1) holds results
 * that this version would not compute, under keys it never matches: refused with the reason, or with
 * --force reused for nothing but its file (every request is computed again). */
static int check_key_version(store *st, const struct job_config *c, struct err *e)
{
    char *v = NULL;
    if (store_meta_get(st, "key.version", &v, e) != 0) return -1;
    int have = v ? atoi(v) : 1;
    free(v);
    if (have == KEY_VERSION) return 0;
    const char *who = have < KEY_VERSION ? "an older" : "a newer";
    if (!c->force)
        return err_set(e, "store %s was made by %s nightshift (request key version %d, this one %d) whose sampling "
                          "differs: seeded requests draw other tokens, so its results are not reused. Use another "
                          "--store, or --force to compute every request again (its old results stay unused: their "
                          "keys differ)",
                       c->store, who, have, KEY_VERSION);
    log_warn("--force: store %s was made by %s nightshift (request key version %d, this one %d): every request is "
             "computed again", c->store, who, have, KEY_VERSION);
    return 0;
}

int settings_bind_store(store *st, const struct job_config *c, const struct job_model *m, uint64_t defaults_used,
                        struct err *e)
{
    struct setting s[N_SETTINGS_MAX];
    int n = settings_of(c, m, s);
    char diff[ERR_MSG_MAX];
    int fresh, n_diff;
    if (compare_settings(st, s, n, defaults_used, &fresh, &n_diff, diff, sizeof diff, e) != 0) return -1;
    if (!fresh && check_key_version(st, c, e) != 0) return -1;
    if (n_diff && !c->force)
        return err_set(e, "store %s was made with other settings: %s. Use another --store, or --force to reuse it "
                          "(its results stay, but only matching keys are reused)",
                       c->store, diff);
    if (n_diff) log_warn("--force: store %s was made with other settings: %s", c->store, diff);
    if (fresh && !c->force) {
        /* A new store means the output files are rebuilt from it (truncated): never do that silently to
         * results that some other run (or another program) left there. */
        const char *paths[2] = {c->output, c->errors};
        for (int k = 0; k < 2; k++) {
            struct stat sb;
            if (paths[k] && stat(paths[k], &sb) == 0 && sb.st_size > 0)
                return err_set(e, "%s already holds %lld bytes, but the store %s is new: they were not made by this "
                                  "store and would be overwritten. Point --store at the run's store, choose another "
                                  "output, or --force to overwrite",
                               paths[k], (long long)sb.st_size, c->store);
        }
    }
    if (!fresh && !n_diff) return 0;
    if (store_begin(st, e) != 0) return -1;
    for (int k = 0; k < n; k++)
        if (store_meta_set(st, s[k].key, s[k].value, e) != 0) goto fail;
    if (store_meta_set(st, "model.path", m->path, e) != 0) goto fail;
    if (store_meta_set(st, "nightshift.version", c->version ? c->version : "?", e) != 0) goto fail;
    if (store_commit(st, e) != 0) goto fail;
    return 0;
fail:
    store_rollback(st);
    return -1;
}
