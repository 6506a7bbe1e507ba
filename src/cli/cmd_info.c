/* nightshift info — what a GGUF file holds: architecture, hyper-parameters, tensors by type, vocab,
 * special tokens, chat template; and whether it can run here: on which backends (each built backend is
 * probed, started, and asked whether it computes every weight type of the model).
 *
 *   nightshift info [MODEL.gguf | -m MODEL] [--json]
 *
 * Hyper-parameters are every "<arch>.*" key the file has, printed as stored. --json prints one JSON object
 * (keys: file, file_size, gguf_version, alignment, architecture, name, file_type, hparams, tensors, vocab,
 * chat_template, backends [{name, usable, why, runs, runs_why}], can_run). A vocab that fails to load is
 * reported (vocab_error) and makes the exit status 1.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "runtime/runtime.h"
#include "tokenizer/chat.h"
#include "tokenizer/tok.h"
#include "util/utf8.h"

static const char info_usage[] =
    "usage: nightshift info [MODEL.gguf | -m MODEL] [--json]\n"
    "\n"
    "Describes a GGUF model: architecture, hyper-parameters, tensors, vocab, chat template, and whether it\n"
    "can run here and on which backends (\"can run  yes, on cpu\", or no and why).\n"
    "  --json   print one JSON object instead of text\n"
    "The model defaults to $NIGHTSHIFT_MODEL, the fetched SmolLM2, else ../shared/models/stories260K.gguf.\n";

/* llama.cpp's general.file_type numbering (LLAMA_FTYPE_MOSTLY_*). */
static const char *info_file_type_name(int64_t t)
{
    static const char *const names[] = {
        [0] = "F32",     [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",    [4] = "Q4_1_SOME_F16",
        [7] = "Q8_0",    [8] = "Q5_0",    [9] = "Q5_1",    [10] = "Q2_K",   [11] = "Q3_K_S",
        [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S", [15] = "Q4_K_M", [16] = "Q5_K_S",
        [17] = "Q5_K_M", [18] = "Q6_K",   [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S",
        [22] = "IQ3_XS", [23] = "IQ3_XXS", [24] = "IQ1_S", [25] = "IQ4_NL", [26] = "IQ3_S",
        [27] = "IQ3_M",  [28] = "IQ2_S",  [29] = "IQ2_M",  [30] = "IQ4_XS", [31] = "IQ1_M",
        [32] = "BF16",   [36] = "TQ1_0",  [37] = "TQ2_0",
    };
    if (t >= 0 && t < (int64_t)(sizeof names / sizeof names[0]) && names[t]) return names[t];
    return "unknown";
}

static void info_human_bytes(uint64_t n, char *buf, size_t cap)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)n;
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else snprintf(buf, cap, "%.2f %s", x, unit[u]);
}

/* A JSON string of n bytes; invalid UTF-8 (hostile files) becomes U+FFFD per bad byte, and so does any NUL
 * byte of such a string (a valid string keeps its NULs). */
static json_t *info_str(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *buf = malloc(3 * n + 1);
    if (!buf) return json_null();
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t ok = n - i; /* s[i..i+ok) is valid UTF-8; a bad sequence starts at i + ok */
        utf8_valid(s + i, n - i, &ok);
        for (size_t k = i; k < i + ok; k++) {
            if (s[k] != '\0') {
                buf[w++] = s[k];
            } else {
                memcpy(buf + w, "\xEF\xBF\xBD", 3);
                w += 3;
            }
        }
        i += ok;
        if (i < n) { /* its first byte */
            memcpy(buf + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    j = json_stringn(buf, w);
    free(buf);
    return j ? j : json_null();
}

static json_t *info_cstr(const char *s)
{
    return info_str(s, strlen(s));
}

/* Whether the started backend b computes m's architecture and every weight matrix of m: 1, or 0 with the
 * reason in why. */
static int info_backend_runs(const struct backend *b, const struct model *m, char *why, size_t why_cap)
{
    struct backend_caps caps;
    memset(&caps, 0, sizeof caps);
    if (!b->ops->caps) {
        snprintf(why, why_cap, "the backend reports no capabilities");
        return 0;
    }
    b->ops->caps(b->ctx, &caps);
    if (caps.archs && !(caps.archs & 1u << m->hp.arch)) {
        snprintf(why, why_cap, "architecture %s is not supported by the %s backend yet", model_arch_name(m->hp.arch),
                 b->ops->name);
        return 0;
    }
    struct err e;
    if (runtime_check_weight_types(m, &caps, b->ops->name, &e) == 0) return 1;
    snprintf(why, why_cap, "%s", e.msg);
    return 0;
}

/* The backends built into this binary, each probed and, when usable, started to ask whether it computes
 * the model's weight types: [{"name", "usable", "why", "runs", "runs_why"}]; m NULL (the model does not
 * load): runs is false everywhere, with model_error as the reason. */
static json_t *info_backends(const struct model *m, const char *model_error)
{
    json_t *arr = json_array();
    char list[128], why[256], runs_why[ERR_MSG_MAX];
    snprintf(list, sizeof list, "%s", backend_list());
    for (char *save = NULL, *name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        int usable = backend_probe(name, why, sizeof why), runs = 0;
        snprintf(runs_why, sizeof runs_why, "%s", m ? "not usable here" : model_error);
        struct backend b;
        struct backend_config cfg = {.n_threads = 1, .device = 0};
        struct err e;
        if (usable && m && backend_open(name, &cfg, &b, &e) == 0) {
            runs = info_backend_runs(&b, m, runs_why, sizeof runs_why);
            b.ops->free(b.ctx);
        } else if (usable && m) {
            snprintf(runs_why, sizeof runs_why, "%s", e.msg);
        }
        json_array_append_new(arr, json_pack("{s:s, s:b, s:s, s:b, s:s}", "name", name, "usable", usable, "why",
                                             usable ? "" : why, "runs", runs, "runs_why", runs ? "" : runs_why));
    }
    return arr;
}

/* "backends           cuda (not usable: why), cpu" and "can run            yes, on cpu" (or no, and why)
 * from info_backends' array. */
static void info_print_backends(const json_t *backends)
{
    printf("backends          ");
    const char *first_why = NULL;
    int n_runs = 0;
    for (size_t i = 0; i < json_array_size(backends); i++) {
        json_t *b = json_array_get(backends, i);
        printf("%s %s", i ? "," : "", json_string_value(json_object_get(b, "name")));
        if (!json_is_true(json_object_get(b, "usable")))
            printf(" (not usable: %s)", json_string_value(json_object_get(b, "why")));
        else if (!json_is_true(json_object_get(b, "runs")) && !first_why)
            first_why = json_string_value(json_object_get(b, "runs_why"));
        n_runs += json_is_true(json_object_get(b, "runs"));
    }
    printf("\ncan run            ");
    for (size_t i = 0, k = 0; i < json_array_size(backends); i++) {
        json_t *b = json_array_get(backends, i);
        if (json_is_true(json_object_get(b, "runs")))
            printf("%s%s", k++ ? ", " : "yes, on ", json_string_value(json_object_get(b, "name")));
    }
    if (!n_runs) printf("no: %s", first_why ? first_why : "no backend is usable here");
    printf("\n");
}

/* A metadata value as JSON (numbers, bools, strings; arrays: numbers/strings up to 64 elements, else a
 * summary object {type, n}). */
static json_t *info_value_json(const gguf_file *f, uint64_t i)
{
    const char *key = gguf_kv_key(f, i);
    enum gguf_vtype t = gguf_kv_type(f, i);
    struct err e;
    switch (t) {
    case GGUF_VTYPE_BOOL: {
        int b = 0;
        gguf_get_bool(f, key, &b, &e);
        return json_boolean(b);
    }
    case GGUF_VTYPE_FLOAT32:
    case GGUF_VTYPE_FLOAT64: {
        double d = 0;
        gguf_get_float(f, key, &d, &e);
        return json_real(d);
    }
    case GGUF_VTYPE_STRING: {
        struct gguf_str s = {0};
        gguf_get_str(f, key, &s, &e);
        return info_str(s.ptr ? s.ptr : "", s.len);
    }
    case GGUF_VTYPE_ARRAY: {
        enum gguf_vtype at = gguf_kv_arr_type(f, i);
        uint64_t n = gguf_kv_arr_n(f, i);
        if (n > 64 || at == GGUF_VTYPE_ARRAY || at == GGUF_VTYPE_BOOL) {
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string(gguf_vtype_name(at)));
            json_object_set_new(o, "n", json_integer((json_int_t)n));
            return o;
        }
        json_t *a = json_array();
        const unsigned char *d = gguf_kv_arr_data(f, i);
        for (uint64_t j = 0; j < n; j++) {
            json_t *x = NULL;
            switch (at) {
            case GGUF_VTYPE_STRING: {
                struct gguf_str s = gguf_kv_arr_str(f, i, j);
                x = info_str(s.ptr, s.len);
                break;
            }
            case GGUF_VTYPE_UINT8: x = json_integer(d[j]); break;
            case GGUF_VTYPE_INT8: x = json_integer((int8_t)d[j]); break;
            case GGUF_VTYPE_UINT16: { uint16_t v; memcpy(&v, d + 2 * j, 2); x = json_integer(v); break; }
            case GGUF_VTYPE_INT16: { int16_t v; memcpy(&v, d + 2 * j, 2); x = json_integer(v); break; }
            case GGUF_VTYPE_UINT32: { uint32_t v; memcpy(&v, d + 4 * j, 4); x = json_integer(v); break; }
            case GGUF_VTYPE_INT32: { int32_t v; memcpy(&v, d + 4 * j, 4); x = json_integer(v); break; }
            case GGUF_VTYPE_UINT64: { uint64_t v; memcpy(&v, d + 8 * j, 8); x = json_integer((json_int_t)v); break; }
            case GGUF_VTYPE_INT64: { int64_t v; memcpy(&v, d + 8 * j, 8); x = json_integer(v); break; }
            case GGUF_VTYPE_FLOAT32: { float v; memcpy(&v, d + 4 * j, 4); x = json_real(v); break; }
            case GGUF_VTYPE_FLOAT64: { double v; memcpy(&v, d + 8 * j, 8); x = json_real(v); break; }
            default: x = json_null(); break;
            }
            json_array_append_new(a, x);
        }
        return a;
    }
    default: {
        int64_t x = 0;
        if (gguf_get_int(f, key, &x, &e) == 0) return json_integer(x);
        /* a uint64 beyond int64 */
        return json_string("out of range");
    }
    }
}

/* Prints a JSON value compactly on one line (strings shown with escapes), cut to max bytes. */
static void info_print_value(json_t *v, size_t max)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (!s) {
        printf("?");
        return;
    }
    if (json_is_object(v)) { /* an array summary */
        printf("[%lld x %s]", (long long)json_integer_value(json_object_get(v, "n")),
               json_string_value(json_object_get(v, "type")));
    } else if (strlen(s) > max) {
        printf("%.*s... (%zu bytes)", (int)max, s, strlen(s));
    } else {
        printf("%s", s);
    }
    free(s);
}

static json_t *info_id_json(int32_t id)
{
    return id >= 0 ? json_integer(id) : json_null();
}

static void info_print_id(const char *label, const tok_vocab *v, int32_t id)
{
    if (id < 0) {
        printf("  %-18s -\n", label);
        return;
    }
    json_t *s = info_cstr(tok_piece(v, id));
    printf("  %-18s %d ", label, (int)id);
    info_print_value(s, 60);
    printf("\n");
    json_decref(s);
}

/* Parses argv: the model (positional or -m, once) and --json. 0 to go on, 1 when help was printed, 2 on a
 * usage error (printed). */
static int info_parse(int argc, char **argv, const char **model, int *as_json)
{
    const char *flag_model = NULL;
    const struct cli_opt opts[] = {
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &flag_model},
        {.flag = "--json", .type = CLI_OPT_SET, .dst = as_json, .lo = 1},
    };
    *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(info_usage, stdout);
            return 1;
        }
        flag_model = NULL;
        int r = cli_opts_parse("info", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0 && !flag_model) continue; /* --json */
        if (!*model && (r > 0 || a[0] != '-')) {
            *model = r > 0 ? flag_model : a;
            continue;
        }
        cli_error("info", "unexpected argument '%s'", a);
        fputs(info_usage, stderr);
        return 2;
    }
    if (!*model) *model = cli_default_model();
    return 0;
}

/* What info reports about one file. root holds everything --json prints; the text form reads it too. */
struct info {
    const char *model;
    gguf_file *f;
    tok_vocab *v; /* NULL: no vocab, or one that failed to load (vocab_ok 0, root's vocab_error says why) */
    int vocab_ok;
    json_t *root;
    char arch[128], name[256];
    int64_t ftype; /* general.file_type, -1 when absent */
    uint64_t tensor_bytes;
    enum chat_family fam;
    size_t tmpl_len;
    int has_tmpl;
    char tmpl_error[256]; /* why the template does not compile ("" when it does) */
};

/* The file's identity: path, size, version, alignment, architecture, name, file type. */
static void info_gather_header(struct info *in)
{
    gguf_file *f = in->f;
    struct err e;
    gguf_get_cstr(f, "general.architecture", in->arch, sizeof in->arch, &e);
    gguf_get_cstr(f, "general.name", in->name, sizeof in->name, &e);
    json_object_set_new(in->root, "file", info_cstr(in->model));
    json_object_set_new(in->root, "file_size", json_integer((json_int_t)gguf_file_size(f)));
    json_object_set_new(in->root, "gguf_version", json_integer(gguf_version(f)));
    json_object_set_new(in->root, "alignment", json_integer((json_int_t)gguf_alignment(f)));
    json_object_set_new(in->root, "architecture", in->arch[0] ? info_cstr(in->arch) : json_null());
    json_object_set_new(in->root, "name", in->name[0] ? info_cstr(in->name) : json_null());
    in->ftype = -1;
    if (gguf_find_kv(f, "general.file_type") >= 0 && gguf_get_int(f, "general.file_type", &in->ftype, &e) == 0) {
        json_t *ft = json_object();
        json_object_set_new(ft, "id", json_integer(in->ftype));
        json_object_set_new(ft, "name", json_string(info_file_type_name(in->ftype)));
        json_object_set_new(in->root, "file_type", ft);
    } else {
        json_object_set_new(in->root, "file_type", json_null());
    }
}

/* hparams: every "<arch>." key; tensors: count and bytes, in all and by type. */
static void info_gather_weights(struct info *in)
{
    gguf_file *f = in->f;
    json_t *hp = json_object();
    size_t arch_len = strlen(in->arch);
    for (uint64_t i = 0; arch_len && i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        if (strncmp(key, in->arch, arch_len) != 0 || key[arch_len] != '.') continue;
        json_object_set_new(hp, key + arch_len + 1, info_value_json(f, i));
    }
    json_object_set_new(in->root, "hparams", hp);

    json_t *tens = json_object(), *by_type = json_object();
    uint64_t total = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        const struct gguf_dtype_info *di = gguf_dtype_info(t->type);
        const char *tn = di ? di->name : "?";
        json_t *o = json_object_get(by_type, tn);
        if (!o) {
            o = json_object();
            json_object_set_new(o, "count", json_integer(0));
            json_object_set_new(o, "bytes", json_integer(0));
            json_object_set_new(by_type, tn, o); /* tn: a static ASCII type name */
        }
        json_object_set_new(o, "count", json_integer(json_integer_value(json_object_get(o, "count")) + 1));
        json_object_set_new(o, "bytes",
                            json_integer(json_integer_value(json_object_get(o, "bytes")) + (json_int_t)t->n_bytes));
        total += t->n_bytes;
    }
    json_object_set_new(tens, "count", json_integer((json_int_t)gguf_n_tensors(f)));
    json_object_set_new(tens, "bytes", json_integer((json_int_t)total));
    json_object_set_new(tens, "by_type", by_type);
    json_object_set_new(in->root, "tensors", tens);
    in->tensor_bytes = total;
}

/* vocab (loaded into in->v), chat template, backends. */
static void info_gather_vocab(struct info *in)
{
    struct err e = {{0}};
    in->vocab_ok = 1;
    if (gguf_find_kv(in->f, "tokenizer.ggml.model") < 0) {
        json_object_set_new(in->root, "vocab", json_null());
    } else if (tok_load(in->f, &in->v, &e)) {
        in->vocab_ok = 0;
        json_object_set_new(in->root, "vocab", json_null());
        json_object_set_new(in->root, "vocab_error", info_cstr(e.msg));
    } else {
        tok_vocab *v = in->v;
        json_t *vo = json_object();
        json_object_set_new(vo, "model", json_string(tok_model_name(v)));
        json_object_set_new(vo, "kind",
                            json_string(tok_get_kind(v) == TOK_KIND_SPM ? "SentencePiece" : "byte-level BPE"));
        json_object_set_new(vo, "pre", tok_get_kind(v) == TOK_KIND_BPE ? info_cstr(tok_pre_name(v)) : json_null());
        json_object_set_new(vo, "size", json_integer(tok_n_vocab(v)));
        json_object_set_new(vo, "merges", json_integer(tok_n_merges(v)));
        json_object_set_new(vo, "bos", info_id_json(tok_bos(v)));
        json_object_set_new(vo, "eos", info_id_json(tok_eos(v)));
        json_object_set_new(vo, "eot", info_id_json(tok_eot(v)));
        json_object_set_new(vo, "unk", info_id_json(tok_unk(v)));
        json_object_set_new(vo, "pad", info_id_json(tok_pad(v)));
        json_object_set_new(vo, "add_bos", json_boolean(tok_add_bos(v)));
        json_object_set_new(vo, "add_eos", json_boolean(tok_add_eos(v)));
        json_object_set_new(vo, "add_space_prefix", json_boolean(tok_add_space_prefix(v)));
        json_object_set_new(in->root, "vocab", vo);
    }

    json_t *ct = json_object();
    in->has_tmpl = cli_chat_template(in->f, &in->fam, &in->tmpl_len);
    json_object_set_new(ct, "present", json_boolean(in->has_tmpl));
    json_object_set_new(ct, "bytes", json_integer((json_int_t)in->tmpl_len));
    json_object_set_new(ct, "family", in->has_tmpl ? json_string(chat_family_name(in->fam)) : json_null());
    if (in->has_tmpl) { /* run renders it with the Jinja interpreter when it compiles */
        jinja_template *t = NULL;
        struct err e;
        cli_chat_template_compile(in->f, &t, &in->fam, &e);
        if (!t) snprintf(in->tmpl_error, sizeof in->tmpl_error, "%.200s", e.msg);
        json_object_set_new(ct, "jinja", t ? json_string(jinja_id(t)) : json_null());
        if (!t) json_object_set_new(ct, "jinja_error", json_string(in->tmpl_error));
        jinja_free(t);
    }
    json_object_set_new(in->root, "chat_template", ct);
}

/* backends (info_backends) and can_run: the model loads, its vocab too, and some backend computes it. */
static void info_gather_backends(struct info *in)
{
    struct model *m = NULL;
    struct err e;
    int loaded = model_load(in->f, &m, &e) == 0;
    json_t *backends = info_backends(loaded ? m : NULL, e.msg);
    model_free(m);
    int can_run = 0;
    for (size_t i = 0; i < json_array_size(backends); i++)
        can_run |= json_is_true(json_object_get(json_array_get(backends, i), "runs"));
    json_object_set_new(in->root, "backends", backends);
    json_object_set_new(in->root, "can_run", json_boolean(can_run && in->vocab_ok));
}

/* The text form of the header, hyper-parameters and tensors. */
static void info_print_weights(const struct info *in)
{
    gguf_file *f = in->f;
    const char *arch = in->arch;
    char hb[64];
    info_human_bytes(gguf_file_size(f), hb, sizeof hb);
    printf("file               %s\n", in->model);
    printf("file size          %llu bytes (%s)\n", (unsigned long long)gguf_file_size(f), hb);
    printf("gguf version       %u (alignment %llu)\n", (unsigned)gguf_version(f),
           (unsigned long long)gguf_alignment(f));
    printf("architecture       %s\n", arch[0] ? arch : "-");
    printf("name               %s\n", in->name[0] ? in->name : "-");
    if (in->ftype >= 0) printf("file type          %s (%lld)\n", info_file_type_name(in->ftype), (long long)in->ftype);
    else printf("file type          -\n");
    printf("hyper-parameters   (%s.*)\n", arch[0] ? arch : "?");
    const char *k;
    json_t *val;
    json_object_foreach(json_object_get(in->root, "hparams"), k, val) {
        printf("  %-34s ", k);
        info_print_value(val, 100);
        printf("\n");
    }
    info_human_bytes(in->tensor_bytes, hb, sizeof hb);
    printf("tensors            %llu, %llu bytes (%s)\n", (unsigned long long)gguf_n_tensors(f),
           (unsigned long long)in->tensor_bytes, hb);
    json_object_foreach(json_object_get(json_object_get(in->root, "tensors"), "by_type"), k, val) {
        uint64_t b = (uint64_t)json_integer_value(json_object_get(val, "bytes"));
        info_human_bytes(b, hb, sizeof hb);
        printf("  %-8s %6lld tensors %14llu bytes (%s)\n", k,
               (long long)json_integer_value(json_object_get(val, "count")), (unsigned long long)b, hb);
    }
}

/* The text form of the vocab, chat template and backends. */
static void info_print_vocab(const struct info *in)
{
    const tok_vocab *v = in->v;
    if (v) {
        printf("vocab              %d tokens, %s (%s)\n", (int)tok_n_vocab(v), tok_model_name(v),
               tok_get_kind(v) == TOK_KIND_SPM ? "SentencePiece" : "byte-level BPE");
        if (tok_get_kind(v) == TOK_KIND_BPE)
            printf("  pre-tokenizer      %s, %d merges\n", tok_pre_name(v), (int)tok_n_merges(v));
        info_print_id("bos", v, tok_bos(v));
        info_print_id("eos", v, tok_eos(v));
        info_print_id("eot", v, tok_eot(v));
        info_print_id("unk", v, tok_unk(v));
        info_print_id("pad", v, tok_pad(v));
        printf("  %-18s %s\n", "add bos", tok_add_bos(v) ? "yes" : "no");
        printf("  %-18s %s\n", "add eos", tok_add_eos(v) ? "yes" : "no");
        if (tok_get_kind(v) == TOK_KIND_SPM)
            printf("  %-18s %s\n", "add space prefix", tok_add_space_prefix(v) ? "yes" : "no");
    } else if (!in->vocab_ok) {
        printf("vocab              invalid: %s\n", json_string_value(json_object_get(in->root, "vocab_error")));
    } else {
        printf("vocab              none\n");
    }
    if (in->has_tmpl && !in->tmpl_error[0])
        printf("chat template      %llu bytes, rendered by the Jinja interpreter (family: %s)\n",
               (unsigned long long)in->tmpl_len, chat_family_name(in->fam));
    else if (in->has_tmpl)
        printf("chat template      %llu bytes, does not compile (%s); family: %s\n", (unsigned long long)in->tmpl_len,
               in->tmpl_error, chat_family_name(in->fam));
    else printf("chat template      none\n");
    info_print_backends(json_object_get(in->root, "backends"));
}

int cmd_info(int argc, char **argv)
{
    struct info in;
    int as_json = 0;
    memset(&in, 0, sizeof in);
    int rc = info_parse(argc, argv, &in.model, &as_json);
    if (rc) return rc == 1 ? 0 : rc;

    struct err e = {{0}};
    if (gguf_open(in.model, &in.f, &e)) {
        cli_error("info", "%s", e.msg);
        return 1;
    }
    rc = 1;
    in.root = json_object();
    info_gather_header(&in);
    info_gather_weights(&in);
    info_gather_vocab(&in);
    info_gather_backends(&in);
    if (as_json) {
        if (json_dumpf(in.root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) != 0) goto done;
        printf("\n");
    } else {
        info_print_weights(&in);
        info_print_vocab(&in);
    }
    if (!in.vocab_ok) {
        cli_error("info", "%s: vocab: %s", in.model, json_string_value(json_object_get(in.root, "vocab_error")));
        goto done;
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    json_decref(in.root);
    tok_free(in.v);
    gguf_close(in.f);
    return rc;
}
