/* fuzz_flags — libFuzzer target for the size and number flags: util/sysmem's size parser (--kv-memory,
 * --headroom, --max-line-bytes) and cli/cli_opts's table-driven flags, generation parameters included.
 *
 * Input: byte 0 picks what runs (bit 0: the size parser on the rest; else the flag tables); the rest, split
 * at NUL bytes, is the argument list. Properties: a size that parses is at most 2^62, and a plain decimal
 * one is that number exactly (strtoull agrees); a table flag that parses leaves its value inside its range
 * (an integer in [lo, hi], a finite double above its bound, a choice index), and one that does not says why;
 * generation flags that pass genparam_check pass the sampler's own check too (what the flags accept, the
 * engine accepts).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "engine/sampler.h"
#include "util/sysmem.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static char last_message[512];

/* cli_error lives in main.c, which is not in the library: here it keeps the message. */
void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(last_message, sizeof last_message, "nightshift %s: ", cmd);
    vsnprintf(last_message + n, sizeof last_message - (size_t)n, fmt, ap);
    va_end(ap);
}

static void check_size(const char *s)
{
    uint64_t v = 0;
    struct err e;
    e.msg[0] = '\0';
    int rc = sysmem_parse_size(s, &v, &e);
    if (rc == 0) REQUIRE(v <= (1ull << 62));
    else REQUIRE(e.msg[0]);
    size_t n = strlen(s);
    if (n && n < 19 && strspn(s, "0123456789") == n) { /* plain decimal bytes, below 10^18 < 2^62 */
        REQUIRE(rc == 0 && v == strtoull(s, NULL, 10));
    }
}

struct dst {
    const char *name;
    int32_t count;
    size_t bytes;
    double interval, rate;
    int colour, verbose;
};

static void check_flags(int argc, char **argv)
{
    static const char *const colours[] = {"red", "green", "blue", NULL};
    struct dst d = {NULL, 7, 100, 1.0, 2.0, 0, 0};
    const struct cli_opt opts[] = {
        {"--name", "-N", CLI_OPT_STRING, &d.name, 0, 0, 0, NULL},
        {"--count", "-c", CLI_OPT_INT32, &d.count, -5, 1000, 0, NULL},
        {"--bytes", NULL, CLI_OPT_SIZE, &d.bytes, 16, 4294967296.0, 0, NULL},
        {"--interval", NULL, CLI_OPT_DOUBLE, &d.interval, 0, 0, 0, NULL},
        {"--rate", NULL, CLI_OPT_DOUBLE, &d.rate, 0, 0, 1, NULL},
        {"--colour", NULL, CLI_OPT_CHOICE, &d.colour, 0, 0, 0, colours},
        {"--verbose", "-v", CLI_OPT_SET, &d.verbose, 1, 0, 0, NULL},
    };
    struct gen_params g = genparam_defaults();
    for (int i = 0; i < argc; i++) {
        last_message[0] = '\0';
        int r = cli_opts_parse_gen("fuzz", &g, argc, argv, &i);
        if (r == 0) r = cli_opts_parse("fuzz", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r < 0) REQUIRE(last_message[0]);
        REQUIRE(i < argc);
    }
    REQUIRE(d.count >= -5 && d.count <= 1000);
    REQUIRE(d.bytes >= 16 && d.bytes <= 4294967296ull);
    REQUIRE(isfinite(d.interval) && d.interval >= 0 && isfinite(d.rate) && d.rate > 0);
    REQUIRE(d.colour >= 0 && d.colour < 3 && (d.verbose == 0 || d.verbose == 1));
    struct err e;
    if (genparam_check(&g, &e) == 0) {
        struct sampler_params sp;
        genparam_to_sampler(&g, 1, &sp);
        REQUIRE(sampler_check_params(&sp, INT32_MAX, &e) == 0);
        REQUIRE(g.max_tokens >= 1 && g.n >= 1 && g.n_stop <= GENPARAM_MAX_STOP);
    }
    genparam_free(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    char *text = malloc(size);
    REQUIRE(text);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (data[0] & 1) {
        check_size(text);
    } else {
        char *argv[64];
        int argc = 0;
        for (char *p = text; argc < 64 && p < text + size;) {
            argv[argc++] = p;
            p += strlen(p) + 1;
        }
        check_flags(argc, argv);
    }
    free(text);
    return 0;
}
