/* nightshift serve — an OpenAI-compatible HTTP server on the same runtime and engine as `run`.
 *
 *   nightshift serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [flags]
 *
 * It listens first (answering 503 "loading" while the model loads), then serves (server/http, server/server).
 * SIGTERM or SIGINT drains: admission stops (503), requests in flight finish until --drain-timeout, the rest
 * are cancelled, and the command exits 0. A second signal during the drain kills at once.
 *
 * The Files and Batches API keeps its state under --data-dir (server/files, server/batches): a batch runs
 * as `nightshift run --order input` would with the same model and generation flags, at batch priority, and
 * survives a restart on the same data directory (it resumes from its store). On SIGTERM the running batch
 * stops first (left in progress for the next start), then the interactive requests drain.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "server/batches.h"
#include "server/files.h"
#include "server/http.h"
#include "server/server.h"
#include "util/log.h"
#include "util/sha256.h"

/* The page: what serve does, its own flags (opts, with the defaults they hold now), then the engine flags and
 * the generation defaults from their tables. */
static void serve_usage(FILE *out, const struct cli_opt *opts, int n, const struct runtime_params *rp,
                        const struct gen_params *gen)
{
    fprintf(out,
            "usage: nightshift serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [options]\n"
            "\n"
            "OpenAI-compatible server on the engine that `run` uses: POST /v1/completions,\n"
            "POST /v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models, /health, "
            "/metrics.\n"
            "A request is admitted only when it fits what the KV pool and the queue can take within --max-wait;\n"
            "otherwise 429 with Retry-After from the current drain rate (503 while loading or draining).\n"
            "SIGTERM drains: no new requests, in-flight ones finish (up to --drain-timeout), exit 0.\n"
            "\n");
    cli_opts_usage(out, opts, n);
    fprintf(out, "Engine:\n");
    engine_flags_usage(out, rp, NULL);
    fprintf(out, "Generation defaults (a request's own fields override them):\n");
    genparam_usage(out, gen, NULL);
}

struct serve_args {
    struct runtime_params rp;
    struct server_params sp;
    struct http_params hp;
    struct gen_params defaults;
    const char *chat_name, *model_name;
    jinja_template *chat_jinja; /* the model's own chat template (owned; NULL: by family) */
    int no_special, quiet, verbose, no_batches;
    const char *data_dir;
    size_t max_upload;
    int32_t max_files, max_batches;
    struct job_model jm;     /* the batches' model (filled once the runtime is open) */
    struct job_config jc;    /* the batches' settings */
    char gguf_name[256];
    char files_dir[4200], batches_dir[4200];
    int32_t port, max_queue, max_connections, idle_timeout;
    size_t max_queue_tokens, max_body, max_header;
    double drain_timeout;
    char name_buf[256];
};

static int serve_parse(int argc, char **argv, struct serve_args *A)
{
    char chat_help[256];
    snprintf(chat_help, sizeof chat_help, "%s (default: from the model)", chat_family_list());
    const struct cli_opt opts[] = {
        {.help = "Server:"},
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &A->rp.model_path, .metavar = "PATH",
         .help = "GGUF model"},
        {.flag = "--model-name", .type = CLI_OPT_STRING, .dst = &A->model_name, .metavar = "NAME",
         .help = "the id /v1/models reports (default: the file name without .gguf)"},
        {.flag = "--host", .type = CLI_OPT_STRING, .dst = &A->hp.host, .metavar = "ADDR",
         .help = "address to bind; 127.0.0.1 is this machine only"},
        {.flag = "--port", .type = CLI_OPT_INT32, .dst = &A->port, .hi = 65535,
         .help = "TCP port; 0: any free port, logged"},
        {.flag = "--api-key", .type = CLI_OPT_STRING, .dst = &A->hp.api_key, .metavar = "KEY",
         .help = "require 'Authorization: Bearer KEY' on all but /health\n"
                 "(default: $NIGHTSHIFT_API_KEY if set, else none)"},
        {.flag = "--chat-template", .type = CLI_OPT_STRING, .dst = &A->chat_name, .metavar = "NAME",
         .help = chat_help},
        {.flag = "--no-special", .type = CLI_OPT_SET, .dst = &A->no_special, .lo = 1,
         .help = "special-token text in prompts stays plain text"},
        {.flag = "--quiet", .alias = "-q", .type = CLI_OPT_SET, .dst = &A->quiet, .lo = 1, .help = "fewer log lines"},
        {.flag = "--verbose", .alias = "-v", .type = CLI_OPT_SET, .dst = &A->verbose, .lo = 1,
         .help = "more log lines"},
        {.help = "Admission and limits:"},
        {.flag = "--max-queue", .type = CLI_OPT_INT32, .dst = &A->max_queue, .lo = 1, .hi = 1 << 20,
         .help = "requests waiting to start, at most (default 4 x --max-seqs)"},
        {.flag = "--max-queue-tokens", .type = CLI_OPT_SIZE, .dst = &A->max_queue_tokens, .lo = 1, .hi = 1e15,
         .help = "their prompt + max_tokens, at most (default: the KV pool's tokens)"},
        {.flag = "--max-wait", .type = CLI_OPT_DOUBLE, .dst = &A->sp.max_wait, .lo_open = 1, .metavar = "S",
         .help = "expected wait to start, at most, in seconds"},
        {.flag = "--max-body-bytes", .type = CLI_OPT_SIZE, .dst = &A->max_body, .lo = 64, .hi = 1 << 30,
         .help = "request body limit"},
        {.flag = "--max-header-bytes", .type = CLI_OPT_SIZE, .dst = &A->max_header, .lo = 4096, .hi = 1 << 24,
         .help = "request line + headers limit"},
        {.flag = "--max-connections", .type = CLI_OPT_INT32, .dst = &A->max_connections, .lo = 1, .hi = 65536,
         .help = "requests in progress at most; past it 503 + Retry-After"},
        {.flag = "--idle-timeout", .type = CLI_OPT_INT32, .dst = &A->idle_timeout, .lo = 1, .hi = 86400,
         .metavar = "S", .help = "close a connection idle this long, in seconds"},
        {.flag = "--header-timeout", .type = CLI_OPT_DOUBLE, .dst = &A->hp.header_timeout_s, .lo_open = 1,
         .metavar = "S", .help = "answer 408 to a request whose headers take longer"},
        {.flag = "--body-timeout", .type = CLI_OPT_DOUBLE, .dst = &A->hp.body_timeout_s, .lo_open = 1,
         .metavar = "S", .help = "answer 408 to a request whose body takes longer"},
        {.flag = "--drain-timeout", .type = CLI_OPT_DOUBLE, .dst = &A->drain_timeout, .metavar = "S",
         .help = "on SIGTERM, cancel what is still running after S seconds"},
        {.help = "Files and Batches API:"},
        {.flag = "--data-dir", .type = CLI_OPT_STRING, .dst = &A->data_dir, .metavar = "DIR",
         .help = "where uploaded files and batches live"},
        {.flag = "--max-upload-bytes", .type = CLI_OPT_SIZE, .dst = &A->max_upload, .lo = 1, .hi = 1e12,
         .help = "an uploaded file's size at most (413 above)"},
        {.flag = "--max-files", .type = CLI_OPT_INT32, .dst = &A->max_files, .lo = 1, .hi = 1 << 20,
         .help = "files kept at most, uploads and batch results"},
        {.flag = "--max-batches", .type = CLI_OPT_INT32, .dst = &A->max_batches, .lo = 1, .hi = 1 << 20,
         .help = "batches kept at most"},
        {.flag = "--no-batches", .type = CLI_OPT_SET, .dst = &A->no_batches, .lo = 1,
         .help = "no Files and Batches API (and no data directory)"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (!A->rp.model_path) A->rp.model_path = cli_default_model(); /* shown as -m's default */
            serve_usage(stdout, opts, n_opts, &A->rp, &A->defaults);
            return 1;
        }
        int r = engine_flags_parse(&A->rp, "serve", argc, argv, &i);
        if (!r) r = cli_opts_parse_gen("serve", &A->defaults, argc, argv, &i);
        if (!r) r = cli_opts_parse("serve", opts, n_opts, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        cli_error("serve", "unknown %s %s (see nightshift serve --help)", a[0] == '-' ? "option" : "argument",
                  a);
        return -1;
    }
    return 0;
}

/* Checks the arguments together and fills the server's and HTTP's params: 0, or -1 (printed). */
static int serve_check_args(struct serve_args *A)
{
    struct err e;
    enum chat_family f;
    if (A->chat_name && chat_family_parse(A->chat_name, &f)) {
        cli_error("serve", "--chat-template %s: expected one of %s", A->chat_name, chat_family_list());
        return -1;
    }
    if (genparam_check(&A->defaults, &e)) {
        cli_error("serve", "%s", e.msg);
        return -1;
    }
    if (!A->rp.model_path) A->rp.model_path = cli_default_model();
    if (!A->model_name) {
        const char *slash = strrchr(A->rp.model_path, '/'), *base = slash ? slash + 1 : A->rp.model_path;
        snprintf(A->name_buf, sizeof A->name_buf, "%s", base);
        size_t n = strlen(A->name_buf);
        if (n > 5 && !strcmp(A->name_buf + n - 5, ".gguf")) A->name_buf[n - 5] = '\0';
        A->model_name = A->name_buf;
    }
    if (!A->hp.api_key) A->hp.api_key = getenv("NIGHTSHIFT_API_KEY");
    if (A->hp.api_key && !*A->hp.api_key) A->hp.api_key = NULL;
    A->sp.model_name = A->model_name;
    A->sp.model_path = A->rp.model_path;
    A->sp.defaults = &A->defaults;
    A->sp.parse_special = !A->no_special;
    A->sp.max_queue = A->max_queue;
    A->sp.max_queue_tokens = (int64_t)A->max_queue_tokens;
    A->sp.debug_checks = A->rp.debug_checks;
    A->hp.port = A->port;
    A->hp.max_body_bytes = A->max_body;
    A->hp.max_header_bytes = A->max_header;
    A->hp.max_connections = (unsigned)A->max_connections;
    A->hp.idle_timeout_s = (unsigned)A->idle_timeout;
    A->hp.max_upload_bytes = (uint64_t)A->max_upload;
    return 0;
}

/* The Files and Batches API's stores under --data-dir: 0, or -1 (printed). */
static int serve_open_batches(struct serve_args *A, server *srv, files **fs, batches **bs)
{
    struct err e;
    if (A->no_batches) return 0;
    if (mkdir(A->data_dir, 0700) != 0 && errno != EEXIST) {
        cli_error("serve", "--data-dir %s: %s", A->data_dir, strerror(errno));
        return -1;
    }
    snprintf(A->files_dir, sizeof A->files_dir, "%s/files", A->data_dir);
    snprintf(A->batches_dir, sizeof A->batches_dir, "%s/batches", A->data_dir);
    A->jc = job_default_config();
    A->jc.input.defaults = A->defaults; /* borrowed: freed with A->defaults */
    A->jc.parse_special = !A->no_special;
    A->jc.version = NS_VERSION;
    struct files_params fp = {A->files_dir, A->max_upload, A->max_files};
    struct batches_params bp = {A->batches_dir, A->max_batches, &A->jm, &A->jc};
    if (files_open(&fp, fs, &e) || batches_open(&bp, *fs, server_get_lane(srv), bs, &e)) {
        cli_error("serve", "--data-dir %s: %s", A->data_dir, e.msg);
        return -1;
    }
    A->hp.files = *fs;
    A->hp.batches = *bs;
    return 0;
}

/* The batches' job_model, as `run` makes it (model identity, general.name, chat), and their runner. */
static int serve_start_batches(struct serve_args *A, struct runtime *rt, const struct job_model *chat, batches *bs)
{
    struct err e;
    struct stat st;
    if (!bs) return 0;
    struct job_model *m = &A->jm;
    memset(m, 0, sizeof *m);
    int cached;
    if (stat(A->rp.model_path, &st) != 0 || sha256_file_cached(A->rp.model_path, m->sha256, &cached, &e)) {
        cli_error("serve", "model %s: cannot hash it for the batches' stores", A->rp.model_path);
        return -1;
    }
    cli_model_identity(m, A->rp.model_path, (uint64_t)st.st_size, rt, A->gguf_name, sizeof A->gguf_name);
    m->chat = chat->chat;
    m->chat_jinja = chat->chat_jinja;
    m->chat_source = chat->chat_source;
    if (batches_start(bs, &e)) {
        cli_error("serve", "%s", e.msg);
        return -1;
    }
    return 0;
}

/* Opens the stack and starts serving: 0, or -1 (printed; what was opened is closed). */
static int serve_open(struct serve_args *A, server *srv, struct runtime *rt, batches *bs)
{
    struct err e;
    if (runtime_open(&A->rp, rt, &e)) {
        cli_error("serve", "%s: %s", A->rp.model_path, e.msg);
        return -1;
    }
    struct job_model chat = {0};
    cli_model_chat(A->chat_name, rt->gf, &A->chat_jinja, &chat);
    if (server_start(srv, rt, &chat, &e)) {
        cli_error("serve", "%s", e.msg);
        runtime_close(rt);
        return -1;
    }
    if (serve_start_batches(A, rt, &chat, bs)) return -1; /* the caller stops the server, closes rt */
    char desc[256];
    runtime_describe(rt, desc, sizeof desc);
    log_info("nightshift serve: ready: %s; chat template %s (%s)", desc, chat_template_name(chat.chat, chat.chat_jinja),
             chat.chat_source);
    return 0;
}

/* Waits for SIGTERM / SIGINT (blocked in every thread) or an engine failure: 0 on a signal, 1 on failure. */
static int serve_wait(server *srv, const sigset_t *set)
{
    for (;;) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("nightshift serve: %s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            return 0;
        }
        char msg[ERR_MSG_MAX];
        if (server_failed(srv, msg, sizeof msg)) {
            cli_error("serve", "the engine failed: %s", msg);
            return 1;
        }
    }
}

int cmd_serve(int argc, char **argv)
{
    static struct serve_args A; /* cmd_serve runs once per process */
    memset(&A, 0, sizeof A);
    A.rp = runtime_default_params();
    A.sp = server_default_params();
    A.hp = http_default_params();
    A.defaults = genparam_defaults();
    A.port = A.hp.port;
    A.max_connections = (int32_t)A.hp.max_connections;
    A.idle_timeout = (int32_t)A.hp.idle_timeout_s;
    A.max_body = A.hp.max_body_bytes;
    A.max_header = A.hp.max_header_bytes;
    A.drain_timeout = 30;
    A.data_dir = "nightshift-serve";
    A.max_upload = (size_t)A.hp.max_upload_bytes;
    A.max_files = 1000;
    A.max_batches = 1000;
    enum log_level saved_level = log_get_level();
    int rc = 2, pr = serve_parse(argc, argv, &A);
    if (pr || serve_check_args(&A)) {
        rc = pr > 0 ? 0 : 2;
        goto out;
    }
    rc = 1;
    if (A.quiet)
        log_set_level(LOG_WARN);
    else if (A.verbose)
        log_set_level(LOG_DEBUG);
    /* every thread started from here on blocks these; serve_wait takes them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct err e;
    server *srv = NULL;
    http_server *http = NULL;
    files *fs = NULL;
    batches *bs = NULL;
    struct runtime rt;
    memset(&rt, 0, sizeof rt);
    if (server_init(&A.sp, &srv, &e)) {
        cli_error("serve", "%s", e.msg);
        goto done;
    }
    if (serve_open_batches(&A, srv, &fs, &bs)) goto done;
    if (http_start(&A.hp, srv, &http, &e)) {
        cli_error("serve", "%s", e.msg);
        goto done;
    }
    log_info("nightshift serve: listening on http://%s%s%s:%d (loading %s)",
             strchr(A.hp.host, ':') ? "[" : "", A.hp.host, strchr(A.hp.host, ':') ? "]" : "", http_port(http),
             A.rp.model_path);
    if (!A.hp.api_key && strcmp(A.hp.host, "127.0.0.1") && strcmp(A.hp.host, "::1"))
        log_warn("nightshift serve: listening on %s without --api-key: anyone who can reach it can use it",
                 A.hp.host);
    if (serve_open(&A, srv, &rt, bs)) goto done;
    int failed = serve_wait(srv, &set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* a second signal now kills (default action) */
    if (bs) batches_stop(bs); /* the running batch stops first, left in progress for the next start */
    int32_t n = server_drain(srv, A.drain_timeout);
    if (n)
        log_warn("nightshift serve: %d requests were still running after %.3g s: cancelled", (int)n,
                 A.drain_timeout);
    rc = failed;
    if (!http_wait_idle(http, 5)) log_warn("nightshift serve: responses still being sent after 5 s: closing");
done:
    http_stop(http); /* closes the connections; their requests have ended */
    if (bs) batches_stop(bs); /* before the engine thread stops: the lane's requests leave the engine */
    if (srv) server_stop(srv);
    batches_close(bs);
    files_close(fs);
    runtime_close(&rt);
    server_free(srv);
    jinja_free(A.chat_jinja);
    if (rc == 0) log_info("nightshift serve: stopped");
out:
    genparam_free(&A.defaults);
    log_set_level(saved_level);
    return rc;
}
