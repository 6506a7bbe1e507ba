/* cli_opts — see cli_opts.h. */
#include "cli/cli_opts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "jobs/input.h"

int cli_opts_take(const char *cmd, const char *const *names, int n, int takes_value, int argc, char **argv, int *i,
                  char *name, size_t cap, const char **value)
{
    const char *arg = argv[*i], *inline_value = NULL;
    int hit = 0;
    for (int k = 0; k < n && !hit; k++) {
        const char *f = names[k];
        if (!f) continue;
        size_t len = strlen(f);
        if (strncmp(arg, f, len)) continue;
        if (arg[len] == '\0') hit = 1;
        else if (arg[len] == '=' && f[1] == '-') hit = 1, inline_value = arg + len + 1;
    }
    if (!hit) return 0;
    snprintf(name, cap, "%.*s", inline_value ? (int)(inline_value - 1 - arg) : (int)strlen(arg), arg);
    if (!takes_value) {
        if (inline_value) {
            cli_error(cmd, "%s takes no value", name);
            return -1;
        }
        return 1;
    }
    if (!inline_value && *i + 1 >= argc) {
        cli_error(cmd, "%s needs a value", name);
        return -1;
    }
    *value = inline_value ? inline_value : argv[++*i];
    return 1;
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

/* "red, green or blue" */
static void choice_list(const char *const *choices, const char *sep, const char *last, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; choices[k] && off < cap; k++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", k ? (choices[k + 1] ? sep : last) : "", choices[k]);
}

static int parse_double(const char *cmd, const struct cli_opt *o, const char *flag, const char *v)
{
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

static int parse_one(const char *cmd, const struct cli_opt *o, const char *flag, const char *v)
{
    long long x;
    char list[256];
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
    case CLI_OPT_DOUBLE: return parse_double(cmd, o, flag, v);
    case CLI_OPT_CHOICE:
        for (int k = 0; o->choices[k]; k++)
            if (!strcmp(v, o->choices[k])) {
                *(int *)o->dst = k;
                return 0;
            }
        choice_list(o->choices, ", ", " or ", list, sizeof list);
        cli_error(cmd, "%s %s: expected %s", flag, v, list);
        return -1;
    case CLI_OPT_FORMAT:
        if (!input_format_parse(v, (enum input_format *)o->dst)) return 0;
        input_format_list(list, sizeof list);
        cli_error(cmd, "%s %s: expected %s", flag, v, list);
        return -1;
    }
    return -1;
}

int cli_opts_parse(const char *cmd, const struct cli_opt *opts, int n, int argc, char **argv, int *i)
{
    for (int k = 0; k < n; k++) {
        const struct cli_opt *o = &opts[k];
        if (!o->flag) continue;
        const char *names[] = {o->flag, o->alias, o->old}, *v = NULL;
        char flag[64];
        int r = cli_opts_take(cmd, names, 3, o->type != CLI_OPT_SET, argc, argv, i, flag, sizeof flag, &v);
        if (r) return r < 0 || parse_one(cmd, o, flag, v) ? -1 : 1;
    }
    return 0;
}

/* "default X" for o's value now, or NULL (a flag, no value, or a help text that says its default itself). */
static const char *usage_default(const struct cli_opt *o, char *buf, size_t cap)
{
    if (strstr(o->help, "default")) return NULL;
    switch (o->type) {
    case CLI_OPT_STRING:
        if (!*(const char *const *)o->dst) return NULL;
        snprintf(buf, cap, "default %s", *(const char *const *)o->dst);
        return buf;
    case CLI_OPT_INT32: snprintf(buf, cap, "default %d", (int)*(const int32_t *)o->dst); return buf;
    case CLI_OPT_SIZE: snprintf(buf, cap, "default %zu", *(const size_t *)o->dst); return buf;
    case CLI_OPT_U64: snprintf(buf, cap, "default %llu", (unsigned long long)*(const uint64_t *)o->dst); return buf;
    case CLI_OPT_DOUBLE: snprintf(buf, cap, "default %g", *(const double *)o->dst); return buf;
    case CLI_OPT_CHOICE: snprintf(buf, cap, "default %s", o->choices[*(const int *)o->dst]); return buf;
    case CLI_OPT_FORMAT:
        snprintf(buf, cap, "default %s", input_format_name(*(const enum input_format *)o->dst));
        return buf;
    default: return NULL;
    }
}

void cli_opts_usage(FILE *out, const struct cli_opt *opts, int n)
{
    static const char *const metavar[] = {"", "S", "N", "N", "N", "X", NULL, NULL};
    for (int k = 0; k < n; k++) {
        const struct cli_opt *o = &opts[k];
        if (!o->help) continue;
        if (!o->flag) {
            fprintf(out, "%s\n", o->help);
            continue;
        }
        char mv[128], left[192], def[160];
        if (o->metavar) snprintf(mv, sizeof mv, "%s", o->metavar);
        else if (o->type == CLI_OPT_CHOICE) choice_list(o->choices, "|", "|", mv, sizeof mv);
        else if (o->type == CLI_OPT_FORMAT)
            for (int f = 0, off = 0; f < INPUT_FORMAT_COUNT; f++)
                off += snprintf(mv + off, sizeof mv - (size_t)off, "%s%s", f ? "|" : "", input_format_name(f));
        else snprintf(mv, sizeof mv, "%s", metavar[o->type]);
        snprintf(left, sizeof left, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->flag,
                 mv[0] ? " " : "", mv);
        genparam_usage_line(out, left, o->help, usage_default(o, def, sizeof def), o->old);
    }
}

int cli_opts_parse_gen_only(const char *cmd, const char *const *only, struct gen_params *g, int argc, char **argv,
                            int *i)
{
    if (!strcmp(argv[*i], "--n") || !strncmp(argv[*i], "--n=", 4)) { /* once the request's n; -n is --max-tokens */
        cli_error(cmd, "%s: say --completions N for completions per request (the request field n), or -n / "
                       "--max-tokens N for tokens to generate", argv[*i]);
        return -1;
    }
    for (int k = 0; k < genparam_count; k++) {
        const struct genparam *p = &genparam_table[k];
        if (!p->flag || !genparam_in(p, only)) continue;
        const char *names[] = {p->flag, p->flag_alias}, *v = NULL;
        char flag[64];
        int r = cli_opts_take(cmd, names, 2, p->type != GENPARAM_BOOL, argc, argv, i, flag, sizeof flag, &v);
        if (r < 0) return -1;
        if (!r) continue;
        struct err e;
        if (genparam_set_flag(g, p, flag, v, &e)) {
            cli_error(cmd, "%s", e.msg);
            return -1;
        }
        return 1;
    }
    return 0;
}

int cli_opts_parse_gen(const char *cmd, struct gen_params *g, int argc, char **argv, int *i)
{
    return cli_opts_parse_gen_only(cmd, NULL, g, argc, argv, i);
}
