/* nightshift report — one self-contained HTML page about a run, from its record (jobs/report).
 *
 *   nightshift report RECORD.json [-o report.html]
 *
 * The default output is the record's path with ".json" replaced by ".html" (RECORD.json.html when it does
 * not end in ".json"). The page is written to a temporary file and renamed, so a half-written page is
 * never left behind.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "jobs/report.h"

static void report_usage(FILE *out, const struct cli_opt *opts, int n)
{
    fprintf(out, "usage: nightshift report RECORD.json [-o report.html]\n"
                 "\n"
                 "Writes one self-contained HTML page (inline SVG charts, no scripts) about a finished or interrupted\n"
                 "run: throughput, KV use and preemptions over time, latency and token histograms, prefix-cache hit\n"
                 "rate, failures by reason and sample outputs beside their prompts.\n"
                 "\n");
    cli_opts_usage(out, opts, n);
}

int cmd_report(int argc, char **argv)
{
    const char *record = NULL, *output = NULL;
    const struct cli_opt opts[] = {
        {.flag = "--output", .alias = "-o", .type = CLI_OPT_STRING, .dst = &output, .metavar = "PATH",
         .help = "the page (default: the record's path with .html for .json)"},
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            report_usage(stdout, opts, 1);
            return 0;
        }
        int r = cli_opts_parse("report", opts, 1, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if ((argv[i][0] == '-' && argv[i][1]) || record) {
            cli_error("report", record ? "one record at a time (got '%s')" : "unknown option %s", argv[i]);
            return 2;
        }
        record = argv[i];
    }
    if (!record) {
        cli_error("report", "no record given (usage: nightshift report RECORD.json [-o report.html])");
        return 2;
    }
    char path[4096], tmp[4200];
    size_t n = strlen(record);
    if (!output) {
        int json = n > 5 && !strcmp(record + n - 5, ".json");
        snprintf(path, sizeof path, "%.*s.html", (int)(json ? n - 5 : n), record);
        output = path;
    }
    struct report_data d;
    struct err e;
    if (report_load(record, &d, &e)) {
        cli_error("report", "%s", e.msg);
        report_free(&d);
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", output);
    FILE *f = fopen(tmp, "w");
    int bad = !f || report_write_html(f, &d);
    if (f && fclose(f)) bad = 1;
    report_free(&d);
    if (bad || rename(tmp, output)) {
        cli_error("report", "cannot write %s: %s", output, strerror(errno));
        remove(tmp);
        return 1;
    }
    printf("nightshift report: %s\n", output);
    return 0;
}
