/* constraint — see constraint.h. Two halves: specs (canonical text, front-ends) and the cache (compiled
 * constraints, the mask table, per-sequence states).
 */
#include "constrain/constraint.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "constrain/gbnf.h"
#include "constrain/grammar.h"
#include "constrain/pda.h"
#include "constrain/regex.h"
#include "constrain/schema.h"
#include "constrain/tokmask.h"
#include "util/clock.h"

const char *constraint_kind_name(enum constraint_kind k)
{
    switch (k) {
    case CONSTRAINT_JSON_OBJECT:
        return "json_object";
    case CONSTRAINT_JSON_SCHEMA:
        return "json_schema";
    case CONSTRAINT_REGEX:
        return "regex";
    case CONSTRAINT_CHOICE:
        return "choice";
    case CONSTRAINT_GRAMMAR:
        return "grammar";
    default:
        return "none";
    }
}

/* ---- specs ---- */

void constraint_spec_free(struct constraint_spec *s)
{
    if (!s) return;
    free(s->text);
    memset(s, 0, sizeof *s);
}

int constraint_spec_copy(struct constraint_spec *dst, const struct constraint_spec *src, struct err *e)
{
    memset(dst, 0, sizeof *dst);
    if (src->kind == CONSTRAINT_NONE) return 0;
    dst->text = malloc(src->len + 1);
    if (!dst->text) return err_set(e, "out of memory");
    memcpy(dst->text, src->text, src->len + 1);
    dst->len = src->len;
    dst->kind = src->kind;
    return 0;
}

static int choice_rules(const char *text, size_t len, struct expr_rules *r, struct err *e)
{
    json_error_t je;
    json_t *a = json_loadb(text, len, 0, &je);
    int rc = -1;
    if (!a || !json_is_array(a) || !json_array_size(a)) {
        err_set(e, "the choices must be a non-empty JSON array of strings");
        goto done;
    }
    size_t n = json_array_size(a), i;
    if (n > CONSTRAINT_MAX_CHOICES) {
        err_set(e, "%zu choices, at most %d", n, CONSTRAINT_MAX_CHOICES);
        goto done;
    }
    struct expr **k = malloc(n * sizeof *k);
    if (!k) {
        err_set(e, "out of memory");
        goto done;
    }
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
            free(k);
            err_set(e, "choice %zu is not a string without NUL bytes", i);
            goto done;
        }
        k[i] = expr_literal(r, json_string_value(v), json_string_length(v));
    }
    r->bodies[0] = expr_alt(r, k, (int32_t)n);
    free(k);
    rc = expr_rules_error(r, "the choices", e);
done:
    json_decref(a);
    return rc;
}

int constraint_spec_rules(const struct constraint_spec *s, struct expr_rules *r, struct err *e)
{
    if (expr_rules_init(r, e)) return -1;
    if (s->kind == CONSTRAINT_GRAMMAR) return gbnf_parse(s->text, s->len, r, e);
    if (s->kind == CONSTRAINT_JSON_OBJECT) return schema_any_object(r, e);
    if (s->kind == CONSTRAINT_JSON_SCHEMA) {
        json_error_t je;
        json_t *schema = json_loadb(s->text, s->len, JSON_DECODE_ANY, &je);
        if (!schema) return err_set(e, "the schema is not JSON: %s (at byte %d)", je.text, je.position);
        int rc = schema_compile(schema, r, e);
        json_decref(schema);
        return rc;
    }
    if (expr_rule_id(r, "root", 4) != 0) return err_set(e, "out of memory");
    if (s->kind == CONSTRAINT_CHOICE) return choice_rules(s->text, s->len, r, e);
    if (s->kind == CONSTRAINT_REGEX) {
        struct expr *x;
        if (regex_parse(r, s->text, s->len, 0, &x, e)) return -1;
        r->bodies[0] = x;
        return 0;
    }
    return err_set(e, "no constraint");
}

/* The canonical text of source text[0..len) of kind k into *out (malloc'd). */
static int canonical_text(enum constraint_kind k, const char *text, size_t len, char **out, struct err *e)
{
    *out = NULL;
    if (k == CONSTRAINT_JSON_OBJECT) {
        *out = strdup("");
    } else if (k == CONSTRAINT_JSON_SCHEMA || k == CONSTRAINT_CHOICE) {
        json_error_t je;
        json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &je);
        if (!j) return err_set(e, "not JSON: %s", je.text);
        *out = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(j);
    } else {
        if (memchr(text, '\0', len))
            return err_set(e, "the %s holds a NUL byte", k == CONSTRAINT_REGEX ? "pattern" : "grammar");
        if ((*out = malloc(len + 1))) {
            memcpy(*out, text, len);
            (*out)[len] = '\0';
        }
    }
    return *out ? 0 : err_set(e, "out of memory");
}

int constraint_spec_set(struct constraint_spec *s, enum constraint_kind k, const char *text, size_t len,
                        struct err *e)
{
    if (k <= CONSTRAINT_NONE || k > CONSTRAINT_GRAMMAR)
        return err_set(e, "unknown constraint kind %d", (int)k);
    if (len > CONSTRAINT_MAX_TEXT)
        return err_set(e, "the %s is %zu bytes, at most %d", constraint_kind_name(k), len,
                       CONSTRAINT_MAX_TEXT);
    struct constraint_spec t = {k, NULL, 0};
    if (canonical_text(k, text ? text : "", text ? len : 0, &t.text, e)) return -1;
    t.len = strlen(t.text);
    struct expr_rules r;
    int rc = constraint_spec_rules(&t, &r, e);
    if (!rc) rc = expr_check(&r, e);
    expr_rules_free(&r);
    if (rc) {
        free(t.text);
        return -1;
    }
    constraint_spec_free(s);
    *s = t;
    return 0;
}

/* ---- the cache ---- */

struct constraint {
    struct constraint_spec spec;
    uint64_t hash, serial, last_used;
    struct grammar *g; /* NULL when compiling failed */
    char *error;       /* the message then */
    int32_t users;
};

struct mask_slot {
    uint64_t hash, serial;
    uint8_t *key; /* the state's encoding (owned) */
    uint32_t key_len;
    int32_t next; /* chain of its bucket, -1 at the end */
    uint8_t used, ref;
};

struct constraint_cache {
    tokmask_vocab *tv;
    pda_arena *a;
    constraint **entries;
    int32_t n_entries, cap_entries;
    uint64_t next_serial, tick;
    struct mask_slot *slots;
    uint32_t *masks; /* (n_slots, words) */
    int32_t n_slots, n_buckets, hand;
    int32_t *heads; /* (n_buckets) */
    uint8_t *enc;   /* scratch encoding */
    size_t enc_cap;
    struct prefetch *pf; /* the mask worker, started on first use */
    struct constraint_stats st;
};

static uint64_t bytes_hash(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    h ^= 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h ^ (h >> 32);
}

int constraint_cache_init(const tok_vocab *v, int32_t n_tokens, size_t mask_bytes, constraint_cache **out,
                          struct err *e)
{
    *out = NULL;
    constraint_cache *c = calloc(1, sizeof *c);
    if (!c) return err_set(e, "out of memory");
    if (tokmask_vocab_init(v, n_tokens, &c->tv, e) || pda_arena_init(&c->a, e)) goto fail;
    size_t per = (size_t)tokmask_words(c->tv) * sizeof(uint32_t) + sizeof(struct mask_slot) + 64;
    size_t n = (mask_bytes ? mask_bytes : CONSTRAINT_DEFAULT_MASK_BYTES) / per;
    c->n_slots = (int32_t)(n < 16 ? 16 : n > (1 << 24) ? (1 << 24) : n);
    c->n_buckets = c->n_slots * 2;
    c->slots = calloc((size_t)c->n_slots, sizeof *c->slots);
    c->masks = malloc((size_t)c->n_slots * (size_t)tokmask_words(c->tv) * sizeof *c->masks);
    c->heads = malloc((size_t)c->n_buckets * sizeof *c->heads);
    if (!c->slots || !c->masks || !c->heads) {
        err_set(e, "out of memory for the mask cache (%d masks)", c->n_slots);
        goto fail;
    }
    for (int32_t i = 0; i < c->n_buckets; i++)
        c->heads[i] = -1;
    *out = c;
    return 0;
fail:
    constraint_cache_free(c);
    return -1;
}

static void entry_free(constraint *k)
{
    if (!k) return;
    constraint_spec_free(&k->spec);
    grammar_free(k->g);
    free(k->error);
    free(k);
}

static void prefetch_free(struct prefetch *pf);

void constraint_cache_free(constraint_cache *c)
{
    if (!c) return;
    prefetch_free(c->pf);
    for (int32_t i = 0; i < c->n_entries; i++)
        entry_free(c->entries[i]);
    free(c->entries);
    for (int32_t i = 0; c->slots && i < c->n_slots; i++)
        free(c->slots[i].key);
    free(c->slots);
    free(c->masks);
    free(c->heads);
    free(c->enc);
    pda_arena_free(c->a);
    tokmask_vocab_free(c->tv);
    free(c);
}

static constraint *compile_entry(constraint_cache *c, const struct constraint_spec *s, uint64_t hash)
{
    constraint *k = calloc(1, sizeof *k);
    struct err ce;
    if (!k || constraint_spec_copy(&k->spec, s, &ce)) {
        free(k);
        return NULL;
    }
    k->hash = hash;
    k->serial = ++c->next_serial;
    double t0 = clock_now();
    struct expr_rules r;
    int rc = constraint_spec_rules(s, &r, &ce);
    if (!rc) rc = grammar_compile(&r, &k->g, &ce);
    expr_rules_free(&r);
    c->st.t_compile += clock_now() - t0;
    if (rc) {
        k->error = strdup(ce.msg);
        c->st.compile_failed++;
    } else {
        c->st.compiled++;
    }
    return k;
}

/* Drops the least recently used entry nobody uses when more than CONSTRAINT_MAX_COMPILED are kept. */
static void trim_entries(constraint_cache *c)
{
    if (c->n_entries <= CONSTRAINT_MAX_COMPILED) return;
    int32_t victim = -1;
    for (int32_t i = 0; i < c->n_entries; i++)
        if (!c->entries[i]->users && (victim < 0 || c->entries[i]->last_used < c->entries[victim]->last_used))
            victim = i;
    if (victim < 0) return;
    entry_free(c->entries[victim]);
    c->entries[victim] = c->entries[--c->n_entries];
}

int constraint_acquire(constraint_cache *c, const struct constraint_spec *s, constraint **out, struct err *e)
{
    *out = NULL;
    if (s->kind == CONSTRAINT_NONE) return err_set(e, "no constraint");
    uint64_t h = bytes_hash((uint64_t)s->kind, s->text, s->len);
    constraint *k = NULL;
    for (int32_t i = 0; i < c->n_entries && !k; i++)
        if (c->entries[i]->hash == h && c->entries[i]->spec.kind == s->kind &&
            c->entries[i]->spec.len == s->len && !memcmp(c->entries[i]->spec.text, s->text, s->len))
            k = c->entries[i];
    if (!k) {
        if (c->n_entries == c->cap_entries) {
            int32_t cap = c->cap_entries ? c->cap_entries * 2 : 8;
            constraint **en = realloc(c->entries, (size_t)cap * sizeof *en);
            if (!en) return err_set(e, "out of memory");
            c->entries = en;
            c->cap_entries = cap;
        }
        if (!(k = compile_entry(c, s, h)))
            return err_set(e, "out of memory compiling the %s", constraint_kind_name(s->kind));
        c->entries[c->n_entries++] = k;
    }
    k->last_used = ++c->tick;
    if (k->error) {
        err_set(e, "%s: %s", constraint_kind_name(s->kind), k->error);
        trim_entries(c);
        return -1;
    }
    k->users++;
    trim_entries(c);
    *out = k;
    return 0;
}

void constraint_release(constraint_cache *c, constraint *k)
{
    if (!k) return;
    k->users--;
    trim_entries(c);
}

/* ---- states ---- */

void constraint_state_free(struct constraint_state *st)
{
    if (!st) return;
    free(st->bytes);
    memset(st, 0, sizeof *st);
}

/* Stores configuration cfg into st. */
static int state_store(struct constraint_state *st, const struct pda_config *cfg, struct err *e)
{
    size_t n = pda_encode(cfg, st->bytes, st->cap);
    if (n > st->cap) {
        uint8_t *b = realloc(st->bytes, n);
        if (!b) return err_set(e, "out of memory");
        st->bytes = b;
        st->cap = (uint32_t)n;
        pda_encode(cfg, st->bytes, st->cap);
    }
    st->len = (uint32_t)n;
    st->accept = cfg->accept;
    st->complete = pda_complete(cfg);
    return 0;
}

int constraint_state_start(constraint_cache *c, constraint *k, struct constraint_state *st, struct err *e)
{
    memset(st, 0, sizeof *st);
    uint64_t m = pda_mark(c->a);
    struct pda_config cfg;
    int rc = pda_start(k->g, c->a, &cfg) ? err_set(e, "out of memory") : state_store(st, &cfg, e);
    pda_release(c->a, m);
    return rc;
}

int constraint_advance(constraint_cache *c, constraint *k, struct constraint_state *st, int32_t t,
                       struct err *e)
{
    int32_t n;
    int eog;
    const uint8_t *b = tokmask_token(c->tv, t, &n, &eog);
    if (eog) {
        if (!st->accept) return 1;
        st->complete = 1;
        return 0;
    }
    if (n == 0 || st->complete) return 1;
    uint64_t m = pda_mark(c->a);
    struct pda_config cfg[2];
    int cur = 0, rc = pda_decode(k->g, c->a, st->bytes, st->len, &cfg[0], e);
    for (int32_t i = 0; !rc && i < n; i++, cur ^= 1) {
        if (pda_step(k->g, c->a, &cfg[cur], b[i], &cfg[cur ^ 1]))
            rc = err_set(e, "out of memory");
        else if (!pda_alive(&cfg[cur ^ 1]))
            rc = 1;
    }
    if (!rc) rc = state_store(st, &cfg[cur], e);
    pda_release(c->a, m);
    return rc;
}

/* ---- masks ---- */

static uint32_t *slot_mask(constraint_cache *c, int32_t i)
{
    return c->masks + (size_t)i * (size_t)tokmask_words(c->tv);
}

static void slot_unlink(constraint_cache *c, int32_t i)
{
    struct mask_slot *s = &c->slots[i];
    int32_t *at = &c->heads[s->hash % (uint64_t)c->n_buckets];
    while (*at != i)
        at = &c->slots[*at].next;
    *at = s->next;
    free(s->key);
    s->key = NULL;
    s->used = 0;
    c->st.mask_evictions++;
}

/* A slot for a new mask: the clock hand skips (and clears) recently used slots. */
static int32_t slot_victim(constraint_cache *c)
{
    for (;;) {
        int32_t i = c->hand;
        c->hand = (c->hand + 1) % c->n_slots;
        struct mask_slot *s = &c->slots[i];
        if (!s->used) return i;
        if (s->ref) {
            s->ref = 0;
            continue;
        }
        slot_unlink(c, i);
        return i;
    }
}

/* The slot holding the mask of (k, state) with hash h, or -1. */
static int32_t mask_find(constraint_cache *c, const constraint *k, uint64_t h, const uint8_t *state, uint32_t len)
{
    for (int32_t i = c->heads[h % (uint64_t)c->n_buckets]; i >= 0; i = c->slots[i].next) {
        const struct mask_slot *s = &c->slots[i];
        if (s->hash == h && s->serial == k->serial && s->key_len == len && !memcmp(s->key, state, len)) return i;
    }
    return -1;
}

/* A slot for a new mask of (k, state), linked into its bucket; its mask is for the caller to fill. */
static int32_t mask_insert(constraint_cache *c, const constraint *k, uint64_t h, const uint8_t *state, uint32_t len)
{
    int32_t i = slot_victim(c);
    struct mask_slot *s = &c->slots[i];
    if (!(s->key = malloc(len ? len : 1))) return -1;
    memcpy(s->key, state, len);
    s->key_len = len;
    s->hash = h;
    s->serial = k->serial;
    s->used = 1;
    s->ref = 1;
    int32_t *head = &c->heads[h % (uint64_t)c->n_buckets];
    s->next = *head;
    *head = i;
    return i;
}

/* Computes the mask of an encoded state into mask, with arena a (released). */
static int mask_compute(const tokmask_vocab *tv, const constraint *k, pda_arena *a, const uint8_t *state,
                        uint32_t len, uint32_t *mask, int64_t *visited, struct err *e)
{
    uint64_t m = pda_mark(a);
    struct pda_config cfg;
    int rc = pda_decode(k->g, a, state, len, &cfg, e);
    if (!rc && tokmask_compute(tv, k->g, a, &cfg, mask, visited)) rc = err_set(e, "out of memory");
    pda_release(a, m);
    return rc;
}

int constraint_mask(constraint_cache *c, constraint *k, const struct constraint_state *st,
                    const uint32_t **mask, struct err *e)
{
    uint64_t h = bytes_hash(k->serial, st->bytes, st->len);
    int32_t i = mask_find(c, k, h, st->bytes, st->len);
    if (i >= 0) {
        c->slots[i].ref = 1;
        c->st.mask_hits++;
        *mask = slot_mask(c, i);
        return 0;
    }
    double t0 = clock_now();
    if ((i = mask_insert(c, k, h, st->bytes, st->len)) < 0) return err_set(e, "out of memory");
    int64_t visited = 0;
    if (mask_compute(c->tv, k, c->a, st->bytes, st->len, slot_mask(c, i), &visited, e)) {
        slot_unlink(c, i);
        return -1;
    }
    c->st.masks_computed++;
    c->st.nodes_visited += visited;
    c->st.t_masks += clock_now() - t0;
    *mask = slot_mask(c, i);
    return 0;
}

/* ---- masks computed ahead, on a worker thread ---- */

struct prefetch_job {
    constraint *k;
    uint8_t *state; /* owned copy */
    uint32_t len;
    uint64_t hash;
    int rc;
    int64_t visited;
};

struct prefetch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, quit; /* pending: jobs handed to the worker and not done */
    const tokmask_vocab *tv;
    pda_arena *a;      /* the worker's */
    struct prefetch_job *jobs;
    int32_t n_jobs, cap_jobs;
    uint32_t *masks;   /* (cap_jobs, words) */
    double t_work;
};

static void *prefetch_main(void *arg)
{
    struct prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->pending && !pf->quit) pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->quit) break;
        pthread_mutex_unlock(&pf->mu);
        double t0 = clock_now();
        for (int32_t i = 0; i < pf->n_jobs; i++) {
            struct prefetch_job *j = &pf->jobs[i];
            struct err e;
            j->rc = mask_compute(pf->tv, j->k, pf->a, j->state, j->len,
                                 pf->masks + (size_t)i * (size_t)tokmask_words(pf->tv), &j->visited, &e);
        }
        pthread_mutex_lock(&pf->mu);
        pf->t_work += clock_now() - t0;
        pf->pending = 0;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

static void prefetch_free(struct prefetch *pf)
{
    if (!pf) return;
    pthread_mutex_lock(&pf->mu);
    pf->quit = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    for (int32_t i = 0; i < pf->n_jobs; i++) free(pf->jobs[i].state);
    free(pf->jobs);
    free(pf->masks);
    pda_arena_free(pf->a);
    free(pf);
}

static int prefetch_init(constraint_cache *c, struct err *e)
{
    struct prefetch *pf = calloc(1, sizeof *pf);
    if (!pf) return err_set(e, "out of memory");
    pf->tv = c->tv;
    if (pda_arena_init(&pf->a, e)) {
        free(pf);
        return -1;
    }
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    if (pthread_create(&pf->thread, NULL, prefetch_main, pf)) {
        pthread_mutex_destroy(&pf->mu);
        pthread_cond_destroy(&pf->cv);
        pda_arena_free(pf->a);
        free(pf);
        return err_set(e, "cannot start the mask worker thread");
    }
    c->pf = pf;
    return 0;
}

/* Adds the job for (k, st) unless the cache or an earlier job has it. */
static int prefetch_add(constraint_cache *c, constraint *k, const struct constraint_state *st)
{
    struct prefetch *pf = c->pf;
    uint64_t h = bytes_hash(k->serial, st->bytes, st->len);
    int32_t at = mask_find(c, k, h, st->bytes, st->len);
    if (at >= 0) {
        c->slots[at].ref = 1; /* keep it until it is used */
        return 0;
    }
    for (int32_t i = 0; i < pf->n_jobs; i++)
        if (pf->jobs[i].hash == h && pf->jobs[i].k == k && pf->jobs[i].len == st->len &&
            !memcmp(pf->jobs[i].state, st->bytes, st->len))
            return 0;
    if (pf->n_jobs == pf->cap_jobs) {
        int32_t cap = pf->cap_jobs ? pf->cap_jobs * 2 : 16;
        struct prefetch_job *jb = realloc(pf->jobs, (size_t)cap * sizeof *jb);
        if (!jb) return -1;
        pf->jobs = jb;
        uint32_t *m = realloc(pf->masks, (size_t)cap * (size_t)tokmask_words(c->tv) * sizeof *m);
        if (!m) return -1;
        pf->masks = m;
        pf->cap_jobs = cap;
    }
    struct prefetch_job *j = &pf->jobs[pf->n_jobs];
    memset(j, 0, sizeof *j);
    if (!(j->state = malloc(st->len ? st->len : 1))) return -1;
    memcpy(j->state, st->bytes, st->len);
    j->len = st->len;
    j->hash = h;
    j->k = k;
    pf->n_jobs++;
    return 0;
}

int constraint_prefetch_start(constraint_cache *c, int32_t n, constraint *const *ks,
                              const struct constraint_state *const *sts, struct err *e)
{
    if (!c->pf && prefetch_init(c, e)) return -1;
    struct prefetch *pf = c->pf;
    for (int32_t i = 0; i < n; i++)
        if (!sts[i]->complete && prefetch_add(c, ks[i], sts[i])) return err_set(e, "out of memory");
    if (!pf->n_jobs) return 0;
    pthread_mutex_lock(&pf->mu);
    pf->pending = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    return 0;
}

int constraint_prefetch_finish(constraint_cache *c, struct err *e)
{
    struct prefetch *pf = c->pf;
    if (!pf || !pf->n_jobs) return 0;
    pthread_mutex_lock(&pf->mu);
    while (pf->pending) pthread_cond_wait(&pf->cv, &pf->mu);
    c->st.t_masks += pf->t_work;
    pf->t_work = 0;
    pthread_mutex_unlock(&pf->mu);
    int rc = 0;
    for (int32_t i = 0; i < pf->n_jobs; i++) {
        struct prefetch_job *j = &pf->jobs[i];
        int32_t at = j->rc ? -1 : mask_insert(c, j->k, j->hash, j->state, j->len);
        if (at >= 0) {
            memcpy(slot_mask(c, at), pf->masks + (size_t)i * (size_t)tokmask_words(c->tv),
                   (size_t)tokmask_words(c->tv) * sizeof(uint32_t));
            c->st.masks_computed++;
            c->st.masks_prefetched++;
            c->st.nodes_visited += j->visited;
        } else if (!rc) {
            rc = err_set(e, "computing a mask ahead failed (out of memory)");
        }
        free(j->state);
    }
    pf->n_jobs = 0;
    return rc;
}

int32_t constraint_apply_mask(const uint32_t *mask, float *logits, int32_t n)
{
    int32_t allowed = 0;
    for (int32_t w = 0; w * 32 < n; w++) {
        uint32_t bits = mask[w];
        int32_t lim = n - w * 32 < 32 ? n - w * 32 : 32;
        if (lim < 32) bits &= (1u << lim) - 1;
        allowed += __builtin_popcount(bits);
        if (bits == 0xffffffffu) continue;
        for (int32_t b = 0; b < lim; b++)
            if (!((bits >> b) & 1)) logits[w * 32 + b] = -INFINITY;
    }
    return allowed;
}

void constraint_cache_stats(const constraint_cache *c, struct constraint_stats *st)
{
    *st = c->st;
}

int constraint_cache_check(const constraint_cache *c, struct err *e)
{
    for (int32_t i = 0; i < c->n_entries; i++) {
        const constraint *k = c->entries[i];
        if (k->users < 0) return err_set(e, "constraint %d: %d users", i, k->users);
        if (!k->g != !!k->error) return err_set(e, "constraint %d: grammar and error disagree", i);
        if (k->g && grammar_check(k->g, e)) return err_prefix(e, "constraint %d", i);
    }
    int32_t reached = 0, used = 0;
    for (int32_t b = 0; b < c->n_buckets; b++)
        for (int32_t i = c->heads[b]; i >= 0; i = c->slots[i].next) {
            if (i >= c->n_slots || !c->slots[i].used ||
                c->slots[i].hash % (uint64_t)c->n_buckets != (uint64_t)b)
                return err_set(e, "mask cache: bucket %d reaches slot %d wrongly", b, i);
            if (++reached > c->n_slots) return err_set(e, "mask cache: a chain loops");
        }
    for (int32_t i = 0; i < c->n_slots; i++)
        used += c->slots[i].used;
    if (reached != used) return err_set(e, "mask cache: %d slots used, %d reachable", used, reached);
    return 0;
}
