/* cli_util — small pieces that several subcommands share: reading a whole stream, opening a GGUF file with
 * its vocab, and detecting a model's chat template family. */
#ifndef NS_CLI_UTIL_H
#define NS_CLI_UTIL_H

#include <stddef.h>
#include <stdio.h>

#include "gguf/gguf.h"
#include "jobs/job.h"
#include "runtime/runtime.h"
#include "tokenizer/chat.h"
#include "tokenizer/tok.h"

/* Reads the rest of a stream into a malloc'd buffer (not NUL-terminated; the caller frees it) and sets *len.
 * Returns NULL on a read error or out of memory. O(bytes read). */
char *cli_read_all(FILE *in, size_t *len);

/* Opens `model` and loads its vocab; on failure prints "nightshift <cmd>: ..." (the GGUF error as it is,
 * a vocab error prefixed with the model path), closes what it opened and returns -1 with *f, *v NULL.
 * On success the caller owns both (tok_free, then gguf_close). */
int cli_open_vocab(const char *cmd, const char *model, gguf_file **f, tok_vocab **v);

/* The family of the file's tokenizer.chat_template: returns 1 and sets *fam (CHAT_NONE when not recognised
 * or out of memory) and *len (the template's bytes) when the key is there as a string; returns 0 and sets
 * *fam = CHAT_NONE, *len = 0 otherwise. */
int cli_chat_template(const gguf_file *f, enum chat_family *fam, size_t *len);

/* The file's tokenizer.chat_template compiled for the Jinja interpreter: returns 1 when the key is there as a
 * string, with *fam its family (the fallback renderer; CHAT_NONE when not recognised) and *t the compiled
 * template (the caller frees it with jinja_free), or *t NULL and e saying why it does not compile. Returns 0
 * (*t NULL, *fam CHAT_NONE) when the file has no template. */
int cli_chat_template_compile(const gguf_file *f, jinja_template **t, enum chat_family *fam, struct err *e);

/* How a job renders chat, set in m (chat, chat_jinja, chat_source) the way `run` does it: chat_name
 * (--chat-template NAME) wins; else the model's own tokenizer.chat_template compiled into *owned (the caller
 * frees it with jinja_free after the job), with its family renderer as the fallback; a template that does not
 * compile is warned about. */
void cli_model_chat(const char *chat_name, const gguf_file *gf, jinja_template **owned, struct job_model *m);

/* The parts of m that come from the open runtime rt and the model file (path, of size bytes): its name
 * (GGUF general.name, copied into name_buf of cap bytes, else the file name), shape, vocabulary, engine and
 * backend. m's sha256 and chat are the caller's. */
void cli_model_identity(struct job_model *m, const char *path, uint64_t size, const struct runtime *rt, char *name_buf,
                        size_t cap);

#endif
