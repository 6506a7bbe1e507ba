/* cli_util — see cli_util.h. Stateless. */
#include "cli/cli_util.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/log.h"

char *cli_read_all(FILE *in, size_t *len)
{
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    while ((r = fread(buf + n, 1, cap - n, in)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (ferror(in)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cli_open_vocab(const char *cmd, const char *model, gguf_file **f, tok_vocab **v)
{
    struct err e = {{0}};
    *f = NULL;
    *v = NULL;
    if (gguf_open(model, f, &e)) {
        cli_error(cmd, "%s", e.msg);
        return -1;
    }
    if (tok_load(*f, v, &e)) {
        cli_error(cmd, "%s: %s", model, e.msg);
        gguf_close(*f);
        *f = NULL;
        return -1;
    }
    return 0;
}

int cli_chat_template(const gguf_file *f, enum chat_family *fam, size_t *len)
{
    struct gguf_str tmpl = {0};
    struct err e;
    *fam = CHAT_NONE;
    *len = 0;
    if (gguf_find_kv(f, "tokenizer.chat_template") < 0 || gguf_get_str(f, "tokenizer.chat_template", &tmpl, &e) != 0)
        return 0;
    *len = tmpl.len;
    char *t = malloc(tmpl.len + 1);
    if (t) {
        memcpy(t, tmpl.ptr, tmpl.len);
        t[tmpl.len] = '\0';
        *fam = chat_detect(t);
        free(t);
    }
    return 1;
}

int cli_chat_template_compile(const gguf_file *f, jinja_template **t, enum chat_family *fam, struct err *e)
{
    struct gguf_str tmpl = {0};
    *t = NULL;
    *fam = CHAT_NONE;
    if (gguf_find_kv(f, "tokenizer.chat_template") < 0 || gguf_get_str(f, "tokenizer.chat_template", &tmpl, e) != 0)
        return 0;
    char *text = malloc(tmpl.len + 1);
    if (!text) {
        err_set(e, "out of memory (chat template)");
        return 1;
    }
    memcpy(text, tmpl.ptr, tmpl.len);
    text[tmpl.len] = '\0';
    *fam = chat_detect(text);
    free(text);
    jinja_compile(tmpl.ptr, tmpl.len, t, e);
    return 1;
}

void cli_model_chat(const char *chat_name, const gguf_file *gf, jinja_template **owned, struct job_model *m)
{
    if (chat_name) {
        chat_family_parse(chat_name, &m->chat);
        m->chat_source = "flag";
        return;
    }
    struct err e;
    if (!cli_chat_template_compile(gf, owned, &m->chat, &e)) {
        m->chat_source = "no tokenizer.chat_template in the model";
        return;
    }
    m->chat_jinja = *owned;
    if (*owned) {
        m->chat_source = "gguf";
        return;
    }
    if (m->chat != CHAT_NONE) {
        log_warn("the model's chat template does not compile (%s); chat is rendered by nightshift's %s renderer",
                 e.msg, chat_family_name(m->chat));
        m->chat_source = "gguf (family renderer: the template does not compile)";
    } else {
        log_warn("the model's chat template does not compile (%s), nor is it one nightshift recognises", e.msg);
        m->chat_source = "tokenizer.chat_template does not compile and is not recognised";
    }
}

void cli_model_identity(struct job_model *m, const char *path, uint64_t size, const struct runtime *rt, char *name_buf,
                        size_t cap)
{
    const char *slash = strrchr(path, '/');
    struct err ne;
    m->path = path;
    m->name = slash ? slash + 1 : path;
    if (rt->model->file && gguf_get_cstr(rt->model->file, "general.name", name_buf, cap, &ne) == 0 && name_buf[0])
        m->name = name_buf;
    m->size = size;
    m->hp = &rt->model->hp;
    m->vocab = rt->vocab;
    m->eng = rt->eng;
    m->ep = rt->ep;
    m->seqs = rt->seqs;
    m->backend = rt->backend_name;
    m->backend_gpu = rt->caps.gpu;
    m->threads = rt->threads;
}
