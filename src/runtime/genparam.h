/* genparam — the one table of generation parameters.
 *
 * Every generation parameter is one row of genparam_table: its name, its JSON field (and alias), its CLI
 * flag (and alias), its type and range, its default, whether and how it enters the request key, and where it
 * goes in the sampler's parameters. Parsing (flags and request JSON), validation, the key encoding, the
 * store settings and the run record all walk the table, so adding a parameter is one row (plus its field in
 * struct gen_params and its sampler code); no code elsewhere lists the parameters one by one.
 *
 * Invariant (genparam_check_table): names, JSON fields and flags are unique; every default lies in its
 * range; a row that is off for greedy requests (GENPARAM_KEY_SAMPLING) has an off value in its range.
 */
#ifndef NS_RUNTIME_GENPARAM_H
#define NS_RUNTIME_GENPARAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "constrain/constraint.h"
#include "engine/logprob.h"
#include "engine/sampler.h"
#include "util/err.h"

#define GENPARAM_MAX_STOP 4        /* stop strings per request (OpenAI's limit) */
#define GENPARAM_MAX_STOP_BYTES 256
#define GENPARAM_MAX_LOGIT_BIAS 1024
#define GENPARAM_MAX_N 128
#define GENPARAM_MAX_TOKENS_LIMIT (1 << 24)
#define GENPARAM_MAX_COMPLETION_LOGPROBS 5 /* /v1/completions' logprobs: N at most (OpenAI's limit); chat's
                                              top_logprobs goes to LOGPROB_MAX_TOP (20) */

/* The values of every parameter for one request (or the run-wide defaults). Owns stop and logit_bias. */
struct gen_params {
    int32_t max_tokens;
    float temperature;
    float top_p;
    int32_t top_k;
    float min_p;
    float presence_penalty;
    float frequency_penalty;
    float repetition_penalty;
    int32_t repeat_last_n;
    int has_seed;                  /* 0: no seed given (the caller derives one) */
    uint64_t seed;
    int32_t n;                     /* completions per request */
    int ignore_eos;
    int32_t n_stop;
    char **stop;                   /* (n_stop) owned, NUL-terminated, 1..GENPARAM_MAX_STOP_BYTES bytes */
    int32_t n_logit_bias;
    struct logit_bias *logit_bias; /* (n_logit_bias) owned, sorted by token, unique tokens */
    struct constraint_spec constraint; /* structured output (owned); kind NONE: unconstrained */
    int32_t logprobs;              /* -1 (default, or false): none; N >= 0 (true: 0): each token's logprob with
                                      N alternatives (/v1/completions' logprobs: N) */
    int32_t top_logprobs;          /* alternatives per token (/v1/chat/completions, with logprobs: true) */
    int echo;                      /* /v1/completions: the text (and the logprobs) begin with the prompt */
    int constraint_field;          /* 1 + the row whose request field set the constraint, 0: none did (a
                                      second constraint field in one request is an error); not a value:
                                      it enters neither the key nor the settings */
    uint64_t given;                /* bit i: row i of genparam_table was set by the request's own field
                                      (genparam_apply_json, not null); the others hold the defaults. Not a
                                      value either (jobs/settings: a default no request fell back to) */
};

#define GENPARAM_ALL_ROWS UINT64_MAX /* a `given` / defaults-used mask of every row (the table has <= 64) */

enum genparam_type {
    GENPARAM_INT,        /* int32_t */
    GENPARAM_FLOAT,      /* float; JSON and flags read a double, checked against the range, then rounded */
    GENPARAM_BOOL,       /* int 0/1; a flag without a value */
    GENPARAM_SEED,       /* has_seed + uint64_t: JSON any int64 (stored as its bit pattern), flag 0..2^64-1 */
    GENPARAM_STOP,       /* string or list of strings; the flag is repeatable */
    GENPARAM_LOGIT_BIAS, /* {"token id": bias}; no flag */
    GENPARAM_CONSTRAINT, /* structured output (constraint.h): the row carries the constraint kinds lo..hi; the
                            request field and flag take the row's source (see genparam.c) */
    GENPARAM_LOGPROBS    /* int32_t: -1 off; a JSON boolean (true: 0, false: -1) or an integer in [lo, hi] */
};

enum genparam_key {
    GENPARAM_KEY_NO,       /* does not enter the request key (n: each completion has its own key) */
    GENPARAM_KEY_YES,      /* enters the key as its value */
    GENPARAM_KEY_SAMPLING, /* enters the key as its value, or as `off` for greedy requests (temperature 0) */
    GENPARAM_KEY_IF_SET    /* enters the key only when not at its default, marked (see genparam_key_encode), so
                              requests without it keep the keys they had before the row existed */
};

struct genparam {
    const char *name;       /* canonical: messages, store settings "default.NAME", the run record */
    const char *json;       /* request field, or NULL */
    const char *json_alias; /* second accepted field name, or NULL */
    const char *flag;       /* CLI flag ("--max-tokens"), or NULL */
    const char *flag_alias; /* second accepted flag, or NULL */
    enum genparam_type type;
    double lo, hi;          /* range of INT and FLOAT (and logit-bias values); an INT hi of INT32_MAX is open */
    int lo_open;            /* 1: the range excludes lo */
    double def;             /* default of INT, FLOAT and BOOL */
    double off;             /* the key's value for greedy requests (GENPARAM_KEY_SAMPLING) */
    enum genparam_key key;
    size_t offset;          /* offsetof(struct gen_params, the field) */
    ptrdiff_t sampler;      /* offsetof(struct sampler_params, the field), or -1 */
    const char *help;       /* one line for --help */
};

extern const struct genparam genparam_table[];
extern const int genparam_count;

/* The table's defaults: max_tokens 256, temperature 1, top_p 1, top_k 0, min_p 0, no penalties,
 * repeat_last_n 64, no seed, n 1, no stop strings, no logit bias, ignore_eos 0, no constraint, no logprobs
 * (-1), top_logprobs 0, echo 0. */
struct gen_params genparam_defaults(void);
/* Deep copy (dst is overwritten, not freed). */
int genparam_copy(struct gen_params *dst, const struct gen_params *src, struct err *e);
void genparam_free(struct gen_params *g);

/* Checks every row's range, and max_tokens 0 only with echo; the message names the parameter ("temperature
 * must be in [0, 2], got 3"). For run-wide defaults (flags); a request's fields are checked as they are
 * applied and by genparam_check_endpoint. */
int genparam_check(const struct gen_params *g, struct err *e);
/* Debug check of the table itself (see the invariant above). */
int genparam_check_table(struct err *e);

/* Request JSON. If field is a generation field, applies v (null means "not given": no change) and returns
 * 1; returns 0 if it is not one; -1 if v is bad, with *code "invalid_type" or "invalid_value" and a message
 * naming the field ("'top_p' must be in (0, 1], got 2"). On failure g is unchanged. */
int genparam_apply_json(struct gen_params *g, const char *field, const json_t *v, const char **code,
                        struct err *e);
/* (genparam_apply_json also sets the row's bit in g->given when v is not null and applied.) */

/* The checks between fields that depend on the endpoint (chat: /v1/chat/completions, else /v1/completions),
 * for a request line whose fields are applied: logprobs, top_logprobs, echo and max_tokens 0 (scoring).
 * 0, or -1 with *code ("invalid_value", "unsupported_parameter") and a message naming the field first. */
int genparam_check_endpoint(const struct gen_params *g, int chat, const char **code, struct err *e);

/* What nightshift does with a request field that is not a generation field (OpenAI's and vLLM's names). */
enum genparam_other {
    GENPARAM_OTHER_UNKNOWN,     /* not a field of OpenAI's request bodies that nightshift knows of */
    GENPARAM_OTHER_ACCEPTED,    /* changes nothing in the answer (metadata, user, store, service_tier, ...) or
                                   is at its neutral value (null, stream false, logprobs false, tools [],
                                   tool_choice "none", n is a generation field) */
    GENPARAM_OTHER_UNSUPPORTED, /* a field nightshift does not implement at a value that would change the
                                   answer (tools, logprobs true, audio, modalities, prediction, ...): the
                                   request must fail, never be answered without it */
};
enum genparam_other genparam_other_field(const char *field, const json_t *v);

/* "an object", "an array", "a string", "an integer", "a number", "a boolean" or "null": a JSON value's type as
 * the request error messages name it. */
const char *genparam_json_type(const json_t *v);

/* CLI. The row whose flag or alias is `flag`, or NULL. A BOOL row takes no value. */
const struct genparam *genparam_find_flag(const char *flag);
/* Applies a flag's value (NULL for BOOL): numbers must parse completely ("--top-k expects an integer,
 * got 'x'"); ranges are checked later by genparam_check, as for JSON. A STOP flag appends one string. */
int genparam_set_flag(struct gen_params *g, const struct genparam *p, const char *flag, const char *value,
                      struct err *e);
/* 1 if p is one of only (row names, NULL-terminated); only NULL: every row. */
int genparam_in(const struct genparam *p, const char *const *only);
/* The flag lines for --help of the rows in only (NULL: all), with the defaults of d (a command's own; NULL:
 * the table's), aligned at column GENPARAM_USAGE_COL. */
void genparam_usage(FILE *out, const struct gen_params *d, const char *const *only);
/* One --help line as every flag table of the program prints it: "  LEFT" padded to GENPARAM_USAGE_COL (a
 * longer LEFT gets a line of its own), the help text (each '\n' continues at the column), then " (DEF; also
 * ALSO)", either part left out when NULL. */
#define GENPARAM_USAGE_COL 28
void genparam_usage_line(FILE *out, const char *left, const char *help, const char *def, const char *also);

/* Store settings: the row's value as a string ("none" for a GENPARAM_KEY_IF_SET row at its default; else
 * "%d", "%.9g", "none" or the seed, a JSON array of stop
 * strings, "token:bias,...", "none" or "KIND:TEXT" for a constraint of the row's kinds, with "KIND:sha256:HEX"
 * of the text when it is longer than 200 bytes). Truncated to cap. */
void genparam_setting(const struct genparam *p, const struct gen_params *g, char *buf, size_t cap);
/* The run record: {"name": value, ...} over every row (seed null when not given). */
json_t *genparam_to_json(const struct gen_params *g);

/* The key: calls put(w, bytes, n) for every row that enters the key, in table order, little-endian (INT and
 * BOOL u32, FLOAT the f32 bit pattern with -0 as +0, SEED the u64 seed_used, STOP u32 count then u32 length +
 * bytes each, LOGIT_BIAS u32 count then (i32 token, f32 bias) each, CONSTRAINT nothing when the request's
 * constraint is not of the row's kinds, else u32 0x80000000 | kind, u32 length and the canonical text;
 * GENPARAM_KEY_IF_SET rows nothing at their default, else u32 0x80010000 | row index and u32 value).
 * Greedy requests encode GENPARAM_KEY_SAMPLING rows and the seed as their off values. The constraint rows
 * come last and encode nothing for unconstrained requests, so those keep the keys they had before
 * constraints existed; the marker's high bit cannot be a prompt length, so no two encodings collide. */
void genparam_key_encode(const struct gen_params *g, uint64_t seed_used,
                         void (*put)(void *w, const void *bytes, size_t n), void *w);

/* The sampler's parameters (rows with a sampler offset; logit_bias borrowed from g) with the given seed. */
void genparam_to_sampler(const struct gen_params *g, uint64_t seed, struct sampler_params *sp);

#endif
