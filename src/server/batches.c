/* batches — see batches.h. */
#include "server/batches.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define BATCH_ID_PREFIX "batch_"
#define BATCH_ID_LEN 30 /* "batch_" + 24 hex digits */

struct batch {
    char id[BATCH_ID_LEN + 1];
    int64_t seq;  /* creation number: the list's order */
    json_t *obj;  /* the OpenAI batch object (under the lock) */
    int cancel;   /* cancel asked while it runs */
    struct batch *next;
};

struct batches {
    struct batches_params p;
    char dir[4096];
    files *files;
    server_lane *lane;
    int lock_fd;  /* an flock on DIR/.lock: one server per data directory */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the runner waits for a batch to run */
    struct batch *head, *tail;
    int32_t n;
    int64_t next_seq;
    struct batch *running;
    volatile sig_atomic_t stop_run; /* the running batch's job_config.stop */
    int shutdown;
    pthread_t thread;
    int started;
};

static const char *const batch_statuses[] = {"validating", "failed",    "in_progress", "finalizing", "completed",
                                             "expired",    "cancelling", "cancelled",  NULL};

int batches_valid_id(const char *id)
{
    size_t np = strlen(BATCH_ID_PREFIX);
    if (!id || strlen(id) != BATCH_ID_LEN || strncmp(id, BATCH_ID_PREFIX, np)) return 0;
    for (const char *c = id + np; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return 0;
    return 1;
}

static const char *status_of(const struct batch *bt)
{
    const char *s = json_string_value(json_object_get(bt->obj, "status"));
    return s ? s : "";
}

static int status_is(const struct batch *bt, const char *s)
{
    return !strcmp(status_of(bt), s);
}

/* validating, in progress or finalizing: the runner has work in it. */
static int runnable(const struct batch *bt)
{
    return status_is(bt, "validating") || status_is(bt, "in_progress") || status_is(bt, "finalizing");
}

static void batch_dir(const batches *b, const char *id, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s%s%s", b->dir, id, name ? "/" : "", name ? name : "");
}

static void set_time(json_t *obj, const char *key)
{
    json_object_set_new(obj, key, json_integer((json_int_t)time(NULL)));
}

/* Writes bt's batch.json (a temporary file renamed). Called under the lock. */
static int persist(const batches *b, const struct batch *bt, struct err *e)
{
    char path[4400], tmp[4400];
    batch_dir(b, bt->id, "batch.json", path, sizeof path);
    batch_dir(b, bt->id, "batch.json.tmp", tmp, sizeof tmp);
    json_t *doc = json_pack("{s:I, s:O}", "seq", (json_int_t)bt->seq, "batch", bt->obj);
    int rc = doc ? json_dump_file(doc, tmp, JSON_COMPACT) : -1;
    json_decref(doc);
    if (rc != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return err_set(e, "batches: writing %s: %s", path, strerror(errno));
    }
    return 0;
}

static void persist_or_log(const batches *b, const struct batch *bt)
{
    struct err e;
    if (persist(b, bt, &e)) log_warn("%s", e.msg);
}

/* Appends bt to the list in seq order (the list is short: O(n) is fine). */
static void list_insert(batches *b, struct batch *bt)
{
    struct batch **at = &b->head;
    while (*at && (*at)->seq < bt->seq)
        at = &(*at)->next;
    bt->next = *at;
    *at = bt;
    if (!bt->next) b->tail = bt;
    b->n++;
    if (bt->seq >= b->next_seq) b->next_seq = bt->seq + 1;
}

static struct batch *find(batches *b, const char *id)
{
    if (!batches_valid_id(id)) return NULL;
    for (struct batch *bt = b->head; bt; bt = bt->next)
        if (!strcmp(bt->id, id)) return bt;
    return NULL;
}

static void batch_free(struct batch *bt)
{
    if (!bt) return;
    json_decref(bt->obj);
    free(bt);
}

/* ---- reading back ---- */

/* One batch directory's batch.json; a batch killed while cancelling ends cancelled. 0, or 1 when the
 * directory holds no readable batch (skipped with a warning). */
static int load_one(batches *b, const char *id)
{
    char path[4400];
    batch_dir(b, id, "batch.json", path, sizeof path);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    json_t *obj = json_object_get(doc, "batch");
    json_t *seq = json_object_get(doc, "seq");
    if (!json_is_object(obj) || !json_is_integer(seq) ||
        strcmp(json_string_value(json_object_get(obj, "id")) ? json_string_value(json_object_get(obj, "id")) : "",
               id)) {
        log_warn("batches: %s: not a batch (%s): skipped", path, doc ? "fields missing" : je.text);
        json_decref(doc);
        return 1;
    }
    struct batch *bt = calloc(1, sizeof *bt);
    if (!bt) {
        json_decref(doc);
        return 1;
    }
    memcpy(bt->id, id, BATCH_ID_LEN + 1); /* a valid id: BATCH_ID_LEN characters */
    bt->seq = json_integer_value(seq);
    bt->obj = json_incref(obj);
    json_decref(doc);
    if (status_is(bt, "cancelling")) {
        json_object_set_new(bt->obj, "status", json_string("cancelled"));
        set_time(bt->obj, "cancelled_at");
        persist_or_log(b, bt);
    }
    list_insert(b, bt);
    return 0;
}

static int load_all(batches *b, struct err *e)
{
    DIR *d = opendir(b->dir);
    if (!d) return err_set(e, "batches %s: %s", b->dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)))
        if (batches_valid_id(de->d_name)) load_one(b, de->d_name);
    closedir(d);
    int32_t n_resume = 0;
    for (struct batch *bt = b->head; bt; bt = bt->next)
        n_resume += runnable(bt);
    if (b->n) log_info("batches: %d batches in %s, %d to run or resume", (int)b->n, b->dir, (int)n_resume);
    return 0;
}

int batches_open(const struct batches_params *p, files *f, server_lane *lane, batches **out, struct err *e)
{
    *out = NULL;
    if (!p->dir || strlen(p->dir) >= 4000) return err_set(e, "batches: no directory, or its path is too long");
    if (mkdir(p->dir, 0700) != 0 && errno != EEXIST) return err_set(e, "batches %s: %s", p->dir, strerror(errno));
    batches *b = calloc(1, sizeof *b);
    if (!b) return err_set(e, "batches: out of memory");
    b->p = *p;
    snprintf(b->dir, sizeof b->dir, "%s", p->dir);
    b->p.dir = b->dir;
    b->files = f;
    b->lane = lane;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/.lock", b->dir);
    b->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (b->lock_fd < 0 || flock(b->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        err_set(e, "batches %s: %s", b->dir,
                b->lock_fd < 0 ? strerror(errno)
                               : "in use by another nightshift serve (one server per data directory)");
        batches_close(b);
        return -1;
    }
    if (load_all(b, e)) {
        batches_close(b);
        return -1;
    }
    *out = b;
    return 0;
}

void batches_close(batches *b)
{
    if (!b) return;
    batches_stop(b);
    while (b->head) {
        struct batch *bt = b->head;
        b->head = bt->next;
        batch_free(bt);
    }
    if (b->lock_fd >= 0) close(b->lock_fd);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* ---- the runner ---- */

/* The finished run's files as files of the store (those not empty), and the counts. Outside the lock. */
static void adopt_results(batches *b, const struct batch *bt, json_t *upd)
{
    static const char *const names[2] = {"output.jsonl", "errors.jsonl"};
    static const char *const keys[2] = {"output_file_id", "error_file_id"};
    for (int i = 0; i < 2; i++) {
        char path[4400];
        struct stat st;
        batch_dir(b, bt->id, names[i], path, sizeof path);
        if (stat(path, &st) != 0 || st.st_size == 0) continue;
        json_t *fo;
        struct err e;
        char name[64];
        snprintf(name, sizeof name, "%s_%s", bt->id, i ? "errors.jsonl" : "output.jsonl");
        int rc = files_adopt(b->files, path, "batch_output", name, &fo, &e);
        if (rc == 0) json_object_set(upd, keys[i], json_object_get(fo, "id"));
        else log_warn("batches: %s: its %s: %s", bt->id, names[i], rc > 0 ? "the file store is full" : e.msg);
        json_decref(fo);
    }
}

/* The job_config of batch bt's run (paths in the caller's buffers). */
static void run_config(batches *b, const struct batch *bt, const struct job_engine *ops, char paths[4][4400],
                       struct job_config *c)
{
    static const char *const names[4] = {"input.jsonl", "output.jsonl", "errors.jsonl", "store.db"};
    for (int i = 0; i < 4; i++)
        batch_dir(b, bt->id, names[i], paths[i], sizeof paths[i]);
    *c = *b->p.base;
    c->backlog = paths[0];
    c->output = paths[1];
    c->errors = paths[2];
    c->store = paths[3];
    c->record = NULL;
    c->order_input = 1;
    c->progress = PROGRESS_QUIET;
    c->watchdog = 0;
    c->stop = &b->stop_run;
    c->drain = NULL;
    c->mirror = NULL;
    c->dist = NULL;
    c->engine = ops;
    c->test_hook = NULL;
}

/* How the run of bt ended, into its object (under the lock). upd: fields found outside the lock. */
static void finish_run(batches *b, struct batch *bt, int rc, const struct job_summary *s, const char *msg,
                       json_t *upd)
{
    json_t *o = bt->obj;
    if (rc != 0) {
        json_object_set_new(o, "status", json_string("failed"));
        set_time(o, "failed_at");
        json_object_set_new(o, "errors", json_pack("{s:s, s:[{s:s, s:s, s:n, s:n}]}", "object", "list", "data", "code",
                                                   "batch_failed", "message", msg, "param", "line"));
    } else if (s->interrupted && !bt->cancel) {
        return; /* a shutdown: it stays in progress and resumes at the next start */
    } else {
        json_object_update(o, upd);
        json_object_set_new(o, "request_counts", json_pack("{s:I, s:I, s:I}", "total", (json_int_t)s->lines,
                                                           "completed", (json_int_t)s->lines_ok, "failed",
                                                           (json_int_t)s->lines_failed));
        json_object_set_new(o, "status", json_string(s->interrupted ? "cancelled" : "completed"));
        set_time(o, s->interrupted ? "cancelled_at" : "completed_at");
    }
    persist_or_log(b, bt);
}

/* ---- request counts while a batch runs ---- */

/* The running batch's counts: total = the input's lines that are not blank (as `run` counts them), completed /
 * failed = the lines whose results / errors the run's store holds, told by the run after every commit
 * (job_config.on_commit): they follow the store, though an --order input run's files grow only in input
 * order. The run's engine calls are the lane's. */
struct run_progress {
    batches *b;
    struct batch *bt;
    struct job_engine lane;
};

/* Lines (non-blank when nonblank) of path from *off on, added to *lines; *off advanced. O(new bytes). */
static void count_lines(const char *path, int nonblank, int64_t *off, int64_t *lines)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseeko(f, (off_t)*off, SEEK_SET) != 0) {
        if (f) fclose(f);
        return;
    }
    char buf[65536];
    size_t n;
    int seen = 0; /* a non-blank byte since the last newline (nonblank only: counts from the file's start) */
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                *lines += !nonblank || seen;
                seen = 0;
            } else if (buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\r') {
                seen = 1;
            }
        }
        *off += (int64_t)n;
    }
    *lines += nonblank && seen; /* a last line without a newline */
    fclose(f);
}

/* job_config.on_commit: the store holds ok results and failed errors now. */
static void progress_commit(void *ctx, int64_t ok, int64_t failed)
{
    struct run_progress *p = ctx;
    pthread_mutex_lock(&p->b->mu);
    json_t *rc = json_object_get(p->bt->obj, "request_counts");
    json_object_set_new(rc, "completed", json_integer((json_int_t)ok));
    json_object_set_new(rc, "failed", json_integer((json_int_t)failed));
    pthread_mutex_unlock(&p->b->mu);
}

static int prog_add(void *ctx, const struct engine_request *r, struct err *e)
{
    struct run_progress *p = ctx;
    return p->lane.add(p->lane.ctx, r, e);
}
static int prog_step(void *ctx, struct err *e)
{
    struct run_progress *p = ctx;
    return p->lane.step(p->lane.ctx, e);
}
static int prog_has_work(void *ctx)
{
    struct run_progress *p = ctx;
    return p->lane.has_work(p->lane.ctx);
}
static int prog_take(void *ctx, struct engine_result *out)
{
    struct run_progress *p = ctx;
    return p->lane.take(p->lane.ctx, out);
}
static void prog_stats(void *ctx, struct engine_stats *st)
{
    struct run_progress *p = ctx;
    p->lane.get_stats(p->lane.ctx, st);
}

/* Starts the counts of bt: total from its input (the rest come with the run's commits). */
static void progress_start(batches *b, struct batch *bt, struct run_progress *p)
{
    memset(p, 0, sizeof *p);
    p->b = b;
    p->bt = bt;
    p->lane = server_lane_ops(b->lane);
    char in[4400];
    int64_t off = 0, total = 0;
    batch_dir(b, bt->id, "input.jsonl", in, sizeof in);
    count_lines(in, 1, &off, &total);
    pthread_mutex_lock(&b->mu);
    json_object_set_new(json_object_get(bt->obj, "request_counts"), "total", json_integer((json_int_t)total));
    pthread_mutex_unlock(&b->mu);
}

/* Runs batch bt (the runner's, marked running): job_run through the lane, then its results. */
static void run_batch(batches *b, struct batch *bt)
{
    char paths[4][4400];
    struct job_config c;
    struct run_progress prog;
    progress_start(b, bt, &prog);
    struct job_engine ops = {&prog, prog_add, prog_step, prog_has_work, prog_take, prog_stats};
    run_config(b, bt, &ops, paths, &c);
    c.on_commit = progress_commit;
    c.on_commit_ctx = &prog;
    struct job_summary s;
    struct err e;
    log_info("batches: %s: running", bt->id);
    int rc = job_run(&c, b->p.model, &s, &e);
    if (server_lane_has_work(b->lane)) server_lane_abandon(b->lane); /* stopped early: requests in the engine */
    server_lane_wait_empty(b->lane);
    json_t *upd = json_object();
    pthread_mutex_lock(&b->mu);
    int keep = rc == 0 && (!s.interrupted || bt->cancel);
    if (keep && !s.interrupted) {
        json_object_set_new(bt->obj, "status", json_string("finalizing"));
        set_time(bt->obj, "finalizing_at");
        persist_or_log(b, bt);
    }
    pthread_mutex_unlock(&b->mu);
    if (keep) adopt_results(b, bt, upd);
    pthread_mutex_lock(&b->mu);
    finish_run(b, bt, rc, &s, rc ? e.msg : "", upd);
    log_info("batches: %s: %s", bt->id, status_of(bt));
    b->running = NULL;
    pthread_mutex_unlock(&b->mu);
    json_decref(upd);
}

static void *runner_main(void *arg)
{
    batches *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->shutdown) {
        struct batch *bt = b->head;
        while (bt && !runnable(bt))
            bt = bt->next;
        if (!bt) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        b->running = bt;
        b->stop_run = 0;
        if (status_is(bt, "validating")) {
            json_object_set_new(bt->obj, "status", json_string("in_progress"));
            set_time(bt->obj, "in_progress_at");
            persist_or_log(b, bt);
        }
        pthread_mutex_unlock(&b->mu);
        run_batch(b, bt);
        pthread_mutex_lock(&b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int batches_start(batches *b, struct err *e)
{
    if (pthread_create(&b->thread, NULL, runner_main, b)) return err_set(e, "batches: cannot start the runner");
    b->started = 1;
    return 0;
}

void batches_stop(batches *b)
{
    if (!b->started) return;
    pthread_mutex_lock(&b->mu);
    b->shutdown = 1;
    b->stop_run = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    b->started = 0;
}

/* ---- the API ---- */

static int bad_request(struct openai_error *err, const char *param, const char *msg)
{
    (void)param;
    return openai_set_error(err, 400, "invalid_request_error", "invalid_request", "%s", msg);
}

/* Checks a create request's fields: 0, or 1 with *err. */
static int check_create(batches *b, json_t *req, struct openai_error *err)
{
    const char *in = json_string_value(json_object_get(req, "input_file_id"));
    const char *ep = json_string_value(json_object_get(req, "endpoint"));
    const char *win = json_string_value(json_object_get(req, "completion_window"));
    json_t *meta = json_object_get(req, "metadata");
    if (!in) return bad_request(err, "input_file_id", "input_file_id: a string is required");
    if (!ep || (strcmp(ep, "/v1/chat/completions") && strcmp(ep, "/v1/completions")))
        return bad_request(err, "endpoint",
                           "endpoint: this server runs batches of /v1/chat/completions or /v1/completions");
    if (!win || strcmp(win, "24h")) return bad_request(err, "completion_window", "completion_window: only \"24h\"");
    if (meta && !json_is_null(meta)) {
        const char *k;
        json_t *v;
        if (!json_is_object(meta) || json_object_size(meta) > 16)
            return bad_request(err, "metadata", "metadata: an object of at most 16 string values");
        json_object_foreach(meta, k, v) if (!json_is_string(v) || strlen(k) > 64 ||
                                            strlen(json_string_value(v)) > 512)
            return bad_request(err, "metadata",
                               "metadata: keys of at most 64 and string values of at most 512 characters");
    }
    const char *k;
    json_t *v;
    json_object_foreach(req, k, v) if (strcmp(k, "input_file_id") && strcmp(k, "endpoint") &&
                                       strcmp(k, "completion_window") && strcmp(k, "metadata"))
    {
        char msg[200];
        snprintf(msg, sizeof msg, "unknown field '%.64s'", k);
        return bad_request(err, k, msg);
    }
    json_t *fo;
    if (files_get(b->files, in, &fo))
        return openai_set_error(err, 404, "invalid_request_error", "not_found", "No such File object: %.64s", in);
    int batch_file = !strcmp(
        json_string_value(json_object_get(fo, "purpose")) ? json_string_value(json_object_get(fo, "purpose")) : "",
        "batch");
    json_decref(fo);
    if (!batch_file)
        return bad_request(err, "input_file_id", "input_file_id: the file's purpose is not \"batch\"");
    return 0;
}

static json_t *new_object(const char *id, json_t *req)
{
    json_t *meta = json_object_get(req, "metadata");
    int64_t now = (int64_t)time(NULL);
    json_t *o = json_pack("{s:s, s:s, s:O, s:n, s:O, s:O, s:s, s:n, s:n, s:I, s:n, s:I, s:n, s:n, s:n, s:n, s:n, s:n, "
                          "s:{s:i, s:i, s:i}, s:O}",
                          "id", id, "object", "batch", "endpoint", json_object_get(req, "endpoint"), "errors",
                          "input_file_id", json_object_get(req, "input_file_id"), "completion_window",
                          json_object_get(req, "completion_window"), "status", "validating", "output_file_id",
                          "error_file_id", "created_at", (json_int_t)now, "in_progress_at", "expires_at",
                          (json_int_t)(now + 86400), "finalizing_at", "completed_at", "failed_at", "expired_at",
                          "cancelling_at", "cancelled_at", "request_counts", "total", 0, "completed", 0, "failed", 0,
                          "metadata", meta ? meta : json_null());
    return o;
}

/* Makes batch id's directory with its input linked in. 0, or -1 with *err (500). */
static int make_dir(batches *b, const char *id, const char *input_id, struct openai_error *err)
{
    char dir[4400], link_to[4400], from[4400];
    batch_dir(b, id, NULL, dir, sizeof dir);
    batch_dir(b, id, "input.jsonl", link_to, sizeof link_to);
    if (files_content_path(b->files, input_id, from, sizeof from) || mkdir(dir, 0700) != 0 ||
        link(from, link_to) != 0) {
        openai_set_error(err, 500, "server_error", "storage", "cannot set up the batch: %s", strerror(errno));
        rmdir(dir);
        return -1;
    }
    return 0;
}

int batches_create(batches *b, const char *body, size_t len, json_t **obj, struct openai_error *err)
{
    *obj = NULL;
    json_error_t je;
    json_t *req = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(req)) {
        json_decref(req);
        return openai_set_error(err, 400, "invalid_request_error", "invalid_json", "the body is not a JSON object: %s",
                                je.text);
    }
    char id[64];
    uint8_t r[12];
    int rc = check_create(b, req, err);
    if (rc == 0 && getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        rc = openai_set_error(err, 500, "server_error", "random", "no random numbers from the system");
    if (rc == 0) {
        int n = snprintf(id, sizeof id, "%s", BATCH_ID_PREFIX);
        for (size_t i = 0; i < sizeof r; i++)
            n += snprintf(id + n, sizeof id - (size_t)n, "%02x", r[i]);
    }
    pthread_mutex_lock(&b->mu);
    if (rc == 0 && b->n >= b->p.max_batches)
        rc = openai_set_error(err, 400, "invalid_request_error", "batch_limit_reached",
                              "this server keeps at most %d batches", (int)b->p.max_batches);
    struct batch *bt = rc == 0 ? calloc(1, sizeof *bt) : NULL;
    if (rc == 0 && !bt) rc = openai_set_error(err, 500, "server_error", "memory", "out of memory");
    if (rc == 0 && make_dir(b, id, json_string_value(json_object_get(req, "input_file_id")), err)) rc = 1;
    if (rc == 0) {
        memcpy(bt->id, id, BATCH_ID_LEN + 1); /* a valid id: BATCH_ID_LEN characters */
        bt->seq = b->next_seq;
        bt->obj = new_object(id, req);
        struct err e;
        if (!bt->obj || persist(b, bt, &e)) {
            rc = openai_set_error(err, 500, "server_error", "storage", "%s", bt->obj ? e.msg : "out of memory");
        } else {
            list_insert(b, bt);
            *obj = json_deep_copy(bt->obj);
            bt = NULL;
            pthread_cond_broadcast(&b->cv);
        }
    }
    pthread_mutex_unlock(&b->mu);
    batch_free(bt);
    json_decref(req);
    return rc ? 1 : 0;
}

static int not_found(struct openai_error *err, const char *id)
{
    return openai_set_error(err, 404, "invalid_request_error", "not_found", "No such Batch object: %.64s", id);
}

int batches_get(batches *b, const char *id, json_t **obj, struct openai_error *err)
{
    pthread_mutex_lock(&b->mu);
    struct batch *bt = find(b, id);
    *obj = bt ? json_deep_copy(bt->obj) : NULL;
    pthread_mutex_unlock(&b->mu);
    return bt ? 0 : not_found(err, id);
}

int batches_list(batches *b, const char *after, const char *limit, json_t **obj, struct openai_error *err)
{
    long n = 20;
    if (limit) {
        char *end;
        n = strtol(limit, &end, 10);
        if (*end || n < 1 || n > 100) return bad_request(err, "limit", "limit: an integer in [1, 100]");
    }
    json_t *data = json_array();
    pthread_mutex_lock(&b->mu);
    int32_t k = 0, skip_to = -1;
    struct batch **all = calloc((size_t)b->n + 1, sizeof *all);
    for (struct batch *bt = b->head; all && bt; bt = bt->next, k++) {
        all[k] = bt;
        if (after && !strcmp(bt->id, after)) skip_to = k;
    }
    int more = 0;
    for (int32_t i = (after && skip_to >= 0 ? skip_to : (all ? b->n : 0)) - 1; i >= 0; i--) {
        if ((long)json_array_size(data) == n) {
            more = 1;
            break;
        }
        json_array_append_new(data, json_deep_copy(all[i]->obj));
    }
    pthread_mutex_unlock(&b->mu);
    free(all);
    size_t m = json_array_size(data);
    *obj = json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
                     m ? json_object_get(json_array_get(data, 0), "id") : json_null(), "last_id",
                     m ? json_object_get(json_array_get(data, m - 1), "id") : json_null(), "has_more", more);
    return 0;
}

int batches_cancel(batches *b, const char *id, json_t **obj, struct openai_error *err)
{
    *obj = NULL;
    pthread_mutex_lock(&b->mu);
    struct batch *bt = find(b, id);
    int rc = 0;
    if (!bt) {
        rc = not_found(err, id);
    } else if (status_is(bt, "completed") || status_is(bt, "failed") || status_is(bt, "expired")) {
        rc = openai_set_error(err, 400, "invalid_request_error", "invalid_state",
                              "batch %s is %s: it cannot be cancelled", bt->id, status_of(bt));
    } else if (runnable(bt)) {
        set_time(bt->obj, "cancelling_at");
        if (bt == b->running) {
            json_object_set_new(bt->obj, "status", json_string("cancelling"));
            bt->cancel = 1;
            b->stop_run = 1;
        } else {
            json_object_set_new(bt->obj, "status", json_string("cancelled"));
            set_time(bt->obj, "cancelled_at");
        }
        persist_or_log(b, bt);
    }
    if (bt && rc == 0) *obj = json_deep_copy(bt->obj);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

int batches_check(batches *b, struct err *e)
{
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    int32_t n = 0;
    const struct batch *prev = NULL;
    for (const struct batch *bt = b->head; bt && rc == 0; prev = bt, bt = bt->next, n++) {
        int known = 0;
        for (int i = 0; batch_statuses[i]; i++)
            known |= status_is(bt, batch_statuses[i]);
        if (!known) rc = err_set(e, "batches: %s has status '%s'", bt->id, status_of(bt));
        else if (prev && prev->seq >= bt->seq) rc = err_set(e, "batches: the list is out of order at %s", bt->id);
        else if (bt == b->running && !status_is(bt, "in_progress") && !status_is(bt, "cancelling") &&
                 !status_is(bt, "finalizing"))
            rc = err_set(e, "batches: running %s is %s", bt->id, status_of(bt));
    }
    if (rc == 0 && (n != b->n || n > b->p.max_batches || (n && prev != b->tail)))
        rc = err_set(e, "batches: %d listed, %d counted (at most %d)", (int)n, (int)b->n, (int)b->p.max_batches);
    pthread_mutex_unlock(&b->mu);
    return rc;
}
