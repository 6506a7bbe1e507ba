/* chat — turning chat messages into a prompt.
 *
 * The model's own tokenizer.chat_template is rendered by the Jinja interpreter (jinja.h) exactly as Hugging
 * Face transformers and vLLM render it (chat_render_jinja). Family renderers written in C (chat_render) are
 * the fallback: for a file without a template (with --chat-template NAME), for a template that does not
 * compile, and for a line the template fails on for a reason other than raise_exception. A template is also
 * recognised as one of the families by its distinctive markers (chat_detect), which picks that fallback.
 */
#ifndef NS_TOKENIZER_CHAT_H
#define NS_TOKENIZER_CHAT_H

#include <stddef.h>

#include "tokenizer/jinja.h"
#include "util/err.h"

enum chat_family {
    CHAT_NONE = 0, /* no template, or not recognised */
    CHAT_CHATML,
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_MISTRAL,
    CHAT_PHI3,
    CHAT_GEMMA,
    CHAT_ZEPHYR,
    CHAT_FAMILY_COUNT
};

struct chat_msg {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
};

/* Recognises the family of a Jinja template text (NULL -> CHAT_NONE). */
enum chat_family chat_detect(const char *tmpl);
const char *chat_family_name(enum chat_family f); /* "chatml", "llama2", ... ; "none" */
/* Parses a family name; -1 if unknown. */
int chat_family_parse(const char *name, enum chat_family *out);
/* "chatml, llama2, llama3, mistral, phi3, gemma, zephyr" — for error messages. */
const char *chat_family_list(void);

/* Renders messages as the model expects, ending with the assistant turn's opening (generation prompt).
 * bos/eos: the vocab's BOS and EOS token text where the template spells them out (may be ""). The result
 * is tokenized with parse_special on. *out is malloc'd; an unknown role or an empty list is an error. */
int chat_render(enum chat_family f, const struct chat_msg *msgs, size_t n_msgs, const char *bos, const char *eos,
                char **out, struct err *e);

/* Renders messages with a model's own template t as Hugging Face does: the variables are messages (a list
 * of {role, content}), add_generation_prompt = true, bos_token and eos_token (the vocab's text of those
 * tokens; NULL is ""), tools = none and documents = none. The text is the whole prompt: tokenize it with
 * parse_special on and without adding BOS (the template writes bos_token where the model wants it). Any role
 * is passed on (the template decides). Returns 0 with *out malloc'd; JINJA_RAISED when the template rejects
 * the messages through raise_exception (e holds its message); -1 when rendering fails (e says what and where). */
int chat_render_jinja(const jinja_template *t, const struct chat_msg *msgs, size_t n_msgs, const char *bos,
                      const char *eos, char **out, struct err *e);

/* The name of a run's chat rendering: jinja_id(t) ("jinja:<sha256 of the template>") when the model's template
 * renders, else the family's name. Stores are bound to it, so a change of rendering is never mixed into one. */
const char *chat_template_name(enum chat_family f, const jinja_template *t);

#endif
