/* test_cli_opts — table-driven flag parsing: both flag forms, aliases, ranges, choices, missing values, the
 * generation-parameter flags, and every row of the engine-flag table (runtime/runparam): parsed, range-checked
 * with a message naming the flag, in --help, its alias taken; --help pages made from the same tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/engine_flags.h"
#include "jobs/input.h"
#include "test.h"

static char last_msg[512]; /* the last message cli_error printed */

/* cli_error lives in main.c, which is not in the library: messages go to stderr here too, and are kept in
 * last_msg for the checks. */
void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "nightshift %s: %s\n", cmd, last_msg);
}

static const char *const colours[] = {"red", "green", "blue", NULL};

struct dst {
    const char *name;
    int32_t count;
    size_t bytes;
    uint64_t id;
    double interval;
    int colour, verbose;
};

/* Parses argv (NULL-terminated) with the test table; returns the count of consumed flags, or -1. */
static int parse(struct dst *d, struct gen_params *g, char **argv)
{
    const struct cli_opt opts[] = {
        {.flag = "--name", .alias = "-N", .type = CLI_OPT_STRING, .dst = &d->name},
        {.flag = "--count", .type = CLI_OPT_INT32, .dst = &d->count, .lo = 1, .hi = 10},
        {.flag = "--bytes", .type = CLI_OPT_SIZE, .dst = &d->bytes, .lo = 16, .hi = 1 << 20},
        {.flag = "--interval", .type = CLI_OPT_DOUBLE, .dst = &d->interval, .lo_open = 1},
        {.flag = "--colour", .type = CLI_OPT_CHOICE, .dst = &d->colour, .choices = colours},
        {.flag = "--verbose", .alias = "-v", .type = CLI_OPT_SET, .dst = &d->verbose, .lo = 1},
        {.flag = "--id", .type = CLI_OPT_U64, .dst = &d->id},
    };
    int argc = 0, n = 0;
    while (argv[argc]) argc++;
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse("test", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (!r && g) r = cli_opts_parse_gen("test", g, argc, argv, &i);
        if (r <= 0) return -1;
        n++;
    }
    return n;
}

TEST(both_forms_and_aliases)
{
    struct dst d = {0};
    char *argv[] = {"x", "--name", "a", "-N", "b", "--count=7", "--bytes", "64", "--interval=0.5", "--colour", "blue",
                    "-v", NULL};
    CHECK_EQ_INT(parse(&d, NULL, argv), 7);
    CHECK_STR(d.name, "b");
    CHECK_EQ_INT(d.count, 7);
    CHECK_EQ_INT(d.bytes, 64);
    CHECK(d.interval == 0.5);
    CHECK_EQ_INT(d.colour, 2);
    CHECK_EQ_INT(d.verbose, 1);
}

TEST(bad_values)
{
    struct dst d = {0};
    char *a1[] = {"x", "--count", "11", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a1), -1);
    char *a2[] = {"x", "--count", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a2), -1);
    char *a3[] = {"x", "--interval", "0", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a3), -1);
    char *a4[] = {"x", "--colour=pink", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a4), -1);
    char *a5[] = {"x", "--verbose=1", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a5), -1);
    char *a6[] = {"x", "--countx", "1", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a6), -1);
    char *a7[] = {"x", "-N=a", NULL}; /* short flags take no inline value */
    CHECK_EQ_INT(parse(&d, NULL, a7), -1);
    CHECK_EQ_INT(d.count, 0);
}

TEST(u64_values)
{
    struct dst d = {0};
    char *a1[] = {"x", "--id", "18446744073709551615", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a1), 1);
    CHECK(d.id == UINT64_MAX);
    char *a2[] = {"x", "--id=0", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a2), 1);
    CHECK(d.id == 0);
    d.id = 9;
    const char *bad[] = {"-1", "18446744073709551616", "12x", ""};
    for (int k = 0; k < 4; k++) {
        char *a[] = {"x", "--id", (char *)bad[k], NULL};
        CHECK_EQ_INT(parse(&d, NULL, a), -1);
        CHECK(strstr(last_msg, "--id expects a non-negative integer") != NULL);
    }
    CHECK(d.id == 9);
}

/* Messages name the flag as typed, without "=VALUE". */
TEST(messages_name_the_flag)
{
    struct dst d = {0};
    char *a1[] = {"x", "--count=11", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a1), -1);
    CHECK_STR(last_msg, "--count expects an integer in [1, 10], got '11'");
    char *a2[] = {"x", "--interval=-1", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a2), -1);
    CHECK_STR(last_msg, "--interval must be > 0");
    char *a3[] = {"x", "--verbose=yes", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a3), -1);
    CHECK_STR(last_msg, "--verbose takes no value");
    char *a4[] = {"x", "-N", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a4), -1);
    CHECK_STR(last_msg, "-N needs a value");
    char *a5[] = {"x", "--colour", "pink", NULL};
    CHECK_EQ_INT(parse(&d, NULL, a5), -1);
    CHECK_STR(last_msg, "--colour pink: expected red, green or blue");
}

TEST(generation_flags)
{
    struct dst d = {0};
    struct gen_params g = genparam_defaults();
    char *argv[] = {"x", "--temp", "0.5", "--top-k=3", "-n", "9", "--stop", "A", "--stop=B", "--ignore-eos", "--seed",
                    "5", "--name", "m", NULL};
    CHECK_EQ_INT(parse(&d, &g, argv), 8);
    CHECK(g.temperature == 0.5f);
    CHECK_EQ_INT(g.top_k, 3);
    CHECK_EQ_INT(g.max_tokens, 9);
    CHECK_EQ_INT(g.n_stop, 2);
    CHECK_STR(g.stop[1], "B");
    CHECK_EQ_INT(g.ignore_eos, 1);
    CHECK(g.has_seed && g.seed == 5);
    genparam_free(&g);
    g = genparam_defaults();
    char *bad[] = {"x", "--top-p", "x", NULL};
    CHECK_EQ_INT(parse(&d, &g, bad), -1);
    char *bad2[] = {"x", "--ignore-eos=1", NULL};
    CHECK_EQ_INT(parse(&d, &g, bad2), -1);
    genparam_free(&g);
}

/* The engine flags take both forms too. */
TEST(engine_flags_both_forms)
{
    struct runtime_params p = runtime_default_params();
    char *argv[] = {"x", "--max-seqs=8", "--kv-block", "32", "--kv-type=q8_0", "--no-prefix-cache", "-t", "3",
                    "--kv-memory=64M", NULL};
    int argc = 9, n = 0;
    for (int i = 1; i < argc; i++) n += engine_flags_parse(&p, "test", argc, argv, &i) == 1;
    CHECK_EQ_INT(n, 6);
    CHECK_EQ_INT(p.max_seqs, 8);
    CHECK_EQ_INT(p.kv_block, 32);
    CHECK_EQ_INT(p.kv_type, KV_TYPE_Q8_0);
    CHECK_EQ_INT(p.prefix_cache, 0);
    CHECK_EQ_INT(p.threads, 3);
    CHECK(p.kv_memory == 64u << 20);
    int i = 1;
    char *b1[] = {"x", "--max-seqs=0", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b1, &i), -1);
    CHECK_STR(last_msg, "--max-seqs expects auto or an integer in [1, 4096], got '0'");
    char *b2[] = {"x", "--no-prefix-cache=1", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b2, &i), -1);
    char *b3[] = {"x", "--max-seqsx=2", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b3, &i), 0);
    char *b4[] = {"x", "-t=2", NULL}; /* short flags take no inline value */
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b4, &i), 0);
    CHECK_EQ_INT(p.max_seqs, 8);
    CHECK_EQ_INT(i, 1);
}

/* The help text a usage function prints, into buf (NUL-terminated). */
#define HELP_OF(buf, call)                                                                                 \
    do {                                                                                                  \
        FILE *f_ = fmemopen(buf, sizeof buf, "w");                                                        \
        CHECK(f_ != NULL);                                                                                \
        call;                                                                                             \
        fclose(f_);                                                                                       \
        buf[sizeof buf - 1] = '\0';                                                                       \
    } while (0)

/* A value the row takes, and one it refuses (out of range or not one of its names). */
static void row_values(const struct runparam *r, char *good, char *bad, size_t cap)
{
    int32_t lo, hi;
    runparam_range(r, &lo, &hi);
    switch (r->type) {
    case RUNPARAM_INT:
        snprintf(good, cap, "%d", (int)(hi > lo ? hi : lo));
        snprintf(bad, cap, "%lld", (long long)hi + 1);
        break;
    case RUNPARAM_SIZE: snprintf(good, cap, "64M"), snprintf(bad, cap, "lots"); break;
    case RUNPARAM_BACKEND: snprintf(good, cap, "cpu"), snprintf(bad, cap, "nope"); break;
    case RUNPARAM_NAMED: snprintf(good, cap, "%s", r->name_of(r->name_of(1) ? 1 : 0)), snprintf(bad, cap, "q4"); break;
    default: good[0] = bad[0] = '\0'; break;
    }
}

TEST(runparam_table_is_sound)
{
    struct err e;
    CHECK_MSG(runparam_check_table(&e) == 0, "%s", e.msg);
    /* the defaults are the engine's where a flag is an engine field (max_batch_tokens: the backend's, 0) */
    struct runtime_params p = runtime_default_params();
    struct engine_params ep = engine_default_params();
    CHECK_EQ_INT(p.kv_block, ep.kv_block);
    CHECK_EQ_INT(p.kv_type, ep.kv_type);
    CHECK_EQ_INT(p.max_seqs, RUNTIME_MAX_SEQS_AUTO); /* auto: the runtime picks it (runtime_open_backend) */
    CHECK_EQ_INT(p.gpu_weights, BACKEND_WEIGHTS_AUTO);
    CHECK_EQ_INT(p.lookup, ep.lookup);
    CHECK_EQ_INT(p.prefix_cache, 1);
    CHECK_EQ_INT(p.lookup_adaptive, 1);
    CHECK_EQ_INT(p.max_batch_tokens, 0);
    CHECK(p.kv_memory == RUNTIME_AUTO && p.headroom == RUNTIME_AUTO && !p.backend && p.threads == 0);
    /* the copy into the engine's params walks the table; 0 max_batch_tokens keeps the engine's value */
    p.kv_block = 32, p.max_seqs = 7, p.lookup = 3, p.prefix_cache = 0, p.lookup_adaptive = 0, p.debug_checks = 1;
    p.kv_type = KV_TYPE_Q8_0;
    ep.max_batch_tokens = 99;
    runparam_to_engine(&p, &ep);
    CHECK(ep.kv_block == 32 && ep.max_seqs == 7 && ep.lookup == 3 && !ep.prefix_cache && !ep.lookup_adaptive);
    CHECK(ep.debug_checks == 1 && ep.kv_type == KV_TYPE_Q8_0 && ep.max_batch_tokens == 99);
    p.max_batch_tokens = 300;
    runparam_to_engine(&p, &ep);
    CHECK_EQ_INT(ep.max_batch_tokens, 300);
}

/* Every row: its good value parsed in both forms and by its alias, its bad value refused naming the flag as
 * typed, its line in --help. */
TEST(runparam_every_row)
{
    static char help[16384];
    struct runtime_params d = runtime_default_params();
    HELP_OF(help, engine_flags_usage(f_, &d, NULL));
    for (int k = 0; k < runparam_count; k++) {
        const struct runparam *r = &runparam_table[k];
        if (!r->flag) continue;
        CHECK_MSG(strstr(help, r->flag) != NULL, "%s not in --help", r->flag);
        if (r->alias) CHECK_MSG(strstr(help, r->alias) != NULL, "%s not in --help", r->alias);
        const char *names[] = {r->flag, r->alias};
        for (int n = 0; n < 2 && names[n]; n++) {
            char good[64], bad[64], arg[96];
            row_values(r, good, bad, sizeof good);
            struct runtime_params p = runtime_default_params();
            int i = 1;
            if (r->type == RUNPARAM_OFF) {
                char *a1[] = {"x", (char *)names[n], NULL};
                CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, a1, &i), 1);
                CHECK_MSG(*(int *)((char *)&p + r->offset) == 0, "%s did not clear %s", names[n], r->name);
                snprintf(arg, sizeof arg, "%s=1", names[n]);
                char *a2[] = {"x", arg, NULL};
                i = 1;
                CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, a2, &i), names[n][1] == '-' ? -1 : 0);
                continue;
            }
            char *a1[] = {"x", (char *)names[n], good, NULL};
            CHECK_MSG(engine_flags_parse(&p, "test", 3, a1, &i) == 1 && i == 2, "%s %s", names[n], good);
            if (names[n][1] == '-') { /* long names: --flag=VALUE too */
                snprintf(arg, sizeof arg, "%s=%s", names[n], good);
                char *a2[] = {"x", arg, NULL};
                i = 1;
                CHECK_MSG(engine_flags_parse(&p, "test", 2, a2, &i) == 1, "%s", arg);
            }
            struct runtime_params before = p;
            char *a3[] = {"x", (char *)names[n], bad, NULL};
            i = 1;
            CHECK_MSG(engine_flags_parse(&p, "test", 3, a3, &i) == -1, "%s %s was taken", names[n], bad);
            CHECK_MSG(!strncmp(last_msg, names[n], strlen(names[n])), "'%s' does not name %s", last_msg, names[n]);
            CHECK_MSG(!memcmp(&before, &p, sizeof p), "%s %s changed the params", names[n], bad);
        }
    }
}

TEST(runparam_ranges_and_record)
{
    struct runtime_params p = runtime_default_params();
    int i = 1;
    char *b1[] = {"x", "--kv-block", "24", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 3, b1, &i), -1);
    CHECK_STR(last_msg, "--kv-block 24: must be a power of two");
    i = 1;
    char *b2[] = {"x", "--kv-type=q4", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b2, &i), -1);
    CHECK_STR(last_msg, "--kv-type q4: expected f32, f16, q8_0 or fp8");
    i = 1;
    char *b3[] = {"x", "--batch", "65537", NULL}; /* the old spelling, the same range */
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 3, b3, &i), -1);
    CHECK_STR(last_msg, "--batch expects an integer in [1, 65536], got '65537'");
    /* a command that takes only some rows does not take the others */
    static const char *const only[] = {"threads", NULL};
    i = 1;
    char *b4[] = {"x", "--max-seqs", "3", NULL};
    CHECK_EQ_INT(engine_flags_parse_only(&p, "test", only, 3, b4, &i), 0);
    long lo, hi;
    engine_flags_range("max_seqs", &lo, &hi);
    CHECK(lo == 1 && hi == 4096);
    /* the record's keys and values, as before the table */
    json_t *j = engine_flags_json(&p);
    char *txt = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
    CHECK_STR(txt, "{\"backend\":\"auto\",\"device\":0,\"gpu_weights\":\"auto\",\"threads\":0,\"kv_memory\":\"auto\","
                   "\"headroom\":\"default\",\"kv_type\":\"f16\",\"kv_block\":16,\"max_batch_tokens\":0,"
                   "\"max_seqs\":\"auto\",\"prefix_cache\":true,\"lookup\":8,\"lookup_adaptive\":true}");
    free(txt);
    json_decref(j);
}

static const char *weights_name(int32_t v)
{
    static const char *const names[] = {"auto", "bf16", "fp8"};
    return v >= 0 && v < 3 ? names[v] : NULL;
}

/* A new flag is one row: a NAMED row (what --gpu-weights auto|bf16|fp8 will be) over an int field parses its
 * names, refuses others listing them, shows them in --help and records the name. */
TEST(runparam_named_row)
{
    const struct runparam r = {.name = "device", .flag = "--gpu-weights", .metavar = "W", .type = RUNPARAM_NAMED,
                               .offset = offsetof(struct runtime_params, device), .name_of = weights_name,
                               .help = "weights on the GPU:"};
    struct runtime_params p = runtime_default_params();
    struct err e;
    CHECK_EQ_INT(runparam_set_flag(&p, &r, "--gpu-weights", "fp8", &e), 0);
    CHECK_EQ_INT(p.device, 2);
    CHECK_EQ_INT(runparam_set_flag(&p, &r, "--gpu-weights", "int4", &e), -1);
    CHECK_STR(e.msg, "--gpu-weights int4: expected auto, bf16 or fp8");
    p.kv_type = KV_TYPE_F32;
    const struct runparam *kv = NULL;
    for (int k = 0; k < runparam_count; k++)
        if (!strcmp(runparam_table[k].name, "kv_type")) kv = &runparam_table[k];
    CHECK(kv != NULL);
    CHECK_EQ_INT(runparam_set_flag(&p, kv, "--kv-type", "Q8_0", &e), 0); /* names match ignoring case, as before */
    CHECK_EQ_INT(p.kv_type, KV_TYPE_Q8_0);
}

/* A row with the AUTO_ZERO flag (what --max-seqs auto will be) takes the word auto as 0 and records it so. */
TEST(runparam_auto_zero)
{
    struct runparam r = runparam_table[0];
    for (int k = 0; k < runparam_count; k++)
        if (!strcmp(runparam_table[k].name, "max_seqs")) r = runparam_table[k];
    r.flags |= RUNPARAM_AUTO_ZERO;
    r.auto_word = "auto";
    struct runtime_params p = runtime_default_params();
    struct err e;
    CHECK_EQ_INT(runparam_set_flag(&p, &r, "--max-seqs", "auto", &e), 0);
    CHECK_EQ_INT(p.max_seqs, 0);
    CHECK_EQ_INT(runparam_set_flag(&p, &r, "--max-seqs", "many", &e), -1);
    CHECK_STR(e.msg, "--max-seqs expects auto or an integer in [1, 4096], got 'many'");
    CHECK_EQ_INT(runparam_set_flag(&p, &r, "--max-seqs", "12", &e), 0);
    CHECK_EQ_INT(p.max_seqs, 12);
}

/* Every generation flag is in --help with the defaults given (generate's are not the table's), and a
 * command that takes only some rows refuses the rest. */
TEST(genparam_help_and_subsets)
{
    static char help[16384];
    struct gen_params d = genparam_defaults();
    d.max_tokens = 128, d.temperature = 0, d.has_seed = 1, d.seed = 0;
    HELP_OF(help, genparam_usage(f_, &d, NULL));
    for (int k = 0; k < genparam_count; k++)
        if (genparam_table[k].flag) CHECK_MSG(strstr(help, genparam_table[k].flag), "%s", genparam_table[k].flag);
    CHECK(strstr(help, "(default 128)") && !strstr(help, "default 256"));
    CHECK(strstr(help, "0 = greedy (default 0; also --temp)") && !strstr(help, "derived from"));
    static const char *const only[] = {"temperature", NULL};
    struct gen_params g = genparam_defaults();
    int i = 1;
    char *a1[] = {"x", "--temp", "0.5", NULL};
    CHECK_EQ_INT(cli_opts_parse_gen_only("test", only, &g, 3, a1, &i), 1);
    CHECK(g.temperature == 0.5f);
    i = 1;
    char *a2[] = {"x", "--stop", "A", NULL};
    CHECK_EQ_INT(cli_opts_parse_gen_only("test", only, &g, 3, a2, &i), 0);
    genparam_free(&g);
}

/* A command's own table: the older spelling is taken, the help page shows every shown row and its default,
 * and input formats are input.h's names. */
TEST(own_table_help_old_and_formats)
{
    const char *out = "sweep";
    enum input_format fmt = INPUT_FORMAT_AUTO;
    int32_t n = 5;
    const struct cli_opt opts[] = {
        {.help = "Heading:"},
        {.flag = "--output", .alias = "-o", .old = "--out", .type = CLI_OPT_STRING, .dst = &out,
         .metavar = "PREFIX", .help = "files' prefix"},
        {.flag = "--format", .type = CLI_OPT_FORMAT, .dst = &fmt, .help = "format"},
        {.flag = "--n", .type = CLI_OPT_INT32, .dst = &n, .lo = 1, .hi = 9, .help = "count"},
        {.flag = "--secret", .type = CLI_OPT_SET, .dst = &n},
    };
    static char help[4096];
    HELP_OF(help, cli_opts_usage(f_, opts, 5));
    const char *want = "Heading:\n  -o, --output PREFIX       files' prefix (default sweep; also --out)\n";
    CHECK_MSG(strstr(help, want), "%.200s", help);
    CHECK_MSG(strstr(help, "--format auto|openai|jsonl|text\n") && strstr(help, "format (default auto)"), "%.99s",
              help);
    CHECK(strstr(help, "--n N") && strstr(help, "count (default 5)") && !strstr(help, "--secret"));
    const char *spell[] = {"--output", "-o", "--out"};
    for (int k = 0; k < 3; k++) {
        char *a[] = {"x", (char *)spell[k], "p", NULL};
        int i = 1;
        out = NULL;
        CHECK_EQ_INT(cli_opts_parse("test", opts, 5, 3, a, &i), 1);
        CHECK_STR(out, "p");
    }
    char *a1[] = {"x", "--out=q", NULL};
    int i = 1;
    CHECK_EQ_INT(cli_opts_parse("test", opts, 5, 2, a1, &i), 1);
    CHECK_STR(out, "q");
    char *a2[] = {"x", "--format", "text", NULL};
    i = 1;
    CHECK_EQ_INT(cli_opts_parse("test", opts, 5, 3, a2, &i), 1);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_TEXT);
    char *a3[] = {"x", "--format=csv", NULL};
    i = 1;
    CHECK_EQ_INT(cli_opts_parse("test", opts, 5, 2, a3, &i), -1);
    CHECK_STR(last_msg, "--format csv: expected auto, openai, jsonl or text");
    for (int f = 0; f < INPUT_FORMAT_COUNT; f++) { /* names and parse agree, in the enum's order */
        enum input_format back;
        CHECK(input_format_parse(input_format_name((enum input_format)f), &back) == 0 && (int)back == f);
    }
}

int main(void)
{
    RUN(both_forms_and_aliases);
    RUN(bad_values);
    RUN(u64_values);
    RUN(messages_name_the_flag);
    RUN(generation_flags);
    RUN(engine_flags_both_forms);
    RUN(runparam_table_is_sound);
    RUN(runparam_every_row);
    RUN(runparam_ranges_and_record);
    RUN(runparam_named_row);
    RUN(runparam_auto_zero);
    RUN(genparam_help_and_subsets);
    RUN(own_table_help_old_and_formats);
    return test_summary();
}
