/* engine_flags — the flags that open the inference stack (--backend, --threads, --kv-memory, --max-seqs,
 * ...), shared by run, sweep, serve, bench, generate and perplexity: the rows of runtime/runparam's table,
 * parsed into a struct runtime_params (runtime/runtime.h), which opens the stack. The flags themselves, their
 * ranges, defaults and help lines are that table's; this file only matches arguments against it.
 */
#ifndef NS_CLI_ENGINE_FLAGS_H
#define NS_CLI_ENGINE_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "runtime/runparam.h"
#include "runtime/runtime.h"

/* If argv[*i] is an engine flag ("--flag VALUE" or "--flag=VALUE"), consumes it (and its value: *i advances)
 * into p and returns 1; returns 0 when it is not one; -1 on a bad or missing value, or a backend name this
 * build does not have (the message is printed as "nightshift <cmd>: ..."). The _only form takes the rows
 * named in only (runparam names, NULL-terminated) and no other: a command that uses only some. */
int engine_flags_parse(struct runtime_params *p, const char *cmd, int argc, char **argv, int *i);
int engine_flags_parse_only(struct runtime_params *p, const char *cmd, const char *const *only, int argc,
                            char **argv, int *i);
/* The help lines, with the defaults of d (a command's own, e.g. generate's f32 KV); only as above, NULL: all. */
void engine_flags_usage(FILE *out, const struct runtime_params *d, const char *const *only);
/* Parses a decimal integer in [lo, hi] for flag; on failure prints "CMD: FLAG expects an integer in [LO, HI],
 * got 'S'" through cli_error and returns -1. Shared by the subcommands' own flags (lists of levels). */
int engine_flags_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
/* The range of the INT row called name (runparam's table: "max_seqs"), for flags that take lists of its
 * values (sweep's and bench's --concurrency); [0, 0] for a name that is not an INT row. */
void engine_flags_range(const char *name, long *lo, long *hi);
/* The effective flags as JSON (for run records): runparam_to_json. */
json_t *engine_flags_json(const struct runtime_params *p);

#endif
