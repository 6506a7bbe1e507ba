/* test_cli_opts — table-driven flag parsing: both flag forms, aliases, ranges, choices, missing values, and
 * the generation-parameter flags. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/engine_flags.h"
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
        {"--name", "-N", CLI_OPT_STRING, &d->name, 0, 0, 0, NULL},
        {"--count", NULL, CLI_OPT_INT32, &d->count, 1, 10, 0, NULL},
        {"--bytes", NULL, CLI_OPT_SIZE, &d->bytes, 16, 1 << 20, 0, NULL},
        {"--interval", NULL, CLI_OPT_DOUBLE, &d->interval, 0, 0, 1, NULL},
        {"--colour", NULL, CLI_OPT_CHOICE, &d->colour, 0, 0, 0, colours},
        {"--verbose", "-v", CLI_OPT_SET, &d->verbose, 1, 0, 0, NULL},
        {"--id", NULL, CLI_OPT_U64, &d->id, 0, 0, 0, NULL},
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
    CHECK_STR(last_msg, "--max-seqs expects an integer in [1, 4096], got '0'");
    char *b2[] = {"x", "--no-prefix-cache=1", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b2, &i), -1);
    char *b3[] = {"x", "--max-seqsx=2", NULL};
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b3, &i), 0);
    char *b4[] = {"x", "-t=2", NULL}; /* short flags take no inline value */
    CHECK_EQ_INT(engine_flags_parse(&p, "test", 2, b4, &i), 0);
    CHECK_EQ_INT(p.max_seqs, 8);
    CHECK_EQ_INT(i, 1);
}

int main(void)
{
    RUN(both_forms_and_aliases);
    RUN(bad_values);
    RUN(u64_values);
    RUN(messages_name_the_flag);
    RUN(generation_flags);
    RUN(engine_flags_both_forms);
    return test_summary();
}
