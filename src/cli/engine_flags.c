/* engine_flags — see engine_flags.h. */
#include "cli/engine_flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"

void engine_flags_usage(FILE *out, const struct runtime_params *d, const char *const *only)
{
    runparam_usage(out, d, only);
}

int engine_flags_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int engine_flags_parse_only(struct runtime_params *p, const char *cmd, const char *const *only, int argc,
                            char **argv, int *i)
{
    for (int k = 0; k < runparam_count; k++) {
        const struct runparam *r = &runparam_table[k];
        if (!r->flag || !runparam_in(r, only)) continue;
        const char *names[] = {r->flag, r->alias}, *v = NULL;
        char flag[64];
        int got = cli_opts_take(cmd, names, 2, r->type != RUNPARAM_OFF, argc, argv, i, flag, sizeof flag, &v);
        if (got < 0) return -1;
        if (!got) continue;
        struct err e;
        if (runparam_set_flag(p, r, flag, v, &e)) {
            cli_error(cmd, "%s", e.msg);
            return -1;
        }
        return 1;
    }
    return 0;
}

int engine_flags_parse(struct runtime_params *p, const char *cmd, int argc, char **argv, int *i)
{
    return engine_flags_parse_only(p, cmd, NULL, argc, argv, i);
}

json_t *engine_flags_json(const struct runtime_params *p)
{
    return runparam_to_json(p);
}

void engine_flags_range(const char *name, long *lo, long *hi)
{
    int32_t l = 0, h = 0;
    for (int k = 0; k < runparam_count; k++)
        if (!strcmp(runparam_table[k].name, name)) runparam_range(&runparam_table[k], &l, &h);
    *lo = l;
    *hi = h;
}
