/* quantize — see quantize.h.
 *
 * Invariant of a plan (quantize_check_plan, run on every plan before anything is written): one entry per
 * input tensor, in order; entry i's type holds whole blocks in a row of tensor i (so the writer accepts
 * it); a converted entry reads a type quant_dequantize_row knows and writes one quant_quantize_row knows,
 * and differs from the input's type; a copied entry keeps the input's type (its bytes are the input's).
 *
 * The writer calls the fill callback for converted tensors only, in order, one chunk of whole rows at a
 * time; the callback keeps the tensor and row it is at, so each chunk continues where the last ended.
 * Rows of a chunk are spread over the thread pool in tasks of whole rows; a row's bytes depend only on the
 * row (quant_quantize_row has no state), so the file is the same for any number of threads.
 */
#include "gguf/quantize.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/quant.h"
#include "util/threads.h"

#define QUANTIZE_TASK_ELEMS 16384 /* f32 elements per task: big enough to amortise a dispatch */

struct quantize_entry {
    enum gguf_dtype type; /* what the output holds */
    int convert;          /* 1: dequantize + quantize; 0: bytes copied from the input */
};

struct quantize_fill {
    const gguf_file *f;
    const struct quantize_entry *plan;
    threads_pool *pool;
    float *rows;          /* (n_threads, rows_cap) f32 scratch, one row per thread */
    uint64_t rows_cap;
    uint64_t cur, next_row; /* tensor being written, and its first row not yet written */
    /* the chunk being converted (set before each parallel_for) */
    const uint8_t *src;
    uint8_t *dst;
    uint64_t ne0, src_row_bytes, dst_row_bytes, n_rows, rows_per_task;
    enum gguf_dtype src_type, dst_type;
    _Atomic int64_t first_bad; /* smallest row of the chunk with a non-finite value, or INT64_MAX */
    void (*on_progress)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *user;
    uint64_t done_bytes, total_bytes;
};

static const char *quantize_type_name(enum gguf_dtype t)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    return ti ? ti->name : "unknown";
}

static uint64_t quantize_rows(const struct gguf_tensor *t)
{
    return t->n_elements / t->ne[0];
}

/* The model facts the rules need, from the metadata: <arch>.block_count (else the highest "blk.N." + 1),
 * head counts when they are plain integers, and whether output.weight exists. */
static void quantize_read_model(const gguf_file *f, int pure, struct qmix_model *m)
{
    char arch[64] = "", key[128];
    struct err ignore;
    int64_t v;
    memset(m, 0, sizeof *m);
    m->pure = pure;
    m->has_output = gguf_find_tensor(f, "output.weight") != NULL;
    if (gguf_get_cstr(f, "general.architecture", arch, sizeof arch, &ignore)) arch[0] = '\0';
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (arch[0] && !gguf_get_int(f, key, &v, &ignore) && v > 0 && v <= UINT32_MAX) {
        m->n_layer = (uint32_t)v;
    } else {
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            unsigned il;
            if (sscanf(gguf_tensor(f, i)->name, "blk.%u.", &il) == 1 && il < UINT32_MAX && il + 1 > m->n_layer)
                m->n_layer = il + 1;
        }
    }
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    if (arch[0] && !gguf_get_int(f, key, &v, &ignore) && v > 0 && v <= UINT32_MAX) m->n_head = (uint32_t)v;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (arch[0] && !gguf_get_int(f, key, &v, &ignore) && v > 0 && v <= UINT32_MAX) m->n_head_kv = (uint32_t)v;
}

static int quantize_check_plan(const gguf_file *f, const struct quantize_entry *plan, struct err *e)
{
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        const struct quantize_entry *q = &plan[i];
        if (gguf_row_bytes(q->type, t->ne[0]) == 0 ||
            (q->convert && (!quant_can_dequantize(t->type) || !quant_can_quantize(q->type) || q->type == t->type)) ||
            (!q->convert && q->type != t->type))
            return err_set(e, "quantize: internal error: bad plan for tensor %s (%s -> %s, convert %d)", t->name,
                           quantize_type_name(t->type), quantize_type_name(q->type), q->convert);
    }
    return 0;
}

/* One entry per tensor (see the invariant at the top); fills the report's counts. */
static int quantize_plan(const gguf_file *f, const struct quantize_params *p, struct quantize_entry *plan,
                         struct quantize_report *r, struct err *e)
{
    struct qmix_model m;
    quantize_read_model(f, p->pure, &m);
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        enum gguf_dtype type = t->type;
        if (qmix_converts(t->name, t->n_dims)) {
            enum gguf_dtype wanted = qmix_rule_type(p->type, &m, t->name, t->ne[0]);
            type = qmix_fallback(wanted, t->ne[0]);
            if (type != wanted) {
                r->n_fallback++;
                if (p->on_fallback) p->on_fallback(p->user, t->name, t->ne[0], wanted, type);
            }
        }
        plan[i] = (struct quantize_entry){type, type != t->type};
        if (plan[i].convert && !quant_can_dequantize(t->type)) {
            char list[256];
            gguf_dtype_names(quant_dequantize_types(), list, sizeof list);
            return err_set(e, "%s: tensor %s has type %s, which quantize cannot read (it reads %s)", p->in_path,
                           t->name, quantize_type_name(t->type), list);
        }
        r->n_converted += (uint64_t)plan[i].convert;
        r->n_copied += (uint64_t)!plan[i].convert;
        r->in_types[t->type]++;
        r->out_types[type]++;
        r->in_tensor_bytes += t->n_bytes;
        r->out_tensor_bytes += gguf_row_bytes(type, t->ne[0]) * quantize_rows(t);
    }
    r->n_tensors = gguf_n_tensors(f);
    return quantize_check_plan(f, plan, e);
}

/* Every metadata key in its order, general.file_type and general.quantization_version replaced (or
 * added at the end). */
static int quantize_copy_metadata(gguf_writer *w, const gguf_file *f, const struct qmix_type *type, struct err *e)
{
    int have_ftype = 0, have_qv = 0;
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        int rc;
        if (!strcmp(key, "general.file_type")) {
            rc = gguf_writer_set_u32(w, key, (uint32_t)type->ftype, e);
            have_ftype = 1;
        } else if (!strcmp(key, "general.quantization_version")) {
            rc = gguf_writer_set_u32(w, key, 2, e);
            have_qv = 1;
        } else {
            rc = gguf_writer_copy_kv_at(w, f, i, e);
        }
        if (rc) return -1;
    }
    if (!have_ftype && gguf_writer_set_u32(w, "general.file_type", (uint32_t)type->ftype, e)) return -1;
    if (!have_qv && gguf_writer_set_u32(w, "general.quantization_version", 2, e)) return -1;
    return 0;
}

static void quantize_task(void *arg, int64_t task, int thread)
{
    struct quantize_fill *q = arg;
    float *row = q->rows + (size_t)thread * q->rows_cap;
    uint64_t r0 = (uint64_t)task * q->rows_per_task, r1 = r0 + q->rows_per_task;
    if (r1 > q->n_rows) r1 = q->n_rows;
    for (uint64_t r = r0; r < r1; r++) {
        quant_dequantize_row(q->src_type, q->src + r * q->src_row_bytes, row, (int64_t)q->ne0);
        int finite = 1;
        for (uint64_t j = 0; j < q->ne0; j++)
            finite &= isfinite(row[j]) != 0;
        if (!finite) {
            int64_t bad = atomic_load(&q->first_bad);
            while ((int64_t)r < bad && !atomic_compare_exchange_weak(&q->first_bad, &bad, (int64_t)r)) {
            }
            continue;
        }
        quant_quantize_row(q->dst_type, row, q->dst + r * q->dst_row_bytes, (int64_t)q->ne0);
    }
}

/* Makes the per-thread row scratch hold ne0 floats. */
static int quantize_grow_rows(struct quantize_fill *q, uint64_t ne0, struct err *e)
{
    if (ne0 <= q->rows_cap) return 0;
    size_t n = (size_t)threads_count(q->pool) * ne0;
    float *rows = realloc(q->rows, n * sizeof *rows);
    if (!rows) return err_set(e, "out of memory for %llu-element rows", (unsigned long long)ne0);
    q->rows = rows;
    q->rows_cap = ne0;
    return 0;
}

/* gguf_fill_fn: the next n_bytes of converted tensor ti (whole rows, continuing where the last call ended). */
static int quantize_fill_cb(void *user, uint64_t ti, void *dst, uint64_t n_bytes, struct err *e)
{
    struct quantize_fill *q = user;
    const struct gguf_tensor *t = gguf_tensor(q->f, ti);
    if (q->cur != ti) {
        q->cur = ti;
        q->next_row = 0;
    }
    if (quantize_grow_rows(q, t->ne[0], e)) return -1;
    q->ne0 = t->ne[0];
    q->src_type = t->type;
    q->dst_type = q->plan[ti].type;
    q->src_row_bytes = gguf_row_bytes(t->type, t->ne[0]);
    q->dst_row_bytes = gguf_row_bytes(q->dst_type, t->ne[0]);
    q->n_rows = n_bytes / q->dst_row_bytes;
    if (q->n_rows * q->dst_row_bytes != n_bytes || q->next_row + q->n_rows > quantize_rows(t))
        return err_set(e, "quantize: internal error: a chunk of %llu bytes at row %llu", (unsigned long long)n_bytes,
                       (unsigned long long)q->next_row);
    q->src = (const uint8_t *)t->data + q->next_row * q->src_row_bytes;
    q->dst = dst;
    q->rows_per_task = q->ne0 >= QUANTIZE_TASK_ELEMS ? 1 : QUANTIZE_TASK_ELEMS / q->ne0;
    atomic_store(&q->first_bad, INT64_MAX);
    threads_parallel_for(q->pool, (int64_t)((q->n_rows + q->rows_per_task - 1) / q->rows_per_task), quantize_task, q);
    int64_t bad = atomic_load(&q->first_bad);
    if (bad != INT64_MAX)
        return err_set(e, "row %llu of the input has a value that is not finite (NaN or infinity)",
                       (unsigned long long)(q->next_row + (uint64_t)bad));
    q->next_row += q->n_rows;
    q->done_bytes += n_bytes;
    if (q->on_progress && q->next_row == quantize_rows(t)) q->on_progress(q->user, q->done_bytes, q->total_bytes);
    return 0;
}

/* Refuses an output that is the input file (the same inode, also through a link). */
static int quantize_check_paths(const char *in, const char *out, struct err *e)
{
    struct stat si, so;
    if (stat(in, &si) != 0) return err_set(e, "%s: %s", in, strerror(errno));
    if (stat(out, &so) != 0) return 0;
    if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return err_set(e, "%s is the input file (%s): write the output to another path", out, in);
    if (S_ISDIR(so.st_mode)) return err_set(e, "%s is a directory: give the output file's path", out);
    return 0;
}

/* fsync of a file or directory by path. */
static int quantize_sync(const char *path, int dir, struct err *e)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return err_set(e, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc != 0) return err_set(e, "%s: fsync failed: %s", path, strerror(saved));
    return 0;
}

/* Writes w to out_path atomically: OUT.partial.PID, synced, renamed over OUT, directory synced. */
static int quantize_write_atomic(gguf_writer *w, const char *out_path, struct quantize_fill *q, struct err *e)
{
    char tmp[4096], dir[4096];
    if (snprintf(tmp, sizeof tmp, "%s.partial.%ld", out_path, (long)getpid()) >= (int)sizeof tmp)
        return err_set(e, "%s: path too long", out_path);
    if (gguf_writer_write(w, tmp, quantize_fill_cb, q, e)) return -1; /* removes tmp on failure */
    if (quantize_sync(tmp, 0, e)) goto fail;
    if (rename(tmp, out_path) != 0) {
        err_set(e, "cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
        goto fail;
    }
    snprintf(dir, sizeof dir, "%s", out_path);
    return quantize_sync(dirname(dir), 1, e);
fail:
    unlink(tmp);
    return -1;
}

int quantize_file(const struct quantize_params *p, struct quantize_report *r, struct err *e)
{
    memset(r, 0, sizeof *r);
    if (!p->type) return err_set(e, "quantize: no target type");
    if (quantize_check_paths(p->in_path, p->out_path, e)) return -1;
    int rc = -1;
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    struct quantize_entry *plan = NULL;
    struct quantize_fill q = {0};
    struct stat so;
    if (gguf_open(p->in_path, &f, e)) return -1;
    r->in_file_bytes = gguf_file_size(f);
    uint64_t n = gguf_n_tensors(f);
    if (!(plan = calloc(n ? n : 1, sizeof *plan)) || !(w = gguf_writer_init())) {
        err_set(e, "out of memory");
        goto done;
    }
    if (quantize_plan(f, p, plan, r, e) || quantize_copy_metadata(w, f, p->type, e)) goto done;
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        if (gguf_writer_add_tensor(w, t->name, plan[i].type, t->n_dims, t->ne, plan[i].convert ? NULL : t->data, e))
            goto done;
    }
    if (threads_init(p->threads, &q.pool, e)) goto done;
    q.f = f;
    q.plan = plan;
    q.cur = UINT64_MAX;
    q.on_progress = p->on_progress;
    q.user = p->user;
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        if (plan[i].convert) q.total_bytes += gguf_row_bytes(plan[i].type, t->ne[0]) * quantize_rows(t);
    }
    if (quantize_write_atomic(w, p->out_path, &q, e)) goto done;
    if (stat(p->out_path, &so) == 0) r->out_file_bytes = (uint64_t)so.st_size;
    rc = 0;
done:
    threads_free(q.pool);
    free(q.rows);
    free(plan);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}
