/* chat — chat templates by family. A full Jinja engine is not needed: the GGUF tokenizer.chat_template is
 * recognised as one of a few families by its distinctive markers, and each family is rendered by code.
 */
#ifndef NS_TOKENIZER_CHAT_H
#define NS_TOKENIZER_CHAT_H

#include <stddef.h>

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

#endif
