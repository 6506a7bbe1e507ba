/* chat — chat templates by family.
 *
 * Invariant: chat_render() output is exactly the text the family's reference Jinja template produces for
 * the same messages with add_generation_prompt = true (bos/eos spelled where the template spells
 * bos_token/eos_token), with these documented choices where a template would raise an error instead:
 * a system message in Mistral and Gemma (no system turn) is put in front of the next user message followed
 * by a blank line, as those families' later templates do. No state: every function is pure.
 *
 * Formats (per message; "{c}" is the content, "{r}" the role):
 *   chatml   <|im_start|>{r}\n{c}<|im_end|>\n ...                       then <|im_start|>assistant\n
 *   llama3   {bos} <|start_header_id|>{r}<|end_header_id|>\n\n{trim c}<|eot_id|> ...
 *            then <|start_header_id|>assistant<|end_header_id|>\n\n
 *   llama2   {bos}[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST] {assistant} {eos}{bos}[INST] ... [/INST]
 *            (user text and assistant text are stripped; the prompt ends after the last [/INST])
 *   mistral  {bos}[INST] {user} [/INST]{assistant}{eos}[INST] ... [/INST]
 *   phi3     {bos}<|system|>\n{c}<|end|>\n<|user|>\n{c}<|end|>\n<|assistant|>\n{c}<|end|>\n ... then <|assistant|>\n
 *   gemma    {bos}<start_of_turn>user\n{trim c}<end_of_turn>\n<start_of_turn>model\n{trim c}<end_of_turn>\n ...
 *            then <start_of_turn>model\n
 *   zephyr   <|system|>\n{c}{eos}\n<|user|>\n{c}{eos}\n<|assistant|>\n{c}{eos}\n ... then <|assistant|>\n
 */
#include "tokenizer/chat.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static const char *const chat_names[CHAT_FAMILY_COUNT] = {"none",    "chatml", "llama2", "llama3",
                                                          "mistral", "phi3",   "gemma",  "zephyr"};

const char *chat_family_name(enum chat_family f)
{
    if ((int)f < 0 || f >= CHAT_FAMILY_COUNT) return "none";
    return chat_names[f];
}

int chat_family_parse(const char *name, enum chat_family *out)
{
    for (int i = 1; i < CHAT_FAMILY_COUNT; i++)
        if (name && strcmp(name, chat_names[i]) == 0) {
            *out = (enum chat_family)i;
            return 0;
        }
    return -1;
}

const char *chat_family_list(void)
{
    return "chatml, llama2, llama3, mistral, phi3, gemma, zephyr";
}

enum chat_family chat_detect(const char *t)
{
    if (!t || !*t) return CHAT_NONE;
    if (strstr(t, "<|im_start|>")) return CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (strstr(t, "<start_of_turn>")) return CHAT_GEMMA;
    if (strstr(t, "<|user|>")) {
        if (strstr(t, "<|end|>")) return CHAT_PHI3;
        if (strstr(t, "</s>") || strstr(t, "eos_token")) return CHAT_ZEPHYR;
        return CHAT_NONE;
    }
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    return CHAT_NONE;
}

/* ---------- a growable string ---------- */

struct chat_buf {
    char *p;
    size_t n, cap;
    int oom;
};

static void cb_putn(struct chat_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void cb_put(struct chat_buf *b, const char *s)
{
    cb_putn(b, s, strlen(s));
}

static int chat_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Appends s with leading and trailing whitespace removed (Jinja's trim / Python's strip). */
static void cb_put_trim(struct chat_buf *b, const char *s)
{
    size_t n = strlen(s), a = 0;
    while (a < n && chat_is_space(s[a])) a++;
    while (n > a && chat_is_space(s[n - 1])) n--;
    cb_putn(b, s + a, n - a);
}

/* Appends strip(pre + sys + sep + user): a system text folded into the first user turn. */
static void cb_put_trim_joined(struct chat_buf *b, const char *pre, const char *sys, const char *sep, const char *user)
{
    struct chat_buf t = {0};
    cb_put(&t, pre);
    cb_put(&t, sys);
    cb_put(&t, sep);
    cb_put(&t, user);
    if (t.oom) b->oom = 1;
    else cb_put_trim(b, t.p);
    free(t.p);
}

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

static int chat_role(const struct chat_msg *m, enum chat_role *r)
{
    if (!m->role) return -1;
    if (strcmp(m->role, "system") == 0) *r = ROLE_SYSTEM;
    else if (strcmp(m->role, "user") == 0) *r = ROLE_USER;
    else if (strcmp(m->role, "assistant") == 0) *r = ROLE_ASSISTANT;
    else return -1;
    return 0;
}

/* ---------- rendering ---------- */

/* The prompt being rendered. */
struct chat_prompt {
    enum chat_family f;
    const char *bos, *eos;
    const char *pending_sys; /* llama2/mistral/gemma: system text waiting for the next user turn */
    size_t second_sys;       /* 1 + the index of a system message that came while one was pending, or 0 */
    struct chat_buf b;
};

/* Appends message i (role r, text c) in the family's format. */
static void chat_put_turn(struct chat_prompt *cr, size_t i, enum chat_role r, const char *role, const char *c)
{
    struct chat_buf *b = &cr->b;
    switch (cr->f) {
    case CHAT_CHATML:
        cb_put(b, "<|im_start|>");
        cb_put(b, role);
        cb_put(b, "\n");
        cb_put(b, c);
        cb_put(b, "<|im_end|>\n");
        break;
    case CHAT_LLAMA3:
        if (i == 0) cb_put(b, cr->bos);
        cb_put(b, "<|start_header_id|>");
        cb_put(b, role);
        cb_put(b, "<|end_header_id|>\n\n");
        cb_put_trim(b, c);
        cb_put(b, "<|eot_id|>");
        break;
    case CHAT_LLAMA2:
        if (r == ROLE_SYSTEM) {
            if (cr->pending_sys && !cr->second_sys) cr->second_sys = i + 1; /* would replace the first */
            cr->pending_sys = c;
        } else if (r == ROLE_USER) {
            cb_put(b, cr->bos);
            cb_put(b, "[INST] ");
            if (cr->pending_sys) {
                cb_put_trim_joined(b, "<<SYS>>\n", cr->pending_sys, "\n<</SYS>>\n\n", c);
                cr->pending_sys = NULL;
            } else {
                cb_put_trim(b, c);
            }
            cb_put(b, " [/INST]");
        } else {
            cb_put(b, " ");
            cb_put_trim(b, c);
            cb_put(b, " ");
            cb_put(b, cr->eos);
        }
        break;
    case CHAT_MISTRAL:
        if (i == 0) cb_put(b, cr->bos);
        if (r == ROLE_SYSTEM) {
            if (cr->pending_sys && !cr->second_sys) cr->second_sys = i + 1; /* would replace the first */
            cr->pending_sys = c;
        } else if (r == ROLE_USER) {
            cb_put(b, "[INST] ");
            if (cr->pending_sys) {
                cb_put(b, cr->pending_sys);
                cb_put(b, "\n\n");
                cr->pending_sys = NULL;
            }
            cb_put(b, c);
            cb_put(b, " [/INST]");
        } else {
            cb_put(b, c);
            cb_put(b, cr->eos);
        }
        break;
    case CHAT_PHI3:
    case CHAT_ZEPHYR: /* the same turns; phi3 starts with bos and ends a turn with <|end|>, zephyr with eos */
        if (cr->f == CHAT_PHI3 && i == 0) cb_put(b, cr->bos);
        cb_put(b, "<|");
        cb_put(b, role);
        cb_put(b, "|>\n");
        cb_put(b, c);
        cb_put(b, cr->f == CHAT_PHI3 ? "<|end|>" : cr->eos);
        cb_put(b, "\n");
        break;
    case CHAT_GEMMA:
        if (i == 0) cb_put(b, cr->bos);
        if (r == ROLE_SYSTEM) {
            if (cr->pending_sys && !cr->second_sys) cr->second_sys = i + 1; /* would replace the first */
            cr->pending_sys = c;
            break;
        }
        cb_put(b, "<start_of_turn>");
        cb_put(b, r == ROLE_ASSISTANT ? "model" : "user");
        cb_put(b, "\n");
        if (r == ROLE_USER && cr->pending_sys) {
            cb_put_trim_joined(b, "", cr->pending_sys, "\n\n", c);
            cr->pending_sys = NULL;
        } else {
            cb_put_trim(b, c);
        }
        cb_put(b, "<end_of_turn>\n");
        break;
    default:
        break;
    }
}

/* The text that opens the assistant's turn at the end of the prompt. */
static const char *chat_generation_prompt(enum chat_family f)
{
    switch (f) {
    case CHAT_CHATML: return "<|im_start|>assistant\n";
    case CHAT_LLAMA3: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case CHAT_PHI3:
    case CHAT_ZEPHYR: return "<|assistant|>\n";
    case CHAT_GEMMA: return "<start_of_turn>model\n";
    default: return ""; /* llama2 / mistral: the prompt ends with [/INST] */
    }
}

int chat_render(enum chat_family f, const struct chat_msg *msgs, size_t n_msgs, const char *bos, const char *eos,
                char **out, struct err *e)
{
    *out = NULL;
    if (f <= CHAT_NONE || f >= CHAT_FAMILY_COUNT)
        return err_set(e, "no chat template family to render with (supported: %s)", chat_family_list());
    if (n_msgs == 0) return err_set(e, "chat: no messages to render");
    for (size_t i = 0; i < n_msgs; i++) {
        enum chat_role r;
        if (chat_role(&msgs[i], &r))
            return err_set(e, "chat: message %zu has role '%s' (expected system, user or assistant)", i,
                           msgs[i].role ? msgs[i].role : "(null)");
        if (!msgs[i].content) return err_set(e, "chat: message %zu has no content", i);
    }
    struct chat_prompt cr = {.f = f, .bos = bos ? bos : "", .eos = eos ? eos : ""};
    for (size_t i = 0; i < n_msgs; i++) {
        enum chat_role r;
        chat_role(&msgs[i], &r);
        chat_put_turn(&cr, i, r, msgs[i].role, msgs[i].content);
    }
    if (cr.second_sys) { /* folding both into the next user turn would invent a format; dropping one loses it */
        free(cr.b.p);
        return err_set(e, "chat: %s has no place for two system messages without a user message between them "
                          "(message %zu)", chat_family_name(f), cr.second_sys - 1);
    }
    if (cr.pending_sys) { /* a trailing system message with no user turn after it */
        free(cr.b.p);
        return err_set(e, "chat: %s has no place for a system message that no user message follows",
                       chat_family_name(f));
    }
    cb_put(&cr.b, chat_generation_prompt(f));
    if (cr.b.oom || !cr.b.p) {
        free(cr.b.p);
        return err_set(e, "out of memory (chat prompt)");
    }
    *out = cr.b.p;
    return 0;
}

/* ---------- the model's own template ---------- */

/* The variables HF passes to a chat template (transformers' apply_chat_template). */
static json_t *chat_vars(const struct chat_msg *msgs, size_t n_msgs, const char *bos, const char *eos, struct err *e)
{
    json_t *vars = json_object(), *list = json_array();
    int bad = !vars || !list || json_object_set_new(vars, "messages", list) != 0;
    for (size_t i = 0; i < n_msgs && !bad; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            json_decref(vars);
            err_set(e, "chat: message %zu has no %s", i, msgs[i].role ? "content" : "role");
            return NULL;
        }
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        bad = !m || json_array_append_new(list, m) != 0;
    }
    if (!bad)
        bad = json_object_set_new(vars, "add_generation_prompt", json_true()) ||
              json_object_set_new(vars, "bos_token", json_string(bos ? bos : "")) ||
              json_object_set_new(vars, "eos_token", json_string(eos ? eos : "")) ||
              json_object_set_new(vars, "tools", json_null()) || json_object_set_new(vars, "documents", json_null());
    if (bad) {
        json_decref(vars);
        err_set(e, "chat: out of memory, or a message that is not UTF-8");
        return NULL;
    }
    return vars;
}

int chat_render_jinja(const jinja_template *t, const struct chat_msg *msgs, size_t n_msgs, const char *bos,
                      const char *eos, char **out, struct err *e)
{
    *out = NULL;
    if (n_msgs == 0) return err_set(e, "chat: no messages to render");
    json_t *vars = chat_vars(msgs, n_msgs, bos, eos, e);
    if (!vars) return -1;
    int rc = jinja_render(t, vars, NULL, out, NULL, e);
    json_decref(vars);
    return rc;
}

const char *chat_template_name(enum chat_family f, const jinja_template *t)
{
    return t ? jinja_id(t) : chat_family_name(f);
}
