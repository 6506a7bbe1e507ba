/* engine_flags — the flags that open the inference stack, shared by `run`, `bench` and `generate`: they are
 * parsed into a struct runtime_params (runtime/runtime.h), which opens the stack.
 *
 *   --backend NAME        auto (default: the best available), or a backend built into this binary
 *   --device N            GPU ordinal (default 0)
 *   --threads N, -t N     CPU threads (default: one per core)
 *   --kv-memory SIZE      KV pool budget, e.g. 512M, 2G, or "auto" (default): what the backend's memory has
 *                         left after weights, scratch and headroom, capped at what max_seqs sequences of the
 *                         full context can use twice over (the rest would never be touched)
 *   --headroom SIZE       memory left unused by "auto" (default: the backend's; cpu 20% of RAM, at least 2 GiB)
 *   --kv-type T           f32, f16 (default), q8_0
 *   --kv-block N          tokens per KV block, a power of two (default 16)
 *   --max-batch-tokens N  rows per engine step (default: the backend's)
 *   --max-seqs N|auto     running sequences at once (default auto: runtime/runtime.h)
 *   --no-prefix-cache     turn the prefix cache off
 *   --lookup N            prompt-lookup decoding: up to N draft tokens per sequence and step, 0 = off
 *   --lookup-always       verify every draft token proposed (no adaptive cut; for measuring acceptance)
 */
#ifndef NS_CLI_ENGINE_FLAGS_H
#define NS_CLI_ENGINE_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "runtime/runtime.h"

/* If argv[*i] is an engine flag ("--flag VALUE" or "--flag=VALUE"), consumes it (and its value: *i advances)
 * into p and returns 1; returns 0 when it is not one; -1 on a bad or missing value, or a backend name this
 * build does not have (the message is printed as "nightshift <cmd>: ..."). */
int engine_flags_parse(struct runtime_params *p, const char *cmd, int argc, char **argv, int *i);
/* The help lines, with the defaults of d (a command's own, e.g. generate's f32 KV). */
void engine_flags_usage(FILE *out, const struct runtime_params *d);
/* Parses a decimal integer in [lo, hi] for flag; on failure prints "CMD: FLAG expects an integer in [LO, HI],
 * got 'S'" through cli_error and returns -1. Shared by the subcommands' own flags. */
int engine_flags_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
/* The effective flags as JSON (for run records): sizes in bytes, "auto" / "default" where not given. */
json_t *engine_flags_json(const struct runtime_params *p);

#endif
