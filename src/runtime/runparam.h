/* runparam — the one table of engine and runtime flags (--backend, --threads, --kv-memory, --max-seqs, ...).
 *
 * Every flag that opens the inference stack is one row of runparam_table: its record name, flag and alias,
 * its type, the field of struct runtime_params it sets and, for an engine parameter (RUNPARAM_ENGINE), the
 * row of engine_param_table (engine.h) of the same name, which gives its range and default and the field of
 * struct engine_params it is copied into.
 * Defaults (runtime_default_params), flag parsing, --help, the run record's "engine" object and the copy
 * into the engine's params (runtime_open_backend) all walk the table, so a new flag is one row (plus its
 * field, and the code that does the new work); nothing elsewhere lists the flags one by one.
 *
 * Invariant (runparam_check_table): names and flags are unique; a RUNPARAM_ENGINE row has an engine_param
 * row of its name; an INT row's own default lies in its range; a NAMED row has names.
 */
#ifndef NS_RUNTIME_RUNPARAM_H
#define NS_RUNTIME_RUNPARAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "runtime/runtime.h"
#include "util/err.h"

enum runparam_type {
    RUNPARAM_INT,     /* an int32_t / int field: a decimal integer in the range */
    RUNPARAM_OFF,     /* an int field the flag (no value) sets to 0: "--no-prefix-cache"; recorded as a boolean */
    RUNPARAM_SIZE,    /* a uint64_t of bytes: "512M", "2G", ... (util/sysmem), or "auto": RUNTIME_AUTO */
    RUNPARAM_BACKEND, /* a const char *: "auto" or a backend built into this binary (backend_check_name) */
    RUNPARAM_NAMED,   /* an enum (32 bits) whose names name_of gives: name_of(0), name_of(1), ... up to the
                         first NULL; the value is the name's number (matched ignoring case) */
    RUNPARAM_NONE     /* no flag, not recorded: only the default and the copy into the engine (debug_checks) */
};

#define RUNPARAM_AUTO_ZERO 1u  /* INT: the word "auto" is also taken, stored as 0 (the default); recorded as
                                  auto_word; with an engine field, 0 is not copied (the caller resolves it) */
#define RUNPARAM_ZERO_KEEPS 2u /* INT with an engine field: 0 means "not given": the engine's value (the
                                  backend's default) stays; the default is 0, not the engine row's */
#define RUNPARAM_ENGINE 4u     /* an engine parameter: the engine_param row of the same name (engine.h) gives
                                  its range and default, and runparam_to_engine copies it there */

/* One flag. Rows are written with designated initializers; what a row leaves out is NULL / 0. */
struct runparam {
    const char *name;      /* the run record's key; with RUNPARAM_ENGINE also its engine_param row's name */
    const char *flag;      /* "--max-seqs", NULL for RUNPARAM_NONE */
    const char *alias;     /* "-t", or an older spelling still taken ("--batch"), or NULL */
    const char *metavar;   /* the value's name in --help ("N", "SIZE|auto"); NULL for no value */
    enum runparam_type type;
    size_t offset;         /* offsetof(struct runtime_params, the field) */
    int32_t lo, hi, def;   /* an INT row that is not an engine parameter (one is: the engine row's) */
    unsigned flags;        /* RUNPARAM_ENGINE, RUNPARAM_AUTO_ZERO, RUNPARAM_ZERO_KEEPS */
    const char *(*name_of)(int32_t v); /* NAMED: the name of value v, NULL past the last */
    const char *auto_word; /* the record's value for the automatic one (SIZE: RUNTIME_AUTO, AUTO_ZERO: 0) */
    const char *zero;      /* --help's default where the value is 0 / automatic ("one per core"), or NULL */
    const char *help;      /* the help text ('\n' starts an indented line; unless it says "default" itself,
                              the command's default is appended; NAMED and BACKEND: the names follow it) */
};

extern const struct runparam runparam_table[];
extern const int runparam_count;

/* 1 if row is one of only (row names, NULL-terminated); only NULL: every row. */
int runparam_in(const struct runparam *row, const char *const *only);
/* An INT row's range: its engine row's, else its own ([0, 0] for other types). */
void runparam_range(const struct runparam *row, int32_t *lo, int32_t *hi);
/* Every row's default into p (the other fields of p are left as they are). */
void runparam_defaults(struct runtime_params *p);
/* Applies a flag's value (NULL for RUNPARAM_OFF); flag is the name as typed, for messages ("--max-seqs
 * expects an integer in [1, 4096], got '0'", "--kv-type x: expected f32, f16 or q8_0"). 0, or -1 with p
 * unchanged. */
int runparam_set_flag(struct runtime_params *p, const struct runparam *row, const char *flag, const char *value,
                      struct err *e);
/* The --help lines of the rows in only (NULL: all), with the defaults of d (a command's own). */
void runparam_usage(FILE *out, const struct runtime_params *d, const char *const *only);
/* The run record's "engine": {"name": value, ...} over every row with a flag, in table order (sizes in bytes,
 * auto_word where automatic, "auto" for no backend). */
json_t *runparam_to_json(const struct runtime_params *p);
/* Copies every RUNPARAM_ENGINE row from p into ep (a ZERO_KEEPS or AUTO_ZERO row only when not 0). */
void runparam_to_engine(const struct runtime_params *p, struct engine_params *ep);
/* Debug check of the table itself (see the invariant above). */
int runparam_check_table(struct err *e);

#endif
