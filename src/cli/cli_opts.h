/* cli_opts — table-driven flag parsing and --help for the subcommands.
 *
 * A command lists its own flags as a table of struct cli_opt (flag, aliases, type, destination, range, help
 * line); the argument loop hands each argument to the engine flags (engine_flags_parse: runtime/runparam's
 * table), the generation-parameter table (cli_opts_parse_gen: runtime/genparam's) and the command's table
 * (cli_opts_parse) in turn, and --help prints the same tables (cli_opts_usage, engine_flags_usage,
 * genparam_usage), so a page cannot name a flag the parser does not take or a default it does not use.
 * Messages have one form for every command: "nightshift CMD: --flag expects an integer in [LO, HI], got
 * 'x'". A flag with a value is accepted as "--flag VALUE" and as "--flag=VALUE" (long names only).
 */
#ifndef NS_CLI_OPTS_H
#define NS_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/genparam.h"

enum cli_opt_type {
    CLI_OPT_SET,    /* no value: *(int *)dst = (int)lo */
    CLI_OPT_STRING, /* *(const char **)dst = the value (borrowed from argv) */
    CLI_OPT_INT32,  /* *(int32_t *)dst, a decimal integer in [lo, hi] */
    CLI_OPT_SIZE,   /* *(size_t *)dst, a decimal integer in [lo, hi] */
    CLI_OPT_U64,    /* *(uint64_t *)dst, any non-negative decimal integer (lo, hi unused): seeds */
    CLI_OPT_DOUBLE, /* *(double *)dst, a finite number >= lo (> lo when lo_open) */
    CLI_OPT_CHOICE, /* *(int *)dst = the index of the value in choices (NULL-terminated) */
    CLI_OPT_FORMAT  /* *(enum input_format *)dst, a name input_format_parse (jobs/input.h) knows */
};

/* One flag. Rows are written with designated initializers; what a row leaves out is NULL / 0. */
struct cli_opt {
    const char *flag;  /* "--output"; NULL: the row is a heading of the help page (help is its text) */
    const char *alias; /* "-o", or NULL */
    enum cli_opt_type type;
    void *dst;
    double lo, hi;
    int lo_open;
    const char *const *choices;
    const char *old;     /* an older spelling still accepted ("--out"; help says "also --out"), or NULL */
    const char *metavar; /* the value's name in help ("PATH"); NULL: from the type (N, X, S, a|b|c) */
    const char *help;    /* the help text ('\n' starts an indented line); NULL: a hidden flag. Unless the
                            text says "default" itself, the value dst holds when help is printed is shown
                            as the default */
};

/* If argv[*i] is one of opts (n entries), consumes it and its value (*i advances) and returns 1; 0 when it
 * is none of them; -1 (the message printed through cli_error) on a bad or missing value. Messages name the
 * flag as typed (an alias stays an alias), without its "=VALUE". */
int cli_opts_parse(const char *cmd, const struct cli_opt *opts, int n, int argc, char **argv, int *i);

/* The help lines of opts (headings as they are), with the defaults their dst hold now. */
void cli_opts_usage(FILE *out, const struct cli_opt *opts, int n);

/* The generation parameters (runtime/genparam's table) into g; only: the row names taken (NULL-terminated),
 * NULL for every row with a flag (a row not taken is not this command's flag: 0). Ranges are checked
 * afterwards with genparam_check, as for request lines. */
int cli_opts_parse_gen(const char *cmd, struct gen_params *g, int argc, char **argv, int *i);
int cli_opts_parse_gen_only(const char *cmd, const char *const *only, struct gen_params *g, int argc, char **argv,
                            int *i);

/* The flag at argv[*i] if its name is one of names[0..n) (NULL entries skipped): returns 1 with the name as
 * typed (without "=VALUE") in name (cap bytes) and, when takes_value, *value (inline or the next argument,
 * consumed: *i advances); 0 when it is none of them; -1 (printed) for a missing value, or a value given
 * inline to a flag that takes none. The one matcher of every flag table. */
int cli_opts_take(const char *cmd, const char *const *names, int n, int takes_value, int argc, char **argv, int *i,
                  char *name, size_t cap, const char **value);

#endif
