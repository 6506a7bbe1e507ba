#include "cli/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"run", cmd_run, "clear a backlog of prompts (resumable): run BACKLOG -m MODEL -o OUT.jsonl"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server: serve -m MODEL [--host H] [--port P] [--api-key K]"},
    {"sweep", cmd_sweep, "find the knee of your own backlog: sweep BACKLOG -m MODEL [--sample N] [run flags]"},
    {"report", cmd_report, "an HTML page about a run: report RECORD.json [-o report.html]"},
    {"bench", cmd_bench, "synthetic throughput benchmark over concurrency levels"},
    {"generate", cmd_generate, "complete one prompt: generate -m MODEL -p TEXT [-n N]"},
    {"info", cmd_info, "describe a GGUF model: info MODEL.gguf [--json]"},
    {"tokenize", cmd_tokenize, "text on stdin -> token ids: tokenize -m MODEL [--bos] [--special]"},
    {"detokenize", cmd_detokenize, "token ids on stdin -> text: detokenize -m MODEL"},
    {"synth", cmd_synth, "write a random-weight GGUF in a real model's shape: synth --shape NAME --type T -o FILE"},
    {"quantize", cmd_quantize, "convert a GGUF model to another type: quantize IN.gguf OUT.gguf TYPE"},
    {"perplexity", cmd_perplexity, "a model's perplexity on a text file: perplexity -m MODEL -f TEXT [--ctx N]"},
};

static void usage(FILE *out)
{
    fprintf(out, "nightshift %s — offline batch LLM inference\n\nusage: nightshift COMMAND [ARGS]\n\n", NS_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\nRun 'nightshift COMMAND --help' for a command's flags.\n");
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nightshift %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *cli_default_model(void)
{
    static char buf[4096];
    const char *env = getenv("NIGHTSHIFT_MODEL");
    if (env && *env) return env;
    const char *local = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(local, R_OK) == 0) return local;
    /* the repository the binary was built in: <repo>/build/nightshift or <repo>/build-asan/nightshift */
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 64);
    if (n > 0) {
        buf[n] = '\0';
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(buf, '/');
            if (slash) *slash = '\0';
        }
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, "/%s", local);
        if (access(buf, R_OK) == 0) return buf;
        buf[len] = '\0';
        snprintf(buf + len, sizeof buf - len, "/../shared/models/stories260K.gguf");
        if (access(buf, R_OK) == 0) return buf;
    }
    return "../shared/models/stories260K.gguf";
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("nightshift %s\n", NS_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "nightshift: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
