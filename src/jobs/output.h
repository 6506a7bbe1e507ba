/* output — the result and error files: the exact bytes of each line, and repair of a file against the
 * store after a crash.
 *
 * Lines are in the shapes of OpenAI's Batch API output and error files:
 *   result line   {"id":"batch_req_<h>","custom_id":...,"response":{"status_code":200,"request_id":"req_<h>",
 *                  "body":<chat.completion | text_completion object: id, object, created, model, choices,
 *                  usage (with prompt_tokens_details.cached_tokens and completion_tokens_details),
 *                  system_fingerprint> | embeddings list: object "list", data, model, usage (jobs/embedding)},
 *                  "error":null}
 *   failed request {"id":"batch_req_<h>","custom_id":...,"response":{"status_code":400 | 500,"request_id":
 *                  "req_<h>","body":{"error":{"message","type","param","code"}}},"error":null}
 *   unreadable line (no custom_id) {"id":"batch_req_<h>","custom_id":null,"response":null,
 *                  "error":{"code":...,"message":...,"line":N}}
 * Every <h> is a hash of the run's id (a random value the store keeps: jobs/ledger), a tag and the backlog
 * line number (the body id also of the custom_id): unique per run and per line, and the same when a line is
 * rebuilt after a crash, so a rebuilt line is byte-identical. Text that is not valid UTF-8 (a completion cut
 * inside a character) is written with U+FFFD in place of each bad sequence, so every line is valid JSON.
 *
 * Files are written only by appending whole batches of lines after the store has committed them; on start
 * output_repair makes the file equal to the store's scheduled lines (see store.h).
 */
#ifndef NS_JOBS_OUTPUT_H
#define NS_JOBS_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/logprob.h"
#include "jobs/store.h"
#include "tokenizer/tok.h"
#include "util/err.h"

/* A growable byte buffer. */
struct output_buf {
    char *p;
    size_t n, cap;
    int oom; /* set when a growth failed; the content is then truncated */
};

void output_buf_free(struct output_buf *b);
void output_buf_put(struct output_buf *b, const void *p, size_t n);
/* Appends s as a JSON string literal (quotes included), escaping and repairing UTF-8. */
void output_buf_put_json_string(struct output_buf *b, const char *s, size_t n);

struct output_choice {
    const char *text;
    size_t len;
    const char *finish_reason; /* "stop", "length" */
    const char *logprobs;      /* (logprobs_len) the choice's logprobs object as JSON (output_logprobs), or
                                  NULL: null */
    size_t logprobs_len;
};

/* Appends the logprobs object of one choice (engine/logprob.h says what the values are: the model's raw
 * log-softmax), in OpenAI's shapes:
 *   chat        {"content":[{"token","logprob","bytes":[..],"top_logprobs":[{"token","logprob","bytes"}..]}..],
 *               "refusal":null}
 *   completions {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{token: logprob, ..} | null ..],
 *               "text_offset":[..]}
 * for prompt (n_prompt entries: echo, completions only; the first has logprob null and top_logprobs null),
 * then gen (n_gen: the generated tokens, EOS/EOT included). A token's string is its bytes with control
 * tokens spelled out (invalid UTF-8 written as U+FFFD; bytes holds the exact bytes); text_offset is the byte
 * offset in the choice's text where the token's text starts (control tokens have none: the offset does not
 * advance; see drop_space). Logprobs are printed with 17 significant digits (the double exactly); NAN as
 * null. */
void output_logprobs(struct output_buf *b, const tok_vocab *v, int chat, const struct logprob_entry *prompt,
                     int32_t n_prompt, const struct logprob_entry *gen, int32_t n_gen, int drop_space);
/* drop_space (echo with an SPM space prefix, tok_add_space_prefix): the text does not hold the space the
 * first prompt token with text begins with (the echoed text is the prompt as given), so offsets after it
 * are one less. output_echo_space tells whether a prompt's text drops it. */
int output_echo_space(const tok_vocab *v, const struct logprob_entry *prompt, int32_t n_prompt);
/* A result with logprobs is stored (jobs/store, one text blob per result) in a form of no endpoint, so that
 * a chat line and a completion line with the same key share it: 8 lowercase hex digits of the text's length,
 * the text, then the entries: u32 n_prompt, u32 n_gen, u8 drop_space, and per entry (prompt's, then gen's)
 * i32 token, f64 logprob, u8 n_top, n_top x (i32 token, f64 logprob), little-endian. output_logprobs_pack
 * appends it to b; output_logprobs_unpack finds the text in blob (-1 when it is not such a blob); and
 * output_logprobs_render appends the logprobs object of the endpoint (output_logprobs) from it (-1 when the
 * entries are malformed or out of memory). */
void output_logprobs_pack(struct output_buf *b, const char *text, size_t text_len, const struct logprob_entry *prompt,
                          int32_t n_prompt, const struct logprob_entry *gen, int32_t n_gen, int drop_space);
int output_logprobs_unpack(const char *blob, size_t len, const char **text, size_t *text_len);
int output_logprobs_render(struct output_buf *b, const tok_vocab *v, int chat, const char *blob, size_t len);

/* A finished completion's text as it is stored and answered when it echoes its prompt or asked for logprobs
 * (logprobs >= 0: gen_params.logprobs): the prompt's text (its tokens' bytes, without an SPM space prefix:
 * output_echo_space) before the completion's when it echoes, and then, with logprobs, the packed entries
 * (output_logprobs_pack). An end-of-generation token that stopped the completion is not listed (its text is
 * not in the completion's either, as OpenAI and vLLM answer). Replaces r->text (and r->text_len); nothing
 * to do when neither is asked. 0, or -1 when out of memory (r unchanged). */
int output_result_text(const tok_vocab *v, int echo, int32_t logprobs, struct engine_result *r);

struct output_ok {
    const char *run_id;        /* names the line's ids (see above) */
    int64_t line;              /* backlog line number */
    const char *custom_id;
    int chat;                  /* 1: chat.completion, 0: text_completion */
    const char *model;         /* the served model's name */
    const char *fingerprint;   /* system_fingerprint: model file and build (NULL: null) */
    int64_t created;           /* unix seconds, from the store */
    const struct output_choice *choices; /* (n_choices) */
    int n_choices;
    int64_t prompt_tokens, completion_tokens, cached_tokens;
};

/* A request that failed: its HTTP status and OpenAI error object. */
struct output_fail {
    const char *run_id;
    int64_t line;
    const char *custom_id;     /* not NULL (a line without one is an output_error_line) */
    int status;                /* 400: the request; 500: the engine */
    const char *type;          /* "invalid_request_error", "server_error" */
    const char *code;          /* "context_length_exceeded", "unsupported_parameter", ... */
    const char *param;         /* the request field at fault, or NULL */
    const char *message;
};

/* Appends the chat.completion / text_completion object of o named id (no newline): id, object, created,
 * model, choices, usage, system_fingerprint (null when o->fingerprint is NULL). The body of a result line,
 * and the server's answer (server/openai). */
void output_completion_body(struct output_buf *b, const struct output_ok *o, const char *id);
/* Appends a usage object: the token counts, prompt_tokens_details (cached_tokens) and
 * completion_tokens_details. */
void output_usage(struct output_buf *b, int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
/* Appends one result line ('\n' included). */
void output_ok_line(struct output_buf *b, const struct output_ok *o);
/* Appends one result line ('\n' included) whose response body is the n bytes of JSON at body (an embeddings
 * list: jobs/embedding). */
void output_body_line(struct output_buf *b, const char *run_id, int64_t line, const char *custom_id, const char *body,
                      size_t n);
/* Appends one failed-request line ('\n' included). */
void output_fail_line(struct output_buf *b, const struct output_fail *f);
/* How a request refused with code (jobs/input's and jobs/ingest's codes: "unknown_field", "invalid_type",
 * "prompt_too_long", ..., or "engine_error") reads in OpenAI's error object: sets f's status (400, or 500 for
 * engine_error), type, code ("unknown_field" -> "unknown_parameter", ...) and param: the field the message
 * names first in single quotes (for the codes whose messages do), or prompt_field ("messages", "prompt",
 * "input") for a prompt that does not fit or a chat template that fails; written into param (cap bytes).
 * The one mapping of run's error file (jobs/ledger) and the server's answers (server/openai). */
void output_fail_classify(struct output_fail *f, const char *code, const char *message, const char *prompt_field,
                          char *param, size_t cap);
/* Appends one line for a backlog line that cannot be read as a request ('\n' included); custom_id may be
 * NULL. */
void output_error_line(struct output_buf *b, const char *run_id, const char *custom_id, int64_t line,
                       const char *code, const char *message);

typedef struct output_file output_file;

/* Opens (creating) a file for repair and appending, and locks it (an exclusive flock, held until
 * output_close): a file another process holds is refused ("being written by another nightshift process"). */
int output_open(const char *path, output_file **out, struct err *e);
void output_close(output_file *f);

struct output_repair_stats {
    int64_t lines_kept;      /* already correct */
    int64_t lines_rewritten; /* missing, torn or different, written again from the store */
    int64_t bytes_cut;       /* bytes past the last scheduled line that were removed (torn tail) */
};

/* Makes the file exactly the concatenation of the store's scheduled lines of `which` in offset order:
 * keeps the longest correct prefix, truncates there, writes the rest from the store, and cuts anything
 * after. Reads the file once: O(file size). Leaves the write position at the end. */
int output_repair(output_file *f, store *s, int which, struct output_repair_stats *st, struct err *e);
/* Appends n bytes at the end (one write call per batch; retried on short writes). */
int output_append(output_file *f, const void *p, size_t n, struct err *e);
int64_t output_size(const output_file *f);
const char *output_path(const output_file *f); /* as given to output_open */
int output_sync(output_file *f, struct err *e);

#endif
