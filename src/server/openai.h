/* openai — the OpenAI API's shapes: request bodies of /v1/completions and /v1/chat/completions in, the
 * text_completion / chat.completion objects, their streamed chunks, /v1/models and error objects out.
 * No HTTP and no threads: the connection code (http) calls these with bytes and gets bytes back.
 *
 * A request body is read exactly as a `nightshift run` line's body is: jobs/input (input_parse_body: the
 * generation fields through runtime/genparam, the same error messages), then jobs/ingest (ingest_prompt:
 * chat rendering with the model's template, tokenizing, the checks against the model; ingest_max_tokens).
 * On top of that the server reads "stream" and "stream_options" only; every other field is run's, so a body
 * is taken or refused as a backlog line with it is: a bad request's status, code, message and param are
 * those of run's error file (jobs/output's output_fail_classify), and one the engine would refuse at once
 * (engine_check_request, through ingest_check_request) is refused before it is queued, as run refuses it
 * when it reads the line. The engine request is run's (ingest_request_of); a choice that echoes its prompt
 * or asks for logprobs is rendered as run stores it (output_result_text) and answered as run writes it (the
 * logprobs object of the endpoint's shape); streamed, such a choice comes in one chunk when it ends, its
 * logprobs object with it (the engine releases text, not logprobs, while a request runs).
 *
 * Seeds: a request with a seed gives completion i the seed key_completion_seed(seed, i), as run does, so a
 * seeded request gets the same text from the server as from run; without a seed the caller's `unseeded`
 * value is the base (a greedy request does not depend on it).
 */
#ifndef NS_SERVER_OPENAI_H
#define NS_SERVER_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/input.h"
#include "jobs/job.h"
#include "runtime/genparam.h"
#include "server/server_queue.h"
#include "util/err.h"

/* An error answer: HTTP status, OpenAI error type ("invalid_request_error", ...), code and message. */
struct openai_error {
    int status;
    const char *type;
    const char *code;
    char param[72]; /* the request field at fault ("" for none: null) */
    char message[1024];
};

/* What parsing needs: the model (vocab, context, chat template: a job_model whose engine fields are unused),
 * the server's generation defaults and whether special-token text in prompts is parsed. */
struct openai_ctx {
    const struct job_model *model;
    const struct gen_params *defaults;
    int parse_special;
};

/* Parses a POST body of the endpoint of kind (INPUT_KIND_CHAT: /v1/chat/completions, COMPLETION:
 * /v1/completions, EMBEDDING: /v1/embeddings, read as run reads such a line: one choice per input, prefilled
 * only) into a new request (one reference, the caller's): 0 with *out; 1 for a bad request with *err (status
 * 400); -1 when out of memory. */
int openai_parse_request(const struct openai_ctx *c, enum input_kind kind, const char *body, size_t len,
                         uint64_t unseeded, struct server_req **out, struct openai_error *err, struct err *e);

/* "chatcmpl-..." or "cmpl-...": the response id of admitted request r (salt: a per-process value). */
void openai_request_id(const struct server_req *r, uint64_t salt, char *buf, size_t cap);
/* "stop", "length" or NULL (the choice ended otherwise). */
const char *openai_finish_reason(enum engine_finish f);

/* The whole answer to a finished request that does not stream (every choice done): a chat.completion or
 * text_completion object with usage, or an embeddings request's list (run's: jobs/embedding), malloc'd JSON
 * (*len bytes). When a choice failed or was cancelled,
 * NULL with *err (500 with the engine's message, or 503 for a cancelled request: the server is stopping). */
char *openai_response(const struct server_req *r, const char *id, const char *model, int64_t created,
                      size_t *len, struct openai_error *err);
/* Server-sent events, each "data: {...}\n\n" (malloc'd, *len bytes; NULL when out of memory):
 * the start of a stream (chat: one chunk per choice with the assistant role; completions: nothing, "");
 * the chunks of an event (its text, if any; then, when the choice ended, a chunk with its finish_reason, or
 * an error object when it failed or was cancelled); and the end (the usage chunk when the request asked
 * for it, then "data: [DONE]"). */
char *openai_stream_start(const struct server_req *r, const char *id, const char *model, int64_t created,
                          size_t *len);
char *openai_stream_event(const struct server_req *r, const char *id, const char *model, int64_t created,
                          const struct server_event *ev, size_t *len);
char *openai_stream_end(const struct server_req *r, const char *id, const char *model, int64_t created,
                        size_t *len);

/* {"object": "list", "data": [{"id": model, "object": "model", ...}]}; one: the model object alone. */
char *openai_models(const char *model, int64_t created, int one, size_t *len);
/* {"error": {"message", "type", "param", "code"}} (param null when err->param is "") */
char *openai_error_body(const struct openai_error *err, size_t *len);
/* Fills err (the message from a printf format); returns 1. */
int openai_set_error(struct openai_error *err, int status, const char *type, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
