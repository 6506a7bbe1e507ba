/* cli_opts — see cli_opts.h. */
#include "cli/cli_opts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* Matches argv[*i] against flag/alias, as "--flag" or "--flag=value". Returns 1 and sets *inline_value (NULL
 * for the plain form), or 0. */
static int match(const char *arg, const char *flag, const char *alias, const char **inline_value)
{
    const char *names[2] = {flag, alias};
    for (int k = 0; k < 2; k++) {
        const char *n = names[k];
        if (!n) continue;
        size_t len = strlen(n);
        if (strncmp(arg, n, len)) continue;
        if (arg[len] == '\0') {
            *inline_value = NULL;
            return 1;
        }
        if (arg[len] == '=' && n[1] == '-') {
            *inline_value = arg + len + 1;
            return 1;
        }
    }
    return 0;
}

/* The value of the flag at argv[*i]: its inline value, or the next argument (consumed). NULL if missing. */
static const char *take_value(const char *cmd, const char *inline_value, int argc, char **argv, int *i)
{
    if (inline_value) return inline_value;
    if (*i + 1 >= argc) {
        cli_error(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int parse_integer(const char *cmd, const char *flag, const char *v, double lo, double hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < (long long)lo || x > (long long)hi) {
        cli_error(cmd, "%s expects an integer in [%lld, %lld], got '%s'", flag, (long long)lo, (long long)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_one(const char *cmd, const struct cli_opt *o, const char *flag, const char *v)
{
    long long x;
    switch (o->type) {
    case CLI_OPT_SET: *(int *)o->dst = (int)o->lo; return 0;
    case CLI_OPT_STRING: *(const char **)o->dst = v; return 0;
    case CLI_OPT_INT32:
        if (parse_integer(cmd, flag, v, o->lo, o->hi, &x)) return -1;
        *(int32_t *)o->dst = (int32_t)x;
        return 0;
    case CLI_OPT_SIZE:
        if (parse_integer(cmd, flag, v, o->lo, o->hi, &x)) return -1;
        *(size_t *)o->dst = (size_t)x;
        return 0;
    case CLI_OPT_U64: {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            cli_error(cmd, "%s expects a non-negative integer, got '%s'", flag, v);
            return -1;
        }
        *(uint64_t *)o->dst = (uint64_t)u;
        return 0;
    }
    case CLI_OPT_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(d)) {
            cli_error(cmd, "%s expects a number, got '%s'", flag, v);
            return -1;
        }
        if (o->lo_open ? !(d > o->lo) : !(d >= o->lo)) {
            cli_error(cmd, "%s must be %s %g", flag, o->lo_open ? ">" : ">=", o->lo);
            return -1;
        }
        *(double *)o->dst = d;
        return 0;
    }
    case CLI_OPT_CHOICE:
        for (int k = 0; o->choices[k]; k++)
            if (!strcmp(v, o->choices[k])) {
                *(int *)o->dst = k;
                return 0;
            }
        char list[256] = "";
        for (int k = 0; o->choices[k]; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? (o->choices[k + 1] ? ", " : " or ") : "",
                     o->choices[k]);
        cli_error(cmd, "%s %s: expected %s", flag, v, list);
        return -1;
    }
    return -1;
}

int cli_opts_parse(const char *cmd, const struct cli_opt *opts, int n, int argc, char **argv, int *i)
{
    const char *inline_value;
    for (int k = 0; k < n; k++) {
        const struct cli_opt *o = &opts[k];
        if (!match(argv[*i], o->flag, o->alias, &inline_value)) continue;
        const char *flag = argv[*i];
        char name[64];
        if (inline_value) {
            snprintf(name, sizeof name, "%.*s", (int)(inline_value - 1 - flag), flag);
            flag = name;
        }
        if (o->type == CLI_OPT_SET) {
            if (inline_value) {
                cli_error(cmd, "%s takes no value", flag);
                return -1;
            }
            return parse_one(cmd, o, flag, NULL) ? -1 : 1;
        }
        const char *v = take_value(cmd, inline_value, argc, argv, i);
        if (!v) return -1;
        return parse_one(cmd, o, flag, v) ? -1 : 1;
    }
    return 0;
}

int cli_opts_parse_gen(const char *cmd, struct gen_params *g, int argc, char **argv, int *i)
{
    const char *inline_value;
    if (!strcmp(argv[*i], "--n") || !strncmp(argv[*i], "--n=", 4)) { /* once the request's n; -n is --max-tokens */
        cli_error(cmd, "%s: say --completions N for completions per request (the request field n), or -n / "
                       "--max-tokens N for tokens to generate", argv[*i]);
        return -1;
    }
    for (int k = 0; k < genparam_count; k++) {
        const struct genparam *p = &genparam_table[k];
        if (!p->flag || !match(argv[*i], p->flag, p->flag_alias, &inline_value)) continue;
        const char *flag = argv[*i], *v = NULL;
        char name[64];
        if (inline_value) {
            snprintf(name, sizeof name, "%.*s", (int)(inline_value - 1 - flag), flag);
            flag = name;
        }
        if (p->type != GENPARAM_BOOL && !(v = take_value(cmd, inline_value, argc, argv, i))) return -1;
        if (p->type == GENPARAM_BOOL && inline_value) {
            cli_error(cmd, "%s takes no value", flag);
            return -1;
        }
        struct err e;
        if (genparam_set_flag(g, p, flag, v, &e)) {
            cli_error(cmd, "%s", e.msg);
            return -1;
        }
        return 1;
    }
    return 0;
}
