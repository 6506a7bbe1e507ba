/* cli_opts — table-driven flag parsing for the subcommands.
 *
 * A command lists its own flags as a table of struct cli_opt (flag, alias, type, destination, range); the
 * argument loop hands each argument to the engine flags (engine_flags_parse), the generation-parameter
 * table (cli_opts_parse_gen) and the command's table (cli_opts_parse) in turn. Messages have one form for
 * every command: "nightshift CMD: --flag expects an integer in [LO, HI], got 'x'". A flag with a value is
 * accepted as "--flag VALUE" and as "--flag=VALUE".
 */
#ifndef NS_CLI_OPTS_H
#define NS_CLI_OPTS_H

#include <stdint.h>

#include "runtime/genparam.h"

enum cli_opt_type {
    CLI_OPT_SET,    /* no value: *(int *)dst = (int)lo */
    CLI_OPT_STRING, /* *(const char **)dst = the value (borrowed from argv) */
    CLI_OPT_INT32,  /* *(int32_t *)dst, a decimal integer in [lo, hi] */
    CLI_OPT_SIZE,   /* *(size_t *)dst, a decimal integer in [lo, hi] */
    CLI_OPT_U64,    /* *(uint64_t *)dst, any non-negative decimal integer (lo, hi unused): seeds */
    CLI_OPT_DOUBLE, /* *(double *)dst, a finite number >= lo (> lo when lo_open) */
    CLI_OPT_CHOICE  /* *(int *)dst = the index of the value in choices (NULL-terminated) */
};

struct cli_opt {
    const char *flag;  /* "--output" */
    const char *alias; /* "-o", or NULL */
    enum cli_opt_type type;
    void *dst;
    double lo, hi;
    int lo_open;
    const char *const *choices;
};

/* If argv[*i] is one of opts (n entries), consumes it and its value (*i advances) and returns 1; 0 when it
 * is none of them; -1 (the message printed through cli_error) on a bad or missing value. Messages name the
 * flag as typed (an alias stays an alias), without its "=VALUE". */
int cli_opts_parse(const char *cmd, const struct cli_opt *opts, int n, int argc, char **argv, int *i);

/* The same for the generation parameters (runtime/genparam's table) into g. Ranges are checked afterwards
 * with genparam_check, as for request lines. */
int cli_opts_parse_gen(const char *cmd, struct gen_params *g, int argc, char **argv, int *i);

#endif
