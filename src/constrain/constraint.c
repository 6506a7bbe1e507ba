/* constraint — see constraint.h. Two halves: specs (canonical text, front-ends) and the cache (compiled
 * constraints, the mask table, per-sequence states).
 */
#include "constrain/constraint.h"

#include <math.h>
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

void constraint_cache_free(constraint_cache *c)
{
    if (!c) return;
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

int constraint_mask(constraint_cache *c, constraint *k, const struct constraint_state *st,
                    const uint32_t **mask, struct err *e)
{
    uint64_t h = bytes_hash(k->serial, st->bytes, st->len);
    for (int32_t i = c->heads[h % (uint64_t)c->n_buckets]; i >= 0; i = c->slots[i].next) {
        struct mask_slot *s = &c->slots[i];
        if (s->hash == h && s->serial == k->serial && s->key_len == st->len &&
            !memcmp(s->key, st->bytes, st->len)) {
            s->ref = 1;
            c->st.mask_hits++;
            *mask = slot_mask(c, i);
            return 0;
        }
    }
    double t0 = clock_now();
    int32_t i = slot_victim(c);
    struct mask_slot *s = &c->slots[i];
    if (!(s->key = malloc(st->len ? st->len : 1))) return err_set(e, "out of memory");
    uint64_t m = pda_mark(c->a);
    struct pda_config cfg;
    int64_t visited = 0;
    int rc = pda_decode(k->g, c->a, st->bytes, st->len, &cfg, e);
    if (!rc && tokmask_compute(c->tv, k->g, c->a, &cfg, slot_mask(c, i), &visited))
        rc = err_set(e, "out of memory");
    pda_release(c->a, m);
    if (rc) {
        free(s->key);
        s->key = NULL;
        return -1;
    }
    memcpy(s->key, st->bytes, st->len);
    s->key_len = st->len;
    s->hash = h;
    s->serial = k->serial;
    s->used = 1;
    s->ref = 1;
    int32_t *head = &c->heads[h % (uint64_t)c->n_buckets];
    s->next = *head;
    *head = i;
    c->st.masks_computed++;
    c->st.nodes_visited += visited;
    c->st.t_masks += clock_now() - t0;
    *mask = slot_mask(c, i);
    return 0;
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
